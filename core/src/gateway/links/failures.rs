//! Transport failures: a request that failed, a session the server forgot, a
//! connection that is gone, and what becomes of the calls on it (resent under
//! the safety rule, or failed with the backend's status).

use crate::gateway::calls::{Call, CallKind, ClientCall, Queued};
use crate::io::Event;
use crate::metrics::CallOutcome;
use crate::policy::{Failure, FailureStatus};
use crate::protocol::{code, Era};
use crate::supervisor::{AfterLoss, Readiness};
use crate::time::Duration;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::gateway::backends::Backends;
use crate::gateway::cx::Cx;

impl Backends {
    /// A transport failure on the live connection, for one request or all of it.
    pub(in crate::gateway) fn backend_failed(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        request: Option<u64>,
        failure: Failure,
    ) {
        let class = failure.classify();
        if failure.is_auth() && self[server].credential.is_some() {
            return self.unauthorized(cx, server, request, failure);
        }
        let Some(request) = request else {
            return self.connection_lost(cx, server, failure);
        };
        let generation = self[server].sup.generation();
        let Some(call) = cx.router.calls.get(&request).filter(|c| &*c.server == server && c.generation == generation)
        else {
            return;
        };
        // A probe answered with an HTTP error and no stateless error body: a
        // handshake-era server (the specification's HTTP fallback rule).
        let legacy_status = matches!(failure, Failure::Http { status: 400..=499 })
            && !matches!(failure, Failure::Http { status: 401 | 403 | 408 | 429 });
        if matches!(call.kind, CallKind::Probe { may_initialize: true }) && legacy_status {
            cx.router.calls.remove(&request);
            return self.send_initialize(cx, server, false);
        }
        if class.status == FailureStatus::SessionLost {
            return self.session_lost(cx, server, Some(request));
        }
        if class.status == FailureStatus::RequiresReauth {
            return self.connection_lost(cx, server, failure);
        }
        let call = cx.router.calls.remove(&request).expect("checked above");
        match call.kind {
            CallKind::Client(c) => self.client_call_failed(cx, server, c, &failure),
            CallKind::Quiet => {}
            CallKind::Listen => self.listen_ended(server, request, None),
            CallKind::Health => {
                self.get_mut(server).expect("live").sup.schedule_health(cx.now, cx.rng);
                self.health_failed(cx, server, failure.describe());
            }
            CallKind::Initialize { .. } | CallKind::Probe { .. } | CallKind::Discover { .. } => {
                self.connection_lost(cx, server, failure)
            }
        }
    }

    /// A forwarded call failed in transport: retry under the safety rule, else
    /// fail it, count it, and mark the backend down when the transport is.
    pub(in crate::gateway) fn client_call_failed(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        call: ClientCall,
        failure: &Failure,
    ) {
        let message = format!("backend '{server}' failed: {}", failure.describe());
        self.client_call_failed_with(cx, server, call, failure, message);
    }

    /// [`Gateway::client_call_failed`], with `why` the transport failed in the
    /// client's error.
    pub(in crate::gateway) fn client_call_failed_because(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        call: ClientCall,
        failure: &Failure,
        why: &str,
    ) {
        let message = format!("backend '{server}' failed: {why}");
        self.client_call_failed_with(cx, server, call, failure, message);
    }

    pub(in crate::gateway) fn client_call_failed_with(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        mut call: ClientCall,
        failure: &Failure,
        message: String,
    ) {
        let class = failure.classify();
        let b = &self[server];
        let delays = &b.sup.policy().call_retry_delays_ms;
        let safe = class.delivery == crate::policy::Delivery::NotDelivered
            || call.retry_safe
            || b.sup.policy().retry_unsafe_calls;
        if class.retryable && safe && (call.retries as usize) < delays.len() {
            let wait = Duration::from_millis(delays[call.retries as usize]);
            call.retries += 1;
            let not_before = cx.now + wait;
            let deadline = call.created + Duration::from_millis(b.sup.policy().request_timeout_max_ms);
            self.requeue(cx, server, Queued { call, not_before, deadline: deadline.max(not_before) }, false);
            return;
        }
        self.count_failure(cx, server, class.counts_for_breaker, call.probe);
        // Mark the backend down first, so the error's data shows the status and the retry.
        // Only a request that certainly never arrived (refused, DNS) says the backend
        // is unreachable; a slow or reset answer is the breaker's business.
        if class.delivery == crate::policy::Delivery::NotDelivered && class.status == FailureStatus::Offline {
            self.connection_lost(cx, server, failure.clone());
        }
        let data = self.unavailable_data(server, cx.now);
        cx.reply_error(call.session, &call.id, code::BACKEND_UNAVAILABLE, &message, Some(&data));
        self.record_call(server, &call, CallOutcome::Failed, cx.now);
        cx.release(&call);
    }

    /// HTTP 404 on a session: re-initialize and resend the request (if one was
    /// refused) once. A second loss before anything succeeds is a failure with
    /// backoff, not a hot loop.
    pub(in crate::gateway) fn session_lost(&mut self, cx: &mut Cx<'_>, server: &str, request: Option<u64>) {
        let b = self.get_mut(server).expect("live");
        b.session_losses = b.session_losses.saturating_add(1);
        let handshaking = !b.sup.is_ready();
        if handshaking && b.session_losses == 1 && !b.catalog_discovered {
            // Never opened: no session to lose. A 404 to the first request is a URL
            // that names no MCP endpoint, most often a wrong path.
            let message = "HTTP 404: nothing answers MCP at this URL; check its path in the config".into();
            return self.connection_lost(cx, server, Failure::Other { message });
        }
        if handshaking || b.session_losses > 1 {
            return self.connection_lost(
                cx,
                server,
                Failure::Other { message: "backend session lost (HTTP 404)".into() },
            );
        }
        let lost = match request.and_then(|r| cx.router.calls.remove(&r)) {
            Some(Call { kind: CallKind::Client(c), .. }) => Some(c),
            _ => None,
        };
        let others = self.drop_connection(cx, server, "backend session lost (HTTP 404)", true);
        // The rejected request never ran: resend it. Others on the lost session may
        // have run: resend them only when that is safe, else fail them.
        let retry_unsafe = self[server].sup.policy().retry_unsafe_calls;
        let (safe, unsafe_): (Vec<ClientCall>, Vec<ClientCall>) =
            others.into_iter().partition(|c| (c.retry_safe || retry_unsafe) && !c.resent);
        let deadline = cx.now + Duration::from_millis(self[server].sup.policy().request_timeout_ms);
        for mut c in lost.into_iter().chain(safe).rev() {
            c.resent = true;
            self.requeue(cx, server, Queued { call: c, not_before: cx.now, deadline }, true);
        }
        self.connect(cx, server);
        for c in unsafe_ {
            if c.probe {
                self.get_mut(server).expect("live").sup.breaker.probe_abandoned();
            }
            let msg = format!(
                "backend '{server}' lost its session (HTTP 404) while this call was in flight; it may have run, so it was not resent"
            );
            let data = self.unavailable_data(server, cx.now);
            cx.reply_error(c.session, &c.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
            self.record_call(server, &c, CallOutcome::Failed, cx.now);
            cx.release(&c);
        }
    }

    /// The connection is gone (exit, refused, handshake failure, timeout).
    pub(in crate::gateway) fn connection_lost(&mut self, cx: &mut Cx<'_>, server: &str, failure: Failure) {
        let now = cx.now;
        let Some(b) = self.get(server) else { return };
        let message = b.failure_message(&failure);
        let first_crash = b.sup.crashes.count(now) == 0;
        let vital = b.sup.is_vital();
        let resend_allowed = vital || first_crash;
        // A process that exits while it is probed is a handshake-era server that
        // cannot take a request before `initialize`: the next one is not probed.
        let probed = cx
            .router
            .calls
            .values()
            .any(|c| &*c.server == server && matches!(c.kind, CallKind::Probe { may_initialize: true }));
        let in_flight = self.drop_connection(cx, server, &message, true);
        let b = self.get_mut(server).expect("live");
        if probed && matches!(failure, Failure::Exited { .. }) {
            b.era_learned = Some(Era::Handshake);
        }
        // A process that crashed is discovered afresh, even one woken from dormant.
        b.skip_discovery = false;
        let after = b.sup.on_connection_lost(now, &failure, message.clone(), cx.rng);
        // Calls waiting for this connection fail with the structured status.
        let waiting = b.queue.take_all();
        for q in waiting {
            self.fail_unavailable(cx, server, q.call);
        }
        let mut resend = Vec::new();
        for c in in_flight {
            let safe = c.retry_safe || self[server].sup.policy().retry_unsafe_calls;
            if resend_allowed && safe && !c.resent && after.is_retry() {
                resend.push(c);
            } else {
                let class = failure.classify();
                self.count_failure(cx, server, class.counts_for_breaker, c.probe);
                if matches!(after, AfterLoss::Reauth) {
                    let msg = self.reauth_message(server);
                    self.fail_reauth(cx, server, c, &msg);
                    continue;
                }
                let msg = format!("backend '{server}' disconnected: {message}");
                let data = self.unavailable_data(server, cx.now);
                cx.reply_error(c.session, &c.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
                self.record_call(server, &c, CallOutcome::Failed, cx.now);
                cx.release(&c);
            }
        }
        match after {
            AfterLoss::Reconnect { attempt, delay } => self.announce_reconnect(cx, server, attempt, delay.as_millis()),
            AfterLoss::GaveUp { crashes } => {
                let window_ms = self[server].sup.policy().crash_window_ms;
                self.emit(cx, Event::ServerPermanentlyFailed { server: self.name(server), crashes, window_ms });
            }
            AfterLoss::Restart { .. } | AfterLoss::Reauth => {}
        }
        if !resend.is_empty() {
            let deadline = now + Duration::from_millis(self[server].sup.policy().request_timeout_ms);
            for mut c in resend {
                c.resent = true;
                self.requeue(cx, server, Queued { call: c, not_before: now, deadline }, false);
            }
            // Respawn now and retry once on the fresh process.
            let b = self.get_mut(server).expect("live");
            if !b.queue.is_empty() && b.sup.readiness(now) == Readiness::StartNow {
                self.connect(cx, server);
            }
        }
    }

    /// Puts a call back in its backend's queue (a retry or a resend), or fails it
    /// when the queue is full: the bound holds on every path.
    pub(in crate::gateway) fn requeue(&mut self, cx: &mut Cx<'_>, server: &str, queued: Queued, front: bool) {
        if queued.call.awaiting_input.is_some() {
            // Its client was answered `input_required` for requests of the
            // connection that failed: those are gone, so the call cannot go on
            // (a fresh process would ask afresh). The client's retry gets this.
            let call = queued.call;
            if call.probe {
                self.get_mut(server).expect("live").sup.breaker.probe_abandoned();
            }
            let msg = format!(
                "backend '{server}' lost the connection that asked for this input; send the request again without it"
            );
            cx.reply_error(call.session, &call.id, code::BACKEND_UNAVAILABLE, &msg, None);
            self.record_call(server, &call, CallOutcome::Failed, cx.now);
            return cx.release(&call);
        }
        let limit = cx.config.limits.max_queued_per_backend as usize;
        let b = self.get_mut(server).expect("live");
        let Err(queued) = b.queue.try_push(queued, front, limit) else { return };
        let call = queued.call;
        if call.probe {
            b.sup.breaker.probe_abandoned();
        }
        let msg = format!("backend '{server}': too many calls waiting for this backend, so this one was not retried");
        cx.reply_error(call.session, &call.id, code::OVERLOADED, &msg, None);
        self.record_call(server, &call, CallOutcome::Failed, cx.now);
        cx.release(&call);
    }
}
