//! A client's TCP connection as hyper reads it: a read that came back short
//! left the socket empty, so the next one first waits for readiness instead of
//! asking the kernel and getting `EAGAIN`.
//!
//! hyper reads whenever it is polled: after a request's head, while the request
//! is being served (to notice the client going away), after the answer. Straight
//! on `async-io` each of those is a `recvfrom` that finds nothing before the
//! reactor is asked to wait: three system calls per request that this skips.

use std::io::{self, IoSlice, Read};
use std::net::TcpStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use async_io::Async;
use futures_lite::{AsyncRead, AsyncWrite};

/// A shared handle on one connection; reads wait for readiness after a short one.
pub(super) struct Socket {
    io: Arc<Async<TcpStream>>,
    /// The last read returned less than asked: the socket is most likely empty.
    drained: bool,
}

impl Socket {
    /// Reads and writes `io`.
    pub(super) fn new(io: Arc<Async<TcpStream>>) -> Socket {
        Socket { io, drained: false }
    }
}

impl AsyncRead for Socket {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        loop {
            if self.drained {
                ready!(self.io.poll_readable(cx))?;
            }
            match self.io.get_ref().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.drained = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
                Ok(n) => {
                    self.drained = n < buf.len();
                    return Poll::Ready(Ok(n));
                }
            }
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self.io).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut &*self.io).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut &*self.io).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use futures_lite::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Reads that come back short, then a wait, then the rest, then the end:
    /// nothing is lost or read twice.
    #[test]
    fn reads_after_a_short_one_wait_for_data_and_get_all_of_it() {
        smol::block_on(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().unwrap();
            let mut socket = Socket::new(Arc::new(Async::new(server).unwrap()));
            client.write_all(b"first").unwrap();
            let mut buf = [0u8; 64];
            let n = socket.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"first");
            let writer = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(30));
                client.write_all(b"second").unwrap();
                client
            });
            let n = socket.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"second");
            socket.write_all(b"answer").await.unwrap();
            let mut client = writer.join().unwrap();
            let mut got = [0u8; 6];
            std::io::Read::read_exact(&mut client, &mut got).unwrap();
            assert_eq!(&got, b"answer");
            drop(client);
            assert_eq!(socket.read(&mut buf).await.unwrap(), 0);
        });
    }
}
