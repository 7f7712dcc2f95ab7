//! Messages from a backend: answers to the gateway's requests, notifications
//! (progress, logs, list changes, resource updates, cancellations) and the
//! backend's own requests to clients.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::calls::{CallKind, RawFields, ServerRequest};
use super::discovery::kind_bit;
use super::origins::Origins;
use super::Gateway;
use crate::catalog::ListKind;
use crate::io::{Action, Event, StreamRef};
use crate::protocol::{self, code, Era, Message};

/// What the transport says of the call a backend's request is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// It came on this client call's POST stream.
    Call(u64),
    /// It came on the stream of a request that is no client call in flight.
    NoCall,
    /// Nothing (stdio, the standalone GET stream, a plain JSON body).
    Unsaid,
}

impl Gateway {
    /// A frame from the live connection of `server`.
    pub(super) fn backend_frame(&mut self, server: &str, frame: &str) {
        self.backend_frame_on(server, frame, None);
    }

    /// A frame from the live connection of `server`, that came on `stream` when
    /// the transport says (a request on a POST's stream is for that call).
    pub(super) fn backend_frame_on(&mut self, server: &str, frame: &str, stream: Option<StreamRef>) {
        if frame.len() > self.config.limits.max_frame_bytes as usize {
            self.emit(Event::ProtocolViolation {
                server: self.backends.name(server),
                detail: format!("frame of {} bytes exceeds the limit", frame.len()),
            });
            return;
        }
        let mut fields = RawFields::default();
        let message = match protocol::read(frame, &mut fields) {
            Ok((m, _)) => m,
            Err(e) => {
                self.emit(Event::ProtocolViolation { server: self.backends.name(server), detail: e.message });
                return;
            }
        };
        match message {
            Message::Response { id, result } => {
                let Some(call_id) = protocol::gateway_id(id) else {
                    return self.parts(|p, cx| p.backends.unknown_response(cx, server, id));
                };
                self.backend_answer(server, call_id, Ok(result));
            }
            Message::Error { id, error } => {
                let Some(call_id) = id.and_then(protocol::gateway_id) else {
                    return self.parts(|p, cx| p.backends.unknown_response(cx, server, id.unwrap_or("null")));
                };
                self.backend_answer(server, call_id, Err(error));
            }
            Message::Notification { method, params } => self.backend_notification(server, &method, params),
            Message::Request { id, method, params, .. } => {
                let origin = match stream.and_then(|s| s.request()) {
                    Some(call) if self.client_call_on(server, call) => Origin::Call(call),
                    // The stream of a request no client made (tether's own), or of
                    // one already answered: no client call asks.
                    Some(_) => Origin::NoCall,
                    None => Origin::Unsaid,
                };
                self.backend_request(server, id, &method, params, origin);
            }
        }
    }

    /// A response or error for request `call_id`.
    fn backend_answer(&mut self, server: &str, call_id: u64, answer: Result<&str, &str>) {
        let generation = self.backends[server].sup.generation();
        match self.router.calls.get(&call_id) {
            Some(c) if &*c.server == server && c.generation == generation => {}
            // Ours, but over: an answer after a cancel or timeout, which the
            // spec allows to cross the cancellation. Dropped without a word.
            _ if call_id < self.router.next_request_id => return,
            _ => return self.parts(|p, cx| p.backends.unknown_response(cx, server, &call_id.to_string())),
        }
        let Some(call) = self.router.calls.remove(&call_id) else { return };
        self.backends.stream_answered(server, call_id);
        let b = self.backends.get_mut(server).expect("live");
        if call_id >= b.credential_first_id {
            // Sent with the token in hand and answered: the backend takes it.
            if let Some(credential) = b.credential.as_mut() {
                credential.accepted();
            }
        }
        match call.kind {
            CallKind::Initialize { may_probe } => {
                self.parts(|p, cx| p.backends.handshake_answer(cx, server, answer, may_probe))
            }
            CallKind::Probe { may_initialize } => {
                self.parts(|p, cx| p.backends.probe_answer(cx, server, answer, may_initialize))
            }
            CallKind::Listen => self.backends.listen_ended(server, call_id, answer.err()),
            CallKind::Discover { kind, pages } => {
                self.parts(|p, cx| p.backends.discovery_answer(cx, server, kind, pages, answer))
            }
            CallKind::Health => self.parts(|p, cx| p.backends.health_answer(cx, server, answer)),
            CallKind::Quiet => {}
            CallKind::Client(c) => {
                self.parts(|p, cx| p.backends.record_success(cx, server));
                self.answer_client_call(server, c, answer);
            }
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
                self.parts(|p, cx| p.backends.start_discovery(cx, server, kinds));
            }
            "notifications/progress" => self.parts(|p, cx| p.backends.forward_progress(cx, server, params)),
            "notifications/message" => self.forward_log(server, params),
            "notifications/resources/updated" => self.forward_resource_updated(server, params),
            "notifications/cancelled" => self.parts(|p, cx| p.backends.backend_cancelled(cx, server, params)),
            "notifications/tasks/status" => self.parts(|p, cx| p.tasks.forward_task_status(cx, server, params)),
            // The listen is open; tether asked only for what it relays.
            "notifications/subscriptions/acknowledged" => {}
            _ => {}
        }
    }

    fn forward_log(&mut self, server: &str, params: Option<&str>) {
        let Some(mut p) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else { return };
        let logger = match p.get("logger").and_then(Value::as_str) {
            Some(l) => format!("{server}/{l}"),
            None => server.to_string(),
        };
        p.insert("logger".into(), Value::String(logger));
        let params = serde_json::to_string(&p).unwrap_or_default();
        // Nothing of a backend reaches a session whose scopes do not show it.
        let ready: Vec<_> = self
            .sessions
            .open
            .iter()
            .filter(|(id, s)| s.ready && self.view(**id).sees_server(server))
            .map(|(id, _)| *id)
            .collect();
        for session in ready {
            // Logged while this session has a call on the backend: most likely about that call.
            let related =
                Origins::new(&self.router, &self.sessions).latest_call(server, Some(session)).map(|(_, id)| id);
            let frame = protocol::notification("notifications/message", Some(&params));
            self.push(Action::related(session, related.as_deref(), frame));
        }
        // Stateless clients have no session to log to: a message goes to the
        // latest call of each that asked for this level on the backend.
        let severity = p.get("level").and_then(Value::as_str).and_then(protocol::log_severity).unwrap_or(0);
        let mut latest: BTreeMap<crate::io::SessionId, crate::io::RawId> = BTreeMap::new();
        for c in self.router.calls.values().filter(|c| &*c.server == server) {
            if let CallKind::Client(cc) = &c.kind {
                if cc.task.is_some() {
                    continue;
                }
                let wanted = cc.log_level.as_deref().and_then(protocol::log_severity);
                if wanted.is_some_and(|w| severity >= w) {
                    latest.insert(cc.session, cc.id.clone());
                }
            }
        }
        for (session, id) in latest {
            let frame = protocol::notification("notifications/message", Some(&params));
            self.push(Action::related(session, Some(&id), frame));
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
                self.sessions.update_listens(session, &served, members, &mut self.actions);
            } else {
                self.push(Action::to_session(
                    session,
                    protocol::notification("notifications/resources/updated", Some(&params)),
                ));
            }
        }
    }

    /// A backend asks something of a client: answered here (`ping`) or routed to
    /// the session whose call caused it. That call is the one whose POST stream
    /// the request came on, when the transport says ([`Origin`]); else it is taken
    /// to be the newest call in flight on the backend, a guess that is not made
    /// between several token holders.
    fn backend_request(&mut self, server: &str, id: &str, method: &str, params: Option<&str>, origin: Origin) {
        if method == "ping" {
            return self.actions.extend(self.backends.frame_to(server, protocol::response(id, "{}"), None));
        }
        let Some(capability) = protocol::input_capability(method) else {
            let msg = format!("tether does not forward {method} to clients");
            return self.actions.extend(self.backends.frame_to(
                server,
                protocol::error_response(id, code::METHOD_NOT_FOUND, &msg, None),
                None,
            ));
        };
        let call = match origin {
            Origin::Call(call) => Some(call),
            Origin::NoCall => None,
            Origin::Unsaid => self.router.newest_client_call(server),
        };
        if let Some(call) = call {
            if let Some(task) = self.router.call_task(call) {
                return self.parts(|p, cx| {
                    p.tasks.ask_for_task(p.backends, cx, server, call, &task, id, method, params, capability)
                });
            }
            if Origins::new(&self.router, &self.sessions).is_stateless_call(call) {
                return self.parts(|p, cx| {
                    p.eras.ask_stateless_client(p.backends, cx, server, call, id, method, params, capability)
                });
            }
        }
        if origin == Origin::Unsaid && Origins::new(&self.router, &self.sessions).ambiguous(server) {
            // Clients with tokens are different people: a request asked of the
            // wrong one would show it another's call, and let it answer for them.
            let msg = "calls of several token-holding clients are in flight on this server: \
                       tether cannot tell which one this request is for";
            return self.actions.extend(self.backends.frame_to(
                server,
                protocol::error_response(id, code::INTERNAL_ERROR, msg, None),
                None,
            ));
        }
        let asked = match origin {
            Origin::Call(call) => Origins::new(&self.router, &self.sessions).of_call(call, capability),
            Origin::NoCall => Origins::new(&self.router, &self.sessions).callless(capability),
            Origin::Unsaid => Origins::new(&self.router, &self.sessions).of_server(server, capability),
        };
        let Some((session, related)) = asked else {
            let msg = format!("no connected client supports {capability}");
            return self.actions.extend(self.backends.frame_to(
                server,
                protocol::error_response(id, code::METHOD_NOT_FOUND, &msg, None),
                None,
            ));
        };
        if self.router.server_requests.len() >= self.config.limits.max_pending_server_requests as usize {
            let msg = "too many requests pending at clients";
            return self.actions.extend(self.backends.frame_to(
                server,
                protocol::error_response(id, code::OVERLOADED, msg, None),
                None,
            ));
        }
        let client_id = self.router.alloc_id();
        let generation = self.backends[server].sup.generation();
        self.router.server_requests.insert(
            client_id,
            ServerRequest {
                server: self.backends.name(server),
                generation,
                backend_id: id.to_string(),
                session,
                related: related.clone(),
                round: None,
                defaults: (method == "elicitation/create").then(|| protocol::elicitation_defaults(params)).flatten(),
                task: None,
            },
        );
        self.push(Action::related(session, related.as_deref(), protocol::request(client_id, method, params)));
    }

    /// Whether `call` is a client call in flight on `server`'s live connection
    /// (the fuzz drivers ask too: a request on its stream is that client's).
    pub(crate) fn client_call_on(&self, server: &str, call: u64) -> bool {
        let generation = self.backends.get(server).map(|b| b.sup.generation());
        self.router.calls.get(&call).is_some_and(|c| {
            &*c.server == server && Some(c.generation) == generation && matches!(c.kind, CallKind::Client(_))
        })
    }
}
