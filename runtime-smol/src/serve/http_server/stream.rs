//! One SSE stream of a session: numbered events, a replay log for `Last-Event-ID`,
//! and at most one live connection (an HTTP response body fed by a byte-bounded
//! [`queue`](super::queue)); and [`SseBody`], the response body itself.
//!
//! Every event is logged with its sequence number when it is created. Events a
//! connection took are "sent"; events created while no connection was there are
//! "unsent" and go out when one attaches. Sent events always precede unsent ones
//! in the log, so the log is a run of sent events followed by a run of unsent ones.
//! The log is bounded in events and in bytes; the newest event is always kept.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Bytes, Frame};

use crate::serve::byte_queue::{self as queue, Closer, Refused, TooSlow};

/// Unsent events kept per stream while no connection takes them.
pub(super) const MAX_UNSENT: usize = 1024;

/// The sending end of a connection: encoded events.
pub(super) type Conn = queue::Sender;

/// How much a stream's log keeps.
#[derive(Clone, Copy, Debug)]
pub(super) struct LogLimits {
    /// Sent events kept for replay.
    pub(super) keep_events: usize,
    /// Bytes of sent and unsent events kept together (the newest is kept whatever its size).
    pub(super) keep_bytes: usize,
}

/// A response body made of the events of one queue. With [`SseBody::keep_alive`]
/// an SSE comment goes out every so often in between (a dead connection is only
/// noticed when written to, and proxies close idle ones); with
/// [`SseBody::on_drop`] a callback runs once the body goes, which is how a
/// client's leaving is noticed. A queue that overflows fails the body and
/// closes the connection.
pub(super) struct SseBody {
    rx: queue::Receiver,
    keep_alive: Option<async_io::Timer>,
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl SseBody {
    /// The events of `rx`, on the connection `closer` ends when `rx` overflows.
    pub(super) fn new(rx: queue::Receiver, closer: Closer) -> SseBody {
        rx.bind(closer);
        SseBody { rx, keep_alive: None, on_drop: None }
    }

    /// Sends a comment every `every` while no event does.
    pub(super) fn keep_alive(mut self, every: Duration) -> SseBody {
        self.keep_alive = Some(async_io::Timer::interval(every));
        self
    }

    /// Runs `on_drop` once, when the body is dropped (the response ended or the client left).
    pub(super) fn on_drop(mut self, on_drop: Box<dyn FnOnce() + Send>) -> SseBody {
        self.on_drop = Some(on_drop);
        self
    }
}

impl hyper::body::Body for SseBody {
    type Data = Bytes;
    type Error = TooSlow;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, TooSlow>>> {
        let this = self.get_mut();
        if let Poll::Ready(next) = this.rx.poll_next(cx) {
            return Poll::Ready(next.map(|event| event.map(Frame::data)));
        }
        let Some(timer) = &mut this.keep_alive else { return Poll::Pending };
        match futures_lite::Stream::poll_next(Pin::new(timer), cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b": keep-alive\n\n"))))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for SseBody {
    fn drop(&mut self) {
        if let Some(on_drop) = self.on_drop.take() {
            on_drop();
        }
    }
}

/// The SSE text of one event; `data` may be empty (a priming event).
fn encode(id: &str, data: &str) -> Bytes {
    let mut text = String::with_capacity(data.len() + id.len() + 16);
    text.push_str("id: ");
    text.push_str(id);
    text.push('\n');
    if data.is_empty() {
        text.push_str("data:\n");
    }
    // JSON has no raw line breaks outside whitespace: splitting there is harmless.
    // (memchr: this runs for every byte sent to every client.)
    let mut start = 0;
    for end in memchr::memchr2_iter(b'\n', b'\r', data.as_bytes()).chain([data.len()]) {
        if end > start {
            text.push_str("data: ");
            text.push_str(&data[start..end]);
            text.push('\n');
        }
        start = end + 1;
    }
    text.push('\n');
    Bytes::from(text)
}

struct Event {
    seq: u64,
    text: Bytes,
}

/// A stream of one session.
pub(super) struct Stream {
    /// Event ids are `<prefix>-<seq>` (see `sessions.rs` for the prefix).
    prefix: String,
    next_seq: u64,
    log: VecDeque<Event>,
    /// The bytes of the events in `log`.
    log_bytes: usize,
    /// How many events at the end of the log no connection took.
    unsent: usize,
    limits: LogLimits,
    conn: Option<Conn>,
    /// A POST stream whose response was delivered: nothing follows it.
    finished: bool,
    /// Unsent events were dropped since the last connection (warned once).
    dropped: u64,
}

impl Stream {
    /// An empty stream whose event ids start with `prefix`.
    pub(super) fn new(prefix: String, limits: LogLimits) -> Stream {
        Stream {
            prefix,
            next_seq: 0,
            log: VecDeque::new(),
            log_bytes: 0,
            unsent: 0,
            limits,
            conn: None,
            finished: false,
            dropped: 0,
        }
    }

    fn id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.prefix)
    }

    /// Whether `seq` was ever handed out by this stream.
    pub(super) fn issued(&self, seq: u64) -> bool {
        seq < self.next_seq
    }

    /// Attaches a new connection, ending the previous one. `after`: resume after
    /// that event (replaying the logged events after it); `None`: a fresh
    /// connection, which gets the unsent events. A connection that gets no event
    /// gets a priming event first (an id, empty data), so it can resume. A
    /// finished stream ends the connection after the replay.
    pub(super) fn attach(&mut self, conn: Conn, after: Option<u64>) {
        if let Some(old) = self.conn.take() {
            old.close();
        }
        let from = match after {
            Some(seq) => self.log.partition_point(|e| e.seq <= seq),
            None => self.log.len() - self.unsent,
        };
        let mut wrote = false;
        for event in self.log.range(from..) {
            wrote |= conn.push(event.text.clone()).is_ok();
        }
        self.unsent = 0;
        if self.dropped > 0 {
            tracing::debug!(stream = %self.prefix, dropped = self.dropped, "a client attached after events were dropped");
            self.dropped = 0;
        }
        self.trim();
        if self.finished {
            conn.close();
            return;
        }
        if !wrote {
            let seq = self.next_seq;
            self.next_seq += 1;
            let _ = conn.push(encode(&self.id(seq), ""));
        }
        self.conn = Some(conn);
    }

    /// Adds an event: to the live connection if there is one, to the log always.
    pub(super) fn push(&mut self, frame: &str) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let text = encode(&self.id(seq), frame);
        let sent = self.send(text.clone());
        self.log_bytes += text.len();
        self.log.push_back(Event { seq, text });
        if !sent {
            self.unsent += 1;
        }
        self.trim();
    }

    fn send(&mut self, text: Bytes) -> bool {
        let Some(conn) = &self.conn else { return false };
        match conn.push(text) {
            Ok(()) => return true,
            Err(Refused::Full) => {
                tracing::debug!(stream = %self.prefix, "SSE client too slow: connection closed, it may resume")
            }
            Err(Refused::Closed) => {} // the client went away
        }
        self.conn = None;
        false
    }

    /// The stream's last event was pushed (a POST stream's response): the
    /// connection ends after it; the log stays for resumption.
    pub(super) fn finish(&mut self) {
        self.finished = true;
        self.close();
    }

    /// Ends the live connection, if any, asking its client to reconnect
    /// after `retry_ms` (SSE `retry:`).
    pub(super) fn end_with_retry(&mut self, retry_ms: u64) {
        if let Some(conn) = self.conn.take() {
            let _ = conn.push(Bytes::from(format!("retry: {retry_ms}\n\n")));
            conn.close();
        }
    }

    /// Ends the live connection, if any.
    pub(super) fn close(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.close();
        }
    }

    /// Sent events go first (replay is best effort); unsent ones only beyond
    /// their own bound, the newest never.
    fn trim(&mut self) {
        let over = |s: &Stream| s.log_bytes > s.limits.keep_bytes;
        let mut sent = self.log.len() - self.unsent;
        while sent > 0 && (sent > self.limits.keep_events || (over(self) && self.log.len() > 1)) {
            if let Some(event) = self.log.pop_front() {
                self.log_bytes -= event.text.len();
            }
            sent -= 1;
        }
        while self.unsent > MAX_UNSENT || (self.unsent > 1 && over(self)) {
            if let Some(event) = self.log.remove(sent) {
                self.log_bytes -= event.text.len();
            }
            self.unsent -= 1;
            if self.dropped == 0 {
                tracing::warn!(stream = %self.prefix, "no client takes this stream's events: dropping the oldest");
            }
            self.dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(rx: &queue::Receiver) -> Vec<String> {
        std::iter::from_fn(|| rx.try_next()).map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    fn connect() -> (Conn, queue::Receiver) {
        queue::channel(1 << 20)
    }

    /// Keeps `keep_events` sent events and 1 MiB.
    fn limits(keep_events: usize) -> LogLimits {
        LogLimits { keep_events, keep_bytes: 1 << 20 }
    }

    #[test]
    fn a_new_connection_is_primed_then_gets_events() {
        let mut s = Stream::new("2-1".into(), limits(8));
        let (tx, rx) = connect();
        s.attach(tx, None);
        s.push(r#"{"a":1}"#);
        assert_eq!(events(&rx), ["id: 2-1-0\ndata:\n\n", "id: 2-1-1\ndata: {\"a\":1}\n\n"]);
    }

    #[test]
    fn events_without_a_connection_wait_for_one_and_are_not_primed() {
        let mut s = Stream::new("2-0".into(), limits(8));
        s.push("one");
        s.push("two");
        let (tx, rx) = connect();
        s.attach(tx, None);
        assert_eq!(events(&rx), ["id: 2-0-0\ndata: one\n\n", "id: 2-0-1\ndata: two\n\n"]);
        // A later fresh connection does not get them again, only a priming event.
        let (tx2, rx2) = connect();
        s.attach(tx2, None);
        assert!(rx.is_closed(), "the previous connection ends");
        assert_eq!(events(&rx2), ["id: 2-0-2\ndata:\n\n"]);
    }

    #[test]
    fn resuming_replays_after_the_id_even_what_a_dead_connection_took() {
        let mut s = Stream::new("2-3".into(), limits(8));
        let (tx, rx) = connect();
        s.attach(tx, None); // 0: priming
        s.push("a"); // 1
        drop(rx);
        s.push("b"); // 2: the connection is found gone
        s.push("c"); // 3
        s.finish();
        let (tx2, rx2) = connect();
        s.attach(tx2, Some(1));
        assert_eq!(events(&rx2), ["id: 2-3-2\ndata: b\n\n", "id: 2-3-3\ndata: c\n\n"]);
        assert!(rx2.is_closed(), "a finished stream ends after the replay");
    }

    #[test]
    fn the_log_keeps_the_last_sent_events_and_bounded_unsent_ones() {
        let mut s = Stream::new("2-1".into(), limits(2));
        let (tx, rx) = connect();
        s.attach(tx, None);
        for i in 0..5 {
            s.push(&i.to_string());
        }
        drop(rx);
        let (tx2, rx2) = connect();
        s.attach(tx2, Some(0));
        assert_eq!(events(&rx2), ["id: 2-1-4\ndata: 3\n\n", "id: 2-1-5\ndata: 4\n\n"]);
        s.close();
        for i in 0..MAX_UNSENT + 3 {
            s.push(&i.to_string());
        }
        let (tx4, rx4) = connect();
        s.attach(tx4, None);
        let got = events(&rx4);
        assert_eq!(got.len(), MAX_UNSENT);
        assert!(got[0].ends_with("data: 3\n\n"), "{}", got[0]);
    }

    #[test]
    fn the_log_is_bounded_in_bytes_but_keeps_the_newest_event() {
        let mut s = Stream::new("2-1".into(), LogLimits { keep_events: 1000, keep_bytes: 1000 });
        let (tx, rx) = connect();
        s.attach(tx, None);
        let frame = "x".repeat(100);
        for _ in 0..50 {
            s.push(&frame);
            assert!(s.log_bytes <= 1000, "{} bytes logged", s.log_bytes);
        }
        assert_eq!(s.log_bytes, s.log.iter().map(|e| e.text.len()).sum::<usize>());
        let big = "y".repeat(5000);
        s.push(&big);
        assert_eq!(s.log.len(), 1, "only the newest, oversized event stays");
        drop(rx);
        // Unsent events: bounded too, the newest kept.
        for _ in 0..50 {
            s.push(&frame);
        }
        assert!(s.log_bytes <= 1000 + 200, "{} bytes logged", s.log_bytes);
        s.push(&big);
        let (tx2, rx2) = connect();
        s.attach(tx2, None);
        assert!(events(&rx2).last().is_some_and(|e| e.contains(&big)));
    }

    #[test]
    fn a_client_that_does_not_read_is_disconnected_when_its_queue_holds_its_bound() {
        let mut s = Stream::new("2-0".into(), limits(8));
        let (tx, rx) = queue::channel(4096);
        let (closer, closed) = Closer::new();
        rx.bind(closer);
        s.attach(tx, None);
        let frame = "z".repeat(1000);
        for _ in 0..10 {
            s.push(&frame);
        }
        assert!(closed.is_closed(), "the TCP connection is told to close");
        assert!(s.conn.is_none(), "the stream no longer feeds it");
        assert!(rx.is_closed() && rx.try_next().is_none(), "nothing stays queued for it");
        // It comes back and resumes after the priming event: the five it was sent
        // and the five pushed since are replayed.
        let (tx2, rx2) = connect();
        s.attach(tx2, Some(0));
        assert_eq!(events(&rx2).len(), 10);
    }

    #[test]
    fn multi_line_frames_become_several_data_lines() {
        assert_eq!(&encode("1-0-1", "{\n\"a\": 1\r\n}")[..], b"id: 1-0-1\ndata: {\ndata: \"a\": 1\ndata: }\n\n");
    }
}
