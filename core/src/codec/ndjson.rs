//! Newline-delimited JSON framing, as used by MCP's stdio transport.
//!
//! Every message is one line ended by `\n`. A `\r` before the `\n` is tolerated
//! and blank lines are skipped. The decoder never looks at the JSON itself; it
//! only cuts the byte stream into bounded, UTF-8 checked lines.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Why a line could not be handed out as a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineError {
    /// The line was longer than the decoder's limit; its bytes were dropped.
    TooLong {
        /// The configured maximum line length in bytes.
        limit: usize,
    },
    /// The line was not UTF-8, so it cannot be a JSON message.
    InvalidUtf8,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineError::TooLong { limit } => write!(f, "line longer than {limit} bytes"),
            LineError::InvalidUtf8 => f.write_str("line is not valid UTF-8"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LineError {}

/// Cuts a byte stream into lines, holding at most one bounded partial line.
///
/// Feed bytes with [`push`](Self::push), then call [`next_line`](Self::next_line)
/// until it returns `None`. Used that way the buffer never holds more than
/// `max_line + 1` bytes (the `+ 1` being a `\r` that may precede the newline)
/// plus the chunk being pushed. Each byte is scanned once, however the stream
/// is chunked.
#[derive(Clone, Debug)]
pub struct LineDecoder {
    max_line: usize,
    /// Received bytes; `buf[..head]` is consumed and reclaimed on the next push.
    buf: Vec<u8>,
    head: usize,
    /// `buf[head..scanned]` is known to hold no newline.
    scanned: usize,
    /// Dropping the rest of an over-long line that was already reported.
    discarding: bool,
}

impl LineDecoder {
    /// A decoder that rejects lines longer than `max_line` bytes (excluding the line ending).
    pub fn new(max_line: usize) -> Self {
        LineDecoder { max_line, buf: Vec::new(), head: 0, scanned: 0, discarding: false }
    }

    /// Appends bytes; complete lines become available through `next_line`.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.discarding {
            match find_newline(bytes) {
                Some(i) => {
                    self.discarding = false;
                    bytes = &bytes[i + 1..];
                }
                None => return,
            }
        }
        if bytes.is_empty() {
            return;
        }
        if self.head > 0 {
            self.buf.drain(..self.head);
            self.scanned -= self.head;
            self.head = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Next complete line, without its newline and trailing `\r`.
    ///
    /// A line longer than the limit is reported once as [`LineError::TooLong`];
    /// the rest of it, up to its newline, is dropped without being buffered.
    /// Returns `None` when no complete line is buffered.
    pub fn next_line(&mut self) -> Option<Result<String, LineError>> {
        if self.discarding {
            return None;
        }
        loop {
            let Some(i) = find_newline(&self.buf[self.scanned..]) else {
                self.scanned = self.buf.len();
                let partial = &self.buf[self.head..];
                // A trailing `\r` may yet turn out to be part of the line ending.
                let content = partial.strip_suffix(b"\r").unwrap_or(partial);
                if content.len() > self.max_line {
                    self.head = self.buf.len();
                    self.discarding = true;
                    return Some(Err(LineError::TooLong { limit: self.max_line }));
                }
                return None;
            };
            let start = self.head;
            let end = self.scanned + i;
            self.head = end + 1;
            self.scanned = self.head;
            if let Some(line) = decode(&self.buf[start..end], self.max_line) {
                return Some(line);
            }
        }
    }

    /// Bytes currently buffered (for bounds checks).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.head
    }

    /// At end of stream: the remaining lines, the last of which may be unterminated.
    ///
    /// Call until it returns `None`; the decoder is then empty and may be reused.
    pub fn finish(&mut self) -> Option<Result<String, LineError>> {
        if let Some(line) = self.next_line() {
            return Some(line);
        }
        let line = if self.discarding { None } else { decode(&self.buf[self.head..], self.max_line) };
        self.buf.clear();
        self.head = 0;
        self.scanned = 0;
        self.discarding = false;
        line
    }
}

/// Appends `frame` plus `'\n'` to `out`.
///
/// Frames from serde_json never contain raw newlines; a pretty-printed frame
/// has its `\n` and `\r` replaced by spaces, which JSON treats the same way.
/// (Raw control characters are not allowed inside JSON strings, so no string
/// content is changed.)
pub fn encode_line(frame: &str, out: &mut Vec<u8>) {
    out.reserve(frame.len() + 1);
    let start = out.len();
    out.extend_from_slice(frame.as_bytes());
    for b in &mut out[start..] {
        if matches!(*b, b'\n' | b'\r') {
            *b = b' ';
        }
    }
    out.push(b'\n');
}

fn find_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Turns one line (without its `\n`) into a frame; `None` for a blank line.
fn decode(line: &[u8], limit: usize) -> Option<Result<String, LineError>> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > limit {
        return Some(Err(LineError::TooLong { limit }));
    }
    if line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
        return None;
    }
    Some(core::str::from_utf8(line).map(String::from).map_err(|_| LineError::InvalidUtf8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// Pushes every chunk, draining lines after each one, then finishes.
    fn decode_all(max_line: usize, chunks: &[&[u8]]) -> Vec<Result<String, LineError>> {
        let mut d = LineDecoder::new(max_line);
        let mut out = Vec::new();
        for chunk in chunks {
            d.push(chunk);
            while let Some(line) = d.next_line() {
                out.push(line);
            }
        }
        while let Some(line) = d.finish() {
            out.push(line);
        }
        assert_eq!(d.buffered(), 0);
        out
    }

    fn ok(lines: &[&str]) -> Vec<Result<String, LineError>> {
        lines.iter().map(|l| Ok(String::from(*l))).collect()
    }

    const SAMPLE: &[u8] = b"{\"a\":1}\r\n\n  \t \r\n{\"b\":\"\xc3\xa9\"}\n\n{\"c\":[3]}";

    #[test]
    fn every_split_point() {
        let want = ok(&["{\"a\":1}", "{\"b\":\"\u{e9}\"}", "{\"c\":[3]}"]);
        assert_eq!(decode_all(64, &[SAMPLE]), want);
        for i in 0..=SAMPLE.len() {
            for j in i..=SAMPLE.len() {
                let chunks = [&SAMPLE[..i], &SAMPLE[i..j], &SAMPLE[j..]];
                assert_eq!(decode_all(64, &chunks), want, "split at {i}, {j}");
            }
        }
    }

    #[test]
    fn byte_at_a_time() {
        let chunks: Vec<&[u8]> = SAMPLE.chunks(1).collect();
        assert_eq!(decode_all(64, &chunks), ok(&["{\"a\":1}", "{\"b\":\"\u{e9}\"}", "{\"c\":[3]}"]));
    }

    #[test]
    fn crlf_and_blank_lines() {
        let got = decode_all(64, &[b"\r\n\n1\r\n \r\n\t\n2\n\r\n\n"]);
        assert_eq!(got, ok(&["1", "2"]));
        // Only one trailing `\r` is part of the line ending.
        assert_eq!(decode_all(64, &[b"3\r\r\n"]), ok(&["3\r"]));
        // Leading whitespace is kept; it is the JSON parser's business.
        assert_eq!(decode_all(64, &[b"  {}\n"]), ok(&["  {}"]));
    }

    #[test]
    fn too_long_reported_once_then_recovers() {
        let mut d = LineDecoder::new(8);
        d.push(b"{}\n0123");
        assert_eq!(d.next_line(), Some(Ok("{}".into())));
        assert_eq!(d.next_line(), None);
        d.push(b"456789");
        assert_eq!(d.next_line(), Some(Err(LineError::TooLong { limit: 8 })));
        assert_eq!(d.next_line(), None);
        assert_eq!(d.buffered(), 0);
        d.push(b"abcdefghijklmnop");
        assert_eq!(d.buffered(), 0);
        assert_eq!(d.next_line(), None);
        d.push(b"xyz\n[1]\n");
        assert_eq!(d.next_line(), Some(Ok("[1]".into())));
        assert_eq!(d.next_line(), None);
        assert_eq!(d.finish(), None);
    }

    #[test]
    fn too_long_complete_line() {
        let got = decode_all(4, &[b"12345\n1234\n123456789\r\n"]);
        assert_eq!(
            got,
            vec![Err(LineError::TooLong { limit: 4 }), Ok("1234".into()), Err(LineError::TooLong { limit: 4 }),]
        );
    }

    #[test]
    fn limit_is_exclusive_of_crlf() {
        // A full-length line whose `\r` and `\n` arrive in separate chunks.
        assert_eq!(decode_all(4, &[b"1234\r", b"\n"]), ok(&["1234"]));
        assert_eq!(decode_all(4, &[b"1234", b"\r", b"\n"]), ok(&["1234"]));
        assert_eq!(decode_all(4, &[b"1234\r", b"5\n"]), vec![Err(LineError::TooLong { limit: 4 })]);
    }

    /// The partial-line bound at its edge: a partial line of exactly the limit
    /// waits for its newline; one byte more is reported at once, before any
    /// newline, and not buffered.
    #[test]
    fn a_partial_line_of_the_limit_waits_and_one_byte_more_is_too_long() {
        let mut d = LineDecoder::new(8);
        d.push(b"01234567");
        assert_eq!(d.next_line(), None, "exactly the limit: waits");
        assert_eq!(d.buffered(), 8);
        d.push(b"8");
        assert_eq!(d.next_line(), Some(Err(LineError::TooLong { limit: 8 })), "one more: too long at once");
        assert_eq!(d.buffered(), 0);
        let mut d = LineDecoder::new(8);
        d.push(b"01234567");
        d.push(b"\n");
        assert_eq!(d.next_line(), Some(Ok("01234567".into())), "and a full-length line is a line");
    }

    #[test]
    fn invalid_utf8() {
        let got = decode_all(64, &[b"\xff\xfe\n{}\n\"\xc3\"\n"]);
        assert_eq!(got, vec![Err(LineError::InvalidUtf8), Ok("{}".into()), Err(LineError::InvalidUtf8),]);
    }

    #[test]
    fn finish() {
        let mut d = LineDecoder::new(64);
        assert_eq!(d.finish(), None);

        d.push(b"{}\n[1]");
        assert_eq!(d.next_line(), Some(Ok("{}".into())));
        assert_eq!(d.next_line(), None);
        assert_eq!(d.finish(), Some(Ok("[1]".into())));
        assert_eq!(d.finish(), None);

        // Lines still buffered come out of finish too.
        d.push(b"1\n2\n3\r");
        assert_eq!(d.finish(), Some(Ok("1".into())));
        assert_eq!(d.finish(), Some(Ok("2".into())));
        assert_eq!(d.finish(), Some(Ok("3".into())));
        assert_eq!(d.finish(), None);

        d.push(b"4\n \r");
        assert_eq!(d.finish(), Some(Ok("4".into())));
        assert_eq!(d.finish(), None);

        assert_eq!(decode_all(64, &[b"\xc3"]), vec![Err(LineError::InvalidUtf8)]);
        assert_eq!(decode_all(2, &[b"123"]), vec![Err(LineError::TooLong { limit: 2 })]);
    }

    #[test]
    fn encode_replaces_newlines() {
        let mut out = Vec::new();
        encode_line("{\"a\":1}", &mut out);
        encode_line("{\n  \"b\": \"x\"\r\n}", &mut out);
        assert_eq!(out, b"{\"a\":1}\n{   \"b\": \"x\"  }\n");

        let mut d = LineDecoder::new(64);
        d.push(&out);
        let first = d.next_line().unwrap().unwrap();
        let second = d.next_line().unwrap().unwrap();
        assert_eq!(d.next_line(), None);
        let v: serde_json::Value = serde_json::from_str(&second).unwrap();
        assert_eq!(v, serde_json::json!({ "b": "x" }));
        assert_eq!(first, "{\"a\":1}");
    }

    #[test]
    fn large_line_in_many_chunks() {
        const LEN: usize = 10 << 20;
        const CHUNK: usize = 64 << 10;
        let mut frame = vec![b'x'; LEN];
        frame.push(b'\n');
        frame.extend_from_slice(b"{}\n");

        let mut d = LineDecoder::new(16 << 20);
        let mut lines = Vec::new();
        for chunk in frame.chunks(CHUNK) {
            d.push(chunk);
            assert!(d.buffered() <= LEN + CHUNK);
            while let Some(line) = d.next_line() {
                lines.push(line.unwrap());
            }
        }
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), LEN);
        assert_eq!(lines[1], "{}");

        // The same line against a 1 MiB limit: reported once, never buffered beyond the bound.
        let mut d = LineDecoder::new(1 << 20);
        let mut results = Vec::new();
        for chunk in frame.chunks(CHUNK) {
            d.push(chunk);
            assert!(d.buffered() <= (1 << 20) + CHUNK);
            while let Some(line) = d.next_line() {
                results.push(line);
            }
        }
        assert_eq!(results, vec![Err(LineError::TooLong { limit: 1 << 20 }), Ok("{}".into())]);
    }
}
