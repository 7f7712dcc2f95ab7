//! Accepting connections and serving each with hyper's HTTP/1.1 server on smol.

use std::net::TcpListener;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use async_io::Async;
use futures_lite::future;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use smol_hyper::rt::{FuturesIo, SmolTimer};

use super::{service, Shared};

/// How long a client may take to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest request head.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Pause after a failed accept (out of descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

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
            Some(Ok((stream, _))) => {
                let _ = stream.get_ref().set_nodelay(true);
                smol::spawn(serve(shared.clone(), stream)).detach();
            }
            Some(Err(e)) => {
                tracing::warn!("HTTP accept failed: {e}");
                async_io::Timer::after(ACCEPT_BACKOFF).await;
            }
        }
    }
    tracing::debug!("Streamable HTTP listener stopped");
}

/// Serves one connection; on shutdown, finishes the request in progress and closes.
async fn serve(shared: Arc<Shared>, stream: Async<std::net::TcpStream>) {
    let stop = shared.stop_rx.clone();
    let handler = shared.clone();
    let service = service_fn(move |request| {
        let shared = handler.clone();
        async move { Ok::<_, std::convert::Infallible>(service::handle(shared, request).await) }
    });
    let mut builder = http1::Builder::new();
    builder.timer(SmolTimer::new()).header_read_timeout(HEADER_TIMEOUT).max_buf_size(MAX_HEADER_BYTES);
    let mut connection = pin!(builder.serve_connection(FuturesIo::new(stream), service));
    let finished = future::or(async { Some(connection.as_mut().await) }, async {
        let _ = stop.recv().await;
        None
    })
    .await;
    let result = match finished {
        Some(result) => result,
        None => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        tracing::debug!("HTTP connection ended: {e}");
    }
}
