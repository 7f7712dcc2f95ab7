//! A circuit breaker: stop calling a backend that keeps failing, then probe it once.

use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// Where a breaker stands, as callers and status reports see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls flow normally.
    Closed,
    /// Calls are rejected until the cooldown ends.
    Open,
    /// The cooldown ended; one probe call decides whether to close again.
    HalfOpen,
}

/// Why a call was let through, so its outcome can be attributed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Admission {
    /// An ordinary call on a closed breaker.
    Normal,
    /// The single half-open probe; its verdict closes or reopens the breaker.
    Probe,
}

/// A call refused by the breaker, with a hint for when to try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rejection {
    /// Cooldown left while open; zero while half-open with the probe in flight.
    pub retry_in: Duration,
}

/// A state change worth reporting to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerTransition {
    /// The breaker opened and rejects calls for `cooldown`.
    Opened {
        /// How long calls are rejected.
        cooldown: Duration,
    },
    /// The cooldown ended and a probe was admitted. [`CircuitBreaker::admit`] does not
    /// return this; callers report it when they get [`Admission::Probe`].
    HalfOpened,
    /// The probe succeeded and calls flow again.
    Closed,
}

/// Trips after `threshold` consecutive failures, rejects calls for `cooldown`, then
/// admits a single probe whose outcome closes or reopens it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CircuitBreaker {
    threshold: u32,
    cooldown: Duration,
    state: BreakerState,
    consecutive_failures: u32,
    opened_at: Option<Instant>,
    probe_in_flight: bool,
}

impl CircuitBreaker {
    /// A closed breaker; a `threshold` of 0 is treated as 1.
    pub fn new(threshold: u32, cooldown: Duration) -> Self {
        CircuitBreaker {
            threshold: threshold.max(1),
            cooldown,
            state: BreakerState::Closed,
            consecutive_failures: 0,
            opened_at: None,
            probe_in_flight: false,
        }
    }

    /// The state at `now`; an open breaker whose cooldown has ended reports half-open.
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.state {
            BreakerState::Open if self.cooldown_left(now) == Duration::ZERO => BreakerState::HalfOpen,
            s => s,
        }
    }

    /// Decides whether a call may start at `now`. Once the cooldown has ended, the first
    /// caller gets the probe; others are rejected until its verdict is in.
    pub fn admit(&mut self, now: Instant) -> Result<Admission, Rejection> {
        match self.state(now) {
            BreakerState::Closed => Ok(Admission::Normal),
            BreakerState::Open => Err(Rejection { retry_in: self.cooldown_left(now) }),
            BreakerState::HalfOpen if self.probe_in_flight => Err(Rejection { retry_in: Duration::ZERO }),
            BreakerState::HalfOpen => {
                self.state = BreakerState::HalfOpen;
                self.opened_at = None;
                self.probe_in_flight = true;
                Ok(Admission::Probe)
            }
        }
    }

    /// Records a successful call: clears the failure count, and closes a half-open breaker.
    pub fn on_success(&mut self, _now: Instant) -> Option<BreakerTransition> {
        self.consecutive_failures = 0;
        if self.state != BreakerState::HalfOpen {
            return None;
        }
        self.state = BreakerState::Closed;
        self.probe_in_flight = false;
        Some(BreakerTransition::Closed)
    }

    /// Records a failed call: opens the breaker at the threshold, or reopens it with a
    /// fresh cooldown when the probe fails.
    pub fn on_failure(&mut self, now: Instant) -> Option<BreakerTransition> {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let open = match self.state {
            BreakerState::Closed => self.consecutive_failures >= self.threshold,
            BreakerState::HalfOpen => true,
            BreakerState::Open => false,
        };
        if !open {
            return None;
        }
        self.state = BreakerState::Open;
        self.opened_at = Some(now);
        self.probe_in_flight = false;
        Some(BreakerTransition::Opened { cooldown: self.cooldown })
    }

    /// The probe ended without a verdict (cancelled, or a failure that does not count):
    /// lets the next call probe instead.
    pub fn probe_abandoned(&mut self) {
        self.probe_in_flight = false;
    }

    /// Back to closed with no failures, e.g. after an admin restart or config change.
    pub fn reset(&mut self) {
        self.state = BreakerState::Closed;
        self.consecutive_failures = 0;
        self.opened_at = None;
        self.probe_in_flight = false;
    }

    /// Failures since the last success.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Consecutive failures that open the breaker.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// Time until an open breaker admits a probe; zero unless open.
    pub fn cooldown_left(&self, now: Instant) -> Duration {
        match (self.state, self.opened_at) {
            (BreakerState::Open, Some(at)) => (at + self.cooldown).saturating_since(now),
            _ => Duration::ZERO,
        }
    }

    /// Applies reloaded settings without losing the current state; a running cooldown
    /// is measured against the new length.
    pub fn set_policy(&mut self, threshold: u32, cooldown: Duration) {
        self.threshold = threshold.max(1);
        self.cooldown = cooldown;
        // A lowered threshold: the next failure opens, as it would have with the
        // full count; a closed breaker keeps counting below its threshold.
        if self.state == BreakerState::Closed {
            self.consecutive_failures = self.consecutive_failures.min(self.threshold - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOLDOWN: Duration = Duration::from_secs(30);

    fn at(s: u64) -> Instant {
        Instant::from_millis(s * 1000)
    }

    fn opened() -> Option<BreakerTransition> {
        Some(BreakerTransition::Opened { cooldown: COOLDOWN })
    }

    /// A breaker opened by five failures at t=0.
    fn tripped() -> CircuitBreaker {
        let mut b = CircuitBreaker::new(5, COOLDOWN);
        for i in 0..4 {
            assert_eq!(b.admit(at(0)), Ok(Admission::Normal));
            assert_eq!(b.on_failure(at(0)), None, "failure {}", i + 1);
        }
        assert_eq!(b.on_failure(at(0)), opened());
        b
    }

    #[test]
    fn opens_at_threshold_and_rejects_with_time_left() {
        let mut b = tripped();
        assert_eq!(b.state(at(0)), BreakerState::Open);
        assert_eq!(b.consecutive_failures(), 5);
        assert_eq!(b.admit(at(10)), Err(Rejection { retry_in: Duration::from_secs(20) }));
        assert_eq!(b.cooldown_left(at(29)), Duration::from_secs(1));
        // A late failure from a call admitted before opening changes nothing.
        assert_eq!(b.on_failure(at(12)), None);
        assert_eq!(b.cooldown_left(at(12)), Duration::from_secs(18));
    }

    #[test]
    fn single_probe_then_close() {
        let mut b = tripped();
        assert_eq!(b.state(at(30)), BreakerState::HalfOpen);
        assert_eq!(b.admit(at(30)), Ok(Admission::Probe));
        assert_eq!(b.admit(at(31)), Err(Rejection { retry_in: Duration::ZERO }));
        assert_eq!(b.cooldown_left(at(31)), Duration::ZERO);
        assert_eq!(b.on_success(at(32)), Some(BreakerTransition::Closed));
        assert_eq!(b.state(at(32)), BreakerState::Closed);
        assert_eq!(b.consecutive_failures(), 0);
        assert_eq!(b.admit(at(33)), Ok(Admission::Normal));
        assert_eq!(b.on_success(at(33)), None);
    }

    #[test]
    fn failed_probe_reopens_with_fresh_cooldown() {
        let mut b = tripped();
        assert_eq!(b.admit(at(40)), Ok(Admission::Probe));
        assert_eq!(b.on_failure(at(45)), opened());
        assert_eq!(b.state(at(45)), BreakerState::Open);
        assert_eq!(b.admit(at(60)), Err(Rejection { retry_in: Duration::from_secs(15) }));
        assert_eq!(b.state(at(75)), BreakerState::HalfOpen);
        assert_eq!(b.admit(at(75)), Ok(Admission::Probe));
    }

    #[test]
    fn abandoned_probe_lets_next_call_probe() {
        let mut b = tripped();
        assert_eq!(b.admit(at(30)), Ok(Admission::Probe));
        b.probe_abandoned();
        assert_eq!(b.admit(at(31)), Ok(Admission::Probe));
        assert_eq!(b.admit(at(31)), Err(Rejection { retry_in: Duration::ZERO }));
    }

    #[test]
    fn success_resets_count_midway() {
        let mut b = CircuitBreaker::new(5, COOLDOWN);
        for _ in 0..4 {
            b.on_failure(at(0));
        }
        assert_eq!(b.on_success(at(1)), None);
        assert_eq!(b.consecutive_failures(), 0);
        for _ in 0..4 {
            assert_eq!(b.on_failure(at(2)), None);
        }
        assert_eq!(b.state(at(2)), BreakerState::Closed);
        assert_eq!(b.on_failure(at(2)), opened());
    }

    #[test]
    fn reset_policy_and_zero_threshold() {
        let mut b = tripped();
        b.set_policy(2, Duration::from_secs(10));
        assert_eq!(b.state(at(5)), BreakerState::Open);
        assert_eq!(b.cooldown_left(at(5)), Duration::from_secs(5));
        assert_eq!(b.threshold(), 2);
        b.reset();
        assert_eq!(b, CircuitBreaker::new(2, Duration::from_secs(10)));

        let mut one = CircuitBreaker::new(0, COOLDOWN);
        assert_eq!(one.threshold(), 1);
        assert_eq!(one.on_failure(at(0)), opened());
    }

    #[test]
    fn a_lowered_threshold_opens_at_the_next_failure() {
        let mut b = CircuitBreaker::new(5, COOLDOWN);
        for _ in 0..3 {
            assert_eq!(b.on_failure(at(0)), None);
        }
        b.set_policy(2, COOLDOWN);
        assert_eq!(b.state(at(0)), BreakerState::Closed);
        assert_eq!(b.consecutive_failures(), 1, "a closed breaker counts below its threshold");
        assert_eq!(b.on_failure(at(1)), opened());
    }

    #[test]
    fn serde_round_trip() {
        let b = tripped();
        let json = serde_json::to_string(&b).unwrap();
        assert!(json.contains("\"state\":\"open\""), "{json}");
        let back: CircuitBreaker = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b);
        assert_eq!(serde_json::to_string(&BreakerState::HalfOpen).unwrap(), "\"half_open\"");
    }
}
