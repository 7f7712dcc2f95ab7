//! Newline-delimited frames from any async byte stream: the core's sans-IO
//! [`LineDecoder`] fed from a reader, shared by the stdio client and backends.
//!
//! A read that ended exactly at the end of a line almost always leaves the pipe
//! empty: reading again at once would only return `EAGAIN` (a system call, and
//! another to register interest). So once the buffered lines are out, a reader
//! whose last read ended at a line boundary first waits for the stream to be
//! readable ([`ByteSource::poll_data`]), and reads only then.
//!
//! A reader whose stream always has data would never give the executor back
//! (a read that can be served at once does not wait): it yields after every
//! chunk that does not end at a line boundary it will wait at, so one flooding
//! pipe cannot starve the other tasks.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncReadExt};
use tether_core::codec::{LineDecoder, LineError};

/// A byte stream a [`LineReader`] reads from.
pub(super) trait ByteSource: AsyncRead + Unpin {
    /// Ready once a read would find data or the end of the stream, for a source
    /// that can tell without reading (a pipe registered with the reactor); others
    /// are always ready, and their read waits instead.
    fn poll_data(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Whether [`ByteSource::poll_data`] really waits (so waiting for data gives
    /// the executor back, and a reader at a line boundary need not yield).
    fn waits_for_data(&self) -> bool {
        false
    }
}

/// Any async reader, read without waiting for readiness first.
pub(super) struct Plain<R>(pub R);

impl<R: AsyncRead + Unpin> AsyncRead for Plain<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<R: AsyncRead + Unpin> ByteSource for Plain<R> {}

impl<S: ByteSource + ?Sized> ByteSource for Box<S> {
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (**self).poll_data(cx)
    }

    fn waits_for_data(&self) -> bool {
        (**self).waits_for_data()
    }
}

impl<S: ByteSource + ?Sized> ByteSource for &mut S {
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (**self).poll_data(cx)
    }

    fn waits_for_data(&self) -> bool {
        (**self).waits_for_data()
    }
}

/// A file descriptor registered with the reactor (a pipe, a socket, a terminal).
#[cfg(unix)]
impl ByteSource for async_io::Async<std::fs::File> {
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_readable(cx)
    }

    fn waits_for_data(&self) -> bool {
        true
    }
}

/// A child process's pipe, as its own descriptor registered with the reactor
/// (a copy of the pipe's descriptor: `async-process`'s handle reads speculatively).
#[cfg(unix)]
pub(super) fn child_pipe(pipe: impl std::os::fd::AsFd) -> io::Result<async_io::Async<std::fs::File>> {
    let fd = pipe.as_fd().try_clone_to_owned()?;
    async_io::Async::new(std::fs::File::from(fd))
}

/// Yields one line at a time from `reader`, then whatever is left at EOF.
pub(super) struct LineReader<R> {
    reader: R,
    decoder: LineDecoder,
    chunk: Vec<u8>,
    /// The last read ended at the end of a line (or nothing was read yet).
    at_boundary: bool,
    eof: bool,
}

impl<R: ByteSource> LineReader<R> {
    /// Lines of at most `max_line` bytes, read `chunk` bytes at a time.
    pub(super) fn new(reader: R, max_line: usize, chunk: usize) -> Self {
        LineReader { reader, decoder: LineDecoder::new(max_line), chunk: vec![0; chunk], at_boundary: true, eof: false }
    }

    /// The next line (or the error for a line that could not be taken), `None`
    /// once the stream has ended (or failed) and every buffered line is out.
    pub(super) async fn next(&mut self) -> Option<Result<String, LineError>> {
        loop {
            if self.eof {
                return self.decoder.finish();
            }
            if let Some(line) = self.decoder.next_line() {
                return Some(line);
            }
            if self.at_boundary && futures_lite::future::poll_fn(|cx| self.reader.poll_data(cx)).await.is_err() {
                self.eof = true;
                continue;
            }
            match self.reader.read(&mut self.chunk).await {
                Ok(0) | Err(_) => self.eof = true,
                Ok(n) => {
                    self.decoder.push(&self.chunk[..n]);
                    // A full chunk may have more behind it; a partial line surely has.
                    self.at_boundary = n < self.chunk.len() && self.chunk[n - 1] == b'\n';
                    // The next read waits for the reactor anyway when it waits for data.
                    if !(self.at_boundary && self.reader.waits_for_data()) {
                        futures_lite::future::yield_now().await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_across_chunks_and_the_unterminated_last_one() {
        smol::block_on(async {
            let data: &[u8] = b"{\"a\":1}\r\n\n{\"b\":2}\n{\"c\":3}";
            let mut lines = LineReader::new(Plain(data), 1024, 3);
            let mut out = Vec::new();
            while let Some(line) = lines.next().await {
                out.push(line.unwrap());
            }
            assert_eq!(out, ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
        });
    }

    /// A stream that always has data: the reader still lets the task beside
    /// it run (it would spin forever otherwise).
    #[test]
    fn a_reader_whose_stream_never_waits_still_yields() {
        let endless = futures_lite::io::repeat(b'\n');
        let mut lines = LineReader::new(Plain(endless), 16, 4096);
        let other_ran = smol::block_on(futures_lite::future::or(
            async {
                loop {
                    lines.next().await;
                }
            },
            async { true },
        ));
        assert!(other_ran);
    }

    #[test]
    fn an_overlong_line_is_reported_and_reading_goes_on() {
        smol::block_on(async {
            let data: &[u8] = b"0123456789\nok\n";
            let mut lines = LineReader::new(Plain(data), 4, 4);
            assert!(lines.next().await.unwrap().is_err());
            assert_eq!(lines.next().await.unwrap().unwrap(), "ok");
            assert!(lines.next().await.is_none());
        });
    }
}
