//! A remote MCP backend behind its own OAuth 2.1 authorization server, both on one
//! loopback port, for end-to-end tests of tether's OAuth client.
//!
//! As authorization server it publishes RFC 8414 metadata, registers clients on
//! the fly (RFC 7591, public clients only), answers `/authorize` with a redirect
//! carrying `code`, `state` and `iss` (RFC 9207), and grants tokens for
//! `authorization_code` (PKCE S256 checked) and `refresh_token`. Access tokens live
//! as long as the test says; every refresh rotates the refresh token, and a used
//! one presented again is answered `invalid_grant` and counted as a violation.
//! [`OAuthBackend::revoke`] kills every grant issued so far, access tokens
//! included.
//!
//! As protected resource it publishes RFC 9728 metadata and serves a minimal MCP
//! endpoint at `/mcp` (one tool, `whoami`) to requests bearing a live access
//! token; the others get 401 with a `WWW-Authenticate: Bearer` challenge.
//!
//! It counts what a test asserts on ([`Tally`]) and keeps every token it issued
//! ([`OAuthBackend::issued_secrets`]) so a test can check none leaked.

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};

/// Threads answering requests: enough that 32 concurrent calls through tether and
/// a refresh never wait for one another.
const WORKERS: usize = 48;
/// The name of the one tool the backend serves.
pub const TOOL: &str = "whoami";

/// What the backend saw, for assertions. Counts only grow; compare two snapshots
/// to measure a window.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Clients registered (RFC 7591).
    pub registrations: u64,
    /// Authorization codes exchanged for tokens (one per finished login).
    pub logins: u64,
    /// Refresh grants answered with new tokens.
    pub refreshes: u64,
    /// When each of those refreshes was granted, in order.
    pub refresh_times: Vec<Instant>,
    /// Refresh grants refused because their grant was revoked.
    pub refused_refreshes: u64,
    /// Refresh tokens presented after they had been used (rotated away): must
    /// never happen.
    pub reused_refresh_tokens: u64,
    /// Refresh tokens presented that were never issued: must never happen.
    pub unknown_refresh_tokens: u64,
    /// The most refresh grants that were being answered at one moment.
    pub max_concurrent_refreshes: u64,
    /// Access tokens whose lifetime has run out by now.
    pub expiries: u64,
    /// MCP requests refused because their access token had expired.
    pub expired_presented: u64,
    /// MCP requests refused because their access token belonged to a revoked grant.
    pub revoked_presented: u64,
    /// MCP requests refused for bearing no token or one never issued.
    pub unknown_presented: u64,
    /// `tools/call` requests answered.
    pub calls: u64,
}

/// A running backend; stopped on drop.
pub struct OAuthBackend {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

struct Shared {
    base: String,
    lifetime: Duration,
    state: Mutex<State>,
    /// Refresh grants wait (unanswered, unprocessed) while this is set.
    hold: AtomicBool,
    /// Held refresh grants are dropped unprocessed when released (as if they
    /// never arrived: the refresh token stays good).
    drop_held: AtomicBool,
    /// The peers of the refresh grants being held.
    held: Mutex<Vec<std::net::SocketAddr>>,
}

#[derive(Default)]
struct State {
    next: u64,
    /// Registered clients: their redirect URIs.
    clients: HashMap<String, Vec<String>>,
    codes: HashMap<String, PendingCode>,
    access: HashMap<String, AccessToken>,
    refresh: HashMap<String, RefreshToken>,
    /// Grants by id: revoked or not.
    revoked: Vec<bool>,
    refreshing: u64,
    tally: Tally,
    secrets: Vec<String>,
}

struct PendingCode {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    resource: String,
    scope: Option<String>,
}

struct AccessToken {
    grant: usize,
    expires: Instant,
}

struct RefreshToken {
    grant: usize,
    client_id: String,
    scope: Option<String>,
    used: bool,
}

impl State {
    /// A fresh value; tokens and codes are remembered as secrets.
    fn mint(&mut self, prefix: &str) -> String {
        self.next += 1;
        let value = format!("{prefix}-{:04}-{:08x}", self.next, random_u32());
        if prefix != "client" {
            self.secrets.push(value.clone());
        }
        value
    }

    /// Issues an access token and a refresh token of `grant`: the token response.
    fn issue(&mut self, grant: usize, client_id: &str, scope: Option<String>, lifetime: Duration) -> Value {
        let access = self.mint("at");
        let refresh = self.mint("rt");
        self.access.insert(access.clone(), AccessToken { grant, expires: Instant::now() + lifetime });
        self.refresh.insert(
            refresh.clone(),
            RefreshToken { grant, client_id: client_id.to_owned(), scope: scope.clone(), used: false },
        );
        let mut body = json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": lifetime.as_secs().max(1),
            "refresh_token": refresh,
        });
        if let Some(scope) = scope {
            body["scope"] = json!(scope);
        }
        body
    }
}

impl OAuthBackend {
    /// Starts the backend on a free loopback port; its access tokens live `lifetime`
    /// (whole seconds, at least one).
    pub fn start(lifetime: Duration) -> OAuthBackend {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1:0"));
        let port = server.server_addr().to_ip().expect("an IP listener").port();
        let shared = Arc::new(Shared {
            base: format!("http://127.0.0.1:{port}"),
            lifetime: Duration::from_secs(lifetime.as_secs().max(1)),
            state: Mutex::new(State::default()),
            hold: AtomicBool::new(false),
            drop_held: AtomicBool::new(false),
            held: Mutex::new(Vec::new()),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..WORKERS)
            .map(|i| {
                let (server, shared, stop) = (server.clone(), shared.clone(), stop.clone());
                std::thread::Builder::new()
                    .name(format!("oauth-backend-{i}"))
                    .spawn(move || {
                        while !stop.load(Ordering::SeqCst) {
                            match server.recv_timeout(Duration::from_millis(100)) {
                                Ok(Some(request)) => shared.handle(request),
                                Ok(None) => {}
                                Err(_) => break,
                            }
                        }
                    })
                    .expect("spawn a backend worker")
            })
            .collect();
        OAuthBackend { shared, stop, workers }
    }

    /// `http://127.0.0.1:<port>`: the issuer, and the origin of everything else.
    pub fn base(&self) -> &str {
        &self.shared.base
    }

    /// The MCP endpoint (the protected resource).
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.shared.base)
    }

    /// What it counted so far.
    pub fn tally(&self) -> Tally {
        let state = self.shared.state();
        let now = Instant::now();
        let mut tally = state.tally.clone();
        tally.expiries = state.access.values().filter(|t| t.expires <= now).count() as u64;
        tally
    }

    /// Revokes every grant issued so far: their access tokens are refused from now
    /// on and their refresh tokens answered `invalid_grant`. A later login starts
    /// a grant that works.
    pub fn revoke(&self) {
        let mut state = self.shared.state();
        state.revoked.iter_mut().for_each(|r| *r = true);
    }

    /// From now on refresh grants are held: neither processed nor answered,
    /// until [`OAuthBackend::drop_held_refreshes`].
    pub fn hold_refreshes(&self) {
        self.shared.hold.store(true, Ordering::SeqCst);
    }

    /// Where the refresh grants held now come from (the clients' addresses).
    pub fn held_refreshes(&self) -> Vec<std::net::SocketAddr> {
        self.shared.held.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lets the held refresh grants go unprocessed (their clients are gone: the
    /// refresh tokens they carried stay good), and stops holding.
    pub fn drop_held_refreshes(&self) {
        self.shared.drop_held.store(true, Ordering::SeqCst);
        self.shared.hold.store(false, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.held_refreshes().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.shared.drop_held.store(false, Ordering::SeqCst);
    }

    /// Every token and code it issued.
    pub fn issued_secrets(&self) -> Vec<String> {
        self.shared.state().secrets.clone()
    }
}

impl Drop for OAuthBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // A test that failed while refreshes were held must not hang joining them.
        self.shared.drop_held.store(true, Ordering::SeqCst);
        self.shared.hold.store(false, Ordering::SeqCst);
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// What one request gets back.
struct Reply {
    status: u16,
    body: Option<Value>,
    headers: Vec<(&'static str, String)>,
}

impl Reply {
    fn json(status: u16, body: Value) -> Reply {
        Reply { status, body: Some(body), headers: Vec::new() }
    }

    fn empty(status: u16) -> Reply {
        Reply { status, body: None, headers: Vec::new() }
    }

    /// An OAuth error answer (RFC 6749 §5.2).
    fn oauth_error(status: u16, error: &str, description: &str) -> Reply {
        Reply::json(status, json!({"error": error, "error_description": description}))
    }

    fn with(mut self, name: &'static str, value: String) -> Reply {
        self.headers.push((name, value));
        self
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn handle(&self, mut request: tiny_http::Request) {
        let mut body = Vec::new();
        let _ = request.as_reader().take(1024 * 1024).read_to_end(&mut body);
        let target = request.url().to_owned();
        let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
        let post = *request.method() == tiny_http::Method::Post;
        let bearer = header(&request, "Authorization").and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned())
        });
        let reply = match path {
            "/.well-known/oauth-authorization-server" => Reply::json(200, self.server_metadata()),
            "/.well-known/oauth-protected-resource/mcp" => Reply::json(200, self.resource_metadata()),
            "/register" if post => self.register(&body),
            "/authorize" => self.authorize(query),
            "/token" if post => self.token(&body, request.remote_addr().copied()),
            "/mcp" => self.mcp(bearer.as_deref(), post, &body),
            _ => Reply::json(404, json!({"error": "not_found"})),
        };
        let mut response = match &reply.body {
            Some(body) => tiny_http::Response::from_string(body.to_string())
                .with_header(header_of("Content-Type", "application/json")),
            None => tiny_http::Response::from_string(String::new()),
        }
        .with_status_code(reply.status)
        .with_header(header_of("Cache-Control", "no-store"));
        for (name, value) in &reply.headers {
            response = response.with_header(header_of(name, value));
        }
        let _ = request.respond(response);
    }

    fn server_metadata(&self) -> Value {
        let base = &self.base;
        json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/authorize"),
            "token_endpoint": format!("{base}/token"),
            "registration_endpoint": format!("{base}/register"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "authorization_response_iss_parameter_supported": true,
            "scopes_supported": ["mcp", "offline_access"],
        })
    }

    fn resource_metadata(&self) -> Value {
        json!({
            "resource": format!("{}/mcp", self.base),
            "authorization_servers": [self.base],
            "scopes_supported": ["mcp"],
            "bearer_methods_supported": ["header"],
        })
    }

    /// RFC 7591: public clients with loopback redirect URIs.
    fn register(&self, body: &[u8]) -> Reply {
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return Reply::oauth_error(400, "invalid_client_metadata", "the body is not JSON");
        };
        let uris: Vec<String> = request["redirect_uris"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        if uris.is_empty() || !uris.iter().all(|u| u.starts_with("http://127.0.0.1:")) {
            return Reply::oauth_error(400, "invalid_redirect_uri", "loopback redirect URIs only");
        }
        let method = request["token_endpoint_auth_method"].as_str().unwrap_or("none");
        if method != "none" {
            return Reply::oauth_error(400, "invalid_client_metadata", "only public clients are registered here");
        }
        let mut state = self.state();
        let client_id = state.mint("client");
        state.clients.insert(client_id.clone(), uris.clone());
        state.tally.registrations += 1;
        Reply::json(
            201,
            json!({
                "client_id": client_id,
                "redirect_uris": uris,
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
            }),
        )
    }

    /// The person logs in at once: a redirect back with a code, `state` and `iss`.
    /// A client or redirect URI it does not know gets an error page, no redirect.
    fn authorize(&self, query: &str) -> Reply {
        let q = form(query.as_bytes());
        let get = |k: &str| q.get(k).cloned().unwrap_or_default();
        let (client_id, redirect_uri) = (get("client_id"), get("redirect_uri"));
        let mut state = self.state();
        let known = state.clients.get(&client_id).is_some_and(|uris| uris.contains(&redirect_uri));
        if !known {
            return Reply::json(
                400,
                json!({"error": "invalid_request", "error_description": "unknown client or redirect_uri"}),
            );
        }
        let mut location = url::Url::parse(&redirect_uri).expect("registered redirect URIs parse");
        let refuse = |mut location: url::Url, error: &str| {
            location
                .query_pairs_mut()
                .append_pair("error", error)
                .append_pair("state", &get("state"))
                .append_pair("iss", &self.base);
            Reply::empty(302).with("Location", location.to_string())
        };
        if get("response_type") != "code" {
            return refuse(location, "unsupported_response_type");
        }
        if get("code_challenge_method") != "S256" || get("code_challenge").is_empty() {
            return refuse(location, "invalid_request");
        }
        if get("resource") != format!("{}/mcp", self.base) {
            return refuse(location, "invalid_target");
        }
        let code = state.mint("code");
        let scope = q.get("scope").cloned();
        let pending =
            PendingCode { client_id, redirect_uri, challenge: get("code_challenge"), resource: get("resource"), scope };
        state.codes.insert(code.clone(), pending);
        location
            .query_pairs_mut()
            .append_pair("code", &code)
            .append_pair("state", &get("state"))
            .append_pair("iss", &self.base);
        Reply::empty(302).with("Location", location.to_string())
    }

    fn token(&self, body: &[u8], peer: Option<std::net::SocketAddr>) -> Reply {
        let form = form(body);
        let get = |k: &str| form.get(k).cloned().unwrap_or_default();
        if get("grant_type") == "refresh_token" && self.hold.load(Ordering::SeqCst) {
            let held = || self.held.lock().unwrap_or_else(|e| e.into_inner());
            let peer = peer.unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
            held().push(peer);
            while self.hold.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(10));
            }
            held().retain(|p| *p != peer);
            if self.drop_held.load(Ordering::SeqCst) {
                return Reply::oauth_error(503, "temporarily_unavailable", "dropped unprocessed");
            }
        }
        match get("grant_type").as_str() {
            "authorization_code" => self.exchange_code(
                &get("code"),
                &get("client_id"),
                &get("redirect_uri"),
                &get("code_verifier"),
                &get("resource"),
            ),
            "refresh_token" => self.refresh(&get("refresh_token"), &get("client_id"), &get("resource")),
            _ => Reply::oauth_error(400, "unsupported_grant_type", "authorization_code or refresh_token"),
        }
    }

    fn exchange_code(&self, code: &str, client_id: &str, redirect_uri: &str, verifier: &str, resource: &str) -> Reply {
        let mut state = self.state();
        let Some(pending) = state.codes.remove(code) else {
            return Reply::oauth_error(400, "invalid_grant", "unknown or used authorization code");
        };
        if pending.client_id != client_id || pending.redirect_uri != redirect_uri {
            return Reply::oauth_error(400, "invalid_grant", "the code was issued to another client or redirect URI");
        }
        if pkce_challenge(verifier) != pending.challenge {
            return Reply::oauth_error(400, "invalid_grant", "code_verifier does not match the code_challenge");
        }
        if resource != pending.resource {
            return Reply::oauth_error(400, "invalid_target", "resource differs from the authorization request");
        }
        let grant = state.revoked.len();
        state.revoked.push(false);
        state.tally.logins += 1;
        Reply::json(200, state.issue(grant, client_id, pending.scope, self.lifetime))
    }

    /// The refresh grant with rotation: the refresh token presented is spent, a new
    /// one comes with the new access token.
    fn refresh(&self, token: &str, client_id: &str, resource: &str) -> Reply {
        let mut state = self.state();
        state.refreshing += 1;
        state.tally.max_concurrent_refreshes = state.tally.max_concurrent_refreshes.max(state.refreshing);
        let reply = self.refresh_locked(&mut state, token, client_id, resource);
        drop(state);
        // Hold the "in flight" mark a moment, so overlapping refreshes show.
        std::thread::sleep(Duration::from_millis(20));
        self.state().refreshing -= 1;
        reply
    }

    fn refresh_locked(&self, state: &mut State, token: &str, client_id: &str, resource: &str) -> Reply {
        let Some(found) = state.refresh.get(token) else {
            state.tally.unknown_refresh_tokens += 1;
            return Reply::oauth_error(400, "invalid_grant", "unknown refresh token");
        };
        let (grant, used, owner, scope) = (found.grant, found.used, found.client_id.clone(), found.scope.clone());
        if owner != client_id {
            return Reply::oauth_error(400, "invalid_grant", "the refresh token was issued to another client");
        }
        if used {
            state.tally.reused_refresh_tokens += 1;
            return Reply::oauth_error(400, "invalid_grant", "refresh token already used (rotated)");
        }
        if state.revoked[grant] {
            state.tally.refused_refreshes += 1;
            return Reply::oauth_error(400, "invalid_grant", "the grant was revoked");
        }
        if resource != format!("{}/mcp", self.base) {
            return Reply::oauth_error(400, "invalid_target", "unknown resource");
        }
        state.refresh.get_mut(token).expect("found above").used = true;
        state.tally.refreshes += 1;
        state.tally.refresh_times.push(Instant::now());
        Reply::json(200, state.issue(grant, client_id, scope, self.lifetime))
    }

    /// The protected MCP endpoint.
    fn mcp(&self, bearer: Option<&str>, post: bool, body: &[u8]) -> Reply {
        if let Err(why) = self.check_bearer(bearer) {
            let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", self.base);
            let challenge = match why {
                Some(why) => format!(
                    r#"Bearer error="invalid_token", error_description="{why}", resource_metadata="{metadata}", scope="mcp""#
                ),
                None => format!(r#"Bearer resource_metadata="{metadata}", scope="mcp""#),
            };
            return Reply::json(401, json!({"error": "invalid_token"})).with("WWW-Authenticate", challenge);
        }
        if !post {
            return Reply::empty(405).with("Allow", "POST".into());
        }
        let Ok(message) = serde_json::from_slice::<Value>(body) else {
            return Reply::json(
                400,
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}}),
            );
        };
        let (Some(id), Some(method)) = (message.get("id"), message["method"].as_str()) else {
            return Reply::empty(202); // a notification or a response
        };
        let result = match method {
            "initialize" => {
                let asked = message["params"]["protocolVersion"].as_str().unwrap_or("2025-11-25");
                let version =
                    if ["2025-11-25", "2025-06-18", "2025-03-26"].contains(&asked) { asked } else { "2025-11-25" };
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "oauth-backend", "version": "1"},
                })
            }
            "ping" => json!({}),
            "tools/list" => json!({"tools": [{
                "name": TOOL,
                "description": "Says which call this is.",
                "inputSchema": {"type": "object", "properties": {}},
                "annotations": {"readOnlyHint": true},
            }]}),
            "tools/call" if message["params"]["name"] == TOOL => {
                let mut state = self.state();
                state.tally.calls += 1;
                let n = state.tally.calls;
                json!({"content": [{"type": "text", "text": format!("call {n}")}]})
            }
            _ => {
                let error = json!({"code": -32601, "message": format!("method not found: {method}")});
                return Reply::json(200, json!({"jsonrpc": "2.0", "id": id, "error": error}));
            }
        };
        Reply::json(200, json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }

    /// `Ok` for a live access token; else why not (`None`: no token at all).
    fn check_bearer(&self, bearer: Option<&str>) -> Result<(), Option<&'static str>> {
        let Some(bearer) = bearer else {
            self.state().tally.unknown_presented += 1;
            return Err(None);
        };
        let mut state = self.state();
        let Some(token) = state.access.get(bearer) else {
            state.tally.unknown_presented += 1;
            return Err(Some("unknown token"));
        };
        let (grant, expired) = (token.grant, token.expires <= Instant::now());
        if state.revoked[grant] {
            state.tally.revoked_presented += 1;
            return Err(Some("the grant was revoked"));
        }
        if expired {
            state.tally.expired_presented += 1;
            return Err(Some("the token expired"));
        }
        Ok(())
    }
}

/// The S256 code challenge of `verifier` (RFC 7636 §4.2).
fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()))
}

/// A form or query string as a map (the first value of each name).
fn form(bytes: &[u8]) -> HashMap<String, String> {
    let mut map = HashMap::new();
    for (k, v) in url::form_urlencoded::parse(bytes) {
        map.entry(k.into_owned()).or_insert_with(|| v.into_owned());
    }
    map
}

fn header<'a>(request: &'a tiny_http::Request, name: &'static str) -> Option<&'a str> {
    request.headers().iter().find(|h| h.field.equiv(name)).map(|h| h.value.as_str())
}

fn header_of(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("headers built here are ASCII")
}

/// Unpredictable enough that tokens of two runs never match.
fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).expect("system randomness");
    u32::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_rfc_7636s_example() {
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
