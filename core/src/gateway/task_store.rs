//! The tasks tether keeps (see [`super::tasks`]): each task's status, outcome,
//! pending inputs and waiting requests, the expiry index, and the bounds the
//! store keeps (count, bytes of results, inputs and waiters per task).

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::calls::{AskedInput, ClientCall};
use crate::io::{RawId, ServerName, SessionId};
use crate::time::Instant;

/// Inputs a backend may have pending on one task at once.
pub(super) const MAX_ASKED: usize = 16;

/// `tasks/result` requests waiting on one task at once.
pub(super) const MAX_WAITERS: usize = 16;

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
    pub(super) fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub(super) fn is_terminal(self) -> bool {
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
#[derive(Clone, Default)]
pub(super) struct TaskStore {
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
pub(super) struct PassedTask {
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
    pub form: super::tasks::Form,
    /// The task as last seen (namespaced), raw JSON object.
    pub task: String,
}

impl TaskStore {
    /// The next task to expire.
    pub(super) fn next_expiry(&self) -> Option<(Instant, &str)> {
        self.expiries.first().map(|(at, id)| (*at, id.as_str()))
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<Task> {
        let task = self.tasks.remove(id)?;
        self.expiries.remove(&(task.expires, id.to_string()));
        self.bytes -= outcome_bytes(&task.outcome);
        Some(task)
    }

    /// The oldest finished task other than `keep`.
    pub(super) fn oldest_finished(&self, keep: &str) -> Option<String> {
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

pub(super) fn outcome_bytes(outcome: &Option<Result<String, String>>) -> u64 {
    match outcome {
        Some(Ok(s) | Err(s)) => s.len() as u64,
        None => 0,
    }
}
