//! A backend's SSE stream that ended (see [`crate::gateway::streams`] for the
//! rules): resumed, or given up, failing the request it carried under the
//! usual retry rules.

use crate::gateway::calls::{Call, CallKind};
use crate::io::StreamRef;
use crate::policy::Failure;
use crate::time::Duration;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;

use crate::gateway::backends::Backends;
use crate::gateway::cx::Cx;
use crate::gateway::streams::StreamEnd;

impl Backends {
    /// A stream of the live connection ended: resume it, repair the session, or
    /// give up on it.
    pub(in crate::gateway) fn stream_ended(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        stream: StreamRef,
        end: StreamEnd,
    ) {
        let now = cx.now;
        let in_flight = |calls: &BTreeMap<u64, Call>, id: u64| calls.get(&id).is_some_and(|c| &*c.server == server);
        let Some(b) = self.get_mut(server) else { return };
        // Requests answered (or failed) meanwhile leave nothing to resume.
        let calls = &cx.router.calls;
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
                StreamRef::Request(id) => self.backend_failed(cx, server, Some(id), failure.expect("auth")),
                // The credential's business is the requests': the stream stays closed.
                StreamRef::Standalone => b.streams.standalone_closed = true,
            };
        }
        if failure == Some(Failure::Http { status: 404 }) {
            // The server forgot the session the stream belonged to.
            b.streams.ended.remove(&stream);
            return self.session_lost(cx, server, stream.request());
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
                (StreamRef::Request(id), None) => self.backend_failed(cx, server, Some(id), failure),
                (StreamRef::Request(id), Some(why)) => self.request_stream_given_up(cx, server, id, why, lost),
                // A server without a stream of its own answers the GET with 405:
                // nothing is wrong.
                (StreamRef::Standalone, _) if !resumable => {
                    self.get_mut(server).expect("live").streams.standalone_closed = true;
                }
                (StreamRef::Standalone, why) => self.standalone_given_up(cx, server, why.unwrap_or_default(), lost),
            };
        }
        let max = b.sup.policy().reconnect_max_ms;
        let delay = match r.retry_ms {
            Some(ms) => Duration::from_millis(ms.min(max)),
            None => b.sup.policy().reconnect_backoff().delay(r.barren, cx.rng),
        };
        r.resume_at = Some(now + delay);
    }

    /// Resuming the stream of request `id` was given up (`why`). The call
    /// fails in transport, under the retry rules, with `why` in the client's
    /// error. When resumptions kept failing in transport (`lost`) the connection
    /// is lost too; else the backend stays up, with `why` as its last error.
    pub(in crate::gateway) fn request_stream_given_up(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        id: u64,
        why: String,
        lost: Option<Failure>,
    ) {
        let call = match cx.router.calls.remove(&id) {
            Some(Call { kind: CallKind::Client(c), .. }) => Some(c),
            Some(call) => {
                cx.router.calls.insert(id, call);
                None
            }
            None => return,
        };
        let Some(call) = call else {
            return self.backend_failed(cx, server, Some(id), lost.unwrap_or(Failure::Reset));
        };
        let name = self.name(server);
        match lost {
            Some(failure) => self.connection_lost(cx, server, failure),
            None => {
                let b = self.get_mut(server).expect("live");
                b.sup.note_trouble(format!("a call to '{name}' failed: {why}"));
            }
        }
        self.client_call_failed_because(cx, server, call, &Failure::Reset, &why);
    }

    /// Reopening the standalone stream was given up (`why`): when it kept failing
    /// in transport (`lost`) the connection is lost and a new one reopens it;
    /// else it stays closed on this connection, and `why` is the backend's last
    /// error (server messages stop until the next connection).
    pub(in crate::gateway) fn standalone_given_up(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        why: String,
        lost: Option<Failure>,
    ) {
        if let Some(failure) = lost {
            return self.connection_lost(cx, server, failure);
        }
        let b = self.get_mut(server).expect("live");
        b.streams.standalone_closed = true;
        b.sup.note_trouble(why);
    }
}
