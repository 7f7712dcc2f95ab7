//! The Redis shared store, and the credentials kept in it, against a real `redis-server` (Debian's package):
//! credentials sealed at rest, leases that exclude across replicas and fence a
//! holder whose lease lapsed, a retired key, a restart with AOF, an outage;
//! records compared on their generation, entries taken once, hints.
//!
//! Needs `redis-server` on the PATH (see [`tether_tests::redis_server`]).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tether_host::oauth::store::{ClientRecord, ClientSource, TokenRecord};
use tether_host::oauth::{CredentialStore, Secret, SharedCredentials, StoredCredential};
use tether_host::seal::KeyRing;
use tether_host::shared::redis::RedisShared;
use tether_host::shared::{Record, SharedStore, Written};
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

fn access_of(store: &SharedCredentials) -> Option<String> {
    let c = store.load("k1").unwrap()?;
    Some(c.token?.access_token.expose().to_string())
}

#[test]
fn credentials_are_sealed_at_rest_and_shared_by_replicas() {
    let Some(server) = Server::start() else { return };
    let (a, b) = (
        SharedCredentials::redis(&server.url(), ring(&[1])).unwrap(),
        SharedCredentials::redis(&server.url(), ring(&[1])).unwrap(),
    );
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
    let retired = SharedCredentials::redis(&server.url(), ring(&[2])).unwrap();
    assert_eq!(retired.load("k1").unwrap(), None);
    // Rotation: a ring holding both keys reads it.
    let rotated = SharedCredentials::redis(&server.url(), ring(&[2, 1])).unwrap();
    assert_eq!(access_of(&rotated).as_deref(), Some(ACCESS));
    b.delete("k1").unwrap();
    assert_eq!(a.load("k1").unwrap(), None);
}

#[test]
fn a_lease_excludes_other_replicas_and_a_lapsed_holder_cannot_write_over_its_successor() {
    let Some(server) = Server::start() else { return };
    let (a, b) = (
        SharedCredentials::redis(&server.url(), ring(&[1])).unwrap(),
        SharedCredentials::redis(&server.url(), ring(&[1])).unwrap(),
    );
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
        let c = SharedCredentials::redis(&server.url(), ring(&[1])).unwrap();
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
    let store = SharedCredentials::redis(&server.url(), ring(&[1])).unwrap();
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

#[test]
fn records_compare_generations_entries_are_taken_once_and_hints_arrive() {
    let Some(server) = Server::start() else { return };
    let (a, b) = (RedisShared::new(&server.url()).unwrap(), RedisShared::new(&server.url()).unwrap());
    assert_eq!(a.write("cred/x", b"one", Some(0), None).unwrap(), Written::Done(1));
    assert_eq!(b.write("cred/x", b"two", Some(0), None).unwrap(), Written::Stale);
    assert_eq!(b.write("cred/x", b"two", Some(1), None).unwrap(), Written::Done(2));
    assert_eq!(a.read("cred/x").unwrap(), Some(Record { generation: 2, value: b"two".to_vec() }));
    assert_eq!(a.remove("cred/x", None).unwrap(), Written::Done(3));
    assert_eq!(a.read("cred/x").unwrap(), None);
    assert_eq!(b.write("cred/x", b"late", Some(2), None).unwrap(), Written::Stale, "generations outlive removal");
    let lease = a.try_lease("cred/x", Duration::from_secs(30)).unwrap().unwrap();
    assert!(b.try_lease("cred/x", Duration::from_secs(30)).unwrap().is_none());
    assert_eq!(a.write("cred/x", b"mine", None, Some(&lease)).unwrap(), Written::Done(4));
    a.release(&lease).unwrap();
    assert_eq!(a.write("cred/x", b"late", None, Some(&lease)).unwrap(), Written::Fenced);

    a.put_expiring("login/s", b"pending", Duration::from_secs(60)).unwrap();
    assert_eq!(b.get_expiring("login/s").unwrap().as_deref(), Some(&b"pending"[..]));
    let takers: Vec<_> = (0..6)
        .map(|i| {
            let url = server.url();
            thread::spawn(move || RedisShared::new(&url).unwrap().take("login/s").unwrap().map(|v| (i, v)))
        })
        .collect();
    let got: Vec<_> = takers.into_iter().filter_map(|t| t.join().unwrap()).collect();
    assert_eq!(got.len(), 1, "exactly one taker: {got:?}");
    a.put_expiring("login/t", b"short", Duration::from_millis(50)).unwrap();
    thread::sleep(Duration::from_millis(120));
    assert_eq!(a.take("login/t").unwrap(), None, "expired");

    let (sender, heard) = std::sync::mpsc::channel();
    let sender = std::sync::Mutex::new(sender);
    assert!(b.subscribe("cred", Arc::new(move |m: &str| drop(sender.lock().unwrap().send(m.to_owned())))));
    // The subscriber connects on its own thread: publish until it hears.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = None;
    while got.is_none() && Instant::now() < deadline {
        a.publish("cred", "k1 7");
        got = heard.recv_timeout(Duration::from_millis(200)).ok();
    }
    assert_eq!(got.as_deref(), Some("k1 7"));
}
