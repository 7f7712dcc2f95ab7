//! Credentials in Redis (or Valkey), for replicas on several machines sharing one
//! login: the [`CredentialStore`] of `tether.cluster.store`.
//!
//! - **Encrypted at rest.** A credential is sealed with the cluster's key ring
//!   (AES-256-GCM, purpose bound to its key) before it leaves the process: the
//!   store never holds a plaintext token, refresh token or client secret. One
//!   sealed under a key the ring no longer holds reads as absent (a login is needed).
//! - **A generation per record.** Each write bumps it (`HINCRBY` in the same script).
//! - **Lease locks with owner tokens.** `SET NX PX` with a random owner; released
//!   by compare-and-delete, so a lease that ran out and was taken over is never
//!   released by its old holder. A write made while this process holds the key's
//!   lease is fenced by it: it is refused when the lease is no longer this
//!   process's (another replica took over after it lapsed), so a late writer
//!   cannot overwrite a newer refresh token.
//! - **Every command has a deadline** (connect, read and write timeouts); a broken
//!   connection is dropped and opened again on the next command. While Redis is
//!   unreachable, reads and locks fail and tokens in hand keep working.
//!
//! Keys: `tether:cred:<key>` (a hash: `g` generation, `v` sealed credential) and
//! `tether:lock:<key>`. Run Redis with AOF (`appendfsync always`) and a single
//! primary: a lease is not safe across an asynchronous failover (see docs/scale-out.md).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::store::{CredentialStore, LeaseGuard, StoreHealth, StoredCredential};
use crate::seal::KeyRing;

/// The deadline of every command (and of opening a connection).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a waiter looks at a held lease again.
const LOCK_POLL: Duration = Duration::from_millis(25);
/// What a credential is sealed for (with its key appended).
const PURPOSE: &str = "tether credential ";

/// Writes `ARGV[1]` as the record `KEYS[1]`, bumping its generation, unless a
/// fence is given (`ARGV[2]`) and the lease `KEYS[2]` is not held by it.
const WRITE: &str = r"
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
local g = redis.call('HINCRBY', KEYS[1], 'g', 1)
redis.call('HSET', KEYS[1], 'v', ARGV[1])
return g";

/// Deletes the record `KEYS[1]`, fenced as [`WRITE`] is (`ARGV[1]` unused).
const DELETE: &str = r"
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
return redis.call('DEL', KEYS[1])";

/// Releases the lease `KEYS[1]` if `ARGV[1]` still holds it.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0";

/// A credential store in Redis. Cheap to share (an `Arc` inside).
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    /// The URL with any password hidden, for messages.
    shown: String,
    keys: Arc<KeyRing>,
    connection: Mutex<Option<redis::Connection>>,
    /// The owner token of each lease this process holds, by credential key.
    held: Mutex<HashMap<String, String>>,
    /// When the last command ended and how (for the status).
    last: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("url", &self.inner.shown).finish()
    }
}

impl RedisStore {
    /// A store at `url` (`redis://` or `rediss://`, user and password in it),
    /// sealing with `keys`. Nothing is connected yet.
    pub fn new(url: &str, keys: Arc<KeyRing>) -> Result<RedisStore, String> {
        let shown = hide_password(url);
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(format!("{shown}: the store must be a redis:// or rediss:// URL"));
        }
        let client = redis::Client::open(url).map_err(|e| format!("{shown}: {e}"))?;
        let (connection, held, last) = (Mutex::new(None), Mutex::new(HashMap::new()), Mutex::new(None));
        let inner = Inner { client, shown, keys, connection, held, last };
        Ok(RedisStore { inner: Arc::new(inner) })
    }

    /// The URL, password hidden.
    pub fn shown(&self) -> &str {
        &self.inner.shown
    }

    /// Whether the store answers now (a `PING`).
    pub fn ping(&self) -> io::Result<()> {
        self.run(|c| redis::cmd("PING").query::<String>(c)).map(drop)
    }

    /// Runs `f` on the connection, opening it first if needed. A connection
    /// found broken (Redis restarted since it was opened) is dropped and `f`
    /// tried once more on a fresh one; a timeout is not retried.
    fn run<T>(&self, f: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>) -> io::Result<T> {
        let result = self.run_once_more(f);
        let outcome = result.as_ref().map(drop).map_err(ToString::to_string);
        *lock(&self.inner.last) = Some((Instant::now(), outcome));
        result
    }

    fn run_once_more<T>(&self, mut f: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>) -> io::Result<T> {
        let mut slot = lock(&self.inner.connection);
        let mut tries = 0;
        loop {
            tries += 1;
            if slot.is_none() {
                *slot = Some(self.connect()?);
            }
            let result = f(slot.as_mut().expect("connected above"));
            let Err(e) = result else { return result.map_err(|e| self.error(e)) };
            let broken = e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error();
            if broken || e.is_timeout() {
                *slot = None;
            }
            if !broken || e.is_timeout() || tries > 1 {
                return Err(self.error(e));
            }
        }
    }

    fn connect(&self) -> io::Result<redis::Connection> {
        let connection = self.inner.client.get_connection_with_timeout(COMMAND_TIMEOUT).map_err(|e| self.error(e))?;
        connection.set_read_timeout(Some(COMMAND_TIMEOUT)).map_err(|e| self.error(e))?;
        connection.set_write_timeout(Some(COMMAND_TIMEOUT)).map_err(|e| self.error(e))?;
        Ok(connection)
    }

    fn error(&self, e: redis::RedisError) -> io::Error {
        let kind = if e.is_timeout() { io::ErrorKind::TimedOut } else { io::ErrorKind::Other };
        io::Error::new(kind, format!("credential store {}: {e}", self.inner.shown))
    }

    /// The owner token of `key`'s lease, if this process holds it.
    fn fence(&self, key: &str) -> String {
        lock(&self.inner.held).get(key).cloned().unwrap_or_default()
    }

    /// Runs `script` ([`WRITE`] or [`DELETE`]) on `key`'s record with `value`,
    /// fenced by this process's lease on `key` when it holds one.
    fn fenced(&self, script: &str, key: &str, value: &str, done: &str) -> io::Result<()> {
        let fence = self.fence(key);
        let outcome: i64 = self.run(|c| {
            redis::Script::new(script)
                .key(format!("tether:cred:{key}"))
                .key(format!("tether:lock:{key}"))
                .arg(value)
                .arg(&fence)
                .invoke(c)
        })?;
        match outcome {
            -1 => Err(io::Error::other(format!(
                "credential store {}: this replica's lease on the credential ran out and another took it over: not {done}",
                self.inner.shown
            ))),
            _ => Ok(()),
        }
    }

    fn acquire(&self, key: &str, lease: Duration, wait: bool) -> io::Result<Option<Box<dyn LeaseGuard>>> {
        check_key(key)?;
        let owner = super::pkce::random_string(24);
        let lock_key = format!("tether:lock:{key}");
        let give_up = Instant::now() + lease * 2 + Duration::from_secs(1);
        let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1);
        loop {
            let taken: Option<String> =
                self.run(|c| redis::cmd("SET").arg(&lock_key).arg(&owner).arg("NX").arg("PX").arg(ms).query(c))?;
            if taken.is_some() {
                lock(&self.inner.held).insert(key.to_string(), owner.clone());
                let guard = RedisLease { store: self.clone(), key: key.to_string(), owner };
                return Ok(Some(Box::new(guard)));
            }
            if !wait || Instant::now() >= give_up {
                return Ok(None);
            }
            std::thread::sleep(LOCK_POLL);
        }
    }
}

impl CredentialStore for RedisStore {
    fn load(&self, key: &str) -> io::Result<Option<StoredCredential>> {
        check_key(key)?;
        let sealed: Option<String> =
            self.run(|c| redis::cmd("HGET").arg(format!("tether:cred:{key}")).arg("v").query(c))?;
        let Some(sealed) = sealed else { return Ok(None) };
        let opened = match self.inner.keys.open(&format!("{PURPOSE}{key}"), &sealed, 0) {
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
        check_key(key)?;
        let json = serde_json::to_vec(credential).map_err(io::Error::other)?;
        let sealed = self
            .inner
            .keys
            .seal(&format!("{PURPOSE}{key}"), u64::MAX, &json)
            .ok_or_else(|| io::Error::other("no randomness from the operating system to seal the credential"))?;
        self.fenced(WRITE, key, &sealed, "written")
    }

    fn delete(&self, key: &str) -> io::Result<()> {
        check_key(key)?;
        self.fenced(DELETE, key, "", "deleted")
    }

    fn lock(&self, key: &str, lease: Duration) -> io::Result<Box<dyn LeaseGuard>> {
        self.acquire(key, lease, true)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "the credential stayed locked by another replica"))
    }

    fn try_lock(&self, key: &str, lease: Duration) -> io::Result<Option<Box<dyn LeaseGuard>>> {
        self.acquire(key, lease, false)
    }

    fn health(&self) -> Option<StoreHealth> {
        let last = lock(&self.inner.last).clone();
        let (state, since_ms, error) = match last {
            None => ("unknown", None, None),
            Some((at, Ok(()))) => ("up", Some(at.elapsed().as_millis() as u64), None),
            Some((at, Err(e))) => ("down", Some(at.elapsed().as_millis() as u64), Some(e)),
        };
        Some(StoreHealth { kind: "redis", location: self.inner.shown.clone(), state, since_ms, error })
    }
}

/// A held lease: released on drop if still this process's.
struct RedisLease {
    store: RedisStore,
    key: String,
    owner: String,
}

impl LeaseGuard for RedisLease {}

impl Drop for RedisLease {
    fn drop(&mut self) {
        {
            let mut held = lock(&self.store.inner.held);
            if held.get(&self.key) == Some(&self.owner) {
                held.remove(&self.key);
            }
        }
        let lock_key = format!("tether:lock:{}", self.key);
        let released = self.store.run(|c| redis::Script::new(RELEASE).key(&lock_key).arg(&self.owner).invoke::<i64>(c));
        if let Err(e) = released {
            // It lapses by itself within its lease.
            tracing::warn!("releasing the credential lease: {e}");
        }
    }
}

/// Keys are [`super::store::store_key`]s: hex. Anything else is refused.
fn check_key(key: &str) -> io::Result<()> {
    if key.is_empty() || key.len() > 128 || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "invalid credential key"));
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `url` with the password (and a user's name beside it) replaced by `***`.
pub fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    match rest.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_their_password_and_other_schemes_are_refused() {
        assert_eq!(hide_password("redis://user:s3cret@db:6379/2"), "redis://***@db:6379/2");
        assert_eq!(hide_password("rediss://:s3cret@db"), "rediss://***@db");
        assert_eq!(hide_password("redis://db:6379"), "redis://db:6379");
        let keys = Arc::new(KeyRing::new(&[(1, [1; 32])]).unwrap());
        let err = RedisStore::new("http://user:s3cret@db", keys.clone()).unwrap_err();
        assert!(err.contains("redis://") && !err.contains("s3cret"), "{err}");
        let store = RedisStore::new("redis://:s3cret@127.0.0.1:1/0", keys).unwrap();
        assert!(!format!("{store:?}").contains("s3cret"));
        assert!(check_key("abc123").is_ok() && check_key("a:b").is_err() && check_key("").is_err());
    }
}
