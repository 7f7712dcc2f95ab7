//! The tasks tether keeps (see [`super`]): each task's status, outcome,
//! pending inputs and waiting requests, the expiry index, and the bounds the
//! store keeps (count, bytes of results, inputs and waiters per task).
//!
//! An owned machine: it changes only its own state, and says what the gateway
//! must do about it (the inputs a finished task leaves unanswered, the call a
//! finished round sends again, the frames answers become). It knows nothing
//! of sessions, calls in flight or backends.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::super::calls::{AskedInput, ClientCall};
use super::{Form, RELATED_TASK};
use crate::io::{Generation, RawId, ServerName, SessionId};
use crate::protocol::{self, code};
use crate::time::Instant;

/// Inputs a backend may have pending on one task at once.
pub(in crate::gateway) const MAX_ASKED: usize = 16;

/// `tasks/result` requests waiting on one task at once.
pub(in crate::gateway) const MAX_WAITERS: usize = 16;

/// Where a task is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::gateway) enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub(in crate::gateway) fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub(in crate::gateway) fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled)
    }
}

/// One task tether keeps.
#[derive(Clone, Debug)]
pub(in crate::gateway) struct Task {
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
    /// The identity that created it, when the transport checks tokens: no other
    /// may reach it, whatever ids it learns.
    pub principal: Option<String>,
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
pub(in crate::gateway) struct TaskRound {
    pub call: ClientCall,
    /// The backend's `requestState`, raw JSON.
    pub request_state: Option<String>,
    /// Answers so far, by key, raw JSON.
    pub answers: BTreeMap<String, String>,
}

impl Task {
    /// Whether it has not finished yet.
    pub(in crate::gateway) fn is_running(&self) -> bool {
        !self.status.is_terminal()
    }

    /// The members every message about task `id` carries (raw `"key":value`
    /// pairs), as `form` names them; `poll_ms` is the interval clients are told.
    pub(in crate::gateway) fn fields(&self, id: &str, form: Form, poll_ms: u64) -> String {
        let message = self.message.as_deref().map(|m| format!(r#","statusMessage":{}"#, protocol::quote(m)));
        let (ttl, poll) = match form {
            Form::Extension => ("ttlMs", "pollIntervalMs"),
            Form::Experimental => ("ttl", "pollInterval"),
        };
        format!(
            r#""taskId":{},"status":"{}","createdAt":"{}","lastUpdatedAt":"{}","{ttl}":{},"{poll}":{}{}"#,
            protocol::quote(id),
            self.status.as_str(),
            crate::time::rfc3339(self.created_unix_ms),
            crate::time::rfc3339(self.updated_unix_ms),
            self.ttl_ms,
            poll_ms,
            message.unwrap_or_default()
        )
    }

    /// The extension's `tasks/get` answer: the task, with its result, error or
    /// pending inputs.
    pub(in crate::gateway) fn detailed(&self, id: &str, poll_ms: u64) -> String {
        let extra = match (&self.outcome, self.status) {
            (Some(Ok(result)), _) => format!(r#","result":{result}"#),
            (Some(Err(error)), _) => format!(r#","error":{error}"#),
            (None, TaskStatus::InputRequired) => {
                let requests: Vec<String> = self
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
        format!(r#"{{"resultType":"complete",{}{extra}}}"#, self.fields(id, Form::Extension, poll_ms))
    }

    /// Whether a session of `principal` may reach it: any session when it was
    /// created without one (ids are unguessable; a stdio client, a listener
    /// without tokens), else only sessions of the same identity.
    pub(in crate::gateway) fn reachable_by(&self, principal: Option<&str>) -> bool {
        reachable(self.principal.as_deref(), principal)
    }

    /// Ends it with `status` at `unix`: what it asked and nobody answered is
    /// returned (nothing for a round's inputs, which are no backend requests).
    fn end(&mut self, status: TaskStatus, unix: u64) -> Ended {
        self.status = status;
        self.updated_unix_ms = unix;
        let asked = core::mem::take(&mut self.asked);
        let unanswered = if self.round.take().is_some() { BTreeMap::new() } else { asked };
        Ended { server: self.server.clone(), unanswered }
    }
}

/// Whether a session of `session_principal` may reach something created by
/// `created_by` (see [`Task::reachable_by`]).
pub(in crate::gateway) fn reachable(created_by: Option<&str>, session_principal: Option<&str>) -> bool {
    created_by.is_none() || created_by == session_principal
}

/// A task that just ended: its backend, and what it asked that the backend
/// must now be told was refused.
#[derive(Debug)]
pub(in crate::gateway) struct Ended {
    pub server: ServerName,
    pub unanswered: BTreeMap<String, AskedInput>,
}

/// What an input the backend asked during a task changed.
#[derive(Debug, PartialEq)]
pub(in crate::gateway) struct Asked {
    /// The task moved to `input_required` with it.
    pub changed: bool,
    /// The 2025-11-25 session that owns the task (asked there).
    pub owner: Option<SessionId>,
}

/// What a client's answer to a task's input changed.
#[derive(Debug, PartialEq)]
pub(in crate::gateway) struct Answered {
    /// The answer belongs to a stateless backend's round (kept for the retry).
    pub in_round: bool,
    /// Nothing is asked any more: the task works again.
    pub resumed: bool,
}

/// Every task tether keeps, with the index of their expiries.
#[derive(Clone, Default)]
pub(in crate::gateway) struct TaskStore {
    pub tasks: BTreeMap<String, Task>,
    /// `(expires, id)` of every task, so the next expiry is found at once.
    pub expiries: BTreeSet<(Instant, String)>,
    /// Bytes of outcomes kept.
    pub bytes: u64,
    /// Tasks 2025-11-25 backends run, oldest first, bounded by `max_tasks`.
    pub passed: VecDeque<PassedTask>,
}

/// A task a backend runs, as tether last saw it pass.
#[derive(Clone, Debug)]
pub(in crate::gateway) struct PassedTask {
    /// The id tether gave the client for it.
    pub id: String,
    /// The backend running it.
    pub server: ServerName,
    /// The backend's own id for it.
    pub own: String,
    /// The session that asked for it: where its status notifications go, and
    /// whose `tasks/list` shows it.
    pub session: SessionId,
    /// The identity that asked for it, when the transport checks tokens: no
    /// other may reach it.
    pub principal: Option<String>,
    /// The form of tasks it was asked for in.
    pub form: super::Form,
    /// The task as last seen (namespaced), raw JSON object.
    pub task: String,
}

impl TaskStore {
    /// The backend running the passed-through task `task_id` (tether's id) and
    /// the backend's own id, when the asking session may reach it: the task is of `form`,
    /// its backend still `runs_tasks`, and `principal` (the asking session's
    /// identity) is the one that created it (see [`reachable`]).
    pub(in crate::gateway) fn passed_task(
        &self,
        task_id: &str,
        form: Form,
        principal: Option<&str>,
        runs_tasks: impl Fn(&str) -> bool,
    ) -> Option<(ServerName, String)> {
        let p = self.passed.iter().find(|p| p.id == task_id && p.form == form)?;
        let reachable = runs_tasks(&p.server) && reachable(p.principal.as_deref(), principal);
        reachable.then(|| (p.server.clone(), p.own.clone()))
    }

    /// A backend's message about its tasks, with every task id in it (`taskId`,
    /// `task.taskId`, the related-task `_meta`) the id tether gave the client.
    /// Ids tether never handed out are left as they are (nothing routes them).
    pub(in crate::gateway) fn client_task_ids(&self, server: &str, message: &str) -> Option<String> {
        let mut message: Map<String, Value> = serde_json::from_str(message).ok()?;
        let ours =
            |own: &str| self.passed.iter().rev().find(|p| *p.server == *server && p.own == own).map(|p| p.id.clone());
        let rename = |v: &mut Value| {
            if let Some(Value::String(id)) = v.get_mut("taskId") {
                if let Some(ours) = ours(id) {
                    *id = ours;
                }
            }
        };
        if let Some(Value::String(id)) = message.get_mut("taskId") {
            if let Some(ours) = ours(id) {
                *id = ours;
            }
        }
        if let Some(task) = message.get_mut("task") {
            rename(task);
        }
        if let Some(related) = message.get_mut("_meta").and_then(|m| m.get_mut(RELATED_TASK)) {
            rename(related);
        }
        serde_json::to_string(&message).ok()
    }

    /// A 2025-11-25 backend's task passed through tether again (its status
    /// notification, or a `tasks/get` or `tasks/cancel` answer; with tether's
    /// id): `tasks/list` shows it as it was last seen.
    pub(in crate::gateway) fn note_passed_task(&mut self, task: &Map<String, Value>) {
        let Some(id) = task.get("taskId").and_then(Value::as_str) else { return };
        let Some(passed) = self.passed.iter_mut().find(|p| p.id == id) else { return };
        let mut task = task.clone();
        task.remove("_meta");
        passed.task = Value::Object(task).to_string();
    }
    /// Keeps a new task.
    pub(in crate::gateway) fn insert(&mut self, id: String, task: Task) {
        self.expiries.insert((task.expires, id.clone()));
        self.tasks.insert(id, task);
    }

    /// Whether one more task fits under `max_tasks`, after dropping the oldest
    /// finished one if needed.
    pub(in crate::gateway) fn make_room(&mut self, max_tasks: usize) -> bool {
        if self.tasks.len() < max_tasks {
            return true;
        }
        match self.oldest_finished("") {
            Some(oldest) => {
                self.remove(&oldest);
                true
            }
            None => false,
        }
    }

    /// The task to give up first while the store holds more than `max_tasks`
    /// tasks or `max_bytes` of results: the oldest finished, else the oldest.
    pub(in crate::gateway) fn over_bounds(&self, max_tasks: usize, max_bytes: u64) -> Option<String> {
        if self.tasks.len() <= max_tasks && self.bytes <= max_bytes {
            return None;
        }
        self.oldest_finished("").or_else(|| self.tasks.iter().min_by_key(|(_, t)| t.created).map(|(id, _)| id.clone()))
    }

    /// Forgets the oldest passed-through tasks beyond `max_tasks`.
    pub(in crate::gateway) fn trim_passed(&mut self, max_tasks: usize) {
        while self.passed.len() > max_tasks {
            self.passed.pop_front();
        }
    }

    /// A task's call ended with `outcome`: it is kept if it fits under `limit`
    /// bytes of results (older finished tasks give way), else replaced by an
    /// error saying so, and the task finishes. `None`: no such running task.
    pub(in crate::gateway) fn finish(
        &mut self,
        id: &str,
        outcome: Result<String, String>,
        limit: u64,
        unix: u64,
    ) -> Option<Ended> {
        if !self.tasks.get(id)?.is_running() {
            return None;
        }
        let size = outcome_bytes(&Some(outcome.clone()));
        self.free(limit, size, id);
        let outcome = if self.bytes + size > limit {
            let msg = format!(
                "the result ({size} bytes) is larger than tether keeps for tasks (tasks.max_result_bytes = {limit}); call the tool without a task"
            );
            let error = protocol::error_object(code::INTERNAL_ERROR, &msg, None);
            // The error takes far less than the smallest bound the config takes.
            self.free(limit, error.len() as u64, id);
            Err(error)
        } else {
            outcome
        };
        self.bytes += outcome_bytes(&Some(outcome.clone()));
        let t = self.tasks.get_mut(id)?;
        let status = if outcome.is_ok() { TaskStatus::Completed } else { TaskStatus::Failed };
        t.outcome = Some(outcome);
        Some(t.end(status, unix))
    }

    /// Drops the oldest finished tasks (but `keep`) until `size` more bytes fit
    /// under `limit`, or none is left to drop.
    fn free(&mut self, limit: u64, size: u64, keep: &str) {
        while self.bytes + size > limit {
            let Some(oldest) = self.oldest_finished(keep) else { break };
            self.remove(&oldest);
        }
    }

    /// Stops a running task (`why` is its status message). `None`: no such
    /// running task.
    pub(in crate::gateway) fn cancel(&mut self, id: &str, why: &str, unix: u64) -> Option<Ended> {
        let t = self.tasks.get_mut(id).filter(|t| t.is_running())?;
        t.message = Some(why.to_string());
        Some(t.end(TaskStatus::Cancelled, unix))
    }

    /// The `tasks/result` requests waiting on a task that ended (it forgets
    /// which inputs it forwarded: nothing is asked any more).
    pub(in crate::gateway) fn take_waiters(&mut self, id: &str) -> Vec<(SessionId, RawId)> {
        let Some(t) = self.tasks.get_mut(id) else { return Vec::new() };
        t.forwarded.clear();
        core::mem::take(&mut t.waiters)
    }

    /// A `tasks/result` request waits on a running task; `false` when
    /// [`MAX_WAITERS`] already do.
    pub(in crate::gateway) fn wait_for(&mut self, id: &str, session: SessionId, request: RawId) -> bool {
        let Some(t) = self.tasks.get_mut(id) else { return false };
        if t.waiters.len() >= MAX_WAITERS {
            return false;
        }
        t.waiters.push((session, request));
        true
    }

    /// A session closed: its `tasks/result` requests stop waiting (the tasks go on).
    pub(in crate::gateway) fn forget_waiters(&mut self, session: SessionId) {
        for t in self.tasks.values_mut() {
            t.waiters.retain(|(s, _)| *s != session);
        }
    }

    /// `tasks/list` (2025-11-25) for `session`: the tasks it asked for (ids are
    /// the only key to a task, so no session sees another's) of the backends it
    /// `sees`, oldest first, then the backends' tasks it asked for as last seen.
    pub(in crate::gateway) fn listed(&self, session: SessionId, sees: impl Fn(&str) -> bool, poll_ms: u64) -> String {
        let mut mine: Vec<(&String, &Task)> =
            self.tasks.iter().filter(|(_, t)| t.owner == Some(session) && sees(&t.server)).collect();
        mine.sort_by_key(|(_, t)| t.created);
        let mut tasks: Vec<String> =
            mine.iter().map(|(id, t)| format!("{{{}}}", t.fields(id, Form::Experimental, poll_ms))).collect();
        let passed = self.passed.iter().filter(|p| p.session == session && p.form == Form::Experimental);
        tasks.extend(passed.filter(|p| !p.task.is_empty()).map(|p| p.task.clone()));
        format!(r#"{{"tasks":[{}]}}"#, tasks.join(","))
    }

    /// The backend asked `input` during a running task, under `key` if it named
    /// one tether can use (else `fresh_key()`). `None`: no such task, or it has
    /// [`MAX_ASKED`] pending already.
    pub(in crate::gateway) fn ask(
        &mut self,
        id: &str,
        key: Option<String>,
        fresh_key: impl FnOnce() -> String,
        input: AskedInput,
        unix: u64,
    ) -> Option<Asked> {
        let t = self.tasks.get_mut(id).filter(|t| t.asked.len() < MAX_ASKED)?;
        let key = match key {
            Some(k) if !t.asked.contains_key(&k) => k,
            _ => fresh_key(),
        };
        t.asked.insert(key, input);
        let changed = t.status != TaskStatus::InputRequired;
        t.status = TaskStatus::InputRequired;
        t.updated_unix_ms = unix;
        Some(Asked { changed, owner: t.owner })
    }

    /// A client answered input `key` of a task (a refusal is `Err`). `None`: no
    /// such task.
    pub(in crate::gateway) fn input_answered(
        &mut self,
        id: &str,
        key: &str,
        answer: Result<&str, &str>,
        unix: u64,
    ) -> Option<Answered> {
        let t = self.tasks.get_mut(id)?;
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
        }
        Some(Answered { in_round, resumed })
    }

    /// A stateless backend answered a running task's `call` `input_required`
    /// with `requests` (by key) and `request_state`: the task waits for the
    /// answers. Returns the session that owns the task, if any (asked there).
    /// `None`: no such running task.
    pub(in crate::gateway) fn start_round(
        &mut self,
        id: &str,
        requests: Map<String, Value>,
        generation: Generation,
        call: &ClientCall,
        request_state: Option<String>,
        unix: u64,
    ) -> Option<Option<SessionId>> {
        let t = self.tasks.get_mut(id).filter(|t| t.is_running())?;
        for (key, request) in requests {
            let method = request.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
            let params = request.get("params").map(Value::to_string);
            t.asked.insert(key.clone(), AskedInput { generation, backend_id: key, method, params, in_round: true });
        }
        t.status = TaskStatus::InputRequired;
        t.updated_unix_ms = unix;
        t.round = Some(TaskRound { call: call.clone(), request_state, answers: BTreeMap::new() });
        Some(t.owner)
    }

    /// Once every input of a running task's round is answered: the task works
    /// again, and its call goes back to its backend with `inputResponses` (and
    /// the backend's `requestState`). `None`: not yet, or no round.
    pub(in crate::gateway) fn end_round(&mut self, id: &str) -> Option<(ServerName, ClientCall)> {
        let t = self.tasks.get_mut(id).filter(|t| t.asked.is_empty() && t.is_running())?;
        let round = t.round.take()?;
        t.status = TaskStatus::Working;
        let answers: Vec<String> =
            round.answers.iter().map(|(key, answer)| format!("{}:{answer}", protocol::quote(key))).collect();
        let responses = format!("{{{}}}", answers.join(","));
        let mut call = round.call;
        call.params = call
            .params
            .with_fields(&[("inputResponses", Some(&responses)), ("requestState", round.request_state.as_deref())]);
        Some((t.server.clone(), call))
    }

    /// `tasks/update`'s answers: a round keeps them; otherwise each answer to
    /// what the backend's connection `generation` asked becomes a response frame
    /// for it. Keys it did not ask (or asked of a process that is gone) are
    /// ignored. `None`: no such task.
    pub(in crate::gateway) fn answer_inputs(
        &mut self,
        id: &str,
        responses: &Map<String, Value>,
        generation: Option<Generation>,
        unix: u64,
    ) -> Option<(ServerName, Vec<String>)> {
        let t = self.tasks.get_mut(id)?;
        let mut frames = Vec::new();
        for (key, answer) in responses {
            let Some(asked) = t.asked.remove(key) else { continue };
            if let Some(round) = &mut t.round {
                round.answers.insert(key.clone(), answer.to_string());
                t.updated_unix_ms = unix;
                continue;
            }
            if Some(asked.generation) == generation && !asked.in_round {
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
        Some((t.server.clone(), frames))
    }

    /// The next task to expire.
    pub(in crate::gateway) fn next_expiry(&self) -> Option<(Instant, &str)> {
        self.expiries.first().map(|(at, id)| (*at, id.as_str()))
    }

    pub(in crate::gateway) fn remove(&mut self, id: &str) -> Option<Task> {
        let task = self.tasks.remove(id)?;
        self.expiries.remove(&(task.expires, id.to_string()));
        self.bytes -= outcome_bytes(&task.outcome);
        Some(task)
    }

    /// The oldest finished task other than `keep`.
    pub(in crate::gateway) fn oldest_finished(&self, keep: &str) -> Option<String> {
        self.tasks
            .iter()
            .filter(|(id, t)| t.status.is_terminal() && id.as_str() != keep)
            .min_by_key(|(_, t)| t.created)
            .map(|(id, _)| id.clone())
    }

    /// Checks the store's bounds and index.
    pub(in crate::gateway) fn check_invariants(&self, limits: &crate::config::Tasks) -> Result<(), String> {
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

pub(in crate::gateway) fn outcome_bytes(outcome: &Option<Result<String, String>>) -> u64 {
    match outcome {
        Some(Ok(s) | Err(s)) => s.len() as u64,
        None => 0,
    }
}

#[cfg(test)]
mod tests;
