//! A string that can mint or present access: kept out of logs by construction.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A token, code, verifier or client secret. It has no `Display`, and its `Debug`
/// prints `[redacted]`, so deriving `Debug` on a struct that holds one is safe and
/// a stray `{:?}` in a log line shows nothing. The value is reached only through
/// [`Secret::expose`], which marks every place it leaves the process.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value that must not be printed.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, to put on the wire or in the store.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// The shortest end of a secret [`hide`] removes from the end of a text (a text cut
/// short in the middle of a secret): shorter ones could be a coincidence.
const MIN_TAIL: usize = 8;

/// `text` with every one of `secrets` replaced by `[redacted]`: as it is, as it is
/// spelled in a form or a query (`application/x-www-form-urlencoded`), and a piece
/// of one at the very end, where a server's text that quoted it was cut short.
/// For text a server chose (an `error_description` may quote what it was sent).
/// Secrets shorter than [`tether_core::redact::MIN_SECRET_LEN`] are left alone.
pub fn hide(text: &str, secrets: &[&str]) -> String {
    use tether_core::redact::{MIN_SECRET_LEN, REDACTED};
    let mut out = text.to_owned();
    let mut spellings: Vec<String> = Vec::new();
    for secret in secrets.iter().filter(|s| s.len() >= MIN_SECRET_LEN) {
        spellings.push((*secret).to_owned());
        spellings.push(url::form_urlencoded::byte_serialize(secret.as_bytes()).collect());
    }
    // Longest first, so a secret holding another is hidden whole.
    spellings.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for spelling in &spellings {
        if out.contains(spelling.as_str()) {
            out = out.replace(spelling.as_str(), REDACTED);
        }
    }
    for spelling in &spellings {
        let longest_tail = (MIN_TAIL..spelling.len())
            .rev()
            .filter(|n| spelling.is_char_boundary(*n))
            .find(|n| out.ends_with(&spelling[..*n]));
        if let Some(n) = longest_tail {
            out.truncate(out.len() - n);
            out.push_str(REDACTED);
        }
    }
    out
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hide_removes_secrets_their_form_spelling_and_a_cut_off_end() {
        let text = "refresh token rt-abc/def+1 (rt-abc%2Fdef%2B1) and client secret s3cr3t-value";
        assert_eq!(
            hide(text, &["rt-abc/def+1", "s3cr3t-value", "ab"]),
            "refresh token [redacted] ([redacted]) and client secret [redacted]"
        );
        assert_eq!(hide("token: PLANTED-ACC", &["PLANTED-ACCESS-1234"]), "token: [redacted]", "cut short");
        assert_eq!(hide("token: PLAN", &["PLANTED-ACCESS-1234"]), "token: PLAN", "too short a piece to tell");
        assert_eq!(hide("nothing here", &[]), "nothing here");
    }

    #[test]
    fn debug_hides_the_value_and_serde_keeps_it() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"hunter2\"");
        let back: Secret = serde_json::from_str("\"hunter2\"").unwrap();
        assert_eq!(back.expose(), "hunter2");
    }
}
