//! Crash-loop detection: give up on a process that crashes too often, too quickly.

use crate::time::{Duration, Instant};
use heapless::Deque;
use serde::{Deserialize, Serialize};

/// Most crashes a [`CrashWindow`] remembers, and so the largest limit it accepts.
pub const MAX_CRASH_LIMIT: usize = 16;

/// Remembers recent crash times so "N crashes within T" can be answered without
/// allocation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CrashWindow {
    limit: u8,
    window: Duration,
    crashes: Deque<Instant, MAX_CRASH_LIMIT>,
}

impl CrashWindow {
    /// An empty window; `limit` is clamped to `1..=MAX_CRASH_LIMIT` and `window` to at
    /// least 1 ms, so the crash being recorded always counts.
    pub fn new(limit: u8, window: Duration) -> Self {
        let mut w = CrashWindow { limit: 1, window: Duration::ZERO, crashes: Deque::new() };
        w.set_policy(limit, window);
        w
    }

    /// Records a crash at `now`, forgetting crashes older than the window; returns the
    /// crashes within the window including this one.
    pub fn record(&mut self, now: Instant) -> u8 {
        while let Some(&t) = self.crashes.front() {
            if self.within(t, now) {
                break;
            }
            self.crashes.pop_front();
        }
        if self.crashes.is_full() {
            self.crashes.pop_front();
        }
        // Cannot fail: a slot was freed above if needed.
        let _ = self.crashes.push_back(now);
        self.count(now)
    }

    /// Crashes within `(now - window, now]`.
    pub fn count(&self, now: Instant) -> u8 {
        let n = self.crashes.iter().filter(|&&t| self.within(t, now)).count();
        // At most MAX_CRASH_LIMIT, which fits in a u8.
        n as u8
    }

    /// Whether the process has crashed `limit` times within the window and should not
    /// be restarted again.
    pub fn exhausted(&self, now: Instant) -> bool {
        self.count(now) >= self.limit
    }

    /// Forgets all crashes, e.g. after an admin restart.
    pub fn clear(&mut self) {
        self.crashes.clear();
    }

    /// Crashes within the window that exhaust it.
    pub fn limit(&self) -> u8 {
        self.limit
    }

    /// How far back crashes count.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Applies reloaded settings, keeping the recorded crashes; clamped as in [`new`](Self::new).
    pub fn set_policy(&mut self, limit: u8, window: Duration) {
        self.limit = limit.clamp(1, MAX_CRASH_LIMIT as u8);
        self.window = window.max(Duration::from_millis(1));
    }

    fn within(&self, crash: Instant, now: Instant) -> bool {
        crash <= now && now.saturating_since(crash) < self.window
    }
}

// `heapless::Deque` has no `PartialEq`, so compare contents by hand.
impl PartialEq for CrashWindow {
    fn eq(&self, other: &Self) -> bool {
        self.limit == other.limit && self.window == other.window && self.crashes.iter().eq(other.crashes.iter())
    }
}

impl Eq for CrashWindow {}

/// Delay before restarting a crashed process: zero if it ran longer than
/// `immediate_after` (a one-off crash), else `delays[crashes_in_window - 1]`, clamped to
/// the table's last entry. Zero for an empty table.
pub fn restart_delay(
    ran_for: Duration,
    crashes_in_window: u8,
    immediate_after: Duration,
    delays: &[Duration],
) -> Duration {
    if ran_for > immediate_after || delays.is_empty() {
        return Duration::ZERO;
    }
    let i = usize::from(crashes_in_window.max(1) - 1).min(delays.len() - 1);
    delays[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60;

    fn at(s: u64) -> Instant {
        Instant::from_millis(s * 1000)
    }

    #[test]
    fn three_in_five_minutes_exhausts() {
        let mut w = CrashWindow::new(3, Duration::from_secs(5 * MIN));
        assert_eq!(w.record(at(0)), 1);
        assert!(!w.exhausted(at(0)));
        assert_eq!(w.record(at(60)), 2);
        assert!(!w.exhausted(at(60)));
        assert_eq!(w.record(at(120)), 3);
        assert!(w.exhausted(at(120)));
        w.clear();
        assert_eq!(w.count(at(120)), 0);
        assert!(!w.exhausted(at(120)));
    }

    #[test]
    fn old_crashes_age_out() {
        let mut w = CrashWindow::new(3, Duration::from_secs(5 * MIN));
        w.record(at(0));
        w.record(at(100));
        // The crash at 0 is exactly one window old at 300 and no longer counts.
        assert_eq!(w.count(at(299)), 2);
        assert_eq!(w.count(at(300)), 1);
        assert_eq!(w.record(at(300)), 2);
        assert!(!w.exhausted(at(300)));
        assert_eq!(w.count(at(1000)), 0);
    }

    #[test]
    fn capacity_never_exceeded() {
        let mut w = CrashWindow::new(16, Duration::from_secs(3600));
        for i in 0..100 {
            let n = w.record(at(i));
            assert_eq!(usize::from(n), (i as usize + 1).min(MAX_CRASH_LIMIT));
            assert!(w.crashes.len() <= MAX_CRASH_LIMIT);
        }
        assert!(w.exhausted(at(100)));
    }

    #[test]
    fn policy_is_clamped() {
        let w = CrashWindow::new(0, Duration::ZERO);
        assert_eq!((w.limit(), w.window()), (1, Duration::from_millis(1)));
        let mut w = CrashWindow::new(200, Duration::from_secs(1));
        assert_eq!(w.limit(), MAX_CRASH_LIMIT as u8);
        w.record(at(0));
        w.set_policy(1, Duration::from_secs(10));
        assert!(w.exhausted(at(5)));
        assert_eq!(w.window(), Duration::from_secs(10));
    }

    #[test]
    fn serde_round_trip() {
        let mut w = CrashWindow::new(3, Duration::from_secs(300));
        w.record(at(1));
        w.record(at(2));
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(json, r#"{"limit":3,"window":300000,"crashes":[1000,2000]}"#);
        let back: CrashWindow = serde_json::from_str(&json).unwrap();
        assert_eq!(back, w);
    }

    #[test]
    fn restart_delay_table() {
        let s = Duration::from_secs;
        let table = [s(1), s(5), s(30)];
        let quick = s(10);
        let imm = s(60);
        assert_eq!(restart_delay(s(61), 3, imm, &table), Duration::ZERO);
        assert_eq!(restart_delay(quick, 0, imm, &table), s(1));
        assert_eq!(restart_delay(quick, 1, imm, &table), s(1));
        assert_eq!(restart_delay(quick, 2, imm, &table), s(5));
        assert_eq!(restart_delay(quick, 3, imm, &table), s(30));
        assert_eq!(restart_delay(quick, 255, imm, &table), s(30));
        assert_eq!(restart_delay(imm, 2, imm, &table), s(5));
        assert_eq!(restart_delay(quick, 2, imm, &[]), Duration::ZERO);
    }
}
