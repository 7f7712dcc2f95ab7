//! What tether processes share: the [`SharedStore`] interface, and its two
//! implementations, [`files::FileShared`] (the embedded default: one machine,
//! several processes) and [`redis::RedisShared`] (replicas on several machines,
//! `tether.cluster.store`).
//!
//! Four kinds of thing live in it, each with the one guarantee its users need:
//!
//! - **Records** with a generation, bumped by every write. A write may expect a
//!   generation (compare-and-set) and may be fenced by a lease (refused once
//!   the lease is no longer the writer's): how a rotating refresh token is
//!   written once and never overwritten by a replica whose lease lapsed.
//!   Removing a record keeps its generation counting, so a writer holding a
//!   generation from before the removal never matches what comes after.
//! - **Leases**: named locks with an owner token and an end, released by
//!   compare-and-delete; a holder that dies loses it when its span ends.
//! - **Expiring entries**: a value with a time to live, read, or taken once by
//!   get-and-delete (a login's pending state: only one callback completes it).
//! - **Hints**: best-effort messages to every process subscribed to a topic.
//!   Nothing depends on a hint arriving; they only make a change seen sooner
//!   than the polling that stays in place.
//!
//! Keys are short paths of `[A-Za-z0-9_-]` segments joined by `/`
//! (`cred/<key>`, `login/<digest>`): anything else is refused.

pub mod files;
pub mod redis;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

/// A record as read: its generation (1 after the first write) and value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Bumped by every write and removal.
    pub generation: u64,
    /// What was written (absent after a removal: then no `Record` is returned).
    pub value: Vec<u8>,
}

/// How a conditional write or removal went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Done; the record's generation is now this.
    Done(u64),
    /// The record's generation was not the one expected: someone wrote first.
    Stale,
    /// The fencing lease is no longer the writer's (it lapsed and was taken).
    Fenced,
}

/// A lease held: its name and the owner token that proves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// What it locks.
    pub name: String,
    /// A random token naming this holder.
    pub owner: String,
}

/// Called with each hint's message, on the store's own thread: must be quick.
pub type HintHook = Arc<dyn Fn(&str) + Send + Sync>;

/// How a shared store answered lately, for the status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoreHealth {
    /// `redis`.
    pub kind: &'static str,
    /// Where it is (its URL, password hidden).
    pub location: String,
    /// `up` (its last command succeeded), `down` (it failed), `unknown` (none yet).
    pub state: &'static str,
    /// Milliseconds since that command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// What the failure said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// State shared by tether processes (see the module's documentation for what
/// each part promises). Every call has a deadline: a store that does not answer
/// is an error, never a hang.
pub trait SharedStore: Send + Sync + std::fmt::Debug {
    /// The record `key`, if written and not removed.
    fn read(&self, key: &str) -> io::Result<Option<Record>>;
    /// Writes `value` as the record `key`: only if its generation is `expect`
    /// (0: no record) when given, and only while `fence` is still held when given.
    fn write(&self, key: &str, value: &[u8], expect: Option<u64>, fence: Option<&Lease>) -> io::Result<Written>;
    /// Removes the record `key` (fenced as [`SharedStore::write`]); its
    /// generation still counts on.
    fn remove(&self, key: &str, fence: Option<&Lease>) -> io::Result<Written>;
    /// Takes the lease `name` for `span` if nobody holds it (`None` at once if
    /// someone does: the caller decides how to wait).
    fn try_lease(&self, name: &str, span: Duration) -> io::Result<Option<Lease>>;
    /// Gives `lease` back, if it is still the holder's (never someone else's).
    fn release(&self, lease: &Lease) -> io::Result<()>;
    /// Puts `value` under `key` for `ttl`, replacing what was there.
    fn put_expiring(&self, key: &str, value: &[u8], ttl: Duration) -> io::Result<()>;
    /// The value under `key`, unless it expired.
    fn get_expiring(&self, key: &str) -> io::Result<Option<Vec<u8>>>;
    /// The value under `key`, removed in the same step: of several takers at
    /// once, exactly one gets it.
    fn take(&self, key: &str) -> io::Result<Option<Vec<u8>>>;
    /// Drops the expiring entry `key` (no error if absent).
    fn forget(&self, key: &str) -> io::Result<()>;
    /// Sends `message` to the processes subscribed to `topic` (best effort).
    fn publish(&self, topic: &str, message: &str);
    /// Calls `hook` with the messages of `topic` from now on. False when this
    /// store has no hints (its users poll, as they always also do).
    fn subscribe(&self, topic: &str, hook: HintHook) -> bool;
    /// How the store is doing (`None`: files on this machine, nothing to report).
    fn health(&self) -> Option<StoreHealth>;
}

/// Checks a key or lease name: `/`-separated segments of `[A-Za-z0-9_-]`, at
/// most 200 bytes, not under `lock/` (the leases' own space in Redis).
pub fn check_key(key: &str) -> io::Result<()> {
    let segment_ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if key.len() > 200 || !key.split('/').all(segment_ok) || key.starts_with("lock/") || key == "lock" {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("invalid shared-store key {key:?}")));
    }
    Ok(())
}

/// Waits for the lease `name`, polling every `poll`, for at most `wait`.
pub fn lease_waiting(
    store: &dyn SharedStore,
    name: &str,
    span: Duration,
    wait: Duration,
    poll: Duration,
) -> io::Result<Option<Lease>> {
    let give_up = std::time::Instant::now() + wait;
    loop {
        if let Some(lease) = store.try_lease(name, span)? {
            return Ok(Some(lease));
        }
        if std::time::Instant::now() >= give_up {
            return Ok(None);
        }
        std::thread::sleep(poll);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_short_paths_of_plain_segments() {
        for good in ["cred/abc123", "login/A-b_9", "x"] {
            assert!(check_key(good).is_ok(), "{good}");
        }
        for bad in ["", "cred/", "/x", "a//b", "../etc", "a:b", "a b", "lock/cred/x", &"x".repeat(201)] {
            assert!(check_key(bad).is_err(), "{bad}");
        }
    }
}
