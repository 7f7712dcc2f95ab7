//! What hyper's parser lets through and a proxy in front may read otherwise:
//! a request head whose lines end in a bare LF (RFC 9112 §2.2 lets a recipient
//! take it for CRLF, and some proxies do not), and `Transfer-Encoding` other
//! than a lone `chunked` (hyper takes `identity, chunked` for chunked). Either
//! is how requests are smuggled past a proxy; both are refused with 400 and the
//! connection closed. (`Transfer-Encoding` beside `Content-Length` hyper
//! settles as RFC 9112 §6.3 says: chunked, and the connection closed after.)
//!
//! Heads are watched on the wire: [`Watched`] reads through to hyper and scans
//! the bytes of each head (from the end of the previous response to the empty
//! line), without copying or holding them.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use hyper::header::TRANSFER_ENCODING;
use hyper::HeaderMap;

/// Where a connection's reading is, shared with the request handlers.
#[derive(Debug)]
pub(super) struct HeadWatch {
    /// Bytes read now belong to a request head.
    in_head: AtomicBool,
    /// A head line ended in a bare LF: the connection was failed for it.
    bare_lf: AtomicBool,
}

impl HeadWatch {
    pub(super) fn new() -> Arc<HeadWatch> {
        Arc::new(HeadWatch { in_head: AtomicBool::new(true), bare_lf: AtomicBool::new(false) })
    }

    /// A response was sent: what is read next is the next request's head.
    pub(super) fn expect_head(&self) {
        self.in_head.store(true, Ordering::SeqCst);
    }

    /// Whether a head line ended in a bare LF.
    pub(super) fn saw_bare_lf(&self) -> bool {
        self.bare_lf.load(Ordering::SeqCst)
    }
}

/// A connection's stream, its request heads scanned as hyper reads them.
pub(super) struct Watched<S> {
    inner: S,
    watch: Arc<HeadWatch>,
    /// The byte before the next one read.
    previous: u8,
    /// Bytes of the current head line so far (CR not counted).
    line: usize,
    /// A non-empty line of this head was seen (empty lines before the request
    /// line are skipped, as RFC 9112 §2.2 allows).
    started: bool,
}

impl<S> Watched<S> {
    pub(super) fn new(inner: S, watch: Arc<HeadWatch>) -> Watched<S> {
        Watched { inner, watch, previous: 0, line: 0, started: false }
    }

    /// Scans `bytes` of a head; `false` at a bare LF.
    fn scan(&mut self, bytes: &[u8]) -> bool {
        for &b in bytes {
            match b {
                b'\n' if self.previous != b'\r' => return false,
                b'\n' => {
                    if self.line == 0 && self.started {
                        // The empty line: the head ends here; the body is not scanned.
                        self.watch.in_head.store(false, Ordering::SeqCst);
                        self.started = false;
                        self.previous = 0;
                        return true;
                    }
                    self.started |= self.line > 0;
                    self.line = 0;
                }
                b'\r' => {}
                _ => self.line += 1,
            }
            self.previous = b;
        }
        true
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if self.watch.in_head.load(Ordering::SeqCst) && !self.scan(&buf[..n]) {
            self.watch.bare_lf.store(true, Ordering::SeqCst);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "a request line ended in a bare LF")));
        }
        Poll::Ready(Ok(n))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.watch.saw_bare_lf() {
            // Left open for the 400 the listener writes next (then it is dropped).
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// Why a request's `Transfer-Encoding` is refused, if it is: it must be one
/// header saying `chunked`.
pub(super) fn refused_framing(headers: &HeaderMap) -> Option<&'static str> {
    let mut codings = headers.get_all(TRANSFER_ENCODING).iter();
    let first = codings.next()?;
    let alone = codings.next().is_none() && first.to_str().is_ok_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
    (!alone).then_some("bad request: Transfer-Encoding must be chunked alone")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scans(chunks: &[&[u8]]) -> (bool, bool) {
        let watch = HeadWatch::new();
        let mut w = Watched::new((), watch.clone());
        let ok = chunks.iter().all(|c| !watch.in_head.load(Ordering::SeqCst) || w.scan(c));
        (ok, watch.in_head.load(Ordering::SeqCst))
    }

    #[test]
    fn heads_with_crlf_pass_and_end_at_the_empty_line_however_they_are_cut() {
        assert_eq!(scans(&[b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody\nwith LF"]), (true, false));
        assert_eq!(scans(&[b"GET / HTTP/1.1\r", b"\nHost: a\r\n\r", b"\n", b"x\ny"]), (true, false));
        assert_eq!(scans(&[b"\r\nGET / HTTP/1.1\r\n\r\n"]), (true, false), "an empty line first is skipped");
        assert_eq!(scans(&[b"GET / HTTP/1.1\r\nHost: a\r\n"]), (true, true), "not over yet");
    }

    #[test]
    fn a_bare_lf_anywhere_in_a_head_is_caught() {
        assert!(!scans(&[b"GET / HTTP/1.1\nHost: a\r\n\r\n"]).0);
        assert!(!scans(&[b"GET / HTTP/1.1\r\nHost: a\n\r\n"]).0);
        assert!(!scans(&[b"GET / HTTP/1.1\r\nHost: a\r\n", b"\n"]).0, "a head ended by a bare LF");
    }

    #[test]
    fn transfer_encoding_is_chunked_alone_or_refused() {
        let h = |pairs: &[(&str, &str)]| {
            let mut map = HeaderMap::new();
            for (k, v) in pairs {
                map.append(hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
            }
            map
        };
        assert_eq!(refused_framing(&h(&[("transfer-encoding", "chunked")])), None);
        assert_eq!(refused_framing(&h(&[("transfer-encoding", " Chunked ")])), None);
        assert_eq!(refused_framing(&h(&[("content-length", "3")])), None);
        assert!(refused_framing(&h(&[("transfer-encoding", "identity, chunked")])).is_some());
        assert!(refused_framing(&h(&[("transfer-encoding", "gzip")])).is_some());
        assert!(refused_framing(&h(&[("transfer-encoding", "chunked"), ("transfer-encoding", "chunked")])).is_some());
    }
}
