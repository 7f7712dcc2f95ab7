//! Keeping secrets out of everything tether writes.
//!
//! Backend `env` values, HTTP `headers` values and credentials in URLs are
//! secrets. The engine removes them from every event, error message and status
//! text it produces, and the trace header records a redacted configuration. The
//! host blanks the same secrets in text of its own (logged stderr lines, trace
//! lines) through [`crate::Gateway::redactor`].

use alloc::borrow::Cow;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::config::{Config, Transport};
use crate::io::Event;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Values shorter than this are not searched for in free text (a `DEBUG=1` would
/// otherwise blank every `1`); they are still blanked in a redacted config.
pub const MIN_SECRET_LEN: usize = 4;

/// The secret values of one configuration, and their removal from text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Redactor {
    /// Longest first, so a secret containing another is removed whole.
    secrets: Vec<String>,
}

impl Redactor {
    /// The secrets of `config`: env values, header values, URL credentials and query values.
    pub fn from_config(config: &Config) -> Redactor {
        let mut r = Redactor::default();
        for server in config.servers.values() {
            match &server.transport {
                Transport::Stdio { env, .. } => env.values().for_each(|v| r.add(v)),
                Transport::Http { url, headers } | Transport::Sse { url, headers } => {
                    headers.values().for_each(|v| {
                        r.add(v);
                        // `Bearer abc…`: the credential alone may appear elsewhere.
                        if let Some((_, credential)) = v.split_once(' ') {
                            r.add(credential.trim());
                        }
                    });
                    url_secrets(url).for_each(|v| r.add(v));
                }
            }
        }
        r
    }

    /// Adds one secret (ignored when shorter than [`MIN_SECRET_LEN`]), with the
    /// spellings it takes inside JSON text serialised once and twice (a secret
    /// holding `"` is `\"` in a frame and `\\\"` in a trace line of that frame),
    /// so text is clean however often it was encoded.
    pub fn add(&mut self, secret: &str) {
        if secret.len() < MIN_SECRET_LEN {
            return;
        }
        let once = json_escaped(secret);
        let twice = json_escaped(&once);
        for spelling in [secret.to_string(), once, twice] {
            self.insert(spelling);
        }
    }

    /// Keeps `secret` once, longest first.
    fn insert(&mut self, secret: String) {
        if self.secrets.contains(&secret) {
            return;
        }
        let at = self.secrets.iter().position(|s| s.len() < secret.len()).unwrap_or(self.secrets.len());
        self.secrets.insert(at, secret);
    }

    /// Whether there is nothing to hide.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }

    /// Redacts a string in place.
    pub fn redact_in_place(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }

    /// Redacts the free text of an event (messages, errors, details).
    pub fn redact_event(&self, event: &mut Event) {
        if self.is_empty() {
            return;
        }
        match event {
            Event::ServerStatusChanged { message: Some(m), .. } => self.redact_in_place(m),
            Event::ServerHealthDegraded { last_error, .. } => self.redact_in_place(last_error),
            Event::ProtocolViolation { detail, .. } => self.redact_in_place(detail),
            _ => {}
        }
    }
}

/// `text` as it appears inside a JSON string (without the quotes).
fn json_escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or_default().to_string()
}

/// Password and query values of a URL (`https://user:pw@host/p?token=abc`).
fn url_secrets(url: &str) -> impl Iterator<Item = &str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let password = authority.rsplit_once('@').and_then(|(user, _)| user.split_once(':')).map(|(_, pw)| pw);
    let query = rest.split_once('?').map_or("", |(_, q)| q.split('#').next().unwrap_or(""));
    password.into_iter().chain(query.split('&').filter_map(|kv| kv.split_once('=').map(|(_, v)| v)))
}

impl Config {
    /// This configuration with every secret value blanked: what a trace header
    /// records and what `tether check` may print.
    pub fn redacted(&self) -> Config {
        let redactor = Redactor::from_config(self);
        let mut config = self.clone();
        for server in config.servers.values_mut() {
            match &mut server.transport {
                Transport::Stdio { env, .. } => env.values_mut().for_each(|v| *v = REDACTED.to_string()),
                Transport::Http { url, headers } | Transport::Sse { url, headers } => {
                    headers.values_mut().for_each(|v| *v = REDACTED.to_string());
                    redactor.redact_in_place(url);
                }
            }
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;
    use alloc::collections::BTreeMap;

    fn config() -> Config {
        let mut c = Config::default();
        let mut env = BTreeMap::new();
        env.insert("API_KEY".to_string(), "sk-live-123456".to_string());
        env.insert("DEBUG".to_string(), "1".to_string());
        let mut s = ServerConfig::stdio("srv", &[]);
        if let Transport::Stdio { env: e, .. } = &mut s.transport {
            *e = env;
        }
        c.servers.insert("a".into(), s);
        let mut headers = BTreeMap::new();
        headers.insert("Authorization".to_string(), "Bearer tok-abcdef".to_string());
        let remote = Transport::Http { url: "https://u:pw-secret@h.example/mcp?key=q-998877&x".into(), headers };
        c.servers.insert("b".into(), ServerConfig { transport: remote, ..ServerConfig::stdio("x", &[]) });
        c
    }

    #[test]
    fn secrets_are_removed_from_text_and_config() {
        let c = config();
        let r = Redactor::from_config(&c);
        let text = "failed: sk-live-123456 Bearer tok-abcdef tok-abcdef pw-secret q-998877 DEBUG=1";
        let clean = r.redact(text);
        for secret in ["sk-live-123456", "tok-abcdef", "pw-secret", "q-998877"] {
            assert!(!clean.contains(secret), "{clean}");
        }
        assert!(clean.ends_with("DEBUG=1"), "short values are left in free text: {clean}");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        let json = serde_json::to_string(&c.redacted()).unwrap();
        for secret in ["sk-live-123456", "tok-abcdef", "pw-secret", "q-998877", "\"1\""] {
            assert!(!json.contains(secret), "{json}");
        }
        assert!(json.contains("h.example/mcp"), "{json}");
    }

    #[test]
    fn secrets_are_removed_in_their_json_spellings_too() {
        let mut r = Redactor::default();
        let secret = r#"pa"ss\word"#;
        r.add(secret);
        let frame = serde_json::json!({"params": {"key": secret}}).to_string();
        let line = serde_json::json!({"frame": frame}).to_string();
        for text in [secret.to_string(), frame, line] {
            let clean = r.redact(&text);
            assert!(!clean.contains("word"), "no part of the secret is left: {clean}");
            assert!(clean.contains(REDACTED), "{clean}");
        }
    }
}
