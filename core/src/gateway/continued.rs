//! A stateless-era client's retry that carries a `requestState`: tether's own
//! token is checked (see [`crate::continuation`]) and the call it names is
//! continued here, resent when another replica held it and running it again is
//! safe, or refused at once with a message that says why; a stateless backend's
//! own state goes to the backend.

use alloc::format;
use alloc::string::{String, ToString};
use serde_json::{Map, Value};

use super::calls::ClientCall;
use super::Gateway;
use crate::catalog::ListKind;
use crate::continuation::{self, Opened, Refusal, Request};
use crate::io::{RawId, SessionId};
use crate::protocol::code;

impl Gateway {
    /// Handles a retry under `state`; `false` when it is not tether's to handle
    /// (a stateless backend's own state: the request is routed as usual).
    pub(super) fn continue_request(
        &mut self,
        session: SessionId,
        id: &RawId,
        method: &str,
        params: Option<&str>,
        state: &str,
        to_stateless: bool,
    ) -> bool {
        let Some(subject) = self.continued_subject(session, method, params) else {
            // Nothing here by that name: routing says so (or waits for it).
            return false;
        };
        let principal = self.sessions.principal(session).map(String::from);
        let request = Request { subject: &subject, principal: principal.as_deref() };
        let now = self.wall_clock.unix_ms(self.now);
        match self.ids.continuations.open(state, request, now) {
            Ok(Opened::Here(local)) => {
                let id = id.clone();
                self.parts(|p, cx| p.eras.resume_with_inputs(p.backends, cx, session, id, &local, params));
            }
            Ok(Opened::Elsewhere) => self.resend_continued(session, id, method, params),
            Ok(Opened::Backend(backend_state)) => {
                // The backend's own state, checked for this principal and request: back to it.
                let Some(Ok(mut unwrapped)) = params.map(serde_json::from_str::<Map<String, Value>>) else {
                    return true;
                };
                unwrapped.insert("requestState".into(), Value::String(backend_state));
                let unwrapped = Value::Object(unwrapped).to_string();
                self.client_request(session, id.clone(), method, Some(&unwrapped), None);
            }
            // Not tether's token: a stateless backend's own (even another tether's) is the backend's to check.
            Err(Refusal::Malformed | Refusal::Tampered | Refusal::UnknownKey) if to_stateless => return false,
            Err(refusal) => self.reply_error(session, id, code::INVALID_PARAMS, refusal.message(), None),
        }
        true
    }

    /// What the retried request asks of whom, named as the token that
    /// continues it names it ([`super::eras::call_subject`]); `None` when
    /// nothing here answers to that name.
    fn continued_subject(&self, session: SessionId, method: &str, params: Option<&str>) -> Option<String> {
        let params: Map<String, Value> = serde_json::from_str(params?).ok()?;
        match method {
            "resources/read" => {
                let (server, uri) = self.catalog.resolve_uri(params.get("uri")?.as_str()?)?;
                Some(continuation::subject(server, method, uri, None))
            }
            _ => {
                let name = params.get("name")?.as_str()?;
                let r = match method {
                    "tools/call" => self.view(session).tool(name)?,
                    _ => self.view(session).prompt(name)?,
                };
                Some(continuation::subject(r.server, method, &r.entry.original, params.get("arguments")))
            }
        }
    }

    /// A good token from another replica (or from this process before a
    /// restart): the call it continued is not here. Run the request again
    /// from the start when that is safe (its backend asks for the input again),
    /// else refuse at once.
    fn resend_continued(&mut self, session: SessionId, id: &RawId, method: &str, params: Option<&str>) {
        let Some(Ok(mut fresh)) = params.map(serde_json::from_str::<Map<String, Value>>) else { return };
        let name = fresh.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        let safe = match method {
            "resources/read" | "prompts/get" => true,
            _ => self
                .view(session)
                .tool(&name)
                .is_some_and(|r| r.entry.retry_safe || self.config.policy_for(r.server).retry_unsafe_calls),
        };
        if !safe {
            let msg = format!(
                "this requestState continues a call that another tether replica holds (one that stopped, or \
                 that this one cannot reach); {name} is not marked read-only or idempotent, so tether does not run \
                 it again on its own: call it again without requestState if you mean to"
            );
            return self.reply_error(session, id, code::INVALID_PARAMS, &msg, None);
        }
        fresh.remove("requestState");
        fresh.remove("inputResponses");
        let fresh = Value::Object(fresh).to_string();
        match method {
            "tools/call" => self.route_named(session, id.clone(), "tools/call", Some(&fresh), ListKind::Tools, true),
            "prompts/get" => {
                self.route_named(session, id.clone(), "prompts/get", Some(&fresh), ListKind::Prompts, true)
            }
            _ => self.client_request(session, id.clone(), method, Some(&fresh), None),
        }
    }
}

impl Gateway {
    /// A stateless backend's `input_required` `result` for `call`, on its way
    /// to a stateless client: the backend's own `requestState` goes inside a
    /// token bound to the client's principal and request, so another identity
    /// cannot continue it even given it (to the backend, every client of tether
    /// is one). A state over [`continuation::MAX_BACKEND_STATE`] bytes goes as it is.
    pub(super) fn wrap_backend_state(&mut self, server: &str, call: &ClientCall, result: &str) -> Option<String> {
        let mut parsed: Map<String, Value> = serde_json::from_str(result).ok()?;
        let Some(Value::String(state)) = parsed.get("requestState") else { return None };
        if state.len() > continuation::MAX_BACKEND_STATE {
            return None;
        }
        let subject = super::eras::call_subject(server, call.method, call.params.body());
        let principal = self.sessions.principal(call.session);
        let deadline = self.now + crate::time::Duration::from_millis(self.config.policy.request_timeout_max_ms);
        let request = Request { subject: &subject, principal };
        let token = self.ids.continuations.wrap(state, request, self.wall_clock.unix_ms(deadline));
        parsed.insert("requestState".into(), Value::String(token));
        Some(Value::Object(parsed).to_string())
    }
}
