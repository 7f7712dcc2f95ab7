//! A local backend: one child process speaking newline-delimited JSON-RPC on
//! stdin/stdout, on plain threads.
//!
//! Threads per process: one reads stdout (frames), one reads stderr (log lines,
//! kept by the core as the crash message), and the [`PipeWriter`]'s, which only
//! works when a write could block. The stdout reader reaps the process and
//! reports the exit after its last stderr lines.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tether_core::{Failure, Input};

use crate::line_reader::LineReader;
use crate::pipe_writer::PipeWriter;
use crate::InputSender;

/// How long an exit report waits for the rest of the process's stderr.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

pub use tether_host::launch::Launch;

/// One running process (one generation).
pub struct StdioBackend {
    stdin: Option<PipeWriter>,
    pid: u32,
    exited: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

/// Starts `command` (stdin, stdout and stderr piped, its own process group,
/// killed if the thread that started it dies).
///
/// Call it on a thread that lives as long as the host: on Linux the child's
/// parent-death signal fires when the *thread* that forked it exits.
pub fn start_process(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&str>,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(command);
    cmd.args(args).envs(env).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.process_group(0);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe; it only sets this child's parent-death signal.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
}

impl StdioBackend {
    /// Takes over a started process (or the error starting it): starts its reader
    /// threads and reports it. A process that could not be started is reported as
    /// [`Failure::Spawn`].
    pub fn attach(launch: Launch<'_>, started: std::io::Result<Child>, inputs: &InputSender) -> Option<StdioBackend> {
        let server = launch.server.clone();
        let generation = launch.generation;
        let started = started.and_then(|mut child| {
            let stdin = PipeWriter::new_nonblocking(&server, child.stdin.take().expect("piped"))?;
            Ok((child, stdin))
        });
        let (mut child, stdin) = match started {
            Ok(started) => started,
            Err(e) => {
                tracing::warn!(server = %server, "cannot start {}: {e}", launch.command);
                let failure = Failure::Spawn { message: format!("{}: {e}", launch.command) };
                inputs.send(Input::BackendFailed { server, generation, request: None, failure });
                return None;
            }
        };
        let pid = child.id();
        tracing::info!(server = %server, generation, pid, "started {}", launch.command);
        inputs.send(Input::BackendStarted { server: server.clone(), generation, pid: Some(pid) });

        // Closed (dropped) when stderr reaches end of file.
        let (stderr_open, stderr_closed) = sync_channel::<()>(0);
        let stderr = child.stderr.take().expect("piped");
        let (name, to_core, redactor) = (server.clone(), inputs.clone(), launch.redactor);
        let spawned = std::thread::Builder::new().name(format!("stderr {server}")).spawn(move || {
            for line in LineReader::new(stderr, 16 * 1024, 8 * 1024) {
                let line = line.unwrap_or_else(|e| format!("<{e}>"));
                tracing::info!(target: "backend", server = %name, "{}", redactor.redact(&line));
                to_core.send(Input::BackendStderr { server: name.clone(), generation, line });
            }
            drop(stderr_open);
        });
        if let Err(e) = spawned {
            tracing::warn!(server = %server, "cannot start a stderr reader: {e}");
        }

        let exited = Arc::new(AtomicBool::new(false));
        let stdout = child.stdout.take().expect("piped");
        let (done, to_core, max_frame) = (exited.clone(), inputs.clone(), launch.max_frame);
        let reader = std::thread::Builder::new().name(format!("stdout {server}")).spawn(move || {
            for line in LineReader::new(stdout, max_frame, 64 * 1024) {
                match line {
                    Ok(frame) => {
                        if !to_core.send(Input::BackendFrame { server: server.clone(), generation, frame }) {
                            break;
                        }
                    }
                    Err(e) => tracing::warn!(server = %server, "dropped a frame from stdout: {e}"),
                }
            }
            let code = reap(&mut child);
            // What the process wrote to stderr before it died is its crash message:
            // report those lines before the exit. Bounded, since a process it left
            // behind may hold stderr open.
            if let Err(RecvTimeoutError::Timeout) = stderr_closed.recv_timeout(STDERR_DRAIN) {
                tracing::debug!(server = %server, "stderr still open after the exit");
            }
            done.store(true, Ordering::SeqCst);
            tracing::info!(server = %server, generation, ?code, "process exited");
            to_core.send(Input::BackendExited { server, generation, code });
        });
        let reader = match reader {
            Ok(reader) => Some(reader),
            Err(e) => {
                tracing::warn!("cannot start a stdout reader: {e}");
                None
            }
        };
        Some(StdioBackend { stdin: Some(stdin), pid, exited, reader })
    }

    /// Writes one frame to the process's stdin.
    pub fn send(&mut self, frame: &str) {
        if let Some(stdin) = &mut self.stdin {
            stdin.send(frame);
        }
    }

    /// Closes stdin (the polite way to ask a stdio server to stop).
    pub fn close_stdin(&mut self) {
        if let Some(stdin) = self.stdin.take() {
            stdin.close();
        }
    }

    /// Sends `signal` to the process group unless the process has exited.
    pub fn signal(&self, signal: i32) {
        if !self.has_exited() {
            // SAFETY: kill(2) on our own child's process group; no memory is touched.
            unsafe {
                libc::kill(-(self.pid as i32), signal);
            }
        }
    }

    /// Whether the process has exited and been reaped.
    pub fn has_exited(&self) -> bool {
        self.exited.load(Ordering::SeqCst)
    }

    /// Waits for the stdout reader (which reaps the process) to finish.
    pub fn join(mut self) {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

fn reap(child: &mut Child) -> Option<i32> {
    child.wait().ok().and_then(|status| status.code())
}
