//! Remote backends' OAuth credentials: what a refusal (401, 403) or a report from
//! the host means for the backend's connection and the calls waiting on it. The
//! credential's own rules are in [`crate::credential`].

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::{Map, Value};

use super::calls::{CallKind, ClientCall, Queued};
use super::{Gateway, HostError};
use crate::credential::{AuthStep, Challenge, CredentialUpdate, Next};
use crate::io::{SessionId, Status};
use crate::metrics::CallOutcome;
use crate::policy::Failure;
use crate::protocol::{self, code};
use crate::time::Duration;

/// A login that clients were asked to open (an MCP URL elicitation): its id, and
/// the sessions to tell (`notifications/elicitation/complete`) once it is done.
#[derive(Clone)]
pub(crate) struct LoginElicitation {
    pub(super) id: String,
    pub(super) sessions: Vec<SessionId>,
}

impl Gateway {
    /// The host reported on a backend's credential.
    pub(super) fn credential_update(&mut self, server: &str, update: CredentialUpdate) -> Result<(), HostError> {
        let now = self.now;
        let next_id = self.router.next_request_id;
        let Some(b) = self.backends.get_mut(server) else { return Ok(()) };
        let Some(credential) = b.credential.as_mut() else { return Ok(()) };
        let next = credential.on_update(now, &update, &mut self.rng);
        let reauth = *credential.state() == crate::credential::CredentialState::Reauth;
        if matches!(update, CredentialUpdate::Ready { .. }) {
            b.credential_first_id = next_id;
        }
        if matches!(update, CredentialUpdate::Ready { .. }) {
            self.login_done(server);
        }
        let b = &self.backends[server];
        if reauth && b.sup.status() != Status::RequiresReauth && matches!(next, Next::Step(AuthStep::Login { .. })) {
            // A person is needed: say so before preparing the login.
            self.credential_next(server, Next::Reauth);
        }
        self.credential_next(server, next);
        Ok(())
    }

    /// The backend refused tether's credential (401, or 403) on `request` or on
    /// the whole connection, and tether manages that credential.
    pub(super) fn unauthorized(&mut self, server: &str, request: Option<u64>, failure: Failure) {
        let (status, challenge) = match &failure {
            Failure::Unauthorized { status, challenge } => (*status, challenge.clone()),
            Failure::Http { status } => (*status, Challenge::default()),
            _ => (401, Challenge::default()),
        };
        let b = &self.backends[server];
        let generation = b.sup.generation();
        let sent_before = request.is_some_and(|id| id < b.credential_first_id);
        let call = request.and_then(|id| {
            self.router.calls.get(&id).filter(|c| &*c.server == server && c.generation == generation).map(|_| id)
        });
        let Some(id) = call else {
            if request.is_some() {
                // An answer to a request that already ended: nothing waits on it.
                return;
            }
            return self.connection_refused(server, status, &challenge, sent_before);
        };
        let call = self.router.calls.remove(&id).expect("checked above");
        match call.kind {
            CallKind::Client(c) => self.client_call_refused(server, c, status, &challenge, sent_before),
            CallKind::Initialize { .. } | CallKind::Probe { .. } | CallKind::Discover { .. } => {
                self.router.calls.insert(id, call);
                self.connection_refused(server, status, &challenge, sent_before)
            }
            CallKind::Listen => {
                self.backends.listen_ended(server, id, None);
                self.link(|b, cx| b.credential_refused(cx, server, status, &challenge, sent_before));
            }
            CallKind::Health => {
                let b = self.backends.get_mut(server).expect("live");
                b.sup.schedule_health(self.now, &mut self.rng);
                self.link(|b, cx| b.credential_refused(cx, server, status, &challenge, sent_before));
            }
            CallKind::Quiet => self.link(|b, cx| b.credential_refused(cx, server, status, &challenge, sent_before)),
        }
    }

    /// A client call was refused: it waits for a new credential and is resent
    /// once, or fails with what the user must do.
    fn client_call_refused(
        &mut self,
        server: &str,
        mut call: ClientCall,
        status: u16,
        challenge: &Challenge,
        sent_before: bool,
    ) {
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live");
        let credential = b.credential.as_mut().expect("managed");
        let epoch = credential.epoch();
        if call.auth_retried && !sent_before {
            let msg = format!(
                "backend '{server}' refused this call again with a new credential (HTTP {status}){}",
                scope_note(challenge)
            );
            return self.fail_refused(server, call, &msg);
        }
        let next = if status == 403 && challenge.is_insufficient_scope() {
            credential.on_insufficient_scope(challenge)
        } else if status == 403 {
            let msg = format!("backend '{server}' forbids this call (HTTP 403){}", scope_note(challenge));
            return self.fail_refused(server, call, &msg);
        } else {
            credential.on_unauthorized(now, if sent_before { 0 } else { epoch }, challenge, &mut self.rng)
        };
        match next {
            Next::Reauth | Next::FailWaiting => {
                let msg = if status == 403 {
                    format!("backend '{server}' needs a scope the login did not grant{}", scope_note(challenge))
                } else {
                    self.backends.reauth_message(server)
                };
                self.fail_refused(server, call, &msg)
            }
            next => {
                call.auth_retried = true;
                call.wait_epoch = if matches!(next, Next::Resend) { 0 } else { epoch + 1 };
                let deadline = self.now + Duration::from_millis(self.backends[server].sup.policy().request_timeout_ms);
                self.requeue(server, Queued { call, not_before: self.now, deadline }, false);
                self.credential_next(server, next);
            }
        }
    }

    /// The connection itself was refused (its handshake, or the stream): close it
    /// and connect again once a credential is in hand.
    fn connection_refused(&mut self, server: &str, status: u16, challenge: &Challenge, sent_before: bool) {
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live");
        let credential = b.credential.as_mut().expect("managed");
        let epoch = if sent_before { 0 } else { credential.epoch() };
        let next = if status == 403 && challenge.is_insufficient_scope() {
            credential.on_insufficient_scope(challenge)
        } else {
            credential.on_unauthorized(now, epoch, challenge, &mut self.rng)
        };
        if matches!(next, Next::Reauth | Next::FailWaiting) {
            return self.credential_next(server, Next::Reauth);
        }
        // Calls in flight on the refused connection were refused too: they wait.
        let in_flight = self.link(|b, cx| b.drop_connection(cx, server, "waiting for a credential", false));
        let b = self.backends.get_mut(server).expect("live");
        b.sup.on_closed(Status::Connecting, Some(String::from("waiting for a credential")));
        b.awaiting_credential = true;
        let deadline = self.now + Duration::from_millis(b.sup.policy().request_timeout_ms);
        for mut c in in_flight.into_iter().rev() {
            c.wait_epoch = 0;
            self.requeue(server, Queued { call: c, not_before: self.now, deadline }, true);
        }
        match next {
            Next::Resend => self.connect(server),
            next => self.credential_next(server, next),
        }
    }

    /// Carries out what the credential's rules decided.
    fn credential_next(&mut self, server: &str, next: Next) {
        match next {
            Next::Step(AuthStep::Discard) => {
                // The grant is dead: forget it, stop, and prepare a login.
                self.link(|b, cx| b.authorize(cx, server, AuthStep::Discard));
                self.credential_next(server, Next::Reauth);
                self.link(|b, cx| b.login_wanted(cx, server));
            }
            Next::Step(step) => self.link(|b, cx| b.authorize(cx, server, step)),
            Next::Wait => self.backends.update_login_message(server),
            Next::Resend => {
                let b = &self.backends[server];
                let status = b.sup.status();
                if status == Status::RequiresReauth {
                    self.reconnect(server, false, false);
                } else if b.awaiting_credential {
                    self.connect(server);
                } else {
                    self.flush_queue(server);
                }
            }
            Next::FailWaiting => {
                let msg = format!("backend '{server}' needs a wider scope and the login for it did not complete");
                self.fail_waiting_for_credential(server, &msg);
            }
            Next::Reauth => {
                let b = self.backends.get_mut(server).expect("live");
                if b.awaiting_credential {
                    // The refused connection is closed already: rest there, and
                    // fail what waited for it with the instructions.
                    b.awaiting_credential = false;
                    let msg = self.backends.login_instructions(server);
                    let b = self.backends.get_mut(server).expect("live");
                    b.sup.on_closed(Status::RequiresReauth, Some(msg));
                    let waiting: alloc::vec::Vec<Queued> = b.queue.drain(..).collect();
                    for q in waiting {
                        self.fail_unavailable(server, q.call);
                    }
                } else if b.sup.status() != Status::RequiresReauth {
                    let challenge = b.credential.as_ref().map(|c| c.last_refusal().clone()).unwrap_or_default();
                    let failure = Failure::Unauthorized { status: 401, challenge };
                    self.connection_lost(server, failure);
                }
                let msg = self.backends.reauth_message(server);
                self.fail_waiting_for_credential(server, &msg);
                self.backends.update_login_message(server);
            }
        }
    }

    /// Fails the queued calls that wait for a newer credential.
    fn fail_waiting_for_credential(&mut self, server: &str, message: &str) {
        let b = self.backends.get_mut(server).expect("live");
        let epoch = b.credential_epoch();
        let (waiting, rest): (alloc::vec::Vec<Queued>, alloc::vec::Vec<Queued>) =
            b.queue.drain(..).partition(|q| q.call.wait_epoch > epoch);
        b.queue = rest.into();
        for q in waiting {
            self.fail_refused(server, q.call, message);
        }
    }

    fn fail_refused(&mut self, server: &str, call: ClientCall, message: &str) {
        if call.probe {
            if let Some(b) = self.backends.get_mut(server) {
                b.sup.breaker.probe_abandoned();
            }
        }
        self.fail_reauth(server, call, message);
    }

    /// Fails a client call because its backend waits for a person: with the login
    /// as a URL elicitation (-32042) when the backend has one prepared and the
    /// client can open URLs, else with the instructions (-32004).
    pub(super) fn fail_reauth(&mut self, server: &str, call: ClientCall, message: &str) {
        let data = self.backends.unavailable_data(server, self.now);
        match self.backends.login_elicitation(&self.sessions, server, &call, message) {
            Some(elicitation) => {
                let mut data: Map<String, Value> = serde_json::from_str(&data).unwrap_or_default();
                data.insert("elicitations".into(), Value::Array(alloc::vec![elicitation]));
                let data = Value::Object(data).to_string();
                self.reply_error(call.session, &call.id, code::URL_ELICITATION_REQUIRED, message, Some(&data));
            }
            None => self.reply_error(call.session, &call.id, code::REAUTH_REQUIRED, message, Some(&data)),
        }
        self.backends.record_call(server, &call, CallOutcome::Failed, self.now);
        self.release(&call);
    }

    /// A new credential arrived: the clients asked to open the login hear that it
    /// is done (they may retry).
    fn login_done(&mut self, server: &str) {
        let Some(e) = self.backends.get_mut(server).and_then(|b| b.login_elicitation.take()) else { return };
        let params = serde_json::json!({"elicitationId": e.id}).to_string();
        let frame = protocol::notification("notifications/elicitation/complete", Some(&params));
        for session in e.sessions {
            if self.sessions.open.contains_key(&session) {
                self.to_client(session, frame.clone());
            }
        }
    }
}

/// " (scope: ...)" when the refusal named the scope it wants.
fn scope_note(challenge: &Challenge) -> String {
    match &challenge.scope {
        Some(scope) => format!(" (scope: {scope})"),
        None => String::new(),
    }
}
