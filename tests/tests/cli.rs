//! The `tether` command line: `check`, `status` (with `--watch`), `--record` with
//! `replay`, `demo`, config errors, and stdout carrying nothing but protocol.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::{free_port, mock_server, tether_bin, wait_until, Tether};

/// `tether` with `args`, without the environment variables that would stand in
/// for flags a test leaves out.
fn tether(args: &[&str]) -> Command {
    let mut command = Command::new(tether_bin());
    command.args(args);
    for name in ["TETHER_AUTH_TOKEN", "TETHER_STATUS_URL", "TETHER_CONFIG", "NO_COLOR", "CLICOLOR_FORCE"] {
        command.env_remove(name);
    }
    command
}

/// Runs `tether` with `args` to completion (killed after `limit`).
fn run(args: &[&str], limit: Duration) -> Output {
    run_command(tether(args), limit)
}

/// Runs `command` to completion (killed after `limit`).
fn run_command(mut command: Command, limit: Duration) -> Output {
    let child =
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start tether");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(output) => output.expect("tether output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-s", "KILL", &pid.to_string()]).status();
            panic!("{command:?} did not finish within {limit:?}");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write_config(dir: &Path, config: &Value) -> String {
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_string_pretty(config).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

/// Short restart delays, so a failing backend settles fast.
fn with_policy(servers: Value) -> Value {
    json!({ "tether": { "policy": { "restart_delays_ms": [100, 200, 300] } }, "mcpServers": servers })
}

#[test]
fn check_prints_a_table_and_fails_when_a_backend_fails() {
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({
        "good": mock_server(&["--name", "good"]),
        "broken": mock_server(&["--name", "broken", "--exit-on-start", "1", "--stderr", "broken: missing API key"]),
    });
    let config = write_config(dir.path(), &with_policy(servers));
    let out = run(&["--config", &config, "check"], Duration::from_secs(30));
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "check passed with a failing backend:\n{stdout}");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}\n{}", text(&out.stderr)))
            .to_string()
    };
    let good = line("good");
    assert!(good.contains("online"), "{good}");
    let broken = line("broken");
    assert!(!broken.contains("online"), "{broken}");
    assert!(broken.contains("missing API key"), "the failing row should carry the backend's stderr: {broken}");
}

/// The first hour's misleading messages, as `tether check` shows them: an
/// `https://` URL to a plain-HTTP server is a TLS failure (not "connection
/// refused"), an unset `${VAR}` keeps only its own server from starting.
#[test]
fn check_says_what_is_wrong_in_words_a_new_user_can_act_on() {
    // A plain-HTTP server: whatever comes, it answers 400 in plain text.
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = plain.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in plain.incoming().flatten() {
            let mut stream = stream;
            let _ = std::io::Write::write_all(&mut stream, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({
        "good": mock_server(&["--name", "good"]),
        "plain": { "url": format!("https://127.0.0.1:{port}/mcp") },
        "keyless": mock_server(&["--name", "keyless", "--stderr", "${TETHER_TEST_SURELY_UNSET_KEY}"]),
    });
    let config = write_config(dir.path(), &with_policy(servers));
    let out = run(&["--config", &config, "check"], Duration::from_secs(30));
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    let row = |name: &str| stdout.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or("").to_string();
    assert!(row("good").contains("online"), "one bad entry stops nothing else:\n{stdout}\n{}", text(&out.stderr));
    let plain = row("plain");
    assert!(plain.contains("TLS handshake failed") && plain.contains("plain HTTP"), "{plain}");
    assert!(!plain.contains("refused"), "{plain}");
    let keyless = row("keyless");
    assert!(keyless.contains("error") && keyless.contains("TETHER_TEST_SURELY_UNSET_KEY is not set"), "{keyless}");
}

#[test]
fn check_succeeds_when_every_backend_is_online() {
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({
        "one": mock_server(&["--name", "one"]),
        "two": mock_server(&["--name", "two", "--tools", "echo"]),
    });
    let config = write_config(dir.path(), &with_policy(servers));
    let out = run(&["--config", &config, "check"], Duration::from_secs(30));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "check failed:\n{stdout}\n{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "check prints its table and nothing else by default");
    for name in ["one", "two"] {
        let row = stdout.lines().find(|l| l.split_whitespace().next() == Some(name));
        assert!(row.is_some_and(|r| r.contains("online")), "{name}:\n{stdout}");
    }
}

/// What `--record` writes, `replay` turns back into the frames the client got.
#[test]
fn a_recorded_session_replays_to_the_same_responses() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let trace_arg = trace.to_str().unwrap().to_string();
    let config = with_policy(json!({ "fs": mock_server(&["--name", "fs"]) }));
    let mut t = Tether::start(config, &["--record", &trace_arg, "--seed", "42"]);
    t.initialize();
    t.tool_names();
    assert_eq!(t.call_text("fs__echo", json!({"text": "recorded"})), "recorded");
    let crashed = t.call("fs__crash", json!({}));
    assert!(crashed["error"].is_object(), "{crashed}");
    t.call_text("fs__pid", json!({}));
    t.request(
        "tools/call",
        json!({"name": "fs__progress", "arguments": {"steps": 2, "ms": 10}, "_meta": {"progressToken": 7}}),
    );
    t.request("tools/call", json!({"name": "nope"}));
    let lines = t.stdout_lines.clone();
    assert!(t.finish().success());

    let received: BTreeMap<String, Value> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|f| f.get("id").is_some() && f.get("method").is_none())
        .map(|f| (f["id"].to_string(), f))
        .collect();
    assert!(received.len() >= 7, "{received:?}");

    let out = run(&["replay", "--json", &trace_arg], Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut replayed = BTreeMap::new();
    for line in text(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("replay --json line ({e}): {line}"));
        let action = &v["action"];
        if action["type"] == "send_to_client" && action["session"] == 1 {
            let frame: Value = serde_json::from_str(action["frame"].as_str().unwrap()).unwrap();
            if frame.get("id").is_some() && frame.get("method").is_none() {
                replayed.insert(frame["id"].to_string(), frame);
            }
        }
    }
    assert_eq!(replayed, received, "replayed responses differ from the live ones");

    // The readable form shows the same frames, one `client 1 <- …` line each.
    let out = run(&["replay", &trace_arg], Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let readable = text(&out.stdout);
    let to_client = readable.lines().filter(|l| l.contains("] client 1 <- ")).count();
    let frames_received = lines.lock().unwrap().len();
    assert!(to_client >= received.len(), "{readable}");
    assert!(to_client >= frames_received, "replay shows {to_client} frames to the client, it got {frames_received}");
    // Frames short enough to be shown whole appear exactly as the client got them.
    let short: Vec<String> =
        lines.lock().unwrap().iter().filter(|l| l.len() < 240 && !l.contains('\\')).cloned().collect();
    assert!(short.len() >= 3, "{short:?}");
    for line in short {
        assert!(readable.contains(&format!("client 1 <- {line}\n")), "replay lacks {line}\n{readable}");
    }
}

#[test]
fn demo_runs_to_completion() {
    let started = Instant::now();
    let out = run(&["demo"], Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("Demo complete"), "{stdout}");
    assert!(stdout.contains("permanently_failed"), "{stdout}");
    eprintln!("demo took {:?}", started.elapsed());
}

#[test]
fn a_config_syntax_error_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.json");
    std::fs::write(&path, "{\n  \"mcpServers\": {\n    \"fs\" {\"command\": \"x\"}\n  }\n}\n").unwrap();
    let path = path.to_str().unwrap();
    let out = run(&["--config", path], Duration::from_secs(30));
    assert!(!out.status.success(), "tether accepted a broken config");
    let stderr = text(&out.stderr);
    let at = stderr.find(&format!("{path}:3:")).unwrap_or_else(|| panic!("no {path}:3:<column> in: {stderr}"));
    let column: String = stderr[at + path.len() + 3..].chars().take_while(char::is_ascii_digit).collect();
    assert!(!column.is_empty() && stderr[at + path.len() + 3 + column.len()..].starts_with(':'), "{stderr}");
    assert!(out.stdout.is_empty(), "stdout must stay clean: {}", text(&out.stdout));
}

#[test]
fn check_refuses_a_config_without_servers_and_lists_every_misplaced_key() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write_config(dir.path(), &json!({"mcpServers": {}}));
    let out = run(&["--config", &empty, "check"], Duration::from_secs(30));
    assert!(!out.status.success(), "check passed with nothing to check");
    assert!(text(&out.stderr).contains("has no servers: nothing to check"), "{}", text(&out.stderr));
    let path = dir.path().join("misplaced.json");
    let config = json!({"mcpServers": {"fs": {"command": "x", "vital": true, "lazzy": true}}, "separator": "."});
    std::fs::write(&path, config.to_string()).unwrap();
    let out = run(&["--config", path.to_str().unwrap(), "check"], Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    for expected in ["mcpServers.fs.vital", "mcpServers.fs.tether.vital", "did you mean \"lazy\"", "tether.separator"] {
        assert!(stderr.contains(expected), "{expected:?} missing from: {stderr}");
    }
}

/// Whatever happens (backend stderr noise, backend logs, crashes, garbage from the
/// client), tether's stdout carries only JSON-RPC messages, one per line.
#[test]
fn stdout_carries_only_json_lines() {
    let servers = json!({
        "fs": mock_server(&["--name", "fs", "--stderr", "fs: some noise on stderr"]),
        "gone": mock_server(&["--name", "gone", "--exit-on-start", "2", "--stderr", "gone: cannot start"]),
    });
    let mut t = Tether::start(with_policy(servers), &[]);
    t.initialize();
    t.tool_names();
    t.request("logging/setLevel", json!({"level": "debug"}));
    assert_eq!(t.call_text("fs__log", json!({"message": "hello log"})), "logged");
    t.call("fs__crash", json!({}));
    t.call("fs__fail", json!({}));
    t.request("no/such/method", json!({}));
    let escapes = t.send_request("tools/call", json!({"name": "fs__echo", "arguments": {"text": "a\nb\u{1b}[31m"}}));
    let echoed = t.response(escapes, Duration::from_secs(10)).expect("answer");
    assert_eq!(echoed["result"]["content"][0]["text"], "a\nb\u{1b}[31m", "{echoed}");
    for bad in ["this is not json", r#"{"jsonrpc":"2.0"}"#, "[1,2,3]", r#"{"id":99}"#, "\u{7f}\u{1b}[0m"] {
        t.send_line(bad);
    }
    // Answered after everything above.
    let last = t.request("ping", json!({}));
    assert!(last["result"].is_object(), "{last}");
    let refused = t.take_inbox(|f| matches!(f["error"]["code"].as_i64(), Some(-32700 | -32600)));
    assert_eq!(refused.len(), 5, "each bad line gets one error: {refused:?}");
    let lines = t.stdout_lines.clone();
    assert!(t.wait_log("fs: some noise on stderr", Duration::from_secs(10)));
    assert!(t.finish().success());
    let lines = lines.lock().unwrap();
    assert!(lines.len() >= 8, "{lines:?}");
    for line in lines.iter() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("non-JSON line on stdout ({e}): {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "not a JSON-RPC message: {line}");
    }
}

const STATUS_TOKEN: &str = "tok-status-cli-0123456789abcdef";

/// `tether status` plus `args`: exit code, stdout, stderr.
fn status(args: &[&str]) -> (Option<i32>, String, String) {
    let out = run(&[&["status"], args].concat(), Duration::from_secs(30));
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The row of `server` in a status table.
fn row<'a>(table: &'a str, server: &str) -> Option<&'a str> {
    table.lines().find(|l| l.split_whitespace().next() == Some(server))
}

/// A tether serving HTTP with a token: one backend that works, one that cannot
/// start. `tether status` shows both and exits 1; without the failing one (after
/// a reload), 0; without the token or without a tether, 2, saying why.
#[test]
fn status_shows_a_running_tethers_backends_and_exits_by_their_state() {
    let servers = json!({
        "fs": mock_server(&["--name", "fs"]),
        "broken": mock_server(&["--name", "broken", "--exit-on-start", "1", "--stderr", "broken: missing API key"]),
    });
    let t = Tether::start(with_policy(servers), &["serve", "--listen", "127.0.0.1:0", "--auth-token", STATUS_TOKEN]);
    let url = t.logged_url("listening on ");
    let with_token = ["--url", url.as_str(), "--token", STATUS_TOKEN];

    let mut last = (None, String::new(), String::new());
    let settled = wait_until(Duration::from_secs(30), || {
        last = status(&with_token);
        let (_, table, _) = &last;
        row(table, "fs").is_some_and(|r| r.contains(" online "))
            && row(table, "broken").is_some_and(|r| r.contains("missing API key"))
    });
    let (code, table, stderr) = last;
    assert!(settled, "{table}\n{stderr}\n{}", t.stderr_text());
    assert_eq!(code, Some(1), "a backend is not online:\n{table}");
    assert!(table.starts_with("tether "), "{table}");
    assert!(table.lines().nth(1).is_some_and(|h| h.starts_with("server ") && h.contains("last error")), "{table}");
    let fs = row(&table, "fs").unwrap();
    assert!(fs.contains(" stdio ") && fs.contains(" closed "), "{fs}");
    let broken = row(&table, "broken").unwrap();
    assert!(!broken.contains(" online ") && broken.contains("exited with code 1"), "{broken}");
    assert!(!table.contains('\u{1b}'), "no colour when stdout is not a terminal:\n{table}");

    // The raw JSON, and the same table in colour when asked for.
    let (code, json, _) = status(&["--json", "--url", &url, "--token", STATUS_TOKEN]);
    assert_eq!(code, Some(1));
    let report: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(report["backends"][1]["server"], "fs", "{report}");
    let (_, coloured, _) = status(&["--color", "always", "--url", &url, "--token", STATUS_TOKEN]);
    assert!(coloured.contains("\u{1b}[32monline\u{1b}[0m"), "{coloured}");

    // The token from the environment, as `serve --auth-token` takes it.
    let mut from_env = tether(&["status", "--url", &url]);
    from_env.env("TETHER_AUTH_TOKEN", STATUS_TOKEN);
    let out = run_command(from_env, Duration::from_secs(30));
    assert!(row(&text(&out.stdout), "fs").is_some(), "{}", text(&out.stderr));

    // No token, a wrong one, no tether: 2 and why.
    let status_url = url.replace("/mcp", "/status");
    let (code, stdout, stderr) = status(&["--url", &url]);
    assert_eq!(code, Some(2), "{stdout}");
    assert_eq!(
        stderr.trim(),
        format!("tether status: {status_url}: 401 unauthorized: pass --token or set TETHER_AUTH_TOKEN")
    );
    assert!(stdout.is_empty(), "{stdout}");
    let (code, _, stderr) = status(&["--url", &url, "--token", "tok-wrong-0123456789abcdef"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("401 unauthorized: tether refused the token"), "{stderr}");
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let (code, _, stderr) = status(&["--url", &nobody, "--token", STATUS_TOKEN]);
    assert_eq!(code, Some(2));
    assert!(stderr.starts_with(&format!("tether status: {nobody}/status: cannot reach tether: ")), "{stderr}");

    // Every backend online: 0.
    t.reload(&with_policy(json!({ "fs": mock_server(&["--name", "fs"]) })));
    let mut last = (None, String::new(), String::new());
    let all_online = wait_until(Duration::from_secs(30), || {
        last = status(&with_token);
        last.0 == Some(0)
    });
    assert!(all_online, "{:?}\n{}", last, t.stderr_text());
    assert!(row(&last.1, "broken").is_none(), "{}", last.1);
}

/// `tether status --watch` prints the table, then again on each event, with the
/// latest events under it, until it is stopped.
#[test]
fn status_watch_redraws_when_a_backend_changes() {
    let config = json!({ "mcpServers": { "fs": mock_server(&["--name", "fs"]) } });
    let t = Tether::start(config, &["serve", "--listen", "127.0.0.1:0", "--auth-token", STATUS_TOKEN]);
    let url = t.logged_url("listening on ");
    let mut watch = tether(&["status", "--watch", "--url", &url, "--token", STATUS_TOKEN])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tether status --watch");
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let mut read_until = |what: &str, found: &dyn Fn(&str) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            seen.push(line);
            if found(seen.last().unwrap()) {
                return;
            }
        }
        panic!("no {what} from tether status --watch:\n{}\n{}", seen.join("\n"), t.stderr_text());
    };
    read_until("online row for fs", &|l| row(l, "fs").is_some_and(|r| r.contains(" online ")));
    read_until("live event stream", &|l| l == "events: live");

    // A restart from the admin endpoint: events, and a redraw that lists them.
    let base = url.trim_end_matches("/mcp");
    let answer = ureq::post(&format!("{base}/admin/restart/fs"))
        .set("Authorization", &format!("Bearer {STATUS_TOKEN}"))
        .set("Content-Type", "application/json")
        .send_string("{}")
        .expect("restart fs");
    assert_eq!(answer.status(), 202);
    read_until("event of the restart", &|l| l.contains("  fs  disconnected (on purpose)"));
    let _ = watch.kill();
    let _ = watch.wait();
    let screens = seen.iter().filter(|l| l.starts_with("tether ")).count();
    assert!(screens >= 2, "one screen per change:\n{}", seen.join("\n"));
    let last_screen = &seen[seen.iter().rposition(|l| l.starts_with("tether ")).unwrap()..];
    assert!(last_screen.iter().any(|l| row(l, "fs").is_some()), "{}", seen.join("\n"));
    assert!(
        !seen.iter().any(|l| l.contains('\u{1b}')),
        "no escape sequences when not a terminal:\n{}",
        seen.join("\n")
    );
}

#[test]
fn a_busy_port_is_named_with_what_to_do_and_listen_works_without_serve() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &with_policy(json!({ "one": mock_server(&["--name", "one"]) })));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // `tether --listen` is `tether serve --listen`.
    let out = run(&["--config", &config, "--listen", &addr], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("--listen {addr}: cannot listen")), "{stderr}");
    assert!(stderr.contains("choose another port"), "{stderr}");
}

#[test]
fn tether_blocking_says_an_authorization_section_has_no_effect() {
    let config = json!({
        "mcpServers": {"m": mock_server(&[])},
        "tether": {"authorization": {"issuer": "https://login.example.com/", "resource": "https://mcp.example.com/mcp"}},
    });
    let t = Tether::start_with(tether_tests::Runtime::Blocking, config, &[]);
    let warning = "tether.authorization has no effect in tether-blocking";
    assert!(t.wait_log_count(warning, 1, Duration::from_secs(10)), "{}", t.stderr_text());
}

/// Answers every HTTP request on a loopback port with 401 and a bearer challenge,
/// as a server that wants an OAuth login does; returns its MCP URL.
fn login_wanting_server() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let challenge = format!(
                "Bearer resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp\""
            );
            let _ = write!(
                stream,
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: {challenge}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    format!("http://127.0.0.1:{port}/mcp")
}

/// `tether auth status` with a remote server that needs no login (a tether serving
/// HTTP without a token) and one that answers 401: the first is "no login needed"
/// and no failure; the second is not logged in, says how to log in, and exits 1.
/// Alone, the public server exits 0 (it used to be "not logged in", exit 1).
#[test]
fn auth_status_tells_a_server_without_a_login_from_one_that_wants_one() {
    let public = Tether::start(
        with_policy(json!({ "fs": mock_server(&["--name", "fs"]) })),
        &["serve", "--listen", "127.0.0.1:0"],
    );
    let public_url = public.logged_url("listening on ");
    let dir = tempfile::tempdir().unwrap();
    let auth_status = |servers: Value| {
        let config = write_config(dir.path(), &json!({ "mcpServers": servers }));
        let mut command = tether(&["auth", "status", "--config", &config]);
        command.env("TETHER_STATE_DIR", dir.path());
        let out = run_command(command, Duration::from_secs(30));
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };

    let (code, out, err) = auth_status(json!({ "open": { "url": public_url } }));
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("open: no login needed"), "{out}{err}");

    let (code, out, err) =
        auth_status(json!({ "open": { "url": public_url }, "locked": { "url": login_wanting_server() } }));
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("open: no login needed"), "{out}{err}");
    let locked = out.lines().find(|l| l.starts_with("locked: ")).unwrap_or_default();
    assert!(locked.contains("not logged in") && locked.contains("tether auth login locked"), "{out}{err}");
}
