//! [`Client`]: typed requests to a [`crate::Host`] from the embedding program, without
//! writing JSON-RPC frames by hand.

use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_core::protocol::code;
use tether_core::{ClientRoute, SessionId};

/// What a [`Client`] needs of the host it talks to (the host implements it; the
/// client knows nothing else of it).
pub(crate) trait Sessions {
    /// Opens a session whose frames go to `sink`.
    fn open(&self, sink: crate::ClientSink) -> SessionId;
    /// One frame from the client of `session`.
    fn send(&self, session: SessionId, frame: String);
    /// The client of `session` went away.
    fn close(&self, session: SessionId);
}

/// How long a request waits for its answer by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A JSON-RPC error answer, or no answer in time.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    /// The JSON-RPC error code (0 when the request timed out here).
    pub code: i64,
    /// What went wrong.
    pub message: String,
    /// The error's `data`, if any.
    pub data: Option<Value>,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// One MCP client session on a host. Requests block until answered.
pub struct Client<'h> {
    host: &'h dyn Sessions,
    session: SessionId,
    frames: Receiver<String>,
    next_id: u64,
    timeout: Duration,
    notifications: Vec<Value>,
}

impl<'h> Client<'h> {
    /// Opens a session and performs the `initialize` handshake.
    pub(crate) fn connect(host: &'h dyn Sessions) -> Result<Client<'h>, String> {
        let (tx, frames) = channel();
        let session = host.open(Box::new(move |frame, _: &ClientRoute| {
            let _ = tx.send(frame);
        }));
        let mut client =
            Client { host, session, frames, next_id: 1, timeout: DEFAULT_TIMEOUT, notifications: Vec::new() };
        let params = json!({
            "protocolVersion": tether_core::protocol::SUPPORTED_VERSIONS[0],
            "capabilities": {},
            "clientInfo": {"name": "tether-blocking-embedder", "version": env!("CARGO_PKG_VERSION")},
        });
        client.request("initialize", params).map_err(|e| format!("initialize failed: {e}"))?;
        client.notify("notifications/initialized", json!({}));
        Ok(client)
    }

    /// Sets how long requests wait for their answer.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sends a request and waits for its result.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id;
        self.next_id += 1;
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.host.send(self.session, frame.to_string());
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(frame) = self.frames.recv_timeout(left) else {
                return Err(RpcError { code: 0, message: format!("no answer to {method} in time"), data: None });
            };
            let Ok(message) = serde_json::from_str::<Value>(&frame) else { continue };
            if message.get("method").is_some() {
                if let Some(request_id) = message.get("id") {
                    // The gateway only asks clients for what they declared; this one declared nothing.
                    let answer = json!({"jsonrpc": "2.0", "id": request_id,
                        "error": {"code": code::METHOD_NOT_FOUND, "message": "not supported by this client"}});
                    self.host.send(self.session, answer.to_string());
                } else {
                    self.notifications.push(message);
                }
                continue;
            }
            if message.get("id") != Some(&json!(id)) {
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(RpcError {
                    code: error["code"].as_i64().unwrap_or(0),
                    message: error["message"].as_str().unwrap_or("").to_string(),
                    data: error.get("data").cloned(),
                });
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) {
        let frame = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.host.send(self.session, frame.to_string());
    }

    /// Every tool the gateway serves (all pages).
    pub fn list_tools(&mut self) -> Result<Vec<Value>, RpcError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = cursor.as_ref().map_or_else(|| json!({}), |c| json!({ "cursor": c }));
            let page = self.request("tools/list", params)?;
            tools.extend(page["tools"].as_array().cloned().unwrap_or_default());
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_string()),
                None => return Ok(tools),
            }
        }
    }

    /// Calls a tool by its served name; the result (which may have `isError`).
    pub fn call_tool(&mut self, name: &str, arguments: Value) -> Result<Value, RpcError> {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// Notifications received so far (list changes, log messages...), oldest first.
    pub fn take_notifications(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.notifications)
    }
}

impl Drop for Client<'_> {
    fn drop(&mut self) {
        self.host.close(self.session);
    }
}
