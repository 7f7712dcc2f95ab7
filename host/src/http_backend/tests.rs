//! Tests of the HTTP backend against small servers of every shape.
#[test]
fn transport_errors_never_carry_the_url() {
    let url = "http://user:pw-planted-1@127.0.0.1:1/mcp?key=q-planted-2";
    let Err(ureq::Error::Transport(t)) = ureq::get(url).call() else { panic!("port 1 answered") };
    assert!(t.to_string().contains("q-planted-2"), "ureq's own text names the URL: {t}");
    for failure in [transport_text(&t), format!("{:?}", transport_failure(&t))] {
        assert!(!failure.contains("planted"), "{failure}");
    }
}

#[test]
fn a_stream_is_answered_only_by_the_response_to_its_request() {
    use super::answers;
    assert!(answers(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#, 7));
    assert!(answers(r#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"x"}}"#, 7));
    assert!(!answers(r#"{"jsonrpc":"2.0","id":8,"result":{}}"#, 7));
    assert!(!answers(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#, 7));
    assert!(!answers(r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage"}"#, 7));
}

use super::*;
use std::io::Cursor;

#[test]
fn endpoints_resolve_against_the_stream_url() {
    assert_eq!(resolve("http://h:1/sse", "/messages?s=1"), "http://h:1/messages?s=1");
    assert_eq!(resolve("http://h:1/a/sse", "messages"), "http://h:1/a/messages");
    assert_eq!(resolve("http://h:1/sse", "https://x/y"), "https://x/y");
}

#[test]
fn session_rejections_are_recognised() {
    let ts =
        r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#;
    assert!(rejects_session(ts));
    assert!(rejects_session(r#"{"error":{"message":"Session not found"}}"#));
    assert!(!rejects_session(r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params"},"id":3}"#));
    assert!(rejects_session("Bad Request: No valid session ID provided")); // plain text
    assert!(!rejects_session(r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"bad"},"session":1}"#));
    assert!(!rejects_session("Bad Request: invalid JSON"));
    assert!(!rejects_session(""));
}

type Log = Arc<Mutex<Vec<String>>>;
type Reply = tiny_http::Response<Cursor<Vec<u8>>>;

/// A server answering each request on its own thread with `answer(method, body,
/// session header, log)`; returns the endpoint URL and the log.
fn serve(answer: fn(&str, &str, Option<&str>, &Log) -> Reply) -> (String, Log) {
    serve_seen(move |seen, log| Answer::Reply(answer(&seen.method, &seen.body, seen.header("Mcp-Session-Id"), log)))
}

/// What the fake server saw of a request.
struct Seen {
    method: String,
    body: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// How the fake server answers: a whole response, or an SSE stream written by
/// hand (tiny_http buffers the bodies it chunks itself, so nothing would
/// stream).
enum Answer {
    Reply(Reply),
    Stream(fn(&mut SseWriter, &Log) -> std::io::Result<()>),
}

/// A `text/event-stream` response with a chunked body, each chunk flushed.
struct SseWriter(Box<dyn std::io::Write + Send>);

impl SseWriter {
    fn open(mut out: Box<dyn std::io::Write + Send>) -> std::io::Result<SseWriter> {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        out.write_all(head.as_bytes())?;
        out.flush()?;
        Ok(SseWriter(out))
    }

    /// Writes raw SSE text (an event, or a `:` comment).
    fn send(&mut self, text: &str) -> std::io::Result<()> {
        write!(self.0, "{:x}\r\n{text}\r\n", text.len())?;
        self.0.flush()
    }

    fn event(&mut self, data: &str) -> std::io::Result<()> {
        self.send(&format!("event: message\ndata: {data}\n\n"))
    }

    fn end(&mut self) -> std::io::Result<()> {
        self.0.write_all(b"0\r\n\r\n")?;
        self.0.flush()
    }
}

/// A server answering each request on its own thread with `answer(seen, log)`;
/// returns the endpoint URL and the log.
fn serve_seen(answer: impl Fn(&Seen, &Log) -> Answer + Send + Sync + 'static) -> (String, Log) {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", server.server_addr().to_ip().unwrap());
    let log = Log::default();
    let server_log = log.clone();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for mut request in server.incoming_requests() {
            let log = server_log.clone();
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut body = String::new();
                request.as_reader().read_to_string(&mut body).unwrap();
                let headers = request
                    .headers()
                    .iter()
                    .map(|h| (h.field.as_str().to_string(), h.value.as_str().to_string()))
                    .collect();
                let seen = Seen { method: request.method().as_str().to_string(), body, headers };
                match answer(&seen, &log) {
                    Answer::Reply(reply) => drop(request.respond(reply)),
                    Answer::Stream(stream) => {
                        let streamed = SseWriter::open(request.into_writer()).and_then(|mut w| stream(&mut w, &log));
                        if streamed.is_err() {
                            log.lock().unwrap().push("stream closed by the client".into());
                        }
                    }
                }
            });
        }
    });
    (url, log)
}

fn reply(status: u16, content_type: &str, body: &str) -> Reply {
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes()).unwrap();
    tiny_http::Response::from_string(body).with_status_code(status).with_header(header)
}

/// The initialize answer, opening session `s1`.
fn handshake() -> Reply {
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#;
    let session = tiny_http::Header::from_bytes(&b"Mcp-Session-Id"[..], &b"s1"[..]).unwrap();
    reply(200, "application/json", body).with_header(session)
}

fn connect(url: String) -> (HttpBackend, std::sync::mpsc::Receiver<Input>) {
    connect_with(url, Duration::from_secs(10))
}

fn connect_with(url: String, read_timeout: Duration) -> (HttpBackend, std::sync::mpsc::Receiver<Input>) {
    connect_bearing(url, read_timeout, None)
}

fn connect_bearing(
    url: String,
    read_timeout: Duration,
    bearer: Option<BearerSource>,
) -> (HttpBackend, std::sync::mpsc::Receiver<Input>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let sink: InputSink = Arc::new(move |input| tx.lock().unwrap().send(input).is_ok());
    let spawn: Spawner = Arc::new(|job| drop(std::thread::spawn(job)));
    let target = HttpTarget {
        server: "web".into(),
        generation: tether_core::Generation(1),
        url,
        headers: BTreeMap::new(),
        legacy: false,
        read_timeout,
        max_frame: 1 << 20,
        bearer,
    };
    (HttpBackend::connect(target, sink, spawn), rx)
}

/// The next input, skipping the end of the standalone GET stream (most fake
/// servers have none and answer 405, whenever that GET gets there).
fn next_input(rx: &std::sync::mpsc::Receiver<Input>) -> Input {
    loop {
        match rx.recv_timeout(Duration::from_secs(10)).expect("an input within 10 s") {
            Input::StreamEnded { stream: StreamRef::Standalone, .. } => continue,
            input => return input,
        }
    }
}

fn frame_of(input: Input) -> String {
    match input {
        Input::BackendFrame { frame, .. } => frame,
        other => panic!("expected a frame, got {other:?}"),
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;

#[test]
fn frames_after_a_notification_wait_until_it_is_accepted() {
    let (url, log) = serve(|_, body, _, log| {
        if body.contains("notifications/initialized") {
            log.lock().unwrap().push("notification received".into());
            std::thread::sleep(Duration::from_millis(300));
            log.lock().unwrap().push("notification answered".into());
            reply(202, "text/plain", "")
        } else {
            log.lock().unwrap().push("request received".into());
            reply(200, "application/json", r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}"#)
        }
    });
    let (backend, rx) = connect(url);
    backend.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(), None);
    backend.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.into(), Some(2));
    assert!(frame_of(next_input(&rx)).contains(r#""tools":[]"#));
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["notification received", "notification answered", "request received"]);
}

#[test]
fn the_get_stream_is_open_before_the_handshake_answer_is_reported() {
    let (url, log) = serve(|method, _, session, log| match method {
        "GET" => {
            log.lock().unwrap().push(format!("GET in session {session:?}"));
            reply(200, "text/event-stream", "")
        }
        "POST" => handshake(),
        _ => reply(405, "text/plain", ""),
    });
    let (backend, rx) = connect(url);
    backend.send(INITIALIZE.into(), Some(1));
    assert!(frame_of(next_input(&rx)).contains("protocolVersion"));
    assert_eq!(log.lock().unwrap().clone(), [r#"GET in session Some("s1")"#]);
}

#[test]
fn a_400_rejecting_the_session_is_reported_as_a_lost_session() {
    let (url, _) = serve(|method, body, session, _| match (method, session) {
        ("POST", None) => handshake(),
        ("POST", Some(_)) if body.contains("tools/call") => reply(
            400,
            "application/json",
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#,
        ),
        ("POST", Some(_)) => reply(
            400,
            "application/json",
            r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params"},"id":3}"#,
        ),
        _ => reply(405, "text/plain", ""),
    });
    let (backend, rx) = connect(url);
    backend.send(INITIALIZE.into(), Some(1));
    frame_of(next_input(&rx));
    backend.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call"}"#.into(), Some(2));
    let lost = Input::BackendFailed {
        server: "web".into(),
        generation: tether_core::Generation(1),
        request: Some(2),
        failure: Failure::Http { status: 404 },
    };
    assert_eq!(next_input(&rx), lost);
    backend.send(r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get"}"#.into(), Some(3));
    let bad = Input::BackendFailed {
        server: "web".into(),
        generation: tether_core::Generation(1),
        request: Some(3),
        failure: Failure::Http { status: 400 },
    };
    assert_eq!(next_input(&rx), bad);
}

fn failed(request: u64, failure: Failure) -> Input {
    Input::BackendFailed {
        server: "web".into(),
        generation: tether_core::Generation(1),
        request: Some(request),
        failure,
    }
}

/// Waits (at most 5 s) until the server logged `entry`.
fn wait_for(log: &Log, entry: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !log.lock().unwrap().iter().any(|e| e == entry) {
        assert!(std::time::Instant::now() < deadline, "no {entry:?} in {:?}", log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
}

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

/// A stateless-era request; `params` are the members before `_meta`, each
/// followed by a comma.
fn stateless(id: u64, method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{params}{META}}}}}"#)
}

#[test]
fn a_stateless_request_goes_with_its_headers_and_no_session() {
    let (url, log) = serve_seen(|seen, log| {
        let header = |name| seen.header(name).unwrap_or("-").to_string();
        let line = format!(
            "{} {} {} {} | {} | {} | session {}",
            seen.method,
            header("MCP-Protocol-Version"),
            header("Mcp-Method"),
            header("Mcp-Name"),
            header("Accept"),
            header("Content-Type"),
            header("Mcp-Session-Id"),
        );
        log.lock().unwrap().push(line);
        // A session id and a protocolVersion, which open a session (and its GET
        // stream) in the handshake era: they must change nothing here.
        let id = if seen.body.contains(r#""id":1,"#) { 1 } else { 2 };
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2026-07-28"}}}}"#);
        let session = tiny_http::Header::from_bytes(&b"Mcp-Session-Id"[..], &b"s9"[..]).unwrap();
        Answer::Reply(reply(200, "application/json", &body).with_header(session))
    });
    let (backend, rx) = connect(url);
    backend.send(stateless(1, "server/discover", ""), Some(1));
    assert!(frame_of(next_input(&rx)).contains(r#""id":1"#));
    backend.send(stateless(2, "tools/call", r#""name":"café","arguments":{},"#), Some(2));
    assert!(frame_of(next_input(&rx)).contains(r#""id":2"#));
    backend.close();
    std::thread::sleep(Duration::from_millis(200)); // a DELETE would be logged by now
    let accept = "application/json, text/event-stream";
    let expected = [
        format!("POST 2026-07-28 server/discover - | {accept} | application/json | session -"),
        format!("POST 2026-07-28 tools/call =?base64?Y2Fmw6k=?= | {accept} | application/json | session -"),
    ];
    assert_eq!(log.lock().unwrap().clone(), expected);
}

#[test]
fn param_headers_from_the_core_go_on_a_stateless_post_only() {
    let (url, log) = serve_seen(|seen, log| {
        let mut params: Vec<String> = seen
            .headers
            .iter()
            .filter(|(name, _)| name.to_ascii_lowercase().starts_with("mcp-param-"))
            .map(|(name, value)| format!("{name}: {value}"))
            .collect();
        params.sort();
        if seen.method != "POST" {
            return Answer::Reply(reply(405, "text/plain", "")); // the handshake era's GET stream
        }
        let method = seen.header("Mcp-Method").unwrap_or("-");
        log.lock().unwrap().push(format!("{method} [{}]", params.join(", ")));
        if seen.body.contains("initialize") {
            return Answer::Reply(handshake());
        }
        let id = if seen.body.contains(r#""id":2,"#) { 2 } else { 3 };
        Answer::Reply(reply(200, "application/json", &format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)))
    });
    let param = |name: &str, value: &str| (name.to_string(), value.to_string());
    let headers = vec![
        param("Mcp-Param-Region", "us-west1"),
        param("Mcp-Param-Greeting", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        param("Mcp-Param-Limit", "42"),
    ];
    let (backend, rx) = connect(url.clone());
    let call = stateless(2, "tools/call", r#""name":"sql","arguments":{"region":"us-west1"},"#);
    backend.send_with_headers(call, Some(2), headers.clone());
    assert!(frame_of(next_input(&rx)).contains(r#""id":2"#));
    // A handshake-era connection has no such headers: they are not sent.
    let (backend, rx) = connect(url);
    backend.send(INITIALIZE.into(), Some(1));
    frame_of(next_input(&rx));
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sql"}}"#;
    backend.send_with_headers(call.into(), Some(3), headers);
    assert!(frame_of(next_input(&rx)).contains(r#""id":3"#));
    let expected = [
        "tools/call [Mcp-Param-Greeting: =?base64?SGVsbG8sIOS4lueVjA==?=, Mcp-Param-Limit: 42, Mcp-Param-Region: us-west1]",
        "- []",
        "- []",
    ];
    assert_eq!(log.lock().unwrap().clone(), expected);
}

#[test]
fn the_managed_token_goes_on_every_request_and_a_refusal_carries_its_challenge() {
    let (url, _) = serve_seen(|seen, _| {
        Answer::Reply(match seen.header("Authorization") {
            Some("Bearer fresh") => handshake(),
            _ => reply(401, "application/json", "{}").with_header(
                "WWW-Authenticate: Bearer error=\"invalid_token\", scope=\"mcp:read\", resource_metadata=\"http://x/prm\""
                    .parse::<tiny_http::Header>()
                    .unwrap(),
            ),
        })
    });
    let token = Arc::new(Mutex::new("stale".to_string()));
    let source = token.clone();
    let bearer: BearerSource = Arc::new(move || Some(source.lock().unwrap().clone()));
    let (backend, rx) = connect_bearing(url, Duration::from_secs(5), Some(bearer));
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    backend.send(init.into(), Some(1));
    let challenge = tether_core::credential::Challenge {
        error: Some("invalid_token".into()),
        scope: Some("mcp:read".into()),
        resource_metadata: Some("http://x/prm".into()),
        ..Default::default()
    };
    assert_eq!(next_input(&rx), failed(1, Failure::Unauthorized { status: 401, challenge }));
    *token.lock().unwrap() = "fresh".into();
    backend.send(init.into(), Some(1));
    assert!(frame_of(next_input(&rx)).contains("protocolVersion"), "the refreshed token is used at once");
}

#[test]
fn a_4xx_carrying_an_error_for_the_request_is_its_answer() {
    let (url, _) = serve_seen(|seen, _| {
        Answer::Reply(match seen.header("Mcp-Method") {
            Some("server/discover") => reply(
                400,
                "application/json",
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-12-01"],"requested":"2026-07-28"}}}"#,
            ),
            Some("prompts/list") => reply(
                404,
                "application/json",
                r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Method not found"}}"#,
            ),
            // A JSON-RPC error, but not for this request.
            _ => reply(400, "application/json", r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}"#),
        })
    });
    let (backend, rx) = connect(url);
    backend.send(stateless(1, "server/discover", ""), Some(1));
    assert!(frame_of(next_input(&rx)).contains("-32022"));
    backend.send(stateless(2, "prompts/list", ""), Some(2));
    assert!(frame_of(next_input(&rx)).contains("-32601"));
    backend.send(stateless(3, "tools/list", ""), Some(3));
    assert_eq!(next_input(&rx), failed(3, Failure::Http { status: 400 }));
}

#[test]
fn a_probe_refused_without_an_answer_fails_and_initialize_goes_as_before() {
    let (url, log) = serve(|method, body, session, log| match method {
        "POST" if body.contains("server/discover") => reply(404, "text/plain", ""),
        "POST" if body.contains("initialize") => handshake(),
        "POST" => {
            log.lock().unwrap().push(format!("request in session {session:?}"));
            reply(200, "application/json", r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[]}}"#)
        }
        _ => reply(405, "text/plain", ""),
    });
    let (backend, rx) = connect(url);
    backend.send(stateless(1, "server/discover", ""), Some(1));
    assert_eq!(next_input(&rx), failed(1, Failure::Http { status: 404 }));
    let initialize = r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}"#;
    backend.send(initialize.into(), Some(2));
    assert!(frame_of(next_input(&rx)).contains("protocolVersion"));
    backend.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#.into(), Some(3));
    assert!(frame_of(next_input(&rx)).contains(r#""tools":[]"#));
    assert_eq!(log.lock().unwrap().clone(), [r#"request in session Some("s1")"#]);
}

#[test]
fn a_listen_stream_outlasts_the_read_timeout() {
    const PAUSE: Duration = Duration::from_millis(900);
    let (url, _) = serve_seen(|seen, _| match seen.header("Mcp-Method") {
        Some("subscriptions/listen") => Answer::Stream(|w, _| {
            let meta = r#""_meta":{"io.modelcontextprotocol/subscriptionId":1}"#;
            w.event(&format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{{{meta},"notifications":{{"toolsListChanged":true}}}}}}"#
            ))?;
            std::thread::sleep(PAUSE);
            w.event(&format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{{{meta}}}}}"#
            ))?;
            std::thread::sleep(PAUSE);
            w.event(&format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"complete",{meta}}}}}"#))?;
            w.end()
        }),
        _ => Answer::Stream(|w, _| {
            std::thread::sleep(PAUSE);
            w.event(r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#)?;
            w.end()
        }),
    });
    let (backend, rx) = connect_with(url, Duration::from_millis(300));
    // An ordinary request's stream is cut by the read timeout...
    backend.send(stateless(2, "tools/call", r#""name":"slow","arguments":{},"#), Some(2));
    assert_eq!(next_input(&rx), failed(2, Failure::Reset));
    // ...a subscription's is not.
    let listen = stateless(1, "subscriptions/listen", r#""notifications":{"toolsListChanged":true},"#);
    backend.send(listen, Some(1));
    assert!(frame_of(next_input(&rx)).contains("notifications/subscriptions/acknowledged"));
    assert!(frame_of(next_input(&rx)).contains("notifications/tools/list_changed"));
    assert!(frame_of(next_input(&rx)).contains(r#""resultType":"complete""#));
    assert_eq!(rx.recv_timeout(Duration::from_millis(200)).ok(), None);
}

#[test]
fn cancelling_a_stateless_request_closes_its_stream_and_posts_nothing() {
    let (url, log) = serve_seen(|seen, log| {
        if seen.body.contains("notifications/cancelled") {
            log.lock().unwrap().push("cancellation posted".into());
            return Answer::Reply(reply(202, "text/plain", ""));
        }
        Answer::Stream(|w, log| {
            log.lock().unwrap().push("stream open".into());
            w.event(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}"#,
            )?;
            for _ in 0..200 {
                std::thread::sleep(Duration::from_millis(25));
                w.send(":\n\n")?; // keep-alive
            }
            log.lock().unwrap().push("stream still open after 5 s".into());
            w.event(r#"{"jsonrpc":"2.0","id":5,"result":{"content":[]}}"#)?;
            w.end()
        })
    });
    let (backend, rx) = connect(url);
    backend.send(stateless(5, "tools/call", r#""name":"slow","arguments":{},"#), Some(5));
    assert!(frame_of(next_input(&rx)).contains("notifications/progress"));
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#;
    backend.send(cancel.into(), None);
    wait_for(&log, "stream closed by the client");
    // Nothing about the cancelled request reaches the core, not even a failure.
    assert_eq!(rx.recv_timeout(Duration::from_millis(300)).ok(), None);
    assert_eq!(log.lock().unwrap().clone(), ["stream open", "stream closed by the client"]);
}

#[test]
fn after_initialize_a_cancellation_is_posted_as_before() {
    let (url, log) = serve(|method, body, session, log| match method {
        "POST" if body.contains("notifications/cancelled") => {
            log.lock().unwrap().push(format!("cancellation posted in session {session:?}"));
            reply(202, "text/plain", "")
        }
        "POST" => handshake(),
        _ => reply(405, "text/plain", ""),
    });
    let (backend, rx) = connect(url);
    backend.send(INITIALIZE.into(), Some(1));
    frame_of(next_input(&rx));
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}"#;
    backend.send(cancel.into(), None);
    wait_for(&log, r#"cancellation posted in session Some("s1")"#);
}

#[test]
fn a_post_stream_ended_early_is_reported_and_resumed_with_last_event_id() {
    let (url, log) = serve_seen(|seen, log| match (seen.method.as_str(), seen.header("Last-Event-ID")) {
        ("POST", _) if seen.body.contains("initialize") => Answer::Reply(handshake()),
        ("POST", _) if seen.body.contains("tools/call") => Answer::Stream(|w, _| {
            // The priming event, then the server ends the stream without the response.
            w.send("id: p1\nretry: 300\ndata: \n\n")?;
            w.end()
        }),
        ("POST", _) => Answer::Reply(reply(202, "text/plain", "")),
        ("GET", Some(last)) => {
            log.lock().unwrap().push(format!("GET after {last}"));
            Answer::Stream(|w, _| {
                w.send("id: p2\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n\n")?;
                // The server keeps the stream open: the host closes it, the answer is in.
                for _ in 0..200 {
                    std::thread::sleep(Duration::from_millis(25));
                    w.send(":\n\n")?;
                }
                w.end()
            })
        }
        _ => Answer::Reply(reply(405, "text/plain", "")),
    });
    let (backend, rx) = connect(url);
    backend.send(INITIALIZE.into(), Some(1));
    frame_of(next_input(&rx));
    backend.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow"}}"#.into(), Some(2));
    let ended = Input::StreamEnded {
        server: "web".into(),
        generation: tether_core::Generation(1),
        stream: StreamRef::Request(2),
        last_event_id: Some("p1".into()),
        retry_ms: Some(300),
        events: 0,
        failure: None,
    };
    assert_eq!(next_input(&rx), ended, "the core hears of the early end, and decides");
    backend.resume(StreamRef::Request(2), Some("p1".into()));
    match next_input(&rx) {
        Input::BackendEvent { stream: StreamRef::Request(2), event_id, frame, .. } => {
            assert_eq!(event_id.as_deref(), Some("p2"));
            assert!(frame.contains(r#""id":2"#), "{frame}");
        }
        other => panic!("expected the response as an event, got {other:?}"),
    }
    wait_for(&log, "stream closed by the client");
    assert_eq!(rx.recv_timeout(Duration::from_millis(300)).ok(), None, "nothing after the answer");
    assert!(log.lock().unwrap().iter().any(|e| e == "GET after p1"));
}

#[test]
fn a_stateless_request_may_be_answered_with_a_stream() {
    let (url, _) = serve_seen(|_, _| {
        Answer::Stream(|w, _| {
            w.event(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}"#,
            )?;
            w.event(r#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"resultType":"complete"}}"#)?;
            w.end()
        })
    });
    let (backend, rx) = connect(url);
    backend.send(stateless(4, "tools/call", r#""name":"slow","arguments":{},"#), Some(4));
    assert!(frame_of(next_input(&rx)).contains("notifications/progress"));
    assert!(frame_of(next_input(&rx)).contains(r#""id":4"#));
    assert_eq!(rx.recv_timeout(Duration::from_millis(200)).ok(), None);
}

#[test]
fn what_a_post_stream_brings_is_reported_with_its_stream() {
    let (url, _) = serve_seen(|seen, _| match seen.method.as_str() {
        "POST" if seen.body.contains("initialize") => Answer::Reply(handshake()),
        "POST" if seen.body.contains("tools/call") => Answer::Stream(|w, _| {
            // Events without ids: only the stream says which call they are for.
            w.event(r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[]}}"#)?;
            w.event(r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#)?;
            w.end()
        }),
        "POST" => Answer::Reply(reply(202, "text/plain", "")),
        _ => Answer::Reply(reply(405, "text/plain", "")),
    });
    let (backend, rx) = connect(url);
    backend.send(INITIALIZE.into(), Some(1));
    frame_of(next_input(&rx));
    backend.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask"}}"#.into(), Some(2));
    for expected in ["sampling/createMessage", r#""id":2"#] {
        match next_input(&rx) {
            Input::BackendEvent { stream: StreamRef::Request(2), event_id: None, frame, .. } => {
                assert!(frame.contains(expected), "{frame}");
            }
            other => panic!("expected an event of the call's stream, got {other:?}"),
        }
    }
}
