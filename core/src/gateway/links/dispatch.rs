//! Sending a client's call to its backend: its id, deadlines (the per-try
//! timeout within the hard maximum), the stateless `_meta` and `Mcp-Param-*`
//! headers a stateless backend gets, and the task window it may turn into a
//! task after.

use crate::gateway::calls::{Call, CallKind, ClientCall};
use crate::io::Action;
use crate::protocol::Era;
use crate::time::Duration;
use alloc::string::String;
use alloc::vec::Vec;

use crate::gateway::backends::Backends;
use crate::gateway::cx::Cx;

impl Backends {
    /// Sends a call on the live connection, rewriting its id and progress token.
    pub(in crate::gateway) fn dispatch(&mut self, cx: &mut Cx<'_>, server: &str, call: ClientCall) {
        let id = cx.router.alloc_id();
        let now = cx.now;
        let b = self.get_mut(server).expect("live");
        b.sup.touch(now);
        let policy = b.sup.policy();
        let hard = call.created + Duration::from_millis(policy.request_timeout_max_ms);
        let deadline = Some((now + Duration::from_millis(policy.request_timeout_ms)).min(hard).max(now));
        let generation = b.sup.generation();
        let stateless = b.era == Era::Stateless;
        let meta = if stateless {
            call.stateless_meta(cx.sessions.open.get(&call.session), cx.log_level)
        } else {
            String::new()
        };
        let frame = call.params.frame(id, call.method, call.progress.is_some(), &meta);
        let headers = if stateless {
            crate::gateway::param_headers::param_headers_to(self, cx.catalog, server, &call)
        } else {
            Vec::new()
        };
        let server = self.name(server);
        let window = call.task_window.filter(|_| call.task.is_none() && call.awaiting_input.is_none());
        let deadline = match &call.task {
            // Nobody waits on a task's call: only its hard maximum bounds it.
            Some(_) => Some(hard.max(now)),
            None => deadline,
        };
        cx.router.calls.insert(id, Call { server: server.clone(), generation, deadline, kind: CallKind::Client(call) });
        if let Some(window) = window {
            cx.router.watch_task_window(id, window, cx.now);
        }
        cx.push(Action::SendToBackend { server, generation, frame, request: Some(id), headers });
    }
}
