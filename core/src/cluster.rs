//! What lets several tether replicas behind one load balancer serve the same
//! clients: the facts a handshake-era session carries in its (sealed) id, so a
//! replica that never saw the session adopts it on first sight, and the rules
//! that decide whether it may.
//!
//! The engine says what a session is ([`crate::Action::SealSession`]); the host
//! seals it with its key ring into the `Mcp-Session-Id` and opens what clients
//! present. Opening proves the facts were written by a replica holding the key
//! and are unexpired; [`SessionFacts::adoptable`] decides the rest, and the
//! engine takes the session in with [`crate::Input::ClientAdopted`].

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::protocol;

/// Bytes of client capabilities and client info kept in a session id: the id
/// travels in a header on every request, and balancers bound header sizes
/// (nginx: 8 KiB a line by default).
pub const MAX_FACT_BYTES: usize = 1024;

/// The client capabilities a replica acts on; others are not carried.
const KEPT_CAPABILITIES: [&str; 5] = ["roots", "sampling", "elicitation", "tasks", "extensions"];

/// What a replica needs to serve a handshake-era session it did not open:
/// what `initialize` settled. Short field names: it rides in every request's header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionFacts {
    /// The protocol version negotiated at `initialize`.
    #[serde(rename = "v")]
    pub protocol_version: String,
    /// The client's capabilities (a JSON object, as text), cut to those the
    /// gateway acts on.
    #[serde(rename = "c", default = "empty_object")]
    pub capabilities: String,
    /// The client's `clientInfo` name and version, for logs.
    #[serde(rename = "n", default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The level its `logging/setLevel` asked for when the id was issued.
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// Who opened it: the bearer's identity as the transport names it (the
    /// host seals a keyed digest of it, never the identity itself).
    #[serde(rename = "p", default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

fn empty_object() -> String {
    "{}".to_string()
}

/// Subscriptions kept for one session, at most: what it restores is bounded
/// (the engine's `max_subscriptions` bounds them all together anyway).
pub const MAX_STATE_SUBSCRIPTIONS: usize = 256;

/// What a sealed session changed after `initialize`: its log level and the
/// resources it subscribed to. The engine reports it
/// ([`crate::Action::SessionState`]) whenever it changes; the host keeps it in
/// the shared store for as long as the session may idle, and hands it back
/// with [`crate::Input::ClientAdopted`] on the replica that adopts the session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    /// The level its last `logging/setLevel` asked for.
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// The URIs (as the gateway serves them) it is subscribed to.
    #[serde(rename = "s", default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<String>,
}

/// Why a sealed session cannot be adopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unadoptable {
    /// Its protocol version is not one this build speaks (an id from a newer
    /// or older replica during an upgrade).
    Version,
    /// Its capabilities are not a JSON object.
    Malformed,
    /// The request's bearer is not the one who opened it.
    OtherPrincipal,
}

impl SessionFacts {
    /// The facts `initialize` settled, cut to what a session id carries.
    pub fn new(protocol_version: &str, capabilities: &Map<String, Value>, client_info: Option<&Value>) -> SessionFacts {
        let kept: Map<String, Value> = capabilities
            .iter()
            .filter(|(name, _)| KEPT_CAPABILITIES.contains(&name.as_str()))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        let mut capabilities = serde_json::to_string(&kept).unwrap_or_else(|_| empty_object());
        if capabilities.len() > MAX_FACT_BYTES {
            // Only what each capability is called survives: enough to know the
            // client takes sampling, elicitation or roots requests.
            let names: Map<String, Value> = kept.keys().map(|k| (k.clone(), Value::Object(Map::new()))).collect();
            capabilities = serde_json::to_string(&names).unwrap_or_else(|_| empty_object());
        }
        let client = client_info.and_then(|info| {
            let name = info.get("name")?.as_str()?;
            let version = info.get("version").and_then(Value::as_str).unwrap_or("");
            let mut text = String::from(name);
            if !version.is_empty() {
                text.push('/');
                text.push_str(version);
            }
            let mut end = text.len().min(128);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            Some(text)
        });
        SessionFacts {
            protocol_version: protocol_version.to_string(),
            capabilities,
            client,
            log_level: None,
            principal: None,
        }
    }

    /// Whether a replica may take this session in for a request whose bearer's
    /// identity digest is `presented`, given the digest sealed in the id
    /// (`sealed`; both `None` when the listener checks no tokens).
    pub fn adoptable(&self, sealed: Option<&[u8]>, presented: Option<&[u8]>) -> Result<(), Unadoptable> {
        if sealed != presented {
            return Err(Unadoptable::OtherPrincipal);
        }
        if !self.speaks_version() {
            return Err(Unadoptable::Version);
        }
        match serde_json::from_str::<Value>(&self.capabilities) {
            Ok(Value::Object(_)) => Ok(()),
            _ => Err(Unadoptable::Malformed),
        }
    }

    /// Whether its protocol version is one this build speaks.
    pub(crate) fn speaks_version(&self) -> bool {
        protocol::SUPPORTED_VERSIONS.contains(&self.protocol_version.as_str())
    }

    /// The capabilities as a map (empty if they are not an object).
    pub(crate) fn capability_map(&self) -> Map<String, Value> {
        match serde_json::from_str(&self.capabilities) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        }
    }

    /// The facts as the bytes a host seals.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Facts from bytes a host opened; `None` if they are not facts.
    pub fn from_bytes(bytes: &[u8]) -> Option<SessionFacts> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn caps(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn facts_keep_the_capabilities_the_gateway_acts_on_and_a_short_client_name() {
        let c = caps(json!({"sampling": {}, "elicitation": {"form": {}}, "experimental": {"x": "y"}}));
        let info = json!({"name": "agent", "version": "1.2", "icons": ["big"]});
        let facts = SessionFacts::new("2025-11-25", &c, Some(&info));
        assert_eq!(facts.capabilities, r#"{"elicitation":{"form":{}},"sampling":{}}"#);
        assert_eq!(facts.client.as_deref(), Some("agent/1.2"));
        let back = SessionFacts::from_bytes(&facts.to_bytes()).unwrap();
        assert_eq!(back, facts);
        assert!(back.capability_map().contains_key("sampling"));
    }

    #[test]
    fn oversized_capabilities_keep_only_their_names_and_long_names_are_cut() {
        let big = "x".repeat(4 * MAX_FACT_BYTES);
        let c = caps(json!({"roots": {"listChanged": true, "note": big}}));
        let info = json!({"name": "é".repeat(200)});
        let facts = SessionFacts::new("2025-11-25", &c, Some(&info));
        assert_eq!(facts.capabilities, r#"{"roots":{}}"#);
        assert!(facts.client.unwrap().len() <= 128);
    }

    #[test]
    fn adoption_needs_the_same_principal_a_spoken_version_and_an_object() {
        let facts = SessionFacts::new("2025-11-25", &Map::new(), None);
        assert_eq!(facts.adoptable(None, None), Ok(()));
        assert_eq!(facts.adoptable(Some(b"a"), Some(b"a")), Ok(()));
        assert_eq!(facts.adoptable(Some(b"a"), Some(b"b")), Err(Unadoptable::OtherPrincipal));
        assert_eq!(facts.adoptable(Some(b"a"), None), Err(Unadoptable::OtherPrincipal));
        assert_eq!(facts.adoptable(None, Some(b"a")), Err(Unadoptable::OtherPrincipal));
        let newer = SessionFacts { protocol_version: "2099-01-01".into(), ..facts.clone() };
        assert_eq!(newer.adoptable(None, None), Err(Unadoptable::Version));
        let odd = SessionFacts { capabilities: "[]".into(), ..facts };
        assert_eq!(odd.adoptable(None, None), Err(Unadoptable::Malformed));
        assert_eq!(SessionFacts::from_bytes(b"not json"), None);
    }
}
