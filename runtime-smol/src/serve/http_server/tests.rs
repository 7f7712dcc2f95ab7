//! The listener end to end: a real socket, a fake host answering through
//! `deliver`, and real HTTP clients (ureq; raw TCP for headers ureq will not send).
//!
//! The fake host answers each request with `{"echo": <method>}`, except:
//! `slow/progress` sends two related progress notifications first; `push` sends a
//! frame to the session's standalone stream first; `slow/held` sends one progress
//! notification and holds its answer until a `test/release` notification, which
//! releases every held request with a second progress notification and the answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_channel::Receiver;
use serde_json::{json, Value};
use tether_core::{Input, SessionId};

use super::{HttpServer, Route, ServerOptions};

const ACCEPT: &str = "application/json, text/event-stream";
const VERSION: &str = "2025-11-25";
const TOKEN: &str = "s3cret-token";

type Log = Arc<Mutex<Vec<Input>>>;

struct Harness {
    server: HttpServer,
    url: String,
    log: Log,
    agent: ureq::Agent,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}

fn start(options: ServerOptions) -> Harness {
    let (inputs, rx) = async_channel::unbounded();
    let server = smol::block_on(async { HttpServer::bind(options, inputs) }).expect("bind");
    let log = Log::default();
    smol::spawn(fake_host(server.clone(), rx, log.clone())).detach();
    let url = format!("http://{}/mcp", server.local_addr());
    // An overall deadline per request: `timeout_read` alone is not applied to a
    // pooled connection, and a broken server must fail a test, not hang it.
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(5))
        .timeout_read(Duration::from_secs(10))
        .timeout(Duration::from_secs(15))
        .build();
    Harness { server, url, log, agent }
}

fn options() -> ServerOptions {
    ServerOptions { listen: "127.0.0.1:0".parse().unwrap(), ..ServerOptions::default() }
}

fn progress(n: u32) -> String {
    json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": n}}).to_string()
}

async fn fake_host(server: HttpServer, rx: Receiver<Input>, log: Log) {
    let mut held: Vec<(SessionId, Value)> = Vec::new();
    while let Ok(input) = rx.recv().await {
        // Logged once handled: a test that saw an input in the log sees its effects.
        handle(&server, &mut held, &input);
        log.lock().unwrap().push(input);
    }
}

fn handle(server: &HttpServer, held: &mut Vec<(SessionId, Value)>, input: &Input) {
    if let Input::ClientStreamLost { session, request } = input {
        // As the engine does: lists may differ here; the lost request gets an error.
        let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).to_string();
        match request {
            Some(id) => {
                server.deliver(*session, Route::Related(id.clone()), changed);
                let error = json!({"jsonrpc": "2.0", "id": serde_json::from_str::<Value>(id).unwrap(), "error": {"code": -32603, "message": "lost"}});
                server.deliver(*session, Route::Reply(id.clone()), error.to_string());
            }
            None => server.deliver(*session, Route::Session, changed),
        }
        return;
    }
    let Input::ClientFrame { session, frame, .. } = input else { return };
    let session = *session;
    let message: Value = serde_json::from_str(frame).expect("the host gets JSON");
    let method = message["method"].as_str().unwrap_or_default().to_string();
    let Some(id) = message.get("id").cloned() else {
        if method == "test/release" {
            for (session, id) in held.drain(..) {
                server.deliver(session, Route::Related(id.to_string().into()), progress(2));
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"echo": "slow/held"}});
                server.deliver(session, Route::Reply(id.to_string().into()), answer.to_string());
            }
        }
        return;
    };
    if method.is_empty() {
        return; // a response to a server request
    }
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"echo": method}}).to_string();
    let key = id.to_string();
    if method == "initialize" {
        // As the engine does, before its answer: the facts go into the id.
        let facts = tether_core::cluster::SessionFacts::new(VERSION, &serde_json::Map::new(), None);
        server.seal_session(session, facts);
    }
    match method.as_str() {
        "slow/progress" => {
            server.deliver(session, Route::Related(key.as_str().into()), progress(1));
            server.deliver(session, Route::Related(key.as_str().into()), progress(2));
            server.deliver(session, Route::Reply(key.as_str().into()), answer);
        }
        "push" => {
            let pushed = json!({"jsonrpc": "2.0", "method": "notifications/pushed", "params": {"by": id}});
            server.deliver(session, Route::Session, pushed.to_string());
            server.deliver(session, Route::Reply(key.as_str().into()), answer);
        }
        "slow/held" => {
            server.deliver(session, Route::Related(key.as_str().into()), progress(1));
            held.push((session, id));
        }
        _ => server.deliver(session, Route::Reply(key.as_str().into()), answer),
    }
}

/// What a test looks at in a response.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    session: Option<String>,
    allow: Option<String>,
    challenge: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }

    fn error_code(&self) -> i64 {
        self.json()["error"]["code"].as_i64().expect("a JSON-RPC error body")
    }
}

fn outcome(result: Result<ureq::Response, ureq::Error>) -> ureq::Response {
    match result {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("transport error: {e}"),
    }
}

fn answer(response: ureq::Response) -> Answer {
    let header = |name: &str| response.header(name).map(str::to_string);
    let (session, allow, challenge) = (header("mcp-session-id"), header("allow"), header("www-authenticate"));
    let (status, content_type) = (response.status(), response.content_type().to_string());
    let body = response.into_string().expect("a readable body");
    Answer { status, content_type, session, allow, challenge, body }
}

fn request(method: u32, name: &str) -> String {
    json!({"jsonrpc": "2.0", "id": method, "method": name, "params": {}}).to_string()
}

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": VERSION}}).to_string()
}

impl Harness {
    /// A POST with the headers a conforming client sends.
    fn post_request(&self, session: Option<&str>) -> ureq::Request {
        let mut req = self.agent.post(&self.url).set("Accept", ACCEPT).set("Content-Type", "application/json");
        if let Some(session) = session {
            req = req.set("Mcp-Session-Id", session).set("MCP-Protocol-Version", VERSION);
        }
        req
    }

    fn post(&self, session: Option<&str>, body: &str) -> Answer {
        answer(outcome(self.post_request(session).send_string(body)))
    }

    fn initialize(&self) -> String {
        let answer = self.post(None, &initialize_body());
        assert_eq!(answer.status, 200, "{answer:?}");
        answer.session.expect("initialize issues Mcp-Session-Id")
    }

    fn get(&self, session: &str, last_event_id: Option<&str>) -> ureq::Response {
        let mut req = self
            .agent
            .get(&self.url)
            .set("Accept", "text/event-stream")
            .set("Mcp-Session-Id", session)
            .set("MCP-Protocol-Version", VERSION);
        if let Some(id) = last_event_id {
            req = req.set("Last-Event-ID", id);
        }
        outcome(req.call())
    }

    fn delete(&self, session: &str) -> Answer {
        answer(outcome(self.agent.delete(&self.url).set("Mcp-Session-Id", session).call()))
    }

    /// Waits until the host has seen a frame containing `marker`.
    fn wait_for_frame(&self, marker: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.frames().iter().any(|f| f.contains(marker)) {
            assert!(Instant::now() < deadline, "the host never got a frame with {marker}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until the host has seen `input`.
    fn wait_for_input(&self, input: &Input) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.inputs().contains(input) {
            assert!(Instant::now() < deadline, "the host never got {input:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn connected(&self) -> usize {
        self.inputs().iter().filter(|i| matches!(i, Input::ClientConnected { .. })).count()
    }

    fn frames(&self) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter_map(|i| match i {
                Input::ClientFrame { frame, .. } => Some(frame.clone()),
                _ => None,
            })
            .collect()
    }

    fn inputs(&self) -> Vec<Input> {
        self.log.lock().unwrap().clone()
    }

    /// Proves the host got nothing containing `needle`: a marker sent after it arrives first.
    fn assert_not_forwarded(&self, session: &str, needle: &str) {
        let marker = format!("marker-{}", needle.len());
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"m": marker}});
        assert_eq!(self.post(Some(session), &note.to_string()).status, 202);
        self.wait_for_frame(&marker);
        assert!(!self.frames().iter().any(|f| f.contains(needle)), "{needle} was forwarded");
    }
}

/// One SSE event: its id and data (data lines joined).
#[derive(Debug, Clone, PartialEq)]
struct Event {
    id: String,
    data: String,
}

struct Sse {
    lines: BufReader<Box<dyn Read + Send + Sync + 'static>>,
}

impl Sse {
    fn new(response: ureq::Response) -> Sse {
        assert_eq!(response.status(), 200);
        assert_eq!(response.content_type(), "text/event-stream");
        Sse { lines: BufReader::new(response.into_reader()) }
    }

    /// The next event, or `None` when the stream ended.
    fn next(&mut self) -> Option<Event> {
        let mut event = Event { id: String::new(), data: String::new() };
        let mut seen = false;
        loop {
            let mut line = String::new();
            if self.lines.read_line(&mut line).expect("reading the stream") == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if seen {
                    return Some(event);
                }
                continue;
            }
            seen = true;
            if let Some(id) = line.strip_prefix("id:") {
                event.id = id.trim().to_string();
            } else if let Some(data) = line.strip_prefix("data:") {
                if !event.data.is_empty() {
                    event.data.push('\n');
                }
                event.data.push_str(data.trim_start());
            }
        }
    }

    fn rest(mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.next()).collect()
    }
}

/// Sends raw bytes and reads the whole answer (the request asks to close).
fn raw(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {text:?}"));
    (status, text)
}

#[test]
fn heads_a_proxy_may_read_otherwise_are_400_and_the_connection_closes() {
    let h = start(options());
    let addr = h.server.local_addr();
    let body = initialize_body();
    let post = |framing: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {ACCEPT}\r\nContent-Type: application/json\r\n{framing}\r\n"
        )
    };
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let (status, text) = raw(addr, &post("Transfer-Encoding: identity, chunked\r\n"), chunked.as_bytes());
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("chunked alone") && text.to_ascii_lowercase().contains("connection: close"), "{text}");
    let bare = "GET /nowhere HTTP/1.1\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let (status, text) = raw(addr, bare, b"");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("CRLF"), "{text}");
    assert_eq!(h.connected(), 0, "nothing reached the host");
    // Chunked alone, and a body with bare LFs in it, are fine; so is a second
    // request on the same connection.
    let (status, text) = raw(addr, &post("Transfer-Encoding: chunked\r\nConnection: close\r\n"), chunked.as_bytes());
    assert_eq!(status, 200, "{text}");
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let get = "GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    for _ in 0..2 {
        stream.write_all(get.as_bytes()).unwrap();
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).unwrap();
        assert!(
            String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 404"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
}

#[test]
fn initialize_opens_a_session_with_an_unguessable_id() {
    let h = start(ServerOptions { first_session: 40, ..options() });
    let answer = h.post(None, &initialize_body());
    assert_eq!(answer.status, 200);
    assert_eq!(answer.content_type, "application/json");
    assert_eq!(answer.json()["result"]["echo"], "initialize");
    let first = answer.session.expect("a session id");
    // Sealed: base64url, visible ASCII as the specification asks, and far more than 128 bits.
    let base64url = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    assert!(first.len() >= 64 && first.bytes().all(base64url), "{first}");
    let second = h.initialize();
    assert_ne!(first, second);
    let inputs = h.inputs();
    assert_eq!(inputs[0], Input::ClientConnected { session: SessionId(40), expires: true });
    assert!(
        matches!(&inputs[1], Input::ClientFrame { session: SessionId(40), frame, .. } if frame.contains("initialize"))
    );
    assert_eq!(inputs[2], Input::ClientConnected { session: SessionId(41), expires: true });
    // Later requests in the session reach the host under its number.
    assert_eq!(h.post(Some(&second), &request(1, "tools/list")).json()["result"]["echo"], "tools/list");
    assert!(matches!(h.inputs().last(), Some(Input::ClientFrame { session: SessionId(41), .. })));
}

#[test]
fn a_request_without_a_session_id_is_400_and_not_forwarded() {
    let h = start(options());
    let session = h.initialize();
    let answer = h.post(None, &request(1, "tools/list"));
    assert_eq!(answer.status, 400);
    assert!(answer.json()["error"]["message"].as_str().unwrap().contains("Mcp-Session-Id"));
    h.assert_not_forwarded(&session, "tools/list");
}

/// A stateless client only POSTs: serving them, GET and DELETE without a
/// session are 405 (POST only) rather than a missing-session 400; with a
/// session they keep their handshake-era meaning.
#[test]
fn sessionless_get_and_delete_are_405_when_stateless_clients_are_served() {
    let h = start(ServerOptions { stateless_clients: true, ..options() });
    for method in ["GET", "DELETE"] {
        let response = outcome(h.agent.request(method, &h.url).set("Accept", "text/event-stream").call());
        assert_eq!((method, response.status()), (method, 405));
        assert_eq!(response.header("Allow"), Some("POST"));
    }
    let session = h.initialize();
    assert_eq!(h.get(&session, None).status(), 200);
    assert_eq!(h.delete(&session).status, 204);

    let handshake_only = start(options());
    let response = outcome(handshake_only.agent.delete(&handshake_only.url).call());
    assert_eq!(response.status(), 400, "without stateless clients a session is simply missing");
}

/// The `Mcp-Param-*` headers of a stateless POST reach the core with its frame
/// (names lowercased, values raw, repeats joined); a session's requests have none.
#[test]
fn a_stateless_posts_param_headers_go_to_the_core_with_its_frame() {
    let h = start(ServerOptions { stateless_clients: true, ..options() });
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "sql", "arguments": {"region": "us-west1"}, "_meta": meta}});
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAccept: {ACCEPT}\r\nContent-Type: application/json\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: sql\r\n\
         Mcp-Param-Region: us-west1\r\nmcp-param-tag: a\r\nMCP-PARAM-TAG: b\r\nMcp-Param-Odd: caf\u{e9}\r\n\
         Other: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        h.server.local_addr(),
        call.to_string().len()
    );
    let (status, _) = raw(h.server.local_addr(), &head, call.to_string().as_bytes());
    assert_eq!(status, 200);
    let seen = h.inputs().into_iter().find_map(|i| match i {
        Input::ClientFrame { frame, param_headers, .. } if frame.contains("tools/call") => Some(param_headers),
        _ => None,
    });
    let expected = [("odd", "caf\u{e9}"), ("region", "us-west1"), ("tag", "a, b")];
    let expected = expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert_eq!(seen, Some(Some(expected)));
    let session = h.initialize();
    h.post(Some(&session), &request(2, "tools/list"));
    let in_session = h.inputs().into_iter().find_map(|i| match i {
        Input::ClientFrame { frame, param_headers, .. } if frame.contains("tools/list") => Some(param_headers),
        _ => None,
    });
    assert_eq!(in_session, Some(None));
}

#[test]
fn an_unknown_session_is_404() {
    let h = start(options());
    h.initialize();
    let answer = h.post(Some("0123456789abcdef0123456789abcdef"), &request(1, "tools/list"));
    assert_eq!(answer.status, 404);
    assert_eq!(answer.content_type, "application/json");
    let get = answer_of_get(&h, "0123456789abcdef0123456789abcdef");
    assert_eq!(get, 404);
}

fn answer_of_get(h: &Harness, session: &str) -> u16 {
    h.get(session, None).status()
}

#[test]
fn a_reply_first_is_json_and_related_frames_first_make_an_sse_stream() {
    let h = start(options());
    let session = h.initialize();
    let json_answer = h.post(Some(&session), &request(1, "tools/list"));
    assert_eq!((json_answer.status, json_answer.content_type.as_str()), (200, "application/json"));
    assert_eq!(json_answer.json(), json!({"jsonrpc": "2.0", "id": 1, "result": {"echo": "tools/list"}}));

    let response = outcome(h.post_request(Some(&session)).send_string(&request(2, "slow/progress")));
    let events = Sse::new(response).rest();
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(events[0].data.is_empty() && !events[0].id.is_empty(), "a priming event first: {events:?}");
    assert_eq!(events[1].data, progress(1));
    assert_eq!(events[2].data, progress(2));
    assert_eq!(serde_json::from_str::<Value>(&events[3].data).unwrap()["result"]["echo"], "slow/progress");
    let mut ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "ids are unique: {ids:?}");
}

#[test]
fn notifications_and_responses_are_accepted_with_202() {
    let h = start(options());
    let session = h.initialize();
    let note = h.post(Some(&session), r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    assert_eq!((note.status, note.body.as_str()), (202, ""));
    let response = h.post(Some(&session), r#"{"jsonrpc":"2.0","id":"srv-1","result":{"roots":[]}}"#);
    assert_eq!((response.status, response.body.as_str()), (202, ""));
    h.wait_for_frame("notifications/initialized");
    h.wait_for_frame("srv-1");
}

#[test]
fn the_get_stream_carries_session_frames_and_buffers_them_until_it_opens() {
    let h = start(options());
    let session = h.initialize();
    // Before any GET: buffered.
    assert_eq!(h.post(Some(&session), &request(1, "push")).json()["result"]["echo"], "push");
    let mut stream = Sse::new(h.get(&session, None));
    let buffered = stream.next().unwrap();
    assert!(buffered.data.contains("notifications/pushed") && buffered.data.contains(r#""by":1"#), "{buffered:?}");
    // While open: delivered live, and the POST still gets its own JSON answer.
    assert_eq!(h.post(Some(&session), &request(2, "push")).status, 200);
    let live = stream.next().unwrap();
    assert!(live.data.contains(r#""by":2"#), "{live:?}");
    assert_ne!(buffered.id, live.id);
}

#[test]
fn a_second_get_replaces_the_first() {
    let h = start(options());
    let session = h.initialize();
    let mut first = Sse::new(h.get(&session, None));
    assert!(first.next().unwrap().data.is_empty(), "primed");
    let mut second = Sse::new(h.get(&session, None));
    assert!(second.next().unwrap().data.is_empty(), "primed");
    assert_eq!(first.next(), None, "the first stream ended");
    h.post(Some(&session), &request(1, "push"));
    assert!(second.next().unwrap().data.contains("notifications/pushed"));
}

#[test]
fn get_streams_can_be_turned_off() {
    let h = start(ServerOptions { get_stream: false, ..options() });
    let session = h.initialize();
    let answer = answer(h.get(&session, None));
    assert_eq!(answer.status, 405);
    assert_eq!(answer.allow.as_deref(), Some("POST, DELETE"));
    // POST streams still work.
    let response = outcome(h.post_request(Some(&session)).send_string(&request(1, "slow/progress")));
    assert_eq!(Sse::new(response).rest().len(), 4);
}

#[test]
fn last_event_id_resumes_only_the_stream_it_names() {
    let h = start(options());
    let session = h.initialize();
    let mut standalone = Sse::new(h.get(&session, None));
    let standalone_priming = standalone.next().unwrap();

    // A POST stream: primed, one progress, then the client goes away.
    let response = outcome(h.post_request(Some(&session)).send_string(&request(7, "slow/held")));
    let mut post = Sse::new(response);
    let priming = post.next().unwrap();
    let first = post.next().unwrap();
    assert!(priming.data.is_empty());
    assert_eq!(first.data, progress(1));
    drop(post);

    // Meanwhile the standalone stream gets a frame of its own.
    assert_eq!(h.post(Some(&session), &request(8, "push")).status, 200);
    let pushed = standalone.next().unwrap();
    assert!(pushed.data.contains("notifications/pushed"));

    // The held request finishes while its client is away: not cancelled, kept.
    let release = h.post(Some(&session), r#"{"jsonrpc":"2.0","method":"test/release"}"#);
    assert_eq!(release.status, 202);
    h.wait_for_frame("test/release");
    let resumed = Sse::new(h.get(&session, Some(&first.id))).rest();
    assert_eq!(resumed.len(), 2, "{resumed:?}");
    assert_eq!(resumed[0].data, progress(2));
    assert_eq!(serde_json::from_str::<Value>(&resumed[1].data).unwrap()["result"]["echo"], "slow/held");
    assert!(resumed.iter().all(|e| !e.data.contains("pushed")), "nothing of the standalone stream");

    // Resuming the standalone stream from its priming event replays its frame only.
    let mut again = Sse::new(h.get(&session, Some(&standalone_priming.id)));
    assert_eq!(again.next().unwrap(), pushed);
    assert_eq!(standalone.next(), None, "the resumed standalone stream replaced its old connection");

    let mut ids = vec![standalone_priming.id, priming.id, first.id, pushed.id, resumed[0].id.clone()];
    ids.push(resumed[1].id.clone());
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "event ids are unique across the session's streams");
}

#[test]
fn an_unknown_last_event_id_gets_a_fresh_standalone_stream() {
    let h = start(options());
    let session = h.initialize();
    let other = h.initialize();
    h.post(Some(&other), &request(1, "push")); // buffered on the other session's stream
    let (mut theirs, mut ours) = (Sse::new(h.get(&other, None)), Sse::new(h.get(&session, None)));
    let their_event = theirs.next().unwrap();
    let our_priming = ours.next().unwrap();
    let mut stream = Sse::new(h.get(&session, Some(&their_event.id))); // the other session's event
    let first = stream.next().unwrap();
    assert!(first.data.is_empty(), "a fresh, primed stream, nothing replayed: {first:?}");
    let prefix = |id: &str| id.rsplit_once('-').unwrap().0.to_string();
    assert_eq!(prefix(&first.id), prefix(&our_priming.id), "{first:?}");
}

#[test]
fn delete_ends_the_session_then_404() {
    let h = start(options());
    let session = h.initialize();
    let mut stream = Sse::new(h.get(&session, None));
    stream.next().unwrap();
    let answer = h.delete(&session);
    assert_eq!(answer.status, 204);
    assert_eq!(stream.next(), None, "its stream ended");
    h.wait_for_input(&Input::ClientClosed { session: SessionId(2) });
    assert_eq!(h.post(Some(&session), &request(1, "tools/list")).status, 404);
    assert_eq!(h.delete(&session).status, 404);
}

#[test]
fn the_core_closing_a_session_ends_its_streams() {
    let h = start(options());
    let session = h.initialize();
    let mut stream = Sse::new(h.get(&session, None));
    stream.next().unwrap();
    h.server.close_session(SessionId(2));
    assert_eq!(stream.next(), None);
    assert_eq!(h.post(Some(&session), &request(1, "tools/list")).status, 404);
    let other = h.initialize();
    h.assert_not_forwarded(&other, "nothing"); // everything sent before this marker has arrived
    assert!(!h.inputs().contains(&Input::ClientClosed { session: SessionId(2) }), "the core knows already");
}

#[test]
fn a_foreign_origin_is_403() {
    let h = start(ServerOptions { allowed_origins: vec!["https://app.example.com".into()], ..options() });
    let init =
        |origin: &str| answer(outcome(h.post_request(None).set("Origin", origin).send_string(&initialize_body())));
    let refused = init("http://evil.example");
    assert_eq!(refused.status, 403);
    assert!(refused.json()["error"]["message"].as_str().unwrap().contains("Origin"));
    assert_eq!(init("http://localhost:5173").status, 200);
    assert_eq!(init("https://app.example.com").status, 200);
    assert_eq!(init("null").status, 403);
    assert_eq!(h.connected(), 2);
}

#[test]
fn a_foreign_host_is_403_on_a_loopback_listener() {
    let h = start(options());
    let addr = h.server.local_addr();
    let body = initialize_body();
    let head = |host: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: {ACCEPT}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
    };
    let (status, text) = raw(addr, &head(&format!("evil.example:{}", addr.port())), body.as_bytes());
    assert_eq!(status, 403, "{text}");
    let (status, text) = raw(addr, &head(&format!("localhost:{}", addr.port())), body.as_bytes());
    assert_eq!(status, 200, "{text}");
    assert_eq!(h.connected(), 1, "the refused initialize was not forwarded");
}

#[test]
fn a_bearer_token_is_required_when_configured() {
    let h = start(ServerOptions { auth_token: Some(TOKEN.into()), ..options() });
    let missing = h.post(None, &initialize_body());
    assert_eq!(missing.status, 401);
    assert_eq!(missing.challenge.as_deref(), Some("Bearer"));
    let wrong = answer(outcome(
        h.post_request(None).set("Authorization", "Bearer s3cret-tokeN").send_string(&initialize_body()),
    ));
    assert_eq!(wrong.status, 401);
    // A 401 says nothing about sessions: an unknown one is 401, not 404.
    let unknown = h.post(Some("0123456789abcdef0123456789abcdef"), &request(1, "tools/list"));
    assert_eq!(unknown.status, 401);
    let bearer = format!("Bearer {TOKEN}");
    let right = answer(outcome(h.post_request(None).set("Authorization", &bearer).send_string(&initialize_body())));
    assert_eq!(right.status, 200);
    assert_eq!(h.connected(), 1, "nothing was forwarded without the token");
    let session = right.session.unwrap();
    let get = h.agent.get(&h.url).set("Accept", "text/event-stream").set("Mcp-Session-Id", &session).call();
    assert_eq!(outcome(get).status(), 401, "GET needs the token too");
}

#[test]
fn an_oversized_body_is_413() {
    let h = start(ServerOptions { max_body_bytes: 512, ..options() });
    let session = h.initialize();
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"pad": "x".repeat(2000)}});
    let answer = h.post(Some(&session), &big.to_string());
    assert_eq!(answer.status, 413);
    assert!(answer.json()["error"]["message"].as_str().unwrap().contains("512"));
    // Chunked, without a length up front: counted while read.
    let body = big.to_string();
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {ACCEPT}\r\nContent-Type: application/json\r\n\
         Mcp-Session-Id: {session}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let (status, text) = raw(h.server.local_addr(), &head, chunked.as_bytes());
    assert_eq!(status, 413, "{text}");
    h.assert_not_forwarded(&session, "tools/call");
}

#[test]
fn a_large_body_within_the_limit_is_forwarded_whole() {
    let h = start(options());
    let session = h.initialize();
    let pad = "y".repeat(3 * 1024 * 1024);
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"pad": pad}}).to_string();
    assert_eq!(h.post(Some(&session), &big).json()["result"]["echo"], "tools/call");
    assert!(h.frames().contains(&big));
}

#[test]
fn options_never_show_the_token() {
    let shown = format!("{:?}", ServerOptions { auth_token: Some(TOKEN.into()), ..options() });
    assert!(!shown.contains(TOKEN) && shown.contains("redacted"), "{shown}");
}

#[test]
fn an_unsupported_protocol_version_is_400() {
    let h = start(options());
    let session = h.initialize();
    let post = |version: Option<&str>| {
        let mut req = h
            .agent
            .post(&h.url)
            .set("Accept", ACCEPT)
            .set("Content-Type", "application/json")
            .set("Mcp-Session-Id", &session);
        if let Some(v) = version {
            req = req.set("MCP-Protocol-Version", v);
        }
        answer(outcome(req.send_string(&request(1, "tools/list"))))
    };
    let bad = post(Some("2099-01-01"));
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]["message"].as_str().unwrap().contains("MCP-Protocol-Version"));
    assert_eq!(post(Some("2025-06-18")).status, 200);
    assert_eq!(post(None).status, 200, "absent: assumed 2025-03-26");
}

#[test]
fn batches_and_non_json_are_400_and_not_forwarded() {
    let h = start(options());
    let session = h.initialize();
    let batch = format!("[{}]", request(1, "tools/batched"));
    let answer = h.post(Some(&session), &batch);
    assert_eq!(answer.status, 400);
    assert_eq!(answer.error_code(), -32600);
    let answer = h.post(Some(&session), "{not json at all");
    assert_eq!(answer.status, 400);
    assert_eq!(answer.error_code(), -32700);
    let answer = h.post(Some(&session), r#"{"jsonrpc":"2.0","params":{"what":"shapeless"}}"#);
    assert_eq!(answer.status, 400);
    assert_eq!(answer.error_code(), -32600);
    h.assert_not_forwarded(&session, "tools/batched");
    assert!(!h.frames().iter().any(|f| f.contains("shapeless")));
}

#[test]
fn content_negotiation_paths_and_methods() {
    let h = start(options());
    let session = h.initialize();
    let json_only = h
        .agent
        .post(&h.url)
        .set("Accept", "application/json")
        .set("Mcp-Session-Id", &session)
        .send_string(&request(1, "tools/list"));
    assert_eq!(outcome(json_only).status(), 406);
    let any = h.agent.post(&h.url).set("Accept", "*/*").set("Mcp-Session-Id", &session);
    assert_eq!(outcome(any.send_string(&request(2, "tools/list"))).status(), 200);
    let elsewhere = h.agent.post(&h.url.replace("/mcp", "/other")).set("Accept", ACCEPT);
    assert_eq!(outcome(elsewhere.send_string(&initialize_body())).status(), 404);
    let put = answer(outcome(h.agent.put(&h.url).call()));
    assert_eq!(put.status, 405);
    assert_eq!(put.allow.as_deref(), Some("GET, POST, DELETE"));
}

#[test]
fn a_duplicate_request_id_in_flight_is_refused() {
    let h = start(options());
    let session = h.initialize();
    let response = outcome(h.post_request(Some(&session)).send_string(&request(9, "slow/held")));
    let mut held = Sse::new(response);
    held.next().unwrap();
    let duplicate = h.post(Some(&session), &request(9, "tools/list"));
    assert_eq!(duplicate.status, 400);
    assert_eq!(duplicate.error_code(), -32600);
    h.post(Some(&session), r#"{"jsonrpc":"2.0","method":"test/release"}"#);
    let rest = held.rest();
    assert!(rest.last().unwrap().data.contains("slow/held"), "{rest:?}");
    assert!(!h.frames().iter().any(|f| f.contains("tools/list")));
}

#[test]
fn shutdown_ends_streams_and_stops_listening() {
    let h = start(options());
    let session = h.initialize();
    let mut stream = Sse::new(h.get(&session, None));
    stream.next().unwrap();
    h.server.shutdown();
    assert_eq!(stream.next(), None);
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(h.server.local_addr()).is_ok() {
        assert!(Instant::now() < deadline, "still accepting after shutdown");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_stateless_requests_stream_is_kept_alive_and_leaving_it_ends_the_request() {
    let keep_alive = Duration::from_millis(50);
    let h = start(ServerOptions { stateless_clients: true, sse_keep_alive: keep_alive, ..options() });
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "slow/held", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let response = outcome(
        h.post_request(None)
            .set("MCP-Protocol-Version", "2026-07-28")
            .set("Mcp-Method", "slow/held")
            .send_string(&body.to_string()),
    );
    let mut stream = Sse::new(response);
    let mut events = std::iter::from_fn(|| stream.next()).skip_while(|e| e.data.is_empty());
    assert_eq!(events.next().unwrap().data, progress(1));
    // Nothing to say: a comment (no id, no data) keeps the connection checked.
    assert_eq!(events.next().unwrap(), Event { id: String::new(), data: String::new() });
    drop(events);
    drop(stream);
    // The client left: its per-request session ends, which is the revision's cancel.
    h.wait_for_input(&Input::ClientClosed { session: SessionId(2) });
}

// ---------------------------------------------------------------------------
// Hostile clients: slow bodies, floods of connections, readers that stall.
// ---------------------------------------------------------------------------

/// A POST head for `len` body bytes in an existing session (no `Connection: close`).
fn post_head(session: &str, len: usize) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {ACCEPT}\r\nContent-Type: application/json\r\n\
         Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {VERSION}\r\nContent-Length: {len}\r\n\r\n"
    )
}

/// Reads the answer on `stream` until the server closes it; its status and text.
fn read_answer(stream: &mut TcpStream, wait: Duration) -> (u16, String) {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {text:?}"));
    (status, text)
}

/// Options with a short grace and a pace of 1000 bytes per second.
fn paced() -> ServerOptions {
    ServerOptions { body_grace: Duration::from_millis(300), body_min_rate: 1000, ..options() }
}

#[test]
fn a_body_that_stops_coming_is_408_and_the_connection_closes() {
    let h = start(paced());
    let session = h.initialize();
    let mut stream = TcpStream::connect(h.server.local_addr()).unwrap();
    stream.write_all(post_head(&session, 100).as_bytes()).unwrap();
    stream.write_all(b"{\"jsonrpc\":").unwrap();
    let started = Instant::now();
    let (status, text) = read_answer(&mut stream, Duration::from_secs(10));
    assert_eq!(status, 408, "{text}");
    assert!(text.to_ascii_lowercase().contains("connection: close"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

#[test]
fn a_trickled_body_is_408_once_behind_the_pace() {
    let h = start(paced());
    let session = h.initialize();
    let mut stream = TcpStream::connect(h.server.local_addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    stream.write_all(post_head(&session, 400).as_bytes()).unwrap();
    let started = Instant::now();
    // 20 bytes a second: the body would need 20 s.
    for _ in 0..400 {
        if stream.write_all(b" ").is_err() || started.elapsed() > Duration::from_secs(5) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut probe = [0u8; 1];
        stream.set_nonblocking(true).unwrap();
        let answered = !matches!(stream.peek(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        stream.set_nonblocking(false).unwrap();
        if answered {
            break;
        }
    }
    let (status, text) = read_answer(&mut stream, Duration::from_secs(10));
    assert_eq!(status, 408, "{text}");
    assert!(text.contains("slower than 1000 bytes per second"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(3), "refused after {:?}", started.elapsed());
}

#[test]
fn a_body_that_keeps_the_pace_still_has_a_deadline() {
    let h = start(ServerOptions { body_timeout: Duration::from_millis(500), body_min_rate: 1, ..options() });
    let session = h.initialize();
    let mut stream = TcpStream::connect(h.server.local_addr()).unwrap();
    stream.write_all(post_head(&session, 100).as_bytes()).unwrap();
    stream.write_all(b"{").unwrap();
    let (status, text) = read_answer(&mut stream, Duration::from_secs(10));
    assert_eq!(status, 408, "{text}");
    assert!(text.contains("within 0 s") || text.contains("did not arrive"), "{text}");
}

#[test]
fn a_chunked_body_of_one_byte_chunks_is_forwarded_whole() {
    let h = start(options());
    let session = h.initialize();
    let body =
        json!({"jsonrpc": "2.0", "method": "notifications/pad", "params": {"p": "c".repeat(200_000)}}).to_string();
    let mut wire = Vec::with_capacity(body.len() * 6);
    for byte in body.bytes() {
        wire.extend_from_slice(b"1\r\n");
        wire.push(byte);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {ACCEPT}\r\nContent-Type: application/json\r\n\
         Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {VERSION}\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n"
    );
    let (status, text) = raw(h.server.local_addr(), &head, &wire);
    assert_eq!(status, 202, "{text}");
    h.wait_for_frame("ccccc");
    assert!(h.frames().contains(&body));
}

/// A connection in a request: its head sent and its body not yet, in session `session`.
fn busy_connection(addr: std::net::SocketAddr, session: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(post_head(session, 100).as_bytes()).unwrap();
    stream.write_all(b"{").unwrap();
    stream
}

/// Whether the server closed `stream` within `wait` (without sending anything).
fn closed_by_server(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Ok(0))
        || matches!(stream.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
}

#[test]
fn at_the_caps_idle_connections_give_way_and_only_busy_ones_refuse_a_newcomer() {
    let h = start(ServerOptions { max_connections: 3, max_connections_per_peer: 2, ..options() });
    let addr = h.server.local_addr();
    let session = h.initialize();
    let mut idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    let (status, text) = raw(addr, "GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", b"");
    assert_eq!(status, 404, "a newcomer is served at once: {text}");
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    assert!(closed_by_server(&mut idle[0], Duration::from_secs(2)), "the connection idle longest gave way");

    // Two connections of the peer in a request: neither gives way.
    drop(idle);
    std::thread::sleep(Duration::from_millis(50));
    let _busy: Vec<TcpStream> = (0..2).map(|_| busy_connection(addr, &session)).collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut extra = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    let (status, text) = read_answer(&mut extra, Duration::from_secs(5));
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("busy"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(1), "refused at once: {:?}", started.elapsed());
}

#[test]
fn a_connection_that_sends_nothing_is_closed_after_the_silent_timeout() {
    let h = start(ServerOptions { silent_timeout: Duration::from_millis(300), ..options() });
    let addr = h.server.local_addr();
    let mut silent = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    assert!(closed_by_server(&mut silent, Duration::from_secs(5)), "closed");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(3), "{waited:?}");
    // One that speaks within it is served as ever, however slowly its head comes.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET /nowhere HTTP/1.1\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    slow.write_all(b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    assert_eq!(read_answer(&mut slow, Duration::from_secs(5)).0, 404);
}

#[test]
fn the_total_cap_counts_every_peer() {
    // One peer here, so a per-peer cap above the total shows the total at work.
    let h = start(ServerOptions { max_connections: 1, max_connections_per_peer: 10, ..options() });
    let addr = h.server.local_addr();
    let session = h.initialize();
    let mut idle = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let _busy = busy_connection(addr, &session);
    assert!(closed_by_server(&mut idle, Duration::from_secs(2)), "the idle one gave way");
    std::thread::sleep(Duration::from_millis(100));
    let mut extra = TcpStream::connect(addr).unwrap();
    assert_eq!(read_answer(&mut extra, Duration::from_secs(5)).0, 503);
}

/// Reads `stream` until the server ends it; how many bytes came, and whether it ended.
fn drain_until_closed(stream: &mut TcpStream, wait: Duration) -> (usize, bool) {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (total, true),
            Ok(n) => total += n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return (total, false)
            }
            Err(_) => return (total, true), // reset
        }
    }
}

#[test]
fn a_session_stream_client_that_does_not_read_is_disconnected() {
    let h = start(ServerOptions { sse_queue_bytes: 64 * 1024, replay_bytes: 64 * 1024, ..options() });
    let session = h.initialize();
    let id = SessionId(2);
    let mut stream = TcpStream::connect(h.server.local_addr()).unwrap();
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\n\
         MCP-Protocol-Version: {VERSION}\r\n\r\n"
    );
    stream.write_all(get.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // 64 MiB for a client that reads nothing: more than the kernel's buffers hold.
    let frame = json!({"jsonrpc": "2.0", "method": "notifications/flood", "params": {"p": "f".repeat(64 * 1024)}});
    let frame = frame.to_string();
    for _ in 0..1024 {
        h.server.deliver(id, Route::Session, frame.clone());
        std::thread::sleep(Duration::from_micros(200));
    }
    let (received, closed) = drain_until_closed(&mut stream, Duration::from_secs(5));
    assert!(closed, "the connection of a client that stopped reading stays open");
    assert!(received < 32 * 1024 * 1024, "{received} bytes were sent to it");
    // The session lives on: the client may come back and resume.
    assert_eq!(h.post(Some(&session), &request(5, "tools/list")).status, 200);
}

#[test]
fn a_post_stream_client_that_does_not_read_is_disconnected() {
    let h = start(ServerOptions { sse_queue_bytes: 64 * 1024, replay_bytes: 64 * 1024, ..options() });
    let session = h.initialize();
    let id = SessionId(2);
    let mut stream = TcpStream::connect(h.server.local_addr()).unwrap();
    let body = request(9, "slow/held");
    stream.write_all(post_head(&session, body.len()).as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    h.wait_for_frame("slow/held");
    let frame = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"p": "q".repeat(64 * 1024)}});
    let frame = frame.to_string();
    for _ in 0..1024 {
        h.server.deliver(id, Route::Related("9".into()), frame.clone());
        std::thread::sleep(Duration::from_micros(200));
    }
    let (received, closed) = drain_until_closed(&mut stream, Duration::from_secs(5));
    assert!(closed, "the connection of a client that stopped reading stays open");
    assert!(received < 32 * 1024 * 1024, "{received} bytes were sent to it");
}

/// A status handle whose host answers every admin action with `Ok`.
fn status_handle() -> (crate::serve::status::StatusHandle, Arc<crate::serve::status::EventLog>) {
    let (queries, rx) = async_channel::unbounded();
    smol::spawn(async move {
        while let Ok(query) = rx.recv().await {
            match query {
                crate::serve::status::Query::Admin(_, tx) => {
                    let _ = tx.send(Ok(())).await;
                }
                crate::serve::status::Query::Status(tx) => {
                    let _ = tx.send("{}".to_string()).await;
                }
                _ => {}
            }
        }
    })
    .detach();
    let events = Arc::new(crate::serve::status::EventLog::default());
    (crate::serve::status::StatusHandle { queries, events: events.clone() }, events)
}

#[test]
fn the_status_page_and_endpoints_refuse_to_be_framed() {
    let h = start(options());
    h.server.serve_status(status_handle().0);
    let base = h.url.trim_end_matches("/mcp").to_string();
    let page = outcome(h.agent.get(&format!("{base}/")).call());
    let status = outcome(h.agent.get(&format!("{base}/status")).call());
    let admin = outcome(
        h.agent.post(&format!("{base}/admin/restart/fs")).set("Content-Type", "application/json").send_string(""),
    );
    let refused = outcome(h.agent.post(&format!("{base}/admin/restart/fs")).send_string(""));
    for (what, response) in [("page", page), ("status", status), ("admin", admin), ("refused admin", refused)] {
        assert_eq!(response.header("x-frame-options"), Some("DENY"), "{what}");
        assert_eq!(response.header("content-security-policy"), Some("frame-ancestors 'none'"), "{what}");
    }
    // Without the token, the page is still served (it asks for one), unframed too.
    let h = start(ServerOptions { auth_token: Some(TOKEN.into()), ..options() });
    h.server.serve_status(status_handle().0);
    let page = outcome(h.agent.get(&h.url.replace("/mcp", "/")).call());
    assert_eq!(page.status(), 200);
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
}

#[test]
fn admin_actions_need_exactly_the_json_media_type() {
    let h = start(options());
    h.server.serve_status(status_handle().0);
    let url = h.url.replace("/mcp", "/admin/restart/fs");
    let post = |content_type: Option<&str>| {
        let mut req = h.agent.post(&url);
        if let Some(content_type) = content_type {
            req = req.set("Content-Type", content_type);
        }
        outcome(req.send_string("{}")).status()
    };
    assert_eq!(post(Some("application/json")), 202);
    assert_eq!(post(Some("Application/JSON; charset=utf-8")), 202);
    for refused in [
        Some("application/jsonx"),
        Some("application/json-seq"),
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        assert_eq!(post(refused), 415, "{refused:?}");
    }
}

#[test]
fn an_events_subscriber_that_does_not_read_is_disconnected() {
    let h = start(options());
    let (handle, events) = status_handle();
    h.server.serve_status(handle);
    let mut stalled = TcpStream::connect(h.server.local_addr()).unwrap();
    stalled.write_all(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n").unwrap();
    let reader = h.agent.get(&h.url.replace("/mcp", "/events")).call().unwrap();
    let reading = std::thread::spawn(move || {
        // Reads every event, as a live status page does.
        let mut lines = BufReader::new(reader.into_reader()).lines();
        let mut count = 0;
        while let Some(Ok(line)) = lines.next() {
            if line.starts_with("id: ") {
                count += 1;
                if count == 100_000 {
                    break;
                }
            }
        }
        count
    });
    std::thread::sleep(Duration::from_millis(100));
    // Events of about 150 bytes: 15 MB in all, more than the kernel holds for a stalled client.
    for n in 0..100_000u64 {
        let server = format!("backend-{n:08}");
        events.push(n, &tether_core::Event::ServerDisconnected { server: server.as_str().into(), intentional: false });
        if n % 50 == 0 {
            std::thread::sleep(Duration::from_millis(1)); // a pace the reader keeps up with
        }
    }
    let (received, closed) = drain_until_closed(&mut stalled, Duration::from_secs(5));
    assert!(closed, "the stalled subscriber's connection stays open");
    assert!(received < 12 * 1024 * 1024, "{received} bytes were sent to it");
    assert_eq!(reading.join().unwrap(), 100_000, "the subscriber that reads got every event");
}

// ----- OAuth: the listener as a protected resource -----

/// An introspection endpoint (RFC 7662) that knows a few tokens by name, and the
/// listener guarded by it. Tokens: `alice` (scopes mcp time), `alice-more` (mcp
/// time echo), `bob` (mcp), `no-mcp` (time only), `anon-1` and `anon-2` (mcp,
/// neither subject nor client); any other is inactive.
fn oauth_harness() -> Harness {
    oauth_harness_with(None)
}

/// [`oauth_harness`] with `authorization.admin_scope` set; the token `operator`
/// carries `mcp ops`.
fn oauth_harness_with(admin_scope: Option<&str>) -> Harness {
    let server = tiny_http::Server::http("127.0.0.1:0").expect("introspection endpoint");
    let port = server.server_addr().to_ip().expect("an IP address").port();
    let issuer = format!("http://127.0.0.1:{port}/");
    let listen: SocketAddr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let resource = format!("http://{listen}/mcp");
    let (iss, aud) = (issuer.clone(), resource.clone());
    std::thread::spawn(move || {
        for mut request in server.incoming_requests() {
            let mut body = String::new();
            let _ = request.as_reader().read_to_string(&mut body);
            let token = body.split('&').find_map(|kv| kv.strip_prefix("token=")).unwrap_or_default();
            let (sub, scope) = match token {
                "alice" => ("alice", "mcp time"),
                "alice-more" => ("alice", "mcp time echo"),
                "bob" => ("bob", "mcp"),
                "no-mcp" => ("carol", "time"),
                "anon-1" | "anon-2" => ("-", "mcp"),
                "operator" => ("dana", "mcp ops"),
                _ => ("", ""),
            };
            let answer = match sub {
                "" => json!({"active": false}),
                "-" => json!({"active": true, "scope": scope, "aud": aud}),
                _ => {
                    json!({"active": true, "sub": sub, "scope": scope, "iss": iss, "aud": aud, "exp": 4_000_000_000u64})
                }
            };
            let header = tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
            let _ = request.respond(tiny_http::Response::from_string(answer.to_string()).with_header(header));
        }
    });
    let mut settings = json!({
        "issuer": issuer,
        "introspection_endpoint": format!("{issuer}introspect"),
        "client_id": "tether",
        "client_secret": "s3cret",
        "required_scopes": ["mcp"],
    });
    if let Some(admin) = admin_scope {
        settings["admin_scope"] = json!(admin);
    }
    let settings: tether_host::resource_auth::ResourceAuthSettings = serde_json::from_value(settings).unwrap();
    let validator = tether_host::resource_auth::TokenValidator::new(settings, resource);
    let scopes = vec!["mcp".to_string(), "time".to_string(), "echo".to_string()];
    let guard = super::ResourceGuard::new(validator, "/mcp", scopes, Some("test gateway")).unwrap();
    start(ServerOptions { listen, resource_guard: Some(Arc::new(guard)), ..options() })
}

impl Harness {
    fn post_as(&self, token: &str, session: Option<&str>, body: &str) -> Answer {
        let bearer = format!("Bearer {token}");
        answer(outcome(self.post_request(session).set("Authorization", &bearer).send_string(body)))
    }

    /// The auth-params of a `WWW-Authenticate: Bearer ...` challenge.
    fn params(challenge: &str) -> std::collections::BTreeMap<String, String> {
        let rest = challenge.strip_prefix("Bearer ").expect("a Bearer challenge");
        rest.split("\", ")
            .filter_map(|p| p.split_once("=\""))
            .map(|(k, v)| (k.trim().to_string(), v.trim_end_matches('"').to_string()))
            .collect()
    }
}

#[test]
fn the_metadata_names_the_authorization_server_and_a_missing_token_is_challenged() {
    let h = oauth_harness();
    let base = format!("http://{}", h.server.local_addr());
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let doc = answer(outcome(h.agent.get(&format!("{base}{path}")).call()));
        assert_eq!(doc.status, 200, "{path}");
        let doc = doc.json();
        assert_eq!(doc["resource"], format!("{base}/mcp"));
        assert_eq!(doc["authorization_servers"].as_array().unwrap().len(), 1);
        assert_eq!(doc["scopes_supported"], json!(["mcp", "time", "echo"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
        assert_eq!(doc["resource_name"], "test gateway");
    }
    let missing = h.post(None, &initialize_body());
    assert_eq!(missing.status, 401);
    let params = Harness::params(missing.challenge.as_deref().unwrap());
    assert_eq!(params["resource_metadata"], format!("{base}/.well-known/oauth-protected-resource/mcp"));
    assert_eq!(params["scope"], "mcp time echo");
    assert!(!params.contains_key("error"), "no token is not an invalid token (RFC 6750 §3.1)");

    let invalid = h.post_as("forged", None, &initialize_body());
    assert_eq!(invalid.status, 401);
    let params = Harness::params(invalid.challenge.as_deref().unwrap());
    assert_eq!(params["error"], "invalid_token");
    assert!(params.contains_key("resource_metadata"));

    let short = h.post_as("no-mcp", None, &initialize_body());
    assert_eq!(short.status, 403);
    let params = Harness::params(short.challenge.as_deref().unwrap());
    assert_eq!((params["error"].as_str(), params["scope"].as_str()), ("insufficient_scope", "mcp"));
    assert_eq!(h.connected(), 0, "nothing reached the host");
}

#[test]
fn a_session_gets_its_scopes_before_its_first_message_and_belongs_to_its_bearer() {
    let h = oauth_harness();
    let opened = h.post_as("alice", None, &initialize_body());
    assert_eq!(opened.status, 200, "{opened:?}");
    let session = opened.session.unwrap();
    let inputs = h.inputs();
    let scopes = |i: &Input| match i {
        Input::ClientAccess { scopes, .. } => Some(scopes.clone()),
        _ => None,
    };
    assert!(matches!(inputs[0], Input::ClientConnected { .. }));
    assert_eq!(scopes(&inputs[1]), Some(vec!["mcp".to_string(), "time".to_string()]));
    let Input::ClientAccess { principal: Some(alice), .. } = &inputs[1] else { panic!("{:?}", inputs[1]) };
    assert!(matches!(inputs[2], Input::ClientFrame { .. }));

    // Another bearer cannot use it, with any method.
    let stolen = h.post_as("bob", Some(&session), &request(1, "tools/list"));
    assert_eq!(stolen.status, 403);
    let get = h.agent.get(&h.url).set("Accept", "text/event-stream").set("Mcp-Session-Id", &session);
    assert_eq!(outcome(get.set("Authorization", "Bearer bob").call()).status(), 403);
    let delete = h.agent.delete(&h.url).set("Mcp-Session-Id", &session).set("Authorization", "Bearer bob");
    assert_eq!(outcome(delete.call()).status(), 403);

    // Its bearer with more scopes: the engine hears of them before the message.
    let wider = h.post_as("alice-more", Some(&session), &request(2, "tools/list"));
    assert_eq!(wider.status, 200);
    let inputs = h.inputs();
    let at = inputs.iter().rposition(|i| scopes(i).is_some()).unwrap();
    assert_eq!(scopes(&inputs[at]), Some(vec!["mcp".to_string(), "time".to_string(), "echo".to_string()]));
    assert!(matches!(&inputs[at + 1], Input::ClientFrame { frame, .. } if frame.contains("tools/list")));
    let Input::ClientAccess { principal, .. } = &inputs[at] else { unreachable!() };
    assert_eq!(principal.as_ref(), Some(alice), "the same holder: the tasks it creates are bound to it");
    assert!(!h.frames().iter().any(|f| f.contains("\"id\":1")), "bob's request was not forwarded");
    // Notifications too carry their token's scopes (the engine ignores repeats).
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}});
    assert_eq!(h.post_as("alice", Some(&session), &note.to_string()).status, 202);
    h.wait_for_frame("notifications/cancelled");
    let inputs = h.inputs();
    let at = inputs.iter().rposition(|i| scopes(i).is_some()).unwrap();
    assert_eq!(scopes(&inputs[at]), Some(vec!["mcp".to_string(), "time".to_string()]));
}

#[test]
fn tokens_without_subject_or_client_bind_a_session_to_the_token_itself() {
    let h = oauth_harness();
    let opened = h.post_as("anon-1", None, &initialize_body());
    assert_eq!(opened.status, 200, "{opened:?}");
    let session = opened.session.unwrap();
    assert_eq!(h.post_as("anon-1", Some(&session), &request(1, "tools/list")).status, 200);
    assert_eq!(h.post_as("anon-2", Some(&session), &request(2, "tools/list")).status, 403);
}

/// The operators' scope, both ways. Without `admin_scope`, no OAuth client reads
/// `/status` or takes an admin action, whatever its token; with it, only a token
/// carrying that scope does (others get 403 `insufficient_scope` naming it).
/// `/healthz` takes any valid token either way; no token is 401.
#[test]
fn the_status_endpoints_need_the_operators_scope_and_without_one_are_closed_to_oauth_clients() {
    for admin in [None, Some("ops")] {
        let h = oauth_harness_with(admin);
        h.server.serve_status(status_handle().0);
        let base = h.url.trim_end_matches("/mcp").to_string();
        let get = |path: &str, token: Option<&str>| {
            let mut request = h.agent.get(&format!("{base}{path}"));
            if let Some(token) = token {
                request = request.set("Authorization", &format!("Bearer {token}"));
            }
            outcome(request.call())
        };
        let restart = |token: &str| {
            outcome(
                h.agent
                    .post(&format!("{base}/admin/restart/fs"))
                    .set("Authorization", &format!("Bearer {token}"))
                    .set("Content-Type", "application/json")
                    .send_string(""),
            )
        };
        assert_eq!(get("/status", None).status(), 401, "{admin:?}");
        assert_eq!(get("/healthz", Some("alice")).status(), 200, "{admin:?}: health is open to any valid token");
        let alice = get("/status", Some("alice"));
        assert_eq!(alice.status(), 403, "{admin:?}");
        assert_eq!(restart("alice").status(), 403, "{admin:?}");
        match admin {
            None => {
                let body = alice.into_string().unwrap();
                assert!(body.contains("admin_scope"), "says how to open it: {body}");
                assert_eq!(get("/status", Some("operator")).status(), 403, "no scope opens it");
                assert_eq!(restart("operator").status(), 403);
            }
            Some(scope) => {
                let challenge = alice.header("www-authenticate").unwrap_or_default().to_string();
                let params = Harness::params(&challenge);
                assert_eq!((params["error"].as_str(), params["scope"].as_str()), ("insufficient_scope", scope));
                assert_eq!(get("/status", Some("operator")).status(), 200);
                assert_eq!(restart("operator").status(), 202);
            }
        }
    }
}

// ----- replicas sharing a key ring -----

const KEY_1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

fn ring(keys: &str) -> Arc<tether_host::cluster::ClusterSettings> {
    Arc::new(tether_host::cluster::ClusterSettings::from_section(&json!({ "session_keys": keys })).unwrap())
}

fn replica(keys: &str, token: Option<&str>) -> Harness {
    start(ServerOptions { cluster: Some(ring(keys)), auth_token: token.map(String::from), ..options() })
}

fn adoptions(h: &Harness) -> usize {
    h.inputs().iter().filter(|i| matches!(i, Input::ClientAdopted { .. })).count()
}

#[test]
fn a_session_opened_on_one_replica_is_served_by_another_that_shares_the_key_ring() {
    let keys = format!("1:{KEY_1}");
    let (a, b) = (replica(&keys, None), replica(&keys, None));
    let session = a.initialize();
    for n in 1..=3 {
        let answer = b.post(Some(&session), &request(n, "tools/list"));
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.json()["result"]["echo"], "tools/list");
    }
    assert_eq!(adoptions(&b), 1, "adopted once, then known");
    let inputs = b.inputs();
    let Input::ClientAdopted { session: adopted, facts, .. } = &inputs[0] else { panic!("{inputs:?}") };
    assert_eq!(facts.protocol_version, VERSION);
    assert!(matches!(&inputs[1], Input::ClientFrame { session, .. } if session == adopted));
    assert!(!b.inputs().iter().any(|i| matches!(i, Input::ClientConnected { .. })), "no new session");
    // Ended there, it is not adopted back there (another replica still could: see the docs).
    assert_eq!(b.delete(&session).status, 204);
    assert_eq!(b.post(Some(&session), &request(4, "tools/list")).status, 404);
    assert_eq!(adoptions(&b), 1);
    // A replica with another ring does not know it.
    let stranger = replica(&format!("1:{KEY_2}"), None);
    assert_eq!(stranger.post(Some(&session), &request(1, "tools/list")).status, 404);
}

#[test]
fn forged_tampered_expired_other_principal_and_retired_key_ids_are_404_and_rotation_keeps_sessions() {
    const OTHER: &str = "another-s3cret-token";
    let old_ring = format!("1:{KEY_1}");
    let a = replica(&old_ring, Some(TOKEN));
    let session = answer(outcome(
        a.post_request(None).set("Authorization", &format!("Bearer {TOKEN}")).send_string(&initialize_body()),
    ))
    .session
    .expect("an id");
    let post = |h: &Harness, token: &str, id: &str| {
        let req = h.post_request(Some(id)).set("Authorization", &format!("Bearer {token}"));
        answer(outcome(req.send_string(&request(1, "tools/list")))).status
    };
    // Rotation: a replica that seals with key 2 and still opens key 1 serves it.
    let rotated = replica(&format!("2:{KEY_2},1:{KEY_1}"), Some(TOKEN));
    assert_eq!(post(&rotated, TOKEN, &session), 200);
    // The static token changed: another principal.
    let other_token = replica(&old_ring, Some(OTHER));
    assert_eq!(post(&other_token, OTHER, &session), 404);
    // Key 1 retired.
    let retired = replica(&format!("2:{KEY_2}"), Some(TOKEN));
    assert_eq!(post(&retired, TOKEN, &session), 404);
    // Tampered: one character changed.
    let b = replica(&old_ring, Some(TOKEN));
    let mut tampered = session.clone().into_bytes();
    let last = tampered.len() - 5;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    assert_eq!(post(&b, TOKEN, std::str::from_utf8(&tampered).unwrap()), 404);
    // Forged: made up, or sealed for another purpose with the right key.
    assert_eq!(post(&b, TOKEN, "0123456789abcdef0123456789abcdef"), 404);
    let ring = ring(&old_ring);
    let facts = tether_core::cluster::SessionFacts::new(VERSION, &serde_json::Map::new(), None).to_bytes();
    let principal = format!("static token {TOKEN}");
    let far = super::adopt::unix_ms() + 60_000;
    let wrong_purpose = ring.keys.seal_bound("something else", far, Some(&principal), &facts).unwrap();
    assert_eq!(post(&b, TOKEN, &wrong_purpose), 404);
    // Expired.
    let expired = ring.keys.seal_bound(super::adopt::PURPOSE, 1, Some(&principal), &facts).unwrap();
    assert_eq!(post(&b, TOKEN, &expired), 404);
    // The same, unexpired: adopted (the checks above are not refusing everything).
    let fresh = ring.keys.seal_bound(super::adopt::PURPOSE, far, Some(&principal), &facts).unwrap();
    assert_eq!(post(&b, TOKEN, &fresh), 200);
    assert_eq!(adoptions(&b), 1);
}

#[test]
fn a_stream_resumed_on_another_replica_gets_its_requests_error_at_once_and_one_list_changed() {
    let keys = format!("1:{KEY_1}");
    let (a, b) = (replica(&keys, None), replica(&keys, None));
    let session = a.initialize();
    let held = a.post_request(Some(&session)).send_string(&request(7, "slow/held"));
    let mut stream = Sse::new(outcome(held));
    let _priming = stream.next().unwrap();
    let progress = stream.next().unwrap();
    assert!(progress.data.contains("progress"));
    // Replica a is gone as far as the client knows: it resumes through b.
    let started = Instant::now();
    let resumed = Sse::new(b.get(&session, Some(&progress.id))).rest();
    assert!(started.elapsed() < Duration::from_secs(1), "answered at once");
    let data: Vec<Value> =
        resumed.iter().filter(|e| !e.data.is_empty()).map(|e| serde_json::from_str(&e.data).unwrap()).collect();
    assert_eq!(data.len(), 2, "{resumed:?}");
    assert_eq!(data[0]["method"], "notifications/tools/list_changed");
    assert_eq!((data[1]["id"].clone(), data[1]["error"]["code"].clone()), (json!(7), json!(-32603)));
    let lost: Vec<Input> = b.inputs().into_iter().filter(|i| matches!(i, Input::ClientStreamLost { .. })).collect();
    assert!(matches!(&lost[..], [Input::ClientStreamLost { request: Some(id), .. }] if id == "7"), "{lost:?}");

    // The standalone stream's events, resumed elsewhere: one list_changed, and it stays open.
    let mut standalone = Sse::new(a.get(&session, None));
    let priming = standalone.next().unwrap();
    let mut elsewhere = Sse::new(b.get(&session, Some(&priming.id)));
    let first = elsewhere.next().unwrap();
    let first = if first.data.is_empty() { elsewhere.next().unwrap() } else { first };
    assert!(first.data.contains("list_changed"), "{first:?}");
}

#[test]
fn a_draining_listener_refuses_new_requests_with_503_and_ends_streams_asking_for_a_reconnect() {
    let h = start(options());
    let session = h.initialize();
    let mut standalone = Sse::new(h.get(&session, None));
    standalone.next().unwrap();
    let addr = h.server.local_addr();
    let mut open = TcpStream::connect(addr).unwrap();
    open.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    h.server.stop_accepting();
    // A connection already open: its next request is refused, and it closes.
    let body = request(1, "tools/list");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {ACCEPT}\r\nContent-Type: application/json\r\n\
         Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {VERSION}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    open.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = open.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("connection: close") && answer.contains("retry-after: 1"), "{answer}");
    // New connections are refused: a balancer sends them elsewhere.
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "still listening");
        std::thread::sleep(Duration::from_millis(10));
    }
    h.server.end_streams();
    // The `retry:` field reads as an event with neither id nor data; then the stream ends.
    assert_eq!(standalone.rest(), vec![Event { id: String::new(), data: String::new() }]);
}
