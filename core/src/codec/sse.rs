//! Server-Sent Events parsing, as used by MCP's Streamable HTTP transport.
//!
//! Follows the WHATWG "interpreting an event stream" rules: lines end in
//! `\r\n`, `\n` or `\r`; a leading BOM is skipped; `:` starts a comment;
//! `event`, `data`, `id` and `retry` fields build up an event that a blank line
//! dispatches. Unlike a browser, invalid UTF-8 is reported instead of being
//! replaced, since MCP messages must be valid JSON anyway.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The event type; `"message"` unless an `event` field said otherwise.
    pub event: String,
    /// The `data` lines of the event, joined with `'\n'`.
    pub data: String,
    /// The last event ID in effect when the event was dispatched, for resumption.
    pub id: Option<String>,
    /// The reconnection time in milliseconds, if this event's block set one.
    pub retry: Option<u64>,
}

/// Why an event was dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseError {
    /// A line or the event's data exceeded the decoder's limit.
    TooLarge {
        /// The configured maximum event size in bytes.
        limit: usize,
    },
    /// A line of the event was not valid UTF-8.
    InvalidUtf8,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::TooLarge { limit } => write!(f, "event larger than {limit} bytes"),
            SseError::InvalidUtf8 => f.write_str("event stream is not valid UTF-8"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SseError {}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Parses a byte stream of Server-Sent Events with bounded memory.
///
/// Feed bytes with [`push`](Self::push), then call
/// [`next_event`](Self::next_event) until it returns `None`. Used that way the
/// decoder holds at most `max_event` bytes of partial line and `max_event`
/// bytes of event data, plus the chunk being pushed. Comment lines are never
/// buffered.
#[derive(Clone, Debug)]
pub struct SseDecoder {
    max_event: usize,
    /// Received bytes; `buf[..head]` is consumed and reclaimed on the next push.
    buf: Vec<u8>,
    head: usize,
    /// `buf[head..scanned]` is known to hold no line ending.
    scanned: usize,
    /// Bytes of a leading BOM matched so far; `BOM.len()` once past the stream start.
    bom: usize,
    /// The last line ended in a `\r` at the end of the input; a `\n` next is part of it.
    pending_cr: bool,
    /// Dropping the rest of a comment or of an over-long line, up to its line ending.
    skip_line: bool,
    /// The current event was dropped; its data is ignored until the blank line ending it.
    skip_event: bool,
    /// Event type buffer.
    event: String,
    /// Data buffer: each `data` value followed by `'\n'`.
    data: String,
    /// The `retry` value set in the current block.
    block_retry: Option<u64>,
    /// Last event ID buffer: set by `id` fields, published when a block ends.
    id_buf: Option<String>,
    last_id: Option<String>,
    retry: Option<u64>,
    /// The current block has an `id` field.
    block_id: bool,
    /// The block of the event dispatched last had an `id` field.
    dispatched_id: bool,
}

impl SseDecoder {
    /// A decoder that drops events whose data, or any line, exceeds `max_event` bytes.
    pub fn new(max_event: usize) -> Self {
        SseDecoder {
            max_event,
            buf: Vec::new(),
            head: 0,
            scanned: 0,
            bom: 0,
            pending_cr: false,
            skip_line: false,
            skip_event: false,
            event: String::new(),
            data: String::new(),
            block_retry: None,
            id_buf: None,
            last_id: None,
            retry: None,
            block_id: false,
            dispatched_id: false,
        }
    }

    /// Appends bytes of the stream; complete events become available through `next_event`.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while let Some(&expected) = BOM.get(self.bom) {
            let Some((&b, rest)) = bytes.split_first() else {
                return;
            };
            if b == expected {
                self.bom += 1;
                bytes = rest;
            } else {
                // Not a BOM after all: the bytes held back are stream content.
                self.buf.extend_from_slice(&BOM[..self.bom]);
                self.bom = BOM.len();
            }
        }
        if self.pending_cr {
            let Some((&b, rest)) = bytes.split_first() else {
                return;
            };
            self.pending_cr = false;
            if b == b'\n' {
                bytes = rest;
            }
        }
        if self.skip_line {
            let Some(i) = find_eol(bytes) else {
                return;
            };
            let (len, pending_cr) = terminator(bytes, i);
            self.skip_line = false;
            self.pending_cr = pending_cr;
            bytes = &bytes[i + len..];
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

    /// Next dispatched event, or the error that made the decoder drop one.
    ///
    /// Each dropped event is reported once; parsing resumes after the blank line
    /// that ends it. Returns `None` when no complete event is buffered.
    pub fn next_event(&mut self) -> Option<Result<SseEvent, SseError>> {
        if self.skip_line {
            return None;
        }
        loop {
            let Some(i) = find_eol(&self.buf[self.scanned..]) else {
                self.scanned = self.buf.len();
                let partial = &self.buf[self.head..];
                let comment = partial.first() == Some(&b':');
                if comment || partial.len() > self.max_event {
                    self.head = self.buf.len();
                    self.skip_line = true;
                    if !comment {
                        return self.drop_event(SseError::TooLarge { limit: self.max_event });
                    }
                }
                return None;
            };
            let start = self.head;
            let end = self.scanned + i;
            let (len, pending_cr) = terminator(&self.buf, end);
            self.head = end + len;
            self.scanned = self.head;
            self.pending_cr = pending_cr;
            // Lend the buffer out so the line can be borrowed while fields are updated.
            let buf = core::mem::take(&mut self.buf);
            let out = self.process_line(&buf[start..end]);
            self.buf = buf;
            if out.is_some() {
                return out;
            }
        }
    }

    /// The last event ID string: what a reconnect should send as `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Whether the event [`next_event`](Self::next_event) returned last carried an
    /// `id` field of its own (its [`SseEvent::id`] may be inherited from an
    /// earlier event): only such an id names that event, for dropping replays.
    pub fn last_event_had_id(&self) -> bool {
        self.dispatched_id
    }

    /// The reconnection time most recently set by the server, in milliseconds.
    ///
    /// Unlike [`SseEvent::retry`], this also sees `retry` fields in blocks that
    /// dispatched no event.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    fn process_line(&mut self, line: &[u8]) -> Option<Result<SseEvent, SseError>> {
        if line.is_empty() {
            return self.dispatch().map(Ok);
        }
        if line.first() == Some(&b':') {
            return None;
        }
        if line.len() > self.max_event {
            return self.drop_event(SseError::TooLarge { limit: self.max_event });
        }
        let Ok(line) = core::str::from_utf8(line) else {
            return self.drop_event(SseError::InvalidUtf8);
        };
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match name {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" if !self.skip_event => {
                if self.data.len() + value.len() > self.max_event {
                    return self.drop_event(SseError::TooLarge { limit: self.max_event });
                }
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => {
                // An empty id resets the last event ID.
                self.id_buf = (!value.is_empty()).then(|| value.into());
                self.block_id = true;
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse() {
                    self.retry = Some(ms);
                    self.block_retry = Some(ms);
                }
            }
            _ => {}
        }
        None
    }

    /// Ends the current block, returning its event unless it was empty or dropped.
    fn dispatch(&mut self) -> Option<SseEvent> {
        self.last_id.clone_from(&self.id_buf);
        self.dispatched_id = core::mem::replace(&mut self.block_id, false);
        let retry = self.block_retry.take();
        let dropped = core::mem::replace(&mut self.skip_event, false);
        if dropped || self.data.is_empty() {
            self.event.clear();
            self.data.clear();
            return None;
        }
        self.data.pop();
        let event = if self.event.is_empty() { String::from("message") } else { core::mem::take(&mut self.event) };
        Some(SseEvent { event, data: core::mem::take(&mut self.data), id: self.last_id.clone(), retry })
    }

    /// Drops the current event, returning `err` unless the event was already dropped.
    fn drop_event(&mut self, err: SseError) -> Option<Result<SseEvent, SseError>> {
        if self.skip_event {
            return None;
        }
        self.skip_event = true;
        self.data.clear();
        Some(Err(err))
    }
}

fn find_eol(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n' || b == b'\r')
}

/// Length of the line ending at `bytes[i]`, and whether it is a `\r` at the
/// very end that a `\n` in the next push would complete.
fn terminator(bytes: &[u8], i: usize) -> (usize, bool) {
    match (bytes.get(i), bytes.get(i + 1)) {
        (Some(b'\r'), Some(b'\n')) => (2, false),
        (Some(b'\r'), None) => (1, true),
        _ => (1, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    type Item = Result<SseEvent, SseError>;

    fn decode_chunks(max_event: usize, chunks: &[&[u8]]) -> Vec<Item> {
        let mut d = SseDecoder::new(max_event);
        let mut out = Vec::new();
        for chunk in chunks {
            d.push(chunk);
            while let Some(item) = d.next_event() {
                out.push(item);
            }
        }
        out
    }

    fn decode(stream: &str) -> Vec<Item> {
        decode_chunks(1024, &[stream.as_bytes()])
    }

    fn ev(event: &str, data: &str, id: Option<&str>, retry: Option<u64>) -> Item {
        Ok(SseEvent { event: event.into(), data: data.into(), id: id.map(String::from), retry })
    }

    fn msg(data: &str) -> Item {
        ev("message", data, None, None)
    }

    #[test]
    fn spec_stock_ticker() {
        assert_eq!(decode("data: YHOO\ndata: +2\ndata: 10\n\n"), vec![msg("YHOO\n+2\n10")]);
    }

    #[test]
    fn spec_comments_and_ids() {
        let stream = ": test stream\n\n\
                      data: first event\nid: 1\n\n\
                      data:second event\nid\n\n\
                      data:  third event\n";
        assert_eq!(decode(stream), vec![ev("message", "first event", Some("1"), None), msg("second event"),]);
        // The third event is never dispatched: no blank line follows it.
    }

    #[test]
    fn spec_fields_without_colon() {
        assert_eq!(decode("data\n\ndata\ndata\n\ndata:\n"), vec![msg(""), msg("\n")]);
    }

    #[test]
    fn spec_space_after_colon() {
        assert_eq!(decode("data:test\n\ndata: test\n\n"), vec![msg("test"), msg("test")]);
        assert_eq!(decode("data:  two\n\n"), vec![msg(" two")]);
    }

    #[test]
    fn spec_multiline_messages() {
        let stream = "data: This is the first message.\n\n\
                      data: This is the second message, it\n\
                      data: has two lines.\n\n\
                      data: This is the third message.\n\n";
        assert_eq!(
            decode(stream),
            vec![
                msg("This is the first message."),
                msg("This is the second message, it\nhas two lines."),
                msg("This is the third message."),
            ]
        );
    }

    #[test]
    fn spec_event_types() {
        let stream = "event: add\ndata: 73857293\n\n\
                      event: remove\ndata: 2153\n\n\
                      event: add\ndata: 113411\n\n";
        assert_eq!(
            decode(stream),
            vec![ev("add", "73857293", None, None), ev("remove", "2153", None, None), ev("add", "113411", None, None),]
        );
    }

    #[test]
    fn event_type_resets_even_without_data() {
        assert_eq!(
            decode("event: a\n\ndata: x\n\nevent: b\ndata: y\n\ndata: z\n\n"),
            vec![msg("x"), ev("b", "y", None, None), msg("z")]
        );
    }

    #[test]
    fn unknown_fields_ignored() {
        assert_eq!(decode("foo: bar\nDATA: no\ndata: yes\nbaz\n\n"), vec![msg("yes")]);
    }

    #[test]
    fn id_persistence() {
        let mut d = SseDecoder::new(1024);
        assert_eq!(d.last_event_id(), None);
        d.push(b"id: 7\ndata: a\n\ndata: b\n\n");
        assert_eq!(d.next_event(), Some(ev("message", "a", Some("7"), None)));
        assert_eq!(d.next_event(), Some(ev("message", "b", Some("7"), None)));
        assert_eq!(d.last_event_id(), Some("7"));

        // An id containing NUL is ignored.
        d.push(b"id: 8\0\ndata: c\n\n");
        assert_eq!(d.next_event(), Some(ev("message", "c", Some("7"), None)));

        // A block without data still publishes its id (MCP's priming event).
        d.push(b"id: 9\n\n");
        assert_eq!(d.next_event(), None);
        assert_eq!(d.last_event_id(), Some("9"));

        // The id only takes effect when the block ends.
        d.push(b"id: 10\n");
        assert_eq!(d.next_event(), None);
        assert_eq!(d.last_event_id(), Some("9"));
        d.push(b"data: d\n\n");
        assert_eq!(d.next_event(), Some(ev("message", "d", Some("10"), None)));

        // An empty id resets it.
        d.push(b"id:\ndata: e\n\n");
        assert_eq!(d.next_event(), Some(msg("e")));
        assert_eq!(d.last_event_id(), None);
    }

    #[test]
    fn retry() {
        let mut d = SseDecoder::new(1024);
        d.push(b"retry: 3000\ndata: a\n\ndata: b\n\n");
        assert_eq!(d.next_event(), Some(ev("message", "a", None, Some(3000))));
        assert_eq!(d.next_event(), Some(msg("b")));
        assert_eq!(d.retry(), Some(3000));

        d.push(b"retry: 12a\nretry:\nretry: -1\nretry: 99999999999999999999999\ndata: c\n\n");
        assert_eq!(d.next_event(), Some(msg("c")));
        assert_eq!(d.retry(), Some(3000));

        // A retry in a block that dispatches nothing is still visible.
        d.push(b"retry: 500\n\n");
        assert_eq!(d.next_event(), None);
        assert_eq!(d.retry(), Some(500));
    }

    #[test]
    fn line_endings() {
        let want = vec![msg("a\nb"), ev("x", "c", None, None)];
        for eol in ["\n", "\r", "\r\n"] {
            let stream = "data: a\ndata: b\n\nevent: x\ndata: c\n\n".replace('\n', eol);
            assert_eq!(decode(&stream), want, "{eol:?}");
        }
        // Mixed endings.
        assert_eq!(decode("data: a\rdata: b\r\n\nevent: x\r\ndata: c\n\r"), want);
    }

    #[test]
    fn crlf_split_across_chunks() {
        let chunks: [&[u8]; 3] = [b"data: a\r", b"\ndata: b\r", b"\n\r\n"];
        assert_eq!(decode_chunks(1024, &chunks), vec![msg("a\nb")]);
        // A lone `\r` at a chunk end really is a line ending.
        let chunks: [&[u8]; 3] = [b"data: a\r", b"\r", b"data: b\n\n"];
        assert_eq!(decode_chunks(1024, &chunks), vec![msg("a"), msg("b")]);
        // An empty push in between does not lose the pending `\r`.
        let chunks: [&[u8]; 3] = [b"data: a\r", b"", b"\n\n"];
        assert_eq!(decode_chunks(1024, &chunks), vec![msg("a")]);
    }

    #[test]
    fn bom() {
        assert_eq!(decode("\u{feff}data: x\n\n"), vec![msg("x")]);
        let stream = "\u{feff}data: x\n\n".as_bytes();
        let chunks: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(decode_chunks(1024, &chunks), vec![msg("x")]);
        // Only one BOM is skipped; a second one is part of the field name.
        assert_eq!(decode("\u{feff}\u{feff}data: x\n\n"), vec![]);
        // A BOM later on is content.
        assert_eq!(decode("data: \u{feff}x\n\n"), vec![msg("\u{feff}x")]);
        // Bytes held back as a possible BOM are restored.
        let chunks: [&[u8]; 3] = [b"\xEF", b"\xBB", b"data: x\n\ndata: y\n\n"];
        assert_eq!(decode_chunks(1024, &chunks), vec![Err(SseError::InvalidUtf8), msg("y")]);
        assert_eq!(decode("d\u{feff}ata: x\n\n"), vec![]);
    }

    const MIXED: &str = "\u{feff}: keepalive\r\n\
                         retry: 100\r\n\
                         id: 1\r\nevent: e\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n\
                         data: caf\u{e9}\rdata\r\r\
                         :\n\nid: 2\ndata: last\n\n";

    fn mixed_expected() -> Vec<Item> {
        vec![
            ev("e", "{\"a\":\n1}", Some("1"), Some(100)),
            ev("message", "caf\u{e9}\n", Some("1"), None),
            ev("message", "last", Some("2"), None),
        ]
    }

    #[test]
    fn byte_at_a_time_equals_whole() {
        let whole = decode(MIXED);
        assert_eq!(whole, mixed_expected());
        let bytes = MIXED.as_bytes();
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(decode_chunks(1024, &chunks), whole);
        for i in 0..=bytes.len() {
            assert_eq!(decode_chunks(1024, &[&bytes[..i], &bytes[i..]]), whole, "split at {i}");
        }
    }

    #[test]
    fn too_large_data_dropped() {
        let stream = "data: 0123456789\ndata: 0123456789\nid: 5\n\ndata: ok\n\n";
        assert_eq!(
            decode_chunks(16, &[stream.as_bytes()]),
            vec![Err(SseError::TooLarge { limit: 16 }), ev("message", "ok", Some("5"), None),]
        );
        // Exactly at the limit is fine: 7 + '\n' + 8 = 16.
        assert_eq!(decode_chunks(16, &[b"data: 0123456\ndata: 01234567\n\n"]), vec![msg("0123456\n01234567")]);
    }

    #[test]
    fn too_large_line_in_chunks() {
        let mut d = SseDecoder::new(64);
        let mut out = Vec::new();
        d.push(b"event: big\ndata: ");
        let chunk = [b'x'; 10];
        for _ in 0..1000 {
            d.push(&chunk);
            assert!(d.buf.len() - d.head <= 64 + chunk.len());
            while let Some(item) = d.next_event() {
                out.push(item);
            }
        }
        // The over-long line ends in a `\r\n` split across pushes.
        for part in [&b"xx\r"[..], b"\ndata: more\n", b"\n", b"data: ok\n\n"] {
            d.push(part);
            while let Some(item) = d.next_event() {
                out.push(item);
            }
        }
        assert_eq!(out, vec![Err(SseError::TooLarge { limit: 64 }), msg("ok")]);
    }

    #[test]
    fn long_comments_are_not_buffered() {
        let mut d = SseDecoder::new(8);
        d.push(b"data: a\n:");
        for _ in 0..100 {
            d.push(b"keepalive ");
            assert_eq!(d.next_event(), None);
            assert!(d.buf.len() - d.head <= 10);
        }
        d.push(b"\n\n");
        assert_eq!(d.next_event(), Some(msg("a")));
        assert_eq!(decode_chunks(8, &[b": a long comment\ndata: a\n\n"]), vec![msg("a")]);
    }

    #[test]
    fn invalid_utf8_dropped() {
        assert_eq!(
            decode_chunks(64, &[b"data: \xff\ndata: more\n\ndata: ok\n\n"]),
            vec![Err(SseError::InvalidUtf8), msg("ok")]
        );
        // Invalid bytes in a comment are ignored with the comment.
        assert_eq!(decode_chunks(64, &[b":\xff\ndata: ok\n\n"]), vec![msg("ok")]);
    }

    #[test]
    fn incomplete_event_not_dispatched() {
        let mut d = SseDecoder::new(64);
        d.push(b"data: a\n");
        assert_eq!(d.next_event(), None);
        d.push(b"\n");
        assert_eq!(d.next_event(), Some(msg("a")));
        assert_eq!(d.next_event(), None);
    }
}
