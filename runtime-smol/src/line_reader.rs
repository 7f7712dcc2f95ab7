//! Newline-delimited frames from any async byte stream: the core's sans-IO
//! [`LineDecoder`] fed from a reader, shared by the stdio client and backends.
//!
//! A reader whose stream always has data would never give the executor back
//! (a read that can be served at once does not wait): it yields after every
//! chunk it reads, so one flooding pipe cannot starve the other tasks.

use futures_lite::{AsyncRead, AsyncReadExt};
use tether_core::codec::{LineDecoder, LineError};

/// Yields one line at a time from `reader`, then whatever is left at EOF.
pub struct LineReader<R> {
    reader: R,
    decoder: LineDecoder,
    chunk: Vec<u8>,
    eof: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Lines of at most `max_line` bytes, read `chunk` bytes at a time.
    pub fn new(reader: R, max_line: usize, chunk: usize) -> Self {
        LineReader { reader, decoder: LineDecoder::new(max_line), chunk: vec![0; chunk], eof: false }
    }

    /// The next line (or the error for a line that could not be taken), `None`
    /// once the stream has ended (or failed) and every buffered line is out.
    pub async fn next(&mut self) -> Option<Result<String, LineError>> {
        loop {
            if self.eof {
                return self.decoder.finish();
            }
            if let Some(line) = self.decoder.next_line() {
                return Some(line);
            }
            match self.reader.read(&mut self.chunk).await {
                Ok(0) | Err(_) => self.eof = true,
                Ok(n) => {
                    self.decoder.push(&self.chunk[..n]);
                    futures_lite::future::yield_now().await;
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
            let mut lines = LineReader::new(data, 1024, 3);
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
        let mut lines = LineReader::new(endless, 16, 4096);
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
            let mut lines = LineReader::new(data, 4, 4);
            assert!(lines.next().await.unwrap().is_err());
            assert_eq!(lines.next().await.unwrap().unwrap(), "ok");
            assert!(lines.next().await.is_none());
        });
    }
}
