//! The Windows implementation of [`crate::platform`]: job objects. Every
//! `windows-sys` call of process handling is here.
//!
//! - Each backend runs in a job of its own, created with
//!   `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`: every process it starts joins the job,
//!   and when the last handle on the job closes — the backend's [`Containment`]
//!   dropped, or tether gone, however it died — Windows kills what is left in it.
//! - Windows cannot ask a process to stop the way SIGTERM does: the polite rung
//!   of the kill ladder is closing stdin, and both [`Signal`]s terminate the job.
//! - The child starts running (not suspended: std cannot resume it) and is
//!   assigned to its job right after the spawn. Whatever it starts in between is
//!   outside the job and not reached. That window is a few system calls wide;
//!   closing it would take spawning suspended and resuming the main thread,
//!   which std's `Command` does not offer.
//! - Backends start in a process group of their own (`CREATE_NEW_PROCESS_GROUP`),
//!   which makes them ignore Ctrl-C: a Ctrl-C in tether's console reaches tether,
//!   which stops its backends through the ladder. (Ctrl-Break and closing the
//!   console still reach every process attached to it.)
//! - No subreaper and no reaping: Windows has no zombies, and jobs keep a
//!   backend's descendants together whoever their parent is.

use std::os::windows::process::CommandExt;
use std::process::Command;
use std::sync::Mutex;

use windows_sys::Win32::Foundation::{CloseHandle, FALSE, HANDLE, TRUE};
use windows_sys::Win32::System::Console::{
    SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_CLOSE_EVENT, CTRL_C_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectBasicAccountingInformation, JobObjectExtendedLimitInformation,
    QueryInformationJobObject, SetInformationJobObject, TerminateJobObject, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Threading::{
    OpenProcess, TerminateProcess, CREATE_NEW_PROCESS_GROUP, PROCESS_SET_QUOTA, PROCESS_TERMINATE,
};

use super::{OsRequest, Signal};

/// The exit code of a process tether terminated (what `taskkill /F` leaves too).
const TERMINATED: u32 = 1;

/// How long the console handler holds on after a close, logoff or shutdown, so
/// the shutdown it started can finish: Windows ends the process when the handler
/// returns (and after its own timeout anyway).
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// See [`crate::platform::open_for_reading`]: opening a file never waits on
/// Windows (a named pipe is not a path a config names by accident).
pub fn open_for_reading(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// See [`crate::platform::untrusted`]: the profile's folders are private by their
/// ACLs; nothing is refused here.
pub fn untrusted(_meta: &std::fs::Metadata) -> Option<String> {
    None
}

/// See [`crate::platform::configure_child`].
pub fn configure_child(cmd: &mut Command) {
    cmd.creation_flags(CREATE_NEW_PROCESS_GROUP);
}

/// A kernel handle we own, closed on drop.
#[derive(Debug)]
struct Handle(HANDLE);

// SAFETY: a kernel handle is a process-wide value usable from any thread; the
// objects used here (jobs, processes) need no thread affinity.
unsafe impl Send for Handle {}
// SAFETY: as above; every call made through a shared handle is thread-safe.
unsafe impl Sync for Handle {}

impl Handle {
    /// Takes ownership of `raw`; the last OS error if it is null.
    fn new(raw: HANDLE) -> std::io::Result<Handle> {
        if raw.is_null() {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(Handle(raw))
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: we own the handle and close it once.
        unsafe { CloseHandle(self.0) };
    }
}

/// Whether a BOOL-returning call succeeded; the last OS error if not.
fn check(ok: windows_sys::core::BOOL) -> std::io::Result<()> {
    if ok == FALSE {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// See [`crate::platform::Containment`]: the backend's job, or the process
/// alone when no job could hold it.
#[derive(Debug)]
pub struct Containment(Hold);

/// What a [`Containment`] holds.
#[derive(Debug)]
enum Hold {
    /// The job every process of the backend runs in.
    Job(Handle),
    /// The job could not be set up: only the leader is reached.
    Leader(Handle),
    /// The leader could not even be opened (it is gone already).
    Nothing,
}

/// A job that kills its processes when its last handle closes.
fn new_job() -> std::io::Result<Handle> {
    // SAFETY: no security attributes, no name: a fresh, non-inheritable job.
    let job = Handle::new(unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) })?;
    let mut limits = JOBOBJECT_EXTENDED_LIMIT_INFORMATION::default();
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    // SAFETY: the pointer and length describe `limits`, which outlives the call.
    check(unsafe {
        SetInformationJobObject(
            job.0,
            JobObjectExtendedLimitInformation,
            (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
        )
    })?;
    Ok(job)
}

/// See [`crate::platform::contain`].
pub fn contain(pid: u32) -> Containment {
    // SAFETY: OpenProcess only returns a handle (or null). The child is not
    // waited for yet, so its handle in the caller's `Child` keeps `pid` from
    // being reused.
    let process = match Handle::new(unsafe { OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, FALSE, pid) }) {
        Ok(process) => process,
        Err(e) => {
            tracing::warn!(pid, "cannot open the process to put it in a job: {e}");
            return Containment(Hold::Nothing);
        }
    };
    let assigned = new_job().and_then(|job| {
        // SAFETY: both handles are open and have the rights the call needs.
        check(unsafe { AssignProcessToJobObject(job.0, process.0) })?;
        Ok(job)
    });
    match assigned {
        Ok(job) => Containment(Hold::Job(job)),
        Err(e) => {
            tracing::warn!(pid, "cannot put the process in a job (what it starts will not be stopped with it): {e}");
            Containment(Hold::Leader(process))
        }
    }
}

impl Containment {
    /// See [`crate::platform::Containment::signal`]: terminates the job (both
    /// signals alike); how many processes were running in it.
    pub fn signal(&self, _signal: Signal) -> usize {
        match &self.0 {
            Hold::Job(job) => {
                let mut info = JOBOBJECT_BASIC_ACCOUNTING_INFORMATION::default();
                // SAFETY: the pointer and length describe `info`, which outlives the call.
                let counted = unsafe {
                    QueryInformationJobObject(
                        job.0,
                        JobObjectBasicAccountingInformation,
                        (&mut info as *mut JOBOBJECT_BASIC_ACCOUNTING_INFORMATION).cast(),
                        std::mem::size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
                        std::ptr::null_mut(),
                    )
                } != FALSE;
                let active = if counted { info.ActiveProcesses as usize } else { 1 };
                if active > 0 {
                    // SAFETY: the job handle is open; this ends every process in it.
                    unsafe { TerminateJobObject(job.0, TERMINATED) };
                }
                active
            }
            Hold::Leader(process) => {
                // SAFETY: the process handle is open with PROCESS_TERMINATE; a
                // process already gone makes this fail harmlessly.
                unsafe { TerminateProcess(process.0, TERMINATED) };
                1
            }
            Hold::Nothing => 0,
        }
    }
}

/// See [`crate::platform::signal_process`]: terminates it (both signals alike).
pub fn signal_process(pid: u32, _signal: Signal) {
    // SAFETY: OpenProcess only returns a handle (or null).
    let Ok(process) = Handle::new(unsafe { OpenProcess(PROCESS_TERMINATE, FALSE, pid) }) else { return };
    // SAFETY: the handle is open with PROCESS_TERMINATE.
    unsafe { TerminateProcess(process.0, TERMINATED) };
}

/// See [`crate::platform::become_subreaper`]: jobs do that work here.
pub fn become_subreaper() -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// See [`crate::platform::try_reap`]: nothing to reap on Windows.
pub fn try_reap(_pid: u32) -> bool {
    false
}

type StopHandler = Box<dyn Fn(OsRequest) + Send + Sync>;

/// The handlers [`on_os_request`] registered, called in order.
static STOP_HANDLERS: Mutex<Vec<StopHandler>> = Mutex::new(Vec::new());

/// The console control handler: runs on a thread Windows starts for each event.
unsafe extern "system" fn console_event(kind: u32) -> windows_sys::core::BOOL {
    let (what, closing) = match kind {
        CTRL_C_EVENT => ("console Ctrl-C", false),
        CTRL_BREAK_EVENT => ("console Ctrl-Break", false),
        CTRL_CLOSE_EVENT => ("console closed", true),
        CTRL_LOGOFF_EVENT => ("logoff", true),
        CTRL_SHUTDOWN_EVENT => ("shutdown", true),
        _ => return FALSE,
    };
    for handler in STOP_HANDLERS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        handler(OsRequest::Stop(what));
    }
    if closing {
        // Returning lets Windows end the process at once: give the shutdown
        // time (tether exits on its own when done, ending this thread too).
        std::thread::sleep(CLOSE_WAIT);
    }
    TRUE
}

/// See [`crate::platform::on_os_request`]: the console's control events.
pub fn on_os_request(handler: StopHandler) -> std::io::Result<()> {
    let mut handlers = STOP_HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
    if handlers.is_empty() {
        // SAFETY: registers a function that lives as long as the process.
        check(unsafe { SetConsoleCtrlHandler(Some(console_event), TRUE) })?;
    }
    handlers.push(handler);
    Ok(())
}

/// See [`crate::platform::LocalStream`]: one instance of a named pipe, as a file.
pub type LocalStream = std::fs::File;

/// The namespace every named pipe lives in.
const PIPE_DIR: &str = r"\\.\pipe\";

/// Who may open tether's pipes: the owner (the user who created it) and the
/// system, nobody else; not inherited (`P`: protected).
const PIPE_SDDL: &str = "D:P(A;;GA;;;OW)(A;;GA;;;SY)";

/// Where a listener leaves a marker file named like its pipe, so clients can
/// find the pipes (enumerating `\\.\pipe\` is not possible everywhere, Wine
/// among them): `run` in tether's state directory.
fn marker_dir() -> Option<std::path::PathBuf> {
    crate::locations::Locations::here().state_dir().map(|d| d.join("run"))
}

/// See [`crate::platform::LocalListener`]: a named pipe, a new instance of it
/// made for each connection, and its marker file.
pub struct LocalListener {
    marker: Option<std::path::PathBuf>,
    name: Vec<u16>,
    address: String,
    /// The security descriptor of every instance (from `LocalAlloc`).
    descriptor: windows_sys::Win32::Security::PSECURITY_DESCRIPTOR,
    /// The instance made before the last accept, which the next client takes.
    first: Mutex<Option<Handle>>,
}

// SAFETY: the descriptor is read-only after creation and freed once, on drop.
unsafe impl Send for LocalListener {}
// SAFETY: as above; the waiting instance is behind a mutex.
unsafe impl Sync for LocalListener {}

fn wide(text: &str) -> Vec<u16> {
    text.encode_utf16().chain(std::iter::once(0)).collect()
}

impl LocalListener {
    /// See [`crate::platform::LocalListener::bind`].
    pub fn bind(name: &str) -> std::io::Result<LocalListener> {
        use windows_sys::Win32::Security::Authorization::{
            ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
        };
        let mut descriptor = std::ptr::null_mut();
        let sddl = wide(PIPE_SDDL);
        // SAFETY: a NUL-terminated SDDL string; the descriptor is written to our pointer.
        check(unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                sddl.as_ptr(),
                SDDL_REVISION_1,
                &mut descriptor,
                std::ptr::null_mut(),
            )
        })?;
        let address = format!("{PIPE_DIR}{name}");
        let mut listener =
            LocalListener { marker: None, name: wide(&address), address, descriptor, first: Mutex::new(None) };
        // The first instance claims the name (FILE_FLAG_FIRST_PIPE_INSTANCE).
        let first = listener.instance(true)?;
        *listener.first.lock().unwrap_or_else(|p| p.into_inner()) = Some(first);
        let dir = marker_dir().ok_or_else(|| std::io::Error::other("no state directory (set LOCALAPPDATA)"))?;
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), b"")?;
        listener.marker = Some(dir.join(name));
        Ok(listener)
    }

    fn instance(&self, first: bool) -> std::io::Result<Handle> {
        use windows_sys::Win32::Security::SECURITY_ATTRIBUTES;
        use windows_sys::Win32::Storage::FileSystem::{FILE_FLAG_FIRST_PIPE_INSTANCE, PIPE_ACCESS_DUPLEX};
        use windows_sys::Win32::System::Pipes::{
            CreateNamedPipeW, PIPE_READMODE_BYTE, PIPE_REJECT_REMOTE_CLIENTS, PIPE_TYPE_BYTE, PIPE_UNLIMITED_INSTANCES,
            PIPE_WAIT,
        };
        let attributes = SECURITY_ATTRIBUTES {
            nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
            lpSecurityDescriptor: self.descriptor,
            bInheritHandle: FALSE,
        };
        let open = PIPE_ACCESS_DUPLEX | if first { FILE_FLAG_FIRST_PIPE_INSTANCE } else { 0 };
        let mode = PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS;
        // SAFETY: a NUL-terminated name and attributes that outlive the call.
        let handle = unsafe {
            CreateNamedPipeW(self.name.as_ptr(), open, mode, PIPE_UNLIMITED_INSTANCES, 65536, 65536, 0, &attributes)
        };
        if handle == windows_sys::Win32::Foundation::INVALID_HANDLE_VALUE {
            return Err(std::io::Error::last_os_error());
        }
        Handle::new(handle)
    }

    /// See [`crate::platform::LocalListener::accept`].
    pub fn accept(&self) -> std::io::Result<LocalStream> {
        use std::os::windows::io::{FromRawHandle, RawHandle};
        use windows_sys::Win32::Foundation::ERROR_PIPE_CONNECTED;
        use windows_sys::Win32::System::Pipes::ConnectNamedPipe;
        let waiting = self.first.lock().unwrap_or_else(|p| p.into_inner()).take();
        let pipe = match waiting {
            Some(pipe) => pipe,
            None => self.instance(false)?,
        };
        // SAFETY: a pipe instance we own, waited on synchronously.
        let connected = unsafe { ConnectNamedPipe(pipe.0, std::ptr::null_mut()) };
        if connected == FALSE {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(ERROR_PIPE_CONNECTED as i32) {
                return Err(e);
            }
        }
        // The next instance exists before this one is handed over, so a client
        // arriving meanwhile finds the pipe (never "not found" while tether runs).
        match self.instance(false) {
            Ok(next) => *self.first.lock().unwrap_or_else(|p| p.into_inner()) = Some(next),
            Err(e) => tracing::warn!("control channel: cannot make the next pipe instance: {e}"),
        }
        let raw = pipe.0;
        std::mem::forget(pipe);
        // SAFETY: the handle is ours and now owned by the file alone.
        Ok(unsafe { std::fs::File::from_raw_handle(raw as RawHandle) })
    }

    /// See [`crate::platform::LocalListener::address`].
    pub fn address(&self) -> String {
        self.address.clone()
    }
}

impl Drop for LocalListener {
    fn drop(&mut self) {
        if let Some(marker) = &self.marker {
            let _ = std::fs::remove_file(marker);
        }
        // SAFETY: allocated by ConvertStringSecurityDescriptorToSecurityDescriptorW, freed once.
        unsafe { windows_sys::Win32::Foundation::LocalFree(self.descriptor) };
    }
}

/// See [`crate::platform::local_connect`]: waits a little while every instance
/// is busy.
pub fn local_connect(name: &str) -> std::io::Result<LocalStream> {
    use windows_sys::Win32::Foundation::ERROR_PIPE_BUSY;
    use windows_sys::Win32::System::Pipes::WaitNamedPipeW;
    let address = format!("{PIPE_DIR}{name}");
    for _ in 0..10 {
        match std::fs::OpenOptions::new().read(true).write(true).open(&address) {
            Err(e) if e.raw_os_error() == Some(ERROR_PIPE_BUSY as i32) => {
                // SAFETY: a NUL-terminated name; waits at most 500 ms.
                unsafe { WaitNamedPipeW(wide(&address).as_ptr(), 500) };
            }
            Ok(pipe) => return served_by_its_tether(pipe, name),
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{address} stayed busy")))
}

/// `pipe` if the process serving it is the one its name says (`...-PID`): a
/// pipe of that name made by anyone else (for a tether that is gone) is refused,
/// so nobody can answer in a tether's place.
fn served_by_its_tether(pipe: LocalStream, name: &str) -> std::io::Result<LocalStream> {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::System::Pipes::GetNamedPipeServerProcessId;
    let named = name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
    let mut server = 0u32;
    // SAFETY: an open pipe handle and a place for the pid.
    check(unsafe { GetNamedPipeServerProcessId(pipe.as_raw_handle() as HANDLE, &mut server) })?;
    if named != Some(server) {
        let message = format!("{name} is served by process {server}, not by the tether it names");
        return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, message));
    }
    Ok(pipe)
}

/// See [`crate::platform::local_endpoints`]: the marker files.
pub fn local_endpoints(prefix: &str) -> Vec<String> {
    let Some(Ok(entries)) = marker_dir().map(std::fs::read_dir) else { return Vec::new() };
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| n.starts_with(prefix)).collect();
    names.sort();
    names
}

/// See [`crate::platform::local_endpoint_dir`].
pub fn local_endpoint_dir() -> String {
    PIPE_DIR.to_string()
}

/// See [`crate::platform::limit_io`]: synchronous pipes have no timeouts.
pub fn limit_io(stream: &LocalStream, wait: std::time::Duration) {
    let _ = (stream, wait);
}

/// See [`crate::platform::process_alive`].
pub fn process_alive(pid: u32) -> bool {
    use windows_sys::Win32::System::Threading::{GetExitCodeProcess, PROCESS_QUERY_LIMITED_INFORMATION};
    /// What `GetExitCodeProcess` says of a process still running.
    const STILL_ACTIVE: u32 = 259;
    // SAFETY: OpenProcess only returns a handle (or null).
    let Ok(process) = Handle::new(unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid) }) else {
        return false;
    };
    let mut code = 0u32;
    // SAFETY: an open process handle and a place for the code.
    let asked = unsafe { GetExitCodeProcess(process.0, &mut code) };
    asked == FALSE || code == STILL_ACTIVE
}

/// See [`crate::platform::remove_local_endpoint`]: its marker file.
pub fn remove_local_endpoint(name: &str) {
    if let Some(dir) = marker_dir() {
        let _ = std::fs::remove_file(dir.join(name));
    }
}
