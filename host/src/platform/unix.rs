//! The unix implementation of [`crate::platform`]: process groups, signals,
//! the Linux parent-death signal and child subreaper, `waitpid`. Every `libc`
//! call and `std::os::unix` use of process handling is here.
//!
//! A backend's [`Containment`] is its process group, which [`configure_child`]
//! gave it (the group's number is the leader's pid).

use std::os::unix::process::CommandExt;
use std::process::Command;

use super::{OsRequest, Signal};

/// See [`crate::platform::configure_child`].
pub fn configure_child(cmd: &mut Command) {
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe; it only sets this child's parent-death signal.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

fn number(signal: Signal) -> libc::c_int {
    match signal {
        Signal::Terminate => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    }
}

/// See [`crate::platform::signal_process`].
pub fn signal_process(pid: u32, signal: Signal) {
    // SAFETY: kill(2) touches no memory.
    unsafe {
        libc::kill(pid as libc::pid_t, number(signal));
    }
}

/// See [`crate::platform::Containment`]: the process group of a backend.
#[derive(Debug)]
pub struct Containment {
    pgid: u32,
}

/// See [`crate::platform::contain`].
pub fn contain(pid: u32) -> Containment {
    Containment { pgid: pid }
}

impl Containment {
    /// See [`crate::platform::Containment::signal`].
    pub fn signal(&self, signal: Signal) -> usize {
        // SAFETY: kill(2) touches no memory; a negative pid names a process group.
        unsafe {
            libc::kill(-(self.pgid as libc::pid_t), number(signal));
        }
        1
    }
}

/// See [`crate::platform::become_subreaper`].
pub fn become_subreaper() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments; changes only this process's flags.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// See [`crate::platform::try_reap`].
pub fn try_reap(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on one child of ours; WNOHANG never blocks.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) > 0 }
}

/// See [`crate::platform::on_os_request`]: SIGTERM, SIGINT and SIGHUP, read
/// on a thread of their own.
pub fn on_os_request(handler: Box<dyn Fn(OsRequest) + Send + Sync>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        for signal in signals.forever() {
            handler(match signal {
                SIGHUP => OsRequest::Reload,
                SIGINT => OsRequest::Stop("SIGINT"),
                _ => OsRequest::Stop("SIGTERM"),
            });
        }
    })?;
    Ok(())
}
