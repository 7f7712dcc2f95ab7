//! The host: feeds inputs to the core, executes its actions, sleeps until its
//! next deadline. Nothing here decides anything; it moves bytes and time.
//!
//! The engine sits behind one lock (`Engine`) and is fed from two places:
//!
//! - the host loop ([`Host::run`], a task on the executor) takes the inputs that
//!   come through its channel (HTTP requests, process exits, stderr lines,
//!   remote backends, signals) and its alarm's ticks;
//! - the thread that reads a stdio pipe (the client's stdin, a backend's stdout)
//!   feeds each frame it reads itself and executes the resulting actions in
//!   place: the answer it produces is written to the next pipe at once
//!   ([`tether_host::pipe_writer::PipeWriter`]). A frame crosses no thread and
//!   wakes no reactor inside tether, which is what a call costs over stdio:
//!   a read and a write each way, as for a process that only copies lines.
//!
//! Two things only the host loop does. Processes are started on the executor's
//! thread, which lives as long as tether (a child's parent-death signal is tied
//! to the thread that forked it): a reader thread that meets a spawn leaves it and
//! every action after it, in order, to the loop. And the loop owns the alarm: a
//! reader thread whose input brought the next deadline earlier wakes it.

use std::collections::HashMap;
use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_channel::{Receiver, Sender};
use futures_lite::future;
use tether_core::{Action, BackendStatus, Config, Event, Gateway, Input, Instant, SessionId};

use crate::serve::http_server::HttpServer;
use crate::serve::status::{self, EventLog, Query, StatusHandle};
use crate::serve::stdio_backend::{stop, Launch, StdioBackend};
use tether_host::backlog::Backlog;
use tether_host::http_backend::{HttpBackend, HttpTarget, InputSink, Spawner};
use tether_host::lifecycle::{sweep, Ladder};
use tether_host::logging::log_event;
use tether_host::pipe_writer::PipeWriter;
use tether_host::recorder::Recorder;

pub(super) use tether_host::clock::Clock;

enum Connection {
    Stdio(StdioBackend),
    Http(HttpBackend),
}

/// What woke the host loop (an input is the common case: not boxed).
#[allow(clippy::large_enum_variant)]
enum Next {
    Input(Input),
    Query(Query),
    /// The alarm went off (perhaps before the deadline, which may have moved later).
    Alarm,
}

/// Where frames for one client session go (counted in the host's client backlog).
pub(super) use crate::serve::client_stdio::ClientSink;

/// One attached client's way out.
enum ClientOut {
    /// A queue an in-process reader takes frames from (the demo).
    Queue(ClientSink),
    /// This process's stdout, written on whichever thread has the frame.
    Pipe(PipeWriter),
}

/// What the host reports to whoever runs it (the CLI, `check`, the demo).
#[derive(Clone, Debug)]
pub enum Report {
    /// A core event.
    Event(Event),
    /// A client session was closed by the core.
    ClientClosed(SessionId),
}

/// Drives one [`Gateway`].
pub struct Host {
    engine: Arc<Engine>,
    clock: Clock,
    /// The `now` the gateway was created at.
    start: Instant,
    inputs: Sender<Input>,
    inputs_rx: Receiver<Input>,
    queries: Sender<Query>,
    queries_rx: Receiver<Query>,
    events: Arc<EventLog>,
    /// Bytes waiting for the attached clients' writers.
    outflow: Arc<Backlog>,
}

/// The engine and everything its actions drive, behind one lock; fed by the host
/// loop and by the threads that read stdio pipes (see the module's doc).
pub(crate) struct Engine {
    core: Mutex<Core>,
}

/// What the lock of an [`Engine`] guards.
pub(crate) struct Core {
    gw: Gateway,
    clock: Clock,
    start: Instant,
    /// The host loop's channel (for inputs raised asynchronously, and to wake it).
    inputs: Sender<Input>,
    connections: HashMap<tether_core::ServerName, (tether_core::Generation, Connection)>,
    clients: HashMap<SessionId, ClientOut>,
    /// Bytes waiting for the attached clients' writers; stdio backends' readers
    /// wait while it is full.
    outflow: Arc<Backlog>,
    /// The Streamable HTTP listener: every session not in `clients` is its.
    http: Option<HttpServer>,
    record: Option<Recorder>,
    reports: Option<Sender<Report>>,
    events: Arc<EventLog>,
    /// Remote backends' OAuth credentials.
    credentials: tether_host::credentials::Credentials,
    /// Inputs raised while executing actions (a process started), fed before
    /// the lock is let go, so they come before anything its pipes say.
    raised: Vec<Input>,
    /// A spawn a reader thread left for the host loop: it and every action after
    /// it wait for the loop, in order.
    deferred: Option<Action>,
    /// When the host loop's alarm goes off (`None`: not set).
    alarm_at: Option<std::time::Instant>,
    /// Feeding a burst of inputs: frames for stdio pipes are gathered per pipe
    /// and written together at its end.
    gathering: bool,
    /// The pipes holding gathered frames.
    held: Vec<Held>,
    /// The key of the engine's capability ids, for a trace's header.
    id_key: Option<[u8; 32]>,
}

/// A pipe writer holding frames gathered during a burst.
enum Held {
    Client(SessionId),
    Backend(tether_core::ServerName),
}

/// Who is executing actions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Executor {
    /// The host loop, on the executor's thread: may do anything.
    Loop,
    /// A pipe's reader thread: leaves process starts to the loop.
    Reader,
}

impl Host {
    /// A host for `config`, with jitter seeded by `seed`.
    pub fn new(config: Config, seed: u64) -> Result<Host, tether_core::ConfigError> {
        let clock = Clock::start();
        let (inputs, inputs_rx) = async_channel::unbounded();
        let start = clock.now();
        let mut gw = Gateway::new(config, seed, start)?;
        let id_key = tether_host::entropy::id_key();
        match &id_key {
            Some(key) => gw.set_id_key(*key),
            None => tracing::warn!("no randomness from the operating system: task ids follow the seed"),
        }
        // The loop feeds it first (recorded in a trace like any input).
        let _ = inputs.try_send(Clock::wall_clock());
        let (queries, queries_rx) = async_channel::unbounded();
        let events = Arc::<EventLog>::default();
        let outflow = Arc::new(Backlog::new(crate::serve::client_stdio::CLIENT_BACKLOG));
        let core = Core {
            gw,
            clock,
            start,
            inputs: inputs.clone(),
            connections: HashMap::new(),
            clients: HashMap::new(),
            outflow: outflow.clone(),
            http: None,
            record: None,
            reports: None,
            events: events.clone(),
            credentials: tether_host::credentials::Credentials::none(),
            raised: Vec::new(),
            deferred: None,
            alarm_at: None,
            gathering: false,
            held: Vec::new(),
            id_key,
        };
        Ok(Host {
            engine: Arc::new(Engine { core: Mutex::new(core) }),
            clock,
            start,
            inputs,
            inputs_rx,
            queries,
            queries_rx,
            events,
            outflow,
        })
    }

    /// Keeps remote backends' OAuth credentials in `credentials` (before the run).
    pub fn set_credentials(&mut self, mut credentials: tether_host::credentials::Credentials) {
        let mut core = self.engine.lock();
        credentials.sync(core.gw.config());
        core.credentials = credentials;
    }

    /// Writes every input to `file` as a trace (header first). Secrets are
    /// redacted: the header holds a redacted config, and any input line that
    /// quotes a secret has it blanked.
    pub fn record_to(&mut self, file: File, config: &Config, seed: u64) -> std::io::Result<()> {
        let mut core = self.engine.lock();
        let id_key = core.id_key;
        core.record = Some(Recorder::start(file, config, (seed, id_key.as_ref()), self.start, core.gw.redactor())?);
        Ok(())
    }

    /// Receives events and client closures.
    pub fn reports(&mut self) -> Receiver<Report> {
        let (tx, rx) = async_channel::unbounded();
        self.engine.lock().reports = Some(tx);
        rx
    }

    /// A sender for inputs from other tasks (client readers, signal handlers).
    pub fn inputs(&self) -> Sender<Input> {
        self.inputs.clone()
    }

    /// Opens a client session whose frames queue for the returned receiver (in
    /// the host's client backlog); the session is announced to the core.
    pub fn attach_client(&mut self, session: SessionId) -> crate::serve::client_stdio::ClientFrames {
        let (sink, frames) = crate::serve::client_stdio::client_queue(self.outflow.clone());
        self.engine.lock().clients.insert(session, ClientOut::Queue(sink));
        let _ = self.inputs.try_send(Input::ClientConnected { session, expires: false });
        frames
    }

    /// Serves this process's stdin and stdout as the client `session`: a thread
    /// reads frames from stdin and feeds them itself, and frames for the client
    /// are written to stdout on whichever thread has them. The client's end of
    /// stdin is reported as [`Input::ClientClosed`] through the host loop.
    pub fn attach_stdio(&mut self, session: SessionId, max_frame: usize) -> Result<(), String> {
        let writer = PipeWriter::stdout_counted(self.outflow.clone()).map_err(|e| format!("stdout: {e}"))?;
        self.engine.lock().clients.insert(session, ClientOut::Pipe(writer));
        let _ = self.inputs.try_send(Input::ClientConnected { session, expires: false });
        crate::serve::client_stdio::read_stdin(
            self.engine.clone(),
            self.inputs.clone(),
            session,
            max_frame,
            self.outflow.clone(),
        )
        .map_err(|e| format!("stdin: {e}"))
    }

    /// Serves HTTP sessions through `server` (it announces its sessions itself).
    pub fn attach_http(&mut self, server: HttpServer) {
        self.engine.lock().http = Some(server);
    }

    /// What the status endpoints use to ask and to follow events.
    pub fn status_handle(&self) -> StatusHandle {
        StatusHandle { queries: self.queries.clone(), events: self.events.clone() }
    }

    /// Every backend's status now.
    pub fn statuses(&self) -> Vec<BackendStatus> {
        self.engine.lock().gw.statuses()
    }

    /// The clock in use.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Runs until `stop` says so after an input, or every input sender is gone.
    /// `stop` sees the engine and, for an input that closed a client session, that session.
    pub async fn run(&mut self, mut stop: impl FnMut(&Gateway, Option<SessionId>) -> bool) {
        let mut alarm = Alarm::default();
        loop {
            {
                let mut core = self.engine.lock();
                core.execute_pending(&self.engine, Executor::Loop);
                let deadline = core.gw.poll_timeout().map(|d| self.clock.at(d));
                alarm.arm(deadline);
                core.alarm_at = alarm.at;
            }
            let (rx, queries, timer) = (&self.inputs_rx, &self.queries_rx, &mut alarm.timer);
            let next = future::or(
                future::or(async { rx.recv().await.ok().map(Next::Input) }, async {
                    timer.await;
                    Some(Next::Alarm)
                }),
                async {
                    match queries.recv().await {
                        Ok(q) => Some(Next::Query(q)),
                        Err(_) => future::pending().await,
                    }
                },
            )
            .await;
            let input = match next {
                None => return,
                Some(Next::Alarm) => {
                    alarm.fired();
                    Input::Tick
                }
                Some(Next::Query(query)) => {
                    self.answer(query);
                    continue;
                }
                Some(Next::Input(input)) => input,
            };
            let closed = match input {
                Input::ClientClosed { session } => Some(session),
                _ => None,
            };
            let mut core = self.engine.lock();
            if let Input::BackendFrame { server, generation, frame } = &input {
                // Taken off the queue: the backend's reader may read that much more.
                if let Some((g, Connection::Stdio(b))) = core.connections.get(server) {
                    if g == generation {
                        b.taken(frame.len());
                    }
                }
            }
            core.feed(input);
            core.execute_pending(&self.engine, Executor::Loop);
            if stop(&core.gw, closed) {
                return;
            }
        }
    }

    /// Answers a status endpoint's question from the engine's state now.
    fn answer(&mut self, query: Query) {
        let mut core = self.engine.lock();
        // Brought to the present first: retry countdowns and uptimes are relative.
        core.feed(Input::Tick);
        core.execute_pending(&self.engine, Executor::Loop);
        let uptime_ms = self.clock.now().saturating_since(self.start).as_millis();
        match query {
            Query::Status(reply) => {
                let _ = reply.try_send(status::status_json(&core.gw, uptime_ms));
            }
            Query::Metrics(reply) => {
                let _ = reply.try_send(status::metrics_text(&core.gw));
            }
            Query::Ready(reply) => {
                let down = core.gw.vital_backends_down().iter().map(ToString::to_string).collect();
                let _ = reply.try_send(down);
            }
            Query::Admin(command, reply) => {
                let result = core.handle(Input::Admin { command }).map_err(|e| e.to_string());
                core.execute_pending(&self.engine, Executor::Loop);
                let _ = reply.try_send(result);
            }
            Query::Logs(server, lines, reply) => {
                let result = core.gw.recent_log(&server, lines).ok_or_else(|| format!("unknown backend: {server}"));
                let _ = reply.try_send(result);
            }
        }
    }

    /// Stops every backend: stdin closed, then SIGTERM, then SIGKILL to each
    /// process tree, then whatever is left of the trees; HTTP sessions are
    /// deleted. Frames still queued for the stdio client get
    /// [`tether_host::lifecycle::CLIENT_FLUSH`] to be written.
    pub async fn shutdown(&mut self) {
        let (http, connections, clients) = {
            let mut core = self.engine.lock();
            let connections: Vec<Connection> = core.connections.drain().map(|(_, (_, c))| c).collect();
            let clients: Vec<ClientOut> = core.clients.drain().map(|(_, c)| c).collect();
            (core.http.take(), connections, clients)
        };
        if let Some(http) = http {
            http.shutdown();
        }
        let mut processes = Vec::new();
        for connection in connections {
            match connection {
                Connection::Stdio(mut b) => {
                    b.close_stdin();
                    processes.push(b);
                }
                Connection::Http(b) => b.close(),
            }
        }
        let flushed = smol::unblock(move || {
            for client in clients {
                if let ClientOut::Pipe(writer) = client {
                    writer.close_within(tether_host::lifecycle::CLIENT_FLUSH);
                }
            }
        });
        stop(&mut processes, Ladder::shutdown()).await;
        sweep(&processes);
        flushed.await;
    }
}

impl Engine {
    /// The engine, locked (a panic while it was held does not lose it).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Feeds a burst of inputs read together, on the calling thread (a pipe's
    /// reader), under one lock, and executes what it can of the resulting actions
    /// in place; what they produce for each stdio pipe is written with one system
    /// call at the end.
    pub(crate) fn feed_burst(self: &Arc<Self>, inputs: impl IntoIterator<Item = Input>) {
        let mut core = self.lock();
        core.gathering = true;
        for input in inputs {
            core.feed(input);
            core.execute_pending(self, Executor::Reader);
        }
        core.gathering = false;
        core.release_held();
        core.wake_loop_if_needed();
    }
}

impl Core {
    /// Feeds one input, recorded first.
    fn handle(&mut self, input: Input) -> Result<(), tether_core::HostError> {
        let now = self.clock.now();
        if let Some(r) = self.record.as_mut() {
            r.record(now, &input, self.gw.redactor());
        }
        if let Input::ConfigReloaded { config } = &input {
            self.credentials.reload(config);
        }
        self.gw.handle(now, input)
    }

    /// [`Core::handle`], logging a broken host contract.
    fn feed(&mut self, input: Input) {
        if let Err(e) = self.handle(input) {
            tracing::error!("host contract violation: {e}");
        }
    }

    /// Executes the pending actions, and feeds what they raised, until none is
    /// left (or, on a reader thread, until a spawn that must wait for the loop).
    fn execute_pending(&mut self, engine: &Arc<Engine>, by: Executor) {
        loop {
            if let Some(action) = self.deferred.take() {
                if by == Executor::Reader {
                    self.deferred = Some(action);
                    return;
                }
                self.execute(action, engine);
            }
            while let Some(action) = self.gw.poll_action() {
                if by == Executor::Reader && matches!(action, Action::Spawn { .. }) {
                    self.deferred = Some(action);
                    break;
                }
                self.execute(action, engine);
                if !self.raised.is_empty() {
                    break;
                }
            }
            if self.raised.is_empty() {
                return;
            }
            for input in std::mem::take(&mut self.raised) {
                self.feed(input);
            }
        }
    }

    /// Writes what the burst gathered for each pipe.
    fn release_held(&mut self) {
        for held in std::mem::take(&mut self.held) {
            match held {
                Held::Client(session) => {
                    if let Some(ClientOut::Pipe(writer)) = self.clients.get_mut(&session) {
                        writer.release();
                    }
                }
                Held::Backend(server) => {
                    if let Some((_, Connection::Stdio(b))) = self.connections.get_mut(&server) {
                        b.release_stdin();
                    }
                }
            }
        }
    }

    /// Wakes the host loop when a reader thread left it a spawn, or brought the
    /// next deadline before the loop's alarm.
    fn wake_loop_if_needed(&mut self) {
        let deadline = self.gw.poll_timeout().map(|d| self.clock.at(d));
        let earlier = deadline.is_some_and(|d| self.alarm_at.map_or(true, |at| d < at));
        if earlier || self.deferred.is_some() {
            if earlier {
                // Woken once: the loop sets its alarm for this deadline.
                self.alarm_at = deadline;
            }
            let _ = self.inputs.try_send(Input::Tick);
        }
    }

    fn execute(&mut self, action: Action, engine: &Arc<Engine>) {
        match action {
            spawn @ Action::Spawn { .. } => {
                let launch = Launch::from_action(&spawn, &self.gw).expect("a spawn action");
                let (server, generation) = (launch.server.clone(), launch.generation);
                self.close_connection(&server);
                let started = StdioBackend::spawn(launch, engine, &self.inputs, self.outflow.clone());
                self.raised.push(started.report);
                if let Some(b) = started.backend {
                    self.connections.insert(server, (generation, Connection::Stdio(b)));
                }
            }
            Action::ConnectHttp { server, generation, url, headers, legacy_sse } => {
                self.close_connection(&server);
                let mut target =
                    HttpTarget::for_action(self.gw.config(), server.clone(), generation, url, headers, legacy_sse);
                target.bearer = self.credentials.bearer(&server);
                let (inputs, outflow) = (self.inputs.clone(), self.outflow.clone());
                // Called on the blocking pool: a frame waits there while the
                // clients' output backlog is full.
                let sink: InputSink = Arc::new(move |input| {
                    if matches!(input, Input::BackendFrame { .. } | Input::BackendEvent { .. }) {
                        outflow.wait_room();
                    }
                    inputs.send_blocking(input).is_ok()
                });
                let spawn: Spawner = Arc::new(|job| smol::unblock(job).detach());
                let b = HttpBackend::connect(target, sink, spawn);
                self.connections.insert(server, (generation, Connection::Http(b)));
            }
            Action::SendToBackend { server, generation, frame, request, headers } => {
                match self.connections.get_mut(&server) {
                    Some((g, Connection::Stdio(b))) if *g == generation => {
                        if self.gathering && b.hold_stdin() {
                            self.held.push(Held::Backend(server.clone()));
                        }
                        b.send(&frame);
                    }
                    Some((g, Connection::Http(b))) if *g == generation => b.send_with_headers(frame, request, headers),
                    _ => tracing::debug!(server = %server, %generation, "dropped a frame for a closed connection"),
                }
            }
            Action::ResumeStream { server, generation, stream, last_event_id } => match self.connections.get(&server) {
                Some((g, Connection::Http(b))) if *g == generation => b.resume(stream, last_event_id),
                _ => tracing::debug!(server = %server, %generation, "no stream to resume on a closed connection"),
            },
            Action::CloseBackend { server, generation } => {
                if self.connections.get(&server).is_some_and(|(g, _)| *g == generation) {
                    self.close_connection(&server);
                }
            }
            Action::SendToClient { session, frame, route } => match self.clients.get_mut(&session) {
                Some(ClientOut::Pipe(writer)) => {
                    if self.gathering && !writer.is_held() {
                        writer.hold();
                        self.held.push(Held::Client(session));
                    }
                    writer.send(&frame);
                }
                Some(ClientOut::Queue(sink)) => sink.send(frame),
                None => {
                    if let Some(http) = &self.http {
                        http.deliver(session, route, frame);
                    }
                }
            },
            Action::CloseClient { session } => {
                if self.clients.remove(&session).is_none() {
                    if let Some(http) = &self.http {
                        http.close_session(session);
                    }
                }
                self.report(Report::ClientClosed(session));
            }
            Action::Authorize { server, step } => {
                tracing::debug!(server = %server, "credential: {step}");
                let inputs = self.inputs.clone();
                let sink: InputSink = Arc::new(move |input| inputs.send_blocking(input).is_ok());
                let spawn: Spawner = Arc::new(|job| smol::unblock(job).detach());
                self.credentials.execute(server, step, sink, &spawn);
            }
            Action::Emit { event } => {
                log_event(&event);
                self.events.push(self.clock.now().saturating_since(self.start).as_millis(), &event);
                self.report(Report::Event(event));
            }
        }
    }

    fn report(&self, report: Report) {
        if let Some(tx) = &self.reports {
            let _ = tx.try_send(report);
        }
    }

    fn close_connection(&mut self, server: &str) {
        match self.connections.remove(server) {
            Some((_, Connection::Stdio(b))) => b.close(),
            Some((_, Connection::Http(b))) => b.close(),
            None => {}
        }
    }
}

/// The host loop's one timer, moved only when the engine's next deadline comes
/// earlier than the time it is set for.
///
/// Every tool call moves the deadline (its own timeout), almost always later.
/// Re-setting a reactor timer costs a wake-up of the reactor and a `timerfd`
/// update; an alarm that goes off early costs one `Tick` the engine finds
/// nothing to do for, after which the alarm is set for the deadline of then.
struct Alarm {
    timer: async_io::Timer,
    /// When it is set to go off (`None`: not set).
    at: Option<std::time::Instant>,
}

impl Default for Alarm {
    fn default() -> Self {
        Alarm { timer: async_io::Timer::never(), at: None }
    }
}

impl Alarm {
    /// Makes sure the alarm goes off at `deadline` or before it.
    fn arm(&mut self, deadline: Option<std::time::Instant>) {
        if let Some(deadline) = deadline {
            if self.at.map_or(true, |at| deadline < at) {
                self.timer.set_at(deadline);
                self.at = Some(deadline);
            }
        }
    }

    /// It went off: it is not set any more.
    fn fired(&mut self) {
        self.at = None;
    }
}
