//! Reading a request body under limits: a size bound, a deadline for the whole
//! body, a minimum pace, and a budget shared by every body being read at once.
//!
//! The budget is shared fairly: when it is spent, the body holding the most
//! gives way (it is refused, its bytes freed) to one that would hold less, so
//! a peer that stalls many large bodies cannot keep everyone's small requests
//! out (on loopback or behind a proxy every client is the same peer). A body
//! is refused for the budget only when no other holds more than it would.
//!
//! Memory follows the bytes of the body, never the way it was cut: each piece
//! hyper hands over (one read, one chunk of a chunked body) is copied into one
//! buffer and released at once, so a body of a million one-byte chunks holds
//! its bytes and not a million pieces of the connection's read buffer. The
//! buffer grows by doubling but never past the size bound.
//!
//! Pace: the body gets [`BodyLimits::grace`], then one more second for every
//! [`BodyLimits::min_rate`] bytes received, and never more than
//! [`BodyLimits::timeout`] in all (the model of Apache's `mod_reqtimeout`).

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::future;
use http_body_util::BodyExt;
use hyper::body::Bytes;

/// What a body may cost.
#[derive(Clone, Copy, Debug)]
pub(super) struct BodyLimits {
    /// Largest body, in bytes.
    pub(super) max_bytes: usize,
    /// The whole body must arrive within this.
    pub(super) timeout: Duration,
    /// Time a body gets before its pace counts.
    pub(super) grace: Duration,
    /// Bytes per second a body must average after [`BodyLimits::grace`].
    pub(super) min_rate: u64,
}

/// Why a body was not read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum BodyError {
    /// Larger than [`BodyLimits::max_bytes`] (declared or received).
    TooLarge,
    /// Not complete within [`BodyLimits::timeout`].
    TimedOut,
    /// Behind the minimum pace.
    TooSlow,
    /// The bodies being read hold the whole [`Budget`] and none holds more
    /// than this one would, or this one gave way to a smaller one.
    Busy,
    /// The connection failed or the body was malformed.
    Broken,
}

/// Bytes that all bodies being read may hold together; cheap to clone.
#[derive(Clone, Debug)]
pub(super) struct Budget {
    state: Arc<Mutex<Holdings>>,
}

/// What the bodies being read hold.
#[derive(Debug)]
struct Holdings {
    left: usize,
    next_id: u64,
    /// Each body's bytes, and what tells it to give way.
    bodies: HashMap<u64, (usize, async_channel::Sender<()>)>,
}

impl Budget {
    /// A budget of `bytes`.
    pub(super) fn new(bytes: usize) -> Budget {
        let holdings = Holdings { left: bytes, next_id: 0, bodies: HashMap::new() };
        Budget { state: Arc::new(Mutex::new(holdings)) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Holdings> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes not held by any body now.
    #[cfg(test)]
    pub(super) fn left(&self) -> usize {
        self.lock().left
    }

    /// A body starts holding nothing; the receiver ends when it must give way.
    fn join(&self) -> Held<'_> {
        let (tx, rx) = async_channel::bounded(1);
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.bodies.insert(id, (0, tx));
        Held { budget: self, id, gave_way: rx }
    }

    /// `bytes` more for body `id`, made room for by the body holding the most
    /// when that one holds more than `id` would; `false`: no room (or `id`
    /// already gave way).
    fn take(&self, id: u64, bytes: usize) -> bool {
        let mut state = self.lock();
        let Some(&(mine, _)) = state.bodies.get(&id) else { return false };
        while state.left < bytes {
            let would_hold = mine + bytes;
            let victim = state
                .bodies
                .iter()
                .filter(|(other, (held, _))| **other != id && *held > would_hold)
                .max_by_key(|(other, (held, _))| (*held, u64::MAX - **other))
                .map(|(other, _)| *other);
            let Some(victim) = victim else { return false };
            if let Some((held, tell)) = state.bodies.remove(&victim) {
                state.left += held;
                tell.close();
            }
        }
        state.left -= bytes;
        if let Some((held, _)) = state.bodies.get_mut(&id) {
            *held += bytes;
        }
        true
    }

    /// Body `id` ended: what it holds is free again.
    fn leave(&self, id: u64) {
        let mut state = self.lock();
        if let Some((held, _)) = state.bodies.remove(&id) {
            state.left += held;
        }
    }
}

/// One body's place in a [`Budget`], given back when it is dropped.
struct Held<'a> {
    budget: &'a Budget,
    id: u64,
    /// Ends when the body must give way to another.
    gave_way: async_channel::Receiver<()>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.leave(self.id);
    }
}

/// Reads `body` whole under `limits` and `budget`. `declared`: its
/// `Content-Length`, refused at once when over the bound.
pub(super) async fn read<B>(
    body: B,
    declared: Option<u64>,
    limits: &BodyLimits,
    budget: &Budget,
) -> Result<Vec<u8>, BodyError>
where
    B: hyper::body::Body<Data = Bytes>,
{
    if declared.is_some_and(|len| len > limits.max_bytes as u64) {
        return Err(BodyError::TooLarge);
    }
    let start = Instant::now();
    let after = |wait: Duration| start.checked_add(wait).unwrap_or_else(|| start + Duration::from_secs(1 << 32));
    let hard = after(limits.timeout);
    let held = budget.join();
    // What is declared is not there yet: memory follows what arrives.
    let mut buf = Vec::with_capacity(declared.map_or(0, |len| len.min(64 * 1024) as usize));
    let mut body = pin!(body);
    let deadline =
        |received: usize| hard.min(after(limits.grace.saturating_add(pace_allowance(received, limits.min_rate))));
    // Armed for the deadline of what had arrived when it was last set: it only
    // moves when it fires (a body of a million pieces sets it a few times, not
    // a million), and then refuses the body only if the deadline of what has
    // arrived since has passed too.
    let mut timer = async_io::Timer::at(deadline(0));
    loop {
        /// What ended the wait.
        enum Next<F> {
            Piece(F),
            Timer,
            GaveWay,
        }
        let next = future::or(
            async { Next::Piece(body.frame().await) },
            future::or(
                async {
                    (&mut timer).await;
                    Next::Timer
                },
                async {
                    let _ = held.gave_way.recv().await;
                    Next::GaveWay
                },
            ),
        )
        .await;
        let frame = match next {
            Next::GaveWay => return Err(BodyError::Busy),
            Next::Timer => {
                let due = deadline(buf.len());
                if Instant::now() < due {
                    timer.set_at(due);
                    continue;
                }
                return Err(if due == hard { BodyError::TimedOut } else { BodyError::TooSlow });
            }
            Next::Piece(None) => return Ok(buf),
            Next::Piece(Some(Err(_))) => return Err(BodyError::Broken),
            Next::Piece(Some(Ok(frame))) => frame,
        };
        // Trailers carry nothing tether reads.
        let Ok(data) = frame.into_data() else { continue };
        let len = buf.len() + data.len();
        if len > limits.max_bytes {
            return Err(BodyError::TooLarge);
        }
        if len > buf.capacity() {
            let target = (buf.capacity() * 2).clamp(len, limits.max_bytes);
            buf.reserve_exact(target - buf.len());
        }
        if !budget.take(held.id, data.len()) {
            return Err(BodyError::Busy);
        }
        buf.extend_from_slice(&data);
    }
}

/// The time `received` bytes buy at `min_rate` bytes per second.
/// Most of an unread body a response sent without reading it takes in and drops.
const DISCARD_LIMIT: u64 = 64 * 1024;
/// How long it waits for that.
const DISCARD_WAIT: Duration = Duration::from_secs(2);

/// `response`, once the request's body (announced small) has been read and
/// dropped. hyper keeps a connection open only when the request's body was read
/// through, and tries one read itself: a body still on its way (clients often
/// send it in a write of its own) would have the connection closed, and the
/// client that sends its next request on it gets a reset. Larger or unannounced
/// bodies are left to hyper, which closes the connection.
pub(super) async fn after_discarding<T>(
    request: hyper::Request<hyper::body::Incoming>,
    response: hyper::Response<T>,
) -> hyper::Response<T> {
    let announced = request.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
    if !announced.is_some_and(|n: u64| n > 0 && n <= DISCARD_LIMIT) {
        return response;
    }
    let mut body = request.into_body();
    let discard = async {
        // Each piece is dropped as it comes: nothing accumulates.
        while let Some(Ok(_)) = body.frame().await {}
    };
    future::or(discard, async {
        async_io::Timer::after(DISCARD_WAIT).await;
    })
    .await;
    response
}

fn pace_allowance(received: usize, min_rate: u64) -> Duration {
    match min_rate {
        0 => Duration::MAX,
        rate => Duration::from_millis((received as u64).saturating_mul(1000) / rate),
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures_lite::StreamExt;
    use http_body_util::StreamBody;
    use hyper::body::Frame;

    use super::*;

    fn limits() -> BodyLimits {
        BodyLimits {
            max_bytes: 1000,
            timeout: Duration::from_secs(5),
            grace: Duration::from_millis(300),
            min_rate: 1000,
        }
    }

    /// One piece of a test body.
    type Piece = Result<Frame<Bytes>, Infallible>;

    /// A body fed by a channel, as slowly as the test likes.
    fn fed() -> (async_channel::Sender<Piece>, StreamBody<async_channel::Receiver<Piece>>) {
        let (tx, rx) = async_channel::unbounded();
        (tx, StreamBody::new(rx))
    }

    #[test]
    fn a_body_under_the_limits_is_read_whole() {
        let (tx, body) = fed();
        for piece in ["ab", "c", "", "de"] {
            tx.try_send(Ok(Frame::data(Bytes::from(piece)))).unwrap();
        }
        drop(tx);
        let budget = Budget::new(100);
        let got = smol::block_on(read(body, Some(5), &limits(), &budget));
        assert_eq!(got.as_deref(), Ok(&b"abcde"[..]));
        assert_eq!(budget.left(), 100, "the budget is given back");
    }

    #[test]
    fn bodies_over_the_bound_are_refused_declared_or_not() {
        let (_tx, body) = fed();
        assert_eq!(smol::block_on(read(body, Some(1001), &limits(), &Budget::new(1 << 20))), Err(BodyError::TooLarge));
        let (tx, body) = fed();
        for _ in 0..11 {
            tx.try_send(Ok(Frame::data(Bytes::from(vec![b'x'; 100])))).unwrap();
        }
        drop(tx);
        assert_eq!(smol::block_on(read(body, None, &limits(), &Budget::new(1 << 20))), Err(BodyError::TooLarge));
    }

    /// At the bound exactly: a body of `max_bytes` (declared or not) is read, one
    /// byte more is refused, declared or found while reading.
    #[test]
    fn a_body_of_exactly_the_bound_is_read_and_one_byte_more_is_not() {
        let sized = |len: usize, declared: bool| {
            let (tx, body) = fed();
            tx.try_send(Ok(Frame::data(Bytes::from(vec![b'x'; len - 1])))).unwrap();
            tx.try_send(Ok(Frame::data(Bytes::from_static(b"y")))).unwrap();
            drop(tx);
            smol::block_on(read(body, declared.then_some(len as u64), &limits(), &Budget::new(1 << 20)))
        };
        for declared in [true, false] {
            assert_eq!(sized(1000, declared).map(|b| b.len()), Ok(1000), "declared: {declared}");
            assert_eq!(sized(1001, declared), Err(BodyError::TooLarge), "declared: {declared}");
        }
    }

    #[test]
    fn a_body_that_stalls_is_refused_after_its_grace() {
        let (tx, body) = fed();
        tx.try_send(Ok(Frame::data(Bytes::from_static(b"{")))).unwrap();
        let started = Instant::now();
        let got = smol::block_on(read(body, Some(100), &limits(), &Budget::new(1 << 20)));
        assert_eq!(got, Err(BodyError::TooSlow));
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "{took:?}");
        drop(tx);
    }

    #[test]
    fn a_trickled_body_is_refused_when_it_falls_behind_the_pace() {
        // 10 bytes a second against a pace of 1000: refused a little after the grace.
        let (tx, body) = fed();
        smol::spawn(async move {
            for _ in 0..100 {
                if tx.send(Ok(Frame::data(Bytes::from_static(b" ")))).await.is_err() {
                    return;
                }
                async_io::Timer::after(Duration::from_millis(100)).await;
            }
        })
        .detach();
        let started = Instant::now();
        let got = smol::block_on(read(body, Some(100), &limits(), &Budget::new(1 << 20)));
        assert_eq!(got, Err(BodyError::TooSlow));
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }

    #[test]
    fn a_body_that_keeps_the_pace_still_ends_at_the_deadline() {
        let limits = BodyLimits { timeout: Duration::from_millis(600), ..limits() };
        let (tx, body) = fed();
        smol::spawn(async move {
            // About 1000 bytes a second, far above the pace asked for below.
            loop {
                if tx.send(Ok(Frame::data(Bytes::from_static(b"x")))).await.is_err() {
                    return;
                }
                async_io::Timer::after(Duration::from_micros(500)).await;
            }
        })
        .detach();
        let limits = BodyLimits { max_bytes: 1 << 20, min_rate: 10, ..limits };
        let started = Instant::now();
        let got = smol::block_on(read(body, None, &limits, &Budget::new(1 << 20)));
        assert_eq!(got, Err(BodyError::TimedOut));
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(600) && took < Duration::from_secs(3), "{took:?}");
    }

    /// A piece that, like a slice of hyper's read buffer, pins a whole 8 KiB
    /// allocation for as long as it lives; counted while alive.
    fn pinned_piece(alive: &Arc<AtomicUsize>, peak: &Arc<AtomicUsize>) -> Bytes {
        struct Counted(Vec<u8>, Arc<AtomicUsize>);
        impl AsRef<[u8]> for Counted {
            fn as_ref(&self) -> &[u8] {
                &self.0[..1]
            }
        }
        impl Drop for Counted {
            fn drop(&mut self) {
                self.1.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let now = alive.fetch_add(1, Ordering::SeqCst) + 1;
        peak.fetch_max(now, Ordering::SeqCst);
        Bytes::from_owner(Counted(vec![b'x'; 8192], alive.clone()))
    }

    #[test]
    fn a_body_of_a_million_one_byte_pieces_holds_its_bytes_not_its_pieces() {
        let (alive, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let pieces = 1_000_000;
        let (a, p) = (alive.clone(), peak.clone());
        let stream =
            futures_lite::stream::iter(0..pieces).map(move |_| Ok::<_, Infallible>(Frame::data(pinned_piece(&a, &p))));
        let limits = BodyLimits { max_bytes: 1 << 20, timeout: Duration::from_secs(60), ..limits() };
        let got = smol::block_on(read(StreamBody::new(stream), None, &limits, &Budget::new(1 << 20))).unwrap();
        assert_eq!(got.len(), pieces);
        assert!(got.capacity() <= limits.max_bytes, "the buffer grew past the bound: {}", got.capacity());
        assert!(peak.load(Ordering::SeqCst) <= 2, "{} pieces were held at once", peak.load(Ordering::SeqCst));
        assert_eq!(alive.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn bodies_read_at_once_share_one_budget_and_the_largest_gives_way() {
        let budget = Budget::new(250);
        let limits = limits();
        // Two large bodies that stall, holding 100 and 120 of 250.
        let (tx1, body1) = fed();
        tx1.try_send(Ok(Frame::data(Bytes::from(vec![b'x'; 100])))).unwrap();
        let (tx2, body2) = fed();
        tx2.try_send(Ok(Frame::data(Bytes::from(vec![b'y'; 120])))).unwrap();
        // A small one that needs 50: the one holding the most (120) gives way.
        let (tx3, body3) = fed();
        tx3.try_send(Ok(Frame::data(Bytes::from(vec![b'z'; 50])))).unwrap();
        drop(tx3);
        // Then one larger than what is left (150) and than any holder (100):
        // it pushes out nobody smaller, and is refused.
        let (tx4, body4) = fed();
        tx4.try_send(Ok(Frame::data(Bytes::from(vec![b'w'; 200])))).unwrap();
        drop(tx4);
        let (first, second, small, equal) = smol::block_on(async {
            let spawn = |body, budget: &Budget| {
                let budget = budget.clone();
                smol::spawn(async move { read(body, None, &limits, &budget).await })
            };
            let first = spawn(body1, &budget);
            async_io::Timer::after(Duration::from_millis(30)).await;
            let second = spawn(body2, &budget);
            async_io::Timer::after(Duration::from_millis(30)).await;
            let small = read(body3, None, &limits, &budget).await;
            let second = second.await;
            let equal = read(body4, None, &limits, &budget).await;
            drop(tx1);
            (first.await, second, small, equal)
        });
        assert_eq!(small.map(|b| b.len()), Ok(50), "the small body is read");
        assert_eq!(second, Err(BodyError::Busy), "the largest holder gave way");
        assert_eq!(equal, Err(BodyError::Busy), "a larger body does not push out a smaller one");
        assert_eq!(first.map(|b| b.len()), Ok(100), "the other large one finished");
        assert_eq!(budget.left(), 250, "everything is given back");
        drop(tx2);
    }
}
