//! The person's part of the authorization code flow: which scopes to ask for, the
//! authorization URL, and the loopback listener that receives the browser's
//! redirect (RFC 8252 §7.3) and checks it (`state`, RFC 9207 `iss`) before the code
//! is exchanged.
//!
//! The listener binds 127.0.0.1 (an ephemeral port unless one is configured or a
//! stored registration names one), serves `/callback` once, answers other paths
//! with 404, ignores callbacks with a `state` it did not issue (a stale tab cannot
//! end the flow), and gives up after [`LOGIN_TIMEOUT`]. Two implementations, one
//! per runtime model: with the feature `login-hyper` (the smol runtime's) it is
//! hyper's server driven by async-io on the waiting thread; with `login-blocking`
//! (the threads runtime's, which carries no async crate) a blocking server.

use std::time::Duration;

use super::discovery::ServerMetadata;
use super::secret::Secret;
use super::transport::printable;
use super::Failure;

/// The path of the redirect URI.
pub(super) const REDIRECT_PATH: &str = "/callback";
/// How long a person has to finish logging in.
pub(super) const LOGIN_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the listener looks at its cancel flag.
const POLL: Duration = Duration::from_millis(200);

/// The scopes to ask for, as the MCP spec's scope selection strategy says: the
/// challenge's `scope` (joined, SEP-2350, with what was asked for or granted
/// before and with the configured scopes, so a step-up does not lose them); else
/// the configured scopes; else the protected resource's `scopes_supported`; else
/// none (the parameter is omitted). `offline_access` is added when the
/// authorization server lists it (SEP-2207), to get a refresh token, and only to a
/// non-empty request (alone it would replace the server's default scopes).
pub(super) fn select_scope(
    challenged: Option<&str>,
    prior: &[&str],
    configured: Option<&str>,
    resource_scopes: Option<&[String]>,
    server: &ServerMetadata,
) -> Option<String> {
    fn add(scopes: &mut Vec<String>, s: &str) {
        for scope in s.split_whitespace() {
            if !scopes.iter().any(|x| x == scope) {
                scopes.push(scope.to_owned());
            }
        }
    }
    let mut scopes = Vec::new();
    if let Some(challenged) = challenged.filter(|s| !s.trim().is_empty()) {
        configured.into_iter().chain(prior.iter().copied()).for_each(|s| add(&mut scopes, s));
        add(&mut scopes, challenged);
    } else if let Some(configured) = configured {
        add(&mut scopes, configured);
    } else if let Some(listed) = resource_scopes {
        listed.iter().for_each(|s| add(&mut scopes, s));
    }
    if !scopes.is_empty() && server.lists_scope("offline_access") {
        add(&mut scopes, "offline_access");
    }
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

/// The parameters of one authorization request.
#[derive(Debug)]
pub(super) struct AuthorizationRequest<'a> {
    /// The authorization endpoint.
    pub endpoint: &'a str,
    /// `client_id`.
    pub client_id: &'a str,
    /// The loopback redirect URI.
    pub redirect_uri: &'a str,
    /// The PKCE S256 challenge.
    pub code_challenge: &'a str,
    /// `state`.
    pub state: &'a str,
    /// `resource` (RFC 8707).
    pub resource: &'a str,
    /// `scope`, omitted when `None`.
    pub scope: Option<&'a str>,
}

impl AuthorizationRequest<'_> {
    /// The URL to open in the browser (the endpoint's own query is kept).
    pub(super) fn url(&self) -> Result<String, Failure> {
        let mut url = super::resource::parse(self.endpoint)
            .map_err(|e| Failure::rejected(format!("authorization endpoint: {e}")))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", self.client_id)
                .append_pair("redirect_uri", self.redirect_uri)
                .append_pair("code_challenge", self.code_challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", self.state)
                .append_pair("resource", self.resource);
            if let Some(scope) = self.scope {
                q.append_pair("scope", scope);
            }
        }
        Ok(url.into())
    }
}

/// What a callback must carry to be believed.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Expected {
    /// The `state` sent.
    pub state: String,
    /// The issuer the request went to.
    pub issuer: String,
    /// Whether the server advertised `authorization_response_iss_parameter_supported`:
    /// then `iss` must be present.
    pub iss_required: bool,
}

/// How a request to the callback path was judged.
#[derive(Debug)]
pub(super) enum Callback {
    /// The code, from a response that passed every check.
    Code(Secret),
    /// Not this flow's (no or another `state`): ignored.
    Stray,
    /// This flow's, and it failed (refused by the person or server, or a wrong or
    /// missing `iss`).
    Failed(Failure),
}

/// Judges the query of a redirect to the callback. RFC 9207 (as SEP-2468 words it
/// for MCP): `iss`, when present, must equal the issuer by simple string comparison
/// (no normalisation: a trailing slash differs), advertised or not; when the server
/// advertised support, it must be present. This applies to error responses too.
pub(super) fn check_callback(query: &str, expected: &Expected) -> Callback {
    let mut state = None;
    let mut iss = None;
    let mut code = None;
    let mut error = None;
    let mut description = None;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        let slot = match k.as_ref() {
            "state" => &mut state,
            "iss" => &mut iss,
            "code" => &mut code,
            "error" => &mut error,
            "error_description" => &mut description,
            _ => continue,
        };
        slot.get_or_insert_with(|| v.into_owned());
    }
    if state.as_deref() != Some(expected.state.as_str()) {
        return Callback::Stray;
    }
    match iss.as_deref() {
        Some(iss) if iss != expected.issuer => {
            return Callback::Failed(Failure::rejected(format!(
                "the authorization response names issuer {:?}, not {:?}: refusing it (RFC 9207)",
                printable(iss),
                expected.issuer
            )))
        }
        None if expected.iss_required => {
            return Callback::Failed(Failure::rejected(format!(
                "the authorization response lacks the iss parameter {} promised: refusing it (RFC 9207)",
                expected.issuer
            )))
        }
        _ => {}
    }
    if let Some(error) = error {
        let detail = description.map(|d| format!(": {}", printable(&d))).unwrap_or_default();
        return Callback::Failed(Failure::rejected(format!("login refused: {}{detail}", printable(&error))));
    }
    match code.filter(|c| !c.is_empty()) {
        Some(code) => Callback::Code(Secret::new(code)),
        None => Callback::Failed(Failure::rejected("the authorization response has no code")),
    }
}

#[cfg(feature = "login-hyper")]
mod hyper_loopback;
#[cfg(feature = "login-hyper")]
pub(super) use hyper_loopback::Loopback;

#[cfg(all(feature = "login-blocking", not(feature = "login-hyper")))]
mod blocking_loopback;
#[cfg(all(feature = "login-blocking", not(feature = "login-hyper")))]
pub(super) use blocking_loopback::Loopback;

#[cfg(not(any(feature = "login-hyper", feature = "login-blocking")))]
compile_error!("tether-host needs a login listener: enable its feature `login-hyper` or `login-blocking`");

/// A small HTML page for the browser, saying `text`.
pub(super) fn page_html(text: &str) -> String {
    let escaped = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>tether</title></head>\
         <body style=\"font-family: sans-serif; margin: 3em\"><h1>tether</h1><p>{escaped}</p></body></html>"
    )
}

/// Why the login ended when it was not finished in time.
fn timed_out(timeout: Duration) -> Failure {
    let secs = timeout.as_secs();
    let span = if secs >= 120 { format!("{} minutes", secs / 60) } else { format!("{secs} seconds") };
    Failure::rejected(format!("the login was not finished within {span}"))
}

/// The failure that ends the login when the listener itself fails.
fn listener_failed(e: std::io::Error) -> Failure {
    Failure::rejected(format!("the login listener failed: {e}"))
}

/// What a browser is told when its callback is not the current one.
const STRAY: &str = "This login link is not the current one. Start the login again.";

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    use tether_core::credential::CredentialFailure;

    fn server(scopes: Option<&[&str]>) -> ServerMetadata {
        ServerMetadata {
            issuer: "https://as".into(),
            scopes_supported: scopes.map(|s| s.iter().map(|x| x.to_string()).collect()),
            documented: true,
            ..ServerMetadata::default()
        }
    }

    #[test]
    fn scope_selection() {
        let prm = vec!["mcp:basic".to_string(), "mcp:read".to_string()];
        let none = server(None);
        assert_eq!(select_scope(Some("mcp:basic"), &[], None, Some(&prm), &none).as_deref(), Some("mcp:basic"));
        assert_eq!(select_scope(None, &[], None, Some(&prm), &none).as_deref(), Some("mcp:basic mcp:read"));
        assert_eq!(select_scope(None, &["old"], None, None, &none), None);
        assert_eq!(select_scope(Some("  "), &[], None, None, &none), None);
        assert_eq!(select_scope(None, &[], Some("cfg"), Some(&prm), &none).as_deref(), Some("cfg"));
        // Step-up: the union of what was held and what is challenged.
        assert_eq!(
            select_scope(Some("mcp:write"), &["mcp:basic", "mcp:basic"], None, Some(&prm), &none).as_deref(),
            Some("mcp:basic mcp:write")
        );
        assert_eq!(select_scope(Some("b"), &["a"], Some("c"), None, &none).as_deref(), Some("c a b"));
        // offline_access only when the authorization server lists it, never alone.
        let offline = server(Some(&["mcp:basic", "offline_access"]));
        assert_eq!(
            select_scope(None, &[], None, Some(&prm[..1]), &offline).as_deref(),
            Some("mcp:basic offline_access")
        );
        assert_eq!(
            select_scope(Some("offline_access x"), &[], None, None, &offline).as_deref(),
            Some("offline_access x")
        );
        assert_eq!(select_scope(None, &[], None, None, &offline), None);
        assert_eq!(
            select_scope(None, &[], None, Some(&prm), &server(Some(&["mcp:basic"]))).as_deref(),
            Some("mcp:basic mcp:read")
        );
    }

    #[test]
    fn the_authorization_url_carries_every_parameter() {
        let url = AuthorizationRequest {
            endpoint: "https://as.example.com/authorize?tenant=1",
            client_id: "cid",
            redirect_uri: "http://127.0.0.1:5/callback",
            code_challenge: "ch",
            state: "st",
            resource: "https://mcp.example.com/mcp",
            scope: Some("a b"),
        }
        .url()
        .unwrap();
        let parsed = url::Url::parse(&url).unwrap();
        let q: std::collections::HashMap<_, _> = parsed.query_pairs().into_owned().collect();
        assert_eq!(q["tenant"], "1");
        assert_eq!(q["response_type"], "code");
        assert_eq!(q["client_id"], "cid");
        assert_eq!(q["redirect_uri"], "http://127.0.0.1:5/callback");
        assert_eq!(q["code_challenge"], "ch");
        assert_eq!(q["code_challenge_method"], "S256");
        assert_eq!(q["state"], "st");
        assert_eq!(q["resource"], "https://mcp.example.com/mcp");
        assert_eq!(q["scope"], "a b");
    }

    pub(super) fn expect(iss_required: bool) -> Expected {
        Expected { state: "st".into(), issuer: "http://localhost:5000".into(), iss_required }
    }

    fn code(c: Callback) -> String {
        match c {
            Callback::Code(code) => code.expose().to_owned(),
            other => panic!("{other:?}"),
        }
    }

    fn rejected(c: Callback) -> String {
        match c {
            Callback::Failed(f) => {
                assert_eq!(f.reason, CredentialFailure::Rejected);
                f.message
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn iss_rules() {
        let iss = "iss=http%3A%2F%2Flocalhost%3A5000";
        // Advertised and correct; not advertised and absent; not advertised and correct.
        assert_eq!(code(check_callback(&format!("code=c&state=st&{iss}"), &expect(true))), "c");
        assert_eq!(code(check_callback("code=c&state=st", &expect(false))), "c");
        assert_eq!(code(check_callback(&format!("code=c&state=st&{iss}"), &expect(false))), "c");
        // Advertised and missing.
        assert!(rejected(check_callback("code=c&state=st", &expect(true))).contains("lacks the iss"));
        // Wrong, advertised or not.
        for required in [true, false] {
            let m = rejected(check_callback("code=c&state=st&iss=https%3A%2F%2Fevil.example.com", &expect(required)));
            assert!(m.contains("evil.example.com"), "{m}");
        }
        // Equal only after normalisation: still a mismatch.
        rejected(check_callback("code=c&state=st&iss=http%3A%2F%2Flocalhost%3A5000%2F", &expect(true)));
        rejected(check_callback("code=c&state=st&iss=HTTP%3A%2F%2Flocalhost%3A5000", &expect(true)));
    }

    #[test]
    fn state_errors_and_missing_codes() {
        assert!(matches!(check_callback("code=c&state=other", &expect(false)), Callback::Stray));
        assert!(matches!(check_callback("code=c", &expect(false)), Callback::Stray));
        let m = rejected(check_callback("error=access_denied&error_description=no%20thanks&state=st", &expect(false)));
        assert_eq!(m, "login refused: access_denied: no thanks");
        rejected(check_callback("error=access_denied&state=st&iss=x", &expect(false)));
        rejected(check_callback("state=st&code=", &expect(false)));
    }

    #[test]
    fn the_listener_ignores_strays_and_returns_the_code() {
        let lb = Loopback::bind(0).unwrap();
        assert_ne!(lb.port(), 0);
        let base = format!("http://127.0.0.1:{}", lb.port());
        let browser = std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10)).build();
            let status = |r: Result<ureq::Response, ureq::Error>| match r {
                Ok(r) => r.status(),
                Err(ureq::Error::Status(s, _)) => s,
                Err(e) => panic!("{e}"),
            };
            assert_eq!(status(agent.get(&format!("{base}/favicon.ico")).call()), 404);
            assert_eq!(status(agent.get(&format!("{base}/callback?code=x&state=old")).call()), 400);
            let r = agent.get(&format!("{base}/callback?code=the-code&state=st")).call().unwrap();
            assert!(r.into_string().unwrap().contains("close this tab"));
        });
        let got = lb.wait(&expect(false), Duration::from_secs(20), &AtomicBool::new(false)).unwrap().unwrap();
        assert_eq!(got.expose(), "the-code");
        browser.join().unwrap();
    }

    #[test]
    fn a_cancel_while_waiting_ends_the_wait() {
        let lb = Loopback::bind(0).unwrap();
        let cancel = std::sync::Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            flag.store(true, Ordering::SeqCst);
        });
        let started = Instant::now();
        assert!(lb.wait(&expect(false), Duration::from_secs(20), &cancel).is_none());
        assert!(started.elapsed() < Duration::from_secs(5));
        canceller.join().unwrap();
    }

    #[test]
    fn the_listener_times_out_and_can_be_cancelled() {
        let lb = Loopback::bind(0).unwrap();
        let e = lb.wait(&expect(false), Duration::from_millis(50), &AtomicBool::new(false)).unwrap().unwrap_err();
        assert_eq!(e.reason, CredentialFailure::Rejected);
        assert!(e.message.contains("not finished"), "{}", e.message);
        assert!(lb.wait(&expect(false), Duration::from_secs(20), &AtomicBool::new(true)).is_none());
    }
}
