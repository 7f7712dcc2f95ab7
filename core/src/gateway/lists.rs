//! Lists clients ask for: answered from the catalog, parked while discovery
//! may still change them (until the aggregation deadline), and `list_changed`
//! sent when what a session may see changed.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::calls::{Parked, ParkedList};
use super::own_tools::{self, OwnTool};
use super::tasks::TaskRules;
use super::Gateway;
use crate::catalog::ListKind;
use crate::config::Mode;
use crate::io::{Action, RawId, SessionId};
use crate::protocol::{self, code, Era};

use crate::time::Duration;
impl Gateway {
    pub(super) fn list(&mut self, session: SessionId, id: RawId, kind: ListKind, cursor: Option<String>) {
        if self.backends.connection_pending(self.now, self.config.policy.aggregation_deadline_ms) {
            let deadline = self.now + Duration::from_millis(self.config.policy.aggregation_deadline_ms);
            self.router.parked_lists.push(ParkedList { session, id, what: Parked::List { kind, cursor }, deadline });
            return;
        }
        self.answer_list(session, &id, kind, cursor.as_deref());
    }

    /// Answers parked list requests once no backend is starting, or on deadline.
    pub(super) fn answer_parked_lists(&mut self, deadline_only: bool) {
        if self.router.parked_lists.is_empty() {
            return;
        }
        let now = self.now;
        let policy = &self.config.policy;
        let lists_free = !deadline_only && !self.backends.connection_pending(self.now, policy.aggregation_deadline_ms);
        let names_free = !deadline_only && !self.backends.first_discovery_pending(self.now, policy.connect_timeout_ms);
        let (due, keep): (Vec<ParkedList>, Vec<ParkedList>) = self.router.parked_lists.drain(..).partition(|p| {
            let free = match p.what {
                Parked::List { .. } => lists_free,
                Parked::Named { .. } => names_free,
            };
            free || p.deadline <= now
        });
        self.router.parked_lists = keep;
        for p in due {
            match p.what {
                Parked::List { kind, cursor } => self.answer_list(p.session, &p.id, kind, cursor.as_deref()),
                Parked::Named { method, params, kind } => {
                    self.route_named(p.session, p.id, method, Some(&params), kind, false);
                }
            }
        }
    }

    fn answer_list(&mut self, session: SessionId, id: &str, kind: ListKind, cursor: Option<&str>) {
        let page = if kind == ListKind::Tools && self.config.mode == Mode::Meta {
            // Meta mode: tether's own tools only, one page.
            match cursor {
                None => Ok(format!(r#"{{"tools":[{}]}}"#, OwnTool::definitions(&self.config).join(","))),
                Some(_) => Err(()),
            }
        } else {
            let backends = &self.backends;
            let view = self.view(session);
            let visible = |s: &str, e: &_| backends.get(s).is_some_and(|b| b.is_visible()) && view.grants(kind, s, e);
            let size = self.config.limits.page_size as usize;
            let rules = TaskRules {
                sessions: &self.sessions,
                backends: &self.backends,
                tasks: &self.config.tasks,
                now: self.now,
            };
            let page = match rules.listed_support(session, kind) {
                Some(edit) => self.catalog.page_edited(kind, cursor, size, visible, edit),
                None => self.catalog.page(kind, cursor, size, visible),
            };
            match page {
                // Flat mode with admin tools: they lead the first page.
                Ok(page)
                    if kind == ListKind::Tools && cursor.is_none() && !OwnTool::served(&self.config).is_empty() =>
                {
                    let own = OwnTool::definitions(&self.config).join(",");
                    let rest = page.strip_prefix(r#"{"tools":["#).unwrap_or("]}");
                    let comma = if rest.starts_with(']') { "" } else { "," };
                    let page = format!(r#"{{"tools":[{own}{comma}{rest}"#);
                    // An unprefixed backend's tool of the same name is shadowed.
                    let shadowed =
                        OwnTool::served(&self.config).iter().any(|t| self.catalog.resolve_tool(t.name()).is_some());
                    Ok(if shadowed { own_tools::without_shadowed(&page) } else { page })
                }
                other => other,
            }
        };
        let hash = self.fingerprints.visible(&self.catalog, &self.backends, &self.config)[kind as usize];
        let own = if self.view(session).restricted() {
            self.fingerprints.of_session(
                self.sessions.view(session, &self.config, &self.catalog),
                &self.catalog,
                &self.backends,
                &self.config,
            )[kind as usize]
        } else {
            hash
        };
        if let Some(s) = self.sessions.open.get_mut(&session) {
            s.seen[kind as usize] = hash;
            s.seen_own[kind as usize] = own;
        }
        let stateless = self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless);
        match page {
            Ok(result) if stateless => {
                let hint = self.backends.cache_hint(kind);
                // Where tokens' scopes choose what is seen, a list is not everyone's.
                let shared = self.config.scopes.is_empty();
                let result = protocol::cacheable_result(&result, hint, shared);
                self.reply(session, id, result.as_deref().unwrap_or("{}"))
            }
            Ok(result) => {
                self.reply(session, id, &result);
                if kind == ListKind::Tools && cursor.is_none() {
                    let to = super::client_events::Audience {
                        config: &self.config,
                        sessions: &self.sessions,
                        catalog: &self.catalog,
                    };
                    self.notices.servers_starting(session, &self.backends, to, &mut self.actions);
                }
            }
            Err(()) => self.reply_error(session, id, code::INVALID_PARAMS, "invalid cursor", None),
        }
    }

    // ----- routing -----

    /// Sends `list_changed` to each ready session whose last view of a list differs
    /// from what it would see now, and only then; a stateless session gets them
    /// on the listens that asked for them. At most one per session per
    /// `list_changed_debounce_ms`: a change inside the window waits for its end,
    /// and goes only if the list still differs from what the session last saw.
    pub(super) fn announce_list_changes(&mut self) {
        let hashes = self.fingerprints.visible(&self.catalog, &self.backends, &self.config);
        // Nearly every input changes no list: nothing to announce to anyone.
        if self.sessions.open.values().all(|s| s.seen == hashes) {
            return;
        }
        // A restricted session whose own view did not change has nothing to be told.
        let restricted: Vec<SessionId> = self
            .sessions
            .open
            .iter()
            .filter(|(id, s)| s.seen != hashes && s.scopes.is_some() && self.view(**id).restricted())
            .map(|(id, _)| *id)
            .collect();
        let mut own_views = Vec::with_capacity(restricted.len());
        for id in restricted {
            own_views.push((
                id,
                self.fingerprints.of_session(
                    self.sessions.view(id, &self.config, &self.catalog),
                    &self.catalog,
                    &self.backends,
                    &self.config,
                ),
            ));
        }
        for (id, own) in own_views {
            let s = self.sessions.open.get_mut(&id).expect("listed");
            for kind in ListKind::ALL {
                let k = kind as usize;
                if s.seen[k] != hashes[k] && s.seen_own[k] == own[k] {
                    s.seen[k] = hashes[k];
                }
            }
        }
        let mut frames = Vec::new();
        let mut listening = Vec::new();
        let parked = &self.router.parked_lists;
        let (now, window) = (self.now, Duration::from_millis(self.config.list_changed_debounce_ms));
        for (id, session) in self.sessions.open.iter_mut().filter(|(_, s)| s.ready || !s.listens.is_empty()) {
            let mut changed: Vec<ListKind> = Vec::new();
            for kind in ListKind::ALL {
                // A session waiting on this list will see the new one in its answer.
                let waiting = parked.iter().any(|p| p.session == *id && p.is_list(kind));
                if !waiting && session.seen[kind as usize] != hashes[kind as usize] {
                    changed.push(kind);
                }
            }
            if changed.is_empty() {
                continue;
            }
            if window > Duration::ZERO {
                match session.quiet_until {
                    Some(until) if now < until => {
                        session.list_changed_held = true;
                        continue;
                    }
                    _ => {
                        session.quiet_until = Some(now + window);
                        session.list_changed_held = false;
                    }
                }
            }
            for kind in &changed {
                session.seen[*kind as usize] = hashes[*kind as usize];
            }
            if session.era == Era::Stateless {
                listening.push((*id, changed));
                continue;
            }
            let mut sent: Vec<&'static str> = Vec::new();
            for kind in changed {
                if !sent.contains(&kind.list_changed()) {
                    sent.push(kind.list_changed());
                    frames.push((*id, protocol::notification(kind.list_changed(), None)));
                }
            }
        }
        for (session, frame) in frames {
            if self.view(session).restricted() {
                // What it is told of is what it sees now.
                let own = self.fingerprints.of_session(
                    self.sessions.view(session, &self.config, &self.catalog),
                    &self.catalog,
                    &self.backends,
                    &self.config,
                );
                if let Some(s) = self.sessions.open.get_mut(&session) {
                    s.seen_own = own;
                }
            }
            self.push(Action::to_session(session, frame));
        }
        for (session, kinds) in listening {
            if self.view(session).restricted() {
                let own = self.fingerprints.of_session(
                    self.sessions.view(session, &self.config, &self.catalog),
                    &self.catalog,
                    &self.backends,
                    &self.config,
                );
                if let Some(s) = self.sessions.open.get_mut(&session) {
                    s.seen_own = own;
                }
            }
            self.sessions.announce_to_listens(session, &kinds, &mut self.actions);
        }
    }
}
