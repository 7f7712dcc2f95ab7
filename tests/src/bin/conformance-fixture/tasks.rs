//! The tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) of the stateless
//! mode, implemented natively: the table of tasks and `tasks/get`, `tasks/update`
//! and `tasks/cancel`. The handshake mode has none of this (the gateway in front of
//! it runs its tools as tasks); here the gateway passes tasks through.
//!
//! - A task runs one of [`tasks_tools`]' tools on its own thread. It exists (in the
//!   table) before its `CreateTaskResult` is answered, so an immediate `tasks/get`
//!   finds it.
//! - Status: `working`; `input_required` while the tool waits for answers to its
//!   questions (`inputRequests`, each an `elicitation/create`, delivered with
//!   `tasks/update`); then `completed` with the tool's result (a tool that failed is
//!   a completed task with an `isError` result), `failed` with the JSON-RPC error of
//!   a tool that broke (`protocol_error_job`), or `cancelled`.
//! - A question is keyed by the tool's request id when it names one (`user_name`),
//!   else by a digest of what it asks ([`input_key`]), so the same question keeps
//!   its key from one round to the next (the synchronous path needs that).
//! - Finished tasks stay readable for [`TTL_MS`] after their last change; the table
//!   holds at most [`MAX_TASKS`], dropping the oldest finished first.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::stateless::check_elicit;
use crate::tasks_tools::{self, Cancel};
use crate::wire::{code, lock, required_str, Answer, RpcError};

/// The extension's id, under `capabilities.extensions` on both sides.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// How long a task stays readable after its last change (`ttlMs`); also how long a
/// question waits for its answer before the tool goes on without it.
pub const TTL_MS: u64 = 60_000;

/// How often clients should poll `tasks/get` (`pollIntervalMs`).
const POLL_INTERVAL_MS: u64 = 500;

/// The most tasks the table holds.
pub const MAX_TASKS: usize = 1000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

struct Task {
    id: String,
    status: Status,
    created_ms: u64,
    updated_ms: u64,
    /// The tool's result, once `completed`.
    result: Option<Value>,
    /// The JSON-RPC error, once `failed`.
    error: Option<Value>,
    /// Questions waiting for an answer: key → `{method, params}`.
    input_requests: Map<String, Value>,
    /// Answers delivered by `tasks/update`, not yet taken by the tool.
    input_responses: Map<String, Value>,
    cancel: Arc<Cancel>,
}

impl Task {
    fn touch(&mut self) {
        self.updated_ms = now_ms().max(self.updated_ms);
    }

    /// The task's fields as `CreateTaskResult` and `tasks/get` share them.
    fn envelope(&self) -> Value {
        json!({
            "taskId": self.id,
            "status": self.status.as_str(),
            "createdAt": rfc3339(self.created_ms),
            "lastUpdatedAt": rfc3339(self.updated_ms),
            "ttlMs": TTL_MS,
            "pollIntervalMs": POLL_INTERVAL_MS,
        })
    }

    /// `tasks/get`'s `DetailedTask`.
    fn detailed(&self) -> Value {
        let mut task = self.envelope();
        task["resultType"] = json!("complete");
        match self.status {
            Status::Completed => task["result"] = self.result.clone().unwrap_or_else(|| json!({ "content": [] })),
            Status::Failed => {
                task["error"] =
                    self.error.clone().unwrap_or_else(|| json!({ "code": code::INTERNAL_ERROR, "message": "failed" }))
            }
            Status::InputRequired => task["inputRequests"] = Value::Object(self.input_requests.clone()),
            Status::Working | Status::Cancelled => {}
        }
        task
    }
}

/// The tasks, oldest first.
pub struct Store {
    tasks: Mutex<Vec<Task>>,
    /// Wakes the tools waiting for answers (an answer came, or a cancel).
    changed: Condvar,
    /// Task ids: a per-process random prefix and a counter.
    prefix: u64,
    next: AtomicU64,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            tasks: Mutex::new(Vec::new()),
            changed: Condvar::new(),
            prefix: RandomState::new().build_hasher().finish(),
            next: AtomicU64::new(1),
        }
    }
}

impl Store {
    /// Creates a task running the tool `name` and answers its `CreateTaskResult`.
    /// `prefilled` holds answers gathered before the task (keyed like the tool's
    /// questions); a question neither prefilled nor answerable (`can_elicit`
    /// false: the client declared no elicitation) fails at once, and the tool goes
    /// on without the answer.
    pub fn create(
        self: &Arc<Self>,
        name: &str,
        args: Map<String, Value>,
        prefilled: Map<String, Value>,
        can_elicit: bool,
    ) -> Value {
        let id = format!("task-{:016x}-{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed));
        let now = now_ms();
        let cancel = Arc::new(Cancel::default());
        let task = Task {
            id: id.clone(),
            status: Status::Working,
            created_ms: now,
            updated_ms: now,
            result: None,
            error: None,
            input_requests: Map::new(),
            input_responses: Map::new(),
            cancel: Arc::clone(&cancel),
        };
        let created = task.envelope();
        {
            let mut tasks = self.lock();
            tasks.push(task);
            self.prune(&mut tasks, now);
        }
        let store = Arc::clone(self);
        let name = name.to_string();
        let task_id = id;
        thread::spawn(move || {
            let prefilled = Mutex::new(prefilled);
            let elicit = |request: Option<&str>, params: Value| {
                let key = input_key(request, &params);
                if let Some(answer) = lock(&prefilled).remove(&key) {
                    return Ok(answer);
                }
                if !can_elicit {
                    return Err("the client declared no elicitation capability".to_string());
                }
                store.ask(&task_id, key, params)
            };
            let answer = tasks_tools::call(&name, &args, &cancel, &elicit)
                .unwrap_or_else(|| Err(RpcError::invalid_params(format!("Unknown tool: {name}"))));
            store.settle(&task_id, answer);
        });
        let mut created = created;
        created["resultType"] = json!("task");
        created
    }

    /// `tasks/get`: the task in full; -32602 for an unknown id.
    pub fn get(&self, params: &Map<String, Value>) -> Answer {
        let id = required_str(params, "taskId")?;
        let mut tasks = self.lock();
        self.prune(&mut tasks, now_ms());
        find(&mut tasks, id).map(|task| task.detailed())
    }

    /// `tasks/update`: delivers answers to pending questions (unknown keys are
    /// ignored); the task resumes once none is pending. An empty ack.
    pub fn update(&self, params: &Map<String, Value>) -> Answer {
        let id = required_str(params, "taskId")?;
        let responses = match params.get("inputResponses") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(responses)) => responses.clone(),
            Some(_) => return Err(RpcError::invalid_params("inputResponses must be an object")),
        };
        let mut tasks = self.lock();
        let task = find(&mut tasks, id)?;
        if task.status.is_terminal() {
            return Ok(ack());
        }
        let answered: Vec<(String, Value)> =
            responses.into_iter().filter(|(key, _)| task.input_requests.contains_key(key)).collect();
        for (key, answer) in &answered {
            if let Err(why) = check_elicit(answer) {
                return Err(RpcError::invalid_params(format!("inputResponses.{key}: {why}")));
            }
        }
        if answered.is_empty() {
            return Ok(ack());
        }
        for (key, answer) in answered {
            task.input_requests.remove(&key);
            task.input_responses.insert(key, answer);
        }
        if task.input_requests.is_empty() {
            task.status = Status::Working;
        }
        task.touch();
        self.changed.notify_all();
        Ok(ack())
    }

    /// `tasks/cancel`: a task still running becomes `cancelled` and its tool stops;
    /// a finished one stays as it is. An empty ack either way.
    pub fn cancel(&self, params: &Map<String, Value>) -> Answer {
        let id = required_str(params, "taskId")?;
        let mut tasks = self.lock();
        let task = find(&mut tasks, id)?;
        if !task.status.is_terminal() {
            task.status = Status::Cancelled;
            task.input_requests.clear();
            task.input_responses.clear();
            task.touch();
            task.cancel.cancel();
            self.changed.notify_all();
        }
        Ok(ack())
    }

    /// Asks the client (for the task `id`'s tool, which waits here): the question
    /// shows in `inputRequests` under `key` until `tasks/update` answers it, the
    /// task is cancelled, or [`TTL_MS`] pass.
    fn ask(&self, id: &str, key: String, params: Value) -> Result<Value, String> {
        let mut tasks = self.lock();
        let Some(task) = tasks.iter_mut().find(|t| t.id == id) else {
            return Err("the task is gone".into());
        };
        if task.status.is_terminal() {
            return Err("the task was cancelled".into());
        }
        task.input_requests.insert(key.clone(), json!({ "method": "elicitation/create", "params": params }));
        task.status = Status::InputRequired;
        task.touch();
        let deadline = Instant::now() + Duration::from_millis(TTL_MS);
        loop {
            let Some(task) = tasks.iter_mut().find(|t| t.id == id) else {
                return Err("the task is gone".into());
            };
            if task.status.is_terminal() {
                return Err("the task was cancelled".into());
            }
            if let Some(answer) = task.input_responses.remove(&key) {
                return Ok(answer);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                task.input_requests.remove(&key);
                if task.input_requests.is_empty() {
                    task.status = Status::Working;
                }
                task.touch();
                return Err(format!("the client did not answer within {} s", TTL_MS / 1000));
            }
            tasks = self.changed.wait_timeout(tasks, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Records the tool's outcome, unless the task was cancelled (or dropped) meanwhile.
    fn settle(&self, id: &str, answer: Answer) {
        let mut tasks = self.lock();
        let Some(task) = tasks.iter_mut().find(|t| t.id == id) else {
            return;
        };
        if task.status.is_terminal() {
            return;
        }
        match answer {
            Ok(result) => {
                task.status = Status::Completed;
                task.result = Some(result);
            }
            Err(error) => {
                task.status = Status::Failed;
                task.error = Some(error.to_json());
            }
        }
        task.input_requests.clear();
        task.input_responses.clear();
        task.touch();
    }

    /// Drops finished tasks past their TTL, then the oldest finished ones while the
    /// table is over [`MAX_TASKS`] (and, should every task be running, the oldest,
    /// cancelled).
    fn prune(&self, tasks: &mut Vec<Task>, now: u64) {
        tasks.retain(|t| !(t.status.is_terminal() && now.saturating_sub(t.updated_ms) >= TTL_MS));
        while tasks.len() > MAX_TASKS {
            let oldest = tasks.iter().position(|t| t.status.is_terminal()).unwrap_or(0);
            let dropped = tasks.remove(oldest);
            dropped.cancel.cancel();
            self.changed.notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Task>> {
        lock(&self.tasks)
    }
}

/// The task `id`, or -32602.
fn find<'a>(tasks: &'a mut [Task], id: &str) -> Result<&'a mut Task, RpcError> {
    tasks.iter_mut().find(|t| t.id == id).ok_or_else(|| RpcError {
        code: code::INVALID_PARAMS,
        message: format!("Unknown task: {id}"),
        data: Some(json!({ "taskId": id })),
    })
}

/// The empty acknowledgement of `tasks/update` and `tasks/cancel`.
fn ack() -> Value {
    json!({ "resultType": "complete" })
}

/// The key of a question: the request id the tool names, else `elicit-` and a
/// digest (FNV-1a) of its params, the same from one process to the next.
pub fn input_key(request: Option<&str>, params: &Value) -> String {
    if let Some(request) = request {
        return request.to_string();
    }
    let digest = params
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3));
    format!("elicit-{digest:016x}")
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `unix_ms` as RFC 3339 UTC with milliseconds: `2026-11-27T12:05:45.123Z`.
fn rfc3339(unix_ms: u64) -> String {
    tether_core::time::rfc3339(unix_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_781_145_123), "2026-11-27T12:05:45.123Z");
    }

    #[test]
    fn question_keys_are_stable() {
        let asked = json!({ "message": "Delete a.txt?" });
        assert_eq!(input_key(None, &asked), input_key(None, &asked.clone()));
        assert_ne!(input_key(None, &asked), input_key(None, &json!({ "message": "Delete b.txt?" })));
        assert_eq!(input_key(Some("user_name"), &asked), "user_name");
    }
}
