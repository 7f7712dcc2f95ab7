//! The validator against a fake authorization server (tiny_http on loopback) that
//! serves its metadata, its key set and an introspection endpoint, and counts
//! what it is asked. Keys are made here: P-256 and Ed25519 by ring, RSA from the
//! fixture in `testdata/` (ring cannot generate RSA keys).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};

use super::cache::{key_of, VerdictCache};
use super::single_flight::Gates;
use super::*;

/// Tether's resource URI in these tests.
const RESOURCE: &str = "https://gw.example.com/mcp";

// ---------------------------------------------------------------- the fake

/// What the fake serves and what it saw.
struct World {
    issuer: String,
    /// The `issuer` the metadata claims, when not the real one.
    metadata_issuer: Option<String>,
    /// Metadata only at the OpenID Connect location.
    oidc_only: bool,
    jwks: Value,
    jwks_status: u16,
    jwks_delay: Duration,
    /// Introspection answers by token (unknown tokens are inactive).
    introspection: HashMap<String, Value>,
    introspection_status: u16,
    introspection_delay: Duration,
    /// The `Authorization` header and form of each introspection request.
    introspection_requests: Vec<(Option<String>, HashMap<String, String>)>,
    /// Every request, as `METHOD /path`.
    hits: Vec<String>,
}

struct Fake {
    world: Arc<Mutex<World>>,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
    base: String,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Fake {
    fn start(jwks: Value) -> Fake {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let base = format!("http://127.0.0.1:{port}");
        let world = Arc::new(Mutex::new(World {
            issuer: format!("{base}/as"),
            metadata_issuer: None,
            oidc_only: false,
            jwks,
            jwks_status: 200,
            jwks_delay: Duration::ZERO,
            introspection: HashMap::new(),
            introspection_status: 200,
            introspection_delay: Duration::ZERO,
            introspection_requests: Vec::new(),
            hits: Vec::new(),
        }));
        let (s, w) = (server.clone(), world.clone());
        let thread = std::thread::spawn(move || {
            for request in s.incoming_requests() {
                let w = w.clone();
                std::thread::spawn(move || handle(request, &w));
            }
        });
        Fake { world, server, thread: Some(thread), base }
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().unwrap()
    }

    fn issuer(&self) -> String {
        self.world().issuer.clone()
    }

    /// How many requests were `what` (`GET /jwks`, ...).
    fn count(&self, what: &str) -> usize {
        self.world().hits.iter().filter(|h| *h == what).count()
    }

    fn jwks_hits(&self) -> usize {
        self.count("GET /jwks")
    }

    /// A validator trusting this fake, with `extra` settings merged in.
    fn validator(&self, extra: Value) -> TokenValidator {
        let mut settings = json!({"issuer": self.issuer()});
        for (k, v) in extra.as_object().unwrap() {
            settings[k] = v.clone();
        }
        TokenValidator::new(serde_json::from_value(settings).unwrap(), RESOURCE.to_owned())
    }
}

fn handle(mut request: tiny_http::Request, world: &Mutex<World>) {
    let path = request.url().split('?').next().unwrap_or_default().to_owned();
    let method = request.method().to_string();
    let mut body = String::new();
    let _ = request.as_reader().read_to_string(&mut body);
    let authorization =
        request.headers().iter().find(|h| h.field.equiv("Authorization")).map(|h| h.value.as_str().to_owned());
    let (status, answer, delay) = {
        let mut w = world.lock().unwrap();
        w.hits.push(format!("{method} {path}"));
        let metadata = || {
            let base = w.issuer.trim_end_matches("/as").to_owned();
            json!({
                "issuer": w.metadata_issuer.clone().unwrap_or_else(|| w.issuer.clone()),
                "jwks_uri": format!("{base}/jwks"),
                "token_endpoint": format!("{base}/token"),
            })
        };
        match (method.as_str(), path.as_str()) {
            ("GET", "/.well-known/oauth-authorization-server/as") if !w.oidc_only => (200, metadata(), Duration::ZERO),
            ("GET", "/.well-known/openid-configuration/as") if w.oidc_only => (200, metadata(), Duration::ZERO),
            ("GET", "/jwks") => (w.jwks_status, w.jwks.clone(), w.jwks_delay),
            ("POST", "/introspect") => {
                let form: HashMap<String, String> = url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
                let token = form.get("token").cloned().unwrap_or_default();
                w.introspection_requests.push((authorization, form));
                let answer = w.introspection.get(&token).cloned().unwrap_or_else(|| json!({"active": false}));
                (w.introspection_status, answer, w.introspection_delay)
            }
            _ => (404, json!({"error": "not_found"}), Duration::ZERO),
        }
    };
    std::thread::sleep(delay);
    let response = tiny_http::Response::from_string(answer.to_string())
        .with_status_code(status)
        .with_header(tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]).unwrap());
    let _ = request.respond(response);
}

/// A loopback URL where nothing listens.
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/jwks")
}

// ---------------------------------------------------------------- keys and tokens

/// A signing key and its public JWK.
struct Signer {
    alg: Algorithm,
    kid: Option<String>,
    encoding: EncodingKey,
    jwk: Value,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn es256(kid: &str) -> Signer {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let public = pair.public_key().as_ref();
    assert_eq!(public.len(), 65, "uncompressed point");
    Signer {
        alg: Algorithm::ES256,
        kid: Some(kid.to_owned()),
        encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk: json!({"kty": "EC", "crv": "P-256", "x": b64(&public[1..33]), "y": b64(&public[33..]),
                    "kid": kid, "alg": "ES256", "use": "sig"}),
    }
}

fn ed25519(kid: &str) -> Signer {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    Signer {
        alg: Algorithm::EdDSA,
        kid: Some(kid.to_owned()),
        encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
        jwk: json!({"kty": "OKP", "crv": "Ed25519", "x": b64(pair.public_key().as_ref()), "kid": kid}),
    }
}

/// The fixture RSA key, signing with `alg`; its JWK says `jwk_alg`.
fn rsa(kid: &str, alg: Algorithm, jwk_alg: &str) -> Signer {
    let text: String = include_str!("testdata/rsa-2048.pkcs8.b64").split_whitespace().collect();
    let pkcs8 = STANDARD.decode(text).unwrap();
    let pair = RsaKeyPair::from_pkcs8(&pkcs8).unwrap();
    let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public());
    Signer {
        alg,
        kid: Some(kid.to_owned()),
        // jsonwebtoken signs with a PKCS#1 key: the one the PKCS#8 wraps.
        encoding: EncodingKey::from_rsa_der(pkcs1_of(&pkcs8)),
        jwk: json!({"kty": "RSA", "n": b64(&public.n), "e": b64(&public.e), "kid": kid, "alg": jwk_alg}),
    }
}

/// One DER element: its tag, its contents, and what follows it.
fn der(input: &[u8]) -> (u8, &[u8], &[u8]) {
    let (len, header) = match input[1] {
        n if n < 0x80 => (n as usize, 2),
        n => {
            let count = (n & 0x7f) as usize;
            (input[2..2 + count].iter().fold(0usize, |acc, b| acc << 8 | *b as usize), 2 + count)
        }
    };
    (input[0], &input[header..header + len], &input[header + len..])
}

/// The RSAPrivateKey (PKCS#1) inside a PrivateKeyInfo (PKCS#8): its third field.
fn pkcs1_of(pkcs8: &[u8]) -> &[u8] {
    let (_, info, _) = der(pkcs8);
    let (_, _, rest) = der(info); // version
    let (_, _, rest) = der(rest); // algorithm
    let (tag, key, _) = der(rest);
    assert_eq!(tag, 0x04, "an OCTET STRING");
    key
}

fn jwks(signers: &[&Signer]) -> Value {
    json!({"keys": signers.iter().map(|s| s.jwk.clone()).collect::<Vec<_>>()})
}

fn now() -> u64 {
    clock::unix_now()
}

/// Claims a good token of `fake`'s issuer carries.
fn claims(fake: &Fake) -> Value {
    json!({
        "iss": fake.issuer(),
        "aud": RESOURCE,
        "sub": "alice",
        "client_id": "client-1",
        "scope": "mcp:read mcp:write",
        "iat": now(),
        "exp": now() + 600,
    })
}

fn sign_with(signer: &Signer, typ: Option<&str>, claims: &Value) -> String {
    let mut header = jsonwebtoken::Header::new(signer.alg);
    header.kid = signer.kid.clone();
    header.typ = typ.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &signer.encoding).unwrap()
}

fn sign(signer: &Signer, claims: &Value) -> String {
    sign_with(signer, Some("at+jwt"), claims)
}

/// `claims` with `changes` applied (a `null` removes a claim).
fn with(mut claims: Value, changes: Value) -> Value {
    for (k, v) in changes.as_object().unwrap() {
        match v {
            Value::Null => {
                claims.as_object_mut().unwrap().remove(k);
            }
            v => claims[k] = v.clone(),
        }
    }
    claims
}

fn invalid(text: &str) -> Result<Verified, Rejection> {
    Err(Rejection::Invalid(text.to_owned()))
}

// ---------------------------------------------------------------- JWTs

#[test]
fn a_good_es256_token_is_verified_with_keys_found_in_the_metadata() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({}));
    let token = sign(&key, &claims(&fake));
    let verified = v.validate(&token).unwrap();
    assert_eq!(verified.subject.as_deref(), Some("alice"));
    assert_eq!(verified.client_id.as_deref(), Some("client-1"));
    assert_eq!(verified.scopes, ["mcp:read", "mcp:write"]);
    assert!(verified.expires_at.unwrap() > now());
    assert_eq!(fake.count("GET /.well-known/oauth-authorization-server/as"), 1, "RFC 8414, path inserted");
    assert_eq!(fake.jwks_hits(), 1);
    // Again: from the cached keys, no request.
    assert_eq!(v.validate(&token), Ok(verified.clone()));
    assert_eq!(v.check_cached(&token), Some(Ok(verified)));
    assert_eq!(fake.world().hits.len(), 2);
    assert_eq!((v.issuer(), v.resource()), (fake.issuer().as_str(), RESOURCE));
}

#[test]
fn check_cached_needs_the_first_fetch_then_decides() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({}));
    let token = sign(&key, &claims(&fake));
    assert_eq!(v.check_cached(&token), None);
    assert_eq!(fake.world().hits.len(), 0, "check_cached never fetches");
    assert!(v.validate(&token).is_ok());
    assert!(matches!(v.check_cached(&token), Some(Ok(_))));
    let expired = sign(&key, &with(claims(&fake), json!({"exp": now() - 3600})));
    assert_eq!(v.check_cached(&expired), Some(invalid("expired")));
}

#[test]
fn rs256_eddsa_and_kid_less_tokens_are_verified() {
    let (rs, ed, ec) = (rsa("r1", Algorithm::RS256, "RS256"), ed25519("e1"), es256("k1"));
    let fake = Fake::start(jwks(&[&rs, &ed, &ec]));
    let v = fake.validator(json!({}));
    for signer in [&rs, &ed, &ec] {
        let verified = v.validate(&sign(signer, &claims(&fake))).unwrap_or_else(|e| panic!("{:?}: {e:?}", signer.alg));
        assert_eq!(verified.scopes, ["mcp:read", "mcp:write"]);
    }
    assert_eq!(fake.jwks_hits(), 1);
    // No kid: every key that fits the algorithm is tried.
    let strip = |s: &Signer| with(s.jwk.clone(), json!({"kid": null}));
    let anonymous = |s: &Signer| Signer { kid: None, alg: s.alg, encoding: s.encoding.clone(), jwk: Value::Null };
    let fake = Fake::start(json!({"keys": [strip(&ec), strip(&ed), strip(&rs)]}));
    let v = fake.validator(json!({}));
    for signer in [&rs, &ed, &ec] {
        assert!(v.validate(&sign(&anonymous(signer), &claims(&fake))).is_ok(), "{:?}", signer.alg);
    }
    assert_eq!(v.validate(&sign(&anonymous(&es256("other")), &claims(&fake))), invalid("bad signature"));
    assert_eq!(fake.jwks_hits(), 1);
}

#[test]
fn claims_are_checked() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({"audience": ["api://tether"]}));
    let check = |changes: Value| v.validate(&sign(&key, &with(claims(&fake), changes)));
    assert_eq!(check(json!({"aud": "https://other.example.com/mcp"})), invalid("wrong audience"));
    assert_eq!(check(json!({"aud": ["https://other.example.com", "x"]})), invalid("wrong audience"));
    assert_eq!(check(json!({"aud": null})), invalid("wrong audience"));
    assert!(check(json!({"aud": ["https://other.example.com", RESOURCE]})).is_ok());
    assert!(check(json!({"aud": format!("{RESOURCE}/")})).is_ok(), "a trailing slash");
    assert!(check(json!({"aud": "api://tether"})).is_ok(), "a configured audience");
    assert_eq!(check(json!({"iss": format!("{}/", fake.issuer())})), invalid("unknown issuer"), "exact match");
    assert_eq!(check(json!({"iss": "https://evil.example.com/as"})), invalid("unknown issuer"));
    assert_eq!(check(json!({"iss": null})), invalid("unknown issuer"));
    assert_eq!(check(json!({"exp": now() - 120})), invalid("expired"));
    assert!(check(json!({"exp": now() - 30})).is_ok(), "60 s of leeway");
    assert_eq!(check(json!({"exp": null})), invalid("missing expiry"));
    assert_eq!(check(json!({"exp": "tomorrow"})), invalid("malformed token"));
    assert_eq!(check(json!({"nbf": now() + 300})), invalid("not yet valid"));
    assert!(check(json!({"nbf": now() + 30})).is_ok(), "60 s of leeway");
    let scp = check(json!({"scope": null, "scp": ["a", "b"], "client_id": null, "azp": "client-2"})).unwrap();
    assert_eq!((scp.scopes, scp.client_id.as_deref()), (vec!["a".to_owned(), "b".to_owned()], Some("client-2")));
    assert_eq!(check(json!({"scope": null, "scp": "c d"})).unwrap().scopes, ["c", "d"]);
    assert_eq!(fake.jwks_hits(), 1);
}

#[test]
fn typ_must_say_jwt_when_present() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({}));
    for typ in [None, Some("JWT"), Some("at+jwt"), Some("application/at+jwt"), Some("AT+JWT")] {
        assert!(v.validate(&sign_with(&key, typ, &claims(&fake))).is_ok(), "{typ:?}");
    }
    for typ in ["JOSE", "id_token+jwt", "application/jose"] {
        assert_eq!(v.validate(&sign_with(&key, Some(typ), &claims(&fake))), invalid("wrong token type"), "{typ}");
    }
}

#[test]
fn a_signature_by_another_key_with_the_same_kid_is_bad() {
    let (key, impostor) = (es256("k1"), es256("k1"));
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({}));
    assert_eq!(v.validate(&sign(&impostor, &claims(&fake))), invalid("bad signature"));
    // A token whose payload was swapped after signing.
    let good = sign(&key, &claims(&fake));
    let other = sign(&key, &with(claims(&fake), json!({"scope": "mcp:admin"})));
    let parts: Vec<&str> = good.split('.').collect();
    let forged = format!("{}.{}.{}", parts[0], other.split('.').nth(1).unwrap(), parts[2]);
    assert_eq!(v.validate(&forged), invalid("bad signature"));
}

#[test]
fn none_hmac_and_unlisted_algorithms_are_refused() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    // Even listed, HS256 is dropped.
    let v = fake.validator(json!({"algorithms": ["ES256", "HS256"]}));
    let public_key = URL_SAFE_NO_PAD.decode(key.jwk["x"].as_str().unwrap()).unwrap();
    let hmac = Signer {
        alg: Algorithm::HS256,
        kid: Some("k1".into()),
        encoding: EncodingKey::from_secret(&public_key),
        jwk: Value::Null,
    };
    assert_eq!(v.validate(&sign(&hmac, &claims(&fake))), invalid("disallowed algorithm"));
    let header = b64(br#"{"alg":"none","typ":"JWT","kid":"k1"}"#);
    let unsigned = format!("{header}.{}.", b64(claims(&fake).to_string().as_bytes()));
    assert_eq!(v.validate(&unsigned), invalid("disallowed algorithm"));
    let header = b64(br#"{"alg":"None"}"#);
    assert_eq!(v.validate(&format!("{header}.{}.", b64(b"{}"))), invalid("disallowed algorithm"));
    assert_eq!(fake.world().hits.len(), 0, "refused before any key is needed");
    assert_eq!(v.check_cached(&unsigned), Some(invalid("disallowed algorithm")));

    // ES256 when only RS256 is accepted.
    let v = fake.validator(json!({"algorithms": ["RS256"]}));
    assert_eq!(v.validate(&sign(&key, &claims(&fake))), invalid("disallowed algorithm"));

    // The key's own `alg` binds it: an RS256 key does not verify PS256.
    let (rs, ps) = (rsa("r1", Algorithm::RS256, "RS256"), rsa("r1", Algorithm::PS256, "RS256"));
    let fake = Fake::start(jwks(&[&rs]));
    let v = fake.validator(json!({}));
    assert!(v.validate(&sign(&rs, &claims(&fake))).is_ok());
    assert_eq!(v.validate(&sign(&ps, &claims(&fake))), invalid("unknown signing key"));
    // A `crit` header is refused.
    let header = b64(br#"{"alg":"ES256","kid":"k1","crit":["exp"],"exp":1}"#);
    assert_eq!(v.validate(&format!("{header}.e30.c2ln")), invalid("unsupported critical header"));
}

#[test]
fn an_unknown_kid_refetches_once_per_interval() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({}));
    assert!(v.validate(&sign(&key, &claims(&fake))).is_ok());
    assert_eq!(fake.jwks_hits(), 1);
    // Just fetched: no refetch yet.
    let stranger = |kid: &str| sign(&es256(kid), &claims(&fake));
    assert_eq!(v.check_cached(&stranger("s0")), Some(invalid("unknown signing key")));
    assert_eq!(v.validate(&stranger("s0")), invalid("unknown signing key"));
    assert_eq!(fake.jwks_hits(), 1);
    // Later: exactly one refetch, then the kid is still unknown.
    v.clock.advance(Duration::from_secs(31));
    assert_eq!(v.check_cached(&stranger("s1")), None);
    assert_eq!(v.validate(&stranger("s1")), invalid("unknown signing key"));
    assert_eq!(fake.jwks_hits(), 2);
    // A flood of made-up kids within the interval: no fetch.
    for i in 0..50 {
        let token = stranger(&format!("flood-{i}"));
        assert_eq!(v.validate(&token), invalid("unknown signing key"));
    }
    assert_eq!(fake.jwks_hits(), 2);
    assert_eq!(fake.count("GET /.well-known/oauth-authorization-server/as"), 1, "the jwks_uri is kept");
}

#[test]
fn a_rotated_key_is_picked_up_after_a_refetch() {
    let (old, new) = (es256("k1"), ed25519("k2"));
    let fake = Fake::start(jwks(&[&old]));
    let v = fake.validator(json!({}));
    assert!(v.validate(&sign(&old, &claims(&fake))).is_ok());
    fake.world().jwks = jwks(&[&new]);
    v.clock.advance(Duration::from_secs(31));
    let token = sign(&new, &claims(&fake));
    assert_eq!(v.check_cached(&token), None);
    assert!(v.validate(&token).is_ok());
    assert_eq!(fake.jwks_hits(), 2);
    assert!(matches!(v.check_cached(&token), Some(Ok(_))));
    assert_eq!(v.validate(&sign(&old, &claims(&fake))), invalid("unknown signing key"), "rotated out");
}

#[test]
fn stale_keys_are_refreshed_hourly_and_kept_when_that_fails() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({}));
    let token = sign(&key, &claims(&fake));
    assert!(v.validate(&token).is_ok());
    v.clock.advance(Duration::from_secs(3601));
    fake.world().jwks_status = 500;
    assert_eq!(v.check_cached(&token), None, "a refresh is due");
    assert!(v.validate(&token).is_ok(), "the old keys still serve");
    assert_eq!(fake.jwks_hits(), 2);
    assert!(matches!(v.check_cached(&token), Some(Ok(_))), "no new attempt right away");
    // An unknown kid while the server fails: maybe a rotation tether cannot see.
    v.clock.advance(Duration::from_secs(31));
    assert_eq!(v.validate(&sign(&es256("k9"), &claims(&fake))), Err(keys_unavailable()));
    assert_eq!(fake.jwks_hits(), 3);
    fake.world().jwks_status = 200;
    v.clock.advance(Duration::from_secs(31));
    assert_eq!(v.check_cached(&token), None);
    assert!(v.validate(&token).is_ok());
    assert_eq!(fake.jwks_hits(), 4);
    assert!(matches!(v.check_cached(&token), Some(Ok(_))));
}

#[test]
fn a_missing_required_scope_is_insufficient_scope() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({"required_scopes": ["mcp:read", "mcp:admin"]}));
    assert_eq!(v.required_scopes(), ["mcp:read", "mcp:admin"]);
    let refused = v.validate(&sign(&key, &claims(&fake))).unwrap_err();
    assert_eq!(refused, Rejection::InsufficientScope(vec!["mcp:read".into(), "mcp:admin".into()]));
    assert_eq!((refused.status(), refused.error_code()), (403, Some("insufficient_scope")));
    let token = sign(&key, &with(claims(&fake), json!({"scope": "mcp:admin mcp:read"})));
    assert!(v.validate(&token).is_ok());
    assert!(matches!(v.check_cached(&sign(&key, &claims(&fake))), Some(Err(Rejection::InsufficientScope(_)))));
}

#[test]
fn unreachable_or_failing_key_sets_are_unavailable() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({"jwks_uri": closed_url()}));
    let token = sign(&key, &claims(&fake));
    let refused = v.validate(&token).unwrap_err();
    assert_eq!(refused, keys_unavailable());
    assert_eq!((refused.status(), refused.error_code()), (503, None));
    assert_eq!(v.check_cached(&token), Some(Err(keys_unavailable())), "no retry right after a failure");
    v.clock.advance(Duration::from_secs(6));
    assert_eq!(v.check_cached(&token), None);

    fake.world().jwks_status = 500;
    let v = fake.validator(json!({}));
    assert_eq!(v.validate(&token), Err(keys_unavailable()));
    fake.world().jwks = json!({"not": "a key set"});
    fake.world().jwks_status = 200;
    v.clock.advance(Duration::from_secs(6));
    assert_eq!(v.validate(&token), Err(keys_unavailable()));
    // A set without a key tether can use is the server's fault, not the token's.
    fake.world().jwks = json!({"keys": []});
    v.clock.advance(Duration::from_secs(6));
    assert_eq!(v.validate(&token), Err(keys_unavailable()));
    fake.world().jwks = jwks(&[&key]);
    v.clock.advance(Duration::from_secs(6));
    assert!(v.validate(&token).is_ok());
}

#[test]
fn metadata_of_another_issuer_is_refused() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    fake.world().metadata_issuer = Some("https://evil.example.com/as".into());
    let v = fake.validator(json!({}));
    assert_eq!(v.validate(&sign(&key, &claims(&fake))), Err(keys_unavailable()));
    assert_eq!(fake.jwks_hits(), 0, "its keys are never fetched");
    assert_eq!(fake.count("GET /.well-known/openid-configuration/as"), 0, "no fallback past a refused document");
}

#[test]
fn openid_metadata_serves_when_rfc8414_has_none() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    fake.world().oidc_only = true;
    let v = fake.validator(json!({}));
    assert!(v.validate(&sign(&key, &claims(&fake))).is_ok());
    let hits = fake.world().hits.clone();
    assert_eq!(
        hits,
        ["GET /.well-known/oauth-authorization-server/as", "GET /.well-known/openid-configuration/as", "GET /jwks"]
    );
}

#[test]
fn concurrent_validations_share_one_fetch() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    fake.world().jwks_delay = Duration::from_millis(200);
    let v = Arc::new(fake.validator(json!({})));
    let token = sign(&key, &claims(&fake));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (v, token) = (v.clone(), token.clone());
            std::thread::spawn(move || v.validate(&token))
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap().is_ok());
    }
    assert_eq!(fake.jwks_hits(), 1);
    assert_eq!(fake.count("GET /.well-known/oauth-authorization-server/as"), 1);
}

#[test]
fn oversized_and_malformed_tokens_are_refused_unread() {
    let key = es256("k1");
    let fake = Fake::start(jwks(&[&key]));
    let v = fake.validator(json!({}));
    let huge = "a".repeat(MAX_TOKEN_LEN + 1);
    assert_eq!(v.check_cached(&huge), Some(invalid("token too large")));
    assert_eq!(v.validate(&huge), invalid("token too large"));
    for token in ["", "abc", "a.b", "a.b.c.d.e", "a b.c.d", "é.b.c", "..", "%%.a.b", "e30.e30.c2ln"] {
        assert_eq!(v.validate(token), invalid("malformed token"), "{token:?}");
        assert_eq!(v.check_cached(token), Some(invalid("malformed token")), "{token:?}");
    }
    let header = b64(br#"{"alg":"ES256","kid":7}"#);
    assert_eq!(v.validate(&format!("{header}.e30.c2ln")), invalid("malformed token"));
    assert_eq!(fake.world().hits.len(), 0);
    // A well-formed header with a payload that is not JSON.
    let good = sign(&key, &claims(&fake));
    let parts: Vec<&str> = good.split('.').collect();
    assert_eq!(v.validate(&format!("{}.{}.{}", parts[0], b64(b"not json"), parts[2])), invalid("bad signature"));
    assert_eq!(v.validate(&format!("{}.{}.%%%", parts[0], parts[1])), invalid("malformed token"));
}

// ---------------------------------------------------------------- introspection

/// A fake with an introspection endpoint that knows `tokens`, and a validator
/// using it as client `tether`.
fn introspecting(tokens: &[(&str, Value)]) -> (Fake, TokenValidator) {
    let fake = Fake::start(json!({"keys": []}));
    fake.world().introspection = tokens.iter().map(|(t, a)| ((*t).to_owned(), a.clone())).collect();
    let v = fake.validator(json!({
        "introspection_endpoint": format!("{}/introspect", fake.base),
        "client_id": "tether",
        "client_secret": "s3cret:/+",
    }));
    (fake, v)
}

#[test]
fn introspection_answers_are_checked_and_cached() {
    let fake_issuer = "http://issuer.invalid/as";
    let active = json!({"active": true, "scope": "mcp:read", "sub": "bob", "client_id": "client-2",
                        "aud": [RESOURCE], "exp": now() + 600});
    let (fake, v) = introspecting(&[
        ("opaque-good", active.clone()),
        ("opaque-other-aud", with(active.clone(), json!({"aud": "https://other.example.com"}))),
        ("opaque-other-iss", with(active.clone(), json!({"iss": fake_issuer}))),
        ("opaque-expired", with(active.clone(), json!({"exp": now() - 3600}))),
        ("opaque-bare", json!({"active": true, "aud": RESOURCE})),
        ("opaque-no-aud", json!({"active": true})),
        ("opaque-refresh", with(active.clone(), json!({"token_type": "refresh_token"}))),
    ]);
    let introspections = || fake.count("POST /introspect");
    assert_eq!(v.check_cached("opaque-good"), None);
    let verified = v.validate("opaque-good").unwrap();
    assert_eq!(verified.subject.as_deref(), Some("bob"));
    assert_eq!(verified.scopes, ["mcp:read"]);
    assert_eq!(introspections(), 1);
    assert_eq!(v.validate("opaque-good"), Ok(verified.clone()));
    assert_eq!(v.check_cached("opaque-good"), Some(Ok(verified)));
    assert_eq!(introspections(), 1, "cached");
    {
        let w = fake.world();
        let (authorization, form) = &w.introspection_requests[0];
        let expected = crate::oauth::token::basic_authorization("tether", "s3cret:/+");
        assert_eq!(authorization.as_deref(), Some(expected.as_str()));
        assert_eq!(form.get("token").map(String::as_str), Some("opaque-good"));
        assert_eq!(form.get("token_type_hint").map(String::as_str), Some("access_token"));
    }
    // At most a minute: then asked again (a revocation shows).
    v.clock.advance(Duration::from_secs(61));
    assert_eq!(v.check_cached("opaque-good"), None);
    assert!(v.validate("opaque-good").is_ok());
    assert_eq!(introspections(), 2);

    assert_eq!(v.validate("opaque-unknown"), invalid("token not active"));
    assert_eq!(v.validate("opaque-unknown"), invalid("token not active"));
    assert_eq!(v.check_cached("opaque-unknown"), Some(invalid("token not active")));
    assert_eq!(introspections(), 3, "inactive answers are cached too");
    v.clock.advance(Duration::from_secs(11));
    assert_eq!(v.check_cached("opaque-unknown"), None, "for 10 s");

    assert_eq!(v.validate("opaque-other-aud"), invalid("wrong audience"));
    assert_eq!(v.validate("opaque-other-iss"), invalid("unknown issuer"));
    assert_eq!(v.validate("opaque-expired"), invalid("expired"));
    let bare = v.validate("opaque-bare").unwrap();
    assert_eq!((bare.scopes.len(), bare.expires_at), (0, None), "absent claims are not required");
    assert_eq!(v.validate("opaque-no-aud"), invalid("wrong audience"), "but the audience is");
    assert_eq!(v.validate("opaque-refresh"), invalid("wrong token type"));
}

#[test]
fn introspection_failures_are_unavailable_and_not_cached() {
    let (fake, v) = introspecting(&[("opaque-good", json!({"active": true, "aud": RESOURCE}))]);
    fake.world().introspection_status = 500;
    let refused = v.validate("opaque-good").unwrap_err();
    assert_eq!(refused, Rejection::Unavailable("token introspection unavailable".into()));
    assert_eq!(v.check_cached("opaque-good"), None);
    fake.world().introspection_status = 401;
    assert!(matches!(v.validate("opaque-good"), Err(Rejection::Unavailable(_))), "tether's credentials refused");
    fake.world().introspection_status = 200;
    assert!(v.validate("opaque-good").is_ok());
    assert_eq!(v.check_cached("a b"), Some(invalid("malformed token")));
    assert_eq!(v.check_cached(&"a".repeat(MAX_TOKEN_LEN + 1)), Some(invalid("token too large")));
    assert_eq!(fake.count("POST /introspect"), 3);
}

/// A 4xx about the token itself (node-oidc-provider answers 400
/// `unsupported_token_type` for a JWT, where RFC 7662 says `active: false`) is a
/// refusal of that token (401 `invalid_token`), not an outage (503).
#[test]
fn an_introspection_4xx_about_the_token_refuses_it() {
    let (fake, v) = introspecting(&[("a.jwt.token", json!({"error": "unsupported_token_type"}))]);
    fake.world().introspection_status = 400;
    assert_eq!(v.validate("a.jwt.token"), invalid("token not active"));
    assert_eq!(v.check_cached("a.jwt.token"), Some(invalid("token not active")), "kept like any refusal");
    fake.world().introspection_status = 404;
    assert!(matches!(v.validate("other-token"), Err(Rejection::Unavailable(_))), "a wrong endpoint is tether's");
}

#[test]
fn concurrent_introspections_of_one_token_share_one_request() {
    let (fake, v) = introspecting(&[("opaque-good", json!({"active": true, "aud": RESOURCE}))]);
    fake.world().introspection_delay = Duration::from_millis(200);
    let v = Arc::new(v);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let v = v.clone();
            std::thread::spawn(move || v.validate("opaque-good"))
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap().is_ok());
    }
    assert_eq!(fake.count("POST /introspect"), 1);
    let Mode::Introspection(introspector) = &v.mode else { unreachable!() };
    assert_eq!(introspector.gates.len(), 0, "no lock left behind");
}

// ---------------------------------------------------------------- parts

#[test]
fn settings_parse_check_and_hide_the_secret() {
    let s: ResourceAuthSettings = serde_json::from_value(json!({
        "issuer": "https://as.example.com",
        "client_id": "tether",
        "client_secret": "hunter2-secret",
        "scopes": {"mcp:read": {"servers": ["*"]}},
        "resource_name": "Tether",
    }))
    .unwrap();
    assert!(s.check().is_ok());
    assert!(!format!("{s:?}").contains("hunter2"));
    assert!(serde_json::from_value::<ResourceAuthSettings>(json!({"issuer": "x", "jwksUri": "y"})).is_err());
    assert!(serde_json::from_value::<ResourceAuthSettings>(json!({})).is_err(), "issuer is required");
    let check = |extra: Value| {
        let mut doc = json!({"issuer": "https://as.example.com"});
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        serde_json::from_value::<ResourceAuthSettings>(doc).unwrap().check()
    };
    assert!(check(json!({"algorithms": ["ES256", "EdDSA", "PS512"]})).is_ok());
    for bad in [json!(["HS256"]), json!(["none"]), json!(["ES256", "es256"]), json!([])] {
        assert!(check(json!({ "algorithms": bad })).is_err(), "{bad}");
    }
    assert!(check(json!({"client_secret": "x"})).is_err());
    assert!(check(json!({"issuer": "not a url"})).is_err());
    assert!(check(json!({"jwks_uri": "file:///etc/keys"})).is_err());
    // Keys and verdicts only over TLS, or from this machine.
    assert!(check(json!({"issuer": "http://as.example.com"})).is_err());
    assert!(check(json!({"jwks_uri": "http://keys.example.com/jwks"})).is_err());
    assert!(check(json!({"introspection_endpoint": "http://as.example.com/introspect"})).is_err());
    assert!(check(json!({"issuer": "http://127.0.0.1:9000", "jwks_uri": "http://localhost:9000/jwks"})).is_ok());
    assert!(check(json!({"resource": "http://gw.internal/mcp"})).is_ok(), "tether's own URL is the operator's");
    assert!(check(json!({"required_scopes": ["mcp read"]})).is_err());
    assert!(check(json!({"admin_scope": ""})).is_err());
    assert_eq!(ResourceAuthSettings { algorithms: None, ..s }.accepted_algorithms().len(), DEFAULT_ALGORITHMS.len());
}

#[test]
fn verified_debug_hides_the_subject() {
    let v = Verified {
        subject: Some("alice@example.com".into()),
        client_id: Some("c".into()),
        scopes: vec!["s".into()],
        expires_at: Some(1),
    };
    let text = format!("{v:?}");
    assert!(!text.contains("alice") && text.contains("[redacted]") && text.contains("\"s\""), "{text}");
}

#[test]
fn the_verdict_cache_is_bounded_and_keyed_by_hash() {
    let now = std::time::Instant::now();
    let cache = VerdictCache::new(3);
    let verdict = || invalid("token not active");
    let soon = now + Duration::from_secs(5);
    let later = now + Duration::from_secs(50);
    cache.put(key_of("t1"), verdict(), later, now);
    cache.put(key_of("t2"), verdict(), soon, now);
    cache.put(key_of("t3"), verdict(), later, now);
    cache.put(key_of("t0"), verdict(), now, now);
    assert_eq!(cache.len(), 3, "an expired verdict is not kept");
    // Full: the oldest goes.
    cache.put(key_of("t4"), verdict(), later, now);
    assert_eq!(cache.len(), 3);
    assert!(cache.get(&key_of("t1"), now).is_none());
    assert!(cache.get(&key_of("t4"), now).is_some());
    // Full with an expired one: that one goes first.
    let at = now + Duration::from_secs(10);
    cache.put(key_of("t5"), verdict(), later, at);
    assert!(cache.get(&key_of("t2"), at).is_none());
    assert!(cache.get(&key_of("t3"), at).is_some() && cache.get(&key_of("t4"), at).is_some());
    assert_eq!(key_of("abc")[..4], [0xba, 0x78, 0x16, 0xbf], "SHA-256, not the token");
}

#[test]
fn gates_are_dropped_after_use() {
    let gates = Gates::default();
    assert_eq!(gates.run(key_of("t"), || 7), 7);
    assert_eq!(gates.len(), 0);
}

#[test]
fn the_validator_is_shareable_and_rejections_map_to_http() {
    fn shareable<T: Send + Sync>() {}
    shareable::<TokenValidator>();
    let r = Rejection::Invalid("expired".into());
    assert_eq!((r.status(), r.error_code(), r.description()), (401, Some("invalid_token"), "expired"));
}
