//! Translation between eras for input requests, the other way round from
//! `input_required.rs`: a stateless-era backend answers a handshake-era client's
//! call `input_required` (it needs sampling, elicitation or roots from the
//! client). That client cannot read such a result; it expects the server to ask
//! it. So tether asks: each input request becomes a server-to-client request to
//! the session whose call it is, related to that call. When every answer is in,
//! the call is sent to the backend again (a new id) with the answers as
//! `inputResponses` and the backend's `requestState` echoed, and that answer (or
//! the next round) answers the client's original request.
//!
//! A round is bounded by `limits.max_pending_server_requests` (its requests count
//! there) and by the call's hard timeout; a client that closes takes its rounds
//! with it.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::super::backends::Backends;
use super::super::calls::{ClientCall, InputRound, ServerRequest};
use super::super::cx::Cx;
use super::bridge::RoundAnswer;
use super::EraBridge;
use crate::io::SessionId;
use crate::protocol::{self, code};
use crate::time::Duration;

use crate::protocol::input_capability as capability;

impl EraBridge {
    /// `result` (an `input_required` answer of stateless backend `server` to
    /// `call`, a handshake-era client's) starts a round of requests to the client.
    pub(in crate::gateway) fn start_input_round(
        &mut self,
        backends: &mut Backends,
        cx: &mut Cx<'_>,
        server: &str,
        call: ClientCall,
        result: &str,
    ) {
        let mut result: Map<String, Value> = serde_json::from_str(result).unwrap_or_default();
        let request_state = result.remove("requestState").map(|s| s.to_string());
        let requests = match result.remove("inputRequests") {
            Some(Value::Object(requests)) => requests,
            _ => Map::new(),
        };
        let deadline = call.created + Duration::from_millis(cx.config.policy_for(server).request_timeout_max_ms);
        let mut round = InputRound {
            server: backends.name(server),
            call,
            request_state,
            asked: BTreeMap::new(),
            answers: BTreeMap::new(),
            deadline,
        };
        if requests.is_empty() {
            // Only a requestState: the backend asks for the same request again
            // (load shedding, or a step of its own). Send it again at once.
            return self.finish_input_round(backends, cx, round);
        }
        let session = round.call.session;
        let room =
            (cx.config.limits.max_pending_server_requests as usize).saturating_sub(cx.router.server_requests.len());
        if requests.len() > room {
            let msg =
                format!("backend '{server}' needs input from the client, but too many requests are pending at clients");
            return Self::fail_round(cx, &round, code::OVERLOADED, &msg);
        }
        for request in requests.values() {
            let method = request.get("method").and_then(Value::as_str).unwrap_or("");
            let supported =
                capability(method).is_some_and(|c| cx.sessions.open.get(&session).is_some_and(|s| s.supports(c)));
            if !supported {
                let method = if method.is_empty() { "an unknown input" } else { method };
                let msg =
                    format!("backend '{server}' needs {method} from the client, which this client does not offer");
                return Self::fail_round(cx, &round, code::INTERNAL_ERROR, &msg);
            }
        }
        let mut frames = Vec::new();
        let round_id = cx.router.alloc_id();
        let generation = backends[server].sup.generation();
        for (key, request) in requests {
            let method = request.get("method").and_then(Value::as_str).unwrap_or("").to_string();
            let client_id = cx.router.alloc_id();
            let params = request.get("params").map(Value::to_string);
            frames.push(protocol::request(client_id, &method, params.as_deref()));
            let related = Some(round.call.id.clone());
            let r = ServerRequest {
                server: backends.name(server),
                generation,
                backend_id: key.clone(),
                session,
                related,
                round: Some(round_id),
                defaults: (method == "elicitation/create")
                    .then(|| protocol::elicitation_defaults(params.as_deref()))
                    .flatten(),
                task: None,
            };
            cx.router.server_requests.insert(client_id, r);
            round.asked.insert(key, method);
        }
        let related = round.call.id.clone();
        self.open_round(round_id, round);
        for frame in frames {
            cx.related_to_client(session, Some(&related), frame);
        }
    }

    /// The client answered one input request of round `round_id` (`key`).
    pub(in crate::gateway) fn input_answered(
        &mut self,
        backends: &mut Backends,
        cx: &mut Cx<'_>,
        round_id: u64,
        key: &str,
        answer: Result<&str, &str>,
    ) {
        match self.answer_round(round_id, key, answer) {
            RoundAnswer::Waiting => {}
            RoundAnswer::Complete(round) => self.finish_input_round(backends, cx, round),
            RoundAnswer::Refused { round, method } => {
                Self::cancel_round_requests(cx, round_id, "the call failed");
                let error = answer.err().unwrap_or_default();
                let msg = format!("the client refused {method}, which backend '{}' needs: {error}", round.server);
                Self::fail_round(cx, &round, code::INTERNAL_ERROR, &msg);
            }
        }
    }

    /// Fails the calls of `server` waiting for their clients' inputs, withdrawing
    /// the requests still out (the backend is gone).
    pub(in crate::gateway) fn fail_input_rounds_of(&mut self, cx: &mut Cx<'_>, server: &str, message: &str) {
        for (round_id, round) in self.take_rounds_of(server) {
            Self::cancel_round_requests(cx, round_id, message);
            Self::fail_round(cx, &round, code::BACKEND_UNAVAILABLE, message);
        }
    }

    /// Every input is in: the call goes to the backend again with them.
    fn finish_input_round(&mut self, backends: &mut Backends, cx: &mut Cx<'_>, round: InputRound) {
        if !backends.contains_key(&round.server) {
            let message = format!("backend '{}' was removed", round.server);
            return Self::fail_round(cx, &round, code::BACKEND_UNAVAILABLE, &message);
        }
        let InputRound { server, mut call, request_state, answers, .. } = round;
        let responses: Vec<String> =
            answers.iter().map(|(key, value)| format!("{}:{value}", protocol::quote(key))).collect();
        let responses = format!("{{{}}}", responses.join(","));
        let responses = (!answers.is_empty()).then_some(responses.as_str());
        call.params =
            call.params.with_fields(&[("inputResponses", responses), ("requestState", request_state.as_deref())]);
        call.retries = 0;
        cx.admit(server, call);
    }

    fn fail_round(cx: &mut Cx<'_>, round: &InputRound, code: i64, message: &str) {
        cx.reply_error(round.call.session, &round.call.id, code, message, None);
        cx.release(&round.call);
    }

    /// Withdraws the requests of a round still pending at the client.
    fn cancel_round_requests(cx: &mut Cx<'_>, round_id: u64, reason: &str) {
        let pending: Vec<u64> =
            cx.router.server_requests.iter().filter(|(_, r)| r.round == Some(round_id)).map(|(id, _)| *id).collect();
        for id in pending {
            let Some(r) = cx.router.server_requests.remove(&id) else { continue };
            let params = format!(r#"{{"requestId":{id},"reason":{}}}"#, protocol::quote(reason));
            let frame = protocol::notification("notifications/cancelled", Some(&params));
            cx.related_to_client(r.session, r.related.as_deref(), frame);
        }
    }

    /// A round ran past its call's hard timeout: the client's call fails.
    pub(in crate::gateway) fn input_round_expired(&mut self, cx: &mut Cx<'_>, round_id: u64) {
        let Some(round) = self.take_round(round_id) else { return };
        Self::cancel_round_requests(cx, round_id, "timed out");
        let msg = format!("the client did not provide the input backend '{}' needs in time", round.server);
        Self::fail_round(cx, &round, code::REQUEST_TIMEOUT, &msg);
    }

    /// The client's call `id` waits in an input round: cancelled by the client.
    pub(in crate::gateway) fn cancel_input_round(&mut self, cx: &mut Cx<'_>, session: SessionId, id: &str) -> bool {
        let Some(round_id) = self.round_of(session, id) else { return false };
        Self::cancel_round_requests(cx, round_id, "cancelled by the client");
        if let Some(round) = self.take_round(round_id) {
            cx.release(&round.call);
        }
        true
    }
}
