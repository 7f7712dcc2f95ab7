//! The embedded [`SharedStore`]: files in one private directory, for several
//! tether processes on one machine (the default when `tether.cluster.store` is
//! not set).
//!
//! - A record is `r.<key>`: its generation (8 bytes, big-endian), a byte saying
//!   whether a value follows, the value. Changed under the record's own short
//!   lock file, written to a temporary file and renamed over (a reader sees the
//!   old or the new, never a mix).
//! - A lease is a lock file `l.<name>` created exclusively, holding its owner
//!   token and the end of its span; one whose span ended may be taken over.
//! - An expiring entry is `e.<key>`: its end (ms since the epoch) and value.
//!   Taking it renames it to a name only the taker knows first, so of several
//!   takers exactly one reads it.
//! - No hints: processes on one machine poll (cheaply: a file read).
//!
//! Key segments are joined with `.` in file names (segments hold no dot).
//! The directory is private to the user (0700 on Unix) and refused when it is
//! not: a directory another user made could hold planted state.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{check_key, HintHook, Lease, Record, SharedStore, StoreHealth, Written};
use crate::safe_file;

/// How long the short lock of a record's write may be held (the write is a
/// read and a rename).
const WRITE_LOCK_SPAN: Duration = Duration::from_secs(5);
/// How often a waiter looks at a held lock file again.
const LOCK_POLL: Duration = Duration::from_millis(20);
/// The largest record or entry read.
const VALUE_LIMIT: u64 = safe_file::SECRET_LIMIT;

/// Shared state in a directory on this machine.
#[derive(Debug, Clone)]
pub struct FileShared {
    dir: PathBuf,
}

impl FileShared {
    /// A store in `dir` (created, private, on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileShared { dir: dir.into() }
    }

    /// A store in `shared` under tether's state directory.
    pub fn open_default() -> io::Result<Self> {
        crate::locations::Locations::here()
            .state_dir()
            .map(|d| FileShared::new(d.join("shared")))
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no home or state directory for shared state"))
    }

    fn path(&self, kind: char, key: &str) -> io::Result<PathBuf> {
        check_key(key)?;
        Ok(self.dir.join(format!("{kind}.{}", key.replace('/', "."))))
    }

    fn ensure_dir(&self) -> io::Result<()> {
        ensure_private_dir(&self.dir)
    }

    /// Reads a file of this store: absent is `None`; the directory must be private.
    fn read_file(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        if !self.dir.exists() {
            return Ok(None);
        }
        safe_file::check_private_dir(&self.dir)?;
        match safe_file::read_private(path, VALUE_LIMIT) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
    }

    /// Replaces the file at `path` with `bytes` atomically.
    fn replace_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("x");
        let temp = self.dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), random_token(6)));
        let written = create_private(&temp).and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        });
        if let Err(e) = written.and_then(|()| fs::rename(&temp, path)) {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        sync_dir(&self.dir)
    }

    /// The generation and value of the record file at `path`.
    fn record_at(&self, path: &Path) -> io::Result<(u64, Option<Vec<u8>>)> {
        let Some(bytes) = self.read_file(path)? else { return Ok((0, None)) };
        if bytes.len() < 9 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{}: not a record", path.display())));
        }
        let generation = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
        Ok((generation, (bytes[8] == 1).then(|| bytes[9..].to_vec())))
    }

    /// Changes the record `key` to `value` (`None`: removed) under its write lock.
    fn change(
        &self,
        key: &str,
        value: Option<&[u8]>,
        expect: Option<u64>,
        fence: Option<&Lease>,
    ) -> io::Result<Written> {
        let path = self.path('r', key)?;
        self.ensure_dir()?;
        let lock_path = self.path('w', key)?;
        let owner = random_token(12);
        if !lock_file(&lock_path, &owner, WRITE_LOCK_SPAN, Some(Instant::now() + WRITE_LOCK_SPAN * 2))? {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("{}: stayed locked", lock_path.display())));
        }
        let result = (|| {
            if let Some(fence) = fence {
                if !self.holds(fence)? {
                    return Ok(Written::Fenced);
                }
            }
            let (generation, _) = self.record_at(&path)?;
            if expect.is_some_and(|g| g != generation) {
                return Ok(Written::Stale);
            }
            let next = generation + 1;
            let mut bytes = next.to_be_bytes().to_vec();
            bytes.push(u8::from(value.is_some()));
            bytes.extend_from_slice(value.unwrap_or_default());
            self.replace_file(&path, &bytes)?;
            Ok(Written::Done(next))
        })();
        unlock_file(&lock_path, &owner);
        result
    }

    /// Whether `lease` is still its owner's (its file holds the owner, unexpired).
    fn holds(&self, lease: &Lease) -> io::Result<bool> {
        let path = self.path('l', &lease.name)?;
        Ok(read_stamp(&path)
            .ok()
            .and_then(|s| parse_stamp(&s))
            .is_some_and(|(owner, expires)| owner == lease.owner && u128::from(expires) > unix_millis()))
    }
}

impl FileShared {
    /// Removes every expiring entry whose end passed.
    fn sweep(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().starts_with("e.") {
                continue;
            }
            let path = entry.path();
            let ended = safe_file::read_private(&path, VALUE_LIMIT).ok().is_some_and(|b| unexpired(b).is_none());
            if ended {
                let _ = fs::remove_file(&path);
            }
        }
    }
}

impl SharedStore for FileShared {
    fn read(&self, key: &str) -> io::Result<Option<Record>> {
        let (generation, value) = self.record_at(&self.path('r', key)?)?;
        Ok(value.map(|value| Record { generation, value }))
    }

    fn write(&self, key: &str, value: &[u8], expect: Option<u64>, fence: Option<&Lease>) -> io::Result<Written> {
        self.change(key, Some(value), expect, fence)
    }

    fn remove(&self, key: &str, fence: Option<&Lease>) -> io::Result<Written> {
        self.change(key, None, None, fence)
    }

    fn try_lease(&self, name: &str, span: Duration) -> io::Result<Option<Lease>> {
        let path = self.path('l', name)?;
        self.ensure_dir()?;
        let owner = random_token(16);
        Ok(lock_file(&path, &owner, span, None)?.then(|| Lease { name: name.to_owned(), owner }))
    }

    fn release(&self, lease: &Lease) -> io::Result<()> {
        unlock_file(&self.path('l', &lease.name)?, &lease.owner);
        Ok(())
    }

    fn put_expiring(&self, key: &str, value: &[u8], ttl: Duration) -> io::Result<()> {
        let path = self.path('e', key)?;
        self.ensure_dir()?;
        let end = u64::try_from(unix_millis() + ttl.as_millis()).unwrap_or(u64::MAX);
        let mut bytes = end.to_be_bytes().to_vec();
        bytes.extend_from_slice(value);
        self.replace_file(&path, &bytes)?;
        // Entries nobody reads again (ended sessions' marks, logins never
        // finished) are swept now and then, so the directory stays bounded.
        if random_token(1).starts_with('A') {
            self.sweep();
        }
        Ok(())
    }

    fn get_expiring(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let path = self.path('e', key)?;
        let Some(bytes) = self.read_file(&path)? else { return Ok(None) };
        let value = unexpired(bytes);
        if value.is_none() {
            let _ = fs::remove_file(&path);
        }
        Ok(value)
    }

    fn take(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let path = self.path('e', key)?;
        if !path.exists() {
            return Ok(None);
        }
        let mine = self.dir.join(format!(".taken.{}", random_token(12)));
        match fs::rename(&path, &mine) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
        let bytes = self.read_file(&mine);
        let _ = fs::remove_file(&mine);
        Ok(bytes?.and_then(unexpired))
    }

    fn forget(&self, key: &str) -> io::Result<()> {
        match fs::remove_file(self.path('e', key)?) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn publish(&self, _topic: &str, _message: &str) {}

    fn subscribe(&self, _topic: &str, _hook: HintHook) -> bool {
        false
    }

    fn health(&self) -> Option<StoreHealth> {
        None
    }
}

/// The value of an expiring entry's bytes, unless its end passed.
fn unexpired(bytes: Vec<u8>) -> Option<Vec<u8>> {
    let end = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    (u128::from(end) > unix_millis()).then(|| bytes[8..].to_vec())
}

/// Creates `dir` (and its parents) private to the user (0700 on Unix). Its
/// parents may be shared; the directory itself must then be this user's and
/// writable by nobody else, or it is refused.
pub(crate) fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)?;
    safe_file::check_private_dir(dir)
}

/// Creates `path`, failing if it exists, readable by its owner only.
pub(crate) fn create_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// Flushes a directory's entries (a rename in it) to disk; only Unix can open a
/// directory for that.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    if cfg!(unix) {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn unix_millis() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

/// A random token of `n` URL-safe characters.
pub(crate) fn random_token(n: usize) -> String {
    crate::oauth::pkce::random_string(n)
}

/// Creates the lock file `path` for `owner` for `span`. While someone else holds
/// it, waits (polling) until `give_up` if given, else answers false at once. A
/// lock whose span ended (its owner died) is taken over.
pub(crate) fn lock_file(path: &Path, owner: &str, span: Duration, give_up: Option<Instant>) -> io::Result<bool> {
    loop {
        let stamp = format!(
            "{{\"pid\":{},\"owner\":\"{owner}\",\"expires_ms\":{}}}",
            std::process::id(),
            unix_millis() + span.as_millis()
        );
        match create_private(path) {
            Ok(mut file) => {
                file.write_all(stamp.as_bytes())?;
                return Ok(true);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if take_over_if_stale(path, span) {
                    continue;
                }
                if give_up.map_or(true, |t| Instant::now() >= t) {
                    return Ok(false);
                }
                std::thread::sleep(LOCK_POLL);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Removes the lock file `path` if `owner` still holds it (never a successor's).
pub(crate) fn unlock_file(path: &Path, owner: &str) {
    if read_stamp(path).ok().and_then(|s| parse_stamp(&s)).is_some_and(|(o, _)| o == owner) {
        let _ = fs::remove_file(path);
    }
}

/// A lock file's owner and end.
fn parse_stamp(text: &str) -> Option<(String, u64)> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    Some((v.get("owner")?.as_str()?.to_owned(), v.get("expires_ms")?.as_u64()?))
}

/// Removes the lock file at `path` if its span is over: its `expires_ms` passed,
/// or it has no readable stamp and is older than `span` (its owner died between
/// creating and writing it). True if the caller should try to create it again.
fn take_over_if_stale(path: &Path, span: Duration) -> bool {
    let text = match read_stamp(path) {
        Ok(text) => text,
        Err(e) => return e.kind() == io::ErrorKind::NotFound,
    };
    let expires = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("expires_ms").and_then(serde_json::Value::as_u64));
    let stale = match expires {
        Some(ms) => u128::from(ms) < unix_millis(),
        None => fs::metadata(path).and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().unwrap_or_default() > span),
    };
    // Re-read just before removing, so a lock that changed hands meanwhile is left
    // alone (a narrow race remains; writers are fenced and refreshes re-read the
    // store after an `invalid_grant`).
    stale && read_stamp(path).is_ok_and(|now| now == text) && fs::remove_file(path).is_ok()
}

/// A lock file's stamp (a short JSON line).
fn read_stamp(path: &Path) -> io::Result<String> {
    safe_file::read_regular_text(path, 4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn records_count_generations_and_refuse_stale_or_fenced_writes() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileShared::new(dir.path().join("shared"));
        assert_eq!(store.read("cred/k").unwrap(), None);
        assert_eq!(store.write("cred/k", b"one", Some(0), None).unwrap(), Written::Done(1));
        assert_eq!(store.write("cred/k", b"two", Some(0), None).unwrap(), Written::Stale);
        assert_eq!(store.write("cred/k", b"two", Some(1), None).unwrap(), Written::Done(2));
        assert_eq!(store.read("cred/k").unwrap(), Some(Record { generation: 2, value: b"two".to_vec() }));
        assert_eq!(store.remove("cred/k", None).unwrap(), Written::Done(3));
        assert_eq!(store.read("cred/k").unwrap(), None);
        // A writer that read generation 1 or 2 before the removal never matches.
        assert_eq!(store.write("cred/k", b"late", Some(2), None).unwrap(), Written::Stale);
        let lease = store.try_lease("cred/k", Duration::from_secs(30)).unwrap().unwrap();
        assert!(store.try_lease("cred/k", Duration::from_secs(30)).unwrap().is_none());
        assert_eq!(store.write("cred/k", b"mine", None, Some(&lease)).unwrap(), Written::Done(4));
        store.release(&lease).unwrap();
        assert_eq!(store.write("cred/k", b"late", None, Some(&lease)).unwrap(), Written::Fenced);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(dir.path().join("shared")).unwrap().permissions().mode() & 0o777, 0o700);
        }
    }

    #[test]
    fn a_lapsed_lease_is_taken_over_and_its_old_holder_cannot_release_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileShared::new(dir.path());
        let old = store.try_lease("x", Duration::from_millis(50)).unwrap().unwrap();
        std::thread::sleep(Duration::from_millis(80));
        let new = store.try_lease("x", Duration::from_secs(30)).unwrap().expect("taken over");
        store.release(&old).unwrap();
        assert!(store.try_lease("x", Duration::from_secs(30)).unwrap().is_none(), "still the new holder's");
        assert_eq!(store.write("r", b"v", None, Some(&old)).unwrap(), Written::Fenced);
        store.release(&new).unwrap();
        assert!(store.try_lease("x", Duration::from_secs(30)).unwrap().is_some());
    }

    #[test]
    fn an_expiring_entry_is_taken_once_and_not_after_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FileShared::new(dir.path()));
        store.put_expiring("login/s", b"pending", Duration::from_secs(60)).unwrap();
        assert_eq!(store.get_expiring("login/s").unwrap().as_deref(), Some(&b"pending"[..]));
        let takers: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || store.take("login/s").unwrap())
            })
            .collect();
        let got: Vec<_> = takers.into_iter().filter_map(|t| t.join().unwrap()).collect();
        assert_eq!(got, vec![b"pending".to_vec()], "exactly one taker");
        store.put_expiring("login/t", b"old", Duration::from_millis(1)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.take("login/t").unwrap(), None);
        store.put_expiring("login/u", b"v", Duration::from_secs(60)).unwrap();
        store.forget("login/u").unwrap();
        store.forget("login/u").unwrap();
        assert_eq!(store.get_expiring("login/u").unwrap(), None);
        assert!(!store.subscribe("cred", Arc::new(|_| {})), "files have no hints");
    }
}
