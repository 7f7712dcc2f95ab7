//! The protocol's vocabulary, shared by the server and its transports: JSON-RPC
//! messages and errors, where the messages of a request go ([`Outlet`]), why
//! serving one stops ([`Stop`]), and the state of a client ([`Session`]) and of
//! each request it has in flight ([`Call`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::{PROTOCOL_VERSION, STATELESS_PROTOCOL_VERSION};

/// Protocol versions the mock accepts in `initialize`, newest first.
pub(crate) const SUPPORTED_VERSIONS: [&str; 4] = [PROTOCOL_VERSION, "2025-06-18", "2025-03-26", "2024-11-05"];

/// The one listed resource.
pub(crate) const INFO_URI: &str = "mock://info";

/// The URI prefix of the resource template `mock://item/{id}`.
pub(crate) const ITEM_PREFIX: &str = "mock://item/";

/// The `instructions` the mock gives its clients.
pub(crate) const INSTRUCTIONS: &str = "A mock MCP server for testing tether.";

/// The tool `add_tool` adds.
pub(crate) const ADDED_TOOL: &str = "added";

/// Per-request `_meta` keys of the stateless revision.
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// The `_meta` key naming the listen a notification belongs to.
pub(crate) const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The result `_meta` key of the server's identity.
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The methods served with `--stateless`; everything else (`initialize`, `ping`,
/// `logging/setLevel`, `resources/subscribe`, ...) is -32601.
pub(crate) const STATELESS_METHODS: [&str; 10] = [
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "subscriptions/listen",
];

/// How often an open listen over HTTP sends an SSE comment, to keep the stream
/// alive and to notice a client that has gone.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// MCP log levels, least severe first.
pub(crate) const LOG_LEVELS: [&str; 8] =
    ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    code: i64,
    message: String,
    /// The optional `data` member.
    data: Option<Value>,
}

impl RpcError {
    fn parse_error(message: impl Into<String>) -> Self {
        RpcError { code: -32700, message: message.into(), data: None }
    }

    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        RpcError { code: -32600, message: message.into(), data: None }
    }

    pub(crate) fn method_not_found(method: &str) -> Self {
        RpcError { code: -32601, message: format!("method not found: {method}"), data: None }
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        RpcError { code: -32602, message: message.into(), data: None }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        RpcError { code: -32603, message: message.into(), data: None }
    }

    /// MCP's "resource not found".
    pub(crate) fn resource_not_found(uri: &str) -> Self {
        RpcError { code: -32002, message: format!("resource not found: {uri}"), data: None }
    }

    /// A stateless server's "resource not found" (-32002 is retired in 2026-07-28).
    pub(crate) fn unknown_resource(uri: &str) -> Self {
        RpcError::invalid_params(format!("resource not found: {uri}"))
    }

    /// A stateless server's answer to `initialize`, naming the versions it speaks.
    pub(crate) fn initialize_refused() -> Self {
        RpcError {
            code: -32601,
            message: format!(
                "method not found: initialize (this server speaks only the stateless MCP revision; \
                 supported versions: {STATELESS_PROTOCOL_VERSION})"
            ),
            data: Some(json!({"supported": [STATELESS_PROTOCOL_VERSION]})),
        }
    }

    /// `HeaderMismatch`: a stateless HTTP request's headers disagree with its body.
    #[cfg(feature = "http")]
    pub(crate) fn header_mismatch(message: impl Into<String>) -> Self {
        RpcError { code: -32020, message: message.into(), data: None }
    }

    /// `MissingRequiredClientCapability`: the request needs `capability`.
    pub(crate) fn missing_capability(capability: &str) -> Self {
        RpcError {
            code: -32021,
            message: format!("missing required client capability: {capability}"),
            data: Some(json!({"requiredCapabilities": {capability: {}}})),
        }
    }

    /// `UnsupportedProtocolVersion`, for a stateless request at `requested`.
    pub(crate) fn unsupported_version(requested: &str) -> Self {
        RpcError {
            code: -32022,
            message: format!("unsupported protocol version: {requested}"),
            data: Some(json!({"supported": [STATELESS_PROTOCOL_VERSION], "requested": requested})),
        }
    }
}

/// One message from the client, sorted by what it expects back.
#[derive(Debug, PartialEq)]
pub(crate) enum Incoming {
    /// Expects exactly one response.
    Request { id: Value, method: String, params: Value },
    /// Expects nothing.
    Notification { method: String, params: Value },
    /// The client's answer to a request the mock sent (`sampling/createMessage`):
    /// its `result`, or its `error` object.
    Response { id: Value, outcome: Result<Value, Value> },
}

/// Parses one JSON-RPC message. A frame that is not one yields the error response
/// to send back: -32700 for bad JSON, -32600 for JSON that is not a message.
pub(crate) fn parse_message(frame: &[u8]) -> Result<Incoming, Value> {
    let value: Value = serde_json::from_slice(frame)
        .map_err(|e| error_response(&Value::Null, &RpcError::parse_error(format!("parse error: {e}"))))?;
    let Value::Object(mut object) = value else {
        return Err(error_response(&Value::Null, &RpcError::invalid_request("a message must be a JSON object")));
    };
    let id = object.remove("id");
    let reply_id = id.clone().filter(is_valid_id).unwrap_or(Value::Null);
    let invalid = |message: &str| error_response(&reply_id, &RpcError::invalid_request(message));
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("`jsonrpc` must be \"2.0\""));
    }
    let params = object.remove("params").unwrap_or(Value::Null);
    match (object.remove("method"), id) {
        (Some(Value::String(method)), None) => Ok(Incoming::Notification { method, params }),
        (Some(Value::String(method)), Some(id)) if is_valid_id(&id) => Ok(Incoming::Request { id, method, params }),
        (Some(Value::String(_)), Some(_)) => Err(invalid("`id` must be a string or a number")),
        (Some(_), _) => Err(invalid("`method` must be a string")),
        (None, Some(id)) => {
            if let Some(result) = object.remove("result") {
                Ok(Incoming::Response { id, outcome: Ok(result) })
            } else if let Some(error) = object.remove("error") {
                Ok(Incoming::Response { id, outcome: Err(error) })
            } else {
                Err(invalid("a message needs a `method`, a `result` or an `error`"))
            }
        }
        (None, None) => Err(invalid("a message needs a `method`, a `result` or an `error`")),
    }
}

/// Whether `id` may identify a request (MCP forbids null ids).
pub(crate) fn is_valid_id(id: &Value) -> bool {
    id.is_string() || id.is_number()
}

/// A map key for a request id (`1` and `"1"` stay distinct).
pub(crate) fn id_key(id: &Value) -> String {
    id.to_string()
}

pub(crate) fn success_response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub(crate) fn error_response(id: &Value, error: &RpcError) -> Value {
    let mut object = json!({"code": error.code, "message": error.message});
    if let Some(data) = &error.data {
        object["data"] = data.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": object})
}

pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// Where the messages produced while serving one request go.
///
/// Over stdio every outlet writes lines to stdout; over HTTP each POST has its own,
/// which turns into a JSON body or an SSE stream.
pub(crate) trait Outlet: Send + Sync {
    /// Sends a notification or a server-to-client request tied to the request.
    fn send(&self, message: &Value);

    /// Sends the request's response; nothing follows it.
    fn finish(&self, response: &Value);

    /// Announces that messages will precede the response (HTTP opens its SSE stream
    /// now rather than at the first message).
    fn open_stream(&self) {}

    /// Checks that the client can still be reached, sending a keep-alive if the
    /// transport has one (an SSE comment): `false` once it is known to be gone.
    fn keep_alive(&self) -> bool {
        true
    }

    /// Sends one message event whose data is `bytes` of `x`, in 1 MiB pieces
    /// (HTTP only; `--junk-on-call`): an event no frame bound admits.
    fn junk_event(&self, _bytes: usize) {}
}

/// Why serving a request stopped short of a result.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The client cancelled the request: it gets no response.
    Cancelled,
    /// Answered with a JSON-RPC error.
    Error(RpcError),
    /// A tool failed: answered with a result carrying `isError: true` and this text.
    ToolError(String),
    /// The request needs the client's input first (stateless mode): answered with
    /// this `input_required` result.
    InputRequired(Value),
}

impl From<RpcError> for Stop {
    fn from(error: RpcError) -> Self {
        Stop::Error(error)
    }
}

/// Locks a mutex, ignoring poisoning: a panicking request thread must not take the
/// rest of the mock down with it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A client request being served. Its thread waits here for time to pass, for a
/// cancellation, or for the client's answer to a request the mock sent it.
#[derive(Default)]
pub(crate) struct Call {
    state: Mutex<CallState>,
    wake: Condvar,
}

#[derive(Default)]
pub(crate) struct CallState {
    cancelled: bool,
    reply: Option<Result<Value, Value>>,
}

impl Call {
    /// Marks the call cancelled and wakes its thread.
    fn cancel(&self) {
        lock(&self.state).cancelled = true;
        self.wake.notify_all();
    }

    /// Hands the client's answer to a server request to the waiting thread.
    fn deliver(&self, reply: Result<Value, Value>) {
        lock(&self.state).reply = Some(reply);
        self.wake.notify_all();
    }

    /// Waits for `duration`, or stops early when the call is cancelled.
    pub(crate) fn pause(&self, duration: Duration) -> Result<(), Stop> {
        // A deadline too far out to represent is a wait that only a cancel ends.
        let deadline = Instant::now().checked_add(duration);
        let mut state = lock(&self.state);
        loop {
            if state.cancelled {
                return Err(Stop::Cancelled);
            }
            state = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(());
                    }
                    self.wake.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0
                }
                None => self.wake.wait(state).unwrap_or_else(PoisonError::into_inner),
            };
        }
    }

    /// Waits for the client's answer to a server request, or for a cancel.
    pub(crate) fn await_reply(&self) -> Result<Result<Value, Value>, Stop> {
        let mut state = lock(&self.state);
        loop {
            if state.cancelled {
                return Err(Stop::Cancelled);
            }
            if let Some(reply) = state.reply.take() {
                return Ok(reply);
            }
            state = self.wake.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Waits until the call is cancelled, which may be never.
    pub(crate) fn await_cancel(&self) -> Stop {
        match self.pause(Duration::MAX) {
            Ok(()) | Err(Stop::Cancelled) => Stop::Cancelled,
            Err(other) => other,
        }
    }
}

/// One client's state: stdio has one session per process, HTTP one per
/// `Mcp-Session-Id`.
pub(crate) struct Session {
    pub(crate) initialized: AtomicBool,
    /// Index in [`LOG_LEVELS`] of the least severe level sent.
    pub(crate) log_threshold: AtomicUsize,
    pub(crate) subscriptions: Mutex<HashSet<String>>,
    /// Client requests being served, by id.
    calls: Mutex<HashMap<String, Arc<Call>>>,
    /// Signalled whenever a request leaves `calls`.
    call_ended: Condvar,
    /// Server requests awaiting the client's answer, by id, with the call that sent them.
    pub(crate) awaiting: Mutex<HashMap<String, Arc<Call>>>,
    /// Open `subscriptions/listen` requests (stateless mode).
    pub(crate) listens: Mutex<Listens>,
}

/// A session's open listens.
#[derive(Default)]
pub(crate) struct Listens {
    pub(crate) open: Vec<Listen>,
    /// The transport is closing: a listen opened now ends at once.
    closing: bool,
}

/// An open `subscriptions/listen`: where its notifications go and which it wants.
pub(crate) struct Listen {
    /// The listen request's id, which is also its subscription id.
    pub(crate) id: Value,
    pub(crate) filter: ListenFilter,
    pub(crate) call: Arc<Call>,
    pub(crate) outlet: Arc<dyn Outlet>,
}

/// The notifications a listen asked for that the mock honours.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ListenFilter {
    pub(crate) tools_list_changed: bool,
    prompts_list_changed: bool,
    resources_list_changed: bool,
    /// URIs for `notifications/resources/updated`, when the client asked for any.
    pub(crate) resource_subscriptions: Option<Vec<String>>,
}

impl ListenFilter {
    /// Reads `params.notifications`; -32602 when it is missing or ill-typed.
    pub(crate) fn parse(params: &Value) -> Result<Self, RpcError> {
        let Some(Value::Object(asked)) = params.get("notifications") else {
            return Err(RpcError::invalid_params("subscriptions/listen needs the object `notifications`"));
        };
        let flag = |name: &str| match asked.get(name) {
            None | Some(Value::Bool(false)) => Ok(false),
            Some(Value::Bool(true)) => Ok(true),
            Some(_) => Err(RpcError::invalid_params(format!("`notifications.{name}` must be a boolean"))),
        };
        let resource_subscriptions = match asked.get("resourceSubscriptions") {
            None => None,
            Some(Value::Array(uris)) => Some(
                uris.iter()
                    .map(|uri| uri.as_str().map(String::from))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| RpcError::invalid_params("`notifications.resourceSubscriptions` must list URIs"))?,
            ),
            Some(_) => return Err(RpcError::invalid_params("`notifications.resourceSubscriptions` must be an array")),
        };
        Ok(ListenFilter {
            tools_list_changed: flag("toolsListChanged")?,
            prompts_list_changed: flag("promptsListChanged")?,
            resources_list_changed: flag("resourcesListChanged")?,
            resource_subscriptions,
        })
    }

    /// The filter as the `notifications` of the acknowledgement.
    pub(crate) fn to_json(&self) -> Value {
        let mut object = Map::new();
        for (name, wanted) in [
            ("toolsListChanged", self.tools_list_changed),
            ("promptsListChanged", self.prompts_list_changed),
            ("resourcesListChanged", self.resources_list_changed),
        ] {
            if wanted {
                object.insert(name.to_string(), json!(true));
            }
        }
        if let Some(uris) = &self.resource_subscriptions {
            object.insert("resourceSubscriptions".to_string(), json!(uris));
        }
        Value::Object(object)
    }

    pub(crate) fn watches(&self, uri: &str) -> bool {
        self.resource_subscriptions.as_ref().is_some_and(|uris| uris.iter().any(|watched| watched == uri))
    }
}

impl Session {
    pub(crate) fn new() -> Self {
        Session {
            initialized: AtomicBool::new(false),
            log_threshold: AtomicUsize::new(0),
            subscriptions: Mutex::new(HashSet::new()),
            calls: Mutex::new(HashMap::new()),
            call_ended: Condvar::new(),
            awaiting: Mutex::new(HashMap::new()),
            listens: Mutex::new(Listens::default()),
        }
    }

    /// Registers a request as being served, so that a cancel can reach it.
    pub(crate) fn begin(&self, id: &Value) -> Arc<Call> {
        let call = Arc::new(Call::default());
        lock(&self.calls).insert(id_key(id), Arc::clone(&call));
        call
    }

    /// Forgets a request whose serving is over (unless a later request reused its
    /// id, which a stateless HTTP client sharing the session may do).
    pub(crate) fn end(&self, id: &Value, call: &Arc<Call>) {
        let mut calls = lock(&self.calls);
        if calls.get(&id_key(id)).is_some_and(|current| Arc::ptr_eq(current, call)) {
            calls.remove(&id_key(id));
        }
        drop(calls);
        self.call_ended.notify_all();
    }

    /// Applies `notifications/cancelled`.
    pub(crate) fn cancel(&self, id: &Value) {
        if let Some(call) = lock(&self.calls).get(&id_key(id)) {
            call.cancel();
        }
    }

    /// Cancels everything in flight (the session is over).
    pub(crate) fn close(&self) {
        for call in lock(&self.calls).values() {
            call.cancel();
        }
    }

    /// Gives the requests in flight up to `grace` to be answered, then closes the
    /// session.
    pub(crate) fn drain(&self, grace: Duration) {
        let deadline = Instant::now() + grace;
        let mut calls = lock(&self.calls);
        while !calls.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            calls = self.call_ended.wait_timeout(calls, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        drop(calls);
        self.close();
    }

    /// Routes the client's answer to the call that sent the server request.
    pub(crate) fn settle(&self, id: &Value, outcome: Result<Value, Value>) {
        if let Some(call) = lock(&self.awaiting).remove(&id_key(id)) {
            call.deliver(outcome);
        }
    }

    /// Opens a listen: sends its acknowledgement, then lets notifications reach it
    /// (under one lock, so that none precedes the acknowledgement). On a closing
    /// transport the listen is ended at once.
    pub(crate) fn open_listen(&self, listen: Listen, acknowledgement: &Value) {
        let mut listens = lock(&self.listens);
        if listens.closing {
            return listen.call.cancel();
        }
        listen.outlet.send(acknowledgement);
        listens.open.push(listen);
    }

    /// Forgets the listen served by `call`.
    pub(crate) fn close_listen(&self, call: &Arc<Call>) {
        lock(&self.listens).open.retain(|listen| !Arc::ptr_eq(&listen.call, call));
    }

    /// Ends every open listen, and those opened from now on (the transport is
    /// closing).
    pub(crate) fn end_listens(&self) {
        let mut listens = lock(&self.listens);
        listens.closing = true;
        for listen in &listens.open {
            listen.call.cancel();
        }
    }

    /// Sends the notification `method` to every open listen that `wants` it, with
    /// `params` (an object) plus the listen's subscription id.
    pub(crate) fn notify_listens(&self, method: &str, params: &Value, wants: impl Fn(&ListenFilter) -> bool) {
        for listen in lock(&self.listens).open.iter().filter(|listen| wants(&listen.filter)) {
            let mut params = params.clone();
            params["_meta"] = json!({META_SUBSCRIPTION_ID: listen.id});
            listen.outlet.send(&notification(method, params));
        }
    }

    pub(crate) fn is_subscribed(&self, uri: &str) -> bool {
        lock(&self.subscriptions).contains(uri)
    }

    pub(crate) fn logs_at(&self, level: &str) -> bool {
        let rank = LOG_LEVELS.iter().position(|l| *l == level).unwrap_or(0);
        rank >= self.log_threshold.load(Ordering::Relaxed)
    }
}
