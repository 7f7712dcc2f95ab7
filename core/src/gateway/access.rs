//! Each session's view by its OAuth scopes (see [`crate::access`]): the scopes
//! the transport reports, the items a session may see and call, and the
//! fingerprints of its own view, so it is told of list changes it can see and
//! of no other.

use alloc::string::String;
use alloc::vec::Vec;

use super::Gateway;
use crate::access::Access;
use crate::catalog::{Catalog, Entry, ListKind, Resolved};
use crate::io::SessionId;

/// Scopes kept per session: a token listing more is cut here (a mapping that
/// needs more than this many scopes of one token is not a real one).
const MAX_SCOPES: usize = 256;

impl Gateway {
    /// `ClientAccess`: the session now holds `scopes`. When that changes what it
    /// sees, it is told as for any other change of its lists.
    /// A session's principal never changes once known (the listener refuses a
    /// session's requests from another identity).
    pub(super) fn client_access(&mut self, session: SessionId, mut scopes: Vec<String>, principal: Option<String>) {
        scopes.truncate(MAX_SCOPES);
        scopes.sort();
        scopes.dedup();
        let Some(s) = self.sessions.open.get_mut(&session) else { return };
        if s.principal.is_none() {
            s.principal = principal;
        }
        if s.scopes.as_ref() == Some(&scopes) {
            return;
        }
        let first = s.scopes.is_none();
        s.scopes = Some(scopes);
        if first {
            // Before its handshake, or as it is adopted from another replica
            // (whose lists it saw are not known here): what it sees counts from now.
            self.fingerprints.mark_seen(&mut self.sessions, session, &self.catalog, &self.backends, &self.config);
        } else {
            self.access_changed(&[session]);
        }
    }

    /// What `sessions` may see changed (their scopes, or the mapping): their
    /// views are compared again at the next announcement, and the resource
    /// subscriptions they may no longer hold are dropped (at the backend too,
    /// when they were the last subscribers).
    pub(super) fn access_changed(&mut self, sessions: &[SessionId]) {
        let hashes = self.fingerprints.visible(&self.catalog, &self.backends, &self.config);
        for id in sessions {
            if let Some(s) = self.sessions.open.get_mut(id) {
                s.seen = hashes.map(|h| !h);
            }
        }
        let mut lost: Vec<(String, SessionId)> = Vec::new();
        for (uri, holders) in &self.sessions.subscriptions {
            for id in holders.iter().filter(|id| sessions.contains(id)) {
                if self.view(*id).uri(uri).is_none() {
                    lost.push((uri.clone(), *id));
                }
            }
        }
        for (uri, id) in lost {
            let Some(holders) = self.sessions.subscriptions.get_mut(&uri) else { continue };
            holders.remove(&id);
            if holders.is_empty() {
                self.sessions.subscriptions.remove(&uri);
                self.parts(|p, cx| p.backends.unsubscribe_backend(cx, &uri));
            }
        }
    }

    /// What `session` may see and call (everything for a session that is gone).
    pub(super) fn view(&self, session: SessionId) -> SessionView<'_> {
        self.sessions.view(session, &self.config, &self.catalog)
    }
}

/// One session's view of the catalog by its scopes: what it may see, call and
/// read. What it may not is neither listed, nor callable, nor named in an error.
#[derive(Clone, Copy)]
pub(super) struct SessionView<'a> {
    /// The session's scopes against the mapping in force.
    pub access: Access<'a>,
    catalog: &'a Catalog,
}

impl super::sessions::Sessions {
    /// What `session` may see and call of `catalog` under `config`'s scopes
    /// (everything for a session that is gone).
    pub(super) fn view<'a>(
        &'a self,
        session: SessionId,
        config: &'a crate::config::Config,
        catalog: &'a Catalog,
    ) -> SessionView<'a> {
        let held = self.open.get(&session).and_then(|s| s.scopes.as_deref());
        SessionView::new(Access::new(&config.scopes, held), catalog)
    }
}

impl<'a> SessionView<'a> {
    /// The view `access` gives of `catalog`.
    pub(super) fn new(access: Access<'a>, catalog: &'a Catalog) -> Self {
        SessionView { access, catalog }
    }

    /// Whether the session sees less than everything.
    pub(super) fn restricted(self) -> bool {
        !self.access.is_unrestricted()
    }

    /// Whether the session may see item `entry` of `kind` of `server`.
    pub(super) fn grants(self, kind: ListKind, server: &str, entry: &Entry) -> bool {
        match kind {
            ListKind::Tools => self.access.tool(server, &entry.served),
            _ => self.access.server(server),
        }
    }

    /// The tool clients call `name`, if the session may call it.
    pub(super) fn tool(self, name: &str) -> Option<Resolved<'a>> {
        self.catalog.resolve_tool(name).filter(|r| self.access.tool(r.server, &r.entry.served))
    }

    /// The prompt clients call `name`, if the session may get it.
    pub(super) fn prompt(self, name: &str) -> Option<Resolved<'a>> {
        self.catalog.resolve_prompt(name).filter(|r| self.access.server(r.server))
    }

    /// The backend and original URI of served resource `uri`, if the session may read it.
    pub(super) fn uri(self, uri: &'a str) -> Option<(&'a str, &'a str)> {
        self.catalog.resolve_uri(uri).filter(|(server, _)| self.access.server(server))
    }

    /// Whether the session may see `server` at all: granted whole, or one of its tools.
    pub(super) fn sees_server(self, server: &str) -> bool {
        if self.access.is_unrestricted() || self.access.server(server) {
            return true;
        }
        let tools = self.catalog.backend(server).map(|b| b.entries(ListKind::Tools)).unwrap_or(&[]);
        self.access.sees_server(server, tools.iter().map(|e| e.served.as_str()))
    }
}

#[cfg(test)]
mod tests;
