//! The core thread: owns the [`Gateway`], takes inputs from one channel, executes
//! the actions, and sleeps in `recv_timeout` until the core's next deadline.
//! Nothing here decides anything; it moves bytes and time.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

use tether_core::{Action, BackendStatus, ClientRoute, Event, Gateway, Input, ServerName, SessionId};
use tether_host::clock::Clock;
use tether_host::http_backend::{HttpBackend, HttpTarget, InputSink, Spawner};
use tether_host::logging::log_event;
use tether_host::recorder::Recorder;

use crate::stdio_backend::{Launch, StdioBackend};

/// Where one client session's frames go, called on the core thread.
pub type ClientSink = Box<dyn FnMut(String, &ClientRoute) + Send>;

/// Called on the core thread with every event the core emits.
pub type EventSink = Box<dyn FnMut(&Event) + Send>;

/// A message to the core thread.
#[allow(clippy::large_enum_variant)] // inputs are the common case: boxing them would allocate per frame
pub(crate) enum Msg {
    /// An input for the core.
    Input(Input),
    /// Frames for `session` go to `sink` from now on; the session is announced.
    Attach { session: SessionId, sink: ClientSink },
    /// Asks for every backend's status.
    Statuses(Sender<Vec<BackendStatus>>),
    /// Stop: close every backend, then end the thread.
    Shutdown,
}

/// The handle backends' threads report through.
#[derive(Clone)]
pub struct InputSender(pub(crate) Sender<Msg>);

impl InputSender {
    /// Queues an input for the core; `false` once the core thread is gone.
    pub fn send(&self, input: Input) -> bool {
        self.0.send(Msg::Input(input)).is_ok()
    }
}

enum Connection {
    Stdio(StdioBackend),
    Http(HttpBackend),
}

/// Grace period after closing a backend's stdin before SIGTERM, and after
/// SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_millis(1500);

/// The state the core thread owns.
pub(crate) struct CoreThread {
    pub gw: Gateway,
    pub clock: Clock,
    pub rx: Receiver<Msg>,
    pub inputs: InputSender,
    pub record: Option<Recorder>,
    pub on_event: Option<EventSink>,
    connections: HashMap<ServerName, (u64, Connection)>,
    clients: HashMap<SessionId, ClientSink>,
}

impl CoreThread {
    pub fn new(gw: Gateway, clock: Clock, rx: Receiver<Msg>, inputs: InputSender) -> Self {
        CoreThread {
            gw,
            clock,
            rx,
            inputs,
            record: None,
            on_event: None,
            connections: HashMap::new(),
            clients: HashMap::new(),
        }
    }

    /// Runs until [`Msg::Shutdown`], then stops every backend.
    pub fn run(mut self) {
        self.execute_pending();
        loop {
            let msg = match self.gw.poll_timeout() {
                Some(deadline) => {
                    let wait = self.clock.at(deadline).saturating_duration_since(std::time::Instant::now());
                    match self.rx.recv_timeout(wait) {
                        Ok(msg) => msg,
                        Err(RecvTimeoutError::Timeout) => Msg::Input(Input::Tick),
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                None => match self.rx.recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                },
            };
            match msg {
                Msg::Input(input) => self.feed(input),
                Msg::Attach { session, sink } => {
                    self.clients.insert(session, sink);
                    self.feed(Input::ClientConnected { session, expires: false });
                }
                Msg::Statuses(reply) => {
                    let _ = reply.send(self.gw.statuses());
                }
                Msg::Shutdown => break,
            }
        }
        self.shutdown();
    }

    fn feed(&mut self, input: Input) {
        let now = self.clock.now();
        if let Some(r) = self.record.as_mut() {
            r.record(now, &input, self.gw.redactor());
        }
        if let Err(e) = self.gw.handle(now, input) {
            tracing::error!("host contract violation: {e}");
        }
        self.execute_pending();
    }

    fn execute_pending(&mut self) {
        while let Some(action) = self.gw.poll_action() {
            self.execute(action);
        }
    }

    fn execute(&mut self, action: Action) {
        let max_frame = self.gw.config().limits.max_frame_bytes as usize;
        match action {
            Action::Spawn { server, generation, command, args, env, cwd } => {
                self.close_connection(&server);
                let launch = Launch {
                    server: &server,
                    generation,
                    command: &command,
                    args: &args,
                    env: &env,
                    cwd: cwd.as_deref(),
                    max_frame,
                    redactor: self.gw.redactor().clone(),
                };
                if let Some(b) = StdioBackend::spawn(launch, &self.inputs) {
                    self.connections.insert(server, (generation, Connection::Stdio(b)));
                }
            }
            Action::ConnectHttp { server, generation, url, headers, legacy_sse } => {
                self.close_connection(&server);
                let policy = self.gw.config().policy_for(&server);
                let read_timeout = Duration::from_millis(policy.request_timeout_max_ms + 10_000);
                let target = HttpTarget {
                    server: server.clone(),
                    generation,
                    url,
                    headers,
                    legacy: legacy_sse,
                    read_timeout,
                    max_frame,
                };
                let inputs = self.inputs.clone();
                let sink: InputSink = Arc::new(move |input| inputs.send(input));
                let spawn: Spawner = Arc::new(|job| {
                    if let Err(e) = std::thread::Builder::new().name("http".into()).spawn(job) {
                        tracing::error!("cannot start an HTTP thread: {e}");
                    }
                });
                let b = HttpBackend::connect(target, sink, spawn);
                self.connections.insert(server, (generation, Connection::Http(b)));
            }
            Action::SendToBackend { server, generation, frame, request } => match self.connections.get_mut(&server) {
                Some((g, Connection::Stdio(b))) if *g == generation => b.send(&frame),
                Some((g, Connection::Http(b))) if *g == generation => b.send(frame, request),
                _ => tracing::debug!(server = %server, generation, "dropped a frame for a closed connection"),
            },
            Action::CloseBackend { server, generation } => {
                if self.connections.get(&server).is_some_and(|(g, _)| *g == generation) {
                    self.close_connection(&server);
                }
            }
            Action::SendToClient { session, frame, route } => {
                if let Some(sink) = self.clients.get_mut(&session) {
                    sink(frame, &route);
                }
            }
            Action::CloseClient { session } => {
                self.clients.remove(&session);
            }
            Action::Emit { event } => {
                log_event(&event);
                if let Some(on_event) = self.on_event.as_mut() {
                    on_event(&event);
                }
            }
        }
    }

    /// Ends a connection without waiting: stdin closed, then SIGTERM and SIGKILL
    /// to the process group on a helper thread unless it exits first.
    fn close_connection(&mut self, server: &str) {
        match self.connections.remove(server) {
            Some((_, Connection::Stdio(mut b))) => {
                b.close_stdin();
                let retire = move || {
                    for signal in [libc::SIGTERM, libc::SIGKILL] {
                        if wait_for_exit(std::slice::from_ref(&b), GRACE) {
                            break;
                        }
                        b.signal(signal);
                    }
                    if wait_for_exit(std::slice::from_ref(&b), GRACE) {
                        b.join();
                    }
                };
                if let Err(e) = std::thread::Builder::new().name(format!("stop {server}")).spawn(retire) {
                    tracing::error!("cannot start a thread to stop {server}: {e}");
                }
            }
            Some((_, Connection::Http(b))) => b.close(),
            None => {}
        }
    }

    /// Stops every backend: stdin closed, then SIGTERM, then SIGKILL to each
    /// process group, waiting up to a second after each; HTTP sessions are
    /// deleted. Reader threads of processes that are gone are joined.
    fn shutdown(&mut self) {
        let mut processes = Vec::new();
        for (_, (_, connection)) in self.connections.drain() {
            match connection {
                Connection::Stdio(mut b) => {
                    b.close_stdin();
                    processes.push(b);
                }
                Connection::Http(b) => b.close(),
            }
        }
        for signal in [None, Some(libc::SIGTERM), Some(libc::SIGKILL)] {
            if let Some(signal) = signal {
                processes.iter().for_each(|b| b.signal(signal));
            }
            if wait_for_exit(&processes, Duration::from_secs(1)) {
                break;
            }
        }
        for b in processes {
            if b.has_exited() {
                b.join();
            }
        }
        self.clients.clear();
    }
}

/// Waits until every process has exited, at most `limit`; whether they all did.
fn wait_for_exit(processes: &[StdioBackend], limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if processes.iter().all(StdioBackend::has_exited) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
