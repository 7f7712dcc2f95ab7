//! The unix implementation of [`crate::platform`]: process groups, signals,
//! the Linux parent-death signal and child subreaper, `waitpid`. Every `libc`
//! call and `std::os::unix` use of process handling is here.
//!
//! A backend's [`Containment`] is its process group, which [`configure_child`]
//! gave it (the group's number is the leader's pid).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
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

/// See [`crate::platform::LocalStream`].
pub type LocalStream = UnixStream;

/// See [`crate::platform::LocalListener`]: a Unix domain socket in the user's
/// private endpoint directory, removed when dropped.
pub struct LocalListener {
    listener: UnixListener,
    path: PathBuf,
}

/// The user's endpoint directory: `$XDG_RUNTIME_DIR/tether` (private to the user
/// by the XDG rules), else `tether-UID` in `$TMPDIR` or `/tmp`.
fn endpoint_dir() -> PathBuf {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|d| d.is_absolute());
    match runtime {
        Some(dir) => dir.join("tether"),
        None => {
            let tmp = std::env::var_os("TMPDIR").map(PathBuf::from).filter(|d| d.is_absolute());
            // SAFETY: getuid cannot fail and touches no memory.
            let uid = unsafe { libc::getuid() };
            tmp.unwrap_or_else(|| PathBuf::from("/tmp")).join(format!("tether-{uid}"))
        }
    }
}

/// See [`crate::platform::open_for_reading`].
pub fn open_for_reading(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)
}

/// See [`crate::platform::untrusted`].
pub fn untrusted(meta: &std::fs::Metadata) -> Option<String> {
    // SAFETY: geteuid cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        return Some(format!("it belongs to uid {}, not to uid {uid} running tether", meta.uid()));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Some(format!("others may write to it (mode {:o})", mode & 0o7777));
    }
    None
}

/// The endpoint directory, created 0700 if missing; refused when someone else
/// owns it or others may enter it (in a shared /tmp anyone could have made it
/// first, to watch or answer in our place).
fn private_dir() -> std::io::Result<PathBuf> {
    let dir = endpoint_dir();
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    checked(dir)
}

/// The endpoint directory if it exists and is private to this user; clients
/// look nowhere else, so sockets another user placed are never asked.
fn checked_dir() -> std::io::Result<PathBuf> {
    checked(endpoint_dir())
}

fn checked(dir: PathBuf) -> std::io::Result<PathBuf> {
    let meta = std::fs::symlink_metadata(&dir)?;
    // SAFETY: getuid cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        let message = format!("{} is not a directory private to this user (mode 0700, owned by us)", dir.display());
        return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, message));
    }
    Ok(dir)
}

impl LocalListener {
    /// See [`crate::platform::LocalListener::bind`].
    pub fn bind(name: &str) -> std::io::Result<LocalListener> {
        let path = private_dir()?.join(format!("{name}.sock"));
        // A socket left by a process that died; ours are named by pid, so no
        // live tether can be using it.
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(LocalListener { listener, path })
    }

    /// See [`crate::platform::LocalListener::accept`].
    pub fn accept(&self) -> std::io::Result<LocalStream> {
        self.listener.accept().map(|(stream, _)| stream)
    }

    /// See [`crate::platform::LocalListener::address`].
    pub fn address(&self) -> String {
        self.path.display().to_string()
    }
}

impl Drop for LocalListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// See [`crate::platform::local_connect`].
pub fn local_connect(name: &str) -> std::io::Result<LocalStream> {
    UnixStream::connect(checked_dir()?.join(format!("{name}.sock")))
}

/// See [`crate::platform::local_endpoints`].
pub fn local_endpoints(prefix: &str) -> Vec<String> {
    let Ok(entries) = checked_dir().and_then(std::fs::read_dir) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".sock").map(str::to_string))
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

/// See [`crate::platform::local_endpoint_dir`].
pub fn local_endpoint_dir() -> String {
    endpoint_dir().display().to_string()
}

/// See [`crate::platform::limit_io`].
pub fn limit_io(stream: &LocalStream, wait: std::time::Duration) {
    let wait = wait.max(std::time::Duration::from_millis(1));
    let _ = stream.set_read_timeout(Some(wait));
    let _ = stream.set_write_timeout(Some(wait));
}

/// See [`crate::platform::process_alive`].
pub fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; touches no memory.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    alive || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// See [`crate::platform::remove_local_endpoint`].
pub fn remove_local_endpoint(name: &str) {
    if let Ok(dir) = checked_dir() {
        let _ = std::fs::remove_file(dir.join(format!("{name}.sock")));
    }
}
