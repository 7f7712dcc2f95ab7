//! Tasks of backends that run them (a stateless backend announcing the
//! extension, a 2025-11-25 one whose `tools/call` takes tasks), for clients of
//! the same form: passed through under ids of tether's own (unguessable, bound
//! to the identity that asked), `tasks/*` routed back to the backend with its
//! own id, and status notifications relayed to the session that asked.

use crate::gateway::cx::Cx;
use crate::gateway::tasks::TaskStore;
use alloc::string::{String, ToString};
use serde_json::{Map, Value};

use super::super::Gateway;
use super::store::PassedTask;
use super::Form;
use crate::io::{RawId, ServerName, SessionId};
use crate::protocol::{self};

impl Gateway {
    /// A `tasks/*` request about a task its backend runs: sent there with the
    /// backend's own id; the answer's ids are namespaced again.
    pub(in crate::gateway) fn pass_task_request(
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
        let (params, progress) = super::super::calls::Forward::from_map(&params);
        // Reading a task's state changes nothing: safe to retry.
        let safe = matches!(method, "tasks/get" | "tasks/result");
        let call = self.sessions.call(
            self.now,
            session,
            id,
            method,
            params,
            progress,
            safe,
            super::super::calls::Shape::TaskIds,
        );
        self.admit(server, call);
    }
}

impl TaskStore {
    /// A backend answered a client's `tools/call` with a task it runs: the
    /// client is given an id of tether's own for it (a backend's ids may be
    /// 1, 2, 3...: anyone could name another's), bound to the identity that
    /// asked, and the answer says that id. `None`: no task in it.
    pub(in crate::gateway) fn adopt_passed_task(
        &mut self,
        cx: &mut Cx<'_>,
        session: SessionId,
        server: &str,
        result: &str,
    ) -> Option<String> {
        let form = cx.sessions.task_form(session, &cx.config.tasks)?;
        let parsed: Map<String, Value> = serde_json::from_str(result).ok()?;
        let own = match form {
            Form::Experimental => parsed.get("task").and_then(|t| t.get("taskId")),
            Form::Extension => parsed.get("taskId"),
        };
        let own = own.and_then(Value::as_str)?.to_string();
        let id = cx.ids.next_id();
        // A backend that reuses an id (numbering again from 1 after a restart)
        // names another task by it now: the old one is gone, and whoever held it
        // must not reach the new one.
        self.passed.retain(|p| !(*p.server == *server && p.own == own));
        if self.passed.len() >= cx.config.tasks.max_tasks as usize {
            self.passed.pop_front();
        }
        let principal = cx.sessions.open.get(&session).and_then(|s| s.principal.clone());
        let passed = PassedTask { id, server: server.into(), own, session, principal, form, task: String::new() };
        self.passed.push_back(passed);
        let rewritten = self.client_task_ids(server, result)?;
        if let Ok(Value::Object(answer)) = serde_json::from_str::<Value>(&rewritten) {
            if let Some(Value::Object(task)) = answer.get("task") {
                self.note_passed_task(task);
            }
        }
        Some(rewritten)
    }

    /// A backend's `notifications/tasks/status` about a task it runs: to the
    /// session that asked for the task, with tether's id. About a task tether
    /// did not hand out (another gateway's, or forgotten): dropped.
    pub(in crate::gateway) fn forward_task_status(&mut self, cx: &mut Cx<'_>, server: &str, params: Option<&str>) {
        let Some(params) = params.and_then(|p| self.client_task_ids(server, p)) else { return };
        let Ok(status) = serde_json::from_str::<Map<String, Value>>(&params) else { return };
        let Some(task) = status.get("taskId").and_then(Value::as_str) else { return };
        let Some(session) = self.passed.iter().find(|p| p.id == task && *p.server == *server).map(|p| p.session) else {
            return;
        };
        self.note_passed_task(&status);
        if cx.sessions.open.contains_key(&session) {
            cx.to_client(session, protocol::notification("notifications/tasks/status", Some(&params)));
        }
    }
}
