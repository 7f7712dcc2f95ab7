//! Fingerprints of the lists clients see: one per list of what everyone sees,
//! and one per session of what its scopes let it see. A client is told a list
//! changed only when the fingerprint of its view did. The shared ones are
//! cached until the catalog or a backend's status changes.

use super::access::SessionView;
use super::backends::Backends;
use super::sessions::Sessions;
use crate::catalog::{Catalog, ListKind};
use crate::config::{Config, Mode};
use crate::io::SessionId;

/// The cached fingerprints of what everyone sees.
#[derive(Clone, Default)]
pub(super) struct Fingerprints {
    /// The catalog version, status-change count and backend count the cached
    /// fingerprints were computed for, and the fingerprints.
    cache: Option<((u64, u64, usize), [u64; 4])>,
}

impl Fingerprints {
    /// Fingerprints of what clients may see of each list now. Cached:
    /// recomputed only after the catalog or a backend's status changed, not on
    /// every input.
    pub(super) fn visible(&mut self, catalog: &Catalog, backends: &Backends, config: &Config) -> [u64; 4] {
        let mut hashes = self.of_catalog(catalog, backends);
        // The tools list has tether's own tools too: meta mode's never change.
        let tools = &mut hashes[ListKind::Tools as usize];
        match (config.mode, config.admin_tools) {
            (Mode::Meta, _) => *tools = 0x6d65_7461,
            (Mode::Flat, true) => *tools ^= 0xad31_4e00,
            (Mode::Flat, false) => {}
        }
        hashes
    }

    /// Fingerprints of the lists as one session's `view` shows them (its own
    /// view when restricted).
    pub(super) fn of_session(
        &mut self,
        view: SessionView<'_>,
        catalog: &Catalog,
        backends: &Backends,
        config: &Config,
    ) -> [u64; 4] {
        let hashes = self.visible(catalog, backends, config);
        if !view.restricted() {
            return hashes;
        }
        let mut own = ListKind::ALL.map(|kind| {
            catalog
                .visible_hash(kind, |s, e| backends.get(s).is_some_and(|b| b.is_visible()) && view.grants(kind, s, e))
        });
        // Meta mode's tools list is tether's own, the same for everyone.
        let tools = ListKind::Tools as usize;
        match (config.mode, config.admin_tools) {
            (Mode::Meta, _) => own[tools] = hashes[tools],
            (Mode::Flat, true) => own[tools] ^= 0xad31_4e00,
            (Mode::Flat, false) => {}
        }
        if config.mode == Mode::Flat {
            // As in the shared view, of the backends this session sees.
            own[tools] ^= backends.tasks_hash(|s| view.sees_server(s));
        }
        own
    }

    /// `session` has seen every list as it is now.
    pub(super) fn mark_seen(
        &mut self,
        sessions: &mut Sessions,
        session: SessionId,
        catalog: &Catalog,
        backends: &Backends,
        config: &Config,
    ) {
        let hashes = self.visible(catalog, backends, config);
        let own = self.of_session(sessions.view(session, config, catalog), catalog, backends, config);
        if let Some(s) = sessions.open.get_mut(&session) {
            s.seen = hashes;
            s.seen_own = own;
        }
    }

    /// Fingerprints of the visible part of each list of the catalog.
    fn of_catalog(&mut self, catalog: &Catalog, backends: &Backends) -> [u64; 4] {
        let changes = backends.values().fold(0u64, |n, b| n.wrapping_add(b.sup.changes()));
        let version = (catalog.version(), changes, backends.len());
        if let Some((v, hashes)) = self.cache {
            if v == version {
                return hashes;
            }
        }
        let mut hashes = ListKind::ALL
            .map(|kind| catalog.visible_hash(kind, |s, _| backends.get(s).is_some_and(|b| b.is_visible())));
        hashes[ListKind::Tools as usize] ^= backends.tasks_hash(|_| true);
        self.cache = Some((version, hashes));
        hashes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Access, ScopeGrant};
    use crate::config::{Policy, ServerConfig};
    use crate::gateway::backend::Backend;
    use crate::io::Status;
    use crate::supervisor::Supervisor;
    use crate::time::Instant;
    use alloc::string::String;
    use alloc::vec;
    use serde_json::json;

    fn setup() -> (Catalog, Backends) {
        let mut catalog = Catalog::new("__");
        let mut backends = Backends::default();
        for server in ["a", "b"] {
            catalog.register(server, true);
            let tool = json!({"name": "t", "inputSchema": {"type": "object"}}).as_object().cloned().unwrap_or_default();
            catalog.install(server, [vec![tool], vec![], vec![], vec![]]);
            let mut sup = Supervisor::new(true, false, Policy::default(), Instant::ZERO);
            sup.set_status(Status::Online, None);
            backends.insert(server.into(), Backend::new(ServerConfig::stdio("x", &[]), sup));
        }
        (catalog, backends)
    }

    #[test]
    fn the_shared_fingerprints_change_with_the_catalog_and_a_backends_visibility_only() {
        let (mut catalog, mut backends) = setup();
        let config = Config::default();
        let mut prints = Fingerprints::default();
        let before = prints.visible(&catalog, &backends, &config);
        assert_eq!(prints.visible(&catalog, &backends, &config), before, "cached and stable");
        backends.get_mut("b").expect("b").sup.set_status(Status::Offline, None);
        let offline = prints.visible(&catalog, &backends, &config);
        assert_ne!(offline[0], before[0], "b's tool left the list");
        assert_eq!(offline[1..], before[1..], "lists b had nothing in are the same");
        let tool = json!({"name": "u", "inputSchema": {"type": "object"}}).as_object().cloned().unwrap_or_default();
        catalog.install("a", [vec![tool], vec![], vec![], vec![]]);
        assert_ne!(prints.visible(&catalog, &backends, &config)[0], offline[0]);
    }

    #[test]
    fn a_restricted_session_has_fingerprints_of_its_own_view() {
        let (catalog, backends) = setup();
        let mut config = Config::default();
        config.scopes.insert("a".into(), ScopeGrant { servers: vec!["a".into()], tools: vec![] });
        let mut prints = Fingerprints::default();
        let everyone = prints.visible(&catalog, &backends, &config);
        let held = [String::from("a")];
        let own = prints.of_session(
            SessionView::new(Access::new(&config.scopes, Some(&held)), &catalog),
            &catalog,
            &backends,
            &config,
        );
        assert_ne!(own[0], everyone[0], "it sees a's tool only");
        let all = prints.of_session(
            SessionView::new(Access::new(&config.scopes, None), &catalog),
            &catalog,
            &backends,
            &config,
        );
        assert_eq!(all, everyone, "unrestricted: the shared fingerprints");
    }
}
