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
//! With `--stateless` the mock is instead a modern-only server of the stateless
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
//! The file has three parts:
//!
//! - the options and the entry point, [`run`];
//! - the protocol (`Mock`, `Session`, `Call`): a message is parsed into an
//!   `Incoming`, and every request is served on its own thread, which writes what it
//!   produces (notifications, server requests, then the response) to an `Outlet`;
//!   `dispatch` serves the 2025-11-25 methods, `dispatch_stateless` the 2026-07-28
//!   ones;
//! - the transports, which only move bytes: over stdio every outlet is stdout; over
//!   HTTP each POST is an outlet that answers with a JSON body, or with an SSE stream
//!   when something has to be sent before the response.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufRead, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use std::{fs, process, thread};

use serde_json::{json, Map, Value};

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
    /// port, reported as `listening on ADDR` on stderr) instead of stdio.
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
            crash_after: None,
            exit_on_start: None,
            stderr: None,
            no_ping: false,
            init_delay_ms: 0,
            http_status: None,
            state_file: None,
            stateless: false,
            flood_stdout: false,
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
/// cannot be bound, or a failure to read stdin.
pub fn run(options: MockOptions) -> io::Result<()> {
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
        spawn_grandchild(place, options.grandchild_pid_file.as_deref())?;
    }
    if let Some(code) = options.exit_on_start {
        process::exit(code);
    }
    if options.flood_stderr {
        thread::spawn(flood_stderr);
    }
    if let Some(ms) = options.close_stdout_after_ms {
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(ms));
            close_stdout();
        });
    }
    let mock = Arc::new(Mock::new(options)?);
    let result = match mock.options.http.clone() {
        Some(addr) => serve_http(mock.clone(), &addr),
        None => serve_stdio(mock.clone(), io::stdin().lock(), io::stdout()),
    };
    if mock.options.close_stdout_after_ms.is_some() {
        // Still running, deaf and mute, until killed.
        loop {
            thread::sleep(Duration::from_secs(3600));
        }
    }
    result
}

// ---------------------------------------------------------------------------
// Hostile modes
// ---------------------------------------------------------------------------

/// Starts `sleep 3600` holding our stdout and stderr, where `place` says.
fn spawn_grandchild(place: Grandchild, pid_file: Option<&std::path::Path>) -> io::Result<()> {
    let mut sleep = process::Command::new("sleep");
    sleep.arg("3600").stdin(process::Stdio::null());
    #[cfg(unix)]
    if place == Grandchild::NewSession {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe and touches only the new process.
        unsafe {
            sleep.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
    }
    let child = sleep.spawn()?;
    let pid = child.id();
    // Not waited for: it is meant to be left behind.
    std::mem::forget(child);
    eprintln!("grandchild pid {pid}");
    if let Some(path) = pid_file {
        let mut file = fs::OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(file, "{pid}")?;
    }
    Ok(())
}

/// Writes numbered lines to stderr as fast as the pipe takes them, forever.
fn flood_stderr() {
    let mut stderr = io::stderr().lock();
    let mut buf = String::new();
    let mut n: u64 = 0;
    loop {
        buf.clear();
        while buf.len() < 64 * 1024 {
            n += 1;
            buf.push_str(&format!("flood {n}: the quick brown fox jumps over the lazy dog\n"));
        }
        if stderr.write_all(buf.as_bytes()).is_err() {
            return;
        }
    }
}

/// Writes `notifications/message` to `outlet` as fast as it takes them, forever.
fn flood_stdout(outlet: Arc<dyn Outlet>) {
    let padding = "x".repeat(1000);
    for n in 0u64.. {
        outlet.send(&notification(
            "notifications/message",
            json!({"level": "info", "logger": "flood", "data": format!("{n} {padding}")}),
        ));
    }
}

/// Points stdout at /dev/null: the pipe to the client closes, and later writes
/// go nowhere (rather than into whatever file would reuse descriptor 1).
fn close_stdout() {
    let _ = io::stdout().flush();
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        if let Ok(null) = fs::OpenOptions::new().write(true).open("/dev/null") {
            // SAFETY: dup2 onto descriptor 1, which stays valid (now /dev/null).
            unsafe {
                libc::dup2(null.as_raw_fd(), 1);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Protocol
// ---------------------------------------------------------------------------

/// Protocol versions the mock accepts in `initialize`, newest first.
const SUPPORTED_VERSIONS: [&str; 4] = [PROTOCOL_VERSION, "2025-06-18", "2025-03-26", "2024-11-05"];

/// The one listed resource.
const INFO_URI: &str = "mock://info";

/// The URI prefix of the resource template `mock://item/{id}`.
const ITEM_PREFIX: &str = "mock://item/";

/// The `instructions` the mock gives its clients.
const INSTRUCTIONS: &str = "A mock MCP server for testing tether.";

/// The tool `add_tool` adds.
const ADDED_TOOL: &str = "added";

/// Per-request `_meta` keys of the stateless revision.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// The `_meta` key naming the listen a notification belongs to.
const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The result `_meta` key of the server's identity.
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The methods served with `--stateless`; everything else (`initialize`, `ping`,
/// `logging/setLevel`, `resources/subscribe`, ...) is -32601.
const STATELESS_METHODS: [&str; 10] = [
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "subscriptions/listen",
];

/// How often an open listen over HTTP sends an SSE comment, to keep the stream
/// alive and to notice a client that has gone.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// MCP log levels, least severe first.
const LOG_LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
struct RpcError {
    code: i64,
    message: String,
    /// The optional `data` member.
    data: Option<Value>,
}

impl RpcError {
    fn parse_error(message: impl Into<String>) -> Self {
        RpcError { code: -32700, message: message.into(), data: None }
    }

    fn invalid_request(message: impl Into<String>) -> Self {
        RpcError { code: -32600, message: message.into(), data: None }
    }

    fn method_not_found(method: &str) -> Self {
        RpcError { code: -32601, message: format!("method not found: {method}"), data: None }
    }

    fn invalid_params(message: impl Into<String>) -> Self {
        RpcError { code: -32602, message: message.into(), data: None }
    }

    fn internal(message: impl Into<String>) -> Self {
        RpcError { code: -32603, message: message.into(), data: None }
    }

    /// MCP's "resource not found".
    fn resource_not_found(uri: &str) -> Self {
        RpcError { code: -32002, message: format!("resource not found: {uri}"), data: None }
    }

    /// A stateless server's "resource not found" (-32002 is retired in 2026-07-28).
    fn unknown_resource(uri: &str) -> Self {
        RpcError::invalid_params(format!("resource not found: {uri}"))
    }

    /// A stateless server's answer to `initialize`, naming the versions it speaks.
    fn initialize_refused() -> Self {
        RpcError {
            code: -32601,
            message: format!(
                "method not found: initialize (this server speaks only the stateless MCP revision; \
                 supported versions: {STATELESS_PROTOCOL_VERSION})"
            ),
            data: Some(json!({"supported": [STATELESS_PROTOCOL_VERSION]})),
        }
    }

    /// `HeaderMismatch`: a stateless HTTP request's headers disagree with its body.
    fn header_mismatch(message: impl Into<String>) -> Self {
        RpcError { code: -32020, message: message.into(), data: None }
    }

    /// `MissingRequiredClientCapability`: the request needs `capability`.
    fn missing_capability(capability: &str) -> Self {
        RpcError {
            code: -32021,
            message: format!("missing required client capability: {capability}"),
            data: Some(json!({"requiredCapabilities": {capability: {}}})),
        }
    }

    /// `UnsupportedProtocolVersion`, for a stateless request at `requested`.
    fn unsupported_version(requested: &str) -> Self {
        RpcError {
            code: -32022,
            message: format!("unsupported protocol version: {requested}"),
            data: Some(json!({"supported": [STATELESS_PROTOCOL_VERSION], "requested": requested})),
        }
    }
}

/// One message from the client, sorted by what it expects back.
#[derive(Debug, PartialEq)]
enum Incoming {
    /// Expects exactly one response.
    Request { id: Value, method: String, params: Value },
    /// Expects nothing.
    Notification { method: String, params: Value },
    /// The client's answer to a request the mock sent (`sampling/createMessage`):
    /// its `result`, or its `error` object.
    Response { id: Value, outcome: Result<Value, Value> },
}

/// Parses one JSON-RPC message. A frame that is not one yields the error response
/// to send back: -32700 for bad JSON, -32600 for JSON that is not a message.
fn parse_message(frame: &[u8]) -> Result<Incoming, Value> {
    let value: Value = serde_json::from_slice(frame)
        .map_err(|e| error_response(&Value::Null, &RpcError::parse_error(format!("parse error: {e}"))))?;
    let Value::Object(mut object) = value else {
        return Err(error_response(&Value::Null, &RpcError::invalid_request("a message must be a JSON object")));
    };
    let id = object.remove("id");
    let reply_id = id.clone().filter(is_valid_id).unwrap_or(Value::Null);
    let invalid = |message: &str| error_response(&reply_id, &RpcError::invalid_request(message));
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("`jsonrpc` must be \"2.0\""));
    }
    let params = object.remove("params").unwrap_or(Value::Null);
    match (object.remove("method"), id) {
        (Some(Value::String(method)), None) => Ok(Incoming::Notification { method, params }),
        (Some(Value::String(method)), Some(id)) if is_valid_id(&id) => Ok(Incoming::Request { id, method, params }),
        (Some(Value::String(_)), Some(_)) => Err(invalid("`id` must be a string or a number")),
        (Some(_), _) => Err(invalid("`method` must be a string")),
        (None, Some(id)) => {
            if let Some(result) = object.remove("result") {
                Ok(Incoming::Response { id, outcome: Ok(result) })
            } else if let Some(error) = object.remove("error") {
                Ok(Incoming::Response { id, outcome: Err(error) })
            } else {
                Err(invalid("a message needs a `method`, a `result` or an `error`"))
            }
        }
        (None, None) => Err(invalid("a message needs a `method`, a `result` or an `error`")),
    }
}

/// Whether `id` may identify a request (MCP forbids null ids).
fn is_valid_id(id: &Value) -> bool {
    id.is_string() || id.is_number()
}

/// A map key for a request id (`1` and `"1"` stay distinct).
fn id_key(id: &Value) -> String {
    id.to_string()
}

fn success_response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error_response(id: &Value, error: &RpcError) -> Value {
    let mut object = json!({"code": error.code, "message": error.message});
    if let Some(data) = &error.data {
        object["data"] = data.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": object})
}

fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// Where the messages produced while serving one request go.
///
/// Over stdio every outlet writes lines to stdout; over HTTP each POST has its own,
/// which turns into a JSON body or an SSE stream.
trait Outlet: Send + Sync {
    /// Sends a notification or a server-to-client request tied to the request.
    fn send(&self, message: &Value);

    /// Sends the request's response; nothing follows it.
    fn finish(&self, response: &Value);

    /// Announces that messages will precede the response (HTTP opens its SSE stream
    /// now rather than at the first message).
    fn open_stream(&self) {}

    /// Checks that the client can still be reached, sending a keep-alive if the
    /// transport has one (an SSE comment): `false` once it is known to be gone.
    fn keep_alive(&self) -> bool {
        true
    }
}

/// Why serving a request stopped short of a result.
#[derive(Debug)]
enum Stop {
    /// The client cancelled the request: it gets no response.
    Cancelled,
    /// Answered with a JSON-RPC error.
    Error(RpcError),
    /// A tool failed: answered with a result carrying `isError: true` and this text.
    ToolError(String),
    /// The request needs the client's input first (stateless mode): answered with
    /// this `input_required` result.
    InputRequired(Value),
}

impl From<RpcError> for Stop {
    fn from(error: RpcError) -> Self {
        Stop::Error(error)
    }
}

/// Locks a mutex, ignoring poisoning: a panicking request thread must not take the
/// rest of the mock down with it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A client request being served. Its thread waits here for time to pass, for a
/// cancellation, or for the client's answer to a request the mock sent it.
#[derive(Default)]
struct Call {
    state: Mutex<CallState>,
    wake: Condvar,
}

#[derive(Default)]
struct CallState {
    cancelled: bool,
    reply: Option<Result<Value, Value>>,
}

impl Call {
    /// Marks the call cancelled and wakes its thread.
    fn cancel(&self) {
        lock(&self.state).cancelled = true;
        self.wake.notify_all();
    }

    /// Hands the client's answer to a server request to the waiting thread.
    fn deliver(&self, reply: Result<Value, Value>) {
        lock(&self.state).reply = Some(reply);
        self.wake.notify_all();
    }

    /// Waits for `duration`, or stops early when the call is cancelled.
    fn pause(&self, duration: Duration) -> Result<(), Stop> {
        // A deadline too far out to represent is a wait that only a cancel ends.
        let deadline = Instant::now().checked_add(duration);
        let mut state = lock(&self.state);
        loop {
            if state.cancelled {
                return Err(Stop::Cancelled);
            }
            state = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(());
                    }
                    self.wake.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0
                }
                None => self.wake.wait(state).unwrap_or_else(PoisonError::into_inner),
            };
        }
    }

    /// Waits for the client's answer to a server request, or for a cancel.
    fn await_reply(&self) -> Result<Result<Value, Value>, Stop> {
        let mut state = lock(&self.state);
        loop {
            if state.cancelled {
                return Err(Stop::Cancelled);
            }
            if let Some(reply) = state.reply.take() {
                return Ok(reply);
            }
            state = self.wake.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Waits until the call is cancelled, which may be never.
    fn await_cancel(&self) -> Stop {
        match self.pause(Duration::MAX) {
            Ok(()) | Err(Stop::Cancelled) => Stop::Cancelled,
            Err(other) => other,
        }
    }
}

/// One client's state: stdio has one session per process, HTTP one per
/// `Mcp-Session-Id`.
struct Session {
    initialized: AtomicBool,
    /// Index in [`LOG_LEVELS`] of the least severe level sent.
    log_threshold: AtomicUsize,
    subscriptions: Mutex<HashSet<String>>,
    /// Client requests being served, by id.
    calls: Mutex<HashMap<String, Arc<Call>>>,
    /// Signalled whenever a request leaves `calls`.
    call_ended: Condvar,
    /// Server requests awaiting the client's answer, by id, with the call that sent them.
    awaiting: Mutex<HashMap<String, Arc<Call>>>,
    /// Open `subscriptions/listen` requests (stateless mode).
    listens: Mutex<Listens>,
}

/// A session's open listens.
#[derive(Default)]
struct Listens {
    open: Vec<Listen>,
    /// The transport is closing: a listen opened now ends at once.
    closing: bool,
}

/// An open `subscriptions/listen`: where its notifications go and which it wants.
struct Listen {
    /// The listen request's id, which is also its subscription id.
    id: Value,
    filter: ListenFilter,
    call: Arc<Call>,
    outlet: Arc<dyn Outlet>,
}

/// The notifications a listen asked for that the mock honours.
#[derive(Debug, Default, PartialEq)]
struct ListenFilter {
    tools_list_changed: bool,
    prompts_list_changed: bool,
    resources_list_changed: bool,
    /// URIs for `notifications/resources/updated`, when the client asked for any.
    resource_subscriptions: Option<Vec<String>>,
}

impl ListenFilter {
    /// Reads `params.notifications`; -32602 when it is missing or ill-typed.
    fn parse(params: &Value) -> Result<Self, RpcError> {
        let Some(Value::Object(asked)) = params.get("notifications") else {
            return Err(RpcError::invalid_params("subscriptions/listen needs the object `notifications`"));
        };
        let flag = |name: &str| match asked.get(name) {
            None | Some(Value::Bool(false)) => Ok(false),
            Some(Value::Bool(true)) => Ok(true),
            Some(_) => Err(RpcError::invalid_params(format!("`notifications.{name}` must be a boolean"))),
        };
        let resource_subscriptions = match asked.get("resourceSubscriptions") {
            None => None,
            Some(Value::Array(uris)) => Some(
                uris.iter()
                    .map(|uri| uri.as_str().map(String::from))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| RpcError::invalid_params("`notifications.resourceSubscriptions` must list URIs"))?,
            ),
            Some(_) => return Err(RpcError::invalid_params("`notifications.resourceSubscriptions` must be an array")),
        };
        Ok(ListenFilter {
            tools_list_changed: flag("toolsListChanged")?,
            prompts_list_changed: flag("promptsListChanged")?,
            resources_list_changed: flag("resourcesListChanged")?,
            resource_subscriptions,
        })
    }

    /// The filter as the `notifications` of the acknowledgement.
    fn to_json(&self) -> Value {
        let mut object = Map::new();
        for (name, wanted) in [
            ("toolsListChanged", self.tools_list_changed),
            ("promptsListChanged", self.prompts_list_changed),
            ("resourcesListChanged", self.resources_list_changed),
        ] {
            if wanted {
                object.insert(name.to_string(), json!(true));
            }
        }
        if let Some(uris) = &self.resource_subscriptions {
            object.insert("resourceSubscriptions".to_string(), json!(uris));
        }
        Value::Object(object)
    }

    fn watches(&self, uri: &str) -> bool {
        self.resource_subscriptions.as_ref().is_some_and(|uris| uris.iter().any(|watched| watched == uri))
    }
}

impl Session {
    fn new() -> Self {
        Session {
            initialized: AtomicBool::new(false),
            log_threshold: AtomicUsize::new(0),
            subscriptions: Mutex::new(HashSet::new()),
            calls: Mutex::new(HashMap::new()),
            call_ended: Condvar::new(),
            awaiting: Mutex::new(HashMap::new()),
            listens: Mutex::new(Listens::default()),
        }
    }

    /// Registers a request as being served, so that a cancel can reach it.
    fn begin(&self, id: &Value) -> Arc<Call> {
        let call = Arc::new(Call::default());
        lock(&self.calls).insert(id_key(id), Arc::clone(&call));
        call
    }

    /// Forgets a request whose serving is over (unless a later request reused its
    /// id, which a stateless HTTP client sharing the session may do).
    fn end(&self, id: &Value, call: &Arc<Call>) {
        let mut calls = lock(&self.calls);
        if calls.get(&id_key(id)).is_some_and(|current| Arc::ptr_eq(current, call)) {
            calls.remove(&id_key(id));
        }
        drop(calls);
        self.call_ended.notify_all();
    }

    /// Applies `notifications/cancelled`.
    fn cancel(&self, id: &Value) {
        if let Some(call) = lock(&self.calls).get(&id_key(id)) {
            call.cancel();
        }
    }

    /// Cancels everything in flight (the session is over).
    fn close(&self) {
        for call in lock(&self.calls).values() {
            call.cancel();
        }
    }

    /// Gives the requests in flight up to `grace` to be answered, then closes the
    /// session.
    fn drain(&self, grace: Duration) {
        let deadline = Instant::now() + grace;
        let mut calls = lock(&self.calls);
        while !calls.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            calls = self.call_ended.wait_timeout(calls, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        drop(calls);
        self.close();
    }

    /// Routes the client's answer to the call that sent the server request.
    fn settle(&self, id: &Value, outcome: Result<Value, Value>) {
        if let Some(call) = lock(&self.awaiting).remove(&id_key(id)) {
            call.deliver(outcome);
        }
    }

    /// Opens a listen: sends its acknowledgement, then lets notifications reach it
    /// (under one lock, so that none precedes the acknowledgement). On a closing
    /// transport the listen is ended at once.
    fn open_listen(&self, listen: Listen, acknowledgement: &Value) {
        let mut listens = lock(&self.listens);
        if listens.closing {
            return listen.call.cancel();
        }
        listen.outlet.send(acknowledgement);
        listens.open.push(listen);
    }

    /// Forgets the listen served by `call`.
    fn close_listen(&self, call: &Arc<Call>) {
        lock(&self.listens).open.retain(|listen| !Arc::ptr_eq(&listen.call, call));
    }

    /// Ends every open listen, and those opened from now on (the transport is
    /// closing).
    fn end_listens(&self) {
        let mut listens = lock(&self.listens);
        listens.closing = true;
        for listen in &listens.open {
            listen.call.cancel();
        }
    }

    /// Sends the notification `method` to every open listen that `wants` it, with
    /// `params` (an object) plus the listen's subscription id.
    fn notify_listens(&self, method: &str, params: &Value, wants: impl Fn(&ListenFilter) -> bool) {
        for listen in lock(&self.listens).open.iter().filter(|listen| wants(&listen.filter)) {
            let mut params = params.clone();
            params["_meta"] = json!({META_SUBSCRIPTION_ID: listen.id});
            listen.outlet.send(&notification(method, params));
        }
    }

    fn is_subscribed(&self, uri: &str) -> bool {
        lock(&self.subscriptions).contains(uri)
    }

    fn logs_at(&self, level: &str) -> bool {
        let rank = LOG_LEVELS.iter().position(|l| *l == level).unwrap_or(0);
        rank >= self.log_threshold.load(Ordering::Relaxed)
    }
}

/// The built-in tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Builtin {
    Echo,
    Add,
    Slow,
    Fail,
    Crash,
    Hang,
    Progress,
    Sample,
    Pid,
    AddTool,
    Log,
    /// Stateless mode only.
    Elicit,
}

impl Builtin {
    const ALL: [Builtin; 11] = [
        Builtin::Echo,
        Builtin::Add,
        Builtin::Slow,
        Builtin::Fail,
        Builtin::Crash,
        Builtin::Hang,
        Builtin::Progress,
        Builtin::Sample,
        Builtin::Pid,
        Builtin::AddTool,
        Builtin::Log,
    ];

    /// The built-in tools offered only with `--stateless`.
    const STATELESS_ONLY: [Builtin; 1] = [Builtin::Elicit];

    /// The built-in tools a mock in this mode can offer, in `tools/list` order.
    fn available(stateless: bool) -> Vec<Builtin> {
        let extra = if stateless { &Builtin::STATELESS_ONLY[..] } else { &[] };
        Builtin::ALL.iter().chain(extra).copied().collect()
    }

    fn name(self) -> &'static str {
        match self {
            Builtin::Echo => "echo",
            Builtin::Add => "add",
            Builtin::Slow => "slow",
            Builtin::Fail => "fail",
            Builtin::Crash => "crash",
            Builtin::Hang => "hang",
            Builtin::Progress => "progress",
            Builtin::Sample => "sample",
            Builtin::Pid => "pid",
            Builtin::AddTool => "add_tool",
            Builtin::Log => "log",
            Builtin::Elicit => "elicit",
        }
    }

    fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().chain(Builtin::STATELESS_ONLY).find(|tool| tool.name() == name)
    }

    /// The tool's entry in `tools/list`.
    fn definition(self) -> Value {
        let no_arguments = json!({"type": "object", "properties": {}});
        let (description, schema) = match self {
            Builtin::Echo => (
                "Returns the text it is given.",
                json!({"type": "object", "properties": {
                    "text": {"type": "string", "description": "The text to return."}
                }, "required": ["text"]}),
            ),
            Builtin::Add => (
                "Adds two numbers.",
                json!({"type": "object", "properties": {
                    "a": {"type": "number", "description": "The first addend."},
                    "b": {"type": "number", "description": "The second addend."}
                }, "required": ["a", "b"]}),
            ),
            Builtin::Slow => (
                "Answers after a delay, without holding up other requests; cancellable.",
                json!({"type": "object", "properties": {
                    "ms": {"type": "integer", "minimum": 0, "description": "The delay in milliseconds."}
                }, "required": ["ms"]}),
            ),
            Builtin::Fail => ("Always fails with a tool error (isError: true).", no_arguments),
            Builtin::Crash => ("Makes the server exit with code 3 before answering.", no_arguments),
            Builtin::Hang => ("Never answers (until cancelled, and not even then).", no_arguments),
            Builtin::Progress => (
                "Reports progress every `ms` milliseconds for `steps` steps, then answers; cancellable.",
                json!({"type": "object", "properties": {
                    "steps": {"type": "integer", "minimum": 0, "default": 3, "description": "How many progress notifications to send."},
                    "ms": {"type": "integer", "minimum": 0, "default": 100, "description": "Milliseconds between notifications."}
                }}),
            ),
            Builtin::Sample => (
                "Asks the client to sample an LLM with the prompt and returns the answer's text.",
                json!({"type": "object", "properties": {
                    "prompt": {"type": "string", "description": "The user message to send."}
                }, "required": ["prompt"]}),
            ),
            Builtin::Pid => ("Returns the server's process id.", no_arguments),
            Builtin::AddTool => ("Adds a tool named `added` and sends notifications/tools/list_changed.", no_arguments),
            Builtin::Log => (
                "Sends the message as a notifications/message log entry, then answers.",
                json!({"type": "object", "properties": {
                    "message": {"type": "string", "description": "The message to log."}
                }, "required": ["message"]}),
            ),
            Builtin::Elicit => {
                ("Asks the client for a name (elicitation/create, form mode) and greets it.", no_arguments)
            }
        };
        let mut tool = json!({"name": self.name(), "description": description, "inputSchema": schema});
        if matches!(self, Builtin::Echo | Builtin::Add) {
            tool["annotations"] = json!({"readOnlyHint": true});
        }
        tool
    }
}

/// A tool the mock offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Builtin(Builtin),
    /// `t<N>` from `--extra-tools`.
    Extra(usize),
    /// The tool `add_tool` adds.
    Added,
}

/// What a tool sees of the `tools/call` that runs it.
struct ToolCall<'a> {
    session: &'a Session,
    call: &'a Arc<Call>,
    outlet: &'a dyn Outlet,
    /// The tool's name, as called.
    name: &'a str,
    arguments: &'a Map<String, Value>,
    progress_token: Option<&'a Value>,
    /// The request's `params` (for `inputResponses` and `requestState`).
    params: &'a Value,
    /// The request's `_meta`, in stateless mode.
    meta: Option<&'a RequestMeta>,
}

impl ToolCall<'_> {
    fn str_arg(&self, name: &str) -> Result<&str, Stop> {
        self.arguments
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| Stop::ToolError(format!("argument `{name}` must be a string")))
    }

    fn number_arg(&self, name: &str) -> Result<&serde_json::Number, Stop> {
        match self.arguments.get(name) {
            Some(Value::Number(number)) => Ok(number),
            _ => Err(Stop::ToolError(format!("argument `{name}` must be a number"))),
        }
    }

    /// A non-negative integer argument, or `default` when it is absent.
    fn count_arg(&self, name: &str, default: Option<u64>) -> Result<u64, Stop> {
        match (self.arguments.get(name), default) {
            (None, Some(default)) => Ok(default),
            (value, _) => value
                .and_then(Value::as_u64)
                .ok_or_else(|| Stop::ToolError(format!("argument `{name}` must be a non-negative integer"))),
        }
    }
}

/// What a stateless request's `_meta` says about its client.
#[derive(Debug)]
struct RequestMeta {
    capabilities: Map<String, Value>,
    /// The index in [`LOG_LEVELS`] of the least severe level the client wants
    /// logged, when it wants logs at all.
    log_threshold: Option<usize>,
}

impl RequestMeta {
    /// Reads `params._meta`: -32602 when the protocol version or the client
    /// capabilities are missing or ill-typed (or the log level is unknown), -32022
    /// when the version is not [`STATELESS_PROTOCOL_VERSION`].
    fn parse(params: &Value) -> Result<Self, RpcError> {
        let Some(meta) = params.get("_meta").and_then(Value::as_object) else {
            return Err(RpcError::invalid_params("missing `params._meta` (a stateless request needs it)"));
        };
        let version = match meta.get(META_PROTOCOL_VERSION) {
            Some(Value::String(version)) => version,
            Some(_) => {
                return Err(RpcError::invalid_params(format!("`_meta.{META_PROTOCOL_VERSION}` must be a string")))
            }
            None => return Err(RpcError::invalid_params(format!("missing `_meta.{META_PROTOCOL_VERSION}`"))),
        };
        let capabilities = match meta.get(META_CLIENT_CAPABILITIES) {
            Some(Value::Object(capabilities)) => capabilities.clone(),
            Some(_) => {
                return Err(RpcError::invalid_params(format!("`_meta.{META_CLIENT_CAPABILITIES}` must be an object")))
            }
            None => return Err(RpcError::invalid_params(format!("missing `_meta.{META_CLIENT_CAPABILITIES}`"))),
        };
        if version != STATELESS_PROTOCOL_VERSION {
            return Err(RpcError::unsupported_version(version));
        }
        let log_threshold = match meta.get(META_LOG_LEVEL) {
            None => None,
            Some(level) => Some(
                LOG_LEVELS
                    .iter()
                    .position(|known| Some(*known) == level.as_str())
                    .ok_or_else(|| RpcError::invalid_params(format!("unknown log level {level}")))?,
            ),
        };
        Ok(RequestMeta { capabilities, log_threshold })
    }

    /// Whether the client declared the capability `name`.
    fn has_capability(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(Value::is_object)
    }

    /// Whether the client asked for log entries at `level`.
    fn logs_at(&self, level: &str) -> bool {
        let rank = LOG_LEVELS.iter().position(|l| *l == level).unwrap_or(0);
        self.log_threshold.is_some_and(|threshold| rank >= threshold)
    }
}

/// Marks a stateless result as final (`"resultType": "complete"`).
fn complete_result(mut result: Value) -> Value {
    result["resultType"] = json!("complete");
    result
}

/// Adds a stateless list (or read) result's caching hints: stale at once, and
/// for this client only.
fn cacheable(mut result: Value) -> Value {
    result["ttlMs"] = json!(0);
    result["cacheScope"] = json!("private");
    result
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A tool result with one text item.
fn text_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}]})
}

/// The call a `requestState` was minted for: a tool and its arguments.
type MintedFor = (String, Map<String, Value>);

/// The mock server: its options and the state all sessions share.
struct Mock {
    options: MockOptions,
    /// The built-in tools offered, in `tools/list` order.
    offered: Vec<Builtin>,
    tool_added: AtomicBool,
    tool_calls_answered: AtomicU64,
    /// Held while a tool call is answered and counted under --crash-after.
    crash_gate: std::sync::Mutex<()>,
    next_server_request: AtomicU64,
    /// The `requestState`s minted for `input_required` results (stateless mode),
    /// with the tool and arguments of the call each belongs to.
    minted_states: Mutex<HashMap<String, MintedFor>>,
    next_state: AtomicU64,
    /// The keep-alive period of an open listen.
    keep_alive: Duration,
}

impl Mock {
    /// Checks the options; `--tools` must name built-in tools only.
    fn new(options: MockOptions) -> io::Result<Self> {
        let available = Builtin::available(options.stateless);
        let offered = match &options.tools {
            None => available,
            Some(names) => names
                .iter()
                .map(|name| name.trim())
                .filter(|name| !name.is_empty())
                .map(|name| {
                    Builtin::from_name(name).filter(|tool| available.contains(tool)).ok_or_else(|| {
                        let known: Vec<_> = available.iter().map(|tool| tool.name()).collect();
                        io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("--tools: unknown tool `{name}` (built-in tools: {})", known.join(", ")),
                        )
                    })
                })
                .collect::<io::Result<_>>()?,
        };
        Ok(Mock {
            options,
            offered,
            tool_added: AtomicBool::new(false),
            tool_calls_answered: AtomicU64::new(0),
            crash_gate: std::sync::Mutex::new(()),
            next_server_request: AtomicU64::new(1),
            minted_states: Mutex::new(HashMap::new()),
            next_state: AtomicU64::new(1),
            keep_alive: KEEP_ALIVE,
        })
    }

    /// Takes one message from the client. Requests are served on a thread of their
    /// own, answering through `outlet`; notifications and responses are applied at
    /// once and `outlet` is dropped unused.
    fn receive(self: &Arc<Self>, session: &Arc<Session>, message: Incoming, outlet: Arc<dyn Outlet>) {
        match message {
            Incoming::Request { id, method, params } => {
                self.record(&method);
                // Registered before the thread starts, so a cancel that follows the
                // request finds it.
                let call = session.begin(&id);
                let (mock, session_for_thread) = (Arc::clone(self), Arc::clone(session));
                let (id_for_thread, outlet_for_thread) = (id.clone(), Arc::clone(&outlet));
                let call_for_thread = Arc::clone(&call);
                let spawned = thread::Builder::new().name("mock-request".to_string()).spawn(move || {
                    mock.serve(
                        &session_for_thread,
                        &id_for_thread,
                        &method,
                        &params,
                        &call_for_thread,
                        &outlet_for_thread,
                    )
                });
                if let Err(e) = spawned {
                    session.end(&id, &call);
                    outlet.finish(&error_response(&id, &RpcError::internal(format!("cannot start a thread: {e}"))));
                }
            }
            Incoming::Notification { method, params } => {
                self.record(&method);
                if method == "notifications/cancelled" {
                    if let Some(id) = params.get("requestId") {
                        session.cancel(id);
                    }
                }
            }
            Incoming::Response { id, outcome } => session.settle(&id, outcome),
        }
    }

    /// Serves one request on the current thread, to its end.
    fn serve(
        &self,
        session: &Session,
        id: &Value,
        method: &str,
        params: &Value,
        call: &Arc<Call>,
        outlet: &Arc<dyn Outlet>,
    ) {
        let is_tool_call = method == "tools/call";
        if is_tool_call {
            self.crash_if_calls_used_up();
        }
        let outcome = if self.options.stateless {
            self.dispatch_stateless(session, id, method, params, call, outlet)
        } else {
            self.dispatch(session, method, params, call, &**outlet)
        };
        let response = match outcome {
            Ok(result) => Some(success_response(id, result)),
            Err(Stop::Error(error)) => Some(error_response(id, &error)),
            Err(Stop::ToolError(text)) => {
                let mut result = text_result(text);
                result["isError"] = json!(true);
                if self.options.stateless {
                    result = complete_result(result);
                }
                Some(success_response(id, result))
            }
            Err(Stop::InputRequired(result)) => Some(success_response(id, result)),
            Err(Stop::Cancelled) => None,
        };
        // With --crash-after, answering, counting and exiting happen under one
        // lock: a call running beside the last one allowed is never answered by a
        // process that is about to exit.
        let _counting = (is_tool_call && self.options.crash_after.is_some())
            .then(|| self.crash_gate.lock().unwrap_or_else(|p| p.into_inner()));
        if _counting.is_some() {
            self.crash_if_calls_used_up();
        }
        if let Some(response) = &response {
            outlet.finish(response);
        }
        // Only now, so that draining a session waits for the response to be written.
        session.end(id, call);
        if is_tool_call && response.is_some() {
            self.tool_calls_answered.fetch_add(1, Ordering::SeqCst);
            self.crash_if_calls_used_up();
        }
    }

    /// Exits once `--crash-after` tool calls have been answered.
    fn crash_if_calls_used_up(&self) {
        if let Some(limit) = self.options.crash_after {
            if self.tool_calls_answered.load(Ordering::SeqCst) >= limit {
                eprintln!("{}: crashing after {limit} tool calls (--crash-after)", self.options.name);
                process::exit(CRASH_EXIT_CODE);
            }
        }
    }

    /// Appends `method` to the state file, if there is one.
    fn record(&self, method: &str) {
        let Some(path) = &self.options.state_file else { return };
        let line = format!("{}\n", method.escape_debug());
        let appended = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("{}: cannot append to {}: {e}", self.options.name, path.display());
        }
    }

    fn dispatch(
        &self,
        session: &Session,
        method: &str,
        params: &Value,
        call: &Arc<Call>,
        outlet: &dyn Outlet,
    ) -> Result<Value, Stop> {
        match method {
            "initialize" => self.initialize(session, params, call),
            "ping" if !self.options.no_ping => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": self.tool_definitions()})),
            "tools/call" => self.call_tool(session, params, call, outlet, None),
            "resources/list" => Ok(resource_list()),
            "resources/templates/list" => Ok(resource_template_list()),
            "resources/read" => self.read_resource(params, RpcError::resource_not_found),
            "resources/subscribe" => {
                let uri = str_param(params, "uri")?;
                self.resource_text(uri).ok_or_else(|| RpcError::resource_not_found(uri))?;
                lock(&session.subscriptions).insert(uri.to_string());
                Ok(json!({}))
            }
            "resources/unsubscribe" => {
                lock(&session.subscriptions).remove(str_param(params, "uri")?);
                Ok(json!({}))
            }
            "prompts/list" => Ok(prompt_list()),
            "prompts/get" => get_prompt(params),
            "completion/complete" => complete(params),
            "logging/setLevel" => {
                let level = str_param(params, "level")?;
                let rank = LOG_LEVELS
                    .iter()
                    .position(|known| *known == level)
                    .ok_or_else(|| RpcError::invalid_params(format!("unknown log level `{level}`")))?;
                session.log_threshold.store(rank, Ordering::Relaxed);
                Ok(json!({}))
            }
            _ => Err(RpcError::method_not_found(method).into()),
        }
    }

    /// Serves one request of the stateless revision: `initialize` and unknown
    /// methods get -32601, then `_meta` is checked, then the method runs. Every
    /// result is marked complete; lists and reads carry caching hints.
    fn dispatch_stateless(
        &self,
        session: &Session,
        id: &Value,
        method: &str,
        params: &Value,
        call: &Arc<Call>,
        outlet: &Arc<dyn Outlet>,
    ) -> Result<Value, Stop> {
        if method == "initialize" {
            return Err(RpcError::initialize_refused().into());
        }
        if !STATELESS_METHODS.contains(&method) {
            return Err(RpcError::method_not_found(method).into());
        }
        let meta = RequestMeta::parse(params)?;
        let result = match method {
            "server/discover" => self.discover(call)?,
            "tools/list" => cacheable(json!({"tools": self.tool_definitions()})),
            "tools/call" => self.call_tool(session, params, call, &**outlet, Some(&meta))?,
            "resources/list" => cacheable(resource_list()),
            "resources/templates/list" => cacheable(resource_template_list()),
            "resources/read" => cacheable(self.read_resource(params, RpcError::unknown_resource)?),
            "prompts/list" => cacheable(prompt_list()),
            "prompts/get" => get_prompt(params)?,
            "completion/complete" => complete(params)?,
            "subscriptions/listen" => return Err(self.listen(session, id, params, call, outlet)),
            _ => return Err(RpcError::method_not_found(method).into()),
        };
        Ok(complete_result(result))
    }

    /// Answers `server/discover` (stateless mode), after `--init-delay-ms`.
    fn discover(&self, call: &Call) -> Result<Value, Stop> {
        call.pause(Duration::from_millis(self.options.init_delay_ms))?;
        Ok(cacheable(json!({
            "supportedVersions": [STATELESS_PROTOCOL_VERSION],
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "completions": {},
                "logging": {},
            },
            "instructions": INSTRUCTIONS,
            "_meta": {META_SERVER_INFO: {"name": self.options.name, "version": "1"}},
        })))
    }

    /// `subscriptions/listen` (stateless mode): acknowledges the notifications it
    /// honours, then holds the request open, never to be answered, until the
    /// client cancels it (stdio) or goes away (HTTP). Resource subscriptions are
    /// honoured for the URIs that can be read.
    fn listen(
        &self,
        session: &Session,
        id: &Value,
        params: &Value,
        call: &Arc<Call>,
        outlet: &Arc<dyn Outlet>,
    ) -> Stop {
        let mut filter = match ListenFilter::parse(params) {
            Ok(filter) => filter,
            Err(error) => return error.into(),
        };
        if let Some(uris) = &mut filter.resource_subscriptions {
            uris.retain(|uri| self.resource_text(uri).is_some());
        }
        let acknowledgement = notification(
            "notifications/subscriptions/acknowledged",
            json!({"_meta": {META_SUBSCRIPTION_ID: id}, "notifications": filter.to_json()}),
        );
        let listen = Listen { id: id.clone(), filter, call: Arc::clone(call), outlet: Arc::clone(outlet) };
        session.open_listen(listen, &acknowledgement);
        let stop = self.hold_open(call, &**outlet);
        session.close_listen(call);
        stop
    }

    /// Waits until the call is cancelled or its client is gone, sending a
    /// keep-alive every [`Mock::keep_alive`].
    fn hold_open(&self, call: &Call, outlet: &dyn Outlet) -> Stop {
        loop {
            if let Err(stop) = call.pause(self.keep_alive) {
                return stop;
            }
            if !outlet.keep_alive() {
                return Stop::Cancelled;
            }
        }
    }

    /// Answers `initialize`, once per session, after `--init-delay-ms`.
    fn initialize(&self, session: &Session, params: &Value, call: &Call) -> Result<Value, Stop> {
        if session.initialized.swap(true, Ordering::SeqCst) {
            return Err(RpcError::invalid_request("already initialized").into());
        }
        call.pause(Duration::from_millis(self.options.init_delay_ms))?;
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let version = requested.filter(|v| SUPPORTED_VERSIONS.contains(v)).unwrap_or(PROTOCOL_VERSION);
        Ok(json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": false},
                "prompts": {"listChanged": false},
                "completions": {},
                "logging": {},
            },
            "serverInfo": {"name": self.options.name, "version": env!("CARGO_PKG_VERSION")},
            "instructions": INSTRUCTIONS,
        }))
    }

    /// The tools offered now, in `tools/list` order.
    fn tools(&self) -> Vec<Tool> {
        let builtins = self.offered.iter().map(|&tool| Tool::Builtin(tool));
        let extras = (0..self.options.extra_tools).map(Tool::Extra);
        let added = self.tool_added.load(Ordering::SeqCst).then_some(Tool::Added);
        builtins.chain(extras).chain(added).collect()
    }

    fn tool_definitions(&self) -> Vec<Value> {
        let no_arguments = json!({"type": "object", "properties": {}});
        let define = |name: String, description: String| json!({"name": name, "description": description, "inputSchema": no_arguments});
        self.tools()
            .into_iter()
            .map(|tool| match tool {
                Tool::Builtin(builtin) => builtin.definition(),
                Tool::Extra(n) => define(format!("t{n}"), format!("Trivial tool number {n}; returns its name.")),
                Tool::Added => define(ADDED_TOOL.to_string(), "The tool add_tool added.".to_string()),
            })
            .collect()
    }

    fn find_tool(&self, name: &str) -> Option<Tool> {
        if let Some(builtin) = Builtin::from_name(name).filter(|tool| self.offered.contains(tool)) {
            return Some(Tool::Builtin(builtin));
        }
        if name == ADDED_TOOL {
            return self.tool_added.load(Ordering::SeqCst).then_some(Tool::Added);
        }
        let n: usize = name.strip_prefix('t')?.parse().ok()?;
        (n < self.options.extra_tools && name == format!("t{n}")).then_some(Tool::Extra(n))
    }

    fn call_tool(
        &self,
        session: &Session,
        params: &Value,
        call: &Arc<Call>,
        outlet: &dyn Outlet,
        meta: Option<&RequestMeta>,
    ) -> Result<Value, Stop> {
        let name = str_param(params, "name")?;
        let tool = self.find_tool(name).ok_or_else(|| RpcError::invalid_params(format!("unknown tool `{name}`")))?;
        let no_arguments = Map::new();
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => &no_arguments,
            Some(Value::Object(arguments)) => arguments,
            Some(_) => return Err(RpcError::invalid_params("`arguments` must be an object").into()),
        };
        let progress_token = params.pointer("/_meta/progressToken").filter(|token| !token.is_null());
        let tool_call = ToolCall { session, call, outlet, name, arguments, progress_token, params, meta };
        match tool {
            Tool::Builtin(builtin) => self.run_builtin(builtin, &tool_call),
            Tool::Extra(n) => Ok(text_result(format!("t{n}"))),
            Tool::Added => Ok(text_result("hello from the added tool")),
        }
    }

    fn run_builtin(&self, tool: Builtin, t: &ToolCall) -> Result<Value, Stop> {
        match tool {
            Builtin::Echo => {
                let text = t.str_arg("text")?;
                if t.meta.is_some() {
                    let params = json!({"uri": INFO_URI});
                    t.session.notify_listens("notifications/resources/updated", &params, |f| f.watches(INFO_URI));
                } else if t.session.is_subscribed(INFO_URI) {
                    t.outlet.send(&notification("notifications/resources/updated", json!({"uri": INFO_URI})));
                }
                Ok(text_result(text))
            }
            Builtin::Add => {
                let (a, b) = (t.number_arg("a")?, t.number_arg("b")?);
                let sum = match (a.as_i64(), b.as_i64()) {
                    (Some(a), Some(b)) => a.checked_add(b).map(|sum| sum.to_string()),
                    _ => None,
                };
                let sum = sum
                    .unwrap_or_else(|| (a.as_f64().unwrap_or(f64::NAN) + b.as_f64().unwrap_or(f64::NAN)).to_string());
                Ok(text_result(sum))
            }
            Builtin::Slow => {
                let ms = t.count_arg("ms", None)?;
                t.call.pause(Duration::from_millis(ms))?;
                Ok(text_result(format!("slept {ms} ms")))
            }
            Builtin::Fail => Err(Stop::ToolError("the fail tool always fails".to_string())),
            Builtin::Crash => {
                eprintln!("{}: crashing (crash tool)", self.options.name);
                process::exit(CRASH_EXIT_CODE)
            }
            Builtin::Hang => Err(t.call.await_cancel()),
            Builtin::Progress => self.progress(t),
            Builtin::Sample => match t.meta {
                Some(meta) => self.sample_stateless(t, meta),
                None => self.sample(t),
            },
            Builtin::Elicit => match t.meta {
                Some(meta) => self.elicit(t, meta),
                None => Err(Stop::ToolError("elicit needs --stateless".to_string())),
            },
            Builtin::Pid => Ok(text_result(process::id().to_string())),
            Builtin::AddTool => {
                self.tool_added.store(true, Ordering::SeqCst);
                if t.meta.is_some() {
                    let method = "notifications/tools/list_changed";
                    t.session.notify_listens(method, &json!({}), |f| f.tools_list_changed);
                } else {
                    t.outlet.send(&notification("notifications/tools/list_changed", json!({})));
                }
                Ok(text_result(format!("added tool `{ADDED_TOOL}`")))
            }
            Builtin::Log => {
                let message = t.str_arg("message")?;
                let wanted = match t.meta {
                    Some(meta) => meta.logs_at("info"),
                    None => t.session.logs_at("info"),
                };
                if wanted {
                    let params = json!({"level": "info", "logger": self.options.name, "data": message});
                    t.outlet.send(&notification("notifications/message", params));
                }
                Ok(text_result("logged"))
            }
        }
    }

    /// `progress`: one `notifications/progress` every `ms` for `steps` steps (when
    /// the call carries a progress token), then the answer.
    fn progress(&self, t: &ToolCall) -> Result<Value, Stop> {
        let steps = t.count_arg("steps", Some(3))?;
        let ms = t.count_arg("ms", Some(100))?;
        t.outlet.open_stream();
        for step in 1..=steps {
            t.call.pause(Duration::from_millis(ms))?;
            if let Some(token) = t.progress_token {
                let params = json!({
                    "progressToken": token,
                    "progress": step,
                    "total": steps,
                    "message": format!("step {step} of {steps}"),
                });
                t.outlet.send(&notification("notifications/progress", params));
            }
        }
        Ok(text_result(format!("done {steps} steps")))
    }

    /// `sample`: sends `sampling/createMessage` to the client and returns the text
    /// of its answer.
    fn sample(&self, t: &ToolCall) -> Result<Value, Stop> {
        let prompt = t.str_arg("prompt")?;
        t.outlet.open_stream();
        let id = json!(self.next_server_request.fetch_add(1, Ordering::SeqCst));
        let key = id_key(&id);
        lock(&t.session.awaiting).insert(key.clone(), Arc::clone(t.call));
        let params = sampling_params(prompt);
        t.outlet.send(&json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": params}));
        let reply = t.call.await_reply();
        lock(&t.session.awaiting).remove(&key);
        match reply? {
            Ok(result) => sampled_text(&result)
                .map(text_result)
                .ok_or_else(|| Stop::ToolError(format!("the sampling answer has no text content: {result}"))),
            Err(error) => {
                let message = error.get("message").and_then(Value::as_str).unwrap_or("no message");
                let code = error.get("code").map_or_else(|| "no code".to_string(), Value::to_string);
                Err(Stop::ToolError(format!("the client refused to sample: {message} ({code})")))
            }
        }
    }

    /// `sample` in stateless mode: asks for `sampling/createMessage` with an
    /// `input_required` result, and returns the text of the retry's answer.
    fn sample_stateless(&self, t: &ToolCall, meta: &RequestMeta) -> Result<Value, Stop> {
        let prompt = t.str_arg("prompt")?;
        let request = json!({"method": "sampling/createMessage", "params": sampling_params(prompt)});
        let answer = self.input_response(t, meta, "sample", "sampling", request)?;
        sampled_text(&answer)
            .map(text_result)
            .ok_or_else(|| Stop::ToolError(format!("the sampling answer has no text content: {answer}")))
    }

    /// `elicit` (stateless mode only): asks for a name with a form-mode
    /// `elicitation/create`, and greets it (or says it was declined or cancelled).
    fn elicit(&self, t: &ToolCall, meta: &RequestMeta) -> Result<Value, Stop> {
        let request = json!({"method": "elicitation/create", "params": {
            "mode": "form",
            "message": "name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        }});
        let answer = self.input_response(t, meta, "elicit", "elicitation", request)?;
        match answer.get("action").and_then(Value::as_str) {
            Some("accept") => answer
                .pointer("/content/name")
                .and_then(Value::as_str)
                .map(|name| text_result(format!("hello {name}")))
                .ok_or_else(|| Stop::ToolError(format!("the elicitation answer has no name: {answer}"))),
            Some("decline") => Ok(text_result("declined")),
            Some("cancel") => Ok(text_result("cancelled")),
            _ => Err(Stop::ToolError(format!("the elicitation answer has no known action: {answer}"))),
        }
    }

    /// One round trip of the stateless revision's multi-round requests: the
    /// client's answer to the input request `key` when this call carries it (with
    /// the `requestState` minted for it), otherwise [`Stop::InputRequired`] asking
    /// for it. Needs the client capability `capability` (-32021 without it); a
    /// `requestState` not minted for this tool and these arguments is -32602.
    fn input_response(
        &self,
        t: &ToolCall,
        meta: &RequestMeta,
        key: &str,
        capability: &str,
        request: Value,
    ) -> Result<Value, Stop> {
        if !meta.has_capability(capability) {
            return Err(RpcError::missing_capability(capability).into());
        }
        let responses = match t.params.get("inputResponses") {
            None | Some(Value::Null) => None,
            Some(Value::Object(responses)) => Some(responses),
            Some(_) => return Err(RpcError::invalid_params("`inputResponses` must be an object").into()),
        };
        match t.params.get("requestState") {
            None if responses.is_some() => {
                return Err(
                    RpcError::invalid_params("`inputResponses` without the `requestState` minted with them").into()
                )
            }
            None => {}
            Some(Value::String(state)) => self.check_state(state, t)?,
            Some(_) => return Err(RpcError::invalid_params("`requestState` must be a string").into()),
        }
        if let Some(answer) = responses.and_then(|responses| responses.get(key)) {
            return Ok(answer.clone());
        }
        Err(Stop::InputRequired(json!({
            "resultType": "input_required",
            "inputRequests": {key: request},
            "requestState": self.mint_state(t),
        })))
    }

    /// A fresh `requestState` for this call: the hex of its tool, its arguments
    /// and a serial number, remembered until the process ends.
    fn mint_state(&self, t: &ToolCall) -> String {
        let serial = self.next_state.fetch_add(1, Ordering::SeqCst);
        let state = hex(json!({"n": serial, "tool": t.name, "arguments": t.arguments}).to_string().as_bytes());
        lock(&self.minted_states).insert(state.clone(), (t.name.to_string(), t.arguments.clone()));
        state
    }

    /// Whether `state` was minted for a call of this tool with these arguments.
    fn check_state(&self, state: &str, t: &ToolCall) -> Result<(), RpcError> {
        match lock(&self.minted_states).get(state) {
            Some((tool, arguments)) if tool == t.name && arguments == t.arguments => Ok(()),
            Some(_) => Err(RpcError::invalid_params("`requestState` was minted for another call")),
            None => Err(RpcError::invalid_params("`requestState` is not one this server minted")),
        }
    }

    /// `resources/read`; an unknown URI gets the error `not_found` makes.
    fn read_resource(&self, params: &Value, not_found: fn(&str) -> RpcError) -> Result<Value, Stop> {
        let uri = str_param(params, "uri")?;
        let text = self.resource_text(uri).ok_or_else(|| not_found(uri))?;
        Ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}))
    }

    /// The text of a readable resource.
    fn resource_text(&self, uri: &str) -> Option<String> {
        if uri == INFO_URI {
            return Some(format!("This is the mock MCP server `{}`.", self.options.name));
        }
        let id = uri.strip_prefix(ITEM_PREFIX).filter(|id| !id.is_empty())?;
        Some(format!("item {id}"))
    }
}

/// The `resources/list` result: the one resource, `mock://info`.
fn resource_list() -> Value {
    json!({"resources": [{
        "uri": INFO_URI,
        "name": "info",
        "description": "What this mock is.",
        "mimeType": "text/plain",
    }]})
}

/// The `resources/templates/list` result: the one template, `mock://item/{id}`.
fn resource_template_list() -> Value {
    json!({"resourceTemplates": [{
        "uriTemplate": format!("{ITEM_PREFIX}{{id}}"),
        "name": "item",
        "description": "An item by id; reads as `item <id>`.",
        "mimeType": "text/plain",
    }]})
}

/// The `prompts/list` result: the one prompt, `greet`.
fn prompt_list() -> Value {
    json!({"prompts": [{
        "name": "greet",
        "description": "Greets someone by name.",
        "arguments": [{"name": "name", "description": "Who to greet.", "required": true}],
    }]})
}

/// A required string parameter of a request.
fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("missing string parameter `{name}`")))
}

/// The params of the `sampling/createMessage` the `sample` tool asks for.
fn sampling_params(prompt: &str) -> Value {
    json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": 256,
    })
}

/// The first text of a `sampling/createMessage` result, whose `content` is one
/// content item or (since 2025-11-25) a list of them.
fn sampled_text(result: &Value) -> Option<String> {
    let content = result.get("content")?;
    let items = match content {
        Value::Array(items) => items.as_slice(),
        item => std::slice::from_ref(item),
    };
    items.iter().find_map(|item| item.get("text").and_then(Value::as_str)).map(String::from)
}

/// `prompts/get` for the one prompt, `greet`.
fn get_prompt(params: &Value) -> Result<Value, Stop> {
    let prompt = str_param(params, "name")?;
    if prompt != "greet" {
        return Err(RpcError::invalid_params(format!("unknown prompt `{prompt}`")).into());
    }
    let name = params
        .pointer("/arguments/name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("prompt `greet` needs the argument `name`"))?;
    Ok(json!({
        "description": "Greets someone by name.",
        "messages": [{"role": "user", "content": {"type": "text", "text": format!("Hello, {name}!")}}],
    }))
}

/// `completion/complete`: names for `greet`'s argument, ids for the item template.
fn complete(params: &Value) -> Result<Value, Stop> {
    let reference = params.get("ref").ok_or_else(|| RpcError::invalid_params("missing `ref`"))?;
    let prefix = params
        .pointer("/argument/value")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("missing `argument.value`"))?;
    let candidates: &[&str] = match (reference.get("type").and_then(Value::as_str), params.pointer("/argument/name")) {
        (Some("ref/prompt"), Some(argument)) if reference["name"] == "greet" && argument == "name" => {
            &["alice", "bob", "carol"]
        }
        (Some("ref/resource"), Some(argument)) if argument == "id" => &["1", "2", "3", "42"],
        _ => &[],
    };
    let values: Vec<&str> = candidates.iter().copied().filter(|value| value.starts_with(prefix)).collect();
    Ok(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
}

// ---------------------------------------------------------------------------
// stdio transport
// ---------------------------------------------------------------------------

/// Writes every message as one line of `W`.
struct LineOutlet<W> {
    output: Mutex<W>,
}

impl<W: Write> LineOutlet<W> {
    fn write_line(&self, message: &Value) {
        let line = format!("{message}\n");
        let mut output = lock(&self.output);
        // A failed write means the client is gone; EOF on stdin ends the mock.
        let _ = output.write_all(line.as_bytes()).and_then(|()| output.flush());
    }
}

impl<W: Write + Send> Outlet for LineOutlet<W> {
    fn send(&self, message: &Value) {
        self.write_line(message);
    }

    fn finish(&self, response: &Value) {
        self.write_line(response);
    }
}

/// How long the requests in flight at EOF on stdin get to be answered, so that
/// `printf '…' | mock-mcp` shows its answers, while a `hang` delays exit only briefly.
const EOF_GRACE: Duration = Duration::from_secs(1);

/// Serves one session over newline-delimited JSON until `input` reaches EOF, then
/// gives the requests in flight [`EOF_GRACE`] to be answered and abandons the rest.
fn serve_stdio<R: BufRead, W: Write + Send + 'static>(mock: Arc<Mock>, mut input: R, output: W) -> io::Result<()> {
    let outlet: Arc<dyn Outlet> = Arc::new(LineOutlet { output: Mutex::new(output) });
    let session = Arc::new(Session::new());
    if mock.options.flood_stdout {
        let (flood, initialized) = (outlet.clone(), session.clone());
        thread::spawn(move || {
            while !initialized.initialized.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            // The answer to initialize goes first.
            thread::sleep(Duration::from_millis(50));
            flood_stdout(flood);
        });
    }
    let mut frame = Vec::new();
    loop {
        frame.clear();
        if input.read_until(b'\n', &mut frame)? == 0 {
            session.end_listens();
            session.drain(EOF_GRACE);
            return Ok(());
        }
        if frame.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_message(&frame) {
            Ok(message) => mock.receive(&session, message, Arc::clone(&outlet)),
            Err(error) => outlet.finish(&error),
        }
    }
}

// ---------------------------------------------------------------------------
// HTTP transport
// ---------------------------------------------------------------------------

/// The largest POST body read.
const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// Binds `addr`, reports the bound address on stderr and serves forever.
fn serve_http(mock: Arc<Mock>, addr: &str) -> io::Result<()> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| io::Error::new(io::ErrorKind::AddrNotAvailable, format!("cannot listen on {addr}: {e}")))?;
    match server.server_addr().to_ip() {
        Some(bound) => eprintln!("listening on {bound}"),
        None => eprintln!("listening on {addr}"),
    }
    HttpFront::new(mock).serve(&server);
    Ok(())
}

/// The Streamable HTTP endpoint: sessions by `Mcp-Session-Id`, or with
/// `--stateless` none at all.
struct HttpFront {
    mock: Arc<Mock>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// With `--stateless`, the one session all POSTs share: the requests in flight
    /// (which `notifications/cancelled` may name) and the open listens.
    shared: Arc<Session>,
    /// With `--cut-streams`, every request stream's events, for resumption.
    replay: Option<Arc<Replay>>,
}

impl HttpFront {
    fn new(mock: Arc<Mock>) -> Self {
        let replay = mock.options.cut_streams.map(|seed| Arc::new(Replay::new(seed)));
        HttpFront { mock, sessions: Mutex::new(HashMap::new()), shared: Arc::new(Session::new()), replay }
    }

    /// Handles requests until the server shuts down.
    fn serve(&self, server: &tiny_http::Server) {
        for request in server.incoming_requests() {
            self.handle(request);
        }
    }

    fn handle(&self, request: tiny_http::Request) {
        let path = request.url().split('?').next().unwrap_or_default();
        if path != "/mcp" {
            return respond(request, plain(404, "not found: the MCP endpoint is /mcp"));
        }
        if self.mock.options.stateless {
            return match request.method() {
                tiny_http::Method::Post => self.post_stateless(request),
                _ => respond(
                    request,
                    plain(405, "method not allowed: POST (a stateless server has no GET stream and no sessions)")
                        .with_header(header("Allow", "POST")),
                ),
            };
        }
        match request.method() {
            tiny_http::Method::Post => self.post(request),
            tiny_http::Method::Delete => self.delete(request),
            tiny_http::Method::Get if self.replay.is_some() && header_value(&request, "Last-Event-ID").is_some() => {
                self.resume(request)
            }
            _ => respond(
                request,
                plain(405, "method not allowed: POST or DELETE").with_header(header("Allow", "POST, DELETE")),
            ),
        }
    }

    /// Reads a POST's body; `Err` is the answer when it is not to be served (it
    /// cannot be read, it is too large, or `--http-status` refuses everything).
    fn read_body(&self, request: &mut tiny_http::Request) -> Result<Vec<u8>, HttpResponse> {
        let mut body = Vec::new();
        if let Err(e) = request.as_reader().take(MAX_BODY_BYTES + 1).read_to_end(&mut body) {
            return Err(plain(400, &format!("cannot read the body: {e}")));
        }
        if let Some(status) = self.mock.options.http_status {
            if let Some(method) = peek_method(&body) {
                self.mock.record(&method);
            }
            return Err(forced_status(status));
        }
        if body.len() as u64 > MAX_BODY_BYTES {
            return Err(plain(413, "the body is too large"));
        }
        Ok(body)
    }

    fn post(&self, mut request: tiny_http::Request) {
        let body = match self.read_body(&mut request) {
            Ok(body) => body,
            Err(refusal) => return respond(request, refusal),
        };
        let message = match parse_message(&body) {
            Ok(message) => message,
            Err(error) => return respond(request, json_body(400, &error)),
        };
        let (session_id, session) = if matches!(&message, Incoming::Request { method, .. } if method == "initialize") {
            let id = new_session_id();
            let session = Arc::new(Session::new());
            lock(&self.sessions).insert(id.clone(), Arc::clone(&session));
            (id, session)
        } else {
            match self.session_of(&request) {
                Ok(found) => found,
                Err(refusal) => return respond(request, refusal),
            }
        };
        let exchange: Arc<dyn Outlet> = match &self.replay {
            Some(replay) if matches!(&message, Incoming::Request { method, .. } if method != "initialize") => {
                Arc::new(CutExchange::open(Arc::clone(replay), request, &session_id))
            }
            _ => Arc::new(Exchange::new(request, Some(session_id))),
        };
        self.mock.receive(&session, message, exchange);
    }

    /// A GET with `Last-Event-ID` under `--cut-streams`: replays the stream that
    /// event belongs to, on a thread of its own (404 for an unknown event).
    fn resume(&self, request: tiny_http::Request) {
        let Some(replay) = &self.replay else { return };
        let session_id = match self.session_of(&request) {
            Ok((id, _)) => id,
            Err(refusal) => return respond(request, refusal),
        };
        let last = header_value(&request, "Last-Event-ID").and_then(|v| v.trim().parse::<u64>().ok());
        let Some((stream, index, first_new)) = last.and_then(|last| replay.locate(last)) else {
            return respond(request, plain(404, "unknown Last-Event-ID"));
        };
        let replay = Arc::clone(replay);
        thread::spawn(move || replay.serve_resumption(request, &session_id, stream, (index, first_new)));
    }

    /// A POST to a stateless mock: no session is issued or required, and a
    /// request's headers must agree with its body (400 and -32020 otherwise).
    fn post_stateless(&self, mut request: tiny_http::Request) {
        let body = match self.read_body(&mut request) {
            Ok(body) => body,
            Err(refusal) => return respond(request, refusal),
        };
        let message = match parse_message(&body) {
            Ok(message) => message,
            Err(error) => return respond(request, json_body(400, &error)),
        };
        if let Incoming::Request { id, method, params } = &message {
            if let Err(error) = check_stateless_headers(&request, method, params) {
                self.mock.record(method);
                return respond(request, json_body(400, &error_response(id, &error)));
            }
        }
        let exchange: Arc<dyn Outlet> = Arc::new(Exchange::new(request, None));
        self.mock.receive(&self.shared, message, exchange);
    }

    fn delete(&self, request: tiny_http::Request) {
        match self.session_of(&request) {
            Ok((id, session)) => {
                lock(&self.sessions).remove(&id);
                session.close();
                respond(request, tiny_http::Response::empty(200));
            }
            Err(refusal) => respond(request, refusal),
        }
    }

    /// The session a request names: 400 without `Mcp-Session-Id`, 404 for an
    /// unknown (or ended) one.
    fn session_of(&self, request: &tiny_http::Request) -> Result<(String, Arc<Session>), HttpResponse> {
        let Some(id) = request.headers().iter().find(|h| h.field.equiv("Mcp-Session-Id")).map(|h| h.value.as_str())
        else {
            let error = RpcError::invalid_request("missing Mcp-Session-Id header");
            return Err(json_body(400, &error_response(&Value::Null, &error)));
        };
        match lock(&self.sessions).get(id) {
            Some(session) => Ok((id.to_string(), Arc::clone(session))),
            None => {
                let error = RpcError::invalid_request(format!("unknown session {id}"));
                Err(json_body(404, &error_response(&Value::Null, &error)))
            }
        }
    }
}

type HttpResponse = tiny_http::Response<io::Cursor<Vec<u8>>>;

/// A request header's value (names are case-insensitive).
fn header_value<'a>(request: &'a tiny_http::Request, name: &'static str) -> Option<&'a str> {
    request.headers().iter().find(|h| h.field.equiv(name)).map(|h| h.value.as_str())
}

/// The stateless revision's header checks: `Mcp-Method` must be the method and
/// `MCP-Protocol-Version` the body's `_meta` version (-32020 when either is
/// missing or different). Methods the mock does not serve get their -32601, and
/// a body without a version its -32602, from the protocol instead.
fn check_stateless_headers(request: &tiny_http::Request, method: &str, params: &Value) -> Result<(), RpcError> {
    if !STATELESS_METHODS.contains(&method) {
        return Ok(());
    }
    match header_value(request, "Mcp-Method") {
        Some(value) if value == method => {}
        Some(value) => {
            return Err(RpcError::header_mismatch(format!(
                "Header mismatch: Mcp-Method header value '{value}' does not match body value '{method}'"
            )))
        }
        None => {
            return Err(RpcError::header_mismatch(format!("Header mismatch: missing Mcp-Method header ('{method}')")))
        }
    }
    let version = params.get("_meta").and_then(|meta| meta.get(META_PROTOCOL_VERSION)).and_then(Value::as_str);
    let Some(version) = version else { return Ok(()) };
    match header_value(request, "MCP-Protocol-Version").map(str::trim) {
        Some(value) if value == version => Ok(()),
        Some(value) => Err(RpcError::header_mismatch(format!(
            "Header mismatch: MCP-Protocol-Version header value '{value}' does not match body value '{version}'"
        ))),
        None => Err(RpcError::header_mismatch(format!(
            "Header mismatch: missing MCP-Protocol-Version header ('{version}')"
        ))),
    }
}

/// The HTTP status of a stateless JSON answer: 404 for an unknown method, 400
/// for the errors about the request itself, 200 otherwise.
fn stateless_status(response: &Value) -> u16 {
    match response.pointer("/error/code").and_then(Value::as_i64) {
        Some(-32601) => 404,
        Some(-32700 | -32600 | -32602 | -32020 | -32021 | -32022) => 400,
        _ => 200,
    }
}

/// One POST being answered. It answers with a JSON body when the response is the
/// first thing sent, and otherwise with an SSE stream (chunked) carrying the
/// notifications and server requests, then the response. An exchange that ends
/// without sending anything (a notification, a response, a cancelled request)
/// answers 202 Accepted.
///
/// Without a session (`--stateless`) no `Mcp-Session-Id` is sent, a JSON error
/// gets the status [`stateless_status`] picks, and an open stream can be probed
/// with SSE comments ([`Outlet::keep_alive`]).
struct Exchange {
    session_id: Option<String>,
    state: Mutex<ExchangeState>,
}

enum ExchangeState {
    Waiting(tiny_http::Request),
    Streaming(Box<dyn Write + Send>),
    Ended,
}

impl Exchange {
    fn new(request: tiny_http::Request, session_id: Option<String>) -> Self {
        Exchange { session_id, state: Mutex::new(ExchangeState::Waiting(request)) }
    }

    /// Moves the exchange to streaming, writing the SSE response head if needed.
    fn stream(&self, state: ExchangeState) -> ExchangeState {
        match state {
            ExchangeState::Waiting(request) => {
                let mut writer = request.into_writer();
                let head = match &self.session_id {
                    Some(session_id) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
                         Mcp-Session-Id: {session_id}\r\nTransfer-Encoding: chunked\r\n\r\n"
                    ),
                    None => "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
                             X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n"
                        .to_string(),
                };
                match writer.write_all(head.as_bytes()).and_then(|()| writer.flush()) {
                    Ok(()) => ExchangeState::Streaming(writer),
                    Err(_) => ExchangeState::Ended,
                }
            }
            other => other,
        }
    }
}

/// Writes one SSE event as one chunk.
fn write_event(writer: &mut dyn Write, message: &Value) -> io::Result<()> {
    write_chunk(writer, &format!("event: message\ndata: {message}\n\n"))
}

/// Writes `text` as one chunk of a chunked body.
fn write_chunk(writer: &mut dyn Write, text: &str) -> io::Result<()> {
    write!(writer, "{:x}\r\n{text}\r\n", text.len())?;
    writer.flush()
}

/// Ends a chunked body.
fn end_chunks(writer: &mut dyn Write) -> io::Result<()> {
    writer.write_all(b"0\r\n\r\n")?;
    writer.flush()
}

impl Outlet for Exchange {
    fn send(&self, message: &Value) {
        let mut state = lock(&self.state);
        *state = match self.stream(std::mem::replace(&mut *state, ExchangeState::Ended)) {
            ExchangeState::Streaming(mut writer) => match write_event(&mut writer, message) {
                Ok(()) => ExchangeState::Streaming(writer),
                Err(_) => ExchangeState::Ended,
            },
            other => other,
        };
    }

    fn finish(&self, response: &Value) {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, ExchangeState::Ended) {
            ExchangeState::Waiting(request) => match &self.session_id {
                Some(session_id) => {
                    respond(request, json_body(200, response).with_header(header("Mcp-Session-Id", session_id)));
                }
                None => respond(request, json_body(stateless_status(response), response)),
            },
            ExchangeState::Streaming(mut writer) => {
                let _ = write_event(&mut writer, response).and_then(|()| end_chunks(&mut writer));
            }
            ExchangeState::Ended => {}
        }
    }

    fn open_stream(&self) {
        let mut state = lock(&self.state);
        *state = self.stream(std::mem::replace(&mut *state, ExchangeState::Ended));
    }

    /// Sends an SSE comment on an open stream; a failed write means the client
    /// closed it.
    fn keep_alive(&self) -> bool {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, ExchangeState::Ended) {
            ExchangeState::Streaming(mut writer) => {
                let alive = write_chunk(&mut writer, ":\n\n").is_ok();
                if alive {
                    *state = ExchangeState::Streaming(writer);
                }
                alive
            }
            ExchangeState::Waiting(request) => {
                *state = ExchangeState::Waiting(request);
                true
            }
            ExchangeState::Ended => false,
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        match std::mem::replace(&mut *lock(&self.state), ExchangeState::Ended) {
            ExchangeState::Waiting(request) => respond(request, tiny_http::Response::empty(202)),
            ExchangeState::Streaming(mut writer) => {
                let _ = end_chunks(&mut writer);
            }
            ExchangeState::Ended => {}
        }
    }
}

// ---------------------------------------------------------------------------
// --cut-streams: request streams cut short and resumed by Last-Event-ID
// ---------------------------------------------------------------------------

/// The retry hint (ms) of every priming event under `--cut-streams`.
const CUT_RETRY_MS: u64 = 50;

/// Every request stream's events under `--cut-streams` (event ids are unique
/// across all streams), and the PRNG that decides where streams are cut.
struct Replay {
    state: Mutex<ReplayState>,
    changed: Condvar,
    rng: Mutex<u64>,
    cuts: AtomicU64,
}

#[derive(Default)]
struct ReplayState {
    next_id: u64,
    /// Each stream's events (id and SSE text), and whether it is complete.
    streams: HashMap<u64, (Vec<(u64, String)>, bool)>,
    /// The stream each event belongs to.
    owners: HashMap<u64, u64>,
}

impl Replay {
    fn new(seed: u64) -> Self {
        Replay { state: Mutex::default(), changed: Condvar::new(), rng: Mutex::new(seed), cuts: AtomicU64::new(0) }
    }

    /// A number in 0..n (splitmix64).
    fn below(&self, n: u64) -> u64 {
        let mut state = lock(&self.rng);
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }

    /// Appends an event to `stream` (a message, or the priming event when `None`;
    /// `last` completes the stream) and returns its SSE text.
    fn record(&self, stream: u64, message: Option<&Value>, last: bool) -> String {
        let mut state = lock(&self.state);
        state.next_id += 1;
        let id = state.next_id;
        let text = match message {
            Some(message) => format!("id: {id}\nevent: message\ndata: {message}\n\n"),
            None => format!("id: {id}\nretry: {CUT_RETRY_MS}\ndata: \n\n"),
        };
        state.owners.insert(id, stream);
        let (events, done) = state.streams.entry(stream).or_default();
        events.push((id, text.clone()));
        *done |= last;
        self.changed.notify_all();
        text
    }

    /// Marks `stream` complete (a request that ends unanswered).
    fn complete(&self, stream: u64) {
        lock(&self.state).streams.entry(stream).or_default().1 = true;
        self.changed.notify_all();
    }

    /// The stream event `id` belongs to, the index to replay it from (just after
    /// it, or, to test that replays are dropped, up to two events earlier) and the
    /// index just after it.
    fn locate(&self, id: u64) -> Option<(u64, usize, usize)> {
        let back = self.below(3) as usize;
        let state = lock(&self.state);
        let stream = *state.owners.get(&id)?;
        let position = state.streams.get(&stream)?.0.iter().position(|(event, _)| *event == id)?;
        Some((stream, (position + 1).saturating_sub(back), position + 1))
    }

    /// Counts and reports one cut.
    fn cut(&self, what: &str, stream: u64) {
        let n = self.cuts.fetch_add(1, Ordering::Relaxed) + 1;
        eprintln!("cut-streams: cut {n} ({what} of stream {stream})");
    }

    /// Writes `stream`'s events from `index` on a resuming GET until the stream is
    /// complete; one time in four it is cut again after an event new to the client.
    fn serve_resumption(&self, request: tiny_http::Request, session_id: &str, stream: u64, from: (usize, usize)) {
        let (mut index, first_new) = from;
        let mut writer = request.into_writer();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
             Mcp-Session-Id: {session_id}\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        if writer.write_all(head.as_bytes()).and_then(|()| writer.flush()).is_err() {
            return;
        }
        let cut_again = self.below(4) == 0;
        let mut state = lock(&self.state);
        loop {
            let Some((events, done)) = state.streams.get(&stream) else { return };
            let done = *done;
            let pending: Vec<String> = events[index.min(events.len())..].iter().map(|(_, t)| t.clone()).collect();
            let total = events.len();
            if pending.is_empty() {
                if done {
                    drop(state);
                    let _ = end_chunks(&mut writer);
                    return;
                }
                state =
                    self.changed.wait_timeout(state, Duration::from_secs(30)).unwrap_or_else(PoisonError::into_inner).0;
                continue;
            }
            drop(state);
            for (offset, text) in pending.iter().enumerate() {
                let at = index + offset;
                let is_last = done && at + 1 == total;
                if cut_again && at >= first_new && !is_last {
                    if write_chunk(&mut writer, text).is_err() {
                        return;
                    }
                    self.cut("resumed GET", stream);
                    let _ = end_chunks(&mut writer);
                    return;
                }
                if write_chunk(&mut writer, text).is_err() {
                    return;
                }
            }
            index = total;
            state = lock(&self.state);
        }
    }
}

/// A request POST under `--cut-streams`: an SSE stream from the start, opened
/// with a priming event, that carries a random number of the request's messages
/// (possibly none, possibly all) and is cut before its response when that number
/// is smaller than the messages sent. Every message is recorded for resumption.
struct CutExchange {
    replay: Arc<Replay>,
    stream: u64,
    /// The POST's body while it is open, and how many more messages it carries.
    open: Mutex<Option<(Box<dyn Write + Send>, u64)>>,
    finished: AtomicBool,
}

impl CutExchange {
    fn open(replay: Arc<Replay>, request: tiny_http::Request, session_id: &str) -> Self {
        static STREAMS: AtomicU64 = AtomicU64::new(0);
        let stream = STREAMS.fetch_add(1, Ordering::Relaxed);
        let mut writer = request.into_writer();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
             Mcp-Session-Id: {session_id}\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let priming = replay.record(stream, None, false);
        let mut open = None;
        if writer.write_all(head.as_bytes()).and_then(|()| writer.flush()).is_ok()
            && write_chunk(&mut writer, &priming).is_ok()
        {
            // Half the streams are never cut (they carry every message); the others
            // are cut after 0..=2 messages, a quarter of them at once.
            let carries = if replay.below(2) == 0 { u64::MAX } else { replay.below(3) };
            if carries == 0 && replay.below(2) == 0 {
                replay.cut("POST, at once", stream);
                let _ = end_chunks(&mut writer);
            } else {
                open = Some((Box::new(writer) as Box<dyn Write + Send>, carries));
            }
        }
        CutExchange { replay, stream, open: Mutex::new(open), finished: AtomicBool::new(false) }
    }

    /// Records `message` and writes it on the POST if it is still open, cutting the
    /// POST instead when its share of messages is used up.
    fn deliver(&self, message: &Value, last: bool) {
        let mut open = lock(&self.open);
        let text = self.replay.record(self.stream, Some(message), last);
        let Some((writer, carries)) = open.as_mut() else { return };
        if *carries == 0 {
            self.replay.cut("POST", self.stream);
            let _ = end_chunks(writer);
            *open = None;
            return;
        }
        *carries -= 1;
        let written = write_chunk(writer, &text).is_ok();
        if !written || last {
            if written {
                let _ = end_chunks(writer);
            }
            *open = None;
        }
    }
}

impl Outlet for CutExchange {
    fn send(&self, message: &Value) {
        self.deliver(message, false);
    }

    fn finish(&self, response: &Value) {
        self.finished.store(true, Ordering::Relaxed);
        self.deliver(response, true);
    }
}

impl Drop for CutExchange {
    fn drop(&mut self) {
        if !self.finished.load(Ordering::Relaxed) {
            self.replay.complete(self.stream);
        }
        if let Some((mut writer, _)) = lock(&self.open).take() {
            let _ = end_chunks(&mut writer);
        }
    }
}

/// Sends a response; a client that has gone away is not an error.
fn respond<R: Read>(request: tiny_http::Request, response: tiny_http::Response<R>) {
    let _ = request.respond(response);
}

/// A header built from our own ASCII text.
fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("headers built here are ASCII")
}

fn plain(status: u16, text: &str) -> HttpResponse {
    tiny_http::Response::from_string(text).with_status_code(status)
}

fn json_body(status: u16, body: &Value) -> HttpResponse {
    tiny_http::Response::from_string(body.to_string())
        .with_status_code(status)
        .with_header(header("Content-Type", "application/json"))
}

/// The answer to every POST under `--http-status`.
fn forced_status(status: u16) -> HttpResponse {
    let response = json_body(status, &json!({"error": format!("status {status} forced by --http-status")}));
    if status == 401 {
        response.with_header(header("WWW-Authenticate", "Bearer realm=\"mock\""))
    } else {
        response
    }
}

/// The method of a message, if the body is one.
fn peek_method(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    value.get("method")?.as_str().map(String::from)
}

/// A fresh session id: 32 hex digits from std's randomly keyed hasher, unguessable
/// enough for a mock.
fn new_session_id() -> String {
    static MINTED: AtomicU64 = AtomicU64::new(0);
    let serial = MINTED.fetch_add(1, Ordering::Relaxed);
    let mut id = String::with_capacity(32);
    for half in 0..2u8 {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(serial);
        hasher.write_u8(half);
        hasher.write_u32(process::id());
        id.push_str(&format!("{:016x}", hasher.finish()));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Cursor};
    use std::net::{SocketAddr, TcpStream};
    use std::sync::mpsc::{self, Receiver, Sender};

    const WAIT: Duration = Duration::from_secs(5);

    /// Collects everything sent through it.
    struct Collector(Sender<Value>);

    impl Outlet for Collector {
        fn send(&self, message: &Value) {
            let _ = self.0.send(message.clone());
        }

        fn finish(&self, response: &Value) {
            let _ = self.0.send(response.clone());
        }
    }

    /// A mock and one session, with what they send arriving on the receiver.
    struct Harness {
        mock: Arc<Mock>,
        session: Arc<Session>,
        outlet: Arc<dyn Outlet>,
        sent: Receiver<Value>,
    }

    impl Harness {
        fn new(options: MockOptions) -> Self {
            let (tx, sent) = mpsc::channel();
            let mock = Arc::new(Mock::new(options).expect("valid options"));
            Harness { mock, session: Arc::new(Session::new()), outlet: Arc::new(Collector(tx)), sent }
        }

        fn feed(&self, frame: Value) {
            let message = parse_message(frame.to_string().as_bytes()).expect("a valid message");
            self.mock.receive(&self.session, message, Arc::clone(&self.outlet));
        }

        fn request(&self, id: u64, method: &str, params: Value) -> Value {
            self.feed(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
            self.next()
        }

        fn next(&self) -> Value {
            self.sent.recv_timeout(WAIT).expect("a message from the mock")
        }

        fn nothing_more(&self) {
            assert_eq!(self.sent.recv_timeout(Duration::from_millis(100)).ok(), None);
        }
    }

    #[test]
    fn cut_streams_number_events_across_streams_and_locate_them_for_resumption() {
        let replay = Replay::new(7);
        assert_eq!(replay.record(1, None, false), "id: 1\nretry: 50\ndata: \n\n");
        replay.record(2, None, false);
        let response = replay.record(1, Some(&json!({"jsonrpc": "2.0", "id": 1, "result": {}})), true);
        assert!(response.starts_with("id: 3\nevent: message\ndata: {"), "{response}");
        for _ in 0..10 {
            let (stream, from, next) = replay.locate(1).expect("event 1 is known");
            assert_eq!((stream, next), (1, 1));
            assert!(from <= next);
            assert_eq!(replay.locate(3).map(|(s, _, n)| (s, n)), Some((1, 2)));
        }
        assert_eq!(replay.locate(99), None);
        assert!(lock(&replay.state).streams[&1].1, "the response completes the stream");
    }

    #[test]
    fn initialize_reports_the_server_and_its_capabilities() {
        let options = MockOptions { name: "alpha".into(), ..MockOptions::default() };
        let harness = Harness::new(options);
        let response = harness.request(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}}));
        assert_eq!(response["id"], 1);
        assert_eq!(response["result"]["protocolVersion"], PROTOCOL_VERSION);
        assert_eq!(response["result"]["serverInfo"]["name"], "alpha");
        assert_eq!(response["result"]["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(response["result"]["capabilities"]["resources"]["subscribe"], true);

        let again = harness.request(2, "initialize", json!({}));
        assert_eq!(again["error"]["code"], -32600, "a second initialize on one session is refused");
    }

    #[test]
    fn initialize_answers_an_older_supported_version_and_a_default_for_unknown_ones() {
        let harness = Harness::new(MockOptions::default());
        let response = harness.request(1, "initialize", json!({"protocolVersion": "2025-03-26"}));
        assert_eq!(response["result"]["protocolVersion"], "2025-03-26");
        let harness = Harness::new(MockOptions::default());
        let response = harness.request(1, "initialize", json!({"protocolVersion": "1999-01-01"}));
        assert_eq!(response["result"]["protocolVersion"], PROTOCOL_VERSION);
    }

    #[test]
    fn tools_list_offers_the_chosen_builtins_then_the_extras() {
        let options =
            MockOptions { tools: Some(vec!["echo".into(), "add".into()]), extra_tools: 2, ..MockOptions::default() };
        let harness = Harness::new(options);
        let response = harness.request(1, "tools/list", json!({}));
        let tools = response["result"]["tools"].as_array().expect("a tool list");
        let names: Vec<_> = tools.iter().map(|tool| tool["name"].as_str().unwrap_or_default()).collect();
        assert_eq!(names, ["echo", "add", "t0", "t1"]);
        assert_eq!(tools[0]["annotations"]["readOnlyHint"], true);
        assert_eq!(tools[0]["inputSchema"]["required"], json!(["text"]));

        let hidden = harness.request(2, "tools/call", json!({"name": "slow", "arguments": {"ms": 1}}));
        assert_eq!(hidden["error"]["code"], -32602);
        let extra = harness.request(3, "tools/call", json!({"name": "t1"}));
        assert_eq!(extra["result"]["content"][0]["text"], "t1");
    }

    #[test]
    fn an_unknown_name_in_tools_is_an_error() {
        let options = MockOptions { tools: Some(vec!["echo".into(), "nope".into()]), ..MockOptions::default() };
        let error = Mock::new(options).err().expect("rejected");
        assert!(error.to_string().contains("`nope`"), "{error}");
    }

    #[test]
    fn echo_and_add_answer_with_text() {
        let harness = Harness::new(MockOptions::default());
        let echo = harness.request(1, "tools/call", json!({"name": "echo", "arguments": {"text": "hi"}}));
        assert_eq!(echo["result"], json!({"content": [{"type": "text", "text": "hi"}]}));
        let add = harness.request(2, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 3}}));
        assert_eq!(add["result"]["content"][0]["text"], "5");
        let add = harness.request(3, "tools/call", json!({"name": "add", "arguments": {"a": 0.5, "b": 1}}));
        assert_eq!(add["result"]["content"][0]["text"], "1.5");
    }

    #[test]
    fn bad_tool_arguments_and_fail_are_tool_errors() {
        let harness = Harness::new(MockOptions::default());
        let echo = harness.request(1, "tools/call", json!({"name": "echo", "arguments": {}}));
        assert_eq!(echo["result"]["isError"], true);
        let fail = harness.request(2, "tools/call", json!({"name": "fail"}));
        assert_eq!(fail["result"]["isError"], true);
    }

    #[test]
    fn unknown_methods_get_method_not_found_and_so_does_ping_with_no_ping() {
        let harness = Harness::new(MockOptions { no_ping: true, ..MockOptions::default() });
        assert_eq!(harness.request(1, "bogus/method", json!({}))["error"]["code"], -32601);
        assert_eq!(harness.request(2, "ping", json!({}))["error"]["code"], -32601);
        let harness = Harness::new(MockOptions::default());
        assert_eq!(harness.request(1, "ping", json!({}))["result"], json!({}));
    }

    #[test]
    fn bad_frames_get_parse_error_or_invalid_request() {
        let parse = parse_message(b"{not json").expect_err("bad JSON");
        assert_eq!(parse["error"]["code"], -32700);
        assert_eq!(parse["id"], Value::Null);
        let not_object = parse_message(b"[1, 2]").expect_err("not an object");
        assert_eq!(not_object["error"]["code"], -32600);
        let no_version = parse_message(br#"{"id": 7, "method": "ping"}"#).expect_err("no jsonrpc");
        assert_eq!((no_version["id"].clone(), no_version["error"]["code"].clone()), (json!(7), json!(-32600)));
        let null_id = parse_message(br#"{"jsonrpc": "2.0", "id": null, "method": "ping"}"#).expect_err("null id");
        assert_eq!(null_id["error"]["code"], -32600);
    }

    #[test]
    fn messages_are_sorted_by_kind() {
        let request = parse_message(br#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#);
        assert_eq!(request, Ok(Incoming::Request { id: json!("a"), method: "ping".into(), params: Value::Null }));
        let note = parse_message(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(matches!(note, Ok(Incoming::Notification { .. })));
        let answer = parse_message(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#);
        assert!(matches!(answer, Ok(Incoming::Response { outcome: Err(_), .. })));
    }

    #[test]
    fn a_cancelled_slow_call_is_never_answered() {
        let harness = Harness::new(MockOptions::default());
        harness.feed(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"ms": 60_000}}}));
        harness.feed(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}));
        assert_eq!(harness.request(2, "ping", json!({}))["id"], 2);
        harness.nothing_more();
    }

    #[test]
    fn progress_is_reported_with_the_callers_token_before_the_answer() {
        let harness = Harness::new(MockOptions::default());
        harness.feed(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "progress", "arguments": {"steps": 2, "ms": 1}, "_meta": {"progressToken": "p"}}}));
        for step in 1..=2 {
            let note = harness.next();
            assert_eq!(note["method"], "notifications/progress");
            assert_eq!(note["params"]["progressToken"], "p");
            assert_eq!((note["params"]["progress"].clone(), note["params"]["total"].clone()), (json!(step), json!(2)));
        }
        assert_eq!(harness.next()["result"]["content"][0]["text"], "done 2 steps");
    }

    #[test]
    fn sample_asks_the_client_and_returns_its_text_or_its_refusal() {
        let harness = Harness::new(MockOptions::default());
        harness.feed(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "sample", "arguments": {"prompt": "hi?"}}}));
        let ask = harness.next();
        assert_eq!(ask["method"], "sampling/createMessage");
        assert_eq!(ask["params"]["messages"][0]["content"]["text"], "hi?");
        harness.feed(json!({"jsonrpc": "2.0", "id": ask["id"],
            "result": {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}}));
        assert_eq!(harness.next()["result"]["content"][0]["text"], "hello");

        harness.feed(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "sample", "arguments": {"prompt": "again"}}}));
        let ask = harness.next();
        harness.feed(json!({"jsonrpc": "2.0", "id": ask["id"], "error": {"code": -1, "message": "user declined"}}));
        let refused = harness.next();
        assert_eq!(refused["result"]["isError"], true);
        assert!(refused["result"]["content"][0]["text"].as_str().unwrap_or_default().contains("user declined"));
    }

    #[test]
    fn add_tool_announces_the_new_tool() {
        let harness = Harness::new(MockOptions { tools: Some(vec!["add_tool".into()]), ..MockOptions::default() });
        harness.feed(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add_tool"}}));
        assert_eq!(harness.next()["method"], "notifications/tools/list_changed");
        assert_eq!(harness.next()["id"], 1);
        let tools = harness.request(2, "tools/list", json!({}));
        assert_eq!(tools["result"]["tools"][1]["name"], ADDED_TOOL);
    }

    #[test]
    fn echo_updates_a_subscribed_info_resource() {
        let harness = Harness::new(MockOptions::default());
        assert_eq!(harness.request(1, "resources/subscribe", json!({"uri": INFO_URI}))["result"], json!({}));
        harness.feed(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}}}));
        let update = harness.next();
        assert_eq!(update["method"], "notifications/resources/updated");
        assert_eq!(update["params"]["uri"], INFO_URI);
        assert_eq!(harness.next()["id"], 2);
    }

    #[test]
    fn resources_prompts_completions_and_logging() {
        let harness = Harness::new(MockOptions::default());
        let item = harness.request(1, "resources/read", json!({"uri": "mock://item/7"}));
        assert_eq!(item["result"]["contents"][0]["text"], "item 7");
        let missing = harness.request(2, "resources/read", json!({"uri": "mock://nope"}));
        assert_eq!(missing["error"]["code"], -32002);
        let greeting = harness.request(3, "prompts/get", json!({"name": "greet", "arguments": {"name": "Ann"}}));
        assert_eq!(greeting["result"]["messages"][0]["content"]["text"], "Hello, Ann!");
        let completion = harness.request(
            4,
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": "b"}}),
        );
        assert_eq!(completion["result"]["completion"]["values"], json!(["bob"]));
        assert_eq!(harness.request(5, "logging/setLevel", json!({"level": "error"}))["result"], json!({}));
        harness.feed(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
            "params": {"name": "log", "arguments": {"message": "quiet"}}}));
        assert_eq!(harness.next()["id"], 6, "an info entry is below the error threshold");
    }

    #[test]
    fn the_state_file_gets_one_line_per_method_received() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state");
        let harness = Harness::new(MockOptions { state_file: Some(path.clone()), ..MockOptions::default() });
        harness.request(1, "initialize", json!({}));
        harness.feed(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        harness.request(2, "tools/list", json!({}));
        let lines = fs::read_to_string(&path).expect("the state file");
        assert_eq!(lines, "initialize\nnotifications/initialized\ntools/list\n");
    }

    /// A `--stateless` mock's options.
    fn stateless() -> MockOptions {
        MockOptions { stateless: true, ..MockOptions::default() }
    }

    /// `params` with the stateless `_meta` of a client that can sample and elicit.
    fn modern(params: Value) -> Value {
        with_meta(params, json!({"sampling": {}, "elicitation": {}}))
    }

    /// `params` with the stateless `_meta` of a client with these capabilities.
    fn with_meta(mut params: Value, capabilities: Value) -> Value {
        params["_meta"] = json!({
            META_PROTOCOL_VERSION: STATELESS_PROTOCOL_VERSION,
            META_CLIENT_CAPABILITIES: capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
        });
        params
    }

    #[test]
    fn stateless_discover_describes_the_server() {
        let harness = Harness::new(MockOptions { name: "modern".into(), ..stateless() });
        let discover = harness.request(1, "server/discover", modern(json!({})));
        assert_eq!(
            discover["result"],
            json!({
                "resultType": "complete",
                "supportedVersions": ["2026-07-28"],
                "capabilities": {
                    "tools": {"listChanged": true},
                    "resources": {"subscribe": true, "listChanged": true},
                    "prompts": {"listChanged": true},
                    "completions": {},
                    "logging": {},
                },
                "instructions": INSTRUCTIONS,
                "ttlMs": 0,
                "cacheScope": "private",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "1"}},
            })
        );
    }

    #[test]
    fn stateless_requests_need_their_meta() {
        let harness = Harness::new(stateless());
        assert_eq!(harness.request(1, "tools/list", json!({}))["error"]["code"], -32602);
        let no_capabilities = json!({"_meta": {META_PROTOCOL_VERSION: STATELESS_PROTOCOL_VERSION}});
        assert_eq!(harness.request(2, "tools/list", no_capabilities)["error"]["code"], -32602);
        let numeric_version = json!({"_meta": {META_PROTOCOL_VERSION: 2026, META_CLIENT_CAPABILITIES: {}}});
        assert_eq!(harness.request(3, "server/discover", numeric_version)["error"]["code"], -32602);
        let old = json!({"_meta": {META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {}}});
        let refused = harness.request(4, "tools/list", old);
        assert_eq!(refused["error"]["code"], -32022);
        assert_eq!(refused["error"]["data"], json!({"supported": ["2026-07-28"], "requested": "2025-11-25"}));
        let mut bad_level = modern(json!({}));
        bad_level["_meta"][META_LOG_LEVEL] = json!("loud");
        assert_eq!(harness.request(5, "tools/list", bad_level)["error"]["code"], -32602);
    }

    #[test]
    fn stateless_refuses_the_handshake_era_methods() {
        let harness = Harness::new(stateless());
        let initialize = harness.request(1, "initialize", json!({"protocolVersion": PROTOCOL_VERSION}));
        assert_eq!(initialize["error"]["code"], -32601);
        assert_eq!(initialize["error"]["data"], json!({"supported": ["2026-07-28"]}));
        assert!(initialize["error"]["message"].as_str().unwrap_or_default().contains("2026-07-28"), "{initialize}");
        for (id, method) in
            [(2, "ping"), (3, "logging/setLevel"), (4, "resources/subscribe"), (5, "resources/unsubscribe"), (6, "x/y")]
        {
            assert_eq!(harness.request(id, method, modern(json!({})))["error"]["code"], -32601, "{method}");
        }
        harness.feed(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        harness.nothing_more();
    }

    #[test]
    fn stateless_results_are_complete_and_lists_are_cacheable() {
        let harness = Harness::new(stateless());
        let tools = harness.request(1, "tools/list", modern(json!({})));
        assert_eq!(
            (&tools["result"]["resultType"], &tools["result"]["ttlMs"], &tools["result"]["cacheScope"]),
            (&json!("complete"), &json!(0), &json!("private"))
        );
        let names: Vec<_> =
            tools["result"]["tools"].as_array().into_iter().flatten().map(|t| t["name"].clone()).collect();
        assert!(names.contains(&json!("elicit")), "{names:?}");
        for (id, method) in [(2, "resources/list"), (3, "resources/templates/list"), (4, "prompts/list")] {
            let list = harness.request(id, method, modern(json!({})));
            assert_eq!((&list["result"]["resultType"], &list["result"]["ttlMs"]), (&json!("complete"), &json!(0)));
        }
        let read = harness.request(5, "resources/read", modern(json!({"uri": INFO_URI})));
        assert_eq!(read["result"]["cacheScope"], "private");
        let missing = harness.request(6, "resources/read", modern(json!({"uri": "mock://nope"})));
        assert_eq!(missing["error"]["code"], -32602, "-32002 is retired");
        let echo = harness.request(7, "tools/call", modern(json!({"name": "echo", "arguments": {"text": "hi"}})));
        assert_eq!(echo["result"], json!({"resultType": "complete", "content": [{"type": "text", "text": "hi"}]}));
        let fail = harness.request(8, "tools/call", modern(json!({"name": "fail"})));
        assert_eq!((&fail["result"]["isError"], &fail["result"]["resultType"]), (&json!(true), &json!("complete")));
        let prompt = harness.request(9, "prompts/get", modern(json!({"name": "greet", "arguments": {"name": "Ann"}})));
        assert_eq!(prompt["result"]["resultType"], "complete");
        assert!(prompt["result"].get("ttlMs").is_none());
    }

    #[test]
    fn stateless_sample_asks_with_input_required_and_finishes_on_the_retry() {
        let harness = Harness::new(stateless());
        let call = json!({"name": "sample", "arguments": {"prompt": "hi?"}});
        let asked = harness.request(1, "tools/call", modern(call.clone()));
        let result = &asked["result"];
        assert_eq!(result["resultType"], "input_required");
        assert_eq!(
            result["inputRequests"]["sample"],
            json!({"method": "sampling/createMessage", "params": sampling_params("hi?")})
        );
        let state = result["requestState"].as_str().expect("a requestState").to_string();

        let mut retry = modern(call.clone());
        retry["inputResponses"] =
            json!({"sample": {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}});
        retry["requestState"] = json!(state);
        let done = harness.request(2, "tools/call", retry.clone());
        assert_eq!(done["result"], json!({"resultType": "complete", "content": [{"type": "text", "text": "hello"}]}));

        let mut tampered = retry.clone();
        tampered["requestState"] = json!(format!("{state}00"));
        assert_eq!(harness.request(3, "tools/call", tampered)["error"]["code"], -32602);
        let mut other_arguments = retry.clone();
        other_arguments["arguments"] = json!({"prompt": "other"});
        assert_eq!(harness.request(4, "tools/call", other_arguments)["error"]["code"], -32602);
        let mut stateless_retry = retry;
        if let Some(params) = stateless_retry.as_object_mut() {
            params.remove("requestState");
        }
        assert_eq!(harness.request(5, "tools/call", stateless_retry)["error"]["code"], -32602);

        let unable = harness.request(6, "tools/call", with_meta(call, json!({"elicitation": {}})));
        assert_eq!(unable["error"]["code"], -32021);
        assert_eq!(unable["error"]["data"], json!({"requiredCapabilities": {"sampling": {}}}));
        harness.nothing_more();
    }

    #[test]
    fn stateless_elicit_greets_declines_and_cancels() {
        let harness = Harness::new(stateless());
        let call = json!({"name": "elicit"});
        let asked = harness.request(1, "tools/call", modern(call.clone()));
        let request = &asked["result"]["inputRequests"]["elicit"];
        assert_eq!(request["method"], "elicitation/create");
        assert_eq!(request["params"]["mode"], "form");
        assert_eq!(request["params"]["requestedSchema"]["required"], json!(["name"]));
        let state = asked["result"]["requestState"].clone();
        let answers = [
            (json!({"action": "accept", "content": {"name": "Ann"}}), "hello Ann"),
            (json!({"action": "decline"}), "declined"),
            (json!({"action": "cancel"}), "cancelled"),
        ];
        for (id, (answer, text)) in (2..).zip(answers) {
            let mut retry = modern(call.clone());
            retry["inputResponses"] = json!({"elicit": answer});
            retry["requestState"] = state.clone();
            assert_eq!(harness.request(id, "tools/call", retry)["result"]["content"][0]["text"], text);
        }
        let unable = harness.request(9, "tools/call", with_meta(call, json!({})));
        assert_eq!(unable["error"]["data"], json!({"requiredCapabilities": {"elicitation": {}}}));
        let legacy = Harness::new(MockOptions::default());
        let tools = legacy.request(1, "tools/list", json!({}));
        assert!(!tools.to_string().contains("elicit"), "elicit is a stateless-only tool");
    }

    #[test]
    fn stateless_log_needs_the_requests_log_level() {
        let harness = Harness::new(stateless());
        let call = json!({"name": "log", "arguments": {"message": "m"}});
        assert_eq!(harness.request(1, "tools/call", modern(call.clone()))["id"], 1, "no level: no log");
        let mut params = modern(call.clone());
        params["_meta"][META_LOG_LEVEL] = json!("error");
        assert_eq!(harness.request(2, "tools/call", params)["id"], 2, "info is below error");
        let mut params = modern(call);
        params["_meta"][META_LOG_LEVEL] = json!("debug");
        let entry = harness.request(3, "tools/call", params);
        assert_eq!((&entry["method"], &entry["params"]["data"]), (&json!("notifications/message"), &json!("m")));
        assert_eq!(harness.next()["id"], 3);
    }

    #[test]
    fn stateless_listen_acknowledges_then_delivers_changes_until_cancelled() {
        let harness = Harness::new(stateless());
        let filter = json!({"toolsListChanged": true, "resourceSubscriptions": [INFO_URI, "file:///nope"]});
        let ack = harness.request(1, "subscriptions/listen", modern(json!({"notifications": filter})));
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(
            ack["params"],
            json!({"_meta": {META_SUBSCRIPTION_ID: 1}, "notifications": {"toolsListChanged": true, "resourceSubscriptions": [INFO_URI]}})
        );
        let ack =
            harness.request(2, "subscriptions/listen", modern(json!({"notifications": {"promptsListChanged": true}})));
        assert_eq!(ack["params"]["notifications"], json!({"promptsListChanged": true}));

        harness.feed(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": modern(json!({"name": "add_tool"}))}),
        );
        let changed = harness.next();
        assert_eq!(
            changed,
            notification("notifications/tools/list_changed", json!({"_meta": {META_SUBSCRIPTION_ID: 1}}))
        );
        assert_eq!(harness.next()["id"], 3);
        harness.feed(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": modern(json!({"name": "echo", "arguments": {"text": "x"}}))}));
        let updated = harness.next();
        assert_eq!(updated["method"], "notifications/resources/updated");
        assert_eq!(updated["params"], json!({"uri": INFO_URI, "_meta": {META_SUBSCRIPTION_ID: 1}}));
        assert_eq!(harness.next()["id"], 4);

        harness.feed(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}));
        let deadline = Instant::now() + WAIT;
        while lock(&harness.session.listens).open.len() > 1 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        harness.feed(
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": modern(json!({"name": "add_tool"}))}),
        );
        assert_eq!(harness.next()["id"], 5, "the cancelled listen gets nothing more, and no response");
        let bad = harness.request(6, "subscriptions/listen", modern(json!({"notifications": {"toolsListChanged": 1}})));
        assert_eq!(bad["error"]["code"], -32602);
        harness.nothing_more();
    }

    #[test]
    fn stateless_stdio_records_methods_and_ends_listens_at_eof() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state");
        let frame = |id: u64, method: &str, params: Value| {
            format!("{}\n", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        };
        let input = [
            frame(1, "server/discover", modern(json!({}))),
            frame(2, "subscriptions/listen", modern(json!({"notifications": {"toolsListChanged": true}}))),
            frame(3, "initialize", json!({})),
        ]
        .concat();
        let output = SharedBuffer::default();
        let mock =
            Arc::new(Mock::new(MockOptions { state_file: Some(path.clone()), ..stateless() }).expect("valid options"));
        let started = Instant::now();
        serve_stdio(mock, Cursor::new(input), output.clone()).expect("EOF ends the loop cleanly");
        assert!(started.elapsed() < EOF_GRACE, "an open listen does not hold up the exit");
        let text = String::from_utf8(lock(&output.0).clone()).expect("UTF-8 output");
        let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect();
        assert!(lines.len() == 2 || lines.len() == 3, "{lines:?}");
        assert_eq!(lines.iter().filter(|line| line["id"] == 1 || line["id"] == 3).count(), 2, "{lines:?}");
        assert!(lines.iter().all(|line| line["id"] != 2), "a listen gets no response");
        let lines = fs::read_to_string(&path).expect("the state file");
        let mut methods: Vec<_> = lines.lines().collect();
        methods.sort_unstable();
        assert_eq!(methods, ["initialize", "server/discover", "subscriptions/listen"]);
    }

    /// A writer whose bytes the test can read while the mock holds it.
    #[derive(Clone, Default)]
    struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

    impl Write for SharedBuffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            lock(&self.0).extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_stdio_loop_answers_each_line_and_stops_at_eof() {
        let input = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            "\n\n",
            "this is not json\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hey"}}}"#,
            "\n",
        );
        let output = SharedBuffer::default();
        let mock = Arc::new(Mock::new(MockOptions::default()).expect("valid options"));
        serve_stdio(mock, Cursor::new(input), output.clone()).expect("EOF ends the loop cleanly");

        let deadline = Instant::now() + WAIT;
        let lines = loop {
            let text = String::from_utf8(lock(&output.0).clone()).expect("UTF-8 output");
            let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect();
            if lines.len() >= 3 || Instant::now() > deadline {
                break lines;
            }
            thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(lines.len(), 3, "{lines:?}");
        let by_id = |id: Value| lines.iter().find(|line| line["id"] == id).cloned().unwrap_or_default();
        assert_eq!(by_id(json!(1))["result"]["serverInfo"]["name"], "mock");
        assert_eq!(by_id(json!(2))["result"]["content"][0]["text"], "hey");
        assert_eq!(by_id(Value::Null)["error"]["code"], -32700);
    }

    /// A mock serving HTTP on an ephemeral port.
    fn http_mock(options: MockOptions) -> SocketAddr {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind");
        let addr = server.server_addr().to_ip().expect("an IP address");
        let mock = Arc::new(Mock::new(options).expect("valid options"));
        thread::spawn(move || HttpFront::new(mock).serve(&server));
        addr
    }

    /// Sends one HTTP/1.1 request and returns the open connection, positioned at
    /// the start of the response.
    fn http_send(addr: SocketAddr, method: &str, session: Option<&str>, body: &str) -> BufReader<TcpStream> {
        let session = session.map(|id| format!("Mcp-Session-Id: {id}\r\n")).unwrap_or_default();
        http_send_with(addr, method, &session, body)
    }

    /// [`http_send`] with extra header lines (each ending in CRLF).
    fn http_send_with(addr: SocketAddr, method: &str, headers: &str, body: &str) -> BufReader<TcpStream> {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(WAIT)).expect("timeout");
        write!(
            stream,
            "{method} /mcp HTTP/1.1\r\nHost: mock\r\nConnection: close\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("send");
        BufReader::new(stream)
    }

    /// Sends a request and reads the whole response: status, headers, body.
    fn http(addr: SocketAddr, method: &str, session: Option<&str>, body: &str) -> (u16, String, String) {
        let session = session.map(|id| format!("Mcp-Session-Id: {id}\r\n")).unwrap_or_default();
        http_with(addr, method, &session, body)
    }

    /// [`http`] with extra header lines (each ending in CRLF).
    fn http_with(addr: SocketAddr, method: &str, headers: &str, body: &str) -> (u16, String, String) {
        let mut reader = http_send_with(addr, method, headers, body);
        let mut text = String::new();
        reader.read_to_string(&mut text).expect("a response");
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
        (status, head.to_string(), body.to_string())
    }

    fn session_header(head: &str) -> Option<String> {
        head.lines()
            .find_map(|line| line.strip_prefix("Mcp-Session-Id: ").or_else(|| line.strip_prefix("mcp-session-id: ")))
            .map(String::from)
    }

    #[test]
    fn http_sessions_are_issued_required_and_ended() {
        let addr = http_mock(MockOptions::default());
        let (status, head, body) = http(addr, "POST", None, r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#);
        assert_eq!(status, 200, "{head}");
        assert!(body.contains(r#""serverInfo""#), "{body}");
        let session = session_header(&head).expect("a session id");
        assert_eq!(session.len(), 32);

        let echo =
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#;
        assert_eq!(http(addr, "POST", None, echo).0, 400);
        assert_eq!(http(addr, "POST", Some("feedbeef"), echo).0, 404);
        let (status, _, body) = http(addr, "POST", Some(&session), echo);
        assert_eq!((status, body.contains(r#""text":"hi""#)), (200, true), "{body}");
        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(http(addr, "POST", Some(&session), note).0, 202);
        assert_eq!(http(addr, "POST", Some(&session), "{oops").0, 400);
        assert_eq!(http(addr, "GET", Some(&session), "").0, 405);
        assert_eq!(http(addr, "DELETE", Some(&session), "").0, 200);
        assert_eq!(http(addr, "POST", Some(&session), echo).0, 404);
    }

    #[test]
    fn http_sample_streams_the_request_and_takes_the_answer_on_another_post() {
        let addr = http_mock(MockOptions::default());
        let (_, head, _) = http(addr, "POST", None, r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#);
        let session = session_header(&head).expect("a session id");
        let call =
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sample","arguments":{"prompt":"p"}}}"#;
        let mut stream = http_send(addr, "POST", Some(&session), call);
        let mut events = Vec::new();
        let mut line = String::new();
        while events.is_empty() {
            line.clear();
            assert!(stream.read_line(&mut line).expect("a line") > 0, "the stream ended early");
            if line.starts_with("HTTP/1.1") {
                assert!(line.contains("200"), "{line}");
            }
            if let Some(data) = line.strip_prefix("data: ") {
                events.push(serde_json::from_str::<Value>(data).expect("JSON event"));
            }
        }
        assert_eq!(events[0]["method"], "sampling/createMessage");
        let answer = json!({"jsonrpc": "2.0", "id": events[0]["id"],
            "result": {"role": "assistant", "content": {"type": "text", "text": "sampled"}, "model": "m"}});
        assert_eq!(http(addr, "POST", Some(&session), &answer.to_string()).0, 202);
        let mut rest = String::new();
        stream.read_to_string(&mut rest).expect("the rest of the stream");
        assert!(rest.contains(r#""text":"sampled""#), "{rest}");
    }

    /// A stateless mock serving HTTP on an ephemeral port, with its front (to
    /// look at its open listens) and a keep-alive period of `keep_alive`.
    fn stateless_http_mock(keep_alive: Duration) -> (SocketAddr, Arc<HttpFront>) {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind");
        let addr = server.server_addr().to_ip().expect("an IP address");
        let mut mock = Mock::new(stateless()).expect("valid options");
        mock.keep_alive = keep_alive;
        let front = Arc::new(HttpFront::new(Arc::new(mock)));
        let serving = Arc::clone(&front);
        thread::spawn(move || serving.serve(&server));
        (addr, front)
    }

    /// A stateless request body and the headers that agree with it.
    fn stateless_post(id: u64, method: &str, params: Value) -> (String, String) {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": modern(params)}).to_string();
        let headers = format!("MCP-Protocol-Version: {STATELESS_PROTOCOL_VERSION}\r\nMcp-Method: {method}\r\n");
        (headers, body)
    }

    /// The JSON body of a response.
    fn json_of(body: &str) -> Value {
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
    }

    /// Reads an SSE stream up to its next event, skipping the response head and
    /// comments.
    fn next_event(stream: &mut BufReader<TcpStream>) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(stream.read_line(&mut line).expect("a line") > 0, "the stream ended early");
            if let Some(data) = line.strip_prefix("data: ") {
                return serde_json::from_str(data).expect("JSON event");
            }
        }
    }

    #[test]
    fn http_stateless_checks_headers_and_maps_errors_to_statuses() {
        let (addr, _front) = stateless_http_mock(KEEP_ALIVE);
        assert_eq!(http_with(addr, "GET", "", "").0, 405);
        assert_eq!(http_with(addr, "DELETE", "Mcp-Session-Id: x\r\n", "").0, 405);

        let (headers, body) = stateless_post(1, "server/discover", json!({}));
        let (status, head, answer) = http_with(addr, "POST", &headers, &body);
        assert_eq!(status, 200, "{head}");
        assert!(!head.to_ascii_lowercase().contains("mcp-session-id"), "{head}");
        assert_eq!(json_of(&answer)["result"]["supportedVersions"], json!(["2026-07-28"]));

        let (_, body) = stateless_post(2, "tools/list", json!({}));
        let no_version = "Mcp-Method: tools/list\r\n";
        let (status, _, answer) = http_with(addr, "POST", no_version, &body);
        assert_eq!((status, json_of(&answer)["error"]["code"].clone()), (400, json!(-32020)));
        let other_version = "Mcp-Method: tools/list\r\nMCP-Protocol-Version: 2025-11-25\r\n";
        assert_eq!(json_of(&http_with(addr, "POST", other_version, &body).2)["error"]["code"], -32020);
        let wrong_method = format!("Mcp-Method: tools/call\r\nMCP-Protocol-Version: {STATELESS_PROTOCOL_VERSION}\r\n");
        let (status, _, answer) = http_with(addr, "POST", &wrong_method, &body);
        assert_eq!(
            (status, json_of(&answer)["error"]["code"].clone(), json_of(&answer)["id"].clone()),
            (400, json!(-32020), json!(2))
        );

        let initialize = r#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#;
        let (status, _, answer) = http_with(addr, "POST", "MCP-Protocol-Version: 2025-11-25\r\n", initialize);
        assert_eq!((status, json_of(&answer)["error"]["data"].clone()), (404, json!({"supported": ["2026-07-28"]})));

        let old = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list",
            "params": {"_meta": {META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {}}}});
        let (status, _, answer) = http_with(addr, "POST", other_version, &old.to_string());
        assert_eq!((status, json_of(&answer)["error"]["code"].clone()), (400, json!(-32022)));
        let bare = r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}"#;
        let (status, _, answer) = http_with(addr, "POST", no_version, bare);
        assert_eq!((status, json_of(&answer)["error"]["code"].clone()), (400, json!(-32602)));

        let call = json!({"name": "sample", "arguments": {"prompt": "p"}});
        let unable =
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": with_meta(call.clone(), json!({}))});
        let call_headers = format!("Mcp-Method: tools/call\r\nMCP-Protocol-Version: {STATELESS_PROTOCOL_VERSION}\r\n");
        let (status, _, answer) = http_with(addr, "POST", &call_headers, &unable.to_string());
        assert_eq!((status, json_of(&answer)["error"]["code"].clone()), (400, json!(-32021)));
        let (headers, body) = stateless_post(7, "tools/call", call);
        let (status, _, answer) = http_with(addr, "POST", &headers, &body);
        assert_eq!((status, json_of(&answer)["result"]["resultType"].clone()), (200, json!("input_required")));

        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(http_with(addr, "POST", "", note).0, 202);
    }

    #[test]
    fn http_stateless_listen_streams_changes_and_ends_when_the_client_closes() {
        let (addr, front) = stateless_http_mock(Duration::from_millis(20));
        let (headers, body) =
            stateless_post(1, "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
        let mut listen = http_send_with(addr, "POST", &headers, &body);
        let mut status_line = String::new();
        listen.read_line(&mut status_line).expect("a status line");
        assert!(status_line.contains("200"), "{status_line}");
        let ack = next_event(&mut listen);
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["_meta"][META_SUBSCRIPTION_ID], 1);

        let (headers, body) = stateless_post(2, "tools/call", json!({"name": "add_tool"}));
        let (status, _, answer) = http_with(addr, "POST", &headers, &body);
        assert_eq!((status, json_of(&answer)["result"]["resultType"].clone()), (200, json!("complete")));
        let changed = next_event(&mut listen);
        assert_eq!(
            changed,
            notification("notifications/tools/list_changed", json!({"_meta": {META_SUBSCRIPTION_ID: 1}}))
        );
        let mut line = String::new();
        while line != ":\n" {
            line.clear();
            listen.read_line(&mut line).expect("a keep-alive");
        }

        assert_eq!(lock(&front.shared.listens).open.len(), 1);
        drop(listen);
        let deadline = Instant::now() + WAIT;
        while !lock(&front.shared.listens).open.is_empty() {
            assert!(Instant::now() < deadline, "the listen outlived its stream");
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn http_status_refuses_every_post() {
        let addr = http_mock(MockOptions { http_status: Some(401), ..MockOptions::default() });
        let (status, head, _) = http(addr, "POST", None, r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#);
        assert_eq!(status, 401);
        assert!(head.contains("WWW-Authenticate"), "{head}");
    }
}
