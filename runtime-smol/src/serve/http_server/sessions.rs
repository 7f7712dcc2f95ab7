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
/// Ids of sessions closed here, remembered so that a sealed id the client (or
/// the engine: idle, evicted) ended is not adopted back.
const MAX_RETIRED: usize = 4096;
/// The longest request id (raw JSON) an event id carries, so that a stream
/// resumed on another replica can be answered for its request.
const MAX_ID_IN_EVENT: usize = 64;
/// What a client ending its stream at a drain is asked to wait before it
/// reconnects (through the balancer, to another replica), in ms.
pub(super) const DRAIN_RETRY_MS: u64 = 500;

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
    /// `key` is a sealed id another replica could adopt: remembered when the
    /// session closes. A random key (a stateless request's, an unsealed one)
    /// is not: nobody can present it again.
    sealed: bool,
    streams: HashMap<u64, Stream>,
    next_stream: u64,
    /// By request id key.
    requests: HashMap<String, Pending>,
    /// Finished POST streams, oldest first.
    finished: VecDeque<u64>,
    /// Who opened it (the bearer's identity), when the listener checks OAuth tokens.
    owner: Option<String>,
}

/// What a `Last-Event-ID` names, as this replica sees it.
pub(super) enum Resume {
    /// A stream kept here: it goes on, on the new connection.
    Resumed,
    /// Nothing kept here (malformed, another session's, evicted): served as a plain GET.
    Unknown(Conn),
    /// A stream another replica held (or this one before a restart): lost.
    /// Carries the request it answered (raw JSON) when the id says.
    Foreign(Conn, Option<String>),
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
    /// Names this process in event ids: a resumption elsewhere is recognised.
    replica: String,
    /// Keys of sessions closed here, oldest first (see [`MAX_RETIRED`]).
    retired: VecDeque<String>,
    retired_set: std::collections::HashSet<String>,
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
    pub(super) fn new(
        first_session: u64,
        keep: LogLimits,
        queue_bytes: usize,
        get_stream: bool,
        replica: String,
    ) -> Table {
        Table {
            sessions: HashMap::new(),
            keys: HashMap::new(),
            replica,
            retired: VecDeque::new(),
            retired_set: std::collections::HashSet::new(),
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
        let session = self.reserve()?;
        self.insert(key, session, false);
        Some(session)
    }

    /// A number for a session to be inserted later ([`Table::insert`]); `None`
    /// once the server shut down.
    pub(super) fn reserve(&mut self) -> Option<SessionId> {
        if self.closed {
            return None;
        }
        let session = SessionId(self.next_session);
        self.next_session += 1;
        Some(session)
    }

    /// Opens `session` (from [`Table::reserve`]) under `key`, `sealed` or not.
    pub(super) fn insert(&mut self, key: String, session: SessionId, sealed: bool) {
        self.keys.insert(key.clone(), session);
        let state = Session {
            key,
            sealed,
            streams: HashMap::new(),
            next_stream: STANDALONE + 1,
            requests: HashMap::new(),
            finished: VecDeque::new(),
            owner: None,
        };
        self.sessions.insert(session, state);
        tracing::debug!(session = session.0, "HTTP session opened");
    }

    /// The session is known from now on by `key` (its sealed id) instead.
    pub(super) fn rekey(&mut self, session: SessionId, key: String) {
        let Some(state) = self.sessions.get_mut(&session) else { return };
        self.keys.remove(&state.key);
        state.key = key.clone();
        state.sealed = true;
        self.keys.insert(key, session);
    }

    /// The key `session` is known by now.
    pub(super) fn key_of(&self, session: SessionId) -> Option<&str> {
        self.sessions.get(&session).map(|s| s.key.as_str())
    }

    /// The sealed id of `session`, if it has one (other replicas may adopt it).
    pub(super) fn sealed_key(&self, session: SessionId) -> Option<String> {
        self.sessions.get(&session).filter(|s| s.sealed).map(|s| s.key.clone())
    }

    /// Whether a session known by `key` was closed here (not to be adopted back).
    pub(super) fn is_retired(&self, key: &str) -> bool {
        self.retired_set.contains(key)
    }

    /// Remembers that the session known by `key` ended (see [`MAX_RETIRED`]).
    pub(super) fn retire(&mut self, key: String) {
        if !self.retired_set.insert(key.clone()) {
            return;
        }
        self.retired.push_back(key);
        while self.retired.len() > MAX_RETIRED {
            if let Some(old) = self.retired.pop_front() {
                self.retired_set.remove(&old);
            }
        }
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
        let replica = self.replica.as_str();
        let Some(state) = self.sessions.get_mut(&session) else {
            tracing::debug!(session = session.0, "frame for a closed HTTP session dropped");
            return Handoff(None);
        };
        match route {
            Route::Reply(id) => return state.reply(session, &id_key(&id), frame),
            Route::Related(id) => {
                let place = Place { replica, session, keep, get_stream };
                state.related(place, &id, frame, queue_bytes)
            }
            Route::Session => state.standalone(Place { replica, session, keep, get_stream }, &frame),
        }
        Handoff(None)
    }

    /// Continues the stream `last_event_id` belongs to on `conn`, replaying what
    /// followed it; see [`Resume`] for the ids it does not continue.
    pub(super) fn resume(&mut self, session: SessionId, last_event_id: &str, conn: Conn) -> Resume {
        let Some(id) = EventId::parse(last_event_id) else { return Resume::Unknown(conn) };
        if id.replica != self.replica {
            return Resume::Foreign(conn, id.request);
        }
        let Some(state) = self.sessions.get_mut(&session) else { return Resume::Unknown(conn) };
        match state.streams.get_mut(&id.stream) {
            Some(stream) if id.session == session.0 && stream.issued(id.seq) => {
                tracing::debug!(session = session.0, stream = id.stream, "SSE stream resumed");
                stream.attach(conn, Some(id.seq));
                Resume::Resumed
            }
            _ => Resume::Unknown(conn),
        }
    }

    /// Serves on `conn` the answer to request `id` (raw JSON) whose stream was
    /// lost with another replica: what the engine sends for it goes there.
    /// Gives `conn` back when a request with that id is in flight here.
    pub(super) fn lost(&mut self, session: SessionId, id: &str, conn: Conn) -> Result<(), Conn> {
        let (keep, replica) = (self.keep, &self.replica);
        let Some(state) = self.sessions.get_mut(&session) else { return Err(conn) };
        let key = id_key(id);
        if state.requests.contains_key(&key) {
            return Err(conn);
        }
        let number = state.next_stream;
        state.next_stream += 1;
        let mut stream = Stream::new(prefix(replica, session, number, Some(id)), keep);
        stream.attach(conn, None);
        state.streams.insert(number, stream);
        state.requests.insert(key, Pending::Streaming(number));
        Ok(())
    }

    /// A drain is over: every stream's connection ends, its client asked to
    /// reconnect after [`DRAIN_RETRY_MS`] (to a replica still serving).
    pub(super) fn end_streams(&mut self) {
        for state in self.sessions.values_mut() {
            state.streams.values_mut().for_each(|s| s.end_with_retry(DRAIN_RETRY_MS));
        }
    }

    /// Attaches `conn` as the session's standalone stream, ending a previous one.
    pub(super) fn listen(&mut self, session: SessionId, conn: Conn) -> bool {
        let (keep, replica) = (self.keep, &self.replica);
        let Some(state) = self.sessions.get_mut(&session) else { return false };
        state
            .streams
            .entry(STANDALONE)
            .or_insert_with(|| Stream::new(prefix(replica, session, STANDALONE, None), keep))
            .attach(conn, None);
        true
    }

    /// Ends a session: its streams end, its waiting requests fail, its key is forgotten.
    pub(super) fn close(&mut self, session: SessionId) -> bool {
        let Some(mut state) = self.sessions.remove(&session) else { return false };
        self.keys.remove(&state.key);
        if state.sealed {
            self.retire(std::mem::take(&mut state.key));
        }
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

    fn related(&mut self, place: Place<'_>, raw_id: &str, frame: String, queue_bytes: usize) {
        let id = id_key(raw_id);
        match self.requests.get_mut(&id) {
            Some(Pending::Streaming(number)) => {
                if let Some(stream) = self.streams.get_mut(number) {
                    stream.push(&frame);
                }
            }
            Some(pending @ Pending::Waiting { .. }) => {
                let number = self.next_stream;
                self.next_stream += 1;
                let mut stream = Stream::new(prefix(place.replica, place.session, number, Some(raw_id)), place.keep);
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
            None => self.standalone(place, &frame),
        }
    }

    fn standalone(&mut self, place: Place<'_>, frame: &str) {
        if !place.get_stream {
            tracing::debug!(session = place.session.0, "frame for the standalone stream dropped: GET streams are off");
            return;
        }
        let (replica, session, keep) = (place.replica, place.session, place.keep);
        self.streams
            .entry(STANDALONE)
            .or_insert_with(|| Stream::new(prefix(replica, session, STANDALONE, None), keep))
            .push(frame);
    }
}

/// Where a session's new streams are made: what their event ids and logs need.
#[derive(Clone, Copy)]
struct Place<'a> {
    replica: &'a str,
    session: SessionId,
    keep: LogLimits,
    get_stream: bool,
}

/// `<replica>-<session>-<stream>[.<request>]`, the start of a stream's event
/// ids (`-<seq>` follows): which process holds the stream, and for a POST's
/// stream the request it answers (its raw id in base64url, when short), so a
/// replica it is resumed on can answer that request.
fn prefix(replica: &str, session: SessionId, stream: u64, request: Option<&str>) -> String {
    use base64::Engine;
    match request.filter(|id| id.len() <= MAX_ID_IN_EVENT) {
        Some(id) => {
            let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.trim());
            format!("{replica}-{}-{stream}.{id}", session.0)
        }
        None => format!("{replica}-{}-{stream}", session.0),
    }
}

/// An event id of this transport, read back.
#[derive(Debug, PartialEq, Eq)]
struct EventId {
    replica: String,
    session: u64,
    stream: u64,
    /// The request the stream answers (raw JSON), when the id carries it.
    request: Option<String>,
    seq: u64,
}

impl EventId {
    fn parse(text: &str) -> Option<EventId> {
        use base64::Engine;
        let text = text.trim();
        let (head, seq) = text.rsplit_once('-')?;
        let (replica, rest) = head.split_once('-')?;
        let (session, stream) = rest.split_once('-')?;
        let (stream, request) = match stream.split_once('.') {
            Some((stream, id)) => {
                let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(id).ok()?;
                (stream, Some(String::from_utf8(id).ok()?).filter(|id| id.len() <= MAX_ID_IN_EVENT))
            }
            None => (stream, None),
        };
        let valid_replica =
            !replica.is_empty() && replica.len() <= 32 && replica.bytes().all(|b| b.is_ascii_alphanumeric());
        Some(EventId {
            replica: valid_replica.then(|| replica.to_string())?,
            session: session.parse().ok()?,
            stream: stream.parse().ok()?,
            request,
            seq: seq.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(rx: &queue::Receiver) -> String {
        std::iter::from_fn(|| rx.try_next()).map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    fn table(first_session: u64, get_stream: bool) -> Table {
        Table::new(first_session, LogLimits { keep_events: 8, keep_bytes: 1 << 20 }, 1 << 20, get_stream, "r1".into())
    }

    fn unknown(resume: Resume) -> Conn {
        match resume {
            Resume::Unknown(conn) => conn,
            _ => panic!("expected an id this replica does not continue"),
        }
    }

    #[test]
    fn event_ids_name_the_replica_and_a_posts_request_and_parse_back() {
        let id = |replica: &str, session, stream, request: Option<&str>, seq| EventId {
            replica: replica.into(),
            session,
            stream,
            request: request.map(String::from),
            seq,
        };
        assert_eq!(EventId::parse("r1-2-0-15"), Some(id("r1", 2, 0, None, 15)));
        assert_eq!(EventId::parse(" r1-2-3-1 "), Some(id("r1", 2, 3, None, 1)));
        for raw in ["7", r#""a-b_c""#, r#"{"odd":true}"#] {
            let text = format!("{}-4", prefix("ab12", SessionId(9), 3, Some(raw)));
            assert_eq!(EventId::parse(&text), Some(id("ab12", 9, 3, Some(raw), 4)), "{text}");
        }
        let long = format!("\"{}\"", "x".repeat(MAX_ID_IN_EVENT));
        assert_eq!(prefix("r", SessionId(1), 2, Some(&long)), "r-1-2", "a long id is not carried");
        for bad in ["2-3", "2-3-x", "a-b-c-d", "-2-3-4", "r1-2-3.!!-4", "r 1-2-3-4", ""] {
            assert_eq!(EventId::parse(bad), None, "{bad}");
        }
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
        let p = prefix("r1", s, 1, Some(r#""\u0078""#));
        assert_eq!(drain(&rx), format!("id: {p}-0\ndata:\n\nid: {p}-1\ndata: progress\n\nid: {p}-2\ndata: done\n\n"));
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
        let tx = unknown(table.resume(a, "r1-3-0-0", tx));
        let tx = unknown(table.resume(a, "r1-2-0-9", tx)); // never issued
        let tx = unknown(table.resume(a, "r1-2-7-0", tx)); // no such stream
        let tx = unknown(table.resume(a, "2-0-0", tx)); // not an id of this transport
        assert!(table.listen(a, tx));
        assert_eq!(drain(&rx), "id: r1-2-0-0\ndata: for a\n\n");
        // Another replica's stream: lost, with the request it answered.
        let (tx, _rx) = queue::channel(1 << 20);
        let foreign = format!("{}-3", prefix("r2", SessionId(7), 1, Some("41")));
        assert!(matches!(table.resume(a, &foreign, tx), Resume::Foreign(_, Some(id)) if id == "41"));
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
        assert!(!table.is_retired("k"), "a random key is not remembered: nobody presents it again");
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
        unknown(table.resume(s, "r1-2-0-0", tx));
    }

    #[test]
    fn a_lost_request_is_answered_on_the_resuming_connection_and_a_drain_asks_streams_to_reconnect() {
        let mut table = table(2, true);
        let s = table.open("k".into()).unwrap();
        let (tx, rx) = queue::channel(1 << 20);
        assert!(table.lost(s, "41", tx).is_ok());
        table.deliver(s, Route::Related("41".into()), "changed".into()).send();
        table.deliver(s, Route::Reply("41".into()), "error".into()).send();
        let p = prefix("r1", s, 1, Some("41"));
        assert_eq!(drain(&rx), format!("id: {p}-0\ndata:\n\nid: {p}-1\ndata: changed\n\nid: {p}-2\ndata: error\n\n"));
        assert!(rx.is_closed());
        // A request in flight here is not lost.
        let _waiter = table.expect(s, "42").unwrap();
        let (tx, _rx) = queue::channel(1 << 20);
        assert!(table.lost(s, "42", tx).is_err());

        let (tx, rx) = queue::channel(1 << 20);
        table.listen(s, tx);
        table.end_streams();
        assert!(drain(&rx).ends_with(&format!("retry: {DRAIN_RETRY_MS}\n\n")));
        assert!(rx.is_closed());
    }

    #[test]
    fn a_session_is_known_by_its_sealed_key_once_rekeyed_and_the_retired_keys_are_bounded() {
        let mut table = table(2, true);
        let s = table.open("random".into()).unwrap();
        table.rekey(s, "sealed".into());
        assert_eq!((table.find("random"), table.find("sealed")), (None, Some(s)));
        assert_eq!(table.key_of(s), Some("sealed"));
        table.close(s);
        assert!(table.is_retired("sealed"), "a sealed id closed here is not adopted back");
        for n in 0..MAX_RETIRED + 10 {
            table.retire(format!("k{n}"));
        }
        assert!(!table.is_retired("k0") && table.is_retired(&format!("k{}", MAX_RETIRED + 9)));
        let reserved = table.reserve().unwrap();
        assert_eq!(table.find("later"), None);
        table.insert("later".into(), reserved, true);
        assert_eq!(table.find("later"), Some(reserved));
    }
}
