//! What a backend asks during a task tether runs (sampling, elicitation, roots;
//! or a stateless backend's `input_required`): the task waits in
//! `input_required` until the client answers, through `tasks/update` or, for a
//! 2025-11-25 client, as requests tied to the task on its session.

use crate::gateway::backends::Backends;
use crate::gateway::cx::Cx;
use crate::gateway::eras::EraBridge;
use crate::gateway::tasks::TaskStore;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::super::calls::{AskedInput, Call, CallKind, ClientCall};
use super::store::MAX_ASKED;
use super::RELATED_TASK;
use crate::io::SessionId;
use crate::metrics::CallOutcome;
use crate::protocol::{self, code, input_capability as capability, Era};

impl TaskStore {
    /// A backend asks `method` (sampling, elicitation, roots) during a task: the
    /// task waits in `input_required` until `tasks/update` brings the answer.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::gateway) fn ask_for_task(
        &mut self,
        backends: &mut Backends,
        cx: &mut Cx<'_>,
        server: &str,
        call: u64,
        task_id: &str,
        backend_id: &str,
        method: &str,
        params: Option<&str>,
        capability: &str,
    ) {
        let experimental = self.tasks.get(task_id).is_some_and(|t| t.owner.is_some());
        let declared = match cx.router.calls.get(&call) {
            // A stateless client declares per request what it can be asked.
            Some(Call { kind: CallKind::Client(ClientCall { caps: Some(caps), .. }), .. }) => {
                caps.get(capability).is_some_and(Value::is_object)
            }
            // 2025-11-25: kept until a session of the client that can answer is there.
            _ => experimental,
        };
        let generation = backends[server].sup.generation();
        let unix = cx.wall_clock.unix_ms(cx.now);
        let asked = match declared {
            true => {
                let named = serde_json::from_str::<String>(backend_id).ok().filter(|k| !k.is_empty() && k.len() <= 64);
                let input = AskedInput {
                    generation,
                    backend_id: backend_id.to_string(),
                    method: method.to_string(),
                    params: params.map(String::from),
                    in_round: false,
                };
                let router = &mut cx.router;
                self.ask(task_id, named, || format!("tether-{}", router.alloc_id()), input, unix)
            }
            false => None,
        };
        let Some(asked) = asked else {
            let msg = if declared {
                "too many requests pending on this task".to_string()
            } else {
                format!("the client did not declare {capability} for this task")
            };
            let frame = protocol::error_response(backend_id, code::METHOD_NOT_FOUND, &msg, None);
            return backends.send(cx, server, frame, None);
        };
        // 2025-11-25: asked of the client that owns the task, if it is there.
        if let Some(owner) = asked.owner {
            if asked.changed {
                self.announce_task(cx, task_id);
            }
            self.forward_task_inputs(cx, task_id, owner);
        }
    }

    /// Sends what a (2025-11-25) task asks, and was not sent yet, to `session`
    /// as requests tied to the task; its answers go to the backend (see
    /// [`super::super::Gateway::task_input_answered`]). Only inputs the session can answer.
    pub(in crate::gateway) fn forward_task_inputs(&mut self, cx: &mut Cx<'_>, task_id: &str, session: SessionId) {
        let Some(t) = self.tasks.get(task_id) else { return };
        let Some(s) = cx.sessions.open.get(&session) else { return };
        let pending: Vec<(String, AskedInput)> = t
            .asked
            .iter()
            .filter(|(key, a)| !t.forwarded.contains(*key) && capability(&a.method).is_some_and(|c| s.supports(c)))
            .map(|(k, a)| (k.clone(), a.clone()))
            .collect();
        let server = t.server.clone();
        for (key, asked) in pending {
            if cx.router.server_requests.len() >= cx.config.limits.max_pending_server_requests as usize {
                return;
            }
            let client_id = cx.router.alloc_id();
            let members = format!(r#""{RELATED_TASK}":{{"taskId":{}}}"#, protocol::quote(task_id));
            let params = protocol::params_with_meta(asked.params.as_deref(), &members);
            let defaults = (asked.method == "elicitation/create")
                .then(|| protocol::elicitation_defaults(asked.params.as_deref()))
                .flatten();
            cx.router.server_requests.insert(
                client_id,
                super::super::calls::ServerRequest {
                    server: server.clone(),
                    generation: asked.generation,
                    backend_id: asked.backend_id.clone(),
                    session,
                    related: None,
                    round: None,
                    defaults,
                    task: Some(super::super::calls::TaskQuestion {
                        task: task_id.to_string(),
                        key: key.clone(),
                        in_round: asked.in_round,
                    }),
                },
            );
            if let Some(t) = self.tasks.get_mut(task_id) {
                t.forwarded.insert(key);
            }
            cx.to_client(session, protocol::request(client_id, &asked.method, Some(&params)));
        }
    }

    /// A client answered a request a (2025-11-25) task asked: it is no longer
    /// pending. `true` when the answer was for a stateless backend's round (kept
    /// for the call's retry, not sent to the backend as a response).
    pub(in crate::gateway) fn task_input_answered(
        &mut self,
        backends: &mut Backends,
        eras: &mut EraBridge,
        cx: &mut Cx<'_>,
        task_id: &str,
        key: &str,
        answer: Result<&str, &str>,
    ) -> bool {
        let unix = cx.wall_clock.unix_ms(cx.now);
        let Some(answered) = self.input_answered(task_id, key, answer, unix) else { return false };
        if answered.resumed {
            self.announce_task(cx, task_id);
        }
        if answered.in_round {
            self.end_task_round(backends, eras, cx, task_id);
        }
        answered.in_round
    }

    /// A task call's answer from its backend.
    pub(in crate::gateway) fn task_answered(
        &mut self,
        backends: &mut Backends,
        eras: &mut EraBridge,
        cx: &mut Cx<'_>,
        server: &str,
        call: &ClientCall,
        answer: Result<&str, &str>,
    ) {
        let Some(task) = &call.task else { return };
        if let Ok(result) = answer {
            if backends.get(server).is_some_and(|b| b.era == Era::Stateless) && protocol::is_input_required(result) {
                return self.task_round(backends, eras, cx, server, call, task, result);
            }
        }
        let outcome = if answer.is_ok() { CallOutcome::Ok } else { CallOutcome::Error };
        backends.record_call(server, call, outcome, cx.now);
        self.finish_task(backends, eras, cx, task, answer.map(String::from).map_err(String::from));
    }

    /// A stateless backend needs input for a task's call: the task waits in
    /// `input_required` with the backend's requests, and the call waits for them.
    #[allow(clippy::too_many_arguments)] // the call's facts, and the parts it touches
    pub(in crate::gateway) fn task_round(
        &mut self,
        backends: &mut Backends,
        eras: &mut EraBridge,
        cx: &mut Cx<'_>,
        server: &str,
        call: &ClientCall,
        task_id: &str,
        result: &str,
    ) {
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
                return self.finish_task(backends, eras, cx, task_id, Err(error));
            }
        };
        let generation = backends[server].sup.generation();
        let unix = cx.wall_clock.unix_ms(cx.now);
        let request_state = asked.state.map(|s| s.get().to_string());
        let owner = self.start_round(task_id, asked.requests, generation, call, request_state, unix);
        if let Some(Some(owner)) = owner {
            self.forward_task_inputs(cx, task_id, owner);
        }
    }

    /// Every input of a task's round is answered: its call goes to the backend
    /// again with them.
    pub(in crate::gateway) fn end_task_round(
        &mut self,
        backends: &mut Backends,
        eras: &mut EraBridge,
        cx: &mut Cx<'_>,
        task_id: &str,
    ) {
        let Some((server, call)) = self.end_round(task_id) else { return };
        if backends.contains_key(&server) {
            cx.admit(server, call);
        } else {
            let error = protocol::error_object(code::BACKEND_UNAVAILABLE, "the backend was removed", None);
            self.finish_task(backends, eras, cx, task_id, Err(error));
        }
    }

    /// `tasks/update`: answers to what the backend asked go to it; keys it did
    /// not ask (or asked of a process that is gone) are ignored.
    pub(in crate::gateway) fn answer_task_inputs(
        &mut self,
        backends: &mut Backends,
        eras: &mut EraBridge,
        cx: &mut Cx<'_>,
        task_id: &str,
        responses: &Map<String, Value>,
    ) {
        let unix = cx.wall_clock.unix_ms(cx.now);
        let Some(server) = self.tasks.get(task_id).map(|t| t.server.clone()) else { return };
        let generation = backends.get(&server).map(|b| b.sup.generation());
        let Some((server, frames)) = self.answer_inputs(task_id, responses, generation, unix) else { return };
        for frame in frames {
            backends.send(cx, &server, frame, None);
        }
        self.end_task_round(backends, eras, cx, task_id);
    }
}
