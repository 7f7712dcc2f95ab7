//! The backend side: each backend's state, connecting, the handshake (or the
//! stateless probe), listens, discovery and health answers.

use alloc::string::String;
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::discovery::Discovery;
use crate::config::{ServerConfig, Transport};
use crate::history::History;
use crate::io::Status;
use crate::metrics::BackendMetrics;
use crate::policy::Failure;
use crate::protocol::{CacheHint, Era};
use crate::supervisor::Supervisor;
use crate::time::{earliest, Instant};

/// Lines of stderr kept per backend for crash messages.
/// Requests the gateway itself may have in flight per backend beyond client calls
/// (a probe answered late, the handshake, four discovery lists, health, a listen).
pub(super) const INTERNAL_CALLS: usize = 8;
/// Reconnect events are sent for every attempt up to this one, then throttled.
pub(super) const RECONNECT_EVENTS_UNTHROTTLED: u32 = 10;
/// Throttled reconnect events: at most one per this many ms.
pub(super) const RECONNECT_EVENT_INTERVAL_MS: u64 = 600_000;

/// Everything the gateway keeps about one backend.
#[derive(Clone)]
pub(super) struct Backend {
    pub config: ServerConfig,
    pub sup: Supervisor,
    /// The era of the current connection (or of the last one).
    pub era: Era,
    /// The era the backend proved to speak, kept across reconnects: the next
    /// connection opens in it (and switches if the server says otherwise).
    pub era_learned: Option<Era>,
    /// The open `subscriptions/listen` of a stateless backend (gateway id).
    pub listen: Option<u64>,
    /// The backend answered `subscriptions/listen` with -32601: not asked again
    /// on this connection.
    pub listen_unsupported: bool,
    /// Capabilities from the last handshake, raw object.
    pub capabilities: Map<String, Value>,
    /// A discovery (initial or background) under way.
    pub discovery: Option<Discovery>,
    /// Run discovery again when the current one ends (list_changed arrived meanwhile).
    pub rediscover: u8,
    /// Bytes of each list in the catalog (the items' JSON as listed).
    pub catalog_bytes: [u64; 4],
    /// Why the catalog is not all the backend listed, when a limit cut it.
    pub catalog_cut: Option<String>,
    /// How long each of those lists may be cached, as the backend said.
    pub cache: [CacheHint; 4],
    /// The catalog holds a completed discovery of this backend.
    pub catalog_discovered: bool,
    /// The next handshake may skip discovery (respawn from dormant).
    pub skip_discovery: bool,
    /// Client calls waiting for this backend.
    pub queue: super::call_queue::CallQueue,
    pub stderr: super::stderr_tail::StderrTail,
    /// Its stderr and events lately, across restarts (for `tether logs`).
    pub recent: super::recent::Recent,
    /// `ping` answered -32601: health checks use `tools/list`.
    pub ping_unsupported: bool,
    /// Session-lost (404) recoveries since the last success.
    pub session_losses: u8,
    /// When real traffic last succeeded (health checks are skipped after it).
    pub last_success: Option<Instant>,
    pub last_reconnect_event: Option<Instant>,
    /// When the first connection attempt began (the aggregation deadline counts from it).
    pub first_connect_at: Option<Instant>,
    /// When the current connection attempt began (lists wait briefly for it).
    pub connect_started_at: Option<Instant>,
    /// Since when it has been online without a break.
    pub online_since: Option<Instant>,
    /// Calls, latencies, restarts and breaker transitions, for status and metrics.
    pub metrics: BackendMetrics,
    /// The last hour, minute by minute (the status page's timeline).
    pub history: History,
    /// The OAuth credential tether manages for this remote backend, if it does.
    pub credential: Option<crate::credential::Credential>,
    /// Requests with a gateway id below this were sent before the newest
    /// credential arrived: a 401 on one of them is answered by resending.
    pub credential_first_id: u64,
    /// The connection was refused for its credential: connect again when a new
    /// one arrives.
    pub awaiting_credential: bool,
    /// The login clients were asked to open (URL elicitation), to tell them when
    /// it is done.
    pub login_elicitation: Option<super::links::LoginElicitation>,
    /// SSE streams of the connection that ended and are resumed, and the event
    /// ids seen on it (Streamable HTTP).
    pub streams: super::streams::Streams,
}

impl Backend {
    pub(super) fn new(config: ServerConfig, sup: Supervisor) -> Self {
        Backend {
            config,
            sup,
            era: Era::Handshake,
            era_learned: None,
            listen: None,
            listen_unsupported: false,
            capabilities: Map::new(),
            discovery: None,
            rediscover: 0,
            catalog_bytes: [0; 4],
            catalog_cut: None,
            cache: [CacheHint::STALE; 4],
            catalog_discovered: false,
            skip_discovery: false,
            queue: Default::default(),
            stderr: Default::default(),
            recent: Default::default(),
            ping_unsupported: false,
            session_losses: 0,
            last_success: None,
            last_reconnect_event: None,
            first_connect_at: None,
            connect_started_at: None,
            online_since: None,
            metrics: BackendMetrics::default(),
            history: History::default(),
            credential: None,
            credential_first_id: 0,
            awaiting_credential: false,
            login_elicitation: None,
            streams: Default::default(),
        }
    }

    /// The epoch of the managed credential (0 without one).
    pub(super) fn credential_epoch(&self) -> u64 {
        self.credential.as_ref().map_or(0, |c| c.epoch())
    }

    /// Keeps a stderr line (cut to 512 bytes) in the tail; returns it as kept.
    pub(super) fn push_stderr(&mut self, line: String) -> String {
        self.stderr.push(line)
    }

    /// The earliest of the supervisor's timers, the credential's, the ended
    /// streams' and the queue's deadlines. Asked after every input: empty parts cost nothing.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        let mut at = self.sup.poll_timeout();
        if let Some(credential) = &self.credential {
            at = earliest(at, credential.deadline());
        }
        if !self.streams.ended.is_empty() {
            at = earliest(at, self.streams.next_deadline());
        }
        if !self.queue.is_empty() {
            at = earliest(at, self.queue_deadline());
        }
        at
    }

    /// The earliest deadline of the calls waiting in the queue.
    fn queue_deadline(&self) -> Option<Instant> {
        self.queue.next_deadline(self.sup.is_ready(), self.credential_epoch())
    }

    /// Whether clients see this backend's catalog: while it is online or dormant, and
    /// while a dormant backend is being woken (its cached catalog stays in force).
    pub(super) fn is_visible(&self) -> bool {
        self.sup.status().is_visible()
            || (self.skip_discovery && self.catalog_discovered && self.sup.status() == Status::Connecting)
    }

    pub(super) fn has_capability(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(|v| !v.is_null())
    }

    pub(super) fn capability_names(&self) -> Vec<String> {
        self.capabilities.keys().cloned().collect()
    }

    /// The message a crash or failure carries: the failure, and the most telling
    /// line of what the process last wrote to stderr, whole (the rest is in the
    /// backend's recent log).
    /// A network failure of a remote names where it went: the URL's scheme,
    /// host and port (never its path or query, which may hold a key).
    pub(super) fn failure_message(&self, failure: &Failure) -> String {
        let mut m = failure.describe();
        if let (true, Some(line)) = (self.config.transport.is_stdio(), self.stderr.telling()) {
            m.push_str("; stderr: ");
            m.push_str(line.trim());
        }
        let network = match failure {
            Failure::Refused | Failure::Dns | Failure::Timeout | Failure::Reset => true,
            Failure::Http { status } => !matches!(status, 401 | 403),
            _ => false,
        };
        if let (true, Transport::Http { url, .. } | Transport::Sse { url, .. }) = (network, &self.config.transport) {
            m.push_str(" (");
            m.push_str(&url_origin(url));
            m.push(')');
        }
        m
    }
}

/// Reads `error.code` from a raw JSON-RPC error object.
pub(super) fn error_code(error: &str) -> Option<i64> {
    serde_json::from_str::<Map<String, Value>>(error).ok()?.get("code")?.as_i64()
}

/// `scheme://host:port` of a URL: no user, password, path, query or fragment.
fn url_origin(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return String::new() };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    alloc::format!("{scheme}://{host}")
}

/// Whether a list of revisions (`supportedVersions`, or an error's `supported`)
/// names one of `wanted`.
pub(in crate::gateway) fn speaks(versions: Option<&Value>, wanted: &[&str]) -> bool {
    versions
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v.as_str().is_some_and(|v| wanted.contains(&v))))
}

#[cfg(test)]
mod tests {
    use super::url_origin;

    #[test]
    fn a_url_origin_keeps_nothing_secret() {
        assert_eq!(url_origin("https://mcp.example.com/mcp?key=s3cr3t"), "https://mcp.example.com");
        assert_eq!(url_origin("http://127.0.0.1:9/sse"), "http://127.0.0.1:9");
        assert_eq!(url_origin("https://user:pw@host.test:8443/x"), "https://host.test:8443");
        assert_eq!(url_origin("https://h.test#frag"), "https://h.test");
    }
}
