//! Ids that work as capabilities: task ids and `requestState` continuations.
//!
//! Whoever holds such an id can read what it names, so it must not be
//! predictable from the ids a client has already seen. [`crate::Rng`]
//! (SplitMix64) is invertible: one output gives its state away. These come from
//! ChaCha20 instead, keyed with 256 bits the host draws from the operating
//! system ([`crate::Gateway::set_id_key`]). A trace records the key, so a
//! replay hands out the same ids.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::continuation::Continuations;

/// The generator of capability ids, and the keys of continuation tokens.
#[derive(Clone)]
pub(crate) struct SecretIds {
    stream: ChaCha20Rng,
    /// Signs and checks the `requestState` tokens tether issues.
    pub(crate) continuations: Continuations,
    /// The cluster's continuation keys, kept across [`SecretIds::rekeyed`].
    cluster_keys: Vec<(u8, [u8; 32])>,
}

impl SecretIds {
    /// A generator keyed with `key`.
    pub(crate) fn new(key: [u8; 32]) -> Self {
        let continuations = Continuations::derived(&key);
        SecretIds { stream: ChaCha20Rng::from_seed(key), continuations, cluster_keys: Vec::new() }
    }

    /// A generator keyed from `seed` alone: deterministic, for tests and for
    /// hosts that never set a key (64 bits: not enough against an offline search).
    pub(crate) fn from_seed(seed: u64) -> Self {
        let continuations = Continuations::derived(&seed.to_le_bytes());
        SecretIds { stream: ChaCha20Rng::seed_from_u64(seed), continuations, cluster_keys: Vec::new() }
    }

    /// These ids keyed with `key` instead, keeping the cluster's continuation keys.
    pub(crate) fn rekeyed(&self, key: [u8; 32]) -> Self {
        SecretIds::new(key).with_cluster_keys(&self.cluster_keys.clone())
    }

    /// Continuation tokens signed with the cluster's first key and checked
    /// with all of them (every replica holds them); none: this process's own key.
    pub(crate) fn with_cluster_keys(mut self, keys: &[(u8, [u8; 32])]) -> Self {
        self.continuations = self.continuations.with_keys(keys);
        self.cluster_keys = keys.to_vec();
        self
    }

    /// 128 random bits as 32 lowercase hex digits.
    pub(crate) fn next_id(&mut self) -> String {
        let (a, b) = (self.stream.next_u64(), self.stream.next_u64());
        format!("{a:016x}{b:016x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_key_and_do_not_repeat() {
        let (mut a, mut b) = (SecretIds::new([7; 32]), SecretIds::new([7; 32]));
        let first = a.next_id();
        assert_eq!(first, b.next_id(), "the same key gives the same ids (a replay)");
        assert_eq!(first.len(), 32);
        assert_ne!(first, a.next_id());
        assert_ne!(first, SecretIds::new([8; 32]).next_id(), "another key, other ids");
    }
}
