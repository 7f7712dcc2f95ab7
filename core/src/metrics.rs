//! What operators count: per-backend call outcomes and latencies, connection
//! restarts and breaker transitions. Kept by the core (it sees every call end and
//! every transition, in simulated time too), read by hosts for `/status` and
//! `/metrics`. Fixed-size: a backend's metrics never grow with traffic.

use alloc::collections::VecDeque;

/// Upper bounds (ms) of the call latency histogram's buckets; a last, implicit
/// bucket takes everything above.
pub const LATENCY_BUCKETS_MS: [u64; 12] = [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000];

/// Latencies kept per backend for a sparkline.
pub(crate) const RECENT_LATENCIES: usize = 32;

/// How a client call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// The backend answered with a result.
    Ok,
    /// The backend answered with an error (a tool error result counts as ok:
    /// the call worked).
    Error,
    /// No answer from the backend: timed out, connection lost, refused by the
    /// breaker, overload or an unavailable backend.
    Failed,
}

/// Counters and the latency histogram of one backend, since tether started (a
/// backend removed and added back starts again).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendMetrics {
    /// Client calls answered with a result.
    pub calls_ok: u64,
    /// Client calls answered with the backend's error.
    pub calls_error: u64,
    /// Client calls that got no answer from the backend.
    pub calls_failed: u64,
    /// Calls per latency bucket ([`LATENCY_BUCKETS_MS`], then the overflow bucket);
    /// not cumulative.
    pub latency_buckets: [u64; LATENCY_BUCKETS_MS.len() + 1],
    /// Sum of all call latencies, ms.
    pub latency_sum_ms: u64,
    /// The last `RECENT_LATENCIES` call latencies (ms), oldest first.
    pub recent_latency_ms: VecDeque<u32>,
    /// Stdio processes started again after the first (crash restarts, manual ones).
    pub restarts: u64,
    /// HTTP connections opened again after the first.
    pub reconnects: u64,
    /// Connections lost (not closed on purpose).
    pub disconnects: u64,
    /// Breaker transitions to open.
    pub breaker_opened: u64,
    /// Breaker transitions back to closed.
    pub breaker_closed: u64,
}

impl BackendMetrics {
    /// Counts one ended call that took `latency_ms` from the client's request.
    pub fn record_call(&mut self, outcome: CallOutcome, latency_ms: u64) {
        match outcome {
            CallOutcome::Ok => self.calls_ok += 1,
            CallOutcome::Error => self.calls_error += 1,
            CallOutcome::Failed => self.calls_failed += 1,
        }
        let bucket = LATENCY_BUCKETS_MS.iter().position(|b| latency_ms <= *b).unwrap_or(LATENCY_BUCKETS_MS.len());
        self.latency_buckets[bucket] += 1;
        self.latency_sum_ms = self.latency_sum_ms.saturating_add(latency_ms);
        if self.recent_latency_ms.len() == RECENT_LATENCIES {
            self.recent_latency_ms.pop_front();
        }
        self.recent_latency_ms.push_back(u32::try_from(latency_ms).unwrap_or(u32::MAX));
    }

    /// Calls counted, whatever their outcome.
    pub fn calls(&self) -> u64 {
        self.calls_ok + self.calls_error + self.calls_failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_one_bucket_each_and_recent_latencies_are_bounded() {
        let mut m = BackendMetrics::default();
        m.record_call(CallOutcome::Ok, 5);
        m.record_call(CallOutcome::Error, 6);
        m.record_call(CallOutcome::Failed, 60_000);
        assert_eq!((m.calls_ok, m.calls_error, m.calls_failed, m.calls()), (1, 1, 1, 3));
        assert_eq!(m.latency_buckets[0], 1, "5 ms is within the 5 ms bucket");
        assert_eq!(m.latency_buckets[1], 1);
        assert_eq!(m.latency_buckets[LATENCY_BUCKETS_MS.len()], 1, "above the last bound");
        assert_eq!(m.latency_sum_ms, 60_011);
        for i in 0..100 {
            m.record_call(CallOutcome::Ok, i);
        }
        assert_eq!(m.recent_latency_ms.len(), RECENT_LATENCIES);
        assert_eq!(m.recent_latency_ms.back(), Some(&99));
    }
}
