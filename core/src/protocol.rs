//! JSON-RPC 2.0 framing for MCP, parsed without building trees.
//!
//! An incoming frame is split into its envelope (`id`, `method`) and raw
//! `params`/`result`/`error` slices of the frame, so a payload the gateway only
//! forwards is copied, never parsed and re-serialised. One classifier, [`parse`]
//! (and [`read`], which also hands over a request's params' fields): a one-pass
//! scanner reads the frames it recognises, `serde_json` decides the rest, and a
//! fuzz check holds the two to the same answers.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::{String, ToString};
use core::fmt;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

mod fields;
mod incoming;
mod scan;

pub(crate) use fields::RawFields;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use incoming::check_read_agrees;
pub(crate) use incoming::{gateway_id, read};

/// JSON-RPC error codes the gateway sends.
pub mod code {
    /// The frame was not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The frame was JSON but not a JSON-RPC message.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params were wrong (unknown tool, bad cursor, missing field).
    pub const INVALID_PARAMS: i64 = -32602;
    /// The gateway failed internally or a backend failed.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// An HTTP-level refusal by a host's HTTP server (too many connections, a
    /// bad header): the transport's own; the engine never sends it.
    pub const TRANSPORT_ERROR: i64 = -32000;
    /// A backend is unavailable (down, reconnecting, breaker open, gave up).
    pub const BACKEND_UNAVAILABLE: i64 = -32001;
    /// A request ran past its timeout.
    pub const REQUEST_TIMEOUT: i64 = -32002;
    /// A table or queue is full.
    pub const OVERLOADED: i64 = -32003;
    /// The backend needs the user to authenticate again.
    pub const REAUTH_REQUIRED: i64 = -32004;
    /// The request needs the user to visit a URL first (MCP 2025-11-25
    /// `URLElicitationRequiredError`): sent instead of [`REAUTH_REQUIRED`] to
    /// clients that can open a URL elicitation, with the login in `data`.
    pub const URL_ELICITATION_REQUIRED: i64 = -32042;
}

/// Just a message's id, when the rest does not make a JSON-RPC message.
#[derive(Deserialize)]
struct IdOnly<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<Text<'a>>,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<Text<'a>>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// A JSON string borrowed from the frame when it has no escapes. serde's own
/// `Option<Cow<str>>` always copies; this is the zero-allocation form.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Text<'a>(pub Cow<'a, str>);

impl core::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl core::borrow::Borrow<str> for Text<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(core::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.into())))
            }
        }
        deserializer.deserialize_str(Visitor(core::marker::PhantomData))
    }
}

/// The string a raw JSON value holds (`None`: not a string): borrowed when it
/// has nothing to decode, else decoded by `serde_json`.
pub(crate) fn string_value(raw: &str) -> Option<Text<'_>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if inner.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        return Some(Text(Cow::Borrowed(inner)));
    }
    serde_json::from_str(raw).ok()
}

/// One parsed JSON-RPC message, its raw JSON (ids, params, results, errors)
/// borrowed from its frame as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    /// A request: expects exactly one response.
    Request {
        /// The id exactly as sent (number or string JSON).
        id: &'a str,
        /// Method name.
        method: Cow<'a, str>,
        /// Raw params, if any (`null` counts as none).
        params: Option<&'a str>,
    },
    /// A notification: no response.
    Notification {
        /// Method name.
        method: Cow<'a, str>,
        /// Raw params, if any.
        params: Option<&'a str>,
    },
    /// A successful response.
    Response {
        /// The id of the request it answers.
        id: &'a str,
        /// Raw result.
        result: &'a str,
    },
    /// An error response.
    Error {
        /// The id of the request it answers (`None` for `null`: the peer could not tell).
        id: Option<&'a str>,
        /// Raw error object.
        error: &'a str,
    },
}

/// Why a frame is not a usable message, with the JSON-RPC error to answer it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError {
    /// -32700 or -32600.
    pub code: i64,
    /// Human text.
    pub message: String,
    /// The request id, when it could be recovered, so the error can be correlated.
    pub id: Option<String>,
}

/// Parses one frame into a [`Message`]: in one pass when the scanner recognises
/// it, else as [`parse_with_serde`] decides (the same answer either way).
pub fn parse(frame: &str) -> Result<Message<'_>, FrameError> {
    read(frame, &mut RawFields::default()).map(|(message, _)| message)
}

/// [`parse`] by `serde_json` alone: the judge of frames the scanner declines
/// (escaped keys, repeated members, odd ids, not JSON at all).
pub(crate) fn parse_with_serde(frame: &str) -> Result<Message<'_>, FrameError> {
    // An error about a message that has an id carries that id as the client wrote
    // it, whatever its type: the client (and an HTTP transport waiting to answer
    // the POST) match the answer by it.
    let invalid = |message: String, id: Option<&RawValue>| FrameError {
        code: code::INVALID_REQUEST,
        message,
        id: id.map(|id| String::from(id.get().trim())),
    };
    let env: Envelope<'_> = match serde_json::from_str(frame) {
        Ok(env) => env,
        Err(e) => {
            if serde_json::from_str::<IgnoredAny>(frame).is_err() {
                return Err(FrameError { code: code::PARSE_ERROR, message: format!("parse error: {e}"), id: None });
            }
            let id = serde_json::from_str::<IdOnly<'_>>(frame).ok().and_then(|m| m.id);
            return Err(invalid(format!("invalid JSON-RPC message: {e}"), id));
        }
    };
    if env.jsonrpc.as_deref() != Some("2.0") {
        return Err(invalid("jsonrpc must be \"2.0\"".into(), env.id));
    }
    match (env.id, env.method.map(|m| m.0), env.result, env.error) {
        (Some(id), Some(method), None, None) => {
            if !valid_id(id) {
                return Err(invalid("id must be a string or an integer".into(), Some(id)));
            }
            Ok(Message::Request { id: id.get(), method, params: env.params.map(RawValue::get) })
        }
        (None, Some(method), None, None) => Ok(Message::Notification { method, params: env.params.map(RawValue::get) }),
        (Some(id), None, Some(result), None) => Ok(Message::Response { id: id.get(), result: result.get() }),
        (id, None, None, Some(error)) => Ok(Message::Error { id: id.map(RawValue::get), error: error.get() }),
        (id, _, _, _) => Err(invalid("not a request, notification or response".into(), id)),
    }
}

fn valid_id(id: &RawValue) -> bool {
    let text = id.get();
    if text.starts_with('"') {
        return true;
    }
    serde_json::from_str::<i64>(text).is_ok() || serde_json::from_str::<u64>(text).is_ok()
}

/// Quotes `text` as a JSON string.
pub(crate) fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\""))
}

/// A request frame with a gateway-allocated id, built in one allocation.
pub(crate) fn request(id: u64, method: &str, params: Option<&str>) -> String {
    match params {
        Some(p) => request_parts(id, method, &[p]),
        None => request_parts(id, method, &[]),
    }
}

/// A request frame whose params are the concatenation of `params` (none: no
/// params member), built in one allocation.
pub(crate) fn request_parts(id: u64, method: &str, params: &[&str]) -> String {
    let escaped;
    let method = if is_plain(method) {
        method
    } else {
        escaped = quote(method);
        &escaped[1..escaped.len() - 1]
    };
    let mut digits = [0; 20];
    let id = decimal(id, &mut digits);
    let (open, between, params_key) = (r#"{"jsonrpc":"2.0","id":"#, r#","method":""#, r#","params":"#);
    let params_len: usize = params.iter().map(|p| p.len()).sum();
    let len = open.len() + id.len() + between.len() + method.len() + params_key.len() + params_len + 2;
    let mut out = String::with_capacity(len);
    out.push_str(open);
    out.push_str(id);
    out.push_str(between);
    out.push_str(method);
    out.push('"');
    if !params.is_empty() {
        out.push_str(params_key);
        params.iter().for_each(|p| out.push_str(p));
    }
    out.push('}');
    out
}

/// Whether `text` needs no escaping inside a JSON string.
fn is_plain(text: &str) -> bool {
    text.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// Appends `text` as a JSON string.
pub(crate) fn push_quoted(out: &mut String, text: &str) {
    if is_plain(text) {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        out.push_str(&quote(text));
    }
}

/// Decimal digits of `n`, without allocating.
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return core::str::from_utf8(&buf[i..]).unwrap_or("0");
        }
    }
}

/// A notification frame.
pub(crate) fn notification(method: &str, params: Option<&str>) -> String {
    match params {
        Some(p) => format!(r#"{{"jsonrpc":"2.0","method":{},"params":{p}}}"#, quote(method)),
        None => format!(r#"{{"jsonrpc":"2.0","method":{}}}"#, quote(method)),
    }
}

/// A success response; `id` and `result` are raw JSON.
pub(crate) fn response(id: &str, result: &str) -> String {
    let (open, between) = (r#"{"jsonrpc":"2.0","id":"#, r#","result":"#);
    let mut out = String::with_capacity(open.len() + id.len() + between.len() + result.len() + 1);
    out.push_str(open);
    out.push_str(id);
    out.push_str(between);
    out.push_str(result);
    out.push('}');
    out
}

/// An error response with a raw JSON error object.
pub(crate) fn raw_error_response(id: &str, error: &str) -> String {
    joined(&[r#"{"jsonrpc":"2.0","id":"#, id, r#","error":"#, error, "}"])
}

/// The pieces concatenated into one exactly-sized allocation.
fn joined(pieces: &[&str]) -> String {
    let mut out = String::with_capacity(pieces.iter().map(|p| p.len()).sum());
    pieces.iter().for_each(|p| out.push_str(p));
    out
}

/// An error response; `id` is raw JSON, `data` raw JSON if any.
pub fn error_response(id: &str, code: i64, message: &str, data: Option<&str>) -> String {
    raw_error_response(id, &error_object(code, message, data))
}

/// A JSON-RPC error object; `data` raw JSON if any.
pub(crate) fn error_object(code: i64, message: &str, data: Option<&str>) -> String {
    match data {
        Some(d) => format!(r#"{{"code":{code},"message":{},"data":{d}}}"#, quote(message)),
        None => format!(r#"{{"code":{code},"message":{}}}"#, quote(message)),
    }
}

/// Protocol revisions of the 2025 (handshake) era that tether speaks, newest first.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The version tether answers a client's `initialize` with: the client's if supported, else the newest.
pub(crate) fn negotiate_version(requested: Option<&str>) -> &'static str {
    requested.and_then(|r| SUPPORTED_VERSIONS.iter().find(|v| **v == r).copied()).unwrap_or(SUPPORTED_VERSIONS[0])
}

/// Revisions of the stateless era (per-request `_meta`, no handshake) tether
/// serves to clients, newest first.
pub const STATELESS_VERSIONS: [&str; 1] = ["2026-07-28"];

/// `_meta` keys of a stateless-era request.
pub(crate) mod meta {
    /// The revision the request speaks (required).
    pub(crate) const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// The client's capabilities for this request (required; `{}` means none).
    pub(crate) const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// Who the client says it is (optional).
    pub(crate) const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// Log messages wanted for this request, from this level up (optional).
    pub(crate) const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    /// Who the server says it is, in every result's `_meta`.
    pub(crate) const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
}

/// Error codes of the stateless era.
pub(crate) mod stateless_code {
    /// The request's `_meta` names a revision the server does not speak.
    pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// Answering needs a client capability the request did not declare; `data`
    /// names them as `{"requiredCapabilities": {"sampling": {}}}`.
    pub(crate) const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
}

/// What a request's `_meta` says about the era it speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RequestEra {
    /// No `protocolVersion` in `_meta`: a handshake-era request.
    Handshake,
    /// A stateless-era request, checked: its revision is one tether serves and
    /// the required keys are there.
    Stateless {
        /// Its revision.
        version: &'static str,
        /// Its `clientCapabilities`, raw JSON.
        capabilities: String,
        /// The log messages it wants while it runs, from this level up.
        log_level: Option<String>,
    },
    /// A stateless-era request tether must refuse: (code, message, data as raw JSON).
    Refused(i64, String, Option<String>),
}

/// Reads the era of a request from its raw params, and validates a stateless
/// one in the specification's order: required keys (-32602), then the revision
/// (-32022, with the revisions tether speaks).
pub(crate) fn request_era(params: Option<&str>) -> RequestEra {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(default, borrow, rename = "_meta")]
        meta: Option<&'a RawValue>,
    }
    let Some(meta) = params.and_then(|p| serde_json::from_str::<Params<'_>>(p).ok()).and_then(|p| p.meta) else {
        return RequestEra::Handshake;
    };
    let Ok(serde_json::Value::Object(meta)) = serde_json::from_str::<serde_json::Value>(meta.get()) else {
        return RequestEra::Handshake;
    };
    let Some(version) = meta.get(meta::PROTOCOL_VERSION) else { return RequestEra::Handshake };
    let Some(version) = version.as_str() else {
        let msg = format!("_meta[\"{}\"] must be a string", meta::PROTOCOL_VERSION);
        return RequestEra::Refused(code::INVALID_PARAMS, msg, None);
    };
    let capabilities = match meta.get(meta::CLIENT_CAPABILITIES) {
        Some(c @ serde_json::Value::Object(_)) => c.to_string(),
        Some(_) => {
            let msg = format!("_meta[\"{}\"] must be an object", meta::CLIENT_CAPABILITIES);
            return RequestEra::Refused(code::INVALID_PARAMS, msg, None);
        }
        None => {
            let msg = format!("missing _meta[\"{}\"]", meta::CLIENT_CAPABILITIES);
            return RequestEra::Refused(code::INVALID_PARAMS, msg, None);
        }
    };
    match STATELESS_VERSIONS.iter().find(|v| **v == version) {
        Some(version) => {
            let log_level = match meta.get(meta::LOG_LEVEL) {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(l)) if log_severity(l).is_some() => Some(l.clone()),
                Some(other) => {
                    let msg = format!(
                        "_meta[\"{}\"] {other} is not a log level (debug, info, notice, warning, error, critical, alert, emergency)",
                        meta::LOG_LEVEL
                    );
                    return RequestEra::Refused(code::INVALID_PARAMS, msg, None);
                }
            };
            RequestEra::Stateless { version, capabilities, log_level }
        }
        None => {
            let supported: alloc::vec::Vec<&str> =
                STATELESS_VERSIONS.iter().chain(SUPPORTED_VERSIONS.iter()).copied().collect();
            let data = serde_json::json!({"supported": supported, "requested": version}).to_string();
            let msg = "Unsupported protocol version".into();
            RequestEra::Refused(stateless_code::UNSUPPORTED_PROTOCOL_VERSION, msg, Some(data))
        }
    }
}

/// The rank of a log level (RFC 5424 order, `debug` lowest); `None` for a
/// string that is not one. A message is sent when its rank is at least the
/// level asked for.
pub(crate) fn log_severity(level: &str) -> Option<u8> {
    const LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
    LEVELS.iter().position(|l| *l == level).map(|p| p as u8)
}

/// The stateless revision's request headers on HTTP, as received (values raw).
#[derive(Clone, Copy, Debug, Default)]
pub struct StatelessHeaders<'a> {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a str>,
    /// `Mcp-Method`.
    pub method: Option<&'a str>,
    /// `Mcp-Name`.
    pub name: Option<&'a str>,
}

/// Checks a stateless-era HTTP request's headers against its body (2026-07-28
/// transport, "Server Validation"): the version, the method and, for
/// `tools/call`, `prompts/get` and `resources/read`, the name or URI must be there
/// and match (a `=?base64?…?=` value is decoded first). A request without
/// stateless `_meta` is not checked here. `Err` holds the `HeaderMismatch`
/// (-32020) message; the answer is HTTP 400.
pub fn check_stateless_headers(frame: &str, headers: StatelessHeaders<'_>) -> Result<(), String> {
    let Ok(serde_json::Value::Object(message)) = serde_json::from_str::<serde_json::Value>(frame) else {
        return Ok(());
    };
    let params = message.get("params").and_then(serde_json::Value::as_object);
    let version = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(meta::PROTOCOL_VERSION))
        .and_then(serde_json::Value::as_str);
    let Some(version) = version else { return Ok(()) };
    let method = message.get("method").and_then(serde_json::Value::as_str).unwrap_or("");
    let same = |header: Option<&str>, body: &str, name: &str| match header {
        None => Err(format!("missing {name} header (the body says {})", quote(body))),
        Some(h) if decode_header(h).as_deref() == Some(body) => Ok(()),
        Some(h) => Err(format!("{name} header {} does not match the body's {}", quote(h), quote(body))),
    };
    same(headers.protocol_version.map(str::trim), version, "MCP-Protocol-Version")?;
    same(headers.method, method, "Mcp-Method")?;
    let named = match method {
        "tools/call" | "prompts/get" => params.and_then(|p| p.get("name")),
        "resources/read" => params.and_then(|p| p.get("uri")),
        // The tasks extension routes its methods by task id.
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.and_then(|p| p.get("taskId")),
        _ => None,
    };
    if let Some(name) = named.and_then(serde_json::Value::as_str) {
        same(headers.name, name, "Mcp-Name")?;
    }
    Ok(())
}

/// A header value as sent: plain, or `=?base64?…?=` around the UTF-8 bytes
/// (`None`: invalid Base64 or UTF-8 inside the markers).
pub(crate) fn decode_header(value: &str) -> Option<String> {
    use base64::Engine;
    match value.strip_prefix("=?base64?").and_then(|v| v.strip_suffix("?=")) {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_string()),
    }
}

/// `HeaderMismatch`: a stateless request's HTTP headers disagree with its body.
pub const HEADER_MISMATCH: i64 = -32020;

/// The client capability a server-to-client request needs (`sampling`,
/// `elicitation`, `roots`); `None` for a method tether does not forward.
pub(crate) fn input_capability(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Whether `frame` is a JSON-RPC error response.
pub fn is_error_response(frame: &str) -> bool {
    matches!(parse(frame), Ok(Message::Error { .. }))
}

/// The HTTP status of a stateless-era answer (2026-07-28 transport): 400 for a
/// malformed request (-32602 on `_meta`, -32020..-32022), 404 for an unknown
/// method, 200 otherwise. Hosts call this; the mapping is protocol, not transport.
pub fn stateless_http_status(frame: &str) -> u16 {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        error: Option<ErrorCode>,
    }
    #[derive(Deserialize)]
    struct ErrorCode {
        code: i64,
    }
    let code = serde_json::from_str::<Answer>(frame).ok().and_then(|a| a.error).map(|e| e.code);
    match code {
        Some(code::INVALID_PARAMS) | Some(-32022..=-32020) => 400,
        Some(code::METHOD_NOT_FOUND) => 404,
        _ => 200,
    }
}

/// A result for a stateless-era client: `resultType` added when absent (a result
/// without it means `complete`, but the revision requires it), and
/// `extra` members (raw `"key":value` pairs) appended. `None`: not an object.
pub(crate) fn stateless_result(result: &str, extra: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Probe<'a> {
        #[serde(default, borrow, rename = "resultType")]
        result_type: Option<&'a RawValue>,
    }
    let probe: Probe<'_> = serde_json::from_str(result).ok()?;
    let body = result.trim();
    let inner = body.strip_prefix('{')?.strip_suffix('}')?.trim();
    let mut out = String::with_capacity(body.len() + extra.len() + 32);
    out.push('{');
    let mut members = alloc::vec::Vec::new();
    if probe.result_type.is_none() {
        members.push(r#""resultType":"complete""#);
    }
    if !inner.is_empty() {
        members.push(inner);
    }
    if !extra.is_empty() {
        members.push(extra);
    }
    out.push_str(&members.join(","));
    out.push('}');
    Some(out)
}

/// How long a result may be cached, and by whom: `ttlMs` and `cacheScope` of the
/// 2026-07-28 revision, on lists, reads and `server/discover`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheHint {
    /// Fresh for this many milliseconds after it is received (0: stale at once).
    pub ttl_ms: u64,
    /// May be shared across authorization contexts (`"public"`), else `"private"`.
    pub public: bool,
}

impl CacheHint {
    /// What a result without hints means (older servers): stale at once, private.
    pub(crate) const STALE: CacheHint = CacheHint { ttl_ms: 0, public: false };

    /// The hint a result carries; absent or invalid members mean [`CacheHint::STALE`]'s.
    pub(crate) fn of(result: &Map<String, Value>) -> CacheHint {
        CacheHint {
            // A negative TTL counts as 0; so does anything not a number.
            ttl_ms: result.get("ttlMs").and_then(Value::as_f64).map_or(0, |t| if t > 0.0 { t as u64 } else { 0 }),
            public: result.get("cacheScope").and_then(Value::as_str) == Some("public"),
        }
    }

    /// A hint that holds for a result made of both parts: the shorter life, and
    /// public only if both parts are.
    pub(crate) fn and(self, other: CacheHint) -> CacheHint {
        CacheHint { ttl_ms: self.ttl_ms.min(other.ttl_ms), public: self.public && other.public }
    }

    /// The result members, raw: `"ttlMs":N,"cacheScope":"..."`.
    pub(crate) fn members(self) -> String {
        let scope = if self.public { "public" } else { "private" };
        format!(r#""ttlMs":{},"cacheScope":"{scope}""#, self.ttl_ms)
    }
}

/// A cacheable result for a stateless-era client: like [`stateless_result`], with
/// `hint`'s members unless the result carries its own (a stateless backend's).
/// Unless `shared` (the same for every authorization context), it is private
/// whatever it says: a shared cache must not serve it to someone else.
pub(crate) fn cacheable_result(result: &str, hint: CacheHint, shared: bool) -> Option<String> {
    #[derive(Deserialize)]
    struct Probe<'a> {
        #[serde(default, borrow, rename = "ttlMs")]
        ttl: Option<&'a RawValue>,
        #[serde(default, borrow, rename = "cacheScope")]
        scope: Option<&'a RawValue>,
    }
    let probe: Probe<'_> = serde_json::from_str(result).ok()?;
    let extra = if probe.ttl.is_some() || probe.scope.is_some() {
        // Its own hints, completed when half there.
        let mut own_result = serde_json::from_str::<Map<String, Value>>(result).ok()?;
        let own = CacheHint::of(&own_result);
        if own.public && !shared {
            own_result.insert("ttlMs".into(), Value::from(own.ttl_ms));
            own_result.insert("cacheScope".into(), Value::from("private"));
            return stateless_result(&serde_json::to_string(&own_result).ok()?, "");
        }
        match (probe.ttl.is_some(), probe.scope.is_some()) {
            (true, true) => String::new(),
            (true, false) => format!(r#""cacheScope":"{}""#, if own.public { "public" } else { "private" }),
            _ => format!(r#""ttlMs":{}"#, own.ttl_ms),
        }
    } else {
        CacheHint { public: hint.public && shared, ..hint }.members()
    };
    stateless_result(result, &extra)
}

/// Who tether says it is to backends (`initialize`, and every stateless-era request).
pub(crate) const CLIENT_INFO: &str = concat!(r#"{"name":"tether","version":""#, env!("CARGO_PKG_VERSION"), r#""}"#);

/// The `_meta` members every request to a stateless-era backend carries, as raw
/// `"key":value` pairs: tether's revision, `capabilities` (a raw object: what the
/// client behind this request can be asked through `input_required`) and who tether is.
pub(crate) fn stateless_meta_members(capabilities: &str) -> String {
    format!(
        r#""{}":"{}","{}":{capabilities},"{}":{CLIENT_INFO}"#,
        meta::PROTOCOL_VERSION,
        STATELESS_VERSIONS[0],
        meta::CLIENT_CAPABILITIES,
        meta::CLIENT_INFO,
    )
}

/// Raw params (`None`: none) with raw `"key":value` `members` added to their
/// `_meta` object (created when absent). Off the hot path: parses the params.
pub(crate) fn params_with_meta(params: Option<&str>, members: &str) -> String {
    let mut map = params
        .and_then(|p| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(p).ok())
        .unwrap_or_default();
    let extra = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&format!("{{{members}}}"))
        .unwrap_or_default();
    let meta = map.entry("_meta").or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    if let serde_json::Value::Object(meta) = meta {
        meta.extend(extra);
    }
    serde_json::to_string(&map).unwrap_or_else(|_| String::from("{}"))
}

/// Whether a raw result is a stateless-era `input_required` result (the
/// server needs answers from the client before it can complete the request).
pub(crate) fn is_input_required(result: &str) -> bool {
    #[derive(Deserialize)]
    struct Probe<'a> {
        #[serde(default, borrow, rename = "resultType")]
        result_type: Option<Text<'a>>,
    }
    // Cheap test first: every forwarded result passes here.
    result.contains("input_required")
        && serde_json::from_str::<Probe<'_>>(result).is_ok_and(|p| p.result_type.as_deref() == Some("input_required"))
}

/// The protocol era of a peer: the handshake era (2024-11-05 .. 2025-11-25) or
/// the stateless one (2026-07-28).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Era {
    /// `initialize` handshake, sessions, ping, server-to-client requests (2024-11-05 .. 2025-11-25).
    Handshake,
    /// Per-request `_meta`, `server/discover`, no sessions, no server-to-client
    /// requests (2026-07-28).
    Stateless,
}

impl Era {
    /// The newest revision of the era, as status displays name it.
    pub fn revision(self) -> &'static str {
        match self {
            Era::Handshake => "2025-11-25",
            Era::Stateless => "2026-07-28",
        }
    }
}

/// The defaults an `elicitation/create` request's `requestedSchema` gives its
/// fields, as a raw JSON object (`None` when it gives none): SEP-1034 has the
/// client fill them in when its user accepts without them.
pub(crate) fn elicitation_defaults(params: Option<&str>) -> Option<String> {
    let params: Map<String, Value> = serde_json::from_str(params?).ok()?;
    let properties = params.get("requestedSchema")?.get("properties")?.as_object()?;
    let defaults: Map<String, Value> =
        properties.iter().filter_map(|(name, schema)| Some((name.clone(), schema.get("default")?.clone()))).collect();
    (!defaults.is_empty()).then(|| Value::Object(defaults).to_string())
}

/// An elicitation result with the schema's `defaults` (from
/// [`elicitation_defaults`]) filled in for the fields an accepting client left
/// out; `None` when it needs none (declined, cancelled, or nothing missing).
pub(crate) fn with_elicitation_defaults(result: &str, defaults: &str) -> Option<String> {
    let mut result: Map<String, Value> = serde_json::from_str(result).ok()?;
    if result.get("action").and_then(Value::as_str) != Some("accept") {
        return None;
    }
    let defaults: Map<String, Value> = serde_json::from_str(defaults).ok()?;
    let content = result.entry("content").or_insert_with(|| Value::Object(Map::new())).as_object_mut()?;
    let mut filled = false;
    for (name, value) in defaults {
        if !content.contains_key(&name) {
            content.insert(name, value);
            filled = true;
        }
    }
    filled.then(|| Value::Object(result).to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_accepted_elicitation_gets_the_defaults_it_left_out() {
        let params = r#"{"message":"m","requestedSchema":{"type":"object","properties":{
            "name":{"type":"string","default":"John Doe"},"age":{"type":"integer","default":30},
            "verified":{"type":"boolean","default":true},"note":{"type":"string"}}}}"#;
        let defaults = super::elicitation_defaults(Some(params)).unwrap();
        let filled = super::with_elicitation_defaults(r#"{"action":"accept","content":{"age":41}}"#, &defaults);
        let filled: serde_json::Value = serde_json::from_str(&filled.unwrap()).unwrap();
        assert_eq!(
            filled,
            serde_json::json!({"action":"accept","content":{"age":41,"name":"John Doe","verified":true}})
        );
        let accepted_bare = super::with_elicitation_defaults(r#"{"action":"accept"}"#, &defaults).unwrap();
        assert!(accepted_bare.contains(r#""name":"John Doe""#), "{accepted_bare}");
        assert_eq!(super::with_elicitation_defaults(r#"{"action":"decline"}"#, &defaults), None);
        let complete = r#"{"action":"accept","content":{"name":"A","age":1,"verified":false}}"#;
        assert_eq!(super::with_elicitation_defaults(complete, &defaults), None, "nothing missing: forwarded as is");
        assert_eq!(super::elicitation_defaults(Some(r#"{"requestedSchema":{"properties":{"a":{}}}}"#)), None);
    }

    use super::*;

    #[test]
    fn cache_hints_are_read_leniently_and_combined_conservatively() {
        let of = |v: serde_json::Value| CacheHint::of(v.as_object().unwrap());
        assert_eq!(of(serde_json::json!({})), CacheHint::STALE);
        assert_eq!(of(serde_json::json!({"ttlMs": -5, "cacheScope": "public"})), CacheHint { ttl_ms: 0, public: true });
        assert_eq!(of(serde_json::json!({"ttlMs": "9", "cacheScope": "shared"})), CacheHint::STALE);
        let long = CacheHint { ttl_ms: 60_000, public: true };
        let short = CacheHint { ttl_ms: 1_000, public: false };
        assert_eq!(long.and(short), CacheHint { ttl_ms: 1_000, public: false });
        // A result's own hint wins, completed when half there; never duplicated.
        let hinted = |r: &str| cacheable_result(r, long, true).unwrap();
        assert_eq!(hinted("{}"), r#"{"resultType":"complete","ttlMs":60000,"cacheScope":"public"}"#);
        assert_eq!(hinted(r#"{"ttlMs":5}"#), r#"{"resultType":"complete","ttlMs":5,"cacheScope":"private"}"#);
        assert_eq!(
            hinted(r#"{"ttlMs":5,"cacheScope":"public"}"#),
            r#"{"resultType":"complete","ttlMs":5,"cacheScope":"public"}"#
        );
        // Not the same for everyone: private, whoever says public.
        let private = |r: &str| cacheable_result(r, long, false).unwrap();
        assert_eq!(private("{}"), r#"{"resultType":"complete","ttlMs":60000,"cacheScope":"private"}"#);
        assert_eq!(
            private(r#"{"contents":[],"ttlMs":5,"cacheScope":"public"}"#),
            r#"{"resultType":"complete","cacheScope":"private","contents":[],"ttlMs":5}"#
        );
    }

    #[test]
    fn stateless_headers_must_match_the_body() {
        let frame = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"café","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let ok = StatelessHeaders {
            protocol_version: Some("2026-07-28"),
            method: Some("tools/call"),
            name: Some("=?base64?Y2Fmw6k=?="),
        };
        assert_eq!(check_stateless_headers(frame, ok), Ok(()));
        let cases = [
            StatelessHeaders { protocol_version: None, ..ok },
            StatelessHeaders { protocol_version: Some("2025-11-25"), ..ok },
            StatelessHeaders { method: Some("TOOLS/CALL"), ..ok },
            StatelessHeaders { name: None, ..ok },
            StatelessHeaders { name: Some("cafe"), ..ok },
        ];
        for headers in cases {
            assert!(check_stateless_headers(frame, headers).is_err(), "{headers:?}");
        }
        // Not a stateless request: not checked here.
        let legacy = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert_eq!(check_stateless_headers(legacy, StatelessHeaders::default()), Ok(()));
    }

    #[test]
    fn built_frames_are_the_json_they_claim() {
        for (id, method, params) in
            [(0, "tools/call", Some(r#"{"a":1}"#)), (18446744073709551615, "we\"ird\n\u{1}é", None)]
        {
            let v: serde_json::Value = serde_json::from_str(&request(id, method, params)).unwrap();
            assert_eq!(v["id"], id);
            assert_eq!(v["method"], method);
            assert_eq!(v.get("params").map(alloc::string::ToString::to_string).as_deref(), params);
        }
        let v: serde_json::Value = serde_json::from_str(&response(r#""x""#, "[1]")).unwrap();
        assert_eq!((v["id"].as_str(), v["result"][0].as_u64()), (Some("x"), Some(1)));
    }

    #[test]
    fn classifies_messages() {
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Ok(Message::Request { .. })));
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","method":"x"}"#), Ok(Message::Notification { .. })));
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#), Ok(Message::Response { .. })));
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":null,"error":{}}"#), Ok(Message::Error { .. })));
    }

    #[test]
    fn rejects_bad_frames_with_the_right_code() {
        assert_eq!(parse("{nope").unwrap_err().code, code::PARSE_ERROR);
        assert_eq!(parse("[1,2]").unwrap_err().code, code::INVALID_REQUEST);
        assert_eq!(parse(r#"{"id":1,"method":"x"}"#).unwrap_err().code, code::INVALID_REQUEST);
        let e = parse(r#"{"jsonrpc":"1.0","id":7,"method":"x"}"#).unwrap_err();
        assert_eq!(e.id.as_deref(), Some("7"));
    }

    #[test]
    fn an_id_tether_cannot_use_is_refused_carrying_it_as_written() {
        for id in [r#"{"a":1}"#, "1.5", "18446744073709551616", "-9223372036854775809", "true", "[1]"] {
            let e = parse(&format!(r#"{{"jsonrpc":"2.0","id": {id} ,"method":"x"}}"#)).unwrap_err();
            assert_eq!((e.code, e.id.as_deref()), (code::INVALID_REQUEST, Some(id)), "{id}");
        }
        let e = parse(r#"{"jsonrpc":"2.0","id":1.5,"method":7}"#).unwrap_err();
        assert_eq!(e.id.as_deref(), Some("1.5"), "a message that is not JSON-RPC still has its id: {}", e.message);
    }

    #[test]
    fn escaped_method_names_parse() {
        let Ok(Message::Request { method, .. }) = parse(r#"{"jsonrpc":"2.0","id":1,"method":"p\u0069ng"}"#) else {
            panic!()
        };
        assert_eq!(method, "ping");
    }

    #[test]
    fn version_negotiation() {
        assert_eq!(negotiate_version(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate_version(Some("1999-01-01")), "2025-11-25");
        assert_eq!(negotiate_version(None), "2025-11-25");
    }
}
