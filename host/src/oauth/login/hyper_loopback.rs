//! The loopback listener on hyper's HTTP/1.1 server (the smol runtime's HTTP
//! server), driven by async-io on the thread that waits: every connection is
//! served at once (a browser's idle preconnection holds up nothing) and request
//! heads are bounded.

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

use super::super::secret::Secret;
use super::super::Failure;
use super::{check_callback, listener_failed, page_html, timed_out, Callback, Expected, POLL, REDIRECT_PATH, STRAY};

/// The loopback listener of one login.
pub(crate) struct Loopback {
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
    pub(crate) fn bind(port: u16) -> Result<Self, String> {
        let failed = |e: std::io::Error| format!("cannot listen on 127.0.0.1:{port} for the login redirect: {e}");
        let listener = TcpListener::bind(("127.0.0.1", port)).map_err(failed)?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
        let listener = Async::new(listener).map_err(failed)?;
        Ok(Loopback { listener, port })
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>/callback`.
    pub(crate) fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}{REDIRECT_PATH}", self.port)
    }

    /// Serves the callback until a response for this flow arrives (its code, or why
    /// it failed), `timeout` passes, or `cancel` is set (then `None`). Blocks the
    /// calling thread, which drives the connections itself: no runtime is needed.
    pub(crate) fn wait(
        &self,
        expected: &Expected,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Option<Result<Secret, Failure>> {
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
                    return Poll::Ready(Some(Err(timed_out(timeout))));
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
    if uri.path() != REDIRECT_PATH {
        return page(404, "Not found.", false);
    }
    if decided.borrow().is_some() {
        return page(400, STRAY, false);
    }
    let (response, outcome) = match check_callback(uri.query().unwrap_or(""), expected) {
        Callback::Stray => return page(400, STRAY, false),
        Callback::Code(code) => (page(200, "Authorized: tether is finishing the login (its status, or `tether auth status`, says when it is done). You can close this tab.", true), Ok(code)),
        Callback::Failed(failure) => (page(400, &format!("Login failed: {}", failure.message), true), Err(failure)),
    };
    *decided.borrow_mut() = Some((id, outcome));
    response
}

/// A small page for the browser; `last` closes the connection after it.
fn page(status: u16, text: &str, last: bool) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(page_html(text))));
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
    use crate::oauth::login::tests::expect;

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
}
