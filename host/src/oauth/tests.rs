//! The OAuth client end to end against a fake authorization server and protected
//! resource (tiny_http on loopback): the test plays the engine (it calls
//! `execute` and reads the reports) and the person's browser (it follows the
//! authorization URL's redirect to the loopback callback by hand).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};
use tether_core::credential::{AuthStep, Challenge, CredentialFailure, CredentialUpdate};

use super::store::{store_key, ClientRecord, ClientSource, TokenRecord};
use super::*;

// ---------------------------------------------------------------- the fake

/// How the fake's authorization endpoint sets `iss` on its redirect.
#[derive(Clone, Copy, PartialEq)]
enum Iss {
    Correct,
    Wrong,
}

/// What the fake does and what it saw.
struct World {
    base: String,
    /// `""` for a 2025-03-26 server (no metadata, endpoints at the root), else `/as`.
    as_path: &'static str,
    legacy: bool,
    iss: Iss,
    prm_resource: Option<String>,
    metadata_status: u16,
    token_status: Option<u16>,
    token_delay: Duration,
    /// Runs when a refresh grant arrives, before it is answered.
    refresh_hook: Option<Box<dyn Fn() + Send>>,
    next: u32,
    refresh_tokens: HashSet<String>,
    challenges: HashMap<String, String>,
    /// Every request line seen (`GET /path`).
    hits: Vec<String>,
    /// Token requests: the form and the Authorization header.
    token_requests: Vec<(HashMap<String, String>, Option<String>)>,
    registrations: Vec<Value>,
    authorizations: Vec<HashMap<String, String>>,
    revoked: Vec<String>,
    /// The authorization server binds tokens with DPoP, and wants its nonce.
    dpop: bool,
    /// The protected resource's metadata lists DPoP algorithms.
    resource_dpop: bool,
    /// DPoP proofs the token endpoint got.
    dpop_proofs: Vec<String>,
    /// Client ids the server no longer knows (it restarted): `invalid_client` at
    /// the token endpoint, an error at the authorization endpoint.
    forgotten: HashSet<String>,
    /// Tokens and codes handed out.
    secrets: Vec<String>,
}

impl World {
    fn issuer(&self) -> String {
        format!("{}{}", self.base, self.as_path)
    }

    fn grants(&self, kind: &str) -> usize {
        self.token_requests.iter().filter(|(f, _)| f.get("grant_type").map(String::as_str) == Some(kind)).count()
    }

    /// A fresh value; the secret ones are remembered for leak checks.
    fn mint(&mut self, prefix: &str) -> String {
        self.next += 1;
        let value = format!("{prefix}-{}", self.next);
        if prefix != "client" {
            self.secrets.push(value.clone());
        }
        value
    }
}

struct Fake {
    world: Arc<Mutex<World>>,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
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
    fn start() -> Fake {
        Fake::start_with(false)
    }

    fn start_with(legacy: bool) -> Fake {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let world = Arc::new(Mutex::new(World {
            base: format!("http://127.0.0.1:{port}"),
            as_path: if legacy { "" } else { "/as" },
            legacy,
            iss: Iss::Correct,
            prm_resource: None,
            metadata_status: 200,
            token_status: None,
            token_delay: Duration::ZERO,
            refresh_hook: None,
            next: 0,
            refresh_tokens: HashSet::new(),
            challenges: HashMap::new(),
            hits: Vec::new(),
            token_requests: Vec::new(),
            dpop: false,
            resource_dpop: false,
            dpop_proofs: Vec::new(),
            forgotten: HashSet::new(),
            registrations: Vec::new(),
            authorizations: Vec::new(),
            revoked: Vec::new(),
            secrets: Vec::new(),
        }));
        let (s, w) = (server.clone(), world.clone());
        let thread = std::thread::spawn(move || {
            for request in s.incoming_requests() {
                let w = w.clone();
                std::thread::spawn(move || handle(request, &w));
            }
        });
        Fake { world, server, thread: Some(thread) }
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().unwrap()
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.world().base)
    }
}

fn respond(request: tiny_http::Request, status: u16, body: Value, location: Option<&str>) {
    let mut response = tiny_http::Response::from_string(body.to_string())
        .with_status_code(status)
        .with_header(tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]).unwrap());
    if let Some(location) = location {
        response.add_header(tiny_http::Header::from_bytes(&b"Location"[..], location.as_bytes()).unwrap());
    }
    let _ = request.respond(response);
}

/// The claims of a DPoP proof (not verified: the fake only reads them).
fn proof_claims(proof: &str) -> Value {
    let claims = proof.split('.').nth(1).unwrap_or_default();
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims).unwrap_or_default())
        .unwrap_or(Value::Null)
}

fn form(text: &str) -> HashMap<String, String> {
    url::form_urlencoded::parse(text.as_bytes()).into_owned().collect()
}

fn handle(mut request: tiny_http::Request, world: &Mutex<World>) {
    let target = request.url().to_owned();
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    let (path, query) = (path.to_owned(), query.to_owned());
    let method = request.method().as_str().to_owned();
    let authorization =
        request.headers().iter().find(|h| h.field.equiv("Authorization")).map(|h| h.value.as_str().to_owned());
    let proof = request.headers().iter().find(|h| h.field.equiv("DPoP")).map(|h| h.value.as_str().to_owned());
    let mut body = String::new();
    let _ = request.as_reader().read_to_string(&mut body);
    let mut w = world.lock().unwrap();
    w.hits.push(format!("{method} {path}"));
    let base = w.base.clone();
    let issuer = w.issuer();
    let as_path = w.as_path;
    if path == "/.well-known/oauth-protected-resource/mcp" && !w.legacy {
        let resource = w.prm_resource.clone().unwrap_or(format!("{base}/mcp"));
        let mut doc =
            json!({"resource": resource, "authorization_servers": [issuer], "scopes_supported": ["mcp:read"]});
        if w.resource_dpop {
            doc["dpop_signing_alg_values_supported"] = json!(["ES256"]);
        }
        return respond(request, 200, doc, None);
    }
    if path == format!("/.well-known/oauth-authorization-server{as_path}") && !w.legacy {
        let doc = json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "registration_endpoint": format!("{issuer}/register"),
            "revocation_endpoint": format!("{issuer}/revoke"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
            "authorization_response_iss_parameter_supported": true,
            "scopes_supported": ["mcp:read", "offline_access"],
        });
        let mut doc = doc;
        if w.dpop {
            doc["dpop_signing_alg_values_supported"] = json!(["ES256"]);
        }
        let status = w.metadata_status;
        return respond(request, status, if status == 200 { doc } else { json!({}) }, None);
    }
    let route = path.strip_prefix(as_path).unwrap_or("");
    match (method.as_str(), route) {
        ("POST", "/register") => {
            let reg: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            w.registrations.push(reg);
            let id = w.mint("client");
            respond(request, 201, json!({"client_id": id, "token_endpoint_auth_method": "none"}), None);
        }
        ("GET", "/authorize") if w.forgotten.contains(&form(&query).get("client_id").cloned().unwrap_or_default()) => {
            let doc = json!({"error": "invalid_client", "error_description": "Client ID not found"});
            respond(request, 400, doc, None);
        }
        ("POST", "/token") if w.forgotten.contains(&form(&body).get("client_id").cloned().unwrap_or_default()) => {
            let doc = json!({"error": "invalid_client", "error_description": "Client ID not found"});
            respond(request, 401, doc, None);
        }
        ("GET", "/authorize") => {
            let q = form(&query);
            let code = w.mint("code");
            w.challenges.insert(code.clone(), q.get("code_challenge").cloned().unwrap_or_default());
            let mut location = url::Url::parse(&q["redirect_uri"]).unwrap();
            location.query_pairs_mut().append_pair("code", &code).append_pair("state", &q["state"]);
            match w.iss {
                Iss::Correct if !w.legacy => drop(location.query_pairs_mut().append_pair("iss", &issuer)),
                Iss::Wrong => drop(location.query_pairs_mut().append_pair("iss", "https://evil.example.com")),
                _ => {}
            }
            w.authorizations.push(q);
            respond(request, 302, json!({}), Some(location.as_str()));
        }
        ("POST", "/token") => {
            let f = form(&body);
            w.token_requests.push((f.clone(), authorization.clone()));
            if let Some(status) = w.token_status {
                return respond(request, status, json!({"error": "server_error"}), None);
            }
            let delay = w.token_delay;
            match f.get("grant_type").map(String::as_str) {
                Some("authorization_code") => {
                    let expected = w.challenges.remove(f.get("code").map(String::as_str).unwrap_or_default());
                    let verifier = f.get("code_verifier").cloned().unwrap_or_default();
                    if expected.is_none() || expected != Some(super::pkce::s256(&verifier)) {
                        return respond(request, 400, json!({"error": "invalid_grant"}), None);
                    }
                    let (at, rt) = (w.mint("at"), w.mint("rt"));
                    w.refresh_tokens.insert(rt.clone());
                    let scope = w.authorizations.last().and_then(|q| q.get("scope").cloned());
                    let doc = json!({"access_token": at, "token_type": "Bearer", "expires_in": 3600, "refresh_token": rt, "scope": scope});
                    respond(request, 200, doc, None);
                }
                Some("refresh_token") => {
                    let hook = w.refresh_hook.take();
                    drop(w);
                    std::thread::sleep(delay);
                    if let Some(hook) = &hook {
                        hook();
                    }
                    let mut w = world.lock().unwrap();
                    w.refresh_hook = hook;
                    let old = f.get("refresh_token").cloned().unwrap_or_default();
                    if !w.refresh_tokens.remove(&old) {
                        return respond(
                            request,
                            400,
                            json!({"error": "invalid_grant", "error_description": "unknown refresh token"}),
                            None,
                        );
                    }
                    let (at, rt) = (w.mint("at"), w.mint("rt"));
                    w.refresh_tokens.insert(rt.clone());
                    respond(
                        request,
                        200,
                        json!({"access_token": at, "token_type": "Bearer", "expires_in": 3600, "refresh_token": rt}),
                        None,
                    );
                }
                Some("urn:ietf:params:oauth:grant-type:jwt-bearer") => {
                    // The fake platform's JWTs: `wl.<n>` is valid, anything else is not.
                    if !f.get("assertion").is_some_and(|a| a.starts_with("wl.") || a.starts_with("jag-")) {
                        let doc = json!({"error": "invalid_grant", "error_description": format!("bad assertion {}", f.get("assertion").cloned().unwrap_or_default())});
                        return respond(request, 400, doc, None);
                    }
                    let at = w.mint("wif");
                    respond(request, 200, json!({"access_token": at, "token_type": "Bearer", "expires_in": 60}), None);
                }
                Some("client_credentials") if w.dpop && proof.is_some() => {
                    let proof = proof.unwrap_or_default();
                    w.dpop_proofs.push(proof.clone());
                    if proof_claims(&proof)["nonce"] != "as-nonce" {
                        let response = tiny_http::Response::from_string(json!({"error": "use_dpop_nonce"}).to_string())
                            .with_status_code(400)
                            .with_header(tiny_http::Header::from_bytes(&b"DPoP-Nonce"[..], &b"as-nonce"[..]).unwrap());
                        let _ = request.respond(response);
                        return;
                    }
                    let at = w.mint("dpop");
                    respond(request, 200, json!({"access_token": at, "token_type": "DPoP", "expires_in": 60}), None);
                }
                Some("client_credentials") => {
                    let at = w.mint("cc");
                    respond(request, 200, json!({"access_token": at, "token_type": "Bearer", "expires_in": 60}), None);
                }
                _ => respond(request, 400, json!({"error": "unsupported_grant_type"}), None),
            }
        }
        ("POST", "/idp/token") => {
            // The organisation's identity provider: an ID token for an ID-JAG.
            let f = form(&body);
            w.token_requests.push((f.clone(), authorization.clone()));
            let good = f.get("grant_type").map(String::as_str)
                == Some("urn:ietf:params:oauth:grant-type:token-exchange")
                && f.get("subject_token").is_some_and(|t| t.starts_with("idt."))
                && f.get("audience") == Some(&issuer);
            if !good {
                return respond(request, 400, json!({"error": "invalid_grant"}), None);
            }
            let jag = w.mint("jag");
            let doc = json!({"access_token": jag, "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag", "token_type": "N_A"});
            respond(request, 200, doc, None);
        }
        ("POST", "/revoke") => {
            let f = form(&body);
            w.revoked.push(f.get("token").cloned().unwrap_or_default());
            respond(request, 200, json!({}), None);
        }
        _ => respond(request, 404, json!({"error": "not_found"}), None),
    }
}

// ---------------------------------------------------------------- the engine and the browser

/// Collects reports, and waits for them.
#[derive(Clone, Default)]
struct Reports(Arc<(Mutex<Vec<CredentialUpdate>>, Condvar)>);

impl Reports {
    fn sink(&self) -> super::authority::Report {
        let me = self.clone();
        Arc::new(move |u| {
            let (list, cv) = &*me.0;
            list.lock().unwrap().push(u);
            cv.notify_all();
        })
    }

    /// The `n`th report (from 0), waiting for it (generously).
    fn nth(&self, n: usize) -> CredentialUpdate {
        let (list, cv) = &*self.0;
        let (list, timeout) =
            cv.wait_timeout_while(list.lock().unwrap(), Duration::from_secs(30), |l| l.len() <= n).unwrap();
        assert!(!timeout.timed_out(), "no report #{n} came; got {:?}", *list);
        list[n].clone()
    }

    fn all(&self) -> Vec<CredentialUpdate> {
        self.0 .0.lock().unwrap().clone()
    }
}

fn run(a: &Arc<Authority>, step: AuthStep) -> CredentialUpdate {
    let reports = Reports::default();
    a.execute(step, reports.sink());
    reports.nth(0)
}

fn authority(fake: &Fake, dir: &std::path::Path, settings: OAuthSettings) -> Arc<Authority> {
    let settings = OAuthSettings { open_browser: false, ..settings };
    Arc::new(Authority::new("web".into(), fake.url(), settings, Arc::new(FileStore::new(dir))))
}

/// Plays the browser: opens the authorization URL without following its redirect,
/// then opens the `Location` (the loopback callback). Returns the callback's status.
fn browse(url: &str) -> u16 {
    let agent = ureq::AgentBuilder::new().redirects(0).timeout(Duration::from_secs(20)).build();
    let answer = agent.get(url).call().unwrap();
    assert_eq!(answer.status(), 302);
    let location = answer.header("Location").unwrap().to_owned();
    match agent.get(&location).call() {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(s, _)) => s,
        Err(e) => panic!("the callback failed: {e}"),
    }
}

fn pending_url(update: &CredentialUpdate) -> String {
    match update {
        CredentialUpdate::LoginPending { url } => url.clone(),
        other => panic!("expected LoginPending, got {other:?}"),
    }
}

fn query(url: &str) -> HashMap<String, String> {
    url::Url::parse(url).unwrap().query_pairs().into_owned().collect()
}

fn failed(update: &CredentialUpdate) -> (CredentialFailure, String) {
    match update {
        CredentialUpdate::Failed { reason, message } => (*reason, message.clone()),
        other => panic!("expected Failed, got {other:?}"),
    }
}

fn ready(update: &CredentialUpdate) -> (Option<u64>, bool, Option<String>) {
    match update {
        CredentialUpdate::Ready { expires_in_ms, refreshable, scope } => (*expires_in_ms, *refreshable, scope.clone()),
        other => panic!("expected Ready, got {other:?}"),
    }
}

/// Logs in through the background flow; returns the authorization URL.
fn login(a: &Arc<Authority>) -> String {
    let reports = Reports::default();
    a.execute(AuthStep::Login { challenge: Challenge::default() }, reports.sink());
    let url = pending_url(&reports.nth(0));
    assert_eq!(browse(&url), 200);
    ready(&reports.nth(1));
    url
}

/// Stores a credential issued by the fake (its refresh token valid there).
fn seed(fake: &Fake, dir: &std::path::Path, access: &str, refresh: &str, expires_at: Option<u64>) {
    let (issuer, base) = {
        let mut w = fake.world();
        w.refresh_tokens.insert(refresh.to_owned());
        (w.issuer(), w.base.clone())
    };
    let credential = StoredCredential {
        server_url: format!("{base}/mcp"),
        issuer: issuer.clone(),
        resource: format!("{base}/mcp"),
        token_endpoint: format!("{issuer}/token"),
        revocation_endpoint: Some(format!("{issuer}/revoke")),
        client: ClientRecord {
            client_id: "client-seed".into(),
            client_secret: None,
            source: ClientSource::Registered,
            redirect_uri: Some("http://127.0.0.1:1/callback".into()),
            auth_method: Some("none".into()),
        },
        token: Some(TokenRecord {
            access_token: Secret::new(access),
            refresh_token: Some(Secret::new(refresh)),
            expires_at,
            scope: Some("mcp:read".into()),
            token_type: "Bearer".into(),
            dpop_key: None,
        }),
        updated_at: 0,
    };
    FileStore::new(dir).save(&store_key(&credential.server_url, None), &credential).unwrap();
}

fn stored(fake: &Fake, dir: &std::path::Path) -> Option<StoredCredential> {
    FileStore::new(dir).load(&store_key(&fake.url(), None)).unwrap()
}

fn stored_tokens(fake: &Fake, dir: &std::path::Path) -> (String, String) {
    let t = stored(fake, dir).unwrap().token.unwrap();
    (t.access_token.expose().to_owned(), t.refresh_token.unwrap().expose().to_owned())
}

/// Nothing secret in `text`: no token or code the fake handed out, no verifier it
/// received, no secret the tests configured.
fn assert_clean(text: &str, fake: &Fake) {
    let w = fake.world();
    let verifiers = w.token_requests.iter().filter_map(|(f, _)| f.get("code_verifier"));
    let fixed = ["sekret", "at-seed", "rt-seed", "-----BEGIN"].map(String::from);
    for secret in w.secrets.iter().chain(verifiers).chain(fixed.iter()) {
        assert!(!text.contains(secret.as_str()), "{secret:?} leaked into {text:?}");
    }
}

// ---------------------------------------------------------------- the tests

/// Discovery through the path-aware PRM (the root one is never asked), dynamic
/// registration, a full login in the background, then a refresh whose rotated
/// refresh token is on disk before the engine hears of it.
#[test]
fn discovery_registration_login_and_a_rotating_refresh() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());

    assert_eq!(run(&a, AuthStep::Load), CredentialUpdate::Missing);
    assert_eq!(a.bearer(), None);
    // The backend's 401 carried no resource_metadata: well-known discovery.
    assert_eq!(run(&a, AuthStep::Obtain { challenge: Challenge::default() }), CredentialUpdate::LoginRequired);

    let url = login(&a);
    let q = query(&url);
    let base = fake.world().base.clone();
    assert!(url.starts_with(&format!("{base}/as/authorize?")));
    assert_eq!(q["client_id"], "client-1");
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["resource"], format!("{base}/mcp"));
    // PRM scopes_supported, plus offline_access because the AS lists it.
    assert_eq!(q["scope"], "mcp:read offline_access");
    assert!(q["redirect_uri"].starts_with("http://127.0.0.1:") && q["redirect_uri"].ends_with("/callback"));

    {
        let w = fake.world();
        assert!(w.hits.contains(&"GET /.well-known/oauth-protected-resource/mcp".to_owned()));
        assert!(!w.hits.contains(&"GET /.well-known/oauth-protected-resource".to_owned()));
        assert!(w.hits.contains(&"GET /.well-known/oauth-authorization-server/as".to_owned()));
        assert_eq!(w.registrations.len(), 1);
        let reg = &w.registrations[0];
        assert_eq!(reg["redirect_uris"], json!([q["redirect_uri"]]));
        assert_eq!(reg["grant_types"], json!(["authorization_code", "refresh_token"]));
        assert_eq!(reg["token_endpoint_auth_method"], "none");
        assert_eq!(reg["application_type"], "native");
        let (form, auth) = &w.token_requests[0];
        assert_eq!(form["grant_type"], "authorization_code");
        assert_eq!(form["resource"], format!("{base}/mcp"));
        assert_eq!(form["redirect_uri"], q["redirect_uri"]);
        assert_eq!(form["client_id"], "client-1");
        assert!(auth.is_none());
    }
    let (access, refresh) = stored_tokens(&fake, dir.path());
    assert_eq!(a.bearer().as_deref(), Some(access.as_str()));
    let status = a.status();
    assert!(status.logged_in && status.refreshable && !status.login_pending);
    assert_eq!(status.scope.as_deref(), Some("mcp:read offline_access"));
    assert_clean(&format!("{status} {status:?} {a:?}"), &fake);

    // Refresh: at the moment the engine hears Ready, the store already holds the
    // rotated refresh token, and the old one is dead at the AS.
    let seen_on_report = Arc::new(Mutex::new(None));
    let (probe_dir, probe_url, probe_seen) = (dir.path().to_owned(), fake.url(), seen_on_report.clone());
    let report: super::authority::Report = Arc::new(move |u| {
        let t = FileStore::new(&probe_dir).load(&store_key(&probe_url, None)).unwrap().unwrap().token.unwrap();
        *probe_seen.lock().unwrap() = Some((u, t.refresh_token.unwrap().expose().to_owned()));
    });
    a.execute(AuthStep::Refresh, report);
    let (update, refresh_on_disk) = seen_on_report.lock().unwrap().take().unwrap();
    let (expires_in_ms, refreshable, scope) = ready(&update);
    assert!(refreshable && expires_in_ms.unwrap() > 3_500_000);
    assert_eq!(scope.as_deref(), Some("mcp:read offline_access"), "a refresh keeps the scope");
    let (access2, refresh2) = stored_tokens(&fake, dir.path());
    assert_eq!(refresh_on_disk, refresh2);
    assert_ne!(refresh2, refresh);
    assert_eq!(a.bearer().as_deref(), Some(access2.as_str()));
    assert!(!fake.world().refresh_tokens.contains(&refresh));
    {
        let w = fake.world();
        let (form, _) = w.token_requests.last().unwrap();
        assert_eq!(form["grant_type"], "refresh_token");
        assert_eq!(form["resource"], format!("{base}/mcp"));
        assert!(!form.contains_key("scope"));
    }

    // Another process (a new Authority on the same store) loads it without network.
    let hits = fake.world().hits.len();
    let b = authority(&fake, dir.path(), OAuthSettings::default());
    let (_, refreshable, _) = ready(&run(&b, AuthStep::Load));
    assert!(refreshable);
    assert_eq!(b.bearer().as_deref(), Some(access2.as_str()));
    assert_eq!(fake.world().hits.len(), hits);

    // A second login reuses the registration (its port is free again).
    login(&a);
    assert_eq!(fake.world().registrations.len(), 1);

    // Logout revokes both tokens and forgets everything.
    let (access3, refresh3) = stored_tokens(&fake, dir.path());
    a.logout().unwrap();
    assert_eq!(fake.world().revoked, vec![refresh3, access3]);
    assert_eq!(stored(&fake, dir.path()), None);
    assert_eq!(a.bearer(), None);
    assert!(!a.status().logged_in);
}

/// Two processes sharing a store refresh at once: one refresh grant reaches the
/// AS, the other process adopts its result.
#[test]
fn two_processes_racing_a_refresh_send_one_grant() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    seed(&fake, dir.path(), "at-seed", "rt-seed", Some(unix_now() + 30));
    fake.world().token_delay = Duration::from_millis(300);
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let b = authority(&fake, dir.path(), OAuthSettings::default());
    ready(&run(&a, AuthStep::Load));
    ready(&run(&b, AuthStep::Load));
    assert_eq!(a.bearer().as_deref(), Some("at-seed"));

    let threads: Vec<_> =
        [a.clone(), b.clone()].into_iter().map(|x| std::thread::spawn(move || run(&x, AuthStep::Refresh))).collect();
    for t in threads {
        ready(&t.join().unwrap());
    }
    assert_eq!(fake.world().grants("refresh_token"), 1);
    let (access, _) = stored_tokens(&fake, dir.path());
    assert_ne!(access, "at-seed");
    assert_eq!(a.bearer().as_deref(), Some(access.as_str()));
    assert_eq!(b.bearer().as_deref(), Some(access.as_str()));
}

/// `invalid_grant` because another process rotated the refresh token meanwhile
/// (without the lock: another machine, say): the store is read again and its
/// credential adopted, not reported as a dead grant.
#[test]
fn invalid_grant_after_another_process_rotated_adopts_its_token() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    seed(&fake, dir.path(), "at-seed", "rt-seed", Some(unix_now() + 30));
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    ready(&run(&a, AuthStep::Load));
    // While the grant is in flight the other process uses rt-seed first and stores
    // its rotated credential.
    let (hook_dir, hook_url) = (dir.path().to_owned(), fake.url());
    let world = fake.world.clone();
    fake.world().refresh_hook = Some(Box::new(move || {
        world.lock().unwrap().refresh_tokens.remove("rt-seed");
        let store = FileStore::new(&hook_dir);
        let key = store_key(&hook_url, None);
        let mut c = store.load(&key).unwrap().unwrap();
        c.token = Some(TokenRecord {
            access_token: Secret::new("at-other"),
            refresh_token: Some(Secret::new("rt-other")),
            expires_at: Some(unix_now() + 3600),
            scope: None,
            token_type: "Bearer".into(),
            dpop_key: None,
        });
        store.save(&key, &c).unwrap();
    }));
    let (expires_in_ms, refreshable, _) = ready(&run(&a, AuthStep::Refresh));
    assert!(refreshable && expires_in_ms.unwrap() > 3_000_000);
    assert_eq!(a.bearer().as_deref(), Some("at-other"));
    assert_eq!(fake.world().grants("refresh_token"), 1);
}

/// A dead refresh token: `InvalidGrant` (the store keeps it until the engine asks
/// for `Discard`); `Discard` then drops the token but keeps the registration.
#[test]
fn invalid_grant_then_discard() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    seed(&fake, dir.path(), "at-seed", "rt-seed", Some(unix_now() + 30));
    fake.world().refresh_tokens.clear();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    ready(&run(&a, AuthStep::Load));
    let (reason, message) = failed(&run(&a, AuthStep::Refresh));
    assert_eq!(reason, CredentialFailure::InvalidGrant);
    assert!(message.contains("invalid_grant"), "{message}");
    assert!(!message.contains("rt-seed") && !message.contains("at-seed"));
    assert_eq!(stored_tokens(&fake, dir.path()).1, "rt-seed", "not deleted before Discard");

    let reports = Reports::default();
    a.execute(AuthStep::Discard, reports.sink());
    assert!(reports.all().is_empty(), "Discard is not answered");
    assert_eq!(a.bearer(), None);
    let left = stored(&fake, dir.path()).unwrap();
    assert!(left.token.is_none());
    assert_eq!(left.client.client_id, "client-seed");
    assert_eq!(run(&a, AuthStep::Load), CredentialUpdate::Missing);
}

/// A stored token found expired is never put on a request, even before its
/// refresh comes back; the refreshed one is.
#[test]
fn an_expired_token_is_never_sent() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    seed(&fake, dir.path(), "at-seed", "rt-seed", Some(unix_now() - 10));
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let (expires_in_ms, refreshable, _) = ready(&run(&a, AuthStep::Load));
    assert_eq!((expires_in_ms, refreshable), (Some(0), true));
    assert_eq!(a.authorize("POST", &fake.url()), None, "nothing rather than an expired token");
    ready(&run(&a, AuthStep::Refresh));
    assert!(a.authorize("POST", &fake.url()).unwrap().0.starts_with("Bearer at-"));
}

/// The authorization server forgot the client tether registered (it restarted):
/// the refresh fails with `invalid_client`, the registration is dropped with the
/// grant, and the next login registers again instead of sending the person to an
/// error page with the dead client_id.
#[test]
fn a_registration_the_server_forgot_is_dropped_and_made_again() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    seed(&fake, dir.path(), "at-seed", "rt-seed", Some(unix_now() + 30));
    fake.world().forgotten.insert("client-seed".into());
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    ready(&run(&a, AuthStep::Load));
    let (reason, message) = failed(&run(&a, AuthStep::Refresh));
    assert_eq!(reason, CredentialFailure::InvalidGrant, "{message}");
    assert!(message.contains("invalid_client") && message.contains("registers again"), "{message}");
    assert!(stored(&fake, dir.path()).is_none(), "the dead registration is gone");
    let url = login(&a);
    assert_ne!(query(&url)["client_id"], "client-seed");
    assert_eq!(fake.world().registrations.len(), 1, "registered anew");
    assert_eq!(stored(&fake, dir.path()).unwrap().client.client_id, query(&url)["client_id"]);
}

/// A login that would reuse a stored registration the server no longer knows (it
/// refuses the authorization request outright) registers again first, so the
/// person never meets an error page and the login never waits for nothing.
#[test]
fn a_login_with_a_forgotten_registration_registers_again_first() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let first = login(&a);
    let old = query(&first)["client_id"].clone();
    fake.world().forgotten.insert(old.clone());
    let second = login(&a);
    assert_ne!(query(&second)["client_id"], old);
    assert_eq!(fake.world().registrations.len(), 2);
}

/// A configured client the server refuses by name fails the login at once with
/// what the server said, as a client the configuration must fix.
#[test]
fn a_configured_client_the_server_refuses_fails_the_login_at_once() {
    let fake = Fake::start();
    fake.world().forgotten.insert("configured".into());
    let settings = OAuthSettings { client_id: Some("configured".into()), ..OAuthSettings::default() };
    let a = authority(&fake, tempfile::tempdir().unwrap().path(), settings);
    let (reason, message) = failed(&run(&a, AuthStep::Login { challenge: Challenge::default() }));
    assert_eq!(reason, CredentialFailure::ClientRefused);
    assert!(message.contains("invalid_client: Client ID not found"), "{message}");
}

/// A `Discard` does not delete a credential another process stored meanwhile.
#[test]
fn discard_spares_a_newer_credential() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    seed(&fake, dir.path(), "at-seed", "rt-seed", Some(unix_now() + 30));
    fake.world().refresh_tokens.clear();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    ready(&run(&a, AuthStep::Load));
    failed(&run(&a, AuthStep::Refresh));
    seed(&fake, dir.path(), "at-new", "rt-new", Some(unix_now() + 3600));
    a.execute(AuthStep::Discard, Reports::default().sink());
    assert_eq!(stored_tokens(&fake, dir.path()), ("at-new".into(), "rt-new".into()));
    // And the next Obtain adopts it without a login.
    ready(&run(&a, AuthStep::Obtain { challenge: Challenge::default() }));
    assert_eq!(a.bearer().as_deref(), Some("at-new"));
}

/// The client credentials grant with `client_secret_basic`: no person, renewable,
/// the id and secret form-encoded before base64.
#[test]
fn client_credentials_with_basic_authentication() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let settings = OAuthSettings {
        grant: Grant::ClientCredentials,
        client_id: Some("svc".into()),
        client_secret: Some(Secret::new("sekret:1")),
        ..OAuthSettings::default()
    };
    let a = authority(&fake, dir.path(), settings);
    let (expires_in_ms, refreshable, _) = ready(&run(&a, AuthStep::Obtain { challenge: Challenge::default() }));
    assert!(refreshable && expires_in_ms.unwrap() > 50_000);
    let first = a.bearer().unwrap();
    assert!(first.starts_with("cc-"));
    {
        let w = fake.world();
        let (form, auth) = &w.token_requests[0];
        assert_eq!(form["grant_type"], "client_credentials");
        assert_eq!(form["resource"], format!("{}/mcp", w.base));
        assert!(!form.contains_key("client_secret"));
        assert_eq!(auth.as_deref(), Some(format!("Basic {}", STANDARD.encode("svc:sekret%3A1")).as_str()));
        assert!(w.registrations.is_empty() && w.authorizations.is_empty());
    }
    // Renewal is another client credentials grant.
    ready(&run(&a, AuthStep::Refresh));
    assert_eq!(fake.world().grants("client_credentials"), 2);
    assert_ne!(a.bearer().unwrap(), first);
    let reports = Reports::default();
    a.execute(AuthStep::Login { challenge: Challenge::default() }, reports.sink());
    assert_eq!(failed(&reports.nth(0)).0, CredentialFailure::Rejected);
    assert_eq!(a.status().method, "client credentials");
    assert_clean(&format!("{:?} {:?} {:?}", a, a.status(), stored(&fake, dir.path())), &fake);
}

/// Workload identity: the platform's JWT, read from its file at each exchange
/// (platforms rotate it), is the grant; no person, no client secret, renewable by
/// exchanging again; a refused assertion is `invalid_grant`, and never in a message.
#[test]
fn jwt_bearer_exchanges_the_workload_token_read_at_each_exchange() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "wl.1\n").unwrap();
    let settings = OAuthSettings {
        grant: Grant::JwtBearer,
        client_id: Some("workload".into()),
        assertion_file: Some(file.clone()),
        ..OAuthSettings::default()
    };
    let a = authority(&fake, dir.path(), settings);
    let (expires_in_ms, refreshable, _) = ready(&run(&a, AuthStep::Obtain { challenge: Challenge::default() }));
    assert!(refreshable && expires_in_ms.unwrap() > 50_000);
    assert!(a.bearer().unwrap().starts_with("wif-"));
    {
        let w = fake.world();
        let (form, auth) = &w.token_requests[0];
        assert_eq!(form["grant_type"], "urn:ietf:params:oauth:grant-type:jwt-bearer");
        assert_eq!(form["assertion"], "wl.1");
        assert_eq!(form["client_id"], "workload");
        assert_eq!(form["resource"], format!("{}/mcp", w.base));
        assert_eq!(form["scope"], "mcp:read");
        assert!(auth.is_none());
        assert!(w.registrations.is_empty() && w.authorizations.is_empty());
    }
    // The platform rotated the file: renewal sends the new JWT.
    std::fs::write(&file, "wl.2").unwrap();
    ready(&run(&a, AuthStep::Refresh));
    assert_eq!(fake.world().token_requests[1].0["assertion"], "wl.2");
    assert_eq!(a.status().method, "workload identity (jwt-bearer)");
    // A refused assertion (invalid_grant, its text hidden from the message) is
    // tried again later: no person can log in to mend it, the platform can.
    std::fs::write(&file, "expired.jwt.text").unwrap();
    let (reason, message) = failed(&run(&a, AuthStep::Refresh));
    assert_eq!(reason, CredentialFailure::Unavailable);
    assert!(message.contains("invalid_grant") && !message.contains("expired.jwt.text"), "{message}");
    // No person logs in with this grant.
    let reports = Reports::default();
    a.execute(AuthStep::Login { challenge: Challenge::default() }, reports.sink());
    assert_eq!(failed(&reports.nth(0)).0, CredentialFailure::Rejected);
    // The file gone (the platform rewriting it): tried again later, the error names it.
    std::fs::remove_file(&file).unwrap();
    let (reason, message) = failed(&run(&a, AuthStep::Refresh));
    assert_eq!(reason, CredentialFailure::Unavailable);
    assert!(message.contains("assertion_file"), "{message}");
    // Back, valid again: the next try gets a token.
    std::fs::write(&file, "wl.3").unwrap();
    ready(&run(&a, AuthStep::Refresh));
    // Not readable at all (a directory where the file should be): a configuration
    // to mend, not something a retry fixes.
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let (reason, message) = failed(&run(&a, AuthStep::Refresh));
    assert_eq!(reason, CredentialFailure::Rejected, "{message}");
}

/// Enterprise-managed authorization: the person's ID token becomes an ID-JAG at
/// the identity provider (token exchange, addressed to this backend's
/// authorization server and resource), and the ID-JAG a token at the
/// authorization server (JWT-bearer, the configured client authenticating).
#[test]
fn enterprise_managed_exchanges_the_id_token_then_the_identity_assertion() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let settings = OAuthSettings {
        grant: Grant::EnterpriseManaged,
        client_id: Some("xaa".into()),
        client_secret: Some(Secret::new("xaa-secret")),
        idp_token_endpoint: Some(format!("{}/idp/token", fake.world().issuer())),
        idp_client_id: Some("idp-client".into()),
        id_token: Some(Secret::new("idt.person")),
        ..OAuthSettings::default()
    };
    let a = authority(&fake, dir.path(), settings);
    let (_, refreshable, _) = ready(&run(&a, AuthStep::Obtain { challenge: Challenge::default() }));
    assert!(refreshable);
    assert!(a.bearer().unwrap().starts_with("wif-"));
    {
        let w = fake.world();
        let (exchange, _) = &w.token_requests[0];
        assert_eq!(exchange["requested_token_type"], "urn:ietf:params:oauth:token-type:id-jag");
        assert_eq!(exchange["subject_token_type"], "urn:ietf:params:oauth:token-type:id_token");
        assert_eq!(exchange["audience"], w.issuer());
        assert_eq!(exchange["resource"], format!("{}/mcp", w.base));
        assert_eq!(exchange["client_id"], "idp-client");
        let (grant, auth) = &w.token_requests[1];
        assert_eq!(grant["grant_type"], "urn:ietf:params:oauth:grant-type:jwt-bearer");
        assert!(grant["assertion"].starts_with("jag-"));
        assert_eq!(auth.as_deref(), Some(format!("Basic {}", STANDARD.encode("xaa:xaa-secret")).as_str()));
    }
    assert_eq!(a.status().method, "enterprise-managed (identity assertion)");
    assert_clean(&format!("{:?} {:?} {:?}", a, a.status(), stored(&fake, dir.path())), &fake);
    // The identity provider refusing the ID token: invalid_grant, the token hidden.
    let settings = OAuthSettings {
        grant: Grant::EnterpriseManaged,
        idp_token_endpoint: Some(format!("{}/idp/token", fake.world().issuer())),
        idp_client_id: Some("idp-client".into()),
        id_token: Some(Secret::new("expired-id-token")),
        ..OAuthSettings::default()
    };
    let b = authority(&fake, tempfile::tempdir().unwrap().path(), settings);
    let (reason, message) = failed(&run(&b, AuthStep::Obtain { challenge: Challenge::default() }));
    assert_eq!(reason, CredentialFailure::Unavailable, "tried again: SSO tooling refreshes the ID token");
    assert!(message.contains("identity provider") && !message.contains("expired-id-token"), "{message}");
}

/// DPoP where the authorization server supports it and the resource takes it: the
/// token request carries a proof (again with the server's nonce when it asks for
/// one), the token comes bound, its key is stored with it, and every request to
/// the backend carries `DPoP <token>` and a fresh proof for its method and URL,
/// with the backend's nonce once it gave one; a new process finds the same key.
#[test]
fn dpop_binds_tokens_where_the_authorization_server_supports_it() {
    let fake = Fake::start();
    fake.world().dpop = true;
    fake.world().resource_dpop = true;
    let dir = tempfile::tempdir().unwrap();
    let settings = a_settings();
    let a = authority(&fake, dir.path(), settings.clone());
    ready(&run(&a, AuthStep::Obtain { challenge: Challenge::default() }));
    let token = a.bearer().unwrap();
    assert!(token.starts_with("dpop-"));
    let (first_jwk, token_url) = {
        let w = fake.world();
        assert_eq!(w.dpop_proofs.len(), 2, "a proof, then one with the server's nonce");
        assert!(proof_claims(&w.dpop_proofs[0]).get("nonce").is_none());
        let claims = proof_claims(&w.dpop_proofs[1]);
        assert_eq!((claims["htm"].as_str(), claims["nonce"].as_str()), (Some("POST"), Some("as-nonce")));
        let header = w.dpop_proofs[1].split('.').next().unwrap().to_owned();
        (header, claims["htu"].as_str().unwrap().to_owned())
    };
    assert!(token_url.ends_with("/as/token"), "{token_url}");
    let url = fake.url();
    let (authorization, proof) = a.authorize("POST", &url).unwrap();
    assert_eq!(authorization, format!("DPoP {token}"));
    let claims = proof_claims(proof.as_deref().unwrap());
    assert_eq!((claims["htm"].as_str(), claims["htu"].as_str()), (Some("POST"), Some(url.as_str())));
    assert!(claims["ath"].is_string() && claims.get("nonce").is_none());
    assert!(a.resource_nonce("rs-nonce"));
    let (_, proof2) = a.authorize("GET", &url).unwrap();
    let claims2 = proof_claims(proof2.as_deref().unwrap());
    assert_eq!((claims2["htm"].as_str(), claims2["nonce"].as_str()), (Some("GET"), Some("rs-nonce")));
    assert_ne!(claims["jti"], claims2["jti"]);
    // Stored with its key: another process presents it with the same key.
    let b = authority(&fake, dir.path(), settings);
    ready(&run(&b, AuthStep::Load));
    let (_, proof3) = b.authorize("POST", &url).unwrap();
    assert_eq!(proof3.unwrap().split('.').next().unwrap(), first_jwk, "same key (same header jwk)");
    assert_clean(&format!("{:?} {:?}", a, a.status()), &fake);
    // Turned off, plain bearer tokens.
    let fake = Fake::start();
    fake.world().dpop = true;
    fake.world().resource_dpop = true;
    let plain = OAuthSettings { dpop: false, ..a_settings() };
    let c = authority(&fake, tempfile::tempdir().unwrap().path(), plain);
    ready(&run(&c, AuthStep::Obtain { challenge: Challenge::default() }));
    assert!(c.authorize("POST", &fake.url()).unwrap().0.starts_with("Bearer cc-"));
}

/// The authorization server offers DPoP but the resource does not say it takes
/// it (its metadata lists no DPoP algorithm, its refusal offers `Bearer` only):
/// plain bearer tokens, which it takes, and no proof at the token endpoint. A
/// refusal offering the `DPoP` scheme is enough to bind.
#[test]
fn dpop_only_where_the_resource_takes_it() {
    let fake = Fake::start();
    fake.world().dpop = true;
    let a = authority(&fake, tempfile::tempdir().unwrap().path(), a_settings());
    let bearer_only = Challenge { error: Some("invalid_token".into()), ..Challenge::default() };
    ready(&run(&a, AuthStep::Obtain { challenge: bearer_only }));
    let (authorization, proof) = a.authorize("POST", &fake.url()).unwrap();
    assert!(authorization.starts_with("Bearer cc-") && proof.is_none(), "{authorization}");
    assert!(fake.world().dpop_proofs.is_empty(), "no proof at the token endpoint");
    let fake = Fake::start();
    fake.world().dpop = true;
    let b = authority(&fake, tempfile::tempdir().unwrap().path(), a_settings());
    let offers_dpop = Challenge { dpop: true, ..Challenge::default() };
    ready(&run(&b, AuthStep::Obtain { challenge: offers_dpop }));
    assert!(b.authorize("POST", &fake.url()).unwrap().0.starts_with("DPoP dpop-"));
}

fn a_settings() -> OAuthSettings {
    OAuthSettings {
        grant: Grant::ClientCredentials,
        client_id: Some("svc".into()),
        client_secret: Some(Secret::new("s")),
        ..OAuthSettings::default()
    }
}

/// The AS failing (5xx), or not there at all: `Unavailable`, the held token kept.
#[test]
fn authorization_server_failures_are_unavailable() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    seed(&fake, dir.path(), "at-seed", "rt-seed", Some(unix_now() + 30));
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    ready(&run(&a, AuthStep::Load));

    fake.world().token_status = Some(503);
    let (reason, message) = failed(&run(&a, AuthStep::Refresh));
    assert_eq!(reason, CredentialFailure::Unavailable);
    assert!(message.contains("503"), "{message}");
    assert_eq!(a.bearer().as_deref(), Some("at-seed"));

    fake.world().metadata_status = 502;
    let (reason, _) = failed(&run(&a, AuthStep::Obtain { challenge: Challenge::default() }));
    assert_eq!(reason, CredentialFailure::Unavailable);

    // Nothing listening at the token endpoint.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let key = store_key(&fake.url(), None);
    let store = FileStore::new(dir.path());
    let mut c = store.load(&key).unwrap().unwrap();
    c.token_endpoint = format!("http://127.0.0.1:{port}/token");
    store.save(&key, &c).unwrap();
    let (reason, _) = failed(&run(&a, AuthStep::Refresh));
    assert_eq!(reason, CredentialFailure::Unavailable);
    assert_eq!(stored_tokens(&fake, dir.path()).1, "rt-seed");
}

/// RFC 9207: an `iss` naming another issuer fails the login (`Rejected`) before
/// the code is ever sent to a token endpoint.
#[test]
fn a_wrong_iss_rejects_the_login() {
    let fake = Fake::start();
    fake.world().iss = Iss::Wrong;
    let dir = tempfile::tempdir().unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let reports = Reports::default();
    a.execute(AuthStep::Login { challenge: Challenge::default() }, reports.sink());
    let url = pending_url(&reports.nth(0));
    assert!(a.status().login_pending);
    assert_eq!(browse(&url), 400);
    let (reason, message) = failed(&reports.nth(1));
    assert_eq!(reason, CredentialFailure::Rejected);
    assert!(message.contains("evil.example.com"), "{message}");
    assert_eq!(fake.world().token_requests.len(), 0);
    assert_eq!(a.bearer(), None);
    assert!(!a.status().login_pending);
    assert_clean(&message, &fake);
}

/// Protected resource metadata for another resource: `Rejected`, and no
/// authorization request is ever made.
#[test]
fn a_mismatched_resource_is_rejected_before_any_authorization() {
    let fake = Fake::start();
    fake.world().prm_resource = Some("https://evil.example.com/mcp".into());
    let dir = tempfile::tempdir().unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let (reason, message) = failed(&run(&a, AuthStep::Login { challenge: Challenge::default() }));
    assert_eq!(reason, CredentialFailure::Rejected);
    assert!(message.contains("evil.example.com"), "{message}");
    let w = fake.world();
    assert!(w.registrations.is_empty() && w.authorizations.is_empty());
}

/// A credential stored for another authorization server (the PRM now names a new
/// one): neither its tokens nor its registration are used there.
#[test]
fn a_new_authorization_server_means_a_new_registration() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    seed(&fake, dir.path(), "at-old", "rt-old", Some(unix_now() + 3600));
    let key = store_key(&fake.url(), None);
    let store = FileStore::new(dir.path());
    let mut c = store.load(&key).unwrap().unwrap();
    c.issuer = "http://127.0.0.1:1/old-as".into();
    c.token_endpoint = "http://127.0.0.1:1/old-as/token".into();
    c.client.redirect_uri = None;
    store.save(&key, &c).unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    ready(&run(&a, AuthStep::Load));
    // The backend refuses the old token; discovery names the fake's AS.
    assert_eq!(run(&a, AuthStep::Obtain { challenge: Challenge::default() }), CredentialUpdate::LoginRequired);
    assert_eq!(a.bearer(), None, "the old AS's token is no longer presented");
    let url = login(&a);
    assert_eq!(query(&url)["client_id"], "client-1");
    let w = fake.world();
    assert_eq!(w.registrations.len(), 1);
    assert_eq!(w.grants("refresh_token"), 0);
    assert!(w.token_requests.iter().all(|(f, _)| f.get("client_id").map(String::as_str) != Some("client-seed")));
    drop(w);
    assert_eq!(stored(&fake, dir.path()).unwrap().issuer, fake.world().issuer());
}

/// Step-up: a challenge's scope is joined with what was granted before; the scope
/// of an `Obtain`'s challenge is remembered for the login that follows.
#[test]
fn scopes_follow_the_challenges() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let basic = Challenge { scope: Some("mcp:basic".into()), ..Challenge::default() };
    assert_eq!(run(&a, AuthStep::Obtain { challenge: basic }), CredentialUpdate::LoginRequired);
    let url = login(&a);
    assert_eq!(query(&url)["scope"], "mcp:basic offline_access");
    let write =
        Challenge { error: Some("insufficient_scope".into()), scope: Some("mcp:write".into()), ..Challenge::default() };
    let reports = Reports::default();
    a.execute(AuthStep::Login { challenge: write }, reports.sink());
    let url = pending_url(&reports.nth(0));
    assert_eq!(query(&url)["scope"], "mcp:basic offline_access mcp:write");
    assert_eq!(browse(&url), 200);
    let (_, _, scope) = ready(&reports.nth(1));
    assert_eq!(scope.as_deref(), Some("mcp:basic offline_access mcp:write"));
}

/// A 2025-03-26 server: no PRM, no metadata; the default endpoints at the origin.
#[test]
fn a_2025_03_26_server_uses_the_default_endpoints() {
    let fake = Fake::start_with(true);
    let dir = tempfile::tempdir().unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let url = login(&a);
    let base = fake.world().base.clone();
    assert!(url.starts_with(&format!("{base}/authorize?")));
    let q = query(&url);
    assert_eq!(q["resource"], format!("{base}/mcp"));
    assert!(!q.contains_key("scope"));
    let w = fake.world();
    assert!(w.hits.contains(&"GET /.well-known/oauth-protected-resource".to_owned()));
    assert!(w.hits.contains(&"GET /.well-known/oauth-authorization-server".to_owned()));
    assert!(w.hits.contains(&"POST /register".to_owned()));
    assert_eq!(w.grants("authorization_code"), 1);
}

/// A login started while another waits replaces it: the first never reports.
#[test]
fn a_new_login_replaces_a_waiting_one() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let first = Reports::default();
    a.execute(AuthStep::Login { challenge: Challenge::default() }, first.sink());
    pending_url(&first.nth(0));
    let second = Reports::default();
    a.execute(AuthStep::Login { challenge: Challenge::default() }, second.sink());
    let url = pending_url(&second.nth(0));
    assert_eq!(browse(&url), 200);
    ready(&second.nth(1));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(first.all().len(), 1, "the replaced login reported: {:?}", first.all());
}

/// A login finished elsewhere (`tether auth login`, another process) lands in the
/// store: the `Load` that finds it ends the login waiting here, whose listener
/// would otherwise hold its port for ten minutes, and which reports nothing.
#[test]
fn a_login_made_elsewhere_ends_the_one_waiting_here() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let reports = Reports::default();
    a.execute(AuthStep::Login { challenge: Challenge::default() }, reports.sink());
    let url = pending_url(&reports.nth(0));
    assert!(a.status().login_pending);
    let redirect = url::Url::parse(&query(&url)["redirect_uri"]).unwrap();
    let port = redirect.port().unwrap();
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(), "the login listens");

    seed(&fake, dir.path(), "at-seed", "rt-seed", Some(unix_now() + 3600));
    ready(&run(&a, AuthStep::Load));
    assert!(!a.status().login_pending);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(std::time::Instant::now() < deadline, "the abandoned login still listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(reports.all().len(), 1, "the abandoned login reported: {:?}", reports.all());
}

/// The CLI's blocking login: the URL is printed, the test opens it as the person
/// would, the credential is stored.
#[test]
fn the_blocking_login_prints_waits_and_stores() {
    /// Plays the person reading the terminal: opens the URL once it is printed.
    struct Terminal(Vec<u8>, Option<std::thread::JoinHandle<u16>>);
    impl std::io::Write for Terminal {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.extend_from_slice(buf);
            let text = String::from_utf8_lossy(&self.0).into_owned();
            if self.1.is_none() {
                if let Some(url) =
                    text.split_whitespace().find(|w| w.starts_with("http://") && w.contains("/authorize?"))
                {
                    let url = url.to_owned();
                    self.1 = Some(std::thread::spawn(move || browse(&url)));
                }
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let a = authority(&fake, dir.path(), OAuthSettings::default());
    let mut terminal = Terminal(Vec::new(), None);
    let summary = a.login_blocking(&mut terminal).unwrap();
    assert_eq!(terminal.1.take().unwrap().join().unwrap(), 200);
    assert_eq!(summary.issuer, fake.world().issuer());
    assert!(summary.refreshable);
    assert!(summary.expires_at.unwrap() > unix_now());
    assert!(stored(&fake, dir.path()).unwrap().token.is_some());
    let printed = String::from_utf8(terminal.0).unwrap();
    assert!(printed.contains("open this URL"), "{printed}");
    assert_clean(&format!("{summary:?}"), &fake);
}
