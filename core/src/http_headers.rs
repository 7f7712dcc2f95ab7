//! The request headers of the stateless revision's HTTP transport (2026-07-28,
//! "Standard Headers"), as a client puts them on a POST: `MCP-Protocol-Version`,
//! `Mcp-Method` and, for `tools/call`, `prompts/get`, `resources/read` and the
//! tasks extension's `tasks/get`, `tasks/update` and `tasks/cancel`, `Mcp-Name`. Servers and intermediaries route on them without parsing the body,
//! and a server must refuse a request whose headers disagree with its body, so
//! they are derived from the frame itself. This is the inverse of
//! [`crate::protocol::check_stateless_headers`], which tether runs as a server.
//!
//! Not covered: `Mcp-Param-{Name}` headers, which mirror tool arguments annotated
//! with `x-mcp-header` in the tool's `inputSchema`. They need the tool's schema
//! from `tools/list`, which a function of the frame alone does not have: see
//! [`crate::param_headers`].

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::protocol::{self, Message, Text};

/// The revision the request speaks; equals `_meta`'s protocolVersion.
pub const PROTOCOL_VERSION: &str = "MCP-Protocol-Version";
/// The request's `method`.
pub const METHOD: &str = "Mcp-Method";
/// `params.name` (`tools/call`, `prompts/get`) or `params.uri` (`resources/read`).
pub const NAME: &str = "Mcp-Name";

/// What marks a header value as Base64 of its UTF-8 bytes: `=?base64?…?=`.
const SENTINEL_START: &str = "=?base64?";
const SENTINEL_END: &str = "?=";

/// The 2026-07-28 HTTP headers for `frame`, in sending order. `None` unless the
/// frame is a JSON-RPC request whose `params._meta` carries
/// `io.modelcontextprotocol/protocolVersion`: anything else (handshake-era
/// requests, notifications, responses) is sent the handshake-era way.
pub fn stateless_request_headers(frame: &str) -> Option<Vec<(&'static str, String)>> {
    let Ok(Message::Request { method, params, .. }) = protocol::parse(frame) else { return None };
    let params: Params<'_> = serde_json::from_str(params?).ok()?;
    let version = string(params.meta?.version?)?;
    let mut headers = Vec::with_capacity(3);
    headers.push((PROTOCOL_VERSION, header_value(&version)));
    headers.push((METHOD, header_value(&method)));
    let named = match &*method {
        "tools/call" | "prompts/get" => params.name,
        "resources/read" => params.uri,
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.task_id,
        _ => None,
    };
    if let Some(name) = named.and_then(string) {
        headers.push((NAME, header_value(&name)));
    }
    Some(headers)
}

/// The parts of a request's params the headers repeat. Values stay raw so that
/// a member of an unexpected type leaves its header out instead of failing the
/// whole frame, like the server-side check, which only compares strings.
#[derive(Deserialize)]
struct Params<'a> {
    #[serde(default, borrow, rename = "_meta")]
    meta: Option<Meta<'a>>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    uri: Option<&'a RawValue>,
    #[serde(default, borrow, rename = "taskId")]
    task_id: Option<&'a RawValue>,
}

/// The `_meta` key is [`crate::protocol::meta::PROTOCOL_VERSION`] (serde needs the literal).
#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(default, borrow, rename = "io.modelcontextprotocol/protocolVersion")]
    version: Option<&'a RawValue>,
}

/// A raw JSON value as a string, if it is one.
fn string(raw: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Text<'_>>(raw.get()).ok().map(|t| t.0)
}

/// A value as sent in a header: plain when it is header-safe, else
/// `=?base64?<Base64 of its UTF-8>?=` (the transport's encoding; the markers are
/// case-sensitive).
pub(crate) fn header_value(value: &str) -> String {
    use base64::Engine;
    if is_header_safe(value) {
        return value.into();
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
    format!("{SENTINEL_START}{encoded}{SENTINEL_END}")
}

/// Whether a value may go in a header as it is: printable ASCII only, no
/// whitespace at either end (HTTP strips it), and not looking like an encoded
/// value, which the receiver would decode. Any `=?…?=` counts as looking like
/// one (other encodings use the same brackets): encoding it is always safe.
fn is_header_safe(value: &str) -> bool {
    let printable = value.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
    let trimmed = !value.starts_with(' ') && !value.ends_with(' ');
    let sentinel_like = value.starts_with("=?") && value.ends_with(SENTINEL_END);
    printable && trimmed && !sentinel_like
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{check_stateless_headers, StatelessHeaders};
    use alloc::string::ToString;

    const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

    fn request(method: &str, params: &str) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{{{params}}}}}"#)
    }

    /// Looks a header up the way a server does (names are case-insensitive).
    fn get<'a>(headers: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
        headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The headers pass the server-side check tether itself runs.
    fn assert_accepted(frame: &str) -> Vec<(&'static str, String)> {
        let headers = stateless_request_headers(frame).expect("a stateless request");
        let seen = StatelessHeaders {
            protocol_version: get(&headers, "mcp-protocol-version"),
            method: get(&headers, "mcp-method"),
            name: get(&headers, "mcp-name"),
        };
        assert_eq!(check_stateless_headers(frame, seen), Ok(()), "{frame}: {headers:?}");
        headers
    }

    #[test]
    fn headers_repeat_the_version_the_method_and_the_name() {
        let call = request("tools/call", &format!(r#""name":"get_weather","arguments":{{}},{META}"#));
        let headers = assert_accepted(&call);
        let expected = [
            (PROTOCOL_VERSION, "2026-07-28".to_string()),
            (METHOD, "tools/call".to_string()),
            (NAME, "get_weather".to_string()),
        ];
        assert_eq!(headers, expected);
        let read = request("resources/read", &format!(r#""uri":"file:///a b.txt",{META}"#));
        assert_eq!(get(&assert_accepted(&read), NAME), Some("file:///a b.txt"));
        let prompt = request("prompts/get", &format!(r#""name":"greet",{META}"#));
        assert_eq!(get(&assert_accepted(&prompt), NAME), Some("greet"));
        // Other methods have no name header, even with a `name` member.
        let discover = request("server/discover", &format!(r#""name":"x",{META}"#));
        let headers = assert_accepted(&discover);
        assert_eq!(get(&headers, NAME), None);
        assert_eq!(get(&headers, METHOD), Some("server/discover"));
    }

    #[test]
    fn unsafe_values_are_sent_base64_encoded() {
        let cafe = request("tools/call", &format!(r#""name":"café",{META}"#));
        assert_eq!(get(&assert_accepted(&cafe), NAME), Some("=?base64?Y2Fmw6k=?="));
        for name in [" padded", "padded ", "tab\\there", "line\\nbreak", "=?base64?Y2Fmw6k=?=", "=?utf-8?q?x?=", "日本"]
        {
            let frame = request("prompts/get", &format!(r#""name":"{name}",{META}"#));
            let value = get(&assert_accepted(&frame), NAME).unwrap().to_string();
            assert!(value.starts_with("=?base64?") && value.ends_with("?="), "{name}: {value}");
        }
        // An escaped but plain name is sent as it reads.
        let escaped = request("tools/call", &format!(r#""name":"a\u0062c",{META}"#));
        assert_eq!(get(&assert_accepted(&escaped), NAME), Some("abc"));
        assert_eq!(header_value("=?"), "=?");
    }

    #[test]
    fn only_stateless_requests_get_headers() {
        let none = [
            // Handshake era: no protocolVersion in `_meta`.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#.to_string(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_string(),
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#.to_string(),
            // A version that is not a string.
            request("tools/list", r#""_meta":{"io.modelcontextprotocol/protocolVersion":20260728}"#),
            // Not requests.
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":3,{META}}}}}"#),
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#
                .to_string(),
            "not json".to_string(),
        ];
        for frame in none {
            assert_eq!(stateless_request_headers(&frame), None, "{frame}");
        }
        // A name of the wrong type leaves the name header out (the check ignores it too).
        let odd = request("tools/call", &format!(r#""name":42,{META}"#));
        assert_eq!(get(&assert_accepted(&odd), NAME), None);
    }
}
