//! The person's part of the authorization code flow: which scopes to ask for, the
//! authorization URL, and the loopback listener that receives the browser's
//! redirect (RFC 8252 §7.3) and checks it (`state`, RFC 9207 `iss`) before the code
//! is exchanged.
//!
//! The listener binds 127.0.0.1 (an ephemeral port unless one is configured or a
//! stored registration names one), serves `/callback` once, answers other paths
//! with 404, ignores callbacks with a `state` it did not issue (a stale tab cannot
//! end the flow), and gives up after [`LOGIN_TIMEOUT`]. It is hyper's HTTP/1.1
//! server, driven by async-io on the thread that waits (no runtime needed, so
//! either runtime can use it), with every connection served at once and request
//! heads bounded.

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use async_io::{Async, Timer};
use futures_lite::{future, Stream};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Uri};
use smol_hyper::rt::{FuturesIo, SmolTimer};

use super::discovery::ServerMetadata;
use super::secret::Secret;
use super::transport::printable;
use super::Failure;

/// The path of the redirect URI.
pub const REDIRECT_PATH: &str = "/callback";
/// How long a person has to finish logging in.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the listener looks at its cancel flag.
const POLL: Duration = Duration::from_millis(200);

/// The scopes to ask for, as the MCP spec's scope selection strategy says: the
/// challenge's `scope` (joined, SEP-2350, with what was asked for or granted
/// before and with the configured scopes, so a step-up does not lose them); else
/// the configured scopes; else the protected resource's `scopes_supported`; else
/// none (the parameter is omitted). `offline_access` is added when the
/// authorization server lists it (SEP-2207), to get a refresh token, and only to a
/// non-empty request (alone it would replace the server's default scopes).
pub fn select_scope(
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
pub struct AuthorizationRequest<'a> {
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
    pub fn url(&self) -> Result<String, Failure> {
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
#[derive(Debug, Clone)]
pub struct Expected {
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
pub enum Callback {
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
pub fn check_callback(query: &str, expected: &Expected) -> Callback {
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

/// The loopback listener of one login.
pub struct Loopback {
    listener: Async<TcpListener>,
    port: u16,
}

impl std::fmt::Debug for Loopback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Loopback({})", self.port)
    }
}

/// What the first callback of this flow decided, and on which connection its
/// answer is being written.
type Decided = RefCell<Option<(usize, Result<Secret, Failure>)>>;

/// One connection being served, by number.
type Served<'a> = (usize, Pin<Box<dyn Future<Output = ()> + 'a>>);

impl Loopback {
    /// Listens on 127.0.0.1:`port` (0: any free port).
    pub fn bind(port: u16) -> Result<Self, String> {
        let failed = |e: std::io::Error| format!("cannot listen on 127.0.0.1:{port} for the login redirect: {e}");
        let listener = TcpListener::bind(("127.0.0.1", port)).map_err(failed)?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
        let listener = Async::new(listener).map_err(failed)?;
        Ok(Loopback { listener, port })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>/callback`.
    pub fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}{REDIRECT_PATH}", self.port)
    }

    /// Serves the callback until a response for this flow arrives (its code, or why
    /// it failed), `timeout` passes, or `cancel` is set (then `None`). Blocks the
    /// calling thread, which drives the connections itself: no runtime is needed.
    pub fn wait(&self, expected: &Expected, timeout: Duration, cancel: &AtomicBool) -> Option<Result<Secret, Failure>> {
        async_io::block_on(self.serve(expected, timeout, cancel))
    }

    /// [`Loopback::wait`]'s work: accepts connections and serves them all at once
    /// (a browser's idle preconnection holds up nothing), until the first callback
    /// of this flow has been judged and its page sent.
    async fn serve(
        &self,
        expected: &Expected,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Option<Result<Secret, Failure>> {
        let deadline = Instant::now() + timeout;
        let decided: Decided = RefCell::new(None);
        let mut connections: Vec<Served<'_>> = Vec::new();
        let mut next_id = 0usize;
        let mut expiry = Timer::at(deadline);
        let mut tick = Timer::interval(POLL);
        let mut grace: Option<Timer> = None;
        future::poll_fn(|cx| {
            if decided.borrow().is_none() {
                if cancel.load(Ordering::SeqCst) {
                    return Poll::Ready(None);
                }
                if Instant::now() >= deadline {
                    let secs = timeout.as_secs();
                    let span = if secs >= 120 { format!("{} minutes", secs / 60) } else { format!("{secs} seconds") };
                    return Poll::Ready(Some(Err(Failure::rejected(format!(
                        "the login was not finished within {span}"
                    )))));
                }
            }
            // Take every connection waiting.
            loop {
                match self.listener.get_ref().accept() {
                    Ok((stream, _)) => {
                        if connections.len() >= MAX_CONNECTIONS {
                            continue; // dropped: closed at once
                        }
                        let Ok(stream) = Async::new(stream) else { continue };
                        connections.push((next_id, Box::pin(connection(next_id, stream, expected, &decided))));
                        next_id += 1;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => match self.listener.poll_readable(cx) {
                        Poll::Ready(Ok(())) => continue,
                        Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(listener_failed(e)))),
                        Poll::Pending => break,
                    },
                    Err(e) if transient(&e) => continue,
                    Err(e) => return Poll::Ready(Some(Err(listener_failed(e)))),
                }
            }
            connections.retain_mut(|(_, served)| served.as_mut().poll(cx).is_pending());
            let winner = decided.borrow().as_ref().map(|(id, _)| *id);
            if let Some(winner) = winner {
                // The page goes out before the listener closes (its answer ends that
                // connection), unless the browser does not take it in time.
                let sent = !connections.iter().any(|(id, _)| *id == winner);
                let late = grace.get_or_insert_with(|| Timer::after(SEND_GRACE));
                if sent || Pin::new(late).poll(cx).is_ready() {
                    return Poll::Ready(decided.borrow_mut().take().map(|(_, outcome)| outcome));
                }
                return Poll::Pending;
            }
            let expired = Pin::new(&mut expiry).poll(cx).is_ready();
            let ticked = Pin::new(&mut tick).poll_next(cx).is_ready();
            if expired || ticked {
                cx.waker().wake_by_ref(); // look at the deadline and the cancel flag again
            }
            Poll::Pending
        })
        .await
    }
}

/// How long a client may take to send a request's head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head read.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Connections served at once; more are closed as they arrive.
const MAX_CONNECTIONS: usize = 32;
/// How long the page of the deciding callback may take to go out.
const SEND_GRACE: Duration = Duration::from_secs(5);

/// Accept errors that concern one connection, not the listener.
fn transient(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted)
}

/// The failure that ends the login when the listener itself fails.
fn listener_failed(e: std::io::Error) -> Failure {
    Failure::rejected(format!("the login listener failed: {e}"))
}

/// Serves one connection (number `id`) with hyper until it closes.
async fn connection(id: usize, stream: Async<TcpStream>, expected: &Expected, decided: &Decided) {
    let service = service_fn(|request: Request<Incoming>| {
        let response = answer(id, request.uri(), expected, decided);
        async move { Ok::<_, Infallible>(response) }
    });
    let mut builder = http1::Builder::new();
    builder.timer(SmolTimer::new()).header_read_timeout(HEADER_TIMEOUT).max_buf_size(MAX_HEADER_BYTES);
    if let Err(e) = builder.serve_connection(FuturesIo::new(stream), service).await {
        tracing::debug!("login listener connection ended: {e}");
    }
}

/// Judges one request, records the outcome of the first callback of this flow
/// (later ones count for nothing), and says what the browser gets.
fn answer(id: usize, uri: &Uri, expected: &Expected, decided: &Decided) -> Response<Full<Bytes>> {
    const STRAY: &str = "This login link is not the current one. Start the login again.";
    if uri.path() != REDIRECT_PATH {
        return page(404, "Not found.", false);
    }
    if decided.borrow().is_some() {
        return page(400, STRAY, false);
    }
    let (response, outcome) = match check_callback(uri.query().unwrap_or(""), expected) {
        Callback::Stray => return page(400, STRAY, false),
        Callback::Code(code) => (page(200, "Logged in. You can close this tab.", true), Ok(code)),
        Callback::Failed(failure) => (page(400, &format!("Login failed: {}", failure.message), true), Err(failure)),
    };
    *decided.borrow_mut() = Some((id, outcome));
    response
}

/// A small page for the browser; `last` closes the connection after it.
fn page(status: u16, text: &str, last: bool) -> Response<Full<Bytes>> {
    let escaped = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>tether</title></head>\
         <body style=\"font-family: sans-serif; margin: 3em\"><h1>tether</h1><p>{escaped}</p></body></html>"
    );
    let mut response = Response::new(Full::new(Bytes::from(html)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    if last {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn expect(iss_required: bool) -> Expected {
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
    fn only_the_first_callback_of_the_flow_counts() {
        let decided: Decided = RefCell::new(None);
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        let stray = answer(1, &uri("/callback?code=x&state=old"), &expect(false), &decided);
        assert_eq!(stray.status(), 400);
        assert!(decided.borrow().is_none());
        let first = answer(2, &uri("/callback?code=first&state=st"), &expect(false), &decided);
        assert_eq!(first.status(), 200);
        assert_eq!(first.headers()[CONNECTION], "close");
        let second = answer(3, &uri("/callback?code=second&state=st"), &expect(false), &decided);
        assert_eq!(second.status(), 400);
        assert!(second.headers().get(CONNECTION).is_none());
        assert_eq!(answer(4, &uri("/other?state=st"), &expect(false), &decided).status(), 404);
        match decided.into_inner() {
            Some((2, Ok(code))) => assert_eq!(code.expose(), "first"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn idle_and_oversized_requests_hold_up_nothing_and_a_refusal_ends_the_login() {
        use std::io::{Read, Write};
        let lb = Loopback::bind(0).unwrap();
        let addr = format!("127.0.0.1:{}", lb.port());
        let base = format!("http://{addr}");
        let browser = std::thread::spawn(move || {
            // A preconnection that never sends anything.
            let idle = std::net::TcpStream::connect(&addr).unwrap();
            // A request head larger than the listener reads.
            let mut big = std::net::TcpStream::connect(&addr).unwrap();
            big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let filler = "a".repeat(MAX_HEADER_BYTES + 1024);
            let _ = write!(big, "GET /callback HTTP/1.1\r\nHost: x\r\nX-Filler: {filler}\r\n\r\n");
            let mut reply = Vec::new();
            let _ = big.read_to_end(&mut reply);
            let reply = String::from_utf8_lossy(&reply);
            assert!(reply.starts_with("HTTP/1.1 431"), "{reply}");
            let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10)).build();
            let url = format!("{base}/callback?error=access_denied&error_description=no&state=st");
            match agent.get(&url).call() {
                Err(ureq::Error::Status(400, r)) => assert!(r.into_string().unwrap().contains("Login failed")),
                other => panic!("{other:?}"),
            }
            drop(idle);
        });
        let e = lb.wait(&expect(false), Duration::from_secs(20), &AtomicBool::new(false)).unwrap().unwrap_err();
        assert_eq!(e.message, "login refused: access_denied: no");
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
