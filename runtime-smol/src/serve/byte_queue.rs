//! The queue between a producer (a session's SSE stream, the `/events` log) and
//! the HTTP response body that sends its events to one client, bounded in bytes.
//!
//! A consumer that reads too slowly is not waited for and not buffered for: when
//! its queue already holds its bound, the next push drops everything queued and
//! closes the client's TCP connection (see `Closer`). The bound admits one
//! event however large while the queue is under it, so a large answer is never
//! refused to a client that keeps up.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use hyper::body::Bytes;

/// Closes one client's TCP connection from wherever its queue overflows; cheap to clone.
#[derive(Clone)]
pub(crate) struct Closer {
    tx: async_channel::Sender<()>,
}

impl Closer {
    /// A closer and what the connection's task waits on: it ends the connection
    /// when the receiver reports the channel closed.
    pub(crate) fn new() -> (Closer, async_channel::Receiver<()>) {
        let (tx, rx) = async_channel::bounded(1);
        (Closer { tx }, rx)
    }

    /// Ends the connection (its task drops it, resetting the TCP connection).
    pub(crate) fn close(&self) {
        self.tx.close();
    }
}

/// Why a push was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The queue held its bound: the consumer was too slow and is disconnected.
    Full,
    /// The consumer is gone (its body was dropped) or the queue was closed.
    Closed,
}

/// The reason a body ended early: its client did not keep up.
#[derive(Debug)]
pub(crate) struct TooSlow;

impl std::fmt::Display for TooSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client read its event stream too slowly")
    }
}

impl std::error::Error for TooSlow {}

struct State {
    items: VecDeque<Bytes>,
    bytes: usize,
    /// No more pushes: the receiver ends after the queued items.
    closed: bool,
    /// The bound was hit: the receiver fails at once.
    overflowed: bool,
    waker: Option<Waker>,
    closer: Option<Closer>,
}

struct Shared {
    limit: usize,
    state: Mutex<State>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A queue holding at most about `limit` bytes (plus one event).
pub(crate) fn channel(limit: usize) -> (Sender, Receiver) {
    let state = State { items: VecDeque::new(), bytes: 0, closed: false, overflowed: false, waker: None, closer: None };
    let shared = Arc::new(Shared { limit, state: Mutex::new(state) });
    (Sender { shared: shared.clone() }, Receiver { shared })
}

/// The producing end; dropping it ends the stream after what is queued.
pub(crate) struct Sender {
    shared: Arc<Shared>,
}

impl Sender {
    /// Queues `bytes`. A queue already holding its bound refuses with
    /// [`Refused::Full`]: what it held is dropped and the consumer's connection closed.
    pub(crate) fn push(&self, bytes: Bytes) -> Result<(), Refused> {
        let mut state = self.shared.state();
        if state.closed || state.overflowed {
            return Err(Refused::Closed);
        }
        if state.bytes >= self.shared.limit {
            state.overflowed = true;
            state.items = VecDeque::new();
            state.bytes = 0;
            if let Some(closer) = &state.closer {
                closer.close();
            }
            if let Some(waker) = state.waker.take() {
                waker.wake();
            }
            return Err(Refused::Full);
        }
        state.bytes += bytes.len();
        state.items.push_back(bytes);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        Ok(())
    }

    /// Ends the stream once the consumer took what is queued.
    pub(crate) fn close(&self) {
        let mut state = self.shared.state();
        state.closed = true;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Whether the consumer is gone or the stream ended.
    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        let state = self.shared.state();
        state.closed || state.overflowed
    }

    /// Bytes queued now.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.shared.state().bytes
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.close();
    }
}

/// The consuming end: an SSE response body's source of events.
pub(crate) struct Receiver {
    shared: Arc<Shared>,
}

impl Receiver {
    /// Names the connection to close when the queue overflows (at once if it already did).
    pub(crate) fn bind(&self, closer: Closer) {
        let mut state = self.shared.state();
        if state.overflowed {
            closer.close();
        }
        state.closer = Some(closer);
    }

    /// The next event; `None` once the stream ended, `Err` once it overflowed.
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, TooSlow>>> {
        let mut state = self.shared.state();
        if state.overflowed {
            return Poll::Ready(Some(Err(TooSlow)));
        }
        if let Some(bytes) = state.items.pop_front() {
            state.bytes -= bytes.len();
            return Poll::Ready(Some(Ok(bytes)));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The next event without waiting (tests).
    #[cfg(test)]
    pub(crate) fn try_next(&self) -> Option<Bytes> {
        let mut state = self.shared.state();
        let bytes = state.items.pop_front()?;
        state.bytes -= bytes.len();
        Some(bytes)
    }

    /// Whether nothing more will be queued (the stream ended or overflowed).
    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        let state = self.shared.state();
        state.overflowed || state.closed
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state.closed = true;
        state.items = VecDeque::new();
        state.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_holds_its_bound_plus_one_event_then_disconnects_its_consumer() {
        let (tx, rx) = channel(100);
        let (closer, closed) = Closer::new();
        rx.bind(closer);
        tx.push(Bytes::from(vec![b'a'; 60])).unwrap();
        tx.push(Bytes::from(vec![b'b'; 60])).unwrap(); // under the bound when pushed
        assert_eq!(tx.queued_bytes(), 120);
        assert!(!closed.is_closed());
        assert_eq!(tx.push(Bytes::from_static(b"c")), Err(Refused::Full));
        assert_eq!(tx.queued_bytes(), 0, "what was queued is dropped");
        assert!(closed.is_closed(), "the connection is told to close");
        let next = futures_lite::future::block_on(futures_lite::future::poll_fn(|cx| Poll::Ready(rx.poll_next(cx))));
        assert!(matches!(next, Poll::Ready(Some(Err(TooSlow)))));
        assert_eq!(tx.push(Bytes::from_static(b"d")), Err(Refused::Closed));
    }

    #[test]
    fn a_large_event_passes_an_empty_queue_and_taking_events_makes_room() {
        let (tx, rx) = channel(10);
        tx.push(Bytes::from(vec![b'x'; 1000])).unwrap();
        assert_eq!(rx.try_next().map(|b| b.len()), Some(1000));
        for _ in 0..100 {
            tx.push(Bytes::from_static(b"12345")).unwrap();
            tx.push(Bytes::from_static(b"12345")).unwrap();
            assert!(rx.try_next().is_some() && rx.try_next().is_some());
        }
        assert_eq!(tx.queued_bytes(), 0);
    }

    #[test]
    fn overflow_before_the_body_exists_closes_the_connection_when_bound() {
        let (tx, rx) = channel(1);
        tx.push(Bytes::from_static(b"ab")).unwrap();
        assert_eq!(tx.push(Bytes::from_static(b"c")), Err(Refused::Full));
        let (closer, closed) = Closer::new();
        rx.bind(closer);
        assert!(closed.is_closed());
    }

    #[test]
    fn a_dropped_consumer_refuses_pushes_and_frees_the_queue() {
        let (tx, rx) = channel(100);
        tx.push(Bytes::from_static(b"ab")).unwrap();
        drop(rx);
        assert_eq!(tx.queued_bytes(), 0);
        assert_eq!(tx.push(Bytes::from_static(b"c")), Err(Refused::Closed));
        assert!(tx.is_closed());
    }

    #[test]
    fn closing_ends_the_stream_after_what_is_queued() {
        let (tx, rx) = channel(100);
        tx.push(Bytes::from_static(b"ab")).unwrap();
        assert!(!rx.is_closed());
        tx.close();
        assert!(rx.is_closed());
        let next = futures_lite::future::block_on(futures_lite::future::poll_fn(|cx| Poll::Ready(rx.poll_next(cx))));
        assert!(matches!(next, Poll::Ready(Some(Ok(b))) if b == "ab"));
        let end = futures_lite::future::block_on(futures_lite::future::poll_fn(|cx| Poll::Ready(rx.poll_next(cx))));
        assert!(matches!(end, Poll::Ready(None)));
    }
}
