//! Removing a backend the configuration no longer has: closed, its pending
//! input rounds failed, its generation kept (a late report never matches a
//! later backend of the same name), its subscriptions and rations dropped.

use alloc::format;
use alloc::string::ToString;

use super::Gateway;
use crate::io::Status;

impl Gateway {
    pub(super) fn remove_backend(&mut self, server: &str) {
        self.parts(|p, cx| {
            p.backends.close_backend(cx, server, Status::Disconnected, Some("removed from config".into()))
        });
        // Announce its last status change while it still exists; clients hear of the
        // lists it took away once, when the input settles.
        let Some(mut b) = self.backends.remove(server) else { return };
        // Calls waiting for a client's inputs have no backend to go back to.
        self.parts(|p, cx| p.eras.fail_input_rounds_of(cx, server, &format!("backend '{server}' was removed")));
        self.retired_generations.insert(server.to_string(), b.sup.generation());
        for t in b.sup.drain_transitions() {
            self.emit(t.into_event(self.backends.name(server)));
        }
        // Which backend a URI belongs to is known only while it is registered.
        let catalog = &self.catalog;
        self.sessions.subscriptions.retain(|uri, _| catalog.resolve_uri(uri).map_or(true, |(s, _)| s != server));
        self.catalog.unregister(server);
        self.notices.forget(server);
    }
}
