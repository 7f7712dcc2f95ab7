//! One SSE stream of a session: numbered events, a replay log for `Last-Event-ID`,
//! and at most one live connection (an HTTP response body fed by a channel).
//!
//! Every event is logged with its sequence number when it is created. Events a
//! connection took are "sent"; events created while no connection was there are
//! "unsent" and go out when one attaches. Sent events always precede unsent ones
//! in the log, so the log is a run of sent events followed by a run of unsent ones.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::StreamExt;
use http_body_util::StreamBody;
use hyper::body::{Bytes, Frame};

/// Events waiting in one connection's channel before the client counts as too
/// slow: its connection is ended and it resumes with `Last-Event-ID`.
const MAX_QUEUED: usize = 4096;
/// Unsent events kept per stream while no connection takes them.
pub(super) const MAX_UNSENT: usize = 1024;

/// The sending end of a connection: encoded events.
pub(super) type Conn = async_channel::Sender<Bytes>;

/// A response body made of the events sent to a [`Conn`]; it ends when the
/// sender is closed or dropped.
pub(super) fn body(
    rx: async_channel::Receiver<Bytes>,
) -> StreamBody<impl futures_lite::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + 'static> {
    StreamBody::new(rx.map(|bytes| Ok(Frame::data(bytes))))
}

/// The body of a stateless-era request's stream (a `subscriptions/listen`, a
/// long call): the events of `rx`, an SSE comment every `every` in between (a
/// dead connection is only noticed when written to, and proxies close idle
/// ones), and
/// `on_drop` once the body goes, which is how the client's leaving (the
/// revision's cancel) is noticed.
pub(super) struct Watched {
    rx: Pin<Box<async_channel::Receiver<Bytes>>>,
    keep_alive: async_io::Timer,
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl Watched {
    /// Watches `rx`; `on_drop` runs once, when the body is dropped.
    pub(super) fn new(rx: async_channel::Receiver<Bytes>, every: Duration, on_drop: Box<dyn FnOnce() + Send>) -> Self {
        Watched { rx: Box::pin(rx), keep_alive: async_io::Timer::interval(every), on_drop: Some(on_drop) }
    }
}

impl futures_lite::Stream for Watched {
    type Item = Result<Frame<Bytes>, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Poll::Ready(next) = self.rx.as_mut().poll_next(cx) {
            return Poll::Ready(next.map(|bytes| Ok(Frame::data(bytes))));
        }
        match Pin::new(&mut self.keep_alive).poll_next(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b": keep-alive\n\n"))))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Watched {
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
    for line in data.split(['\n', '\r']).filter(|l| !l.is_empty()) {
        text.push_str("data: ");
        text.push_str(line);
        text.push('\n');
    }
    text.push('\n');
    Bytes::from(text)
}

struct Event {
    seq: u64,
    text: Bytes,
}

/// One stream.
pub(super) struct Stream {
    /// `<session>-<stream>`: event ids are `<prefix>-<seq>`.
    prefix: String,
    next_seq: u64,
    log: VecDeque<Event>,
    /// How many events at the end of the log no connection took.
    unsent: usize,
    /// Sent events kept for replay.
    keep: usize,
    conn: Option<Conn>,
    /// A POST stream whose response was delivered: nothing follows it.
    finished: bool,
    /// Unsent events were dropped since the last connection (warned once).
    dropped: u64,
}

impl Stream {
    /// An empty stream whose event ids start with `prefix`.
    pub(super) fn new(prefix: String, keep: usize) -> Stream {
        Stream { prefix, next_seq: 0, log: VecDeque::new(), unsent: 0, keep, conn: None, finished: false, dropped: 0 }
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
            wrote |= conn.try_send(event.text.clone()).is_ok();
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
            let _ = conn.try_send(encode(&self.id(seq), ""));
        }
        self.conn = Some(conn);
    }

    /// Adds an event: to the live connection if there is one, to the log always.
    pub(super) fn push(&mut self, frame: &str) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let text = encode(&self.id(seq), frame);
        let sent = self.send(text.clone());
        self.log.push_back(Event { seq, text });
        if !sent {
            self.unsent += 1;
        }
        self.trim();
    }

    fn send(&mut self, text: Bytes) -> bool {
        let Some(conn) = &self.conn else { return false };
        if conn.len() >= MAX_QUEUED {
            tracing::debug!(stream = %self.prefix, "SSE client too slow: connection ended, it may resume");
            conn.close();
            self.conn = None;
            return false;
        }
        if conn.try_send(text).is_ok() {
            return true;
        }
        self.conn = None; // the client went away
        false
    }

    /// The stream's last event was pushed (a POST stream's response): the
    /// connection ends after it; the log stays for resumption.
    pub(super) fn finish(&mut self) {
        self.finished = true;
        self.close();
    }

    /// Ends the live connection, if any.
    pub(super) fn close(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.close();
        }
    }

    fn trim(&mut self) {
        let mut sent = self.log.len() - self.unsent;
        while sent > self.keep {
            self.log.pop_front();
            sent -= 1;
        }
        while self.unsent > MAX_UNSENT {
            self.log.remove(sent);
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

    fn events(rx: &async_channel::Receiver<Bytes>) -> Vec<String> {
        std::iter::from_fn(|| rx.try_recv().ok()).map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    fn connect() -> (Conn, async_channel::Receiver<Bytes>) {
        async_channel::unbounded()
    }

    #[test]
    fn a_new_connection_is_primed_then_gets_events() {
        let mut s = Stream::new("2-1".into(), 8);
        let (tx, rx) = connect();
        s.attach(tx, None);
        s.push(r#"{"a":1}"#);
        assert_eq!(events(&rx), ["id: 2-1-0\ndata:\n\n", "id: 2-1-1\ndata: {\"a\":1}\n\n"]);
    }

    #[test]
    fn events_without_a_connection_wait_for_one_and_are_not_primed() {
        let mut s = Stream::new("2-0".into(), 8);
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
        let mut s = Stream::new("2-3".into(), 8);
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
        let mut s = Stream::new("2-1".into(), 2);
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
    fn multi_line_frames_become_several_data_lines() {
        assert_eq!(&encode("1-0-1", "{\n\"a\": 1\r\n}")[..], b"id: 1-0-1\ndata: {\ndata: \"a\": 1\ndata: }\n\n");
    }
}
