//! Gateway configuration: backends, resilience policy with every default of the
//! design, per-backend overrides, limits, and validation that names the bad field.
//!
//! This is tether's own model. Runtimes translate user-facing files (Claude
//! Desktop's `mcpServers`, VS Code's `servers`) into it; traces store it verbatim.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

use crate::policy::crash_window::MAX_CRASH_LIMIT;
use crate::policy::{Backoff, CircuitBreaker, CrashWindow, HealthTracker};
pub use crate::selection::{Filter, Override, Selection};
use crate::time::Duration;

/// Declares the policy knobs once: the resolved [`Policy`] with its defaults and
/// the all-optional [`PolicyOverrides`] a backend may carry.
macro_rules! policy_fields {
    ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $default:expr, )*) => {
        /// Resilience policy; every default is the documented one (docs/reference.md). Times are milliseconds.
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct Policy {
            $( $(#[doc = $doc])* pub $name: $ty, )*
        }

        impl Default for Policy {
            fn default() -> Self {
                Policy { $( $name: $default, )* }
            }
        }

        /// Per-backend changes to the gateway-wide [`Policy`]; absent fields inherit.
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct PolicyOverrides {
            $( $(#[doc = $doc])* #[serde(skip_serializing_if = "Option::is_none")] pub $name: Option<$ty>, )*
        }

        impl Policy {
            /// This policy with `overrides` applied on top.
            pub fn with(&self, overrides: &PolicyOverrides) -> Policy {
                Policy { $( $name: overrides.$name.clone().unwrap_or_else(|| self.$name.clone()), )* }
            }
        }
    };
}

policy_fields! {
    /// Waits before each retry of a failed tool call (one retry per entry).
    call_retry_delays_ms: Vec<u64> = vec![500, 1000, 2000],
    /// Retry calls even when they may have been delivered and the tool is not marked idempotent.
    retry_unsafe_calls: bool = false,
    /// Consecutive counted failures that open the circuit breaker.
    breaker_threshold: u32 = 5,
    /// How long an open breaker rejects calls before one probe is let through.
    breaker_cooldown_ms: u64 = 30_000,
    /// Restart waits after a stdio crash, by crash count within the window.
    restart_delays_ms: Vec<u64> = vec![1000, 5000, 15_000],
    /// A process that ran longer than this before crashing is restarted at once.
    restart_immediately_after_ms: u64 = 60_000,
    /// Crashes within `crash_window_ms` that make a backend `permanently_failed`.
    crash_limit: u8 = 3,
    /// The window over which crashes are counted.
    crash_window_ms: u64 = 300_000,
    /// First reconnect wait for a remote backend.
    reconnect_initial_ms: u64 = 1000,
    /// Growth factor of reconnect waits.
    reconnect_multiplier: u32 = 2,
    /// Cap on reconnect waits.
    reconnect_max_ms: u64 = 180_000,
    /// Jitter applied to reconnect waits, in percent either way.
    reconnect_jitter_percent: u8 = 10,
    /// Resumptions in a row of a Streamable HTTP backend's SSE stream that bring
    /// nothing before the request it carries fails under the retry rules (the
    /// standalone stream is then left closed until the next connection).
    stream_resume_attempts: u32 = 5,
    /// Interval between health checks of an online backend.
    health_interval_ms: u64 = 120_000,
    /// Jitter applied to the health interval, in percent either way.
    health_jitter_percent: u8 = 10,
    /// How long a health check may take before it counts as failed.
    health_timeout_ms: u64 = 60_000,
    /// Consecutive failed health checks that raise `server_health_degraded`.
    health_failure_threshold: u32 = 3,
    /// Longest a client's `initialize` or `*/list` waits on a starting backend.
    aggregation_deadline_ms: u64 = 2000,
    /// Idle time after which a stdio backend is stopped (`dormant`); 0 disables.
    idle_timeout_ms: u64 = 180_000,
    /// Per-request timeout, reset by progress notifications.
    request_timeout_ms: u64 = 60_000,
    /// Hard maximum a request may run, whatever progress it reports.
    request_timeout_max_ms: u64 = 600_000,
    /// Time allowed from spawn/connect to a completed `initialize`.
    connect_timeout_ms: u64 = 30_000,
    /// No longer used, accepted so that files that set it still load: a stdio
    /// backend of unknown era is sent `initialize` first, and none waits for a
    /// probe's silence any more.
    probe_timeout_ms: u64 = 3000,
}

impl Policy {
    /// The reconnect schedule for remote backends.
    pub fn reconnect_backoff(&self) -> Backoff {
        Backoff {
            initial: Duration::from_millis(self.reconnect_initial_ms),
            multiplier: self.reconnect_multiplier,
            max: Duration::from_millis(self.reconnect_max_ms),
            jitter_percent: self.reconnect_jitter_percent,
        }
    }

    /// A breaker configured by this policy.
    pub fn breaker(&self) -> CircuitBreaker {
        CircuitBreaker::new(self.breaker_threshold, Duration::from_millis(self.breaker_cooldown_ms))
    }

    /// A crash window configured by this policy.
    pub fn crash_window(&self) -> CrashWindow {
        CrashWindow::new(self.crash_limit, Duration::from_millis(self.crash_window_ms))
    }

    /// A health tracker configured by this policy.
    pub fn health_tracker(&self) -> HealthTracker {
        HealthTracker::new(self.health_failure_threshold)
    }

    /// Restart waits as durations.
    pub fn restart_delays(&self) -> Vec<Duration> {
        self.restart_delays_ms.iter().map(|&ms| Duration::from_millis(ms)).collect()
    }

    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let err = |field: &str, message: &str| Err(ConfigError::new(format!("{path}.{field}"), message));
        if self.call_retry_delays_ms.len() > 16 {
            return err("call_retry_delays_ms", "at most 16 retries");
        }
        if self.breaker_threshold == 0 {
            return err("breaker_threshold", "must be at least 1");
        }
        if self.restart_delays_ms.is_empty() {
            return err("restart_delays_ms", "needs at least one delay");
        }
        if self.crash_limit == 0 || usize::from(self.crash_limit) > MAX_CRASH_LIMIT {
            return err("crash_limit", &format!("must be between 1 and {MAX_CRASH_LIMIT}"));
        }
        if self.reconnect_initial_ms == 0 {
            return err("reconnect_initial_ms", "must be at least 1");
        }
        if self.reconnect_multiplier == 0 {
            return err("reconnect_multiplier", "must be at least 1");
        }
        if self.reconnect_max_ms < self.reconnect_initial_ms {
            return err("reconnect_max_ms", "must not be below reconnect_initial_ms");
        }
        if self.reconnect_jitter_percent > 50 {
            return err("reconnect_jitter_percent", "must be at most 50");
        }
        if self.health_jitter_percent > 50 {
            return err("health_jitter_percent", "must be at most 50");
        }
        if self.health_interval_ms < 1000 {
            return err("health_interval_ms", "must be at least 1000");
        }
        if self.health_failure_threshold == 0 {
            return err("health_failure_threshold", "must be at least 1");
        }
        for (field, v) in [
            ("health_timeout_ms", self.health_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("probe_timeout_ms", self.probe_timeout_ms),
        ] {
            if v == 0 {
                return err(field, "must be at least 1");
            }
        }
        if self.request_timeout_max_ms < self.request_timeout_ms {
            return err("request_timeout_max_ms", "must not be below request_timeout_ms");
        }
        Ok(())
    }
}

/// Bounds on every table and queue, so memory stays bounded under any input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Client sessions at once. When full, a new HTTP session takes the place of
    /// the longest idle one (of the identity holding the most), else is refused.
    pub max_sessions: u32,
    /// Sessions one identity (the holder of an OAuth token) may hold at once:
    /// its next one takes the place of its own longest idle one, else is refused.
    pub max_sessions_per_identity: u32,
    /// Requests in flight (client calls and the gateway's own) across all backends.
    pub max_in_flight: u32,
    /// Requests in flight from one client session.
    pub max_in_flight_per_session: u32,
    /// Calls waiting for one backend to become ready.
    pub max_queued_per_backend: u32,
    /// Largest frame accepted from a client or backend, in bytes.
    pub max_frame_bytes: u32,
    /// Items per page of an aggregated list served to clients.
    pub page_size: u32,
    /// Pages followed when discovering one list from a backend.
    pub max_discovery_pages: u32,
    /// Items kept from one backend's list.
    pub max_catalog_items: u32,
    /// Bytes (of the items' JSON as listed) kept from one backend's lists
    /// together; pages past it are not asked for.
    pub max_catalog_bytes: u32,
    /// Bytes kept from every backend's lists together: a backend discovered
    /// when the others hold most of it keeps what is left.
    pub max_total_catalog_bytes: u32,
    /// Server-to-client requests (sampling, elicitation, roots) pending at once.
    pub max_pending_server_requests: u32,
    /// Resource subscriptions across all sessions.
    pub max_subscriptions: u32,
    /// An HTTP client session with nothing in flight is closed after this many ms
    /// without a message from its client (stdio sessions never expire).
    pub idle_session_ms: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions: 64,
            max_sessions_per_identity: 32,
            max_in_flight: 1024,
            max_in_flight_per_session: 256,
            max_queued_per_backend: 128,
            max_frame_bytes: 16 * 1024 * 1024,
            page_size: 500,
            max_discovery_pages: 100,
            max_catalog_items: 10_000,
            max_catalog_bytes: 16 * 1024 * 1024,
            max_total_catalog_bytes: 128 * 1024 * 1024,
            max_pending_server_requests: 64,
            max_subscriptions: 1024,
            idle_session_ms: 30 * 60 * 1000,
        }
    }
}

impl Limits {
    fn validate(&self) -> Result<(), ConfigError> {
        for (field, v) in [
            ("max_sessions", self.max_sessions),
            ("max_sessions_per_identity", self.max_sessions_per_identity),
            ("max_in_flight", self.max_in_flight),
            ("max_in_flight_per_session", self.max_in_flight_per_session),
            ("max_queued_per_backend", self.max_queued_per_backend),
            ("max_frame_bytes", self.max_frame_bytes),
            ("page_size", self.page_size),
            ("max_discovery_pages", self.max_discovery_pages),
            ("max_catalog_items", self.max_catalog_items),
            ("max_catalog_bytes", self.max_catalog_bytes),
            ("max_total_catalog_bytes", self.max_total_catalog_bytes),
            ("max_pending_server_requests", self.max_pending_server_requests),
            ("max_subscriptions", self.max_subscriptions),
            ("idle_session_ms", self.idle_session_ms),
        ] {
            if v == 0 {
                return Err(ConfigError::new(format!("limits.{field}"), "must be at least 1"));
            }
        }
        Ok(())
    }
}

/// How tether reaches a backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Transport {
    /// A local process speaking newline-delimited JSON on stdin/stdout.
    Stdio {
        /// Program to run.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Extra environment variables (secrets: never logged).
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Working directory.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
    },
    /// A remote Streamable HTTP endpoint.
    Http {
        /// Endpoint URL.
        url: String,
        /// Extra request headers (secrets: never logged).
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
    /// A remote legacy HTTP+SSE endpoint (2024-11-05 transport).
    Sse {
        /// URL of the SSE stream.
        url: String,
        /// Extra request headers.
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

impl Transport {
    /// Whether this is a local process (crash/restart semantics) rather than a remote.
    pub fn is_stdio(&self) -> bool {
        matches!(self, Transport::Stdio { .. })
    }

    /// Short name for tables and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
            Transport::Sse { .. } => "sse",
        }
    }
}

/// One backend MCP server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerConfig {
    /// How to reach it.
    #[serde(flatten)]
    pub transport: Transport,
    /// Serve its tools and prompts as `server<sep>name` (default) or bare.
    #[serde(default = "yes")]
    pub prefixed: bool,
    /// A vital backend is never idled, and a failed call on it respawns and retries once before counting.
    #[serde(default)]
    pub vital: bool,
    /// Start only when first needed instead of at gateway start.
    #[serde(default)]
    pub lazy: bool,
    /// Disabled backends are configured but never started.
    #[serde(default)]
    pub disabled: bool,
    /// Why this entry cannot be started, when the config file has a problem that
    /// touches it alone (an environment variable it names is not set): it stays
    /// in `error` with this message, and the other backends run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<String>,
    /// Policy changes for this backend only.
    #[serde(default, skip_serializing_if = "is_default_overrides")]
    pub policy: PolicyOverrides,
    /// The protocol era it speaks, when known in advance; `None` (the default)
    /// detects it as the specification says: probe with `server/discover`, fall
    /// back to `initialize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub era: Option<crate::protocol::Era>,
    /// A remote backend whose OAuth credential tether manages: a 401 asks the
    /// host for a token (stored, refreshed, or from a login) instead of giving up.
    /// Absent from a serialized config means off, so older traces replay as
    /// recorded; the host's config file turns it on for every remote backend
    /// that does not send its own `Authorization` header.
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    pub oauth: bool,
    /// Which of its tools, prompts and resources are served, and under what
    /// names and descriptions (default: all, as the backend says them).
    #[serde(default, skip_serializing_if = "Selection::is_everything")]
    pub selection: Selection,
}

fn yes() -> bool {
    true
}

fn is_default_overrides(o: &PolicyOverrides) -> bool {
    *o == PolicyOverrides::default()
}

impl ServerConfig {
    /// A stdio backend with defaults, for tests and embedders.
    pub fn stdio(command: &str, args: &[&str]) -> Self {
        ServerConfig::with_transport(Transport::Stdio {
            command: command.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::new(),
            cwd: None,
        })
    }

    /// Whether tether manages an OAuth credential for it (a remote with `oauth` on).
    pub fn manages_credential(&self) -> bool {
        self.oauth && !self.transport.is_stdio()
    }

    /// A Streamable HTTP backend with defaults.
    pub fn http(url: &str) -> Self {
        ServerConfig::with_transport(Transport::Http { url: url.to_string(), headers: BTreeMap::new() })
    }

    fn with_transport(transport: Transport) -> Self {
        ServerConfig {
            transport,
            prefixed: true,
            vital: false,
            lazy: false,
            disabled: false,
            broken: None,
            policy: PolicyOverrides::default(),
            era: None,
            oauth: false,
            selection: Selection::default(),
        }
    }
}

/// Which tools the client sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Every backend's tools, namespaced.
    #[default]
    Flat,
    /// Six tools of tether's own instead (`list_servers`, `search_tools`,
    /// `describe_tool`, `execute_tool`, `reconnect_server`, `server_events`):
    /// for clients that should not see hundreds of tools.
    Meta,
}

/// The whole gateway configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Backends by name. A `BTreeMap` so iteration order, and so every trace, is deterministic.
    pub servers: BTreeMap<String, ServerConfig>,
    /// Gateway-wide policy.
    pub policy: Policy,
    /// Bounds on tables and queues.
    pub limits: Limits,
    /// Joins a backend name and a tool or prompt name.
    pub separator: String,
    /// Flat (default) or meta mode.
    pub mode: Mode,
    /// Also serve clients of the stateless 2026-07-28 revision (`server/discover`,
    /// per-request `_meta`, POSTs without a session). On by default; off, such a
    /// client's probe gets -32601 and it falls back to `initialize`, as the
    /// specification asks. Absent from a serialized config means off, so traces
    /// recorded before the default changed replay as they ran.
    #[serde(default, alias = "modern_clients", skip_serializing_if = "core::ops::Not::not")]
    pub stateless_clients: bool,
    /// Flat mode: also serve the admin tools `list_servers`, `reconnect_server`
    /// and `server_events` (meta mode always has them). Off by default.
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    pub admin_tools: bool,
    /// Send every event to clients as `notifications/message` (logger
    /// `tether`), at or above the level each client set. On by default; absent
    /// from a serialized config means off, so older traces replay as recorded.
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    pub client_events: bool,
    /// A client is told a list changed at most once per this many ms: changes
    /// within the window are folded into one `list_changed` at its end, and none
    /// is sent when the list is back to what the client last saw (a flapping
    /// backend). 0: every change at once. Default 2000; absent from a serialized
    /// config means 0, so older traces replay as recorded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub list_changed_debounce_ms: u64,
    /// Tasks tether runs itself, for clients that declared the tasks extension
    /// and backends that do not run tasks.
    #[serde(default)]
    pub tasks: Tasks,
    /// What each OAuth scope grants a client of the HTTP listener (see
    /// [`crate::access`]); empty: a valid token sees everything.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: crate::access::ScopeMap,
    /// This process is one replica of several behind a load balancer: a stop
    /// request drains it (see [`Cluster`]). `None`: a stop stops at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Cluster>,
}

/// How a replica leaves its balancer without failing a call: on a stop request
/// it reports not ready at once and keeps serving for `drain_delay_ms` (the time
/// a balancer needs to notice), lets the calls in flight finish until
/// `drain_timeout_ms` after the request, ends its clients' streams, then stops.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cluster {
    /// How long a draining replica keeps taking new requests after it started
    /// reporting not ready.
    pub drain_delay_ms: u64,
    /// How long after the stop request the calls in flight may take to finish.
    pub drain_timeout_ms: u64,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster { drain_delay_ms: 5_000, drain_timeout_ms: 25_000 }
    }
}

impl Cluster {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.drain_timeout_ms < self.drain_delay_ms {
            return Err(ConfigError::new("cluster.drain_timeout_ms", "must be at least cluster.drain_delay_ms"));
        }
        if self.drain_timeout_ms > 3_600_000 {
            return Err(ConfigError::new("cluster.drain_timeout_ms", "must be at most 3600000 (an hour)"));
        }
        Ok(())
    }
}

/// Gateway-side tasks: a `tools/call` of a client that declared the tasks
/// extension, not answered within `sync_window_ms`, becomes a task tether keeps
/// (status, result, cancellation) for `ttl_ms`, whatever happens to the client's
/// connection. Bounded in count and in bytes of kept results.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tasks {
    /// A call answered within this many ms is answered directly; a slower one
    /// becomes a task.
    pub sync_window_ms: u64,
    /// How long a task and its result are kept, counted from its creation.
    pub ttl_ms: u64,
    /// How often clients are told to poll a task's status.
    pub poll_interval_ms: u64,
    /// Tasks kept at once, running and finished; 0 turns gateway-side tasks off.
    pub max_tasks: u32,
    /// Bytes of results kept over all tasks; a result that does not fit fails its task.
    pub max_result_bytes: u64,
}

impl Default for Tasks {
    fn default() -> Self {
        Tasks {
            sync_window_ms: 500,
            ttl_ms: 3_600_000,
            poll_interval_ms: 1000,
            max_tasks: 256,
            max_result_bytes: 64 * 1024 * 1024,
        }
    }
}

impl Tasks {
    fn validate(&self) -> Result<(), ConfigError> {
        // Room for the error that replaces a result too large to keep.
        if self.max_result_bytes < 1024 {
            return Err(ConfigError::new("tasks.max_result_bytes", "must be at least 1024"));
        }
        if self.ttl_ms < 1000 {
            return Err(ConfigError::new("tasks.ttl_ms", "must be at least 1000"));
        }
        if self.poll_interval_ms == 0 || self.poll_interval_ms > self.ttl_ms {
            return Err(ConfigError::new("tasks.poll_interval_ms", "must be between 1 and tasks.ttl_ms"));
        }
        if self.sync_window_ms > 60_000 {
            return Err(ConfigError::new("tasks.sync_window_ms", "must be at most 60000"));
        }
        Ok(())
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Default for Config {
    fn default() -> Self {
        Config {
            servers: BTreeMap::new(),
            policy: Policy::default(),
            limits: Limits::default(),
            separator: "__".to_string(),
            mode: Mode::Flat,
            stateless_clients: true,
            admin_tools: false,
            client_events: true,
            list_changed_debounce_ms: 2_000,
            tasks: Tasks::default(),
            scopes: BTreeMap::new(),
            cluster: None,
        }
    }
}

impl Config {
    /// Adds a backend (builder style, for tests and embedders).
    pub fn server(mut self, name: &str, server: ServerConfig) -> Self {
        self.servers.insert(name.to_string(), server);
        self
    }

    /// The resolved policy of one backend.
    pub fn policy_for(&self, name: &str) -> Policy {
        match self.servers.get(name) {
            Some(s) => self.policy.with(&s.policy),
            None => self.policy.clone(),
        }
    }

    /// Checks everything the engine relies on; the error names the offending field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.separator.is_empty() || self.separator.len() > 8 || !self.separator.bytes().all(is_name_byte) {
            return Err(ConfigError::new("separator", "must be 1 to 8 characters from [A-Za-z0-9_-]"));
        }
        self.policy.validate("policy")?;
        self.limits.validate()?;
        self.tasks.validate()?;
        if let Some(cluster) = &self.cluster {
            cluster.validate()?;
        }
        crate::access::check(&self.scopes)
            .map_err(|(scope, message)| ConfigError::new(format!("scopes.{scope}"), message))?;
        if self.list_changed_debounce_ms > 60_000 {
            return Err(ConfigError::new("list_changed_debounce_ms", "must be at most 60000 (one minute)"));
        }
        for (name, server) in &self.servers {
            let path = format!("servers.{name}");
            if name.is_empty() || name.len() > 48 || !name.bytes().all(is_name_byte) {
                return Err(ConfigError::new(path, "server names must be 1 to 48 characters from [A-Za-z0-9_-]"));
            }
            match &server.transport {
                Transport::Stdio { command, .. } if command.trim().is_empty() => {
                    return Err(ConfigError::new(format!("{path}.command"), "must not be empty"));
                }
                Transport::Http { url, .. } | Transport::Sse { url, .. }
                    if !(url.starts_with("http://") || url.starts_with("https://")) =>
                {
                    return Err(ConfigError::new(format!("{path}.url"), "must start with http:// or https://"));
                }
                _ => {}
            }
            self.policy.with(&server.policy).validate(&format!("{path}.policy"))?;
            let selection = &server.selection;
            for (kind, filter) in
                [("tools", &selection.tools), ("prompts", &selection.prompts), ("resources", &selection.resources)]
            {
                filter.check().map_err(|message| ConfigError::new(format!("{path}.{kind}"), &message))?;
            }
            if !selection.resources.overrides.is_empty() {
                let message = "resources take allow and deny only: overrides are for tools and prompts";
                return Err(ConfigError::new(format!("{path}.resources.override"), message));
            }
        }
        Ok(())
    }
}

/// Characters allowed in served names: `[A-Za-z0-9_-]`.
pub(crate) fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// A configuration the engine cannot run, with the dotted path of the field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path, e.g. `servers.fs.policy.crash_limit`.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    fn new(path: impl Into<String>, message: &str) -> Self {
        ConfigError { path: path.into(), message: message.to_string() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_design() {
        let p = Policy::default();
        assert_eq!(p.call_retry_delays_ms, [500, 1000, 2000]);
        assert_eq!((p.breaker_threshold, p.breaker_cooldown_ms), (5, 30_000));
        assert_eq!(p.restart_delays_ms, [1000, 5000, 15_000]);
        assert_eq!((p.crash_limit, p.crash_window_ms), (3, 300_000));
        assert_eq!((p.reconnect_initial_ms, p.reconnect_max_ms), (1000, 180_000));
        assert_eq!(p.health_interval_ms, 120_000);
        assert_eq!(p.aggregation_deadline_ms, 2000);
        assert_eq!(p.idle_timeout_ms, 180_000);
        assert_eq!((p.request_timeout_ms, p.request_timeout_max_ms), (60_000, 600_000));
        assert_eq!(p.connect_timeout_ms, 30_000);
    }

    #[test]
    fn overrides_apply_per_server() {
        let json = r#"{"servers":{"fs":{"type":"stdio","command":"fs-server","policy":{"crash_limit":5}},
                       "web":{"type":"http","url":"https://example.test/mcp"}}}"#;
        let config: Config = serde_json::from_str(json).unwrap();
        config.validate().unwrap();
        assert_eq!(config.policy_for("fs").crash_limit, 5);
        assert_eq!(config.policy_for("web").crash_limit, 3);
        assert!(config.servers["fs"].prefixed);
    }

    #[test]
    fn errors_name_the_field() {
        let mut config = Config::default().server("fs", ServerConfig::stdio(" ", &[]));
        assert_eq!(config.validate().unwrap_err().path, "servers.fs.command");
        config = Config::default().server("web", ServerConfig::http("ftp://x"));
        assert_eq!(config.validate().unwrap_err().path, "servers.web.url");
        config = Config::default().server("bad name", ServerConfig::stdio("x", &[]));
        assert_eq!(config.validate().unwrap_err().path, "servers.bad name");
        let mut s = ServerConfig::stdio("x", &[]);
        s.policy.crash_limit = Some(0);
        config = Config::default().server("fs", s);
        assert_eq!(config.validate().unwrap_err().path, "servers.fs.policy.crash_limit");
        config = Config { separator: ".".into(), ..Config::default() };
        assert_eq!(config.validate().unwrap_err().path, "separator");
    }

    #[test]
    fn unknown_policy_keys_are_rejected() {
        let json = r#"{"policy":{"breaker_treshold":3}}"#;
        let err = serde_json::from_str::<Config>(json).unwrap_err().to_string();
        assert!(err.contains("breaker_treshold"), "{err}");
    }
}
