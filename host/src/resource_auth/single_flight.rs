//! One network check per token at a time: concurrent requests bearing the same
//! token wait for the first one's check (and then find its verdict cached)
//! instead of each asking the introspection endpoint. Different tokens do not
//! wait for each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::cache::TokenKey;

/// A lock per token being checked, dropped when nobody holds or waits for it.
#[derive(Default)]
pub(super) struct Gates {
    gates: Mutex<HashMap<TokenKey, Arc<Mutex<()>>>>,
}

impl Gates {
    /// Runs `work` holding the lock of `key`.
    pub(super) fn run<T>(&self, key: TokenKey, work: impl FnOnce() -> T) -> T {
        let gate = {
            let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
            gates.entry(key).or_default().clone()
        };
        let out = {
            let _held = gate.lock().unwrap_or_else(PoisonError::into_inner);
            work()
        };
        let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        // References are taken and dropped under the map's lock: the last one out
        // sees only the map's own.
        drop(gate);
        if gates.get(&key).is_some_and(|g| Arc::strong_count(g) == 1) {
            gates.remove(&key);
        }
        out
    }

    /// How many tokens have a lock.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}
