//! The `requestState` tether hands a stateless-era client when a call needs its
//! input (a translated `input_required`): a token any replica sharing the keys
//! can check, and only those.
//!
//! A token names the call it continues in the table of the replica that issued
//! it, and binds it with HMAC-SHA256 to that replica, to an expiry, to who holds
//! the session (a keyed digest of the principal) and to the request it
//! continues (a keyed digest of its [`subject`]: backend, method, tool and
//! arguments). A changed, forged, expired, other
//! principal's or other request's token is refused; a good one from another
//! replica is recognised as such, so that replica's call can be resent (when
//! that is safe) or refused with a clear message, never left to hang.
//!
//! Nothing in a token is secret (the client held all of it): it is integrity,
//! not confidentiality. `ts1.` + base64url(key id | expiry, ms since the Unix
//! epoch, big-endian | payload JSON) + `.` + base64url(the first 16 bytes of the tag).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// What every token starts with.
const PREFIX: &str = "ts1.";
/// Bytes of the tag kept.
const TAG: usize = 16;
/// The longest token opened, in characters (a backend's own state inside included).
const MAX_TOKEN: usize = 24 * 1024;
/// The longest backend `requestState` wrapped in a token; a longer one goes to
/// the client as the backend gave it (and the backend alone checks it).
pub(crate) const MAX_BACKEND_STATE: usize = 16 * 1024;

/// Why a `requestState` was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not a token of tether's (or cut, or too long).
    Malformed,
    /// Sealed under a key this replica does not hold.
    UnknownKey,
    /// Past its expiry.
    Expired,
    /// Changed or forged.
    Tampered,
    /// Issued to another identity.
    OtherPrincipal,
    /// Issued for another request.
    OtherRequest,
}

impl Refusal {
    /// What the client is told.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Refusal::Malformed | Refusal::Tampered | Refusal::UnknownKey => {
                "requestState is not one tether issued (changed, forged, or sealed under a retired key)"
            }
            Refusal::Expired => "requestState expired: call again without it",
            Refusal::OtherPrincipal => "requestState was issued to another identity",
            Refusal::OtherRequest => "requestState was issued for another request (name or arguments differ)",
        }
    }
}

/// A token that opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Issued here: the call it continues is in this replica's table under this name.
    Here(String),
    /// Issued by another replica (or by this process before a restart).
    Elsewhere,
    /// A stateless backend's own `requestState`, wrapped: it goes back to the
    /// backend, from any replica.
    Backend(String),
}

/// What a token says, as signed.
#[derive(Serialize, Deserialize)]
struct Payload {
    /// The call's name in the issuing replica's table.
    s: String,
    /// The issuing replica.
    r: String,
    /// Digest of the principal, hex; absent for a session without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    p: Option<String>,
    /// Digest of the request, hex.
    d: String,
    /// A stateless backend's own `requestState`, carried for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    b: Option<String>,
}

/// The request a token continues, as both ends can name it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request<'a> {
    /// What is asked of whom ([`subject`]).
    pub subject: &'a str,
    /// Who holds the session.
    pub principal: Option<&'a str>,
}

/// The keys that sign and check tokens (the first signs) and this replica's name.
#[derive(Clone)]
pub(crate) struct Continuations {
    keys: Vec<(u8, [u8; 32])>,
    replica: String,
}

impl core::fmt::Debug for Continuations {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let ids: Vec<u8> = self.keys.iter().map(|(id, _)| *id).collect();
        f.debug_struct("Continuations").field("key_ids", &ids).field("replica", &self.replica).finish()
    }
}

impl Continuations {
    /// One key derived from `secret` (the engine's id key or seed): tokens
    /// check in this process alone. The replica's name is derived from it too.
    pub(crate) fn derived(secret: &[u8]) -> Continuations {
        let key = tag(secret, &[b"tether requestState key v1"]);
        let replica = hex(&tag(secret, &[b"tether replica name v1"])[..8]);
        Continuations { keys: alloc::vec![(0, key)], replica }
    }

    /// The cluster's keys (the first signs), keeping this replica's name.
    pub(crate) fn with_keys(&self, keys: &[(u8, [u8; 32])]) -> Continuations {
        match keys.is_empty() {
            true => self.clone(),
            false => Continuations { keys: keys.to_vec(), replica: self.replica.clone() },
        }
    }

    /// A token for the call named `state` here, continuing `request`, good until `expires_unix_ms`.
    pub(crate) fn seal(&self, state: &str, request: Request<'_>, expires_unix_ms: u64) -> String {
        self.seal_payload(state, None, request, expires_unix_ms)
    }

    /// A token carrying a stateless backend's own `requestState` for `request`
    /// (at most [`MAX_BACKEND_STATE`] bytes: the caller checks).
    pub(crate) fn wrap(&self, backend_state: &str, request: Request<'_>, expires_unix_ms: u64) -> String {
        self.seal_payload("", Some(backend_state), request, expires_unix_ms)
    }

    fn seal_payload(&self, state: &str, backend: Option<&str>, request: Request<'_>, expires: u64) -> String {
        let (id, key) = &self.keys[0];
        let payload = Payload {
            s: state.to_string(),
            r: self.replica.clone(),
            p: request.principal.map(|p| principal_digest(key, p)),
            d: request_digest(key, request.subject),
            b: backend.map(str::to_string),
        };
        let expires_unix_ms = expires;
        let mut body = Vec::new();
        body.push(*id);
        body.extend_from_slice(&expires_unix_ms.to_be_bytes());
        body.extend_from_slice(&serde_json::to_vec(&payload).unwrap_or_default());
        let mac = tag(key, &[b"tether requestState v1\0", &body]);
        let mut token = String::from(PREFIX);
        token.push_str(&URL_SAFE_NO_PAD.encode(&body));
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(&mac[..TAG]));
        token
    }

    /// Checks `token` for `request` at `now_unix_ms`.
    pub(crate) fn open(&self, token: &str, request: Request<'_>, now_unix_ms: u64) -> Result<Opened, Refusal> {
        if token.len() > MAX_TOKEN {
            return Err(Refusal::Malformed);
        }
        let (body, mac) = token.strip_prefix(PREFIX).and_then(|t| t.split_once('.')).ok_or(Refusal::Malformed)?;
        let body = URL_SAFE_NO_PAD.decode(body).map_err(|_| Refusal::Malformed)?;
        let mac = URL_SAFE_NO_PAD.decode(mac).map_err(|_| Refusal::Malformed)?;
        if body.len() < 9 || mac.len() != TAG {
            return Err(Refusal::Malformed);
        }
        let key = self.keys.iter().find(|(id, _)| *id == body[0]).map(|(_, k)| k).ok_or(Refusal::UnknownKey)?;
        let expected = tag(key, &[b"tether requestState v1\0", &body]);
        // Constant time is not needed against a tag the client cannot probe
        // faster than one request at a time, but it costs nothing.
        if expected[..TAG].iter().zip(&mac).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
            return Err(Refusal::Tampered);
        }
        let expires = u64::from_be_bytes(body[1..9].try_into().map_err(|_| Refusal::Malformed)?);
        if now_unix_ms >= expires {
            return Err(Refusal::Expired);
        }
        let payload: Payload = serde_json::from_slice(&body[9..]).map_err(|_| Refusal::Malformed)?;
        if payload.p != request.principal.map(|p| principal_digest(key, p)) {
            return Err(Refusal::OtherPrincipal);
        }
        if payload.d != request_digest(key, request.subject) {
            return Err(Refusal::OtherRequest);
        }
        Ok(match (payload.b, payload.r == self.replica) {
            (Some(backend), _) => Opened::Backend(backend),
            (None, true) => Opened::Here(payload.s),
            (None, false) => Opened::Elsewhere,
        })
    }
}

/// HMAC-SHA256 of the concatenated `parts` under `key`.
fn tag(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| alloc::format!("{b:02x}")).collect()
}

fn principal_digest(key: &[u8; 32], principal: &str) -> String {
    hex(&tag(key, &[b"principal\0", principal.as_bytes()])[..TAG])
}

/// What a request asks of whom, the same on every replica and in the client's
/// retry: the backend, the method, the backend's own name of the tool or
/// prompt (or the resource's URI), and the arguments, canonical (keys sorted).
pub(crate) fn subject(server: &str, method: &str, target: &str, arguments: Option<&Value>) -> String {
    let mut text = String::new();
    for part in [server, method, target] {
        text.push_str(part);
        text.push('\0');
    }
    if let Some(arguments) = arguments {
        canonical(arguments, &mut text);
    }
    text
}

fn request_digest(key: &[u8; 32], subject: &str) -> String {
    hex(&tag(key, &[b"request\0", subject.as_bytes()])[..TAG])
}

/// `value` as JSON with every object's keys sorted, whatever order the map keeps.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key).unwrap_or_default());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_800_000_000_000;

    fn write(args: Value) -> String {
        subject("fs", "tools/call", "write", Some(&args))
    }

    fn request<'a>(principal: Option<&'a str>, subject: &'a str) -> Request<'a> {
        Request { subject, principal }
    }

    #[test]
    fn a_token_continues_its_own_request_here_and_is_recognised_elsewhere() {
        let here = Continuations::derived(b"replica a").with_keys(&[(1, [1; 32])]);
        let there = Continuations::derived(b"replica b").with_keys(&[(1, [1; 32])]);
        let issued = write(json!({"b": 2, "a": 1}));
        let token = here.seal("st-1", request(Some("alice"), &issued), NOW + 1000);
        // The retry's arguments in another order are the same request.
        let retried = write(json!({"a": 1, "b": 2}));
        assert_eq!(here.open(&token, request(Some("alice"), &retried), NOW), Ok(Opened::Here("st-1".into())));
        assert_eq!(there.open(&token, request(Some("alice"), &retried), NOW), Ok(Opened::Elsewhere));
    }

    #[test]
    fn changed_forged_expired_foreign_and_misused_tokens_are_refused() {
        let ring = Continuations::derived(b"a").with_keys(&[(1, [1; 32])]);
        let call = write(json!({"a": 1}));
        let token = ring.seal("st", request(Some("alice"), &call), NOW + 1000);
        let alice = request(Some("alice"), &call);
        assert_eq!(ring.open(&token, alice, NOW + 1000), Err(Refusal::Expired));
        assert_eq!(ring.open(&token, request(Some("bob"), &call), NOW), Err(Refusal::OtherPrincipal));
        assert_eq!(ring.open(&token, request(None, &call), NOW), Err(Refusal::OtherPrincipal));
        let other = write(json!({"a": 2}));
        assert_eq!(ring.open(&token, request(Some("alice"), &other), NOW), Err(Refusal::OtherRequest));
        let prompt = subject("fs", "prompts/get", "write", Some(&json!({"a": 1})));
        assert_eq!(ring.open(&token, request(Some("alice"), &prompt), NOW), Err(Refusal::OtherRequest));
        // Every changed character is caught.
        for i in PREFIX.len()..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(bytes).unwrap();
            assert!(ring.open(&changed, alice, NOW).is_err(), "character {i} changed and it opened");
        }
        assert_eq!(ring.open("0123456789abcdef0123456789abcdef", alice, NOW), Err(Refusal::Malformed));
        assert_eq!(ring.open(&"ts1.a.b".repeat(400), alice, NOW), Err(Refusal::Malformed));
        let retired = Continuations::derived(b"a").with_keys(&[(2, [2; 32])]);
        assert_eq!(retired.open(&token, alice, NOW), Err(Refusal::UnknownKey));
        let forged = Continuations::derived(b"a").with_keys(&[(1, [9; 32])]);
        assert_eq!(forged.open(&token, alice, NOW), Err(Refusal::Tampered));
        // Rotation: a ring that signs with key 2 still checks key 1.
        let rotated = Continuations::derived(b"a").with_keys(&[(2, [2; 32]), (1, [1; 32])]);
        assert_eq!(rotated.open(&token, alice, NOW), Ok(Opened::Here("st".into())));
    }

    #[test]
    fn a_process_alone_checks_only_its_own_tokens_and_debug_shows_no_key() {
        let (a, b) = (Continuations::derived(&[1; 32]), Continuations::derived(&[2; 32]));
        let call = write(json!({}));
        let token = a.seal("st", request(None, &call), NOW + 1);
        assert_eq!(b.open(&token, request(None, &call), NOW), Err(Refusal::Tampered));
        assert!(!alloc::format!("{a:?}").contains("[1, 1"));
    }

    #[test]
    fn a_backends_own_state_rides_inside_and_comes_back_on_any_replica_for_its_principal_only() {
        let here = Continuations::derived(b"a").with_keys(&[(1, [1; 32])]);
        let there = Continuations::derived(b"b").with_keys(&[(1, [1; 32])]);
        let call = write(json!({"a": 1}));
        let token = here.wrap("backend-state-7", request(Some("alice"), &call), NOW + 1000);
        assert!(!token.contains("backend-state-7"), "encoded, though not secret");
        for ring in [&here, &there] {
            assert_eq!(
                ring.open(&token, request(Some("alice"), &call), NOW),
                Ok(Opened::Backend("backend-state-7".into()))
            );
        }
        assert_eq!(there.open(&token, request(Some("bob"), &call), NOW), Err(Refusal::OtherPrincipal));
    }

    #[test]
    fn subjects_are_canonical_and_tell_apart_what_differs() {
        let a = subject("fs", "tools/call", "t", Some(&json!({"x": {"b": [1, {"d": 1, "c": 2}], "a": null}})));
        let b = subject("fs", "tools/call", "t", Some(&json!({"x": {"a": null, "b": [1, {"c": 2, "d": 1}]}})));
        assert_eq!(a, b);
        assert_ne!(subject("fs", "tools/call", "t", None), subject("web", "tools/call", "t", None));
        assert_ne!(subject("fs", "tools/call", "t", None), subject("fs", "tools/call", "t", Some(&json!({}))));
    }
}
