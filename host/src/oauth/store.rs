//! Where credentials outlive the process: a small [`CredentialStore`] interface (so a
//! shared store can serve several replicas later) and [`FileStore`], one JSON file
//! per backend in a private directory.
//!
//! Every change to a stored credential is made under the store's lock for its key
//! ([`CredentialStore::lock`]): that is how two tether processes sharing a store
//! refresh a rotating refresh token once, not twice. The file store's lock is a lock
//! file created exclusively, holding its owner and the end of its lease; a lease
//! that ran out (its owner died mid-refresh) may be taken over.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::pkce;
use super::secret::Secret;
use crate::safe_file;
use crate::shared::files::{create_private, ensure_private_dir, lock_file, sync_dir, unlock_file};

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

/// Why a write was refused, for good: the lease it was made under lapsed and
/// another process took it over, or the credential changed since it was read
/// (the write would have overwritten a newer credential). Trying again cannot help.
#[derive(Debug)]
pub struct WriteRefused(pub String);

impl std::fmt::Display for WriteRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WriteRefused {}

/// Whether `e` is a [`WriteRefused`].
pub fn is_write_refused(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<WriteRefused>())
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

pub use crate::shared::StoreHealth;

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

/// Whether `key` can be a credential key: `[A-Za-z0-9_-]`, at most 128 bytes
/// ([`store_key`] makes 32 hex digits).
pub fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 128 && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
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
        if !valid_key(key) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "invalid credential key"));
        }
        Ok(self.dir.join(format!("{key}.{ext}")))
    }

    /// Creates the directory private to the user (see
    /// [`crate::shared::files::ensure_private_dir`]): a directory another user
    /// made first could hold planted credentials that send tether's client
    /// secret where they say.
    fn ensure_dir(&self) -> io::Result<()> {
        ensure_private_dir(&self.dir)
    }
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
        let give_up = wait.then(|| Instant::now() + lease * 2 + Duration::from_secs(1));
        let owner = pkce::random_string(12);
        Ok(lock_file(&path, &owner, lease, give_up)?
            .then(|| Box::new(FileLease { path, owner }) as Box<dyn LeaseGuard>))
    }
}

/// A held file lock: removed on drop, unless its lease ran out and someone else
/// took it over.
struct FileLease {
    path: PathBuf,
    owner: String,
}

impl LeaseGuard for FileLease {}

impl Drop for FileLease {
    fn drop(&mut self) {
        unlock_file(&self.path, &self.owner);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    pub(crate) fn sample() -> StoredCredential {
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
