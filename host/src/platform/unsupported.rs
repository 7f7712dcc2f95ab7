//! [`crate::platform`] where tether has no implementation yet: processes start
//! without a group of their own, and nothing is signalled or reaped here (the
//! runtimes still close stdin first).

use std::process::Command;

use super::Signal;

/// See [`crate::platform::configure_child`].
pub fn configure_child(_cmd: &mut Command) {}

/// See [`crate::platform::signal_process`].
pub fn signal_process(_pid: u32, _signal: Signal) {}

/// See [`crate::platform::signal_group`].
pub fn signal_group(_pgid: u32, _signal: Signal) {}

/// See [`crate::platform::become_subreaper`].
pub fn become_subreaper() -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// See [`crate::platform::try_reap`].
pub fn try_reap(_pid: u32) -> bool {
    false
}
