//! The host loop: feeds inputs to the core, executes its actions, sleeps until
//! its next deadline. Nothing here decides anything; it moves bytes and time.

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use async_channel::{Receiver, Sender};
use futures_lite::future;
use tether_core::{Action, Config, Event, Gateway, Input, Instant, SessionId};

use crate::http_server::HttpServer;
use crate::status::{self, EventLog, Query, StatusHandle};
use crate::stdio_backend::{stop, Launch, StdioBackend};
use tether_host::http_backend::{HttpBackend, HttpTarget, InputSink, Spawner};
use tether_host::lifecycle::{sweep, Ladder};
use tether_host::logging::log_event;
use tether_host::recorder::Recorder;

pub use tether_host::clock::Clock;

enum Connection {
    Stdio(StdioBackend),
    Http(HttpBackend),
}

/// What woke the host loop (an input is the common case: not boxed).
#[allow(clippy::large_enum_variant)]
enum Next {
    Input(Input),
    Query(Query),
}

/// Where frames for one client session go (counted in the host's client backlog).
pub use crate::client_stdio::ClientSink;

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
    gw: Gateway,
    clock: Clock,
    /// The `now` the gateway was created at (a trace header must repeat it exactly).
    start: Instant,
    inputs: Sender<Input>,
    inputs_rx: Receiver<Input>,
    connections: HashMap<tether_core::ServerName, (tether_core::Generation, Connection)>,
    clients: HashMap<SessionId, ClientSink>,
    /// Bytes waiting for the attached clients' writers; stdio backends' readers
    /// wait while it is full.
    outflow: Arc<tether_host::backlog::Backlog>,
    /// The Streamable HTTP listener: every session not in `clients` is its.
    http: Option<HttpServer>,
    record: Option<Recorder>,
    reports: Option<Sender<Report>>,
    queries: Sender<Query>,
    queries_rx: Receiver<Query>,
    events: Arc<EventLog>,
    /// Remote backends' OAuth credentials.
    credentials: tether_host::credentials::Credentials,
}

impl Host {
    /// A host for `config`, with jitter seeded by `seed`.
    pub fn new(config: Config, seed: u64) -> Result<Host, tether_core::ConfigError> {
        let clock = Clock::start();
        let (inputs, inputs_rx) = async_channel::unbounded();
        let start = clock.now();
        let gw = Gateway::new(config, seed, start)?;
        let (queries, queries_rx) = async_channel::unbounded();
        Ok(Host {
            queries,
            queries_rx,
            events: Arc::default(),
            gw,
            clock,
            start,
            inputs,
            inputs_rx,
            connections: HashMap::new(),
            clients: HashMap::new(),
            outflow: Arc::new(tether_host::backlog::Backlog::new(crate::client_stdio::CLIENT_BACKLOG)),
            http: None,
            record: None,
            reports: None,
            credentials: tether_host::credentials::Credentials::none(),
        })
    }

    /// Keeps remote backends' OAuth credentials in `credentials` (before the run).
    pub fn set_credentials(&mut self, mut credentials: tether_host::credentials::Credentials) {
        credentials.sync(self.gw.config());
        self.credentials = credentials;
    }

    /// Writes every input to `file` as a trace (header first). Secrets are
    /// redacted: the header holds a redacted config, and any input line that
    /// quotes a secret has it blanked.
    pub fn record_to(&mut self, file: File, config: &Config, seed: u64) -> std::io::Result<()> {
        self.record = Some(Recorder::start(file, config, seed, self.start, self.gw.redactor())?);
        Ok(())
    }

    /// Receives events and client closures.
    pub fn reports(&mut self) -> Receiver<Report> {
        let (tx, rx) = async_channel::unbounded();
        self.reports = Some(tx);
        rx
    }

    /// A sender for inputs from other tasks (client readers, signal handlers).
    pub fn inputs(&self) -> Sender<Input> {
        self.inputs.clone()
    }

    /// Opens a client session whose frames queue for the returned receiver (in
    /// the host's client backlog); the session is announced to the core.
    pub fn attach_client(&mut self, session: SessionId) -> crate::client_stdio::ClientFrames {
        let (sink, frames) = crate::client_stdio::client_queue(self.outflow.clone());
        self.clients.insert(session, sink);
        let _ = self.inputs.try_send(Input::ClientConnected { session, expires: false });
        frames
    }

    /// Serves HTTP sessions through `server` (it announces its sessions itself).
    pub fn attach_http(&mut self, server: HttpServer) {
        self.http = Some(server);
    }

    /// What the status endpoints use to ask and to follow events.
    pub fn status_handle(&self) -> StatusHandle {
        StatusHandle { queries: self.queries.clone(), events: self.events.clone() }
    }

    /// The engine, for status queries.
    pub fn gateway(&self) -> &Gateway {
        &self.gw
    }

    /// The clock in use.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Runs until `stop` says so after an input, or every input sender is gone.
    pub async fn run(&mut self, mut stop: impl FnMut(&Gateway, &Input) -> bool) {
        self.execute_pending();
        loop {
            let deadline = self.gw.poll_timeout().map(|d| self.clock.at(d));
            let (rx, queries) = (&self.inputs_rx, &self.queries_rx);
            let next = future::or(
                async {
                    match deadline {
                        Some(at) => {
                            future::or(async { rx.recv().await.ok().map(Next::Input) }, async {
                                async_io::Timer::at(at).await;
                                Some(Next::Input(Input::Tick))
                            })
                            .await
                        }
                        None => rx.recv().await.ok().map(Next::Input),
                    }
                },
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
                Some(Next::Query(query)) => {
                    self.answer(query);
                    continue;
                }
                Some(Next::Input(input)) => input,
            };
            if let Input::BackendFrame { server, generation, frame } = &input {
                // Taken off the queue: the backend's reader may read that much more.
                if let Some((g, Connection::Stdio(b))) = self.connections.get(server) {
                    if g == generation {
                        b.taken(frame.len());
                    }
                }
            }
            if let Err(e) = self.feed(input.clone()) {
                tracing::error!("host contract violation: {e}");
            }
            if stop(&self.gw, &input) {
                return;
            }
        }
    }

    /// Answers a status endpoint's question from the engine's state now.
    fn answer(&mut self, query: Query) {
        // Brought to the present first: retry countdowns and uptimes are relative.
        if let Err(e) = self.feed(Input::Tick) {
            tracing::error!("host contract violation: {e}");
        }
        let uptime_ms = self.clock.now().saturating_since(self.start).as_millis();
        match query {
            Query::Status(reply) => {
                let _ = reply.try_send(status::status_json(&self.gw, uptime_ms));
            }
            Query::Metrics(reply) => {
                let _ = reply.try_send(status::metrics_text(&self.gw));
            }
            Query::Ready(reply) => {
                let down = self.gw.vital_backends_down().iter().map(ToString::to_string).collect();
                let _ = reply.try_send(down);
            }
            Query::Admin(command, reply) => {
                let result = self.feed(Input::Admin { command }).map_err(|e| e.to_string());
                let _ = reply.try_send(result);
            }
            Query::Logs(server, lines, reply) => {
                let result = self.gw.recent_log(&server, lines).ok_or_else(|| format!("unknown backend: {server}"));
                let _ = reply.try_send(result);
            }
        }
    }

    /// Feeds one input now and executes the resulting actions.
    pub fn feed(&mut self, input: Input) -> Result<(), tether_core::HostError> {
        let now = self.clock.now();
        if let Some(r) = self.record.as_mut() {
            r.record(now, &input, self.gw.redactor());
        }
        if let Input::ConfigReloaded { config } = &input {
            self.credentials.reload(config);
        }
        let result = self.gw.handle(now, input);
        self.execute_pending();
        result
    }

    fn execute_pending(&mut self) {
        while let Some(action) = self.gw.poll_action() {
            self.execute(action);
        }
    }

    fn execute(&mut self, action: Action) {
        match action {
            spawn @ Action::Spawn { .. } => {
                let launch = Launch::from_action(&spawn, &self.gw).expect("a spawn action");
                self.close_connection(launch.server);
                let (server, generation) = (launch.server.clone(), launch.generation);
                if let Some(b) = StdioBackend::spawn(launch, self.inputs.clone(), self.outflow.clone()) {
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
                match self.connections.get(&server) {
                    Some((g, Connection::Stdio(b))) if *g == generation => b.send(frame),
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
            Action::SendToClient { session, frame, route } => {
                if let Some(sink) = self.clients.get(&session) {
                    sink.send(frame);
                } else if let Some(http) = &self.http {
                    http.deliver(session, route, frame);
                }
            }
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

    /// Stops every backend: stdin closed, then SIGTERM, then SIGKILL to each
    /// process tree, then whatever is left of the trees; HTTP sessions are deleted.
    pub async fn shutdown(&mut self) {
        if let Some(http) = self.http.take() {
            http.shutdown();
        }
        let mut processes = Vec::new();
        for (_, (_, connection)) in self.connections.drain() {
            match connection {
                Connection::Stdio(b) => {
                    b.close_stdin();
                    processes.push(b);
                }
                Connection::Http(b) => b.close(),
            }
        }
        stop(&mut processes, Ladder::shutdown()).await;
        sweep(&processes);
    }
}
