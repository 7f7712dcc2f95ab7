//! Gateway-side tasks, served by tether itself for backends that do not run
//! tasks, in both forms clients speak: the stateless revision's tasks extension
//! (`io.modelcontextprotocol/tasks`: server-directed, `tasks/get` inlines the
//! outcome, `tasks/update` answers inputs) and 2025-11-25's experimental tasks
//! (`params.task` asks for one; `tasks/get`, blocking `tasks/result`,
//! `tasks/list`, `tasks/cancel`).
//!
//! A `tools/call` of a client that declared the extension runs as usual; if the
//! backend has not answered within `tasks.sync_window_ms`, the client is answered
//! with a task (`resultType: "task"`) and the call goes on under tether's usual
//! protections (retries, safe resends after a crash, timeouts), now bounded by
//! `request_timeout_max_ms` only. Its outcome is kept under the task id for
//! `tasks.ttl_ms`, whatever happens to the client's connection: `tasks/get`
//! serves status, result or error, `tasks/update` answers what the backend asked
//! meanwhile (elicitation, sampling: `input_required`), `tasks/cancel` stops it.
//!
//! A 2025-11-25 client that asks for a task (`params.task`) gets one at once;
//! what the backend asks meanwhile goes to that client's session (tagged
//! `io.modelcontextprotocol/related-task`) when it is open and can answer.
//!
//! Task ids are unguessable (128 bits from the engine's PRNG) and are the only
//! key: a client that reconnects, or another request of a stateless client, can
//! fetch its task. The store is bounded in count (`tasks.max_tasks`; the oldest
//! finished task makes room, and with none finished a call is answered directly)
//! and in bytes of kept results (`tasks.max_result_bytes`).
//!
//! The pieces: [`store`] (the tasks and their bounds: an owned machine the
//! gateway asks and applies the answers of), [`inputs`] (what a backend asks
//! during a task), [`passthrough`] (tasks of backends that run them), and this
//! module (when a call becomes a task, and the `tasks/*` requests).

use crate::gateway::backends::Backends;
use crate::gateway::cx::Cx;
use crate::gateway::eras::EraBridge;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::calls::{CallKind, ClientCall};
use super::sessions::Sessions;
use super::Gateway;
use store::{Task, TaskStatus};

mod inputs;
mod passthrough;
mod store;

use crate::io::{RawId, ServerName, SessionId};
use crate::metrics::CallOutcome;
use crate::protocol::{self, code, stateless_code, Era};
use crate::time::Duration;
use crate::time::Instant;
pub(super) use store::{reachable, TaskStore};

/// The extension's identifier, under `capabilities.extensions`.
pub(super) const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The revision whose clients speak the experimental form of tasks.
pub(super) const EXPERIMENTAL_REVISION: &str = "2025-11-25";

/// What a client call's id becomes once its client was answered with a task:
/// no JSON-RPC id can look like this, so a later request under the old id never
/// takes the call's outcome.
pub(super) const SENTINEL: &str = "task ";

/// The `_meta` key that ties a message to a task (2025-11-25).
pub(super) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The form of tasks a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// The stateless revision's extension.
    Extension,
    /// 2025-11-25's experimental tasks.
    Experimental,
}

/// What happens to a `tools/call` as far as tasks go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskPlan {
    /// Answered directly.
    Direct,
    /// Becomes a task if not answered by then.
    Window(Instant),
    /// Becomes a task at once (the client asked for one).
    Now,
    /// Refused: only a task may run the tool, and the client did not ask for one.
    RefuseRequired,
    /// Refused: the client asked for a task of a tool that forbids them.
    RefuseForbidden,
    /// Sent as asked: the backend runs tasks in the client's form, and decides.
    PassThrough,
}

/// Whether a stateless client's capabilities (for one request) declare the extension.
pub(super) fn declares_tasks(caps: Option<&Map<String, Value>>) -> bool {
    caps.and_then(|c| c.get("extensions")).and_then(|e| e.get(EXTENSION)).is_some_and(Value::is_object)
}

/// The task a client call's (sentinel) id stands for, if it is one.
pub(super) fn task_of(id: &str) -> Option<&str> {
    id.strip_prefix(SENTINEL)
}

impl super::sessions::Sessions {
    /// The form of tasks `session` speaks, if any and tasks are on: stateless
    /// clients the extension, handshake-era clients of 2025-11-25 the
    /// experimental form.
    pub(in crate::gateway) fn task_form(&self, session: SessionId, tasks: &crate::config::Tasks) -> Option<Form> {
        if tasks.max_tasks == 0 {
            return None;
        }
        let s = self.open.get(&session)?;
        match s.era {
            Era::Stateless => Some(Form::Extension),
            _ if s.protocol_version.as_deref() == Some(EXPERIMENTAL_REVISION) => Some(Form::Experimental),
            _ => None,
        }
    }
}

/// What tasks mean for one session's request or list: the client's form
/// against what each backend runs itself and the configuration.
#[derive(Clone, Copy)]
pub(in crate::gateway) struct TaskRules<'a> {
    pub sessions: &'a Sessions,
    pub backends: &'a Backends,
    pub tasks: &'a crate::config::Tasks,
    pub now: Instant,
}

impl<'a> TaskRules<'a> {
    /// How `tools/list` tells a 2025-11-25 client which tools it may call as
    /// tasks: a tool that says nothing of tasks would be forbidden them (the
    /// spec's default), yet tether runs it as a task itself when its backend does
    /// not ([`TaskPlan::Now`]), so it is listed with `taskSupport: "optional"`.
    /// Tools of backends that run tasks pass through as they are listed. `None`:
    /// nothing to rewrite for this session or list.
    pub(in crate::gateway) fn listed_support(
        self,
        session: SessionId,
        kind: crate::catalog::ListKind,
    ) -> Option<impl Fn(&str, &crate::catalog::Entry, &mut String) -> bool + 'a> {
        if kind != crate::catalog::ListKind::Tools
            || self.sessions.task_form(session, self.tasks) != Some(Form::Experimental)
        {
            return None;
        }
        // Asked once per list, not per tool.
        let run_tasks: BTreeSet<&str> =
            self.backends.iter().filter(|(_, b)| b.runs_tasks(Form::Experimental)).map(|(s, _)| &**s).collect();
        Some(move |server: &str, entry: &crate::catalog::Entry, out: &mut String| {
            if entry.task_support != crate::catalog::TaskSupport::Unspecified || run_tasks.contains(server) {
                return false;
            }
            if !entry.lists_execution() {
                // Most tools: the field goes in front, the rest as listed.
                let Some(rest) = entry.json.strip_prefix('{') else { return false };
                out.push_str(r#"{"execution":{"taskSupport":"optional"}"#);
                if !rest.starts_with('}') {
                    out.push(',');
                }
                out.push_str(rest);
                return true;
            }
            // The entry is serde_json's own text of a map: read back and written
            // again, it keeps its order and form.
            let Ok(Value::Object(mut tool)) = serde_json::from_str::<Value>(&entry.json) else { return false };
            let execution = tool.entry("execution").or_insert_with(|| Value::Object(Map::new()));
            if !execution.is_object() {
                // Not what the spec's `execution` is: replaced, as if absent.
                *execution = Value::Object(Map::new());
            }
            let Some(execution) = execution.as_object_mut() else { return false };
            execution.insert("taskSupport".into(), Value::from("optional"));
            match serde_json::to_string(&tool) {
                Ok(json) => {
                    out.push_str(&json);
                    true
                }
                Err(_) => false,
            }
        })
    }

    /// What a `tools/call` of `server`'s tool with `support` becomes; `asked`:
    /// its params carry a `task` object (2025-11-25's request for a task).
    pub(in crate::gateway) fn plan(
        self,
        session: SessionId,
        server: &str,
        support: crate::catalog::TaskSupport,
        asked: bool,
    ) -> TaskPlan {
        use crate::catalog::TaskSupport;
        let form = self.sessions.task_form(session, self.tasks);
        if form.is_some_and(|form| self.backends.runs_tasks(server, form)) {
            // The backend runs tasks in the client's form: they pass through.
            return TaskPlan::PassThrough;
        }
        match form {
            None => TaskPlan::Direct,
            Some(Form::Extension) => {
                let declared =
                    self.sessions.open.get(&session).is_some_and(|s| declares_tasks(s.request_caps.as_ref()));
                match (support, declared) {
                    (TaskSupport::Forbidden, _) => TaskPlan::Direct,
                    (TaskSupport::Required, false) => TaskPlan::RefuseRequired,
                    (_, true) => TaskPlan::Window(self.now + Duration::from_millis(self.tasks.sync_window_ms)),
                    (_, false) => TaskPlan::Direct,
                }
            }
            Some(Form::Experimental) => match (support, asked) {
                (TaskSupport::Forbidden, true) => TaskPlan::RefuseForbidden,
                (_, true) => TaskPlan::Now,
                (TaskSupport::Required, false) => TaskPlan::RefuseRequired,
                (_, false) => TaskPlan::Direct,
            },
        }
    }
}

impl Gateway {
    /// A request of a client about tasks: `tasks/get`, `tasks/update`,
    /// `tasks/cancel` (the extension), `tasks/get`, `tasks/result`,
    /// `tasks/list`, `tasks/cancel` (2025-11-25).
    pub(super) fn task_request(&mut self, session: SessionId, id: &RawId, method: &str, params: Option<&str>) {
        let form = self.sessions.task_form(session, &self.config.tasks);
        let known = match form {
            Some(Form::Extension) => matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel"),
            Some(Form::Experimental) => matches!(method, "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel"),
            None => false,
        };
        if !known {
            let msg = format!("method not found: {method}");
            return self.reply_error(session, id, code::METHOD_NOT_FOUND, &msg, None);
        }
        if form == Some(Form::Extension) {
            let caps = self.sessions.open.get(&session).and_then(|s| s.request_caps.as_ref());
            if !declares_tasks(caps) {
                let msg = format!("{method} needs the {EXTENSION} extension declared in clientCapabilities");
                let data = format!(r#"{{"requiredCapabilities":{{"extensions":{{"{EXTENSION}":{{}}}}}}}}"#);
                let code = stateless_code::MISSING_REQUIRED_CLIENT_CAPABILITY;
                return self.reply_error(session, id, code, &msg, Some(&data));
            }
        }
        let params: Map<String, Value> = params.and_then(|p| serde_json::from_str(p).ok()).unwrap_or_default();
        let poll_ms = self.config.tasks.poll_interval_ms;
        if method == "tasks/list" {
            let listed = self.tasks.listed(session, |server| self.view(session).sees_server(server), poll_ms);
            return self.reply(session, id, &listed);
        }
        let Some(task_id) = params.get("taskId").and_then(Value::as_str) else {
            return self.reply_error(session, id, code::INVALID_PARAMS, "missing taskId (a string)", None);
        };
        // A task of a backend the session's scopes do not show, or another
        // identity's, is unknown to it: the same answer as for an id that never existed.
        let principal = self.sessions.principal(session);
        let reachable = |t: &&Task| self.view(session).sees_server(&t.server) && t.reachable_by(principal);
        let Some(task) = self.tasks.tasks.get(task_id).filter(reachable) else {
            // A backend's task is asked about only by a session that sees the backend.
            let backend = form.and_then(|form| {
                self.tasks
                    .passed_task(task_id, form, self.sessions.principal(session), |s| self.backends.runs_tasks(s, form))
            });
            if let Some((server, own)) = backend.filter(|(server, _)| self.view(session).sees_server(server)) {
                return self.pass_task_request(session, id.clone(), method, params, &server, &own);
            }
            let msg = format!("unknown task {}: it never existed or has expired", protocol::quote(task_id));
            return self.reply_error(session, id, code::INVALID_PARAMS, &msg, None);
        };
        let (task_id, terminal) = (task_id.to_string(), task.status.is_terminal());
        let form = form.expect("known above");
        if let Some(s) = self.sessions.open.get_mut(&session) {
            s.request_caps = None;
        }
        match (method, form) {
            ("tasks/get", Form::Extension) => {
                let detailed = self.tasks.tasks[&task_id].detailed(&task_id, poll_ms);
                self.reply(session, id, &detailed);
            }
            ("tasks/get", Form::Experimental) => {
                let task = format!("{{{}}}", self.tasks.tasks[&task_id].fields(&task_id, form, poll_ms));
                self.reply(session, id, &task);
            }
            ("tasks/update", _) => {
                let Some(Value::Object(responses)) = params.get("inputResponses") else {
                    return self.reply_error(
                        session,
                        id,
                        code::INVALID_PARAMS,
                        "inputResponses must be an object",
                        None,
                    );
                };
                self.parts(|p, cx| p.tasks.answer_task_inputs(p.backends, p.eras, cx, &task_id, responses));
                self.reply(session, id, r#"{"resultType":"complete"}"#);
            }
            ("tasks/result", _) if terminal => {
                self.parts(|p, cx| p.tasks.answer_task_result(cx, session, id, &task_id))
            }
            ("tasks/result", _) => {
                if !self.tasks.wait_for(&task_id, session, id.clone()) {
                    let msg = "too many tasks/result requests wait on this task";
                    return self.reply_error(session, id, code::OVERLOADED, msg, None);
                }
                // Whoever waits for the result can answer what the task asks.
                self.parts(|p, cx| p.tasks.forward_task_inputs(cx, &task_id, session));
            }
            ("tasks/cancel", Form::Experimental) if terminal => {
                let msg = format!("cannot cancel task {}: it already finished", protocol::quote(&task_id));
                self.reply_error(session, id, code::INVALID_PARAMS, &msg, None);
            }
            ("tasks/cancel", Form::Experimental) => {
                self.parts(|p, cx| p.tasks.cancel_task(p.backends, p.eras, cx, &task_id, "cancelled by the client"));
                let task = format!("{{{}}}", self.tasks.tasks[&task_id].fields(&task_id, form, poll_ms));
                self.reply(session, id, &task);
            }
            _ => {
                self.parts(|p, cx| p.tasks.cancel_task(p.backends, p.eras, cx, &task_id, "cancelled by the client"));
                self.reply(session, id, r#"{"resultType":"complete"}"#);
            }
        }
    }
}

#[cfg(test)]
mod rules_tests;

impl TaskStore {
    /// The sync window of call `call_id` passed without an answer: the client is
    /// answered with a new task, and the call goes on for it.
    pub(in crate::gateway) fn task_window_passed(&mut self, cx: &mut Cx<'_>, call_id: u64) {
        cx.router.task_windows.remove(&call_id);
        let now = cx.now;
        let Some(call) = cx.router.calls.get(&call_id) else { return };
        let CallKind::Client(cc) = &call.kind else { return };
        if cc.task.is_some() || cc.awaiting_input.is_some() || cc.task_window.map_or(true, |w| w > now) {
            return;
        }
        let server = call.server.clone();
        let mut cc = cc.clone();
        // Full of running tasks: the call is answered directly.
        let minted = self.mint_task(cx, &server, &mut cc);
        let hard = cx.config.policy_for(&server).request_timeout_max_ms;
        if let Some(call) = cx.router.calls.get_mut(&call_id) {
            if minted {
                // Nobody waits on the call now: only its hard maximum bounds it.
                call.deadline = Some((cc.created + Duration::from_millis(hard)).max(now));
            }
            call.kind = CallKind::Client(cc);
        }
    }

    /// Makes `call` (of `server`) run for a new task: the client is answered
    /// with the task, in its form, and the call's outcome goes to the task from
    /// now on. `false` when the store is full of running tasks (the call stays
    /// a direct one).
    pub(in crate::gateway) fn mint_task(
        &mut self,
        cx: &mut Cx<'_>,
        server: &ServerName,
        call: &mut ClientCall,
    ) -> bool {
        call.task_window = None;
        if !self.make_room(cx.config.tasks.max_tasks as usize) {
            return false;
        }
        let now = cx.now;
        let task_id = cx.ids.next_id();
        let ttl_ms = cx.config.tasks.ttl_ms;
        let unix = cx.wall_clock.unix_ms(now);
        let form = cx.sessions.task_form(call.session, &cx.config.tasks).unwrap_or(Form::Extension);
        let task = Task {
            server: server.clone(),
            status: TaskStatus::Working,
            created_unix_ms: unix,
            updated_unix_ms: unix,
            created: now,
            expires: now + Duration::from_millis(ttl_ms),
            ttl_ms,
            outcome: None,
            asked: BTreeMap::new(),
            message: None,
            principal: cx.sessions.open.get(&call.session).and_then(|s| s.principal.clone()),
            owner: (form == Form::Experimental).then_some(call.session),
            forwarded: BTreeSet::new(),
            waiters: Vec::new(),
            round: None,
        };
        let fields = task.fields(&task_id, form, cx.config.tasks.poll_interval_ms);
        let created = match form {
            Form::Extension => format!(r#"{{"resultType":"task",{fields}}}"#),
            Form::Experimental => format!(r#"{{"task":{{{fields}}}}}"#),
        };
        self.insert(task_id.clone(), task);
        cx.reply(call.session, &call.id, &created);
        call.id = RawId::new(format!("{SENTINEL}{task_id}"));
        call.task = Some(task_id);
        true
    }

    /// A reloaded configuration may keep fewer tasks or fewer bytes: the oldest
    /// finished tasks go first, then the oldest running ones are cancelled.
    pub(in crate::gateway) fn fit_task_store(
        &mut self,
        backends: &mut Backends,
        eras: &mut EraBridge,
        cx: &mut Cx<'_>,
    ) {
        let (max_tasks, max_bytes) = (cx.config.tasks.max_tasks as usize, cx.config.tasks.max_result_bytes);
        while let Some(victim) = self.over_bounds(max_tasks, max_bytes) {
            self.cancel_task(backends, eras, cx, &victim, "tether keeps fewer tasks since the configuration changed");
            self.remove(&victim);
        }
        self.trim_passed(max_tasks);
    }

    /// A task call ended: its outcome is kept (if it fits) and the task finishes.
    pub(in crate::gateway) fn finish_task(
        &mut self,
        backends: &mut Backends,
        eras: &mut EraBridge,
        cx: &mut Cx<'_>,
        task_id: &str,
        outcome: Result<String, String>,
    ) {
        let (limit, unix) = (cx.config.tasks.max_result_bytes, cx.wall_clock.unix_ms(cx.now));
        let Some(ended) = self.finish(task_id, outcome, limit, unix) else { return };
        eras.refuse_inputs(
            backends,
            cx,
            &ended.server,
            ended.unanswered.values(),
            "the task ended before the client answered",
        );
        self.task_ended(cx, task_id);
    }

    /// A 2025-11-25 task's status changed: its client's session is told
    /// (`notifications/tasks/status`), when it is open.
    pub(in crate::gateway) fn announce_task(&mut self, cx: &mut Cx<'_>, task_id: &str) {
        let Some(t) = self.tasks.get(task_id) else { return };
        let Some(owner) = t.owner.filter(|s| cx.sessions.open.contains_key(s)) else { return };
        let params = format!("{{{}}}", t.fields(task_id, Form::Experimental, cx.config.tasks.poll_interval_ms));
        cx.to_client(owner, protocol::notification("notifications/tasks/status", Some(&params)));
    }

    /// A task reached a terminal status: the `tasks/result` requests waiting on
    /// it get its outcome.
    pub(in crate::gateway) fn task_ended(&mut self, cx: &mut Cx<'_>, task_id: &str) {
        self.announce_task(cx, task_id);
        // What it still asks of clients is moot: they are told so.
        let moot: Vec<(u64, SessionId)> = cx
            .router
            .server_requests
            .iter()
            .filter(|(_, r)| r.task.as_ref().is_some_and(|q| q.task == task_id))
            .map(|(id, r)| (*id, r.session))
            .collect();
        for (id, session) in moot {
            cx.router.server_requests.remove(&id);
            let params = format!(r#"{{"requestId":{id},"reason":"the task ended"}}"#);
            cx.to_client(session, protocol::notification("notifications/cancelled", Some(&params)));
        }
        for (session, id) in self.take_waiters(task_id) {
            self.answer_task_result(cx, session, &id, task_id);
        }
    }

    /// `tasks/result` of a finished task: the call's own result (tied to the
    /// task in its `_meta`) or its error.
    pub(in crate::gateway) fn answer_task_result(
        &mut self,
        cx: &mut Cx<'_>,
        session: SessionId,
        id: &str,
        task_id: &str,
    ) {
        let Some(t) = self.tasks.get(task_id) else { return };
        match t.outcome.clone() {
            Some(Ok(result)) => {
                let members = format!(r#""{RELATED_TASK}":{{"taskId":{}}}"#, protocol::quote(task_id));
                let result = protocol::params_with_meta(Some(&result), &members);
                cx.reply(session, id, &result);
            }
            Some(Err(error)) => {
                let frame = protocol::raw_error_response(id, &error);
                cx.release_id(session, id);
                cx.reply_to_client(session, id, frame);
            }
            None => {
                let why = t.message.clone().unwrap_or_else(|| "cancelled".into());
                let msg = format!("task {} was cancelled: {why}", protocol::quote(task_id));
                cx.reply_error(session, id, code::INTERNAL_ERROR, &msg, None);
            }
        }
    }

    /// Stops a task that has not finished: its call is cancelled at the backend
    /// (or taken out of the queue), what it asked is refused, and it ends `cancelled`.
    pub(in crate::gateway) fn cancel_task(
        &mut self,
        backends: &mut Backends,
        eras: &mut EraBridge,
        cx: &mut Cx<'_>,
        task_id: &str,
        why: &str,
    ) {
        if self.tasks.get(task_id).map_or(true, |t| t.status.is_terminal()) {
            return;
        }
        let running: Vec<u64> = cx
            .router
            .calls
            .iter()
            .filter(|(_, c)| matches!(&c.kind, CallKind::Client(cc) if cc.task.as_deref() == Some(task_id)))
            .map(|(id, _)| *id)
            .collect();
        for call_id in running {
            let Some(call) = cx.router.calls.remove(&call_id) else { continue };
            let CallKind::Client(cc) = call.kind else { continue };
            if cc.probe {
                if let Some(b) = backends.get_mut(&call.server) {
                    b.sup.breaker.probe_abandoned();
                }
            }
            let params = format!(r#"{{"requestId":{call_id},"reason":{}}}"#, protocol::quote(why));
            backends.send(cx, &call.server, protocol::notification("notifications/cancelled", Some(&params)), None);
            backends.record_call(&call.server, &cc, CallOutcome::Failed, cx.now);
        }
        for b in backends.values_mut() {
            b.queue.retain(|q| {
                let ours = q.call.task.as_deref() == Some(task_id);
                if ours && q.call.probe {
                    b.sup.breaker.probe_abandoned();
                }
                !ours
            });
        }
        let unix = cx.wall_clock.unix_ms(cx.now);
        let Some(ended) = self.cancel(task_id, why, unix) else { return };
        eras.refuse_inputs(
            backends,
            cx,
            &ended.server,
            ended.unanswered.values(),
            "the task ended before the client answered",
        );
        self.task_ended(cx, task_id);
    }

    /// A task's time is up: it goes (a running one is cancelled first).
    pub(in crate::gateway) fn task_expired(
        &mut self,
        backends: &mut Backends,
        eras: &mut EraBridge,
        cx: &mut Cx<'_>,
        task_id: &str,
    ) {
        self.cancel_task(backends, eras, cx, task_id, "the task expired");
        self.remove(task_id);
    }
    /// Refuses a call its [`TaskPlan`] refuses, in the form the client speaks.
    pub(in crate::gateway) fn refuse_task_plan(
        &mut self,
        cx: &mut Cx<'_>,
        session: SessionId,
        id: &str,
        name: &str,
        plan: TaskPlan,
    ) {
        match (cx.sessions.task_form(session, &cx.config.tasks), plan) {
            (Some(Form::Extension), _) => self.refuse_task_required(cx, session, id, name),
            (_, TaskPlan::RefuseForbidden) => {
                let msg = format!("tool '{name}' does not run as a task: call it without params.task");
                cx.reply_error(session, id, code::METHOD_NOT_FOUND, &msg, None);
            }
            _ => {
                let msg = format!("tool '{name}' runs only as a task: call it with params.task");
                cx.reply_error(session, id, code::METHOD_NOT_FOUND, &msg, None);
            }
        }
    }

    /// A tool only a task may run, called by a client that did not declare tasks.
    pub(in crate::gateway) fn refuse_task_required(
        &mut self,
        cx: &mut Cx<'_>,
        session: SessionId,
        id: &str,
        name: &str,
    ) {
        let msg = format!("tool '{name}' runs only as a task: declare the {EXTENSION} extension in clientCapabilities");
        let data = format!(r#"{{"requiredCapabilities":{{"extensions":{{"{EXTENSION}":{{}}}}}}}}"#);
        cx.reply_error(session, id, stateless_code::MISSING_REQUIRED_CLIENT_CAPABILITY, &msg, Some(&data));
    }
}
