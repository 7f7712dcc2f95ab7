//! The times the validator reads: a monotonic clock for its caches and fetch
//! intervals (which tests can move forward), and the wall clock for claims.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A monotonic clock that tests can move forward, so cache lifetimes and the
/// intervals between fetches can be tested without waiting.
#[derive(Debug, Default)]
pub(super) struct Clock {
    /// Milliseconds added to the real clock.
    skew_ms: AtomicU64,
}

impl Clock {
    /// Now.
    pub(super) fn now(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.skew_ms.load(Ordering::Relaxed))
    }

    /// Moves the clock forward by `by`.
    #[cfg(test)]
    pub(super) fn advance(&self, by: Duration) {
        self.skew_ms.fetch_add(by.as_millis() as u64, Ordering::Relaxed);
    }
}

/// The wall clock in unix seconds, as `exp`, `nbf` and `iat` count time.
pub(super) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
