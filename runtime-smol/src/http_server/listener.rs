//! Accepting connections and serving each with hyper's HTTP/1.1 server on smol:
//! the caps on connections (in all and per peer address), and the end of a
//! connection whose client reads its event stream too slowly.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_io::Async;
use futures_lite::future;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use smol_hyper::rt::{FuturesIo, SmolTimer};

use super::message::{error_body, TRANSPORT_ERROR};
use super::{service, Shared};
use crate::byte_queue::Closer;

/// How long a client may take to send a request's headers.
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

/// The connections open now: in all and by peer address.
#[derive(Debug, Default)]
pub(super) struct Census {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

impl Census {
    /// Counts a connection from `peer` if the caps allow it.
    fn admit(&mut self, peer: IpAddr, max_total: usize, max_per_peer: usize) -> bool {
        let from_peer = self.by_peer.get(&peer).copied().unwrap_or(0);
        if self.total >= max_total || from_peer >= max_per_peer {
            return false;
        }
        self.total += 1;
        self.by_peer.insert(peer, from_peer + 1);
        true
    }

    fn release(&mut self, peer: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.by_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.by_peer.remove(&peer);
            }
        }
    }

    /// Connections open now.
    #[cfg(test)]
    pub(super) fn total(&self) -> usize {
        self.total
    }
}

/// A connection's place under the caps, given back when it ends.
struct Slot {
    shared: Arc<Shared>,
    peer: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.census().release(self.peer);
    }
}

/// Accepts until [`super::HttpServer::shutdown`], then drops the listener.
pub(super) async fn accept_loop(shared: Arc<Shared>, listener: Async<TcpListener>) {
    loop {
        let stop = shared.stop_rx.clone();
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            let _ = stop.recv().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok((stream, peer))) => {
                let options = &shared.options;
                let admitted =
                    shared.census().admit(peer.ip(), options.max_connections, options.max_connections_per_peer);
                if !admitted {
                    refuse(stream.get_ref());
                    tracing::debug!(%peer, "HTTP connection refused: too many connections");
                    continue;
                }
                let slot = Slot { shared: shared.clone(), peer: peer.ip() };
                let _ = stream.get_ref().set_nodelay(true);
                smol::spawn(serve(shared.clone(), stream, peer, slot)).detach();
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
        let body = error_body(TRANSPORT_ERROR, "service unavailable: too many connections; retry later");
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
async fn serve(shared: Arc<Shared>, stream: Async<std::net::TcpStream>, peer: SocketAddr, _slot: Slot) {
    let stream = smol::net::TcpStream::from(stream);
    let stop = shared.stop_rx.clone();
    let (closer, closed) = Closer::new();
    let connection_info = Arc::new(Connection { peer, closer: closer.clone() });
    let handler = shared.clone();
    let service = service_fn(move |request| {
        let shared = handler.clone();
        let connection = connection_info.clone();
        async move { Ok::<_, std::convert::Infallible>(service::handle(shared, &connection, request).await) }
    });
    let mut builder = http1::Builder::new();
    builder.timer(SmolTimer::new()).header_read_timeout(HEADER_TIMEOUT).max_buf_size(MAX_HEADER_BYTES);
    let mut connection = pin!(builder.serve_connection(FuturesIo::new(stream.clone()), service));
    /// How the connection's serving ended.
    enum End {
        Served(hyper::Result<()>),
        Stopping,
        TooSlow,
    }
    let end = future::or(
        async { End::Served(connection.as_mut().await) },
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
    };
    drop(closer);
    if let Err(e) = result {
        tracing::debug!("HTTP connection ended: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_census_caps_connections_per_peer_and_in_all() {
        let (a, b, c): (IpAddr, IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap());
        let mut census = Census::default();
        assert!(census.admit(a, 3, 2) && census.admit(a, 3, 2));
        assert!(!census.admit(a, 3, 2), "a third from one peer");
        assert!(census.admit(b, 3, 2));
        assert!(!census.admit(c, 3, 2), "a fourth in all");
        census.release(a);
        assert!(census.admit(c, 3, 2));
        assert_eq!(census.total(), 3);
        for peer in [a, b, c] {
            census.release(peer);
        }
        assert_eq!(census.total(), 0);
        assert!(census.by_peer.is_empty(), "peers with no connection are forgotten");
    }
}
