//! Client sessions: each client's state, the sessions refused or closing, and
//! resource subscriptions. Owns its deadlines: idle expiry and held
//! `list_changed` notifications.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::client_events::Level;
use super::eras::listens::ClientListen;
use crate::config::Limits;
use crate::io::{RawId, SessionId};
use crate::protocol::{self, code, Era};
use crate::time::{Duration, Instant};

/// Every client session and what belongs to sessions as a whole.
#[derive(Clone, Default)]
pub(super) struct Sessions {
    /// Open sessions, by id.
    pub open: BTreeMap<SessionId, Session>,
    /// HTTP sessions refused for the session limit, until their first request is
    /// answered with an error that says so (bounded).
    pub refused: VecDeque<SessionId>,
    /// Per-request sessions answered during this input, closed when it settles.
    pub closing: Vec<SessionId>,
    /// Served resource URI -> sessions subscribed.
    pub subscriptions: BTreeMap<String, BTreeSet<SessionId>>,
}

/// A session deadline that came due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SessionTimer {
    /// A held `list_changed` may go now.
    ListChangedHeld(SessionId),
    /// An idle session expires.
    Idle(SessionId),
}

impl Sessions {
    /// A client's request as a call to forward, with what its session declared
    /// for this request (a stateless client's capabilities and log level).
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)] // one request's facts; a struct would only rename them
    pub(super) fn call(
        &mut self,
        now: Instant,
        session: SessionId,
        id: RawId,
        method: &'static str,
        params: super::calls::Forward,
        progress: Option<Value>,
        retry_safe: bool,
        shape: super::calls::Shape,
    ) -> super::calls::ClientCall {
        super::calls::ClientCall {
            session,
            id,
            method,
            params,
            progress,
            last_progress: None,
            retry_safe,
            retries: 0,
            resent: false,
            probe: false,
            shape,
            created: now,
            caps: self.open.get_mut(&session).and_then(|s| s.request_caps.take()),
            log_level: self.open.get_mut(&session).and_then(|s| s.request_log_level.take()),
            awaiting_input: None,
            wait_epoch: 0,
            auth_retried: false,
            task_window: None,
            task: None,
        }
    }

    /// A per-request session closes once its request is answered (at the end of
    /// this input, after the answer is out).
    pub(super) fn answered(&mut self, session: SessionId) {
        if self.open.get(&session).is_some_and(|s| s.per_request()) && !self.closing.contains(&session) {
            self.closing.push(session);
        }
    }

    /// Idle time counts from the last exchange, so a long call is not idle time.
    pub(super) fn touch(&mut self, session: SessionId, now: Instant) {
        if let Some(s) = self.open.get_mut(&session) {
            s.last_active = now;
        }
    }

    /// The identity `session` authenticated as, when the transport checks tokens.
    pub(super) fn principal(&self, session: SessionId) -> Option<&str> {
        self.open.get(&session).and_then(|s| s.principal.as_deref())
    }

    /// Every session deadline, in the order they fire when several are due.
    pub(super) fn timers(&self, idle_ms: u32) -> impl Iterator<Item = (Instant, SessionTimer)> + '_ {
        let held = self
            .open
            .iter()
            .filter(|(_, s)| s.list_changed_held)
            .filter_map(|(id, s)| Some((s.quiet_until?, SessionTimer::ListChangedHeld(*id))));
        let idle = self.open.iter().filter_map(move |(id, s)| Some((s.expiry(idle_ms)?, SessionTimer::Idle(*id))));
        held.chain(idle)
    }

    /// The session to close to make room for another: the longest idle one (an
    /// HTTP session with nothing in flight, as for idle expiry) of `among`.
    pub(super) fn longest_idle(&self, among: Among<'_>) -> Option<SessionId> {
        let idle = |principal: Option<&str>| {
            self.open
                .iter()
                .filter(move |(_, s)| {
                    s.principal.as_deref() == principal && s.era_known && s.idle() && !s.per_request()
                })
                .min_by_key(|(id, s)| (s.last_active, id.0))
                .map(|(id, _)| *id)
        };
        match among {
            Among::Identity(principal) => idle(Some(principal)),
            Among::Largest => {
                // Whoever holds the most sessions gives one up first.
                let mut held: BTreeMap<Option<&str>, usize> = BTreeMap::new();
                for s in self.open.values() {
                    *held.entry(s.principal.as_deref()).or_default() += 1;
                }
                let mut holders: Vec<(Option<&str>, usize)> = held.into_iter().collect();
                holders.sort_by_key(|h| core::cmp::Reverse(h.1));
                holders.into_iter().find_map(|(principal, _)| idle(principal))
            }
        }
    }

    /// Handshake-era sessions `principal` holds now, besides `except`.
    pub(super) fn held_by(&self, principal: &str, except: SessionId) -> usize {
        self.open
            .iter()
            .filter(|(id, s)| **id != except && s.principal.as_deref() == Some(principal) && !s.per_request())
            .count()
    }

    /// Checks the sessions' own bounds.
    pub(super) fn check_invariants(&self, limits: &Limits) -> Result<(), String> {
        if self.open.len() > limits.max_sessions as usize {
            return Err("too many sessions".into());
        }
        for (sid, s) in &self.open {
            if s.in_flight.len() > limits.max_in_flight_per_session as usize {
                return Err(format!("session {} over its in-flight bound", sid.0));
            }
        }
        Ok(())
    }
}

/// Whose sessions [`Sessions::longest_idle`] chooses among.
#[derive(Clone, Copy, Debug)]
pub(super) enum Among<'a> {
    /// Those of one identity.
    Identity(&'a str),
    /// Those of the identity (or the sessions without one) holding the most.
    Largest,
}

/// One client session.
#[derive(Clone, Debug)]
pub(super) struct Session {
    /// Sent `notifications/initialized`: may receive notifications and requests.
    pub ready: bool,
    pub era: Era,
    /// The era was decided (by the first request: `initialize`, or one with
    /// stateless `_meta`).
    pub era_known: bool,
    pub protocol_version: Option<String>,
    /// Client capabilities announced at `initialize`.
    pub capabilities: Map<String, Value>,
    /// Stateless sessions: the capabilities of the request being routed, taken
    /// by the call it becomes.
    pub request_caps: Option<Map<String, Value>>,
    /// Stateless sessions: the log level the request being routed asked for.
    pub request_log_level: Option<String>,
    /// Ids of this session's requests not yet answered, raw JSON.
    pub in_flight: BTreeSet<RawId>,
    /// Fingerprint of each list as this session last saw or was told of it.
    pub seen: [u64; 4],
    /// The OAuth scopes its token carries; `None`: not restricted (see `access.rs`).
    pub scopes: Option<Vec<String>>,
    /// Who holds its token, when the transport checks tokens: the tasks it
    /// creates are bound to it.
    pub principal: Option<String>,
    /// Restricted sessions: the fingerprint of their own view of each list when
    /// they last saw it (`seen` then says which catalog that view was taken from).
    pub seen_own: [u64; 4],
    /// Open `subscriptions/listen` requests of a stateless session, by id.
    pub listens: BTreeMap<RawId, ClientListen>,
    /// Closed when idle (HTTP sessions).
    pub expires: bool,
    /// Its id is sealed (issued or adopted here): what it changes later is
    /// reported for other replicas ([`crate::Action::SessionState`]).
    pub sealed: bool,
    /// When its client last sent a message.
    pub last_active: Instant,
    /// The level its `logging/setLevel` asked for (events below it are not sent).
    pub log_level: Option<Level>,
    /// No `list_changed` goes to it before this (see `list_changed_debounce_ms`).
    pub quiet_until: Option<Instant>,
    /// A `list_changed` waits for `quiet_until`.
    pub list_changed_held: bool,
}

impl Session {
    /// Decides a session's era from its first request, and checks every request
    /// of a stateless session on its own: `_meta` present and valid, and not a
    /// method that revision removed.
    pub(super) fn check_era(
        &mut self,
        method: &str,
        params: Option<&str>,
    ) -> Result<(), (i64, String, Option<String>)> {
        let s = self;
        if s.era_known && s.era == Era::Handshake {
            return Ok(());
        }
        match protocol::request_era(params) {
            protocol::RequestEra::Refused(code, message, data) => Err((code, message, data)),
            protocol::RequestEra::Handshake if s.era_known => {
                let msg = format!(
                    "missing _meta[\"{}\"]: this client speaks {}, where every request carries it",
                    protocol::meta::PROTOCOL_VERSION,
                    protocol::STATELESS_VERSIONS[0]
                );
                Err((code::INVALID_PARAMS, msg, None))
            }
            protocol::RequestEra::Handshake if method == "initialize" => {
                s.era_known = true;
                Ok(())
            }
            // An HTTP session only opens with `initialize` or for one stateless
            // request: this is a request of neither era.
            protocol::RequestEra::Handshake if s.expires => {
                let msg = format!(
                    "missing _meta[\"{}\"]: without a session, requests must carry it ({}); or initialize first",
                    protocol::meta::PROTOCOL_VERSION,
                    protocol::STATELESS_VERSIONS[0]
                );
                Err((code::INVALID_PARAMS, msg, None))
            }
            protocol::RequestEra::Handshake => Ok(()),
            protocol::RequestEra::Stateless { version, capabilities, log_level } => {
                s.request_log_level = log_level;
                s.era = Era::Stateless;
                s.era_known = true;
                s.protocol_version = Some(version.to_string());
                s.request_caps = serde_json::from_str(&capabilities).ok();
                const REMOVED: [&str; 5] =
                    ["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"];
                if REMOVED.contains(&method) {
                    let msg = format!("method not found: {method} (not part of {version})");
                    return Err((code::METHOD_NOT_FOUND, msg, None));
                }
                Ok(())
            }
        }
    }

    pub(super) fn new(expires: bool, now: Instant) -> Self {
        Session {
            expires,
            sealed: false,
            last_active: now,
            ready: false,
            era: Era::Handshake,
            era_known: false,
            protocol_version: None,
            capabilities: Map::new(),
            request_caps: None,
            request_log_level: None,
            in_flight: BTreeSet::new(),
            listens: BTreeMap::new(),
            seen: [0; 4],
            scopes: None,
            principal: None,
            seen_own: [0; 4],
            log_level: None,
            quiet_until: None,
            list_changed_held: false,
        }
    }

    /// When this session expires if idle: never while it has requests in flight.
    pub(super) fn expiry(&self, idle_ms: u32) -> Option<Instant> {
        (self.expires && self.in_flight.is_empty())
            .then(|| self.last_active + Duration::from_millis(u64::from(idle_ms)))
    }

    /// An HTTP session with nothing in flight or listening: closing it loses
    /// nothing its client waits for (it opens another when it needs one).
    pub(super) fn idle(&self) -> bool {
        self.expires && self.in_flight.is_empty() && self.listens.is_empty()
    }

    /// A stateless-era session over HTTP: it serves one request and closes with
    /// its answer (the revision has no sessions; the host opens one per POST).
    pub(super) fn per_request(&self) -> bool {
        self.expires && self.era == Era::Stateless
    }

    /// Whether the client announced a capability (`sampling`, `elicitation`, `roots`).
    pub(super) fn supports(&self, capability: &str) -> bool {
        self.capabilities.get(capability).is_some_and(|v| !v.is_null())
    }
}

#[cfg(test)]
mod tests;
