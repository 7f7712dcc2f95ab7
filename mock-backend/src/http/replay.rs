//! `--cut-streams`: request streams cut short at random and resumed by the GET
//! that carries `Last-Event-ID`.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use serde_json::Value;

use super::*;
use crate::protocol::*;

/// The retry hint (ms) of every priming event under `--cut-streams`.
pub(crate) const CUT_RETRY_MS: u64 = 50;

/// Every request stream's events under `--cut-streams` (event ids are unique
/// across all streams), and the PRNG that decides where streams are cut.
pub(crate) struct Replay {
    pub(crate) state: Mutex<ReplayState>,
    changed: Condvar,
    rng: Mutex<u64>,
    cuts: AtomicU64,
}

#[derive(Default)]
pub(crate) struct ReplayState {
    next_id: u64,
    /// Each stream's events (id and SSE text), and whether it is complete.
    pub(crate) streams: HashMap<u64, (Vec<(u64, String)>, bool)>,
    /// The stream each event belongs to.
    owners: HashMap<u64, u64>,
}

impl Replay {
    pub(crate) fn new(seed: u64) -> Self {
        Replay { state: Mutex::default(), changed: Condvar::new(), rng: Mutex::new(seed), cuts: AtomicU64::new(0) }
    }

    /// A number in 0..n (splitmix64).
    fn below(&self, n: u64) -> u64 {
        let mut state = lock(&self.rng);
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }

    /// Appends an event to `stream` (a message, or the priming event when `None`;
    /// `last` completes the stream) and returns its SSE text.
    pub(crate) fn record(&self, stream: u64, message: Option<&Value>, last: bool) -> String {
        let mut state = lock(&self.state);
        state.next_id += 1;
        let id = state.next_id;
        let text = match message {
            Some(message) => format!("id: {id}\nevent: message\ndata: {message}\n\n"),
            None => format!("id: {id}\nretry: {CUT_RETRY_MS}\ndata: \n\n"),
        };
        state.owners.insert(id, stream);
        let (events, done) = state.streams.entry(stream).or_default();
        events.push((id, text.clone()));
        *done |= last;
        self.changed.notify_all();
        text
    }

    /// Marks `stream` complete (a request that ends unanswered).
    fn complete(&self, stream: u64) {
        lock(&self.state).streams.entry(stream).or_default().1 = true;
        self.changed.notify_all();
    }

    /// The stream event `id` belongs to, the index to replay it from (just after
    /// it, or, to test that replays are dropped, up to two events earlier) and the
    /// index just after it.
    pub(crate) fn locate(&self, id: u64) -> Option<(u64, usize, usize)> {
        let back = self.below(3) as usize;
        let state = lock(&self.state);
        let stream = *state.owners.get(&id)?;
        let position = state.streams.get(&stream)?.0.iter().position(|(event, _)| *event == id)?;
        Some((stream, (position + 1).saturating_sub(back), position + 1))
    }

    /// Counts and reports one cut.
    fn cut(&self, what: &str, stream: u64) {
        let n = self.cuts.fetch_add(1, Ordering::Relaxed) + 1;
        eprintln!("cut-streams: cut {n} ({what} of stream {stream})");
    }

    /// Writes `stream`'s events from `index` on a resuming GET until the stream is
    /// complete; one time in four it is cut again after an event new to the client.
    pub(crate) fn serve_resumption(
        &self,
        request: tiny_http::Request,
        session_id: &str,
        stream: u64,
        from: (usize, usize),
    ) {
        let (mut index, first_new) = from;
        let mut writer = request.into_writer();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
             Mcp-Session-Id: {session_id}\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        if writer.write_all(head.as_bytes()).and_then(|()| writer.flush()).is_err() {
            return;
        }
        let cut_again = self.below(4) == 0;
        let mut state = lock(&self.state);
        loop {
            let Some((events, done)) = state.streams.get(&stream) else { return };
            let done = *done;
            let pending: Vec<String> = events[index.min(events.len())..].iter().map(|(_, t)| t.clone()).collect();
            let total = events.len();
            if pending.is_empty() {
                if done {
                    drop(state);
                    let _ = end_chunks(&mut writer);
                    return;
                }
                state =
                    self.changed.wait_timeout(state, Duration::from_secs(30)).unwrap_or_else(PoisonError::into_inner).0;
                continue;
            }
            drop(state);
            for (offset, text) in pending.iter().enumerate() {
                let at = index + offset;
                let is_last = done && at + 1 == total;
                if cut_again && at >= first_new && !is_last {
                    if write_chunk(&mut writer, text).is_err() {
                        return;
                    }
                    self.cut("resumed GET", stream);
                    let _ = end_chunks(&mut writer);
                    return;
                }
                if write_chunk(&mut writer, text).is_err() {
                    return;
                }
            }
            index = total;
            state = lock(&self.state);
        }
    }
}

/// A request POST under `--cut-streams`: an SSE stream from the start, opened
/// with a priming event, that carries a random number of the request's messages
/// (possibly none, possibly all) and is cut before its response when that number
/// is smaller than the messages sent. Every message is recorded for resumption.
pub(crate) struct CutExchange {
    replay: Arc<Replay>,
    stream: u64,
    /// The POST's body while it is open, and how many more messages it carries.
    open: Mutex<Option<(Box<dyn Write + Send>, u64)>>,
    finished: AtomicBool,
}

impl CutExchange {
    pub(crate) fn open(replay: Arc<Replay>, request: tiny_http::Request, session_id: &str) -> Self {
        static STREAMS: AtomicU64 = AtomicU64::new(0);
        let stream = STREAMS.fetch_add(1, Ordering::Relaxed);
        let mut writer = request.into_writer();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
             Mcp-Session-Id: {session_id}\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let priming = replay.record(stream, None, false);
        let mut open = None;
        if writer.write_all(head.as_bytes()).and_then(|()| writer.flush()).is_ok()
            && write_chunk(&mut writer, &priming).is_ok()
        {
            // Half the streams are never cut (they carry every message); the others
            // are cut after 0..=2 messages, a quarter of them at once.
            let carries = if replay.below(2) == 0 { u64::MAX } else { replay.below(3) };
            if carries == 0 && replay.below(2) == 0 {
                replay.cut("POST, at once", stream);
                let _ = end_chunks(&mut writer);
            } else {
                open = Some((Box::new(writer) as Box<dyn Write + Send>, carries));
            }
        }
        CutExchange { replay, stream, open: Mutex::new(open), finished: AtomicBool::new(false) }
    }

    /// Records `message` and writes it on the POST if it is still open, cutting the
    /// POST instead when its share of messages is used up.
    fn deliver(&self, message: &Value, last: bool) {
        let mut open = lock(&self.open);
        let text = self.replay.record(self.stream, Some(message), last);
        let Some((writer, carries)) = open.as_mut() else { return };
        if *carries == 0 {
            self.replay.cut("POST", self.stream);
            let _ = end_chunks(writer);
            *open = None;
            return;
        }
        *carries -= 1;
        let written = write_chunk(writer, &text).is_ok();
        if !written || last {
            if written {
                let _ = end_chunks(writer);
            }
            *open = None;
        }
    }
}

impl Outlet for CutExchange {
    fn send(&self, message: &Value) {
        self.deliver(message, false);
    }

    fn finish(&self, response: &Value) {
        self.finished.store(true, Ordering::Relaxed);
        self.deliver(response, true);
    }
}

impl Drop for CutExchange {
    fn drop(&mut self) {
        if !self.finished.load(Ordering::Relaxed) {
            self.replay.complete(self.stream);
        }
        if let Some((mut writer, _)) = lock(&self.open).take() {
            let _ = end_chunks(&mut writer);
        }
    }
}
