//! Every backend by name, and what is asked of them together or of one by
//! name: whether lists should wait for one starting, how long an aggregated
//! list may be cached, what a call's error says of a backend that cannot serve
//! it, what a person must do to log one in again. Questions, not decisions:
//! the gateway decides what follows from the answers.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use core::ops::{Deref, DerefMut};
use serde_json::Value;

use super::backend::{error_code, Backend};
use super::calls::ClientCall;
use super::discovery::kind_bit;
use super::links::LoginElicitation;
use super::sessions::Sessions;
use super::tasks::{Form, EXTENSION};
use super::HostError;
use crate::catalog::ListKind;
use crate::config::Limits;
use crate::io::SessionId;
use crate::io::{Action, Event, Generation, ServerName, Status, StreamRef};
use crate::metrics::CallOutcome;
use crate::policy::BreakerState;
use crate::protocol::{self, code, CacheHint, Era};
use crate::supervisor::Timer;
use crate::time::{Duration, Instant};
use alloc::vec::Vec;

/// The backends, by name. Reads and writes of one backend go through the map
/// (`backends.get(name)`); the questions about several are methods.
#[derive(Clone, Default)]
pub(super) struct Backends(BTreeMap<ServerName, Backend>);

impl Deref for Backends {
    type Target = BTreeMap<ServerName, Backend>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Backends {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Backends {
    /// The shared name of backend `server` (no allocation when it exists).
    pub(super) fn name(&self, server: &str) -> ServerName {
        self.0.get_key_value(server).map_or_else(|| server.into(), |(name, _)| name.clone())
    }

    /// Some backend is (re)connecting and began less than `window_ms` before
    /// `now`: a list answered now would miss its tools (a restarted backend
    /// listing 0 tools), so lists wait for it, never longer than the
    /// aggregation deadline.
    pub(super) fn connection_pending(&self, now: Instant, window_ms: u64) -> bool {
        self.0.values().any(|b| {
            !b.config.disabled
                && matches!(b.sup.status(), Status::Connecting | Status::DiscoveringTools)
                && b.connect_started_at.is_some_and(|at| now < at + Duration::from_millis(window_ms))
        })
    }

    /// Some backend is starting for the first time, began less than `window_ms`
    /// before `now`, and may still bring tools. A backend that has been starting
    /// for longer is not waited for again, so one slow backend cannot slow every
    /// request.
    pub(super) fn first_discovery_pending(&self, now: Instant, window_ms: u64) -> bool {
        self.0.values().any(|b| {
            !b.catalog_discovered
                && !b.config.disabled
                && matches!(b.sup.status(), Status::Connecting | Status::DiscoveringTools)
                && b.first_connect_at.is_some_and(|at| now < at + Duration::from_millis(window_ms))
        })
    }

    /// How long an aggregated list of `kind` may be cached: as long as every
    /// backend behind it says its part may be (the shortest TTL; public only if
    /// all are). A backend on its way up or down may change the list at any
    /// moment: stale.
    pub(super) fn cache_hint(&self, kind: ListKind) -> CacheHint {
        let mut hint: Option<CacheHint> = None;
        for b in self.0.values().filter(|b| !b.config.disabled) {
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

    /// Which of the backends `sees` lets through run tasks: it decides what
    /// 2025-11-25 clients are told of their tools (`execution.taskSupport`), so a
    /// change is a change of the tools list.
    pub(super) fn tasks_hash(&self, sees: impl Fn(&str) -> bool) -> u64 {
        let mut tasks = crate::catalog::Fnv::new();
        let running = self.0.iter().filter(|(s, b)| sees(s) && b.runs_tasks(Form::Experimental));
        for (name, _) in running {
            tasks.write(name.as_bytes());
            tasks.write(&[0]);
        }
        tasks.finish()
    }

    /// Whether `server` runs tasks itself, in `form` (see [`Backend::runs_tasks`]).
    pub(super) fn runs_tasks(&self, server: &str, form: Form) -> bool {
        self.0.get(server).is_some_and(|b| b.runs_tasks(form))
    }

    /// Bytes a discovery of `server` re-listing `requested` may keep: its own
    /// bound, and what the other backends' catalogs (and its lists not being
    /// re-listed) leave of the total.
    pub(super) fn catalog_room(&self, server: &str, requested: u8, limits: &Limits) -> u64 {
        let others: u64 = self
            .0
            .iter()
            .map(|(name, b)| match &**name == server {
                true => ListKind::ALL
                    .iter()
                    .filter(|k| requested & kind_bit(**k) == 0)
                    .map(|k| b.catalog_bytes[*k as usize])
                    .sum(),
                false => b.catalog_bytes.iter().sum::<u64>(),
            })
            .sum();
        let own = u64::from(limits.max_catalog_bytes);
        own.min(u64::from(limits.max_total_catalog_bytes).saturating_sub(others))
    }

    /// Whether `server`'s tools can be called at `now` (online, or idle and
    /// restarted by the call) and its breaker lets calls through.
    pub(super) fn available(&self, server: &str, now: Instant) -> bool {
        self.0.get(server).is_some_and(|b| {
            b.sup.status().is_visible() && !b.config.disabled && b.sup.breaker.state(now) != BreakerState::Open
        })
    }

    /// A request of the gateway's own to `server`, in the era of its connection:
    /// a stateless backend gets the per-request `_meta` (declaring no client
    /// capabilities: nobody is behind it to answer input requests).
    pub(super) fn request_frame(&self, server: &str, id: u64, method: &str, params: Option<&str>) -> String {
        match self.0.get(server).map(|b| b.era) {
            Some(Era::Stateless) => {
                let params = protocol::params_with_meta(params, &protocol::stateless_meta_members("{}"));
                protocol::request(id, method, Some(&params))
            }
            _ => protocol::request(id, method, params),
        }
    }

    /// The structured `data` of an error saying `server` cannot serve a call at `now`.
    pub(super) fn unavailable_data(&self, server: &str, now: Instant) -> String {
        let Some(b) = self.0.get(server) else { return "{}".into() };
        let mut m = BTreeMap::new();
        m.insert("server", Value::String(server.to_string()));
        m.insert("status", Value::String(b.sup.status().as_str().into()));
        m.insert("attempt", Value::from(b.sup.reconnect_attempt()));
        let next = b.sup.timer(Timer::Retry).map(|at| at.saturating_since(now).as_millis());
        m.insert("next_retry_ms", next.map_or(Value::Null, Value::from));
        m.insert("last_error", b.sup.message().map_or(Value::Null, |s| Value::String(s.into())));
        let breaker = match b.sup.breaker.state(now) {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        };
        m.insert("breaker", Value::String(breaker.into()));
        serde_json::to_string(&m).unwrap_or_else(|_| "{}".into())
    }

    /// What a client is told when `server` rejected tether's credentials: what the
    /// user must do about it.
    pub(super) fn reauth_message(&self, server: &str) -> String {
        format!("backend '{server}' requires re-authentication ({})", self.login_instructions(server))
    }

    /// What a person must do to bring `server`, which refused tether's
    /// credential, back.
    pub(super) fn login_instructions(&self, server: &str) -> String {
        let Some(b) = self.0.get(server) else { return String::new() };
        let Some(credential) = b.credential.as_ref() else {
            let reason = b.sup.message().unwrap_or("credentials rejected");
            return format!(
                "{reason}; update the `headers` it is configured with (static keys), or remove its Authorization \
                 header so tether logs in with OAuth, then reconnect it"
            );
        };
        let reason = credential.reauth_reason().unwrap_or("login required");
        if credential.misconfigured() {
            return format!(
                "{reason}: the authorization server refuses the client tether is configured as; correct the \
                 backend's oauth settings (client_id, client_secret or private_key), then reload the \
                 configuration or run `tether reconnect {server}`"
            );
        }
        if credential.retrying() {
            // An unreachable token endpoint, a refused unattended grant, an
            // assertion file not there yet: no login mends these, time may.
            return format!(
                "{reason}: tether asks the authorization server again by itself, backing off; \
                 `tether reconnect {server}` asks now"
            );
        }
        match credential.login_url() {
            Some(url) => format!("{reason}: run `tether auth login {server}` or open {url}"),
            None => format!("{reason}: run `tether auth login {server}`"),
        }
    }

    /// `server` ended its listen `id` (a final answer, an error, or its
    /// `notifications/cancelled`): opened again at the next health check, unless
    /// the backend does not support listening.
    pub(super) fn listen_ended(&mut self, server: &str, id: u64, error: Option<&str>) {
        let Some(b) = self.0.get_mut(server) else { return };
        if b.listen == Some(id) {
            b.listen = None;
        }
        if error.and_then(error_code) == Some(code::METHOD_NOT_FOUND) {
            b.listen_unsupported = true;
        }
    }

    /// `server` answered request `id`: its stream needs no resuming.
    pub(super) fn stream_answered(&mut self, server: &str, id: u64) {
        if let Some(b) = self.0.get_mut(server) {
            b.streams.ended.remove(&StreamRef::Request(id));
        }
    }
    /// Keeps the metrics and uptimes that events mark: breaker transitions,
    /// lost connections, and when a backend came online or stopped being.
    pub(super) fn count_event(&mut self, event: &Event, now: Instant) {
        let server = match event {
            Event::CircuitOpened { server, .. }
            | Event::CircuitClosed { server }
            | Event::ServerDisconnected { server, .. }
            | Event::ServerStatusChanged { server, .. } => server,
            _ => return,
        };
        let Some(b) = self.0.get_mut(&**server) else { return };
        match event {
            Event::CircuitOpened { .. } => b.metrics.breaker_opened += 1,
            Event::CircuitClosed { .. } => b.metrics.breaker_closed += 1,
            Event::ServerDisconnected { intentional: false, .. } => b.metrics.disconnects += 1,
            Event::ServerStatusChanged { to: Status::Online, .. } => b.online_since = Some(now),
            Event::ServerStatusChanged { .. } => b.online_since = None,
            _ => {}
        }
    }

    /// Whether an input about `server`'s `generation` concerns the live connection.
    pub(super) fn current(&self, server: &str, generation: Generation) -> Result<bool, HostError> {
        let Some(b) = self.0.get(server) else { return Ok(false) };
        if generation > b.sup.generation() {
            return Err(HostError::FutureGeneration { server: self.name(server), generation });
        }
        Ok(generation == b.sup.generation() && b.sup.is_connected())
    }
    /// Shows the login instructions as the status message of a backend that waits
    /// for a person.
    pub(super) fn update_login_message(&mut self, server: &str) {
        let Some(b) = self.0.get(server) else { return };
        if b.sup.status() != Status::RequiresReauth {
            return;
        }
        let msg = self.login_instructions(server);
        let Some(b) = self.0.get_mut(server) else { return };
        b.sup.set_status(Status::RequiresReauth, Some(msg));
    }

    /// The URL elicitation that asks the person behind `call` to log in to
    /// `server`, if the client declared URL elicitations and a login is prepared;
    /// remembers the session, to tell it when the login is done.
    pub(super) fn login_elicitation(
        &mut self,
        sessions: &Sessions,
        server: &str,
        call: &ClientCall,
        message: &str,
    ) -> Option<Value> {
        let url = self.0.get(server)?.credential.as_ref()?.login_url()?.to_string();
        let session = sessions.open.get(&call.session);
        let declared = match &call.caps {
            Some(caps) => caps,
            None => &session?.capabilities,
        };
        let opens_urls = declared.get("elicitation").and_then(|e| e.get("url")).is_some_and(|v| !v.is_null());
        if !opens_urls {
            return None;
        }
        // A per-request (stateless) session is gone before the login is done.
        let lasting = session.is_some_and(|s| !s.per_request());
        let live: Vec<SessionId> = match &self.0.get(server)?.login_elicitation {
            Some(e) => e.sessions.iter().copied().filter(|s| sessions.open.contains_key(s)).collect(),
            None => Vec::new(),
        };
        let b = self.0.get_mut(server)?;
        let epoch = b.credential_epoch();
        let e = b.login_elicitation.get_or_insert_with(|| LoginElicitation {
            id: format!("tether-login-{server}-{epoch}"),
            sessions: Vec::new(),
        });
        e.sessions = live;
        if lasting && !e.sessions.contains(&call.session) {
            e.sessions.push(call.session);
        }
        Some(serde_json::json!({"mode": "url", "elicitationId": e.id, "url": url, "message": message}))
    }
    /// Frees a finished call's id in its session.
    /// Counts an ended client call in `server`'s metrics, timed from the
    /// client's request (waits for the backend included: what the client saw).
    pub(super) fn record_call(&mut self, server: &str, call: &ClientCall, outcome: CallOutcome, now: Instant) {
        let latency_ms = now.saturating_since(call.created).as_millis();
        if let Some(b) = self.0.get_mut(server) {
            b.metrics.record_call(outcome, latency_ms);
            b.history.record_call(now, latency_ms);
        }
    }
}

impl Backends {
    /// `frame` to `server`'s live connection, as an action (none when it is gone).
    pub(super) fn frame_to(&self, server: &str, frame: String, request: Option<u64>) -> Option<Action> {
        let generation = self.0.get(server)?.sup.generation();
        Some(Action::SendToBackend { server: self.name(server), generation, frame, request, headers: Vec::new() })
    }
}

impl Backend {
    /// Whether it runs tasks itself, in `form`: a stateless backend that
    /// announced the extension, a 2025-11-25 one whose `tools/call` takes tasks.
    /// Tasks pass through to such a backend for clients of the same form; for
    /// clients of the other form tether runs them.
    pub(super) fn runs_tasks(&self, form: Form) -> bool {
        let caps = &self.capabilities;
        match (form, self.era) {
            (Form::Extension, Era::Stateless) => {
                caps.get("extensions").and_then(|e| e.get(EXTENSION)).is_some_and(Value::is_object)
            }
            (Form::Experimental, Era::Handshake) => caps
                .get("tasks")
                .and_then(|t| t.get("requests"))
                .and_then(|r| r.get("tools"))
                .and_then(|t| t.get("call"))
                .is_some_and(Value::is_object),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests;
