//! The one engine driver both runtimes use: it owns the [`Gateway`], the clock,
//! the trace recorder, the remote backends' credentials and the backend
//! connections; it feeds inputs (recorded first) and executes every [`Action`]
//! the core returns. What only a runtime knows how to do (start a process and
//! read its pipes, reach a client, start a blocking job, hand on an event) it
//! asks of a [`Runtime`].
//!
//! Two things the runtimes do differently are explicit here:
//!
//! - **Where processes start.** On Linux a child's parent-death signal is tied
//!   to the thread that forked it, so processes start on a thread that lives as
//!   long as tether. A runtime that feeds inputs on short-lived threads (the
//!   smol runtime's pipe readers) runs the driver [`Place::Reader`] there: a
//!   spawn and every action after it wait, in order, for the next run at
//!   [`Place::Home`] ([`Driver::has_deferred`] says one is waiting).
//! - **Bursts.** Inputs read together from one pipe may be fed as a burst
//!   ([`Driver::feed_burst`]): frames for stdio pipes are gathered per pipe and
//!   written together at its end, one system call each.
//!
//! Nothing here decides anything about backends or clients; it moves bytes.

use std::collections::HashMap;

use tether_core::{Action, ClientRoute, Event, Gateway, Generation, HostError, Input, ServerName, SessionId};

use crate::clock::Clock;
use crate::credentials::Credentials;
use crate::http_backend::{HttpBackend, HttpTarget, InputSink, Spawner};
use crate::launch::Launch;
use crate::logging::log_event;
use crate::recorder::Recorder;

/// A running stdio backend, as the driver uses it.
pub trait StdioConnection {
    /// Writes (or queues) one frame for the process's stdin.
    fn send(&mut self, frame: &str);

    /// Starts gathering frames instead of writing each: `true` when it was not
    /// gathering already (the driver then releases it at the burst's end).
    fn hold(&mut self) -> bool {
        false
    }

    /// Writes what [`StdioConnection::hold`] gathered.
    fn release(&mut self) {}

    /// Ends the connection without waiting: stdin closed, the process tree
    /// stopped in the background unless it exits first.
    fn close(self);
}

/// The I/O a runtime does for the [`Driver`]. Called with the engine locked:
/// nothing here may feed the engine in place (hand inputs on instead).
pub trait Runtime {
    /// Its stdio backend connections.
    type Stdio: StdioConnection;

    /// Starts the process `launch` describes and what reads its pipes: the
    /// connection, if it started, and the input reporting the start or the
    /// failure (fed before anything the process says).
    fn start_stdio(&mut self, launch: Launch<'_>) -> (Option<Self::Stdio>, Input);

    /// Where a remote backend's threads hand their inputs.
    fn http_inputs(&self) -> InputSink;

    /// Where credential steps hand their results.
    fn auth_inputs(&self) -> InputSink;

    /// How remote backends and credential steps start blocking jobs (`purpose`
    /// names their threads).
    fn spawner(&self, purpose: &'static str) -> Spawner;

    /// Hands a frame to a client session; during a burst it may be held until
    /// [`Runtime::end_burst`].
    fn deliver(&mut self, session: SessionId, route: ClientRoute, frame: String, burst: bool);

    /// The core closed a client session.
    fn close_client(&mut self, session: SessionId);

    /// An event the core emitted (already logged).
    fn emit(&mut self, event: Event);

    /// A burst ended: writes what [`Runtime::deliver`] held.
    fn end_burst(&mut self) {}

    /// The core opened a handshake-era HTTP session: seal `facts` into the id
    /// its client is given (transports without session ids ignore it).
    fn seal_session(&mut self, _session: SessionId, _facts: tether_core::cluster::SessionFacts) {}

    /// A sealed session's log level or subscriptions changed: keep `state`
    /// where a replica adopting it finds it (transports without sealed ids
    /// ignore it).
    fn session_state(&mut self, _session: SessionId, _state: tether_core::cluster::SessionState) {}

    /// Draining: take no new connections or requests.
    fn stop_accepting(&mut self) {}

    /// Draining is over: end every client stream, asking clients to reconnect.
    fn end_client_streams(&mut self) {}
}

/// One backend's transport.
pub enum Connection<S> {
    /// A process over its pipes.
    Stdio(S),
    /// A remote server over HTTP.
    Http(HttpBackend),
}

impl<S: StdioConnection> Connection<S> {
    /// Ends it without waiting.
    pub fn close(self) {
        match self {
            Connection::Stdio(b) => b.close(),
            Connection::Http(b) => b.close(),
        }
    }
}

/// Where the driver is run from (see the module's doc).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Place {
    /// A thread that lives as long as tether: may start processes.
    Home,
    /// A pipe's reader thread: a process start waits for [`Place::Home`].
    Reader,
}

/// Drives one [`Gateway`] for a [`Runtime`].
pub struct Driver<R: Runtime> {
    gw: Gateway,
    clock: Clock,
    record: Option<Recorder>,
    credentials: Credentials,
    connections: HashMap<ServerName, (Generation, Connection<R::Stdio>)>,
    /// Inputs raised while executing actions (a process started), fed before the
    /// run returns, so they come before anything its pipes say.
    raised: Vec<Input>,
    /// A spawn met at [`Place::Reader`]: it and every action after it wait.
    deferred: Option<Action>,
    /// Feeding a burst: stdio frames are gathered per pipe.
    burst: bool,
    /// The backends holding gathered frames.
    held: Vec<ServerName>,
    /// The runtime's side.
    pub runtime: R,
}

impl<R: Runtime> Driver<R> {
    /// A driver for `gw` on `runtime`, reading time from `clock`.
    pub fn new(gw: Gateway, clock: Clock, runtime: R) -> Self {
        Driver {
            gw,
            clock,
            record: None,
            credentials: Credentials::none(),
            connections: HashMap::new(),
            raised: Vec::new(),
            deferred: None,
            burst: false,
            held: Vec::new(),
            runtime,
        }
    }

    /// The engine, to read.
    pub fn gateway(&self) -> &Gateway {
        &self.gw
    }

    /// The engine, to set up before its first input (keys); inputs go through [`Driver::feed`].
    pub fn gateway_mut(&mut self) -> &mut Gateway {
        &mut self.gw
    }

    /// The clock inputs are stamped with.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Records every input from now on.
    pub fn set_recorder(&mut self, record: Recorder) {
        self.record = Some(record);
    }

    /// The remote backends' OAuth credentials.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// Keeps remote backends' OAuth credentials in `credentials`.
    pub fn set_credentials(&mut self, mut credentials: Credentials) {
        credentials.sync(self.gw.config());
        self.credentials = credentials;
    }

    /// Feeds one input, recorded first (a config reload reaches the credentials
    /// too). Run the driver after it to execute what it asked for.
    pub fn handle(&mut self, input: Input) -> Result<(), HostError> {
        let now = self.clock.now();
        if let Some(r) = self.record.as_mut() {
            r.record(now, &input, self.gw.redactor());
        }
        if let Input::ConfigReloaded { config } = &input {
            self.credentials.reload(config);
        }
        self.gw.handle(now, input)
    }

    /// [`Driver::handle`], logging a broken host contract.
    pub fn feed(&mut self, input: Input) {
        if let Err(e) = self.handle(input) {
            tracing::error!("host contract violation: {e}");
        }
    }

    /// Executes the pending actions, and feeds what they raised, until none is
    /// left (or, at [`Place::Reader`], until a spawn that must wait).
    pub fn run(&mut self, place: Place) {
        loop {
            if let Some(action) = self.deferred.take() {
                if place == Place::Reader {
                    self.deferred = Some(action);
                    return;
                }
                self.execute(action);
            }
            while let Some(action) = self.gw.poll_action() {
                if place == Place::Reader && matches!(action, Action::Spawn { .. }) {
                    self.deferred = Some(action);
                    break;
                }
                self.execute(action);
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

    /// Feeds inputs read together and runs the driver after each; what they
    /// produce for each stdio pipe is written at the end, together.
    pub fn feed_burst(&mut self, inputs: impl IntoIterator<Item = Input>, place: Place) {
        self.burst = true;
        for input in inputs {
            self.feed(input);
            self.run(place);
        }
        self.burst = false;
        for server in std::mem::take(&mut self.held) {
            if let Some((_, Connection::Stdio(b))) = self.connections.get_mut(&server) {
                b.release();
            }
        }
        self.runtime.end_burst();
    }

    /// A spawn met at [`Place::Reader`] waits for a run at [`Place::Home`].
    pub fn has_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// The stdio connection of `server`'s `generation`, if it is the current one.
    pub fn stdio(&self, server: &str, generation: Generation) -> Option<&R::Stdio> {
        match self.connections.get(server) {
            Some((g, Connection::Stdio(b))) if *g == generation => Some(b),
            _ => None,
        }
    }

    /// Takes every connection (to stop them at shutdown).
    pub fn take_connections(&mut self) -> Vec<Connection<R::Stdio>> {
        self.connections.drain().map(|(_, (_, c))| c).collect()
    }

    /// The one place an [`Action`] is executed.
    fn execute(&mut self, action: Action) {
        match action {
            spawn @ Action::Spawn { .. } => {
                let launch = Launch::from_action(&spawn, &self.gw).expect("a spawn action");
                let (server, generation) = (launch.server.clone(), launch.generation);
                self.close_connection(&server);
                let (backend, report) = self.runtime.start_stdio(launch);
                self.raised.push(report);
                if let Some(b) = backend {
                    self.connections.insert(server, (generation, Connection::Stdio(b)));
                }
            }
            Action::ConnectHttp { server, generation, url, headers, legacy_sse } => {
                self.close_connection(&server);
                let mut target =
                    HttpTarget::for_action(self.gw.config(), server.clone(), generation, url, headers, legacy_sse);
                target.bearer = self.credentials.bearer(&server);
                let b = HttpBackend::connect(target, self.runtime.http_inputs(), self.runtime.spawner("http"));
                self.connections.insert(server, (generation, Connection::Http(b)));
            }
            Action::SendToBackend { server, generation, frame, request, headers } => {
                match self.connections.get_mut(&server) {
                    Some((g, Connection::Stdio(b))) if *g == generation => {
                        if self.burst && b.hold() {
                            self.held.push(server.clone());
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
            Action::SendToClient { session, frame, route } => self.runtime.deliver(session, route, frame, self.burst),
            Action::CloseClient { session } => self.runtime.close_client(session),
            Action::SealSession { session, facts } => self.runtime.seal_session(session, facts),
            Action::SessionState { session, state } => self.runtime.session_state(session, state),
            Action::StopAccepting => self.runtime.stop_accepting(),
            Action::EndClientStreams => self.runtime.end_client_streams(),
            Action::Authorize { server, step } => {
                tracing::debug!(server = %server, "credential: {step}");
                let (inputs, spawn) = (self.runtime.auth_inputs(), self.runtime.spawner("oauth"));
                self.credentials.execute(server, step, inputs, &spawn);
            }
            Action::Emit { event } => {
                log_event(&event);
                self.runtime.emit(event);
            }
        }
    }

    fn close_connection(&mut self, server: &str) {
        if let Some((_, connection)) = self.connections.remove(server) {
            connection.close();
        }
    }
}

#[cfg(test)]
mod tests;
