//! The [`SharedStore`] in Redis (or Valkey), for replicas on several machines:
//! `tether.cluster.store` = `redis://` or `rediss://` (user and password in the
//! URL).
//!
//! Keys are `tether:` and the key with `/` as `:`.
//!
//! - A record is the hash `tether:<key>` {`g` generation, `v` value}; written by
//!   one Lua script that checks the fence and the expected generation, bumps
//!   `g` and sets `v` (removal deletes `v` and bumps `g`).
//! - A lease is `tether:lock:<name>`, taken with `SET NX PX` and a random owner,
//!   released by compare-and-delete.
//! - An expiring entry is `tether:<key>` with `PX`; taken by `GET`+`DEL` in one
//!   script (atomic on the server, whatever its version).
//! - Hints are published on `tether:hint:<topic>`; a subscriber thread keeps one
//!   connection of its own and reconnects (with backoff, at most 5 s apart)
//!   when it breaks: it is also how the status learns the store went down or
//!   came back while nothing else asked it anything.
//! - **Every command has a deadline** (connect, read and write timeouts); a
//!   broken connection is dropped and opened again on the next command. While
//!   Redis is unreachable every call fails fast and the status says so.
//!
//! Run Redis with AOF (`appendfsync always`) and a single primary: a lease is
//! not safe across an asynchronous failover (see docs/scale-out.md).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{check_key, HintHook, Lease, Record, SharedStore, StoreHealth, Written};

/// The deadline of every command (and of opening a connection).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest pause between a hint subscriber's reconnection attempts.
const SUBSCRIBE_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Writes `ARGV[1]` as the record `KEYS[1]` (or removes its value when
/// `ARGV[4]` is `del`), bumping its generation; refused (-1) when a fence is
/// given (`ARGV[2]`) and the lease `KEYS[2]` is not held by it, and (-2) when a
/// generation is expected (`ARGV[3]`) and is not the record's.
const CHANGE: &str = r"
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
if ARGV[3] ~= '' and tonumber(redis.call('HGET', KEYS[1], 'g') or '0') ~= tonumber(ARGV[3]) then return -2 end
local g = redis.call('HINCRBY', KEYS[1], 'g', 1)
if ARGV[4] == 'del' then redis.call('HDEL', KEYS[1], 'v') else redis.call('HSET', KEYS[1], 'v', ARGV[1]) end
return g";

/// Releases the lease `KEYS[1]` if `ARGV[1]` still holds it.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0";

/// Gets and deletes `KEYS[1]` in one step.
const TAKE: &str = r"
local v = redis.call('GET', KEYS[1])
if v then redis.call('DEL', KEYS[1]) end
return v";

/// Shared state in Redis. Cheap to share (an `Arc` inside).
#[derive(Clone)]
pub struct RedisShared {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    /// The URL with any password hidden, for messages.
    shown: String,
    connection: Mutex<Option<redis::Connection>>,
    /// When the last command ended and how (for the status).
    last: Mutex<Option<(Instant, Result<(), String>)>>,
    /// The hooks of each subscribed topic (the subscriber thread starts with the first).
    hooks: Mutex<HashMap<String, Vec<HintHook>>>,
}

impl std::fmt::Debug for RedisShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisShared").field("url", &self.inner.shown).finish()
    }
}

impl RedisShared {
    /// A store at `url` (`redis://` or `rediss://`). Nothing is connected yet.
    pub fn new(url: &str) -> Result<RedisShared, String> {
        let shown = hide_password(url);
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(format!("{shown}: the store must be a redis:// or rediss:// URL"));
        }
        let client = redis::Client::open(url).map_err(|e| format!("{shown}: {e}"))?;
        let inner = Inner {
            client,
            shown,
            connection: Mutex::new(None),
            last: Mutex::new(None),
            hooks: Mutex::new(HashMap::new()),
        };
        Ok(RedisShared { inner: Arc::new(inner) })
    }

    /// The URL, password hidden.
    pub fn shown(&self) -> &str {
        &self.inner.shown
    }

    /// Whether the store answers now (a `PING`).
    pub fn ping(&self) -> io::Result<()> {
        self.run(|c| redis::cmd("PING").query::<String>(c)).map(drop)
    }

    /// Runs the read `f` on the connection, opening it first if needed. A
    /// connection found broken (Redis restarted since it was opened) is
    /// dropped and `f` tried once more on a fresh one; a timeout is not retried.
    fn run<T>(&self, f: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>) -> io::Result<T> {
        self.noted(self.run_tries(f, 2))
    }

    /// Runs the write `f` once: a command whose reply was lost may have been
    /// carried out, and sent again it would answer otherwise (a lease found
    /// taken by itself, an entry already taken, a generation already bumped).
    /// The connection is checked with a `PING` first (which may be repeated),
    /// so a connection broken by a Redis restart does not fail the write.
    fn run_write<T>(&self, f: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>) -> io::Result<T> {
        let pinged = self.run_tries(|c| redis::cmd("PING").query::<String>(c), 2);
        let result = pinged.and_then(|_| self.run_tries(f, 1));
        self.noted(result)
    }

    /// Records how a command ended, for the status.
    fn noted<T>(&self, result: io::Result<T>) -> io::Result<T> {
        let outcome = result.as_ref().map(drop).map_err(ToString::to_string);
        *lock(&self.inner.last) = Some((Instant::now(), outcome));
        result
    }

    fn run_tries<T>(
        &self,
        mut f: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
        most: u32,
    ) -> io::Result<T> {
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
            if !broken || e.is_timeout() || tries >= most {
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
        io::Error::new(kind, format!("shared store {}: {e}", self.inner.shown))
    }

    fn change(
        &self,
        key: &str,
        value: Option<&[u8]>,
        expect: Option<u64>,
        fence: Option<&Lease>,
    ) -> io::Result<Written> {
        check_key(key)?;
        let fence_key = fence.map(|l| lock_key(&l.name)).unwrap_or_else(|| lock_key("-"));
        let outcome: i64 = self.run_write(|c| {
            redis::Script::new(CHANGE)
                .key(data_key(key))
                .key(&fence_key)
                .arg(value.unwrap_or_default())
                .arg(fence.map_or("", |l| l.owner.as_str()))
                .arg(expect.map(|g| g.to_string()).unwrap_or_default())
                .arg(if value.is_some() { "set" } else { "del" })
                .invoke(c)
        })?;
        Ok(match outcome {
            -1 => Written::Fenced,
            -2 => Written::Stale,
            g => Written::Done(u64::try_from(g).unwrap_or(0)),
        })
    }

    /// The subscriber thread: one connection of its own, subscribed to every
    /// topic with hooks; reconnects with backoff when it breaks.
    fn listen(self) {
        let mut pause = Duration::from_millis(100);
        loop {
            let topics: Vec<String> = lock(&self.inner.hooks).keys().cloned().collect();
            let began = Instant::now();
            let outcome = self.listen_once(&topics);
            if began.elapsed() > SUBSCRIBE_BACKOFF_MAX * 2 {
                // It had been up a while: this is a new trouble, not the last one's.
                pause = Duration::from_millis(100);
            }
            match outcome {
                Ok(()) => pause = Duration::from_millis(100),
                Err(e) => {
                    tracing::debug!("shared store hints: {e}");
                    // The status says the store is down even while nothing
                    // else asks it anything (tokens in hand, no refresh due).
                    *lock(&self.inner.last) = Some((Instant::now(), Err(self.error(e).to_string())));
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(SUBSCRIBE_BACKOFF_MAX);
        }
    }

    fn listen_once(&self, topics: &[String]) -> redis::RedisResult<()> {
        let mut connection = self.inner.client.get_connection_with_timeout(COMMAND_TIMEOUT)?;
        connection.set_read_timeout(Some(Duration::from_secs(1)))?;
        let mut pubsub = connection.as_pubsub();
        for topic in topics {
            pubsub.subscribe(format!("tether:hint:{topic}"))?;
        }
        *lock(&self.inner.last) = Some((Instant::now(), Ok(())));
        loop {
            let message = match pubsub.get_message() {
                Ok(m) => m,
                Err(e) if e.is_timeout() => {
                    // A topic subscribed since: start over with all of them.
                    if lock(&self.inner.hooks).len() != topics.len() {
                        return Ok(());
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            let topic = message.get_channel_name().trim_start_matches("tether:hint:").to_owned();
            let Ok(payload) = message.get_payload::<String>() else { continue };
            let hooks = lock(&self.inner.hooks).get(&topic).cloned().unwrap_or_default();
            for hook in hooks {
                hook(&payload);
            }
        }
    }
}

impl SharedStore for RedisShared {
    fn read(&self, key: &str) -> io::Result<Option<Record>> {
        check_key(key)?;
        let (generation, value): (Option<u64>, Option<Vec<u8>>) =
            self.run(|c| redis::cmd("HMGET").arg(data_key(key)).arg("g").arg("v").query(c))?;
        Ok(value.map(|value| Record { generation: generation.unwrap_or(0), value }))
    }

    fn write(&self, key: &str, value: &[u8], expect: Option<u64>, fence: Option<&Lease>) -> io::Result<Written> {
        self.change(key, Some(value), expect, fence)
    }

    fn remove(&self, key: &str, fence: Option<&Lease>) -> io::Result<Written> {
        self.change(key, None, None, fence)
    }

    fn try_lease(&self, name: &str, span: Duration) -> io::Result<Option<Lease>> {
        check_key(name)?;
        let owner = crate::oauth::pkce::random_string(24);
        let ms = u64::try_from(span.as_millis()).unwrap_or(u64::MAX).max(1);
        let taken: Option<String> =
            self.run_write(|c| redis::cmd("SET").arg(lock_key(name)).arg(&owner).arg("NX").arg("PX").arg(ms).query(c))?;
        Ok(taken.map(|_| Lease { name: name.to_owned(), owner }))
    }

    fn release(&self, lease: &Lease) -> io::Result<()> {
        let key = lock_key(&lease.name);
        self.run_write(|c| redis::Script::new(RELEASE).key(&key).arg(&lease.owner).invoke::<i64>(c)).map(drop)
    }

    fn put_expiring(&self, key: &str, value: &[u8], ttl: Duration) -> io::Result<()> {
        check_key(key)?;
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.run_write(|c| redis::cmd("SET").arg(data_key(key)).arg(value).arg("PX").arg(ms).query::<()>(c))
    }

    fn get_expiring(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.run(|c| redis::cmd("GET").arg(data_key(key)).query(c))
    }

    fn take(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.run_write(|c| redis::Script::new(TAKE).key(data_key(key)).invoke(c))
    }

    fn forget(&self, key: &str) -> io::Result<()> {
        check_key(key)?;
        self.run_write(|c| redis::cmd("DEL").arg(data_key(key)).query::<()>(c))
    }

    fn publish(&self, topic: &str, message: &str) {
        if let Err(e) =
            self.run_write(|c| redis::cmd("PUBLISH").arg(format!("tether:hint:{topic}")).arg(message).query::<i64>(c))
        {
            tracing::debug!("publishing a hint: {e}");
        }
    }

    fn subscribe(&self, topic: &str, hook: HintHook) -> bool {
        let first = {
            let mut hooks = lock(&self.inner.hooks);
            let first = hooks.is_empty();
            hooks.entry(topic.to_owned()).or_default().push(hook);
            first
        };
        if first {
            let this = self.clone();
            if let Err(e) = std::thread::Builder::new().name("tether-store-hints".into()).spawn(move || this.listen()) {
                tracing::warn!("no hint subscriber ({e}): changes are seen by polling only");
            }
        }
        true
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

/// The Redis key of a record or expiring entry: `tether:` and the key, `/` as `:`.
fn data_key(key: &str) -> String {
    format!("tether:{}", key.replace('/', ":"))
}

/// The Redis key of a lease.
fn lock_key(name: &str) -> String {
    format!("tether:lock:{}", name.replace('/', ":"))
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
        let err = RedisShared::new("http://user:s3cret@db").unwrap_err();
        assert!(err.contains("redis://") && !err.contains("s3cret"), "{err}");
        let store = RedisShared::new("redis://:s3cret@127.0.0.1:1/0").unwrap();
        assert!(!format!("{store:?}").contains("s3cret"));
        assert_eq!(store.health().unwrap().state, "unknown");
        assert!(store.ping().is_err());
        let health = store.health().unwrap();
        assert_eq!(health.state, "down");
        assert!(!health.error.unwrap().contains("s3cret"));
    }
}
