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
