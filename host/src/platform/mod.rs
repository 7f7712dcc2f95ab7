//! The operating system's side of process handling, behind one narrow API so
//! that the rest of tether never calls it directly: how a backend's command is
//! configured before it starts, how a process or a process group is signalled,
//! how orphans are adopted and reaped.
//!
//! [`unix`] is the implementation tether ships; elsewhere `unsupported` keeps
//! the crate building and does nothing (a Windows implementation, with job
//! objects, would sit next to them and be selected here).

use std::process::Command;

/// How hard to ask a process to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: please stop.
    Terminate,
    /// SIGKILL: stop now.
    Kill,
}

#[cfg(unix)]
pub mod unix;
#[cfg(unix)]
use unix as imp;

#[cfg(not(unix))]
pub mod unsupported;
#[cfg(not(unix))]
use unsupported as imp;

/// Sets up `cmd` to start a backend: in a process group of its own (so the
/// group can be signalled as one), and on Linux killed when the thread that
/// starts it exits (parent-death signal).
pub fn configure_child(cmd: &mut Command) {
    imp::configure_child(cmd);
}

/// Sends `signal` to the process `pid` (ignored if it is gone).
pub fn signal_process(pid: u32, signal: Signal) {
    imp::signal_process(pid, signal);
}

/// Sends `signal` to every process of the process group `pgid`.
pub fn signal_group(pgid: u32, signal: Signal) {
    imp::signal_group(pgid, signal);
}

/// Makes this process the one its orphaned descendants are reparented to
/// (Linux child subreaper); `Err` where that is not possible.
pub fn become_subreaper() -> std::io::Result<()> {
    imp::become_subreaper()
}

/// Collects the exit status of the child `pid` if it has exited, without
/// waiting; whether it was collected.
pub fn try_reap(pid: u32) -> bool {
    imp::try_reap(pid)
}
