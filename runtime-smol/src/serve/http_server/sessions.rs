//! The session table: `Mcp-Session-Id` strings and the core's session numbers,
//! each session's streams, and the requests waiting for their answer. Frames from
//! the core are routed here.

use std::collections::{HashMap, VecDeque};

use async_channel::{Receiver, Sender};
use tether_core::SessionId;

use super::message::id_key;
use super::stream::{Conn, LogLimits, Stream};
use super::Route;
use crate::serve::byte_queue as queue;

/// The standalone (GET) stream's number; POST streams count from 1.
const STANDALONE: u64 = 0;
/// Finished POST streams kept per session for resumption.
const MAX_FINISHED: usize = 16;

/// The first frame routed to a waiting request decides how its POST is answered.
pub(super) enum First {
    /// The response came first: one JSON body.
    Reply(String),
    /// A related message came first: an SSE stream, already primed and fed.
    Stream(queue::Receiver),
}

/// A request the transport routes answers to.
enum Pending {
    /// Its POST waits for the first frame.
    Waiting { token: u64, first: Sender<First> },
    /// Its POST turned into this stream.
    Streaming(u64),
}

struct Session {
    key: String,
    streams: HashMap<u64, Stream>,
    next_stream: u64,
    /// By request id key.
    requests: HashMap<String, Pending>,
    /// Finished POST streams, oldest first.
    finished: VecDeque<u64>,
    /// Who opened it (the bearer's identity), when the listener checks OAuth tokens.
    owner: Option<String>,
}

/// Why a request cannot wait for an answer.
#[derive(Debug)]
pub(super) enum Refused {
    /// The session is gone.
    Gone,
    /// A request with the same id is in flight in this session.
    Duplicate,
}

/// An answer for a waiting POST, handed over once the table is unlocked: waking
/// the POST's task then does not keep its own lookups in the table waiting.
#[must_use = "the answer reaches its POST only when sent"]
pub(super) struct Handoff(Option<(async_channel::Sender<First>, First)>);

impl Handoff {
    /// Gives the answer to its POST (nothing if it was not for a waiting one).
    pub(super) fn send(self) {
        if let Some((first, answer)) = self.0 {
            let _ = first.try_send(answer);
        }
    }
}

/// A POST's place in the table while it waits for its first frame.
pub(super) struct Waiter {
    /// Names this wait (ids can be reused once a request is answered).
    pub(super) token: u64,
    /// Yields the first frame; fails when the session or the server closes.
    pub(super) first: Receiver<First>,
}

/// Every session of the listener.
pub(super) struct Table {
    sessions: HashMap<SessionId, Session>,
    keys: HashMap<String, SessionId>,
    next_session: u64,
    next_token: u64,
    /// What each stream's log keeps.
    keep: LogLimits,
    /// Bytes queued for one connection before its client counts as too slow.
    queue_bytes: usize,
    get_stream: bool,
    closed: bool,
}

impl Table {
    /// An empty table numbering sessions from `first_session`; streams keep
    /// `keep` for replay, and queue `queue_bytes` for a connection at most.
    pub(super) fn new(first_session: u64, keep: LogLimits, queue_bytes: usize, get_stream: bool) -> Table {
        Table {
            sessions: HashMap::new(),
            keys: HashMap::new(),
            next_session: first_session,
            next_token: 0,
            keep,
            queue_bytes,
            get_stream,
            closed: false,
        }
    }

    /// The server shut down.
    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Opens a session known by `key`; `None` once the server shut down.
    pub(super) fn open(&mut self, key: String) -> Option<SessionId> {
        if self.closed {
            return None;
        }
        let session = SessionId(self.next_session);
        self.next_session += 1;
        self.keys.insert(key.clone(), session);
        let state = Session {
            key,
            streams: HashMap::new(),
            next_stream: STANDALONE + 1,
            requests: HashMap::new(),
            finished: VecDeque::new(),
            owner: None,
        };
        self.sessions.insert(session, state);
        tracing::debug!(session = session.0, "HTTP session opened");
        Some(session)
    }

    /// Records who opened `session` (a new one): the identity of its bearer.
    pub(super) fn set_owner(&mut self, session: SessionId, identity: String) {
        if let Some(state) = self.sessions.get_mut(&session) {
            state.owner = Some(identity);
        }
    }

    /// Whether the bearer known as `identity` is not who opened `session`.
    pub(super) fn is_stranger(&self, session: SessionId, identity: &str) -> bool {
        let owner = self.sessions.get(&session).and_then(|s| s.owner.as_deref());
        owner.is_some_and(|o| o != identity)
    }

    /// The live session known by `key`.
    pub(super) fn find(&self, key: &str) -> Option<SessionId> {
        self.keys.get(key).copied()
    }

    /// Registers request `id` (a key) of `session` as waiting for its first frame.
    pub(super) fn expect(&mut self, session: SessionId, id: &str) -> Result<Waiter, Refused> {
        let Some(state) = self.sessions.get_mut(&session) else { return Err(Refused::Gone) };
        if state.requests.contains_key(id) {
            return Err(Refused::Duplicate);
        }
        let token = self.next_token;
        self.next_token += 1;
        let (tx, rx) = async_channel::bounded(1);
        state.requests.insert(id.to_string(), Pending::Waiting { token, first: tx });
        Ok(Waiter { token, first: rx })
    }

    /// The POST of wait `token` is gone before its first frame (the client left):
    /// its answer will be dropped. A request already streaming is left alone.
    /// Whether it was still waiting (nothing had been routed to it).
    pub(super) fn abandon(&mut self, session: SessionId, id: &str, token: u64) -> bool {
        let Some(state) = self.sessions.get_mut(&session) else { return false };
        if matches!(state.requests.get(id), Some(Pending::Waiting { token: t, .. }) if *t == token) {
            state.requests.remove(id);
            return true;
        }
        false
    }

    /// Routes one frame from the core.
    pub(super) fn deliver(&mut self, session: SessionId, route: Route, frame: String) -> Handoff {
        let (keep, get_stream, queue_bytes) = (self.keep, self.get_stream, self.queue_bytes);
        let Some(state) = self.sessions.get_mut(&session) else {
            tracing::debug!(session = session.0, "frame for a closed HTTP session dropped");
            return Handoff(None);
        };
        match route {
            Route::Reply(id) => return state.reply(session, &id_key(&id), frame),
            Route::Related(id) => state.related(session, &id_key(&id), frame, keep, queue_bytes, get_stream),
            Route::Session => state.standalone(session, &frame, keep, get_stream),
        }
        Handoff(None)
    }

    /// Continues the stream `last_event_id` belongs to on `conn`, replaying what
    /// followed it. Gives `conn` back when the id names no stream of this session
    /// that is still kept.
    pub(super) fn resume(&mut self, session: SessionId, last_event_id: &str, conn: Conn) -> Result<(), Conn> {
        let Some((owner, number, seq)) = parse_event_id(last_event_id) else { return Err(conn) };
        let Some(state) = self.sessions.get_mut(&session) else { return Err(conn) };
        match state.streams.get_mut(&number) {
            Some(stream) if owner == session.0 && stream.issued(seq) => {
                tracing::debug!(session = session.0, stream = number, "SSE stream resumed");
                stream.attach(conn, Some(seq));
                Ok(())
            }
            _ => Err(conn),
        }
    }

    /// Attaches `conn` as the session's standalone stream, ending a previous one.
    pub(super) fn listen(&mut self, session: SessionId, conn: Conn) -> bool {
        let keep = self.keep;
        let Some(state) = self.sessions.get_mut(&session) else { return false };
        state
            .streams
            .entry(STANDALONE)
            .or_insert_with(|| Stream::new(prefix(session, STANDALONE), keep))
            .attach(conn, None);
        true
    }

    /// Ends a session: its streams end, its waiting requests fail, its key is forgotten.
    pub(super) fn close(&mut self, session: SessionId) -> bool {
        let Some(mut state) = self.sessions.remove(&session) else { return false };
        self.keys.remove(&state.key);
        state.streams.values_mut().for_each(Stream::close);
        tracing::debug!(session = session.0, "HTTP session closed");
        true
    }

    /// Shutdown: every session ends and no new one opens.
    pub(super) fn close_all(&mut self) {
        self.closed = true;
        let sessions: Vec<SessionId> = self.sessions.keys().copied().collect();
        for session in sessions {
            self.close(session);
        }
    }
}

impl Session {
    fn reply(&mut self, session: SessionId, id: &str, frame: String) -> Handoff {
        match self.requests.remove(id) {
            Some(Pending::Waiting { first, .. }) => return Handoff(Some((first, First::Reply(frame)))),
            Some(Pending::Streaming(number)) => {
                if let Some(stream) = self.streams.get_mut(&number) {
                    stream.push(&frame);
                    stream.finish();
                }
                self.finished.push_back(number);
                while self.finished.len() > MAX_FINISHED {
                    if let Some(old) = self.finished.pop_front() {
                        self.streams.remove(&old);
                    }
                }
            }
            None => tracing::debug!(session = session.0, "answer to a request no POST waits for dropped"),
        }
        Handoff(None)
    }

    fn related(
        &mut self,
        session: SessionId,
        id: &str,
        frame: String,
        keep: LogLimits,
        queue_bytes: usize,
        get_stream: bool,
    ) {
        match self.requests.get_mut(id) {
            Some(Pending::Streaming(number)) => {
                if let Some(stream) = self.streams.get_mut(number) {
                    stream.push(&frame);
                }
            }
            Some(pending @ Pending::Waiting { .. }) => {
                let number = self.next_stream;
                self.next_stream += 1;
                let mut stream = Stream::new(prefix(session, number), keep);
                let (conn, rx) = queue::channel(queue_bytes);
                stream.attach(conn, None);
                stream.push(&frame);
                if let Pending::Waiting { first, .. } = pending {
                    // If the POST is gone, the stream is kept but has no connection.
                    let _ = first.try_send(First::Stream(rx));
                }
                *pending = Pending::Streaming(number);
                self.streams.insert(number, stream);
            }
            None => self.standalone(session, &frame, keep, get_stream),
        }
    }

    fn standalone(&mut self, session: SessionId, frame: &str, keep: LogLimits, get_stream: bool) {
        if !get_stream {
            tracing::debug!(session = session.0, "frame for the standalone stream dropped: GET streams are off");
            return;
        }
        self.streams.entry(STANDALONE).or_insert_with(|| Stream::new(prefix(session, STANDALONE), keep)).push(frame);
    }
}

/// `<session>-<stream>`, the start of a stream's event ids.
fn prefix(session: SessionId, stream: u64) -> String {
    format!("{}-{stream}", session.0)
}

/// `<session>-<stream>-<seq>`.
fn parse_event_id(id: &str) -> Option<(u64, u64, u64)> {
    let mut parts = id.trim().splitn(3, '-');
    let session = parts.next()?.parse().ok()?;
    let stream = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    Some((session, stream, seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(rx: &queue::Receiver) -> String {
        std::iter::from_fn(|| rx.try_next()).map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    fn table(first_session: u64, get_stream: bool) -> Table {
        Table::new(first_session, LogLimits { keep_events: 8, keep_bytes: 1 << 20 }, 1 << 20, get_stream)
    }

    #[test]
    fn event_ids_parse() {
        assert_eq!(parse_event_id("2-0-15"), Some((2, 0, 15)));
        assert_eq!(parse_event_id(" 2-3-1 "), Some((2, 3, 1)));
        assert_eq!(parse_event_id("2-3"), None);
        assert_eq!(parse_event_id("2-3-1-4"), None);
        assert_eq!(parse_event_id("a-b-c"), None);
    }

    #[test]
    fn a_reply_first_answers_with_json_and_a_related_frame_first_opens_a_stream() {
        let mut table = table(2, true);
        let s = table.open("k".into()).unwrap();
        let json = table.expect(s, "1").unwrap();
        let streamed = table.expect(s, r#""x""#).unwrap();
        assert!(matches!(table.expect(s, "1"), Err(Refused::Duplicate)));
        table.deliver(s, Route::Reply(" 1".into()), "answer".into()).send();
        assert!(matches!(json.first.try_recv(), Ok(First::Reply(f)) if f == "answer"));
        table.deliver(s, Route::Related(r#""\u0078""#.into()), "progress".into()).send();
        let Ok(First::Stream(rx)) = streamed.first.try_recv() else { panic!("expected a stream") };
        table.deliver(s, Route::Reply(r#""x""#.into()), "done".into()).send();
        assert_eq!(drain(&rx), "id: 2-1-0\ndata:\n\nid: 2-1-1\ndata: progress\n\nid: 2-1-2\ndata: done\n\n");
        assert!(rx.is_closed());
        // The id is free again once answered.
        assert!(table.expect(s, "1").is_ok());
    }

    #[test]
    fn an_abandoned_wait_frees_its_id_but_not_a_later_one() {
        let mut table = table(2, true);
        let s = table.open("k".into()).unwrap();
        let first = table.expect(s, "1").unwrap();
        table.abandon(s, "1", first.token);
        let second = table.expect(s, "1").unwrap();
        table.abandon(s, "1", first.token);
        table.deliver(s, Route::Reply("1".into()), "answer".into()).send();
        assert!(matches!(second.first.try_recv(), Ok(First::Reply(_))));
    }

    #[test]
    fn resumption_stays_within_the_named_stream_and_session() {
        let mut table = table(2, true);
        let a = table.open("a".into()).unwrap();
        let b = table.open("b".into()).unwrap();
        table.deliver(a, Route::Session, "for a".into()).send();
        table.deliver(b, Route::Session, "for b".into()).send();
        let (tx, rx) = queue::channel(1 << 20);
        // Session b's id, presented in session a: not resumed.
        let tx = table.resume(a, "3-0-0", tx).unwrap_err();
        let tx = table.resume(a, "2-0-9", tx).unwrap_err(); // never issued
        let tx = table.resume(a, "2-7-0", tx).unwrap_err(); // no such stream
        assert!(table.listen(a, tx));
        assert_eq!(drain(&rx), "id: 2-0-0\ndata: for a\n\n");
    }

    #[test]
    fn closing_a_session_ends_its_streams_fails_its_waiters_and_forgets_its_key() {
        let mut table = table(5, true);
        let s = table.open("k".into()).unwrap();
        assert_eq!(s, SessionId(5));
        let waiter = table.expect(s, "1").unwrap();
        let (tx, rx) = queue::channel(1 << 20);
        table.listen(s, tx);
        assert!(table.close(s));
        assert!(rx.is_closed());
        assert!(waiter.first.try_recv().is_err() && waiter.first.is_closed());
        assert_eq!(table.find("k"), None);
        assert!(!table.close(s));
        table.close_all();
        assert!(table.open("again".into()).is_none());
    }

    #[test]
    fn without_get_streams_session_frames_are_dropped() {
        let mut table = table(2, false);
        let s = table.open("k".into()).unwrap();
        table.deliver(s, Route::Session, "lost".into()).send();
        let (tx, _rx) = queue::channel(1 << 20);
        assert!(table.resume(s, "2-0-0", tx).is_err());
    }
}
