//! Credentials in a [`SharedStore`] (Redis for replicas on several machines:
//! `tether.cluster.store`), the [`CredentialStore`] that lets replicas log in
//! once and refresh once.
//!
//! - **Encrypted at rest.** A credential is sealed with the cluster's key ring
//!   (AES-256-GCM, purpose bound to its key) before it leaves the process: the
//!   store never holds a plaintext token, refresh token or client secret. One
//!   sealed under a key the ring no longer holds reads as absent (a login is needed).
//! - **One record per backend, with a generation** (`cred/<key>`).
//! - **Single-flight refresh.** [`CredentialStore::lock`] takes the lease
//!   `cred/<key>`; while it is held, a write is fenced by it (refused once the
//!   lease lapsed and another replica took over: a late writer never overwrites
//!   a newer refresh token) and, when the record was read under the lease,
//!   compare-and-set on the generation read.
//! - **Hints.** A write publishes `<key> <generation>` on the topic `cred`, so
//!   other replicas take a new token at once instead of at their next refresh;
//!   they still re-read under the lease before refreshing, hint or not.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::store::{CredentialStore, LeaseGuard, StoreHealth, StoredCredential, WriteRefused};
use crate::seal::KeyRing;
use crate::shared::redis::RedisShared;
use crate::shared::{lease_waiting, HintHook, Lease, SharedStore, Written};

/// How often a waiter looks at a held lease again.
const LOCK_POLL: Duration = Duration::from_millis(25);
/// What a credential is sealed for (with its key appended).
const PURPOSE: &str = "tether credential ";
/// The hint topic of credential writes.
pub const HINT_TOPIC: &str = "cred";
/// The longest sealed credential opened (long JWTs, a DPoP key, a registration).
const MAX_SEALED: usize = 256 * 1024;

/// Credentials sealed in a shared store. Cheap to share (an `Arc` inside).
#[derive(Clone)]
pub struct SharedCredentials {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn SharedStore>,
    keys: Arc<KeyRing>,
    /// Per credential key this process holds the lease of: the lease, and the
    /// generation read under it (what a write then expects).
    held: Mutex<HashMap<String, (Lease, Option<u64>)>>,
}

impl std::fmt::Debug for SharedCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCredentials").field("store", &self.inner.store).finish()
    }
}

impl SharedCredentials {
    /// Credentials in `store`, sealed with `keys`.
    pub fn new(store: Arc<dyn SharedStore>, keys: Arc<KeyRing>) -> SharedCredentials {
        let inner = Inner { store, keys, held: Mutex::new(HashMap::new()) };
        SharedCredentials { inner: Arc::new(inner) }
    }

    /// Credentials in Redis at `url` (`redis://` or `rediss://`). Nothing is
    /// connected yet.
    pub fn redis(url: &str, keys: Arc<KeyRing>) -> Result<SharedCredentials, String> {
        Ok(SharedCredentials::new(Arc::new(RedisShared::new(url)?), keys))
    }

    /// The store underneath (logins and sessions keep their state there too).
    pub fn store(&self) -> &Arc<dyn SharedStore> {
        &self.inner.store
    }

    /// Calls `hook` with the credential key of each write another process (or
    /// this one) announces. False when the store has no hints.
    pub fn on_change(&self, hook: Arc<dyn Fn(&str) + Send + Sync>) -> bool {
        let hint: HintHook = Arc::new(move |message: &str| {
            if let Some(key) = message.split(' ').next().filter(|k| super::store::valid_key(k)) {
                hook(key);
            }
        });
        self.inner.store.subscribe(HINT_TOPIC, hint)
    }

    fn acquire(&self, key: &str, lease: Duration, wait: bool) -> io::Result<Option<Box<dyn LeaseGuard>>> {
        check(key)?;
        let name = format!("cred/{key}");
        let store = &*self.inner.store;
        let taken = if wait {
            lease_waiting(store, &name, lease, lease * 2 + Duration::from_secs(1), LOCK_POLL)?
        } else {
            store.try_lease(&name, lease)?
        };
        let Some(taken) = taken else { return Ok(None) };
        lock(&self.inner.held).insert(key.to_owned(), (taken.clone(), None));
        Ok(Some(Box::new(SharedLease { credentials: self.clone(), key: key.to_owned(), lease: taken })))
    }

    /// Writes (`Some`) or removes (`None`) `key`'s record, fenced by and
    /// compared with what this process holds of its lease.
    fn change(&self, key: &str, sealed: Option<&[u8]>, done: &str) -> io::Result<()> {
        let held = lock(&self.inner.held).get(key).cloned();
        let (fence, expect) = match &held {
            Some((lease, generation)) => (Some(lease), *generation),
            None => (None, None),
        };
        let record = format!("cred/{key}");
        let written = match sealed {
            Some(value) => self.inner.store.write(&record, value, expect, fence)?,
            None => self.inner.store.remove(&record, fence)?,
        };
        match written {
            Written::Done(generation) => {
                if let Some((_, g)) = lock(&self.inner.held).get_mut(key) {
                    *g = Some(generation);
                }
                self.inner.store.publish(HINT_TOPIC, &format!("{key} {generation}"));
                Ok(())
            }
            Written::Fenced => Err(io::Error::other(WriteRefused(format!(
                "this replica's lease on the credential ran out and another took it over: not {done}"
            )))),
            Written::Stale => Err(io::Error::other(WriteRefused(format!(
                "the credential changed in the store since this replica read it: not {done}"
            )))),
        }
    }
}

impl CredentialStore for SharedCredentials {
    fn load(&self, key: &str) -> io::Result<Option<StoredCredential>> {
        check(key)?;
        let Some(record) = self.inner.store.read(&format!("cred/{key}"))? else {
            if let Some((_, g)) = lock(&self.inner.held).get_mut(key) {
                *g = None;
            }
            return Ok(None);
        };
        if let Some((_, g)) = lock(&self.inner.held).get_mut(key) {
            *g = Some(record.generation);
        }
        let sealed = String::from_utf8_lossy(&record.value);
        let opened = match self.inner.keys.open_up_to(&format!("{PURPOSE}{key}"), &sealed, 0, MAX_SEALED) {
            Ok(bytes) => bytes,
            Err(why) => {
                // Sealed under a retired key, or not tether's: as if absent (log in again).
                tracing::warn!("stored credential {key} does not open ({why}): a login is needed");
                return Ok(None);
            }
        };
        serde_json::from_slice(&opened)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("unreadable stored credential: {e}")))
    }

    fn save(&self, key: &str, credential: &StoredCredential) -> io::Result<()> {
        check(key)?;
        let json = serde_json::to_vec(credential).map_err(io::Error::other)?;
        let sealed = self
            .inner
            .keys
            .seal(&format!("{PURPOSE}{key}"), u64::MAX, &json)
            .ok_or_else(|| io::Error::other("no randomness from the operating system to seal the credential"))?;
        self.change(key, Some(sealed.as_bytes()), "written")
    }

    fn delete(&self, key: &str) -> io::Result<()> {
        check(key)?;
        self.change(key, None, "deleted")
    }

    fn lock(&self, key: &str, lease: Duration) -> io::Result<Box<dyn LeaseGuard>> {
        self.acquire(key, lease, true)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "the credential stayed locked by another replica"))
    }

    fn try_lock(&self, key: &str, lease: Duration) -> io::Result<Option<Box<dyn LeaseGuard>>> {
        self.acquire(key, lease, false)
    }

    fn health(&self) -> Option<StoreHealth> {
        self.inner.store.health()
    }
}

/// A held lease: released on drop if still this process's.
struct SharedLease {
    credentials: SharedCredentials,
    key: String,
    lease: Lease,
}

impl LeaseGuard for SharedLease {}

impl Drop for SharedLease {
    fn drop(&mut self) {
        {
            let mut held = lock(&self.credentials.inner.held);
            if held.get(&self.key).is_some_and(|(l, _)| *l == self.lease) {
                held.remove(&self.key);
            }
        }
        if let Err(e) = self.credentials.inner.store.release(&self.lease) {
            // It lapses by itself within its span.
            tracing::warn!("releasing the credential lease: {e}");
        }
    }
}

fn check(key: &str) -> io::Result<()> {
    if super::store::valid_key(key) {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, "invalid credential key"))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::store::tests::sample;
    use crate::shared::files::FileShared;

    #[test]
    fn sealed_at_rest_fenced_and_compared_under_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        let shared: Arc<dyn SharedStore> = Arc::new(FileShared::new(dir.path()));
        let ring = Arc::new(KeyRing::new(&[(1, [7; 32])]).unwrap());
        let (a, b) = (SharedCredentials::new(shared.clone(), ring.clone()), SharedCredentials::new(shared, ring));
        a.save("k1", &sample()).unwrap();
        assert_eq!(b.load("k1").unwrap(), Some(sample()));
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains("refresh-token-value") && !text.contains("client-secret-value"), "{text}");
        }
        // A reads under its lease; B writes without one meanwhile: A's write is refused.
        let guard = a.lock("k1", Duration::from_secs(30)).unwrap();
        assert!(a.load("k1").unwrap().is_some());
        b.save("k1", &sample()).unwrap();
        let err = a.save("k1", &sample()).unwrap_err();
        assert!(err.to_string().contains("changed in the store"), "{err}");
        // Read again under the lease: the write goes through.
        a.load("k1").unwrap();
        a.save("k1", &sample()).unwrap();
        drop(guard);
        assert!(b.try_lock("k1", Duration::from_secs(30)).unwrap().is_some(), "released on drop");
    }
}
