//! The core's only source of randomness: SplitMix64, seeded by the host.
//!
//! The seed is recorded in a trace's header, so jitter replays exactly.

use serde::{Deserialize, Serialize};

/// A small, fast, seedable PRNG (SplitMix64). Not for cryptography.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose whole output is determined by `seed`.
    pub const fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform value in `0..=max` (max inclusive).
    pub fn below_inclusive(&mut self, max: u64) -> u64 {
        if max == u64::MAX {
            return self.next_u64();
        }
        self.next_u64() % (max + 1)
    }

    /// `base` moved by a uniform amount within ±`percent` % of itself.
    pub fn jitter(&mut self, base: u64, percent: u8) -> u64 {
        let spread = base / 100 * u64::from(percent) + base % 100 * u64::from(percent) / 100;
        if spread == 0 {
            return base;
        }
        let offset = self.below_inclusive(spread * 2);
        base - spread + offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let mut r = Rng::new(1);
        let mut seen_low = false;
        let mut seen_high = false;
        for _ in 0..10_000 {
            let v = r.jitter(1000, 10);
            assert!((900..=1100).contains(&v), "{v}");
            seen_low |= v < 950;
            seen_high |= v > 1050;
        }
        assert!(seen_low && seen_high);
        assert_eq!(r.jitter(5, 10), 5);
    }
}
