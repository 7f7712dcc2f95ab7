//! The backend side: each backend's link (connecting, the handshake or probe,
//! listens, discovery, health checks, tether's own requests, failures and
//! what becomes of the calls on a lost connection, credentials and logins,
//! timers, resumed streams, sending a client's call) as methods of
//! [`Backends`] in a [`Cx`]: they never change a client session; what they
//! send, announce and answer goes out through the context's ordered outbox,
//! which the gateway applies after each call ([`super::Gateway::link`]).

mod connect;
mod credentials;
mod dispatch;
mod failures;
mod frames;
mod lifecycle;
mod requests;
mod streams;

pub(super) use credentials::LoginElicitation;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::backend::{error_code, RECONNECT_EVENTS_UNTHROTTLED, RECONNECT_EVENT_INTERVAL_MS};
use super::backends::Backends;
use super::calls::{Call, CallKind, ClientCall};
use super::cx::Cx;
use crate::catalog::ListKind;
use crate::credential::{AuthStep, Challenge, Next};
use crate::history::Condition;
use crate::io::{Action, Event, Status};
use crate::policy::{BreakerTransition, HealthChange};
use crate::protocol::{self, code, Era};
use crate::redact::Redactor;
use crate::time::Duration;
use crate::time::Instant;

use super::LogSource;

impl Backends {
    /// Counts and logs `event` at its backend now (its history sees the
    /// backend as it is at this moment); clients hear of it when the outbox is
    /// emptied.
    pub(super) fn emit(&mut self, cx: &mut Cx<'_>, mut event: Event) {
        self.note_event(&mut event, cx.redactor, cx.now);
        cx.announce(event);
    }

    /// What an event changes at its backend: metrics and uptime, the recent
    /// log (redacted), the history of its condition.
    pub(super) fn note_event(&mut self, event: &mut Event, redactor: &Redactor, now: Instant) {
        self.count_event(event, now);
        redactor.redact_event(event);
        if let Some(b) = self.get_mut(event.server()) {
            b.recent.push(now, LogSource::Event, event.to_string());
            // Status, breaker and health change only with an event of theirs.
            let sup = &b.sup;
            let condition = Condition::of(sup.status(), sup.breaker.state(now), sup.health.is_degraded());
            b.history.observe(now, condition);
        }
    }

    /// `frame` to `server`'s live connection (nothing when it is gone).
    pub(super) fn send(&mut self, cx: &mut Cx<'_>, server: &str, frame: String, request: Option<u64>) {
        if let Some(action) = self.frame_to(server, frame, request) {
            cx.push(action);
        }
    }
}

impl Backends {
    /// The handshake-era opener: `initialize`.
    pub(super) fn send_initialize(&mut self, cx: &mut Cx<'_>, server: &str, may_probe: bool) {
        let name = self.name(server);
        let Some(b) = self.get_mut(server) else { return };
        b.era = Era::Handshake;
        let generation = b.sup.generation();
        let id = cx.router.alloc_id();
        let params = format!(
            r#"{{"protocolVersion":"{}","capabilities":{{"roots":{{"listChanged":true}},"sampling":{{}},"elicitation":{{}}}},"clientInfo":{}}}"#,
            protocol::SUPPORTED_VERSIONS[0],
            protocol::CLIENT_INFO
        );
        let kind = CallKind::Initialize { may_probe };
        cx.router.calls.insert(id, Call { server: name, generation, deadline: None, kind });
        self.send(cx, server, protocol::request(id, "initialize", Some(&params)), Some(id));
    }

    /// The stateless-era opener: `server/discover`. `may_initialize`: a server of
    /// unknown era; anything but a stateless answer means `initialize`. Silence
    /// is a failure like any other (the connect timeout).
    pub(super) fn send_probe(&mut self, cx: &mut Cx<'_>, server: &str, may_initialize: bool) {
        let name = self.name(server);
        let Some(b) = self.get_mut(server) else { return };
        b.era = Era::Stateless;
        let generation = b.sup.generation();
        let id = cx.router.alloc_id();
        let kind = CallKind::Probe { may_initialize };
        cx.router.calls.insert(id, Call { server: name, generation, deadline: None, kind });
        let params = protocol::params_with_meta(None, &protocol::stateless_meta_members("{}"));
        self.send(cx, server, protocol::request(id, "server/discover", Some(&params)), Some(id));
    }

    /// Opens a stateless backend's `subscriptions/listen` for the changes tether
    /// relays: list changes it announces, and updates of the resources clients
    /// subscribed to. The stateless revision sends these only on a listen.
    pub(super) fn open_listen(&mut self, cx: &mut Cx<'_>, server: &str) {
        let Some(b) = self.get(server) else { return };
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
            let catalog = &*cx.catalog;
            let uris: Vec<Value> = cx
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
        let id = cx.router.alloc_id();
        let b = self.get_mut(server).expect("live");
        b.listen = Some(id);
        let generation = b.sup.generation();
        cx.router
            .calls
            .insert(id, Call { server: self.name(server), generation, deadline: None, kind: CallKind::Listen });
        let params = serde_json::json!({ "notifications": filter }).to_string();
        let frame = self.request_frame(server, id, "subscriptions/listen", Some(&params));
        self.send(cx, server, frame, Some(id));
    }

    /// Ends the open listen of a stateless backend (if any) and opens one for
    /// what clients want now (their resource subscriptions changed).
    pub(super) fn relisten(&mut self, cx: &mut Cx<'_>, server: &str) {
        let Some(b) = self.get_mut(server) else { return };
        if let Some(id) = b.listen.take() {
            cx.router.calls.remove(&id);
            let params = format!(r#"{{"requestId":{id}}}"#);
            self.send(cx, server, protocol::notification("notifications/cancelled", Some(&params)), None);
        }
        self.open_listen(cx, server);
    }

    pub(super) fn request_page(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        kind: ListKind,
        cursor: Option<&str>,
        pages: u32,
    ) {
        let id = cx.router.alloc_id();
        let Some(b) = self.get_mut(server) else { return };
        let generation = b.sup.generation();
        let deadline = Some(cx.now + Duration::from_millis(b.sup.policy().request_timeout_ms));
        if let Some(d) = b.discovery.as_mut() {
            d.asked();
        }
        let params = cursor.map(|c| format!(r#"{{"cursor":{}}}"#, protocol::quote(c)));
        cx.router.calls.insert(
            id,
            Call { server: self.name(server), generation, deadline, kind: CallKind::Discover { kind, pages } },
        );
        let frame = self.request_frame(server, id, kind.method(), params.as_deref());
        self.send(cx, server, frame, Some(id));
    }

    pub(super) fn health_failed(&mut self, cx: &mut Cx<'_>, server: &str, last_error: String) {
        let Some(b) = self.get_mut(server) else { return };
        if let Some(HealthChange::Degraded { consecutive_failures }) = b.sup.health.on_failure() {
            self.emit(cx, Event::ServerHealthDegraded { server: self.name(server), consecutive_failures, last_error });
        }
    }
    pub(super) fn health_answer(&mut self, cx: &mut Cx<'_>, server: &str, answer: Result<&str, &str>) {
        let now = cx.now;
        let Some(b) = self.get_mut(server) else { return };
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
        b.sup.schedule_health(now, cx.rng);
        // A health check is not traffic: `last_success` (which skips checks) stays as it is.
        if ok {
            if let Some(HealthChange::Restored) = b.sup.health.on_success() {
                self.emit(cx, Event::ServerHealthRestored { server: self.name(server) });
            }
        } else {
            self.health_failed(cx, server, "health check answered with an error".into());
        }
    }

    pub(super) fn unknown_response(&mut self, cx: &mut Cx<'_>, server: &str, id: &str) {
        self.emit(
            cx,
            Event::ProtocolViolation {
                server: self.name(server),
                detail: format!("response to unknown request id {id}"),
            },
        );
    }

    pub(super) fn record_success(&mut self, cx: &mut Cx<'_>, server: &str) {
        let now = cx.now;
        let Some(b) = self.get_mut(server) else { return };
        b.last_success = Some(now);
        b.session_losses = 0;
        b.sup.touch(now);
        if let Some(BreakerTransition::Closed) = b.sup.breaker.on_success(now) {
            self.emit(cx, Event::CircuitClosed { server: self.name(server) });
        }
    }

    /// Asks the host for a credential step.
    pub(super) fn authorize(&mut self, cx: &mut Cx<'_>, server: &str, step: AuthStep) {
        let server = self.name(server);
        cx.push(Action::Authorize { server, step });
    }

    /// A call found the backend waiting for a person: make sure a login is
    /// prepared, so the error it gets can say where to log in.
    pub(super) fn login_wanted(&mut self, cx: &mut Cx<'_>, server: &str) {
        let Some(b) = self.get_mut(server) else { return };
        if let Some(step) = b.credential.as_mut().and_then(|c| c.want_login()) {
            self.authorize(cx, server, step);
        }
    }

    /// A refusal that no client call waits on: renew the credential if that is
    /// what it takes.
    pub(super) fn credential_refused(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        status: u16,
        challenge: &Challenge,
        sent_before: bool,
    ) {
        if status == 403 {
            return;
        }
        let now = cx.now;
        let b = self.get_mut(server).expect("live");
        let credential = b.credential.as_mut().expect("managed");
        let epoch = if sent_before { 0 } else { credential.epoch() };
        if let Next::Step(step) = credential.on_unauthorized(now, epoch, challenge, cx.rng) {
            self.authorize(cx, server, step);
        }
    }

    pub(super) fn health_check(&mut self, cx: &mut Cx<'_>, server: &str) {
        let now = cx.now;
        let b = self.get_mut(server).expect("live");
        if b.sup.status() != Status::Online || !b.sup.is_ready() {
            return;
        }
        let interval = Duration::from_millis(b.sup.policy().health_interval_ms);
        if b.last_success.is_some_and(|at| now.saturating_since(at) < interval) {
            // Recent successful traffic is the check: it passed.
            b.sup.schedule_health(now, cx.rng);
            if let Some(HealthChange::Restored) = b.sup.health.on_success() {
                self.emit(cx, Event::ServerHealthRestored { server: self.name(server) });
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
        let deadline = Some(now + Duration::from_millis(b.sup.policy().health_timeout_ms));
        let generation = b.sup.generation();
        let id = cx.router.alloc_id();
        cx.router.calls.insert(id, Call { server: self.name(server), generation, deadline, kind: CallKind::Health });
        let frame = self.request_frame(server, id, method, None);
        self.send(cx, server, frame, Some(id));
        // A listen the backend ended is opened again here, not in a tight loop.
        self.open_listen(cx, server);
    }

    /// Re-sends subscriptions after a reconnect, so updates keep flowing.
    pub(super) fn resubscribe(&mut self, cx: &mut Cx<'_>, server: &str) {
        let catalog = &*cx.catalog;
        let uris: Vec<String> = cx
            .sessions
            .subscriptions
            .keys()
            .filter_map(|u| catalog.resolve_uri(u).filter(|(s, _)| *s == server).map(|(_, uri)| uri.to_string()))
            .collect();
        for uri in uris {
            let params = format!(r#"{{"uri":{}}}"#, protocol::quote(&uri));
            self.quiet_request(cx, server, "resources/subscribe", &params);
        }
    }

    /// A best-effort request whose answer is ignored.
    pub(super) fn quiet_request(&mut self, cx: &mut Cx<'_>, server: &str, method: &str, params: &str) {
        if cx.router.calls.len() >= cx.config.limits.max_in_flight as usize {
            return;
        }
        let id = cx.router.alloc_id();
        let b = &self[server];
        let generation = b.sup.generation();
        let deadline = Some(cx.now + Duration::from_millis(b.sup.policy().request_timeout_ms));
        cx.router.calls.insert(id, Call { server: self.name(server), generation, deadline, kind: CallKind::Quiet });
        let frame = self.request_frame(server, id, method, Some(params));
        self.send(cx, server, frame, Some(id));
    }

    /// Counts a failed call against the breaker.
    pub(super) fn count_failure(&mut self, cx: &mut Cx<'_>, server: &str, counts: bool, probe: bool) {
        let now = cx.now;
        let Some(b) = self.get_mut(server) else { return };
        if !counts {
            if probe {
                b.sup.breaker.probe_abandoned();
            }
            return;
        }
        if let Some(BreakerTransition::Opened { cooldown }) = b.sup.breaker.on_failure(now) {
            self.emit(cx, Event::CircuitOpened { server: self.name(server), cooldown_ms: cooldown.as_millis() });
        }
    }

    pub(super) fn announce_reconnect(&mut self, cx: &mut Cx<'_>, server: &str, attempt: u32, next_retry_ms: u64) {
        let now = cx.now;
        let b = self.get_mut(server).expect("live");
        let throttled = attempt > RECONNECT_EVENTS_UNTHROTTLED
            && b.last_reconnect_event
                .is_some_and(|at| now.saturating_since(at).as_millis() < RECONNECT_EVENT_INTERVAL_MS);
        if throttled {
            return;
        }
        b.last_reconnect_event = Some(now);
        self.emit(cx, Event::ServerReconnecting { server: self.name(server), attempt, next_retry_ms });
    }

    /// Ends the live connection's bookkeeping: closes it, fails pending server
    /// requests, and returns its in-flight client calls for the caller to settle.
    pub(super) fn drop_connection(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        reason: &str,
        lost: bool,
    ) -> Vec<ClientCall> {
        let Some(b) = self.get_mut(server) else { return Vec::new() };
        let generation = b.sup.generation();
        b.discovery = None;
        b.streams = Default::default();
        if b.sup.is_connected() {
            cx.push(Action::CloseBackend { server: self.name(server), generation });
            if !lost {
                self.emit(cx, Event::ServerDisconnected { server: self.name(server), intentional: true });
            }
        }
        if lost {
            self.emit(cx, Event::ServerDisconnected { server: self.name(server), intentional: false });
        }
        let ids: Vec<u64> = cx.router.calls.iter().filter(|(_, c)| &*c.server == server).map(|(id, _)| *id).collect();
        let mut client_calls = Vec::new();
        for id in ids {
            if let Some(Call { kind: CallKind::Client(c), .. }) = cx.router.calls.remove(&id) {
                client_calls.push(c);
            }
        }
        let pending: Vec<(u64, crate::io::SessionId, Option<crate::io::RawId>)> = cx
            .router
            .server_requests
            .iter()
            // Inputs a stateless backend asked for live in tether, not in the connection.
            .filter(|(_, r)| &*r.server == server && r.round.is_none() && !r.task.as_ref().is_some_and(|q| q.in_round))
            .map(|(id, r)| (*id, r.session, r.related.clone()))
            .collect();
        for (id, session, related) in pending {
            cx.router.server_requests.remove(&id);
            let params = format!(
                r#"{{"requestId":{id},"reason":{}}}"#,
                protocol::quote(&format!("backend '{server}' disconnected: {reason}"))
            );
            cx.related_to_client(
                session,
                related.as_deref(),
                protocol::notification("notifications/cancelled", Some(&params)),
            );
        }
        client_calls
    }
    /// Asks for the first scheduled resumption of `server` that is due, if any;
    /// `false` when none was.
    pub(super) fn resume_due_stream(&mut self, cx: &mut Cx<'_>, server: &str) -> bool {
        let now = cx.now;
        let name = self.name(server);
        let Some(b) = self.get_mut(server) else { return false };
        let Some((&stream, r)) = b.streams.ended.iter_mut().find(|(_, r)| r.resume_at.is_some_and(|at| at <= now))
        else {
            return false;
        };
        r.resume_at = None;
        let last_event_id = r.last_event_id.clone();
        let live = stream.request().map_or(true, |id| cx.router.calls.get(&id).is_some_and(|c| c.server == name));
        if !live || !b.sup.is_connected() {
            b.streams.ended.remove(&stream);
            return true;
        }
        let generation = b.sup.generation();
        cx.push(Action::ResumeStream { server: name, generation, stream, last_event_id });
        true
    }
}

#[cfg(test)]
mod tests;
