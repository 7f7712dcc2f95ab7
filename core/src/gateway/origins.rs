//! Whom a backend's request is for: a handshake-era backend asks its client
//! (sampling, elicitation, roots) on a connection shared by every session, so
//! the request goes to the session of the call it names, of its newest call,
//! or, when no call made it, to a ready session that can answer it. Read-only
//! answers over the open calls and the sessions.

use super::calls::CallKind;
use super::router::Router;
use super::sessions::Sessions;
use crate::io::{RawId, SessionId};
use crate::protocol::Era;

/// The open calls and the sessions, as asked about a backend's request.
#[derive(Clone, Copy)]
pub(super) struct Origins<'a> {
    pub router: &'a Router,
    pub sessions: &'a Sessions,
}

impl<'a> Origins<'a> {
    /// The open calls of `router` and the `sessions`.
    pub(super) fn new(router: &'a Router, sessions: &'a Sessions) -> Self {
        Origins { router, sessions }
    }

    /// The session to ask, and the client call it is asked for: the latest call in
    /// flight on this backend, else any ready session that supports the capability.
    pub(super) fn of_server(&self, server: &str, capability: &str) -> Option<(SessionId, Option<RawId>)> {
        let supports = |s: &SessionId| self.sessions.open.get(s).is_some_and(|s| s.supports(capability));
        match self.latest_call(server, None) {
            Some((s, id)) if supports(&s) => Some((s, Some(id))),
            Some(_) => None,
            None => self.callless(capability),
        }
    }

    /// The session to ask a request no client call made: a ready one that
    /// supports `capability`, and not one of a token's holders (nobody asked on
    /// their behalf).
    pub(super) fn callless(&self, capability: &str) -> Option<(SessionId, Option<RawId>)> {
        let supports = |s: &SessionId| self.sessions.open.get(s).is_some_and(|s| s.supports(capability));
        self.sessions
            .open
            .iter()
            .find(|(id, s)| s.ready && supports(id) && s.scopes.is_none())
            .map(|(id, _)| (*id, None))
    }

    /// The session of client call `call` and the call's own id, if that session
    /// supports `capability`.
    pub(super) fn of_call(&self, call: u64, capability: &str) -> Option<(SessionId, Option<RawId>)> {
        let CallKind::Client(cc) = &self.router.calls.get(&call)?.kind else { return None };
        let supports = self.sessions.open.get(&cc.session).is_some_and(|s| s.supports(capability));
        supports.then(|| (cc.session, Some(cc.id.clone())))
    }

    /// Whether the client calls in flight on `server` come from more than one
    /// session while any of them holds OAuth scopes (tokens mean several people).
    pub(super) fn ambiguous(&self, server: &str) -> bool {
        let mut sessions = self.router.calls.values().filter(|c| &*c.server == server).filter_map(|c| match &c.kind {
            CallKind::Client(cc) => Some(cc.session),
            _ => None,
        });
        let Some(first) = sessions.next() else { return false };
        let mut others = sessions.filter(|s| *s != first).peekable();
        if others.peek().is_none() {
            return false;
        }
        let holds_token = |s: SessionId| self.sessions.open.get(&s).is_some_and(|s| s.scopes.is_some());
        holds_token(first) || others.any(holds_token)
    }

    /// The newest client call in flight on `server` (from `session`, if given): its session and id.
    pub(super) fn latest_call(&self, server: &str, session: Option<SessionId>) -> Option<(SessionId, RawId)> {
        self.router.calls.values().rev().filter(|c| &*c.server == server).find_map(|c| match &c.kind {
            CallKind::Client(cc) if session.map_or(true, |s| s == cc.session) => Some((cc.session, cc.id.clone())),
            _ => None,
        })
    }
    /// Whether client call `call` is a stateless client's (or waits for its
    /// input): a backend request for it is asked through `input_required`.
    pub(super) fn is_stateless_call(&self, call: u64) -> bool {
        let Some(CallKind::Client(cc)) = self.router.calls.get(&call).map(|c| &c.kind) else { return false };
        cc.awaiting_input.is_some() || self.sessions.open.get(&cc.session).is_some_and(|s| s.era == Era::Stateless)
    }
}

#[cfg(test)]
mod tests;
