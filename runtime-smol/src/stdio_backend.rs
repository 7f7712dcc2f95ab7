//! A stdio backend: one process in its own process group, frames over
//! stdin/stdout, stderr captured line by line.
//!
//! The process is killed as a group: stdin closed first, then SIGTERM, then
//! SIGKILL. On Linux it also dies with tether (parent-death signal).

use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tether_core::redact::Redactor;

use crate::line_reader::LineReader;
use async_channel::{Receiver, Sender};
use futures_lite::AsyncWriteExt;
use tether_core::{Failure, Input};

/// Grace period after closing stdin before SIGTERM, and after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_millis(1500);

/// How long an exit report waits for the rest of the process's stderr.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

/// A running stdio backend process.
pub struct StdioBackend {
    frames: Sender<String>,
    pid: u32,
    exited: Arc<AtomicBool>,
}

pub use tether_host::launch::Launch;

impl StdioBackend {
    /// Starts the process and its reader/writer tasks. A process that cannot be
    /// started is reported as [`Failure::Spawn`] through `inputs`.
    pub fn spawn(launch: Launch<'_>, inputs: Sender<Input>) -> Option<StdioBackend> {
        let server = launch.server.clone();
        let generation = launch.generation;
        let mut cmd = std::process::Command::new(launch.command);
        cmd.args(launch.args)
            .envs(launch.env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        if let Some(cwd) = launch.cwd {
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
        let mut command = async_process::Command::from(cmd);
        // The conversion keeps program, arguments, environment and pre-exec hooks,
        // but stdio must be set on the async command to get async pipes.
        command
            .stdin(async_process::Stdio::piped())
            .stdout(async_process::Stdio::piped())
            .stderr(async_process::Stdio::piped());
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                tracing::warn!(server = %server, "cannot start {}: {e}", launch.command);
                let failure = Failure::Spawn { message: format!("{}: {e}", launch.command) };
                let _ = inputs.try_send(Input::BackendFailed { server, generation, request: None, failure });
                return None;
            }
        };
        let pid = child.id();
        tracing::info!(server = %server, generation, pid, "started {}", launch.command);
        let _ = inputs.try_send(Input::BackendStarted { server: server.clone(), generation, pid: Some(pid) });
        let exited = Arc::new(AtomicBool::new(false));
        let (frames, frames_rx) = async_channel::unbounded::<String>();

        let stdin = child.stdin.take().expect("piped");
        smol::spawn(write_frames(stdin, frames_rx)).detach();

        let stderr = child.stderr.take().expect("piped");
        // Closed when stderr reaches EOF.
        let (stderr_open, stderr_closed) = async_channel::bounded::<()>(1);
        let (name, stderr_inputs, redactor) = (server.clone(), inputs.clone(), launch.redactor);
        smol::spawn(async move {
            read_stderr(stderr, name, generation, stderr_inputs, redactor).await;
            drop(stderr_open);
        })
        .detach();

        let stdout = child.stdout.take().expect("piped");
        let max_frame = launch.max_frame;
        let done = exited.clone();
        smol::spawn(async move {
            read_frames(stdout, &server, generation, max_frame, &inputs).await;
            let code = match child.status().await {
                Ok(status) => status.code(),
                Err(_) => None,
            };
            // What the process wrote to stderr before it died is its crash message:
            // report those lines before the exit. Bounded, since a process it left
            // behind may hold stderr open.
            futures_lite::future::or(async { while stderr_closed.recv().await.is_ok() {} }, async {
                async_io::Timer::after(STDERR_DRAIN).await;
            })
            .await;
            done.store(true, Ordering::SeqCst);
            tracing::info!(server = %server, generation, ?code, "process exited");
            let _ = inputs.send(Input::BackendExited { server, generation, code }).await;
        })
        .detach();
        Some(StdioBackend { frames, pid, exited })
    }

    /// Queues one frame for the process's stdin.
    pub fn send(&self, frame: String) {
        let _ = self.frames.try_send(frame);
    }

    /// Closes stdin, then signals the whole process group until it is gone.
    pub fn close(self) {
        self.frames.close();
        let pid = self.pid as i32;
        let exited = self.exited;
        smol::spawn(async move {
            for signal in [libc::SIGTERM, libc::SIGKILL] {
                async_io::Timer::after(GRACE).await;
                if exited.load(Ordering::SeqCst) {
                    return;
                }
                // SAFETY: kill(2) on our own child's process group; no memory is touched.
                unsafe {
                    libc::kill(-pid, signal);
                }
            }
        })
        .detach();
    }

    /// Closes stdin (the polite way to ask a stdio server to stop).
    pub fn close_stdin(&self) {
        self.frames.close();
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
}

async fn write_frames(mut stdin: async_process::ChildStdin, frames: Receiver<String>) {
    let mut buf = Vec::new();
    while let Ok(frame) = frames.recv().await {
        buf.clear();
        tether_core::codec::encode_line(&frame, &mut buf);
        // Write everything already queued in one go.
        while let Ok(more) = frames.try_recv() {
            tether_core::codec::encode_line(&more, &mut buf);
        }
        if stdin.write_all(&buf).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
    // Dropping stdin closes it: the backend sees EOF.
}

async fn read_frames(
    stdout: async_process::ChildStdout,
    server: &tether_core::ServerName,
    generation: u64,
    max_frame: usize,
    inputs: &Sender<Input>,
) {
    let mut lines = LineReader::new(stdout, max_frame, 64 * 1024);
    while let Some(line) = lines.next().await {
        match line {
            Ok(frame) => {
                let input = Input::BackendFrame { server: server.clone(), generation, frame };
                if inputs.send(input).await.is_err() {
                    return;
                }
            }
            Err(e) => tracing::warn!(server = %server, "dropped a frame from stdout: {e}"),
        }
    }
}

async fn read_stderr(
    stderr: async_process::ChildStderr,
    server: tether_core::ServerName,
    generation: u64,
    inputs: Sender<Input>,
    redactor: Redactor,
) {
    let mut lines = LineReader::new(stderr, 16 * 1024, 8 * 1024);
    while let Some(line) = lines.next().await {
        let line = line.unwrap_or_else(|e| format!("<{e}>"));
        tracing::info!(target: "backend", server = %server, "{}", redactor.redact(&line));
        let _ = inputs.send(Input::BackendStderr { server: server.clone(), generation, line }).await;
    }
}
