//! Command-line interface (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
pub use tether_host::flags::PolicyFlags;

/// tether: a resilient MCP gateway.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about, long_about = None)]
pub struct Cli {
    /// Configuration file (Claude Desktop `mcpServers`, VS Code `servers`, with an optional `tether` section).
    #[arg(long, short, global = true, env = "TETHER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Write every input to this file as a trace (replay it with `tether replay`).
    #[arg(long, global = true)]
    pub record: Option<PathBuf>,
    /// Log level for stderr (error, warn, info, debug, trace) or a tracing filter.
    /// Default: info for serve (status changes and warnings), error for check and
    /// demo (they print their own report), warn for the rest.
    #[arg(long, global = true, env = "TETHER_LOG")]
    pub log_level: Option<String>,
    /// More log detail: once for debug (backends' stderr, process starts and
    /// exits), twice for trace.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Less log detail: once for warnings only, twice for errors only.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub quiet: u8,
    #[command(flatten)]
    pub policy: PolicyFlags,
    /// `serve`'s flags, for `tether` alone (which serves): `tether --listen ADDR`
    /// is `tether serve --listen ADDR`.
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// How `serve` reaches its clients.
#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// Serve MCP over Streamable HTTP at `http://ADDR/mcp` (e.g. 127.0.0.1:8080).
    /// stdio is then not served unless `--stdio` is also given.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Also serve stdio when listening.
    #[arg(long)]
    pub stdio: bool,
    /// Serve the status endpoints and page (`/status`, `/metrics`, `/events`,
    /// `/healthz`, `/readyz`, `/`) at ADDR without an MCP endpoint, e.g. beside
    /// stdio. With `--listen` they are served there too.
    #[arg(long, value_name = "ADDR")]
    pub status_listen: Option<String>,
    /// Bearer token HTTP clients must send (`Authorization: Bearer TOKEN`).
    #[arg(long, env = "TETHER_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// A browser origin allowed besides loopback ones (repeatable), e.g. `https://app.example.com`.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// Largest HTTP request body, in bytes (larger: 413).
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Listen on an address other machines can reach without `--auth-token`
    /// (refused otherwise: anyone who can reach it could use every backend).
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// HTTP connections open at once; more are answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = 512)]
    pub max_connections: usize,
    /// HTTP connections open at once from one IP address (behind a reverse
    /// proxy every client has the proxy's: raise it to --max-connections).
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub max_connections_per_peer: usize,
    /// Answer GET with 405 instead of opening the server-to-client stream.
    #[arg(long)]
    pub no_get_stream: bool,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the configured backends as one MCP server over stdio (the default),
    /// or over Streamable HTTP with `--listen`.
    Serve(ServeArgs),
    /// Start every backend once and print a status table; exit non-zero if any failed.
    Check,
    /// Show the backends of every running tether serving this config file (or of
    /// the one at --url) as a table; exit 0 when every backend is online (or
    /// dormant), 1 when one is not, 2 when no tether is reached.
    Status(StatusArgs),
    /// Restart a backend of every running tether serving this config file (also
    /// one that is permanently_failed); exit 1 when tether has no such backend,
    /// 2 when no tether runs.
    Restart {
        /// The server's name in the configuration.
        name: String,
    },
    /// Reconnect a backend now (a remote one: without waiting out its backoff).
    Reconnect {
        /// The server's name in the configuration.
        name: String,
    },
    /// A backend's recent stderr lines and events, oldest first, across restarts.
    Logs {
        /// The server's name in the configuration.
        name: String,
        /// How many of the last lines.
        #[arg(long, short = 'n', default_value_t = tether_host::control::DEFAULT_LOG_LINES)]
        lines: usize,
    },
    /// Log in to remote servers that use OAuth, see where each login stands, log out.
    #[command(subcommand)]
    Auth(AuthCommand),
    /// Copy the MCP servers of a client's configuration into tether's file (the
    /// one `--config` names, else the default); with `--rewrite`, then point the
    /// client at tether. Exit 1 when a server is defined differently in both.
    Import(ImportArgs),
    /// Run a recorded trace through the engine and print the actions.
    Replay {
        /// The trace file.
        trace: PathBuf,
        /// Print actions as JSON lines instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// A self-contained tour with built-in mock backends: discovery, a crash and
    /// restart, a crash loop, a breaker trip, an HTTP backend going down and back.
    Demo,
    /// Run the built-in mock MCP backend over stdio (the demo's backends).
    ///
    /// Without `--http`: the binary's one HTTP server is `serve --listen`, which
    /// the demo puts in front of a stdio mock for its HTTP backend.
    #[command(hide = true)]
    MockBackend(tether_mock::MockOptions),
}

/// `tether import ...`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The client whose servers to import: claude-desktop, cursor, vscode
    /// (`.vscode/mcp.json` here, else the user's `mcp.json`, else the `mcp` block
    /// of the user's `settings.json`), claude-code (user-wide servers and this
    /// directory's project servers), or the path of a file of one of those shapes.
    #[arg(long, value_name = "CLIENT|PATH", default_value = "claude-desktop")]
    pub from: crate::commands::import::Source,
    /// Then rewrite the client's file (after a backup beside it) so that its only
    /// server is tether, run with this configuration.
    #[arg(long)]
    pub rewrite: bool,
    /// Print what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `tether auth ...`.
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Log in to one remote server: prints the URL, opens it in the browser
    /// ($BROWSER, else the system's opener), waits for the login and stores the
    /// credential where a running tether picks it up.
    Login {
        /// The server's name in the configuration.
        name: String,
    },
    /// Each remote server whose login tether manages: method, scopes, expiry,
    /// whether it renews itself.
    Status,
    /// Revoke the server's tokens where it supports that, and delete the stored credential.
    Logout {
        /// The server's name in the configuration.
        name: String,
    },
}

/// How `status` reaches a running tether and what it prints.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A tether serving HTTP: its base URL, or its `/mcp` or `/status` URL (a
    /// bare `host:port` or port is taken as http on it). Without it, every tether
    /// running with this config file is asked over its control channel.
    #[arg(long, env = "TETHER_STATUS_URL")]
    pub url: Option<String>,
    /// The bearer token tether was started with (`--auth-token`).
    #[arg(long, env = "TETHER_AUTH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the `/status` JSON as tether sent it instead of the table.
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Keep the table up to date until interrupted (Ctrl-C): from `/events`
    /// with `--url`, else asking again every second.
    #[arg(long)]
    pub watch: bool,
    /// When to colour the status cells (auto: when stdout is a terminal and
    /// NO_COLOR is not set; CLICOLOR_FORCE forces it).
    #[arg(long, value_enum, default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,
}

/// `--color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    /// When stdout is a terminal and NO_COLOR is not set (or CLICOLOR_FORCE is).
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}
