//! What both modes share on the wire: JSON-RPC errors, stdout (one message per
//! line, whole lines only), and the small result builders.

use std::io::{self, Write};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::{json, Map, Value};

/// JSON-RPC error codes used here.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    /// The server failed (`protocol_error_job` fails this way on purpose).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// 2026-07-28: `MissingRequiredClientCapability`.
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// 2026-07-28: `UnsupportedProtocolVersion`.
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

/// A JSON-RPC error answer.
#[derive(Debug)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError { code, message: message.into(), data: None }
    }

    /// -32602, the params were wrong (unknown name, missing argument, bad type).
    pub fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(code::INVALID_PARAMS, message)
    }

    /// -32601 for `method`.
    pub fn method_not_found(method: &str) -> Self {
        RpcError::new(code::METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    /// -32602 for a URI that names no resource, with the URI in `data` (SEP-2164).
    pub fn resource_not_found(uri: &str) -> Self {
        RpcError { code: code::INVALID_PARAMS, message: "Resource not found".into(), data: Some(json!({ "uri": uri })) }
    }

    pub fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// What a handler answers: a result object or an error.
pub type Answer = Result<Value, RpcError>;

/// A JSON-RPC error object.
pub fn error(code: i64, message: &str) -> Value {
    json!({ "code": code, "message": message })
}

/// Locks a mutex, taking over the data of a thread that panicked while holding it.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Stdout. Requests are served on several threads; the lock keeps each message
/// one whole line.
#[derive(Default)]
pub struct Out {
    lock: Mutex<()>,
}

impl Out {
    /// Writes one message as one line. A closed stdout means the client is gone: exit.
    pub fn send(&self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        let _guard = lock(&self.lock);
        let mut out = io::stdout().lock();
        if out.write_all(line.as_bytes()).and_then(|()| out.flush()).is_err() {
            std::process::exit(0);
        }
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    pub fn send_result(&self, id: &Value, result: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "result": result }));
    }

    pub fn send_error(&self, id: &Value, error: &Value) {
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "error": error }));
    }
}

/// One line of stdin, sorted: a request, a notification, an answer to a request of
/// ours, or the error to send back (with the id to send it to) for a line that is
/// none of them. Blank lines are `None`.
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// An answer: `Ok(result)` or `Err(error object)`.
    Answer {
        id: Value,
        outcome: Result<Value, Value>,
    },
    Invalid {
        id: Value,
        error: Value,
    },
}

/// Parses one line of stdin. Bad input never panics: it becomes `Invalid` with the
/// JSON-RPC error to answer (`id: null` when the request's id cannot be known),
/// except for a malformed response, which nobody waits an answer to (logged).
pub fn parse_line(line: &str) -> Option<Incoming> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let invalid = |id: Value, code: i64, message: &str| Some(Incoming::Invalid { id, error: error(code, message) });
    let mut message = match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(message)) => message,
        Ok(Value::Array(_)) => {
            return invalid(Value::Null, code::INVALID_REQUEST, "JSON-RPC batches are not supported")
        }
        Ok(_) => return invalid(Value::Null, code::INVALID_REQUEST, "a message must be a JSON object"),
        Err(e) => return invalid(Value::Null, code::PARSE_ERROR, &format!("parse error: {e}")),
    };
    let id = message.remove("id");
    if let Some(id) = &id {
        if !matches!(id, Value::String(_) | Value::Number(_)) {
            return invalid(Value::Null, code::INVALID_REQUEST, "id must be a string or number");
        }
    }
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        if message.contains_key("method") || id.is_none() {
            return invalid(id.unwrap_or(Value::Null), code::INVALID_REQUEST, "jsonrpc must be \"2.0\"");
        }
        eprintln!("conformance-fixture: ignoring a response without jsonrpc \"2.0\"");
        return None;
    }
    let params = message.remove("params");
    match (message.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Some(Incoming::Request { id, method, params }),
        (Some(Value::String(method)), None) => Some(Incoming::Notification { method, params }),
        (Some(_), id) => invalid(id.unwrap_or(Value::Null), code::INVALID_REQUEST, "method must be a string"),
        (None, Some(id)) => match (message.remove("result"), message.remove("error")) {
            (Some(result), None) => Some(Incoming::Answer { id, outcome: Ok(result) }),
            (None, Some(error)) => Some(Incoming::Answer { id, outcome: Err(error) }),
            _ => {
                eprintln!("conformance-fixture: ignoring a response to {id} without one result or error");
                None
            }
        },
        (None, None) => invalid(Value::Null, code::INVALID_REQUEST, "neither a request nor a response"),
    }
}

/// A request's params as an object (absent or null: empty), or -32602.
pub fn params_object(params: Option<Value>) -> Result<Map<String, Value>, RpcError> {
    match params {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(params)) => Ok(params),
        Some(_) => Err(RpcError::invalid_params("params must be an object")),
    }
}

/// The string param `key`, or -32602 naming it.
pub fn required_str<'a>(params: &'a Map<String, Value>, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("missing string param '{key}'")))
}

/// A `tools/call`'s `arguments` (absent or null: none), or -32602.
pub fn tool_arguments(params: &Map<String, Value>) -> Result<Map<String, Value>, RpcError> {
    match params.get("arguments") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(args)) => Ok(args.clone()),
        Some(_) => Err(RpcError::invalid_params("arguments must be an object")),
    }
}

/// A tool result with one text item.
pub fn text_result(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }] })
}

/// A tool result that reports the tool's failure.
pub fn tool_error(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": true })
}
