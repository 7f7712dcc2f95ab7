//! Remote backends' OAuth credentials: what a refusal (401, 403) or a report from
//! the host means for the backend's connection and the calls waiting on it. The
//! credential's own rules are in [`crate::credential`].

use crate::credential::{AuthStep, Challenge, CredentialUpdate, Next};
use crate::gateway::calls::{CallKind, ClientCall, Queued};
use crate::gateway::HostError;
use crate::io::{SessionId, Status};
use crate::metrics::CallOutcome;
use crate::policy::Failure;
use crate::protocol::{self, code};
use crate::time::Duration;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use crate::gateway::backends::Backends;
use crate::gateway::cx::Cx;

impl Backends {
    /// The host reported on a backend's credential.
    pub(in crate::gateway) fn credential_update(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        update: CredentialUpdate,
    ) -> Result<(), HostError> {
        let now = cx.now;
        let next_id = cx.router.next_request_id;
        let Some(b) = self.get_mut(server) else { return Ok(()) };
        let Some(credential) = b.credential.as_mut() else { return Ok(()) };
        let next = credential.on_update(now, &update, cx.rng);
        let reauth = *credential.state() == crate::credential::CredentialState::Reauth;
        if matches!(update, CredentialUpdate::Ready { .. }) {
            b.credential_first_id = next_id;
        }
        if matches!(update, CredentialUpdate::Ready { .. }) {
            self.login_done(cx, server);
        }
        let b = &self[server];
        if reauth && b.sup.status() != Status::RequiresReauth && matches!(next, Next::Step(AuthStep::Login { .. })) {
            // A person is needed: say so before preparing the login.
            self.credential_next(cx, server, Next::Reauth);
        }
        self.credential_next(cx, server, next);
        Ok(())
    }

    /// The backend refused tether's credential (401, or 403) on `request` or on
    /// the whole connection, and tether manages that credential.
    pub(in crate::gateway) fn unauthorized(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        request: Option<u64>,
        failure: Failure,
    ) {
        let (status, challenge) = match &failure {
            Failure::Unauthorized { status, challenge } => (*status, challenge.clone()),
            Failure::Http { status } => (*status, Challenge::default()),
            _ => (401, Challenge::default()),
        };
        let b = &self[server];
        let generation = b.sup.generation();
        let sent_before = request.is_some_and(|id| id < b.credential_first_id);
        let call = request.and_then(|id| {
            cx.router.calls.get(&id).filter(|c| &*c.server == server && c.generation == generation).map(|_| id)
        });
        let Some(id) = call else {
            if request.is_some() {
                // An answer to a request that already ended: nothing waits on it.
                return;
            }
            return self.connection_refused(cx, server, status, &challenge, sent_before);
        };
        let call = cx.router.calls.remove(&id).expect("checked above");
        match call.kind {
            CallKind::Client(c) => self.client_call_refused(cx, server, c, status, &challenge, sent_before),
            CallKind::Initialize { .. } | CallKind::Probe { .. } | CallKind::Discover { .. } => {
                cx.router.calls.insert(id, call);
                self.connection_refused(cx, server, status, &challenge, sent_before)
            }
            CallKind::Listen => {
                self.listen_ended(server, id, None);
                self.credential_refused(cx, server, status, &challenge, sent_before);
            }
            CallKind::Health => {
                let b = self.get_mut(server).expect("live");
                b.sup.schedule_health(cx.now, cx.rng);
                self.credential_refused(cx, server, status, &challenge, sent_before);
            }
            CallKind::Quiet => self.credential_refused(cx, server, status, &challenge, sent_before),
        }
    }

    /// A client call was refused: it waits for a new credential and is resent
    /// once, or fails with what the user must do.
    pub(in crate::gateway) fn client_call_refused(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        mut call: ClientCall,
        status: u16,
        challenge: &Challenge,
        sent_before: bool,
    ) {
        let now = cx.now;
        let b = self.get_mut(server).expect("live");
        let credential = b.credential.as_mut().expect("managed");
        let epoch = credential.epoch();
        if call.auth_retried && !sent_before {
            let msg = format!(
                "backend '{server}' refused this call again with a new credential (HTTP {status}){}",
                scope_note(challenge)
            );
            return self.fail_refused(cx, server, call, &msg);
        }
        let next = if status == 403 && challenge.is_insufficient_scope() {
            credential.on_insufficient_scope(challenge)
        } else if status == 403 {
            let msg = format!("backend '{server}' forbids this call (HTTP 403){}", scope_note(challenge));
            return self.fail_refused(cx, server, call, &msg);
        } else {
            credential.on_unauthorized(now, if sent_before { 0 } else { epoch }, challenge, cx.rng)
        };
        match next {
            Next::Reauth | Next::FailWaiting => {
                let msg = if status == 403 {
                    format!("backend '{server}' needs a scope the login did not grant{}", scope_note(challenge))
                } else {
                    self.reauth_message(server)
                };
                self.fail_refused(cx, server, call, &msg)
            }
            next => {
                call.auth_retried = true;
                call.wait_epoch = if matches!(next, Next::Resend) { 0 } else { epoch + 1 };
                let deadline = cx.now + Duration::from_millis(self[server].sup.policy().request_timeout_ms);
                self.requeue(cx, server, Queued { call, not_before: cx.now, deadline }, false);
                self.credential_next(cx, server, next);
            }
        }
    }

    /// The connection itself was refused (its handshake, or the stream): close it
    /// and connect again once a credential is in hand.
    pub(in crate::gateway) fn connection_refused(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        status: u16,
        challenge: &Challenge,
        sent_before: bool,
    ) {
        let now = cx.now;
        let b = self.get_mut(server).expect("live");
        let credential = b.credential.as_mut().expect("managed");
        let epoch = if sent_before { 0 } else { credential.epoch() };
        let next = if status == 403 && challenge.is_insufficient_scope() {
            credential.on_insufficient_scope(challenge)
        } else {
            credential.on_unauthorized(now, epoch, challenge, cx.rng)
        };
        if matches!(next, Next::Reauth | Next::FailWaiting) {
            return self.credential_next(cx, server, Next::Reauth);
        }
        // Calls in flight on the refused connection were refused too: they wait.
        let in_flight = self.drop_connection(cx, server, "waiting for a credential", false);
        let b = self.get_mut(server).expect("live");
        b.sup.on_closed(Status::Connecting, Some(String::from("waiting for a credential")));
        b.awaiting_credential = true;
        let deadline = cx.now + Duration::from_millis(b.sup.policy().request_timeout_ms);
        for mut c in in_flight.into_iter().rev() {
            c.wait_epoch = 0;
            self.requeue(cx, server, Queued { call: c, not_before: cx.now, deadline }, true);
        }
        match next {
            Next::Resend => self.connect(cx, server),
            next => self.credential_next(cx, server, next),
        }
    }

    /// Carries out what the credential's rules decided.
    pub(in crate::gateway) fn credential_next(&mut self, cx: &mut Cx<'_>, server: &str, next: Next) {
        match next {
            Next::Step(AuthStep::Discard) => {
                // The grant is dead: forget it, stop, and prepare a login.
                self.authorize(cx, server, AuthStep::Discard);
                self.credential_next(cx, server, Next::Reauth);
                self.login_wanted(cx, server);
            }
            Next::Step(step) => self.authorize(cx, server, step),
            Next::Wait => self.update_login_message(server),
            Next::Resend => {
                let b = &self[server];
                let status = b.sup.status();
                if status == Status::RequiresReauth {
                    self.reconnect(cx, server, false, false);
                } else if b.awaiting_credential {
                    self.connect(cx, server);
                } else {
                    self.flush_queue(cx, server);
                }
            }
            Next::FailWaiting => {
                let msg = format!("backend '{server}' needs a wider scope and the login for it did not complete");
                self.fail_waiting_for_credential(cx, server, &msg);
            }
            Next::Reauth => {
                let b = self.get_mut(server).expect("live");
                if b.awaiting_credential {
                    // The refused connection is closed already: rest there, and
                    // fail what waited for it with the instructions.
                    b.awaiting_credential = false;
                    let msg = self.login_instructions(server);
                    let b = self.get_mut(server).expect("live");
                    b.sup.on_closed(Status::RequiresReauth, Some(msg));
                    let waiting = b.queue.take_all();
                    for q in waiting {
                        self.fail_unavailable(cx, server, q.call);
                    }
                } else if b.sup.status() != Status::RequiresReauth {
                    let challenge = b.credential.as_ref().map(|c| c.last_refusal().clone()).unwrap_or_default();
                    let failure = Failure::Unauthorized { status: 401, challenge };
                    self.connection_lost(cx, server, failure);
                }
                let msg = self.reauth_message(server);
                self.fail_waiting_for_credential(cx, server, &msg);
                self.update_login_message(server);
            }
        }
    }

    /// Fails the queued calls that wait for a newer credential.
    pub(in crate::gateway) fn fail_waiting_for_credential(&mut self, cx: &mut Cx<'_>, server: &str, message: &str) {
        let b = self.get_mut(server).expect("live");
        let epoch = b.credential_epoch();
        let waiting = b.queue.take_where(|q| q.call.wait_epoch > epoch);
        for q in waiting {
            self.fail_refused(cx, server, q.call, message);
        }
    }

    pub(in crate::gateway) fn fail_refused(&mut self, cx: &mut Cx<'_>, server: &str, call: ClientCall, message: &str) {
        if call.probe {
            if let Some(b) = self.get_mut(server) {
                b.sup.breaker.probe_abandoned();
            }
        }
        self.fail_reauth(cx, server, call, message);
    }

    /// Fails a client call because its backend waits for a person: with the login
    /// as a URL elicitation (-32042) when the backend has one prepared and the
    /// client can open URLs, else with the instructions (-32004).
    pub(in crate::gateway) fn fail_reauth(&mut self, cx: &mut Cx<'_>, server: &str, call: ClientCall, message: &str) {
        let data = self.unavailable_data(server, cx.now);
        match self.login_elicitation(cx.sessions, server, &call, message) {
            Some(elicitation) => {
                let mut data: Map<String, Value> = serde_json::from_str(&data).unwrap_or_default();
                data.insert("elicitations".into(), Value::Array(alloc::vec![elicitation]));
                let data = Value::Object(data).to_string();
                cx.reply_error(call.session, &call.id, code::URL_ELICITATION_REQUIRED, message, Some(&data));
            }
            None => cx.reply_error(call.session, &call.id, code::REAUTH_REQUIRED, message, Some(&data)),
        }
        self.record_call(server, &call, CallOutcome::Failed, cx.now);
        cx.release(&call);
    }

    /// A new credential arrived: the clients asked to open the login hear that it
    /// is done (they may retry).
    pub(in crate::gateway) fn login_done(&mut self, cx: &mut Cx<'_>, server: &str) {
        let Some(e) = self.get_mut(server).and_then(|b| b.login_elicitation.take()) else { return };
        let params = serde_json::json!({"elicitationId": e.id}).to_string();
        let frame = protocol::notification("notifications/elicitation/complete", Some(&params));
        for session in e.sessions {
            if cx.sessions.open.contains_key(&session) {
                cx.to_client(session, frame.clone());
            }
        }
    }
}

/// A login that clients were asked to open (an MCP URL elicitation): its id, and
/// the sessions to tell (`notifications/elicitation/complete`) once it is done.
#[derive(Clone)]
pub(crate) struct LoginElicitation {
    pub(in crate::gateway) id: String,
    pub(in crate::gateway) sessions: Vec<SessionId>,
}

/// " (scope: ...)" when the refusal named the scope it wants.
fn scope_note(challenge: &Challenge) -> String {
    match &challenge.scope {
        Some(scope) => format!(" (scope: {scope})"),
        None => String::new(),
    }
}
