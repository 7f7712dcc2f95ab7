//! The Streamable HTTP server transport (MCP 2025-11-25, "Transports"): clients
//! reach tether over HTTP instead of stdio.
//!
//! One endpoint path takes POST (one JSON-RPC message per request), GET (the
//! session's standalone SSE stream, or the resumption of any stream with
//! `Last-Event-ID`) and DELETE (end the session). The module carries transport
//! semantics only: it recognises `initialize` to open a session and tells
//! requests, notifications and responses apart by their JSON-RPC shape; every
//! accepted message goes to the host as [`Input::ClientFrame`], and the host
//! hands frames back with [`HttpServer::deliver`], saying where they belong
//! ([`Route`]).
//!
//! Files, one job each:
//! - `listener.rs`: accepting TCP connections (capped in all and per peer) and
//!   serving them with hyper (HTTP/1.1);
//! - `service.rs`: one HTTP request: guards, then POST, GET or DELETE;
//! - `body.rs`: reading a request body (size bound, deadline, pace, shared budget);
//! - `guards.rs`: Host, Origin, bearer token, `Accept`, `MCP-Protocol-Version`;
//! - `resource_guard.rs`: OAuth access tokens, their challenges and the
//!   Protected Resource Metadata;
//! - `message.rs`: the shape of a JSON-RPC message, request id keys, error bodies;
//! - `reply.rs`: building responses (JSON, SSE, empty, errors);
//! - `sessions.rs`: the session table, requests waiting for their answer, routing;
//! - `adopt.rs`: sealed session ids, and adopting a session another replica opened;
//! - `stream.rs`: one SSE stream: event ids, the replay log, its live connection.
//!
//! The byte-bounded queue feeding one SSE response is [`crate::serve::byte_queue`]
//! (the status page's `/events` uses it too).
//!
//! Choices where the specification leaves one:
//! - A second GET on a session *replaces* the connection of its standalone stream
//!   (the old one ends): a client whose connection silently died must be able to
//!   come back, and the server cannot tell a dead connection from an idle one.
//! - Event ids are `<replica>-<session>-<stream>[.<request>]-<seq>`; stream 0 is
//!   the standalone stream, POST streams count from 1 and carry their request's
//!   id (base64url, when short), so a replica that does not hold a resumed stream
//!   can answer its request ([`tether_core::Input::ClientStreamLost`]).
//! - Session ids are sealed (`adopt.rs`): a replica sharing the key ring adopts a
//!   session another opened; a closed session is not adopted back here.
//! - Draining: [`HttpServer::stop_accepting`] closes the listening socket and
//!   answers MCP requests on open connections 503 (with `Retry-After` and
//!   `Connection: close`); [`HttpServer::end_streams`] ends every stream with `retry:`. Every new connection starts with a priming event
//!   (an id and empty data) unless it starts with replayed events, which carry ids.
//! - A `Last-Event-ID` that names no stream this session still keeps (malformed,
//!   another session's, evicted) is ignored: the GET is served as a plain GET
//!   (the standalone stream, or 405 when GET streams are off). Resumption itself
//!   works with GET streams off: it only continues streams that POSTs opened.
//! - Each stream keeps its last [`ServerOptions::replay_events`] delivered events for
//!   resumption, plus up to 1024 events that no connection took yet (frames for
//!   a stream whose client is away, including standalone-stream frames before the
//!   first GET), all within [`ServerOptions::replay_bytes`] (the newest event is
//!   kept whatever its size); beyond that delivered events go first, then the
//!   oldest undelivered one is dropped with a warning. Finished POST streams stay
//!   resumable until 16 newer ones finished. A client that reads too slowly
//!   ([`ServerOptions::sse_queue_bytes`] queued for its connection) has its TCP
//!   connection reset and what was queued for it dropped; it may resume.
//! - Request bodies: at most [`ServerOptions::max_body_bytes`] (413), complete
//!   within [`ServerOptions::body_timeout`] and at the pace of
//!   [`ServerOptions::body_min_rate`] after [`ServerOptions::body_grace`] (408,
//!   and the connection closes); the bodies being received at once hold at most
//!   [`ServerOptions::body_budget_bytes`] together (503 beyond).
//! - Connections beyond [`ServerOptions::max_connections`], or beyond
//!   [`ServerOptions::max_connections_per_peer`] from one IP address, are
//!   answered 503 at once and closed, before a byte of theirs is parsed.
//! - A client disconnecting is never a cancellation. A JSON-answered request whose
//!   client left before the answer has nothing to resume: its answer is dropped.
//! - Without GET streams, frames routed to [`Route::Session`] are dropped; so are
//!   answers to requests this transport is not waiting for. A [`Route::Related`]
//!   frame for a request that already ended goes to the standalone stream.
//! - A request whose id is still in flight on the same session is refused (400,
//!   -32600): answers are routed by id. Duplicates never reach the host.
//! - No `Accept` header means "anything" (RFC 9110); `*/*`, `application/*` and
//!   `text/*` count. A `Content-Type` other than JSON is refused with 415.
//! - DELETE answers 204. A request waiting for its answer when its session ends
//!   gets 404; when the server shuts down, 503.
//! - When listening on a loopback address, `Host` must name a loopback host (any
//!   port) or the host of one of [`ServerOptions::allowed_origins`].
//! - Checks run in this order, so a 401 says nothing about paths or sessions:
//!   Host (403), Origin (403), bearer token (401), path (404), method (405),
//!   `MCP-Protocol-Version` (400), then the method's own checks. With OAuth,
//!   the Protected Resource Metadata is served after Host and Origin to anyone,
//!   and the access token is checked (401, 403, 503) after the protocol
//!   version; a session answers only requests whose token has the subject of
//!   the one that opened it (403 otherwise).

mod adopt;
mod body;
mod census;
mod framing;
mod guards;
mod listener;
mod message;

mod reply;
mod resource_guard;
mod service;
mod sessions;
mod status_routes;
mod stream;

#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_channel::Sender;
use tether_core::{Input, SessionId};

use sessions::Table;

pub(super) use resource_guard::ResourceGuard;

/// Options of the listener (all have safe defaults). `Debug` hides the token.
#[derive(Clone)]
pub struct ServerOptions {
    /// Address to listen on. Default `127.0.0.1:0` (any free port).
    pub listen: SocketAddr,
    /// The MCP endpoint's path. Default `/mcp`.
    pub path: String,
    /// Allowed `Origin` values beyond the loopback ones, e.g. `https://app.example.com`.
    pub allowed_origins: Vec<String>,
    /// Bearer token every request must carry; `None`: no authentication.
    pub auth_token: Option<String>,
    /// OAuth: every request carries an access token this guard accepts, and
    /// what a session sees follows its scopes (instead of `auth_token`).
    pub resource_guard: Option<Arc<ResourceGuard>>,
    /// Largest POST body; larger ones get 413. Default 4 MiB.
    pub max_body_bytes: usize,
    /// A body must be complete this long after its headers (408 after). Default 30 s.
    pub body_timeout: Duration,
    /// Time a body gets before [`ServerOptions::body_min_rate`] counts. Default 5 s.
    pub body_grace: Duration,
    /// Bytes per second a body must average after its grace (a trickled body is
    /// refused with 408 as soon as it falls behind); 0: no pace. Default 1024.
    pub body_min_rate: u64,
    /// Bytes all bodies being received at once may hold together (503 beyond). Default 64 MiB.
    pub body_budget_bytes: usize,
    /// Connections open at once. At the cap a new one takes the place of the
    /// one idle longest; with every one in a request it is answered 503 and
    /// closed. Default 512.
    pub max_connections: usize,
    /// Connections open at once from one IP address, likewise. Default 128.
    pub max_connections_per_peer: usize,
    /// A new connection that sends nothing for this long is closed. Default 10 s.
    pub silent_timeout: Duration,
    /// Offer the standalone GET stream; `false`: GET answers 405. Default `true`.
    pub get_stream: bool,
    /// Session numbers are allocated from here upward. Default 2 (1 is stdio's).
    pub first_session: u64,
    /// Delivered events kept per stream for `Last-Event-ID` resumption. Default 256.
    pub replay_events: usize,
    /// Bytes of events kept per stream, delivered or not (at most
    /// [`ServerOptions::sse_queue_bytes`], so a replay fits). Default 256 KiB.
    pub replay_bytes: usize,
    /// Bytes queued for one SSE connection (a session stream, a POST answered as a
    /// stream, `/events`) before its client counts as too slow and is disconnected
    /// (the kernel's socket buffers hold more before this one fills). Default 256 KiB.
    pub sse_queue_bytes: usize,
    /// Serve requests without `Mcp-Session-Id` (other than `initialize`) as
    /// stateless-era requests, each in an engine session of its own (the core
    /// checks their `_meta` and closes the session with the answer). Follows the
    /// config's `stateless_clients`. Default `false`.
    pub stateless_clients: bool,
    /// How often a stateless-era request's idle SSE stream gets a comment, so a
    /// client that left is noticed (its request then ends). Default 15 s.
    pub sse_keep_alive: Duration,
    /// Serve the MCP endpoint; `false` for `--status-listen` (the status
    /// endpoints alone). Default `true`.
    pub mcp: bool,
    /// The key ring that seals session ids and how long they stay good
    /// (`tether.cluster`); `None`: a random key of this process alone.
    pub cluster: Option<Arc<tether_host::cluster::ClusterSettings>>,
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("listen", &self.listen)
            .field("path", &self.path)
            .field("allowed_origins", &self.allowed_origins)
            .field("auth_token", &self.auth_token.as_ref().map(|_| "<redacted>"))
            .field("resource_guard", &self.resource_guard)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("body_timeout", &self.body_timeout)
            .field("body_grace", &self.body_grace)
            .field("body_min_rate", &self.body_min_rate)
            .field("body_budget_bytes", &self.body_budget_bytes)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_peer", &self.max_connections_per_peer)
            .field("silent_timeout", &self.silent_timeout)
            .field("get_stream", &self.get_stream)
            .field("first_session", &self.first_session)
            .field("replay_events", &self.replay_events)
            .field("replay_bytes", &self.replay_bytes)
            .field("sse_queue_bytes", &self.sse_queue_bytes)
            .field("stateless_clients", &self.stateless_clients)
            .field("sse_keep_alive", &self.sse_keep_alive)
            .field("mcp", &self.mcp)
            .field("cluster", &self.cluster)
            .finish()
    }
}

impl Default for ServerOptions {
    fn default() -> ServerOptions {
        ServerOptions {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            path: "/mcp".into(),
            allowed_origins: Vec::new(),
            auth_token: None,
            resource_guard: None,
            max_body_bytes: 4 * 1024 * 1024,
            body_timeout: Duration::from_secs(30),
            body_grace: Duration::from_secs(5),
            body_min_rate: 1024,
            body_budget_bytes: 64 * 1024 * 1024,
            max_connections: 512,
            max_connections_per_peer: 128,
            silent_timeout: Duration::from_secs(10),
            get_stream: true,
            first_session: 2,
            replay_events: 256,
            replay_bytes: 256 * 1024,
            sse_queue_bytes: 256 * 1024,
            stateless_clients: false,
            sse_keep_alive: Duration::from_secs(15),
            mcp: true,
            cluster: None,
        }
    }
}

/// Where the core says a frame for a client session belongs: the core's own
/// routing. Ids are compared as JSON values: `7`, ` 7 ` and `"a"` / `"\u0061"`
/// match (see [`id_key`]).
pub(super) use tether_core::ClientRoute as Route;

/// A running Streamable HTTP listener. Cheap to clone; every clone is the same server.
#[derive(Clone)]
pub struct HttpServer {
    shared: Arc<Shared>,
}

/// What the listener, the request handlers and the host's calls share.
struct Shared {
    options: ServerOptions,
    inputs: Sender<Input>,
    local_addr: SocketAddr,
    table: Mutex<Table>,
    /// The connections open now (for the caps).
    census: Mutex<census::Census>,
    /// Bytes the request bodies being received may still take.
    budget: body::Budget,
    /// Closed by [`HttpServer::shutdown`]: the accept loop and every connection watch it.
    stop: async_channel::Sender<()>,
    stop_rx: async_channel::Receiver<()>,
    /// The host's status queries and event log, once [`HttpServer::serve_status`] ran.
    status: std::sync::OnceLock<crate::serve::status::StatusHandle>,
    /// The login callback's path and what finishes its logins, once
    /// [`HttpServer::serve_logins`] ran.
    logins: std::sync::OnceLock<(String, Arc<tether_host::oauth::LoginDesk>)>,
    /// Login callbacks being finished at once, at most [`LOGIN_CALLBACKS`].
    login_slots: smol::lock::Semaphore,
    /// Seals session ids and opens those of other replicas.
    cluster: Arc<tether_host::cluster::ClusterSettings>,
    /// Held while a session presented by its sealed id is taken in, so that
    /// its other requests reach the engine after the adoption.
    adopting: smol::lock::Mutex<()>,
    /// Sealed sessions' state shared with other replicas (a cluster's store).
    sessions: Option<tether_host::cluster::SessionStore>,
    /// Writes to [`Shared::sessions`], made by one task off the executor.
    state_writes: Option<Arc<StateWrites>>,
    /// Cleared when a drain stops taking requests.
    accepting: std::sync::atomic::AtomicBool,
    /// Closed when a drain stops taking requests: the accept loop ends and the
    /// listening socket closes (a balancer resends a refused connection elsewhere).
    stop_accepting: async_channel::Sender<()>,
    stop_accepting_rx: async_channel::Receiver<()>,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn census(&self) -> MutexGuard<'_, census::Census> {
        self.census.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limits on one request body.
    fn body_limits(&self) -> body::BodyLimits {
        let o = &self.options;
        body::BodyLimits {
            max_bytes: o.max_body_bytes,
            timeout: o.body_timeout,
            grace: o.body_grace,
            min_rate: o.body_min_rate,
        }
    }
}

impl HttpServer {
    /// Binds and starts serving on smol's global executor (`smol::spawn`): the
    /// accept loop and one task per connection.
    pub fn bind(options: ServerOptions, inputs: Sender<Input>) -> std::io::Result<HttpServer> {
        let listener = async_io::Async::<std::net::TcpListener>::bind(options.listen)?;
        let local_addr = listener.get_ref().local_addr()?;
        // A resumed connection gets the log replayed: it must fit its queue.
        let keep_bytes = options.replay_bytes.min(options.sse_queue_bytes);
        let keep = stream::LogLimits { keep_events: options.replay_events, keep_bytes };
        let cluster = match options.cluster.clone() {
            Some(cluster) => cluster,
            None => Arc::new(tether_host::cluster::ClusterSettings::single().map_err(std::io::Error::other)?),
        };
        let replica = replica_name().ok_or_else(|| std::io::Error::other("no randomness for the replica's name"))?;
        let table = Table::new(options.first_session, keep, options.sse_queue_bytes, options.get_stream, replica);
        let (stop, stop_rx) = async_channel::bounded(1);
        let (stop_accepting, stop_accepting_rx) = async_channel::bounded(1);
        let budget = body::Budget::new(options.body_budget_bytes);
        let sessions = cluster.sessions();
        let state_writes = sessions.clone().map(|store| state_writer(store, cluster.session_max_age));
        let shared = Arc::new(Shared {
            options,
            inputs,
            local_addr,
            table: Mutex::new(table),
            census: Mutex::default(),
            budget,
            stop,
            stop_rx,
            status: std::sync::OnceLock::new(),
            logins: std::sync::OnceLock::new(),
            login_slots: smol::lock::Semaphore::new(LOGIN_CALLBACKS),
            cluster,
            adopting: smol::lock::Mutex::new(()),
            sessions,
            state_writes,
            accepting: std::sync::atomic::AtomicBool::new(true),
            stop_accepting,
            stop_accepting_rx,
        });
        smol::spawn(listener::accept_loop(shared.clone(), listener)).detach();
        tracing::debug!("Streamable HTTP listening on {local_addr}");
        Ok(HttpServer { shared })
    }

    /// Also serves the status endpoints (`/status`, `/metrics`, `/events`, ...)
    /// and the status page, answered by the host behind `handle`.
    pub fn serve_status(&self, handle: crate::serve::status::StatusHandle) {
        let _ = self.shared.status.set(handle);
    }

    /// Also serves the cluster's login callback (at the path of
    /// `tether.cluster.login_redirect_uri`): any replica finishes a login
    /// another started. It needs no token (a browser brings none): the
    /// pending login it names, sealed in the shared store, is the proof.
    pub fn serve_logins(&self, desk: Arc<tether_host::oauth::LoginDesk>) -> Result<(), String> {
        let path = desk.path();
        let options = &self.shared.options;
        let taken = path == options.path
            || super::http_server::status_routes::is_status_path(&path)
            || options.resource_guard.as_ref().is_some_and(|g| g.is_metadata_path(&path));
        if taken {
            return Err(format!(
                "tether.cluster.login_redirect_uri: its path {path} is one tether already serves: give the callback a path of its own (e.g. /oauth/callback)"
            ));
        }
        let _ = self.shared.logins.set((path, desk));
        Ok(())
    }

    /// The address it listens on (with the port chosen when `listen` had port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// A frame for `session` from the core. Frames for a session that is gone are dropped.
    pub fn deliver(&self, session: SessionId, route: Route, frame: String) {
        let handoff = self.shared.table().deliver(session, route, frame);
        handoff.send();
    }

    /// The core closed the session (limit, idle expiry, shutdown): its streams end;
    /// later requests naming it get 404. The host is not told (it knows).
    pub fn close_session(&self, session: SessionId) {
        self.shared.table().close(session);
    }

    /// Seals what the engine says of a new session into the id its client
    /// gets with the `initialize` answer that follows (see [`adopt`]).
    pub fn seal_session(&self, session: SessionId, facts: tether_core::cluster::SessionFacts) {
        let principal = facts.principal.clone().or_else(|| adopt::static_principal(&self.shared.options));
        let expires = adopt::unix_ms().saturating_add(self.shared.cluster.session_max_age.as_millis() as u64);
        let mut facts = facts;
        facts.principal = None;
        match self.shared.cluster.keys.seal_bound(adopt::PURPOSE, expires, principal.as_deref(), &facts.to_bytes()) {
            Some(key) => self.shared.table().rekey(session, key),
            None => tracing::warn!(
                session = session.0,
                "a session id could not be sealed: it is known to this replica only"
            ),
        }
    }

    /// The engine reports a sealed session's log level and subscriptions: kept
    /// in the shared store for as long as its id can be adopted (a write per
    /// change, not per request), where the replica adopting it finds them.
    pub fn session_state(&self, session: SessionId, state: tether_core::cluster::SessionState) {
        let Some(key) = self.shared.table().sealed_key(session) else { return };
        write_state(&self.shared, key, StateWrite::Save(state));
    }

    /// Draining: the listening socket closes (new connections are refused, so a
    /// balancer sends them elsewhere, even a POST) and MCP requests on the
    /// connections already open are answered 503 and the connection closed.
    pub fn stop_accepting(&self) {
        self.shared.accepting.store(false, std::sync::atomic::Ordering::SeqCst);
        self.shared.stop_accepting.close();
    }

    /// The end of a drain: every stream ends, its client asked to reconnect.
    pub fn end_streams(&self) {
        self.shared.table().end_streams();
    }

    /// Stops listening and ends every stream; requests still waiting get 503.
    pub fn shutdown(&self) {
        self.shared.table().close_all();
        self.shared.stop.close();
    }
}

/// Login callbacks finished at once (each a store round trip and a token request).
const LOGIN_CALLBACKS: usize = 4;

/// A change to what the shared store keeps of sealed sessions.
enum StateWrite {
    /// A session's state now.
    Save(tether_core::cluster::SessionState),
    /// Its client ended it (DELETE): no replica adopts it again.
    Close,
}

/// The changes waiting for the store, by session id: one per session (a later
/// change replaces an earlier one, and an end replaces any change), so what
/// waits is bounded by the sessions, however fast they change and however
/// long the store is away; and an end is never dropped.
#[derive(Default)]
struct StateQueue {
    waiting: std::collections::HashMap<String, StateWrite>,
}

/// What [`Shared`] holds to queue [`StateWrite`]s for the writer task.
struct StateWrites {
    queue: Mutex<StateQueue>,
    /// Wakes the writer (a full channel means it is awake already).
    wake: async_channel::Sender<()>,
}

/// Queues `write` for the session known by `key` (nothing without a cluster store).
fn write_state(shared: &Shared, key: String, write: StateWrite) {
    let Some(writes) = &shared.state_writes else { return };
    {
        let mut queue = writes.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(write, StateWrite::Save(_)) && matches!(queue.waiting.get(&key), Some(StateWrite::Close)) {
            return;
        }
        queue.waiting.insert(key, write);
    }
    let _ = writes.wake.try_send(());
}

/// The task that makes [`StateWrite`]s, each a blocking store call off the
/// executor. A failed write is logged: the session still works here, and an
/// adopting replica restores less.
fn state_writer(store: tether_host::cluster::SessionStore, lifetime: std::time::Duration) -> Arc<StateWrites> {
    let (wake, woken) = async_channel::bounded(1);
    let writes = Arc::new(StateWrites { queue: Mutex::new(StateQueue::default()), wake });
    let queue = Arc::downgrade(&writes);
    smol::spawn(async move {
        while woken.recv().await.is_ok() {
            let Some(writes) = queue.upgrade() else { return };
            let batch: Vec<(String, StateWrite)> =
                writes.queue.lock().unwrap_or_else(PoisonError::into_inner).waiting.drain().collect();
            drop(writes);
            for (key, write) in batch {
                let store = store.clone();
                let written = smol::unblock(move || match write {
                    StateWrite::Save(state) => store.save(&key, &state, lifetime),
                    StateWrite::Close => store.close(&key, lifetime),
                })
                .await;
                if let Err(e) = written {
                    tracing::warn!("keeping a session's state in the shared store: {e}");
                }
            }
        }
    })
    .detach();
    writes
}

/// 64 random bits in hex: names this process in SSE event ids.
fn replica_name() -> Option<String> {
    let mut bytes = [0u8; 8];
    getrandom::getrandom(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
