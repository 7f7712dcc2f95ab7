//! A stdio backend: one process tree (see [`tether_host::process_tree`]), frames
//! over stdin/stdout, stderr logged under a rate limit and handed to the core.
//!
//! The pipes are where a call spends its time, so on unix they are not read and
//! written through the reactor: a thread of the backend's own reads stdout with
//! blocking reads and has each frame fed to the engine on that thread (see
//! [`crate::serve::host`]), and a frame for stdin is written in place by whichever
//! thread has it ([`PipeWriter`]; what would block goes to the writer's thread).
//! That is a read and a write per frame, where the reactor costs a readiness
//! wait, re-arms and a read that finds nothing. On Windows, whose anonymous
//! pipes `async-process` reads on the blocking pool, both go through tasks.
//!
//! Every queue is bounded in bytes and pushes back instead of growing:
//!
//! - frames read from stdout wait for room in the clients' output queue, so a
//!   flooding backend is read no faster than tether forwards; frames a task
//!   hands to the host loop also wait for room in this backend's share of its
//!   input queue ([`UNREAD_LIMIT`] bytes, a small frame counting as 4 KiB), so
//!   the other backends keep their turn;
//! - frames for stdin are counted ([`STDIN_LIMIT`]); a backend that stops reading
//!   its input until that fills is reported as a failed connection;
//! - reader tasks yield to the executor regularly even while their pipe has data.
//!
//! The process's exit is awaited on its own, whatever its pipes do. When it
//! exits, the rest of its tree is killed and the exit is reported after the last
//! of its output. When its stdout closes while it keeps running, it is given
//! [`STDOUT_CLOSED_GRACE`] to exit, then its tree is killed and the connection
//! reported as failed: the core's restart policy applies either way.
//!
//! Closing is polite first: stdin closed, then SIGTERM, then SIGKILL to the tree.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_channel::{Receiver, Sender};
use futures_lite::{future, AsyncWriteExt};
use tether_core::{Failure, Input, ServerName};
use tether_host::backlog::Backlog;
use tether_host::lifecycle::{
    Ladder, Step, Stoppable, KILLED_EXIT_WAIT, STDERR_DRAIN, STDIN_LIMIT, STDOUT_CLOSED_GRACE, STDOUT_DRAIN,
};
use tether_host::logging::StderrLog;
use tether_host::process_tree::{self, ProcessTree, Signal};

use crate::serve::line_reader::{ByteSource, LineReader, Plain};
#[cfg(unix)]
use tether_host::pipe_writer::PipeWriter;

pub(super) use tether_host::launch::Launch;

/// Where a backend's stdout is read, which decides where its answers are handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReadStdout {
    /// A thread of its own, which has each burst fed in place: an answer for
    /// the stdio client is written to stdout by that thread, with no hand-off
    /// (how a stdio client's call costs what a byte relay's does).
    OnThread,
    /// A task on the executor, through the reactor: an answer for an HTTP
    /// client is handed to its connection on the executor's own thread. Read
    /// on a thread, it would wake the executor from there, a context switch and
    /// an eventfd write per answer: a third more CPU per request and 60 to
    /// 140 µs more per call (measured with a Python keep-alive client on two
    /// cores).
    OnExecutor,
}

/// How a pipe's reader thread has a burst of inputs fed in place, on its own
/// thread (the vector is drained). The readers know nothing else of the engine.
pub(super) type FeedBurst = Arc<dyn Fn(&mut Vec<Input>) + Send + Sync>;

/// How many bytes of one backend's frames may wait in the engine's input queue.
pub(super) const UNREAD_LIMIT: usize = 1024 * 1024;

/// Most frames a reader thread feeds under one lock (the rest of a burst waits
/// for the next turn, so other inputs are not held up behind a flood).
pub(super) const MAX_BURST: usize = 64;

/// What a frame counts for in [`UNREAD_LIMIT`] at least: a flood of tiny frames
/// (each with its cost in the engine) queues at most 256 of them ahead of another
/// backend's answer.
const FRAME_COST_FLOOR: usize = 4096;

/// What a frame of `len` bytes counts for in a backend's unread backlog.
fn frame_cost(len: usize) -> usize {
    len.max(FRAME_COST_FLOOR)
}

/// A running stdio backend process.
pub(super) struct StdioBackend {
    server: ServerName,
    generation: tether_core::Generation,
    stdin: Stdin,
    /// Bytes of frames read from stdout that the host loop has not taken yet
    /// (frames a reader task hands on through the host loop's channel).
    unread: Arc<Backlog>,
    /// Set when the connection is closed: the stdout reader drops what it reads.
    retired: Arc<AtomicBool>,
    tree: ProcessTree,
    exited: Arc<AtomicBool>,
    /// Set once stdin overflowed and that was reported.
    overflowed: bool,
    inputs: Sender<Input>,
}

/// What starting a backend gave: the backend (if it started) and the input that
/// reports it, to be fed before anything its pipes say.
pub(super) struct Started {
    /// The running backend.
    pub backend: Option<StdioBackend>,
    /// [`Input::BackendStarted`], or [`Input::BackendFailed`] with the reason.
    pub report: Input,
}

impl StdioBackend {
    /// Starts the process and what reads and writes its pipes. Frames read from
    /// stdout wait for room in `outflow` (the clients' output queue) before they
    /// are handed on: fed in place on the reader's own thread where `how` asks
    /// for it and the pipe allows (unix), else sent to the host loop, which
    /// reports each one it takes with [`StdioBackend::taken`].
    pub(crate) fn spawn(
        launch: Launch<'_>,
        how: ReadStdout,
        feed: &FeedBurst,
        inputs: &Sender<Input>,
        outflow: Arc<Backlog>,
    ) -> Started {
        let server = launch.server.clone();
        let generation = launch.generation;
        let (cmd, lineage) = launch.command();
        let mut command = async_process::Command::from(cmd);
        // The conversion keeps program, arguments, environment and pre-exec hooks,
        // but stdio must be set on the async command to get async pipes.
        command
            .stdin(async_process::Stdio::piped())
            .stdout(async_process::Stdio::piped())
            .stderr(async_process::Stdio::piped());
        let (mut child, tree) = match process_tree::spawn_owned(lineage, || command.spawn(), async_process::Child::id) {
            Ok(started) => started,
            Err(e) => {
                tracing::warn!(server = %server, "cannot start {}: {e}", launch.command);
                let failure = Failure::Spawn { message: format!("{}: {e}", launch.command) };
                let report = Input::BackendFailed { server, generation, request: None, failure };
                return Started { backend: None, report };
            }
        };
        let pid = child.id();
        tracing::debug!(server = %server, %generation, pid, "started {}", launch.command);
        let report = Input::BackendStarted { server: server.clone(), generation, pid: Some(pid) };

        let stdin = Stdin::new(&server, child.stdin.take().expect("piped"));

        // Each of these is closed when its stream ends.
        let (stderr_open, stderr_closed) = async_channel::bounded::<()>(1);
        let (stdout_open, stdout_closed) = async_channel::bounded::<()>(1);
        let (exit_tx, exit_rx) = async_channel::bounded::<Option<i32>>(1);

        let stderr = child.stderr.take().expect("piped");
        let log = StderrLog::new(server.clone(), launch.redactor);
        let (name, stderr_inputs) = (server.clone(), inputs.clone());
        smol::spawn(async move {
            read_stderr(stderr, log, name, generation, stderr_inputs).await;
            drop(stderr_open);
        })
        .detach();

        let unread = Arc::new(Backlog::new(UNREAD_LIMIT));
        let retired = Arc::new(AtomicBool::new(false));
        let reader = FrameReader {
            server: server.clone(),
            generation,
            max_frame: launch.max_frame,
            inputs: inputs.clone(),
            unread: unread.clone(),
            retired: retired.clone(),
            outflow,
        };
        reader.start(child.stdout.take().expect("piped"), how, feed, stdout_open);

        let reaped = tree.clone();
        smol::spawn(async move {
            let code = child.status().await.ok().and_then(|status| status.code());
            reaped.leader_reaped();
            let _ = exit_tx.send(code).await;
        })
        .detach();

        let exited = Arc::new(AtomicBool::new(false));
        let watch = Watch {
            server: server.clone(),
            generation,
            tree: tree.clone(),
            inputs: inputs.clone(),
            exited: exited.clone(),
            exit: exit_rx,
            stdout_closed,
            stderr_closed,
        };
        smol::spawn(watch.run()).detach();
        let backend = StdioBackend {
            server,
            generation,
            stdin,
            unread,
            retired,
            tree,
            exited,
            overflowed: false,
            inputs: inputs.clone(),
        };
        Started { backend: Some(backend), report }
    }

    /// Writes (or queues) one frame for the process's stdin. A backend with
    /// [`STDIN_LIMIT`] bytes already waiting is not reading: its connection is
    /// reported as failed (once) and the frame is dropped.
    pub(super) fn send(&mut self, frame: &str) {
        let queued = self.stdin.queued();
        if queued < STDIN_LIMIT {
            self.stdin.send(frame);
            return;
        }
        if !std::mem::replace(&mut self.overflowed, true) {
            tracing::warn!(server = %self.server, queued, "not reading its stdin: connection failed");
            let message = format!("the process is not reading its input ({queued} bytes waiting)");
            let _ = self.inputs.try_send(Input::BackendFailed {
                server: self.server.clone(),
                generation: self.generation,
                request: None,
                failure: Failure::Other { message },
            });
        }
    }

    /// Starts gathering frames for stdin (written together by
    /// [`StdioBackend::release_stdin`]); whether it was not gathering already.
    pub(super) fn hold_stdin(&mut self) -> bool {
        match &mut self.stdin {
            #[cfg(unix)]
            Stdin::Pipe(writer) if !writer.is_held() => {
                writer.hold();
                true
            }
            _ => false,
        }
    }

    /// Writes the frames gathered for stdin.
    pub(super) fn release_stdin(&mut self) {
        #[cfg(unix)]
        if let Stdin::Pipe(writer) = &mut self.stdin {
            writer.release();
        }
    }

    /// The host loop took a frame of `bytes` read from this backend's stdout off
    /// the input queue: the reader may read that much more.
    pub(super) fn taken(&self, bytes: usize) {
        self.unread.sub(frame_cost(bytes));
    }

    /// Closes stdin, then signals the whole process tree until the process is
    /// gone (the kill ladder, [`Ladder::retire`]).
    pub(super) fn close(mut self) {
        self.close_stdin();
        // Nothing read from now on is wanted: the reader discards it.
        self.retire();
        smol::spawn(async move {
            stop(&mut [self], Ladder::retire()).await;
        })
        .detach();
    }

    /// Closes stdin (the polite way to ask a stdio server to stop).
    pub(super) fn close_stdin(&mut self) {
        self.stdin.close();
    }

    /// Sends `signal` to the process tree, including what is left of it after
    /// the process itself exited.
    pub(super) fn signal(&self, signal: Signal) {
        self.tree.signal(signal);
    }

    /// Whether the process has exited and been reaped.
    pub(super) fn has_exited(&self) -> bool {
        self.exited.load(Ordering::SeqCst)
    }

    fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.unread.close();
    }
}

/// A backend's stdin: written in place on unix (the thread that has the frame
/// writes it; a full pipe hands the rest to the writer's thread), through a
/// writer task elsewhere.
enum Stdin {
    #[cfg(unix)]
    Pipe(PipeWriter),
    Task {
        frames: Sender<String>,
        /// Bytes queued and not yet written.
        backlog: Arc<Backlog>,
    },
    Closed,
}

impl Stdin {
    fn new(server: &str, stdin: async_process::ChildStdin) -> Stdin {
        #[cfg(unix)]
        match own_pipe(&stdin).and_then(|pipe| PipeWriter::new_nonblocking(server, pipe)) {
            Ok(writer) => return Stdin::Pipe(writer),
            Err(e) => tracing::debug!(server, "stdin written by a task: {e}"),
        }
        #[cfg(not(unix))]
        let _ = server;
        let (frames, frames_rx) = async_channel::unbounded::<String>();
        let backlog = Arc::new(Backlog::new(STDIN_LIMIT));
        smol::spawn(write_frames(stdin, frames_rx, backlog.clone())).detach();
        Stdin::Task { frames, backlog }
    }

    fn send(&mut self, frame: &str) {
        match self {
            #[cfg(unix)]
            Stdin::Pipe(writer) => writer.send(frame),
            Stdin::Task { frames, backlog } => {
                backlog.add(frame.len());
                if frames.try_send(frame.to_string()).is_err() {
                    backlog.sub(frame.len());
                }
            }
            Stdin::Closed => {}
        }
    }

    /// Bytes waiting to be written.
    fn queued(&self) -> usize {
        match self {
            #[cfg(unix)]
            Stdin::Pipe(writer) => writer.backlog().bytes(),
            Stdin::Task { backlog, .. } => backlog.bytes(),
            Stdin::Closed => 0,
        }
    }

    /// Closes the pipe once what is queued is written (the backend sees EOF).
    fn close(&mut self) {
        match std::mem::replace(self, Stdin::Closed) {
            #[cfg(unix)]
            Stdin::Pipe(writer) => writer.close(),
            Stdin::Task { frames, .. } => {
                frames.close();
            }
            Stdin::Closed => {}
        }
    }
}

/// A copy of a child's pipe as a plain file (its mode unchanged).
#[cfg(unix)]
fn own_pipe(pipe: &impl std::os::fd::AsFd) -> std::io::Result<std::fs::File> {
    Ok(std::fs::File::from(pipe.as_fd().try_clone_to_owned()?))
}

impl tether_host::driver::StdioConnection for StdioBackend {
    fn send(&mut self, frame: &str) {
        StdioBackend::send(self, frame);
    }

    fn hold(&mut self) -> bool {
        self.hold_stdin()
    }

    fn release(&mut self) {
        self.release_stdin();
    }

    fn close(self) {
        StdioBackend::close(self);
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

/// Climbs `ladder` for `processes` without blocking the executor; whether they
/// all exited.
pub(super) async fn stop<P: Stoppable>(processes: &mut [P], mut ladder: Ladder) -> bool {
    loop {
        let exited = processes.iter().all(P::has_exited);
        match ladder.poll(exited, std::time::Instant::now()) {
            Step::Apply(rung) => processes.iter_mut().for_each(|p| rung.apply(p)),
            Step::Wait(wait) => {
                async_io::Timer::after(wait).await;
            }
            Step::Done(exited) => return exited,
        }
    }
}

impl Drop for StdioBackend {
    fn drop(&mut self) {
        self.retire();
    }
}

/// Watches one process: its exit, its stdout, and reports the end to the core.
struct Watch {
    server: ServerName,
    generation: tether_core::Generation,
    tree: ProcessTree,
    inputs: Sender<Input>,
    exited: Arc<AtomicBool>,
    exit: Receiver<Option<i32>>,
    stdout_closed: Receiver<()>,
    stderr_closed: Receiver<()>,
}

impl Watch {
    async fn run(self) {
        let (server, generation) = (self.server.clone(), self.generation);
        // The process exits, or its stdout closes: whichever comes first.
        let first = future::or(async { Some(self.exit.recv().await.ok().flatten()) }, async {
            while self.stdout_closed.recv().await.is_ok() {}
            None
        })
        .await;
        let code = match first {
            Some(code) => code,
            None => match within(STDOUT_CLOSED_GRACE, self.exit.recv()).await {
                Some(code) => code.ok().flatten(),
                None => return self.stdout_lost().await,
            },
        };
        // Whatever the process left running goes with it: nothing it started
        // outlives it or meets its successor.
        let leftovers = self.tree.signal(Signal::Kill);
        if leftovers > 0 {
            tracing::debug!(server = %server, %generation, leftovers, "killed what the process left running");
        }
        // Frames written before the exit are reported before it, and what it
        // wrote to stderr is its crash message. Bounded: a reader may be waiting
        // for a slow client, and a process outside the tree may hold a pipe.
        future::zip(
            within(STDOUT_DRAIN, async { while self.stdout_closed.recv().await.is_ok() {} }),
            within(STDERR_DRAIN, async { while self.stderr_closed.recv().await.is_ok() {} }),
        )
        .await;
        self.exited.store(true, Ordering::SeqCst);
        tracing::debug!(server = %server, %generation, ?code, "process exited");
        let _ = self.inputs.send(Input::BackendExited { server, generation, code }).await;
    }

    /// Stdout closed and the process kept running: it cannot answer any more.
    async fn stdout_lost(self) {
        let (server, generation) = (self.server, self.generation);
        tracing::warn!(server = %server, %generation, "stdout closed but the process kept running: killing it");
        self.tree.signal(Signal::Kill);
        let _ = within(KILLED_EXIT_WAIT, self.exit.recv()).await;
        self.exited.store(true, Ordering::SeqCst);
        let failure = Failure::Other { message: "the process closed its stdout and kept running".into() };
        let _ = self.inputs.send(Input::BackendFailed { server, generation, request: None, failure }).await;
    }
}

/// `fut`'s output, or `None` after `limit`.
async fn within<T>(limit: Duration, fut: impl std::future::Future<Output = T>) -> Option<T> {
    future::or(async { Some(fut.await) }, async {
        async_io::Timer::after(limit).await;
        None
    })
    .await
}

async fn write_frames(mut stdin: async_process::ChildStdin, frames: Receiver<String>, backlog: Arc<Backlog>) {
    /// Frames already queued are written together, up to this many bytes.
    const BATCH: usize = 256 * 1024;
    let mut buf = Vec::new();
    while let Ok(frame) = frames.recv().await {
        buf.clear();
        let mut taken = frame.len();
        tether_core::codec::encode_line(&frame, &mut buf);
        while buf.len() < BATCH {
            let Ok(more) = frames.try_recv() else { break };
            taken += more.len();
            tether_core::codec::encode_line(&more, &mut buf);
        }
        let written = stdin.write_all(&buf).await.is_ok() && stdin.flush().await.is_ok();
        backlog.sub(taken);
        if !written {
            break;
        }
    }
    // Whatever is still queued will never be written.
    frames.close();
    while let Ok(frame) = frames.try_recv() {
        backlog.sub(frame.len());
    }
    // Dropping stdin closes it: the backend sees EOF.
}

/// Reads frames from a backend's stdout and hands them to the engine, no faster
/// than the engine and the clients take them.
struct FrameReader {
    server: ServerName,
    generation: tether_core::Generation,
    max_frame: usize,
    inputs: Sender<Input>,
    /// This backend's frames in the host loop's input queue (the task's way).
    unread: Arc<Backlog>,
    /// The connection was closed: what is read now is dropped.
    retired: Arc<AtomicBool>,
    /// The clients' output queue.
    outflow: Arc<Backlog>,
}

impl FrameReader {
    /// Starts reading: on unix, if `how` says so, a thread of its own that has
    /// frames fed in place (`feed`),
    /// elsewhere (or if the thread cannot be had) a task that sends frames to the
    /// host loop. `open` is dropped when stdout has ended.
    fn start(self, stdout: async_process::ChildStdout, how: ReadStdout, feed: &FeedBurst, open: Sender<()>) {
        #[cfg(unix)]
        if how == ReadStdout::OnThread {
            match tether_host::pipe_reader::blocking_copy(&stdout) {
                Ok(pipe) => {
                    let (reader, feed) = (self, feed.clone());
                    let name = format!("stdout {}", reader.server);
                    let spawned = std::thread::Builder::new().name(name).spawn(move || {
                        reader.run_thread(pipe, &feed);
                        drop(open);
                    });
                    match spawned {
                        Ok(_) => return,
                        // The closure (reader, pipe, `open`) is gone with the error:
                        // nothing reads this stdout, and the watcher sees it closed.
                        Err(e) => return tracing::warn!("cannot start a thread to read stdout: {e}"),
                    }
                }
                Err(e) => tracing::debug!(server = %self.server, "stdout read by a task: {e}"),
            }
        }
        #[cfg(not(unix))]
        let _ = (how, feed);
        smol::spawn(async move {
            self.run(stdout).await;
            drop(open);
        })
        .detach();
    }

    /// The thread's way: each frame is fed on this thread, after the clients'
    /// output backlog has room.
    #[cfg(unix)]
    fn run_thread(self, pipe: std::fs::File, feed: &FeedBurst) {
        let mut lines = tether_host::line_reader::LineReader::new(pipe, self.max_frame, 64 * 1024);
        let mut burst = Vec::new();
        while let Some(line) = lines.next() {
            match line {
                Ok(frame) if !self.retired.load(Ordering::SeqCst) => {
                    burst.push(Input::BackendFrame { server: self.server.clone(), generation: self.generation, frame });
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(server = %self.server, "dropped a frame from stdout: {e}"),
            }
            // Frames read together are fed together (the answers go out in one write).
            if !lines.has_line() || burst.len() >= MAX_BURST {
                // A closed outflow has no client left to wait for.
                self.outflow.wait_room();
                feed(&mut burst);
            }
        }
    }

    /// The task's way: frames go to the host loop's channel, at most
    /// [`UNREAD_LIMIT`] bytes of them waiting there.
    async fn run(self, stdout: async_process::ChildStdout) {
        let mut lines = LineReader::new(output_source(stdout), self.max_frame, 64 * 1024);
        // Once the connection is closed, the rest is read and discarded.
        let mut forwarding = true;
        while let Some(line) = lines.next().await {
            let frame = match line {
                Ok(frame) => frame,
                Err(e) => {
                    tracing::warn!(server = %self.server, "dropped a frame from stdout: {e}");
                    continue;
                }
            };
            if forwarding {
                // A closed outflow has no client left to wait for.
                self.outflow.room().await;
                forwarding = self.unread.room().await && !self.retired.load(Ordering::SeqCst);
            }
            if !forwarding {
                continue;
            }
            self.unread.add(frame_cost(frame.len()));
            let input = Input::BackendFrame { server: self.server.clone(), generation: self.generation, frame };
            if self.inputs.send(input).await.is_err() {
                return;
            }
        }
    }
}

/// One of a child's output pipes as a line reader's source: on unix its own
/// descriptor registered with the reactor, read only once readable.
fn output_source<P>(pipe: P) -> Box<dyn ByteSource + Send>
where
    P: futures_lite::AsyncRead + Unpin + Send + 'static,
    P: PipeFd,
{
    #[cfg(unix)]
    if let Ok(source) = crate::serve::line_reader::child_pipe(&pipe) {
        return Box::new(source);
    }
    Box::new(Plain(pipe))
}

/// What [`output_source`] needs of a pipe: its descriptor, where there is one to poll.
#[cfg(unix)]
trait PipeFd: std::os::fd::AsFd {}
#[cfg(unix)]
impl<T: std::os::fd::AsFd> PipeFd for T {}
/// What [`output_source`] needs of a pipe: nothing, where pipes are read on threads.
#[cfg(not(unix))]
trait PipeFd {}
#[cfg(not(unix))]
impl<T> PipeFd for T {}

async fn read_stderr(
    stderr: async_process::ChildStderr,
    mut log: StderrLog,
    server: ServerName,
    generation: tether_core::Generation,
    inputs: Sender<Input>,
) {
    let mut lines = LineReader::new(output_source(stderr), 16 * 1024, 8 * 1024);
    while let Some(line) = lines.next().await {
        let line = line.unwrap_or_else(|e| format!("<{e}>"));
        if log.line(&line) {
            let _ = inputs.send(Input::BackendStderr { server: server.clone(), generation, line }).await;
        }
    }
    for line in log.finish() {
        let _ = inputs.send(Input::BackendStderr { server: server.clone(), generation, line }).await;
    }
}
