//! The router's tables: requests in flight to backends, calls waiting for a
//! backend, backend-to-client requests, and list requests waiting on the
//! aggregation deadline.

use alloc::string::String;

use crate::catalog::ListKind;
use crate::io::{Generation, SessionId};
use crate::time::Instant;

/// A request the gateway sent to a backend and awaits an answer to.
#[derive(Clone, Debug)]
pub(super) struct Call {
    pub server: String,
    pub generation: Generation,
    /// When it times out; `None` when another timer covers it (the handshake).
    pub deadline: Option<Instant>,
    pub kind: CallKind,
}

/// Why the gateway sent a request.
#[derive(Clone, Debug)]
pub(super) enum CallKind {
    /// The `initialize` handshake.
    Initialize,
    /// One page of a discovery list.
    Discover { kind: ListKind, pages: u32 },
    /// A health check (`ping`, or `tools/list` where ping is unsupported).
    Health,
    /// Best effort, answer ignored (`logging/setLevel` fan-out, re-subscriptions).
    Quiet,
    /// A client's request, forwarded.
    Client(ClientCall),
}

/// How a backend's answer to a forwarded call is turned into the client's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// Passed through untouched (only the id changes).
    Plain,
    /// `resources/read`: content URIs are rewritten to served URIs.
    ReadResource,
    /// `resources/subscribe` of a served URI: recorded on success.
    Subscribe(String),
    /// `resources/unsubscribe` of a served URI.
    Unsubscribe(String),
}

/// A client request forwarded (or about to be forwarded) to a backend.
#[derive(Clone, Debug)]
pub(super) struct ClientCall {
    pub session: SessionId,
    /// The client's id, raw JSON.
    pub id: String,
    pub method: &'static str,
    /// Params rewritten for the backend (names and URIs), raw JSON, without the progress token.
    pub params: Option<serde_json::Map<String, serde_json::Value>>,
    /// The client's progress token, raw JSON, if it asked for progress.
    pub progress: Option<serde_json::Value>,
    /// The last `progress` value forwarded to the client. MCP requires it to
    /// increase; a call resent on a fresh process starts counting again.
    pub last_progress: Option<f64>,
    /// The tool says it is read-only or idempotent.
    pub retry_safe: bool,
    /// Call retries used so far.
    pub retries: u32,
    /// Already resent once after a crash or a lost session.
    pub resent: bool,
    /// This call is the breaker's half-open probe.
    pub probe: bool,
    pub shape: Shape,
    /// When the client's request arrived (the hard maximum counts from here).
    pub created: Instant,
}

/// A client call waiting for its backend (connecting, or a retry wait).
#[derive(Clone, Debug)]
pub(super) struct Queued {
    pub call: ClientCall,
    /// Not to be sent before this (retry waits).
    pub not_before: Instant,
    /// Fails with a structured error if still waiting then.
    pub deadline: Instant,
}

/// A backend-to-client request (sampling, elicitation, roots) in flight.
#[derive(Clone, Debug)]
pub(super) struct ServerRequest {
    pub server: String,
    pub generation: Generation,
    /// The backend's id, raw JSON.
    pub backend_id: String,
    pub session: SessionId,
    /// The client call it was made for (raw id), if one was in flight.
    pub related: Option<String>,
}

/// A client request waiting for backends that are starting for the first time:
/// a list (until the aggregation deadline) or a call to a name not known yet.
#[derive(Clone, Debug)]
pub(super) struct ParkedList {
    pub session: SessionId,
    pub id: String,
    pub what: Parked,
    pub deadline: Instant,
}

/// What a parked request is.
#[derive(Clone, Debug)]
pub(super) enum Parked {
    /// `*/list`, answered from whatever is visible when it is released.
    List { kind: ListKind, cursor: Option<String> },
    /// `tools/call` or `prompts/get` of a name no backend has listed yet.
    Named { method: &'static str, params: serde_json::Map<String, serde_json::Value>, kind: ListKind },
}

impl ParkedList {
    /// Whether this is a list request of `kind`.
    pub fn is_list(&self, kind: ListKind) -> bool {
        matches!(self.what, Parked::List { kind: k, .. } if k == kind)
    }
}
