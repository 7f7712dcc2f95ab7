//! [`crate::platform`] where tether has no implementation (neither unix nor
//! Windows): processes start without a group of their own, and nothing is
//! signalled or reaped here (the runtimes still close stdin first).

use std::process::Command;

use super::Signal;

/// See [`crate::platform::configure_child`].
pub fn configure_child(_cmd: &mut Command) {}

/// See [`crate::platform::Containment`]: nothing here.
#[derive(Debug)]
pub struct Containment;

/// See [`crate::platform::contain`].
pub fn contain(_pid: u32) -> Containment {
    Containment
}

impl Containment {
    /// See [`crate::platform::Containment::signal`].
    pub fn signal(&self, _signal: Signal) -> usize {
        0
    }
}

/// See [`crate::platform::signal_process`].
pub fn signal_process(_pid: u32, _signal: Signal) {}

/// See [`crate::platform::become_subreaper`].
pub fn become_subreaper() -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// See [`crate::platform::try_reap`].
pub fn try_reap(_pid: u32) -> bool {
    false
}

/// See [`crate::platform::on_os_request`].
pub fn on_os_request(_handler: Box<dyn Fn(super::OsRequest) + Send + Sync>) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}
