//! Transport failures the host reports, and what each means for retries, the
//! circuit breaker and the backend's status.

use alloc::string::{String, ToString};
use core::fmt;
use serde::{Deserialize, Serialize};

/// A transport-level failure the host reports.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Failure {
    /// The connection was refused.
    Refused,
    /// Name resolution failed.
    Dns,
    /// Connect or read timed out on the host, or the request deadline passed.
    Timeout,
    /// The connection was reset, the pipe broke, or the stream ended early.
    Reset,
    /// The backend answered with a non-success HTTP status.
    Http {
        /// The HTTP status code.
        status: u16,
    },
    /// The backend refused the request's credentials (HTTP 401, or 403), with what
    /// its `WWW-Authenticate` header said.
    Unauthorized {
        /// 401 or 403.
        status: u16,
        /// The parsed challenge.
        #[serde(default)]
        challenge: crate::credential::Challenge,
    },
    /// The stdio process exited.
    Exited {
        /// Exit code, or `None` if it was killed by a signal.
        code: Option<i32>,
    },
    /// The process could not be started (e.g. a bad command).
    Spawn {
        /// The host's error text.
        message: String,
    },
    /// Anything else the host could not map.
    Other {
        /// The host's error text.
        message: String,
    },
}

/// Whether the backend may have acted on a request, which decides if resending is safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// The request certainly never reached the backend.
    NotDelivered,
    /// The backend may have received and acted on the request.
    MaybeDelivered,
}

/// The backend status a failure leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureStatus {
    /// Unreachable for now; reconnecting may help.
    Offline,
    /// Reachable but misbehaving.
    Error,
    /// Credentials were rejected; retrying will not help until they are renewed.
    RequiresReauth,
    /// The backend forgot the session; the gateway re-initializes and resends once.
    SessionLost,
}

/// Everything the engine needs to know to react to a [`Failure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Classification {
    /// The call-retry loop may try again.
    pub retryable: bool,
    /// The failure counts toward opening the circuit breaker.
    pub counts_for_breaker: bool,
    /// Whether the request may have been acted on.
    pub delivery: Delivery,
    /// The backend status this failure leads to.
    pub status: FailureStatus,
}

impl Classification {
    const fn new(retryable: bool, counts: bool, delivery: Delivery, status: FailureStatus) -> Self {
        Classification { retryable, counts_for_breaker: counts, delivery, status }
    }
}

impl Failure {
    /// How the engine should treat this failure.
    pub fn classify(&self) -> Classification {
        use Delivery::*;
        use FailureStatus::*;
        let c = Classification::new;
        match *self {
            Failure::Refused | Failure::Dns => c(true, true, NotDelivered, Offline),
            Failure::Timeout | Failure::Reset => c(true, true, MaybeDelivered, Offline),
            Failure::Http { status } => match status {
                401 | 403 => c(false, false, NotDelivered, RequiresReauth),
                404 => c(false, false, NotDelivered, SessionLost),
                408 | 429 => c(true, true, MaybeDelivered, Offline),
                500..=599 => c(true, true, MaybeDelivered, Error),
                _ => c(false, true, MaybeDelivered, Error),
            },
            Failure::Unauthorized { .. } => c(false, false, NotDelivered, RequiresReauth),
            Failure::Exited { .. } => c(true, true, MaybeDelivered, Error),
            Failure::Spawn { .. } => c(false, true, NotDelivered, Error),
            Failure::Other { .. } => c(false, true, MaybeDelivered, Error),
        }
    }

    /// Whether the backend rejected our credentials (HTTP 401 or 403).
    pub fn is_auth(&self) -> bool {
        matches!(self, Failure::Http { status: 401 | 403 } | Failure::Unauthorized { .. })
    }

    /// Short human text for logs and status, e.g. "HTTP 503".
    pub fn describe(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Refused => f.write_str("connection refused"),
            Failure::Dns => f.write_str("name resolution failed"),
            Failure::Timeout => f.write_str("timed out"),
            Failure::Reset => f.write_str("connection reset"),
            Failure::Http { status } => write!(f, "HTTP {status}"),
            Failure::Unauthorized { status, challenge } => {
                write!(f, "HTTP {status}")?;
                match (&challenge.error, &challenge.description) {
                    (Some(e), Some(d)) => write!(f, " ({e}: {d})"),
                    (Some(e), None) => write!(f, " ({e})"),
                    (None, Some(d)) => write!(f, " ({d})"),
                    (None, None) => Ok(()),
                }
            }
            Failure::Exited { code: Some(code) } => write!(f, "process exited with code {code}"),
            Failure::Exited { code: None } => f.write_str("process killed by a signal"),
            Failure::Spawn { message } => write!(f, "could not start process: {message}"),
            Failure::Other { message } => f.write_str(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Delivery::*;
    use FailureStatus::*;

    fn http(status: u16) -> Failure {
        Failure::Http { status }
    }

    fn msg(s: &str) -> String {
        s.to_string()
    }

    #[test]
    fn classification_table() {
        let table = [
            (Failure::Refused, true, true, NotDelivered, Offline),
            (Failure::Dns, true, true, NotDelivered, Offline),
            (Failure::Timeout, true, true, MaybeDelivered, Offline),
            (Failure::Reset, true, true, MaybeDelivered, Offline),
            (http(401), false, false, NotDelivered, RequiresReauth),
            (http(403), false, false, NotDelivered, RequiresReauth),
            (http(404), false, false, NotDelivered, SessionLost),
            (http(408), true, true, MaybeDelivered, Offline),
            (http(429), true, true, MaybeDelivered, Offline),
            (http(500), true, true, MaybeDelivered, Error),
            (http(503), true, true, MaybeDelivered, Error),
            (http(599), true, true, MaybeDelivered, Error),
            (http(400), false, true, MaybeDelivered, Error),
            (http(409), false, true, MaybeDelivered, Error),
            (http(499), false, true, MaybeDelivered, Error),
            (Failure::Exited { code: Some(1) }, true, true, MaybeDelivered, Error),
            (Failure::Exited { code: None }, true, true, MaybeDelivered, Error),
            (Failure::Spawn { message: msg("x") }, false, true, NotDelivered, Error),
            (Failure::Other { message: msg("x") }, false, true, MaybeDelivered, Error),
        ];
        for (failure, retryable, counts_for_breaker, delivery, status) in table {
            let want = Classification { retryable, counts_for_breaker, delivery, status };
            assert_eq!(failure.classify(), want, "{failure:?}");
        }
    }

    #[test]
    fn auth_detection() {
        assert!(http(401).is_auth());
        assert!(http(403).is_auth());
        assert!(!http(404).is_auth());
        assert!(!Failure::Refused.is_auth());
    }

    #[test]
    fn descriptions() {
        assert_eq!(Failure::Refused.describe(), "connection refused");
        assert_eq!(Failure::Dns.describe(), "name resolution failed");
        assert_eq!(Failure::Timeout.describe(), "timed out");
        assert_eq!(Failure::Reset.describe(), "connection reset");
        assert_eq!(http(503).describe(), "HTTP 503");
        assert_eq!(Failure::Exited { code: Some(1) }.describe(), "process exited with code 1");
        assert_eq!(Failure::Exited { code: None }.describe(), "process killed by a signal");
        assert_eq!(
            Failure::Spawn { message: msg("no such file") }.to_string(),
            "could not start process: no such file"
        );
        assert_eq!(Failure::Other { message: msg("boom") }.to_string(), "boom");
    }

    #[test]
    fn serde_is_tagged_by_kind() {
        let cases = [
            (http(503), r#"{"kind":"http","status":503}"#),
            (Failure::Refused, r#"{"kind":"refused"}"#),
            (Failure::Exited { code: None }, r#"{"kind":"exited","code":null}"#),
            (Failure::Spawn { message: msg("x") }, r#"{"kind":"spawn","message":"x"}"#),
        ];
        for (failure, json) in cases {
            assert_eq!(serde_json::to_string(&failure).unwrap(), json);
            assert_eq!(serde_json::from_str::<Failure>(json).unwrap(), failure);
        }
    }
}
