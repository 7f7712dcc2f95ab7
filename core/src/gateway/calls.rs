//! The router's tables: requests in flight to backends, calls waiting for a
//! backend, backend-to-client requests, and list requests waiting on the
//! aggregation deadline.

use alloc::borrow::Cow;
use alloc::string::{String, ToString};

use crate::catalog::ListKind;
use crate::io::{Generation, SessionId};
use crate::protocol;
use crate::time::Instant;

/// A request the gateway sent to a backend and awaits an answer to.
#[derive(Clone, Debug)]
pub(super) struct Call {
    pub server: crate::io::ServerName,
    pub generation: Generation,
    /// When it times out; `None` when another timer covers it (the handshake).
    pub deadline: Option<Instant>,
    pub kind: CallKind,
}

/// Why the gateway sent a request.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // client calls are nearly all of the table: boxing them would allocate per call
pub(super) enum CallKind {
    /// The `initialize` handshake. `may_probe`: a refusal may mean the server now
    /// speaks only the stateless revision: probe with `server/discover` before giving up.
    Initialize { may_probe: bool },
    /// The `server/discover` probe that opens a connection in the stateless era.
    /// `may_initialize`: anything but a stateless answer falls back to `initialize`.
    Probe { may_initialize: bool },
    /// A stateless backend's `subscriptions/listen`: open for as long as the
    /// backend streams change notifications on it.
    Listen,
    /// One page of a discovery list.
    Discover { kind: ListKind, pages: u32 },
    /// A health check (`ping`; `tools/list` where ping is unsupported;
    /// `server/discover` in the stateless era).
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
    /// A call or `tasks/*` request whose answer may name tasks the backend runs:
    /// their ids are namespaced for clients.
    TaskIds,
}

/// A client request forwarded (or about to be forwarded) to a backend.
#[derive(Clone, Debug)]
pub(super) struct ClientCall {
    pub session: SessionId,
    /// The client's id, raw JSON.
    pub id: crate::io::RawId,
    pub method: &'static str,
    /// Params rewritten for the backend (names and URIs), raw JSON, without the progress token.
    pub params: Forward,
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
    /// A stateless-era client's capabilities for this request (what it can be
    /// asked through `input_required`); `None` for handshake-era sessions.
    pub caps: Option<serde_json::Map<String, serde_json::Value>>,
    /// A stateless-era client's `logLevel` for this request: log messages from
    /// the backend while it runs go to it, related to it, from that level up.
    pub log_level: Option<String>,
    /// The client was answered `input_required` with this `requestState`: the
    /// call waits, still running at the backend, for the client's retry.
    pub awaiting_input: Option<String>,
    /// Waits for a credential newer than this epoch before it is sent (it was
    /// refused with 401 or needs a wider scope); 0 when it waits for none.
    pub wait_epoch: u64,
    /// Already resent once with a new credential: a second refusal fails it.
    pub auth_retried: bool,
    /// Its client declared tasks: if no answer came by then, the client is
    /// answered with a task and the call goes on for it.
    pub task_window: Option<Instant>,
    /// The task the call runs for, once its client was answered with one.
    pub task: Option<String>,
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
    pub server: crate::io::ServerName,
    pub generation: Generation,
    /// The backend's id, raw JSON.
    pub backend_id: String,
    pub session: SessionId,
    /// The client call it was made for (raw id), if one was in flight.
    pub related: Option<crate::io::RawId>,
    /// Asked on behalf of a stateless backend's `input_required` answer: the
    /// round it belongs to (and `backend_id` is the input's key, not a request id).
    pub round: Option<u64>,
    /// An `elicitation/create`: the defaults its schema gives (raw JSON object),
    /// filled in when the client accepts without them (SEP-1034).
    pub defaults: Option<String>,
    /// Asked for a (2025-11-25) task.
    pub task: Option<TaskQuestion>,
}

/// A request put to a client for a (2025-11-25) task: where its answer goes.
#[derive(Clone, Debug)]
pub(super) struct TaskQuestion {
    pub task: String,
    /// The input's key in the task.
    pub key: String,
    /// An input of a stateless backend's `input_required`: its answer goes with
    /// the call's retry, never to the backend as a response (`backend_id` is
    /// then the key, not a request id).
    pub in_round: bool,
}

/// A stateless backend answered a handshake-era client's call `input_required`:
/// its input requests went to the client as requests, and the call is sent again
/// with their answers (`inputResponses`) and the backend's `requestState` once
/// every one is in.
#[derive(Clone, Debug)]
pub(super) struct InputRound {
    pub server: crate::io::ServerName,
    /// The client's call, waiting (not in flight at the backend).
    pub call: ClientCall,
    /// The backend's `requestState`, echoed in the retry; raw JSON.
    pub request_state: Option<String>,
    /// Inputs asked, by key: the method asked.
    pub asked: alloc::collections::BTreeMap<String, String>,
    /// Answers so far, by key, raw JSON.
    pub answers: alloc::collections::BTreeMap<String, String>,
    /// Given up (the client's call fails) after this.
    pub deadline: Instant,
}

/// A handshake-era backend's request (sampling, elicitation, roots) made during
/// a stateless client's call, turned into an `input_required` result: what the
/// client's retry must answer.
#[derive(Clone, Debug)]
pub(super) struct PendingInput {
    /// The backend call (gateway id) that waits for the retry.
    pub call: u64,
    pub server: crate::io::ServerName,
    /// The client request that was answered `input_required`.
    pub session: SessionId,
    pub client_id: crate::io::RawId,
    /// Requests asked of the client, by the key the client answers under.
    pub asked: alloc::collections::BTreeMap<String, AskedInput>,
    /// The call's answer, if the backend answered before the client retried.
    pub answer: Option<Result<String, String>>,
    /// Given up (backend requests answered with errors) after this.
    pub deadline: Instant,
    /// The identity that was asked, when the transport checks tokens: only a
    /// retry of the same identity may answer (the state alone is not enough).
    pub principal: Option<String>,
}

/// Requests a handshake-era backend asked during a stateless client's call,
/// gathered for one `input_required` round.
#[derive(Clone, Debug)]
pub(super) struct Gathering {
    /// When the client is asked.
    pub deadline: Instant,
    pub server: crate::io::ServerName,
    /// By the key the client answers under.
    pub asked: alloc::collections::BTreeMap<String, AskedInput>,
}

/// One backend request forwarded to a stateless client as an input request.
#[derive(Clone, Debug)]
pub(super) struct AskedInput {
    pub generation: Generation,
    /// The backend's request id, raw JSON (the input's key, `in_round`).
    pub backend_id: String,
    pub method: String,
    /// Its params, raw JSON.
    pub params: Option<String>,
    /// An input of a stateless backend's `input_required`, answered by the
    /// call's retry (see [`TaskQuestion::in_round`]).
    pub in_round: bool,
}

/// A client request waiting for backends that are starting for the first time:
/// a list (until the aggregation deadline) or a call to a name not known yet.
#[derive(Clone, Debug)]
pub(super) struct ParkedList {
    pub session: SessionId,
    pub id: crate::io::RawId,
    pub what: Parked,
    pub deadline: Instant,
}

/// What a parked request is.
#[derive(Clone, Debug)]
pub(super) enum Parked {
    /// `*/list`, answered from whatever is visible when it is released.
    List { kind: ListKind, cursor: Option<String> },
    /// `tools/call` or `prompts/get` of a name no backend has listed yet.
    Named { method: &'static str, params: String, kind: ListKind },
}

impl ClientCall {
    /// The `_meta` members of a call to a stateless backend: tether's revision,
    /// and as client capabilities what the client behind the call can be asked
    /// (a stateless client's own, for this request; a handshake-era client's from
    /// its `initialize`, limited to what tether turns into requests to it).
    pub(super) fn stateless_meta(&self, session: Option<&super::sessions::Session>, log_level: Option<&str>) -> String {
        let call = self;
        let caps = match &call.caps {
            // tether runs the task: the backend is asked for a plain answer.
            Some(caps) if super::tasks::declares_tasks(Some(caps)) && call.shape != Shape::TaskIds => {
                let mut caps = caps.clone();
                if let Some(serde_json::Value::Object(extensions)) = caps.get_mut("extensions") {
                    extensions.remove(super::tasks::EXTENSION);
                }
                serde_json::Value::Object(caps).to_string()
            }
            Some(caps) => serde_json::Value::Object(caps.clone()).to_string(),
            None => {
                let declared = session.map(|s| &s.capabilities);
                let asked: serde_json::Map<String, serde_json::Value> = declared
                    .into_iter()
                    .flatten()
                    .filter(|(k, v)| matches!(k.as_str(), "sampling" | "elicitation" | "roots") && !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                serde_json::Value::Object(asked).to_string()
            }
        };
        let mut meta = protocol::stateless_meta_members(&caps);
        // `logging/setLevel` is gone in that revision: the level rides on each
        // request (a stateless client's own; a handshake-era client's last one).
        let level = if call.caps.is_some() { call.log_level.as_deref() } else { log_level };
        if let Some(level) = level {
            meta.push_str(&alloc::format!(
                ",{}:{}",
                protocol::quote(protocol::meta::LOG_LEVEL),
                protocol::quote(level)
            ));
        }
        meta
    }
}

#[cfg(test)]
impl ClientCall {
    /// A `tools/call` of tool `t` by request `id` of `session`, created at time
    /// zero, for the parts' own unit tests.
    pub(super) fn for_test(session: u64, id: &str) -> ClientCall {
        let params: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"name":"t","arguments":{}}"#).expect("valid");
        let (params, progress) = Forward::from_map(&params);
        ClientCall {
            session: SessionId(session),
            id: crate::io::RawId::new(id),
            method: "tools/call",
            params,
            progress,
            last_progress: None,
            retry_safe: false,
            retries: 0,
            resent: false,
            probe: false,
            shape: Shape::Plain,
            created: Instant::ZERO,
            caps: None,
            log_level: None,
            awaiting_input: None,
            wait_epoch: 0,
            auth_retried: false,
            task_window: None,
            task: None,
        }
    }
}

impl ParkedList {
    /// Whether this is a list request of `kind`.
    pub(super) fn is_list(&self, kind: ListKind) -> bool {
        matches!(self.what, Parked::List { kind: k, .. } if k == kind)
    }
}

pub(super) use crate::protocol::RawFields;

/// The prefix of the stateless revision's per-request `_meta` keys
/// (`io.modelcontextprotocol/protocolVersion`, `.../clientCapabilities`, ...).
const STATELESS_META_PREFIX: &str = "io.modelcontextprotocol/";

/// A call's params as sent to its backend, serialized once when the call is
/// accepted: every attempt (retries, resends) copies this text into its frame and
/// adds `_meta.progressToken` with its own id; nothing is parsed again.
#[derive(Clone, Debug)]
pub(super) struct Forward {
    /// The params object, without the client's progress token.
    body: String,
    /// Where the `_meta` object's closing brace is in `body`, if it has one.
    meta_close: Option<usize>,
    /// `_meta` is there but not an object: no token can be added to it.
    meta_opaque: bool,
}

impl Forward {
    /// From parsed raw fields, with `replace`d fields given as string values
    /// (quoted here) and the progress token taken out; returns the client's token.
    pub(super) fn from_fields(
        fields: &RawFields<'_>,
        replace: &[(&str, &str)],
    ) -> (Forward, Option<serde_json::Value>) {
        let mut body = String::with_capacity(fields.iter().map(|(_, v)| v.len() + 16).sum::<usize>() + 2);
        let mut meta_close = None;
        let mut meta_opaque = false;
        let mut progress = None;
        body.push('{');
        for (i, (key, value)) in fields.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            protocol::push_quoted(&mut body, key);
            body.push(':');
            if let Some((_, text)) = replace.iter().find(|(k, _)| *k == &**key) {
                protocol::push_quoted(&mut body, text);
            } else if &**key == "_meta" {
                match RawFields::parse(value) {
                    Some(meta) => {
                        progress = push_meta(&mut body, &meta);
                        meta_close = Some(body.len() - 1);
                    }
                    None => {
                        meta_opaque = true;
                        body.push_str(value);
                    }
                }
            } else {
                body.push_str(value);
            }
        }
        body.push('}');
        (Forward { body, meta_close, meta_opaque }, progress)
    }

    /// The params of a `tools/call` or `prompts/get` as forwarded: `raw` (their
    /// text; `fields` its fields) with the name replaced by `name`. Params written
    /// compactly (as clients write JSON) keep their text with only the name's
    /// value swapped; others are rebuilt from their fields, which gives the same
    /// text for compact ones. Returns the client's progress token too.
    pub(super) fn renamed(raw: &str, fields: &RawFields<'_>, name: &str) -> (Forward, Option<serde_json::Value>) {
        let Some((start, end)) = compact_name_span(raw, fields) else {
            return Forward::from_fields(fields, &[("name", name)]);
        };
        let mut body = String::with_capacity(raw.len() - (end - start) + name.len() + 2);
        body.push_str(&raw[..start]);
        protocol::push_quoted(&mut body, name);
        body.push_str(&raw[end..]);
        (Forward { body, meta_close: None, meta_opaque: false }, None)
    }

    /// From a params map the gateway rewrote (not on the hot path).
    pub(super) fn from_map(
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> (Forward, Option<serde_json::Value>) {
        let text = serde_json::to_string(params).unwrap_or_else(|_| "{}".into());
        let fields = RawFields::parse(&text).unwrap_or_default();
        Forward::from_fields(&fields, &[])
    }

    /// The params object as forwarded (without the progress token).
    pub(super) fn body(&self) -> &str {
        &self.body
    }

    /// The request frame for attempt `id`, with `_meta.progressToken: id` when the
    /// client asked for progress, and the raw `"key":value` members `meta` (the
    /// stateless revision's per-request fields; empty for handshake-era backends)
    /// added to `_meta`. One allocation.
    pub(super) fn frame(&self, id: u64, method: &str, progress: bool, meta: &str) -> String {
        let body = self.body.as_str();
        if (!progress && meta.is_empty()) || self.meta_opaque {
            return protocol::request(id, method, Some(body));
        }
        let mut digits = [0; 20];
        let token = protocol::decimal(id, &mut digits);
        let (at, open, close) = match self.meta_close {
            Some(at) => (at, "", ""),
            None => (body.len() - 1, r#""_meta":{"#, "}"),
        };
        let sep = if body[..at].ends_with('{') { "" } else { "," };
        // Inside `_meta`: the progress token, then `meta`.
        let (token_key, token, between) = match (progress, meta.is_empty()) {
            (true, false) => (r#""progressToken":"#, token, ","),
            (true, true) => (r#""progressToken":"#, token, ""),
            (false, _) => ("", "", ""),
        };
        protocol::request_parts(
            id,
            method,
            &[&body[..at], sep, open, token_key, token, between, meta, close, &body[at..]],
        )
    }

    /// These params with fields added or replaced (raw JSON values), for a
    /// request sent again with more in it (a stateless retry with inputs).
    pub(super) fn with_fields(&self, fields: &[(&str, Option<&str>)]) -> Forward {
        let mut map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&self.body).unwrap_or_default();
        for (key, value) in fields {
            match value.and_then(|v| serde_json::from_str(v).ok()) {
                Some(v) => {
                    map.insert(String::from(*key), v);
                }
                None => {
                    map.remove(*key);
                }
            }
        }
        Forward::from_map(&map).0
    }
}

/// Where the value of `name` is in `raw`, when `raw` is exactly its `fields`
/// written compactly: in arrival order, no whitespace, no repeated or escaped
/// key (its length says so), and no `_meta` (forwarding rewrites that one).
fn compact_name_span(raw: &str, fields: &RawFields<'_>) -> Option<(usize, usize)> {
    let RawFields::Few(fields) = fields else { return None };
    let mut at = 1;
    let mut name = None;
    for (i, (key, value)) in fields.iter().enumerate() {
        if matches!(key.0, Cow::Owned(_)) || &**key == "_meta" {
            return None;
        }
        // `,"key":value`
        at += usize::from(i > 0) + key.len() + 3;
        if &**key == "name" {
            name = Some((at, *value));
        }
        at += value.len();
    }
    let (start, value) = name.filter(|_| at + 1 == raw.len())?;
    let end = start + value.len();
    (raw.get(start..end)? == value).then_some((start, end))
}

/// Appends a `_meta` object as forwarded: without the client's progress token
/// (returned) and the stateless revision's per-request fields.
fn push_meta(body: &mut String, meta: &RawFields<'_>) -> Option<serde_json::Value> {
    let mut progress = None;
    let mut first = true;
    body.push('{');
    for (key, value) in meta.iter() {
        if &**key == "progressToken" {
            progress = serde_json::from_str(value).ok();
            continue;
        }
        // A stateless client's per-request protocol fields describe its
        // exchange with tether, not tether's with the backend.
        if key.starts_with(STATELESS_META_PREFIX) {
            continue;
        }
        if !first {
            body.push(',');
        }
        first = false;
        protocol::push_quoted(body, key);
        body.push(':');
        body.push_str(value);
    }
    body.push('}');
    progress
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::String;
    use serde_json::{json, Value};

    fn forward(params: &str, progress: bool) -> (Value, Option<Value>) {
        let fields: RawFields<'_> = serde_json::from_str(params).unwrap();
        let (f, token) = Forward::from_fields(&fields, &[("name", "orig")]);
        let frame: Value = serde_json::from_str(&f.frame(42, "tools/call", progress, "")).unwrap();
        (frame["params"].clone(), token)
    }

    #[test]
    fn params_are_forwarded_raw_with_the_name_and_token_replaced() {
        let (p, token) =
            forward(r#"{"name":"srv__x","arguments":{"b":1.50,"a":[1]},"_meta":{"progressToken":"t","k":2}}"#, true);
        assert_eq!(p, json!({"name":"orig","arguments":{"b":1.5,"a":[1]},"_meta":{"k":2,"progressToken":42}}));
        assert_eq!(token, Some(json!("t")));
        let (p, _) = forward(r#"{"name":"srv__x","_meta":{"progressToken":7}}"#, true);
        assert_eq!(p, json!({"name":"orig","_meta":{"progressToken":42}}));
        let (p, _) = forward(r#"{"name":"srv__x","_meta":{"progressToken":7}}"#, false);
        assert_eq!(p, json!({"name":"orig","_meta":{}}));
        let (p, token) = forward(r#"{"name":"srv__x","a\"b":null}"#, true);
        assert_eq!(p, json!({"name":"orig","a\"b":null,"_meta":{"progressToken":42}}));
        assert_eq!(token, None);
        let (p, _) = forward(r#"{}"#, true);
        assert_eq!(p, json!({"_meta":{"progressToken":42}}));
        let (p, _) = forward(r#"{"_meta":"odd"}"#, true);
        assert_eq!(p, json!({"_meta":"odd"}));
    }

    #[test]
    fn stateless_meta_members_join_the_progress_token_in_meta() {
        let members = r#""k":1,"j":{"a":2}"#;
        let frame = |params: &str, progress: bool| {
            let fields: RawFields<'_> = serde_json::from_str(params).unwrap();
            let (f, _) = Forward::from_fields(&fields, &[]);
            serde_json::from_str::<Value>(&f.frame(7, "tools/call", progress, members)).unwrap()["params"].clone()
        };
        assert_eq!(frame(r#"{"a":1}"#, false), json!({"a":1,"_meta":{"k":1,"j":{"a":2}}}));
        assert_eq!(frame(r#"{"a":1}"#, true), json!({"a":1,"_meta":{"progressToken":7,"k":1,"j":{"a":2}}}));
        assert_eq!(frame(r#"{}"#, false), json!({"_meta":{"k":1,"j":{"a":2}}}));
        assert_eq!(frame(r#"{"_meta":{}}"#, true), json!({"_meta":{"progressToken":7,"k":1,"j":{"a":2}}}));
        assert_eq!(
            frame(r#"{"_meta":{"x":0,"progressToken":"t"}}"#, false),
            json!({"_meta":{"x":0,"k":1,"j":{"a":2}}})
        );
        let fields: RawFields<'_> = serde_json::from_str(r#"{"name":"n","requestState":"old"}"#).unwrap();
        let (f, _) = Forward::from_fields(&fields, &[]);
        let g = f.with_fields(&[("inputResponses", Some(r#"{"k":{"x":1}}"#)), ("requestState", None)]);
        let v: Value = serde_json::from_str(&g.frame(1, "tools/call", false, "")).unwrap();
        assert_eq!(v["params"], json!({"name":"n","inputResponses":{"k":{"x":1}}}));
    }

    #[test]
    fn renaming_compact_params_keeps_their_text_and_equals_rebuilding_them() {
        for params in [
            r#"{"name":"srv__x","arguments":{"a": [1, 2]}}"#,
            r#"{"arguments":{},"name":"srv__x","other":null}"#,
            r#"{ "name":"srv__x"}"#,
            r#"{"name":"srv__x","name":"srv__y"}"#,
            r#"{"n\u0061me":"srv__x"}"#,
            r#"{"name":"srv__x","_meta":{"progressToken":1}}"#,
            r#"{"name":5}"#,
            r#"{"arguments":{}}"#,
            r#"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"name":"srv__x"}"#,
        ] {
            let fields = RawFields::parse(params).unwrap();
            let (renamed, token) = Forward::renamed(params, &fields, "orig\"inal");
            let (rebuilt, rebuilt_token) = Forward::from_fields(&fields, &[("name", "orig\"inal")]);
            assert_eq!((renamed.body(), token), (rebuilt.body(), rebuilt_token), "{params}");
        }
    }

    #[test]
    fn large_params_objects_and_repeated_keys_keep_every_field_once() {
        let many: String = (0..20).map(|i| format!(r#""k{i}":{i},"#)).collect();
        let (p, _) = forward(&format!(r#"{{{many}"name":"srv__x","k3":"last"}}"#), false);
        let object = p.as_object().unwrap();
        assert_eq!(object.len(), 21);
        assert_eq!((&p["name"], &p["k3"], &p["k19"]), (&json!("orig"), &json!("last"), &json!(19)));
        let (p, _) = forward(r#"{"name":"a","x":1,"x":2}"#, false);
        assert_eq!(p, json!({"name":"orig","x":2}));
    }

    #[test]
    fn a_stateless_call_says_what_its_client_can_be_asked_and_at_which_log_level() {
        let meta = |call: &ClientCall, session: Option<&crate::gateway::sessions::Session>, level: Option<&str>| {
            let members = call.stateless_meta(session, level);
            serde_json::from_str::<Value>(&format!("{{{members}}}")).expect("members of an object")
        };
        let caps_key = crate::protocol::meta::CLIENT_CAPABILITIES;
        let level_key = crate::protocol::meta::LOG_LEVEL;
        // A handshake-era client: what it declared that tether turns into requests, and its last level.
        let mut session = crate::gateway::sessions::Session::new(false, Instant::ZERO);
        session.capabilities = json!({"sampling": {}, "roots": null, "experimental": {}}).as_object().cloned().unwrap();
        let call = ClientCall::for_test(1, "1");
        let m = meta(&call, Some(&session), Some("info"));
        assert_eq!((m[caps_key].clone(), m[level_key].clone()), (json!({"sampling": {}}), json!("info")));
        assert_eq!(m[crate::protocol::meta::PROTOCOL_VERSION], crate::protocol::STATELESS_VERSIONS[0]);
        // A stateless client: its own capabilities and level for this request, not the session's.
        let tasks = crate::gateway::tasks::EXTENSION;
        let mut own = ClientCall::for_test(1, "1");
        own.caps = json!({"elicitation": {}, "extensions": {tasks: {}}}).as_object().cloned();
        own.log_level = Some("debug".into());
        let m = meta(&own, Some(&session), Some("info"));
        assert_eq!(m[level_key], "debug");
        // tether runs the task for it: the backend is asked for a plain answer.
        assert_eq!(m[caps_key], json!({"elicitation": {}, "extensions": {}}));
        own.shape = Shape::TaskIds;
        assert_eq!(meta(&own, None, None)[caps_key]["extensions"], json!({tasks: {}}), "passed through");
    }
}
