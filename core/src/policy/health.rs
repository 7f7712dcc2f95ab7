//! Health tracking: flag a backend as degraded after repeated failures.

use serde::{Deserialize, Serialize};

/// A change in health worth reporting; each is emitted once per episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthChange {
    /// Failures reached the threshold.
    Degraded {
        /// Failures in a row when the threshold was reached.
        consecutive_failures: u32,
    },
    /// A success ended a degraded episode.
    Restored,
}

/// Counts consecutive failures and reports entering and leaving the degraded state,
/// so the host hears about it once rather than on every failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthTracker {
    threshold: u32,
    consecutive_failures: u32,
    degraded: bool,
}

impl HealthTracker {
    /// A healthy tracker; a `threshold` of 0 is treated as 1.
    pub fn new(threshold: u32) -> Self {
        HealthTracker { threshold: threshold.max(1), consecutive_failures: 0, degraded: false }
    }

    /// Records a success; reports [`HealthChange::Restored`] if it was degraded.
    pub fn on_success(&mut self) -> Option<HealthChange> {
        self.consecutive_failures = 0;
        if !self.degraded {
            return None;
        }
        self.degraded = false;
        Some(HealthChange::Restored)
    }

    /// Records a failure; reports [`HealthChange::Degraded`] only when first reaching
    /// the threshold.
    pub fn on_failure(&mut self) -> Option<HealthChange> {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        if self.degraded || self.consecutive_failures < self.threshold {
            return None;
        }
        self.degraded = true;
        Some(HealthChange::Degraded { consecutive_failures: self.consecutive_failures })
    }

    /// Whether the threshold was reached with no success since.
    pub fn is_degraded(&self) -> bool {
        self.degraded
    }

    /// Failures since the last success.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Back to healthy with no failures, without reporting a change.
    pub fn reset(&mut self) {
        self.consecutive_failures = 0;
        self.degraded = false;
    }

    /// Applies a reloaded threshold (0 treated as 1); takes effect at the next failure.
    pub fn set_threshold(&mut self, t: u32) {
        self.threshold = t.max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degraded_once_restored_once() {
        let mut h = HealthTracker::new(3);
        assert_eq!(h.on_failure(), None);
        assert_eq!(h.on_failure(), None);
        assert!(!h.is_degraded());
        assert_eq!(h.on_failure(), Some(HealthChange::Degraded { consecutive_failures: 3 }));
        assert!(h.is_degraded());
        assert_eq!(h.on_failure(), None);
        assert_eq!(h.consecutive_failures(), 4);
        assert_eq!(h.on_success(), Some(HealthChange::Restored));
        assert_eq!(h.on_success(), None);
        assert!(!h.is_degraded());
        assert_eq!(h.consecutive_failures(), 0);
    }

    #[test]
    fn success_below_threshold_is_silent() {
        let mut h = HealthTracker::new(2);
        assert_eq!(h.on_failure(), None);
        assert_eq!(h.on_success(), None);
        assert_eq!(h.on_failure(), None);
        assert_eq!(h.on_failure(), Some(HealthChange::Degraded { consecutive_failures: 2 }));
    }

    #[test]
    fn zero_threshold_reset_and_reload() {
        let mut h = HealthTracker::new(0);
        assert_eq!(h.on_failure(), Some(HealthChange::Degraded { consecutive_failures: 1 }));
        h.reset();
        assert_eq!(h, HealthTracker::new(1));
        h.set_threshold(2);
        assert_eq!(h.on_failure(), None);
        assert_eq!(h.on_failure(), Some(HealthChange::Degraded { consecutive_failures: 2 }));
        assert_eq!(
            serde_json::to_string(&HealthChange::Degraded { consecutive_failures: 2 }).unwrap(),
            r#"{"degraded":{"consecutive_failures":2}}"#
        );
    }
}
