//! What goes into the engine ([`Input`]) and what comes out ([`Action`], [`Event`]).
//!
//! All of it is `serde`, so a trace is JSON lines of inputs and a replay yields the
//! same actions. `Display` renders each one as a single readable line for
//! snapshots and logs.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::policy::Failure;

/// A client connection, numbered by the host (stdio is usually session 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub u64);

/// One connection to a backend. Bumped on every spawn/connect; anything reported
/// for an older generation is ignored. A type of its own, so a generation is
/// never mistaken for a request id or a count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    /// The generation after this one.
    #[must_use]
    pub fn next(self) -> Generation {
        Generation(self.0 + 1)
    }
}

impl core::fmt::Display for Generation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u64> for Generation {
    fn from(n: u64) -> Generation {
        Generation(n)
    }
}

/// A backend's name as carried by inputs, actions and events: shared, so the
/// engine names a backend in every frame it sends without allocating.
/// Build one with `name.into()` from a `&str` or `String`.
pub type ServerName = alloc::sync::Arc<str>;

/// A client's JSON-RPC request id, as raw JSON text (`7`, `"abc"`). Ids of up to
/// 23 bytes (all ids real clients send) are stored inline: no allocation.
pub type RawId = smol_str::SmolStr;

/// An event fed to [`crate::Gateway::handle`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Input {
    /// A client connected.
    ClientConnected {
        /// Its session.
        session: SessionId,
        /// Close it after `limits.idle_session_ms` without a message (HTTP
        /// sessions; a stdio session lives as long as its process).
        #[serde(default, skip_serializing_if = "core::ops::Not::not")]
        expires: bool,
    },
    /// One complete JSON-RPC frame from a client.
    ClientFrame {
        /// From which session.
        session: SessionId,
        /// The frame text.
        frame: String,
        /// The `Mcp-Param-*` headers of the HTTP request that carried a
        /// stateless-era frame, by lowercased `{Name}` (see
        /// [`crate::param_headers::received_name`]) to raw value, for the engine to
        /// check against the tool's arguments. `None` when the transport has no
        /// such headers (stdio, a handshake-era HTTP session); `Some` and empty
        /// when the request had none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        param_headers: Option<BTreeMap<String, String>>,
    },
    /// The OAuth scopes a client session's access token carries, from the
    /// transport that checked it: before its first frame, and again whenever a
    /// later request's token carries others. What the session may see follows
    /// the config's `scopes` mapping (see [`crate::access`]); a session never
    /// given scopes sees everything.
    ClientAccess {
        /// Its session.
        session: SessionId,
        /// The scopes, as the token lists them.
        scopes: Vec<String>,
        /// Who holds the token (its issuer and subject, as the transport names
        /// them): the tasks a session creates are bound to it, so another
        /// identity cannot read them even given their ids.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
    },
    /// A client went away.
    ClientClosed {
        /// Its session.
        session: SessionId,
    },
    /// A client presented the id of a handshake-era session this process did
    /// not open (another replica did, or this one before a restart); the host
    /// opened its seal and [`crate::cluster::SessionFacts::adoptable`] allowed
    /// it. The session is taken in as if its `initialize` had happened here:
    /// no re-initialize. An HTTP session, so it expires when idle.
    ClientAdopted {
        /// The number the host gave it here.
        session: SessionId,
        /// What its `initialize` settled, from its id.
        facts: crate::cluster::SessionFacts,
        /// What it changed since (log level, subscriptions), from the shared
        /// store, when the host found any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<crate::cluster::SessionState>,
    },
    /// A client resumed a stream this process does not hold (the replica that
    /// held it is gone): what was on it is lost. The engine answers `request`
    /// (the one the stream was for, when its event id says) with an error and
    /// tells the session its lists may have changed.
    ClientStreamLost {
        /// Its session.
        session: SessionId,
        /// The request the stream was answering, raw JSON; `None` for the
        /// session's standalone stream.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<RawId>,
    },
    /// The host was asked to stop and this process is a replica behind a
    /// balancer (`cluster` is configured): drain (see [`crate::config::Cluster`]).
    /// The engine paces the steps and says when it is done
    /// ([`crate::Gateway::drained`]).
    Drain,
    /// A stdio process started (informational: the process id for logs and status).
    BackendStarted {
        /// Backend name.
        server: ServerName,
        /// Connection it belongs to.
        generation: Generation,
        /// Operating-system process id, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
    },
    /// One complete JSON-RPC frame from a backend.
    BackendFrame {
        /// Backend name.
        server: ServerName,
        /// Connection it came from.
        generation: Generation,
        /// The frame text.
        frame: String,
    },
    /// One SSE event from a Streamable HTTP stream that says something a bare
    /// frame would not: an id (the core remembers the ids it has seen on the
    /// connection and drops replays), or the POST it answers (a request the
    /// backend sends there is for that call, whichever client made it).
    BackendEvent {
        /// Backend name.
        server: ServerName,
        /// Connection it came from.
        generation: Generation,
        /// The stream it came on.
        stream: StreamRef,
        /// The event's `id`, if it had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
        /// The frame text (the event's data).
        frame: String,
    },
    /// An SSE stream of a Streamable HTTP backend ended: a POST's response stream
    /// before it carried its response, or the standalone GET stream (also when
    /// opening it failed). The core decides whether and when to resume it.
    StreamEnded {
        /// Backend name.
        server: ServerName,
        /// Connection it belonged to.
        generation: Generation,
        /// Which stream.
        stream: StreamRef,
        /// The last event id the stream carried, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_event_id: Option<String>,
        /// The server's latest `retry` hint on it, in ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_ms: Option<u64>,
        /// Messages it delivered before it ended.
        #[serde(default)]
        events: u32,
        /// Why it ended: `None` when the server ended it cleanly.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Failure>,
    },
    /// One line a stdio backend wrote to stderr (kept as a short tail for crash messages).
    BackendStderr {
        /// Backend name.
        server: ServerName,
        /// Connection it came from.
        generation: Generation,
        /// The line.
        line: String,
    },
    /// A stdio backend's process exited.
    BackendExited {
        /// Backend name.
        server: ServerName,
        /// Which process.
        generation: Generation,
        /// Exit code; `None` when killed by a signal.
        code: Option<i32>,
    },
    /// A transport failure: a refused connection, an HTTP error status, a spawn error.
    BackendFailed {
        /// Backend name.
        server: ServerName,
        /// Connection it came from.
        generation: Generation,
        /// The backend request id from [`Action::SendToBackend::request`] whose delivery
        /// failed, or `None` for the connection as a whole.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
        /// What went wrong.
        failure: Failure,
    },
    /// Time passed; timers due at or before `now` fire. Harmless when early.
    Tick,
    /// The wall clock reads `unix_ms` (ms since 1970-01-01 UTC) at this input's
    /// `now`. Hosts send it once at start: tasks carry wall-clock timestamps,
    /// and the engine reads no clock of its own (so a trace replays them).
    WallClock {
        /// Milliseconds since the Unix epoch.
        unix_ms: u64,
    },
    /// A new configuration; applied differentially.
    ConfigReloaded {
        /// The whole new configuration.
        config: Config,
    },
    /// What the host did about a remote backend's credential (answers an
    /// [`Action::Authorize`], or a login finished).
    Credential {
        /// Backend name.
        server: ServerName,
        /// What happened.
        update: crate::credential::CredentialUpdate,
    },
    /// An operator's command.
    Admin {
        /// Which one.
        command: AdminCommand,
    },
}

/// Commands an operator (or an admin tool) can give.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum AdminCommand {
    /// Connected: fresh connection. Offline: cancel the wait and try now.
    /// Permanently failed or requiring re-authentication: start over.
    Reconnect {
        /// Backend name.
        server: ServerName,
    },
    /// Stop the backend and start it again, clearing its crash history and breaker.
    Restart {
        /// Backend name.
        server: ServerName,
    },
    /// Close the backend and forget it until the next config reload adds it.
    Remove {
        /// Backend name.
        server: ServerName,
    },
}

/// Work the engine asks the host to do, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    /// Start a stdio process in its own process group; report its frames, stderr and exit.
    Spawn {
        /// Backend name.
        server: ServerName,
        /// Connection number to tag every report with.
        generation: Generation,
        /// Program.
        command: String,
        /// Arguments.
        args: Vec<String>,
        /// Extra environment.
        env: BTreeMap<String, String>,
        /// Working directory.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
    },
    /// Open a connection to a remote backend (Streamable HTTP or legacy SSE).
    ConnectHttp {
        /// Backend name.
        server: ServerName,
        /// Connection number.
        generation: Generation,
        /// Endpoint.
        url: String,
        /// Extra headers.
        headers: BTreeMap<String, String>,
        /// Legacy HTTP+SSE transport rather than Streamable HTTP.
        legacy_sse: bool,
    },
    /// Work on a remote backend's credential (read the store, get or refresh a
    /// token, prepare a login, forget a dead one); answered with
    /// [`Input::Credential`]. Tokens stay with the host: it puts the current one on
    /// every request to that backend.
    Authorize {
        /// Backend name.
        server: ServerName,
        /// What to do.
        step: crate::credential::AuthStep,
    },
    /// Deliver one frame to a backend connection.
    SendToBackend {
        /// Backend name.
        server: ServerName,
        /// Connection number; drop the frame if that connection is gone.
        generation: Generation,
        /// The frame.
        frame: String,
        /// The request id inside the frame, to quote in [`Input::BackendFailed`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
        /// HTTP headers for this frame alone: the `Mcp-Param-*` headers of a
        /// `tools/call` to a stateless-era backend, which mirror annotated
        /// arguments. Other transports ignore them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        headers: Vec<(String, String)>,
    },
    /// Open a GET on a Streamable HTTP backend that resumes `stream` (with
    /// `Last-Event-ID` when known) and read it as an SSE stream; report its
    /// events and its end ([`Input::StreamEnded`]) under the same `stream`.
    ResumeStream {
        /// Backend name.
        server: ServerName,
        /// Connection number; do nothing if that connection is gone.
        generation: Generation,
        /// The stream to resume.
        stream: StreamRef,
        /// The `Last-Event-ID` to send, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_event_id: Option<String>,
    },
    /// Close a backend connection (stdio: close stdin, SIGTERM, SIGKILL the group).
    CloseBackend {
        /// Backend name.
        server: ServerName,
        /// Which connection.
        generation: Generation,
    },
    /// Deliver one frame to a client session.
    SendToClient {
        /// Session.
        session: SessionId,
        /// The frame.
        frame: String,
        /// Which client request it answers or belongs to (HTTP transports put it
        /// on that request's response stream).
        #[serde(default, skip_serializing_if = "ClientRoute::is_session")]
        route: ClientRoute,
    },
    /// Close a client session.
    CloseClient {
        /// Session.
        session: SessionId,
    },
    /// A handshake-era HTTP session was opened: seal these facts into the
    /// session id the host gives its client (before the `initialize` answer that
    /// follows), so any replica holding the key can adopt it.
    SealSession {
        /// Session.
        session: SessionId,
        /// What its `initialize` settled.
        facts: crate::cluster::SessionFacts,
    },
    /// A sealed session's log level or subscriptions changed: the host keeps
    /// `state` (all of it, replacing what it kept) where a replica adopting the
    /// session finds it.
    SessionState {
        /// Session.
        session: SessionId,
        /// What it holds now.
        state: crate::cluster::SessionState,
    },
    /// Draining: take no new connection and answer new requests 503 (the
    /// balancer has had its time to notice).
    StopAccepting,
    /// Draining, at the end: end every client stream now, asking clients to
    /// reconnect (SSE `retry:`); a replica still serving takes them.
    EndClientStreams,
    /// Something an operator should know: log it, count it.
    Emit {
        /// What happened.
        event: Event,
    },
}

impl Action {
    /// A frame to `session`, on no request's behalf.
    pub(crate) fn to_session(session: SessionId, frame: String) -> Action {
        Action::SendToClient { session, frame, route: ClientRoute::Session }
    }

    /// A frame to `session` on behalf of its request `id` (or on no request's
    /// behalf when none).
    pub(crate) fn related(session: SessionId, id: Option<&str>, frame: String) -> Action {
        let route = id.map_or(ClientRoute::Session, |id| ClientRoute::Related(RawId::new(id)));
        Action::SendToClient { session, frame, route }
    }
}

/// One SSE stream of a Streamable HTTP backend connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamRef {
    /// The response stream of the POST of the request with this gateway id (and
    /// the GETs that resume it).
    Request(u64),
    /// The standalone GET stream of server-to-client messages.
    Standalone,
}

impl StreamRef {
    /// The request whose response the stream carries, if it is a request's.
    pub fn request(self) -> Option<u64> {
        match self {
            StreamRef::Request(id) => Some(id),
            StreamRef::Standalone => None,
        }
    }
}

impl fmt::Display for StreamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamRef::Request(id) => write!(f, "stream of request {id}"),
            StreamRef::Standalone => f.write_str("standalone stream"),
        }
    }
}

/// Where a frame for a client belongs. stdio has one stream and ignores it; the
/// Streamable HTTP transport answers a POSTed request on its own response and
/// sends everything else on the session's standalone stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientRoute {
    /// The answer to the client's request with this id (raw JSON): ends its stream.
    Reply(RawId),
    /// Sent while serving the client's request with this id (raw JSON): progress,
    /// its backend's log messages, sampling/elicitation/roots requests it caused.
    Related(RawId),
    /// Not tied to a client request: list changes, resource updates, events.
    #[default]
    Session,
}

impl ClientRoute {
    /// Whether this is the session's standalone stream.
    pub fn is_session(&self) -> bool {
        matches!(self, ClientRoute::Session)
    }
}

/// Status of one backend, as shown to clients and operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Configured, not started yet (lazy).
    Provisioning,
    /// Spawning or connecting, handshake not complete.
    Connecting,
    /// Connected; listing tools, resources and prompts.
    DiscoveringTools,
    /// Serving.
    Online,
    /// Stopped after being idle; catalog kept; the next call respawns it.
    Dormant,
    /// Being restarted because its configuration changed.
    Restarting,
    /// Unreachable; reconnecting with backoff.
    Offline,
    /// Failed; recovers by itself (restart or reconnect scheduled).
    Error,
    /// Authentication failed; waits for the user.
    RequiresReauth,
    /// Crashed too often; no more restarts until an admin restart or a config change.
    PermanentlyFailed,
    /// Removed on purpose.
    Disconnected,
}

impl Status {
    /// Every status, in lifecycle order (for gauges and exhaustive checks).
    pub const ALL: [Status; 11] = [
        Status::Provisioning,
        Status::Connecting,
        Status::DiscoveringTools,
        Status::Online,
        Status::Dormant,
        Status::Restarting,
        Status::Offline,
        Status::Error,
        Status::RequiresReauth,
        Status::PermanentlyFailed,
        Status::Disconnected,
    ];

    /// The snake_case name used on the wire and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Provisioning => "provisioning",
            Status::Connecting => "connecting",
            Status::DiscoveringTools => "discovering_tools",
            Status::Online => "online",
            Status::Dormant => "dormant",
            Status::Restarting => "restarting",
            Status::Offline => "offline",
            Status::Error => "error",
            Status::RequiresReauth => "requires_reauth",
            Status::PermanentlyFailed => "permanently_failed",
            Status::Disconnected => "disconnected",
        }
    }

    /// Whether clients see this backend's tools, resources and prompts.
    pub fn is_visible(self) -> bool {
        matches!(self, Status::Online | Status::Dormant)
    }

    /// Whether the backend is on its way to serving (not started yet, starting,
    /// listing its catalog, or restarting for a new config): a check waiting for
    /// backends to settle keeps waiting.
    pub fn is_starting(self) -> bool {
        matches!(self, Status::Provisioning | Status::Connecting | Status::DiscoveringTools | Status::Restarting)
    }

    /// Whether the backend serves calls: online, or dormant (idle, started again
    /// by the next call). Operators' "all good".
    pub fn is_serving(self) -> bool {
        matches!(self, Status::Online | Status::Dormant)
    }

    /// Whether the backend serves nothing and is not starting: unreachable,
    /// failed (a retry may be scheduled), waiting for a login, or removed.
    /// Operators' "look here".
    pub fn is_down(self) -> bool {
        matches!(
            self,
            Status::Offline | Status::Error | Status::RequiresReauth | Status::PermanentlyFailed | Status::Disconnected
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened, for logs, the status page, `/events` and clients (docs/reference.md lists them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A backend's status changed.
    ServerStatusChanged {
        /// Backend.
        server: ServerName,
        /// Old status.
        from: Status,
        /// New status.
        to: Status,
        /// Why, when known (last error, stderr tail).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A backend's connection ended.
    ServerDisconnected {
        /// Backend.
        server: ServerName,
        /// Closed on purpose (removed, idled, restarted by config) rather than lost.
        intentional: bool,
    },
    /// A reconnect is scheduled (throttled for long outages).
    ServerReconnecting {
        /// Backend.
        server: ServerName,
        /// Attempt number that is scheduled.
        attempt: u32,
        /// Wait before it.
        next_retry_ms: u64,
    },
    /// A backend came back after failed attempts.
    ServerReconnected {
        /// Backend.
        server: ServerName,
        /// Attempts it took.
        attempts_taken: u32,
        /// Capabilities it announced (names).
        capabilities: Vec<String>,
    },
    /// Health checks failed repeatedly.
    ServerHealthDegraded {
        /// Backend.
        server: ServerName,
        /// Failures in a row.
        consecutive_failures: u32,
        /// The last one.
        last_error: String,
    },
    /// A health check succeeded after degradation.
    ServerHealthRestored {
        /// Backend.
        server: ServerName,
    },
    /// A stdio backend crashed too often and will not be restarted.
    ServerPermanentlyFailed {
        /// Backend.
        server: ServerName,
        /// Crashes within the window.
        crashes: u8,
        /// The window, in ms.
        window_ms: u64,
    },
    /// The breaker opened: calls are refused for the cooldown.
    CircuitOpened {
        /// Backend.
        server: ServerName,
        /// Cooldown in ms.
        cooldown_ms: u64,
    },
    /// The breaker closed again after a successful probe.
    CircuitClosed {
        /// Backend.
        server: ServerName,
    },
    /// A backend's catalog was (re)discovered.
    ToolsDiscovered {
        /// Backend.
        server: ServerName,
        /// Tools it offers.
        count: u32,
        /// Estimated tokens of their definitions (chars / 4).
        estimated_tokens: u32,
    },
    /// A backend broke the protocol (unparseable frame, unknown response id); it was ignored.
    ProtocolViolation {
        /// Backend.
        server: ServerName,
        /// What was wrong.
        detail: String,
    },
    /// A tool, prompt or resource alias could not be served because another took its name.
    NameConflict {
        /// Backend whose item was skipped.
        server: ServerName,
        /// The served name both wanted.
        name: String,
    },
    /// A backend listed more than tether keeps (`limits.max_catalog_items`,
    /// `max_catalog_bytes`, `max_total_catalog_bytes`): the rest of the list was
    /// left out.
    CatalogCut {
        /// Backend.
        server: ServerName,
        /// What was kept and which limit cut it.
        detail: String,
    },
}

impl Event {
    /// The backend the event is about (every event is about one).
    pub fn server(&self) -> &ServerName {
        match self {
            Event::ServerStatusChanged { server, .. }
            | Event::ServerDisconnected { server, .. }
            | Event::ServerReconnecting { server, .. }
            | Event::ServerReconnected { server, .. }
            | Event::ServerHealthDegraded { server, .. }
            | Event::ServerHealthRestored { server, .. }
            | Event::ServerPermanentlyFailed { server, .. }
            | Event::CircuitOpened { server, .. }
            | Event::CircuitClosed { server, .. }
            | Event::ToolsDiscovered { server, .. }
            | Event::ProtocolViolation { server, .. }
            | Event::NameConflict { server, .. }
            | Event::CatalogCut { server, .. } => server,
        }
    }
}

/// A frame shortened for one log line, with control characters escaped.
fn short(frame: &str) -> String {
    const MAX: usize = 240;
    let mut out = String::with_capacity(frame.len().min(MAX + 8));
    for (i, c) in frame.char_indices() {
        if i >= MAX {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::ClientConnected { session, .. } => write!(f, "client {} connected", session.0),
            Input::ClientFrame { session, frame, .. } => write!(f, "client {} -> {}", session.0, short(frame)),
            Input::ClientAccess { session, scopes, .. } => {
                write!(f, "client {} holds {} scopes", session.0, scopes.len())
            }
            Input::ClientClosed { session } => write!(f, "client {} closed", session.0),
            Input::ClientAdopted { session, facts, .. } => {
                write!(f, "client {} adopted ({})", session.0, facts.protocol_version)
            }
            Input::ClientStreamLost { session, request } => match request {
                Some(id) => write!(f, "client {} resumed a lost stream of request {id}", session.0),
                None => write!(f, "client {} resumed a lost stream", session.0),
            },
            Input::Drain => f.write_str("drain"),
            Input::BackendStarted { server, generation, pid } => match pid {
                Some(pid) => write!(f, "{server}#{generation} started (pid {pid})"),
                None => write!(f, "{server}#{generation} started"),
            },
            Input::BackendFrame { server, generation, frame } => {
                write!(f, "{server}#{generation} -> {}", short(frame))
            }
            Input::BackendEvent { server, generation, stream, event_id, frame } => match event_id {
                Some(id) => write!(f, "{server}#{generation} -> [{stream}, event {}] {}", short(id), short(frame)),
                None => write!(f, "{server}#{generation} -> [{stream}] {}", short(frame)),
            },
            Input::StreamEnded { server, generation, stream, last_event_id, retry_ms, events, failure } => {
                write!(f, "{server}#{generation} {stream} ended after {events} messages")?;
                match failure {
                    Some(failure) => write!(f, " ({failure})")?,
                    None => f.write_str(" (cleanly)")?,
                }
                if let Some(id) = last_event_id {
                    write!(f, ", last event {}", short(id))?;
                }
                match retry_ms {
                    Some(ms) => write!(f, ", retry {ms} ms"),
                    None => Ok(()),
                }
            }
            Input::BackendStderr { server, generation, line } => {
                write!(f, "{server}#{generation} stderr: {}", short(line))
            }
            Input::BackendExited { server, generation, code } => match code {
                Some(code) => write!(f, "{server}#{generation} exited with code {code}"),
                None => write!(f, "{server}#{generation} killed by a signal"),
            },
            Input::BackendFailed { server, generation, request, failure } => match request {
                Some(r) => write!(f, "{server}#{generation} request {r} failed: {failure}"),
                None => write!(f, "{server}#{generation} failed: {failure}"),
            },
            Input::Tick => f.write_str("tick"),
            Input::WallClock { unix_ms } => write!(f, "wall clock {}", crate::time::rfc3339(*unix_ms)),
            Input::ConfigReloaded { config } => {
                write!(f, "config reloaded (servers: ")?;
                for (i, name) in config.servers.keys().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(name)?;
                }
                f.write_str(")")
            }
            Input::Credential { server, update } => write!(f, "{server} credential: {update}"),
            Input::Admin { command } => match command {
                AdminCommand::Reconnect { server } => write!(f, "admin: reconnect {server}"),
                AdminCommand::Restart { server } => write!(f, "admin: restart {server}"),
                AdminCommand::Remove { server } => write!(f, "admin: remove {server}"),
            },
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Spawn { server, generation, command, args, .. } => {
                write!(f, "spawn {server}#{generation}: {command}")?;
                for a in args {
                    write!(f, " {a}")?;
                }
                Ok(())
            }
            Action::ConnectHttp { server, generation, url, legacy_sse, .. } => {
                let how = if *legacy_sse { "sse" } else { "http" };
                write!(f, "connect {server}#{generation}: {how} {url}")
            }
            Action::SendToBackend { server, generation, frame, .. } => {
                write!(f, "{server}#{generation} <- {}", short(frame))
            }
            Action::ResumeStream { server, generation, stream, last_event_id } => {
                write!(f, "resume {server}#{generation} {stream}")?;
                match last_event_id {
                    Some(id) => write!(f, " after event {}", short(id)),
                    None => Ok(()),
                }
            }
            Action::CloseBackend { server, generation } => write!(f, "close {server}#{generation}"),
            Action::SendToClient { session, frame, .. } => write!(f, "client {} <- {}", session.0, short(frame)),
            Action::CloseClient { session } => write!(f, "close client {}", session.0),
            Action::SealSession { session, facts } => {
                write!(f, "seal session {} ({})", session.0, facts.protocol_version)
            }
            Action::SessionState { session, state } => {
                write!(f, "session {} state ({} subscriptions)", session.0, state.subscriptions.len())
            }
            Action::StopAccepting => f.write_str("stop accepting"),
            Action::EndClientStreams => f.write_str("end client streams"),
            Action::Emit { event } => write!(f, "event {event}"),
            Action::Authorize { server, step } => write!(f, "authorize {server}: {step}"),
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::ServerStatusChanged { server, from, to, message } => {
                write!(f, "server_status_changed {server}: {from} -> {to}")?;
                match message {
                    Some(m) => write!(f, " ({})", short(m)),
                    None => Ok(()),
                }
            }
            Event::ServerDisconnected { server, intentional } => {
                write!(f, "server_disconnected {server} intentional={intentional}")
            }
            Event::ServerReconnecting { server, attempt, next_retry_ms } => {
                write!(f, "server_reconnecting {server} attempt={attempt} next_retry_ms={next_retry_ms}")
            }
            Event::ServerReconnected { server, attempts_taken, capabilities } => {
                write!(f, "server_reconnected {server} attempts_taken={attempts_taken} capabilities={capabilities:?}")
            }
            Event::ServerHealthDegraded { server, consecutive_failures, last_error } => write!(
                f,
                "server_health_degraded {server} consecutive_failures={consecutive_failures} last_error={last_error:?}"
            ),
            Event::ServerHealthRestored { server } => write!(f, "server_health_restored {server}"),
            Event::ServerPermanentlyFailed { server, crashes, window_ms } => {
                write!(f, "server_permanently_failed {server} crashes={crashes} window_ms={window_ms}")
            }
            Event::CircuitOpened { server, cooldown_ms } => {
                write!(f, "circuit_opened {server} cooldown_ms={cooldown_ms}")
            }
            Event::CircuitClosed { server } => write!(f, "circuit_closed {server}"),
            Event::ToolsDiscovered { server, count, estimated_tokens } => {
                write!(f, "tools_discovered {server} count={count} estimated_tokens={estimated_tokens}")
            }
            Event::ProtocolViolation { server, detail } => {
                write!(f, "protocol_violation {server}: {}", short(detail))
            }
            Event::NameConflict { server, name } => write!(f, "name_conflict {server}: {name}"),
            Event::CatalogCut { server, detail } => write!(f, "catalog_cut {server}: {detail}"),
        }
    }
}

#[cfg(test)]
mod status_tests {
    use super::Status;

    #[test]
    fn every_status_is_exactly_one_of_starting_serving_or_down() {
        for status in Status::ALL {
            let kinds = [status.is_starting(), status.is_serving(), status.is_down()];
            assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{status}");
        }
    }
}
