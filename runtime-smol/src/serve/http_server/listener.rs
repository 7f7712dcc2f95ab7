//! Accepting connections and serving each with hyper's HTTP/1.1 server on smol:
//! the caps on connections (see [`super::census`]), and the end of a connection
//! whose client reads its event stream too slowly or that gives way at a cap.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_io::Async;
use futures_lite::future;
use http_body_util::BodyExt;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use smol_hyper::rt::{FuturesIo, SmolTimer};

use super::framing::{HeadWatch, Watched};
use super::message::{error_body, TRANSPORT_ERROR};
use super::reply::Body;
use super::{service, Shared};
use crate::serve::byte_queue::Closer;

/// How long a client may take to send a request's headers (hyper counts from
/// the end of the previous response on a keep-alive connection).
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest request head.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Pause after a failed accept (out of descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// One connection, as the request handlers see it.
pub(super) struct Connection {
    /// The client's address.
    pub(super) peer: SocketAddr,
    /// Ends this connection (a client too slow for its event stream).
    pub(super) closer: Closer,
}

/// A connection's place under the caps, given back when it ends.
struct Slot {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.census().closed(self.id);
    }
}

/// A request being served: its connection does not give way at a cap until
/// the response (its whole body) is sent or dropped.
struct InRequest {
    shared: Arc<Shared>,
    id: u64,
    watch: Arc<HeadWatch>,
}

impl InRequest {
    fn begin(shared: &Arc<Shared>, id: u64, watch: &Arc<HeadWatch>) -> InRequest {
        shared.census().busy(id);
        InRequest { shared: shared.clone(), id, watch: watch.clone() }
    }
}

impl Drop for InRequest {
    fn drop(&mut self) {
        self.shared.census().done(self.id, Instant::now());
        self.watch.expect_head();
    }
}

/// A response body that keeps its request counted as being served.
struct Tracked {
    body: Body,
    _request: InRequest,
}

impl hyper::body::Body for Tracked {
    type Data = hyper::body::Bytes;
    type Error = <Body as hyper::body::Body>::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Accepts until [`super::HttpServer::shutdown`] or
/// [`super::HttpServer::stop_accepting`], then drops the listener.
pub(super) async fn accept_loop(shared: Arc<Shared>, listener: Async<TcpListener>) {
    loop {
        let (stop, stop_accepting) = (shared.stop_rx.clone(), shared.stop_accepting_rx.clone());
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            let _ = future::or(stop.recv(), stop_accepting.recv()).await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok((stream, peer))) => {
                let options = &shared.options;
                let (total, per_peer) = (options.max_connections, options.max_connections_per_peer);
                let admitted = shared.census().admit(peer.ip(), total, per_peer, Instant::now());
                let Some(admitted) = admitted else {
                    refuse(stream.get_ref());
                    tracing::debug!(%peer, "HTTP connection refused: every connection is busy with a request");
                    continue;
                };
                let slot = Slot { shared: shared.clone(), id: admitted.id };
                let _ = stream.get_ref().set_nodelay(true);
                smol::spawn(serve(shared.clone(), stream, peer, slot, admitted.evicted)).detach();
            }
            Some(Err(e)) => {
                tracing::warn!("HTTP accept failed: {e}");
                async_io::Timer::after(ACCEPT_BACKOFF).await;
            }
        }
    }
    tracing::debug!("Streamable HTTP listener stopped");
}

/// Answers a connection over the caps with 503 without waiting for anything,
/// then closes it. Whatever the client sent already is read first, so the
/// close does not reset the connection before the answer is read.
fn refuse(stream: &std::net::TcpStream) {
    static ANSWER: OnceLock<Vec<u8>> = OnceLock::new();
    let answer = ANSWER.get_or_init(|| {
        let body =
            error_body(TRANSPORT_ERROR, "service unavailable: every connection is busy with a request; retry later");
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\nretry-after: 1\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    // The socket is non-blocking: these never wait.
    let mut stream = stream;
    let mut scratch = [0u8; 4096];
    let _ = stream.read(&mut scratch);
    let _ = stream.write(answer);
}

/// Serves one connection; on shutdown, finishes the request in progress and
/// closes. A connection whose event stream overflowed is reset at once.
async fn serve(
    shared: Arc<Shared>,
    stream: Async<std::net::TcpStream>,
    peer: SocketAddr,
    slot: Slot,
    evicted: async_channel::Receiver<()>,
) {
    let stream = smol::net::TcpStream::from(stream);
    let mut first = [0u8; 1];
    let spoke = future::or(async { matches!(stream.peek(&mut first).await, Ok(n) if n > 0) }, async {
        async_io::Timer::after(shared.options.silent_timeout).await;
        false
    });
    // Giving way or stopping while it is silent ends it as well.
    let ended = async {
        let _ = future::or(evicted.recv(), shared.stop_rx.recv()).await;
        false
    };
    if !future::or(spoke, ended).await {
        tracing::debug!(%peer, "HTTP connection closed: it sent nothing");
        return;
    }
    let stop = shared.stop_rx.clone();
    let (closer, closed) = Closer::new();
    let connection_info = Arc::new(Connection { peer, closer: closer.clone() });
    let handler = shared.clone();
    let id = slot.id;
    let watch = HeadWatch::new();
    let heads = watch.clone();
    let service = service_fn(move |request| {
        let shared = handler.clone();
        let connection = connection_info.clone();
        let heads = heads.clone();
        async move {
            let request_done = InRequest::begin(&shared, id, &heads);
            let response = service::handle(shared, &connection, request).await;
            let response = response.map(|body| Tracked { body, _request: request_done }.boxed_unsync());
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let mut builder = http1::Builder::new();
    builder.timer(SmolTimer::new()).header_read_timeout(HEADER_TIMEOUT).max_buf_size(MAX_HEADER_BYTES);
    let io = FuturesIo::new(Watched::new(stream.clone(), watch.clone()));
    let mut connection = pin!(builder.serve_connection(io, service));
    /// How the connection's serving ended.
    enum End {
        Served(hyper::Result<()>),
        Stopping,
        TooSlow,
        GaveWay,
    }
    let end = future::or(
        async { End::Served(connection.as_mut().await) },
        future::or(
            future::or(
                async {
                    let _ = stop.recv().await;
                    End::Stopping
                },
                async {
                    let _ = closed.recv().await;
                    End::TooSlow
                },
            ),
            async {
                let _ = evicted.recv().await;
                End::GaveWay
            },
        ),
    )
    .await;
    let result = match end {
        End::Served(result) => result,
        End::Stopping => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
        End::TooSlow => {
            // A reset frees the kernel's buffers too, at once: the client does not read them.
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            tracing::debug!(%peer, "HTTP connection closed: its client reads too slowly");
            return;
        }
        End::GaveWay => {
            // Idle: closing it loses nothing (a keep-alive client opens another).
            tracing::debug!(%peer, "idle HTTP connection closed to make room for a new one");
            return;
        }
    };
    drop(closer);
    if watch.saw_bare_lf() {
        refuse_bare_lf(stream).await;
        tracing::debug!(%peer, "HTTP request refused: a line of its head ended in a bare LF");
        return;
    }
    if let Err(e) = result {
        tracing::debug!("HTTP connection ended: {e}");
    }
}

/// Answers a request whose head had a bare LF (hyper gave up on the
/// connection) with 400, and closes.
async fn refuse_bare_lf(mut stream: smol::net::TcpStream) {
    use futures_lite::AsyncWriteExt;
    let body = error_body(TRANSPORT_ERROR, "bad request: every line of a request head must end in CRLF");
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.flush().await;
    };
    future::or(write, async {
        async_io::Timer::after(Duration::from_secs(2)).await;
    })
    .await;
}
