//! Closing, removing and restarting backends, their timers (restart, reconnect,
//! health checks, idle), the queue of calls waiting for a backend, and the
//! status data a failed call carries.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::calls::{CallKind, ClientCall, Queued};
use super::Gateway;
use crate::io::Status;
use crate::metrics::CallOutcome;
use crate::policy::Failure;
use crate::protocol::{self, code};
use crate::supervisor::Timer;

impl Gateway {
    /// Closes a backend on purpose and rests it in `status`.
    pub(super) fn close_backend(&mut self, server: &str, status: Status, message: Option<String>) {
        let reason = message.clone().unwrap_or_else(|| status.as_str().to_string());
        let in_flight = self.link(|b, cx| b.drop_connection(cx, server, &reason, false));
        let b = self.backends.get_mut(server).expect("live");
        b.skip_discovery = false;
        b.sup.on_closed(status, message);
        let waiting: Vec<Queued> = b.queue.drain(..).collect();
        for c in in_flight.into_iter().chain(waiting.into_iter().map(|q| q.call)) {
            if let Some(b) = self.backends.get_mut(server) {
                if c.probe {
                    b.sup.breaker.probe_abandoned();
                }
            }
            let msg = format!("backend '{server}' was closed: {reason}");
            let data = self.backends.unavailable_data(server, self.now);
            self.reply_error(c.session, &c.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
            self.backends.record_call(server, &c, CallOutcome::Failed, self.now);
            self.release(&c);
        }
    }

    pub(super) fn remove_backend(&mut self, server: &str) {
        self.close_backend(server, Status::Disconnected, Some("removed from config".into()));
        // Announce its last status change while it still exists; clients hear of the
        // lists it took away once, when the input settles.
        let Some(mut b) = self.backends.remove(server) else { return };
        // Calls waiting for a client's inputs have no backend to go back to.
        self.fail_input_rounds_of(server, &format!("backend '{server}' was removed"));
        self.retired_generations.insert(server.to_string(), b.sup.generation());
        for t in b.sup.drain_transitions() {
            self.emit(t.into_event(self.backends.name(server)));
        }
        // Which backend a URI belongs to is known only while it is registered.
        let catalog = &self.catalog;
        self.sessions.subscriptions.retain(|uri, _| catalog.resolve_uri(uri).map_or(true, |(s, _)| s != server));
        self.catalog.unregister(server);
        self.rations.forget(server);
    }

    /// A changed transport (or a catalog to rebuild): close and start over.
    pub(super) fn restart_for_config(&mut self, server: &str) {
        self.close_backend(server, Status::Restarting, Some("configuration changed".into()));
        let b = self.backends.get_mut(server).expect("live");
        b.sup.reset_history();
        self.connect(server);
    }

    /// Admin reconnect (or restart, which also clears history). An operator's
    /// reconnect also starts the credential's backoff over.
    pub(super) fn reconnect_now(&mut self, server: &str, clear_history: bool) {
        self.reconnect(server, clear_history, true);
    }

    /// Reconnects at once: for an operator (`operator`), or because a backend that
    /// refused its credential has a new one (then the credential's backoff, which
    /// counts refusals of fresh tokens, stands).
    pub(super) fn reconnect(&mut self, server: &str, clear_history: bool, operator: bool) {
        let status = self.backends[server].sup.status();
        let given_up = matches!(status, Status::PermanentlyFailed | Status::RequiresReauth | Status::Disconnected);
        let b = self.backends.get_mut(server).expect("live");
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
        if self.backends[server].sup.is_connected() {
            self.link(|b, cx| b.drop_connection(cx, server, "reconnect requested", false)).into_iter().for_each(|c| {
                self.fail_unavailable(server, c);
            });
        }
        self.connect(server);
    }

    /// A backend timer fired.
    pub(super) fn backend_timer(&mut self, server: &str) {
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live");
        if let Some(step) = b.credential.as_mut().and_then(|c| c.on_timer(now)) {
            return self.link(|b, cx| b.authorize(cx, server, step));
        }
        if self.link(|b, cx| b.resume_due_stream(cx, server)) {
            return;
        }
        let b = self.backends.get_mut(server).expect("live");
        let Some(timer) = b.sup.take_expired(now) else {
            return self.queue_timer(server);
        };
        match timer {
            Timer::Retry => self.connect(server),
            Timer::ConnectDeadline => self.connection_lost(server, Failure::Timeout),
            Timer::HealthCheck => self.link(|b, cx| b.health_check(cx, server)),
            Timer::Idle => {
                // A health check in flight is not traffic.
                let busy = self.router.calls.values().any(|c| {
                    &*c.server == server && !matches!(c.kind, CallKind::Health | CallKind::Listen | CallKind::Quiet)
                }) || !b.queue.is_empty();
                if busy || !b.sup.is_ready() {
                    b.sup.touch(now);
                } else {
                    self.close_backend(server, Status::Dormant, Some("idle".into()));
                    self.backends.get_mut(server).expect("live").skip_discovery = true;
                }
            }
        }
    }

    /// Queued calls: dispatch those whose retry wait ended, fail those past deadline.
    fn queue_timer(&mut self, server: &str) {
        let now = self.now;
        let b = self.backends.get_mut(server).expect("live");
        let (expired, rest): (Vec<Queued>, Vec<Queued>) = b.queue.drain(..).partition(|q| q.deadline <= now);
        b.queue = rest.into();
        for q in expired {
            let data = self.backends.unavailable_data(server, self.now);
            let msg = format!("backend '{server}' did not become available in time");
            if q.call.probe {
                self.backends.get_mut(server).expect("live").sup.breaker.probe_abandoned();
            }
            self.reply_error(q.call.session, &q.call.id, code::REQUEST_TIMEOUT, &msg, Some(&data));
            self.backends.record_call(server, &q.call, CallOutcome::Failed, self.now);
            self.release(&q.call);
        }
        self.flush_queue(server);
    }

    /// A request passed its deadline.
    pub(super) fn call_timed_out(&mut self, id: u64) {
        let Some(call) = self.router.calls.remove(&id) else { return };
        let server = call.server.clone();
        match call.kind {
            CallKind::Client(c) if c.awaiting_input.is_some() => {
                // The client never came back with its inputs: not the backend's fault.
                let params = format!(r#"{{"requestId":{id},"reason":"the client did not provide its input"}}"#);
                self.to_backend(&server, protocol::notification("notifications/cancelled", Some(&params)), None);
                self.release(&c);
                if let Some(state) = &c.awaiting_input {
                    self.input_expired(state);
                }
            }
            CallKind::Client(c) => {
                let params = format!(r#"{{"requestId":{id},"reason":"timed out"}}"#);
                self.to_backend(&server, protocol::notification("notifications/cancelled", Some(&params)), None);
                self.link(|b, cx| b.count_failure(cx, &server, true, c.probe));
                let msg = format!("backend '{server}' did not answer {} in time", c.method);
                self.reply_error(c.session, &c.id, code::REQUEST_TIMEOUT, &msg, None);
                self.backends.record_call(&server, &c, CallOutcome::Failed, self.now);
                self.release(&c);
            }
            CallKind::Health => {
                let b = self.backends.get_mut(&server).expect("live");
                b.sup.schedule_health(self.now, &mut self.rng);
                self.link(|b, cx| b.health_failed(cx, &server, "health check timed out".into()));
            }
            CallKind::Discover { .. } => self.discovery_failed(&server),
            CallKind::Quiet | CallKind::Listen | CallKind::Initialize { .. } | CallKind::Probe { .. } => {}
        }
    }

    /// Sends queued calls whose wait is over, if the backend is ready.
    pub(super) fn flush_queue(&mut self, server: &str) {
        let now = self.now;
        let Some(b) = self.backends.get_mut(server) else { return };
        if !b.sup.is_ready() {
            return;
        }
        let epoch = b.credential_epoch();
        let (due, rest): (Vec<Queued>, Vec<Queued>) =
            b.queue.drain(..).partition(|q| q.not_before <= now && q.call.wait_epoch <= epoch);
        b.queue = rest.into();
        for q in due {
            self.dispatch(server, q.call);
        }
    }

    /// Fails a call because its backend cannot serve it now.
    pub(super) fn fail_unavailable(&mut self, server: &str, call: ClientCall) {
        if call.probe {
            if let Some(b) = self.backends.get_mut(server) {
                b.sup.breaker.probe_abandoned();
            }
        }
        let b = &self.backends[server];
        let status = b.sup.status();
        if status == Status::RequiresReauth {
            let msg = self.backends.reauth_message(server);
            return self.fail_reauth(server, call, &msg);
        }
        let data = self.backends.unavailable_data(server, self.now);
        let detail = b.sup.message().map(|m| format!(": {m}")).unwrap_or_default();
        let msg = format!("backend '{server}' is {status}{detail}");
        self.reply_error(call.session, &call.id, code::BACKEND_UNAVAILABLE, &msg, Some(&data));
        self.backends.record_call(server, &call, CallOutcome::Failed, self.now);
        self.release(&call);
    }
}
