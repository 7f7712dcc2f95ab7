//! `requestState` for the stateless mode. The server keeps nothing between the
//! rounds of an `input_required` exchange: what a tool needs on the retry travels
//! with the client, which must echo it unchanged. So a state must be tamper-evident
//! (the suite's `input-required-result-tampered-state` appends to one and expects
//! an error), and bound to the request it was minted for.
//!
//! Format: `hex(JSON payload) "." hex(tag)`, the tag a SipHash of the payload under
//! a key drawn at random when the process starts (std's `RandomState`). That is no
//! audited MAC, and states die with the process, both fine for a test fixture: a
//! client cannot alter a state, or make one up, without the check failing. The
//! payload names the request (`for`: method, tool/prompt name or URI, arguments)
//! and carries the tool's own `data`.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use serde_json::{json, Value};

use crate::wire::RpcError;

/// Mints and checks states under one per-process key.
pub struct Minter {
    key: RandomState,
}

impl Default for Minter {
    fn default() -> Self {
        Minter { key: RandomState::new() }
    }
}

impl Minter {
    /// A state for the request `subject` carrying `data`.
    pub fn mint(&self, subject: &Value, data: Value) -> String {
        let payload = json!({ "for": subject, "data": data }).to_string();
        format!("{}.{}", hex(payload.as_bytes()), self.tag(payload.as_bytes()))
    }

    /// The `data` of `state`, if this process minted it for `subject`; -32602 when
    /// it fails the integrity check or belongs to another request.
    pub fn open(&self, state: &str, subject: &Value) -> Result<Value, RpcError> {
        let tampered = || {
            RpcError::invalid_params(
                "requestState failed its integrity check (tampered with, or not minted by this server)",
            )
        };
        let (payload, tag) = state.split_once('.').ok_or_else(tampered)?;
        let payload = unhex(payload).ok_or_else(tampered)?;
        if self.tag(&payload) != tag {
            return Err(tampered());
        }
        let mut payload: Value = serde_json::from_slice(&payload).map_err(|_| tampered())?;
        if payload.get("for") != Some(subject) {
            return Err(RpcError::invalid_params("requestState was minted for another request"));
        }
        Ok(payload["data"].take())
    }

    fn tag(&self, payload: &[u8]) -> String {
        let mut hasher = self.key.build_hasher();
        hasher.write(payload);
        format!("{:016x}", hasher.finish())
    }
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The bytes of lower-case hex `text`; `None` for anything else.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    text.as_bytes().chunks(2).map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_opens_for_its_subject_only_and_not_once_altered() {
        let minter = Minter::default();
        let subject = json!({"method": "tools/call", "name": "t", "arguments": {}});
        let state = minter.mint(&subject, json!({"round": 1}));
        assert_eq!(minter.open(&state, &subject).unwrap(), json!({"round": 1}));
        assert!(minter.open(&format!("{state}-TAMPERED"), &subject).is_err());
        assert!(minter.open(&state.replacen('7', "6", 1), &subject).is_err());
        let other = json!({"method": "tools/call", "name": "u", "arguments": {}});
        assert!(minter.open(&state, &other).is_err());
        assert!(Minter::default().open(&state, &subject).is_err());
    }
}
