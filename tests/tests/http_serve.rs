//! `tether serve --listen`: the real binary serving Streamable HTTP next to
//! stdio, with a bearer token, and keeping planted secrets out of every output.

use std::time::Duration;

use serde_json::{json, Value};
use tether_tests::{mcp_post, mock_server, Tether};

const TOKEN: &str = "tok-listener-0123456789abcdef";

/// The MCP endpoint URL from tether's log line.
fn listening(t: &Tether) -> String {
    t.logged_url("listening on ")
}

/// One POST; returns status, session header and body (JSON, or the data of an SSE stream's last event).
fn post(url: &str, token: Option<&str>, session: Option<&str>, body: &Value) -> (u16, Option<String>, String) {
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build();
    mcp_post(&agent, url, token, session, body).unwrap_or_else(|e| panic!("{e}"))
}

fn initialize() -> Value {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"http-test","version":"1"}}})
}

#[test]
fn http_clients_share_the_backends_with_stdio_and_need_the_token() {
    let config = json!({"mcpServers": {"fs": mock_server(&[])}});
    let mut t = Tether::start(config, &["serve", "--listen", "127.0.0.1:0", "--stdio", "--auth-token", TOKEN]);
    let url = listening(&t);

    let (status, session, _) = post(&url, None, None, &initialize());
    assert_eq!((status, session), (401, None), "no token, no session");
    let (status, _, _) = post(&url, Some("tok-wrong-0123456789abcdef"), None, &initialize());
    assert_eq!(status, 401);

    let (status, session, body) = post(&url, Some(TOKEN), None, &initialize());
    assert_eq!(status, 200, "{body}");
    let session = session.expect("a session id");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["result"]["protocolVersion"], "2025-11-25");
    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(post(&url, Some(TOKEN), Some(&session), &initialized).0, 202);

    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs__echo","arguments":{"text":"over http"}}});
    let (status, _, body) = post(&url, Some(TOKEN), Some(&session), &call);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["result"]["content"][0]["text"], "over http");

    // The stdio client is served by the same process and the same backend.
    t.initialize();
    assert_eq!(t.call_text("fs__echo", json!({"text": "over stdio"})), "over stdio");

    let (status, _, _) = post(&url, Some(TOKEN), Some("not-a-session"), &call);
    assert_eq!(status, 404);
    let (status, _, _) = post(&url, Some(TOKEN), None, &call);
    assert_eq!(status, 400, "a request without a session");
    assert!(t.finish().success());
}

const ENV_SECRET: &str = "sk-env-planted-41f7c2";
const HEADER_SECRET: &str = "hdr-planted-9b2e77";
const QUERY_SECRET: &str = "qry-planted-55d0aa";

/// Backends holding planted secrets: `leaky` has one in its env and prints it on
/// stderr as it crashes at start; `remote` (unreachable) has one in a header and
/// one in its URL's query; `fs` works.
fn planted_servers() -> Value {
    let leaky = json!({
        "command": tether_tests::mock_bin(),
        "args": ["--stderr", format!("fatal: API_KEY={ENV_SECRET} was rejected"), "--exit-on-start", "1"],
        "env": {"API_KEY": ENV_SECRET},
    });
    let remote = json!({
        "type": "http",
        "url": format!("http://127.0.0.1:1/mcp?token={QUERY_SECRET}"),
        "headers": {"Authorization": format!("Bearer {HEADER_SECRET}")},
    });
    json!({"fs": mock_server(&[]), "leaky": leaky, "remote": remote})
}

/// Fails naming the secret (or the token) that `all` shows.
fn assert_no_secret(all: &str) {
    for secret in [ENV_SECRET, HEADER_SECRET, QUERY_SECRET, TOKEN] {
        assert!(!all.contains(secret), "{secret} leaked:\n{all}");
    }
}

#[test]
fn planted_secrets_appear_in_no_output() {
    let config = json!({"mcpServers": planted_servers()});
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let mut t = Tether::start(
        config,
        &["--record", trace.to_str().unwrap(), "serve", "--listen", "127.0.0.1:0", "--stdio", "--auth-token", TOKEN],
    );
    let url = listening(&t);
    let mut outputs = Vec::new();
    let (_, session, body) = post(&url, Some(TOKEN), None, &initialize());
    outputs.push(body);
    let session = session.unwrap();
    // Calls to the broken backends answer with errors that say why, without the secrets.
    for (id, tool) in [(2, "leaky__anything"), (3, "remote__anything"), (4, "fs__echo")] {
        let call =
            json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":{"text":"x"}}});
        outputs.push(post(&url, Some(TOKEN), Some(&session), &call).2);
    }
    t.initialize();
    outputs.push(t.request("tools/list", json!({})).to_string());
    // Let the crash loop reach its end (permanently failed) and the remote back off.
    assert!(t.wait_log("permanently_failed", Duration::from_secs(30)), "{}", t.stderr_text());
    let (stderr, stdout) = (t.stderr.clone(), t.stdout_lines.clone());
    assert!(t.finish().success());
    outputs.push(std::fs::read_to_string(&trace).unwrap());
    outputs.push(stderr.lock().unwrap().clone());
    outputs.extend(stdout.lock().unwrap().iter().cloned());
    let all = outputs.join("\n");
    assert!(all.contains("[redacted]"), "the leaky backend's stderr line is quoted, redacted:\n{all}");
    assert_no_secret(&all);
}

/// What operators see (`/status`, `/events`, `/metrics`, the page, `/healthz`,
/// `/readyz`, and `tether status`) says why `leaky` is down without its secret,
/// and shows none of the others nor the token.
#[test]
fn planted_secrets_stay_out_of_the_status_endpoints_the_events_and_the_page() {
    use std::io::{BufRead, BufReader};
    let t = Tether::start(
        json!({"mcpServers": planted_servers()}),
        &["serve", "--listen", "127.0.0.1:0", "--auth-token", TOKEN],
    );
    let url = listening(&t);
    let base = url.trim_end_matches("/mcp").to_string();

    // The event stream from the start (it replays the kept events), until the
    // crash that quotes leaky's stderr arrives, 20 s at the most.
    let events_url = format!("{base}/events");
    let events = std::thread::spawn(move || {
        let agent = ureq::AgentBuilder::new().timeout_read(Duration::from_secs(3)).build();
        let response = agent
            .get(&events_url)
            .set("Authorization", &format!("Bearer {TOKEN}"))
            .call()
            .unwrap_or_else(|e| panic!("GET {events_url}: {e}"));
        let mut text = String::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for line in BufReader::new(response.into_reader()).lines() {
            let Ok(line) = line else { break };
            let crash = line.starts_with("data:") && line.contains(r#""server":"leaky""#) && line.contains("stderr");
            text.push_str(&line);
            text.push('\n');
            if crash || std::time::Instant::now() > deadline {
                break;
            }
        }
        text
    });

    // leaky in error (or given up on), its last error quoting its stderr, redacted.
    let mut status = String::new();
    let crashed = tether_tests::wait_until(Duration::from_secs(30), || {
        status = get(&format!("{base}/status"), Some(TOKEN)).1;
        let report: Value = serde_json::from_str(&status).unwrap_or_default();
        report["backends"].as_array().into_iter().flatten().any(|b| {
            b["server"] == "leaky"
                && matches!(b["status"].as_str(), Some("error" | "restarting" | "permanently_failed"))
                && b["last_error"].as_str().is_some_and(|e| e.contains("API_KEY=[redacted] was rejected"))
        })
    });
    assert!(crashed, "{status}\n{}", t.stderr_text());
    let events = events.join().unwrap();
    assert!(
        events.lines().any(|l| l.contains(r#""server":"leaky""#) && l.contains("API_KEY=[redacted] was rejected")),
        "the crash event quotes leaky's stderr, redacted:\n{events}"
    );

    let mut outputs = vec![status, events];
    for path in ["/metrics", "/", "/healthz", "/readyz", "/status"] {
        let (code, body) = get(&format!("{base}{path}"), Some(TOKEN));
        assert!(matches!(code, 200 | 503), "{path}: {code} {body}");
        outputs.push(body);
    }
    assert!(outputs[2].contains(r#"tether_backend_status{server="leaky",status="online"} 0"#), "{}", outputs[2]);
    assert!(outputs[3].contains("<html"), "{}", outputs[3]);
    // And what `tether status` prints of them.
    for json in [false, true] {
        let mut command = std::process::Command::new(tether_tests::tether_bin());
        command.args(["status", "--url", &url, "--token", TOKEN]);
        if json {
            command.arg("--json");
        }
        let out = command.output().expect("run tether status");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(1), "leaky is not online:\n{stdout}");
        assert!(stdout.contains("API_KEY=[redacted]"), "{stdout}");
        outputs.push(stdout);
        outputs.push(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    assert_no_secret(&outputs.join("\n"));
}

/// A stateless (2026-07-28) request's `_meta`.
fn stateless_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "http-test", "version": "1"},
    })
}

/// A stateless POST with the revision's request headers taken from `body`
/// (`name` overrides `Mcp-Name`); returns status and body.
fn post_stateless(url: &str, body: &Value, name: Option<&str>) -> (u16, String) {
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build();
    let mut req = agent
        .post(url)
        .set("Content-Type", "application/json")
        .set("Accept", "application/json, text/event-stream")
        .set("MCP-Protocol-Version", "2026-07-28")
        .set("Mcp-Method", body["method"].as_str().unwrap());
    if let Some(n) = name.or(body["params"]["name"].as_str()) {
        req = req.set("Mcp-Name", n);
    }
    let response = match req.send_string(&body.to_string()) {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {url}: {e}"),
    };
    (response.status(), response.into_string().unwrap())
}

#[test]
fn with_stateless_clients_each_stateless_post_is_served_without_a_session() {
    let config = json!({"tether": {"stateless_clients": true}, "mcpServers": {"fs": mock_server(&[])}});
    let t = Tether::start(config, &["serve", "--listen", "127.0.0.1:0"]);
    let url = listening(&t);

    let discover = json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": stateless_meta()}});
    let (status, body) = post_stateless(&url, &discover, None);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert_eq!(answer["result"]["supportedVersions"][0], "2026-07-28");

    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs__echo","arguments":{"text":"stateless"},"_meta": stateless_meta()}});
    let (status, body) = post_stateless(&url, &call, None);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "stateless", "{answer}");
    assert_eq!(answer["result"]["resultType"], "complete");
    // Headers that disagree with the body: 400, -32020, and nothing reaches the backend.
    let (status, body) = post_stateless(&url, &call, Some("fs__other"));
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, answer["error"]["code"].clone(), answer["id"].clone()),
        (400, json!(-32020), json!(2)),
        "{answer}"
    );
    let (status, session, body) = post(&url, None, None, &call);
    assert_eq!((status, session), (400, None), "no headers at all: {body}");

    // Without _meta and without a session: a malformed stateless request (400, -32602).
    let bare = json!({"jsonrpc":"2.0","id":3,"method":"tools/list"});
    let (status, _, body) = post(&url, None, None, &bare);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, answer["error"]["code"].clone()), (400, json!(-32602)), "{answer}");
    // A method the revision removed: 404, -32601.
    let ping = json!({"jsonrpc":"2.0","id":4,"method":"ping","params":{"_meta": stateless_meta()}});
    let (status, body) = post_stateless(&url, &ping, None);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, answer["error"]["code"].clone()), (404, json!(-32601)), "{answer}");

    // Handshake clients are served as before, side by side.
    let (status, session, body) = post(&url, None, None, &initialize());
    assert_eq!(status, 200, "{body}");
    assert!(session.is_some());

    let log = t.stderr_text();
    assert!(!log.contains("ERROR"), "{log}");
}

#[test]
fn a_stateless_clients_listen_streams_the_list_changes_it_asked_for() {
    use std::io::{BufRead, BufReader};
    let config = json!({"tether": {"stateless_clients": true}, "mcpServers": {"fs": mock_server(&[])}});
    let t = Tether::start(config, &["serve", "--listen", "127.0.0.1:0"]);
    let url = listening(&t);
    // Wait until fs is up, so the listen sees its change and not its start.
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": stateless_meta()}});
    assert_eq!(post_stateless(&url, &list, None).0, 200);

    let listen = json!({"jsonrpc":"2.0","id":"L1","method":"subscriptions/listen","params":{"_meta": stateless_meta(),"notifications":{"toolsListChanged":true}}});
    let agent = ureq::AgentBuilder::new().timeout_read(Duration::from_secs(20)).build();
    let response = agent
        .post(&url)
        .set("Content-Type", "application/json")
        .set("Accept", "application/json, text/event-stream")
        .set("MCP-Protocol-Version", "2026-07-28")
        .set("Mcp-Method", "subscriptions/listen")
        .send_string(&listen.to_string())
        .expect("the listen is accepted");
    assert_eq!(response.content_type(), "text/event-stream");
    let mut lines = BufReader::new(response.into_reader()).lines();
    let mut next_message = move || -> Value {
        loop {
            let line = lines.next().expect("the listen stream stays open").unwrap();
            if let Some(data) = line.strip_prefix("data:").map(str::trim).filter(|d| !d.is_empty()) {
                return serde_json::from_str(data).unwrap();
            }
        }
    };
    let ack = next_message();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L1");
    assert_eq!(ack["params"]["notifications"], json!({"toolsListChanged":true}));

    // Another stateless request changes the backend's tools.
    let add = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs__add_tool","arguments":{},"_meta": stateless_meta()}});
    let (status, body) = post_stateless(&url, &add, None);
    assert_eq!(status, 200, "{body}");
    let changed = next_message();
    assert_eq!(changed["method"], "notifications/tools/list_changed", "{changed}");
    assert_eq!(changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L1");
    let (_, body) = post_stateless(&url, &list, None);
    assert!(body.contains("fs__added"), "{body}");
    let log = t.stderr_text();
    assert!(!log.contains("ERROR"), "{log}");
}

/// A GET with the bearer token (when given); status and body.
fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build();
    let mut req = agent.get(url);
    if let Some(token) = token {
        req = req.set("Authorization", &format!("Bearer {token}"));
    }
    match req.call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => (r.status(), r.into_string().unwrap()),
        Err(e) => panic!("GET {url}: {e}"),
    }
}

#[test]
fn status_endpoints_show_each_backend_count_calls_and_take_admin_actions() {
    let config = json!({"mcpServers": {"fs": mock_server(&[]), "vital": mock_server(&[])}});
    let mut config = config;
    config["mcpServers"]["vital"]["tether"] = json!({"vital": true});
    let t = Tether::start(config, &["serve", "--listen", "127.0.0.1:0", "--auth-token", TOKEN]);
    let url = listening(&t);
    let base = url.trim_end_matches("/mcp");

    assert_eq!(get(&format!("{base}/healthz"), Some(TOKEN)).0, 200);
    assert_eq!(get(&format!("{base}/status"), None).0, 401, "same auth as /mcp");
    let (status, page) = get(&format!("{base}/"), None);
    assert_eq!(status, 200, "the page holds no data: served without the token");
    assert!(page.contains("<html"), "{page}");
    // Ready once the vital backend is online.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while get(&format!("{base}/readyz"), Some(TOKEN)).0 != 200 {
        assert!(std::time::Instant::now() < deadline, "{}", get(&format!("{base}/readyz"), Some(TOKEN)).1);
        std::thread::sleep(Duration::from_millis(50));
    }

    // One call through /mcp, then the numbers.
    let (_, session, _) = post(&url, Some(TOKEN), None, &initialize());
    let session = session.unwrap();
    post(&url, Some(TOKEN), Some(&session), &json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let call =
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__echo","arguments":{"text":"hi"}}});
    let (status, _, body) = post(&url, Some(TOKEN), Some(&session), &call);
    assert_eq!(status, 200, "{body}");

    let (status, body) = get(&format!("{base}/status"), Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).unwrap();
    let fs = report["backends"].as_array().unwrap().iter().find(|b| b["server"] == "fs").unwrap().clone();
    assert_eq!(fs["status"], "online", "{fs}");
    assert_eq!(fs["breaker"], "closed");
    assert_eq!(fs["calls"]["ok"], 1, "{fs}");
    assert_eq!(fs["latency_ms"].as_array().unwrap().len(), 1);
    assert!(fs["uptime_ms"].as_u64().is_some() && fs["tools"].as_u64().unwrap() > 0, "{fs}");
    assert!(report["tether"]["sessions"].as_u64().unwrap() >= 1, "{report}");

    let (status, metrics) = get(&format!("{base}/metrics"), Some(TOKEN));
    assert_eq!(status, 200);
    for needle in [
        r#"tether_calls_total{server="fs",outcome="ok"} 1"#,
        r#"tether_call_latency_seconds_count{server="fs"} 1"#,
        r#"tether_backend_status{server="fs",status="online"} 1"#,
        "tether_client_sessions",
    ] {
        assert!(metrics.contains(needle), "{needle} missing from:\n{metrics}");
    }

    // Admin: JSON only (no cross-site form posts), unknown backends named.
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build();
    let admin = |path: &str, content_type: &str| match agent
        .post(&format!("{base}{path}"))
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .set("Content-Type", content_type)
        .send_string("{}")
    {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r.status(),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(admin("/admin/restart/fs", "application/x-www-form-urlencoded"), 415);
    assert_eq!(admin("/admin/restart/nope", "application/json"), 404);
    assert_eq!(admin("/admin/restart/fs", "application/json"), 202);

    // The restart shows in the event stream (which starts with the kept events).
    let response =
        agent.get(&format!("{base}/events")).set("Authorization", &format!("Bearer {TOKEN}")).call().expect("events");
    assert_eq!(response.content_type(), "text/event-stream");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(response.into_reader()));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        assert!(std::time::Instant::now() < deadline, "no restart event");
        let line = lines.next().unwrap().unwrap();
        let Some(data) = line.strip_prefix("data: ") else { continue };
        let event: Value = serde_json::from_str(data).unwrap();
        assert!(event["seq"].is_u64(), "{event}");
        if event["event"] == "server_disconnected" && event["server"] == "fs" {
            break;
        }
    }
    // Secrets stay out (the token is not in any answer).
    for path in ["/status", "/metrics", "/"] {
        assert!(!get(&format!("{base}{path}"), Some(TOKEN)).1.contains(TOKEN));
    }
}

#[test]
fn status_listen_serves_the_status_endpoints_beside_stdio_without_mcp() {
    let config = json!({"mcpServers": {"fs": mock_server(&[])}});
    let t = Tether::start(config, &["serve", "--status-listen", "127.0.0.1:0"]);
    let base = t.logged_url("tether status on ").trim_end_matches('/').to_string();
    assert_eq!(get(&format!("{base}/healthz"), None).0, 200);
    let (status, body) = get(&format!("{base}/status"), None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""server":"fs""#), "{body}");
    let (status, _, _) = post(&format!("{base}/mcp"), None, None, &initialize());
    assert_eq!(status, 404, "no MCP endpoint there");
}

#[test]
fn every_request_is_answered_with_its_id_as_written_and_odd_ids_hold_no_session() {
    let config = json!({"mcpServers": {"fs": mock_server(&[])}});
    let t = Tether::start(config, &["serve", "--listen", "127.0.0.1:0", "--auth-token", TOKEN]);
    let url = listening(&t);
    // More than the 64 sessions tether serves at once: a refused one must not keep one.
    for (n, id) in
        ["1.5", "18446744073709551616", "-1e3", "true", "[1]", "{\"a\":1}"].iter().cycle().take(70).enumerate()
    {
        let body: Value = serde_json::from_str(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"odd","version":"1"}}}}}}"#
        ))
        .unwrap();
        let (status, _, text) = post(&url, Some(TOKEN), None, &body);
        assert!(status == 200 || status == 400, "POST {n} (id {id}): HTTP {status}: {text}");
        let answer: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("POST {n} (id {id}): {e}: {text}"));
        assert!(answer["error"]["code"].is_i64(), "{answer}");
        assert_eq!(answer["id"], body["id"], "the answer carries the id as written: {answer}");
    }
    let (status, session, body) = post(&url, Some(TOKEN), None, &initialize());
    assert_eq!(status, 200, "a real client still gets a session: {body}");
    let session = session.expect("a session id");
    let odd = json!({"jsonrpc":"2.0","id":2.5,"method":"tools/list"});
    let (status, _, body) = post(&url, Some(TOKEN), Some(&session), &odd);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, &answer["id"]), (200, &json!(2.5)), "{body}");
    assert_eq!(answer["error"]["code"], -32600, "{body}");
}
