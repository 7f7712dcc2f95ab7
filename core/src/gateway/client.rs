//! The client side: sessions opening and closing, the requests a client sends
//! (initialize, the era check, notifications, cancellations, answers to the
//! backends' requests); lists and routing are in their own modules.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::backends::Backends;
use super::calls::{CallKind, RawFields, Shape};
use super::sessions::Among;
use super::Gateway;
use crate::catalog::{Catalog, ListKind};
use crate::config::{Config, Mode};
use crate::io::{Action, RawId, ServerName, SessionId};
use crate::protocol::{self, code, Era, Message};

/// What tether announces as a server: everything it can proxy, so capabilities
/// never depend on which backends happen to be up at `initialize`.
const SERVER_CAPABILITIES: &str = r#"{"tools":{"listChanged":true},"resources":{"subscribe":true,"listChanged":true},"prompts":{"listChanged":true},"logging":{},"completions":{}}"#;

impl Gateway {
    pub(super) fn client_connected(&mut self, session: SessionId, expires: bool) {
        if self.sessions.open.contains_key(&session) {
            return;
        }
        if self.sessions.open.len() >= self.config.limits.max_sessions as usize && expires {
            // An idle HTTP session of whoever holds the most makes room.
            self.make_room(Among::Largest);
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
        s.seen = self.fingerprints.visible(&self.catalog, &self.backends, &self.config);
        self.sessions.open.insert(session, s);
    }

    /// Closes the longest idle session of `among`, if there is one, to make
    /// room for a new one. Its client is told nothing: it lost nothing in
    /// flight, and its next request gets 404 and opens another.
    fn make_room(&mut self, among: Among<'_>) -> bool {
        let Some(victim) = self.sessions.longest_idle(among) else { return false };
        self.client_closed(victim);
        self.push(Action::CloseClient { session: victim });
        true
    }

    /// Under an identity's quota of sessions (`limits.max_sessions_per_identity`):
    /// a new handshake-era session of an identity at its quota takes the place of
    /// its own longest idle one, else is refused with -32003 (and closed).
    fn within_identity_quota(&mut self, session: SessionId, id: &str) -> bool {
        let Some(principal) = self.sessions.open.get(&session).and_then(|s| s.principal.clone()) else { return true };
        let quota = self.config.limits.max_sessions_per_identity as usize;
        if self.sessions.held_by(&principal, session) < quota || self.make_room(Among::Identity(&principal)) {
            return true;
        }
        let msg = format!(
            "this identity holds {quota} sessions with requests in flight, as many as tether allows one \
             (limits.max_sessions_per_identity); close one and retry"
        );
        let frame = protocol::error_response(id, code::OVERLOADED, &msg, None);
        self.reply_to_client(session, id, frame);
        self.client_closed(session);
        self.push(Action::CloseClient { session });
        false
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
                // A task's call goes on for its task, whoever asks for it later.
                matches!(&c.kind, CallKind::Client(cc) if cc.session == session && cc.task.is_none() && !(per_request && cc.awaiting_input.is_some()))
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
            self.actions.extend(self.backends.frame_to(
                &call.server,
                protocol::notification("notifications/cancelled", Some(&params)),
                None,
            ));
        }
        for b in self.backends.values_mut() {
            b.queue.retain(|q| {
                let owed = q.call.session == session && q.call.task.is_none();
                if owed && q.call.probe {
                    b.sup.breaker.probe_abandoned();
                }
                !owed
            });
        }
        self.router.parked_lists.retain(|p| p.session != session);
        self.tasks.forget_waiters(session);
        let pending: Vec<u64> =
            self.router.server_requests.iter().filter(|(_, r)| r.session == session).map(|(id, _)| *id).collect();
        self.eras.drop_session(session);
        let mut reasked = Vec::new();
        for id in pending {
            let Some(r) = self.router.server_requests.remove(&id) else { continue };
            if r.round.is_some() {
                continue;
            }
            if let Some(question) = r.task {
                // A task's question outlives the session it was put to: it stays
                // pending, and whoever waits for the task's result is asked.
                if let Some(t) = self.tasks.tasks.get_mut(&question.task) {
                    t.forwarded.remove(&question.key);
                    reasked.push(question.task);
                }
                continue;
            }
            if self.backends.get(&r.server).is_some_and(|b| b.sup.generation() == r.generation && b.sup.is_connected())
            {
                let frame =
                    protocol::error_response(&r.backend_id, code::INTERNAL_ERROR, "the client disconnected", None);
                self.actions.extend(self.backends.frame_to(&r.server, frame, None));
            }
        }
        for task in reasked {
            let waiter = self.tasks.tasks.get(&task).and_then(|t| t.waiters.first().map(|(s, _)| *s));
            if let Some(session) = waiter {
                self.parts(|p, cx| p.tasks.forward_task_inputs(cx, &task, session));
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
            self.parts(|p, cx| p.backends.unsubscribe_backend(cx, &uri));
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
                let frame = protocol::error_response(id, code::OVERLOADED, &msg, None);
                self.reply_to_client(session, id, frame);
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
        let mut fields = RawFields::default();
        let (message, found) = match protocol::read(frame, &mut fields) {
            Ok(read) => read,
            Err(e) => {
                let id = e.id.as_deref().unwrap_or("null");
                return self.reply_to_client(session, id, protocol::error_response(id, e.code, &e.message, None));
            }
        };
        match message {
            Message::Request { id, method, params } => {
                let fields = found.then_some(&fields);
                let id = RawId::new(id);
                let s = self.sessions.open.get_mut(&session).expect("present");
                if !s.in_flight.insert(id.clone()) {
                    let msg = "a request with this id is already in flight";
                    let frame = protocol::error_response(&id, code::INVALID_REQUEST, msg, None);
                    return self.reply_to_client(session, &id, frame);
                }
                if s.in_flight.len() > self.config.limits.max_in_flight_per_session as usize {
                    s.in_flight.remove(&id);
                    let msg = "too many requests in flight for this session";
                    return self.reply_to_client(
                        session,
                        &id,
                        protocol::error_response(&id, code::OVERLOADED, msg, None),
                    );
                }
                if let Some(received) = param_headers.filter(|_| &*method == "tools/call") {
                    if let Err(message) =
                        super::param_headers::check_param_headers(self.view(session), &self.catalog, params, received)
                    {
                        return self.reply_error(session, &id, protocol::HEADER_MISMATCH, &message, None);
                    }
                }
                self.client_request(session, id, &method, params, fields);
            }
            Message::Notification { method, params } => self.client_notification(session, &method, params),
            Message::Response { id, result } => self.client_answer(session, id, Ok(result)),
            Message::Error { id: Some(id), error } => self.client_answer(session, id, Err(error)),
            Message::Error { id: None, .. } => {}
        }
    }

    /// A client's request; `fields`: its params' fields, when reading the frame found them.
    pub(super) fn client_request(
        &mut self,
        session: SessionId,
        id: RawId,
        method: &str,
        params: Option<&str>,
        fields: Option<&RawFields<'_>>,
    ) {
        if self.config.stateless_clients {
            let era = self.sessions.open.get_mut(&session).map_or(Ok(()), |s| s.check_era(method, params));
            if let Err((code, message, data)) = era {
                return self.reply_error(session, &id, code, &message, data.as_deref());
            }
            let stateless = self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless);
            if let Some(state) = retry_state(stateless, method, params) {
                // tether's own requestState is checked and continued; a stateless
                // backend's own goes to it.
                let to_stateless = routes_to_stateless(&self.config, &self.catalog, &self.backends, method, params);
                if self.continue_request(session, &id, method, params, &state, to_stateless) {
                    return;
                }
            }
        }
        // The hot path: routed by name from the raw params, no tree parse.
        let named = match method {
            "tools/call" => Some(("tools/call", ListKind::Tools)),
            "prompts/get" => Some(("prompts/get", ListKind::Prompts)),
            _ => None,
        };
        if let Some((method, kind)) = named {
            return match (params, fields) {
                (Some(raw), Some(fields)) => self.route_fields(session, id, method, raw, fields, kind, true),
                _ => self.route_named(session, id, method, params, kind, true),
            };
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
            "server/discover" if self.config.stateless_clients => self.discover(session, &id),
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
            "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/result" | "tasks/list" => {
                self.task_request(session, &id, method, params)
            }
            "logging/setLevel" => self.set_level(session, &id, params),
            _ => {
                let msg = format!("method not found: {method}");
                self.reply_error(session, &id, code::METHOD_NOT_FOUND, &msg, None)
            }
        }
    }

    fn initialize(&mut self, session: SessionId, id: &str, params: Option<Map<String, Value>>) {
        if !self.within_identity_quota(session, id) {
            return;
        }
        let params = params.unwrap_or_default();
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let version = protocol::negotiate_version(requested);
        let s = self.sessions.open.get_mut(&session).expect("present");
        s.protocol_version = Some(version.to_string());
        s.capabilities = match params.get("capabilities") {
            Some(Value::Object(c)) => c.clone(),
            _ => Map::new(),
        };
        // 2025-11-25 has experimental tasks: tether runs them for every backend.
        let capabilities = if version == "2025-11-25" && self.config.tasks.max_tasks > 0 {
            format!(
                r#"{},"tasks":{{"list":{{}},"cancel":{{}},"requests":{{"tools":{{"call":{{}}}}}}}}}}"#,
                &SERVER_CAPABILITIES[..SERVER_CAPABILITIES.len() - 1]
            )
        } else {
            String::from(SERVER_CAPABILITIES)
        };
        let result = format!(
            r#"{{"protocolVersion":"{version}","capabilities":{capabilities},"serverInfo":{{"name":"tether","version":"{}"}},"instructions":{}}}"#,
            env!("CARGO_PKG_VERSION"),
            instructions(&self.config)
        );
        if s.expires {
            // Before the answer: the host puts the sealed id on it.
            let mut facts = crate::cluster::SessionFacts::new(version, &s.capabilities, params.get("clientInfo"));
            facts.principal = s.principal.clone();
            s.sealed = true;
            self.push(Action::SealSession { session, facts });
        }
        self.reply(session, id, &result);
        self.parts(|p, cx| p.backends.start_lazy_backends(cx));
    }

    /// `server/discover`: what tether serves, for stateless-era clients.
    fn discover(&mut self, session: SessionId, id: &str) {
        let versions: Vec<String> = protocol::STATELESS_VERSIONS
            .iter()
            .chain(protocol::SUPPORTED_VERSIONS.iter())
            .map(|v| protocol::quote(v))
            .collect();
        // Tasks are the stateless revision's extension: announced to its clients only.
        let capabilities = match self.config.tasks.max_tasks {
            0 => String::from(SERVER_CAPABILITIES),
            _ => format!(
                r#"{},"extensions":{{"{}":{{}}}}}}"#,
                &SERVER_CAPABILITIES[..SERVER_CAPABILITIES.len() - 1],
                super::tasks::EXTENSION
            ),
        };
        let result = format!(
            r#"{{"supportedVersions":[{}],"capabilities":{capabilities},"instructions":{},"ttlMs":0,"cacheScope":"private","_meta":{{"{}":{{"name":"tether","version":"{}"}}}}}}"#,
            versions.join(","),
            instructions(&self.config),
            protocol::meta::SERVER_INFO,
            env!("CARGO_PKG_VERSION"),
        );
        self.reply(session, id, &result);
        self.parts(|p, cx| p.backends.start_lazy_backends(cx));
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
                    self.actions.extend(self.backends.frame_to(&server, protocol::notification(method, None), None));
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
            self.actions.extend(self.backends.frame_to(
                &call.server,
                protocol::notification("notifications/cancelled", Some(&params)),
                None,
            ));
            self.release(&c);
            return;
        }
        for b in self.backends.values_mut() {
            if let Some(q) = b.queue.remove_call(session, request_id) {
                if q.call.probe {
                    b.sup.breaker.probe_abandoned();
                }
                if let Some(s) = self.sessions.open.get_mut(&session) {
                    s.in_flight.remove(request_id);
                }
                return;
            }
        }
        if self.parts(|p, cx| p.eras.cancel_input_round(cx, session, request_id)) {
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
            return self.parts(|p, cx| p.eras.input_answered(p.backends, cx, round, &r.backend_id, answer));
        }
        if let Some(question) = &r.task {
            // A stateless backend's input goes with its call's retry or nowhere
            // (the task may be gone): never as a response.
            if self.parts(|p, cx| {
                p.tasks.task_input_answered(p.backends, p.eras, cx, &question.task, &question.key, answer)
            }) || question.in_round
            {
                return;
            }
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
        self.actions.extend(self.backends.frame_to(&r.server, frame, None));
    }

    // ----- lists -----
}

/// What the client's model is told about this server, as a JSON string.
fn instructions(config: &Config) -> String {
    let text = match config.mode {
        Mode::Meta => String::from(
            "tether gateway in meta mode: the tools of many MCP servers are reached through search_tools (find a tool by keywords), describe_tool (its arguments) and execute_tool (run it). list_servers, server_events and reconnect_server show and fix servers that are down.",
        ),
        Mode::Flat => {
            let admin = if config.admin_tools {
                " list_servers, server_events and reconnect_server show and fix servers that are down."
            } else {
                ""
            };
            format!("tether gateway: tools of each backend are served as <server>{}<tool>.{admin}", config.separator)
        }
    };
    protocol::quote(&text)
}

/// Whether a `tools/call`, `prompts/get` or `resources/read` goes to a backend
/// of the stateless era.
fn routes_to_stateless(
    config: &Config,
    catalog: &Catalog,
    backends: &Backends,
    method: &str,
    params: Option<&str>,
) -> bool {
    let Some(params) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else {
        return false;
    };
    let text = |key: &str| params.get(key).and_then(Value::as_str);
    let tool = super::own_tools::execute_target(config, &params).or_else(|| text("name"));
    let server = match method {
        "tools/call" => tool.and_then(|n| catalog.resolve_tool(n)).map(|r| r.server),
        "prompts/get" => text("name").and_then(|n| catalog.resolve_prompt(n)).map(|r| r.server),
        "resources/read" => text("uri").and_then(|u| catalog.resolve_uri(u)).map(|(s, _)| s),
        _ => None,
    };
    server.and_then(|s| backends.get(s)).is_some_and(|b| b.era == Era::Stateless)
}

/// The `requestState` of a stateless client's retry, if this request (of a
/// `stateless` session) is one.
fn retry_state(stateless: bool, method: &str, params: Option<&str>) -> Option<String> {
    if !matches!(method, "tools/call" | "prompts/get" | "resources/read") {
        return None;
    }
    if !stateless {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Retry {
        #[serde(default, rename = "requestState")]
        request_state: Option<String>,
    }
    serde_json::from_str::<Retry>(params?).ok()?.request_state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stateless_call_prompt_or_read_carries_a_retry_state() {
        let params = Some(r#"{"name":"t","requestState":"st","inputResponses":{}}"#);
        assert_eq!(retry_state(true, "tools/call", params).as_deref(), Some("st"));
        assert_eq!(retry_state(true, "resources/read", params).as_deref(), Some("st"));
        assert_eq!(retry_state(false, "tools/call", params), None, "a handshake-era session has no retries");
        assert_eq!(retry_state(true, "tools/list", params), None);
        assert_eq!(retry_state(true, "tools/call", Some(r#"{"name":"t"}"#)), None);
        assert_eq!(retry_state(true, "tools/call", Some(r#"{"requestState":5}"#)), None, "not a state");
    }
}
