//! What the backend side does for a client's request besides sending it:
//! starting lazy backends on a client's first request, withdrawing a
//! subscription at its backend, refusing a call its backend cannot take now.

use alloc::format;
use alloc::string::ToString;
use alloc::vec::Vec;

use crate::gateway::backends::Backends;
use crate::gateway::calls::ClientCall;
use crate::gateway::cx::Cx;
use crate::io::{ServerName, Status};
use crate::metrics::CallOutcome;
use crate::protocol::{self, code, Era};

impl Backends {
    /// Lazy backends start when the first client arrives.
    pub(in crate::gateway) fn start_lazy_backends(&mut self, cx: &mut Cx<'_>) {
        let lazy: Vec<ServerName> = self
            .iter()
            .filter(|(_, b)| b.config.lazy && !b.config.disabled && b.sup.status() == Status::Provisioning)
            .map(|(n, _)| n.clone())
            .collect();
        for name in lazy {
            self.connect(cx, &name);
        }
    }

    pub(in crate::gateway) fn refuse_overloaded(&mut self, cx: &mut Cx<'_>, server: &str, call: ClientCall, why: &str) {
        if call.probe {
            self.get_mut(server).expect("live").sup.breaker.probe_abandoned();
        }
        let msg = format!("backend '{server}': {why}");
        cx.reply_error(call.session, &call.id, code::OVERLOADED, &msg, None);
        self.record_call(server, &call, CallOutcome::Failed, cx.now);
        cx.release(&call);
    }

    /// Subscribes at the backend serving `served` (a session adopted here
    /// brought the subscription): now when it is ready, else with the others
    /// once it connects (`resubscribe`); a stateless one listens again.
    pub(in crate::gateway) fn subscribe_backend(&mut self, cx: &mut Cx<'_>, served: &str) {
        self.tell_backend_subscription(cx, served, "resources/subscribe");
    }

    /// Unsubscribes at the backend serving `served` (its last subscriber here left).
    pub(in crate::gateway) fn unsubscribe_backend(&mut self, cx: &mut Cx<'_>, served: &str) {
        self.tell_backend_subscription(cx, served, "resources/unsubscribe");
    }

    /// `method` (`resources/subscribe` or `/unsubscribe`) for `served` to the
    /// backend serving it, when it is ready; a stateless one listens again.
    fn tell_backend_subscription(&mut self, cx: &mut Cx<'_>, served: &str, method: &str) {
        let Some((server, uri)) = cx.catalog.resolve_uri(served).map(|(s, u)| (s.to_string(), u.to_string())) else {
            return;
        };
        if self.get(server.as_str()).is_some_and(|b| b.era == Era::Stateless) {
            return self.relisten(cx, &server);
        }
        if self.get(server.as_str()).is_some_and(|b| b.sup.is_ready()) {
            let params = format!(r#"{{"uri":{}}}"#, protocol::quote(&uri));
            self.quiet_request(cx, &server, method, &params);
        }
    }
}
