//! A local backend: one child process speaking newline-delimited JSON-RPC on
//! stdin/stdout, on plain threads, with its process tree (see
//! [`tether_host::process_tree`]).
//!
//! Threads per process: one reads stdout (frames), one reads stderr (log lines,
//! rate-limited, kept by the core as the crash message), one waits for the
//! process to exit, and the [`PipeWriter`]'s, which only works when a write
//! could block.
//!
//! Nothing grows without bound: the stdout reader waits, before each frame, until
//! the clients' output backlogs have room (so a flooding backend is read no
//! faster than tether forwards); a backend that leaves [`STDIN_LIMIT`] bytes
//! unread on its stdin is reported as a failed connection.
//!
//! The exit is awaited on its own thread, whatever the pipes do: when the process
//! exits, the rest of its tree is killed and the exit reported after the last of
//! its output. When stdout closes while the process keeps running, it gets
//! [`STDOUT_CLOSED_GRACE`] to exit, then its tree is killed and the connection
//! reported as failed.

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tether_core::{Failure, Input, ServerName};
use tether_host::lifecycle::{
    stop_blocking, Ladder, Stoppable, KILLED_EXIT_WAIT, STDERR_DRAIN, STDIN_LIMIT, STDOUT_CLOSED_GRACE, STDOUT_DRAIN,
};
use tether_host::logging::StderrLog;
use tether_host::process_tree::{Lineage, ProcessTree, Signal};

use tether_host::line_reader::LineReader;
use tether_host::pipe_writer::PipeWriter;

pub use tether_host::launch::Launch;

/// Where a backend's threads hand their inputs: the engine, which this module
/// knows only through it.
pub(crate) trait InputPort: Send + Sync {
    /// Feeds an input; `false` once the host has stopped.
    fn send(&self, input: Input) -> bool;
    /// Waits until the clients' output backlogs have room.
    fn wait_room(&self);
}

/// A shared [`InputPort`].
pub(crate) type Inputs = Arc<dyn InputPort>;

/// One running process (one generation).
pub struct StdioBackend {
    server: ServerName,
    generation: tether_core::Generation,
    stdin: Option<PipeWriter>,
    tree: ProcessTree,
    exited: Arc<AtomicBool>,
    waiter: Option<JoinHandle<()>>,
    /// Set once stdin overflowed and that was reported.
    overflowed: bool,
    inputs: Inputs,
}

/// A started process and its tree.
pub type Started = (Child, ProcessTree);

/// Starts the backend `launch` describes (stdin, stdout and stderr piped, its own
/// process group and lineage, killed if the thread that started it dies).
///
/// Call it on a thread that lives as long as the host: on Linux the child's
/// parent-death signal fires when the *thread* that forked it exits.
pub fn start_process(cmd: std::process::Command, lineage: Lineage) -> std::io::Result<Started> {
    tether_host::launch::spawn_piped(cmd, lineage)
}

/// How the streams and the process of one backend ended, as far as known.
#[derive(Default)]
struct Ends {
    state: Mutex<EndState>,
    changed: Condvar,
}

#[derive(Default)]
struct EndState {
    /// The exit code, once the process was reaped (`Some(None)`: killed by a signal).
    exit: Option<Option<i32>>,
    stdout_closed: bool,
    stderr_closed: bool,
}

impl Ends {
    fn update(&self, f: impl FnOnce(&mut EndState)) {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
        self.changed.notify_all();
    }

    /// Waits at most `limit` for `cond`; whether it holds.
    fn wait(&self, limit: Duration, cond: impl Fn(&EndState) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if cond(&state) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self.changed.wait_timeout(state, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

impl StdioBackend {
    /// Takes over a started process (or the error starting it) and starts its
    /// threads. Returns it with the input that reports it: its start, or
    /// [`Failure::Spawn`] for a process that could not be started.
    pub fn attach(
        launch: Launch<'_>,
        started: std::io::Result<Started>,
        inputs: &Inputs,
    ) -> (Option<StdioBackend>, Input) {
        let server = launch.server.clone();
        let generation = launch.generation;
        let started = started.and_then(|(mut child, tree)| {
            let stdin = PipeWriter::new_nonblocking(&server, child.stdin.take().expect("piped"))?;
            Ok((child, tree, stdin))
        });
        let (mut child, tree, stdin) = match started {
            Ok(started) => started,
            Err(e) => {
                tracing::warn!(server = %server, "cannot start {}: {e}", launch.command);
                let failure = Failure::Spawn { message: format!("{}: {e}", launch.command) };
                return (None, Input::BackendFailed { server, generation, request: None, failure });
            }
        };
        let pid = child.id();
        tracing::debug!(server = %server, %generation, pid, "started {}", launch.command);
        let report = Input::BackendStarted { server: server.clone(), generation, pid: Some(pid) };

        let ends = Arc::new(Ends::default());
        // One report per process: its exit, or the loss of its stdout.
        let reported = Arc::new(AtomicBool::new(false));
        let exited = Arc::new(AtomicBool::new(false));

        let stderr = child.stderr.take().expect("piped");
        let mut log = StderrLog::new(server.clone(), launch.redactor);
        let (name, to_core, stderr_ends) = (server.clone(), inputs.clone(), ends.clone());
        spawn_named(format!("stderr {server}"), move || {
            for line in LineReader::new(stderr, 16 * 1024, 8 * 1024) {
                let line = line.unwrap_or_else(|e| format!("<{e}>"));
                if log.line(&line) {
                    to_core.send(Input::BackendStderr { server: name.clone(), generation, line });
                }
            }
            for line in log.finish() {
                to_core.send(Input::BackendStderr { server: name.clone(), generation, line });
            }
            stderr_ends.update(|e| e.stderr_closed = true);
        });

        let stdout = child.stdout.take().expect("piped");
        let (to_core, max_frame) = (inputs.clone(), launch.max_frame);
        let (name, stdout_ends, stdout_tree) = (server.clone(), ends.clone(), tree.clone());
        let (stdout_reported, stdout_exited) = (reported.clone(), exited.clone());
        spawn_named(format!("stdout {server}"), move || {
            for line in LineReader::new(stdout, max_frame, 64 * 1024) {
                match line {
                    Ok(frame) => {
                        // The clients' output backlogs first: read no faster than they take.
                        to_core.wait_room();
                        if !to_core.send(Input::BackendFrame { server: name.clone(), generation, frame }) {
                            break;
                        }
                    }
                    Err(e) => tracing::warn!(server = %name, "dropped a frame from stdout: {e}"),
                }
            }
            stdout_ends.update(|e| e.stdout_closed = true);
            if stdout_ends.wait(STDOUT_CLOSED_GRACE, |e| e.exit.is_some())
                || stdout_reported.swap(true, Ordering::SeqCst)
            {
                return;
            }
            // Stdout closed and the process kept running: it cannot answer any more.
            tracing::warn!(server = %name, %generation, "stdout closed but the process kept running: killing it");
            stdout_tree.signal(Signal::Kill);
            stdout_ends.wait(KILLED_EXIT_WAIT, |e| e.exit.is_some());
            stdout_exited.store(true, Ordering::SeqCst);
            let failure = Failure::Other { message: "the process closed its stdout and kept running".into() };
            to_core.send(Input::BackendFailed { server: name, generation, request: None, failure });
        });

        let (to_core, done) = (inputs.clone(), exited.clone());
        let (name, reaped) = (server.clone(), tree.clone());
        let waiter = spawn_named(format!("wait {server}"), move || {
            let code = child.wait().ok().and_then(|status| status.code());
            reaped.leader_reaped();
            ends.update(|e| e.exit = Some(code));
            if reported.swap(true, Ordering::SeqCst) {
                return;
            }
            // Whatever the process left running goes with it: nothing it started
            // outlives it or meets its successor.
            let leftovers = reaped.signal(Signal::Kill);
            if leftovers > 0 {
                tracing::debug!(server = %name, %generation, leftovers, "killed what the process left running");
            }
            // Frames written before the exit are reported before it, and what it
            // wrote to stderr is its crash message. Bounded: a reader may be waiting
            // for a slow client, and a process outside the tree may hold a pipe.
            if !ends.wait(STDOUT_DRAIN, |e| e.stdout_closed) {
                tracing::debug!(server = %name, "stdout still open after the exit");
            }
            if !ends.wait(STDERR_DRAIN, |e| e.stderr_closed) {
                tracing::debug!(server = %name, "stderr still open after the exit");
            }
            done.store(true, Ordering::SeqCst);
            tracing::debug!(server = %name, %generation, ?code, "process exited");
            to_core.send(Input::BackendExited { server: name, generation, code });
        });
        let backend = StdioBackend {
            server,
            generation,
            stdin: Some(stdin),
            tree,
            exited,
            waiter,
            overflowed: false,
            inputs: inputs.clone(),
        };
        (Some(backend), report)
    }

    /// Writes one frame to the process's stdin. A backend with [`STDIN_LIMIT`]
    /// bytes already waiting is not reading: its connection is reported as
    /// failed (once) and the frame is dropped.
    pub fn send(&mut self, frame: &str) {
        let Some(stdin) = &mut self.stdin else { return };
        let queued = stdin.backlog().bytes();
        if queued < STDIN_LIMIT {
            stdin.send(frame);
            return;
        }
        if !std::mem::replace(&mut self.overflowed, true) {
            tracing::warn!(server = %self.server, queued, "not reading its stdin: connection failed");
            let message = format!("the process is not reading its input ({queued} bytes waiting)");
            self.inputs.send(Input::BackendFailed {
                server: self.server.clone(),
                generation: self.generation,
                request: None,
                failure: Failure::Other { message },
            });
        }
    }

    /// Closes stdin (the polite way to ask a stdio server to stop).
    pub fn close_stdin(&mut self) {
        if let Some(stdin) = self.stdin.take() {
            stdin.close();
        }
    }

    /// Sends `signal` to the process tree, including what is left of it after
    /// the process itself exited.
    pub fn signal(&self, signal: Signal) {
        self.tree.signal(signal);
    }

    /// Whether the process has exited and been reaped (and its end reported).
    pub fn has_exited(&self) -> bool {
        self.exited.load(Ordering::SeqCst)
    }

    /// Waits for the thread that reaps the process to finish.
    pub fn join(mut self) {
        if let Some(waiter) = self.waiter.take() {
            let _ = waiter.join();
        }
    }
}

impl tether_host::driver::StdioConnection for StdioBackend {
    fn send(&mut self, frame: &str) {
        StdioBackend::send(self, frame);
    }

    /// Ends the connection without waiting: stdin closed, then SIGTERM and
    /// SIGKILL to the process tree on a helper thread unless it exits first.
    fn close(mut self) {
        self.close_stdin();
        let server = self.server.clone();
        let retire = move || {
            let mut retiring = [self];
            if stop_blocking(&mut retiring, Ladder::retire()) {
                let [b] = retiring;
                b.join();
            }
        };
        if let Err(e) = std::thread::Builder::new().name(format!("stop {server}")).spawn(retire) {
            tracing::error!("cannot start a thread to stop {server}: {e}");
        }
    }
}

impl Stoppable for StdioBackend {
    fn close_stdin(&mut self) {
        StdioBackend::close_stdin(self);
    }

    fn signal(&self, signal: Signal) {
        StdioBackend::signal(self, signal);
    }

    fn has_exited(&self) -> bool {
        StdioBackend::has_exited(self)
    }
}

fn spawn_named(name: String, f: impl FnOnce() + Send + 'static) -> Option<JoinHandle<()>> {
    match std::thread::Builder::new().name(name.clone()).spawn(f) {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::warn!("cannot start thread {name}: {e}");
            None
        }
    }
}
