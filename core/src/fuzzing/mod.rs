//! Byte-driven drivers that throw arbitrary input at a [`Gateway`] and check every
//! promise the engine makes. The same drivers run under cargo-fuzz (`fuzz/`), over
//! the committed corpora in `cargo test`, and from a PRNG in the stress test.
//!
//! Promises checked:
//! - no panic, whatever the input;
//! - [`Gateway::check_invariants`] after every input: bounded tables and queues,
//!   no call on a stale connection, nothing owed to a closed session, catalog
//!   names valid, unique and round-tripping, breaker, crash window and backoff
//!   within their bounds;
//! - actions only name the newest connection of a backend;
//! - a backend that went `permanently_failed` or `requires_reauth` is not started
//!   again without an admin command or a config reload, or (an OAuth-managed one)
//!   a new credential; one whose connection was refused for its credential is not
//!   connected again before a credential arrives;
//! - a backend's request that arrives on the stream of a call whose client still
//!   waits for it is forwarded to that client, never to another session;
//! - once no client is owed an answer and a margin past the longest request
//!   deadline has passed, every client request was answered exactly once
//!   (unless its client cancelled it or went away).
//!
//! When the seed byte's high bit is set, backend `web` is OAuth-managed and the
//! driver plays its host faithfully: it answers the credential steps the engine
//! asks for (in any order, with any outcome), and refuses requests with 401 or
//! 403 `insufficient_scope`. Then also checked: at most one refresh (or obtain) in
//! flight per backend; after `invalid_grant` a discard before anything else is
//! sent, and no refresh until a new token arrives.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::value::RawValue;
use serde_json::{json, Value};

mod peek;
mod policy_watch;
mod traffic;
use peek::Envelope;
use policy_watch::PolicyWatch;
pub use traffic::{traffic, traffic_coverage};

use crate::codec::{LineDecoder, SseDecoder};
use crate::config::{Config, ServerConfig};
use crate::credential::{AuthStep, Challenge, CredentialFailure, CredentialUpdate};
use crate::gateway::Gateway;
use crate::io::{Action, AdminCommand, ClientRoute, Event, Generation, Input, SessionId, Status, StreamRef};
use crate::policy::Failure;
use crate::protocol::{self, Message};
use crate::time::Instant;

/// A broken promise, with a description of what and when.
pub type Violation = String;

/// Reads choices from fuzzer bytes; yields zeros once exhausted.
pub struct Choices<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Choices<'a> {
    /// Choices drawn from `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Choices { data, pos: 0 }
    }

    /// Whether every byte has been used.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The next byte (0 when exhausted).
    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    /// A value in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }

    /// Up to `max` raw bytes.
    pub fn slice(&mut self, max: usize) -> &'a [u8] {
        let len = self.below(max + 1);
        let start = self.pos.min(self.data.len());
        let end = (start + len).min(self.data.len());
        self.pos = end;
        &self.data[start..end]
    }
}

/// The backends every driver runs: two stdio (one vital), one HTTP.
pub const SERVERS: [&str; 3] = ["a", "b", "web"];

/// The configuration the drivers start from: small limits, so bounds are reached.
pub fn driver_config(variant: u8) -> Config {
    let mut web = ServerConfig::http("https://web.example/mcp");
    web.policy.call_retry_delays_ms = Some(alloc::vec![100, 200]);
    let mut b = ServerConfig::stdio("b-server", &[]);
    b.vital = variant & 1 == 1;
    let mut a = ServerConfig::stdio("a-server", &["--x"]);
    if variant & 2 == 2 {
        a.transport = crate::config::Transport::Stdio {
            command: "a-server".into(),
            args: alloc::vec!["--y".into()],
            env: BTreeMap::new(),
            cwd: None,
        };
    }
    a.prefixed = variant & 4 == 0;
    let mut config = Config::default().server("a", a).server("b", b).server("web", web);
    if variant & 8 == 8 {
        config.servers.remove("b");
    }
    // Stateless-era clients too (the first request of a session decides its era).
    config.stateless_clients = variant & 16 == 16;
    // tether's own tools: meta mode (bit 64), the admin tools in flat mode (bit 128).
    if variant & 64 == 64 {
        config.mode = crate::config::Mode::Meta;
    }
    config.admin_tools = variant & 128 == 128;
    // What OAuth scopes grant (session 3 holds some, see `open_sessions`).
    let grant = |servers: &[&str], tools: &[&str]| crate::access::ScopeGrant {
        servers: servers.iter().map(|s| (*s).into()).collect(),
        tools: tools.iter().map(|s| (*s).into()).collect(),
    };
    config.scopes.insert("sa".into(), grant(&["a"], &[]));
    config.scopes.insert("tb".into(), grant(&[], &["b__*"]));
    // Backend `a` speaks the stateless revision (see `Harness::good_answer`).
    config.limits.max_in_flight = 16;
    config.limits.max_queued_per_backend = 4;
    config.limits.max_in_flight_per_session = 8;
    config.limits.max_pending_server_requests = 2;
    config.limits.max_sessions = 3;
    config.limits.page_size = 2;
    config.limits.max_frame_bytes = 4096;
    config.policy.request_timeout_ms = 5_000;
    config.policy.request_timeout_max_ms = 20_000;
    config.policy.idle_timeout_ms = 30_000;
    config
}

/// `config` with backend `web` OAuth-managed, or not.
pub fn oauth_config(mut config: Config, oauth: bool) -> Config {
    if let Some(web) = config.servers.get_mut("web") {
        web.oauth = oauth;
    }
    config
}

/// A gateway under test plus what the checks need to remember. A clone is a
/// fork: the same engine state and the same memory of it.
#[derive(Clone)]
pub struct Harness {
    /// The engine.
    pub gw: Gateway,
    now: u64,
    /// The OAuth scopes of sessions that were given some (see [`crate::access`]).
    scopes: BTreeMap<u64, Vec<String>>,
    /// Newest generation seen in a spawn/connect action, per backend.
    gens: BTreeMap<crate::io::ServerName, Generation>,
    /// Requests sent to each backend on its newest generation and not yet answered by the driver.
    open: BTreeMap<crate::io::ServerName, Vec<(u64, String)>>,
    /// Requests the clients sent, per (session, raw id).
    asked: BTreeMap<(u64, String), u32>,
    /// Answers the clients got, per (session, raw id).
    answered: BTreeMap<(u64, String), u32>,
    /// Ids a client cancelled.
    cancelled: BTreeSet<(u64, String)>,
    /// Backends that gave up or need reauth, and may not be started by the engine alone.
    stopped: BTreeSet<crate::io::ServerName>,
    /// Server-to-client request ids the clients were sent.
    server_requests: Vec<(u64, u64)>,
    /// `input_required` answers the clients got: (session, requestState, keys).
    input_rounds: Vec<(u64, String, Vec<String>)>,
    /// Task ids the clients were given (the latest few).
    task_ids: Vec<String>,
    /// What this run reached.
    pub coverage: Coverage,
    /// Client `tools/call` requests not answered yet, by (session, raw id).
    calls_asked: BTreeSet<(u64, String)>,
    /// Backends started or connected at least once.
    started: BTreeSet<crate::io::ServerName>,
    /// When each stdio backend's live process exited (a crash, whatever else
    /// also counts), since its history was last cleared (an admin command, a
    /// reload): no restart may follow `crash_limit` of them within the window.
    crash_times: BTreeMap<crate::io::ServerName, Vec<u64>>,
    /// Backend `a` answers as a server of the stateless revision (variant bit 32).
    stateless_a: bool,
    next_id: u64,
    /// Backend `web` is OAuth-managed (the seed byte's high bit).
    oauth: bool,
    /// `web`'s SSE streams end and resume, and carry events with ids.
    streams: bool,
    /// Credential steps asked for and not answered yet, oldest first. A `Login`
    /// answered with `LoginPending` stays, waiting for the person.
    steps: Vec<(crate::io::ServerName, Step)>,
    /// Store reads asked for in the last input: answered at once, before anything
    /// else happens, as hosts do (the connection that follows needs the token).
    loads: Vec<crate::io::ServerName>,
    /// Store reads answered so far (they cycle through the possible answers).
    loads_answered: u64,
    /// Backends whose grant the engine was told is dead, with no token since.
    dead: BTreeSet<crate::io::ServerName>,
    /// Set while an `invalid_grant` is being handled: the discard must come
    /// before anything is sent to the backend.
    discard_due: Option<crate::io::ServerName>,
    /// Backends whose connection the harness last saw open.
    connected: BTreeSet<crate::io::ServerName>,
    /// Backends whose connection was refused for their credential and which may
    /// not connect again until a credential arrives (or an admin or a reload says so).
    awaiting: BTreeSet<crate::io::ServerName>,
    /// The policy numbers: retry waits, reconnect backoff, restart delays.
    watch: PolicyWatch,
    /// Tags calls (`arguments.n`) so their retries can be followed.
    next_tag: u64,
    /// Who asked each tagged call: tag → (session, id).
    tagged: BTreeMap<u64, (u64, String)>,
    /// While a backend's request arrives on the stream of a call its client still
    /// waits for: that client's session, the only one it may be forwarded to.
    route_to: Option<u64>,
    /// Calls that must get a result, not an error: (session, id).
    must_succeed: BTreeSet<(u64, String)>,
}

/// A credential step waiting for the driver's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// A refresh or an obtain: a request to the token endpoint.
    Token,
    /// A token request the engine may have lost track of: another step was
    /// answered while it was out, and an update does not say which step it
    /// answers. Answered, not counted.
    Untracked,
    /// A login asked for: its URL not reported yet.
    Login,
    /// A login whose URL was reported: the person has not finished.
    LoginPending,
}

impl Harness {
    /// A fresh gateway with [`driver_config`]`(variant)`.
    pub fn new(variant: u8, seed: u64) -> Result<Harness, Violation> {
        Harness::with_oauth(variant, seed, false)
    }

    /// A fresh gateway with [`driver_config`]`(variant)`, its backend `web`
    /// OAuth-managed when `oauth` is set.
    pub fn with_oauth(variant: u8, seed: u64, oauth: bool) -> Result<Harness, Violation> {
        let config = oauth_config(driver_config(variant), oauth);
        let gw = Gateway::new(config, seed, Instant::ZERO).map_err(|e| format!("config: {e}"))?;
        let mut h = Harness {
            gw,
            now: 0,
            scopes: BTreeMap::new(),
            gens: BTreeMap::new(),
            open: BTreeMap::new(),
            asked: BTreeMap::new(),
            answered: BTreeMap::new(),
            cancelled: BTreeSet::new(),
            stopped: BTreeSet::new(),
            server_requests: Vec::new(),
            input_rounds: Vec::new(),
            task_ids: Vec::new(),
            coverage: Coverage::default(),
            calls_asked: BTreeSet::new(),
            started: BTreeSet::new(),
            crash_times: BTreeMap::new(),
            stateless_a: variant & 32 == 32,
            next_id: 1,
            oauth,
            streams: false,
            steps: Vec::new(),
            loads: Vec::new(),
            loads_answered: 0,
            dead: BTreeSet::new(),
            discard_due: None,
            connected: BTreeSet::new(),
            awaiting: BTreeSet::new(),
            watch: PolicyWatch::default(),
            next_tag: 0,
            tagged: BTreeMap::new(),
            route_to: None,
            must_succeed: BTreeSet::new(),
        };
        h.drain()?;
        Ok(h)
    }

    /// Feeds one input now and checks everything.
    pub fn input(&mut self, input: Input) -> Result<(), Violation> {
        let mut exited = None;
        match &input {
            Input::ClientFrame { session, frame, .. } => {
                // The engine reads frames in one pass: it must read them as `parse` does.
                protocol::check_read_agrees(frame)?;
                self.note_client_frame(session.0, frame);
                // A client's `reconnect_server` is an admin command too, when served.
                let config = self.gw.config();
                if config.mode == crate::config::Mode::Meta || config.admin_tools {
                    let v: Value = serde_json::from_str(frame).unwrap_or(Value::Null);
                    if v["method"] == "tools/call" && v["params"]["name"] == "reconnect_server" {
                        if let Some(server) = v["params"]["arguments"]["server"].as_str() {
                            self.stopped.remove(server);
                            self.awaiting.remove(server);
                            self.crash_times.remove(server);
                        }
                    }
                }
            }
            Input::BackendFrame { frame, .. } | Input::BackendEvent { frame, .. } => {
                protocol::check_read_agrees(frame)?;
            }
            // Its request (asked of a replica that is gone) is answered here, once.
            Input::ClientStreamLost { session, request: Some(id) }
                if self.gw.session_era(*session) == Some(crate::protocol::Era::Handshake) =>
            {
                *self.asked.entry((session.0, id_key(id))).or_default() += 1;
            }
            Input::ClientClosed { session } => {
                self.forget_session(session.0);
                self.scopes.remove(&session.0);
            }
            Input::ClientConnected { session, .. } if self.gw.session_era(*session).is_some() => {}
            Input::ClientConnected { session, .. } => drop(self.scopes.remove(&session.0)),
            Input::ClientAccess { session, scopes, .. } if self.gw.session_era(*session).is_some() => {
                self.scopes.insert(session.0, scopes.clone());
            }
            Input::BackendExited { server, generation, .. } => {
                let stdio = self.gw.config().servers.get(&**server).is_some_and(|s| s.transport.is_stdio());
                let live = self.gens.get(server) == Some(generation) && self.connected.contains(server);
                if stdio && live && self.gw.status(server).is_some_and(|s| s.generation == *generation) {
                    self.crash_times.entry(server.clone()).or_default().push(self.now);
                    exited = Some(server.clone());
                }
            }
            Input::BackendFailed { server, generation, request: Some(id), failure }
                if self.gens.get(server) == Some(generation) =>
            {
                self.watch.failed(server, *id, failure, self.now);
            }
            Input::Admin { command } => {
                let (AdminCommand::Reconnect { server }
                | AdminCommand::Restart { server }
                | AdminCommand::Remove { server }) = command;
                self.stopped.remove(&**server);
                self.awaiting.remove(&**server);
                self.crash_times.remove(&**server);
                if matches!(command, AdminCommand::Remove { .. }) {
                    // The host drops the backend's credential keeper with it.
                    self.forget_credential(server);
                }
            }
            Input::ConfigReloaded { .. } => {
                self.stopped.clear();
                self.awaiting.clear();
                self.crash_times.clear();
            }
            Input::Credential { server, update } if self.manages_credential(server) => {
                if matches!(update, CredentialUpdate::Ready { .. }) {
                    // A new token: a backend waiting for one may start again.
                    self.stopped.remove(&**server);
                    self.awaiting.remove(&**server);
                    self.dead.remove(&**server);
                }
                if let CredentialUpdate::Failed { reason: CredentialFailure::InvalidGrant, .. } = update {
                    self.dead.insert(server.clone());
                    self.discard_due = Some(server.clone());
                }
            }
            _ => {}
        }
        if let Err(e) = self.gw.handle(Instant::from_millis(self.now), input) {
            return Err(format!("host contract error from a valid input: {e}"));
        }
        self.drain()?;
        self.watch.check_reconnects(&self.gw, &["web"], self.now)?;
        if let Some(server) = exited {
            self.watch.check_restart(&self.gw, &server, self.now)?;
        }
        if let Some(server) = self.discard_due.take() {
            return Err(format!("{server}: invalid_grant at {} ms and the credential was not discarded", self.now));
        }
        self.note_awaiting();
        while let Some(server) = self.loads.pop() {
            self.loads_answered += 1;
            let update = match self.loads_answered % 5 {
                0 => CredentialUpdate::Missing,
                n => CredentialUpdate::Ready {
                    expires_in_ms: [None, Some(0), Some(1_000), Some(3_600_000)][n as usize - 1],
                    refreshable: n != 4,
                    scope: None,
                },
            };
            self.input(Input::Credential { server, update })?;
        }
        Ok(())
    }

    /// Whether the engine manages `server`'s credential now.
    fn manages_credential(&self, server: &str) -> bool {
        self.gw.config().servers.get(server).is_some_and(ServerConfig::manages_credential)
    }

    fn forget_credential(&mut self, server: &str) {
        self.steps.retain(|(s, _)| &**s != server);
        self.loads.retain(|s| &**s != server);
        self.dead.remove(server);
    }

    /// Notes the backends whose connection was refused for their credential: the
    /// engine closed it and waits for a credential before connecting again.
    fn note_awaiting(&mut self) {
        for server in SERVERS {
            let waiting = !self.connected.contains(server)
                && self.gw.status(server).is_some_and(|s| {
                    s.status == Status::Connecting && s.last_error.as_deref() == Some("waiting for a credential")
                });
            if waiting {
                self.awaiting.insert(server.into());
            } else {
                self.awaiting.remove(server);
            }
        }
    }

    fn note_client_frame(&mut self, session: u64, frame: &str) {
        if frame.len() > self.gw.config().limits.max_frame_bytes as usize {
            return; // refused with id null
        }
        match protocol::parse(frame) {
            Ok(Message::Request { id, method, .. }) => {
                *self.asked.entry((session, id_key(id))).or_default() += 1;
                if method == "tools/call" {
                    self.calls_asked.insert((session, id_key(id)));
                }
            }
            // An invalid message whose id could be read is answered under that id.
            Err(protocol::FrameError { id: Some(id), .. }) => {
                *self.asked.entry((session, id_key(&id))).or_default() += 1;
            }
            Ok(Message::Notification { method, params }) if method == "notifications/cancelled" => {
                let id = params
                    .and_then(|p| serde_json::from_str::<Value>(p).ok())
                    .and_then(|p| p.get("requestId").and_then(|v| serde_json::to_string(v).ok()));
                if let Some(id) = id {
                    self.cancelled.insert((session, id));
                }
            }
            _ => {}
        }
    }

    /// Jumps time forward with a single tick, as a host waking from sleep does.
    pub fn hibernate(&mut self, ms: u64) -> Result<(), Violation> {
        self.now = self.now.saturating_add(ms);
        self.input(Input::Tick)
    }

    /// A list answered to a session whose scopes withhold things holds only
    /// what they grant.
    fn check_listed(&self, session: u64, held: &[String], frame: &str) -> Result<(), Violation> {
        let access = crate::access::Access::new(&self.gw.config().scopes, Some(held));
        let Ok(answer) = serde_json::from_str::<Value>(frame) else { return Ok(()) };
        let catalog = self.gw.catalog();
        for (key, field) in [("tools", "name"), ("prompts", "name"), ("resources", "uri")] {
            let Some(items) = answer["result"][key].as_array() else { continue };
            for item in items {
                let name = item[field].as_str().unwrap_or_default();
                let server = match key {
                    "tools" => catalog.resolve_tool(name).map(|r| r.server),
                    "prompts" => catalog.resolve_prompt(name).map(|r| r.server),
                    _ => catalog.resolve_uri(name).map(|(s, _)| s),
                };
                let granted = match (key, server) {
                    // tether's own tools (meta mode, admin tools) are everyone's.
                    (_, None) => true,
                    ("tools", Some(server)) => access.tool(server, name),
                    (_, Some(server)) => access.server(server),
                };
                if !granted {
                    return Err(format!("session {session} holding {held:?} was listed {name} at {} ms", self.now));
                }
            }
        }
        Ok(())
    }

    /// A session that left is owed nothing.
    fn forget_session(&mut self, session: u64) {
        self.asked.retain(|k, _| k.0 != session);
        self.answered.retain(|k, _| k.0 != session);
        self.cancelled.retain(|k| k.0 != session);
        self.calls_asked.retain(|k| k.0 != session);
    }

    /// Moves time forward, firing every timer on the way.
    pub fn advance(&mut self, ms: u64) -> Result<(), Violation> {
        let target = self.now.saturating_add(ms);
        for _ in 0..100_000 {
            match self.gw.poll_timeout() {
                Some(at) if at.as_millis() <= target => {
                    self.now = self.now.max(at.as_millis());
                    self.input(Input::Tick)?;
                }
                _ => {
                    self.now = target;
                    return Ok(());
                }
            }
        }
        Err("timers keep firing without time passing (livelock)".into())
    }

    fn drain(&mut self) -> Result<(), Violation> {
        while let Some(action) = self.gw.poll_action() {
            self.check_action(&action)?;
        }
        self.gw.check_invariants().map_err(|e| format!("invariant at {} ms: {e}", self.now))
    }

    fn check_action(&mut self, action: &Action) -> Result<(), Violation> {
        match action {
            Action::Spawn { server, generation, .. } | Action::ConnectHttp { server, generation, .. } => {
                if !self.started.insert(server.clone()) {
                    match action {
                        Action::Spawn { .. } => self.coverage.restarts += 1,
                        _ => self.coverage.reconnects += 1,
                    }
                }
                if self.stopped.contains(&**server) {
                    return Err(format!("{server} was started again after it gave up or needed reauth"));
                }
                if self.awaiting.contains(&**server) {
                    return Err(format!("{server} was connected again before a credential arrived"));
                }
                self.connected.insert(server.clone());
                // The crash limit: a stdio backend that crashed `crash_limit` times
                // within the window is not started again by the engine alone.
                let policy = self.gw.config().policy_for(server);
                let window_start = self.now.saturating_sub(policy.crash_window_ms);
                let recent =
                    self.crash_times.get(server).map_or(0, |t| t.iter().filter(|&&at| at > window_start).count());
                if recent >= usize::from(policy.crash_limit.max(1)) {
                    return Err(format!(
                        "{server} restarted after {recent} crashes within {} ms (crash_limit {})",
                        policy.crash_window_ms, policy.crash_limit
                    ));
                }
                if self.gens.get(server).is_some_and(|g| g >= generation) {
                    return Err(format!("{server}: generation {generation} is not newer"));
                }
                self.gens.insert(server.clone(), *generation);
                self.open.insert(server.clone(), Vec::new());
                self.watch.started(server, *generation, self.now);
            }
            Action::Authorize { server, step } => self.check_step(server, step)?,
            Action::SendToBackend { server, generation, frame, .. } => {
                if self.gens.get(server) != Some(generation) {
                    return Err(format!("frame sent to {server}#{generation}, not its newest connection"));
                }
                if self.discard_due.as_ref() == Some(server) {
                    return Err(format!("{server}: a frame sent with a credential the engine knew was dead"));
                }
                let v = Envelope::read(frame)
                    .map_err(|e| format!("gateway sent invalid JSON to {server}: {e}: {frame}"))?;
                if let (Some(id), Some(method)) = (v.id.and_then(|id| id.get().parse::<u64>().ok()), v.method) {
                    let method = peek::string(Some(method)).unwrap_or_default();
                    if method == "tools/call" {
                        self.watch.sent(&self.gw, server, id, frame, self.now)?;
                    }
                    self.open.entry(server.clone()).or_default().push((id, method));
                }
            }
            Action::ResumeStream { server, generation, .. } => {
                if self.gens.get(server) != Some(generation) {
                    return Err(format!("stream of {server}#{generation} resumed, not its newest connection"));
                }
            }
            Action::CloseBackend { server, generation } => {
                if self.gens.get(server) != Some(generation) {
                    return Err(format!("close of {server}#{generation}, not its newest connection"));
                }
                self.connected.remove(server);
            }
            Action::SendToClient { session, frame, route } => {
                let v = Envelope::read(frame)
                    .map_err(|e| format!("gateway sent invalid JSON to session {}: {e}: {frame}", session.0))?;
                let is_answer = v.method.is_none() && v.id.is_some();
                let routed_as = match route {
                    ClientRoute::Reply(id) => serde_json::from_str::<Value>(id).ok(),
                    _ => None,
                };
                let id = v.id.and_then(|id| serde_json::from_str::<Value>(id.get()).ok());
                if is_answer && routed_as != id {
                    return Err(format!("answer {frame} routed as {route:?}"));
                }
                if !is_answer && routed_as.is_some() {
                    return Err(format!("{frame} routed as a reply ({route:?})"));
                }
                if let Some(held) = self.scopes.get(&session.0) {
                    self.check_listed(session.0, held, frame)?;
                }
                let result = v.result_fields();
                let nested = || result.task.and_then(|t| serde_json::from_str::<peek::ResultFields<'_>>(t.get()).ok());
                let task = peek::string(result.task_id).or_else(|| nested().and_then(|t| peek::string(t.task_id)));
                if let Some(task) = task.filter(|task| !self.task_ids.iter().any(|t| t == task)) {
                    if self.task_ids.len() >= 16 {
                        self.task_ids.remove(0);
                    }
                    self.task_ids.push(task);
                    self.coverage.tasks += 1;
                }
                if let Some(state) = peek::string(result.request_state) {
                    let keys = result
                        .input_requests
                        .and_then(|r| serde_json::from_str::<BTreeMap<String, serde::de::IgnoredAny>>(r.get()).ok())
                        .map(|m| m.into_keys().collect());
                    self.input_rounds.push((session.0, state, keys.unwrap_or_default()));
                }
                if v.method.is_none() {
                    if let Some(id) = id {
                        let id = serde_json::to_string(&id).unwrap_or_default();
                        if self.calls_asked.remove(&(session.0, id_key(&id))) {
                            let failed = v.error.is_some_and(|e| e.get().starts_with('{'));
                            if failed && self.must_succeed.remove(&(session.0, id_key(&id))) {
                                return Err(format!("a call that had to succeed failed at {} ms: {frame}", self.now));
                            }
                            match (failed, result.is_error.map(RawValue::get)) {
                                (true, _) => self.coverage.calls_failed += 1,
                                (_, Some("true")) => self.coverage.calls_tool_error += 1,
                                _ => self.coverage.calls_ok += 1,
                            }
                        }
                        *self.answered.entry((session.0, id)).or_default() += 1;
                    }
                } else if let Some(id) = v.id.and_then(|id| id.get().parse::<u64>().ok()) {
                    if let Some(caller) = self.route_to.filter(|caller| *caller != session.0) {
                        return Err(format!(
                            "a request on the stream of session {caller}'s call went to session {} at {} ms: {frame}",
                            session.0, self.now
                        ));
                    }
                    self.server_requests.push((session.0, id));
                }
            }
            Action::CloseClient { session } => {
                self.forget_session(session.0);
                self.scopes.remove(&session.0);
            }
            Action::SealSession { .. }
            | Action::SessionState { .. }
            | Action::StopAccepting
            | Action::EndClientStreams => {}
            Action::Emit { event } => {
                match event {
                    Event::CircuitOpened { .. } => self.coverage.breaker_opened += 1,
                    Event::CircuitClosed { .. } => self.coverage.breaker_closed += 1,
                    Event::ServerPermanentlyFailed { .. } => self.coverage.gave_up += 1,
                    _ => {}
                }
                if let Event::ServerStatusChanged {
                    server,
                    to: Status::PermanentlyFailed | Status::RequiresReauth,
                    ..
                } = event
                {
                    self.stopped.insert(server.clone());
                }
            }
        }
        Ok(())
    }

    /// A credential step the engine asked for: single flight, and nothing dead renewed.
    fn check_step(&mut self, server: &crate::io::ServerName, step: &AuthStep) -> Result<(), Violation> {
        if !self.manages_credential(server) {
            return Err(format!("{server}: credential step {step} for a backend without a managed credential"));
        }
        let kind = match step {
            AuthStep::Load => {
                self.loads.push(server.clone());
                return Ok(());
            }
            AuthStep::Obtain { .. } | AuthStep::Refresh => Step::Token,
            AuthStep::Login { .. } => Step::Login,
            AuthStep::Discard => {
                if self.discard_due.as_ref() == Some(server) {
                    self.discard_due = None;
                }
                return Ok(());
            }
        };
        if kind == Step::Token {
            if self.steps.iter().any(|(s, k)| s == server && *k == Step::Token) {
                return Err(format!("{server}: {step} while another token request is in flight (single flight)"));
            }
            if matches!(step, AuthStep::Refresh) && self.dead.contains(&**server) {
                return Err(format!("{server}: refresh of a grant the engine was told is dead"));
            }
        }
        self.steps.push((server.clone(), kind));
        Ok(())
    }

    /// Answers one credential step, as the host would (any outcome), or, when
    /// nothing is asked of that backend, reports something unasked.
    fn credential_step(&mut self, c: &mut Choices<'_>) -> Result<(), Violation> {
        let server: crate::io::ServerName = "web".into();
        let expires = [None, Some(0), Some(1_000), Some(60_000), Some(3_600_000)][c.below(5)];
        let ready = CredentialUpdate::Ready {
            expires_in_ms: expires,
            refreshable: c.below(4) != 0,
            scope: [None, Some("mcp"), Some("mcp write")][c.below(3)].map(String::from),
        };
        let failed = |reason| CredentialUpdate::Failed { reason, message: "token endpoint: HTTP 400".into() };
        let mine: Vec<usize> = (0..self.steps.len()).filter(|i| self.steps[*i].0 == server).collect();
        let update = if mine.is_empty() {
            match c.below(4) {
                0 => ready,
                1 => CredentialUpdate::Missing,
                2 => CredentialUpdate::LoginRequired,
                _ => failed(CredentialFailure::Unavailable),
            }
        } else {
            let at = mine[c.below(mine.len())];
            let kind = self.steps[at].1;
            let update = match kind {
                Step::Token | Step::Untracked => match c.below(5) {
                    0 | 1 => ready,
                    2 => CredentialUpdate::LoginRequired,
                    3 => failed(CredentialFailure::Unavailable),
                    _ => failed(
                        [
                            CredentialFailure::InvalidGrant,
                            CredentialFailure::Rejected,
                            CredentialFailure::ClientRefused,
                        ][c.below(3)],
                    ),
                },
                Step::Login => match c.below(4) {
                    0 => failed(CredentialFailure::Rejected),
                    _ => CredentialUpdate::LoginPending { url: "https://as.example/authorize?state=s".into() },
                },
                Step::LoginPending => match c.below(3) {
                    0 => failed(CredentialFailure::Rejected),
                    _ => ready,
                },
            };
            if matches!(update, CredentialUpdate::LoginPending { .. }) {
                self.steps[at].1 = Step::LoginPending;
            } else {
                self.steps.remove(at);
            }
            // An update does not say which step it answers: unless it is the answer
            // to the one token request in flight, the engine may take it for another.
            let ambiguous = kind != Step::Token
                || self.steps.iter().any(|(s, k)| *s == server && matches!(k, Step::Login | Step::Untracked));
            if ambiguous {
                for (s, k) in self.steps.iter_mut() {
                    if *s == server && *k == Step::Token {
                        *k = Step::Untracked;
                    }
                }
            }
            update
        };
        self.input(Input::Credential { server, update })
    }

    /// After everything settled: each request answered exactly once.
    pub fn check_answers(&self) -> Result<(), Violation> {
        for (key, asked) in &self.asked {
            let got = self.answered.get(key).copied().unwrap_or(0);
            if self.cancelled.contains(key) {
                if got > *asked {
                    return Err(format!("request {key:?} asked {asked} times, answered {got} times"));
                }
            } else if got != *asked {
                return Err(format!("request {key:?} asked {asked} times, answered {got} times"));
            }
        }
        for key in self.answered.keys() {
            if !self.asked.contains_key(key) && key.1 != "null" {
                return Err(format!("answer to {key:?}, which nobody asked"));
            }
        }
        Ok(())
    }

    /// Fires timers until no client is owed an answer (an hour at most), then
    /// for a margin beyond the longest request deadline, during which a late or
    /// second answer would still be seen; then checks the answers. Firing every
    /// timer for an hour instead (backoff cycles, health checks) was most of an
    /// execution's time and can answer no request.
    pub fn settle(&mut self) -> Result<(), Violation> {
        let give_up = self.now.saturating_add(3_600_000);
        while self.owed() && self.now < give_up {
            match self.gw.poll_timeout() {
                Some(at) if at.as_millis() <= give_up => {
                    self.now = self.now.max(at.as_millis());
                    self.input(Input::Tick)?;
                }
                _ => break,
            }
        }
        let margin = 2 * self.gw.config().policy.request_timeout_max_ms + 10_000;
        self.advance(margin)?;
        self.check_answers()
    }

    /// Whether a client is still owed an answer: the engine holds one of its
    /// requests, or one the harness saw asked has no answer yet.
    fn owed(&self) -> bool {
        self.gw.client_requests_in_flight() > 0
            || self.asked.iter().any(|(key, asked)| {
                !self.cancelled.contains(key) && self.answered.get(key).copied().unwrap_or(0) < *asked
            })
    }

    fn generation(&self, server: &str) -> Generation {
        self.gens.get(server).copied().unwrap_or_default()
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Answers `request` of `server` the way a well-behaved backend would: of the
    /// stateless revision (`stateless`), or of the handshake era. `twist` picks a
    /// stateless call's `input_required` answer.
    fn good_answer(id: u64, method: &str, stateless: bool, twist: bool) -> Value {
        let result = match method {
            "server/discover" if stateless => json!({"resultType":"complete","supportedVersions":["2026-07-28"],
                "capabilities":{"tools":{"listChanged":true},"resources":{"subscribe":true}},"ttlMs":0,"cacheScope":"private"}),
            "server/discover" => {
                return json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"Method not found"}});
            }
            "tools/call" if stateless && twist => json!({"resultType":"input_required","requestState":"s",
                "inputRequests":{"r":{"method":"roots/list"},"m":{"method":"sampling/createMessage","params":{"messages":[]}}}}),
            "initialize" => {
                json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{},"resources":{"subscribe":true},"prompts":{}}})
            }
            "tools/list" => json!({"tools":[{"name":"echo","annotations":{"readOnlyHint":true}},{"name":"write"}]}),
            "resources/list" => json!({"resources":[{"uri":"file:///x","name":"x"}]}),
            "resources/templates/list" => json!({"resourceTemplates":[]}),
            "prompts/list" => json!({"prompts":[{"name":"greet"}],"nextCursor":"2"}),
            "resources/read" => json!({"contents":[{"uri":"file:///x","text":"x"}]}),
            _ => json!({"content":[{"type":"text","text":"ok"}]}),
        };
        json!({"jsonrpc":"2.0","id":id,"result":result})
    }

    /// Sessions 1 and 2 complete the handshake; with `variant` bit 16, session 3
    /// connects and its first request decides its era (stateless or not).
    pub fn open_sessions(&mut self, variant: u8) -> Result<(), Violation> {
        if variant & 16 == 16 {
            self.input(Input::ClientConnected { session: SessionId(3), expires: false })?;
            // Its token's scopes grant backend `a` and `b`'s tools, not `web`.
            let scopes = alloc::vec!["sa".into(), "tb".into(), "unmapped".into()];
            self.input(Input::ClientAccess { session: SessionId(3), scopes, principal: None })?;
        }
        for session in 1..=2 {
            let frame = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"sampling":{},"roots":{}}}}"#;
            self.input(Input::ClientFrame { session: SessionId(session), frame: frame.into(), param_headers: None })?;
            let ready = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
            self.input(Input::ClientFrame { session: SessionId(session), frame: ready.into(), param_headers: None })?;
        }
        Ok(())
    }

    /// Boots every backend that has an open `initialize` and list requests.
    pub fn boot_all(&mut self) -> Result<(), Violation> {
        for _ in 0..4 {
            for server in SERVERS {
                let open = self.open.get(server).cloned().unwrap_or_default();
                for (id, method) in open {
                    self.answer(server, id, &method, 0)?;
                }
            }
        }
        Ok(())
    }

    fn answer(&mut self, server: &str, id: u64, method: &str, how: u8) -> Result<(), Violation> {
        let stateless = self.stateless_a && server == "a";
        let frame = match how % 8 {
            0..=4 => Self::good_answer(id, method, stateless, how % 8 == 4),
            5 => json!({"jsonrpc":"2.0","id":id,"error":{"code":-32603,"message":"boom"}}),
            6 => json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"nope"}}),
            _ => json!({"jsonrpc":"2.0","id":id,"result":"not an object"}),
        };
        self.reply(server, id, &frame)
    }

    /// `server` answers its open request `id` with `frame`.
    fn reply(&mut self, server: &str, id: u64, frame: &Value) -> Result<(), Violation> {
        self.settled(server, id);
        let generation = self.generation(server);
        self.input(Input::BackendFrame { server: server.into(), generation, frame: frame.to_string() })
    }

    /// `server`'s request `id` is no longer open (answered, or failed).
    fn settled(&mut self, server: &str, id: u64) {
        if let Some(list) = self.open.get_mut(server) {
            list.retain(|(i, _)| *i != id);
        }
    }

    /// `web`'s streams: an event, with an id (perhaps a replay, perhaps the answer
    /// of a call whose stream ended) or without (`e0`), and on a call's stream
    /// perhaps a request for that call's client; or the end of a stream.
    fn stream_step(&mut self, c: &mut Choices<'_>) -> Result<(), Violation> {
        let calls: Vec<u64> = self
            .open
            .get("web")
            .map(|o| o.iter().filter(|(_, m)| m == "tools/call").map(|(id, _)| *id).collect())
            .unwrap_or_default();
        let stream = match c.below(3) {
            0 => StreamRef::Standalone,
            _ if calls.is_empty() => StreamRef::Standalone,
            _ => StreamRef::Request(calls[c.below(calls.len())]),
        };
        let generation = self.generation("web");
        let event_id = |c: &mut Choices<'_>| format!("e{}", c.below(6));
        if c.below(2) == 0 {
            let event_id = Some(event_id(c)).filter(|id| id != "e0");
            let frame = match (stream, c.below(3)) {
                (StreamRef::Request(id), 0) => {
                    self.settled("web", id);
                    Self::good_answer(id, "tools/call", false, false)
                }
                (StreamRef::Request(id), 1) => {
                    json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":id,"progress":c.byte()}})
                }
                (StreamRef::Request(id), _) => {
                    // Its stream says whose call it serves: while that client still
                    // waits for the call and the engine for this attempt of it
                    // (not given up on, to be retried), nobody else may be asked.
                    let caller = self.watch.tag_of("web", id).and_then(|n| self.tagged.get(&n)).cloned();
                    let live = self.gw.client_call_on("web", id);
                    self.route_to = caller
                        .filter(|key| live && self.calls_asked.contains(key) && !self.cancelled.contains(key))
                        .map(|(session, _)| session);
                    json!({"jsonrpc":"2.0","id":format!("s{id}"),"method":"sampling/createMessage","params":{"messages":[]}})
                }
                _ => json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}),
            };
            let frame = frame.to_string();
            let sent = self.input(Input::BackendEvent { server: "web".into(), generation, stream, event_id, frame });
            self.route_to = None;
            return sent;
        }
        let last_event_id = (c.below(3) != 0).then(|| event_id(c));
        let retry_ms = [None, Some(0), Some(100), Some(5_000), Some(u64::MAX)][c.below(5)];
        let failure = [
            None,
            None,
            Some(Failure::Reset),
            Some(Failure::Refused),
            Some(Failure::Timeout),
            Some(Failure::Http { status: 404 }),
            Some(Failure::Http { status: 405 }),
            Some(Failure::Http { status: 503 }),
            Some(Failure::Http { status: 401 }),
        ][c.below(9)]
        .clone();
        let events = c.below(3) as u32;
        let ended =
            Input::StreamEnded { server: "web".into(), generation, stream, last_event_id, retry_ms, events, failure };
        self.input(ended)
    }

    /// One step decoded from the choices.
    pub fn step(&mut self, c: &mut Choices<'_>) -> Result<(), Violation> {
        let session = SessionId(1 + c.below(3) as u64);
        let server = SERVERS[c.below(SERVERS.len())];
        // One more kind of step when `web` is OAuth-managed, one when its streams
        // end (so other runs decode as before).
        match c.below(18 + usize::from(self.oauth) + usize::from(self.streams)) {
            0..=3 => {
                let id = if c.below(8) == 0 { self.next_id } else { self.fresh_id() };
                let config = self.gw.config();
                let own = config.mode == crate::config::Mode::Meta || config.admin_tools;
                let tools = [
                    "a__echo",
                    "b__echo",
                    "web__write",
                    "echo",
                    "web__echo",
                    "nope",
                    "execute_tool",
                    "search_tools",
                    "list_servers",
                    "reconnect_server",
                    "server_events",
                ];
                let tool = tools[c.below(if own { tools.len() } else { 6 })];
                let arguments = match tool {
                    "execute_tool" => {
                        let target = ["a__echo", "web__write", "nope", "execute_tool"][c.below(4)];
                        json!({ "name": target })
                    }
                    "search_tools" => json!({"query": "echo", "limit": c.below(3)}),
                    "reconnect_server" => json!({"server": server}),
                    "server_events" => json!({"since": c.below(40)}),
                    // Tagged, so the call's retries can be followed.
                    _ => {
                        self.next_tag += 1;
                        self.tagged.insert(self.next_tag, (session.0, id.to_string()));
                        json!({ "n": self.next_tag })
                    }
                };
                // Odd ids take tasks (no byte spent on it, so inputs decode as before).
                let caps = match id % 2 {
                    1 => {
                        json!({"sampling":{},"roots":{},"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}})
                    }
                    _ => json!({"sampling":{},"roots":{},"elicitation":{}}),
                };
                let stateless = json!({
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": caps,
                    "progressToken": id,
                });
                let task = match self.task_ids.len() {
                    0 => String::from("a__unknown"),
                    n => self.task_ids[id as usize % n].clone(),
                };
                let frame = match c.below(13) {
                    // Now and then a tasks request instead, of either form.
                    10 if id % 3 != 0 => {
                        let method = ["tasks/get", "tasks/update", "tasks/cancel", "tasks/result", "tasks/list"]
                            [id as usize % 5];
                        let meta = if id % 7 == 0 { json!({}) } else { stateless };
                        json!({"jsonrpc":"2.0","id":id,"method":method,"params":{"taskId":task,"inputResponses":{"k":{"action":"accept"}},"_meta":meta}})
                    }
                    10 => json!({"jsonrpc":"2.0","id":id,"method":"server/discover","params":{"_meta":stateless}}),
                    11 => {
                        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments,"_meta":stateless}})
                    }
                    12 => {
                        // A retry with the inputs of an input_required answer (some, all, or tampered).
                        let round = self.input_rounds.get(c.below(self.input_rounds.len().max(1))).cloned();
                        let (state, keys) = round.map_or((String::from("bogus"), Vec::new()), |(_, s, k)| (s, k));
                        let mut responses = serde_json::Map::new();
                        for key in keys.iter().filter(|_| c.below(4) != 0) {
                            responses.insert(key.clone(), json!({"roots":[],"action":"accept"}));
                        }
                        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments,"_meta":stateless,"inputResponses":responses,"requestState":state}})
                    }
                    0 => json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}),
                    1 => json!({"jsonrpc":"2.0","id":id,"method":"prompts/list","params":{"cursor":"p2"}}),
                    2 => json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri":"a+file:///x"}}),
                    3 => {
                        json!({"jsonrpc":"2.0","id":id,"method":"resources/subscribe","params":{"uri":"web+file:///x"}})
                    }
                    4 => json!({"jsonrpc":"2.0","id":format!("s{id}"),"method":"ping"}),
                    5 => {
                        json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{"capabilities":{"sampling":{},"roots":{}}}})
                    }
                    6 => json!({"jsonrpc":"2.0","id":id,"method":"logging/setLevel","params":{"level":"info"}}),
                    // Every fifth handshake-era call asks for a task (2025-11-25).
                    _ if id % 5 == 0 => {
                        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments,"task":{"ttl":60000},"_meta":{"progressToken":id}}})
                    }
                    _ => {
                        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments,"_meta":{"progressToken":id}}})
                    }
                };
                self.input(Input::ClientFrame { session, frame: frame.to_string(), param_headers: None })
            }
            4..=7 => {
                let open = self.open.get(server).cloned().unwrap_or_default();
                if open.is_empty() {
                    return Ok(());
                }
                let (id, method) = open[c.below(open.len())].clone();
                let how = c.byte();
                self.answer(server, id, &method, how)
            }
            8 => {
                // Half the time, a backend that has a call in flight (where requests to
                // clients and progress matter).
                let busy: Vec<&str> = SERVERS
                    .iter()
                    .copied()
                    .filter(|s| self.open.get(*s).is_some_and(|o| o.iter().any(|(_, m)| m == "tools/call")))
                    .collect();
                let server = if c.below(2) == 0 && !busy.is_empty() { busy[c.below(busy.len())] } else { server };
                let token = self.open.get(server).and_then(|o| o.first().map(|(id, _)| *id)).unwrap_or(7);
                let frame = match c.below(6) {
                    0 => {
                        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":token,"progress":c.byte()}})
                    }
                    1 => json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}),
                    2 => json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}),
                    3 => {
                        json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///x"}})
                    }
                    4 => {
                        let method =
                            ["sampling/createMessage", "roots/list", "elicitation/create", "ping", "x/y"][c.below(5)];
                        json!({"jsonrpc":"2.0","id":format!("r{}", c.byte()),"method":method})
                    }
                    _ => json!({"jsonrpc":"2.0","id":token + 1000,"result":{}}),
                };
                let generation = self.generation(server);
                self.input(Input::BackendFrame { server: server.into(), generation, frame: frame.to_string() })
            }
            9 => {
                let server = ["a", "b"][c.below(2)];
                let code = if c.below(2) == 0 { Some(1) } else { None };
                let generation = self.generation(server);
                self.input(Input::BackendExited { server: server.into(), generation, code })
            }
            10 => {
                let refused = |status: u16, error: &str, scope: Option<&str>| Failure::Unauthorized {
                    status,
                    challenge: Challenge {
                        error: Some(error.into()),
                        scope: scope.map(String::from),
                        ..Challenge::default()
                    },
                };
                let failure = [
                    Failure::Refused,
                    Failure::Timeout,
                    Failure::Reset,
                    Failure::Http { status: 500 },
                    Failure::Http { status: 404 },
                    Failure::Http { status: 401 },
                    Failure::Spawn { message: "x".into() },
                    // Only when `web` is OAuth-managed (so other runs decode as before).
                    refused(401, "invalid_token", None),
                    refused(403, "insufficient_scope", Some("mcp write")),
                ][c.below(if self.oauth { 9 } else { 7 })]
                .clone();
                let open = self.open.get(server).cloned().unwrap_or_default();
                let request = match c.below(3) {
                    0 => None,
                    1 if !open.is_empty() => Some(open[c.below(open.len())].0),
                    _ => Some(u64::from(c.byte())),
                };
                let generation = self.generation(server);
                self.input(Input::BackendFailed { server: server.into(), generation, request, failure })
            }
            11 => match c.below(7) {
                // The machine sleeps for hours: nothing runs, then one tick on waking.
                6 => self.hibernate(3_600_000 * (1 + c.below(8) as u64)),
                i => self.advance([1u64, 100, 600, 2_000, 31_000, 200_000][i]),
            },
            12 => {
                let mine: Vec<String> = self.asked.keys().filter(|k| k.0 == session.0).map(|k| k.1.clone()).collect();
                let Some(id) = mine.get(c.below(mine.len().max(1))).cloned() else { return Ok(()) };
                let frame =
                    format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#);
                self.input(Input::ClientFrame { session, frame, param_headers: None })
            }
            13 => {
                let id = self.server_requests.get(c.below(self.server_requests.len().max(1))).map_or(99, |r| r.1);
                let frame = match c.below(3) {
                    0 => json!({"jsonrpc":"2.0","id":id,"result":{"roots":[]}}),
                    1 => json!({"jsonrpc":"2.0","id":id,"error":{"code":-1,"message":"no"}}),
                    _ => json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
                };
                self.input(Input::ClientFrame { session, frame: frame.to_string(), param_headers: None })
            }
            14 => {
                if self.gw.status(server).is_none() {
                    return Ok(());
                }
                let server = server.to_string();
                let command = match c.below(3) {
                    0 => AdminCommand::Reconnect { server: server.into() },
                    1 => AdminCommand::Restart { server: server.into() },
                    _ => AdminCommand::Remove { server: server.into() },
                };
                self.input(Input::Admin { command })
            }
            15 => {
                let config = oauth_config(driver_config(c.byte()), self.oauth);
                self.input(Input::ConfigReloaded { config })
            }
            16 => match c.below(5) {
                0 => self.input(Input::ClientClosed { session }),
                1 => self.input(Input::ClientConnected { session, expires: false }),
                // A session another replica opened, as its sealed id says.
                2 => {
                    let version = ["2025-11-25", "2025-06-18", "1999-01-01"][c.below(3)];
                    let capabilities = ["{}", r#"{"sampling":{},"elicitation":{}}"#, "[]"][c.below(3)];
                    let facts = crate::cluster::SessionFacts {
                        protocol_version: version.into(),
                        capabilities: capabilities.into(),
                        client: None,
                        log_level: ["debug", "bogus"].get(c.below(3)).map(|l| l.to_string()),
                        principal: None,
                    };
                    // What it changed on the replica that held it (subscriptions
                    // served here, elsewhere, or unknown).
                    let state = (c.below(2) == 0).then(|| crate::cluster::SessionState {
                        log_level: ["error", "nonsense"].get(c.below(3)).map(|l| l.to_string()),
                        subscriptions: ["a+file:///x", "web+file:///x", "file:///nowhere"]
                            .iter()
                            .take(c.below(4))
                            .map(|u| u.to_string())
                            .collect(),
                    });
                    self.input(Input::ClientAdopted { session, facts, state })
                }
                // A stream another replica held, resumed here.
                3 => {
                    // Ids of their own: a lost request was never asked here.
                    let request =
                        (c.below(2) == 0).then(|| crate::io::RawId::new(format!("\"lost-{}\"", self.fresh_id())));
                    self.input(Input::ClientStreamLost { session, request })
                }
                _ => self.input(Input::Drain),
            },
            18 if self.oauth => self.credential_step(c),
            18 | 19 => self.stream_step(c),
            _ => {
                // Stale and raw inputs.
                let generation = Generation(self.generation(server).0.saturating_sub(1 + c.below(2) as u64));
                let raw = String::from_utf8_lossy(c.slice(64)).to_string();
                match c.below(3) {
                    0 => self.input(Input::BackendFrame { server: server.into(), generation, frame: raw }),
                    1 => self.input(Input::BackendExited { server: server.into(), generation, code: Some(9) }),
                    _ => self.input(Input::ClientFrame { session, frame: raw, param_headers: None }),
                }
            }
        }
    }
}

/// What runs of the drivers reached, counted: whether they walk the paths that
/// matter (successful calls, breaker trips, restarts, reconnects, tasks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// `tools/call` answered with a result.
    pub calls_ok: u64,
    /// `tools/call` answered with a tool error (`isError`).
    pub calls_tool_error: u64,
    /// `tools/call` answered with a JSON-RPC error (tether's or the backend's).
    pub calls_failed: u64,
    /// Breakers opened.
    pub breaker_opened: u64,
    /// Breakers closed again (a probe succeeded).
    pub breaker_closed: u64,
    /// Processes started again (a stdio backend's second start onwards).
    pub restarts: u64,
    /// Connections made again (an HTTP backend's second connection onwards).
    pub reconnects: u64,
    /// Backends that gave up (`permanently_failed`).
    pub gave_up: u64,
    /// Task ids handed to clients.
    pub tasks: u64,
}

impl Coverage {
    /// Adds another run's counts.
    pub fn add(&mut self, other: &Coverage) {
        self.calls_ok += other.calls_ok;
        self.calls_tool_error += other.calls_tool_error;
        self.calls_failed += other.calls_failed;
        self.breaker_opened += other.breaker_opened;
        self.breaker_closed += other.breaker_closed;
        self.restarts += other.restarts;
        self.reconnects += other.reconnects;
        self.gave_up += other.gave_up;
        self.tasks += other.tasks;
    }
}

impl core::fmt::Display for Coverage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "tools/call: {} ok, {} tool errors, {} failed; breakers: {} opened, {} closed; {} restarts, {} reconnects, {} gave up; {} tasks",
            self.calls_ok,
            self.calls_tool_error,
            self.calls_failed,
            self.breaker_opened,
            self.breaker_closed,
            self.restarts,
            self.reconnects,
            self.gave_up,
            self.tasks
        )
    }
}

/// The `gateway` target: a sequence of inputs decoded from `data`.
pub fn gateway(data: &[u8]) -> Result<(), Violation> {
    gateway_coverage(data).map(|_| ())
}

/// [`gateway`], returning what the run reached.
pub fn gateway_coverage(data: &[u8]) -> Result<Coverage, Violation> {
    let mut c = Choices::new(data);
    let variant = c.byte();
    let seed = c.byte();
    let boot = c.below(4) != 0;
    let mut h = booted(variant, seed, boot)?;
    let mut steps = 0;
    while !c.is_empty() && steps < 400 {
        h.step(&mut c)?;
        steps += 1;
    }
    h.settle()?;
    Ok(h.coverage)
}

/// The harness every `gateway` execution with these first choices starts from:
/// sessions open and, with `boot`, every backend booted. Building it was half an
/// execution's time, and inputs that share their first bytes are most of what a
/// fuzzer runs, so it is built once per thread and forked (the engine is
/// deterministic: a fork is the state a fresh build would reach).
fn booted(variant: u8, seed: u8, boot: bool) -> Result<Harness, Violation> {
    std::thread_local! {
        static BOOTED: core::cell::RefCell<BTreeMap<(u8, u8, bool), Harness>> =
            const { core::cell::RefCell::new(BTreeMap::new()) };
    }
    if let Some(h) = BOOTED.with(|b| b.borrow().get(&(variant, seed, boot)).cloned()) {
        return Ok(h);
    }
    let mut h = Harness::with_oauth(variant, u64::from(seed), seed & 0x80 != 0)?;
    h.streams = seed & 0x40 != 0;
    h.open_sessions(variant)?;
    if boot {
        h.boot_all()?;
    }
    BOOTED.with(|b| {
        let mut b = b.borrow_mut();
        if b.len() >= 1024 {
            b.clear();
        }
        b.insert((variant, seed, boot), h.clone());
    });
    Ok(h)
}

/// The `frames` target: arbitrary bytes as client and backend byte streams,
/// through the codecs and into the gateway.
pub fn frames(data: &[u8]) -> Result<(), Violation> {
    let mut c = Choices::new(data);
    let mut h = Harness::new(0, 1)?;
    h.boot_all()?;
    let mut client = LineDecoder::new(4096);
    let mut stdio = LineDecoder::new(4096);
    let mut sse = SseDecoder::new(4096);
    let mut rounds = 0;
    while !c.is_empty() && rounds < 200 {
        rounds += 1;
        let target = c.below(3);
        let chunk = c.slice(96);
        match target {
            0 => {
                client.push(chunk);
                while let Some(line) = client.next_line() {
                    let frame = line.unwrap_or_else(|e| format!("<{e}>"));
                    h.input(Input::ClientFrame { session: SessionId(1), frame, param_headers: None })?;
                }
            }
            1 => {
                stdio.push(chunk);
                while let Some(line) = stdio.next_line() {
                    let Ok(frame) = line else { continue };
                    let generation = h.generation("a");
                    h.input(Input::BackendFrame { server: "a".into(), generation, frame })?;
                }
            }
            _ => {
                sse.push(chunk);
                while let Some(event) = sse.next_event() {
                    let Ok(event) = event else { continue };
                    let generation = h.generation("web");
                    h.input(Input::BackendFrame { server: "web".into(), generation, frame: event.data })?;
                }
            }
        }
    }
    while let Some(Ok(frame)) = client.finish() {
        h.input(Input::ClientFrame { session: SessionId(1), frame, param_headers: None })?;
    }
    h.settle()
}

/// An id as answers are matched by: its JSON value re-serialised (an answer
/// spells `1e3` or a number beyond 64 bits as the value it parsed to).
fn id_key(raw: &str) -> String {
    serde_json::from_str::<Value>(raw)
        .map_or_else(|_| raw.to_string(), |v| serde_json::to_string(&v).unwrap_or_default())
}
