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

use super::Gateway;
use crate::io::StreamRef;
use crate::policy::Failure;
use crate::time::Instant;

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
}
