//! Tasks of backends that run them (a stateless backend announcing the
//! extension, a 2025-11-25 one whose `tools/call` takes tasks), for clients of
//! the same form: passed through, their ids namespaced like names
//! (`{server}{separator}{id}`), `tasks/*` routed back to the backend with its
//! own id, and status notifications relayed to the session that asked.

use alloc::format;
use alloc::string::{String, ToString};
use serde_json::{Map, Value};

use super::task_store::PassedTask;
use super::tasks::{Form, EXTENSION, RELATED_TASK};
use super::Gateway;
use crate::io::{RawId, ServerName, SessionId};
use crate::protocol::{self, Era};

impl Gateway {
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
    pub(super) fn task_backend(&self, task_id: &str, form: Form) -> Option<(ServerName, String)> {
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

    /// A `tasks/*` request about a task its backend runs: sent there with the
    /// backend's own id; the answer's ids are namespaced again.
    pub(super) fn pass_task_request(
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
}
