//! Resumable SSE streams of Streamable HTTP backends (2025-11-25, SEP-1699).
//!
//! A server may end a stream before it carried everything: a POST's response
//! stream before the response, or the standalone GET stream at any time. The
//! host reports the end ([`Input::StreamEnded`](crate::Input::StreamEnded)) with
//! the last event id and the server's `retry` hint; this module decides whether
//! and when to resume, and asks for a GET carrying `Last-Event-ID`
//! ([`Action::ResumeStream`]) after exactly the server's `retry` delay when it
//! gave one, else after the reconnect backoff. Resumptions in a row that bring
//! nothing are bounded (`stream_resume_attempts`): then the request fails under
//! the usual retry rules, or the standalone stream stays closed.
//!
//! Event ids are unique across the streams of a session, so one bounded window
//! of the ids seen on the connection drops every replay, whichever stream
//! carries it.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::String;

use super::calls::{Call, CallKind};
use super::Gateway;
use crate::io::StreamRef;
use crate::policy::Failure;
use crate::time::{Duration, Instant};

/// Event ids remembered per connection to drop replays.
pub(super) const SEEN_EVENTS: usize = 256;

/// The streams of one connection that ended and are (to be) resumed, and the
/// event ids seen on it.
#[derive(Clone, Default)]
pub(super) struct Streams {
    /// Streams that ended, by stream, until their request is answered (or
    /// they are given up).
    pub ended: BTreeMap<StreamRef, Resumption>,
    /// The latest event ids seen, oldest first.
    seen: VecDeque<String>,
    /// The standalone stream will not be reopened on this connection.
    pub standalone_closed: bool,
}

/// What is known of one ended stream.
#[derive(Clone, Default)]
pub(super) struct Resumption {
    /// The id to send as `Last-Event-ID`.
    pub last_event_id: Option<String>,
    /// The server's latest `retry` hint, in ms.
    pub retry_ms: Option<u64>,
    /// Ends in a row that delivered nothing.
    pub barren: u32,
    /// An event not seen before arrived on the resumed stream since it was last
    /// resumed (replays do not count: a server that only replays makes no progress).
    pub fresh: bool,
    /// When to resume, while a resumption is scheduled.
    pub resume_at: Option<Instant>,
}

/// How a stream ended, as the host reported it.
pub(super) struct StreamEnd {
    pub last_event_id: Option<String>,
    pub retry_ms: Option<u64>,
    pub events: u32,
    pub failure: Option<Failure>,
}

impl Streams {
    /// The earliest scheduled resumption.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.ended.values().filter_map(|r| r.resume_at).min()
    }

    /// Whether `id` is new on this connection; remembers it.
    fn first_sighting(&mut self, id: &str) -> bool {
        if self.seen.iter().any(|s| s == id) {
            return false;
        }
        if self.seen.len() == SEEN_EVENTS {
            self.seen.pop_front();
        }
        self.seen.push_back(id.into());
        true
    }

    /// Checks the bounds.
    pub(super) fn check_invariants(&self, max_ended: usize) -> Result<(), String> {
        if self.seen.len() > SEEN_EVENTS {
            return Err("event id window over its bound".into());
        }
        if self.ended.len() > max_ended {
            return Err(format!("{} ended streams tracked, bound {max_ended}", self.ended.len()));
        }
        Ok(())
    }
}

impl Gateway {
    /// An SSE event: dropped when its id says it is a replay, else a frame from
    /// `stream` (and progress for the stream it resumed).
    pub(super) fn backend_event(&mut self, server: &str, stream: StreamRef, event_id: Option<&str>, frame: &str) {
        let Some(b) = self.backends.get_mut(server) else { return };
        if event_id.is_some_and(|id| !b.streams.first_sighting(id)) {
            return;
        }
        // Progress for a resumed stream is what it had not said before: an event
        // without an id could be a keep-alive repeated on every resumption.
        if let Some(r) = b.streams.ended.get_mut(&stream).filter(|_| event_id.is_some()) {
            r.fresh = true;
        }
        self.backend_frame_on(server, frame, Some(stream));
    }

    /// A stream of the live connection ended: resume it, repair the session, or
    /// give up on it.
    pub(super) fn stream_ended(&mut self, server: &str, stream: StreamRef, end: StreamEnd) {
        let now = self.now;
        let in_flight = |calls: &BTreeMap<u64, Call>, id: u64| calls.get(&id).is_some_and(|c| &*c.server == server);
        let Some(b) = self.backends.get_mut(server) else { return };
        // Requests answered (or failed) meanwhile leave nothing to resume.
        let calls = &self.router.calls;
        b.streams.ended.retain(|s, _| s.request().map_or(true, |id| in_flight(calls, id)));
        if let StreamRef::Request(id) = stream {
            if !in_flight(calls, id) {
                return;
            }
        } else if b.streams.standalone_closed {
            return;
        }
        let failure = end.failure;
        if failure.as_ref().is_some_and(Failure::is_auth) {
            b.streams.ended.remove(&stream);
            return match stream {
                StreamRef::Request(id) => self.backend_failed(server, Some(id), failure.expect("auth")),
                // The credential's business is the requests': the stream stays closed.
                StreamRef::Standalone => b.streams.standalone_closed = true,
            };
        }
        if failure == Some(Failure::Http { status: 404 }) {
            // The server forgot the session the stream belonged to.
            b.streams.ended.remove(&stream);
            return self.session_lost(server, stream.request());
        }
        let resumable = failure.as_ref().map_or(true, |f| f.classify().retryable);
        let attempts = b.sup.policy().stream_resume_attempts;
        let resumed = b.streams.ended.contains_key(&stream);
        let r = b.streams.ended.entry(stream).or_default();
        // A first end counts what the stream carried; a resumed one only events
        // not seen before.
        let progress = if resumed { r.fresh } else { end.events > 0 };
        r.fresh = false;
        if end.last_event_id.is_some() {
            r.last_event_id = end.last_event_id;
        }
        if end.retry_ms.is_some() {
            r.retry_ms = end.retry_ms;
        }
        r.barren = if progress { 1 } else { r.barren.saturating_add(1) };
        r.resume_at = None;
        // A resumption that failed in transport, rather than a stream the
        // server ended: when it is the last straw, the connection is lost.
        let broken = failure.clone();
        let failure = failure.unwrap_or(Failure::Reset);
        let what = match stream {
            StreamRef::Request(_) => "the stream carrying its answer",
            StreamRef::Standalone => "the stream of server messages",
        };
        let give_up = match stream {
            // A request's stream resumes only from an event id: without one the
            // server cannot tell which stream to replay.
            StreamRef::Request(_) if r.last_event_id.is_none() => Some(None),
            _ if !resumable => Some(Some(format!("resuming {what} failed: {failure}"))),
            _ if r.barren > attempts => Some(Some(match &broken {
                Some(f) => format!("resuming {what} failed {} times in a row: {f}", r.barren),
                None => format!("{what} ended {} times in a row without bringing anything", r.barren),
            })),
            _ => None,
        };
        if let Some(why) = give_up {
            b.streams.ended.remove(&stream);
            // Failures that outlast every resumption mean the connection is gone;
            // a refusal the server meant (not retryable) does not.
            let lost = if resumable { broken } else { None };
            return match (stream, why) {
                (StreamRef::Request(id), None) => self.backend_failed(server, Some(id), failure),
                (StreamRef::Request(id), Some(why)) => self.request_stream_given_up(server, id, why, lost),
                // A server without a stream of its own answers the GET with 405:
                // nothing is wrong.
                (StreamRef::Standalone, _) if !resumable => {
                    self.backends.get_mut(server).expect("live").streams.standalone_closed = true;
                }
                (StreamRef::Standalone, why) => self.standalone_given_up(server, why.unwrap_or_default(), lost),
            };
        }
        let max = b.sup.policy().reconnect_max_ms;
        let delay = match r.retry_ms {
            Some(ms) => Duration::from_millis(ms.min(max)),
            None => b.sup.policy().reconnect_backoff().delay(r.barren, &mut self.rng),
        };
        r.resume_at = Some(now + delay);
    }

    /// Resuming the stream of request `id` was given up (`why`). The call
    /// fails in transport, under the retry rules, with `why` in the client's
    /// error. When resumptions kept failing in transport (`lost`) the connection
    /// is lost too; else the backend stays up, with `why` as its last error.
    fn request_stream_given_up(&mut self, server: &str, id: u64, why: String, lost: Option<Failure>) {
        let call = match self.router.calls.remove(&id) {
            Some(Call { kind: CallKind::Client(c), .. }) => Some(c),
            Some(call) => {
                self.router.calls.insert(id, call);
                None
            }
            None => return,
        };
        let Some(call) = call else {
            return self.backend_failed(server, Some(id), lost.unwrap_or(Failure::Reset));
        };
        let name = self.backends.name(server);
        match lost {
            Some(failure) => self.connection_lost(server, failure),
            None => {
                let b = self.backends.get_mut(server).expect("live");
                b.sup.note_trouble(format!("a call to '{name}' failed: {why}"));
            }
        }
        self.client_call_failed_because(server, call, &Failure::Reset, &why);
    }

    /// Reopening the standalone stream was given up (`why`): when it kept failing
    /// in transport (`lost`) the connection is lost and a new one reopens it;
    /// else it stays closed on this connection, and `why` is the backend's last
    /// error (server messages stop until the next connection).
    fn standalone_given_up(&mut self, server: &str, why: String, lost: Option<Failure>) {
        if let Some(failure) = lost {
            return self.connection_lost(server, failure);
        }
        let b = self.backends.get_mut(server).expect("live");
        b.streams.standalone_closed = true;
        b.sup.note_trouble(why);
    }
}
