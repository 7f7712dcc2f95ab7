//! [`Host`]: the gateway on plain threads, for embedding.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tether_core::{AdminCommand, BackendStatus, ClientRoute, Config, ConfigError, Event, Gateway, Input, SessionId};
use tether_host::clock::Clock;
use tether_host::recorder::{Recorder, TraceSecrets};

use crate::client::{Client, Sessions};
use crate::engine::{ClientSink, Engine, EngineThreads, EventSink};

/// How to start a [`Host`]; see [`Host::builder`].
pub struct HostBuilder {
    config: Config,
    seed: Option<u64>,
    record: Option<File>,
    on_event: Option<EventSink>,
    credentials: Option<tether_host::credentials::Credentials>,
}

impl HostBuilder {
    /// Keeps remote backends' OAuth credentials in `credentials` (without it, a
    /// backend that needs a login stays `requires_reauth`).
    pub fn credentials(mut self, credentials: tether_host::credentials::Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Seeds the jitter of backoff delays (random when not set).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Records every input to `file` as a trace `tether replay` can replay.
    pub fn record(mut self, file: File) -> Self {
        self.record = Some(file);
        self
    }

    /// Calls `f` with every event (status changes, restarts, breaker trips...).
    /// It runs with the engine locked, on whichever thread fed the input: keep it
    /// short, hand work elsewhere, and never call back into the host from it.
    pub fn on_event(mut self, f: impl FnMut(&Event) + Send + 'static) -> Self {
        self.on_event = Some(Box::new(f));
        self
    }

    /// Validates the configuration, starts the backends and the timer.
    pub fn start(self) -> Result<Host, ConfigError> {
        let seed = self.seed.unwrap_or_else(tether_host::entropy::seed);
        let clock = Clock::start();
        let start = clock.now();
        let mut gw = Gateway::new(self.config.clone(), seed, start)?;
        let id_key = tether_host::entropy::id_key();
        match &id_key {
            Some(key) => gw.set_id_key(*key),
            None => tracing::warn!("no randomness from the operating system: task ids follow the seed"),
        }
        let record = self.record.and_then(|file| {
            Recorder::start(
                file,
                &self.config,
                TraceSecrets { seed, id_key: id_key.as_ref(), continuation_keys: &[] },
                start,
                gw.redactor(),
            )
            .map_err(|e| tracing::error!("cannot record the trace: {e}"))
            .ok()
        });
        let credentials = self.credentials.unwrap_or_else(tether_host::credentials::Credentials::none);
        let (engine, threads) =
            Engine::start(gw, clock, record, self.on_event, credentials).expect("the host's threads start");
        engine.feed(tether_host::clock::Clock::wall_clock());
        Ok(Host { engine, threads: Some(threads), next_session: AtomicU64::new(1) })
    }
}

/// A cheap, cloneable way to feed a running [`Host`] from other threads (a
/// stdin reader, a signal handler). Sends are ignored once the host has stopped.
#[derive(Clone)]
pub struct Handle {
    engine: Arc<Engine>,
}

impl Handle {
    /// One JSON-RPC frame from the client of `session`.
    pub fn send(&self, session: SessionId, frame: String) {
        self.input(Input::ClientFrame { session, frame, param_headers: None });
    }

    /// The client of `session` went away: its calls are cancelled.
    pub fn close(&self, session: SessionId) {
        self.input(Input::ClientClosed { session });
    }

    /// An operator command: reconnect, restart or remove a backend.
    pub fn admin(&self, command: AdminCommand) {
        self.input(Input::Admin { command });
    }

    /// Applies a new configuration (backends added, removed, restarted as needed).
    pub fn reload(&self, config: Config) {
        self.input(Input::ConfigReloaded { config });
    }

    /// Feeds any input (for hosts that speak the core's language directly).
    pub fn input(&self, input: Input) {
        self.engine.feed(input);
    }
}

/// The control channel's answers (see [`tether_host::control`]), from the engine
/// under its lock, on the control channel's threads.
impl tether_host::control::ControlTarget for Handle {
    fn status(&self) -> Result<serde_json::Value, String> {
        Ok(self.engine.status_document())
    }

    fn admin(&self, command: AdminCommand) -> Result<(), String> {
        let server = match &command {
            AdminCommand::Reconnect { server } | AdminCommand::Restart { server } | AdminCommand::Remove { server } => {
                server
            }
        };
        if !self.engine.statuses().iter().any(|s| s.server == **server) {
            return Err(format!("unknown backend: {server}"));
        }
        self.admin(command);
        Ok(())
    }

    fn logs(&self, server: &str, lines: usize) -> Result<Vec<tether_core::LogLine>, String> {
        self.engine.recent_log(server, lines).ok_or_else(|| format!("unknown backend: {server}"))
    }
}

/// A running gateway on plain threads: the engine behind a lock that the thread
/// with an input takes, a reader thread per backend stream, a timer thread, and
/// no async runtime. Dropping it shuts it down (see [`Host::shutdown`]).
pub struct Host {
    engine: Arc<Engine>,
    threads: Option<EngineThreads>,
    next_session: AtomicU64,
}

impl Host {
    /// A builder for a host serving `config`.
    pub fn builder(config: Config) -> HostBuilder {
        HostBuilder { config, seed: None, record: None, on_event: None, credentials: None }
    }

    /// Starts a host for `config` with default settings.
    pub fn start(config: Config) -> Result<Host, ConfigError> {
        Host::builder(config).start()
    }

    /// Opens a client session whose frames (answers, notifications, requests from
    /// backends) are passed to `sink`, with the engine locked, on whichever thread
    /// fed the input: hand them on, never call back into the host from `sink`.
    /// Feed the session with [`Host::send`].
    pub fn attach(&self, sink: impl FnMut(String, &ClientRoute) + Send + 'static) -> SessionId {
        let session = SessionId(self.next_session.fetch_add(1, Ordering::Relaxed));
        let sink: ClientSink = Box::new(sink);
        self.engine.attach(session, sink, None);
        session
    }

    /// [`Host::attach`] for a sink that queues what it cannot deliver at once
    /// and counts it in `outflow` (a [`crate::PipeWriter`]'s backlog, say):
    /// backend readers wait while `outflow` is full, so a client that reads
    /// slowly slows the backends that flood it instead of growing the queue.
    pub fn attach_bounded(
        &self,
        sink: impl FnMut(String, &ClientRoute) + Send + 'static,
        outflow: std::sync::Arc<tether_host::backlog::Backlog>,
    ) -> SessionId {
        let session = SessionId(self.next_session.fetch_add(1, Ordering::Relaxed));
        let sink: ClientSink = Box::new(sink);
        self.engine.attach(session, sink, Some(outflow));
        session
    }

    /// A handle for feeding this host from other threads.
    pub fn handle(&self) -> Handle {
        Handle { engine: self.engine.clone() }
    }

    /// One JSON-RPC frame from the client of `session`.
    pub fn send(&self, session: SessionId, frame: String) {
        self.input(Input::ClientFrame { session, frame, param_headers: None });
    }

    /// The client of `session` went away: its calls are cancelled.
    pub fn close(&self, session: SessionId) {
        self.input(Input::ClientClosed { session });
    }

    /// A typed client on its own session, past the `initialize` handshake.
    pub fn client(&self) -> Result<Client<'_>, String> {
        Client::connect(self)
    }

    /// An operator command: reconnect, restart or remove a backend.
    pub fn admin(&self, command: AdminCommand) {
        self.input(Input::Admin { command });
    }

    /// Applies a new configuration (backends added, removed, restarted as needed).
    pub fn reload(&self, config: Config) {
        self.input(Input::ConfigReloaded { config });
    }

    /// Every backend's status, as the core sees it now.
    pub fn statuses(&self) -> Vec<BackendStatus> {
        self.engine.statuses()
    }

    /// Feeds any input (for hosts that speak the core's language directly).
    pub fn input(&self, input: Input) {
        self.engine.feed(input);
    }

    /// Stops every backend (stdin closed, then SIGTERM, then SIGKILL, a second
    /// apart), deletes HTTP sessions, and joins the host's threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(threads) = self.threads.take() {
            self.engine.shutdown(threads);
        }
    }
}

impl Sessions for Host {
    fn open(&self, sink: ClientSink) -> SessionId {
        self.attach(sink)
    }

    fn send(&self, session: SessionId, frame: String) {
        Host::send(self, session, frame);
    }

    fn close(&self, session: SessionId) {
        Host::close(self, session);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop();
    }
}
