//! Translation between eras for server-to-client requests: a handshake-era
//! backend asks its client (sampling, elicitation, roots) during a call of a
//! stateless-era client, who cannot be sent requests. The call's answer becomes
//! an `input_required` result carrying those requests; the call keeps running at
//! the backend; the client's retry (`inputResponses` + `requestState`) answers the
//! backend's requests and takes the call over.
//!
//! `requestState` names a table entry, single use, bounded by
//! `limits.max_pending_server_requests`, dropped after the call's hard timeout;
//! the client holds it as a token any replica of a cluster can check
//! ([`crate::continuation`]), bound to the principal, the request and an expiry.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use serde_json::{Map, Value};

use super::super::backends::Backends;
use super::super::calls::{AskedInput, CallKind, PendingInput};
use super::super::cx::Cx;
use super::super::Call;
use super::bridge::{input_required_result, refusals, Asked};
use super::EraBridge;
use crate::io::{RawId, SessionId};
use crate::metrics::CallOutcome;
use crate::protocol::{self, code};
use crate::time::Duration;

/// How long the answer to a stateless client's call waits for more requests
/// once a handshake-era backend asked one: requests sent together (a server
/// asking elicitation, sampling and roots at once) make one `input_required`
/// round, as a stateless server would ask them.
const INPUT_GATHER_MS: u64 = 50;

impl EraBridge {
    /// A handshake-era backend asks `method` during stateless call `call`: ask the
    /// client through an `input_required` answer (or add it to the round already
    /// pending), or refuse it when the client did not declare `capability`.
    #[allow(clippy::too_many_arguments)] // the request's facts, and the parts it touches
    pub(in crate::gateway) fn ask_stateless_client(
        &mut self,
        backends: &mut Backends,
        cx: &mut Cx<'_>,
        server: &str,
        call: u64,
        backend_id: &str,
        method: &str,
        params: Option<&str>,
        capability: &str,
    ) {
        let generation = backends[server].sup.generation();
        let Some(Call { kind: CallKind::Client(cc), .. }) = cx.router.calls.get(&call) else { return };
        if !cc.caps.as_ref().is_some_and(|caps| caps.get(capability).is_some_and(Value::is_object)) {
            // Sampling and elicitation are asked for a call. Servers also ask
            // for roots on their own (after connecting, say), so a `roots/list`
            // is only refused: the call it may not belong to goes on.
            if capability == "roots" {
                let msg = "the client did not declare roots for this request";
                let frame = protocol::error_response(backend_id, code::METHOD_NOT_FOUND, msg, None);
                return backends.send(cx, server, frame, None);
            }
            return self.fail_missing_capability(backends, cx, server, call, backend_id, capability);
        }
        let asked = AskedInput {
            generation,
            backend_id: backend_id.to_string(),
            method: method.to_string(),
            params: params.map(String::from),
            in_round: false,
        };
        let awaiting = cc.awaiting_input.clone();
        // The backend names its request: a string id is a fine key (ids are unique
        // among a backend's requests in flight); anything else gets one of ours.
        let named = serde_json::from_str::<String>(backend_id).ok().filter(|k| !k.is_empty() && k.len() <= 64);
        let key = match named {
            Some(k) if !self.key_taken(call, awaiting.as_deref(), &k) => k,
            _ => format!("tether-{}", cx.router.alloc_id()),
        };
        // What a backend asks together (its requests out at once) goes to the
        // client in one round: the answer waits a moment for the rest.
        let limit = cx.config.limits.max_pending_server_requests as usize;
        let deadline = cx.now + Duration::from_millis(INPUT_GATHER_MS);
        let name = backends.name(server);
        if self.ask(call, awaiting.as_deref(), name, key, asked, limit, deadline) == Asked::Full {
            let msg = "too many calls waiting for client input";
            backends.send(cx, server, protocol::error_response(backend_id, code::OVERLOADED, msg, None), None);
        }
    }

    /// The moment for more requests of call `call` passed: the client is
    /// answered `input_required` with everything gathered (or, if the call
    /// ended meanwhile, the backend's requests are refused).
    pub(in crate::gateway) fn gathered(&mut self, backends: &mut Backends, cx: &mut Cx<'_>, call: u64) {
        let Some(gathering) = self.take_gathering(call) else { return };
        match cx.router.calls.get(&call) {
            Some(Call { kind: CallKind::Client(cc), .. }) if cc.awaiting_input.is_none() => {
                let (session, client_id) = (cc.session, cc.id.clone());
                self.answer_input_required(backends, cx, session, &client_id, call, gathering.asked, None);
            }
            _ => {
                let why = "the call ended before its client was asked";
                self.refuse_inputs(backends, cx, &gathering.server, gathering.asked.values(), why);
            }
        }
    }

    /// The backend needs `capability` from a stateless client that did not
    /// declare it in this request: the backend's request is refused, its call is
    /// cancelled there, and the client's call fails with -32021 naming the
    /// capability, as the revision requires of the server the client talks to.
    fn fail_missing_capability(
        &mut self,
        backends: &mut Backends,
        cx: &mut Cx<'_>,
        server: &str,
        call: u64,
        backend_id: &str,
        capability: &str,
    ) {
        let msg = format!("the client did not declare {capability} for this request");
        let frame = protocol::error_response(backend_id, code::METHOD_NOT_FOUND, &msg, None);
        backends.send(cx, server, frame, None);
        let Some(Call { kind: CallKind::Client(cc), .. }) = cx.router.calls.remove(&call) else { return };
        if cc.probe {
            if let Some(b) = backends.get_mut(server) {
                b.sup.breaker.probe_abandoned();
            }
        }
        let params = format!(r#"{{"requestId":{call},"reason":"the client lacks {capability}"}}"#);
        backends.send(cx, server, protocol::notification("notifications/cancelled", Some(&params)), None);
        backends.record_call(server, &cc, CallOutcome::Error, cx.now);
        let data = format!(r#"{{"requiredCapabilities":{{{}:{{}}}}}}"#, protocol::quote(capability));
        let msg = format!(
            "{server} needs the client's {capability} capability for this request; declare it in clientCapabilities"
        );
        let code = protocol::stateless_code::MISSING_REQUIRED_CLIENT_CAPABILITY;
        match &cc.awaiting_input {
            // Already answered `input_required`: the error waits for the retry.
            Some(state) => {
                let error = protocol::error_object(code, &cx.redactor.redact(&msg), Some(&data));
                self.hold_outcome(state, Err(error));
                cx.release(&cc);
            }
            None => cx.reply_error(cc.session, &cc.id, code, &msg, Some(&data)),
        }
    }

    /// Answers the client's request `client_id` with `input_required` for `asked`,
    /// under a fresh `requestState`, and parks call `call` until the retry.
    #[allow(clippy::too_many_arguments)] // the request's facts, and the parts it touches
    fn answer_input_required(
        &mut self,
        backends: &mut Backends,
        cx: &mut Cx<'_>,
        session: SessionId,
        client_id: &str,
        call: u64,
        asked: BTreeMap<String, AskedInput>,
        answer: Option<Result<String, String>>,
    ) {
        let state = cx.ids.next_id();
        let deadline = cx.now + Duration::from_millis(cx.config.policy.request_timeout_max_ms);
        let (server, subject) = match cx.router.calls.get_mut(&call) {
            Some(c) => {
                let mut subject = String::new();
                if let CallKind::Client(cc) = &mut c.kind {
                    cc.awaiting_input = Some(state.clone());
                    subject = call_subject(&c.server, cc.method, cc.params.body());
                }
                // The call's own timeout now waits for the client as well.
                c.deadline = Some(deadline);
                (c.server.clone(), subject)
            }
            None => (backends.name(""), String::new()),
        };
        // The client holds a token any replica can check; the table, the name.
        let principal = cx.sessions.principal(session);
        let request = crate::continuation::Request { subject: &subject, principal };
        let token = cx.ids.continuations.seal(&state, request, cx.wall_clock.unix_ms(deadline));
        let result = input_required_result(&asked, &token);
        cx.reply(session, &RawId::new(client_id), &result);
        // The client's request is answered and its id free for reuse: the
        // call's outcome goes by a name no JSON-RPC id can have, so a new
        // request under the old id never takes (or gives) its answer.
        let client_id = RawId::new(format!("awaiting input {state}"));
        if let Some(Call { kind: CallKind::Client(cc), .. }) = cx.router.calls.get_mut(&call) {
            cc.id = client_id.clone();
        }
        let principal = cx.sessions.open.get(&session).and_then(|s| s.principal.clone());
        let pending = PendingInput { call, server, session, client_id, asked, answer, deadline, principal };
        self.park(state, pending);
    }

    /// A stateless client's retry: its `inputResponses` answer the backend's
    /// requests, and the waiting call answers this request. Inputs still missing
    /// are asked again under a new `requestState`.
    pub(in crate::gateway) fn resume_with_inputs(
        &mut self,
        backends: &mut Backends,
        cx: &mut Cx<'_>,
        session: SessionId,
        id: RawId,
        state: &str,
        params: Option<&str>,
    ) {
        let principal = cx.sessions.principal(session);
        let Some(pending) = self.take_for_retry(state, principal) else {
            return cx.reply_error(session, &id, code::INVALID_PARAMS, "unknown or expired requestState", None);
        };
        let responses: Map<String, Value> = params
            .and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok())
            .and_then(|mut p| p.remove("inputResponses"))
            .and_then(|r| match r {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .unwrap_or_default();
        let mut missing = BTreeMap::new();
        for (key, asked) in pending.asked {
            let current = backends.get(&pending.server).map(|b| b.sup.generation()) == Some(asked.generation);
            match responses.get(&key) {
                Some(Value::Object(answer)) if current => {
                    let result = Value::Object(answer.clone()).to_string();
                    backends.send(cx, &pending.server, protocol::response(&asked.backend_id, &result), None);
                }
                // Asked of a process that is gone: its answer has nowhere to go.
                Some(_) if !current => {}
                Some(_) => {
                    let msg = format!("inputResponses[{}] must be an object", protocol::quote(&key));
                    return cx.reply_error(session, &id, code::INVALID_PARAMS, &msg, None);
                }
                None if current => {
                    missing.insert(key, asked);
                }
                None => {}
            }
        }
        if !missing.is_empty() {
            return self.answer_input_required(backends, cx, session, &id, pending.call, missing, pending.answer);
        }
        if let Some(answer) = pending.answer {
            // The backend answered while the client was away.
            let frame = match &answer {
                Ok(result) => protocol::response(&id, result),
                Err(error) => protocol::raw_error_response(&id, error),
            };
            cx.release_id(session, &id);
            return cx.reply_to_client(session, &id, frame);
        }
        let deadline = cx.now + Duration::from_millis(cx.config.policy_for(&pending.server).request_timeout_ms);
        let Some(call) = cx.router.calls.get_mut(&pending.call) else {
            let msg = "the backend connection was lost while waiting for input; send the request again";
            return cx.reply_error(session, &id, code::BACKEND_UNAVAILABLE, msg, None);
        };
        // The retry takes the call over: its answer (and progress) now go here.
        call.deadline = Some(deadline);
        let mut window = None;
        if let CallKind::Client(cc) = &mut call.kind {
            cc.awaiting_input = None;
            cc.session = session;
            cc.id = id;
            // A call that may become a task gets a fresh sync window from the retry.
            if cc.task_window.is_some() {
                window = Some(cx.now + Duration::from_millis(cx.config.tasks.sync_window_ms));
                cc.task_window = window;
            }
        }
        if let Some(window) = window {
            cx.router.watch_task_window(pending.call, window, cx.now);
        }
    }

    /// Nobody retried in time: the backend's requests get errors (an elicitation
    /// is declined as cancelled) and the entry goes.
    pub(in crate::gateway) fn input_expired(&mut self, backends: &mut Backends, cx: &mut Cx<'_>, state: &str) {
        let Some(pending) = self.take_expired(state) else { return };
        self.refuse_asked(backends, cx, &pending);
    }

    /// Drops entries whose call is gone (its client closed) without an answer.
    pub(in crate::gateway) fn prune_pending_inputs(&mut self, backends: &mut Backends, cx: &mut Cx<'_>) {
        let calls = &cx.router.calls;
        let waits = |call: u64, state: &str| {
            calls
                .get(&call)
                .is_some_and(|c| matches!(&c.kind, CallKind::Client(cc) if cc.awaiting_input.as_deref() == Some(state)))
        };
        for pending in self.take_orphans(waits) {
            self.refuse_asked(backends, cx, &pending);
        }
    }

    fn refuse_asked(&mut self, backends: &mut Backends, cx: &mut Cx<'_>, pending: &PendingInput) {
        let why = "the client did not provide this input in time";
        self.refuse_inputs(backends, cx, &pending.server, pending.asked.values(), why);
    }

    /// Answers inputs nobody will give any more: an elicitation is cancelled,
    /// anything else gets an error saying `why` (only on the connection they
    /// were asked on).
    pub(in crate::gateway) fn refuse_inputs<'a>(
        &mut self,
        backends: &mut Backends,
        cx: &mut Cx<'_>,
        server: &str,
        asked: impl Iterator<Item = &'a AskedInput>,
        why: &str,
    ) {
        let generation = backends.get(server).map(|b| b.sup.generation());
        for frame in refusals(asked, generation, why) {
            backends.send(cx, server, frame, None);
        }
    }
}

/// What call `method` with backend params `body` asks of `server`, as
/// [`crate::continuation::subject`] names it: the same as the client's retry
/// names it on any replica (see `Gateway::continued_subject`).
pub(in crate::gateway) fn call_subject(server: &str, method: &str, body: &str) -> String {
    let params: Map<String, Value> = serde_json::from_str(body).unwrap_or_default();
    let (target, arguments) = match method {
        "resources/read" => (params.get("uri").and_then(Value::as_str).unwrap_or(""), None),
        _ => (params.get("name").and_then(Value::as_str).unwrap_or(""), params.get("arguments")),
    };
    crate::continuation::subject(server, method, target, arguments)
}
