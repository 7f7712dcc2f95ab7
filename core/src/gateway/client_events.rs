//! Events told to clients: each one is kept in a short journal that the
//! `server_events` tool reads by cursor (a model can poll what changed), and sent
//! to handshake-era clients as `notifications/message` (logger `tether`, the
//! event as structured `data`), filtered by the level each client set and
//! rationed per backend so a flapping backend cannot flood a conversation.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::access::SessionView;
use super::backends::Backends;
use super::sessions::Sessions;
use crate::access::Access;
use crate::catalog::Catalog;
use crate::config::Config;
use crate::io::{Action, ClientRoute, Event, ServerName, SessionId, Status};
use crate::protocol::{self, Era};
use crate::time::{Duration, Instant};

/// Events the journal keeps; older ones are reported as missed.
pub(super) const JOURNAL_LEN: usize = 256;
/// A backend's events sent to clients per window, at most...
const NOTIFY_PER_WINDOW: u32 = 20;
/// ...in this window. The rest are counted and the count rides on the next one.
const NOTIFY_WINDOW: Duration = Duration::from_millis(60_000);
/// The level a client gets from when it never set one.
const DEFAULT_LEVEL: Level = Level::Info;

/// The syslog levels of MCP logging, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Level {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl Level {
    const ALL: [(Level, &'static str); 8] = [
        (Level::Debug, "debug"),
        (Level::Info, "info"),
        (Level::Notice, "notice"),
        (Level::Warning, "warning"),
        (Level::Error, "error"),
        (Level::Critical, "critical"),
        (Level::Alert, "alert"),
        (Level::Emergency, "emergency"),
    ];

    /// The level a `logging/setLevel` names, if it is one.
    pub(super) fn parse(name: &str) -> Option<Level> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(l, _)| *l)
    }

    pub(super) fn as_str(self) -> &'static str {
        Self::ALL[self as usize].1
    }

    /// How much an event matters to someone using the backend's tools.
    fn of(event: &Event) -> Level {
        match event {
            Event::ServerStatusChanged { to, .. } => match to {
                Status::Online | Status::Dormant | Status::Disconnected => Level::Info,
                Status::Offline | Status::Error => Level::Warning,
                Status::RequiresReauth | Status::PermanentlyFailed => Level::Error,
                Status::Provisioning | Status::Connecting | Status::DiscoveringTools | Status::Restarting => {
                    Level::Debug
                }
            },
            Event::ServerDisconnected { intentional: true, .. } => Level::Debug,
            Event::ServerDisconnected { intentional: false, .. } => Level::Warning,
            Event::ServerReconnecting { .. } => Level::Info,
            Event::ServerReconnected { .. } => Level::Notice,
            Event::ServerHealthDegraded { .. } | Event::CircuitOpened { .. } => Level::Warning,
            Event::ServerHealthRestored { .. } | Event::CircuitClosed { .. } => Level::Notice,
            Event::ServerPermanentlyFailed { .. } => Level::Error,
            Event::ToolsDiscovered { .. } | Event::ProtocolViolation { .. } => Level::Debug,
            Event::NameConflict { .. } | Event::CatalogCut { .. } => Level::Warning,
        }
    }
}

/// One journaled event.
#[derive(Clone, Debug)]
pub(super) struct Journaled {
    pub seq: u64,
    pub at: Instant,
    pub event: Event,
}

/// The last [`JOURNAL_LEN`] events, numbered from 1.
#[derive(Clone, Debug, Default)]
pub(super) struct Journal {
    entries: VecDeque<Journaled>,
    next_seq: u64,
}

impl Journal {
    fn push(&mut self, at: Instant, event: Event) -> u64 {
        self.next_seq += 1;
        if self.entries.len() == JOURNAL_LEN {
            self.entries.pop_front();
        }
        self.entries.push_back(Journaled { seq: self.next_seq, at, event });
        self.next_seq
    }

    /// The number the next event will get: the cursor for "from now on".
    pub(super) fn next_seq(&self) -> u64 {
        self.next_seq + 1
    }

    /// Events numbered `since` or later (oldest first), and how many of those
    /// are gone from the journal already.
    pub(super) fn since(&self, since: u64) -> (impl Iterator<Item = &Journaled>, u64) {
        let oldest = self.entries.front().map_or(self.next_seq + 1, |e| e.seq);
        let missed = oldest.saturating_sub(since.max(1));
        (self.entries.iter().filter(move |e| e.seq >= since), missed)
    }
}

/// A backend's share of client notifications in the current window.
#[derive(Clone, Debug)]
pub(super) struct Ration {
    window_start: Instant,
    sent: u32,
    suppressed: u32,
}

/// An event as JSON: its serde form (`{"event": "server_status_changed", ...}`)
/// plus its number and time.
pub(super) fn event_json(e: &Journaled) -> Value {
    let mut v = serde_json::to_value(&e.event).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("seq".into(), Value::from(e.seq));
        m.insert("at_ms".into(), Value::from(e.at.as_millis()));
    }
    v
}

/// What clients are told of backends' events: the journal of the last events
/// (for the `server_events` tool) and each backend's share of notifications.
#[derive(Clone, Default)]
pub(super) struct Notices {
    pub journal: Journal,
    rations: Rations,
}

/// Who may be told: the sessions, by what they see of the catalog under the
/// configuration's scopes.
#[derive(Clone, Copy)]
pub(super) struct Audience<'a> {
    pub config: &'a Config,
    pub sessions: &'a Sessions,
    pub catalog: &'a Catalog,
}

impl Audience<'_> {
    fn view(&self, session: SessionId) -> SessionView<'_> {
        let held = self.sessions.open.get(&session).and_then(|s| s.scopes.as_deref());
        SessionView::new(Access::new(&self.config.scopes, held), self.catalog)
    }
}

impl Notices {
    /// Journals an emitted (already redacted) event and tells the clients.
    pub(super) fn tell(&mut self, event: &Event, now: Instant, to: Audience<'_>, actions: &mut VecDeque<Action>) {
        let seq = self.journal.push(now, event.clone());
        if !to.config.client_events {
            return;
        }
        let level = Level::of(event);
        let listening: Vec<SessionId> = to
            .sessions
            .open
            .iter()
            .filter(|(_, s)| s.ready && s.era == Era::Handshake && level >= s.log_level.unwrap_or(DEFAULT_LEVEL))
            .map(|(id, _)| *id)
            .collect();
        // A session told nothing of a server it may not see.
        let listening: Vec<SessionId> =
            listening.into_iter().filter(|id| to.view(*id).sees_server(event.server())).collect();
        if listening.is_empty() {
            return;
        }
        let Some(suppressed) = self.rations.take(event.server(), now) else { return };
        let journaled = Journaled { seq, at: now, event: event.clone() };
        let mut data = match event_json(&journaled) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if suppressed > 0 {
            data.insert("suppressed_before".into(), Value::from(suppressed));
            let hint = "more events of this backend were not sent; the server_events tool lists them";
            data.insert("note".into(), Value::String(String::from(hint)));
        }
        let params = serde_json::json!({"level": level.as_str(), "logger": "tether", "data": data});
        let params = serde_json::to_string(&params).unwrap_or_default();
        let frame = protocol::notification("notifications/message", Some(&params));
        for session in listening {
            let frame = frame.clone();
            actions.push_back(Action::SendToClient { session, frame, route: ClientRoute::Session });
        }
    }

    /// A `tools/list` went to `session` while servers it may see were still
    /// starting for the first time (the list waits `aggregation_deadline_ms` at
    /// most): it is told which, and that `list_changed` follows when their tools
    /// arrive, so a short list explains itself (a cold `npx` start can take half
    /// a minute). Handshake-era sessions that take `info`, with client events on.
    pub(super) fn servers_starting(
        &self,
        session: SessionId,
        backends: &Backends,
        to: Audience<'_>,
        actions: &mut VecDeque<Action>,
    ) {
        if !to.config.client_events {
            return;
        }
        let Some(s) = to.sessions.open.get(&session) else { return };
        if !s.ready || s.era != Era::Handshake || Level::Info < s.log_level.unwrap_or(DEFAULT_LEVEL) {
            return;
        }
        let starting: Vec<String> = backends
            .iter()
            .filter(|(_, b)| !b.catalog_discovered && !b.config.disabled && b.sup.status().is_starting())
            .filter(|(_, b)| b.sup.status() != crate::io::Status::Provisioning || !b.config.lazy)
            .map(|(name, _)| String::from(&**name))
            .filter(|name| to.view(session).sees_server(name))
            .collect();
        if starting.is_empty() {
            return;
        }
        let message = alloc::format!(
            "{} still starting ({}): their tools are not in this list yet; notifications/tools/list_changed follows when they arrive",
            if starting.len() == 1 { "1 server is".into() } else { alloc::format!("{} servers are", starting.len()) },
            starting.join(", ")
        );
        let data = serde_json::json!({"event": "servers_starting", "servers": starting, "message": message});
        let params = serde_json::json!({"level": Level::Info.as_str(), "logger": "tether", "data": data});
        let params = serde_json::to_string(&params).unwrap_or_default();
        let frame = protocol::notification("notifications/message", Some(&params));
        actions.push_back(Action::SendToClient { session, frame, route: ClientRoute::Session });
    }
}

/// Each backend's share of event notifications to clients, by name.
#[derive(Clone, Debug, Default)]
pub(super) struct Rations(BTreeMap<ServerName, Ration>);

impl Notices {
    /// Clients and the host are told of `event` (already noted at its backend).
    pub(super) fn announce(&mut self, event: Event, now: Instant, to: Audience<'_>, actions: &mut VecDeque<Action>) {
        self.tell(&event, now, to, actions);
        actions.push_back(Action::Emit { event });
    }

    /// A backend that is gone takes its share with it.
    pub(super) fn forget(&mut self, server: &str) {
        self.rations.forget(server);
    }
}

impl Rations {
    /// Whether one more of `server`'s events may go to clients at `now`;
    /// `Some(n)`: yes, and `n` were held back since the last one that went.
    fn take(&mut self, server: &ServerName, now: Instant) -> Option<u32> {
        let r = self.0.entry(server.clone()).or_insert(Ration { window_start: now, sent: 0, suppressed: 0 });
        if now.saturating_since(r.window_start) >= NOTIFY_WINDOW {
            r.window_start = now;
            r.sent = 0;
        }
        if r.sent >= NOTIFY_PER_WINDOW {
            r.suppressed += 1;
            return None;
        }
        r.sent += 1;
        Some(core::mem::take(&mut r.suppressed))
    }

    /// Rations of backends that are gone are dropped with them.
    pub(super) fn forget(&mut self, server: &str) {
        self.0.remove(server);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_gets_its_share_per_window_and_the_next_one_out_counts_what_was_held() {
        let mut rations = Rations::default();
        let (a, b): (ServerName, ServerName) = ("a".into(), "b".into());
        let start = Instant::from_millis(0);
        for _ in 0..NOTIFY_PER_WINDOW {
            assert_eq!(rations.take(&a, start), Some(0));
        }
        assert_eq!(rations.take(&a, start), None);
        assert_eq!(rations.take(&a, start), None);
        assert_eq!(rations.take(&b, start), Some(0), "each backend has its own share");
        let next = start + NOTIFY_WINDOW;
        assert_eq!(rations.take(&a, next), Some(2), "the first of the next window says two were held");
        assert_eq!(rations.take(&a, next), Some(0));
        rations.forget("a");
        assert_eq!(rations.take(&a, next), Some(0), "a backend added back starts afresh");
    }

    #[test]
    fn an_event_is_journaled_and_told_to_ready_handshake_sessions_that_see_its_server() {
        use crate::access::{ScopeGrant, ScopeMap};
        use crate::gateway::sessions::Session;
        let mut config = Config { client_events: true, ..Config::default() };
        let mut scopes = ScopeMap::new();
        scopes.insert("a".into(), ScopeGrant { servers: alloc::vec!["a".into()], tools: alloc::vec![] });
        config.scopes = scopes;
        let catalog = Catalog::new("__");
        let mut sessions = Sessions::default();
        let ready = |scopes: Option<&[&str]>, era| {
            let mut s = Session::new(true, Instant::ZERO);
            s.ready = true;
            s.era = era;
            s.scopes = scopes.map(|l| l.iter().map(|x| String::from(*x)).collect());
            s
        };
        sessions.open.insert(SessionId(1), ready(None, Era::Handshake));
        sessions.open.insert(SessionId(2), ready(Some(&["b"]), Era::Handshake));
        sessions.open.insert(SessionId(3), ready(None, Era::Stateless));
        let mut notices = Notices::default();
        let mut actions = VecDeque::new();
        let to = Audience { config: &config, sessions: &sessions, catalog: &catalog };
        let event = Event::ServerDisconnected { server: "a".into(), intentional: false };
        notices.announce(event, Instant::ZERO, to, &mut actions);
        let told: Vec<SessionId> = actions
            .iter()
            .filter_map(|a| match a {
                Action::SendToClient { session, .. } => Some(*session),
                _ => None,
            })
            .collect();
        assert_eq!(told, [SessionId(1)], "not a session that cannot see it, nor a stateless one");
        assert!(matches!(actions.back(), Some(Action::Emit { .. })), "the host hears of it last");
        assert_eq!(notices.journal.next_seq(), 2, "journaled whoever was told");
    }
}
