//! Reading newline-delimited frames from a blocking stream, with the core's
//! decoder (bounded lines, CRLF, over-long lines reported and skipped).
//!
//! Every line a read brought is decoded at once, so a reader can tell whether
//! the next line is already here ([`LineReader::has_line`]) and hand a burst of
//! frames on together.

use std::collections::VecDeque;
use std::io::Read;

use tether_core::codec::{LineDecoder, LineError};

/// Yields lines from `input` until end of file or a read error.
pub struct LineReader<R> {
    input: R,
    decoder: LineDecoder,
    chunk: Vec<u8>,
    /// Lines decoded from what was read, not yet taken.
    ready: VecDeque<Result<String, LineError>>,
    done: bool,
}

impl<R: Read> LineReader<R> {
    /// Lines of at most `max_line` bytes, read `chunk` bytes at a time.
    pub fn new(input: R, max_line: usize, chunk: usize) -> Self {
        LineReader {
            input,
            decoder: LineDecoder::new(max_line),
            chunk: vec![0; chunk],
            ready: VecDeque::new(),
            done: false,
        }
    }

    /// Whether the next line is already read: taking it will not wait for the stream.
    pub fn has_line(&self) -> bool {
        !self.ready.is_empty()
    }
}

impl<R: Read> Iterator for LineReader<R> {
    type Item = Result<String, LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(line) = self.ready.pop_front() {
                return Some(line);
            }
            if self.done {
                return self.decoder.finish();
            }
            match self.input.read(&mut self.chunk) {
                Ok(0) => self.done = true,
                Ok(n) => {
                    self.decoder.push(&self.chunk[..n]);
                    while let Some(line) = self.decoder.next_line() {
                        self.ready.push_back(line);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => self.done = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_seen_as_one_and_the_unterminated_last_line_comes_at_the_end() {
        let data: &[u8] = b"{\"a\":1}\r\n{\"b\":2}\n{\"c\":3}";
        let mut lines = LineReader::new(data, 1024, 64);
        assert!(!lines.has_line());
        assert_eq!(lines.next().unwrap().unwrap(), "{\"a\":1}");
        assert!(lines.has_line(), "the second line came in the same read");
        assert_eq!(lines.next().unwrap().unwrap(), "{\"b\":2}");
        assert!(!lines.has_line(), "the third is not complete until the end");
        assert_eq!(lines.next().unwrap().unwrap(), "{\"c\":3}");
        assert!(lines.next().is_none());
    }

    #[test]
    fn an_overlong_line_is_reported_and_reading_goes_on() {
        let data: &[u8] = b"0123456789\nok\n";
        let lines: Vec<_> = LineReader::new(data, 4, 4).collect();
        assert!(lines[0].is_err());
        assert_eq!(lines[1].as_deref().unwrap(), "ok");
        assert_eq!(lines.len(), 2);
    }
}
