//! OAuth secrets never leave tether: the real `tether` binary logs in to a remote
//! backend whose resource server and authorization server are hostile, and none of
//! the secrets that went through it shows up anywhere tether writes.
//!
//! The world (one loopback port, [`Hostile`]): the resource server refuses every
//! token with 401 and echoes it (in `WWW-Authenticate`'s `error_description` and
//! `scope`, and in the body); the authorization server grants a token pair to the first login,
//! then answers the refresh and the second login's code exchange with
//! `invalid_grant` and an `error_description` quoting everything it was sent: the
//! refresh token, the code, the PKCE verifier, the client secret, and the access
//! token it issued. The test is the person: it opens the login URLs tether reports.
//!
//! Planted, and looked for in stderr (at `trace` level), `/status`, `/events`, the
//! trace file (`--record`), the answers MCP clients get, and `tether auth status`:
//! the access token, the refresh token, both authorization codes, both PKCE
//! verifiers, and the configured client secret. Every planted value starts with
//! `PLANTED-`, so even a truncated echo is caught.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

const ACCESS: &str = "PLANTED-ACCESS-7f3a9c1e5d";
const REFRESH: &str = "PLANTED-REFRESH-2b8d4e6f0a";
const CLIENT_SECRET: &str = "PLANTED-SECRET-91c0ffee42";
const CODES: [&str; 2] = ["PLANTED-CODE-1-5e5e5e5e", "PLANTED-CODE-2-6f6f6f6f"];
const CLIENT_ID: &str = "tether-redaction-test";
const TOKEN: &str = "tok-redaction-0123456789abcdef";

/// What the hostile servers were sent.
#[derive(Default)]
struct Seen {
    /// Bearer tokens on requests to the resource server.
    bearers: Vec<String>,
    /// Refresh tokens presented at the token endpoint.
    refreshes: Vec<String>,
    /// Client secrets presented at the token endpoint.
    secrets: Vec<String>,
    /// `code_verifier`s of the code exchanges.
    verifiers: Vec<String>,
    /// Code exchanges so far.
    exchanges: usize,
}

/// The backend's resource server and its authorization server, on one port.
struct Hostile {
    base: String,
    seen: Arc<Mutex<Seen>>,
}

impl Hostile {
    fn start() -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (b, s) = (base.clone(), seen.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (b, s) = (b.clone(), s.clone());
                std::thread::spawn(move || serve(stream, &b, &s));
            }
        });
        Hostile { base, seen }
    }
}

/// One request: method, target, headers (lower-case names), body.
struct Request {
    method: String,
    target: String,
    headers: BTreeMap<String, String>,
    body: String,
}

fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request { method, target, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

fn respond(stream: &mut TcpStream, status: &str, extra: &[(&str, String)], body: &str) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let _ = stream.write_all(format!("{head}\r\n{body}").as_bytes());
    let _ = stream.flush();
}

fn form(text: &str) -> BTreeMap<String, String> {
    text.split('&').filter_map(|pair| pair.split_once('=')).map(|(k, v)| (decode(k), decode(v))).collect()
}

/// Decodes `application/x-www-form-urlencoded` text (enough for these tests).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn serve(mut stream: TcpStream, base: &str, seen: &Mutex<Seen>) {
    let Some(req) = read_request(&mut stream) else { return };
    let (path, query) = req.target.split_once('?').unwrap_or((req.target.as_str(), ""));
    match (req.method.as_str(), path) {
        (_, "/mcp") => {
            // Every token is refused, and quoted back.
            let bearer = req.headers.get("authorization").and_then(|a| a.strip_prefix("Bearer ")).map(str::to_string);
            let echo = bearer.clone().unwrap_or_default();
            if let Some(b) = bearer {
                seen.lock().unwrap().bearers.push(b);
            }
            // Quoted where tether reads (`scope`) and where it does not (`error_description`).
            let scope = if echo.is_empty() { String::new() } else { format!(", scope=\"mcp {echo}\"") };
            let challenge = format!(
                "Bearer error=\"invalid_token\", error_description=\"the access token {echo} was revoked\"{scope}, \
                 resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
            );
            let body = json!({"error": "invalid_token", "error_description": format!("token {echo} is no good")});
            respond(&mut stream, "401 Unauthorized", &[("WWW-Authenticate", challenge)], &body.to_string());
        }
        ("GET", "/.well-known/oauth-protected-resource/mcp" | "/.well-known/oauth-protected-resource") => {
            let body = json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]});
            respond(&mut stream, "200 OK", &[], &body.to_string());
        }
        ("GET", "/.well-known/oauth-authorization-server") => {
            let body = json!({
                "issuer": base,
                "authorization_endpoint": format!("{base}/authorize"),
                "token_endpoint": format!("{base}/token"),
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_post"],
                "authorization_response_iss_parameter_supported": true,
            });
            respond(&mut stream, "200 OK", &[], &body.to_string());
        }
        ("GET", "/authorize") => {
            // The person says yes at once: back to tether's loopback with a code.
            let q = form(query);
            let n = seen.lock().unwrap().exchanges.min(1);
            let location = format!(
                "{}?code={}&state={}&iss={}",
                q["redirect_uri"],
                CODES[n],
                q["state"],
                base.replace(':', "%3A").replace('/', "%2F")
            );
            respond(&mut stream, "302 Found", &[("Location", location)], "");
        }
        ("POST", "/token") => {
            let f = form(&req.body);
            let secret = f.get("client_secret").cloned().unwrap_or_default();
            let mut s = seen.lock().unwrap();
            s.secrets.push(secret.clone());
            let everything = format!("{f:?} {:?}", req.headers.get("authorization"));
            match f.get("grant_type").map(String::as_str) {
                Some("authorization_code") => {
                    s.verifiers.push(f.get("code_verifier").cloned().unwrap_or_default());
                    s.exchanges += 1;
                    if s.exchanges == 1 {
                        let body = json!({"access_token": ACCESS, "refresh_token": REFRESH, "token_type": "Bearer",
                            "expires_in": 3600, "scope": "mcp"});
                        return respond(&mut stream, "200 OK", &[], &body.to_string());
                    }
                    let description = format!(
                        "code {} with verifier {} is not valid for client secret {secret}; you sent {everything}",
                        f.get("code").cloned().unwrap_or_default(),
                        f.get("code_verifier").cloned().unwrap_or_default()
                    );
                    let body = json!({"error": "invalid_grant", "error_description": description});
                    respond(&mut stream, "400 Bad Request", &[], &body.to_string());
                }
                _ => {
                    let refresh = f.get("refresh_token").cloned().unwrap_or_default();
                    s.refreshes.push(refresh.clone());
                    let description = format!(
                        "refresh token {refresh} was revoked, and with it access token {ACCESS}; \
                         client secret {secret} noted; you sent {everything}"
                    );
                    let body = json!({"error": "invalid_grant", "error_description": description});
                    respond(&mut stream, "400 Bad Request", &[], &body.to_string());
                }
            }
        }
        _ => respond(&mut stream, "404 Not Found", &[], "{}"),
    }
}

/// The real binary, serving MCP over HTTP with the status endpoints, recording a trace.
struct Running {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build()
}

fn get(url: &str) -> String {
    match agent().get(url).set("Authorization", &format!("Bearer {TOKEN}")).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r.into_string().unwrap_or_default(),
        Err(e) => panic!("GET {url}: {e}"),
    }
}

/// One MCP POST; the body as text (the data of the last event of an SSE answer).
fn post(url: &str, session: Option<&str>, body: &Value) -> (Option<String>, String) {
    let mut req = agent()
        .post(url)
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .set("Content-Type", "application/json")
        .set("Accept", "application/json, text/event-stream");
    if let Some(session) = session {
        req = req.set("Mcp-Session-Id", session).set("MCP-Protocol-Version", "2025-11-25");
    }
    let response = match req.send_string(&body.to_string()) {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {url}: {e}"),
    };
    let session = response.header("mcp-session-id").map(str::to_string);
    (session, response.into_string().unwrap_or_default())
}

/// `remote` as `/status` shows it.
fn remote_status(base: &str) -> (Value, String) {
    let text = get(&format!("{base}/status"));
    let report: Value = serde_json::from_str(&text).unwrap_or_default();
    let remote = report["backends"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["server"] == "remote")
        .cloned()
        .unwrap_or_default();
    (remote, text)
}

#[test]
fn planted_oauth_secrets_appear_in_no_log_status_event_trace_or_error() {
    let world = Hostile::start();
    let dir = tempfile::tempdir().unwrap();
    let config = json!({"mcpServers": {"remote": {
        "type": "http",
        "url": format!("{}/mcp", world.base),
        "oauth": {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "open_browser": false},
    }}});
    let config_path = dir.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let trace = dir.path().join("trace.jsonl");
    let state = dir.path().join("state");
    let mut child = Command::new(tether_tests::tether_bin())
        .env("TETHER_STATE_DIR", &state)
        .env_remove("TETHER_LOG")
        .arg("--config")
        .arg(&config_path)
        .args(["--log-level", "trace", "--record"])
        .arg(&trace)
        .args(["serve", "--listen", "127.0.0.1:0", "--auth-token", TOKEN])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tether");
    let stderr = tether_tests::collect_lines(child.stderr.take().unwrap());
    let stdout = child.stdout.take().unwrap();
    let stdout_text = Arc::new(Mutex::new(String::new()));
    let out_sink = stdout_text.clone();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stdout).read_to_string(&mut text);
        out_sink.lock().unwrap().push_str(&text);
    });
    let running = Running { child, stderr: stderr.clone() };
    let log = || running.stderr.lock().unwrap().clone();

    let marker = "listening on http://";
    assert!(wait_until(Duration::from_secs(20), || log().contains(marker)), "{}", log());
    let text = log();
    let at = text.find(marker).unwrap() + "listening on ".len();
    let url = text[at..].split_whitespace().next().unwrap().to_string();
    let base = url.trim_end_matches("/mcp").to_string();

    // Everything `/events` says, from the start (it replays the kept events).
    let stop = Arc::new(AtomicBool::new(false));
    let events = {
        let (events_url, stop) = (format!("{base}/events"), stop.clone());
        std::thread::spawn(move || {
            let mut text = String::new();
            while !stop.load(Ordering::SeqCst) {
                let agent = ureq::AgentBuilder::new().timeout_read(Duration::from_secs(1)).build();
                let Ok(response) = agent.get(&events_url).set("Authorization", &format!("Bearer {TOKEN}")).call()
                else {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                for line in BufReader::new(response.into_reader()).lines() {
                    let Ok(line) = line else { break };
                    text.push_str(&line);
                    text.push('\n');
                }
            }
            text
        })
    };

    let mut outputs: Vec<String> = Vec::new();
    let (session, body) = post(
        &url,
        None,
        &json!({"jsonrpc":"2.0","id":1,"method":"initialize",
        "params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"redaction","version":"1"}}}),
    );
    outputs.push(body);
    let session = session.expect("an MCP session");
    post(&url, Some(&session), &json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let mut next_id = 2;
    let mut call = |outputs: &mut Vec<String>| {
        let frame = json!({"jsonrpc":"2.0","id":next_id,"method":"tools/call",
            "params":{"name":"remote__anything","arguments":{}}});
        next_id += 1;
        outputs.push(post(&url, Some(&session), &frame).1);
    };

    // Nothing stored: tether asks a person to log in, and says where.
    let mut first_url = String::new();
    let asked = wait_until(Duration::from_secs(30), || {
        let (remote, text) = remote_status(&base);
        outputs.push(text);
        first_url = remote["login_url"].as_str().unwrap_or_default().to_string();
        !first_url.is_empty()
    });
    assert!(asked, "no login URL in /status\n{}", log());
    call(&mut outputs);

    // The person logs in: a code for tether's loopback, then a token pair; the
    // backend refuses the token, the refresh is refused as a dead grant.
    let page = agent().get(&first_url).call().map(|r| r.into_string().unwrap_or_default());
    outputs.push(format!("{page:?}"));
    let refused = wait_until(Duration::from_secs(30), || {
        let seen = world.seen.lock().unwrap();
        !seen.refreshes.is_empty()
    });
    assert!(refused, "no refresh was tried\n{}", log());
    let mut second_url = String::new();
    let asked_again = wait_until(Duration::from_secs(30), || {
        let (remote, text) = remote_status(&base);
        outputs.push(text);
        second_url = remote["login_url"].as_str().unwrap_or_default().to_string();
        !second_url.is_empty() && second_url != first_url
    });
    assert!(asked_again, "no second login URL\n{}", log());
    call(&mut outputs);

    // The person logs in again; this time the code exchange fails, quoting it all.
    let page = agent().get(&second_url).call().map(|r| r.into_string().unwrap_or_default());
    outputs.push(format!("{page:?}"));
    let failed = wait_until(Duration::from_secs(30), || {
        let (remote, text) = remote_status(&base);
        outputs.push(text);
        world.seen.lock().unwrap().exchanges == 2
            && remote["last_error"].as_str().is_some_and(|e| e.contains("invalid_grant"))
    });
    assert!(failed, "the second login's failure did not show\n{}", log());
    call(&mut outputs);
    outputs.push(remote_status(&base).1);

    // What `tether auth status` prints about it.
    let auth = Command::new(tether_tests::tether_bin())
        .env("TETHER_STATE_DIR", &state)
        .arg("--config")
        .arg(&config_path)
        .args(["auth", "status"])
        .output()
        .expect("tether auth status");
    outputs.push(String::from_utf8_lossy(&auth.stdout).into_owned());
    outputs.push(String::from_utf8_lossy(&auth.stderr).into_owned());

    stop.store(true, Ordering::SeqCst);
    let events = events.join().unwrap();
    drop(running);
    let trace_text = std::fs::read_to_string(&trace).unwrap();
    let stderr_text = stderr.lock().unwrap().clone();
    let stdout_text = stdout_text.lock().unwrap().clone();

    // The world saw every secret go by, so each had its chance to leak.
    let seen = world.seen.lock().unwrap();
    assert!(seen.bearers.iter().any(|b| b == ACCESS), "the token went on requests: {:?}", seen.bearers);
    assert_eq!(seen.refreshes.first().map(String::as_str), Some(REFRESH), "the refresh token was presented");
    assert!(seen.secrets.iter().all(|s| s == CLIENT_SECRET) && !seen.secrets.is_empty(), "{:?}", seen.secrets);
    assert_eq!(seen.verifiers.len(), 2, "two code exchanges");
    assert!(seen.verifiers.iter().all(|v| v.len() >= 43), "{:?}", seen.verifiers);
    // The failed code exchange is a failed login, not a dead grant (nothing to discard).
    let last = trace_text.lines().rev().find(|l| l.contains(r#""credential":"failed""#)).unwrap_or_default();
    assert!(last.contains(r#""reason":"rejected""#), "{last}");
    // And the hostile answers reached the outputs (redacted), so the search below means something.
    assert!(events.contains("invalid_grant") && trace_text.contains("invalid_grant"), "{events}\n{trace_text}");
    assert!(outputs.iter().any(|o| o.contains("invalid_grant")), "{outputs:#?}");
    assert!(stderr_text.contains("invalid_grant"), "{stderr_text}");

    let places = [
        ("stderr (trace level)", stderr_text),
        ("stdout", stdout_text),
        ("/events", events),
        ("the trace file", trace_text),
        ("/status, MCP answers, login pages, tether auth status", outputs.join("\n")),
    ];
    let mut planted: Vec<String> = vec!["PLANTED".into(), CLIENT_SECRET.into()];
    // The verifiers are tether's own random strings: look for them whole and in part.
    for v in &seen.verifiers {
        planted.push(v.clone());
        planted.push(v[..16].to_string());
    }
    for (place, text) in &places {
        for secret in &planted {
            if let Some(at) = text.find(secret.as_str()) {
                let from = text[..at].char_indices().rev().nth(200).map_or(0, |(i, _)| i);
                let to = (at + 200).min(text.len());
                let to = (to..=text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
                panic!("{secret} leaked into {place}:\n...{}...", &text[from..to]);
            }
        }
    }
}
