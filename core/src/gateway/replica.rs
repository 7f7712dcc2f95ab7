//! Being one replica of several behind a load balancer: taking in a session
//! another replica opened, answering for a stream another replica held, and
//! draining when asked to stop (see [`crate::config::Cluster`]).

use crate::time::Duration;
use alloc::vec::Vec;

use super::client_events::Level;
use super::Gateway;
use crate::cluster::{SessionFacts, SessionState};
use crate::io::{Action, RawId, SessionId};
use crate::protocol::{self, code, Era};
use crate::time::Instant;
use alloc::collections::BTreeSet;
use alloc::string::{String, ToString};

/// What the error for a lost answer says.
const ANSWER_LOST: &str = "the answer to this request was lost: the tether replica that was serving it stopped \
     before answering (the request may or may not have run; retry it if that is safe)";

/// A drain under way.
#[derive(Clone, Copy, Debug)]
pub(super) struct Drain {
    /// When the stop request came.
    began: Instant,
    /// New requests are still taken (until `began + drain_delay_ms`).
    accepting: bool,
    /// Streams ended: the host may stop.
    done: bool,
}

/// A drain deadline that came due.
#[derive(Clone, Copy, Debug)]
pub(super) enum DrainTimer {
    /// The balancer had its time: stop taking requests.
    StopAccepting,
    /// The calls in flight had theirs.
    GiveUp,
}

impl Gateway {
    /// [`crate::Input::ClientAdopted`]: the session is opened here as its
    /// `initialize` left it elsewhere.
    pub(super) fn client_adopted(&mut self, session: SessionId, facts: SessionFacts, state: Option<SessionState>) {
        if self.sessions.open.contains_key(&session) {
            return;
        }
        self.client_connected(session, true);
        let Some(s) = self.sessions.open.get_mut(&session) else { return };
        if !facts.speaks_version() {
            // The host checks before adopting; a trace or a fuzzer may not.
            self.client_closed(session);
            return self.push(Action::CloseClient { session });
        }
        s.era = Era::Handshake;
        s.era_known = true;
        s.ready = true;
        s.protocol_version = Some(facts.protocol_version.clone());
        s.capabilities = facts.capability_map();
        s.log_level = facts.log_level.as_deref().and_then(Level::parse);
        s.sealed = true;
        if let Some(state) = state {
            self.restore_session_state(session, state);
        }
    }

    /// What an adopted session changed on the replica that held it before:
    /// its log level, and its subscriptions (those its view still serves, up
    /// to the limits), subscribed at the backend here when no session of this
    /// replica was yet.
    fn restore_session_state(&mut self, session: SessionId, state: SessionState) {
        if let Some(level) = state.log_level.as_deref().and_then(Level::parse) {
            if let Some(s) = self.sessions.open.get_mut(&session) {
                s.log_level = Some(level);
            }
        }
        for uri in state.subscriptions.into_iter().take(crate::cluster::MAX_STATE_SUBSCRIPTIONS) {
            if self.view(session).uri(&uri).is_none() {
                continue;
            }
            let first = !self.sessions.subscriptions.get(&uri).is_some_and(|s| !s.is_empty());
            let total: usize = self.sessions.subscriptions.values().map(BTreeSet::len).sum();
            if first && total >= self.config.limits.max_subscriptions as usize {
                break;
            }
            self.sessions.subscriptions.entry(uri.clone()).or_default().insert(session);
            if first {
                self.parts(|p, cx| p.backends.subscribe_backend(cx, &uri));
            }
        }
    }

    /// Reports a sealed session's log level and subscriptions after a change
    /// ([`Action::SessionState`]), for the replica that may adopt it next.
    pub(super) fn session_state_changed(&mut self, session: SessionId) {
        let Some(s) = self.sessions.open.get(&session).filter(|s| s.sealed) else { return };
        let log_level = s.log_level.map(|l| l.as_str().to_string());
        let subscriptions: Vec<String> = self
            .sessions
            .subscriptions
            .iter()
            .filter(|(_, holders)| holders.contains(&session))
            .map(|(uri, _)| uri.clone())
            .take(crate::cluster::MAX_STATE_SUBSCRIPTIONS)
            .collect();
        self.push(Action::SessionState { session, state: SessionState { log_level, subscriptions } });
    }

    /// [`crate::Input::ClientStreamLost`]: what the stream carried is gone with
    /// the replica that held it. The request it answered gets an error, and the
    /// session is told its lists may differ here.
    pub(super) fn client_stream_lost(&mut self, session: SessionId, request: Option<RawId>) {
        let Some(s) = self.sessions.open.get(&session) else { return };
        if s.era != Era::Handshake {
            return;
        }
        // A request still in flight here is not lost: its answer comes.
        let request = request.filter(|id| !s.in_flight.contains(id));
        let ready = s.ready;
        if ready {
            let frame = protocol::notification("notifications/tools/list_changed", None);
            self.push(Action::related(session, request.as_deref(), frame));
        }
        if let Some(id) = request {
            let frame = protocol::error_response(&id, code::INTERNAL_ERROR, ANSWER_LOST, None);
            self.push(Action::SendToClient { session, frame, route: crate::io::ClientRoute::Reply(id) });
        }
    }

    /// [`crate::Input::Drain`]: report not ready now, pace the rest.
    pub(super) fn drain(&mut self) {
        if self.drain.is_some() {
            return;
        }
        self.drain = Some(Drain { began: self.now, accepting: true, done: false });
        self.drain_step();
    }

    /// The deadline of the drain's next step, if one waits.
    pub(super) fn drain_timer(&self) -> Option<(Instant, DrainTimer)> {
        let drain = self.drain.filter(|d| !d.done)?;
        let cluster = self.config.cluster.clone().unwrap_or_default();
        let ms = |ms: u64| drain.began + Duration::from_millis(ms);
        Some(match drain.accepting {
            true => (ms(cluster.drain_delay_ms), DrainTimer::StopAccepting),
            false => (ms(cluster.drain_timeout_ms), DrainTimer::GiveUp),
        })
    }

    /// A drain deadline came due.
    pub(super) fn drain_timer_fired(&mut self, timer: DrainTimer) {
        let Some(drain) = self.drain.as_mut() else { return };
        match timer {
            DrainTimer::StopAccepting => {
                drain.accepting = false;
                self.push(Action::StopAccepting);
                self.drain_step();
            }
            DrainTimer::GiveUp => self.finish_drain(),
        }
    }

    /// After any input while draining: done once nothing is in flight.
    pub(super) fn drain_step(&mut self) {
        let Some(drain) = self.drain else { return };
        if drain.done {
            return;
        }
        let cluster = self.config.cluster.clone().unwrap_or_default();
        if drain.accepting && cluster.drain_delay_ms == 0 {
            if let Some(d) = self.drain.as_mut() {
                d.accepting = false;
            }
            self.push(Action::StopAccepting);
            return self.drain_step();
        }
        if !drain.accepting && self.work_in_flight() == 0 {
            self.finish_drain();
        }
    }

    /// Client requests being served, not counting open `subscriptions/listen`
    /// requests (which end only when their client or the server ends them).
    fn work_in_flight(&self) -> usize {
        self.sessions.open.values().map(|s| s.in_flight.len() - s.listens.len().min(s.in_flight.len())).sum()
    }

    /// The end of a drain: open listens complete, streams end, the host may stop.
    fn finish_drain(&mut self) {
        let Some(drain) = self.drain.as_mut() else { return };
        if drain.done {
            return;
        }
        drain.done = true;
        let listens: Vec<(SessionId, RawId)> = self
            .sessions
            .open
            .iter()
            .flat_map(|(session, s)| s.listens.keys().map(move |id| (*session, id.clone())))
            .collect();
        for (session, id) in listens {
            if self.end_client_listen(session, &id) {
                self.reply(session, &id, "{}");
            }
        }
        self.push(Action::EndClientStreams);
    }

    /// Draining: `/readyz` says not ready.
    pub fn draining(&self) -> bool {
        self.drain.is_some()
    }

    /// The drain is over: the host may stop (its backends, then itself).
    pub fn drained(&self) -> bool {
        self.drain.is_some_and(|d| d.done)
    }
}
