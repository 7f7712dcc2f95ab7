//! The host: feeds inputs to the engine driver ([`tether_host::driver`], which
//! executes the core's actions) and sleeps until the core's next deadline.
//! Nothing here decides anything; it moves bytes and time.
//!
//! The driver sits behind one lock (`Engine`) and is fed from two places:
//!
//! - the host loop ([`Host::run`], a task on the executor) takes the inputs that
//!   come through its channel (HTTP requests, process exits, stderr lines,
//!   remote backends, signals) and its alarm's ticks;
//! - the thread that reads a stdio pipe (the client's stdin, a backend's stdout)
//!   has each burst of frames it reads fed in place (a [`FeedBurst`], the only
//!   way the readers reach the engine): the answer is written to the next pipe
//!   at once ([`tether_host::pipe_writer::PipeWriter`]). A frame crosses no
//!   thread and wakes no reactor inside tether, which is what a call costs over
//!   stdio: a read and a write each way, as for a process that only copies lines.
//!
//! Two things only the host loop does. Processes are started on the executor's
//! thread, which lives as long as tether (a child's parent-death signal is tied
//! to the thread that forked it): a reader thread runs the driver at
//! [`Place::Reader`], which leaves a spawn and every action after it, in order,
//! to the loop. And the loop owns the alarm: a reader thread whose input brought
//! the next deadline earlier (or left a spawn) wakes it.

use std::collections::HashMap;
use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use async_channel::{Receiver, Sender};
use futures_lite::future;
use tether_core::{BackendStatus, ClientRoute, Config, Event, Gateway, Input, Instant, SessionId};

use crate::serve::http_server::HttpServer;
use crate::serve::status::{self, EventLog, Query, StatusHandle};
use crate::serve::stdio_backend::{stop, FeedBurst, Launch, ReadStdout, StdioBackend};
use tether_host::backlog::Backlog;
use tether_host::driver::{Connection, Driver, Place, Runtime};
use tether_host::http_backend::{InputSink, Spawner};
use tether_host::lifecycle::{sweep, Ladder};
use tether_host::pipe_writer::PipeWriter;
use tether_host::recorder::{Recorder, TraceSecrets};

pub(super) use tether_host::clock::Clock;

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
    driver: Driver<SmolIo>,
    /// When the host loop's alarm goes off (`None`: not set).
    alarm_at: Option<std::time::Instant>,
    /// The key of the engine's capability ids, for a trace's header.
    id_key: Option<[u8; 32]>,
    /// The cluster's continuation keys, for a trace's header.
    continuation_keys: Vec<(u8, [u8; 32])>,
}

/// The I/O this runtime does for the [`Driver`].
struct SmolIo {
    /// The host loop's channel (for inputs raised asynchronously, and to wake it).
    inputs: Sender<Input>,
    /// How the pipe readers have bursts fed in place (the engine, weakly).
    feed: FeedBurst,
    clients: HashMap<SessionId, ClientOut>,
    /// Bytes waiting for the attached clients' writers; stdio backends' readers
    /// wait while it is full.
    outflow: Arc<Backlog>,
    /// The Streamable HTTP listener: every session not in `clients` is its.
    http: Option<HttpServer>,
    reports: Option<Sender<Report>>,
    events: Arc<EventLog>,
    clock: Clock,
    start: Instant,
    /// Client pipes holding frames gathered during a burst.
    held: Vec<SessionId>,
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
        let engine = Arc::new_cyclic(|engine: &Weak<Engine>| {
            let engine = engine.clone();
            let feed: FeedBurst = Arc::new(move |burst: &mut Vec<Input>| match engine.upgrade() {
                Some(engine) => engine.feed_burst(burst.drain(..)),
                None => burst.clear(),
            });
            let io = SmolIo {
                inputs: inputs.clone(),
                feed,
                clients: HashMap::new(),
                outflow: outflow.clone(),
                http: None,
                reports: None,
                events: events.clone(),
                clock,
                start,
                held: Vec::new(),
            };
            let core =
                Core { driver: Driver::new(gw, clock, io), alarm_at: None, id_key, continuation_keys: Vec::new() };
            Engine { core: Mutex::new(core) }
        });
        Ok(Host { engine, clock, start, inputs, inputs_rx, queries, queries_rx, events, outflow })
    }

    /// What finishes logins whose callback lands on this replica, if logins go
    /// through the cluster's public callback.
    pub fn login_desk(&self) -> Option<std::sync::Arc<tether_host::oauth::LoginDesk>> {
        self.engine.lock().driver.credentials().login_desk()
    }

    /// Keeps remote backends' OAuth credentials in `credentials` (before the run).
    pub fn set_credentials(&mut self, credentials: tether_host::credentials::Credentials) {
        self.engine.lock().driver.set_credentials(credentials);
    }

    /// Writes every input to `file` as a trace (header first). Secrets are
    /// redacted: the header holds a redacted config, and any input line that
    /// quotes a secret has it blanked.
    pub fn record_to(&mut self, file: File, config: &Config, seed: u64) -> std::io::Result<()> {
        let mut core = self.engine.lock();
        let id_key = core.id_key;
        let redactor = core.driver.gateway().redactor();
        let secrets = TraceSecrets { seed, id_key: id_key.as_ref(), continuation_keys: &core.continuation_keys };
        let recorder = Recorder::start(file, config, secrets, self.start, redactor)?;
        core.driver.set_recorder(recorder);
        Ok(())
    }

    /// The keys a cluster's replicas share for the engine's `requestState`
    /// tokens (see `Gateway::set_continuation_keys`); before [`Host::record_to`].
    pub fn set_continuation_keys(&mut self, keys: &[(u8, [u8; 32])]) {
        let mut core = self.engine.lock();
        core.driver.gateway_mut().set_continuation_keys(keys);
        core.continuation_keys = keys.to_vec();
    }

    /// Receives events and client closures.
    pub fn reports(&mut self) -> Receiver<Report> {
        let (tx, rx) = async_channel::unbounded();
        self.engine.lock().driver.runtime.reports = Some(tx);
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
        self.engine.lock().driver.runtime.clients.insert(session, ClientOut::Queue(sink));
        let _ = self.inputs.try_send(Input::ClientConnected { session, expires: false });
        frames
    }

    /// Serves this process's stdin and stdout as the client `session`: a thread
    /// reads frames from stdin and feeds them itself, and frames for the client
    /// are written to stdout on whichever thread has them. The client's end of
    /// stdin is reported as [`Input::ClientClosed`] through the host loop.
    pub fn attach_stdio(&mut self, session: SessionId, max_frame: usize) -> Result<(), String> {
        let writer = PipeWriter::stdout_counted(self.outflow.clone()).map_err(|e| format!("stdout: {e}"))?;
        let feed = {
            let mut core = self.engine.lock();
            core.driver.runtime.clients.insert(session, ClientOut::Pipe(writer));
            core.driver.runtime.feed.clone()
        };
        let _ = self.inputs.try_send(Input::ClientConnected { session, expires: false });
        crate::serve::client_stdio::read_stdin(feed, self.inputs.clone(), session, max_frame, self.outflow.clone())
            .map_err(|e| format!("stdin: {e}"))
    }

    /// Serves HTTP sessions through `server` (it announces its sessions itself).
    pub fn attach_http(&mut self, server: HttpServer) {
        self.engine.lock().driver.runtime.http = Some(server);
    }

    /// What the status endpoints use to ask and to follow events.
    pub fn status_handle(&self) -> StatusHandle {
        StatusHandle { queries: self.queries.clone(), events: self.events.clone() }
    }

    /// Every backend's status now.
    pub fn statuses(&self) -> Vec<BackendStatus> {
        self.engine.lock().driver.gateway().statuses()
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
                core.driver.run(Place::Home);
                let deadline = core.driver.gateway().poll_timeout().map(|d| self.clock.at(d));
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
                if let Some(b) = core.driver.stdio(server, *generation) {
                    b.taken(frame.len());
                }
            }
            core.driver.feed(input);
            core.driver.run(Place::Home);
            if stop(core.driver.gateway(), closed) {
                return;
            }
        }
    }

    /// Answers a status endpoint's question from the engine's state now.
    fn answer(&mut self, query: Query) {
        let mut core = self.engine.lock();
        let driver = &mut core.driver;
        // Brought to the present first: retry countdowns and uptimes are relative.
        driver.feed(Input::Tick);
        driver.run(Place::Home);
        let uptime_ms = self.clock.now().saturating_since(self.start).as_millis();
        let gw = driver.gateway();
        match query {
            Query::Status(reply) => {
                let store = driver.credentials().store_health();
                let _ = reply.try_send(status::status_json(driver.gateway(), uptime_ms, store));
            }
            Query::Metrics(reply) => {
                let _ = reply.try_send(status::metrics_text(gw));
            }
            Query::Ready(reply) => {
                let waiting_for = gw.vital_backends_down().iter().map(ToString::to_string).collect();
                let _ = reply.try_send(status::Readiness { draining: gw.draining(), waiting_for });
            }
            Query::Admin(command, reply) => {
                let result = driver.handle(Input::Admin { command }).map_err(|e| e.to_string());
                driver.run(Place::Home);
                let _ = reply.try_send(result);
            }
            Query::Logs(server, lines, reply) => {
                let result = gw.recent_log(&server, lines).ok_or_else(|| format!("unknown backend: {server}"));
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
            let connections = core.driver.take_connections();
            let io = &mut core.driver.runtime;
            let clients: Vec<ClientOut> = io.clients.drain().map(|(_, c)| c).collect();
            (io.http.take(), connections, clients)
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
    fn feed_burst(&self, inputs: impl IntoIterator<Item = Input>) {
        let mut core = self.lock();
        core.driver.feed_burst(inputs, Place::Reader);
        core.wake_loop_if_needed();
    }
}

impl Core {
    /// Wakes the host loop when a reader thread left it a spawn, or brought the
    /// next deadline before the loop's alarm.
    fn wake_loop_if_needed(&mut self) {
        let clock = self.driver.clock();
        let deadline = self.driver.gateway().poll_timeout().map(|d| clock.at(d));
        let earlier = deadline.is_some_and(|d| self.alarm_at.map_or(true, |at| d < at));
        if earlier || self.driver.has_deferred() {
            if earlier {
                // Woken once: the loop sets its alarm for this deadline.
                self.alarm_at = deadline;
            }
            let _ = self.driver.runtime.inputs.try_send(Input::Tick);
        }
    }
}

impl Runtime for SmolIo {
    type Stdio = StdioBackend;

    /// Backends are read on threads of their own while a stdio client may take
    /// their answers, on the executor when only HTTP clients do (see
    /// [`ReadStdout`]).
    fn start_stdio(&mut self, launch: Launch<'_>) -> (Option<StdioBackend>, Input) {
        let stdio_client = self.clients.values().any(|c| matches!(c, ClientOut::Pipe(_)));
        let how = if self.http.is_some() && !stdio_client { ReadStdout::OnExecutor } else { ReadStdout::OnThread };
        let started = StdioBackend::spawn(launch, how, &self.feed, &self.inputs, self.outflow.clone());
        (started.backend, started.report)
    }

    /// Called on the blocking pool: a frame waits there while the clients'
    /// output backlog is full.
    fn http_inputs(&self) -> InputSink {
        let (inputs, outflow) = (self.inputs.clone(), self.outflow.clone());
        Arc::new(move |input| {
            if matches!(input, Input::BackendFrame { .. } | Input::BackendEvent { .. }) {
                outflow.wait_room();
            }
            inputs.send_blocking(input).is_ok()
        })
    }

    fn auth_inputs(&self) -> InputSink {
        let inputs = self.inputs.clone();
        Arc::new(move |input| inputs.send_blocking(input).is_ok())
    }

    fn spawner(&self, _purpose: &'static str) -> Spawner {
        Arc::new(|job| smol::unblock(job).detach())
    }

    fn deliver(&mut self, session: SessionId, route: ClientRoute, frame: String, burst: bool) {
        match self.clients.get_mut(&session) {
            Some(ClientOut::Pipe(writer)) => {
                if burst && !writer.is_held() {
                    writer.hold();
                    self.held.push(session);
                }
                writer.send(&frame);
            }
            Some(ClientOut::Queue(sink)) => sink.send(frame),
            None => {
                if let Some(http) = &self.http {
                    http.deliver(session, route, frame);
                }
            }
        }
    }

    fn close_client(&mut self, session: SessionId) {
        if self.clients.remove(&session).is_none() {
            if let Some(http) = &self.http {
                http.close_session(session);
            }
        }
        self.report(Report::ClientClosed(session));
    }

    fn seal_session(&mut self, session: SessionId, facts: tether_core::cluster::SessionFacts) {
        if let Some(http) = &self.http {
            http.seal_session(session, facts);
        }
    }

    fn session_state(&mut self, session: SessionId, state: tether_core::cluster::SessionState) {
        if let Some(http) = &self.http {
            http.session_state(session, state);
        }
    }

    fn stop_accepting(&mut self) {
        if let Some(http) = &self.http {
            tracing::info!("draining: new requests are refused from now on");
            http.stop_accepting();
        }
    }

    fn end_client_streams(&mut self) {
        if let Some(http) = &self.http {
            http.end_streams();
        }
    }

    fn emit(&mut self, event: Event) {
        self.events.push(self.clock.now().saturating_since(self.start).as_millis(), &event);
        self.report(Report::Event(event));
    }

    fn end_burst(&mut self) {
        for session in std::mem::take(&mut self.held) {
            if let Some(ClientOut::Pipe(writer)) = self.clients.get_mut(&session) {
                writer.release();
            }
        }
    }
}

impl SmolIo {
    fn report(&self, report: Report) {
        if let Some(tx) = &self.reports {
            let _ = tx.try_send(report);
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
