//! Routing a client's request to the backend that serves it: names and URIs,
//! subscriptions, admission (breaker, limits, queue), dispatch, and the answer
//! that goes back, exactly once.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::calls::{ClientCall, Forward, Parked, ParkedList, Queued, RawFields, Shape};
use super::client_events::Level;
use super::own_tools::OwnTool;
use super::tasks::TaskPlan;
use super::tasks::TaskRules;
use super::Gateway;
use crate::catalog::Catalog;
use crate::catalog::ListKind;
use crate::io::{Action, ClientRoute, RawId, ServerName, SessionId, Status};
use crate::metrics::CallOutcome;
use crate::policy::Admission;
use crate::protocol::{self, code, CacheHint, Era};
use crate::supervisor::Readiness;
use crate::time::Duration;

impl Gateway {
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
        let Some(fields) = RawFields::parse(raw) else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "params must be an object", None);
        };
        self.route_fields(session, id, method, raw, &fields, kind, may_wait);
    }

    /// [`Gateway::route_named`] with the params' fields found: `raw` is the
    /// params' text, `fields` its fields.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn route_fields(
        &mut self,
        session: SessionId,
        id: RawId,
        method: &'static str,
        raw: &str,
        fields: &RawFields<'_>,
        kind: ListKind,
        may_wait: bool,
    ) {
        let Some(name) = fields.get("name").and_then(protocol::string_value) else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "missing name", None);
        };
        if let Some(tool) = OwnTool::named(&self.config, &name).filter(|_| kind == ListKind::Tools) {
            return self.call_own_tool(session, id, tool, fields);
        }
        let resolved = match kind {
            ListKind::Tools => self.view(session).tool(&name),
            _ => self.view(session).prompt(&name),
        };
        let Some(r) = resolved else {
            // A session whose scopes withhold things is told nothing about them.
            let restricted = self.view(session).restricted();
            if let Some(msg) = super::routing::hidden_message(&self.catalog, kind, &name).filter(|_| !restricted) {
                return self.reply_error(session, &id, code::INVALID_PARAMS, &msg, None);
            }
            let withheld = restricted
                && match kind {
                    ListKind::Tools => self.catalog.resolve_tool(&name).is_some(),
                    _ => self.catalog.resolve_prompt(&name).is_some(),
                };
            if may_wait
                && !withheld
                && self.backends.first_discovery_pending(self.now, self.config.policy.connect_timeout_ms)
            {
                // A backend that is still starting may bring this name: wait for it.
                let deadline = self.now + Duration::from_millis(self.config.policy.request_timeout_ms);
                let what = Parked::Named { method, params: raw.to_string(), kind };
                self.router.parked_lists.push(ParkedList { session, id, what, deadline });
                return;
            }
            let what = if kind == ListKind::Tools { "tool" } else { "prompt" };
            let msg = format!("unknown {what}: {}", &*name);
            return self.reply_error(session, &id, code::INVALID_PARAMS, &msg, None);
        };
        let (server, retry_safe) = (self.backends.name(r.server), r.entry.retry_safe);
        let plan = match kind {
            ListKind::Tools => {
                let asked = fields.get("task").is_some_and(|t| t.trim_start().starts_with('{'));
                TaskRules {
                    sessions: &self.sessions,
                    backends: &self.backends,
                    tasks: &self.config.tasks,
                    now: self.now,
                }
                .plan(session, &server, r.entry.task_support, asked)
            }
            _ => TaskPlan::Direct,
        };
        if matches!(plan, TaskPlan::RefuseRequired | TaskPlan::RefuseForbidden) {
            return self.parts(|p, cx| p.tasks.refuse_task_plan(cx, session, &id, &name, plan));
        }
        let (params, progress) = Forward::renamed(raw, fields, &r.entry.original);
        let mut call = self.sessions.call(self.now, session, id, method, params, progress, retry_safe, Shape::Plain);
        match plan {
            TaskPlan::Window(at) => call.task_window = Some(at),
            // The backend may answer with a task: its id is namespaced.
            TaskPlan::PassThrough => call.shape = Shape::TaskIds,
            // The client asked for a task: it has one before the call is even sent.
            TaskPlan::Now => {
                // tether runs the task: the backend is asked for a plain answer.
                call.params = call.params.with_fields(&[("task", None)]);
                if !self.parts(|p, cx| p.tasks.mint_task(cx, &server, &mut call)) {
                    let msg = "tether keeps as many tasks as it may (tasks.max_tasks), all running; call without params.task or retry later";
                    return self.reply_error(session, &call.id, code::OVERLOADED, msg, None);
                }
            }
            _ => {}
        }
        self.admit(&server, call);
    }

    /// `resources/read`: the served URI picks the backend.
    pub(super) fn route_uri(
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
        let Some((server, original)) = self.view(session).uri(&uri).map(|(s, o)| (s.to_string(), o.to_string())) else {
            let msg = match self.catalog.hidden_uri(&uri).filter(|_| !self.view(session).restricted()) {
                Some(server) => format!(
                    "resource {uri} is not served: the configuration of server '{server}' hides it \
                     (its tether.resources allow and deny lists)"
                ),
                None => format!("unknown resource: {uri}"),
            };
            return self.reply_error(session, &id, code::INVALID_PARAMS, &msg, None);
        };
        params.insert("uri".into(), Value::String(original));
        let (params, progress) = Forward::from_map(&params);
        // Reading a resource changes nothing: safe to retry.
        let call = self.sessions.call(self.now, session, id, method, params, progress, true, shape);
        self.admit(&server, call);
    }

    pub(super) fn subscription(
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
        if self.view(session).uri(&uri).is_none() && self.catalog.resolve_uri(&uri).is_some() {
            // Withheld by the session's scopes: answered as for a URI no backend serves.
            if method == "resources/unsubscribe" {
                return self.reply(session, &id, "{}");
            }
            let msg = format!("unknown resource: {uri}");
            return self.reply_error(session, &id, code::INVALID_PARAMS, &msg, None);
        }
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
            if others.is_some() {
                self.session_state_changed(session);
            }
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
            self.session_state_changed(session);
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
        let Some(server) = self.catalog.resolve_uri(&uri).map(|(s, _)| self.backends.name(s)) else {
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
        self.session_state_changed(session);
        self.reply(session, &id, "{}");
        if before != after {
            self.parts(|p, cx| p.backends.relisten(cx, &server));
        }
    }

    pub(super) fn complete(&mut self, session: SessionId, id: RawId, params: Option<Map<String, Value>>) {
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
                .and_then(|n| self.view(session).prompt(n))
                .map(|r| (r.server.to_string(), "name", r.entry.original.clone())),
            "ref/resource" => reference
                .get("uri")
                .and_then(Value::as_str)
                .and_then(|u| self.view(session).uri(u))
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
        let call =
            self.sessions.call(self.now, session, id, "completion/complete", params, progress, true, Shape::Plain);
        self.admit(&server, call);
    }

    pub(super) fn set_level(&mut self, session: SessionId, id: &str, params: Option<&str>) {
        let Some(params) = params else {
            return self.reply_error(session, id, code::INVALID_PARAMS, "missing level", None);
        };
        let asked = serde_json::from_str::<Map<String, Value>>(params)
            .ok()
            .and_then(|p| p.get("level").and_then(Value::as_str).map(String::from));
        let level = asked.as_deref().and_then(Level::parse);
        if let Some(s) = self.sessions.open.get_mut(&session) {
            s.log_level = level;
        }
        self.session_state_changed(session);
        if self.view(session).restricted() {
            // A session that sees part of the gateway sets the level of what it
            // is sent, not the backends' (which every session shares).
            return self.reply(session, id, "{}");
        }
        // Stateless backends get the level on each request instead.
        self.log_level = asked;
        let targets: Vec<ServerName> = self
            .backends
            .iter()
            .filter(|(_, b)| b.sup.is_ready() && b.era == Era::Handshake && b.capabilities.contains_key("logging"))
            .map(|(n, _)| n.clone())
            .collect();
        for server in targets {
            self.parts(|p, cx| p.backends.quiet_request(cx, &server, "logging/setLevel", params));
        }
        self.reply(session, id, "{}");
    }

    /// Sends `call` to `server` now, queues it until the backend is ready, or
    /// refuses it with a message that says what is wrong and what to do.
    pub(super) fn admit(&mut self, server: &str, mut call: ClientCall) {
        let session = call.session;
        let now = self.now;
        let b = self.backends.get_mut(server).expect("catalog names live backends");
        match b.sup.status() {
            Status::RequiresReauth => {
                let msg = self.backends.reauth_message(server);
                return self.parts(|p, cx| p.backends.fail_reauth(cx, server, call, &msg));
            }
            Status::PermanentlyFailed => {
                let p = b.sup.policy();
                let msg = format!(
                    "backend '{server}' crashed {} times within {} s and will not be restarted; fix it, then restart it (`tether restart {server}`, or change its entry in the config file). Last error: {}",
                    p.crash_limit,
                    p.crash_window_ms / 1000,
                    b.sup.message().unwrap_or("unknown")
                );
                let data = self.backends.unavailable_data(server, self.now);
                self.reply_error(session, &call.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
                self.backends.record_call(server, &call, CallOutcome::Failed, self.now);
                return self.release(&call);
            }
            Status::Disconnected => {
                let msg = format!("backend '{server}' is disabled or removed");
                self.reply_error(session, &call.id, code::BACKEND_UNAVAILABLE, &msg, None);
                self.backends.record_call(server, &call, CallOutcome::Failed, self.now);
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
                let data = self.backends.unavailable_data(server, self.now);
                self.reply_error(session, &call.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
                self.backends.record_call(server, &call, CallOutcome::Failed, self.now);
                return self.release(&call);
            }
        }
        if self.router.calls.len() >= self.config.limits.max_in_flight as usize {
            return self.parts(|p, cx| p.backends.refuse_overloaded(cx, server, call, "too many requests in flight"));
        }
        match b.sup.readiness(now) {
            Readiness::Ready => self.parts(|p, cx| p.backends.dispatch(cx, server, call)),
            r @ (Readiness::Wait | Readiness::StartNow) => {
                let deadline = now + Duration::from_millis(b.sup.policy().request_timeout_ms);
                let limit = self.config.limits.max_queued_per_backend as usize;
                if let Err(q) = b.queue.try_push(Queued { call, not_before: now, deadline }, false, limit) {
                    let why = "too many calls waiting for this backend";
                    return self.parts(|p, cx| p.backends.refuse_overloaded(cx, server, q.call, why));
                }
                if r == Readiness::StartNow && !b.awaiting_credential {
                    self.parts(|p, cx| p.backends.connect(cx, server));
                }
            }
            Readiness::Refuse => {
                if b.sup.status() == Status::RequiresReauth {
                    self.parts(|p, cx| p.backends.login_wanted(cx, server));
                }
                self.parts(|p, cx| p.backends.fail_unavailable(cx, server, call))
            }
        }
    }

    /// Turns a backend's answer into the client's.
    pub(super) fn answer_client_call(&mut self, server: &str, call: ClientCall, answer: Result<&str, &str>) {
        if call.task.is_some() {
            return self.parts(|p, cx| p.tasks.task_answered(p.backends, p.eras, cx, server, &call, answer));
        }
        if let Some(state) = &call.awaiting_input {
            // The client was told to retry with inputs: the answer waits for that retry.
            self.eras.hold_outcome(state, answer.map(String::from).map_err(String::from));
            self.release(&call);
            return;
        }
        let session = call.session;
        let stateless_client = self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless);
        if let Ok(result) = answer {
            if self.backends.get(server).is_some_and(|b| b.era == Era::Stateless) && protocol::is_input_required(result)
            {
                if !stateless_client {
                    return self.parts(|p, cx| p.eras.start_input_round(p.backends, cx, server, call, result));
                }
                // A stateless client answers it itself: its retry comes back here
                // and goes to the backend with the backend's own requestState,
                // carried inside tether's token.
                self.backends.record_call(server, &call, CallOutcome::Ok, self.now);
                self.release(&call);
                self.sessions.touch(session, self.now);
                let wrapped = self.wrap_backend_state(server, &call, result);
                let frame = protocol::response(&call.id, wrapped.as_deref().unwrap_or(result));
                self.push(Action::SendToClient { session, frame, route: ClientRoute::Reply(call.id) });
                return self.sessions.answered(session);
            }
        }
        let outcome = if answer.is_ok() { CallOutcome::Ok } else { CallOutcome::Error };
        self.backends.record_call(server, &call, outcome, self.now);
        let frame = match answer {
            Err(error) => protocol::raw_error_response(&call.id, error),
            Ok(result) => match &call.shape {
                Shape::Plain => protocol::response(&call.id, result),
                Shape::ReadResource => {
                    let rewritten = serve_contents(&self.catalog, server, result);
                    let result = rewritten.as_deref().unwrap_or(result);
                    // A read is cacheable in the stateless revision: as its backend
                    // says, or (a handshake-era one says nothing) stale at once;
                    // private where tokens' scopes choose what may be read.
                    let shared = self.config.scopes.is_empty();
                    match stateless_client.then(|| protocol::cacheable_result(result, CacheHint::STALE, shared)) {
                        Some(Some(hinted)) => protocol::response(&call.id, &hinted),
                        _ => protocol::response(&call.id, result),
                    }
                }
                Shape::Subscribe(uri) => {
                    self.sessions.subscriptions.entry(uri.clone()).or_default().insert(session);
                    self.session_state_changed(session);
                    protocol::response(&call.id, result)
                }
                Shape::Unsubscribe(_) => protocol::response(&call.id, result),
                Shape::TaskIds => match call.method {
                    "tools/call" => match self.parts(|p, cx| p.tasks.adopt_passed_task(cx, session, server, result)) {
                        Some(result) => protocol::response(&call.id, &result),
                        None => protocol::response(&call.id, result),
                    },
                    _ => match self.tasks.client_task_ids(server, result) {
                        Some(result) => {
                            match call.method {
                                "tasks/get" | "tasks/cancel" => {
                                    if let Ok(task) = serde_json::from_str::<Map<String, Value>>(&result) {
                                        self.tasks.note_passed_task(&task);
                                    }
                                }
                                _ => {}
                            }
                            protocol::response(&call.id, &result)
                        }
                        None => protocol::response(&call.id, result),
                    },
                },
            },
        };
        self.release(&call);
        self.sessions.touch(session, self.now);
        let frame = if stateless_client { super::stateless_frame(frame) } else { frame };
        self.push(Action::SendToClient { session, frame, route: ClientRoute::Reply(call.id) });
        self.sessions.answered(session);
    }

    pub(super) fn release(&mut self, call: &ClientCall) {
        if let Some(s) = self.sessions.open.get_mut(&call.session) {
            s.in_flight.remove(&call.id);
        }
    }

    pub(super) fn reply(&mut self, session: SessionId, id: &str, result: &str) {
        if let Some(task) = super::tasks::task_of(id) {
            return self.parts(|p, cx| p.tasks.finish_task(p.backends, p.eras, cx, task, Ok(result.to_string())));
        }
        if !self.owed(session, id) {
            return self.eras.hold_answer(session, id, Ok(result.to_string()));
        }
        self.reply_to_client(session, id, protocol::response(id, result));
    }

    pub(super) fn reply_error(&mut self, session: SessionId, id: &str, code: i64, message: &str, data: Option<&str>) {
        let message = self.redactor.redact(message);
        let data = data.map(|d| self.redactor.redact(d));
        if let Some(task) = super::tasks::task_of(id) {
            let error = protocol::error_object(code, &message, data.as_deref());
            return self.parts(|p, cx| p.tasks.finish_task(p.backends, p.eras, cx, task, Err(error)));
        }
        if !self.owed(session, id) {
            let error = protocol::error_object(code, &message, data.as_deref());
            return self.eras.hold_answer(session, id, Err(error));
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
            None => !self.eras.awaits_retry(session, id),
        }
    }
}

/// Why a tool or prompt a client asked for by `name` is not served, when the
/// configuration hides it.
pub(super) fn hidden_message(catalog: &Catalog, kind: ListKind, name: &str) -> Option<String> {
    let server = catalog.hidden_by(kind, name)?;
    let (what, key) = if kind == ListKind::Tools { ("tool", "tools") } else { ("prompt", "prompts") };
    Some(format!(
        "{what} '{name}' is not served: the configuration of server '{server}' hides it \
         (its tether.{key} allow and deny lists)"
    ))
}

/// `resources/read` contents carry backend URIs; clients get served ones.
fn serve_contents(catalog: &Catalog, server: &str, result: &str) -> Option<String> {
    let mut result: Map<String, Value> = serde_json::from_str(result).ok()?;
    if let Some(Value::Array(contents)) = result.get_mut("contents") {
        for item in contents {
            if let Some(Value::String(uri)) = item.get_mut("uri") {
                if let Some(served) = catalog.serve_uri(server, uri) {
                    *uri = served;
                }
            }
        }
    }
    serde_json::to_string(&result).ok()
}
