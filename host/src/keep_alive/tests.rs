//! Tests of [`PooledAgent`] against a raw TCP server that closes connections as
//! servers do when they time an idle connection out.

use super::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;

/// What the server does with a request, given which connection it came on (0,
/// 1, ...) and which request of that connection it is (0, 1, ...).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Act {
    /// Answers 200 with the body echoed, keeping the connection.
    Answer,
    /// Closes the connection without a byte of answer: the server's idle timer
    /// fired as the request arrived.
    Close,
}

/// Requests the server saw: (connection, request on it, body).
type Seen = Arc<Mutex<Vec<(usize, usize, String)>>>;

/// A server on a free loopback port; `act` decides per request, `keep_alive` is
/// the `Keep-Alive` header it sends, if any.
fn server(act: fn(usize, usize) -> Act, keep_alive: Option<&'static str>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let log = seen.clone();
    thread::spawn(move || {
        for (conn, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let log = log.clone();
            thread::spawn(move || connection(stream, conn, act, keep_alive, &log));
        }
    });
    (url, seen)
}

fn connection(stream: TcpStream, conn: usize, act: fn(usize, usize) -> Act, keep_alive: Option<&str>, log: &Seen) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    for index in 0.. {
        let mut length = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let body = String::from_utf8(body).unwrap();
        log.lock().unwrap().push((conn, index, body.clone()));
        match act(conn, index) {
            Act::Close => return, // dropping both halves closes the socket
            Act::Answer => {
                let extra = keep_alive.map(|v| format!("Keep-Alive: {v}\r\n")).unwrap_or_default();
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n",
                    body.len()
                );
                if out.write_all(head.as_bytes()).and_then(|()| out.write_all(body.as_bytes())).is_err() {
                    return;
                }
            }
        }
    }
}

fn agent() -> PooledAgent {
    PooledAgent::new(|| ureq::AgentBuilder::new().timeout(Duration::from_secs(10)))
}

fn post(agent: &PooledAgent, url: &str, body: &str) -> Result<String, ureq::Error> {
    let response = agent.send(|a| a.post(url).send_string(body))?;
    let mut text = String::new();
    agent.body(response).read_to_string(&mut text).unwrap();
    Ok(text)
}

#[test]
fn a_post_lost_to_a_closed_idle_connection_goes_again_on_a_fresh_one() {
    // The second request of every connection meets a server that just closed it.
    let (url, seen) = server(|_, index| if index == 0 { Act::Answer } else { Act::Close }, None);
    let agent = agent();
    assert_eq!(post(&agent, &url, "one").unwrap(), "one");
    assert_eq!(post(&agent, &url, "two").unwrap(), "two");
    assert_eq!(post(&agent, &url, "three").unwrap(), "three");
    let seen = seen.lock().unwrap().clone();
    // "two" met the closing connection 0, then went once on connection 1; the same
    // for "three" on connection 1, then on connection 2.
    let expected = [(0, 0, "one"), (0, 1, "two"), (1, 0, "two"), (1, 1, "three"), (2, 0, "three")];
    let expected: Vec<_> = expected.iter().map(|(c, i, b)| (*c, *i, b.to_string())).collect();
    assert_eq!(seen, expected);
}

#[test]
fn a_request_on_a_fresh_connection_is_never_sent_twice() {
    // The server drops every request unanswered: on a connection just opened,
    // that is its failure, not a stale connection, and the request goes once.
    let (url, seen) = server(|_, _| Act::Close, None);
    let agent = agent();
    let err = post(&agent, &url, "call").unwrap_err();
    assert!(matches!(&err, ureq::Error::Transport(t) if lost_before_answer(t)), "{err}");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[test]
fn a_resent_request_that_fails_again_is_not_sent_a_third_time() {
    // Connection 0 answers once; every later request is dropped: the resend on a
    // fresh connection fails too, and that is the answer.
    let (url, seen) = server(|conn, index| if (conn, index) == (0, 0) { Act::Answer } else { Act::Close }, None);
    let agent = agent();
    post(&agent, &url, "one").unwrap();
    assert!(post(&agent, &url, "two").is_err());
    let bodies: Vec<_> = seen.lock().unwrap().iter().map(|(_, _, b)| b.clone()).collect();
    assert_eq!(bodies, ["one", "two", "two"]);
}

#[test]
fn connections_idle_past_the_servers_keep_alive_are_not_reused() {
    // timeout=1: reused for at most half a second.
    let (url, seen) = server(|_, _| Act::Answer, Some("timeout=1, max=100"));
    let agent = agent();
    post(&agent, &url, "a").unwrap();
    post(&agent, &url, "b").unwrap(); // at once: the same connection
    thread::sleep(Duration::from_millis(700));
    post(&agent, &url, "c").unwrap(); // idle 0.7 s: a new connection
    let connections: Vec<_> = seen.lock().unwrap().iter().map(|(c, i, _)| (*c, *i)).collect();
    assert_eq!(connections, [(0, 0), (0, 1), (1, 0)]);
}

#[test]
fn keep_alive_hints_set_the_idle_limit() {
    assert_eq!(keep_alive_timeout("timeout=5, max=100"), Some(5));
    assert_eq!(keep_alive_timeout("max=100, Timeout = \"60\""), Some(60));
    assert_eq!(keep_alive_timeout("max=100"), None);
    assert_eq!(keep_alive_timeout("timeout=soon"), None);
    assert_eq!(idle_limit(5), Duration::from_secs(4));
    assert_eq!(idle_limit(60), Duration::from_secs(59));
    assert_eq!(idle_limit(1), Duration::from_millis(500));
    assert_eq!(idle_limit(0), Duration::ZERO);
    assert!(DEFAULT_IDLE_LIMIT < Duration::from_secs(5));
}

/// A hyper server (as many Rust MCP servers are) whose idle connections are
/// closed `idle` after their last answer, by hyper's own header timer: the
/// connections it accepted are counted.
fn hyper_server(idle: Duration) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use smol_hyper::rt::{FuturesIo, SmolTimer};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    thread::spawn(move || {
        let listener = smol::Async::new(listener).unwrap();
        let executor = Arc::new(smol::Executor::new());
        smol::block_on(executor.run(async {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let service = hyper::service::service_fn(|request: hyper::Request<hyper::body::Incoming>| async move {
                    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::<Bytes>::new(body)))
                });
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder.timer(SmolTimer::new()).header_read_timeout(idle);
                let connection = builder.serve_connection(FuturesIo::new(smol::net::TcpStream::from(stream)), service);
                executor.spawn(async move { drop(connection.await) }).detach();
            }
        }));
    });
    (url, accepted)
}

#[test]
fn calls_at_gaps_around_a_hyper_servers_idle_timeout_all_succeed() {
    // The server drops idle connections after 300 ms and says nothing of it (no
    // Keep-Alive header): calls 250 to 350 ms apart meet connections it is just
    // closing, and each must still go through. (The exact race, a close while
    // the request is on its way, is rare here; the raw server above makes it
    // happen every time.)
    let (url, accepted) = hyper_server(Duration::from_millis(300));
    let agent = agent();
    let mut failed = Vec::new();
    for i in 0..24u64 {
        let body = format!("call {i}");
        match post(&agent, &url, &body) {
            Ok(echo) => assert_eq!(echo, body),
            Err(e) => failed.push(format!("{i}: {e}")),
        }
        thread::sleep(Duration::from_millis(250 + (i * 37) % 101));
    }
    assert!(failed.is_empty(), "failed calls: {failed:?}");
    let accepted = accepted.load(std::sync::atomic::Ordering::SeqCst);
    assert!(accepted > 1, "the server closed idle connections ({accepted} accepted)");
}
