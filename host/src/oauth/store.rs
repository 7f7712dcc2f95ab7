//! Where credentials outlive the process: a small [`CredentialStore`] interface (so a
//! shared store can serve several replicas later) and [`FileStore`], one JSON file
//! per backend in a private directory.
//!
//! Every change to a stored credential is made under the store's lock for its key
//! ([`CredentialStore::lock`]): that is how two tether processes sharing a store
//! refresh a rotating refresh token once, not twice. The file store's lock is a lock
//! file created exclusively, holding its owner and the end of its lease; a lease
//! that ran out (its owner died mid-refresh) may be taken over.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::pkce;
use super::secret::Secret;
use crate::safe_file;

/// How the client identity used with an authorization server was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientSource {
    /// `client_id` (and maybe `client_secret`) from the settings: the secret is
    /// never stored, it is read from the settings when needed.
    Configured,
    /// A Client ID Metadata Document URL used as `client_id`.
    MetadataDocument,
    /// Dynamic Client Registration (RFC 7591) with this issuer.
    Registered,
}

/// The client identity tether presents to one authorization server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRecord {
    /// `client_id`.
    pub client_id: String,
    /// A secret the registration issued (never one from the settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<Secret>,
    /// How it was obtained.
    pub source: ClientSource,
    /// The loopback redirect URI it was registered with or last used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_uri: Option<String>,
    /// The token endpoint authentication method (`none`, `client_secret_basic`,
    /// `client_secret_post`, `private_key_jwt`), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_method: Option<String>,
}

/// Tokens granted to tether.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The access token put on requests.
    pub access_token: Secret,
    /// The refresh token, if one was granted (rotated ones replace it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<Secret>,
    /// When the access token expires (unix seconds), if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The granted scopes, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// `token_type` as the server spelled it (`Bearer`, or `DPoP` for a token
    /// bound to `dpop_key`).
    #[serde(default = "bearer")]
    pub token_type: String,
    /// The DPoP key the token (and its refresh token) is bound to, as PKCS#8,
    /// base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_key: Option<Secret>,
}

impl TokenRecord {
    /// Whether the token is DPoP-bound (presented with the `DPoP` scheme and a proof).
    pub fn dpop_bound(&self) -> bool {
        self.dpop_key.is_some() && self.token_type.eq_ignore_ascii_case("dpop")
    }
}

fn bearer() -> String {
    "Bearer".into()
}

impl TokenRecord {
    /// Whether the access token is still good `margin` seconds from `now`.
    pub fn fresh_at(&self, now: u64, margin: u64) -> bool {
        self.expires_at.map_or(true, |t| t > now.saturating_add(margin))
    }
}

/// One backend's credential as stored: the authorization server it belongs to, the
/// client identity used there, and the tokens. Its `Debug` shows no secret (they
/// are [`Secret`]s).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCredential {
    /// The backend's URL as configured.
    pub server_url: String,
    /// The issuer of the authorization server; a different issuer in the backend's
    /// metadata makes all of this stale (never presented to the new one).
    pub issuer: String,
    /// The `resource` (RFC 8707) the tokens were asked for.
    pub resource: String,
    /// Where to refresh, without discovering again.
    pub token_endpoint: String,
    /// Where to revoke at logout (RFC 7009), if the server offers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation_endpoint: Option<String>,
    /// The client identity at this issuer.
    pub client: ClientRecord,
    /// The tokens, if a grant succeeded (absent after a discard, or while a first
    /// login is under way with a fresh registration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TokenRecord>,
    /// When it was last written (unix seconds).
    pub updated_at: u64,
}

/// Held while a credential is read, changed and written; dropping it releases the
/// lock.
pub trait LeaseGuard: Send {}

/// A place credentials are kept, by key ([`store_key`]). Shared by every backend of
/// a process and by every process using the same store.
pub trait CredentialStore: Send + Sync {
    /// The credential stored under `key`, if any.
    fn load(&self, key: &str) -> io::Result<Option<StoredCredential>>;
    /// Stores `credential` under `key`, replacing what was there, atomically: a
    /// reader sees the old or the new, never a mix.
    fn save(&self, key: &str, credential: &StoredCredential) -> io::Result<()>;
    /// Forgets `key` (no error if it was not there).
    fn delete(&self, key: &str) -> io::Result<()>;
    /// Takes the lock of `key` for at most `lease` (after which another process may
    /// take it over), waiting while someone else holds it.
    fn lock(&self, key: &str, lease: Duration) -> io::Result<Box<dyn LeaseGuard>>;
    /// Takes the lock of `key` if no one holds it, else answers `None` at once (for
    /// work that must not wait, and that someone holding the lock makes moot).
    fn try_lock(&self, key: &str, lease: Duration) -> io::Result<Option<Box<dyn LeaseGuard>>>;
    /// How a shared store is doing, for the status; `None` for files on this
    /// machine (nothing to report).
    fn health(&self) -> Option<StoreHealth> {
        None
    }
}

/// How a shared credential store answered lately.
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

/// The key of a backend's credential: a hash of its URL (canonical form when it
/// parses) and the configured `client_id`, so renaming the backend in the config
/// keeps its login, while two configurations of one server with different clients
/// do not share tokens.
pub fn store_key(server_url: &str, client_id: Option<&str>) -> String {
    let url = super::resource::canonical(server_url).unwrap_or_else(|_| server_url.to_owned());
    let material = format!("tether-credential\0{url}\0{}", client_id.unwrap_or_default());
    let digest = ring::digest::digest(&ring::digest::SHA256, material.as_bytes());
    digest.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The default credentials directory: `credentials` in tether's state directory
/// (`$TETHER_STATE_DIR`, else the system's place: see [`crate::locations`]).
pub fn default_dir() -> Option<PathBuf> {
    crate::locations::Locations::here().state_dir().map(|d| d.join("credentials"))
}

/// Credentials as files: `<dir>/<key>.json`, private to the user (0600 in a 0700
/// directory on Unix), replaced atomically (a temporary file in the same
/// directory, flushed, renamed over, the directory flushed); locks are
/// `<dir>/<key>.lock`.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

/// How often a waiter looks at a held lock again.
const LOCK_POLL: Duration = Duration::from_millis(20);

impl FileStore {
    /// A store in `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileStore { dir: dir.into() }
    }

    /// A store in [`default_dir`].
    pub fn open_default() -> io::Result<Self> {
        default_dir()
            .map(FileStore::new)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no home or state directory to keep credentials in"))
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self, key: &str, ext: &str) -> io::Result<PathBuf> {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "invalid credential key"));
        }
        Ok(self.dir.join(format!("{key}.{ext}")))
    }

    /// Creates the directory (and its parents) private to the user (0700 on Unix).
    /// Its parents may be shared (say `TETHER_STATE_DIR=/tmp`); the directory
    /// itself must then be this user's and writable by nobody else, or it is
    /// refused: a directory another user made first could hold planted
    /// credentials that send tether's client secret where they say.
    fn ensure_dir(&self) -> io::Result<()> {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(&self.dir)?;
        safe_file::check_private_dir(&self.dir)
    }
}

/// Creates `path`, failing if it exists, readable by its owner only.
fn create_private(path: &Path) -> io::Result<File> {
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
fn sync_dir(dir: &Path) -> io::Result<()> {
    if cfg!(unix) {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn unix_millis() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

impl CredentialStore for FileStore {
    fn load(&self, key: &str) -> io::Result<Option<StoredCredential>> {
        let path = self.file(key, "json")?;
        safe_file::check_private_dir(&self.dir)?;
        let bytes = match safe_file::read_private(&path, safe_file::SECRET_LIMIT) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("unreadable credential file: {e}")))
    }

    fn save(&self, key: &str, credential: &StoredCredential) -> io::Result<()> {
        let target = self.file(key, "json")?;
        self.ensure_dir()?;
        let json = serde_json::to_vec_pretty(credential).map_err(io::Error::other)?;
        let temp = self.dir.join(format!(".{key}.{}.{}.tmp", std::process::id(), pkce::random_string(6)));
        let written = create_private(&temp).and_then(|mut file| {
            file.write_all(&json)?;
            file.sync_all()
        });
        if let Err(e) = written.and_then(|()| fs::rename(&temp, &target)) {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        sync_dir(&self.dir)
    }

    fn delete(&self, key: &str) -> io::Result<()> {
        match fs::remove_file(self.file(key, "json")?) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => sync_dir(&self.dir).or(Ok(())),
        }
    }

    fn lock(&self, key: &str, lease: Duration) -> io::Result<Box<dyn LeaseGuard>> {
        self.acquire(key, lease, true)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "the credential stayed locked by another process"))
    }

    fn try_lock(&self, key: &str, lease: Duration) -> io::Result<Option<Box<dyn LeaseGuard>>> {
        self.acquire(key, lease, false)
    }
}

impl FileStore {
    /// Creates the lock file of `key`; while someone else holds it, waits (polling)
    /// if `wait`, else answers `None`. A live holder's lease ends within `lease`, and
    /// then it can be taken over, so a wait longer than two leases gives up (`None`).
    fn acquire(&self, key: &str, lease: Duration, wait: bool) -> io::Result<Option<Box<dyn LeaseGuard>>> {
        let path = self.file(key, "lock")?;
        self.ensure_dir()?;
        let give_up = Instant::now() + lease * 2 + Duration::from_secs(1);
        loop {
            let stamp = format!(
                "{{\"pid\":{},\"nonce\":\"{}\",\"expires_ms\":{}}}",
                std::process::id(),
                pkce::random_string(9),
                unix_millis() + lease.as_millis()
            );
            match create_private(&path) {
                Ok(mut file) => {
                    file.write_all(stamp.as_bytes())?;
                    return Ok(Some(Box::new(FileLease { path, stamp })));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if take_over_if_stale(&path, lease) {
                        continue;
                    }
                    if !wait || Instant::now() >= give_up {
                        return Ok(None);
                    }
                    std::thread::sleep(LOCK_POLL);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Removes the lock file at `path` if its lease is over: its `expires_ms` passed, or
/// it has no readable stamp and is older than a lease (its owner died between
/// creating and writing it). True if the caller should try to create it again.
fn take_over_if_stale(path: &Path, lease: Duration) -> bool {
    let text = match read_stamp(path) {
        Ok(text) => text,
        Err(e) => return e.kind() == io::ErrorKind::NotFound,
    };
    let expires = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("expires_ms").and_then(serde_json::Value::as_u64));
    let stale = match expires {
        Some(ms) => u128::from(ms) < unix_millis(),
        None => fs::metadata(path).and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().unwrap_or_default() > lease),
    };
    // Re-read just before removing, so a lock that changed hands meanwhile is left
    // alone (a narrow race remains; the refresh logic survives it by re-reading
    // the store after an `invalid_grant`).
    stale && read_stamp(path).is_ok_and(|now| now == text) && fs::remove_file(path).is_ok()
}

/// A lock file's stamp (a short JSON line).
fn read_stamp(path: &Path) -> io::Result<String> {
    safe_file::read_regular_text(path, 4096)
}

/// A held file lock: removed on drop, unless its lease ran out and someone else
/// took it over.
struct FileLease {
    path: PathBuf,
    stamp: String,
}

impl LeaseGuard for FileLease {}

impl Drop for FileLease {
    fn drop(&mut self) {
        if read_stamp(&self.path).is_ok_and(|text| text == self.stamp) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn sample() -> StoredCredential {
        StoredCredential {
            server_url: "https://mcp.example.com/mcp".into(),
            issuer: "https://as.example.com".into(),
            resource: "https://mcp.example.com/mcp".into(),
            token_endpoint: "https://as.example.com/token".into(),
            revocation_endpoint: None,
            client: ClientRecord {
                client_id: "cid".into(),
                client_secret: Some(Secret::new("client-secret-value")),
                source: ClientSource::Registered,
                redirect_uri: Some("http://127.0.0.1:5555/callback".into()),
                auth_method: Some("client_secret_basic".into()),
            },
            token: Some(TokenRecord {
                access_token: Secret::new("access-token-value"),
                refresh_token: Some(Secret::new("refresh-token-value")),
                expires_at: Some(100),
                scope: Some("a b".into()),
                token_type: "Bearer".into(),
                dpop_key: None,
            }),
            updated_at: 1,
        }
    }

    #[test]
    fn round_trip_atomic_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path().join("creds"));
        let key = store_key("https://mcp.example.com/mcp", None);
        assert_eq!(store.load(&key).unwrap(), None);
        store.save(&key, &sample()).unwrap();
        assert_eq!(store.load(&key).unwrap(), Some(sample()));
        let mut second = sample();
        second.updated_at = 2;
        store.save(&key, &second).unwrap();
        assert_eq!(store.load(&key).unwrap().unwrap().updated_at, 2);
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(store.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from(format!("{key}.json"))]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(store.dir()), 0o700);
            assert_eq!(mode(&store.dir().join(format!("{key}.json"))), 0o600);
        }
        store.delete(&key).unwrap();
        store.delete(&key).unwrap();
        assert_eq!(store.load(&key).unwrap(), None);
    }

    /// A shared state directory where another user made `credentials/` first, or
    /// made it writable to others, and planted a credential under the key tether
    /// computes from the URL: refused with a clear message, nothing presented.
    #[test]
    fn planted_credentials_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path().join("credentials"));
        store.save("k", &sample()).unwrap();
        assert!(store.load("k").unwrap().is_some());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(store.dir(), fs::Permissions::from_mode(0o777)).unwrap();
            let err = store.load("k").unwrap_err();
            assert!(err.to_string().contains("others may write to it"), "{err}");
            assert!(store.save("k", &sample()).is_err(), "nor written into");
            fs::set_permissions(store.dir(), fs::Permissions::from_mode(0o700)).unwrap();
            fs::set_permissions(dir.path().join("credentials/k.json"), fs::Permissions::from_mode(0o666)).unwrap();
            assert!(store.load("k").unwrap_err().to_string().contains("k.json"));
        }
    }

    #[test]
    fn debug_shows_no_secret() {
        let text = format!("{:?}", sample());
        for secret in ["client-secret-value", "access-token-value", "refresh-token-value"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(text.contains("[redacted]"));
    }

    #[test]
    fn keys_follow_the_url_and_client_not_the_name() {
        let a = store_key("https://mcp.example.com/mcp", None);
        assert_eq!(a, store_key("HTTPS://MCP.example.com:443/mcp", None));
        assert_ne!(a, store_key("https://mcp.example.com/mcp", Some("other")));
        assert_ne!(a, store_key("https://mcp.example.com/mcp2", None));
        assert_eq!(a.len(), 32);
        assert!(FileStore::new("/x").file("../etc", "json").is_err());
    }

    #[test]
    fn the_lock_excludes_and_is_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FileStore::new(dir.path()));
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (store, inside, most) = (store.clone(), inside.clone(), most.clone());
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        let _guard = store.lock("k", Duration::from_secs(30)).unwrap();
                        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(2));
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
        assert!(!dir.path().join("k.lock").exists());
    }

    #[test]
    fn try_lock_does_not_wait() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path());
        let held = store.try_lock("k", Duration::from_secs(30)).unwrap().unwrap();
        assert!(store.try_lock("k", Duration::from_secs(30)).unwrap().is_none());
        drop(held);
        assert!(store.try_lock("k", Duration::from_secs(30)).unwrap().is_some());
    }

    #[test]
    fn an_expired_lease_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path());
        let dead = r#"{"pid":1,"nonce":"x","expires_ms":1}"#;
        fs::write(dir.path().join("k.lock"), dead).unwrap();
        let guard = store.lock("k", Duration::from_secs(30)).unwrap();
        assert_ne!(fs::read_to_string(dir.path().join("k.lock")).unwrap(), dead);
        drop(guard);
        assert!(!dir.path().join("k.lock").exists());
    }

    #[test]
    fn a_live_lease_makes_waiters_wait_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path());
        let first = store.lock("k", Duration::from_millis(300)).unwrap();
        // Never released: the second waits out the lease, then takes it over.
        std::mem::forget(first);
        let started = Instant::now();
        let _second = store.lock("k", Duration::from_secs(30)).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(200));
    }
}
