//! The gateway: composes the supervisors, the catalog, the router and the
//! sessions behind one `handle` / `poll_action` / `poll_timeout` surface. The
//! host contract (the run loop and the call-order rules) is in the crate docs.

mod access;
mod backend;
mod backend_frames;
mod backends;
mod call_queue;
mod calls;
mod client;
mod client_events;
mod continued;
mod cx;
mod discovery;
mod eras;
mod fingerprints;
mod lifecycle;
mod links;
mod lists;
mod origins;
mod own_tools;
mod param_headers;
mod recent;
mod replica;
mod router;
mod routing;
mod sessions;
mod stderr_tail;
mod streams;
mod tasks;

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::catalog::Catalog;
use crate::config::{Config, ConfigError, ServerConfig};
use crate::history::MinuteView;
use crate::io::{Action, AdminCommand, ClientRoute, Event, Generation, Input, RawId, ServerName, SessionId, Status};
use crate::metrics::BackendMetrics;
use crate::policy::{BreakerState, Failure};
use crate::protocol::{self, Era};
use crate::redact::Redactor;
use crate::rng::Rng;
use crate::supervisor::{Supervisor, Timer};
use crate::time::Instant;

use backend::Backend;
use calls::{Call, CallKind, ClientCall};
pub use recent::{LogLine, LogSource};
use router::{Router, RouterTimer};
use sessions::{SessionTimer, Sessions};

/// A host contract violation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostError {
    /// `now` was earlier than a previous `now`.
    TimeWentBackwards {
        /// The latest time seen.
        last: Instant,
        /// The time given.
        given: Instant,
    },
    /// An input named a generation the engine never issued.
    FutureGeneration {
        /// Backend.
        server: ServerName,
        /// The generation given.
        generation: Generation,
    },
    /// An admin command named a backend that does not exist.
    UnknownBackend {
        /// The name given.
        server: ServerName,
    },
    /// A reloaded configuration failed validation.
    InvalidConfig(ConfigError),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::TimeWentBackwards { last, given } => write!(f, "time went backwards: {given} < {last}"),
            HostError::FutureGeneration { server, generation } => {
                write!(f, "{server}: generation {generation} was never issued")
            }
            HostError::UnknownBackend { server } => write!(f, "unknown backend {server:?}"),
            HostError::InvalidConfig(e) => write!(f, "invalid config: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for HostError {}

/// A snapshot of one backend for status displays and admin tools. Its JSON
/// (serde) is the one shape `/status`, `tether status` and the `list_servers`
/// tool share: health as `ok`/`degraded`, the era as its revision.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BackendStatus {
    /// Backend name.
    pub server: String,
    /// Transport kind (`stdio`, `http`, `sse`).
    pub transport: &'static str,
    /// Lifecycle status.
    pub status: Status,
    /// Circuit breaker state, shown beside the status.
    pub breaker: BreakerState,
    /// Reconnect attempts since the last success.
    pub reconnect_attempt: u32,
    /// Milliseconds until the scheduled restart or reconnect, if any.
    pub next_retry_ms: Option<u64>,
    /// Health checks are failing (`"health": "degraded"`, else `"ok"`).
    #[serde(rename = "health", serialize_with = "health_text")]
    pub health_degraded: bool,
    /// Crashes within the crash window.
    pub crashes_in_window: u8,
    /// Tools in the catalog (visible or not).
    pub tools: u32,
    /// Estimated tokens of those tools.
    pub estimated_tokens: u32,
    /// Last error or status message.
    pub last_error: Option<String>,
    /// Current connection generation (not shown: it means nothing to a person).
    #[serde(skip)]
    pub generation: Generation,
    /// Protocol era of the backend, shown as its revision.
    #[serde(serialize_with = "era_revision")]
    pub era: Era,
    /// How long it has been online without a break (ms); `None` when not online.
    pub uptime_ms: Option<u64>,
    /// Where a person logs in, while the backend waits for one (`requires_reauth`
    /// with a login prepared): status displays show it as a link.
    pub login_url: Option<String>,
    /// Why its catalog is not all it listed (a limit cut it), while that holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog_note: Option<String>,
}

impl BackendStatus {
    /// The status of backend `name` at `now`, its catalog's counts from `catalog`.
    pub(in crate::gateway) fn of(name: &str, b: &Backend, catalog: &Catalog, now: Instant) -> BackendStatus {
        let cat = catalog.backend(name);
        BackendStatus {
            server: name.to_string(),
            transport: b.config.transport.kind(),
            status: b.sup.status(),
            breaker: b.sup.breaker.state(now),
            reconnect_attempt: b.sup.reconnect_attempt(),
            next_retry_ms: b.sup.timer(Timer::Retry).map(|at| at.saturating_since(now).as_millis()),
            health_degraded: b.sup.health.is_degraded(),
            crashes_in_window: b.sup.crashes.count(now),
            tools: cat.map_or(0, |c| c.tool_count()),
            estimated_tokens: cat.map_or(0, |c| c.estimated_tokens()),
            // Idle (dormant) is no failure: its message ("idle") is no error.
            last_error: b.sup.message().filter(|_| b.sup.status() != Status::Dormant).map(ToString::to_string),
            generation: b.sup.generation(),
            era: b.era,
            uptime_ms: b.online_since.map(|at| now.saturating_since(at).as_millis()),
            login_url: (b.sup.status() == Status::RequiresReauth)
                .then(|| b.credential.as_ref().and_then(|c| c.login_url()).map(ToString::to_string))
                .flatten(),
            catalog_note: b.catalog_cut.clone(),
        }
    }

    /// The backend as status displays show it: `/status`, `tether status` and
    /// the `list_servers` tool share this shape (health as `ok`/`degraded`, the
    /// era as its revision).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

fn health_text<S: serde::Serializer>(degraded: &bool, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(if *degraded { "degraded" } else { "ok" })
}

fn era_revision<S: serde::Serializer>(era: &Era, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(era.revision())
}

/// The gateway engine. See the module docs for the host contract. A clone is a
/// snapshot: fed the same inputs, it does what the original would (the fuzz
/// drivers fork a booted engine instead of booting one per input).
#[derive(Clone)]
pub struct Gateway {
    config: Config,
    rng: Rng,
    /// Task ids and continuations: unpredictable from those already handed out.
    ids: crate::secret_ids::SecretIds,
    now: Instant,
    backends: backends::Backends,
    catalog: Catalog,
    /// Secrets of the current config, removed from events and error messages.
    redactor: Redactor,
    /// Client sessions.
    sessions: Sessions,
    /// Open requests between clients and backends.
    router: Router,
    /// The level the last `logging/setLevel` asked for: stateless backends get it
    /// on every request instead.
    log_level: Option<String>,
    /// Fingerprints of the lists clients see.
    fingerprints: fingerprints::Fingerprints,
    /// Last generation of each removed backend, so a backend added back under the
    /// same name never reuses a generation a late report could still name.
    retired_generations: BTreeMap<String, Generation>,
    /// The last events (for the `server_events` tool) and each backend's share
    /// of event notifications to clients.
    notices: client_events::Notices,
    /// Tasks tether runs for clients (gateway-side tasks).
    tasks: tasks::TaskStore,
    /// Calls crossing between eras that wait for a client's input.
    eras: eras::EraBridge,
    /// The wall clock as the host last told it.
    wall_clock: crate::time::WallClock,
    /// A drain under way (a replica asked to stop).
    drain: Option<replica::Drain>,
    actions: VecDeque<Action>,
    /// The backend side's sends and announcements, emptied after each of its calls.
    outbox: cx::Outbox,
}

impl Gateway {
    /// A gateway for `config`, with jitter drawn from `seed`, at time `now`.
    /// Eager backends are started at once: drain the actions.
    pub fn new(config: Config, seed: u64, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut gw = Gateway {
            catalog: Catalog::new(&config.separator),
            redactor: Redactor::default(),
            config: Config::default(),
            rng: Rng::new(seed),
            ids: crate::secret_ids::SecretIds::from_seed(seed),
            now,
            backends: backends::Backends::default(),
            sessions: Sessions::default(),
            router: Router::default(),
            log_level: None,
            fingerprints: fingerprints::Fingerprints::default(),
            retired_generations: BTreeMap::new(),
            notices: client_events::Notices::default(),
            tasks: tasks::TaskStore::default(),
            eras: eras::EraBridge::default(),
            wall_clock: crate::time::WallClock::default(),
            drain: None,
            actions: VecDeque::new(),
            outbox: cx::Outbox::default(),
        };
        gw.apply_config(config);
        gw.settle();
        Ok(gw)
    }

    /// Keys the ids that work as capabilities (task ids, `requestState`) with
    /// 256 bits the host drew from the operating system. Without it they follow
    /// the seed, which suits tests but not a listener others can reach. Call it
    /// before the first input; a trace records the key.
    pub fn set_id_key(&mut self, key: [u8; 32]) {
        self.ids = self.ids.rekeyed(key);
    }

    /// The keys every replica of a cluster shares for the `requestState`
    /// tokens tether issues (the first signs; all check), so that a replica
    /// recognises another's token. Without them a token checks in this process
    /// alone. A trace records them, as it does the id key.
    pub fn set_continuation_keys(&mut self, keys: &[(u8, [u8; 32])]) {
        self.ids = self.ids.clone().with_cluster_keys(keys);
    }

    /// Feeds one input at time `now`.
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<(), HostError> {
        if now < self.now {
            return Err(HostError::TimeWentBackwards { last: self.now, given: now });
        }
        self.now = now;
        match input {
            Input::ClientConnected { session, expires } => self.client_connected(session, expires),
            Input::ClientFrame { session, frame, param_headers } => {
                self.client_frame(session, &frame, param_headers.as_ref())
            }
            Input::ClientAccess { session, scopes, principal } => self.client_access(session, scopes, principal),
            Input::ClientClosed { session } => self.client_closed(session),
            Input::ClientAdopted { session, facts, state } => self.client_adopted(session, facts, state),
            Input::ClientStreamLost { session, request } => self.client_stream_lost(session, request),
            Input::Drain => self.drain(),
            Input::BackendStarted { server, generation, .. } => {
                self.backends.current(&server, generation)?;
            }
            Input::BackendFrame { server, generation, frame } => {
                if self.backends.current(&server, generation)? {
                    self.backend_frame(&server, &frame);
                }
            }
            Input::BackendEvent { server, generation, stream, event_id, frame } => {
                if self.backends.current(&server, generation)? {
                    self.backend_event(&server, stream, event_id.as_deref(), &frame);
                }
            }
            Input::StreamEnded { server, generation, stream, last_event_id, retry_ms, events, mut failure } => {
                if self.backends.current(&server, generation)? {
                    if let Some(Failure::Spawn { message } | Failure::Other { message }) = &mut failure {
                        self.redactor.redact_in_place(message);
                    }
                    let end = streams::StreamEnd { last_event_id, retry_ms, events, failure };
                    self.parts(|p, cx| p.backends.stream_ended(cx, &server, stream, end));
                }
            }
            Input::BackendStderr { server, generation, line } => {
                if self.backends.current(&server, generation)? {
                    if let Some(b) = self.backends.get_mut(&server) {
                        let line = b.push_stderr(self.redactor.redact(&line).into_owned());
                        b.recent.push(self.now, LogSource::Stderr, line);
                    }
                }
            }
            Input::BackendExited { server, generation, code } => {
                if self.backends.current(&server, generation)? {
                    self.parts(|p, cx| p.backends.connection_lost(cx, &server, Failure::Exited { code }));
                }
            }
            Input::BackendFailed { server, generation, request, mut failure } => {
                if self.backends.current(&server, generation)? {
                    if let Failure::Spawn { message } | Failure::Other { message } = &mut failure {
                        self.redactor.redact_in_place(message);
                    }
                    self.parts(|p, cx| p.backends.backend_failed(cx, &server, request, failure));
                }
            }
            Input::Tick => {}
            Input::WallClock { unix_ms } => self.wall_clock.set(now, unix_ms),
            Input::ConfigReloaded { config } => {
                config.validate().map_err(HostError::InvalidConfig)?;
                self.apply_config(config);
            }
            Input::Credential { server, update } => {
                self.parts(|p, cx| p.backends.credential_update(cx, &server, update))?
            }
            Input::Admin { command } => self.admin(command)?,
        }
        self.fire_timers();
        self.settle();
        Ok(())
    }

    /// The next thing for the host to do, in order.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When the host must call `handle(now, Input::Tick)` next, if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers().map(|(at, _)| at).min()
    }

    /// Every deadline of the engine, in the order they fire when several are due:
    /// the one list both [`Gateway::poll_timeout`] and firing read.
    fn timers(&self) -> impl Iterator<Item = (Instant, Deadline<'_>)> {
        let backends = self.backends.iter().filter_map(|(name, b)| Some((b.poll_timeout()?, Deadline::Backend(name))));
        let router = self.router.timers().map(|(at, t)| (at, Deadline::Router(t)));
        let eras = (!self.eras.is_empty()).then(|| self.eras.timers().map(|(at, t)| (at, Deadline::Eras(t))));
        let sessions =
            self.sessions.timers(self.config.limits.idle_session_ms).map(|(at, t)| (at, Deadline::Session(t)));
        let tasks = self.tasks.next_expiry().map(|(at, id)| (at, Deadline::Task(id)));
        let drain = self.drain_timer().map(|(at, t)| (at, Deadline::Drain(t)));
        backends.chain(router).chain(eras.into_iter().flatten()).chain(sessions).chain(tasks).chain(drain)
    }

    /// The time of the latest input.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The secrets of the configuration in force, for hosts that write text of their own.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// The catalog of every backend (an internal layer: behind `unstable`).
    #[cfg(feature = "unstable")]
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Status of every backend, by name.
    pub fn statuses(&self) -> Vec<BackendStatus> {
        self.backends.iter().map(|(name, b)| BackendStatus::of(name, b, &self.catalog, self.now)).collect()
    }

    /// Status of one backend.
    pub fn status(&self, server: &str) -> Option<BackendStatus> {
        self.backends.get(server).map(|b| BackendStatus::of(server, b, &self.catalog, self.now))
    }

    /// The last `lines` of a backend's recent log (its stderr and events,
    /// oldest first, across restarts), for an operator asking what happened;
    /// `None` for a backend tether does not have.
    pub fn recent_log(&self, server: &str, lines: usize) -> Option<Vec<LogLine>> {
        self.backends.get(server).map(|b| b.recent.last(lines))
    }

    /// The protocol era of a client session.
    pub fn session_era(&self, session: SessionId) -> Option<Era> {
        self.sessions.open.get(&session).map(|s| s.era)
    }

    /// Requests in flight to backends (client calls and the gateway's own).
    pub fn in_flight(&self) -> usize {
        self.router.calls.len()
    }

    /// Client requests not answered yet, over every session.
    pub fn client_requests_in_flight(&self) -> usize {
        self.sessions.open.values().map(|s| s.in_flight.len()).sum()
    }

    /// Client sessions open now.
    pub fn session_count(&self) -> usize {
        self.sessions.open.len()
    }

    /// Calls, latencies, restarts and breaker transitions of one backend.
    pub fn metrics(&self, server: &str) -> Option<&BackendMetrics> {
        self.backends.get(server).map(|b| &b.metrics)
    }

    /// A backend's last hour, minute by minute (conditions, calls, p50/p99), for the
    /// status page's timeline; `None` for a backend tether does not have.
    pub fn history(&self, server: &str) -> Option<Vec<MinuteView>> {
        self.backends.get(server).map(|b| b.history.view(self.now))
    }

    /// The `vital` backends not online now: tether is not ready while there are any.
    pub fn vital_backends_down(&self) -> Vec<ServerName> {
        self.backends
            .iter()
            .filter(|(_, b)| b.config.vital && !b.config.disabled && b.sup.status() != Status::Online)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Checks every bound and cross-reference the engine promises. For tests and
    /// fuzzing (behind `fuzzing`); cheap enough to run after every input.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn check_invariants(&self) -> Result<(), String> {
        self.invariants()
    }

    /// [`Gateway::check_invariants`]'s work, compiled in every build so it keeps
    /// compiling (and its helpers with it) when nothing calls it.
    #[cfg_attr(not(any(test, feature = "fuzzing")), allow(dead_code))]
    fn invariants(&self) -> Result<(), String> {
        let limits = &self.config.limits;
        let internal_calls = self.backends.len() * backend::INTERNAL_CALLS;
        self.router.check_invariants(limits, internal_calls, |round| self.eras.has_round(round))?;
        let waits = |call: u64, state: &str| {
            self.router
                .calls
                .get(&call)
                .is_some_and(|c| matches!(&c.kind, CallKind::Client(cc) if cc.awaiting_input.as_deref() == Some(state)))
        };
        let limit = limits.max_pending_server_requests as usize;
        self.eras.check_invariants(limit, waits, |session| self.sessions.open.contains_key(&session))?;
        self.sessions.check_invariants(limits)?;
        self.catalog.check_invariants()?;
        let open = |session: &SessionId| self.sessions.open.contains_key(session);
        for (id, call) in &self.router.calls {
            let Some(b) = self.backends.get(&call.server) else {
                return Err(format!("call {id} names a removed backend {}", call.server));
            };
            if call.generation != b.sup.generation() || !b.sup.is_connected() {
                return Err(format!("call {id} sits on a stale connection of {}", call.server));
            }
            if let CallKind::Client(c) = &call.kind {
                if !open(&c.session) && c.awaiting_input.is_none() && c.task.is_none() {
                    return Err(format!("call {id} is owed to a closed session"));
                }
            }
        }
        for (name, b) in self.backends.iter() {
            // The breaker lets one probe through when half-open, and only then.
            let probes = self
                .router
                .calls
                .values()
                .filter(|c| c.server == *name && matches!(&c.kind, CallKind::Client(cc) if cc.probe))
                .count()
                + b.queue.iter().filter(|q| q.call.probe).count();
            if probes > 1 {
                return Err(format!("{name}: {probes} half-open probes at once"));
            }
            if b.queue.len() > limits.max_queued_per_backend as usize {
                return Err(format!("{name}: queue over its bound"));
            }
            if b.queue.iter().any(|q| !open(&q.call.session) && q.call.task.is_none()) {
                return Err(format!("{name}: queued call owed to a closed session"));
            }
            b.sup.check_invariants(self.now).map_err(|e| format!("{name}: {e}"))?;
            let max_ended = limits.max_in_flight as usize + backend::INTERNAL_CALLS + 1;
            b.streams.check_invariants(max_ended).map_err(|e| format!("{name}: {e}"))?;
            if b.stderr.len() > stderr_tail::STDERR_TAIL {
                return Err(format!("{name}: stderr tail unbounded"));
            }
            b.recent.check_invariants().map_err(|e| format!("{name}: {e}"))?;
        }
        if self.router.server_requests.values().any(|r| !open(&r.session)) {
            return Err("server request owed to a closed session".into());
        }
        self.tasks.check_invariants(&self.config.tasks)?;
        for (id, call) in &self.router.calls {
            if let CallKind::Client(ClientCall { task: Some(task), .. }) = &call.kind {
                if self.tasks.tasks.get(task).map_or(true, |t| !t.is_running()) {
                    return Err(format!("call {id} runs for task {task}, which is gone or finished"));
                }
            }
        }
        Ok(())
    }

    // ----- plumbing shared by the submodules -----

    fn push(&mut self, action: Action) {
        self.actions.push_back(action);
    }

    fn emit(&mut self, mut event: Event) {
        self.backends.note_event(&mut event, &self.redactor, self.now);
        let to = client_events::Audience { config: &self.config, sessions: &self.sessions, catalog: &self.catalog };
        self.notices.announce(event, self.now, to, &mut self.actions);
    }

    /// A frame that answers the client's request `id` (raw JSON).
    fn reply_to_client(&mut self, session: SessionId, id: &str, frame: String) {
        self.sessions.touch(session, self.now);
        let stateless = self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless);
        let frame = if stateless { stateless_frame(frame) } else { frame };
        self.sessions.answered(session);
        self.push(Action::SendToClient { session, frame, route: ClientRoute::Reply(RawId::new(id)) });
    }

    /// Runs every timer that is due.
    fn fire_timers(&mut self) {
        // Bounded: each pass consumes at least one due timer or stops.
        for _ in 0..10_000 {
            let now = self.now;
            let Some(due) = self.timers().find(|(at, _)| *at <= now).map(|(_, timer)| timer.to_owned()) else {
                break;
            };
            match due {
                Due::Backend(name) => self.parts(|p, cx| p.backends.backend_timer(cx, &name)),
                Due::Call(id) => self.parts(|p, cx| p.backends.call_timed_out(cx, id)),
                Due::ParkedLists => self.answer_parked_lists(true),
                Due::Input(state) => self.parts(|p, cx| p.eras.input_expired(p.backends, cx, &state)),
                Due::Round(round) => self.parts(|p, cx| p.eras.input_round_expired(cx, round)),
                Due::TaskWindow(call) => self.parts(|p, cx| p.tasks.task_window_passed(cx, call)),
                Due::Gathered(call) => self.parts(|p, cx| p.eras.gathered(p.backends, cx, call)),
                Due::Task(task) => self.parts(|p, cx| p.tasks.task_expired(p.backends, p.eras, cx, &task)),
                // `settle` sends the held `list_changed` if it is still owed.
                Due::Session(SessionTimer::ListChangedHeld(session)) => {
                    if let Some(s) = self.sessions.open.get_mut(&session) {
                        s.list_changed_held = false;
                    }
                }
                Due::Drain(timer) => self.drain_timer_fired(timer),
                Due::Session(SessionTimer::Idle(session)) => {
                    self.client_closed(session);
                    self.push(Action::CloseClient { session });
                }
            }
        }
    }

    /// After any change: announce status transitions, answer parked lists,
    /// notify clients whose visible lists changed.
    fn settle(&mut self) {
        let mut changed = Vec::new();
        for (name, b) in self.backends.iter_mut() {
            changed.extend(b.sup.drain_transitions().map(|t| t.into_event(name.clone())));
        }
        for event in changed {
            self.emit(event);
        }
        self.answer_parked_lists(false);
        self.announce_list_changes();
        for session in core::mem::take(&mut self.sessions.closing) {
            if self.sessions.open.contains_key(&session) {
                self.client_closed(session);
                self.push(Action::CloseClient { session });
            }
        }
        self.parts(|p, cx| p.eras.prune_pending_inputs(p.backends, cx));
        self.drain_step();
    }

    fn admin(&mut self, command: AdminCommand) -> Result<(), HostError> {
        let server = match &command {
            AdminCommand::Reconnect { server } | AdminCommand::Restart { server } | AdminCommand::Remove { server } => {
                server.clone()
            }
        };
        if !self.backends.contains_key(&server) {
            return Err(HostError::UnknownBackend { server });
        }
        match command {
            AdminCommand::Reconnect { .. } => self.parts(|p, cx| p.backends.reconnect_now(cx, &server, false)),
            AdminCommand::Restart { .. } => self.parts(|p, cx| p.backends.reconnect_now(cx, &server, true)),
            AdminCommand::Remove { .. } => self.remove_backend(&server),
        }
        Ok(())
    }

    /// Applies a configuration differentially: only added or changed backends
    /// (re)start; removed ones close.
    fn apply_config(&mut self, config: Config) {
        let old = core::mem::replace(&mut self.config, config);
        self.redactor = Redactor::from_config(&self.config);
        self.parts(|p, cx| p.tasks.fit_task_store(p.backends, p.eras, cx));
        if old.separator != self.config.separator {
            let names: Vec<ServerName> = self.backends.keys().cloned().collect();
            let mut fresh = Catalog::new(&self.config.separator);
            for name in &names {
                fresh.register(name, self.backends[name].config.prefixed);
                fresh.select(name, &self.backends[name].config.selection);
            }
            self.catalog = fresh;
            for name in &names {
                if let Some(b) = self.backends.get_mut(name) {
                    b.catalog_discovered = false;
                }
            }
        }
        let removed: Vec<ServerName> =
            self.backends.keys().filter(|n| !self.config.servers.contains_key(&***n)).cloned().collect();
        for name in removed {
            self.remove_backend(&name);
        }
        let servers: Vec<(String, ServerConfig)> =
            self.config.servers.iter().map(|(n, s)| (n.clone(), s.clone())).collect();
        for (name, server) in servers {
            let policy = self.config.policy_for(&name);
            match self.backends.get_mut(name.as_str()) {
                None => {
                    self.catalog.register(&name, server.prefixed);
                    self.catalog.select(&name, &server.selection);
                    let backoff = policy.reconnect_backoff();
                    let mut sup = Supervisor::new(server.transport.is_stdio(), server.vital, policy, self.now);
                    if let Some(last) = self.retired_generations.remove(&name) {
                        sup.continue_generations(last);
                    }
                    let eager = !server.lazy && !server.disabled;
                    let credential = server.manages_credential().then(|| crate::credential::Credential::new(backoff));
                    let mut backend = Backend::new(server, sup);
                    backend.credential = credential;
                    self.backends.insert(name.as_str().into(), backend);
                    if eager {
                        self.parts(|p, cx| p.backends.connect(cx, &name));
                    }
                }
                Some(b) => {
                    let transport_changed = b.config.transport != server.transport;
                    let was_disabled = b.config.disabled;
                    let mended = b.config.broken != server.broken;
                    if !server.manages_credential() {
                        b.credential = None;
                    } else if b.credential.is_none() {
                        b.credential = Some(crate::credential::Credential::new(policy.reconnect_backoff()));
                    }
                    b.sup.set_policy(policy, server.vital);
                    let prefixed = server.prefixed;
                    b.config = server;
                    self.catalog.register(&name, prefixed);
                    self.catalog.select(&name, &self.backends[name.as_str()].config.selection);
                    let b = &self.backends[name.as_str()];
                    if b.config.disabled {
                        if b.sup.is_connected() || !was_disabled {
                            self.parts(|p, cx| {
                                p.backends.close_backend(
                                    cx,
                                    &name,
                                    Status::Disconnected,
                                    Some("disabled by config".into()),
                                )
                            });
                        }
                    } else if transport_changed
                        || was_disabled
                        || mended
                        || !self.backends[name.as_str()].catalog_discovered
                    {
                        self.parts(|p, cx| p.backends.restart_for_config(cx, &name));
                    }
                }
            }
        }
        if old.scopes != self.config.scopes {
            // What scopes grant changed: every session holding some sees anew.
            let holders: Vec<SessionId> =
                self.sessions.open.iter().filter(|(_, s)| s.scopes.is_some()).map(|(id, _)| *id).collect();
            self.access_changed(&holders);
        }
    }
}

/// A deadline of the engine (borrowed from the table that holds it).
#[derive(Clone, Copy, Debug)]
enum Deadline<'a> {
    /// A backend's supervisor timer (restart, reconnect, health, idle, credential).
    Backend(&'a ServerName),
    /// A router deadline.
    Router(RouterTimer),
    /// An era bridge deadline.
    Eras(eras::BridgeTimer<'a>),
    /// A session deadline.
    Session(SessionTimer),
    /// A task expires (by id).
    Task(&'a str),
    /// The next step of a drain.
    Drain(replica::DrainTimer),
}

/// A [`Deadline`] that came due, owned so that firing it may change the tables.
enum Due {
    Backend(ServerName),
    Call(u64),
    ParkedLists,
    Input(String),
    Round(u64),
    TaskWindow(u64),
    Gathered(u64),
    Session(SessionTimer),
    Task(String),
    Drain(replica::DrainTimer),
}

impl Deadline<'_> {
    fn to_owned(self) -> Due {
        match self {
            Deadline::Backend(name) => Due::Backend(name.clone()),
            Deadline::Router(RouterTimer::Call(id)) => Due::Call(id),
            Deadline::Router(RouterTimer::ParkedLists) => Due::ParkedLists,
            Deadline::Eras(eras::BridgeTimer::Input(state)) => Due::Input(state.into()),
            Deadline::Eras(eras::BridgeTimer::Round(id)) => Due::Round(id),
            Deadline::Router(RouterTimer::TaskWindow(id)) => Due::TaskWindow(id),
            Deadline::Eras(eras::BridgeTimer::Gathered(id)) => Due::Gathered(id),
            Deadline::Session(t) => Due::Session(t),
            Deadline::Task(id) => Due::Task(id.into()),
            Deadline::Drain(t) => Due::Drain(t),
        }
    }
}

/// An answer for a stateless-era client: a result gets `resultType` (required in
/// that revision; forwarded results from handshake-era backends lack it).
pub(super) fn stateless_frame(frame: String) -> String {
    let Ok(protocol::Message::Response { id, result }) = protocol::parse(&frame) else { return frame };
    match protocol::stateless_result(result, "") {
        Some(result) => protocol::response(id, &result),
        None => frame,
    }
}
