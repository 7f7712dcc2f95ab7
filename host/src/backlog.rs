//! A count of bytes waiting between a producer and a consumer, with a bound that
//! makes producers wait instead of growing the queue.
//!
//! A queue's owner adds what it enqueues and subtracts what its consumer has
//! taken; whoever feeds the queue waits for [`Backlog::room`] (async) or
//! [`Backlog::wait_room`] (blocking) before producing more. That is how a backend
//! flooding its stdout is read no faster than tether can forward: its reader waits
//! on the backlog of the engine's input queue and on the client's output queue.
//!
//! The bound is a high-water mark, not a hard cap: a producer that found room
//! adds its whole item, so a backlog holds at most `limit` plus one item per
//! producer. Closing a backlog releases every waiter for good (its queue is gone).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use event_listener::{Event, Listener};

/// Bytes queued somewhere, the bound on them, and the producers waiting for room.
#[derive(Debug)]
pub struct Backlog {
    bytes: AtomicUsize,
    limit: usize,
    closed: AtomicBool,
    /// Notified when the bytes fall below the limit, and on close.
    drained: Event,
}

impl Backlog {
    /// An empty backlog that asks producers to wait at `limit` bytes.
    pub fn new(limit: usize) -> Backlog {
        Backlog { bytes: AtomicUsize::new(0), limit, closed: AtomicBool::new(false), drained: Event::new() }
    }

    /// `n` more bytes were queued.
    pub fn add(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::AcqRel);
    }

    /// `n` bytes left the queue (written, or taken by the consumer).
    pub fn sub(&self, n: usize) {
        let before = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| Some(b.saturating_sub(n)))
            .unwrap_or_default();
        if before.saturating_sub(n) < self.limit {
            self.drained.notify(usize::MAX);
        }
    }

    /// Bytes queued now.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// The high-water mark producers wait at.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether a producer should wait now.
    pub fn is_full(&self) -> bool {
        self.bytes() >= self.limit && !self.is_closed()
    }

    /// The queue is gone: waiters return `false`, now and from now on.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.drained.notify(usize::MAX);
    }

    /// Whether [`Backlog::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// `Some(false)` once closed, `Some(true)` while there is room, `None` while
    /// a producer must wait.
    fn settled(&self) -> Option<bool> {
        if self.is_closed() {
            Some(false)
        } else {
            (self.bytes() < self.limit).then_some(true)
        }
    }

    /// Waits until there is room; `false` if the backlog was closed.
    pub async fn room(&self) -> bool {
        loop {
            if let Some(room) = self.settled() {
                return room;
            }
            let listener = self.drained.listen();
            // Checked again: room may have been made before the listener existed.
            if self.settled().is_none() {
                listener.await;
            }
        }
    }

    /// Blocks the calling thread until there is room; `false` if the backlog was
    /// closed.
    pub fn wait_room(&self) -> bool {
        loop {
            if let Some(room) = self.settled() {
                return room;
            }
            let listener = self.drained.listen();
            if self.settled().is_none() {
                listener.wait();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Backlog;

    #[test]
    fn a_producer_waits_at_the_limit_until_the_consumer_takes_bytes() {
        let backlog = Arc::new(Backlog::new(100));
        backlog.add(150);
        assert!(backlog.is_full());
        let consumer = backlog.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            consumer.sub(100);
        });
        assert!(backlog.wait_room());
        assert_eq!(backlog.bytes(), 50);
        t.join().unwrap();
    }

    #[test]
    fn closing_releases_waiters_for_good() {
        let backlog = Arc::new(Backlog::new(10));
        backlog.add(10);
        let closer = backlog.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            closer.close();
        });
        assert!(!backlog.wait_room());
        assert!(!backlog.wait_room());
        assert!(!backlog.is_full());
        t.join().unwrap();
    }

    #[test]
    fn taking_more_than_queued_saturates_at_zero() {
        let backlog = Backlog::new(10);
        backlog.add(3);
        backlog.sub(5);
        assert_eq!(backlog.bytes(), 0);
    }
}
