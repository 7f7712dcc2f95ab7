//! Warnings that a peer can cause at will (every forged token while the signing
//! keys are unreachable, every request while introspection is down), limited to
//! one line per interval with a count of those left out, so that nobody can fill
//! the log by sending requests.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a limited warning is written at most.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// One kind of warning, written at most once per [`INTERVAL`].
#[derive(Debug, Default)]
pub struct WarnLimit {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last: Option<Instant>,
    left_out: u64,
}

impl WarnLimit {
    /// A limit that has written nothing yet.
    pub const fn new() -> Self {
        WarnLimit { state: Mutex::new(State { last: None, left_out: 0 }) }
    }

    /// Calls `write` with the number of warnings left out since the last one
    /// written, if one may be written now; else counts this one as left out.
    pub fn warn(&self, write: impl FnOnce(u64)) {
        self.warn_at(Instant::now(), write);
    }

    fn warn_at(&self, now: Instant, write: impl FnOnce(u64)) {
        let left_out = {
            let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if state.last.is_some_and(|last| now.saturating_duration_since(last) < INTERVAL) {
                state.left_out += 1;
                return;
            }
            state.last = Some(now);
            std::mem::take(&mut state.left_out)
        };
        write(left_out);
    }
}

/// ` (N more like it not logged)` when some were left out.
pub fn more(left_out: u64) -> String {
    if left_out == 0 {
        String::new()
    } else {
        format!(" ({left_out} more like it in the last {} s not logged)", INTERVAL.as_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_a_count_of_the_rest() {
        let limit = WarnLimit::new();
        let start = Instant::now();
        let mut written = Vec::new();
        for ms in (0..25_000).step_by(100) {
            limit.warn_at(start + Duration::from_millis(ms), |n| written.push((ms, n)));
        }
        assert_eq!(written, [(0, 0), (10_000, 99), (20_000, 99)]);
        assert_eq!(more(0), "");
        assert!(more(99).starts_with(" (99 more"));
    }
}
