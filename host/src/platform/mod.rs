//! The operating system's side of process handling, behind one narrow API so
//! that the rest of tether never calls it directly: how a backend's command is
//! configured before it starts, what holds its processes together once it runs
//! ([`Containment`]), how a process is signalled, how orphans are adopted and
//! reaped, and how a console asks tether to stop.
//!
//! `unix` (process groups, signals, the Linux subreaper) and `windows` (job
//! objects) are the implementations tether ships; on any other target
//! `unsupported` keeps the crate building and does nothing.

use std::process::Command;

/// How hard to ask a process to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: please stop (on Windows, where a process cannot be asked, the
    /// same as [`Signal::Kill`]: the polite request is closing its stdin).
    Terminate,
    /// SIGKILL: stop now.
    Kill,
}

#[cfg(unix)]
pub mod unix;
#[cfg(unix)]
use unix as imp;

#[cfg(windows)]
pub mod windows;
#[cfg(windows)]
use windows as imp;

#[cfg(not(any(unix, windows)))]
pub mod unsupported;
#[cfg(not(any(unix, windows)))]
use unsupported as imp;

/// Opens `path` for reading without waiting: a FIFO opens at once instead of
/// waiting for a writer (unix: `O_NONBLOCK`), and a terminal never becomes
/// tether's. What it is, is for the caller to check on the handle.
pub fn open_for_reading(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    imp::open_for_reading(path)
}

/// Why a file or directory that holds secrets cannot be trusted, if it cannot:
/// another user owns it, or others may write to it (anyone who can plant a file
/// there can make tether present their token or send its client secret to their
/// server). Unix only, as ssh does for its keys; on Windows the profile's
/// folders are private by their ACLs, and nothing is refused.
pub fn untrusted(meta: &std::fs::Metadata) -> Option<String> {
    imp::untrusted(meta)
}

/// Sets up `cmd` to start a backend: in a process group of its own (unix: so
/// the group can be signalled as one; Windows: so a Ctrl-C in tether's console
/// reaches tether, which stops its backends itself, and not the backends
/// directly), and on Linux killed when the thread that starts it exits
/// (parent-death signal).
pub fn configure_child(cmd: &mut Command) {
    imp::configure_child(cmd);
}

/// What holds one started backend's processes together for as long as it may
/// run, so that the whole of it can be stopped at once: on unix its process
/// group (named by the leader's pid); on Windows a job object of its own, which
/// also takes every process in it down when tether exits, however it exits.
///
/// Dropping it lets go of the processes: on Windows whatever is still running in
/// the job is killed then.
#[derive(Debug)]
pub struct Containment(imp::Containment);

/// Takes hold of the child `pid`, started from a command [`configure_child`] set
/// up and not yet waited for (its pid cannot have been reused). Call it right
/// after the spawn: on Windows the child runs from the start, and whatever it
/// starts before this call is outside its job. Never fails: where the platform
/// cannot contain the child, a warning is logged and only the child itself is
/// reached.
pub fn contain(pid: u32) -> Containment {
    Containment(imp::contain(pid))
}

impl Containment {
    /// Sends `signal` to every contained process; how many were reached, as far
    /// as the platform tells (unix: 1, for the group).
    pub fn signal(&self, signal: Signal) -> usize {
        self.0.signal(signal)
    }
}

/// Sends `signal` to the process `pid` (ignored if it is gone).
pub fn signal_process(pid: u32, signal: Signal) {
    imp::signal_process(pid, signal);
}

/// Makes this process the one its orphaned descendants are reparented to
/// (Linux child subreaper); `Err` where that is not possible (on Windows job
/// objects keep a backend's descendants together instead).
pub fn become_subreaper() -> std::io::Result<()> {
    imp::become_subreaper()
}

/// Collects the exit status of the child `pid` if it has exited, without
/// waiting; whether it was collected (never on Windows, which has no zombies).
pub fn try_reap(pid: u32) -> bool {
    imp::try_reap(pid)
}

/// A connection on a local endpoint (a Unix domain socket; a Windows named
/// pipe): a byte stream both ways.
pub type LocalStream = imp::LocalStream;

/// A per-user local endpoint other processes of the same user can connect to
/// (the control channel): a Unix domain socket, readable and writable by its
/// owner only, in a directory only they can enter; a Windows named pipe that
/// only its owner (and the system) may open, and no remote client.
pub struct LocalListener(imp::LocalListener);

impl LocalListener {
    /// Listens on the endpoint `name` (one path component, no separators) under
    /// the user's endpoint directory ([`local_endpoint_dir`]).
    pub fn bind(name: &str) -> std::io::Result<LocalListener> {
        imp::LocalListener::bind(name).map(LocalListener)
    }

    /// Waits for the next connection.
    pub fn accept(&self) -> std::io::Result<LocalStream> {
        self.0.accept()
    }

    /// Where it listens, for the log.
    pub fn address(&self) -> String {
        self.0.address()
    }
}

/// Connects to the local endpoint `name` (see [`LocalListener::bind`]).
pub fn local_connect(name: &str) -> std::io::Result<LocalStream> {
    imp::local_connect(name)
}

/// Removes what is left of the local endpoint `name` once nothing listens on
/// it (unix: its socket file; Windows: the marker file that lists its pipe).
pub fn remove_local_endpoint(name: &str) {
    imp::remove_local_endpoint(name);
}

/// Makes reads from and writes to `stream` give up after `wait`, where the
/// platform can (unix; a Windows pipe instance waits, bounded by the number
/// served at once).
pub fn limit_io(stream: &LocalStream, wait: std::time::Duration) {
    imp::limit_io(stream, wait);
}

/// Whether the process `pid` still runs (before removing an endpoint named by it).
pub fn process_alive(pid: u32) -> bool {
    imp::process_alive(pid)
}

/// The names of the local endpoints that exist now and start with `prefix`.
pub fn local_endpoints(prefix: &str) -> Vec<String> {
    imp::local_endpoints(prefix)
}

/// Where this user's local endpoints live, for messages (unix: a private
/// directory; Windows: the named-pipe namespace).
pub fn local_endpoint_dir() -> String {
    imp::local_endpoint_dir()
}

/// What the operating system asks of a running tether.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OsRequest {
    /// Stop: what asked, for the log (`"SIGTERM"`, `"console Ctrl-C"`, ...).
    Stop(&'static str),
    /// Read the configuration file again (SIGHUP; unix only).
    Reload,
}

/// Calls `handler` for every request the operating system makes from now on,
/// on a thread of the platform's choosing: on unix SIGTERM and SIGINT stop,
/// SIGHUP reloads; on Windows the console's Ctrl-C, Ctrl-Break, close, logoff
/// and shutdown stop (after a close, logoff or shutdown Windows ends the
/// process a few seconds later: the shutdown must be quick).
pub fn on_os_request(handler: impl Fn(OsRequest) + Send + Sync + 'static) -> std::io::Result<()> {
    imp::on_os_request(Box::new(handler))
}
