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

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_value_and_serde_keeps_it() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"hunter2\"");
        let back: Secret = serde_json::from_str("\"hunter2\"").unwrap();
        assert_eq!(back.expose(), "hunter2");
    }
}
