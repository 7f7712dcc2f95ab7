//! Frames from a backend that concern only its link: progress of a call
//! (forwarded to its client, resetting the call's deadline within its hard
//! maximum), and a backend cancelling its own request or listen.

use crate::gateway::calls::CallKind;
use crate::protocol::{self};
use crate::time::Duration;
use alloc::format;
use alloc::string::{String, ToString};
use serde_json::{Map, Value};

use crate::gateway::backends::Backends;
use crate::gateway::cx::Cx;

impl Backends {
    pub(in crate::gateway) fn forward_progress(&mut self, cx: &mut Cx<'_>, server: &str, params: Option<&str>) {
        let Some(mut p) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else { return };
        let Some(token) = p.get("progressToken").and_then(Value::as_u64) else { return };
        let now = cx.now;
        let Some(call) = cx.router.calls.get_mut(&token) else { return };
        if &*call.server != server {
            return;
        }
        let CallKind::Client(c) = &mut call.kind else { return };
        // A task's call answers nobody directly: its deadline is its hard maximum.
        if c.task.is_some() {
            return;
        }
        let Some(client_token) = c.progress.clone() else { return };
        let (session, client_id) = (c.session, c.id.clone());
        let policy = self[server].sup.policy();
        let hard = c.created + Duration::from_millis(policy.request_timeout_max_ms);
        let reset = now + Duration::from_millis(policy.request_timeout_ms);
        call.deadline = Some(reset.min(hard));
        // Progress must increase (MCP). A call resent on a fresh process counts
        // again from the start: those repeats keep the call alive but are not forwarded.
        let value = p.get("progress").and_then(Value::as_f64);
        if let (Some(value), Some(last)) = (value, c.last_progress) {
            if value <= last {
                return;
            }
        }
        if value.is_some() {
            c.last_progress = value;
        }
        p.insert("progressToken".into(), client_token);
        let params = serde_json::to_string(&p).unwrap_or_default();
        cx.related_to_client(
            session,
            Some(&client_id),
            protocol::notification("notifications/progress", Some(&params)),
        );
    }

    /// The backend cancelled one of its own requests to a client.
    pub(in crate::gateway) fn backend_cancelled(&mut self, cx: &mut Cx<'_>, server: &str, params: Option<&str>) {
        let Some(p) = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p).ok()) else { return };
        let Some(request_id) = p.get("requestId").and_then(|v| serde_json::to_string(v).ok()) else { return };
        // A stateless backend ends a listen this way on stdio.
        let listen = self.get(server).and_then(|b| b.listen);
        if let Some(id) = listen.filter(|id| request_id == id.to_string()) {
            cx.router.calls.remove(&id);
            return self.listen_ended(server, id, None);
        }
        let found = cx
            .router
            .server_requests
            .iter()
            .find(|(_, r)| &*r.server == server && r.backend_id == request_id)
            .map(|(id, r)| (*id, r.session, r.related.clone()));
        if let Some((id, session, related)) = found {
            cx.router.server_requests.remove(&id);
            let params = format!(r#"{{"requestId":{id},"reason":"cancelled by the server"}}"#);
            let frame = protocol::notification("notifications/cancelled", Some(&params));
            cx.related_to_client(session, related.as_deref(), frame);
        }
    }
}
