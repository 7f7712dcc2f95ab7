//! The Redis credential store against a real `redis-server` (Debian's package):
//! credentials sealed at rest, leases that exclude across replicas and fence a
//! holder whose lease lapsed, a retired key, a restart with AOF, an outage.
//!
//! Needs `redis-server` on the PATH (see [`tether_tests::redis_server`]).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tether_host::oauth::store::{ClientRecord, ClientSource, TokenRecord};
use tether_host::oauth::{CredentialStore, RedisStore, Secret, StoredCredential};
use tether_host::seal::KeyRing;
use tether_tests::redis_server::RedisServer as Server;

const ACCESS: &str = "access-token-that-must-never-be-stored-in-the-clear";
const REFRESH: &str = "refresh-token-that-must-never-be-stored-in-the-clear";
const CLIENT_SECRET: &str = "client-secret-that-must-never-be-stored-in-the-clear";

fn ring(ids: &[u8]) -> Arc<KeyRing> {
    let keys: Vec<(u8, [u8; 32])> = ids.iter().map(|id| (*id, [*id; 32])).collect();
    Arc::new(KeyRing::new(&keys).unwrap())
}

fn credential(access: &str) -> StoredCredential {
    StoredCredential {
        server_url: "https://mcp.example/mcp".into(),
        issuer: "https://login.example".into(),
        resource: "https://mcp.example/mcp".into(),
        token_endpoint: "https://login.example/token".into(),
        revocation_endpoint: None,
        client: ClientRecord {
            client_id: "client-id-of-the-registration".into(),
            client_secret: Some(Secret::new(CLIENT_SECRET)),
            source: ClientSource::Registered,
            redirect_uri: None,
            auth_method: Some("client_secret_basic".into()),
        },
        token: Some(TokenRecord {
            access_token: Secret::new(access),
            refresh_token: Some(Secret::new(REFRESH)),
            expires_at: Some(4_000_000_000),
            scope: None,
            token_type: "Bearer".into(),
            dpop_key: None,
        }),
        updated_at: 1,
    }
}

fn access_of(store: &RedisStore) -> Option<String> {
    let c = store.load("k1").unwrap()?;
    Some(c.token?.access_token.expose().to_string())
}

#[test]
fn credentials_are_sealed_at_rest_and_shared_by_replicas() {
    let Some(server) = Server::start() else { return };
    let (a, b) =
        (RedisStore::new(&server.url(), ring(&[1])).unwrap(), RedisStore::new(&server.url(), ring(&[1])).unwrap());
    assert_eq!(a.load("k1").unwrap(), None);
    {
        let _lease = a.lock("k1", Duration::from_secs(30)).unwrap();
        a.save("k1", &credential(ACCESS)).unwrap();
    }
    assert_eq!(access_of(&b).as_deref(), Some(ACCESS), "another replica reads it");
    let dump = server.dump();
    for secret in [ACCESS, REFRESH, CLIENT_SECRET, "client-id-of-the-registration", "login.example"] {
        assert!(!dump.contains(secret), "{secret} is in the keyspace:\n{dump}");
    }
    assert!(dump.contains("tether:cred:k1"), "{dump}");
    // A ring without the key that sealed it reads nothing (a login is needed).
    let retired = RedisStore::new(&server.url(), ring(&[2])).unwrap();
    assert_eq!(retired.load("k1").unwrap(), None);
    // Rotation: a ring holding both keys reads it.
    let rotated = RedisStore::new(&server.url(), ring(&[2, 1])).unwrap();
    assert_eq!(access_of(&rotated).as_deref(), Some(ACCESS));
    b.delete("k1").unwrap();
    assert_eq!(a.load("k1").unwrap(), None);
}

#[test]
fn a_lease_excludes_other_replicas_and_a_lapsed_holder_cannot_write_over_its_successor() {
    let Some(server) = Server::start() else { return };
    let (a, b) =
        (RedisStore::new(&server.url(), ring(&[1])).unwrap(), RedisStore::new(&server.url(), ring(&[1])).unwrap());
    let held = a.lock("k1", Duration::from_millis(400)).unwrap();
    assert!(b.try_lock("k1", Duration::from_secs(30)).unwrap().is_none(), "held by a");
    // a stalls past its lease; b takes over, refreshes and writes.
    thread::sleep(Duration::from_millis(600));
    let b_lease = b.lock("k1", Duration::from_secs(30)).unwrap();
    b.save("k1", &credential("from-b")).unwrap();
    let late = a.save("k1", &credential("from-a"));
    assert!(late.unwrap_err().to_string().contains("ran out"), "a's write is fenced out");
    assert_eq!(access_of(&b).as_deref(), Some("from-b"));
    drop(held); // a's release leaves b's lease alone
    assert!(a.try_lock("k1", Duration::from_secs(30)).unwrap().is_none(), "still b's");
    drop(b_lease);
    let waited = {
        let c = RedisStore::new(&server.url(), ring(&[1])).unwrap();
        let started = Instant::now();
        let lease = c.lock("k1", Duration::from_secs(30)).unwrap();
        drop(lease);
        started.elapsed()
    };
    assert!(waited < Duration::from_secs(1), "free once released: waited {waited:?}");
}

#[test]
fn the_newest_credential_survives_a_restart_and_an_outage_fails_fast_then_recovers() {
    let Some(mut server) = Server::start() else { return };
    let store = RedisStore::new(&server.url(), ring(&[1])).unwrap();
    {
        let _lease = store.lock("k1", Duration::from_secs(30)).unwrap();
        store.save("k1", &credential("rotated-1")).unwrap();
        store.save("k1", &credential("rotated-2")).unwrap();
    }
    server.restart();
    assert_eq!(access_of(&store).as_deref(), Some("rotated-2"), "AOF kept the newest; the store reconnected");
    assert_eq!(store.health().unwrap().state, "up");
    server.kill();
    let started = Instant::now();
    assert!(store.load("k1").is_err(), "down: an error, not a hang");
    assert!(store.try_lock("k1", Duration::from_secs(30)).is_err());
    assert!(started.elapsed() < Duration::from_secs(5), "failed fast: {:?}", started.elapsed());
    let health = store.health().unwrap();
    assert_eq!((health.kind, health.state), ("redis", "down"), "{health:?}");
    assert!(health.error.is_some_and(|e| e.contains("127.0.0.1")), "says which store");
    server.restart();
    assert_eq!(access_of(&store).as_deref(), Some("rotated-2"), "recovered by itself");
    assert_eq!(store.health().unwrap().state, "up");
}
