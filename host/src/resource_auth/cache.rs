//! Verdicts on tokens, remembered for a while so the same token is not checked
//! over the network at every request. Keyed by the SHA-256 of the token: the
//! token itself is never kept. Bounded: when full, expired entries go first, then
//! the oldest.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use super::{Rejection, Verified};

/// How many verdicts are kept at most.
pub(super) const CAPACITY: usize = 4096;

/// A token's SHA-256.
pub(super) type TokenKey = [u8; 32];

/// The key of `token` in a [`VerdictCache`].
pub(super) fn key_of(token: &str) -> TokenKey {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut key = [0; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

struct Entry {
    verdict: Result<Verified, Rejection>,
    expires: Instant,
    /// Insertion order, for evicting the oldest.
    seq: u64,
}

#[derive(Default)]
struct Entries {
    map: HashMap<TokenKey, Entry>,
    next_seq: u64,
}

/// Verdicts by token hash, each until its own expiry.
pub(super) struct VerdictCache {
    capacity: usize,
    entries: Mutex<Entries>,
}

impl VerdictCache {
    /// A cache holding at most `capacity` verdicts.
    pub(super) fn new(capacity: usize) -> Self {
        VerdictCache { capacity: capacity.max(1), entries: Mutex::new(Entries::default()) }
    }

    /// The verdict on `key`, if one is kept and has not expired at `now`.
    pub(super) fn get(&self, key: &TokenKey, now: Instant) -> Option<Result<Verified, Rejection>> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        match entries.map.get(key) {
            Some(entry) if entry.expires > now => Some(entry.verdict.clone()),
            Some(_) => {
                entries.map.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `verdict` on `key` until `expires` (nothing when that is not after
    /// `now`).
    pub(super) fn put(&self, key: TokenKey, verdict: Result<Verified, Rejection>, expires: Instant, now: Instant) {
        if expires <= now {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if !entries.map.contains_key(&key) && entries.map.len() >= self.capacity {
            entries.map.retain(|_, e| e.expires > now);
            if entries.map.len() >= self.capacity {
                let oldest = entries.map.iter().min_by_key(|(_, e)| e.seq).map(|(k, _)| *k);
                if let Some(oldest) = oldest {
                    entries.map.remove(&oldest);
                }
            }
        }
        let seq = entries.next_seq;
        entries.next_seq += 1;
        entries.map.insert(key, Entry { verdict, expires, seq });
    }

    /// How many verdicts are kept (expired ones included until evicted).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).map.len()
    }
}
