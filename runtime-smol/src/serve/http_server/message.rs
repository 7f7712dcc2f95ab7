//! What the transport needs to know about a JSON-RPC message: its shape (request,
//! notification, response), a request's id and whether it is `initialize`. Nothing
//! else is interpreted.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

pub(super) use tether_core::protocol::code::{INVALID_REQUEST, PARSE_ERROR, TRANSPORT_ERROR};

/// The kinds of message a POST may carry.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// A request, with its id as a key (see [`id_key`]).
    Request {
        /// The id, canonical.
        id: String,
        /// The method is `initialize`.
        initialize: bool,
    },
    /// A notification (a method, no id).
    Notification,
    /// A response to a server-to-client request.
    Response,
}

/// Why a body is not one JSON-RPC message.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Invalid {
    /// Not JSON (or not UTF-8).
    Parse,
    /// A JSON array: batches left MCP in 2025-06-18.
    Batch,
    /// JSON, but not a JSON-RPC 2.0 request, notification or response (or a
    /// request whose id is neither a string nor a number). The id, as written,
    /// when it has one: the error answer carries it.
    NotJsonRpc(Option<String>),
}

impl Invalid {
    /// The JSON-RPC error code and message for a 400 body.
    pub(super) fn error(&self) -> (i64, &'static str) {
        match self {
            Invalid::Parse => (PARSE_ERROR, "parse error: the body is not JSON"),
            Invalid::Batch => {
                (INVALID_REQUEST, "invalid request: batches are not supported; send one message per POST")
            }
            Invalid::NotJsonRpc(_) => {
                (INVALID_REQUEST, "invalid request: not a JSON-RPC 2.0 request, notification or response")
            }
        }
    }

    /// The id the error answer carries: the message's own, as written, or null.
    pub(super) fn id(&self) -> Option<&str> {
        match self {
            Invalid::NotJsonRpc(id) => id.as_deref(),
            Invalid::Parse | Invalid::Batch => None,
        }
    }
}

/// Just a message's id (when the rest does not make a JSON-RPC message).
#[derive(Deserialize)]
struct IdOnly {
    #[serde(default)]
    id: Option<Box<RawValue>>,
}

/// The id of a JSON object that is not a valid message, as written, unless
/// absent or null.
fn id_of(body: &str) -> Option<String> {
    let id = serde_json::from_str::<IdOnly>(body).ok()?.id?;
    let id = id.get().trim();
    (id != "null").then(|| id.to_string())
}

/// A member that may be absent (`None`) or present, even as `null` (`Some(Null)`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A member whose value is skipped, only its presence noted.
fn seen<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    jsonrpc: Option<String>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "seen")]
    result: bool,
    #[serde(default, deserialize_with = "seen")]
    error: bool,
}

/// Classifies one POST body. Parameters and results are skipped, not built.
pub(super) fn classify(body: &str) -> Result<Shape, Invalid> {
    let message: Message = match serde_json::from_str(body) {
        Ok(m) => m,
        Err(_) => {
            return Err(match serde_json::from_str::<&RawValue>(body).map(|v| v.get().trim_start().as_bytes()[0]) {
                Ok(b'[') => Invalid::Batch,
                Ok(_) => Invalid::NotJsonRpc(id_of(body)),
                Err(_) => Invalid::Parse,
            });
        }
    };
    if message.jsonrpc.as_deref() != Some("2.0") {
        return Err(Invalid::NotJsonRpc(id_of(body)));
    }
    match (message.method, message.id) {
        (Some(_), None) => Ok(Shape::Notification),
        (Some(method), Some(id @ (Value::String(_) | Value::Number(_)))) => {
            Ok(Shape::Request { id: canonical(&id), initialize: method == "initialize" })
        }
        (None, Some(_)) if message.result != message.error => Ok(Shape::Response),
        _ => Err(Invalid::NotJsonRpc(id_of(body))),
    }
}

fn canonical(id: &Value) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// The key a request id is routed by: the id's JSON re-serialised, so spellings of
/// the same value (`"a"` and `"\u0061"`, surrounding spaces) meet. Text that is not
/// JSON is its own key.
pub(super) fn id_key(raw: &str) -> String {
    match serde_json::from_str::<Value>(raw) {
        Ok(v) => canonical(&v),
        Err(_) => raw.to_string(),
    }
}

/// A JSON-RPC error body without an id, as the transport page suggests for errors
/// that are not answers to a request.
pub(super) fn error_body(code: i64, message: &str) -> String {
    error_body_for(None, code, message)
}

/// A JSON-RPC error body answering the message whose id is `id` (null without one).
pub(super) fn error_body_for(id: Option<&str>, code: i64, message: &str) -> String {
    let error = serde_json::json!({ "code": code, "message": message });
    format!(r#"{{"jsonrpc":"2.0","id":{},"error":{error}}}"#, id.unwrap_or("null"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_told_apart() {
        let request = classify(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"x":[1,2]}}"#);
        assert_eq!(request, Ok(Shape::Request { id: "7".into(), initialize: false }));
        let init = classify(r#"{"jsonrpc":"2.0","id":"a b","method":"initialize","params":{}}"#);
        assert_eq!(init, Ok(Shape::Request { id: r#""a b""#.into(), initialize: true }));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), Ok(Shape::Notification));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id":3,"result":null}"#), Ok(Shape::Response));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}"#), Ok(Shape::Response));
    }

    #[test]
    fn invalid_bodies_are_named() {
        assert_eq!(classify("not json"), Err(Invalid::Parse));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id":1,"#), Err(Invalid::Parse));
        assert_eq!(classify(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#), Err(Invalid::Batch));
        let with_id = |id: &str| Err(Invalid::NotJsonRpc(Some(id.to_string())));
        assert_eq!(classify(r#"{"id":1,"method":"ping"}"#), with_id("1"));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#), Err(Invalid::NotJsonRpc(None)));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id": {"a" : 1} ,"method":"ping"}"#), with_id(r#"{"a" : 1}"#));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#), with_id("true"));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","method":5}"#), Err(Invalid::NotJsonRpc(None)));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id":7,"method":5}"#), with_id("7"));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id":1}"#), with_id("1"));
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#), with_id("1"));
        assert_eq!(classify("42"), Err(Invalid::NotJsonRpc(None)));
    }

    #[test]
    fn id_keys_compare_values_not_spellings() {
        assert_eq!(id_key(" 7 "), "7");
        assert_eq!(id_key(r#""\u0061""#), r#""a""#);
        assert_eq!(id_key(r#""a""#), r#""a""#);
        assert_ne!(id_key("7"), id_key(r#""7""#));
    }
}
