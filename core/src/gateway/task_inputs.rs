//! What a backend asks during a task tether runs (sampling, elicitation, roots;
//! or a stateless backend's `input_required`): the task waits in
//! `input_required` until the client answers, through `tasks/update` or, for a
//! 2025-11-25 client, as requests tied to the task on its session.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::calls::{AskedInput, Call, CallKind, ClientCall};
use super::task_store::{TaskRound, TaskStatus, MAX_ASKED};
use super::tasks::RELATED_TASK;
use super::Gateway;
use crate::io::SessionId;
use crate::metrics::CallOutcome;
use crate::protocol::{self, code, input_capability as capability, Era};

impl Gateway {
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
                in_round: false,
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
    pub(super) fn forward_task_inputs(&mut self, task_id: &str, session: SessionId) {
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
                    task: Some(super::calls::TaskQuestion {
                        task: task_id.to_string(),
                        key: key.clone(),
                        in_round: asked.in_round,
                    }),
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
    pub(super) fn task_round(&mut self, server: &str, call: &ClientCall, task_id: &str, result: &str) {
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
            t.asked.insert(key.clone(), AskedInput { generation, backend_id: key, method, params, in_round: true });
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
    pub(super) fn end_task_round(&mut self, task_id: &str) {
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

    /// `tasks/update`: answers to what the backend asked go to it; keys it did
    /// not ask (or asked of a process that is gone) are ignored.
    pub(super) fn answer_task_inputs(&mut self, task_id: &str, responses: &Map<String, Value>) {
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
        for frame in frames {
            self.to_backend(&server, frame, None);
        }
        self.end_task_round(task_id);
    }

    /// The task client call `call` runs for, if any: a backend request for the
    /// call is asked for that task.
    pub(super) fn call_task(&self, call: u64) -> Option<String> {
        match &self.router.calls.get(&call)?.kind {
            CallKind::Client(cc) => cc.task.clone(),
            _ => None,
        }
    }
}
