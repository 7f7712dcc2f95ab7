//! `tether.cluster`, the host's half: the key ring that seals session ids (so
//! any replica holding it adopts a session another opened) and how long a
//! sealed id stays good. The drain timings are the engine's
//! ([`tether_core::config::Cluster`]).
//!
//! ```jsonc
//! "tether": {"cluster": {
//!   // The first key seals; every key opens. Rotate: add the new key first
//!   // (on every replica), then retire the old one.
//!   "session_keys": [{"id": 2, "key": "${TETHER_KEY_2}"}, {"id": 1, "file": "/run/secrets/tether-key-1"}],
//!   "session_max_age_ms": 86400000,
//!   "drain_delay_ms": 5000,
//!   "drain_timeout_ms": 25000,
//!   // Credentials shared by replicas on several machines (sealed with the ring).
//!   "store": "rediss://tether:${REDIS_PASSWORD}@redis.internal:6380/0"
//! }}
//! ```
//!
//! `session_keys` may also be one string, `"ID:KEY,ID:KEY"` (from one
//! environment variable). A key is 32 bytes: 64 hex digits or base64 (either
//! alphabet, padded or not): `openssl rand -base64 32` makes one.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use serde_json::Value;

use tether_core::cluster::SessionState;

use crate::seal::KeyRing;
use crate::shared::files::FileShared;
use crate::shared::redis::RedisShared;
use crate::shared::SharedStore;

/// A sealed session id is good for this long by default (a day).
pub const DEFAULT_SESSION_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// The keys `tether.cluster` reads.
pub const KEYS: [&str; 6] =
    ["session_keys", "session_max_age_ms", "drain_delay_ms", "drain_timeout_ms", "store", "login_redirect_uri"];

/// What the HTTP listener needs to seal and open session ids.
#[derive(Debug)]
pub struct ClusterSettings {
    /// Seals new ids (first key) and opens presented ones (every key); seals
    /// credentials in a shared store.
    pub keys: Arc<KeyRing>,
    /// How long after it is issued a sealed id is still adopted.
    pub session_max_age: Duration,
    /// Keys came from the configuration (a cluster): else a random key of this
    /// process alone, which no other replica (or restart) can open.
    pub shared: bool,
    /// Where credentials are kept: a `redis://` or `rediss://` URL (replicas on
    /// several machines share logins); `None`: files on this machine, as alone.
    pub store: Option<String>,
    /// The public URL of the login callback (`https://gateway.example.com/oauth/callback`):
    /// a login any replica starts redirects there, the balancer sends it to
    /// any replica, and that one finishes it from the state in the store.
    /// `None`: logins use a loopback redirect on the machine that started them.
    pub login_redirect_uri: Option<String>,
    /// What replicas share besides credentials (sealed sessions' state,
    /// closed ids): Redis when `store` is, else files on this machine.
    /// `None` for a process alone.
    pub state: Option<Arc<dyn SharedStore>>,
}

impl ClusterSettings {
    /// Sealed sessions' state in [`ClusterSettings::state`], if there is one.
    pub fn sessions(&self) -> Option<SessionStore> {
        Some(SessionStore { store: self.state.clone()?, keys: self.keys.clone() })
    }
}

/// What a replica adopting a sealed session finds in the shared store: the
/// session's state ([`SessionState`]: log level, subscriptions) and whether
/// its client ended it (DELETE) on another replica. Sealed with the ring,
/// keyed by a digest of the session id (the id itself is not written).
/// Every call is blocking (a store round trip).
#[derive(Clone, Debug)]
pub struct SessionStore {
    store: Arc<dyn SharedStore>,
    keys: Arc<KeyRing>,
}

impl SessionStore {
    /// The state kept for the session `id`, if any (one that does not open
    /// reads as none).
    pub fn state(&self, id: &str) -> std::io::Result<Option<SessionState>> {
        let digest = digest(id);
        let Some(bytes) = self.store.get_expiring(&format!("session/{digest}"))? else { return Ok(None) };
        let sealed = String::from_utf8_lossy(&bytes);
        let opened = self.keys.open_up_to(&format!("tether session state {digest}"), &sealed, 0, 256 * 1024);
        Ok(opened.ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Keeps `state` for the session `id` for `ttl`.
    pub fn save(&self, id: &str, state: &SessionState, ttl: Duration) -> std::io::Result<()> {
        let digest = digest(id);
        let json = serde_json::to_vec(state).map_err(std::io::Error::other)?;
        let sealed = self
            .keys
            .seal(&format!("tether session state {digest}"), u64::MAX, &json)
            .ok_or_else(|| std::io::Error::other("no randomness from the operating system"))?;
        self.store.put_expiring(&format!("session/{digest}"), sealed.as_bytes(), ttl)
    }

    /// The client ended the session `id` (DELETE): no replica adopts it again
    /// for `ttl` (the rest of its id's life), and its state is dropped.
    pub fn close(&self, id: &str, ttl: Duration) -> std::io::Result<()> {
        let digest = digest(id);
        self.store.put_expiring(&format!("session-closed/{digest}"), b"1", ttl)?;
        self.store.forget(&format!("session/{digest}"))
    }

    /// Whether the session `id` was ended by its client on some replica.
    pub fn is_closed(&self, id: &str) -> std::io::Result<bool> {
        Ok(self.store.get_expiring(&format!("session-closed/{}", digest(id)))?.is_some())
    }
}

/// A hex digest of a session id: its key in the store.
fn digest(id: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    digest.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

impl ClusterSettings {
    /// One process alone: a random key, ids good for a day (and only here).
    pub fn single() -> Result<ClusterSettings, String> {
        let keys = KeyRing::random().ok_or("no randomness from the operating system for the session key")?;
        Ok(ClusterSettings {
            keys: Arc::new(keys),
            session_max_age: DEFAULT_SESSION_MAX_AGE,
            shared: false,
            store: None,
            login_redirect_uri: None,
            state: None,
        })
    }

    /// From the `tether.cluster` section, `${VAR}` already expanded. Errors
    /// name the field.
    pub fn from_section(section: &Value) -> Result<ClusterSettings, String> {
        let obj = section.as_object().ok_or("tether.cluster: must be an object")?;
        if let Some(key) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!("tether.cluster.{key}: unknown key (known: {})", KEYS.join(", ")));
        }
        let session_max_age =
            match obj.get("session_max_age_ms") {
                None => DEFAULT_SESSION_MAX_AGE,
                Some(v) => match v.as_u64() {
                    Some(ms) if (60_000..=30 * 24 * 3600 * 1000).contains(&ms) => Duration::from_millis(ms),
                    _ => return Err(
                        "tether.cluster.session_max_age_ms: must be between 60000 (a minute) and 2592000000 (30 days)"
                            .into(),
                    ),
                },
            };
        let keys =
            match obj.get("session_keys") {
                None => return Err(
                    "tether.cluster.session_keys: required: the key ring every replica shares (see docs/scale-out.md)"
                        .into(),
                ),
                Some(value) => ring(value).map_err(|e| format!("tether.cluster.session_keys: {e}"))?,
            };
        let store = match obj.get("store") {
            None => None,
            Some(Value::String(files)) if files == "files" => None,
            Some(Value::String(url)) if url.starts_with("redis://") || url.starts_with("rediss://") => {
                Some(url.clone())
            }
            Some(_) => {
                return Err(
                    "tether.cluster.store: must be \"files\" (the default) or a redis:// or rediss:// URL".into()
                )
            }
        };
        let login_redirect_uri = match obj.get("login_redirect_uri") {
            None => None,
            Some(Value::String(uri)) => {
                Some(redirect_uri(uri).map_err(|e| format!("tether.cluster.login_redirect_uri: {e}"))?)
            }
            Some(_) => return Err("tether.cluster.login_redirect_uri: must be a URL string".into()),
        };
        let state: Option<Arc<dyn SharedStore>> = match &store {
            Some(url) => Some(Arc::new(RedisShared::new(url)?)),
            None => FileShared::open_default().ok().map(|f| Arc::new(f) as Arc<dyn SharedStore>),
        };
        Ok(ClusterSettings { keys: Arc::new(keys), session_max_age, shared: true, store, login_redirect_uri, state })
    }

    /// The `tether.cluster` section of the config file at `path`, if it has one.
    pub fn from_file(path: &Path) -> Result<Option<ClusterSettings>, String> {
        let section = crate::config_file::cluster_section(path).map_err(|e| e.to_string())?;
        section
            .map(|value| ClusterSettings::from_section(&value).map_err(|e| format!("{}: {e}", path.display())))
            .transpose()
    }
}

/// A login callback URL: absolute, `https` (or `http` to a loopback host, for
/// trying it out), with a path of its own, no query or fragment.
fn redirect_uri(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text).map_err(|e| format!("{text:?}: {e}"))?;
    let loopback = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    if !(url.scheme() == "https" || (url.scheme() == "http" && loopback)) {
        return Err(format!("{text:?}: must be https (http only to localhost)"));
    }
    if url.path().len() < 2 || url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{text:?}: needs a path of its own (e.g. /oauth/callback) and no query or fragment"));
    }
    Ok(url.to_string())
}

/// The ring `session_keys` describes.
fn ring(value: &Value) -> Result<KeyRing, String> {
    let mut keys = Vec::new();
    match value {
        Value::String(text) => {
            for (n, item) in text.split(',').map(str::trim).filter(|s| !s.is_empty()).enumerate() {
                let (id, key) = item.split_once(':').ok_or(format!("entry {n}: write ID:KEY"))?;
                keys.push((key_id(&Value::String(id.trim().into()), n)?, key_bytes(key.trim(), n)?));
            }
        }
        Value::Array(items) => {
            for (n, item) in items.iter().enumerate() {
                let obj = item.as_object().ok_or(format!("entry {n}: must be an object with id and key or file"))?;
                if let Some(k) = obj.keys().find(|k| !["id", "key", "file"].contains(&k.as_str())) {
                    return Err(format!("entry {n}: unknown key {k:?} (known: id, key, file)"));
                }
                let id = key_id(obj.get("id").ok_or(format!("entry {n}: id is required"))?, n)?;
                let text = match (obj.get("key"), obj.get("file")) {
                    (Some(Value::String(key)), None) => key.clone(),
                    (None, Some(Value::String(file))) => read_key_file(file, n)?,
                    _ => return Err(format!("entry {n}: give exactly one of key (a string) or file (a path)")),
                };
                keys.push((id, key_bytes(text.trim(), n)?));
            }
        }
        _ => return Err("must be a list of {id, key|file} or a string \"ID:KEY,ID:KEY\"".into()),
    }
    KeyRing::new(&keys)
}

fn key_id(value: &Value, n: usize) -> Result<u8, String> {
    let id = match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    };
    id.and_then(|id| u8::try_from(id).ok()).ok_or(format!("entry {n}: id must be a number from 0 to 255"))
}

fn read_key_file(path: &str, n: usize) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("entry {n}: {path}: {e}"))?;
    if meta.len() > 1024 {
        return Err(format!("entry {n}: {path}: too large for a key file"));
    }
    std::fs::read_to_string(path).map_err(|e| format!("entry {n}: {path}: {e}"))
}

/// 32 bytes from 64 hex digits or base64 of either alphabet. The message never
/// quotes the key.
fn key_bytes(text: &str, n: usize) -> Result<[u8; 32], String> {
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex digits")).collect()
    } else {
        [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(text).ok())
            .ok_or(format!("entry {n}: the key is neither 64 hex digits nor base64"))?
    };
    <[u8; 32]>::try_from(bytes).map_err(|b| format!("entry {n}: the key is {} bytes; it must be 32", b.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const B64: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn keys_come_as_a_list_a_string_or_files_and_every_form_opens_the_same_tokens() {
        let dir = std::env::temp_dir().join(format!("tether-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("k");
        std::fs::write(&file, format!("{HEX}\n")).unwrap();
        let listed = ClusterSettings::from_section(&json!({"session_keys": [{"id": 2, "key": B64}]})).unwrap();
        let string = ClusterSettings::from_section(&json!({"session_keys": format!("2:{HEX}, 1:{B64}")})).unwrap();
        let from_file = ClusterSettings::from_section(
            &json!({"session_keys": [{"id": "2", "file": file.to_str().unwrap()}], "session_max_age_ms": 60000}),
        )
        .unwrap();
        assert!(listed.shared && listed.session_max_age == DEFAULT_SESSION_MAX_AGE && listed.store.is_none());
        let redis = json!({"session_keys": [{"id": 2, "key": B64}], "store": "rediss://:pw@db:6380/1"});
        assert_eq!(ClusterSettings::from_section(&redis).unwrap().store.as_deref(), Some("rediss://:pw@db:6380/1"));
        assert_eq!(from_file.session_max_age, Duration::from_secs(60));
        let callback =
            json!({"session_keys": [{"id": 2, "key": B64}], "login_redirect_uri": "https://gw.example/oauth/callback"});
        let callback = ClusterSettings::from_section(&callback).unwrap().login_redirect_uri;
        assert_eq!(callback.as_deref(), Some("https://gw.example/oauth/callback"));
        let token = listed.keys.seal("session", u64::MAX, b"x").unwrap();
        for ring in [&string.keys, &from_file.keys] {
            assert_eq!(ring.open("session", &token, 0).unwrap(), b"x");
        }
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn mistakes_are_named_and_never_quote_a_key() {
        let cases = [
            (json!({}), "session_keys: required"),
            (json!({"session_keys": []}), "empty"),
            (json!({"session_keys": "1:c2hvcnQ="}), "5 bytes"),
            (json!({"session_keys": [{"id": 300, "key": B64}]}), "0 to 255"),
            (json!({"session_keys": [{"id": 1, "key": B64}, {"id": 1, "key": HEX}]}), "twice"),
            (json!({"session_keys": [{"id": 1}]}), "exactly one"),
            (json!({"session_keys": [{"id": 1, "key": B64}], "drain": 1}), "unknown key"),
            (json!({"session_keys": [{"id": 1, "key": B64}], "session_max_age_ms": 5}), "between"),
            (json!({"session_keys": "1:not a key!"}), "neither"),
            (json!({"session_keys": [{"id": 1, "key": B64}], "store": "memcached://x"}), "redis://"),
            (json!({"session_keys": [{"id": 1, "key": B64}], "login_redirect_uri": "http://gw.example/cb"}), "https"),
            (json!({"session_keys": [{"id": 1, "key": B64}], "login_redirect_uri": "https://gw.example"}), "path"),
            (json!({"session_keys": [{"id": 1, "key": B64}], "login_redirect_uri": "https://g/cb?x=1"}), "query"),
        ];
        for (section, expected) in cases {
            let err = ClusterSettings::from_section(&section).unwrap_err();
            assert!(err.contains(expected), "{section}: {err}");
            assert!(!err.contains(B64) && !err.contains(HEX), "{err}");
        }
    }
}
