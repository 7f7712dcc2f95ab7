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

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::calls::{AskedInput, Call, CallKind, ClientCall};
use super::Gateway;
use crate::io::{RawId, ServerName, SessionId};
use crate::metrics::CallOutcome;
use crate::protocol::{self, code, input_capability as capability, stateless_code, Era};
use crate::time::Instant;

/// The extension's identifier, under `capabilities.extensions`.
pub(super) const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The revision whose clients speak the experimental form of tasks.
const EXPERIMENTAL_REVISION: &str = "2025-11-25";

/// What a client call's id becomes once its client was answered with a task:
/// no JSON-RPC id can look like this, so a later request under the old id never
/// takes the call's outcome.
const SENTINEL: &str = "task ";

/// Inputs a backend may have pending on one task at once.
const MAX_ASKED: usize = 16;

/// `tasks/result` requests waiting on one task at once.
const MAX_WAITERS: usize = 16;

/// The `_meta` key that ties a message to a task (2025-11-25).
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

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
    /// The handshake-era session that asked for it (2025-11-25 form): where
    /// what the backend asks goes, and whose `tasks/list` shows it.
    pub owner: Option<SessionId>,
    /// Keys of `asked` already sent to a client as requests.
    pub forwarded: BTreeSet<String>,
    /// `tasks/result` requests waiting for it to finish.
    pub waiters: Vec<(SessionId, RawId)>,
    /// A stateless backend answered its call `input_required`: the call waits
    /// here for the answers (`asked` holds the backend's input requests, by key).
    pub round: Option<TaskRound>,
}

/// A task's call a stateless backend answered `input_required`: sent again with
/// `inputResponses` (and the backend's `requestState`) once every input is answered.
#[derive(Clone, Debug)]
pub(super) struct TaskRound {
    pub call: ClientCall,
    /// The backend's `requestState`, raw JSON.
    pub request_state: Option<String>,
    /// Answers so far, by key, raw JSON.
    pub answers: BTreeMap<String, String>,
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
    /// Tasks 2025-11-25 backends run, oldest first, bounded by `max_tasks`.
    pub passed: VecDeque<PassedTask>,
}

/// A task a 2025-11-25 backend runs, as tether last saw it pass.
#[derive(Clone, Debug)]
pub(super) struct PassedTask {
    /// Its namespaced id.
    pub id: String,
    /// The session that asked for it: where its status notifications go, and
    /// whose `tasks/list` shows it.
    pub session: SessionId,
    /// The task as last seen (namespaced), raw JSON object.
    pub task: String,
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
        if self.passed.len() > limits.max_tasks as usize {
            return Err("passed-through tasks remembered without bound".into());
        }
        if self.expiries.len() != self.tasks.len()
            || self.expiries.iter().any(|(at, id)| self.tasks.get(id).map(|t| t.expires) != Some(*at))
        {
            return Err("task expiry index out of step".into());
        }
        if self.tasks.values().any(|t| t.asked.len() > MAX_ASKED || (t.status.is_terminal() && !t.asked.is_empty())) {
            return Err("task inputs unbounded or left on a finished task".into());
        }
        if self
            .tasks
            .values()
            .any(|t| t.waiters.len() > MAX_WAITERS || (t.status.is_terminal() && !t.waiters.is_empty()))
        {
            return Err("tasks/result waiters unbounded or left on a finished task".into());
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

    /// The form of tasks `session` speaks, if any: stateless clients the
    /// extension, handshake-era clients of 2025-11-25 the experimental form.
    pub(super) fn task_form(&self, session: SessionId) -> Option<Form> {
        if self.config.tasks.max_tasks == 0 {
            return None;
        }
        let s = self.sessions.open.get(&session)?;
        match s.era {
            Era::Stateless => Some(Form::Extension),
            _ if s.protocol_version.as_deref() == Some(EXPERIMENTAL_REVISION) => Some(Form::Experimental),
            _ => None,
        }
    }

    /// What a `tools/call` of `server`'s tool with `support` becomes; `asked`:
    /// its params carry a `task` object (2025-11-25's request for a task).
    pub(super) fn task_plan(
        &self,
        session: SessionId,
        server: &str,
        support: crate::catalog::TaskSupport,
        asked: bool,
    ) -> TaskPlan {
        use crate::catalog::TaskSupport;
        let form = self.task_form(session);
        if form.is_some_and(|form| self.backend_runs_tasks(server, form)) {
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
                    (_, true) => TaskPlan::Window(self.now + Self::duration(self.config.tasks.sync_window_ms)),
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

    /// Refuses a call its [`TaskPlan`] refuses, in the form the client speaks.
    pub(super) fn refuse_task_plan(&mut self, session: SessionId, id: &str, name: &str, plan: TaskPlan) {
        match (self.task_form(session), plan) {
            (Some(Form::Extension), _) => self.refuse_task_required(session, id, name),
            (_, TaskPlan::RefuseForbidden) => {
                let msg = format!("tool '{name}' does not run as a task: call it without params.task");
                self.reply_error(session, id, code::METHOD_NOT_FOUND, &msg, None);
            }
            _ => {
                let msg = format!("tool '{name}' runs only as a task: call it with params.task");
                self.reply_error(session, id, code::METHOD_NOT_FOUND, &msg, None);
            }
        }
    }

    /// Whether `server` runs tasks itself, in `form`: a stateless backend that
    /// announced the extension, a 2025-11-25 one whose `tools/call` takes tasks.
    /// Tasks pass through to such a backend for clients of the same form; for
    /// clients of the other form tether runs them.
    pub(super) fn backend_runs_tasks(&self, server: &str, form: Form) -> bool {
        let Some(b) = self.backends.get(server) else { return false };
        let caps = &b.capabilities;
        match (form, b.era) {
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

    /// The backend a passed-through task id names (`{server}{separator}{id}`),
    /// and the backend's own id, when that backend runs tasks in `form`.
    fn task_backend(&self, task_id: &str, form: Form) -> Option<(ServerName, String)> {
        let separator = self.config.separator.as_str();
        self.backends.keys().filter(|name| self.backend_runs_tasks(name, form)).find_map(|name| {
            let own = task_id.strip_prefix(&**name)?.strip_prefix(separator)?;
            (!own.is_empty()).then(|| (name.clone(), own.to_string()))
        })
    }

    /// A backend's answer about its tasks, with every task id in it namespaced
    /// for clients (`taskId`, `task.taskId`, and the related-task `_meta`).
    pub(super) fn namespace_task_ids(&self, server: &str, result: &str) -> Option<String> {
        let mut result: Map<String, Value> = serde_json::from_str(result).ok()?;
        let prefix = format!("{server}{}", self.config.separator);
        let rename = |v: &mut Value| {
            if let Some(Value::String(id)) = v.get_mut("taskId") {
                id.insert_str(0, &prefix);
            }
        };
        if result.contains_key("taskId") {
            let mut whole = Value::Object(core::mem::take(&mut result));
            rename(&mut whole);
            let Value::Object(m) = whole else { unreachable!("an object") };
            result = m;
        }
        if let Some(task) = result.get_mut("task") {
            rename(task);
        }
        if let Some(related) = result.get_mut("_meta").and_then(|m| m.get_mut(RELATED_TASK)) {
            rename(related);
        }
        serde_json::to_string(&result).ok()
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
        let Some(call) = self.router.calls.get(&call_id) else { return };
        let CallKind::Client(cc) = &call.kind else { return };
        if cc.task.is_some() || cc.awaiting_input.is_some() || cc.task_window.map_or(true, |w| w > now) {
            return;
        }
        let server = call.server.clone();
        let mut cc = cc.clone();
        // Full of running tasks: the call is answered directly.
        let minted = self.mint_task(&server, &mut cc);
        let hard = self.config.policy_for(&server).request_timeout_max_ms;
        if let Some(call) = self.router.calls.get_mut(&call_id) {
            if minted {
                // Nobody waits on the call now: only its hard maximum bounds it.
                call.deadline = Some((cc.created + Self::duration(hard)).max(now));
            }
            call.kind = CallKind::Client(cc);
        }
    }

    /// Makes `call` (of `server`) run for a new task: the client is answered
    /// with the task, in its form, and the call's outcome goes to the task from
    /// now on. `false` when the store is full of running tasks (the call stays
    /// a direct one).
    pub(super) fn mint_task(&mut self, server: &ServerName, call: &mut ClientCall) -> bool {
        call.task_window = None;
        if !self.room_for_task() {
            return false;
        }
        let now = self.now;
        let task_id = self.unguessable_id();
        let ttl_ms = self.config.tasks.ttl_ms;
        let unix = self.unix_ms(now);
        let form = self.task_form(call.session).unwrap_or(Form::Extension);
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
            owner: (form == Form::Experimental).then_some(call.session),
            forwarded: BTreeSet::new(),
            waiters: Vec::new(),
            round: None,
        };
        let created = match form {
            Form::Extension => format!(r#"{{"resultType":"task",{}}}"#, self.task_fields(&task_id, &task, form)),
            Form::Experimental => format!(r#"{{"task":{{{}}}}}"#, self.task_fields(&task_id, &task, form)),
        };
        self.tasks.expiries.insert((task.expires, task_id.clone()));
        self.tasks.tasks.insert(task_id.clone(), task);
        self.reply(call.session, &call.id, &created);
        call.id = RawId::new(format!("{SENTINEL}{task_id}"));
        call.task = Some(task_id);
        true
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

    /// The task members every task message carries (raw `"key":value` pairs),
    /// as `form` names them.
    fn task_fields(&self, id: &str, t: &Task, form: Form) -> String {
        let message = t.message.as_deref().map(|m| format!(r#","statusMessage":{}"#, protocol::quote(m)));
        let (ttl, poll) = match form {
            Form::Extension => ("ttlMs", "pollIntervalMs"),
            Form::Experimental => ("ttl", "pollInterval"),
        };
        format!(
            r#""taskId":{},"status":"{}","createdAt":"{}","lastUpdatedAt":"{}","{ttl}":{},"{poll}":{}{}"#,
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
            // A round's inputs are no backend requests: nothing to refuse.
            let asked = core::mem::take(&mut t.asked);
            (t.server.clone(), if t.round.take().is_some() { BTreeMap::new() } else { asked })
        };
        self.refuse_inputs(&asked.0, asked.1.values(), "the task ended before the client answered");
        self.task_ended(task_id);
    }

    /// A 2025-11-25 task's status changed: its client's session is told
    /// (`notifications/tasks/status`), when it is open.
    fn announce_task(&mut self, task_id: &str) {
        let Some(t) = self.tasks.tasks.get(task_id) else { return };
        let Some(owner) = t.owner.filter(|s| self.sessions.open.contains_key(s)) else { return };
        let params = format!("{{{}}}", self.task_fields(task_id, t, Form::Experimental));
        self.to_client(owner, protocol::notification("notifications/tasks/status", Some(&params)));
    }

    /// A 2025-11-25 backend's `notifications/tasks/status` about a task it runs:
    /// to the session that asked for the task, the id namespaced.
    pub(super) fn forward_task_status(&mut self, server: &str, params: Option<&str>) {
        let Some(params) = params.and_then(|p| self.namespace_task_ids(server, p)) else { return };
        let Ok(status) = serde_json::from_str::<Map<String, Value>>(&params) else { return };
        let Some(task) = status.get("taskId").and_then(Value::as_str) else { return };
        self.note_passed_task(&status);
        let Some(session) = self.tasks.passed.iter().find(|p| p.id == task).map(|p| p.session) else { return };
        if self.sessions.open.contains_key(&session) {
            self.to_client(session, protocol::notification("notifications/tasks/status", Some(&params)));
        }
    }

    /// A backend answered a client with a task it runs (its id namespaced): its
    /// status notifications go to that client's session.
    pub(super) fn remember_passed_task(&mut self, session: SessionId, result: &str) {
        let Ok(result) = serde_json::from_str::<Map<String, Value>>(result) else { return };
        let Some(Value::Object(task)) = result.get("task") else { return };
        let Some(id) = task.get("taskId").and_then(Value::as_str) else { return };
        if self.config.tasks.max_tasks == 0 {
            return;
        }
        if self.tasks.passed.len() >= self.config.tasks.max_tasks as usize {
            self.tasks.passed.pop_front();
        }
        let task = Value::Object(task.clone()).to_string();
        self.tasks.passed.push_back(PassedTask { id: id.to_string(), session, task });
    }

    /// A 2025-11-25 backend's task passed through tether again (its status
    /// notification, or a `tasks/get` or `tasks/cancel` answer; namespaced):
    /// `tasks/list` shows it as it was last seen.
    pub(super) fn note_passed_task(&mut self, task: &Map<String, Value>) {
        let Some(id) = task.get("taskId").and_then(Value::as_str) else { return };
        let Some(passed) = self.tasks.passed.iter_mut().find(|p| p.id == id) else { return };
        let mut task = task.clone();
        task.remove("_meta");
        passed.task = Value::Object(task).to_string();
    }

    /// A task reached a terminal status: the `tasks/result` requests waiting on
    /// it get its outcome.
    fn task_ended(&mut self, task_id: &str) {
        self.announce_task(task_id);
        let Some(t) = self.tasks.tasks.get_mut(task_id) else { return };
        t.forwarded.clear();
        let waiters = core::mem::take(&mut t.waiters);
        for (session, id) in waiters {
            self.answer_task_result(session, &id, task_id);
        }
    }

    /// `tasks/result` of a finished task: the call's own result (tied to the
    /// task in its `_meta`) or its error.
    fn answer_task_result(&mut self, session: SessionId, id: &str, task_id: &str) {
        let Some(t) = self.tasks.tasks.get(task_id) else { return };
        match t.outcome.clone() {
            Some(Ok(result)) => {
                let members = format!(r#""{RELATED_TASK}":{{"taskId":{}}}"#, protocol::quote(task_id));
                let result = protocol::params_with_meta(Some(&result), &members);
                self.reply(session, id, &result);
            }
            Some(Err(error)) => {
                let frame = protocol::raw_error_response(id, &error);
                if let Some(s) = self.sessions.open.get_mut(&session) {
                    s.in_flight.remove(id);
                }
                self.reply_to_client(session, id, frame);
            }
            None => {
                let why = t.message.clone().unwrap_or_else(|| "cancelled".into());
                let msg = format!("task {} was cancelled: {why}", protocol::quote(task_id));
                self.reply_error(session, id, code::INTERNAL_ERROR, &msg, None);
            }
        }
    }

    /// A session closed: its `tasks/result` requests stop waiting (the tasks go on).
    pub(super) fn forget_task_waiters(&mut self, session: SessionId) {
        for t in self.tasks.tasks.values_mut() {
            t.waiters.retain(|(s, _)| *s != session);
        }
    }

    /// A request of a client about tasks: `tasks/get`, `tasks/update`,
    /// `tasks/cancel` (the extension), `tasks/get`, `tasks/result`,
    /// `tasks/list`, `tasks/cancel` (2025-11-25).
    pub(super) fn task_request(&mut self, session: SessionId, id: &RawId, method: &str, params: Option<&str>) {
        let form = self.task_form(session);
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
        if method == "tasks/list" {
            return self.list_tasks(session, id);
        }
        let Some(task_id) = params.get("taskId").and_then(Value::as_str) else {
            return self.reply_error(session, id, code::INVALID_PARAMS, "missing taskId (a string)", None);
        };
        let Some(task) = self.tasks.tasks.get(task_id) else {
            if let Some((server, own)) = form.and_then(|form| self.task_backend(task_id, form)) {
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
                let detailed = self.detailed_task(&task_id);
                self.reply(session, id, &detailed);
            }
            ("tasks/get", Form::Experimental) => {
                let task = format!("{{{}}}", self.task_fields(&task_id, &self.tasks.tasks[&task_id], form));
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
                self.answer_task_inputs(&task_id, responses);
                self.reply(session, id, r#"{"resultType":"complete"}"#);
            }
            ("tasks/result", _) if terminal => self.answer_task_result(session, id, &task_id),
            ("tasks/result", _) => {
                let t = self.tasks.tasks.get_mut(&task_id).expect("found above");
                if t.waiters.len() >= MAX_WAITERS {
                    let msg = "too many tasks/result requests wait on this task";
                    return self.reply_error(session, id, code::OVERLOADED, msg, None);
                }
                t.waiters.push((session, id.clone()));
                // Whoever waits for the result can answer what the task asks.
                self.forward_task_inputs(&task_id, session);
            }
            ("tasks/cancel", Form::Experimental) if terminal => {
                let msg = format!("cannot cancel task {}: it already finished", protocol::quote(&task_id));
                self.reply_error(session, id, code::INVALID_PARAMS, &msg, None);
            }
            ("tasks/cancel", Form::Experimental) => {
                self.cancel_task(&task_id, "cancelled by the client");
                let task = format!("{{{}}}", self.task_fields(&task_id, &self.tasks.tasks[&task_id], form));
                self.reply(session, id, &task);
            }
            _ => {
                self.cancel_task(&task_id, "cancelled by the client");
                self.reply(session, id, r#"{"resultType":"complete"}"#);
            }
        }
    }

    /// A `tasks/*` request about a task its backend runs: sent there with the
    /// backend's own id; the answer's ids are namespaced again.
    fn pass_task_request(
        &mut self,
        session: SessionId,
        id: RawId,
        method: &str,
        mut params: Map<String, Value>,
        server: &ServerName,
        own: &str,
    ) {
        let method: &'static str = match method {
            "tasks/get" => "tasks/get",
            "tasks/update" => "tasks/update",
            "tasks/result" => "tasks/result",
            _ => "tasks/cancel",
        };
        params.insert("taskId".into(), Value::String(own.to_string()));
        let (params, progress) = super::calls::Forward::from_map(&params);
        // Reading a task's state changes nothing: safe to retry.
        let safe = matches!(method, "tasks/get" | "tasks/result");
        let call = self.client_call(session, id, method, params, progress, safe, super::calls::Shape::TaskIds);
        self.admit(server, call);
    }

    /// `tasks/list` (2025-11-25): the tasks this session asked for (ids are the
    /// only key to a task, so no session sees another's), newest last, one page.
    fn list_tasks(&mut self, session: SessionId, id: &RawId) {
        let mut mine: Vec<(&String, &Task)> =
            self.tasks.tasks.iter().filter(|(_, t)| t.owner == Some(session)).collect();
        mine.sort_by_key(|(_, t)| t.created);
        let mut tasks: Vec<String> =
            mine.iter().map(|(tid, t)| format!("{{{}}}", self.task_fields(tid, t, Form::Experimental))).collect();
        // Tasks backends run, as last seen (their own tasks/list would show every
        // client's tasks: each session sees only those it asked for).
        tasks.extend(self.tasks.passed.iter().filter(|p| p.session == session).map(|p| p.task.clone()));
        let result = format!(r#"{{"tasks":[{}]}}"#, tasks.join(","));
        self.reply(session, id, &result);
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
        format!(r#"{{"resultType":"complete",{}{extra}}}"#, self.task_fields(task_id, t, Form::Extension))
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
            if let Some(round) = &mut t.round {
                round.answers.insert(key.clone(), answer.to_string());
                t.updated_unix_ms = unix;
                continue;
            }
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
        self.end_task_round(task_id);
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
        let asked = core::mem::take(&mut t.asked);
        let asked = if t.round.take().is_some() { BTreeMap::new() } else { asked };
        let server = t.server.clone();
        self.refuse_inputs(&server, asked.values(), "the task ended before the client answered");
        self.task_ended(task_id);
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
        let experimental = self.tasks.tasks.get(task_id).is_some_and(|t| t.owner.is_some());
        let declared = match self.router.calls.get(&call) {
            // A stateless client declares per request what it can be asked.
            Some(Call { kind: CallKind::Client(ClientCall { caps: Some(caps), .. }), .. }) => {
                caps.get(capability).is_some_and(Value::is_object)
            }
            // 2025-11-25: kept until a session of the client that can answer is there.
            _ => experimental,
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
        let changed = t.status != TaskStatus::InputRequired;
        t.status = TaskStatus::InputRequired;
        t.updated_unix_ms = unix;
        // 2025-11-25: asked of the client that owns the task, if it is there.
        if let Some(owner) = t.owner {
            if changed {
                self.announce_task(task_id);
            }
            self.forward_task_inputs(task_id, owner);
        }
    }

    /// Sends what a (2025-11-25) task asks, and was not sent yet, to `session`
    /// as requests tied to the task; its answers go to the backend (see
    /// [`Gateway::task_input_answered`]). Only inputs the session can answer.
    fn forward_task_inputs(&mut self, task_id: &str, session: SessionId) {
        let Some(t) = self.tasks.tasks.get(task_id) else { return };
        let Some(s) = self.sessions.open.get(&session) else { return };
        let pending: Vec<(String, AskedInput)> = t
            .asked
            .iter()
            .filter(|(key, a)| !t.forwarded.contains(*key) && capability(&a.method).is_some_and(|c| s.supports(c)))
            .map(|(k, a)| (k.clone(), a.clone()))
            .collect();
        let server = t.server.clone();
        for (key, asked) in pending {
            if self.router.server_requests.len() >= self.config.limits.max_pending_server_requests as usize {
                return;
            }
            let client_id = self.alloc_id();
            let members = format!(r#""{RELATED_TASK}":{{"taskId":{}}}"#, protocol::quote(task_id));
            let params = protocol::params_with_meta(asked.params.as_deref(), &members);
            let defaults = (asked.method == "elicitation/create")
                .then(|| protocol::elicitation_defaults(asked.params.as_deref()))
                .flatten();
            self.router.server_requests.insert(
                client_id,
                super::calls::ServerRequest {
                    server: server.clone(),
                    generation: asked.generation,
                    backend_id: asked.backend_id.clone(),
                    session,
                    related: None,
                    round: None,
                    defaults,
                    task: Some((task_id.to_string(), key.clone())),
                },
            );
            if let Some(t) = self.tasks.tasks.get_mut(task_id) {
                t.forwarded.insert(key);
            }
            self.to_client(session, protocol::request(client_id, &asked.method, Some(&params)));
        }
    }

    /// A client answered a request a (2025-11-25) task asked: it is no longer
    /// pending. `true` when the answer was for a stateless backend's round (kept
    /// for the call's retry, not sent to the backend as a response).
    pub(super) fn task_input_answered(&mut self, task_id: &str, key: &str, answer: Result<&str, &str>) -> bool {
        let unix = self.unix_ms(self.now);
        let Some(t) = self.tasks.tasks.get_mut(task_id) else { return false };
        t.forwarded.remove(key);
        if t.asked.remove(key).is_some() {
            t.updated_unix_ms = unix;
        }
        let in_round = match &mut t.round {
            Some(round) => {
                // A refusal is an answer the backend reads as one.
                let answer = answer.unwrap_or(r#"{"action":"decline"}"#);
                round.answers.insert(key.to_string(), answer.to_string());
                true
            }
            None => false,
        };
        let resumed = t.asked.is_empty() && t.status == TaskStatus::InputRequired && !in_round;
        if resumed {
            t.status = TaskStatus::Working;
            self.announce_task(task_id);
        }
        if in_round {
            self.end_task_round(task_id);
        }
        in_round
    }

    /// A task call's answer from its backend.
    pub(super) fn task_answered(&mut self, server: &str, call: &ClientCall, answer: Result<&str, &str>) {
        let Some(task) = &call.task else { return };
        if let Ok(result) = answer {
            if self.backends.get(server).is_some_and(|b| b.era == Era::Stateless) && protocol::is_input_required(result)
            {
                return self.task_round(server, call, task, result);
            }
        }
        let outcome = if answer.is_ok() { CallOutcome::Ok } else { CallOutcome::Error };
        self.record_call(server, call, outcome);
        self.finish_task(task, answer.map(String::from).map_err(String::from));
    }

    /// A stateless backend needs input for a task's call: the task waits in
    /// `input_required` with the backend's requests, and the call waits for them.
    fn task_round(&mut self, server: &str, call: &ClientCall, task_id: &str, result: &str) {
        #[derive(serde::Deserialize)]
        struct Asked {
            #[serde(rename = "inputRequests")]
            requests: Map<String, Value>,
            #[serde(default, rename = "requestState")]
            state: Option<alloc::boxed::Box<serde_json::value::RawValue>>,
        }
        let asked = match serde_json::from_str::<Asked>(result) {
            Ok(asked) if !asked.requests.is_empty() && asked.requests.len() <= MAX_ASKED => asked,
            _ => {
                let msg = format!("{server} answered input_required without usable inputRequests");
                let error = protocol::error_object(code::INTERNAL_ERROR, &msg, None);
                return self.finish_task(task_id, Err(error));
            }
        };
        let generation = self.backends[server].sup.generation();
        let unix = self.unix_ms(self.now);
        let Some(t) = self.tasks.tasks.get_mut(task_id).filter(|t| t.is_running()) else { return };
        for (key, request) in asked.requests {
            let method = request.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
            let params = request.get("params").map(Value::to_string);
            t.asked.insert(key.clone(), AskedInput { generation, backend_id: key, method, params });
        }
        t.status = TaskStatus::InputRequired;
        t.updated_unix_ms = unix;
        let request_state = asked.state.map(|s| s.get().to_string());
        t.round = Some(TaskRound { call: call.clone(), request_state, answers: BTreeMap::new() });
        if let Some(owner) = t.owner {
            self.forward_task_inputs(task_id, owner);
        }
    }

    /// Every input of a task's round is answered: its call goes to the backend
    /// again with them.
    fn end_task_round(&mut self, task_id: &str) {
        let Some(t) = self.tasks.tasks.get_mut(task_id) else { return };
        if !t.asked.is_empty() || !t.is_running() {
            return;
        }
        let Some(round) = t.round.take() else { return };
        t.status = TaskStatus::Working;
        let server = t.server.clone();
        let answers: Vec<String> =
            round.answers.iter().map(|(key, answer)| format!("{}:{answer}", protocol::quote(key))).collect();
        let responses = format!("{{{}}}", answers.join(","));
        let mut call = round.call;
        call.params = call
            .params
            .with_fields(&[("inputResponses", Some(&responses)), ("requestState", round.request_state.as_deref())]);
        if self.backends.contains_key(&server) {
            self.admit(&server, call);
        } else {
            let error = protocol::error_object(code::BACKEND_UNAVAILABLE, "the backend was removed", None);
            self.finish_task(task_id, Err(error));
        }
    }
}
