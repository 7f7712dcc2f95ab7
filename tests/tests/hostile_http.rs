//! Hostile HTTP clients against the real `tether --listen`, while another session
//! keeps calling a tool: tether stays alive, its memory stays bounded, and the
//! other session's calls stay fast.
//!
//! One test runs the attacks one after the other, each on a fresh tether (so each
//! phase's memory and latency figures are its own), and prints a table of them:
//!
//! - **trickle**: 100 connections each send a 200-byte POST body one byte every 40 ms;
//! - **chunked**: one POST whose body is 1 M one-byte chunks (under the body limit;
//!   `HOSTILE_HTTP_CHUNKS=4000000` for 4 M, the figure the limit was set against);
//! - **bodies**: 17 POSTs of 4 MiB sent but for their last bytes, then stalled:
//!   together more than the 64 MiB all bodies may hold; the other session's small
//!   POSTs still get through (the largest stalled body gives way to them);
//! - **sse**: 40 sessions whose SSE stream is never read (20 GET streams, 20 POSTs
//!   answered as a stream), while a backend logs 64 KiB messages to every session;
//! - **events**: 40 `/events` subscribers that never read, while a backend that
//!   dies at start is restarted over and over for 6 s (`HOSTILE_HTTP_EVENTS_SECS`);
//! - **connections**: one client holds 64 sessions, another 1,000 idle connections
//!   from the same address: a third client connects, opens a session and calls
//!   within a second (idle connections and idle sessions give way).
//!
//! Throughout, the stdio session and an HTTP session call `fs__echo` every few
//! milliseconds. Each phase asserts that tether is alive, its RSS stays under
//! [`RSS_BOUND_KIB`] (Linux, read from `/proc/<pid>/status`), and the other
//! sessions' p99 call latency under [`P99_BOUND`]. `HOSTILE_HTTP_PHASES=sse,events`
//! runs only the phases named; `TETHER_BIN` runs another build (say, an older one,
//! to see the figures it reaches).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::{mcp_post, mock_server, process_running, rss_kib, RssSampler, Tether};

/// Largest resident set tether may reach in any phase.
const RSS_BOUND_KIB: u64 = 100 * 1024;
/// Largest p99 latency of the other sessions' calls in any phase.
const P99_BOUND: Duration = Duration::from_secs(2);
/// SSE streams and `/events` subscribers that never read.
const STALLED: usize = 40;

/// One-byte chunks of the chunked body (`HOSTILE_HTTP_CHUNKS` overrides it: the
/// issue's figure is 4 M, which a debug build takes half a minute to decode).
fn chunk_count() -> usize {
    std::env::var("HOSTILE_HTTP_CHUNKS").ok().and_then(|n| n.parse().ok()).unwrap_or(1_000_000)
}

#[test]
fn hostile_http_clients_leave_tether_alive_small_and_responsive() {
    let refused = Arc::new(AtomicU64::new(0));
    // `HOSTILE_HTTP_PHASES=sse,events` runs only those (for measuring one attack).
    let only = std::env::var("HOSTILE_HTTP_PHASES").ok();
    let wanted = |name: &str| only.as_deref().map_or(true, |only| only.split(',').any(|p| p == name));
    let mut figures = Vec::new();
    if wanted("trickle") {
        figures.push(phase("trickle", |addr, _| trickle(addr, 100, 200, Duration::from_millis(40))));
    }
    if wanted("chunked") {
        figures.push(phase("chunked", |addr, _| chunked(addr, chunk_count())));
    }
    if wanted("sse") {
        figures.push(phase("sse", stalled_sse));
    }
    if wanted("bodies") {
        figures.push(phase("bodies", |addr, _| stalled_bodies(addr, 17, Duration::from_secs(4))));
    }
    if wanted("events") {
        // `HOSTILE_HTTP_EVENTS_SECS` makes the churn longer (to watch memory grow, or not).
        let secs = std::env::var("HOSTILE_HTTP_EVENTS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
        figures.push(phase("events", move |addr, _| stalled_events(addr, Duration::from_secs(secs))));
    }
    if wanted("connections") {
        let counted = refused.clone();
        figures.push(phase("connections", move |addr, url| {
            counted.store(crowded_out(addr, url, 1000, 64), Ordering::SeqCst)
        }));
    }
    eprintln!(
        "{:<12} {:>13} {:>13} {:>8} {:>8} {:>8} {:>6}",
        "phase", "base RSS KiB", "peak RSS KiB", "p50 ms", "p99 ms", "max ms", "calls"
    );
    let kib = |k: Option<u64>| k.map_or("-".into(), |k| k.to_string());
    for f in &figures {
        eprintln!(
            "{:<12} {:>13} {:>13} {:>8} {:>8} {:>8} {:>6}",
            f.name,
            kib(f.base_rss_kib),
            kib(f.peak_rss_kib),
            f.percentile(0.5).as_millis(),
            f.percentile(0.99).as_millis(),
            f.percentile(1.0).as_millis(),
            f.latencies.len()
        );
    }
    for f in &figures {
        assert!(f.alive, "{}: tether died", f.name);
        assert!(f.failures == 0, "{}: {} of the other sessions' calls failed", f.name, f.failures);
        assert!(!f.latencies.is_empty(), "{}: no call was made", f.name);
        let p99 = f.percentile(0.99);
        assert!(p99 < P99_BOUND, "{}: p99 latency {p99:?} over {P99_BOUND:?}", f.name);
        if let Some(peak) = f.peak_rss_kib {
            assert!(peak < RSS_BOUND_KIB, "{}: RSS reached {peak} KiB (bound {RSS_BOUND_KIB} KiB)", f.name);
        }
    }
    if wanted("connections") {
        let gave_way = refused.load(Ordering::SeqCst);
        assert!(gave_way > 0, "no idle connection gave way: the flood never reached the per-peer cap");
    }
}

/// What one phase measured.
struct Figures {
    name: &'static str,
    alive: bool,
    base_rss_kib: Option<u64>,
    peak_rss_kib: Option<u64>,
    latencies: Vec<Duration>,
    failures: usize,
}

impl Figures {
    /// The latency below which a share `p` of the calls stayed.
    fn percentile(&self, p: f64) -> Duration {
        tether_tests::percentile(&self.latencies, p)
    }
}

/// Starts a tether of its own, runs `attack` (given its address and MCP URL) on
/// a thread and calls `fs__echo` from the stdio session and an HTTP session
/// until it ends (and at least for a second).
fn phase(name: &'static str, attack: impl FnOnce(SocketAddr, &str) + Send + 'static) -> Figures {
    let config = json!({"mcpServers": {
        "fs": mock_server(&["--tools", "echo"]),
        "noisy": mock_server(&["--tools", "log,progress"]),
        "churn": churn_server(),
    }});
    let mut t = Tether::start(config, &["serve", "--listen", "127.0.0.1:0", "--stdio"]);
    let url = t.logged_url("listening on ");
    let addr: SocketAddr = url.trim_start_matches("http://").trim_end_matches("/mcp").parse().expect("an address");
    t.initialize();
    assert_eq!(t.call_text("fs__echo", json!({"text": "warm"})), "warm");
    let http = HttpSession::open(&url);
    assert_eq!(http.echo("warm").as_deref(), Ok("warm"));
    let base_rss_kib = rss_kib(t.pid());
    let rss = RssSampler::start(t.pid());
    let started = Instant::now();
    let attack_url = url.clone();
    let attacker = thread::spawn(move || attack(addr, &attack_url));
    let (mut latencies, mut failures) = (Vec::new(), 0);
    let mut n = 0u64;
    while !attacker.is_finished() || started.elapsed() < Duration::from_secs(1) {
        assert!(started.elapsed() < Duration::from_secs(600), "{name}: the attack did not end");
        n += 1;
        let text = format!("{name}-{n}");
        let at = Instant::now();
        let call = json!({"name": "fs__echo", "arguments": {"text": text}});
        let answer = t.request_timeout("tools/call", call, P99_BOUND * 5);
        latencies.push(at.elapsed());
        if answer["result"]["content"][0]["text"] != text.as_str() {
            failures += 1;
        }
        // The noisy backend's log messages and tether's events are not looked at.
        t.inbox.clear();
        // The HTTP session is left alone while another client takes every session
        // (it is idle between calls: it may give way and have to open another).
        if name != "connections" {
            let at = Instant::now();
            match http.echo(&text) {
                Ok(echoed) if echoed == text => latencies.push(at.elapsed()),
                _ => failures += 1,
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    attacker.join().expect("the attack thread panicked");
    let peak_rss_kib = rss.peak();
    let alive = process_running(t.pid())
        && t.request_timeout("tools/call", json!({"name": "fs__echo", "arguments": {"text": "after"}}), P99_BOUND)
            ["result"]["content"][0]["text"]
            == "after";
    eprintln!("{name}: tether logged {} clients as too slow", t.log_count("too slow"));
    Figures { name, alive, base_rss_kib, peak_rss_kib, latencies, failures }
}

/// A backend that dies at start after 8 lines of stderr: every restart is
/// events of a few KiB (the status message quotes the stderr tail).
fn churn_server() -> Value {
    let stderr: Vec<String> = (0..8).map(|i| format!("churn {i}: {}", "e".repeat(500))).collect();
    mock_server(&["--stderr", &stderr.join("\n"), "--exit-on-start", "1"])
}

/// An MCP session over HTTP (a pooled keep-alive connection).
struct HttpSession {
    agent: ureq::Agent,
    url: String,
    session: String,
    next_id: AtomicU64,
}

impl HttpSession {
    /// Initializes a session at `url`.
    fn open(url: &str) -> HttpSession {
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build();
        let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hostile","version":"1"}}});
        let (status, session, body) = mcp_post(&agent, url, None, None, &init).expect("initialize");
        assert_eq!(status, 200, "{body}");
        let session = session.expect("a session id");
        let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
        assert_eq!(mcp_post(&agent, url, None, Some(&session), &initialized).expect("initialized").0, 202);
        HttpSession { agent, url: url.to_string(), session, next_id: AtomicU64::new(1) }
    }

    /// Calls `tool` with `arguments`; the answer's body.
    fn call(&self, tool: &str, arguments: Value) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let call = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments}});
        let (status, _, body) = mcp_post(&self.agent, &self.url, None, Some(&self.session), &call)?;
        if status != 200 {
            return Err(format!("status {status}: {body}"));
        }
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
    }

    /// Calls `fs__echo`; the text it answered.
    fn echo(&self, text: &str) -> Result<String, String> {
        let answer = self.call("fs__echo", json!({"text": text}))?;
        answer["result"]["content"][0]["text"].as_str().map(str::to_string).ok_or_else(|| answer.to_string())
    }
}

/// A plain connection, without Nagle's delay (each write its own segment).
fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_nodelay(true).ok()?;
    Some(stream)
}

/// A connection whose receive buffer is small (set before connecting, so the
/// window it offers is small too), as a stalling attacker would make it: what
/// it does not read stays on tether's side (the kernel's send buffer, a few MB
/// on loopback, then tether's own queue).
fn connect_stingy(addr: SocketAddr) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None).ok()?;
    socket.set_recv_buffer_size(4096).ok()?;
    socket.connect_timeout(&addr.into(), Duration::from_secs(2)).ok()?;
    socket.set_tcp_nodelay(true).ok()?;
    Some(socket.into())
}

/// The status code of whatever answer `stream` has within `wait`.
fn status_of(stream: &mut TcpStream, wait: Duration) -> Option<u16> {
    stream.set_read_timeout(Some(wait)).ok()?;
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf).ok()?;
    let head = String::from_utf8_lossy(&buf[..n]);
    head.split(' ').nth(1)?.parse().ok()
}

/// The head of a POST to `/mcp`, `extra` headers included.
fn post_head(extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{extra}\r\n"
    )
}

/// `conns` connections each sending a `pieces`-byte body one byte per `gap`.
fn trickle(addr: SocketAddr, conns: usize, pieces: usize, gap: Duration) {
    let head = post_head(&format!("Content-Length: {pieces}\r\n"));
    let mut streams: Vec<TcpStream> = (0..conns).filter_map(|_| connect(addr)).collect();
    for s in &mut streams {
        let _ = s.write_all(head.as_bytes());
    }
    for _ in 0..pieces {
        for s in &mut streams {
            let _ = s.write(b" ");
        }
        thread::sleep(gap);
    }
    let mut statuses = std::collections::BTreeMap::new();
    for s in &mut streams {
        *statuses.entry(status_of(s, Duration::from_millis(200))).or_insert(0) += 1;
    }
    eprintln!("trickle: answers by status {statuses:?}");
}

/// `conns` POSTs of 4 MiB (the body limit) each: all but the last bytes sent
/// at once, then nothing for `stall`, so together they hold more than the
/// bodies' shared budget (64 MiB).
fn stalled_bodies(addr: SocketAddr, conns: usize, stall: Duration) {
    const LIMIT: usize = 4 * 1024 * 1024;
    let head = post_head(&format!("Content-Length: {LIMIT}\r\n"));
    let chunk = vec![b' '; 64 * 1024];
    let mut streams: Vec<TcpStream> = Vec::new();
    for _ in 0..conns {
        let Some(mut s) = connect(addr) else { continue };
        let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
        let _ = s.write_all(head.as_bytes());
        let mut sent = 0;
        while sent + chunk.len() < LIMIT && s.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
        streams.push(s);
    }
    thread::sleep(stall);
    let mut statuses = std::collections::BTreeMap::new();
    for s in &mut streams {
        *statuses.entry(status_of(s, Duration::from_millis(200))).or_insert(0) += 1;
    }
    eprintln!("bodies: {} stalled 4 MiB bodies; answers by status {statuses:?}", streams.len());
}

/// One POST whose JSON body comes in `chunks` one-byte chunks.
fn chunked(addr: SocketAddr, chunks: usize) {
    let Some(mut s) = connect(addr) else { return };
    let (prefix, suffix) = (r#"{"jsonrpc":"2.0","method":"notifications/pad","params":{"p":""#, r#""}}"#);
    let pad = chunks - prefix.len() - suffix.len();
    let body = prefix.bytes().chain(std::iter::repeat(b'x').take(pad)).chain(suffix.bytes());
    if s.write_all(post_head("Transfer-Encoding: chunked\r\n").as_bytes()).is_err() {
        return;
    }
    let started = Instant::now();
    let mut wire = Vec::with_capacity(64 * 1024);
    for byte in body {
        wire.extend_from_slice(b"1\r\n");
        wire.push(byte);
        wire.extend_from_slice(b"\r\n");
        if wire.len() >= 60 * 1024 {
            if s.write_all(&wire).is_err() {
                break;
            }
            wire.clear();
        }
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    let _ = s.write_all(&wire);
    let status = status_of(&mut s, Duration::from_secs(30));
    eprintln!("chunked: sent in {:?}, answered {status:?}", started.elapsed());
}

/// 40 sessions whose SSE stream is never read: half a GET stream, half a POST
/// answered as a stream (a long `progress` call), while another session has the
/// `noisy` backend log 64 KiB messages to every session (5 MB for each).
fn stalled_sse(addr: SocketAddr, url: &str) {
    const LOG_CALLS: usize = 80;
    let mut stalled = Vec::new();
    for i in 0..STALLED {
        let session = HttpSession::open(url);
        let headers = format!("Mcp-Session-Id: {}\r\nMCP-Protocol-Version: 2025-11-25\r\n", session.session);
        let request = if i % 2 == 0 {
            format!("GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n{headers}\r\n")
        } else {
            // Logged while it runs, the messages go to its stream.
            let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noisy__progress",
                "arguments":{"steps":1000,"ms":10},"_meta":{"progressToken":format!("p{i}")}}})
            .to_string();
            format!("{}{call}", post_head(&format!("{headers}Content-Length: {}\r\n", call.len())))
        };
        if let Some(mut s) = connect_stingy(addr) {
            let _ = s.write_all(request.as_bytes());
            stalled.push(s);
        }
    }
    let flooder = HttpSession::open(url);
    let message = "m".repeat(64 * 1024);
    let started = Instant::now();
    let mut calls = 0;
    while calls < LOG_CALLS && started.elapsed() < Duration::from_secs(30) {
        if flooder.call("noisy__log", json!({"message": message})).is_err() {
            break;
        }
        calls += 1;
    }
    let took = started.elapsed();
    let closed = count_closed(&mut stalled, Duration::from_secs(2));
    eprintln!("sse: {calls} log calls took {took:?}; {closed} of {} stalled streams were closed", stalled.len());
}

/// How many of `streams` the peer closed (read to their end, or reset) within
/// `wait`; what they hold is read and thrown away meanwhile.
fn count_closed(streams: &mut [TcpStream], wait: Duration) -> usize {
    let deadline = Instant::now() + wait;
    let mut buf = vec![0u8; 256 * 1024];
    let mut open: Vec<&mut TcpStream> = streams.iter_mut().filter(|s| s.set_nonblocking(true).is_ok()).collect();
    let total = open.len();
    while !open.is_empty() && Instant::now() < deadline {
        open.retain_mut(|s| loop {
            match s.read(&mut buf) {
                Ok(0) => return false,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        });
        thread::sleep(Duration::from_millis(20));
    }
    total - open.len()
}

/// 40 `/events` subscribers that never read while `churn` is restarted for `how_long`.
fn stalled_events(addr: SocketAddr, how_long: Duration) {
    let mut stalled: Vec<TcpStream> = (0..STALLED)
        .filter_map(|_| {
            let mut s = connect_stingy(addr)?;
            s.write_all(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n").ok()?;
            Some(s)
        })
        .collect();
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10)).build();
    let restart = format!("http://{addr}/admin/restart/churn");
    let started = Instant::now();
    let mut restarts = 0;
    while started.elapsed() < how_long {
        let sent = agent.post(&restart).set("Content-Type", "application/json").send_string("{}");
        if matches!(sent, Ok(_) | Err(ureq::Error::Status(_, _))) {
            restarts += 1;
        }
        thread::sleep(Duration::from_millis(2));
    }
    let closed = count_closed(&mut stalled, Duration::from_secs(2));
    eprintln!("events: {restarts} restarts; {closed} of {} stalled subscribers were closed", stalled.len());
}

/// One client opens `sessions` sessions, another `idle` connections that send
/// nothing; then a third connects, opens a session and calls `fs__echo`, which
/// must take under a second. The number of idle connections tether closed to
/// make room (none refused with 503: they were idle).
fn crowded_out(addr: SocketAddr, url: &str, idle: usize, sessions: usize) -> u64 {
    let holder = ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build();
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hoarder","version":"1"}}});
    for _ in 0..sessions {
        let (status, _, body) = mcp_post(&holder, url, None, None, &init).expect("a hoarded session");
        assert_eq!(status, 200, "{body}");
    }
    let started = Instant::now();
    let mut streams: Vec<TcpStream> = (0..idle).filter_map(|_| connect(addr)).collect();
    eprintln!("connections: {} idle ones opened in {:?}", streams.len(), started.elapsed());
    let at = Instant::now();
    let newcomer = HttpSession::open(url);
    assert_eq!(newcomer.echo("newcomer").as_deref(), Ok("newcomer"));
    let took = at.elapsed();
    eprintln!("connections: a new client opened a session and called in {took:?}");
    assert!(took < Duration::from_secs(1), "the new client waited {took:?}");
    let (mut closed, mut refused) = (0, 0);
    for s in &mut streams {
        let _ = s.set_read_timeout(Some(Duration::from_millis(1)));
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => closed += 1,
            Ok(n) if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 503") => refused += 1,
            Err(e) if !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => closed += 1,
            _ => {}
        }
    }
    eprintln!("connections: {closed} idle connections gave way, {refused} were refused");
    assert_eq!(refused, 0, "idle connections are never refused while others are idle");
    closed
}
