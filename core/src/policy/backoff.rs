//! Exponential backoff with jitter, for retrying calls and reconnecting.

use crate::rng::Rng;
use crate::time::Duration;
use serde::{Deserialize, Serialize};

/// How long to wait between retries: grows geometrically from `initial`, capped at `max`,
/// then spread by jitter so many clients do not retry in lockstep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    /// Base delay before the first attempt.
    pub initial: Duration,
    /// Factor the base grows by per attempt.
    pub multiplier: u32,
    /// Cap on the un-jittered base.
    pub max: Duration,
    /// Jitter as ± percent of the base; values above 100 are treated as 100.
    pub jitter_percent: u8,
}

/// Largest base handed to [`Rng::jitter`], so `base ± spread` cannot overflow.
const JITTER_SAFE_MAX: u64 = u64::MAX / 2;

impl Backoff {
    /// Delay before attempt `attempt` (1-based; 0 is treated as 1): the [`base`](Self::base)
    /// moved by up to ±`jitter_percent` %. Never panics.
    pub fn delay(&self, attempt: u32, rng: &mut Rng) -> Duration {
        let base = self.base(attempt).as_millis().min(JITTER_SAFE_MAX);
        Duration::from_millis(rng.jitter(base, self.percent()))
    }

    /// The un-jittered delay for `attempt`: `min(initial * multiplier^(attempt-1), max)`.
    pub fn base(&self, attempt: u32) -> Duration {
        let exp = attempt.max(1) - 1;
        let factor = u64::from(self.multiplier).saturating_pow(exp);
        let ms = self.initial.as_millis().saturating_mul(factor);
        Duration::from_millis(ms.min(self.max.as_millis()))
    }

    /// Upper bound any [`delay`](Self::delay) may reach: `max` plus its jitter.
    pub fn ceiling(&self) -> Duration {
        let max = self.max.as_millis();
        let spread = max / 100 * u64::from(self.percent()) + max % 100 * u64::from(self.percent()) / 100;
        Duration::from_millis(max.saturating_add(spread))
    }

    fn percent(&self) -> u8 {
        self.jitter_percent.min(100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Backoff {
        Backoff { initial: Duration::from_secs(1), multiplier: 2, max: Duration::from_secs(180), jitter_percent: 10 }
    }

    #[test]
    fn base_doubles_then_caps() {
        let b = policy();
        let secs: [u64; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 180, 180];
        for (i, s) in secs.iter().enumerate() {
            assert_eq!(b.base(i as u32 + 1), Duration::from_secs(*s), "attempt {}", i + 1);
        }
        assert_eq!(b.base(0), Duration::from_secs(1));
        assert_eq!(b.ceiling(), Duration::from_secs(198));
    }

    #[test]
    fn delay_stays_within_jitter_bounds() {
        let b = policy();
        let mut rng = Rng::new(42);
        for attempt in 1..=12 {
            let base = b.base(attempt).as_millis();
            let (lo, hi) = (base - base / 10, base + base / 10);
            let mut seen_off_base = false;
            for _ in 0..1000 {
                let d = b.delay(attempt, &mut rng).as_millis();
                assert!((lo..=hi).contains(&d), "attempt {attempt}: {d} not in {lo}..={hi}");
                assert!(d <= b.ceiling().as_millis());
                seen_off_base |= d != base;
            }
            assert!(seen_off_base, "jitter never applied at attempt {attempt}");
        }
    }

    #[test]
    fn no_jitter_is_exact() {
        let b = Backoff { jitter_percent: 0, ..policy() };
        let mut rng = Rng::new(1);
        assert_eq!(b.delay(3, &mut rng), Duration::from_secs(4));
        assert_eq!(b.ceiling(), Duration::from_secs(180));
    }

    #[test]
    fn huge_attempts_and_extremes_do_not_panic() {
        let mut rng = Rng::new(3);
        let b = policy();
        assert_eq!(b.base(u32::MAX), Duration::from_secs(180));
        assert!(b.delay(u32::MAX, &mut rng) <= b.ceiling());

        let wild = Backoff {
            initial: Duration::from_millis(u64::MAX),
            multiplier: u32::MAX,
            max: Duration::from_millis(u64::MAX),
            jitter_percent: u8::MAX,
        };
        for attempt in [0, 1, 2, 64, u32::MAX] {
            assert!(wild.delay(attempt, &mut rng) <= wild.ceiling());
        }
        assert_eq!(wild.ceiling(), Duration::from_millis(u64::MAX));

        let zero = Backoff { multiplier: 0, ..policy() };
        assert_eq!(zero.base(1), Duration::from_secs(1));
        assert_eq!(zero.base(2), Duration::ZERO);
    }
}
