//! Tasks tether runs for a backend that does not (the mock), against the real
//! binary over Streamable HTTP: a task outlives the client's connection and its
//! session. A stateless (2026-07-28) client's task, answered as a task once the
//! sync window passed, completes after its connection is cut and is fetched with
//! `tasks/get` on a new connection, the result inlined; a 2025-11-25 client cut
//! while blocked in `tasks/result` gets the result on a new session, tied to the
//! task; and `tasks/cancel` stops the backend's call at once.
//!
//! The backend records what it receives (`--state-file`): a cut connection must
//! not send it `notifications/cancelled`, a cancelled task must.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::{mcp_post, mock_server, state_lines, wait_until, Tether};

/// The tasks extension's identifier.
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// The `_meta` key tying a 2025-11-25 message to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// A config with one recording mock named `fs` (state file `state`).
fn config(state: &Path, stateless: bool) -> Value {
    let fs = mock_server(&["--state-file", state.to_str().expect("utf-8 path")]);
    json!({"tether": {"stateless_clients": stateless}, "mcpServers": {"fs": fs}})
}

/// The MCP endpoint URL from tether's log line.
fn listening(t: &Tether) -> String {
    t.logged_url("listening on ")
}

/// Fails on log lines that must never appear: a panic, an error, a broken host contract.
fn assert_clean_log(t: &Tether) {
    let log = t.stderr_text();
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("panicked") || l.contains(" ERROR ") || l.contains("host contract violation"))
        .collect();
    assert!(bad.is_empty(), "unexpected log lines:\n{}", bad.join("\n"));
}

/// How many `notifications/cancelled` the recording mock received.
fn cancellations(state: &Path) -> usize {
    state_lines(state).iter().filter(|l| *l == "notifications/cancelled").count()
}

/// Parses an answer's body, naming it when it is not JSON.
fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"))
}

/// Whether `id` looks like tether's task ids: 32 lower-case hex digits.
fn is_task_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

// ---- handshake-era (2025-11-25) clients ----

/// One POST on a connection of its own (a fresh agent, dropped after it):
/// status, session header and body as JSON.
fn post(url: &str, session: Option<&str>, body: &Value) -> (u16, Option<String>, Value) {
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build();
    let (status, session, text) = mcp_post(&agent, url, None, session, body).unwrap_or_else(|e| panic!("{e}"));
    (status, session, if text.is_empty() { Value::Null } else { parse(&text) })
}

/// A new 2025-11-25 session (initialize, then notifications/initialized); its id
/// and the initialize result.
fn new_session(url: &str) -> (String, Value) {
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"tasks-e2e","version":"1"}}});
    let (status, session, answer) = post(url, None, &init);
    assert_eq!(status, 200, "{answer}");
    let session = session.expect("a session id");
    assert_eq!(answer["result"]["protocolVersion"], "2025-11-25", "{answer}");
    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(post(url, Some(&session), &initialized).0, 202);
    (session, answer["result"].clone())
}

/// A request on a 2025-11-25 session; the whole JSON-RPC answer (HTTP 200 asserted).
fn request(url: &str, session: &str, id: u64, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
    let (status, _, answer) = post(url, Some(session), &body);
    assert_eq!(status, 200, "{method}: {answer}");
    assert_eq!(answer["id"], id, "{method}: {answer}");
    answer
}

/// Waits until the session's `fs__echo` answers (the backend is up), so later
/// calls are not held up by its start.
fn wait_for_fs(url: &str, session: &str) {
    let answer = request(url, session, 2, "tools/call", json!({"name":"fs__echo","arguments":{"text":"up"}}));
    assert_eq!(answer["result"]["content"][0]["text"], "up", "{answer}");
}

// ---- stateless (2026-07-28) clients ----

/// A stateless request's `_meta`, declaring the tasks extension when `tasks`.
fn stateless_meta(tasks: bool) -> Value {
    let capabilities = if tasks { json!({"extensions": {TASKS: {}}}) } else { json!({}) };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-e2e", "version": "1"},
    })
}

/// The revision's request headers for `body`: `Mcp-Name` is the tool's name
/// (tools/call) or the task's id (tasks/*).
fn stateless_headers(body: &Value) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28".to_string()),
        ("Mcp-Method", body["method"].as_str().expect("a method").to_string()),
    ];
    if let Some(name) = body["params"]["name"].as_str().or(body["params"]["taskId"].as_str()) {
        headers.push(("Mcp-Name", name.to_string()));
    }
    headers
}

/// A stateless POST on a connection of its own (a fresh agent, dropped after
/// it); status and body as JSON (the last event's data for an SSE answer).
fn post_stateless(url: &str, body: &Value) -> (u16, Value) {
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build();
    let mut req =
        agent.post(url).set("Content-Type", "application/json").set("Accept", "application/json, text/event-stream");
    for (name, value) in stateless_headers(body) {
        req = req.set(name, &value);
    }
    let response = match req.send_string(&body.to_string()) {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {url}: {e}"),
    };
    let status = response.status();
    let sse = response.content_type() == "text/event-stream";
    let text = response.into_string().expect("the answer's body");
    let text = if sse { last_sse_data(&text).unwrap_or_default() } else { text };
    (status, parse(&text))
}

/// The data of the last non-empty `data:` line of an SSE body.
fn last_sse_data(text: &str) -> Option<String> {
    text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).rfind(|d| !d.is_empty()).map(String::from)
}

// ---- raw HTTP/1.1, to hold and cut one connection explicitly ----

/// Opens a connection of its own to `url` and writes one MCP POST of `body`
/// with `headers` besides Host, Content-Type, Accept and Content-Length.
fn raw_post(url: &str, headers: &[(&str, String)], body: &Value) -> TcpStream {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (authority, path) = rest.split_once('/').expect("a path");
    let mut stream = TcpStream::connect(authority).unwrap_or_else(|e| panic!("connect {authority}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let body = body.to_string();
    let mut head = format!(
        "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body.as_bytes())).expect("write the request");
    stream
}

/// Reads one HTTP/1.1 answer from `stream` (Content-Length or chunked; JSON, or
/// SSE read until its first JSON-RPC response): status and that message. Leaves
/// the connection open.
fn read_answer(stream: &mut TcpStream) -> (u16, Value) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).expect("the status line");
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {line:?}"));
    let (mut length, mut chunked, mut sse) = (None, false, false);
    loop {
        line.clear();
        reader.read_line(&mut line).expect("a header line");
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or_else(|| panic!("a header: {header:?}"));
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_ascii_lowercase());
        match name.as_str() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "content-type" => sse = value.starts_with("text/event-stream"),
            _ => {}
        }
    }
    // The first complete JSON-RPC response in an SSE body, if any yet.
    let response_in = |text: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some() && (m.get("result").is_some() || m.get("error").is_some()))
    };
    let mut body = Vec::new();
    if let Some(length) = length {
        body.resize(length, 0);
        reader.read_exact(&mut body).expect("the body");
    } else if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line).expect("a chunk size");
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .unwrap_or_else(|_| panic!("a chunk size: {line:?}"));
            if size == 0 {
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).expect("a chunk");
            body.extend_from_slice(&chunk[..size]);
            if sse && response_in(&String::from_utf8_lossy(&body)).is_some() {
                break;
            }
        }
    } else {
        reader.read_to_end(&mut body).expect("the body");
    }
    let text = String::from_utf8(body).expect("a UTF-8 body");
    let message =
        if sse { response_in(&text).unwrap_or_else(|| panic!("no response in {text:?}")) } else { parse(&text) };
    (status, message)
}

/// Cuts the connection: both directions shut, then the socket closed.
fn cut(stream: TcpStream) {
    stream.shutdown(Shutdown::Both).ok();
    drop(stream);
}

#[test]
fn a_stateless_clients_task_survives_its_connection_and_is_fetched_on_a_new_one() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fs.state");
    let t = Tether::start(config(&state, true), &["serve", "--listen", "127.0.0.1:0"]);
    let url = listening(&t);

    // Once fs lists its tools, calls go straight to it.
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": stateless_meta(false)}});
    let mut tools = Value::Null;
    let listed = wait_until(Duration::from_secs(20), || {
        tools = post_stateless(&url, &list).1;
        tools.to_string().contains("fs__slow")
    });
    assert!(listed, "fs__slow is never listed: {tools}");

    // The slow call, on a connection of its own: answered with a task once the
    // sync window (500 ms) passes, long before the tool's 3 s are up.
    let call = json!({"jsonrpc":"2.0","id":"slow-1","method":"tools/call","params":{"name":"fs__slow","arguments":{"ms":3000},"_meta": stateless_meta(true)}});
    let sent = Instant::now();
    let mut stream = raw_post(&url, &stateless_headers(&call), &call);
    let (status, answer) = read_answer(&mut stream);
    let answered_in = sent.elapsed();
    cut(stream);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], "slow-1", "{answer}");
    let created = &answer["result"];
    assert_eq!(created["resultType"], "task", "a task, not the tool's result: {answer}");
    assert_eq!(created["status"], "working", "{answer}");
    let task_id = created["taskId"].as_str().unwrap_or_else(|| panic!("no taskId: {answer}")).to_string();
    assert!(is_task_id(&task_id), "{answer}");
    assert_eq!(created["ttlMs"], 3_600_000, "{answer}");
    let poll = created["pollIntervalMs"].as_u64().unwrap_or_else(|| panic!("no pollIntervalMs: {answer}"));
    assert!(created["createdAt"].is_string() && created["lastUpdatedAt"].is_string(), "{answer}");
    assert!(created.get("content").is_none(), "no tool result yet: {answer}");
    assert!(answered_in < Duration::from_millis(2500), "the task came after {answered_in:?}");

    // From new connections: the task goes on without the first, and completes.
    let get = json!({"jsonrpc":"2.0","id":"get","method":"tasks/get","params":{"taskId": task_id,"_meta": stateless_meta(true)}});
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut polls, mut working_seen) = (0, false);
    let done = loop {
        let (status, answer) = post_stateless(&url, &get);
        polls += 1;
        assert_eq!(status, 200, "tasks/get #{polls}: {answer}");
        let task = &answer["result"];
        assert_eq!(task["resultType"], "complete", "{answer}");
        assert_eq!(task["taskId"], task_id.as_str(), "{answer}");
        match task["status"].as_str() {
            Some("working") => working_seen = true,
            Some("completed") => break answer,
            _ => panic!("tasks/get #{polls}: the task did not go on: {answer}\n{}", t.stderr_text()),
        }
        assert!(Instant::now() < deadline, "still working after 20 s: {answer}\n{}", t.stderr_text());
        std::thread::sleep(Duration::from_millis(poll));
    };
    assert!(working_seen, "the first tasks/get, right after the task was made, saw it working");
    let result = &done["result"]["result"];
    assert_eq!(result["content"][0]["text"], "slept 3000 ms", "the slow tool's result, inlined: {done}");
    assert_ne!(result["isError"], true, "{done}");
    assert!(sent.elapsed() >= Duration::from_millis(3000), "completed before the tool could have slept");

    assert_eq!(cancellations(&state), 0, "the cut connection cancelled the call: {:?}", state_lines(&state));
    assert_eq!(
        state_lines(&state).iter().filter(|l| *l == "tools/call").count(),
        1,
        "one call reached fs (no resend): {:?}",
        state_lines(&state)
    );
    assert_clean_log(&t);
    eprintln!("stateless task: answered in {answered_in:?}, {polls} polls, {:?} in all", started.elapsed());
}

#[test]
fn a_2025_client_cut_while_waiting_for_tasks_result_reconnects_and_gets_the_result() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fs.state");
    let t = Tether::start(config(&state, false), &["serve", "--listen", "127.0.0.1:0"]);
    let url = listening(&t);

    let (a, init) = new_session(&url);
    assert!(init["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(), "tasks announced: {init}");
    wait_for_fs(&url, &a);

    // The slow call as a task: the task at once, not after the tool's 3 s.
    let sent = Instant::now();
    let answer = request(&url, &a, 3, "tools/call", json!({"name":"fs__slow","arguments":{"ms":3000},"task":{}}));
    let answered_in = sent.elapsed();
    let task = &answer["result"]["task"];
    let task_id = task["taskId"].as_str().unwrap_or_else(|| panic!("no task: {answer}")).to_string();
    assert!(is_task_id(&task_id), "{answer}");
    assert_eq!(task["status"], "working", "{answer}");
    assert!(task["ttl"].is_u64() && task["pollInterval"].is_u64(), "{answer}");
    assert!(answer["result"].get("content").is_none(), "not the tool's result: {answer}");
    assert!(answered_in < Duration::from_millis(2000), "the task came after {answered_in:?}");

    // tasks/result on a connection of its own, cut while it blocks.
    let result_req = json!({"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId": task_id}});
    let headers = [("Mcp-Session-Id", a.clone()), ("MCP-Protocol-Version", "2025-11-25".to_string())];
    let mut stream = raw_post(&url, &headers, &result_req);
    stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut early = Vec::new();
    let mut buf = [0; 4096];
    let read_until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < read_until {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => early.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    cut(stream);
    let early = String::from_utf8_lossy(&early);
    assert!(!early.contains("slept"), "tasks/result answered before the task finished: {early}");
    assert!(!early.contains("\"error\""), "tasks/result refused: {early}");
    assert!(sent.elapsed() < Duration::from_millis(3000), "the cut came after the task could end; too slow a machine");

    // A new session: the task is there, by its id alone, and tasks/result
    // blocks until it ends, then answers with the tool's result.
    let (b, _) = new_session(&url);
    assert_ne!(a, b);
    let answer = request(&url, &b, 5, "tasks/result", json!({"taskId": task_id}));
    let waited = sent.elapsed();
    let result = &answer["result"];
    assert_eq!(result["content"][0]["text"], "slept 3000 ms", "the slow tool's result: {answer}");
    assert_ne!(result["isError"], true, "{answer}");
    assert_eq!(result["_meta"][RELATED_TASK]["taskId"], task_id.as_str(), "tied to the task: {answer}");
    assert!(waited >= Duration::from_millis(3000), "answered after {waited:?}, before the tool could have slept");

    let answer = request(&url, &b, 6, "tasks/get", json!({"taskId": task_id}));
    assert_eq!(answer["result"]["taskId"], task_id.as_str(), "{answer}");
    assert_eq!(answer["result"]["status"], "completed", "{answer}");

    assert_eq!(cancellations(&state), 0, "the cut connection cancelled the call: {:?}", state_lines(&state));
    assert_clean_log(&t);
    eprintln!("2025 task: made in {answered_in:?}, result after {waited:?}, {:?} in all", started.elapsed());
}

#[test]
fn cancelling_a_task_over_http_stops_it() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fs.state");
    let t = Tether::start(config(&state, false), &["serve", "--listen", "127.0.0.1:0"]);
    let url = listening(&t);
    let (session, _) = new_session(&url);
    wait_for_fs(&url, &session);

    let answer =
        request(&url, &session, 3, "tools/call", json!({"name":"fs__slow","arguments":{"ms":30000},"task":{}}));
    let task_id =
        answer["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {answer}")).to_string();
    assert_eq!(answer["result"]["task"]["status"], "working", "{answer}");
    // The backend has the call before it is cancelled.
    assert!(
        wait_until(Duration::from_secs(10), || state_lines(&state).iter().filter(|l| *l == "tools/call").count() == 2),
        "the slow call never reached fs: {:?}",
        state_lines(&state)
    );
    assert_eq!(cancellations(&state), 0, "{:?}", state_lines(&state));

    let answer = request(&url, &session, 4, "tasks/cancel", json!({"taskId": task_id}));
    assert_eq!(answer["result"]["taskId"], task_id.as_str(), "{answer}");
    assert_eq!(answer["result"]["status"], "cancelled", "{answer}");

    let answer = request(&url, &session, 5, "tasks/get", json!({"taskId": task_id}));
    assert_eq!(answer["result"]["taskId"], task_id.as_str(), "{answer}");
    assert_eq!(answer["result"]["status"], "cancelled", "{answer}");

    // The backend is told to stop the call.
    assert!(
        wait_until(Duration::from_secs(5), || cancellations(&state) == 1),
        "fs was not told to stop: {:?}",
        state_lines(&state)
    );
    // tasks/result does not wait the 30 s out: it answers that the task was cancelled.
    let answer = request(&url, &session, 6, "tasks/result", json!({"taskId": task_id}));
    assert!(answer["result"].is_null(), "no result for a cancelled task: {answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_else(|| panic!("an error: {answer}"));
    assert!(message.contains("cancelled"), "{answer}");

    // A second cancel is refused: the task already finished.
    let (status, _, answer) = post(
        &url,
        Some(&session),
        &json!({"jsonrpc":"2.0","id":7,"method":"tasks/cancel","params":{"taskId": task_id}}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");

    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert_clean_log(&t);
    eprintln!("cancel: {elapsed:?} in all");
}
