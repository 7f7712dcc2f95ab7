//! The backend side: connecting, the handshake, discovery, frames from backends,
//! failures, timers, and closing.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::calls::{Call, CallKind, ClientCall, Queued, ServerRequest};
use super::Gateway;
use crate::catalog::ListKind;
use crate::config::{ServerConfig, Transport};
use crate::io::{Action, Event, Status};
use crate::metrics::{BackendMetrics, CallOutcome};
use crate::policy::{BreakerTransition, Failure, FailureStatus, HealthChange};
use crate::protocol::{self, code, CacheHint, Era, Message};
use crate::supervisor::{AfterLoss, Readiness, Supervisor, Timer};
use crate::time::Instant;

/// Lines of stderr kept per backend for crash messages.
pub(super) const STDERR_TAIL: usize = 8;
/// Requests the gateway itself may have in flight per backend beyond client calls
/// (a probe answered late, the handshake, four discovery lists, health, a listen).
pub(super) const INTERNAL_CALLS: usize = 8;
/// Reconnect events are sent for every attempt up to this one, then throttled.
const RECONNECT_EVENTS_UNTHROTTLED: u32 = 10;
/// Throttled reconnect events: at most one per this many ms.
const RECONNECT_EVENT_INTERVAL_MS: u64 = 600_000;

/// Everything the gateway keeps about one backend.
pub(super) struct Backend {
    pub config: ServerConfig,
    pub sup: Supervisor,
    /// The era of the current connection (or of the last one).
    pub era: Era,
    /// The era the backend proved to speak, kept across reconnects: the next
    /// connection opens in it (and switches if the server says otherwise).
    pub era_learned: Option<Era>,
    /// The open `subscriptions/listen` of a stateless backend (gateway id).
    pub listen: Option<u64>,
    /// The backend answered `subscriptions/listen` with -32601: not asked again
    /// on this connection.
    pub listen_unsupported: bool,
    /// Capabilities from the last handshake, raw object.
    pub capabilities: Map<String, Value>,
    /// A discovery (initial or background) under way.
    pub discovery: Option<Discovery>,
    /// Run discovery again when the current one ends (list_changed arrived meanwhile).
    pub rediscover: u8,
    /// The raw lists of the last successful discovery, so one list can be
    /// refreshed (on its `list_changed`) without listing the others again.
    pub listed: [Vec<Map<String, Value>>; 4],
    /// How long each of those lists may be cached, as the backend said.
    pub cache: [CacheHint; 4],
    /// The catalog holds a completed discovery of this backend.
    pub catalog_discovered: bool,
    /// The next handshake may skip discovery (respawn from dormant).
    pub skip_discovery: bool,
    /// Client calls waiting for this backend.
    pub queue: VecDeque<Queued>,
    pub stderr_tail: VecDeque<String>,
    /// `ping` answered -32601: health checks use `tools/list`.
    pub ping_unsupported: bool,
    /// Session-lost (404) recoveries since the last success.
    pub session_losses: u8,
    /// When real traffic last succeeded (health checks are skipped after it).
    pub last_success: Option<Instant>,
    pub last_reconnect_event: Option<Instant>,
    /// When the first connection attempt began (the aggregation deadline counts from it).
    pub first_connect_at: Option<Instant>,
    /// When the current connection attempt began (lists wait briefly for it).
    pub connect_started_at: Option<Instant>,
    /// Since when it has been online without a break.
    pub online_since: Option<Instant>,
    /// Calls, latencies, restarts and breaker transitions, for status and metrics.
    pub metrics: BackendMetrics,
    /// The OAuth credential tether manages for this remote backend, if it does.
    pub credential: Option<crate::credential::Credential>,
    /// Requests with a gateway id below this were sent before the newest
    /// credential arrived: a 401 on one of them is answered by resending.
    pub credential_first_id: u64,
    /// The connection was refused for its credential: connect again when a new
    /// one arrives.
    pub awaiting_credential: bool,
    /// The login clients were asked to open (URL elicitation), to tell them when
    /// it is done.
    pub login_elicitation: Option<super::credentials::LoginElicitation>,
    /// SSE streams of the connection that ended and are resumed, and the event
    /// ids seen on it (Streamable HTTP).
    pub streams: super::streams::Streams,
}

/// A discovery in progress: lists accumulate here until every page is in.
#[derive(Default)]
pub(super) struct Discovery {
    /// Kinds being re-listed (bit `1 << kind`); the others keep their last lists.
    pub requested: u8,
    pub lists: [Vec<Map<String, Value>>; 4],
    /// Each list's cache hint: the shortest-lived of its pages.
    pub cache: [Option<CacheHint>; 4],
    pub outstanding: u32,
    pub failed: bool,
}

impl Backend {
    pub fn new(config: ServerConfig, sup: Supervisor) -> Self {
        Backend {
            config,
            sup,
            era: Era::Handshake,
            era_learned: None,
            listen: None,
            listen_unsupported: false,
            capabilities: Map::new(),
            discovery: None,
            rediscover: 0,
            listed: Default::default(),
            cache: [CacheHint::STALE; 4],
            catalog_discovered: false,
            skip_discovery: false,
            queue: VecDeque::new(),
            stderr_tail: VecDeque::new(),
            ping_unsupported: false,
            session_losses: 0,
            last_success: None,
            last_reconnect_event: None,
            first_connect_at: None,
            connect_started_at: None,
            online_since: None,
            metrics: BackendMetrics::default(),
            credential: None,
            credential_first_id: 0,
            awaiting_credential: false,
            login_elicitation: None,
            streams: Default::default(),
        }
    }

    /// The epoch of the managed credential (0 without one).
    pub fn credential_epoch(&self) -> u64 {
        self.credential.as_ref().map_or(0, |c| c.epoch())
    }

    pub fn push_stderr(&mut self, line: String) {
        if self.stderr_tail.len() == STDERR_TAIL {
            self.stderr_tail.pop_front();
        }
        let mut line = line;
        if line.len() > 512 {
            let mut end = 512;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
        }
        self.stderr_tail.push_back(line);
    }

    /// The earliest of the supervisor's timers and the queue's deadlines.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let ready = self.sup.is_ready();
        let epoch = self.credential_epoch();
        let queue = self.queue.iter().map(|q| {
            if ready && q.not_before < q.deadline && q.call.wait_epoch <= epoch {
                q.not_before
            } else {
                q.deadline
            }
        });
        let credential = self.credential.as_ref().and_then(|c| c.deadline());
        let streams = self.streams.next_deadline();
        self.sup.poll_timeout().into_iter().chain(queue).chain(credential).chain(streams).min()
    }

    /// Whether clients see this backend's catalog: while it is online or dormant, and
    /// while a dormant backend is being woken (its cached catalog stays in force).
    pub fn is_visible(&self) -> bool {
        self.sup.status().is_visible()
            || (self.skip_discovery && self.catalog_discovered && self.sup.status() == Status::Connecting)
    }

    fn has_capability(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(|v| !v.is_null())
    }

    fn capability_names(&self) -> Vec<String> {
        self.capabilities.keys().cloned().collect()
    }

    /// The message a crash or failure carries: the failure plus the stderr tail.
    fn failure_message(&self, failure: &Failure) -> String {
        let mut m = failure.describe();
        if self.config.transport.is_stdio() && !self.stderr_tail.is_empty() {
            m.push_str("; stderr: ");
            for (i, line) in self.stderr_tail.iter().enumerate() {
                if i > 0 {
                    m.push_str(" | ");
                }
                m.push_str(line);
            }
        }
        m
    }
}

impl Gateway {
    /// Starts a new connection: spawn or connect, then open it in the backend's
    /// era (`initialize`, or the `server/discover` probe).
    pub(super) fn connect(&mut self, server: &str) {
        let now = self.now;
        let name = self.name(server);
        let Some(b) = self.backends.get_mut(server) else { return };
        let generation = b.sup.begin_connect(now);
        if b.first_connect_at.is_some() {
            match b.config.transport {
                Transport::Stdio { .. } => b.metrics.restarts += 1,
                _ => b.metrics.reconnects += 1,
            }
        }
        b.first_connect_at.get_or_insert(now);
        b.connect_started_at = Some(now);
        b.stderr_tail.clear();
        b.discovery = None;
        b.streams = Default::default();
        let action = match &b.config.transport {
            Transport::Stdio { command, args, env, cwd } => Action::Spawn {
                server: name.clone(),
                generation,
                command: command.clone(),
                args: args.clone(),
                env: env.clone(),
                cwd: cwd.clone(),
            },
            Transport::Http { url, headers } | Transport::Sse { url, headers } => Action::ConnectHttp {
                server: name.clone(),
                generation,
                url: url.clone(),
                headers: headers.clone(),
                legacy_sse: matches!(b.config.transport, Transport::Sse { .. }),
            },
        };
        b.listen = None;
        b.listen_unsupported = false;
        b.awaiting_credential = false;
        let load = b.credential.as_mut().filter(|c| c.needs_load()).map(|c| {
            c.loading();
            Action::Authorize { server: name.clone(), step: crate::credential::AuthStep::Load }
        });
        // The era to open in: configured, else the one the backend proved to
        // speak, else unknown (probe, as the specification says). The legacy
        // HTTP+SSE transport is 2024-11-05 only.
        let auto = b.config.era.is_none();
        let legacy_sse = matches!(b.config.transport, Transport::Sse { .. });
        let era = if legacy_sse { Some(Era::Handshake) } else { b.config.era.or(b.era_learned) };
        if let Some(load) = load {
            self.push(load);
        }
        self.push(action);
        match era {
            Some(Era::Handshake) => self.send_initialize(server, auto && !legacy_sse),
            Some(Era::Stateless) => self.send_probe(server, auto, false),
            None => self.send_probe(server, true, true),
        }
    }

    /// The handshake-era opener: `initialize`.
    fn send_initialize(&mut self, server: &str, may_probe: bool) {
        let name = self.name(server);
        let Some(b) = self.backends.get_mut(server) else { return };
        b.era = Era::Handshake;
        let generation = b.sup.generation();
        let id = self.alloc_id();
        let params = format!(
            r#"{{"protocolVersion":"{}","capabilities":{{"roots":{{"listChanged":true}},"sampling":{{}},"elicitation":{{}}}},"clientInfo":{}}}"#,
            protocol::SUPPORTED_VERSIONS[0],
            protocol::CLIENT_INFO
        );
        let kind = CallKind::Initialize { may_probe };
        self.router.calls.insert(id, Call { server: name, generation, deadline: None, kind });
        self.to_backend(server, protocol::request(id, "initialize", Some(&params)), Some(id));
    }

    /// The stateless-era opener: `server/discover`. `may_initialize`: a server of
    /// unknown era; anything but a stateless answer means `initialize`. `unknown`:
    /// on stdio, a server that stays silent is taken for a handshake-era one after
    /// `probe_timeout_ms` (over HTTP, silence is a failure like any other).
    fn send_probe(&mut self, server: &str, may_initialize: bool, unknown: bool) {
        let name = self.name(server);
        let now = self.now;
        let Some(b) = self.backends.get_mut(server) else { return };
        b.era = Era::Stateless;
        let generation = b.sup.generation();
        let deadline =
            (unknown && b.config.transport.is_stdio()).then(|| now + Self::duration(b.sup.policy().probe_timeout_ms));
        let id = self.alloc_id();
        let kind = CallKind::Probe { may_initialize };
        self.router.calls.insert(id, Call { server: name, generation, deadline, kind });
        let params = protocol::params_with_meta(None, &protocol::stateless_meta_members("{}"));
        self.to_backend(server, protocol::request(id, "server/discover", Some(&params)), Some(id));
    }

    /// A request of the gateway's own to `server`, in the era of its connection:
    /// a stateless backend gets the per-request `_meta` (declaring no client
    /// capabilities: nobody is behind it to answer input requests).
    pub(super) fn backend_request_frame(&self, server: &str, id: u64, method: &str, params: Option<&str>) -> String {
        match self.backends.get(server).map(|b| b.era) {
            Some(Era::Stateless) => {
                let params = protocol::params_with_meta(params, &protocol::stateless_meta_members("{}"));
                protocol::request(id, method, Some(&params))
            }
            _ => protocol::request(id, method, params),
        }
    }

    /// A frame from the live connection of `server`.
    pub(super) fn backend_frame(&mut self, server: &str, frame: &str) {
        if frame.len() > self.config.limits.max_frame_bytes as usize {
            self.emit(Event::ProtocolViolation {
                server: self.name(server),
                detail: format!("frame of {} bytes exceeds the limit", frame.len()),
            });
            return;
        }
        let message = match protocol::parse(frame) {
            Ok(m) => m,
            Err(e) => {
                self.emit(Event::ProtocolViolation { server: self.name(server), detail: e.message });
                return;
            }
        };
        match message {
            Message::Response { id, result } => {
                let Some(call_id) = protocol::gateway_id(id) else {
                    return self.unknown_response(server, id.get());
                };
                self.backend_answer(server, call_id, Ok(result.get()));
            }
            Message::Error { id, error } => {
                let Some(call_id) = id.and_then(protocol::gateway_id) else {
                    return self.unknown_response(server, id.map_or("null", |id| id.get()));
                };
                self.backend_answer(server, call_id, Err(error.get()));
            }
            Message::Notification { method, params } => {
                self.backend_notification(server, &method, params.map(|p| p.get()));
            }
            Message::Request { id, method, params } => {
                self.backend_request(server, id.get(), &method, params.map(|p| p.get()));
            }
        }
    }

    fn unknown_response(&mut self, server: &str, id: &str) {
        self.emit(Event::ProtocolViolation {
            server: self.name(server),
            detail: format!("response to unknown request id {id}"),
        });
    }

    /// A response or error for request `call_id`.
    fn backend_answer(&mut self, server: &str, call_id: u64, answer: Result<&str, &str>) {
        let generation = self.backends[server].sup.generation();
        match self.router.calls.get(&call_id) {
            Some(c) if &*c.server == server && c.generation == generation => {}
            // Ours, but over: an answer after a cancel or timeout, which the
            // spec allows to cross the cancellation. Dropped without a word.
            _ if call_id < self.router.next_request_id => return,
            _ => return self.unknown_response(server, &call_id.to_string()),
        }
        let Some(call) = self.router.calls.remove(&call_id) else { return };
        self.stream_answered(server, call_id);
        match call.kind {
            CallKind::Initialize { may_probe } => self.handshake_answer(server, answer, may_probe),
            CallKind::Probe { may_initialize } => self.probe_answer(server, answer, may_initialize),
            CallKind::Listen => self.listen_ended(server, call_id, answer.err()),
            CallKind::Discover { kind, pages } => self.discovery_answer(server, kind, pages, answer),
            CallKind::Health => self.health_answer(server, answer),
            CallKind::Quiet => {}
            CallKind::Client(c) => {
                self.record_success(server);
                self.answer_client_call(server, c, answer);
            }
        }
    }

    fn record_success(&mut self, server: &str) {
        let now = self.now;
        let Some(b) = self.backends.get_mut(server) else { return };
        b.last_success = Some(now);
        b.session_losses = 0;
        b.sup.touch(now);
        if let Some(BreakerTransition::Closed) = b.sup.breaker.on_success(now) {
            self.emit(Event::CircuitClosed { server: self.name(server) });
        }
    }

    fn handshake_answer(&mut self, server: &str, answer: Result<&str, &str>, may_probe: bool) {
        let result = match answer {
            Ok(r) => serde_json::from_str::<Map<String, Value>>(r).ok(),
            Err(_) => None,
        };
        let Some(result) = result else {
            if may_probe && answer.is_err() {
                // It spoke the handshake era before; refusing `initialize` now may
                // mean it was upgraded to the stateless revision only.
                return self.send_probe(server, false, false);
            }
            let detail = match answer {
                Err(e) => format!("initialize refused: {e}"),
                Ok(_) => "initialize answered with an invalid result".to_string(),
            };
            return self.connection_lost(server, Failure::Other { message: detail });
        };
        self.connection_opened(server, Era::Handshake, &result);
    }

    /// The answer to the `server/discover` probe: a stateless server, or (when
    /// allowed) a handshake-era one to open with `initialize`. The fallback is not
    /// keyed to one error code (the specification forbids that): only an answer
    /// that proves a stateless server keeps it from happening.
    fn probe_answer(&mut self, server: &str, answer: Result<&str, &str>, may_initialize: bool) {
        let speaks = |versions: Option<&Value>, wanted: &[&str]| {
            versions
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|v| v.as_str().is_some_and(|v| wanted.contains(&v))))
        };
        let verdict = match answer {
            Ok(r) => match serde_json::from_str::<Map<String, Value>>(r) {
                Ok(result) if speaks(result.get("supportedVersions"), &protocol::MODERN_VERSIONS) => {
                    return self.connection_opened(server, Era::Stateless, &result);
                }
                Ok(result) => Err(format!(
                    "server/discover lists no revision tether speaks (supportedVersions: {})",
                    result.get("supportedVersions").map_or_else(|| "none".to_string(), Value::to_string)
                )),
                Err(_) => Err("server/discover answered with an invalid result".to_string()),
            },
            Err(e) => {
                let error = serde_json::from_str::<Map<String, Value>>(e).unwrap_or_default();
                let code = error.get("code").and_then(Value::as_i64);
                let supported = error.get("data").and_then(|d| d.get("supported"));
                if code == Some(protocol::modern_code::UNSUPPORTED_PROTOCOL_VERSION)
                    && !speaks(supported, &protocol::SUPPORTED_VERSIONS)
                {
                    // A stateless server that speaks none of our revisions: falling
                    // back would not help.
                    let supported = supported.map_or_else(|| "none".to_string(), Value::to_string);
                    let message =
                        format!("the server speaks none of tether's protocol revisions (it supports {supported})");
                    return self.connection_lost(server, Failure::Other { message });
                }
                Err(format!("server/discover refused: {e}"))
            }
        };
        match verdict {
            Err(_) if may_initialize => self.send_initialize(server, false),
            Err(message) => self.connection_lost(server, Failure::Other { message }),
            Ok(()) => {}
        }
    }

    /// The connection is open in `era` (`initialize` or `server/discover`
    /// answered with `result`): discover, listen, and send what waited.
    fn connection_opened(&mut self, server: &str, era: Era, result: &Map<String, Value>) {
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live backend");
        b.era = era;
        b.era_learned = Some(era);
        b.capabilities = match result.get("capabilities") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        let skip = b.skip_discovery && b.catalog_discovered;
        b.skip_discovery = false;
        let reconnected = b.sup.on_handshake(now, skip, &mut self.rng);
        let capabilities = b.capability_names();
        if era == Era::Handshake {
            self.to_backend(server, protocol::notification("notifications/initialized", None), None);
        }
        if let Some(attempts_taken) = reconnected {
            self.emit(Event::ServerReconnected { server: self.name(server), attempts_taken, capabilities });
        }
        if !skip {
            self.start_discovery(server, ALL_KINDS);
        }
        match era {
            Era::Handshake => self.resubscribe(server),
            Era::Stateless => self.open_listen(server),
        }
        self.flush_queue(server);
    }

    /// Opens a stateless backend's `subscriptions/listen` for the changes tether
    /// relays: list changes it announces, and updates of the resources clients
    /// subscribed to. The stateless revision sends these only on a listen.
    pub(super) fn open_listen(&mut self, server: &str) {
        let Some(b) = self.backends.get(server) else { return };
        if b.era != Era::Stateless || b.listen.is_some() || b.listen_unsupported || !b.sup.is_ready() {
            return;
        }
        let announces = |cap: &str, flag: &str| {
            b.capabilities.get(cap).and_then(|c| c.get(flag)).and_then(Value::as_bool) == Some(true)
        };
        let mut filter = Map::new();
        for (cap, key) in
            [("tools", "toolsListChanged"), ("prompts", "promptsListChanged"), ("resources", "resourcesListChanged")]
        {
            if announces(cap, "listChanged") {
                filter.insert(key.into(), Value::Bool(true));
            }
        }
        if announces("resources", "subscribe") {
            let catalog = &self.catalog;
            let uris: Vec<Value> = self
                .sessions
                .subscriptions
                .keys()
                .filter_map(|u| {
                    catalog.resolve_uri(u).filter(|(s, _)| *s == server).map(|(_, uri)| Value::String(uri.into()))
                })
                .collect();
            if !uris.is_empty() {
                filter.insert("resourceSubscriptions".into(), Value::Array(uris));
            }
        }
        if filter.is_empty() {
            return;
        }
        let id = self.alloc_id();
        let b = self.backends.get_mut(server).expect("live");
        b.listen = Some(id);
        let generation = b.sup.generation();
        self.router
            .calls
            .insert(id, Call { server: self.name(server), generation, deadline: None, kind: CallKind::Listen });
        let params = serde_json::json!({ "notifications": filter }).to_string();
        let frame = self.backend_request_frame(server, id, "subscriptions/listen", Some(&params));
        self.to_backend(server, frame, Some(id));
    }

    /// Ends the open listen of a stateless backend (if any) and opens one for
    /// what clients want now (their resource subscriptions changed).
    pub(super) fn relisten(&mut self, server: &str) {
        let Some(b) = self.backends.get_mut(server) else { return };
        if let Some(id) = b.listen.take() {
            self.router.calls.remove(&id);
            let params = format!(r#"{{"requestId":{id}}}"#);
            self.to_backend(server, protocol::notification("notifications/cancelled", Some(&params)), None);
        }
        self.open_listen(server);
    }

    /// A stateless backend ended its listen (a final answer, an error, or its
    /// `notifications/cancelled`): opened again at the next health check, unless
    /// the backend does not support listening.
    pub(super) fn listen_ended(&mut self, server: &str, id: u64, error: Option<&str>) {
        let Some(b) = self.backends.get_mut(server) else { return };
        if b.listen == Some(id) {
            b.listen = None;
        }
        if error.and_then(error_code) == Some(code::METHOD_NOT_FOUND) {
            b.listen_unsupported = true;
        }
    }

    /// Lists everything the backend offers (following its cursors).
    pub(super) fn start_discovery(&mut self, server: &str, requested: u8) {
        let Some(b) = self.backends.get_mut(server) else { return };
        if b.discovery.is_some() {
            b.rediscover |= requested;
            return;
        }
        let kinds: Vec<ListKind> = ListKind::ALL
            .into_iter()
            .filter(|k| requested & kind_bit(*k) != 0 && b.has_capability(k.capability()))
            .collect();
        b.discovery = Some(Discovery { requested, ..Discovery::default() });
        for kind in &kinds {
            self.request_page(server, *kind, None, 1);
        }
        if kinds.is_empty() {
            self.finish_discovery(server);
        }
    }

    fn request_page(&mut self, server: &str, kind: ListKind, cursor: Option<&str>, pages: u32) {
        let id = self.alloc_id();
        let Some(b) = self.backends.get_mut(server) else { return };
        let generation = b.sup.generation();
        let deadline = Some(self.now + Self::duration(b.sup.policy().request_timeout_ms));
        if let Some(d) = b.discovery.as_mut() {
            d.outstanding += 1;
        }
        let params = cursor.map(|c| format!(r#"{{"cursor":{}}}"#, protocol::quote(c)));
        self.router.calls.insert(
            id,
            Call { server: self.name(server), generation, deadline, kind: CallKind::Discover { kind, pages } },
        );
        let frame = self.backend_request_frame(server, id, kind.method(), params.as_deref());
        self.to_backend(server, frame, Some(id));
    }

    fn discovery_answer(&mut self, server: &str, kind: ListKind, pages: u32, answer: Result<&str, &str>) {
        let max_items = self.config.limits.max_catalog_items as usize;
        let max_pages = self.config.limits.max_discovery_pages;
        let Some(b) = self.backends.get_mut(server) else { return };
        let Some(d) = b.discovery.as_mut() else { return };
        d.outstanding = d.outstanding.saturating_sub(1);
        let mut next = None;
        match answer.ok().and_then(|r| serde_json::from_str::<Map<String, Value>>(r).ok()) {
            Some(mut result) => {
                let hint = CacheHint::of(&result);
                let cached = &mut d.cache[kind as usize];
                *cached = Some(cached.map_or(hint, |h| h.and(hint)));
                if let Some(Value::Array(items)) = result.remove(kind.result_key()) {
                    let list = &mut d.lists[kind as usize];
                    for item in items {
                        if let (Value::Object(m), true) = (item, list.len() < max_items) {
                            list.push(m);
                        }
                    }
                }
                if let Some(Value::String(cursor)) = result.remove("nextCursor") {
                    if pages < max_pages && !cursor.is_empty() {
                        next = Some(cursor);
                    }
                }
            }
            // An error for one list (even an announced one) leaves that list empty on a
            // first discovery; a re-discovery that gets one keeps the cached catalog.
            None if answer.is_err() => d.failed |= b.catalog_discovered,
            None => d.failed = true,
        }
        if let Some(cursor) = next {
            return self.request_page(server, kind, Some(&cursor), pages + 1);
        }
        if d.outstanding == 0 {
            self.finish_discovery(server);
        }
    }

    /// A discovery request timed out or its connection failed.
    fn discovery_failed(&mut self, server: &str) {
        let Some(b) = self.backends.get_mut(server) else { return };
        if let Some(d) = b.discovery.as_mut() {
            d.outstanding = d.outstanding.saturating_sub(1);
            d.failed = true;
            if d.outstanding == 0 {
                self.finish_discovery(server);
            }
        }
    }

    fn finish_discovery(&mut self, server: &str) {
        let now = self.now;
        let Some(b) = self.backends.get_mut(server) else { return };
        let Some(d) = b.discovery.take() else { return };
        if d.failed && !b.catalog_discovered {
            // Never online with an empty catalog: a first discovery that fails is a failed connection.
            return self.connection_lost(server, Failure::Other { message: "discovery failed".into() });
        }
        if !d.failed {
            b.catalog_discovered = true;
            let mut lists = d.lists;
            for kind in ListKind::ALL {
                if d.requested & kind_bit(kind) == 0 {
                    lists[kind as usize] = b.listed[kind as usize].clone();
                } else {
                    b.cache[kind as usize] = d.cache[kind as usize].unwrap_or(CacheHint::STALE);
                }
            }
            b.listed = lists.clone();
            let installed = self.catalog.install(server, lists);
            for c in installed.conflicts {
                self.emit(Event::NameConflict { server: self.name(server), name: c.name });
            }
            for r in installed.rejected {
                let detail = format!("tool {} not served: {}", protocol::quote(&r.name), r.reason);
                self.emit(Event::ProtocolViolation { server: self.name(server), detail });
            }
            let (count, estimated_tokens) =
                self.catalog.backend(server).map_or((0, 0), |c| (c.tool_count(), c.estimated_tokens()));
            self.emit(Event::ToolsDiscovered { server: self.name(server), count, estimated_tokens });
        }
        let b = self.backends.get_mut(server).expect("live backend");
        if b.sup.status() == Status::DiscoveringTools {
            b.sup.on_discovered(now, &mut self.rng);
        }
        let again = core::mem::take(&mut b.rediscover);
        if again != 0 {
            self.start_discovery(server, again);
        }
    }

    fn health_answer(&mut self, server: &str, answer: Result<&str, &str>) {
        let now = self.now;
        let Some(b) = self.backends.get_mut(server) else { return };
        let ok = match answer {
            Ok(_) => true,
            Err(e)
                if b.era == Era::Handshake && !b.ping_unsupported && error_code(e) == Some(code::METHOD_NOT_FOUND) =>
            {
                b.ping_unsupported = true;
                true
            }
            Err(_) => false,
        };
        b.sup.schedule_health(now, &mut self.rng);
        // A health check is not traffic: `last_success` (which skips checks) stays as it is.
        if ok {
            if let Some(HealthChange::Restored) = b.sup.health.on_success() {
                self.emit(Event::ServerHealthRestored { server: self.name(server) });
            }
        } else {
            self.health_failed(server, "health check answered with an error".into());
        }
    }

    fn health_failed(&mut self, server: &str, last_error: String) {
        let Some(b) = self.backends.get_mut(server) else { return };
        if let Some(HealthChange::Degraded { consecutive_failures }) = b.sup.health.on_failure() {
            self.emit(Event::ServerHealthDegraded { server: self.name(server), consecutive_failures, last_error });
        }
    }

    fn backend_notification(&mut self, server: &str, method: &str, params: Option<&str>) {
        match method {
            "notifications/tools/list_changed"
            | "notifications/resources/list_changed"
            | "notifications/prompts/list_changed"
                if self.backends[server].sup.is_ready() =>
            {
                let kinds = match method {
                    "notifications/tools/list_changed" => kind_bit(ListKind::Tools),
                    "notifications/prompts/list_changed" => kind_bit(ListKind::Prompts),
                    _ => kind_bit(ListKind::Resources) | kind_bit(ListKind::ResourceTemplates),
                };
                self.start_discovery(server, kinds);
            }
            "notifications/progress" => self.forward_progress(server, params),
            "notifications/message" => self.forward_log(server, params),
            "notifications/resources/updated" => self.forward_resource_updated(server, params),
            "notifications/cancelled" => self.backend_cancelled(server, params),
            // The listen is open; tether asked only for what it relays.
            "notifications/subscriptions/acknowledged" => {}
            _ => {}
        }
    }

    fn forward_progress(&mut self, server: &str, params: Option<&str>) {
        let Some(mut p) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else { return };
        let Some(token) = p.get("progressToken").and_then(Value::as_u64) else { return };
        let now = self.now;
        let Some(call) = self.router.calls.get_mut(&token) else { return };
        if &*call.server != server {
            return;
        }
        let CallKind::Client(c) = &mut call.kind else { return };
        let Some(client_token) = c.progress.clone() else { return };
        let (session, client_id) = (c.session, c.id.clone());
        let policy = self.backends[server].sup.policy();
        let hard = c.created + Self::duration(policy.request_timeout_max_ms);
        let reset = now + Self::duration(policy.request_timeout_ms);
        call.deadline = Some(reset.min(hard));
        // Progress must increase (MCP). A call resent on a fresh process counts
        // again from the start: those repeats keep the call alive but are not forwarded.
        let value = p.get("progress").and_then(Value::as_f64);
        if let (Some(value), Some(last)) = (value, c.last_progress) {
            if value <= last {
                return;
            }
        }
        if value.is_some() {
            c.last_progress = value;
        }
        p.insert("progressToken".into(), client_token);
        let params = serde_json::to_string(&p).unwrap_or_default();
        self.related_to_client(
            session,
            Some(&client_id),
            protocol::notification("notifications/progress", Some(&params)),
        );
    }

    fn forward_log(&mut self, server: &str, params: Option<&str>) {
        let Some(mut p) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else { return };
        let logger = match p.get("logger").and_then(Value::as_str) {
            Some(l) => format!("{server}/{l}"),
            None => server.to_string(),
        };
        p.insert("logger".into(), Value::String(logger));
        let params = serde_json::to_string(&p).unwrap_or_default();
        let ready: Vec<_> = self.sessions.open.iter().filter(|(_, s)| s.ready).map(|(id, _)| *id).collect();
        for session in ready {
            // Logged while this session has a call on the backend: most likely about that call.
            let related = self.latest_call(server, Some(session)).map(|(_, id)| id);
            let frame = protocol::notification("notifications/message", Some(&params));
            self.related_to_client(session, related.as_deref(), frame);
        }
        // Stateless clients have no session to log to: a message goes to the
        // latest call of each that asked for this level on the backend.
        let severity = p.get("level").and_then(Value::as_str).and_then(protocol::log_severity).unwrap_or(0);
        let mut latest: BTreeMap<crate::io::SessionId, crate::io::RawId> = BTreeMap::new();
        for c in self.router.calls.values().filter(|c| &*c.server == server) {
            if let CallKind::Client(cc) = &c.kind {
                let wanted = cc.log_level.as_deref().and_then(protocol::log_severity);
                if wanted.is_some_and(|w| severity >= w) {
                    latest.insert(cc.session, cc.id.clone());
                }
            }
        }
        for (session, id) in latest {
            let frame = protocol::notification("notifications/message", Some(&params));
            self.related_to_client(session, Some(&id), frame);
        }
    }

    fn forward_resource_updated(&mut self, server: &str, params: Option<&str>) {
        let Some(mut p) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else { return };
        let Some(uri) = p.get("uri").and_then(Value::as_str) else { return };
        let Some(served) = self.catalog.serve_uri(server, uri) else { return };
        let Some(sessions) = self.sessions.subscriptions.get(&served).cloned() else { return };
        p.insert("uri".into(), Value::String(served.clone()));
        // A stateless backend tags it with its own listen: meaningless past tether.
        p.remove("_meta");
        let params = serde_json::to_string(&p).unwrap_or_default();
        for session in sessions {
            if self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless) {
                let members = params.strip_prefix('{').and_then(|m| m.strip_suffix('}')).unwrap_or_default();
                self.update_listens(session, &served, members);
            } else {
                self.to_client(session, protocol::notification("notifications/resources/updated", Some(&params)));
            }
        }
    }

    /// The backend cancelled one of its own requests to a client.
    fn backend_cancelled(&mut self, server: &str, params: Option<&str>) {
        let Some(p) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else { return };
        let Some(request_id) = p.get("requestId").and_then(|v| serde_json::to_string(v).ok()) else { return };
        // A stateless backend ends a listen this way on stdio.
        let listen = self.backends.get(server).and_then(|b| b.listen);
        if let Some(id) = listen.filter(|id| request_id == id.to_string()) {
            self.router.calls.remove(&id);
            return self.listen_ended(server, id, None);
        }
        let found = self
            .router
            .server_requests
            .iter()
            .find(|(_, r)| &*r.server == server && r.backend_id == request_id)
            .map(|(id, r)| (*id, r.session, r.related.clone()));
        if let Some((id, session, related)) = found {
            self.router.server_requests.remove(&id);
            let params = format!(r#"{{"requestId":{id},"reason":"cancelled by the server"}}"#);
            let frame = protocol::notification("notifications/cancelled", Some(&params));
            self.related_to_client(session, related.as_deref(), frame);
        }
    }

    /// A backend asks something of a client: answered here (`ping`) or routed to
    /// the session whose call caused it.
    fn backend_request(&mut self, server: &str, id: &str, method: &str, params: Option<&str>) {
        if method == "ping" {
            return self.to_backend(server, protocol::response(id, "{}"), None);
        }
        let capability = match method {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => {
                let msg = format!("tether does not forward {method} to clients");
                return self.to_backend(server, protocol::error_response(id, code::METHOD_NOT_FOUND, &msg, None), None);
            }
        };
        if let Some(call) = self.stateless_call_on(server) {
            return self.ask_stateless_client(server, call, id, method, params, capability);
        }
        let Some((session, related)) = self.origin_session(server, capability) else {
            let msg = format!("no connected client supports {capability}");
            return self.to_backend(server, protocol::error_response(id, code::METHOD_NOT_FOUND, &msg, None), None);
        };
        if self.router.server_requests.len() >= self.config.limits.max_pending_server_requests as usize {
            let msg = "too many requests pending at clients";
            return self.to_backend(server, protocol::error_response(id, code::OVERLOADED, msg, None), None);
        }
        let client_id = self.alloc_id();
        let generation = self.backends[server].sup.generation();
        self.router.server_requests.insert(
            client_id,
            ServerRequest {
                server: self.name(server),
                generation,
                backend_id: id.to_string(),
                session,
                related: related.clone(),
                round: None,
                defaults: (method == "elicitation/create").then(|| protocol::elicitation_defaults(params)).flatten(),
            },
        );
        self.related_to_client(session, related.as_deref(), protocol::request(client_id, method, params));
    }

    /// The session to ask, and the client call it is asked for: the latest call in
    /// flight on this backend, else any ready session that supports the capability.
    fn origin_session(
        &self,
        server: &str,
        capability: &str,
    ) -> Option<(crate::io::SessionId, Option<crate::io::RawId>)> {
        let supports = |s: &crate::io::SessionId| self.sessions.open.get(s).is_some_and(|s| s.supports(capability));
        match self.latest_call(server, None) {
            Some((s, id)) if supports(&s) => Some((s, Some(id))),
            Some(_) => None,
            None => self.sessions.open.iter().find(|(id, s)| s.ready && supports(id)).map(|(id, _)| (*id, None)),
        }
    }

    /// The newest client call in flight on `server` (from `session`, if given): its session and id.
    fn latest_call(
        &self,
        server: &str,
        session: Option<crate::io::SessionId>,
    ) -> Option<(crate::io::SessionId, crate::io::RawId)> {
        self.router.calls.values().rev().filter(|c| &*c.server == server).find_map(|c| match &c.kind {
            CallKind::Client(cc) if session.map_or(true, |s| s == cc.session) => Some((cc.session, cc.id.clone())),
            _ => None,
        })
    }

    /// A transport failure on the live connection, for one request or all of it.
    pub(super) fn backend_failed(&mut self, server: &str, request: Option<u64>, failure: Failure) {
        let class = failure.classify();
        if failure.is_auth() && self.backends[server].credential.is_some() {
            return self.unauthorized(server, request, failure);
        }
        let Some(request) = request else {
            return self.connection_lost(server, failure);
        };
        let generation = self.backends[server].sup.generation();
        let Some(call) = self.router.calls.get(&request).filter(|c| &*c.server == server && c.generation == generation)
        else {
            return;
        };
        // A probe answered with an HTTP error and no stateless error body: a
        // handshake-era server (the specification's HTTP fallback rule).
        let legacy_status = matches!(failure, Failure::Http { status: 400..=499 })
            && !matches!(failure, Failure::Http { status: 401 | 403 | 408 | 429 });
        if matches!(call.kind, CallKind::Probe { may_initialize: true }) && legacy_status {
            self.router.calls.remove(&request);
            return self.send_initialize(server, false);
        }
        if class.status == FailureStatus::SessionLost {
            return self.session_lost(server, Some(request));
        }
        if class.status == FailureStatus::RequiresReauth {
            return self.connection_lost(server, failure);
        }
        let call = self.router.calls.remove(&request).expect("checked above");
        match call.kind {
            CallKind::Client(c) => self.client_call_failed(server, c, &failure),
            CallKind::Quiet => {}
            CallKind::Listen => self.listen_ended(server, request, None),
            CallKind::Health => {
                self.backends.get_mut(server).expect("live").sup.schedule_health(self.now, &mut self.rng);
                self.health_failed(server, failure.describe());
            }
            CallKind::Initialize { .. } | CallKind::Probe { .. } | CallKind::Discover { .. } => {
                self.connection_lost(server, failure)
            }
        }
    }

    /// A forwarded call failed in transport: retry under the safety rule, else
    /// fail it, count it, and mark the backend down when the transport is.
    pub(super) fn client_call_failed(&mut self, server: &str, call: ClientCall, failure: &Failure) {
        let message = format!("backend '{server}' failed: {}", failure.describe());
        self.client_call_failed_with(server, call, failure, message);
    }

    /// [`Gateway::client_call_failed`], with `why` the transport failed in the
    /// client's error.
    pub(super) fn client_call_failed_because(&mut self, server: &str, call: ClientCall, failure: &Failure, why: &str) {
        let message = format!("backend '{server}' failed: {why}");
        self.client_call_failed_with(server, call, failure, message);
    }

    fn client_call_failed_with(&mut self, server: &str, mut call: ClientCall, failure: &Failure, message: String) {
        let class = failure.classify();
        let b = &self.backends[server];
        let delays = &b.sup.policy().call_retry_delays_ms;
        let safe = class.delivery == crate::policy::Delivery::NotDelivered
            || call.retry_safe
            || b.sup.policy().retry_unsafe_calls;
        if class.retryable && safe && (call.retries as usize) < delays.len() {
            let wait = Self::duration(delays[call.retries as usize]);
            call.retries += 1;
            let not_before = self.now + wait;
            let deadline = call.created + Self::duration(b.sup.policy().request_timeout_max_ms);
            self.requeue(server, Queued { call, not_before, deadline: deadline.max(not_before) }, false);
            return;
        }
        self.count_failure(server, class.counts_for_breaker, call.probe);
        // Mark the backend down first, so the error's data shows the status and the retry.
        // Only a request that certainly never arrived (refused, DNS) says the backend
        // is unreachable; a slow or reset answer is the breaker's business.
        if class.delivery == crate::policy::Delivery::NotDelivered && class.status == FailureStatus::Offline {
            self.connection_lost(server, failure.clone());
        }
        let data = self.unavailable_data(server);
        self.reply_error(call.session, &call.id, code::BACKEND_UNAVAILABLE, &message, Some(&data));
        self.record_call(server, &call, CallOutcome::Failed);
        self.release(&call);
    }

    /// Counts a failed call against the breaker.
    pub(super) fn count_failure(&mut self, server: &str, counts: bool, probe: bool) {
        let now = self.now;
        let Some(b) = self.backends.get_mut(server) else { return };
        if !counts {
            if probe {
                b.sup.breaker.probe_abandoned();
            }
            return;
        }
        if let Some(BreakerTransition::Opened { cooldown }) = b.sup.breaker.on_failure(now) {
            self.emit(Event::CircuitOpened { server: self.name(server), cooldown_ms: cooldown.as_millis() });
        }
    }

    /// HTTP 404 on a session: re-initialize and resend the request (if one was
    /// refused) once. A second loss before anything succeeds is a failure with
    /// backoff, not a hot loop.
    pub(super) fn session_lost(&mut self, server: &str, request: Option<u64>) {
        let b = self.backends.get_mut(server).expect("live");
        b.session_losses = b.session_losses.saturating_add(1);
        let handshaking = !b.sup.is_ready();
        if handshaking || b.session_losses > 1 {
            return self.connection_lost(server, Failure::Other { message: "backend session lost (HTTP 404)".into() });
        }
        let lost = match request.and_then(|r| self.router.calls.remove(&r)) {
            Some(Call { kind: CallKind::Client(c), .. }) => Some(c),
            _ => None,
        };
        let others = self.drop_connection(server, "backend session lost (HTTP 404)", true);
        // The rejected request never ran: resend it. Others on the lost session may
        // have run: resend them only when that is safe, else fail them.
        let retry_unsafe = self.backends[server].sup.policy().retry_unsafe_calls;
        let (safe, unsafe_): (Vec<ClientCall>, Vec<ClientCall>) =
            others.into_iter().partition(|c| (c.retry_safe || retry_unsafe) && !c.resent);
        let deadline = self.now + Self::duration(self.backends[server].sup.policy().request_timeout_ms);
        for mut c in lost.into_iter().chain(safe).rev() {
            c.resent = true;
            self.requeue(server, Queued { call: c, not_before: self.now, deadline }, true);
        }
        self.connect(server);
        for c in unsafe_ {
            if c.probe {
                self.backends.get_mut(server).expect("live").sup.breaker.probe_abandoned();
            }
            let msg = format!(
                "backend '{server}' lost its session (HTTP 404) while this call was in flight; it may have run, so it was not resent"
            );
            let data = self.unavailable_data(server);
            self.reply_error(c.session, &c.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
            self.record_call(server, &c, CallOutcome::Failed);
            self.release(&c);
        }
    }

    /// The connection is gone (exit, refused, handshake failure, timeout).
    pub(super) fn connection_lost(&mut self, server: &str, failure: Failure) {
        let now = self.now;
        let Some(b) = self.backends.get(server) else { return };
        let message = b.failure_message(&failure);
        let first_crash = b.sup.crashes.count(now) == 0;
        let vital = b.sup.is_vital();
        let resend_allowed = vital || first_crash;
        // A process that exits while it is probed is a handshake-era server that
        // cannot take a request before `initialize`: the next one is not probed.
        let probed = self
            .router
            .calls
            .values()
            .any(|c| &*c.server == server && matches!(c.kind, CallKind::Probe { may_initialize: true }));
        let in_flight = self.drop_connection(server, &message, true);
        let b = self.backends.get_mut(server).expect("live");
        if probed && matches!(failure, Failure::Exited { .. }) {
            b.era_learned = Some(Era::Handshake);
        }
        // A process that crashed is discovered afresh, even one woken from dormant.
        b.skip_discovery = false;
        let after = b.sup.on_connection_lost(now, &failure, message.clone(), &mut self.rng);
        // Calls waiting for this connection fail with the structured status.
        let waiting: Vec<Queued> = b.queue.drain(..).collect();
        for q in waiting {
            self.fail_unavailable(server, q.call);
        }
        let mut resend = Vec::new();
        for c in in_flight {
            let safe = c.retry_safe || self.backends[server].sup.policy().retry_unsafe_calls;
            if resend_allowed && safe && !c.resent && after.is_retry() {
                resend.push(c);
            } else {
                let class = failure.classify();
                self.count_failure(server, class.counts_for_breaker, c.probe);
                if matches!(after, AfterLoss::Reauth) {
                    let msg = self.reauth_message(server);
                    self.fail_reauth(server, c, &msg);
                    continue;
                }
                let msg = format!("backend '{server}' disconnected: {message}");
                let data = self.unavailable_data(server);
                self.reply_error(c.session, &c.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
                self.record_call(server, &c, CallOutcome::Failed);
                self.release(&c);
            }
        }
        match after {
            AfterLoss::Reconnect { attempt, delay } => self.announce_reconnect(server, attempt, delay.as_millis()),
            AfterLoss::GaveUp { crashes } => {
                let window_ms = self.backends[server].sup.policy().crash_window_ms;
                self.emit(Event::ServerPermanentlyFailed { server: self.name(server), crashes, window_ms });
            }
            AfterLoss::Restart { .. } | AfterLoss::Reauth => {}
        }
        if !resend.is_empty() {
            let deadline = now + Self::duration(self.backends[server].sup.policy().request_timeout_ms);
            for mut c in resend {
                c.resent = true;
                self.requeue(server, Queued { call: c, not_before: now, deadline }, false);
            }
            // Respawn now and retry once on the fresh process.
            let b = self.backends.get_mut(server).expect("live");
            if !b.queue.is_empty() && b.sup.readiness() == Readiness::StartNow {
                self.connect(server);
            }
        }
    }

    /// Puts a call back in its backend's queue (a retry or a resend), or fails it
    /// when the queue is full: the bound holds on every path.
    pub(super) fn requeue(&mut self, server: &str, queued: Queued, front: bool) {
        let limit = self.config.limits.max_queued_per_backend as usize;
        let b = self.backends.get_mut(server).expect("live");
        if b.queue.len() < limit {
            if front {
                b.queue.push_front(queued);
            } else {
                b.queue.push_back(queued);
            }
            return;
        }
        let call = queued.call;
        if call.probe {
            b.sup.breaker.probe_abandoned();
        }
        let msg = format!("backend '{server}': too many calls waiting for this backend, so this one was not retried");
        self.reply_error(call.session, &call.id, code::OVERLOADED, &msg, None);
        self.record_call(server, &call, CallOutcome::Failed);
        self.release(&call);
    }

    fn announce_reconnect(&mut self, server: &str, attempt: u32, next_retry_ms: u64) {
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live");
        let throttled = attempt > RECONNECT_EVENTS_UNTHROTTLED
            && b.last_reconnect_event
                .is_some_and(|at| now.saturating_since(at).as_millis() < RECONNECT_EVENT_INTERVAL_MS);
        if throttled {
            return;
        }
        b.last_reconnect_event = Some(now);
        self.emit(Event::ServerReconnecting { server: self.name(server), attempt, next_retry_ms });
    }

    /// Ends the live connection's bookkeeping: closes it, fails pending server
    /// requests, and returns its in-flight client calls for the caller to settle.
    pub(super) fn drop_connection(&mut self, server: &str, reason: &str, lost: bool) -> Vec<ClientCall> {
        let Some(b) = self.backends.get_mut(server) else { return Vec::new() };
        let generation = b.sup.generation();
        b.discovery = None;
        b.streams = Default::default();
        if b.sup.is_connected() {
            self.push(Action::CloseBackend { server: self.name(server), generation });
            if !lost {
                self.emit(Event::ServerDisconnected { server: self.name(server), intentional: true });
            }
        }
        if lost {
            self.emit(Event::ServerDisconnected { server: self.name(server), intentional: false });
        }
        let ids: Vec<u64> = self.router.calls.iter().filter(|(_, c)| &*c.server == server).map(|(id, _)| *id).collect();
        let mut client_calls = Vec::new();
        for id in ids {
            if let Some(Call { kind: CallKind::Client(c), .. }) = self.router.calls.remove(&id) {
                client_calls.push(c);
            }
        }
        let pending: Vec<(u64, crate::io::SessionId, Option<crate::io::RawId>)> = self
            .router
            .server_requests
            .iter()
            // Inputs a stateless backend asked for live in tether, not in the connection.
            .filter(|(_, r)| &*r.server == server && r.round.is_none())
            .map(|(id, r)| (*id, r.session, r.related.clone()))
            .collect();
        for (id, session, related) in pending {
            self.router.server_requests.remove(&id);
            let params = format!(
                r#"{{"requestId":{id},"reason":{}}}"#,
                protocol::quote(&format!("backend '{server}' disconnected: {reason}"))
            );
            self.related_to_client(
                session,
                related.as_deref(),
                protocol::notification("notifications/cancelled", Some(&params)),
            );
        }
        client_calls
    }

    /// Closes a backend on purpose and rests it in `status`.
    pub(super) fn close_backend(&mut self, server: &str, status: Status, message: Option<String>) {
        let reason = message.clone().unwrap_or_else(|| status.as_str().to_string());
        let in_flight = self.drop_connection(server, &reason, false);
        let b = self.backends.get_mut(server).expect("live");
        b.skip_discovery = false;
        b.sup.on_closed(status, message);
        let waiting: Vec<Queued> = b.queue.drain(..).collect();
        for c in in_flight.into_iter().chain(waiting.into_iter().map(|q| q.call)) {
            if let Some(b) = self.backends.get_mut(server) {
                if c.probe {
                    b.sup.breaker.probe_abandoned();
                }
            }
            let msg = format!("backend '{server}' was closed: {reason}");
            let data = self.unavailable_data(server);
            self.reply_error(c.session, &c.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
            self.record_call(server, &c, CallOutcome::Failed);
            self.release(&c);
        }
    }

    pub(super) fn remove_backend(&mut self, server: &str) {
        self.close_backend(server, Status::Disconnected, Some("removed from config".into()));
        // Announce its last status change while it still exists; clients hear of the
        // lists it took away once, when the input settles.
        let Some(mut b) = self.backends.remove(server) else { return };
        self.retired_generations.insert(server.to_string(), b.sup.generation());
        for t in b.sup.drain_transitions() {
            self.emit(t.into_event(self.name(server)));
        }
        // Which backend a URI belongs to is known only while it is registered.
        let catalog = &self.catalog;
        self.sessions.subscriptions.retain(|uri, _| catalog.resolve_uri(uri).map_or(true, |(s, _)| s != server));
        self.catalog.unregister(server);
        self.forget_ration(server);
    }

    /// A changed transport (or a catalog to rebuild): close and start over.
    pub(super) fn restart_for_config(&mut self, server: &str) {
        self.close_backend(server, Status::Restarting, Some("configuration changed".into()));
        let b = self.backends.get_mut(server).expect("live");
        b.sup.reset_history();
        self.connect(server);
    }

    /// Admin reconnect (or restart, which also clears history).
    pub(super) fn reconnect_now(&mut self, server: &str, clear_history: bool) {
        let status = self.backends[server].sup.status();
        let given_up = matches!(status, Status::PermanentlyFailed | Status::RequiresReauth | Status::Disconnected);
        let b = self.backends.get_mut(server).expect("live");
        // An operator's reconnect starts over: the catalog is discovered again.
        b.skip_discovery = false;
        if clear_history || given_up {
            b.sup.reset_history();
        }
        if self.backends[server].sup.is_connected() {
            self.drop_connection(server, "reconnect requested", false).into_iter().for_each(|c| {
                self.fail_unavailable(server, c);
            });
        }
        self.connect(server);
    }

    /// A backend timer fired.
    pub(super) fn backend_timer(&mut self, server: &str) {
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live");
        if let Some(step) = b.credential.as_mut().and_then(|c| c.on_timer(now)) {
            return self.authorize(server, step);
        }
        if self.resume_due_stream(server) {
            return;
        }
        let b = self.backends.get_mut(server).expect("live");
        let Some(timer) = b.sup.take_expired(now) else {
            return self.queue_timer(server);
        };
        match timer {
            Timer::Retry => self.connect(server),
            Timer::ConnectDeadline => self.connection_lost(server, Failure::Timeout),
            Timer::HealthCheck => self.health_check(server),
            Timer::Idle => {
                // A health check in flight is not traffic.
                let busy = self.router.calls.values().any(|c| {
                    &*c.server == server && !matches!(c.kind, CallKind::Health | CallKind::Listen | CallKind::Quiet)
                }) || !b.queue.is_empty();
                if busy || !b.sup.is_ready() {
                    b.sup.touch(now);
                } else {
                    self.close_backend(server, Status::Dormant, Some("idle".into()));
                    self.backends.get_mut(server).expect("live").skip_discovery = true;
                }
            }
        }
    }

    /// Queued calls: dispatch those whose retry wait ended, fail those past deadline.
    fn queue_timer(&mut self, server: &str) {
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live");
        let (expired, rest): (Vec<Queued>, Vec<Queued>) = b.queue.drain(..).partition(|q| q.deadline <= now);
        b.queue = rest.into();
        for q in expired {
            let data = self.unavailable_data(server);
            let msg = format!("backend '{server}' did not become available in time");
            if q.call.probe {
                self.backends.get_mut(server).expect("live").sup.breaker.probe_abandoned();
            }
            self.reply_error(q.call.session, &q.call.id, code::REQUEST_TIMEOUT, &msg, Some(&data));
            self.record_call(server, &q.call, CallOutcome::Failed);
            self.release(&q.call);
        }
        self.flush_queue(server);
    }

    fn health_check(&mut self, server: &str) {
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live");
        if b.sup.status() != Status::Online || !b.sup.is_ready() {
            return;
        }
        let interval = Self::duration(b.sup.policy().health_interval_ms);
        if b.last_success.is_some_and(|at| now.saturating_since(at) < interval) {
            // Recent successful traffic is the check: it passed.
            b.sup.schedule_health(now, &mut self.rng);
            if let Some(HealthChange::Restored) = b.sup.health.on_success() {
                self.emit(Event::ServerHealthRestored { server: self.name(server) });
            }
            return;
        }
        // `ping` is gone in the stateless revision; `server/discover` is the cheap
        // request every such server must answer.
        let method = match b.era {
            Era::Stateless => "server/discover",
            Era::Handshake if b.ping_unsupported => "tools/list",
            Era::Handshake => "ping",
        };
        let deadline = Some(now + Self::duration(b.sup.policy().health_timeout_ms));
        let generation = b.sup.generation();
        let id = self.alloc_id();
        self.router.calls.insert(id, Call { server: self.name(server), generation, deadline, kind: CallKind::Health });
        let frame = self.backend_request_frame(server, id, method, None);
        self.to_backend(server, frame, Some(id));
        // A listen the backend ended is opened again here, not in a tight loop.
        self.open_listen(server);
    }

    /// A request passed its deadline.
    pub(super) fn call_timed_out(&mut self, id: u64) {
        let Some(call) = self.router.calls.remove(&id) else { return };
        let server = call.server.clone();
        match call.kind {
            CallKind::Client(c) if c.awaiting_input.is_some() => {
                // The client never came back with its inputs: not the backend's fault.
                let params = format!(r#"{{"requestId":{id},"reason":"the client did not provide its input"}}"#);
                self.to_backend(&server, protocol::notification("notifications/cancelled", Some(&params)), None);
                self.release(&c);
                if let Some(state) = &c.awaiting_input {
                    self.input_expired(state);
                }
            }
            CallKind::Client(c) => {
                let params = format!(r#"{{"requestId":{id},"reason":"timed out"}}"#);
                self.to_backend(&server, protocol::notification("notifications/cancelled", Some(&params)), None);
                self.count_failure(&server, true, c.probe);
                let msg = format!("backend '{server}' did not answer {} in time", c.method);
                self.reply_error(c.session, &c.id, code::REQUEST_TIMEOUT, &msg, None);
                self.record_call(&server, &c, CallOutcome::Failed);
                self.release(&c);
            }
            CallKind::Health => {
                let b = self.backends.get_mut(&server).expect("live");
                b.sup.schedule_health(self.now, &mut self.rng);
                self.health_failed(&server, "health check timed out".into());
            }
            CallKind::Discover { .. } => self.discovery_failed(&server),
            CallKind::Probe { may_initialize: true } => {
                // Silent to the probe: a handshake-era server. A late answer to it is ignored.
                let generation = call.generation;
                self.router
                    .calls
                    .insert(id, Call { server: server.clone(), generation, deadline: None, kind: CallKind::Quiet });
                self.send_initialize(&server, false);
            }
            CallKind::Quiet | CallKind::Listen | CallKind::Initialize { .. } | CallKind::Probe { .. } => {}
        }
    }

    /// Sends queued calls whose wait is over, if the backend is ready.
    pub(super) fn flush_queue(&mut self, server: &str) {
        let now = self.now;
        let Some(b) = self.backends.get_mut(server) else { return };
        if !b.sup.is_ready() {
            return;
        }
        let epoch = b.credential_epoch();
        let (due, rest): (Vec<Queued>, Vec<Queued>) =
            b.queue.drain(..).partition(|q| q.not_before <= now && q.call.wait_epoch <= epoch);
        b.queue = rest.into();
        for q in due {
            self.dispatch(server, q.call);
        }
    }

    /// Re-sends subscriptions after a reconnect, so updates keep flowing.
    fn resubscribe(&mut self, server: &str) {
        let catalog = &self.catalog;
        let uris: Vec<String> = self
            .sessions
            .subscriptions
            .keys()
            .filter_map(|u| catalog.resolve_uri(u).filter(|(s, _)| *s == server).map(|(_, uri)| uri.to_string()))
            .collect();
        for uri in uris {
            let params = format!(r#"{{"uri":{}}}"#, protocol::quote(&uri));
            self.quiet_request(server, "resources/subscribe", &params);
        }
    }

    /// A best-effort request whose answer is ignored.
    pub(super) fn quiet_request(&mut self, server: &str, method: &str, params: &str) {
        if self.router.calls.len() >= self.config.limits.max_in_flight as usize {
            return;
        }
        let id = self.alloc_id();
        let b = &self.backends[server];
        let generation = b.sup.generation();
        let deadline = Some(self.now + Self::duration(b.sup.policy().request_timeout_ms));
        self.router.calls.insert(id, Call { server: self.name(server), generation, deadline, kind: CallKind::Quiet });
        let frame = self.backend_request_frame(server, id, method, Some(params));
        self.to_backend(server, frame, Some(id));
    }

    /// The structured `data` of an unavailability error.
    pub(super) fn unavailable_data(&self, server: &str) -> String {
        let Some(b) = self.backends.get(server) else { return "{}".into() };
        let mut m = BTreeMap::new();
        m.insert("server", Value::String(server.to_string()));
        m.insert("status", Value::String(b.sup.status().as_str().into()));
        m.insert("attempt", Value::from(b.sup.reconnect_attempt()));
        let next = b.sup.timer(Timer::Retry).map(|at| at.saturating_since(self.now).as_millis());
        m.insert("next_retry_ms", next.map_or(Value::Null, Value::from));
        m.insert("last_error", b.sup.message().map_or(Value::Null, |s| Value::String(s.into())));
        let breaker = match b.sup.breaker.state(self.now) {
            crate::policy::BreakerState::Closed => "closed",
            crate::policy::BreakerState::Open => "open",
            crate::policy::BreakerState::HalfOpen => "half_open",
        };
        m.insert("breaker", Value::String(breaker.into()));
        serde_json::to_string(&m).unwrap_or_else(|_| "{}".into())
    }

    /// Fails a call because its backend cannot serve it now.
    pub(super) fn fail_unavailable(&mut self, server: &str, call: ClientCall) {
        if call.probe {
            if let Some(b) = self.backends.get_mut(server) {
                b.sup.breaker.probe_abandoned();
            }
        }
        let b = &self.backends[server];
        let status = b.sup.status();
        if status == Status::RequiresReauth {
            let msg = self.reauth_message(server);
            return self.fail_reauth(server, call, &msg);
        }
        let data = self.unavailable_data(server);
        let detail = b.sup.message().map(|m| format!(": {m}")).unwrap_or_default();
        let msg = format!("backend '{server}' is {status}{detail}");
        self.reply_error(call.session, &call.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
        self.record_call(server, &call, CallOutcome::Failed);
        self.release(&call);
    }

    /// What a client is told when `server` rejected tether's credentials: what the
    /// user must do about it.
    pub(super) fn reauth_message(&self, server: &str) -> String {
        format!("backend '{server}' requires re-authentication ({})", self.login_instructions(server))
    }
}

/// Every list kind, as a discovery mask.
const ALL_KINDS: u8 = 0b1111;

/// The discovery-mask bit of one list kind.
fn kind_bit(kind: ListKind) -> u8 {
    1 << (kind as u8)
}

/// Reads `error.code` from a raw JSON-RPC error object.
fn error_code(error: &str) -> Option<i64> {
    serde_json::from_str::<Map<String, Value>>(error).ok()?.get("code")?.as_i64()
}
