//! A scriptable mock MCP server, used by the end-to-end tests (as `mock-mcp`) and by
//! `tether demo` (which re-executes `tether` as mocks).
//!
//! The mock speaks MCP 2025-11-25 (JSON-RPC 2.0) over stdio, as newline-delimited
//! JSON, or over Streamable HTTP at `/mcp`. Flags ([`MockOptions`]) make it crash,
//! hang, fail, answer slowly, refuse every HTTP request with a fixed status, and
//! record what it received, so tests can walk `tether` through its failure paths.
//!
//! Built-in tools: `echo`, `add`, `slow`, `fail`, `crash`, `hang`, `progress`,
//! `sample`, `pid`, `add_tool` and `log`, plus `t0`..`tN-1` with `--extra-tools N`
//! and `added` once `add_tool` has run. There is one resource (`mock://info`), one
//! resource template (`mock://item/{id}`) and one prompt (`greet`); completions,
//! resource subscriptions and `logging/setLevel` work too.
//!
//! Hostile modes, for the tests that tether survives misbehaving backends:
//! `--flood-stdout` and `--flood-stderr` write as fast as they can,
//! `--close-stdout-after-ms` closes stdout and keeps running, `--spawn-grandchild`
//! leaves a process behind (in the group, or in a session of its own),
//! `--print-env` shows what the backend inherited, and over HTTP `--cut-streams`
//! cuts request streams at random before their response, which the GET that
//! resumes the stream with `Last-Event-ID` then delivers.
//!
//! With `--stateless` the mock is instead a stateless-only server of the stateless
//! revision 2026-07-28, over either transport, and the other flags keep working:
//!
//! - `server/discover` describes it; `initialize` is -32601 naming the supported
//!   version, and so are `ping`, `logging/setLevel` and `resources/(un)subscribe`;
//! - every other request must carry `_meta` with the protocol version and the
//!   client capabilities (-32602 without them, -32022 for another version);
//!   results carry `resultType`, lists and reads `ttlMs: 0` and `cacheScope`;
//! - the mock never sends a request: `sample` and the extra tool `elicit` answer
//!   `input_required` and finish on the retry that carries the input responses and
//!   the `requestState` minted for them (-32021 without the client capability);
//! - `log` logs only at the request's `_meta` log level; `subscriptions/listen` is
//!   acknowledged, then receives `tools/list_changed` (from `add_tool`) and
//!   `resources/updated` (from `echo`, for `mock://info`) until it is cancelled;
//! - over HTTP only POST is served, with no sessions; `MCP-Protocol-Version` and
//!   `Mcp-Method` must match the body (400, -32020), -32601 is a 404 and the other
//!   request errors a 400, and a listen is an SSE stream with keep-alive comments
//!   that ends when the client closes it.
//!
//! The crate has a module per part:
//!
//! - here, the options ([`MockOptions`]) and the entry point, [`run`];
//! - `hostile`: the modes that misbehave on purpose (floods, a closed stdout,
//!   leftover processes);
//! - `protocol`: messages, errors, sessions and calls: a message is parsed into an
//!   `Incoming`, and every request is served on its own thread, which writes what
//!   it produces (notifications, server requests, then the response) to an
//!   `Outlet`;
//! - `server`: the mock itself (`Mock`): `dispatch` serves the 2025-11-25 methods,
//!   `dispatch_stateless` the 2026-07-28 ones;
//! - `tools`: the built-in tools, resources, prompts and completions;
//! - the transports, which only move bytes: `stdio`, where every outlet is stdout,
//!   and `http` (cargo feature `http`), where each POST is an outlet that answers
//!   with a JSON body, or with an SSE stream when something has to be sent before
//!   the response.
//!
//! Without the `http` feature the crate has no HTTP server, and `--http` is refused
//! with an error saying so: the `tether` binary runs its mocks over stdio only and
//! puts its own HTTP server in front of them when it needs one.

#![warn(missing_docs)]

mod hostile;
#[cfg(feature = "http")]
mod http;
mod protocol;
mod server;
mod stdio;
#[cfg(test)]
mod tests;
mod tools;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::{process, thread};

use serde_json::{Map, Value};

use crate::server::Mock;

/// The MCP protocol version the mock speaks (and answers with when the client asks
/// for a version it does not know).
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// The stateless MCP revision the mock speaks with `--stateless` (and only it).
pub const STATELESS_PROTOCOL_VERSION: &str = "2026-07-28";

/// The exit code of a deliberate crash (`crash` tool, `--crash-after`).
pub const CRASH_EXIT_CODE: i32 = 3;

/// How the mock behaves. Every field is a command-line flag.
///
/// Derives [`clap::Args`], so both the `mock-mcp` test binary and `tether` itself
/// can flatten it into their command lines.
#[derive(Debug, Clone, clap::Args)]
pub struct MockOptions {
    /// Serve Streamable HTTP at /mcp on ADDR (e.g. 127.0.0.1:0; port 0 picks a free
    /// port, reported as `listening on ADDR` on stderr) instead of stdio. Only
    /// where the mock was built with its HTTP front (`mock-mcp` is; `tether` is not).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,

    /// The name reported in serverInfo.
    #[arg(long, value_name = "NAME", default_value = "mock")]
    pub name: String,

    /// Offer only these built-in tools (comma-separated; default: all of them).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub tools: Option<Vec<String>>,

    /// Also offer N trivial tools t0..tN-1 (for scale tests).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub extra_tools: usize,

    /// Pad each extra tool's description to about BYTES (for catalogs of
    /// hundreds of megabytes; each page is built when it is asked for).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub extra_tool_bytes: usize,

    /// Pad every tool result with `_meta.pad`, a string of BYTES (for answers over
    /// a frame bound from small requests).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub pad_results: usize,

    /// List tools N to a page, with a `nextCursor` (0: all on one page).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub tools_page_size: usize,

    /// Exit with code 3 once N tool calls have been answered.
    #[arg(long, value_name = "N")]
    pub crash_after: Option<u64>,

    /// Exit with CODE at once, before reading anything (after printing --stderr).
    #[arg(long, value_name = "CODE", allow_negative_numbers = true)]
    pub exit_on_start: Option<i32>,

    /// Print TEXT as a line on stderr at start.
    #[arg(long, value_name = "TEXT")]
    pub stderr: Option<String>,

    /// Answer ping with -32601 (method not found).
    #[arg(long)]
    pub no_ping: bool,

    /// Delay the answer to initialize (to server/discover with --stateless) by MS
    /// milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub init_delay_ms: u64,

    /// HTTP mode: answer every POST with this status (e.g. 401, 403, 500).
    #[arg(long, value_name = "CODE", value_parser = clap::value_parser!(u16).range(100..=599))]
    pub http_status: Option<u16>,

    /// Append the method of every message received to PATH, one per line (the file
    /// may be shared by successive processes).
    #[arg(long, value_name = "PATH")]
    pub state_file: Option<PathBuf>,

    /// Speak only the stateless MCP revision 2026-07-28: server/discover instead of
    /// initialize, per-request _meta (version, client capabilities, log level),
    /// input_required results instead of server requests (tools `sample` and
    /// `elicit`), subscriptions/listen for change notifications, and over HTTP POST
    /// only, without sessions, with MCP-Protocol-Version and Mcp-Method checked.
    #[arg(long)]
    pub stateless: bool,

    /// Once initialized, write `notifications/message` lines (about 1 KiB each) to
    /// stdout as fast as possible, forever: a backend flooding its output.
    #[arg(long)]
    pub flood_stdout: bool,

    /// From the start, write lines to stderr as fast as possible, forever.
    #[arg(long)]
    pub flood_stderr: bool,

    /// On a tool call, write BYTES of `x` and never answer: over stdio one line
    /// with no newline on stdout, over HTTP one SSE event on the call's stream.
    /// Either is longer than any frame bound.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub junk_on_call: usize,

    /// Close stdout MS milliseconds after starting, then keep running (even past
    /// EOF on stdin) until killed.
    #[arg(long, value_name = "MS")]
    pub close_stdout_after_ms: Option<u64>,

    /// At start, leave a process behind (`sleep 3600`, holding the mock's stdout
    /// and stderr): in the mock's process group, or in a session of its own (as
    /// with setsid). Its pid is printed on stderr (`grandchild pid N`) and
    /// appended to --grandchild-pid-file. With --exit-on-start the mock then dies.
    #[arg(long, value_name = "WHERE", value_enum)]
    pub spawn_grandchild: Option<Grandchild>,

    /// Append the pid of the --spawn-grandchild process to PATH, one per line.
    #[arg(long, value_name = "PATH")]
    pub grandchild_pid_file: Option<PathBuf>,

    /// Print the environment on stderr at start, as one line: `environment: `
    /// and a JSON object of every variable.
    #[arg(long)]
    pub print_env: bool,

    /// HTTP mode: answer every request POST with an SSE stream that opens with a
    /// priming event (`id`, `retry: 50`) and is cut at random points (a PRNG seeded
    /// with SEED) before the response, which is then delivered on the GET that
    /// resumes it with `Last-Event-ID` (a few events before that id replayed too;
    /// resumed GETs may be cut again). Each cut is reported on stderr
    /// (`cut-streams: cut N ...`).
    #[arg(long, value_name = "SEED")]
    pub cut_streams: Option<u64>,
}

/// Where `--spawn-grandchild` puts the process it leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Grandchild {
    /// In the mock's process group (a group kill reaches it).
    SameGroup,
    /// In a new session and process group (only its ancestry and inheritance tie
    /// it to the mock).
    NewSession,
}

impl Default for MockOptions {
    /// The options of a plain `mock-mcp` with no flags.
    fn default() -> Self {
        MockOptions {
            http: None,
            name: "mock".to_string(),
            tools: None,
            extra_tools: 0,
            extra_tool_bytes: 0,
            pad_results: 0,
            tools_page_size: 0,
            crash_after: None,
            exit_on_start: None,
            stderr: None,
            no_ping: false,
            init_delay_ms: 0,
            http_status: None,
            state_file: None,
            stateless: false,
            flood_stdout: false,
            junk_on_call: 0,
            flood_stderr: false,
            close_stdout_after_ms: None,
            spawn_grandchild: None,
            grandchild_pid_file: None,
            print_env: false,
            cut_streams: None,
        }
    }
}

/// The command line of a standalone mock.
#[derive(clap::Parser)]
#[command(name = "mock-mcp", version, about = "A scriptable mock MCP server for tether's tests")]
struct StandaloneCommand {
    #[command(flatten)]
    options: MockOptions,
}

impl MockOptions {
    /// Parses the process's arguments as the command line of a standalone mock
    /// (`mock-mcp [FLAGS]`), exiting with a usage message when they are wrong.
    pub fn from_command_line() -> Self {
        <StandaloneCommand as clap::Parser>::parse().options
    }
}

/// Runs the mock until its client goes away: over stdio until stdin reaches EOF
/// (requests in flight then get up to a second to be answered, and `run` returns
/// `Ok`), over HTTP (`--http`) until the process is killed.
///
/// `--stderr`, `--exit-on-start`, the `crash` tool and `--crash-after` end the
/// process from inside. Errors are an unknown name in `--tools`, an address that
/// cannot be bound, `--http` in a build without the HTTP front (refused before
/// anything else happens), or a failure to read stdin.
pub fn run(options: MockOptions) -> io::Result<()> {
    #[cfg(not(feature = "http"))]
    if let Some(addr) = &options.http {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "--http {addr}: this mock was built without its HTTP front (the `http` feature of \
                 tether-mock); serve it over stdio, with `tether serve --listen ADDR` in front of it for \
                 HTTP, or use the tests' `mock-mcp`"
            ),
        ));
    }
    if options.print_env {
        let vars: Map<String, Value> = std::env::vars_os()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), Value::String(v.to_string_lossy().into_owned())))
            .collect();
        eprintln!("environment: {}", Value::Object(vars));
    }
    if let Some(text) = &options.stderr {
        eprintln!("{text}");
    }
    if let Some(place) = options.spawn_grandchild {
        hostile::spawn_grandchild(place, options.grandchild_pid_file.as_deref())?;
    }
    if let Some(code) = options.exit_on_start {
        process::exit(code);
    }
    if options.flood_stderr {
        thread::spawn(hostile::flood_stderr);
    }
    if let Some(ms) = options.close_stdout_after_ms {
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(ms));
            hostile::close_stdout();
        });
    }
    let mock = Arc::new(Mock::new(options)?);
    let result = match mock.options.http.clone() {
        #[cfg(feature = "http")]
        Some(addr) => http::serve_http(mock.clone(), &addr),
        _ => stdio::serve_stdio(mock.clone(), io::stdin().lock(), io::stdout()),
    };
    if mock.options.close_stdout_after_ms.is_some() {
        // Still running, deaf and mute, until killed.
        loop {
            thread::sleep(Duration::from_secs(3600));
        }
    }
    result
}
