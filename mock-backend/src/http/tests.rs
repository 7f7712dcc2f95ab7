//! Unit tests of the HTTP front, against a mock on an ephemeral port, and of the
//! bookkeeping of `--cut-streams`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::replay::Replay;
use super::*;
use crate::tests::{stateless, stateless_request, with_meta, WAIT};
use crate::{MockOptions, STATELESS_PROTOCOL_VERSION};

#[test]
fn cut_streams_number_events_across_streams_and_locate_them_for_resumption() {
    let replay = Replay::new(7);
    assert_eq!(replay.record(1, None, false), "id: 1\nretry: 50\ndata: \n\n");
    replay.record(2, None, false);
    let response = replay.record(1, Some(&json!({"jsonrpc": "2.0", "id": 1, "result": {}})), true);
    assert!(response.starts_with("id: 3\nevent: message\ndata: {"), "{response}");
    for _ in 0..10 {
        let (stream, from, next) = replay.locate(1).expect("event 1 is known");
        assert_eq!((stream, next), (1, 1));
        assert!(from <= next);
        assert_eq!(replay.locate(3).map(|(s, _, n)| (s, n)), Some((1, 2)));
    }
    assert_eq!(replay.locate(99), None);
    assert!(lock(&replay.state).streams[&1].1, "the response completes the stream");
}

/// A mock serving HTTP on an ephemeral port.
fn http_mock(options: MockOptions) -> SocketAddr {
    let server = tiny_http::Server::http("127.0.0.1:0").expect("bind");
    let addr = server.server_addr().to_ip().expect("an IP address");
    let mock = Arc::new(Mock::new(options).expect("valid options"));
    thread::spawn(move || HttpFront::new(mock).serve(&server));
    addr
}

/// Sends one HTTP/1.1 request and returns the open connection, positioned at
/// the start of the response.
fn http_send(addr: SocketAddr, method: &str, session: Option<&str>, body: &str) -> BufReader<TcpStream> {
    let session = session.map(|id| format!("Mcp-Session-Id: {id}\r\n")).unwrap_or_default();
    http_send_with(addr, method, &session, body)
}

/// [`http_send`] with extra header lines (each ending in CRLF).
fn http_send_with(addr: SocketAddr, method: &str, headers: &str, body: &str) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    write!(
        stream,
        "{method} /mcp HTTP/1.1\r\nHost: mock\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    BufReader::new(stream)
}

/// Sends a request and reads the whole response: status, headers, body.
fn http(addr: SocketAddr, method: &str, session: Option<&str>, body: &str) -> (u16, String, String) {
    let session = session.map(|id| format!("Mcp-Session-Id: {id}\r\n")).unwrap_or_default();
    http_with(addr, method, &session, body)
}

/// [`http`] with extra header lines (each ending in CRLF).
fn http_with(addr: SocketAddr, method: &str, headers: &str, body: &str) -> (u16, String, String) {
    let mut reader = http_send_with(addr, method, headers, body);
    let mut text = String::new();
    reader.read_to_string(&mut text).expect("a response");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

fn session_header(head: &str) -> Option<String> {
    head.lines()
        .find_map(|line| line.strip_prefix("Mcp-Session-Id: ").or_else(|| line.strip_prefix("mcp-session-id: ")))
        .map(String::from)
}

#[test]
fn http_sessions_are_issued_required_and_ended() {
    let addr = http_mock(MockOptions::default());
    let (status, head, body) = http(addr, "POST", None, r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#);
    assert_eq!(status, 200, "{head}");
    assert!(body.contains(r#""serverInfo""#), "{body}");
    let session = session_header(&head).expect("a session id");
    assert_eq!(session.len(), 32);

    let echo = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#;
    assert_eq!(http(addr, "POST", None, echo).0, 400);
    assert_eq!(http(addr, "POST", Some("feedbeef"), echo).0, 404);
    let (status, _, body) = http(addr, "POST", Some(&session), echo);
    assert_eq!((status, body.contains(r#""text":"hi""#)), (200, true), "{body}");
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(http(addr, "POST", Some(&session), note).0, 202);
    assert_eq!(http(addr, "POST", Some(&session), "{oops").0, 400);
    assert_eq!(http(addr, "GET", Some(&session), "").0, 405);
    assert_eq!(http(addr, "DELETE", Some(&session), "").0, 200);
    assert_eq!(http(addr, "POST", Some(&session), echo).0, 404);
}

#[test]
fn http_sample_streams_the_request_and_takes_the_answer_on_another_post() {
    let addr = http_mock(MockOptions::default());
    let (_, head, _) = http(addr, "POST", None, r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#);
    let session = session_header(&head).expect("a session id");
    let call =
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sample","arguments":{"prompt":"p"}}}"#;
    let mut stream = http_send(addr, "POST", Some(&session), call);
    let mut events = Vec::new();
    let mut line = String::new();
    while events.is_empty() {
        line.clear();
        assert!(stream.read_line(&mut line).expect("a line") > 0, "the stream ended early");
        if line.starts_with("HTTP/1.1") {
            assert!(line.contains("200"), "{line}");
        }
        if let Some(data) = line.strip_prefix("data: ") {
            events.push(serde_json::from_str::<Value>(data).expect("JSON event"));
        }
    }
    assert_eq!(events[0]["method"], "sampling/createMessage");
    let answer = json!({"jsonrpc": "2.0", "id": events[0]["id"],
        "result": {"role": "assistant", "content": {"type": "text", "text": "sampled"}, "model": "m"}});
    assert_eq!(http(addr, "POST", Some(&session), &answer.to_string()).0, 202);
    let mut rest = String::new();
    stream.read_to_string(&mut rest).expect("the rest of the stream");
    assert!(rest.contains(r#""text":"sampled""#), "{rest}");
}

/// A stateless mock serving HTTP on an ephemeral port, with its front (to
/// look at its open listens) and a keep-alive period of `keep_alive`.
fn stateless_http_mock(keep_alive: Duration) -> (SocketAddr, Arc<HttpFront>) {
    let server = tiny_http::Server::http("127.0.0.1:0").expect("bind");
    let addr = server.server_addr().to_ip().expect("an IP address");
    let mut mock = Mock::new(stateless()).expect("valid options");
    mock.keep_alive = keep_alive;
    let front = Arc::new(HttpFront::new(Arc::new(mock)));
    let serving = Arc::clone(&front);
    thread::spawn(move || serving.serve(&server));
    (addr, front)
}

/// A stateless request body and the headers that agree with it.
fn stateless_post(id: u64, method: &str, params: Value) -> (String, String) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": stateless_request(params)}).to_string();
    let headers = format!("MCP-Protocol-Version: {STATELESS_PROTOCOL_VERSION}\r\nMcp-Method: {method}\r\n");
    (headers, body)
}

/// The JSON body of a response.
fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Reads an SSE stream up to its next event, skipping the response head and
/// comments.
fn next_event(stream: &mut BufReader<TcpStream>) -> Value {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stream.read_line(&mut line).expect("a line") > 0, "the stream ended early");
        if let Some(data) = line.strip_prefix("data: ") {
            return serde_json::from_str(data).expect("JSON event");
        }
    }
}

#[test]
fn http_stateless_checks_headers_and_maps_errors_to_statuses() {
    let (addr, _front) = stateless_http_mock(KEEP_ALIVE);
    assert_eq!(http_with(addr, "GET", "", "").0, 405);
    assert_eq!(http_with(addr, "DELETE", "Mcp-Session-Id: x\r\n", "").0, 405);

    let (headers, body) = stateless_post(1, "server/discover", json!({}));
    let (status, head, answer) = http_with(addr, "POST", &headers, &body);
    assert_eq!(status, 200, "{head}");
    assert!(!head.to_ascii_lowercase().contains("mcp-session-id"), "{head}");
    assert_eq!(json_of(&answer)["result"]["supportedVersions"], json!(["2026-07-28"]));

    let (_, body) = stateless_post(2, "tools/list", json!({}));
    let no_version = "Mcp-Method: tools/list\r\n";
    let (status, _, answer) = http_with(addr, "POST", no_version, &body);
    assert_eq!((status, json_of(&answer)["error"]["code"].clone()), (400, json!(-32020)));
    let other_version = "Mcp-Method: tools/list\r\nMCP-Protocol-Version: 2025-11-25\r\n";
    assert_eq!(json_of(&http_with(addr, "POST", other_version, &body).2)["error"]["code"], -32020);
    let wrong_method = format!("Mcp-Method: tools/call\r\nMCP-Protocol-Version: {STATELESS_PROTOCOL_VERSION}\r\n");
    let (status, _, answer) = http_with(addr, "POST", &wrong_method, &body);
    assert_eq!(
        (status, json_of(&answer)["error"]["code"].clone(), json_of(&answer)["id"].clone()),
        (400, json!(-32020), json!(2))
    );

    let initialize = r#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#;
    let (status, _, answer) = http_with(addr, "POST", "MCP-Protocol-Version: 2025-11-25\r\n", initialize);
    assert_eq!((status, json_of(&answer)["error"]["data"].clone()), (404, json!({"supported": ["2026-07-28"]})));

    let old = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list",
        "params": {"_meta": {META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {}}}});
    let (status, _, answer) = http_with(addr, "POST", other_version, &old.to_string());
    assert_eq!((status, json_of(&answer)["error"]["code"].clone()), (400, json!(-32022)));
    let bare = r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}"#;
    let (status, _, answer) = http_with(addr, "POST", no_version, bare);
    assert_eq!((status, json_of(&answer)["error"]["code"].clone()), (400, json!(-32602)));

    let call = json!({"name": "sample", "arguments": {"prompt": "p"}});
    let unable =
        json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": with_meta(call.clone(), json!({}))});
    let call_headers = format!("Mcp-Method: tools/call\r\nMCP-Protocol-Version: {STATELESS_PROTOCOL_VERSION}\r\n");
    let (status, _, answer) = http_with(addr, "POST", &call_headers, &unable.to_string());
    assert_eq!((status, json_of(&answer)["error"]["code"].clone()), (400, json!(-32021)));
    let (headers, body) = stateless_post(7, "tools/call", call);
    let (status, _, answer) = http_with(addr, "POST", &headers, &body);
    assert_eq!((status, json_of(&answer)["result"]["resultType"].clone()), (200, json!("input_required")));

    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(http_with(addr, "POST", "", note).0, 202);
}

#[test]
fn http_stateless_listen_streams_changes_and_ends_when_the_client_closes() {
    let (addr, front) = stateless_http_mock(Duration::from_millis(20));
    let (headers, body) =
        stateless_post(1, "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    let mut listen = http_send_with(addr, "POST", &headers, &body);
    let mut status_line = String::new();
    listen.read_line(&mut status_line).expect("a status line");
    assert!(status_line.contains("200"), "{status_line}");
    let ack = next_event(&mut listen);
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["_meta"][META_SUBSCRIPTION_ID], 1);

    let (headers, body) = stateless_post(2, "tools/call", json!({"name": "add_tool"}));
    let (status, _, answer) = http_with(addr, "POST", &headers, &body);
    assert_eq!((status, json_of(&answer)["result"]["resultType"].clone()), (200, json!("complete")));
    let changed = next_event(&mut listen);
    assert_eq!(changed, notification("notifications/tools/list_changed", json!({"_meta": {META_SUBSCRIPTION_ID: 1}})));
    let mut line = String::new();
    while line != ":\n" {
        line.clear();
        listen.read_line(&mut line).expect("a keep-alive");
    }

    assert_eq!(lock(&front.shared.listens).open.len(), 1);
    drop(listen);
    let deadline = Instant::now() + WAIT;
    while !lock(&front.shared.listens).open.is_empty() {
        assert!(Instant::now() < deadline, "the listen outlived its stream");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn http_status_refuses_every_post() {
    let addr = http_mock(MockOptions { http_status: Some(401), ..MockOptions::default() });
    let (status, head, _) = http(addr, "POST", None, r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#);
    assert_eq!(status, 401);
    assert!(head.contains("WWW-Authenticate"), "{head}");
}
