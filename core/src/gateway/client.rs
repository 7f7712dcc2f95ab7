//! The client side: sessions, the requests a client sends, and the answers it gets.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::calls::{Call, CallKind, ClientCall, Forward, Key, Parked, ParkedList, Queued, RawFields, Shape};
use super::client_events::Level;
use super::own_tools;
use super::Gateway;
use crate::catalog::ListKind;
use crate::config::Mode;
use crate::io::{Action, ClientRoute, RawId, ServerName, SessionId, Status};
use crate::metrics::CallOutcome;
use crate::policy::Admission;
use crate::protocol::{self, code, CacheHint, Era, Message};
use crate::supervisor::Readiness;

/// What tether announces as a server: everything it can proxy, so capabilities
/// never depend on which backends happen to be up at `initialize`.
const SERVER_CAPABILITIES: &str = r#"{"tools":{"listChanged":true},"resources":{"subscribe":true,"listChanged":true},"prompts":{"listChanged":true},"logging":{},"completions":{}}"#;

impl Gateway {
    pub(super) fn client_connected(&mut self, session: SessionId, expires: bool) {
        if self.sessions.open.contains_key(&session) {
            return;
        }
        if self.sessions.open.len() >= self.config.limits.max_sessions as usize {
            if expires {
                // An HTTP client is waiting for an answer to its initialize: give
                // it one that says why, then close (see `client_frame`).
                if self.sessions.refused.len() >= 64 {
                    if let Some(oldest) = self.sessions.refused.pop_front() {
                        self.push(Action::CloseClient { session: oldest });
                    }
                }
                self.sessions.refused.push_back(session);
                return;
            }
            self.push(Action::CloseClient { session });
            return;
        }
        let mut s = super::sessions::Session::new(expires, self.now);
        s.seen = self.visible_hashes();
        self.sessions.open.insert(session, s);
    }

    pub(super) fn client_closed(&mut self, session: SessionId) {
        self.sessions.refused.retain(|s| *s != session);
        let Some(closed) = self.sessions.open.remove(&session) else { return };
        // A stateless HTTP client's session lasts one request; a call it was told
        // to retry with inputs waits for that retry, which comes in another one.
        let per_request = closed.per_request();
        // Cancel its calls at the backends; nobody is left to answer.
        let ids: Vec<u64> = self
            .router.calls
            .iter()
            .filter(|(_, c)| {
                matches!(&c.kind, CallKind::Client(cc) if cc.session == session && !(per_request && cc.awaiting_input.is_some()))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let Some(call) = self.router.calls.remove(&id) else { continue };
            if let CallKind::Client(c) = &call.kind {
                if c.probe {
                    if let Some(b) = self.backends.get_mut(&call.server) {
                        b.sup.breaker.probe_abandoned();
                    }
                }
            }
            let params = format!(r#"{{"requestId":{id},"reason":"client disconnected"}}"#);
            self.to_backend(&call.server, protocol::notification("notifications/cancelled", Some(&params)), None);
        }
        for b in self.backends.values_mut() {
            b.queue.retain(|q| {
                if q.call.session == session && q.call.probe {
                    b.sup.breaker.probe_abandoned();
                }
                q.call.session != session
            });
        }
        self.router.parked_lists.retain(|p| p.session != session);
        let pending: Vec<u64> =
            self.router.server_requests.iter().filter(|(_, r)| r.session == session).map(|(id, _)| *id).collect();
        self.drop_input_rounds(session);
        for id in pending {
            let Some(r) = self.router.server_requests.remove(&id) else { continue };
            if r.round.is_some() {
                continue;
            }
            if self.backends.get(&r.server).is_some_and(|b| b.sup.generation() == r.generation && b.sup.is_connected())
            {
                let frame =
                    protocol::error_response(&r.backend_id, code::INTERNAL_ERROR, "the client disconnected", None);
                self.to_backend(&r.server, frame, None);
            }
        }
        let mut emptied = Vec::new();
        for (uri, sessions) in self.sessions.subscriptions.iter_mut() {
            sessions.remove(&session);
            if sessions.is_empty() {
                emptied.push(uri.clone());
            }
        }
        for uri in emptied {
            self.sessions.subscriptions.remove(&uri);
            self.unsubscribe_backend(&uri);
        }
    }

    /// One frame from a client; `param_headers`: the `Mcp-Param-*` headers of
    /// the HTTP request that carried it, when the transport has them.
    pub(super) fn client_frame(
        &mut self,
        session: SessionId,
        frame: &str,
        param_headers: Option<&BTreeMap<String, String>>,
    ) {
        if let Some(at) = self.sessions.refused.iter().position(|s| *s == session) {
            self.sessions.refused.remove(at);
            if let Ok(Message::Request { id, .. }) = protocol::parse(frame) {
                let msg = format!(
                    "tether serves at most {} client sessions at once; close one and retry",
                    self.config.limits.max_sessions
                );
                let frame = protocol::error_response(id.get(), code::OVERLOADED, &msg, None);
                self.reply_to_client(session, id.get(), frame);
            }
            self.push(Action::CloseClient { session });
            return;
        }
        if !self.sessions.open.contains_key(&session) {
            self.client_connected(session, false);
            if !self.sessions.open.contains_key(&session) {
                return;
            }
        }
        let now = self.now;
        if let Some(s) = self.sessions.open.get_mut(&session) {
            s.last_active = now;
        }
        if frame.len() > self.config.limits.max_frame_bytes as usize {
            let msg =
                format!("frame of {} bytes exceeds the limit of {}", frame.len(), self.config.limits.max_frame_bytes);
            return self.reply_to_client(
                session,
                "null",
                protocol::error_response("null", code::INVALID_REQUEST, &msg, None),
            );
        }
        let message = match protocol::parse(frame) {
            Ok(m) => m,
            Err(e) => {
                let id = e.id.as_deref().unwrap_or("null");
                return self.reply_to_client(session, id, protocol::error_response(id, e.code, &e.message, None));
            }
        };
        match message {
            Message::Request { id, method, params } => {
                let id = RawId::new(id.get());
                let params = params.map(|p| p.get());
                let s = self.sessions.open.get_mut(&session).expect("present");
                if s.in_flight.contains(&id) {
                    let msg = "a request with this id is already in flight";
                    let frame = protocol::error_response(&id, code::INVALID_REQUEST, msg, None);
                    return self.reply_to_client(session, &id, frame);
                }
                if s.in_flight.len() >= self.config.limits.max_in_flight_per_session as usize {
                    let msg = "too many requests in flight for this session";
                    return self.reply_to_client(
                        session,
                        &id,
                        protocol::error_response(&id, code::OVERLOADED, msg, None),
                    );
                }
                s.in_flight.insert(id.clone());
                if let Some(received) = param_headers.filter(|_| &*method == "tools/call") {
                    if let Err(message) = self.check_param_headers(params, received) {
                        return self.reply_error(session, &id, protocol::HEADER_MISMATCH, &message, None);
                    }
                }
                self.client_request(session, id, &method, params);
            }
            Message::Notification { method, params } => {
                self.client_notification(session, &method, params.map(|p| p.get()))
            }
            Message::Response { id, result } => self.client_answer(session, id.get(), Ok(result.get())),
            Message::Error { id: Some(id), error } => self.client_answer(session, id.get(), Err(error.get())),
            Message::Error { id: None, .. } => {}
        }
    }

    fn client_request(&mut self, session: SessionId, id: RawId, method: &str, params: Option<&str>) {
        if self.config.modern_clients {
            if let Err((code, message, data)) = self.check_era(session, method, params) {
                return self.reply_error(session, &id, code, &message, data.as_deref());
            }
            if let Some(state) = self.retry_state(session, method, params) {
                // tether's own requestState, or one meant for a handshake-era
                // backend (which cannot take it); a stateless backend's own goes to it.
                if self.router.pending_inputs.contains_key(&state) || !self.routes_to_stateless(method, params) {
                    return self.resume_with_inputs(session, id, &state, params);
                }
            }
        }
        // The hot path: routed by name from the raw params, no tree parse.
        match method {
            "tools/call" => return self.route_named(session, id, "tools/call", params, ListKind::Tools, true),
            "prompts/get" => return self.route_named(session, id, "prompts/get", params, ListKind::Prompts, true),
            _ => {}
        }
        let parsed: Option<Map<String, Value>> = match params {
            None => None,
            Some(p) => match serde_json::from_str::<Map<String, Value>>(p) {
                Ok(m) => Some(m),
                Err(_) => {
                    return self.reply_error(session, &id, code::INVALID_PARAMS, "params must be an object", None)
                }
            },
        };
        match method {
            "initialize" => self.initialize(session, &id, parsed),
            "server/discover" if self.config.modern_clients => self.discover(session, &id),
            "ping" => self.reply(session, &id, "{}"),
            "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => {
                let kind = ListKind::from_method(method).expect("list method");
                let cursor = match parsed.as_ref().and_then(|p| p.get("cursor")) {
                    None | Some(Value::Null) => None,
                    Some(Value::String(c)) => Some(c.clone()),
                    Some(_) => {
                        return self.reply_error(session, &id, code::INVALID_PARAMS, "cursor must be a string", None)
                    }
                };
                self.list(session, id, kind, cursor);
            }
            "resources/read" => self.route_uri(session, id, "resources/read", parsed, Shape::ReadResource),
            "resources/subscribe" => self.subscription(session, id, "resources/subscribe", parsed),
            "resources/unsubscribe" => self.subscription(session, id, "resources/unsubscribe", parsed),
            "completion/complete" => self.complete(session, id, parsed),
            "subscriptions/listen" => self.client_listen(session, id, parsed),
            "logging/setLevel" => self.set_level(session, &id, params),
            _ => {
                let msg = format!("method not found: {method}");
                self.reply_error(session, &id, code::METHOD_NOT_FOUND, &msg, None)
            }
        }
    }

    /// Whether a `tools/call`, `prompts/get` or `resources/read` goes to a backend
    /// of the stateless era.
    fn routes_to_stateless(&self, method: &str, params: Option<&str>) -> bool {
        let Some(params) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else {
            return false;
        };
        let text = |key: &str| params.get(key).and_then(Value::as_str);
        let tool = self.execute_target(&params).or_else(|| text("name"));
        let server = match method {
            "tools/call" => tool.and_then(|n| self.catalog.resolve_tool(n)).map(|r| r.server),
            "prompts/get" => text("name").and_then(|n| self.catalog.resolve_prompt(n)).map(|r| r.server),
            "resources/read" => text("uri").and_then(|u| self.catalog.resolve_uri(u)).map(|(s, _)| s),
            _ => None,
        };
        server.and_then(|s| self.backends.get(s)).is_some_and(|b| b.era == Era::Stateless)
    }

    fn initialize(&mut self, session: SessionId, id: &str, params: Option<Map<String, Value>>) {
        let params = params.unwrap_or_default();
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let version = protocol::negotiate_version(requested);
        let s = self.sessions.open.get_mut(&session).expect("present");
        s.protocol_version = Some(version.to_string());
        s.capabilities = match params.get("capabilities") {
            Some(Value::Object(c)) => c.clone(),
            _ => Map::new(),
        };
        let result = format!(
            r#"{{"protocolVersion":"{version}","capabilities":{SERVER_CAPABILITIES},"serverInfo":{{"name":"tether","version":"{}"}},"instructions":{}}}"#,
            env!("CARGO_PKG_VERSION"),
            self.instructions()
        );
        self.reply(session, id, &result);
        self.start_lazy_backends();
    }

    /// Decides a session's era from its first request, and checks every request
    /// of a stateless session on its own: `_meta` present and valid, and not a
    /// method that revision removed.
    fn check_era(
        &mut self,
        session: SessionId,
        method: &str,
        params: Option<&str>,
    ) -> Result<(), (i64, String, Option<String>)> {
        let Some(s) = self.sessions.open.get_mut(&session) else { return Ok(()) };
        if s.era_known && s.era == Era::Handshake {
            return Ok(());
        }
        match protocol::request_era(params) {
            protocol::RequestEra::Refused(code, message, data) => Err((code, message, data)),
            protocol::RequestEra::Handshake if s.era_known => {
                let msg = format!(
                    "missing _meta[\"{}\"]: this client speaks {}, where every request carries it",
                    protocol::meta::PROTOCOL_VERSION,
                    protocol::MODERN_VERSIONS[0]
                );
                Err((code::INVALID_PARAMS, msg, None))
            }
            protocol::RequestEra::Handshake if method == "initialize" => {
                s.era_known = true;
                Ok(())
            }
            // An HTTP session only opens with `initialize` or for one stateless
            // request: this is a request of neither era.
            protocol::RequestEra::Handshake if s.expires => {
                let msg = format!(
                    "missing _meta[\"{}\"]: without a session, requests must carry it ({}); or initialize first",
                    protocol::meta::PROTOCOL_VERSION,
                    protocol::MODERN_VERSIONS[0]
                );
                Err((code::INVALID_PARAMS, msg, None))
            }
            protocol::RequestEra::Handshake => Ok(()),
            protocol::RequestEra::Stateless { version, capabilities, log_level } => {
                s.request_log_level = log_level;
                s.era = Era::Stateless;
                s.era_known = true;
                s.protocol_version = Some(version.to_string());
                s.request_caps = serde_json::from_str(&capabilities).ok();
                const REMOVED: [&str; 5] =
                    ["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"];
                if REMOVED.contains(&method) {
                    let msg = format!("method not found: {method} (not part of {version})");
                    return Err((code::METHOD_NOT_FOUND, msg, None));
                }
                Ok(())
            }
        }
    }

    /// What the client's model is told about this server, as a JSON string.
    fn instructions(&self) -> String {
        let text = match self.config.mode {
            Mode::Meta => String::from(
                "tether gateway in meta mode: the tools of many MCP servers are reached through search_tools (find a tool by keywords), describe_tool (its arguments) and execute_tool (run it). list_servers, server_events and reconnect_server show and fix servers that are down.",
            ),
            Mode::Flat => {
                let admin = if self.config.admin_tools {
                    " list_servers, server_events and reconnect_server show and fix servers that are down."
                } else {
                    ""
                };
                format!("tether gateway: tools of each backend are served as <server>{}<tool>.{admin}", self.config.separator)
            }
        };
        protocol::quote(&text)
    }

    /// `server/discover`: what tether serves, for stateless-era clients.
    fn discover(&mut self, session: SessionId, id: &str) {
        let versions: Vec<String> = protocol::MODERN_VERSIONS
            .iter()
            .chain(protocol::SUPPORTED_VERSIONS.iter())
            .map(|v| protocol::quote(v))
            .collect();
        let result = format!(
            r#"{{"supportedVersions":[{}],"capabilities":{SERVER_CAPABILITIES},"instructions":{},"ttlMs":0,"cacheScope":"private","_meta":{{"{}":{{"name":"tether","version":"{}"}}}}}}"#,
            versions.join(","),
            self.instructions(),
            protocol::meta::SERVER_INFO,
            env!("CARGO_PKG_VERSION"),
        );
        self.reply(session, id, &result);
        self.start_lazy_backends();
    }

    /// Lazy backends start when the first client arrives.
    fn start_lazy_backends(&mut self) {
        let lazy: Vec<ServerName> = self
            .backends
            .iter()
            .filter(|(_, b)| b.config.lazy && !b.config.disabled && b.sup.status() == Status::Provisioning)
            .map(|(n, _)| n.clone())
            .collect();
        for name in lazy {
            self.connect(&name);
        }
    }

    fn client_notification(&mut self, session: SessionId, method: &str, params: Option<&str>) {
        match method {
            "notifications/initialized" => {
                if let Some(s) = self.sessions.open.get_mut(&session) {
                    s.ready = true;
                }
            }
            "notifications/cancelled" => {
                let Some(p) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else { return };
                let Some(request_id) = p.get("requestId").and_then(|v| serde_json::to_string(v).ok()) else { return };
                self.client_cancelled(session, &request_id);
            }
            "notifications/roots/list_changed" => {
                let ready: Vec<ServerName> =
                    self.backends.iter().filter(|(_, b)| b.sup.is_ready()).map(|(n, _)| n.clone()).collect();
                for server in ready {
                    self.to_backend(&server, protocol::notification(method, None), None);
                }
            }
            _ => {}
        }
    }

    /// The client gave up on a request: stop it at the backend, answer nothing.
    fn client_cancelled(&mut self, session: SessionId, request_id: &str) {
        if self.end_client_listen(session, request_id) {
            return;
        }
        let found = self.router.calls.iter().find_map(|(id, c)| match &c.kind {
            CallKind::Client(cc) if cc.session == session && cc.id == request_id => Some(*id),
            _ => None,
        });
        if let Some(id) = found {
            let call = self.router.calls.remove(&id).expect("found");
            let CallKind::Client(c) = call.kind else { return };
            if c.probe {
                self.backends.get_mut(&call.server).expect("live").sup.breaker.probe_abandoned();
            }
            let params = format!(r#"{{"requestId":{id},"reason":"cancelled by the client"}}"#);
            self.to_backend(&call.server, protocol::notification("notifications/cancelled", Some(&params)), None);
            self.release(&c);
            return;
        }
        for b in self.backends.values_mut() {
            if let Some(pos) = b.queue.iter().position(|q| q.call.session == session && q.call.id == request_id) {
                let q = b.queue.remove(pos).expect("position");
                if q.call.probe {
                    b.sup.breaker.probe_abandoned();
                }
                if let Some(s) = self.sessions.open.get_mut(&session) {
                    s.in_flight.remove(request_id);
                }
                return;
            }
        }
        if self.cancel_input_round(session, request_id) {
            return;
        }
        if let Some(pos) = self.router.parked_lists.iter().position(|p| p.session == session && p.id == request_id) {
            self.router.parked_lists.remove(pos);
            if let Some(s) = self.sessions.open.get_mut(&session) {
                s.in_flight.remove(request_id);
            }
        }
    }

    /// A client answered a backend's request (sampling, elicitation, roots).
    fn client_answer(&mut self, session: SessionId, id: &str, answer: Result<&str, &str>) {
        let Some(gid) = serde_json::from_str::<u64>(id).ok() else { return };
        match self.router.server_requests.get(&gid) {
            Some(r) if r.session == session => {}
            _ => return,
        }
        let r = self.router.server_requests.remove(&gid).expect("checked");
        // SEP-1034: the defaults a client left out of an accepted elicitation
        // are filled in here, so every client behind tether behaves alike.
        let filled = match (answer, r.defaults.as_deref()) {
            (Ok(result), Some(defaults)) => protocol::with_elicitation_defaults(result, defaults),
            _ => None,
        };
        let answer = match &filled {
            Some(result) => Ok(result.as_str()),
            None => answer,
        };
        if let Some(round) = r.round {
            return self.input_answered(round, &r.backend_id, answer);
        }
        let live =
            self.backends.get(&r.server).is_some_and(|b| b.sup.generation() == r.generation && b.sup.is_connected());
        if !live {
            return;
        }
        let frame = match answer {
            Ok(result) => protocol::response(&r.backend_id, result),
            Err(error) => protocol::raw_error_response(&r.backend_id, error),
        };
        self.to_backend(&r.server, frame, None);
    }

    // ----- lists -----

    fn list(&mut self, session: SessionId, id: RawId, kind: ListKind, cursor: Option<String>) {
        if self.connection_pending(self.config.policy.aggregation_deadline_ms) {
            let deadline = self.now + Self::duration(self.config.policy.aggregation_deadline_ms);
            self.router.parked_lists.push(ParkedList { session, id, what: Parked::List { kind, cursor }, deadline });
            return;
        }
        self.answer_list(session, &id, kind, cursor.as_deref());
    }

    /// Some backend is (re)connecting and began less than `window_ms` ago: a list
    /// answered now would miss its tools (a restarted backend listing 0 tools),
    /// so lists wait for it, never longer than the aggregation deadline.
    fn connection_pending(&self, window_ms: u64) -> bool {
        let now = self.now;
        self.backends.values().any(|b| {
            !b.config.disabled
                && matches!(b.sup.status(), Status::Connecting | Status::DiscoveringTools)
                && b.connect_started_at.is_some_and(|at| now < at + Self::duration(window_ms))
        })
    }

    /// Some backend is starting for the first time, began less than `window_ms`
    /// ago, and may still bring tools. A backend that has been starting for longer
    /// is not waited for again, so one slow backend cannot slow every request.
    pub(super) fn first_discovery_pending(&self, window_ms: u64) -> bool {
        let now = self.now;
        self.backends.values().any(|b| {
            !b.catalog_discovered
                && !b.config.disabled
                && matches!(b.sup.status(), Status::Connecting | Status::DiscoveringTools)
                && b.first_connect_at.is_some_and(|at| now < at + Self::duration(window_ms))
        })
    }

    /// Answers parked list requests once no backend is starting, or on deadline.
    pub(super) fn answer_parked_lists(&mut self, deadline_only: bool) {
        if self.router.parked_lists.is_empty() {
            return;
        }
        let now = self.now;
        let policy = &self.config.policy;
        let lists_free = !deadline_only && !self.connection_pending(policy.aggregation_deadline_ms);
        let names_free = !deadline_only && !self.first_discovery_pending(policy.connect_timeout_ms);
        let (due, keep): (Vec<ParkedList>, Vec<ParkedList>) = self.router.parked_lists.drain(..).partition(|p| {
            let free = match p.what {
                Parked::List { .. } => lists_free,
                Parked::Named { .. } => names_free,
            };
            free || p.deadline <= now
        });
        self.router.parked_lists = keep;
        for p in due {
            match p.what {
                Parked::List { kind, cursor } => self.answer_list(p.session, &p.id, kind, cursor.as_deref()),
                Parked::Named { method, params, kind } => {
                    self.route_named(p.session, p.id, method, Some(&params), kind, false);
                }
            }
        }
    }

    fn answer_list(&mut self, session: SessionId, id: &str, kind: ListKind, cursor: Option<&str>) {
        let page = if kind == ListKind::Tools && self.config.mode == Mode::Meta {
            // Meta mode: tether's own tools only, one page.
            match cursor {
                None => Ok(format!(r#"{{"tools":[{}]}}"#, self.own_tool_definitions().join(","))),
                Some(_) => Err(()),
            }
        } else {
            let backends = &self.backends;
            let visible = |s: &str| backends.get(s).is_some_and(|b| b.is_visible());
            let page = self.catalog.page(kind, cursor, self.config.limits.page_size as usize, visible);
            match page {
                // Flat mode with admin tools: they lead the first page.
                Ok(page) if kind == ListKind::Tools && cursor.is_none() && !self.own_tools().is_empty() => {
                    let own = self.own_tool_definitions().join(",");
                    let rest = page.strip_prefix(r#"{"tools":["#).unwrap_or("]}");
                    let comma = if rest.starts_with(']') { "" } else { "," };
                    let page = format!(r#"{{"tools":[{own}{comma}{rest}"#);
                    // An unprefixed backend's tool of the same name is shadowed.
                    let shadowed = self.own_tools().iter().any(|t| self.catalog.resolve_tool(t.name()).is_some());
                    Ok(if shadowed { own_tools::without_shadowed(&page) } else { page })
                }
                other => other,
            }
        };
        let hash = self.visible_hashes()[kind as usize];
        if let Some(s) = self.sessions.open.get_mut(&session) {
            s.seen[kind as usize] = hash;
        }
        let stateless = self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless);
        match page {
            Ok(result) if stateless => {
                let result = protocol::cacheable_result(&result, self.list_cache_hint(kind));
                self.reply(session, id, result.as_deref().unwrap_or("{}"))
            }
            Ok(result) => self.reply(session, id, &result),
            Err(()) => self.reply_error(session, id, code::INVALID_PARAMS, "invalid cursor", None),
        }
    }

    /// How long an aggregated list may be cached: as long as every backend
    /// behind it says its part may be (the shortest TTL; public only if all are).
    /// A backend on its way up or down may change the list at any moment: stale.
    fn list_cache_hint(&self, kind: ListKind) -> CacheHint {
        let mut hint: Option<CacheHint> = None;
        for b in self.backends.values().filter(|b| !b.config.disabled) {
            match b.sup.status() {
                Status::Online | Status::Dormant => {}
                _ => return CacheHint::STALE,
            }
            if b.capabilities.get(kind.capability()).is_some_and(|c| !c.is_null()) {
                let part = b.cache[kind as usize];
                hint = Some(hint.map_or(part, |h| h.and(part)));
            }
        }
        hint.unwrap_or(CacheHint::STALE)
    }

    // ----- routing -----

    /// `tools/call` and `prompts/get`: the served name picks the backend. The
    /// params stay raw text; only the name is replaced. `may_wait`: a name not
    /// known yet may wait for backends on their first start (not again once it waited).
    pub(super) fn route_named(
        &mut self,
        session: SessionId,
        id: RawId,
        method: &'static str,
        params: Option<&str>,
        kind: ListKind,
        may_wait: bool,
    ) {
        let Some(raw) = params else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "missing params", None);
        };
        let Ok(fields) = serde_json::from_str::<RawFields<'_>>(raw) else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "params must be an object", None);
        };
        let name = fields.get("name").and_then(|v| serde_json::from_str::<Key<'_>>(v.get()).ok());
        let Some(name) = name else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "missing name", None);
        };
        if let Some(tool) = self.own_tool(&name).filter(|_| kind == ListKind::Tools) {
            return self.call_own_tool(session, id, tool, &fields);
        }
        let resolved = match kind {
            ListKind::Tools => self.catalog.resolve_tool(&name),
            _ => self.catalog.resolve_prompt(&name),
        };
        let Some(r) = resolved else {
            if may_wait && self.first_discovery_pending(self.config.policy.connect_timeout_ms) {
                // A backend that is still starting may bring this name: wait for it.
                let deadline = self.now + Self::duration(self.config.policy.request_timeout_ms);
                let what = Parked::Named { method, params: raw.to_string(), kind };
                self.router.parked_lists.push(ParkedList { session, id, what, deadline });
                return;
            }
            let what = if kind == ListKind::Tools { "tool" } else { "prompt" };
            let msg = format!("unknown {what}: {}", &*name);
            return self.reply_error(session, &id, code::INVALID_PARAMS, &msg, None);
        };
        let (server, retry_safe) = (self.name(r.server), r.entry.retry_safe);
        let (params, progress) = Forward::from_fields(&fields, &[("name", &r.entry.original)]);
        self.submit(&server, session, id, method, params, progress, retry_safe, Shape::Plain);
    }

    /// `resources/read`: the served URI picks the backend.
    fn route_uri(
        &mut self,
        session: SessionId,
        id: RawId,
        method: &'static str,
        params: Option<Map<String, Value>>,
        shape: Shape,
    ) {
        let Some(mut params) = params else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "missing params", None);
        };
        let Some(uri) = params.get("uri").and_then(Value::as_str).map(ToString::to_string) else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "missing uri", None);
        };
        let Some((server, original)) = self.catalog.resolve_uri(&uri).map(|(s, o)| (s.to_string(), o.to_string()))
        else {
            let msg = format!("unknown resource: {uri}");
            return self.reply_error(session, &id, code::INVALID_PARAMS, &msg, None);
        };
        params.insert("uri".into(), Value::String(original));
        let (params, progress) = Forward::from_map(&params);
        // Reading a resource changes nothing: safe to retry.
        self.submit(&server, session, id, method, params, progress, true, shape);
    }

    fn subscription(
        &mut self,
        session: SessionId,
        id: RawId,
        method: &'static str,
        params: Option<Map<String, Value>>,
    ) {
        let uri = params.as_ref().and_then(|p| p.get("uri")).and_then(Value::as_str).map(ToString::to_string);
        let Some(uri) = uri else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "missing uri", None);
        };
        let stateless = self
            .catalog
            .resolve_uri(&uri)
            .and_then(|(s, _)| self.backends.get(s))
            .is_some_and(|b| b.era == Era::Stateless);
        if stateless {
            return self.listen_subscription(session, id, method, uri);
        }
        if method == "resources/unsubscribe" {
            let others = self.sessions.subscriptions.get_mut(&uri).map(|s| {
                s.remove(&session);
                !s.is_empty()
            });
            match others {
                Some(true) => return self.reply(session, &id, "{}"),
                Some(false) => {
                    self.sessions.subscriptions.remove(&uri);
                }
                None => return self.reply(session, &id, "{}"),
            }
            return self.route_uri(session, id, method, params, Shape::Unsubscribe(uri));
        }
        if self.sessions.subscriptions.get(&uri).is_some_and(|s| !s.is_empty()) {
            self.sessions.subscriptions.get_mut(&uri).expect("present").insert(session);
            return self.reply(session, &id, "{}");
        }
        let total: usize = self.sessions.subscriptions.values().map(BTreeSet::len).sum();
        if total >= self.config.limits.max_subscriptions as usize {
            return self.reply_error(session, &id, code::OVERLOADED, "too many subscriptions", None);
        }
        self.route_uri(session, id, method, params, Shape::Subscribe(uri))
    }

    /// A handshake-era client (un)subscribes to a resource of a stateless
    /// backend: that revision has no `resources/subscribe`; the backend's listen
    /// is opened again with the new set of URIs.
    fn listen_subscription(&mut self, session: SessionId, id: RawId, method: &str, uri: String) {
        let Some(server) = self.catalog.resolve_uri(&uri).map(|(s, _)| self.name(s)) else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "unknown resource", None);
        };
        let before = self.sessions.subscriptions.get(&uri).is_some_and(|s| !s.is_empty());
        if method == "resources/subscribe" {
            let total: usize = self.sessions.subscriptions.values().map(BTreeSet::len).sum();
            if !before && total >= self.config.limits.max_subscriptions as usize {
                return self.reply_error(session, &id, code::OVERLOADED, "too many subscriptions", None);
            }
            self.sessions.subscriptions.entry(uri.clone()).or_default().insert(session);
        } else if let Some(sessions) = self.sessions.subscriptions.get_mut(&uri) {
            sessions.remove(&session);
            if sessions.is_empty() {
                self.sessions.subscriptions.remove(&uri);
            }
        }
        let after = self.sessions.subscriptions.get(&uri).is_some_and(|s| !s.is_empty());
        self.reply(session, &id, "{}");
        if before != after {
            self.relisten(&server);
        }
    }

    pub(super) fn unsubscribe_backend(&mut self, served: &str) {
        let Some((server, uri)) = self.catalog.resolve_uri(served).map(|(s, u)| (s.to_string(), u.to_string())) else {
            return;
        };
        if self.backends.get(server.as_str()).is_some_and(|b| b.era == Era::Stateless) {
            return self.relisten(&server);
        }
        if self.backends.get(server.as_str()).is_some_and(|b| b.sup.is_ready()) {
            let params = format!(r#"{{"uri":{}}}"#, protocol::quote(&uri));
            self.quiet_request(&server, "resources/unsubscribe", &params);
        }
    }

    fn complete(&mut self, session: SessionId, id: RawId, params: Option<Map<String, Value>>) {
        let Some(mut params) = params else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "missing params", None);
        };
        let Some(Value::Object(reference)) = params.get("ref").cloned() else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "missing ref", None);
        };
        let kind = reference.get("type").and_then(Value::as_str).unwrap_or("");
        let target = match kind {
            "ref/prompt" => reference
                .get("name")
                .and_then(Value::as_str)
                .and_then(|n| self.catalog.resolve_prompt(n))
                .map(|r| (r.server.to_string(), "name", r.entry.original.clone())),
            "ref/resource" => reference
                .get("uri")
                .and_then(Value::as_str)
                .and_then(|u| self.catalog.resolve_uri(u))
                .map(|(s, u)| (s.to_string(), "uri", u.to_string())),
            _ => None,
        };
        let Some((server, field, original)) = target else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "unknown completion reference", None);
        };
        let mut reference = reference;
        reference.insert(field.into(), Value::String(original));
        params.insert("ref".into(), Value::Object(reference));
        let (params, progress) = Forward::from_map(&params);
        self.submit(&server, session, id, "completion/complete", params, progress, true, Shape::Plain);
    }

    fn set_level(&mut self, session: SessionId, id: &str, params: Option<&str>) {
        let Some(params) = params else {
            return self.reply_error(session, id, code::INVALID_PARAMS, "missing level", None);
        };
        // Stateless backends get the level on each request instead.
        self.log_level = serde_json::from_str::<Map<String, Value>>(params)
            .ok()
            .and_then(|p| p.get("level").and_then(Value::as_str).map(String::from));
        let level = self.log_level.as_deref().and_then(Level::parse);
        if let Some(s) = self.sessions.open.get_mut(&session) {
            s.log_level = level;
        }
        let targets: Vec<ServerName> = self
            .backends
            .iter()
            .filter(|(_, b)| b.sup.is_ready() && b.era == Era::Handshake && b.capabilities.contains_key("logging"))
            .map(|(n, _)| n.clone())
            .collect();
        for server in targets {
            self.quiet_request(&server, "logging/setLevel", params);
        }
        self.reply(session, id, "{}");
    }

    /// Sends a call to `server` now, queues it until the backend is ready, or
    /// refuses it with a message that says what is wrong and what to do.
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        server: &str,
        session: SessionId,
        id: RawId,
        method: &'static str,
        params: Forward,
        progress: Option<Value>,
        retry_safe: bool,
        shape: Shape,
    ) {
        let call = ClientCall {
            session,
            id,
            method,
            params,
            progress,
            last_progress: None,
            retry_safe,
            retries: 0,
            resent: false,
            probe: false,
            shape,
            created: self.now,
            caps: self.sessions.open.get_mut(&session).and_then(|s| s.request_caps.take()),
            log_level: self.sessions.open.get_mut(&session).and_then(|s| s.request_log_level.take()),
            awaiting_input: None,
            wait_epoch: 0,
            auth_retried: false,
        };
        self.admit(server, call);
    }

    /// Sends `call` to `server` now, queues it until the backend is ready, or
    /// refuses it with a message that says what is wrong and what to do.
    pub(super) fn admit(&mut self, server: &str, mut call: ClientCall) {
        let session = call.session;
        let now = self.now;
        let b = self.backends.get_mut(server).expect("catalog names live backends");
        match b.sup.status() {
            Status::RequiresReauth => {
                let msg = self.reauth_message(server);
                return self.fail_reauth(server, call, &msg);
            }
            Status::PermanentlyFailed => {
                let p = b.sup.policy();
                let msg = format!(
                    "backend '{server}' crashed {} times within {} s and will not be restarted; fix it, then restart it (admin restart or config change). Last error: {}",
                    p.crash_limit,
                    p.crash_window_ms / 1000,
                    b.sup.message().unwrap_or("unknown")
                );
                let data = self.unavailable_data(server);
                self.reply_error(session, &call.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
                self.record_call(server, &call, CallOutcome::Failed);
                return self.release(&call);
            }
            Status::Disconnected => {
                let msg = format!("backend '{server}' is disabled or removed");
                self.reply_error(session, &call.id, code::BACKEND_UNAVAILABLE, &msg, None);
                self.record_call(server, &call, CallOutcome::Failed);
                return self.release(&call);
            }
            _ => {}
        }
        match b.sup.breaker.admit(now) {
            Ok(Admission::Probe) => call.probe = true,
            Ok(Admission::Normal) => {}
            Err(rejection) => {
                let secs = rejection.retry_in.as_millis().div_ceil(1000);
                let msg = if secs == 0 {
                    format!(
                        "backend '{server}' circuit breaker is half-open and a probe call is in flight; retry shortly"
                    )
                } else {
                    format!(
                        "backend '{server}' circuit breaker is open after {} consecutive failures; retry in {secs} s",
                        b.sup.breaker.consecutive_failures()
                    )
                };
                let data = self.unavailable_data(server);
                self.reply_error(session, &call.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
                self.record_call(server, &call, CallOutcome::Failed);
                return self.release(&call);
            }
        }
        if self.router.calls.len() >= self.config.limits.max_in_flight as usize {
            return self.refuse_overloaded(server, call, "too many requests in flight");
        }
        match b.sup.readiness() {
            Readiness::Ready => self.dispatch(server, call),
            Readiness::Wait | Readiness::StartNow
                if b.queue.len() >= self.config.limits.max_queued_per_backend as usize =>
            {
                self.refuse_overloaded(server, call, "too many calls waiting for this backend")
            }
            r @ (Readiness::Wait | Readiness::StartNow) => {
                let deadline = now + Self::duration(b.sup.policy().request_timeout_ms);
                b.queue.push_back(Queued { call, not_before: now, deadline });
                if r == Readiness::StartNow && !b.awaiting_credential {
                    self.connect(server);
                }
            }
            Readiness::Refuse => {
                self.login_wanted(server);
                self.fail_unavailable(server, call)
            }
        }
    }

    fn refuse_overloaded(&mut self, server: &str, call: ClientCall, why: &str) {
        if call.probe {
            self.backends.get_mut(server).expect("live").sup.breaker.probe_abandoned();
        }
        let msg = format!("backend '{server}': {why}");
        self.reply_error(call.session, &call.id, code::OVERLOADED, &msg, None);
        self.record_call(server, &call, CallOutcome::Failed);
        self.release(&call);
    }

    /// Sends a call on the live connection, rewriting its id and progress token.
    pub(super) fn dispatch(&mut self, server: &str, call: ClientCall) {
        let id = self.alloc_id();
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live");
        b.sup.touch(now);
        let policy = b.sup.policy();
        let hard = call.created + Self::duration(policy.request_timeout_max_ms);
        let deadline = Some((now + Self::duration(policy.request_timeout_ms)).min(hard).max(now));
        let generation = b.sup.generation();
        let stateless = b.era == Era::Stateless;
        let meta = if stateless { self.stateless_call_meta(&call) } else { String::new() };
        let frame = call.params.frame(id, call.method, call.progress.is_some(), &meta);
        let headers = if stateless { self.param_headers_to(server, &call) } else { Vec::new() };
        self.router
            .calls
            .insert(id, Call { server: self.name(server), generation, deadline, kind: CallKind::Client(call) });
        let server = self.name(server);
        self.push(Action::SendToBackend { server, generation, frame, request: Some(id), headers });
    }

    /// The `_meta` members of a call to a stateless backend: tether's revision,
    /// and as client capabilities what the client behind the call can be asked
    /// (a stateless client's own, for this request; a handshake-era client's from
    /// its `initialize`, limited to what tether turns into requests to it).
    fn stateless_call_meta(&self, call: &ClientCall) -> String {
        let caps = match &call.caps {
            Some(caps) => Value::Object(caps.clone()).to_string(),
            None => {
                let declared = self.sessions.open.get(&call.session).map(|s| &s.capabilities);
                let asked: Map<String, Value> = declared
                    .into_iter()
                    .flatten()
                    .filter(|(k, v)| matches!(k.as_str(), "sampling" | "elicitation" | "roots") && !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                Value::Object(asked).to_string()
            }
        };
        let mut meta = protocol::stateless_meta_members(&caps);
        // `logging/setLevel` is gone in that revision: the level rides on each
        // request (a stateless client's own; a handshake-era client's last one).
        let level = if call.caps.is_some() { call.log_level.as_ref() } else { self.log_level.as_ref() };
        if let Some(level) = level {
            meta.push_str(&format!(",{}:{}", protocol::quote(protocol::meta::LOG_LEVEL), protocol::quote(level)));
        }
        meta
    }

    /// Turns a backend's answer into the client's.
    pub(super) fn answer_client_call(&mut self, server: &str, call: ClientCall, answer: Result<&str, &str>) {
        if let Some(state) = &call.awaiting_input {
            // The client was told to retry with inputs: the answer waits for that retry.
            if let Some(p) = self.router.pending_inputs.get_mut(state) {
                p.answer = Some(answer.map(String::from).map_err(String::from));
            }
            self.release(&call);
            return;
        }
        let session = call.session;
        let stateless_client = self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless);
        if let Ok(result) = answer {
            if self.backends.get(server).is_some_and(|b| b.era == Era::Stateless) && protocol::is_input_required(result)
            {
                if !stateless_client {
                    return self.start_input_round(server, call, result);
                }
                // A stateless client answers it itself: its retry comes back here
                // and goes to the backend with the backend's own requestState.
                self.record_call(server, &call, CallOutcome::Ok);
                self.release(&call);
                self.touch_session(session);
                let frame = protocol::response(&call.id, result);
                self.push(Action::SendToClient { session, frame, route: ClientRoute::Reply(call.id) });
                return self.answered(session);
            }
        }
        let outcome = if answer.is_ok() { CallOutcome::Ok } else { CallOutcome::Error };
        self.record_call(server, &call, outcome);
        let frame = match answer {
            Err(error) => protocol::raw_error_response(&call.id, error),
            Ok(result) => match &call.shape {
                Shape::Plain => protocol::response(&call.id, result),
                Shape::ReadResource => {
                    let rewritten = self.serve_contents(server, result);
                    let result = rewritten.as_deref().unwrap_or(result);
                    // A read is cacheable in the stateless revision: as its backend
                    // says, or (a handshake-era one says nothing) stale at once.
                    let stateless = self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless);
                    match stateless.then(|| protocol::cacheable_result(result, CacheHint::STALE)) {
                        Some(Some(hinted)) => protocol::response(&call.id, &hinted),
                        _ => protocol::response(&call.id, result),
                    }
                }
                Shape::Subscribe(uri) => {
                    self.sessions.subscriptions.entry(uri.clone()).or_default().insert(session);
                    protocol::response(&call.id, result)
                }
                Shape::Unsubscribe(_) => protocol::response(&call.id, result),
            },
        };
        self.release(&call);
        self.touch_session(session);
        let stateless = self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless);
        let frame = if stateless { super::stateless_frame(frame) } else { frame };
        self.push(Action::SendToClient { session, frame, route: ClientRoute::Reply(call.id) });
        self.answered(session);
    }

    /// `resources/read` contents carry backend URIs; clients get served ones.
    fn serve_contents(&self, server: &str, result: &str) -> Option<String> {
        let mut result: Map<String, Value> = serde_json::from_str(result).ok()?;
        if let Some(Value::Array(contents)) = result.get_mut("contents") {
            for item in contents {
                if let Some(Value::String(uri)) = item.get_mut("uri") {
                    if let Some(served) = self.catalog.serve_uri(server, uri) {
                        *uri = served;
                    }
                }
            }
        }
        serde_json::to_string(&result).ok()
    }

    /// Frees a finished call's id in its session.
    /// Counts an ended client call in `server`'s metrics, timed from the
    /// client's request (waits for the backend included: what the client saw).
    pub(super) fn record_call(&mut self, server: &str, call: &ClientCall, outcome: CallOutcome) {
        let latency_ms = self.now.saturating_since(call.created).as_millis();
        if let Some(b) = self.backends.get_mut(server) {
            b.metrics.record_call(outcome, latency_ms);
        }
    }

    pub(super) fn release(&mut self, call: &ClientCall) {
        if let Some(s) = self.sessions.open.get_mut(&call.session) {
            s.in_flight.remove(&call.id);
        }
    }

    pub(super) fn reply(&mut self, session: SessionId, id: &str, result: &str) {
        if !self.owed(session, id) {
            return self.answer_for_retry(session, id, Ok(result.to_string()));
        }
        self.reply_to_client(session, id, protocol::response(id, result));
    }

    pub(super) fn reply_error(&mut self, session: SessionId, id: &str, code: i64, message: &str, data: Option<&str>) {
        let message = self.redactor.redact(message);
        let data = data.map(|d| self.redactor.redact(d));
        if !self.owed(session, id) {
            let error = protocol::error_object(code, &message, data.as_deref());
            return self.answer_for_retry(session, id, Err(error));
        }
        let frame = protocol::error_response(id, code, &message, data.as_deref());
        self.reply_to_client(session, id, frame);
    }

    /// Whether request `id` of `session` still waits for its answer (and, if so,
    /// it no longer does). A request of a closed session counts as owed, unless
    /// it was answered `input_required`.
    fn owed(&mut self, session: SessionId, id: &str) -> bool {
        match self.sessions.open.get_mut(&session) {
            Some(s) => s.in_flight.remove(id),
            // A per-request session closed after its `input_required` answer.
            None => !self.router.pending_inputs.values().any(|p| p.session == session && p.client_id == id),
        }
    }
}
