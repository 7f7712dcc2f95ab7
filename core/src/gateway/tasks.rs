//! Gateway-side tasks: the tasks extension of the stateless revision
//! (`io.modelcontextprotocol/tasks`) served by tether itself, for backends that
//! do not run tasks.
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
//! Task ids are unguessable (128 bits from the engine's PRNG) and are the only
//! key: a client that reconnects, or another request of a stateless client, can
//! fetch its task. The store is bounded in count (`tasks.max_tasks`; the oldest
//! finished task makes room, and with none finished a call is answered directly)
//! and in bytes of kept results (`tasks.max_result_bytes`).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::calls::{AskedInput, Call, CallKind, ClientCall};
use super::Gateway;
use crate::io::{RawId, ServerName, SessionId};
use crate::metrics::CallOutcome;
use crate::protocol::{self, code, stateless_code, Era};
use crate::time::Instant;

/// The extension's identifier, under `capabilities.extensions`.
pub(super) const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// What a client call's id becomes once its client was answered with a task:
/// no JSON-RPC id can look like this, so a later request under the old id never
/// takes the call's outcome.
const SENTINEL: &str = "task ";

/// Inputs a backend may have pending on one task at once.
const MAX_ASKED: usize = 16;

/// Where a task is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled)
    }
}

/// One task tether keeps.
#[derive(Clone, Debug)]
pub(super) struct Task {
    /// The backend running it.
    pub server: ServerName,
    pub status: TaskStatus,
    /// Wall-clock times (ms since the Unix epoch) it was created and last changed.
    pub created_unix_ms: u64,
    pub updated_unix_ms: u64,
    /// When it was created, on the engine's clock (eviction order).
    pub created: Instant,
    /// When it is dropped.
    pub expires: Instant,
    /// Its `ttlMs`, as announced.
    pub ttl_ms: u64,
    /// Its outcome once finished: the raw result, or the raw JSON-RPC error object.
    pub outcome: Option<Result<String, String>>,
    /// What the backend asked of the client meanwhile, by key, not answered yet.
    pub asked: BTreeMap<String, AskedInput>,
    /// Says why it failed or was cancelled, when tether knows.
    pub message: Option<String>,
}

impl Task {
    /// Whether it has not finished yet.
    pub(super) fn is_running(&self) -> bool {
        !self.status.is_terminal()
    }
}

/// Every task tether keeps, with the index of their expiries.
#[derive(Default)]
pub(super) struct TaskStore {
    pub tasks: BTreeMap<String, Task>,
    /// `(expires, id)` of every task, so the next expiry is found at once.
    pub expiries: BTreeSet<(Instant, String)>,
    /// Bytes of outcomes kept.
    pub bytes: u64,
}

impl TaskStore {
    /// The next task to expire.
    pub(super) fn next_expiry(&self) -> Option<(Instant, &str)> {
        self.expiries.first().map(|(at, id)| (*at, id.as_str()))
    }

    fn remove(&mut self, id: &str) -> Option<Task> {
        let task = self.tasks.remove(id)?;
        self.expiries.remove(&(task.expires, id.to_string()));
        self.bytes -= outcome_bytes(&task.outcome);
        Some(task)
    }

    /// The oldest finished task other than `keep`.
    fn oldest_finished(&self, keep: &str) -> Option<String> {
        self.tasks
            .iter()
            .filter(|(id, t)| t.status.is_terminal() && id.as_str() != keep)
            .min_by_key(|(_, t)| t.created)
            .map(|(id, _)| id.clone())
    }

    /// Checks the store's bounds and index.
    pub(super) fn check_invariants(&self, limits: &crate::config::Tasks) -> Result<(), String> {
        if self.tasks.len() > limits.max_tasks as usize {
            return Err(format!("{} tasks kept, limit {}", self.tasks.len(), limits.max_tasks));
        }
        let bytes: u64 = self.tasks.values().map(|t| outcome_bytes(&t.outcome)).sum();
        if bytes != self.bytes || bytes > limits.max_result_bytes {
            return Err(format!(
                "task results: {bytes} bytes, counted {}, limit {}",
                self.bytes, limits.max_result_bytes
            ));
        }
        if self.expiries.len() != self.tasks.len()
            || self.expiries.iter().any(|(at, id)| self.tasks.get(id).map(|t| t.expires) != Some(*at))
        {
            return Err("task expiry index out of step".into());
        }
        if self.tasks.values().any(|t| t.asked.len() > MAX_ASKED || (t.status.is_terminal() && !t.asked.is_empty())) {
            return Err("task inputs unbounded or left on a finished task".into());
        }
        Ok(())
    }
}

fn outcome_bytes(outcome: &Option<Result<String, String>>) -> u64 {
    match outcome {
        Some(Ok(s) | Err(s)) => s.len() as u64,
        None => 0,
    }
}

/// Whether a stateless client's capabilities (for one request) declare the extension.
pub(super) fn declares_tasks(caps: Option<&Map<String, Value>>) -> bool {
    caps.and_then(|c| c.get("extensions")).and_then(|e| e.get(EXTENSION)).is_some_and(Value::is_object)
}

/// The task a client call's (sentinel) id stands for, if it is one.
pub(super) fn task_of(id: &str) -> Option<&str> {
    id.strip_prefix(SENTINEL)
}

impl Gateway {
    /// The wall-clock time at engine time `at`, as the host last told it.
    fn unix_ms(&self, at: Instant) -> u64 {
        match self.wall_clock {
            Some((anchor, unix_ms)) => unix_ms.saturating_add(at.saturating_since(anchor).as_millis()),
            None => at.as_millis(),
        }
    }

    /// When a call of a tool with `support` becomes a task: `Ok(None)` never
    /// (answered directly), `Err(())` when only a task may run it and the client
    /// did not declare tasks for this request.
    pub(super) fn task_window(
        &self,
        session: SessionId,
        support: crate::catalog::TaskSupport,
    ) -> Result<Option<Instant>, ()> {
        use crate::catalog::TaskSupport;
        let Some(s) = self.sessions.open.get(&session).filter(|s| s.era == Era::Stateless) else { return Ok(None) };
        if self.config.tasks.max_tasks == 0 {
            return Ok(None);
        }
        match (support, declares_tasks(s.request_caps.as_ref())) {
            (TaskSupport::Forbidden, _) => Ok(None),
            (TaskSupport::Required, false) => Err(()),
            (_, true) => Ok(Some(self.now + Self::duration(self.config.tasks.sync_window_ms))),
            (_, false) => Ok(None),
        }
    }

    /// A tool only a task may run, called by a client that did not declare tasks.
    pub(super) fn refuse_task_required(&mut self, session: SessionId, id: &str, name: &str) {
        let msg = format!("tool '{name}' runs only as a task: declare the {EXTENSION} extension in clientCapabilities");
        let data = format!(r#"{{"requiredCapabilities":{{"extensions":{{"{EXTENSION}":{{}}}}}}}}"#);
        self.reply_error(session, id, stateless_code::MISSING_REQUIRED_CLIENT_CAPABILITY, &msg, Some(&data));
    }

    /// A call that may become a task has been sent: its window is watched.
    pub(super) fn watch_task_window(&mut self, call_id: u64, window: Instant) {
        self.router.task_windows.insert(call_id, window.max(self.now));
    }

    /// The sync window of call `call_id` passed without an answer: the client is
    /// answered with a new task, and the call goes on for it.
    pub(super) fn task_window_passed(&mut self, call_id: u64) {
        self.router.task_windows.remove(&call_id);
        let now = self.now;
        let Some(Call { kind: CallKind::Client(cc), .. }) = self.router.calls.get(&call_id) else { return };
        if cc.task.is_some() || cc.awaiting_input.is_some() || cc.task_window.map_or(true, |w| w > now) {
            return;
        }
        let (session, client_id) = (cc.session, cc.id.clone());
        let server = self.router.calls[&call_id].server.clone();
        if !self.room_for_task() {
            // Full of running tasks: this call is answered directly.
            if let Some(Call { kind: CallKind::Client(cc), .. }) = self.router.calls.get_mut(&call_id) {
                cc.task_window = None;
            }
            return;
        }
        let task_id = self.unguessable_id();
        let ttl_ms = self.config.tasks.ttl_ms;
        let unix = self.unix_ms(now);
        let task = Task {
            server: server.clone(),
            status: TaskStatus::Working,
            created_unix_ms: unix,
            updated_unix_ms: unix,
            created: now,
            expires: now + Self::duration(ttl_ms),
            ttl_ms,
            outcome: None,
            asked: BTreeMap::new(),
            message: None,
        };
        let created = format!(r#"{{"resultType":"task",{}}}"#, self.task_fields(&task_id, &task));
        self.tasks.expiries.insert((task.expires, task_id.clone()));
        self.tasks.tasks.insert(task_id.clone(), task);
        self.reply(session, &client_id, &created);
        let hard = self.config.policy_for(&server).request_timeout_max_ms;
        if let Some(call) = self.router.calls.get_mut(&call_id) {
            if let CallKind::Client(cc) = &mut call.kind {
                // Nobody waits on the call now: only its hard maximum bounds it.
                call.deadline = Some((cc.created + Self::duration(hard)).max(now));
                cc.id = RawId::new(format!("{SENTINEL}{task_id}"));
                cc.task = Some(task_id);
                cc.task_window = None;
            }
        }
    }

    /// Whether one more task fits, after dropping the oldest finished one if needed.
    fn room_for_task(&mut self) -> bool {
        if self.tasks.tasks.len() < self.config.tasks.max_tasks as usize {
            return true;
        }
        match self.tasks.oldest_finished("") {
            Some(oldest) => {
                self.tasks.remove(&oldest);
                true
            }
            None => false,
        }
    }

    /// 128 bits from the engine's PRNG, as hex: a task id or a `requestState`.
    pub(super) fn unguessable_id(&mut self) -> String {
        let (a, b) = (self.rng.next_u64(), self.rng.next_u64());
        format!("{a:016x}{b:016x}")
    }

    /// The task members every task message carries (raw `"key":value` pairs).
    fn task_fields(&self, id: &str, t: &Task) -> String {
        let message = t.message.as_deref().map(|m| format!(r#","statusMessage":{}"#, protocol::quote(m)));
        format!(
            r#""taskId":{},"status":"{}","createdAt":"{}","lastUpdatedAt":"{}","ttlMs":{},"pollIntervalMs":{}{}"#,
            protocol::quote(id),
            t.status.as_str(),
            crate::time::rfc3339(t.created_unix_ms),
            crate::time::rfc3339(t.updated_unix_ms),
            t.ttl_ms,
            self.config.tasks.poll_interval_ms,
            message.unwrap_or_default()
        )
    }

    /// A task call ended: its outcome is kept (if it fits) and the task finishes.
    pub(super) fn finish_task(&mut self, task_id: &str, outcome: Result<String, String>) {
        let Some(t) = self.tasks.tasks.get(task_id) else { return };
        if t.status.is_terminal() {
            return;
        }
        let size = outcome_bytes(&Some(outcome.clone()));
        let limit = self.config.tasks.max_result_bytes;
        while self.tasks.bytes + size > limit {
            match self.tasks.oldest_finished(task_id) {
                Some(oldest) => {
                    self.tasks.remove(&oldest);
                }
                None => break,
            }
        }
        let outcome = if self.tasks.bytes + size > limit {
            let msg = format!(
                "the result ({size} bytes) is larger than tether keeps for tasks (tasks.max_result_bytes = {limit}); call the tool without a task"
            );
            Err(protocol::error_object(code::INTERNAL_ERROR, &msg, None))
        } else {
            outcome
        };
        let unix = self.unix_ms(self.now);
        let asked = {
            let t = self.tasks.tasks.get_mut(task_id).expect("checked above");
            t.status = if outcome.is_ok() { TaskStatus::Completed } else { TaskStatus::Failed };
            t.updated_unix_ms = unix;
            self.tasks.bytes += outcome_bytes(&Some(outcome.clone()));
            t.outcome = Some(outcome);
            (t.server.clone(), core::mem::take(&mut t.asked))
        };
        self.refuse_inputs(&asked.0, asked.1.values());
    }

    /// A request of a client: `tasks/get`, `tasks/update` or `tasks/cancel`.
    pub(super) fn task_request(&mut self, session: SessionId, id: &RawId, method: &str, params: Option<&str>) {
        let stateless = self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless);
        if !stateless || self.config.tasks.max_tasks == 0 {
            let msg = format!("method not found: {method}");
            return self.reply_error(session, id, code::METHOD_NOT_FOUND, &msg, None);
        }
        let caps = self.sessions.open.get_mut(&session).and_then(|s| s.request_caps.take());
        if !declares_tasks(caps.as_ref()) {
            let msg = format!("{method} needs the {EXTENSION} extension declared in clientCapabilities");
            let data = format!(r#"{{"requiredCapabilities":{{"extensions":{{"{EXTENSION}":{{}}}}}}}}"#);
            let code = stateless_code::MISSING_REQUIRED_CLIENT_CAPABILITY;
            return self.reply_error(session, id, code, &msg, Some(&data));
        }
        let params: Map<String, Value> = params.and_then(|p| serde_json::from_str(p).ok()).unwrap_or_default();
        let Some(task_id) = params.get("taskId").and_then(Value::as_str) else {
            return self.reply_error(session, id, code::INVALID_PARAMS, "missing taskId (a string)", None);
        };
        if !self.tasks.tasks.contains_key(task_id) {
            let msg = format!("unknown task {}: it never existed or has expired", protocol::quote(task_id));
            return self.reply_error(session, id, code::INVALID_PARAMS, &msg, None);
        }
        let task_id = task_id.to_string();
        match method {
            "tasks/get" => {
                let detailed = self.detailed_task(&task_id);
                self.reply(session, id, &detailed);
            }
            "tasks/update" => {
                let Some(Value::Object(responses)) = params.get("inputResponses") else {
                    return self.reply_error(
                        session,
                        id,
                        code::INVALID_PARAMS,
                        "inputResponses must be an object",
                        None,
                    );
                };
                self.answer_task_inputs(&task_id, responses);
                self.reply(session, id, r#"{"resultType":"complete"}"#);
            }
            _ => {
                self.cancel_task(&task_id, "cancelled by the client");
                self.reply(session, id, r#"{"resultType":"complete"}"#);
            }
        }
    }

    /// `tasks/get`'s answer: the task, with its result, error or pending inputs.
    fn detailed_task(&self, task_id: &str) -> String {
        let t = &self.tasks.tasks[task_id];
        let extra = match (&t.outcome, t.status) {
            (Some(Ok(result)), _) => format!(r#","result":{result}"#),
            (Some(Err(error)), _) => format!(r#","error":{error}"#),
            (None, TaskStatus::InputRequired) => {
                let requests: Vec<String> = t
                    .asked
                    .iter()
                    .map(|(key, a)| {
                        let params = a.params.as_deref().map(|p| format!(r#","params":{p}"#)).unwrap_or_default();
                        format!(r#"{}:{{"method":{}{params}}}"#, protocol::quote(key), protocol::quote(&a.method))
                    })
                    .collect();
                format!(r#","inputRequests":{{{}}}"#, requests.join(","))
            }
            (None, _) => String::new(),
        };
        format!(r#"{{"resultType":"complete",{}{extra}}}"#, self.task_fields(task_id, t))
    }

    /// `tasks/update`: answers to what the backend asked go to it; keys it did
    /// not ask (or asked of a process that is gone) are ignored.
    fn answer_task_inputs(&mut self, task_id: &str, responses: &Map<String, Value>) {
        let unix = self.unix_ms(self.now);
        let Some(t) = self.tasks.tasks.get_mut(task_id) else { return };
        let server = t.server.clone();
        let generation = self.backends.get(&server).map(|b| b.sup.generation());
        let mut frames = Vec::new();
        for (key, answer) in responses {
            let Some(asked) = t.asked.remove(key) else { continue };
            if Some(asked.generation) == generation {
                let frame = match answer {
                    Value::Object(_) => protocol::response(&asked.backend_id, &answer.to_string()),
                    _ => {
                        let msg = "the client's answer was not an object";
                        protocol::error_response(&asked.backend_id, code::INVALID_PARAMS, msg, None)
                    }
                };
                frames.push(frame);
            }
        }
        if t.asked.is_empty() && t.status == TaskStatus::InputRequired {
            t.status = TaskStatus::Working;
        }
        if !frames.is_empty() {
            t.updated_unix_ms = unix;
        }
        for frame in frames {
            self.to_backend(&server, frame, None);
        }
    }

    /// Stops a task that has not finished: its call is cancelled at the backend
    /// (or taken out of the queue), what it asked is refused, and it ends `cancelled`.
    pub(super) fn cancel_task(&mut self, task_id: &str, why: &str) {
        if self.tasks.tasks.get(task_id).map_or(true, |t| t.status.is_terminal()) {
            return;
        }
        let running: Vec<u64> = self
            .router
            .calls
            .iter()
            .filter(|(_, c)| matches!(&c.kind, CallKind::Client(cc) if cc.task.as_deref() == Some(task_id)))
            .map(|(id, _)| *id)
            .collect();
        for call_id in running {
            let Some(call) = self.router.calls.remove(&call_id) else { continue };
            let CallKind::Client(cc) = call.kind else { continue };
            if cc.probe {
                if let Some(b) = self.backends.get_mut(&call.server) {
                    b.sup.breaker.probe_abandoned();
                }
            }
            let params = format!(r#"{{"requestId":{call_id},"reason":{}}}"#, protocol::quote(why));
            self.to_backend(&call.server, protocol::notification("notifications/cancelled", Some(&params)), None);
            self.record_call(&call.server, &cc, CallOutcome::Failed);
        }
        for b in self.backends.values_mut() {
            b.queue.retain(|q| {
                let ours = q.call.task.as_deref() == Some(task_id);
                if ours && q.call.probe {
                    b.sup.breaker.probe_abandoned();
                }
                !ours
            });
        }
        let unix = self.unix_ms(self.now);
        let t = self.tasks.tasks.get_mut(task_id).expect("checked above");
        t.status = TaskStatus::Cancelled;
        t.updated_unix_ms = unix;
        t.message = Some(why.to_string());
        let (server, asked) = (t.server.clone(), core::mem::take(&mut t.asked));
        self.refuse_inputs(&server, asked.values());
    }

    /// A task's time is up: it goes (a running one is cancelled first).
    pub(super) fn task_expired(&mut self, task_id: &str) {
        self.cancel_task(task_id, "the task expired");
        self.tasks.remove(task_id);
    }

    /// The newest client call on `server`, when it runs for a task: a backend's
    /// request arriving now is asked for that task.
    pub(super) fn task_call_on(&self, server: &str) -> Option<(u64, String)> {
        let (id, cc) = self.newest_client_call(server)?;
        Some((id, cc.task.clone()?))
    }

    /// A backend asks `method` (sampling, elicitation, roots) during a task: the
    /// task waits in `input_required` until `tasks/update` brings the answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ask_for_task(
        &mut self,
        server: &str,
        call: u64,
        task_id: &str,
        backend_id: &str,
        method: &str,
        params: Option<&str>,
        capability: &str,
    ) {
        let declared = match self.router.calls.get(&call) {
            Some(Call { kind: CallKind::Client(cc), .. }) => {
                cc.caps.as_ref().is_some_and(|caps| caps.get(capability).is_some_and(Value::is_object))
            }
            _ => false,
        };
        let generation = self.backends[server].sup.generation();
        let unix = self.unix_ms(self.now);
        let full = self.tasks.tasks.get(task_id).map_or(true, |t| t.asked.len() >= MAX_ASKED);
        if !declared || full {
            let msg = if full {
                "too many requests pending on this task".to_string()
            } else {
                format!("the client did not declare {capability} for this task")
            };
            let frame = protocol::error_response(backend_id, code::METHOD_NOT_FOUND, &msg, None);
            return self.to_backend(server, frame, None);
        }
        let named = serde_json::from_str::<String>(backend_id).ok().filter(|k| !k.is_empty() && k.len() <= 64);
        let key = match named {
            Some(k) if !self.tasks.tasks[task_id].asked.contains_key(&k) => k,
            _ => format!("tether-{}", self.alloc_id()),
        };
        let t = self.tasks.tasks.get_mut(task_id).expect("checked above");
        t.asked.insert(
            key,
            AskedInput {
                generation,
                backend_id: backend_id.to_string(),
                method: method.to_string(),
                params: params.map(String::from),
            },
        );
        t.status = TaskStatus::InputRequired;
        t.updated_unix_ms = unix;
    }

    /// Answers inputs nobody will give any more: an elicitation is cancelled,
    /// anything else gets an error (only on the connection they were asked on).
    fn refuse_inputs<'a>(&mut self, server: &str, asked: impl Iterator<Item = &'a AskedInput>) {
        let generation = self.backends.get(server).map(|b| b.sup.generation());
        let frames: Vec<String> = asked
            .filter(|a| Some(a.generation) == generation)
            .map(|a| {
                if a.method == "elicitation/create" {
                    protocol::response(&a.backend_id, r#"{"action":"cancel"}"#)
                } else {
                    let msg = "the task ended before the client answered";
                    protocol::error_response(&a.backend_id, code::INTERNAL_ERROR, msg, None)
                }
            })
            .collect();
        for frame in frames {
            self.to_backend(server, frame, None);
        }
    }

    /// A task call's answer from its backend.
    pub(super) fn task_answered(&mut self, server: &str, call: &ClientCall, answer: Result<&str, &str>) {
        let outcome = if answer.is_ok() { CallOutcome::Ok } else { CallOutcome::Error };
        self.record_call(server, call, outcome);
        if let Some(task) = &call.task {
            self.finish_task(task, answer.map(String::from).map_err(String::from));
        }
    }
}
