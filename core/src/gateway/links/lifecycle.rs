//! Closing, removing and restarting backends, their timers (restart, reconnect,
//! health checks, idle), the queue of calls waiting for a backend, and the
//! status data a failed call carries.

use crate::gateway::calls::{CallKind, ClientCall};
use crate::io::Status;
use crate::metrics::CallOutcome;
use crate::policy::Failure;
use crate::protocol::{self, code};
use crate::supervisor::Timer;
use alloc::format;
use alloc::string::{String, ToString};

use crate::gateway::backends::Backends;
use crate::gateway::cx::Cx;

impl Backends {
    /// Closes a backend on purpose and rests it in `status`.
    pub(in crate::gateway) fn close_backend(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        status: Status,
        message: Option<String>,
    ) {
        let reason = message.clone().unwrap_or_else(|| status.as_str().to_string());
        let in_flight = self.drop_connection(cx, server, &reason, false);
        let b = self.get_mut(server).expect("live");
        b.skip_discovery = false;
        b.sup.on_closed(status, message);
        let waiting = b.queue.take_all();
        for c in in_flight.into_iter().chain(waiting.into_iter().map(|q| q.call)) {
            if let Some(b) = self.get_mut(server) {
                if c.probe {
                    b.sup.breaker.probe_abandoned();
                }
            }
            let msg = format!("backend '{server}' was closed: {reason}");
            let data = self.unavailable_data(server, cx.now);
            cx.reply_error(c.session, &c.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
            self.record_call(server, &c, CallOutcome::Failed, cx.now);
            cx.release(&c);
        }
    }

    /// A changed transport (or a catalog to rebuild): close and start over.
    pub(in crate::gateway) fn restart_for_config(&mut self, cx: &mut Cx<'_>, server: &str) {
        self.close_backend(cx, server, Status::Restarting, Some("configuration changed".into()));
        let b = self.get_mut(server).expect("live");
        b.sup.reset_history();
        self.connect(cx, server);
    }

    /// Admin reconnect (or restart, which also clears history). An operator's
    /// reconnect also starts the credential's backoff over.
    pub(in crate::gateway) fn reconnect_now(&mut self, cx: &mut Cx<'_>, server: &str, clear_history: bool) {
        self.reconnect(cx, server, clear_history, true);
    }

    /// Reconnects at once: for an operator (`operator`), or because a backend that
    /// refused its credential has a new one (then the credential's backoff, which
    /// counts refusals of fresh tokens, stands).
    pub(in crate::gateway) fn reconnect(&mut self, cx: &mut Cx<'_>, server: &str, clear_history: bool, operator: bool) {
        let status = self[server].sup.status();
        let given_up = matches!(status, Status::PermanentlyFailed | Status::RequiresReauth | Status::Disconnected);
        let b = self.get_mut(server).expect("live");
        // An operator's reconnect starts over: the catalog is discovered again.
        b.skip_discovery = false;
        if clear_history || given_up {
            b.sup.reset_history();
        }
        // A backend waiting for a login asks the credential store afresh.
        if given_up && operator {
            if let Some(c) = b.credential.as_mut() {
                c.reset();
            }
        }
        if self[server].sup.is_connected() {
            self.drop_connection(cx, server, "reconnect requested", false).into_iter().for_each(|c| {
                self.fail_unavailable(cx, server, c);
            });
        }
        self.connect(cx, server);
    }

    /// A backend timer fired.
    pub(in crate::gateway) fn backend_timer(&mut self, cx: &mut Cx<'_>, server: &str) {
        let now = cx.now;
        let b = self.get_mut(server).expect("live");
        if let Some(step) = b.credential.as_mut().and_then(|c| c.on_timer(now)) {
            return self.authorize(cx, server, step);
        }
        if self.resume_due_stream(cx, server) {
            return;
        }
        let b = self.get_mut(server).expect("live");
        let Some(timer) = b.sup.take_expired(now) else {
            return self.queue_timer(cx, server);
        };
        match timer {
            Timer::Retry => self.connect(cx, server),
            Timer::ConnectDeadline => self.connection_lost(cx, server, Failure::Timeout),
            Timer::HealthCheck => self.health_check(cx, server),
            Timer::Idle => {
                // A health check in flight is not traffic.
                let busy = cx.router.calls.values().any(|c| {
                    &*c.server == server && !matches!(c.kind, CallKind::Health | CallKind::Listen | CallKind::Quiet)
                }) || !b.queue.is_empty();
                if busy || !b.sup.is_ready() {
                    b.sup.touch(now);
                } else {
                    self.close_backend(cx, server, Status::Dormant, Some("idle".into()));
                    self.get_mut(server).expect("live").skip_discovery = true;
                }
            }
        }
    }

    /// Queued calls: dispatch those whose retry wait ended, fail those past deadline.
    pub(in crate::gateway) fn queue_timer(&mut self, cx: &mut Cx<'_>, server: &str) {
        let now = cx.now;
        let b = self.get_mut(server).expect("live");
        let expired = b.queue.take_where(|q| q.deadline <= now);
        for q in expired {
            let data = self.unavailable_data(server, cx.now);
            let msg = format!("backend '{server}' did not become available in time");
            if q.call.probe {
                self.get_mut(server).expect("live").sup.breaker.probe_abandoned();
            }
            cx.reply_error(q.call.session, &q.call.id, code::REQUEST_TIMEOUT, &msg, Some(&data));
            self.record_call(server, &q.call, CallOutcome::Failed, cx.now);
            cx.release(&q.call);
        }
        self.flush_queue(cx, server);
    }

    /// A request passed its deadline.
    pub(in crate::gateway) fn call_timed_out(&mut self, cx: &mut Cx<'_>, id: u64) {
        let Some(call) = cx.router.calls.remove(&id) else { return };
        let server = call.server.clone();
        match call.kind {
            CallKind::Client(c) if c.awaiting_input.is_some() => {
                // The client never came back with its inputs: not the backend's fault.
                let params = format!(r#"{{"requestId":{id},"reason":"the client did not provide its input"}}"#);
                self.send(cx, &server, protocol::notification("notifications/cancelled", Some(&params)), None);
                cx.release(&c);
                if let Some(state) = &c.awaiting_input {
                    cx.input_expired(state);
                }
            }
            CallKind::Client(c) => {
                let params = format!(r#"{{"requestId":{id},"reason":"timed out"}}"#);
                self.send(cx, &server, protocol::notification("notifications/cancelled", Some(&params)), None);
                self.count_failure(cx, &server, true, c.probe);
                let msg = format!("backend '{server}' did not answer {} in time", c.method);
                cx.reply_error(c.session, &c.id, code::REQUEST_TIMEOUT, &msg, None);
                self.record_call(&server, &c, CallOutcome::Failed, cx.now);
                cx.release(&c);
            }
            CallKind::Health => {
                let b = self.get_mut(&server).expect("live");
                b.sup.schedule_health(cx.now, cx.rng);
                self.health_failed(cx, &server, "health check timed out".into());
            }
            CallKind::Discover { .. } => self.discovery_failed(cx, &server),
            CallKind::Quiet | CallKind::Listen | CallKind::Initialize { .. } | CallKind::Probe { .. } => {}
        }
    }

    /// Sends queued calls whose wait is over, if the backend is ready.
    pub(in crate::gateway) fn flush_queue(&mut self, cx: &mut Cx<'_>, server: &str) {
        let now = cx.now;
        let Some(b) = self.get_mut(server) else { return };
        if !b.sup.is_ready() {
            return;
        }
        let epoch = b.credential_epoch();
        let due = b.queue.take_where(|q| q.not_before <= now && q.call.wait_epoch <= epoch);
        for q in due {
            self.dispatch(cx, server, q.call);
        }
    }

    /// Fails a call because its backend cannot serve it now.
    pub(in crate::gateway) fn fail_unavailable(&mut self, cx: &mut Cx<'_>, server: &str, call: ClientCall) {
        if call.probe {
            if let Some(b) = self.get_mut(server) {
                b.sup.breaker.probe_abandoned();
            }
        }
        let b = &self[server];
        let status = b.sup.status();
        if status == Status::RequiresReauth {
            let msg = self.reauth_message(server);
            return self.fail_reauth(cx, server, call, &msg);
        }
        let data = self.unavailable_data(server, cx.now);
        let detail = b.sup.message().map(|m| format!(": {m}")).unwrap_or_default();
        let msg = format!("backend '{server}' is {status}{detail}");
        cx.reply_error(call.session, &call.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
        self.record_call(server, &call, CallOutcome::Failed, cx.now);
        cx.release(&call);
    }
}
