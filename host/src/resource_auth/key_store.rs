//! The issuer's signing keys, cached, and when to fetch them again.
//!
//! Policy:
//! - no keys yet: fetch (after a failure, not again for [`RETRY_AFTER_FAILURE`]);
//! - keys older than [`REFRESH_AFTER`]: fetch, but keep using the old set while the
//!   fetch runs and if it fails;
//! - a token signed by an unknown key (rotation): fetch, at most once per
//!   [`REFETCH_INTERVAL`] since the last attempt, so a flood of tokens with
//!   made-up `kid`s costs at most one fetch per interval.
//!
//! One fetch at a time (single flight): a caller that needs a fetch takes the
//! fetch lock, then looks again whether the fetch is still due; whoever waited
//! behind another's fetch finds it done and uses its result.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::clock::Clock;
use super::jwks::KeySet;
use super::metadata;
use crate::oauth::transport::Http;

/// How old a key set may get before it is fetched again.
pub(super) const REFRESH_AFTER: Duration = Duration::from_secs(3600);
/// The least time between two fetches for tokens signed by unknown keys.
pub(super) const REFETCH_INTERVAL: Duration = Duration::from_secs(30);
/// How long after a failed fetch no key set at all means "unavailable" without
/// trying again.
pub(super) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// Why a fetch is wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Why {
    /// There are no keys yet.
    Missing,
    /// The keys are older than [`REFRESH_AFTER`].
    Stale,
    /// A token names a key the set does not have.
    UnknownKey,
}

/// What is known, and when it was learnt.
#[derive(Default)]
struct State {
    keys: Option<Arc<KeySet>>,
    /// When `keys` were fetched.
    fetched_at: Option<Instant>,
    /// When the last fetch ended, well or not.
    attempted_at: Option<Instant>,
    /// Whether that fetch failed.
    failed: bool,
    /// Whether a refresh of stale keys is under way (meanwhile they serve).
    refreshing: bool,
    /// Whether any fetch is under way: tokens with unknown keys do not wait
    /// for it (a flood of them would hold a thread each).
    in_flight: bool,
    /// The `jwks_uri` found in the issuer's metadata.
    discovered_uri: Option<String>,
}

impl State {
    /// Whether a fetch for `why` is due at `now`.
    fn due(&self, now: Instant, why: Why) -> bool {
        let since = |t: Option<Instant>| t.map_or(Duration::MAX, |t| now.saturating_duration_since(t));
        if self.failed && since(self.attempted_at) < RETRY_AFTER_FAILURE {
            return false;
        }
        match why {
            Why::Missing => self.keys.is_none(),
            Why::Stale => {
                !self.refreshing
                    && since(self.fetched_at) >= REFRESH_AFTER
                    && since(self.attempted_at) >= REFETCH_INTERVAL
            }
            Why::UnknownKey => !self.in_flight && since(self.attempted_at) >= REFETCH_INTERVAL,
        }
    }
}

/// The keys as they are now, and which fetches are due.
pub(super) struct Snapshot {
    /// The key set, if one was ever fetched.
    pub(super) keys: Option<Arc<KeySet>>,
    /// Whether the last fetch failed (an unknown key may then be a rotation tether
    /// could not see).
    pub(super) last_failed: bool,
    missing_due: bool,
    stale_due: bool,
    unknown_due: bool,
}

impl Snapshot {
    /// Whether a fetch for `why` was due when the snapshot was taken.
    pub(super) fn due(&self, why: Why) -> bool {
        match why {
            Why::Missing => self.missing_due,
            Why::Stale => self.stale_due,
            Why::UnknownKey => self.unknown_due,
        }
    }
}

/// The issuer's signing keys, fetched from `jwks_uri` or from where the issuer's
/// metadata says.
pub(super) struct KeyStore {
    issuer: String,
    /// The configured `jwks_uri`, if any.
    configured_uri: Option<String>,
    state: Mutex<State>,
    /// Held for the whole of a fetch.
    fetching: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl KeyStore {
    /// A store with no keys yet.
    pub(super) fn new(issuer: &str, jwks_uri: Option<&str>) -> Self {
        KeyStore {
            issuer: issuer.to_owned(),
            configured_uri: jwks_uri.map(str::to_owned),
            state: Mutex::new(State::default()),
            fetching: Mutex::new(()),
        }
    }

    /// The keys and the fetches due at `now`. Never blocks on the network.
    pub(super) fn snapshot(&self, now: Instant) -> Snapshot {
        let state = lock(&self.state);
        Snapshot {
            keys: state.keys.clone(),
            last_failed: state.failed,
            missing_due: state.due(now, Why::Missing),
            stale_due: state.due(now, Why::Stale),
            unknown_due: state.due(now, Why::UnknownKey),
        }
    }

    /// Fetches the key set if a fetch for `why` is still due once any fetch under
    /// way has ended; the outcome is recorded for [`KeyStore::snapshot`]. Blocks on
    /// the network.
    pub(super) fn fetch(&self, http: &Http, clock: &Clock, why: Why) {
        let _single_flight = lock(&self.fetching);
        let known_uri = {
            let mut state = lock(&self.state);
            if !state.due(clock.now(), why) {
                return;
            }
            state.refreshing = why == Why::Stale;
            state.in_flight = true;
            self.configured_uri.clone().or_else(|| state.discovered_uri.clone())
        };
        let discovered = known_uri.is_none();
        let result = match known_uri {
            Some(uri) => Ok(uri),
            None => metadata::jwks_uri(http, &self.issuer),
        }
        .and_then(|uri| get_key_set(http, &uri).map(|keys| (uri, keys)));
        let mut state = lock(&self.state);
        let now = clock.now();
        state.refreshing = false;
        state.in_flight = false;
        state.attempted_at = Some(now);
        match result {
            Ok((uri, keys)) => {
                tracing::debug!(jwks_uri = %uri, keys = keys.len(), "fetched the authorization server's signing keys");
                state.keys = Some(Arc::new(keys));
                state.fetched_at = Some(now);
                state.failed = false;
                if discovered {
                    state.discovered_uri = Some(uri);
                }
            }
            Err(message) => {
                tracing::warn!(issuer = %self.issuer, "cannot fetch the signing keys of the authorization server: {message}");
                state.failed = true;
                // Perhaps the metadata moved the keys: look again next time.
                state.discovered_uri = None;
            }
        }
    }
}

/// The key set at `uri`.
fn get_key_set(http: &Http, uri: &str) -> Result<KeySet, String> {
    super::settings::secure_url(uri)?;
    let answer = http.get_json(uri).map_err(|f| f.message)?;
    if answer.status != 200 {
        return Err(format!("{uri}: HTTP {}", answer.status));
    }
    let doc = answer.json.ok_or_else(|| format!("{uri}: not JSON"))?;
    let keys = KeySet::parse(&doc).map_err(|e| format!("{uri}: {e}"))?;
    // A set with no key tether can use refuses every token: a fault of the
    // server's (503), not of the tokens (401, which sends clients to log in again).
    if keys.len() == 0 {
        return Err(format!("{uri}: no usable signing key"));
    }
    Ok(keys)
}
