//! Connecting a backend: spawning it or opening its HTTP connection, the
//! `initialize` handshake (or the stateless `server/discover` probe), what an
//! open connection starts (queued calls, the listen, subscriptions, discovery),
//! and discovery's pages until the catalog has the backend's lists.

use crate::catalog::ListKind;
use crate::config::Transport;
use crate::gateway::discovery::{kind_bit, Bounds, Discovery, Next, ALL_KINDS};
use crate::io::{Action, Event, Status};
use crate::policy::Failure;
use crate::protocol::{self, Era};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use crate::gateway::backend::speaks;
use crate::gateway::backends::Backends;
use crate::gateway::cx::Cx;

impl Backends {
    /// Starts a new connection: spawn or connect, then open it in the backend's
    /// era (`initialize`, or the `server/discover` probe).
    pub(in crate::gateway) fn connect(&mut self, cx: &mut Cx<'_>, server: &str) {
        let now = cx.now;
        let name = self.name(server);
        if let Some(why) = self.get(server).and_then(|b| b.config.broken.clone()) {
            // Its entry cannot be started as written: it says so, and waits for a fix.
            return self.close_backend(cx, server, Status::Error, Some(why));
        }
        let Some(b) = self.get_mut(server) else { return };
        let generation = b.sup.begin_connect(now);
        if b.first_connect_at.is_some() {
            match b.config.transport {
                Transport::Stdio { .. } => b.metrics.restarts += 1,
                _ => b.metrics.reconnects += 1,
            }
        }
        b.first_connect_at.get_or_insert(now);
        b.connect_started_at = Some(now);
        b.stderr.clear();
        b.discovery = None;
        b.streams = Default::default();
        let action = match &b.config.transport {
            Transport::Stdio { command, args, env, cwd } => Action::Spawn {
                server: name.clone(),
                generation,
                command: command.clone(),
                args: args.clone(),
                env: env.clone(),
                cwd: cwd.clone(),
            },
            Transport::Http { url, headers } | Transport::Sse { url, headers } => Action::ConnectHttp {
                server: name.clone(),
                generation,
                url: url.clone(),
                headers: headers.clone(),
                legacy_sse: matches!(b.config.transport, Transport::Sse { .. }),
            },
        };
        b.listen = None;
        b.listen_unsupported = false;
        b.awaiting_credential = false;
        let load = b.credential.as_mut().filter(|c| c.needs_load()).map(|c| {
            c.loading();
            Action::Authorize { server: name.clone(), step: crate::credential::AuthStep::Load }
        });
        // The era to open in: configured, else the one the backend proved to
        // speak, else unknown (probe, as the specification says). The legacy
        // HTTP+SSE transport is 2024-11-05 only.
        let auto = b.config.era.is_none();
        let stdio = b.config.transport.is_stdio();
        let legacy_sse = matches!(b.config.transport, Transport::Sse { .. });
        let era = if legacy_sse { Some(Era::Handshake) } else { b.config.era.or(b.era_learned) };
        if let Some(load) = load {
            cx.push(load);
        }
        cx.push(action);
        match era {
            Some(Era::Handshake) => self.send_initialize(cx, server, auto && !legacy_sse),
            Some(Era::Stateless) => self.send_probe(cx, server, auto),
            // A local process that speaks both eras is served faster in the
            // handshake era: a stateless request costs the server its per-request
            // `_meta` every time (the official Python SDK's server: 0.7 ms more per
            // call). One that speaks only the stateless revision refuses
            // `initialize`, and is probed then; one of the handshake era is never
            // sent a request before `initialize` (some exit on one).
            None if stdio => self.send_initialize(cx, server, true),
            None => self.send_probe(cx, server, true),
        }
    }

    pub(in crate::gateway) fn handshake_answer(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        answer: Result<&str, &str>,
        may_probe: bool,
    ) {
        let result = match answer {
            Ok(r) => serde_json::from_str::<Map<String, Value>>(r).ok(),
            Err(_) => None,
        };
        let Some(result) = result else {
            if may_probe && answer.is_err() {
                // Of unknown era, or it spoke the handshake era before: refusing
                // `initialize` may mean it speaks only the stateless revision.
                return self.send_probe(cx, server, false);
            }
            let detail = match answer {
                Err(e) => format!("initialize refused: {e}"),
                Ok(_) => "initialize answered with an invalid result".to_string(),
            };
            return self.connection_lost(cx, server, Failure::Other { message: detail });
        };
        self.connection_opened(cx, server, Era::Handshake, &result);
    }

    /// The answer to the `server/discover` probe: a stateless server, or (when
    /// allowed) a handshake-era one to open with `initialize`. The fallback is not
    /// keyed to one error code (the specification forbids that): only an answer
    /// that proves a stateless server keeps it from happening.
    pub(in crate::gateway) fn probe_answer(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        answer: Result<&str, &str>,
        may_initialize: bool,
    ) {
        let verdict = match answer {
            Ok(r) => match serde_json::from_str::<Map<String, Value>>(r) {
                Ok(result) if speaks(result.get("supportedVersions"), &protocol::STATELESS_VERSIONS) => {
                    return self.connection_opened(cx, server, Era::Stateless, &result);
                }
                Ok(result) => Err(format!(
                    "server/discover lists no revision tether speaks (supportedVersions: {})",
                    result.get("supportedVersions").map_or_else(|| "none".to_string(), Value::to_string)
                )),
                Err(_) => Err("server/discover answered with an invalid result".to_string()),
            },
            Err(e) => {
                let error = serde_json::from_str::<Map<String, Value>>(e).unwrap_or_default();
                let code = error.get("code").and_then(Value::as_i64);
                let supported = error.get("data").and_then(|d| d.get("supported"));
                if code == Some(protocol::stateless_code::UNSUPPORTED_PROTOCOL_VERSION)
                    && !speaks(supported, &protocol::SUPPORTED_VERSIONS)
                {
                    // A stateless server that speaks none of our revisions: falling
                    // back would not help.
                    let supported = supported.map_or_else(|| "none".to_string(), Value::to_string);
                    let message =
                        format!("the server speaks none of tether's protocol revisions (it supports {supported})");
                    return self.connection_lost(cx, server, Failure::Other { message });
                }
                Err(format!("server/discover refused: {e}"))
            }
        };
        match verdict {
            Err(_) if may_initialize => self.send_initialize(cx, server, false),
            Err(message) => self.connection_lost(cx, server, Failure::Other { message }),
            Ok(()) => {}
        }
    }

    /// The connection is open in `era` (`initialize` or `server/discover`
    /// answered with `result`): discover, listen, and send what waited.
    pub(in crate::gateway) fn connection_opened(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        era: Era,
        result: &Map<String, Value>,
    ) {
        let now = cx.now;
        let b = self.get_mut(server).expect("live backend");
        b.era = era;
        b.era_learned = Some(era);
        b.capabilities = match result.get("capabilities") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        let skip = b.skip_discovery && b.catalog_discovered;
        b.skip_discovery = false;
        let reconnected = b.sup.on_handshake(now, skip, cx.rng);
        let capabilities = b.capability_names();
        if era == Era::Handshake {
            self.send(cx, server, protocol::notification("notifications/initialized", None), None);
        }
        if let Some(attempts_taken) = reconnected {
            self.emit(cx, Event::ServerReconnected { server: self.name(server), attempts_taken, capabilities });
        }
        if !skip {
            self.start_discovery(cx, server, ALL_KINDS);
        }
        match era {
            Era::Handshake => self.resubscribe(cx, server),
            Era::Stateless => self.open_listen(cx, server),
        }
        self.flush_queue(cx, server);
    }

    /// Lists everything the backend offers (following its cursors).
    pub(in crate::gateway) fn start_discovery(&mut self, cx: &mut Cx<'_>, server: &str, requested: u8) {
        let Some(b) = self.get_mut(server) else { return };
        if b.discovery.is_some() {
            b.rediscover |= requested;
            return;
        }
        let kinds: Vec<ListKind> = ListKind::ALL
            .into_iter()
            .filter(|k| requested & kind_bit(*k) != 0 && b.has_capability(k.capability()))
            .collect();
        let room = self.catalog_room(server, requested, &cx.config.limits);
        let Some(b) = self.get_mut(server) else { return };
        b.discovery = Some(Discovery::new(requested, room));
        for kind in &kinds {
            self.request_page(cx, server, *kind, None, 1);
        }
        if kinds.is_empty() {
            self.finish_discovery(cx, server);
        }
    }

    pub(in crate::gateway) fn discovery_answer(
        &mut self,
        cx: &mut Cx<'_>,
        server: &str,
        kind: ListKind,
        pages: u32,
        answer: Result<&str, &str>,
    ) {
        let limits = &cx.config.limits;
        let bounds = Bounds {
            max_items: limits.max_catalog_items as usize,
            max_pages: limits.max_discovery_pages,
            max_catalog_bytes: u64::from(limits.max_catalog_bytes),
        };
        let Some(b) = self.get_mut(server) else { return };
        let had_catalog = b.catalog_discovered;
        let Some(d) = b.discovery.as_mut() else { return };
        match d.on_page(kind, pages, answer, had_catalog, bounds) {
            Next::Page(cursor) => self.request_page(cx, server, kind, Some(&cursor), pages + 1),
            Next::Finished => self.finish_discovery(cx, server),
            Next::Wait => {}
        }
    }

    /// A discovery request timed out or its connection failed.
    pub(in crate::gateway) fn discovery_failed(&mut self, cx: &mut Cx<'_>, server: &str) {
        let Some(b) = self.get_mut(server) else { return };
        if b.discovery.as_mut().is_some_and(|d| d.on_failure() == Next::Finished) {
            self.finish_discovery(cx, server);
        }
    }

    pub(in crate::gateway) fn finish_discovery(&mut self, cx: &mut Cx<'_>, server: &str) {
        let now = cx.now;
        let Some(b) = self.get_mut(server) else { return };
        let Some(d) = b.discovery.take().map(Discovery::finish) else { return };
        if d.failed && !b.catalog_discovered {
            // Never online with an empty catalog: a first discovery that fails is a failed connection.
            return self.connection_lost(cx, server, Failure::Other { message: "discovery failed".into() });
        }
        if !d.failed {
            let first = b.sup.status() == Status::DiscoveringTools;
            b.catalog_discovered = true;
            for kind in ListKind::ALL {
                if d.lists[kind as usize].is_some() {
                    b.cache[kind as usize] = d.cache[kind as usize];
                    b.catalog_bytes[kind as usize] = d.bytes[kind as usize];
                }
            }
            let lists = d.lists;
            let kept: u64 = b.catalog_bytes.iter().sum();
            b.catalog_cut = d.cut.map(|limit| {
                format!("catalog cut at {kept} bytes by {limit}: the rest of what it listed is not served")
            });
            if let Some(detail) = b.catalog_cut.clone() {
                self.emit(cx, Event::CatalogCut { server: self.name(server), detail });
            }
            // A re-discovery (the server's list_changed) that finds the catalog as it
            // was is no event: some servers announce a change right after starting.
            let own = |catalog: &crate::catalog::Catalog| {
                ListKind::ALL.map(|kind| catalog.visible_hash(kind, |s, _| s == server))
            };
            let before = (!first).then(|| own(cx.catalog));
            let installed = cx.catalog.replace(server, lists);
            let changed = before.map_or(true, |before| before != own(cx.catalog));
            for c in installed.conflicts {
                self.emit(cx, Event::NameConflict { server: self.name(server), name: c.name });
            }
            for r in installed.rejected {
                let detail = format!("tool {} not served: {}", protocol::quote(&r.name), r.reason);
                self.emit(cx, Event::ProtocolViolation { server: self.name(server), detail });
            }
            let (count, estimated_tokens) =
                cx.catalog.backend(server).map_or((0, 0), |c| (c.tool_count(), c.estimated_tokens()));
            if changed {
                self.emit(cx, Event::ToolsDiscovered { server: self.name(server), count, estimated_tokens });
            }
        }
        let b = self.get_mut(server).expect("live backend");
        if b.sup.status() == Status::DiscoveringTools {
            b.sup.on_discovered(now, cx.rng);
        }
        let again = core::mem::take(&mut b.rediscover);
        if again != 0 {
            self.start_discovery(cx, server, again);
        }
    }
}
