//! conformance-fixture: a stdio MCP server (protocol 2025-11-25) with exactly the
//! surface the server scenarios of the official conformance suite
//! (`@modelcontextprotocol/conformance`, see `tests/conformance/`) call, so the suite
//! can be run against tether with this program as tether's backend.
//!
//! - Tools: `test_simple_text`, `test_image_content`, `test_audio_content`,
//!   `test_embedded_resource`, `test_multiple_content_types`, `test_tool_with_logging`
//!   (three `info` log messages 50 ms apart), `test_tool_with_progress` (progress
//!   0, 50, 100 of 100 on the request's `progressToken`), `test_error_handling`
//!   (an `isError` result), `test_reconnection` (an ordinary result: closing an SSE
//!   stream mid-call is the HTTP front's business), `test_sampling` and
//!   `test_elicitation` (a `sampling/createMessage` or `elicitation/create` request to
//!   the client, answered before the tool call is), `test_elicitation_sep1034_defaults`,
//!   `test_elicitation_sep1330_enums` and `json_schema_2020_12_tool` (a JSON Schema
//!   2020-12 input schema that must reach the client unchanged).
//! - Resources: `test://static-text`, `test://static-binary`, `test://watched-resource`
//!   (subscribable; while subscribed it changes every 3 s and a
//!   `notifications/resources/updated` is sent), and the template
//!   `test://template/{id}/data`. An unknown URI is error -32602 with `data.uri`.
//! - Prompts: `test_simple_prompt`, `test_prompt_with_arguments`,
//!   `test_prompt_with_embedded_resource`, `test_prompt_with_image`.
//! - `completion/complete` for prompt arguments and the template's `id`,
//!   `logging/setLevel` (filters later log messages), `ping`.
//!
//! Wire: newline-delimited JSON-RPC 2.0 on stdin/stdout, one message per line; stderr
//! carries diagnostics only. Tool calls run on their own threads, so a tool can wait
//! for the client's answer to its request while the reader goes on reading; a
//! `notifications/cancelled` for a call still running suppresses its response. Bad
//! input never panics: it is answered with a JSON-RPC error (`id: null` when the
//! request's id cannot be known). End of stdin ends the process.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use serde_json::{json, Map, Value};

/// The protocol revision this fixture implements, answered when the client asks for
/// a revision this fixture does not know.
const PROTOCOL_VERSION: &str = "2025-11-25";

/// Revisions echoed back when a client asks for them in `initialize`.
const KNOWN_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// A 2x2 RGB PNG (red, green, blue, white), base64.
const IMAGE_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR42mP4z8DAAMIM/4EAAB/uBfvxq7p3AAAAAElFTkSuQmCC";

/// Eight samples of 16-bit mono PCM at 8 kHz as a WAV file, base64.
const AUDIO_WAV_BASE64: &str = "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAOgD0AfoAwAAGPww+Bj8";

/// The resource whose content changes while it is subscribed.
const WATCHED_URI: &str = "test://watched-resource";

/// How often the watched resource changes while subscribed.
const WATCH_INTERVAL: Duration = Duration::from_secs(3);

/// The pause between the steps of the logging and progress tools.
const STEP_DELAY: Duration = Duration::from_millis(50);

/// How long a tool waits for the client to answer its sampling or elicitation request.
const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// The `logger` of every log message this fixture sends.
const LOGGER: &str = "conformance-fixture";

/// JSON-RPC error codes used here.
mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
}

fn main() -> ExitCode {
    let fixture = Arc::new(Fixture::default());
    fixture.start_watch_ticker();
    for line in io::stdin().lock().lines() {
        match line {
            Ok(line) => fixture.handle_line(&line),
            Err(e) => {
                eprintln!("conformance-fixture: reading stdin: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// A JSON-RPC error answer.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl RpcError {
    /// -32602, the params were wrong (unknown name, missing argument, bad type).
    fn invalid_params(message: impl Into<String>) -> Self {
        RpcError { code: code::INVALID_PARAMS, message: message.into(), data: None }
    }

    /// -32602 for a URI that names no resource, with the URI in `data` (SEP-2164).
    fn resource_not_found(uri: &str) -> Self {
        RpcError { code: code::INVALID_PARAMS, message: "Resource not found".into(), data: Some(json!({ "uri": uri })) }
    }

    fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// What a handler answers: a result object or an error.
type Answer = Result<Value, RpcError>;

/// The severity of a log message, in the order of RFC 5424 (lowest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl Level {
    const ALL: [(Level, &'static str); 8] = [
        (Level::Debug, "debug"),
        (Level::Info, "info"),
        (Level::Notice, "notice"),
        (Level::Warning, "warning"),
        (Level::Error, "error"),
        (Level::Critical, "critical"),
        (Level::Alert, "alert"),
        (Level::Emergency, "emergency"),
    ];

    fn parse(name: &str) -> Option<Level> {
        Level::ALL.iter().find(|(_, n)| *n == name).map(|(level, _)| *level)
    }

    fn name(self) -> &'static str {
        Level::ALL.iter().find(|(level, _)| *level == self).map_or("info", |(_, n)| n)
    }
}

/// The state of the one session on stdio.
#[derive(Default)]
struct Session {
    /// The client's `capabilities` from `initialize`.
    client_capabilities: Map<String, Value>,
    /// The threshold set by `logging/setLevel`; `None` sends every message.
    log_level: Option<Level>,
    /// Subscribed resource URIs.
    subscriptions: BTreeSet<String>,
    /// How often the watched resource has changed.
    watched_revision: u64,
    /// Ids (as JSON text) of tool calls still running.
    in_flight: HashSet<String>,
    /// Ids (as JSON text) of running tool calls the client cancelled.
    cancelled: HashSet<String>,
}

/// The server: its output, its session, and its requests to the client awaiting answers.
#[derive(Default)]
struct Fixture {
    /// Stdout, one whole message per lock.
    out: Mutex<()>,
    session: Mutex<Session>,
    /// Our requests to the client by id (as JSON text), each with the channel its
    /// answer (result or error object) goes to.
    pending: Mutex<HashMap<String, mpsc::Sender<Result<Value, Value>>>>,
    next_request: AtomicU64,
}

/// Locks a mutex, taking over the data of a thread that panicked while holding it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fixture {
    // ---- input ----------------------------------------------------------------

    /// Handles one line of stdin: a request, a notification, or an answer to one of
    /// our requests.
    fn handle_line(self: &Arc<Self>, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(message)) => self.handle_message(message),
            Ok(Value::Array(_)) => {
                self.send_error(&Value::Null, &error(code::INVALID_REQUEST, "JSON-RPC batches are not supported"))
            }
            Ok(_) => self.send_error(&Value::Null, &error(code::INVALID_REQUEST, "a message must be a JSON object")),
            Err(e) => self.send_error(&Value::Null, &error(code::PARSE_ERROR, &format!("parse error: {e}"))),
        }
    }

    fn handle_message(self: &Arc<Self>, mut message: Map<String, Value>) {
        let id = message.remove("id");
        if let Some(id) = &id {
            if !matches!(id, Value::String(_) | Value::Number(_)) {
                return self.send_error(&Value::Null, &error(code::INVALID_REQUEST, "id must be a string or number"));
            }
        }
        if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            if message.contains_key("method") || id.is_none() {
                let id = id.unwrap_or(Value::Null);
                self.send_error(&id, &error(code::INVALID_REQUEST, "jsonrpc must be \"2.0\""));
            }
            return;
        }
        let params = message.remove("params");
        match (message.remove("method"), id) {
            (Some(Value::String(method)), Some(id)) => self.handle_request(id, method, params),
            (Some(Value::String(method)), None) => self.handle_notification(&method, params.as_ref()),
            (Some(_), id) => {
                self.send_error(&id.unwrap_or(Value::Null), &error(code::INVALID_REQUEST, "method must be a string"))
            }
            (None, Some(id)) => self.handle_answer(&id, message),
            (None, None) => {
                self.send_error(&Value::Null, &error(code::INVALID_REQUEST, "neither a request nor a response"))
            }
        }
    }

    fn handle_request(self: &Arc<Self>, id: Value, method: String, params: Option<Value>) {
        let params = match params {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(params)) => params,
            Some(_) => return self.send_error(&id, &RpcError::invalid_params("params must be an object").to_json()),
        };
        if method == "prompts/get" && params.get("name").and_then(Value::as_str) == Some(INPUT_PROMPT) {
            // Asks the client while it is being built: off the reader thread.
            let fixture = Arc::clone(self);
            thread::spawn(move || {
                let schema = json!({"type":"object","properties":{"context":{"type":"string"}},"required":["context"]});
                let asked = json!({"message": "What context should the prompt use?", "requestedSchema": schema});
                let answer = match fixture.ask_client_as("user_context", "elicitation/create", asked) {
                    Ok(answer) => {
                        let context = answer["content"]["context"].as_str().unwrap_or("none").to_string();
                        let text = format!("Use this context: {context}");
                        Ok(json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]}))
                    }
                    Err(e) => Err(RpcError::invalid_params(e)),
                };
                fixture.finish(&id, answer);
            });
            return;
        }
        if method == "tools/call" {
            // Tools may wait for the client; the reader must go on reading meanwhile.
            lock(&self.session).in_flight.insert(id.to_string());
            let fixture = Arc::clone(self);
            thread::spawn(move || {
                let answer = fixture.call_tool(&params);
                fixture.finish(&id, answer);
            });
            return;
        }
        let answer = self.dispatch(&method, &params);
        self.finish(&id, answer);
    }

    fn dispatch(&self, method: &str, params: &Map<String, Value>) -> Answer {
        match method {
            "initialize" => Ok(self.initialize(params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": tools() })),
            "resources/list" => Ok(json!({ "resources": resources() })),
            "resources/templates/list" => Ok(json!({ "resourceTemplates": resource_templates() })),
            "resources/read" => self.read_resource(required_str(params, "uri")?),
            "resources/subscribe" => self.subscribe(required_str(params, "uri")?),
            "resources/unsubscribe" => {
                lock(&self.session).subscriptions.remove(required_str(params, "uri")?);
                Ok(json!({}))
            }
            "prompts/list" => Ok(json!({ "prompts": prompts() })),
            "prompts/get" => get_prompt(params),
            "completion/complete" => complete(params),
            "logging/setLevel" => self.set_level(params),
            _ => Err(RpcError {
                code: code::METHOD_NOT_FOUND,
                message: format!("Method not found: {method}"),
                data: None,
            }),
        }
    }

    fn handle_notification(&self, method: &str, params: Option<&Value>) {
        if method == "notifications/cancelled" {
            let Some(request) = params.and_then(|p| p.get("requestId")) else {
                return;
            };
            let mut session = lock(&self.session);
            let key = request.to_string();
            if session.in_flight.contains(&key) {
                session.cancelled.insert(key);
            }
        }
        // notifications/initialized, roots/list_changed and the rest need nothing.
    }

    /// Routes the client's answer to the tool that asked.
    fn handle_answer(&self, id: &Value, mut message: Map<String, Value>) {
        let answer = match (message.remove("result"), message.remove("error")) {
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(error),
            _ => return eprintln!("conformance-fixture: ignoring a response to {id} without one result or error"),
        };
        match lock(&self.pending).remove(&id.to_string()) {
            Some(waiter) => {
                let _ = waiter.send(answer);
            }
            None => eprintln!("conformance-fixture: ignoring a response to unknown request {id}"),
        }
    }

    // ---- output ---------------------------------------------------------------

    /// Answers a request, unless the client cancelled it.
    fn finish(&self, id: &Value, answer: Answer) {
        let key = id.to_string();
        {
            let mut session = lock(&self.session);
            session.in_flight.remove(&key);
            if session.cancelled.remove(&key) {
                return;
            }
        }
        match answer {
            Ok(result) => self.send(&json!({ "jsonrpc": "2.0", "id": id, "result": result })),
            Err(e) => self.send_error(id, &e.to_json()),
        }
    }

    fn send_error(&self, id: &Value, error: &Value) {
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "error": error }));
    }

    fn notify(&self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Writes one message as one line. A closed stdout means the client is gone: exit.
    fn send(&self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        let _guard = lock(&self.out);
        let mut out = io::stdout().lock();
        if out.write_all(line.as_bytes()).and_then(|()| out.flush()).is_err() {
            std::process::exit(0);
        }
    }

    /// Sends a log message if it passes the level set by `logging/setLevel`.
    fn log(&self, level: Level, data: &str) {
        if lock(&self.session).log_level.is_some_and(|threshold| level < threshold) {
            return;
        }
        self.notify("notifications/message", json!({ "level": level.name(), "logger": LOGGER, "data": data }));
    }

    /// Sends a request to the client and waits for its answer.
    fn ask_client(&self, method: &str, params: Value) -> Result<Value, String> {
        self.ask_client_as(&format!("fixture-{}", self.next_request.fetch_add(1, Ordering::Relaxed)), method, params)
    }

    /// `ask_client` with a chosen request id: a gateway serving a stateless-era
    /// client turns the request into an `input_required` entry under this name.
    fn ask_client_as(&self, id: &str, method: &str, params: Value) -> Result<Value, String> {
        let id = Value::String(id.to_string());
        let (waiter, answer) = mpsc::channel();
        lock(&self.pending).insert(id.to_string(), waiter);
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let answer = answer.recv_timeout(CLIENT_ANSWER_TIMEOUT);
        lock(&self.pending).remove(&id.to_string());
        match answer {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(format!("the client answered {method} with an error: {error}")),
            Err(_) => Err(format!("the client did not answer {method} within {} s", CLIENT_ANSWER_TIMEOUT.as_secs())),
        }
    }

    /// Changes the watched resource every `WATCH_INTERVAL` while it is subscribed.
    fn start_watch_ticker(self: &Arc<Self>) {
        let fixture = Arc::clone(self);
        thread::spawn(move || loop {
            thread::sleep(WATCH_INTERVAL);
            let subscribed = {
                let mut session = lock(&fixture.session);
                let subscribed = session.subscriptions.contains(WATCHED_URI);
                if subscribed {
                    session.watched_revision += 1;
                }
                subscribed
            };
            if subscribed {
                fixture.notify("notifications/resources/updated", json!({ "uri": WATCHED_URI }));
            }
        });
    }

    // ---- lifecycle, logging, resources -----------------------------------------

    fn initialize(&self, params: &Map<String, Value>) -> Value {
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let version = requested.filter(|v| KNOWN_VERSIONS.contains(v)).unwrap_or(PROTOCOL_VERSION);
        {
            let mut session = lock(&self.session);
            *session = Session::default();
            if let Some(Value::Object(capabilities)) = params.get("capabilities") {
                session.client_capabilities = capabilities.clone();
            }
        }
        json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": { "listChanged": true },
                "resources": { "subscribe": true, "listChanged": true },
                "prompts": { "listChanged": true },
                "logging": {},
                "completions": {}
            },
            "serverInfo": {
                "name": "tether-conformance-fixture",
                "title": "tether conformance fixture",
                "version": env!("CARGO_PKG_VERSION")
            },
            "instructions": "Test fixture for the MCP conformance suite's server scenarios."
        })
    }

    fn set_level(&self, params: &Map<String, Value>) -> Answer {
        let name = required_str(params, "level")?;
        let Some(level) = Level::parse(name) else {
            return Err(RpcError::invalid_params(format!("unknown log level: {name}")));
        };
        lock(&self.session).log_level = Some(level);
        Ok(json!({}))
    }

    fn read_resource(&self, uri: &str) -> Answer {
        let content = match uri {
            "test://static-text" => {
                json!({ "uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource." })
            }
            "test://static-binary" => json!({ "uri": uri, "mimeType": "image/png", "blob": IMAGE_PNG_BASE64 }),
            WATCHED_URI => {
                let revision = lock(&self.session).watched_revision;
                let text = format!("Watched resource content, revision {revision}");
                json!({ "uri": uri, "mimeType": "text/plain", "text": text })
            }
            _ => {
                let Some(id) = template_id(uri) else {
                    return Err(RpcError::resource_not_found(uri));
                };
                let text = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
                json!({ "uri": uri, "mimeType": "application/json", "text": text.to_string() })
            }
        };
        Ok(json!({ "contents": [content] }))
    }

    fn subscribe(&self, uri: &str) -> Answer {
        let known = resources().iter().any(|r| r["uri"] == uri) || template_id(uri).is_some();
        if !known {
            return Err(RpcError::resource_not_found(uri));
        }
        lock(&self.session).subscriptions.insert(uri.to_string());
        Ok(json!({}))
    }

    // ---- tools ----------------------------------------------------------------

    /// Runs one `tools/call` (on its own thread). Unknown tools and malformed params
    /// are protocol errors; a tool that fails is an `isError` result.
    fn call_tool(&self, params: &Map<String, Value>) -> Answer {
        let name = required_str(params, "name")?;
        let empty = Map::new();
        let args = match params.get("arguments") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(args)) => args,
            Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
        };
        let result = match name {
            "test_simple_text" => text_result("This is a simple text response for testing."),
            "test_image_content" => {
                json!({ "content": [{ "type": "image", "data": IMAGE_PNG_BASE64, "mimeType": "image/png" }] })
            }
            "test_audio_content" => {
                json!({ "content": [{ "type": "audio", "data": AUDIO_WAV_BASE64, "mimeType": "audio/wav" }] })
            }
            "test_embedded_resource" => json!({ "content": [{ "type": "resource", "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content."
            } }] }),
            "test_multiple_content_types" => json!({ "content": [
                { "type": "text", "text": "Multiple content types test:" },
                { "type": "image", "data": IMAGE_PNG_BASE64, "mimeType": "image/png" },
                { "type": "resource", "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": json!({ "test": "data", "value": 123 }).to_string()
                } }
            ] }),
            "test_tool_with_logging" => {
                self.log(Level::Info, "Tool execution started");
                thread::sleep(STEP_DELAY);
                self.log(Level::Info, "Tool processing data");
                thread::sleep(STEP_DELAY);
                self.log(Level::Info, "Tool execution completed");
                text_result("Tool with logging executed successfully")
            }
            "test_tool_with_progress" => {
                let token = params.get("_meta").and_then(|m| m.get("progressToken")).cloned();
                for (step, progress) in [0, 50, 100].into_iter().enumerate() {
                    if step > 0 {
                        thread::sleep(STEP_DELAY);
                    }
                    if let Some(token) = &token {
                        self.notify(
                            "notifications/progress",
                            json!({
                                "progressToken": token,
                                "progress": progress,
                                "total": 100,
                                "message": format!("Completed step {progress} of 100")
                            }),
                        );
                    }
                }
                text_result("Tool with progress executed successfully")
            }
            "test_error_handling" => tool_error("This tool intentionally returns an error for testing"),
            "test_reconnection" => text_result("Reconnection test completed successfully."),
            "test_sampling" => self.sampling_tool(args),
            "test_elicitation" => self.elicitation_tool(args),
            "test_elicitation_sep1034_defaults" => self.elicit(
                "Please review and update the form fields with defaults",
                sep1034_schema(),
                "Elicitation completed",
            ),
            "test_elicitation_sep1330_enums" => {
                self.elicit("Please select options from the enum fields", sep1330_schema(), "Elicitation completed")
            }
            // The stateless revision's input_required scenarios, played the
            // handshake-era way: the fixture asks its client, names its request
            // like the scenario's input key, and finishes with the answer.
            "test_input_required_result_elicitation" => {
                let schema = json!({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]});
                let asked = json!({"message": "What is your name?", "requestedSchema": schema});
                match self.ask_client_as("user_name", "elicitation/create", asked) {
                    Ok(answer) => {
                        let name = answer["content"]["name"].as_str().unwrap_or("stranger").to_string();
                        text_result(&format!("Hello, {name}!"))
                    }
                    Err(e) => tool_error(&e),
                }
            }
            "test_input_required_result_sampling" => {
                let question = json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": "What is the capital of France?"}}],
                    "maxTokens": 100
                });
                match self.ask_client_as("capital_question", "sampling/createMessage", question) {
                    Ok(answer) => text_result(&sampled_text(&answer)),
                    Err(e) => tool_error(&e),
                }
            }
            "test_input_required_result_request_state" | "test_input_required_result_tampered_state" => {
                let schema = json!({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]});
                let asked = json!({"message": "Please confirm", "requestedSchema": schema});
                match self.ask_client_as("confirm", "elicitation/create", asked) {
                    Ok(answer) => text_result(&format!("state-ok: confirmed={}", answer["content"]["ok"])),
                    Err(e) => tool_error(&e),
                }
            }
            "test_input_required_result_multi_round" => {
                let ask = |key: &str, message: &str, field: &str| {
                    let schema = json!({"type":"object","properties":{field:{"type":"string"}},"required":[field]});
                    self.ask_client_as(
                        key,
                        "elicitation/create",
                        json!({"message": message, "requestedSchema": schema}),
                    )
                    .map(|answer| answer["content"][field].as_str().unwrap_or("?").to_string())
                };
                let answers = ask("step1", "Step 1: What is your name?", "name")
                    .and_then(|name| ask("step2", "Step 2: What is your favorite color?", "color").map(|c| (name, c)));
                match answers {
                    Ok((name, color)) => text_result(&format!("{name} likes {color}")),
                    Err(e) => tool_error(&e),
                }
            }
            "test_input_required_result_list_roots" => {
                match self.ask_client_as("client_roots", "roots/list", json!({})) {
                    Ok(answer) => text_result(&format!("Roots: {}", answer["roots"])),
                    Err(e) => tool_error(&e),
                }
            }
            "json_schema_2020_12_tool" => {
                text_result(&format!("JSON Schema 2020-12 tool called with: {}", Value::Object(args.clone())))
            }
            _ => return Err(RpcError::invalid_params(format!("Unknown tool: {name}"))),
        };
        Ok(result)
    }

    /// `test_sampling`: asks the client's LLM to answer `prompt`.
    fn sampling_tool(&self, args: &Map<String, Value>) -> Value {
        let Some(prompt) = args.get("prompt").and_then(Value::as_str) else {
            return tool_error("missing required string argument 'prompt'");
        };
        if !self.client_supports("sampling") {
            return tool_error("the client does not support sampling (no 'sampling' capability)");
        }
        let request = json!({
            "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
            "maxTokens": 100
        });
        match self.ask_client("sampling/createMessage", request) {
            Ok(result) => text_result(&format!("LLM response: {}", sampled_text(&result))),
            Err(e) => tool_error(&e),
        }
    }

    /// `test_elicitation`: asks the user for a username and an email address.
    fn elicitation_tool(&self, args: &Map<String, Value>) -> Value {
        let Some(message) = args.get("message").and_then(Value::as_str) else {
            return tool_error("missing required string argument 'message'");
        };
        let schema = json!({
            "type": "object",
            "properties": {
                "username": { "type": "string", "description": "User's response" },
                "email": { "type": "string", "description": "User's email address" }
            },
            "required": ["username", "email"]
        });
        self.elicit(message, schema, "User response")
    }

    /// Sends `elicitation/create` with `schema` and reports the user's action and content.
    fn elicit(&self, message: &str, schema: Value, label: &str) -> Value {
        if !self.client_supports("elicitation") {
            return tool_error("the client does not support elicitation (no 'elicitation' capability)");
        }
        match self.ask_client("elicitation/create", json!({ "message": message, "requestedSchema": schema })) {
            Ok(result) => {
                let action = result.get("action").and_then(Value::as_str).unwrap_or("(none)");
                let content = result.get("content").cloned().unwrap_or_else(|| json!({}));
                text_result(&format!("{label}: action={action}, content={content}"))
            }
            Err(e) => tool_error(&e),
        }
    }

    fn client_supports(&self, capability: &str) -> bool {
        lock(&self.session).client_capabilities.contains_key(capability)
    }
}

/// A JSON-RPC error object.
fn error(code: i64, message: &str) -> Value {
    json!({ "code": code, "message": message })
}

/// The string param `key`, or -32602 naming it.
fn required_str<'a>(params: &'a Map<String, Value>, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("missing string param '{key}'")))
}

/// A tool result with one text item.
fn text_result(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }] })
}

/// A tool result that reports the tool's failure.
fn tool_error(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": true })
}

/// The text of a `sampling/createMessage` result (one content item or an array).
fn sampled_text(result: &Value) -> String {
    match result.get("content") {
        Some(Value::Array(items)) => {
            items.iter().filter_map(|item| item.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" ")
        }
        Some(item) => item.get("text").and_then(Value::as_str).unwrap_or("(no text)").to_string(),
        None => "(no content)".to_string(),
    }
}

// ---- the catalog ------------------------------------------------------------------

/// An object input schema with `properties` and `required`.
fn object_schema(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

/// Every tool, in a fixed order.
fn tools() -> Vec<Value> {
    let no_args = || object_schema(json!({}), &[]);
    let simple = [
        ("test_simple_text", "Returns one text item"),
        ("test_input_required_result_elicitation", "Asks the user's name (elicitation)"),
        ("test_input_required_result_sampling", "Asks the LLM a question (sampling)"),
        ("test_input_required_result_list_roots", "Lists the client's roots"),
        ("test_input_required_result_request_state", "Asks for a confirmation"),
        ("test_input_required_result_tampered_state", "Asks for a confirmation (its retry is tampered with)"),
        ("test_input_required_result_multi_round", "Asks two questions, one after the other"),
        ("test_image_content", "Returns one PNG image item"),
        ("test_audio_content", "Returns one WAV audio item"),
        ("test_embedded_resource", "Returns one embedded text resource"),
        ("test_multiple_content_types", "Returns text, an image and an embedded resource"),
        ("test_tool_with_logging", "Sends three info log messages 50 ms apart, then returns"),
        ("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100 on the request's progressToken"),
        ("test_error_handling", "Always fails with an isError result"),
        ("test_reconnection", "Returns a result (SSE stream closing and resumption are the HTTP front's business)"),
        ("test_elicitation_sep1034_defaults", "Elicits a form whose fields all have default values (SEP-1034)"),
        ("test_elicitation_sep1330_enums", "Elicits a form with the five enum schema variants (SEP-1330)"),
    ];
    let mut tools: Vec<Value> = simple
        .iter()
        .map(|(name, description)| json!({ "name": name, "description": description, "inputSchema": no_args() }))
        .collect();
    tools.push(json!({
        "name": "test_sampling",
        "description": "Asks the client's LLM (sampling/createMessage) to answer a prompt",
        "inputSchema": object_schema(
            json!({ "prompt": { "type": "string", "description": "The prompt to send to the LLM" } }),
            &["prompt"],
        )
    }));
    tools.push(json!({
        "name": "test_elicitation",
        "description": "Asks the user (elicitation/create) for a username and an email address",
        "inputSchema": object_schema(
            json!({ "message": { "type": "string", "description": "The message to show the user" } }),
            &["message"],
        )
    }));
    tools.push(json!({
        "name": "json_schema_2020_12_tool",
        "description": "Tool with JSON Schema 2020-12 features (SEP-1613, SEP-2106)",
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": { "street": { "type": "string" }, "city": { "type": "string" } }
                }
            },
            "properties": {
                "name": { "type": "string" },
                "address": { "$ref": "#/$defs/address" },
                "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                "phone": { "type": "string" },
                "email": { "type": "string" }
            },
            "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
            "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
            "then": { "required": ["phone"] },
            "else": { "required": ["email"] },
            "additionalProperties": false
        }
    }));
    tools
}

/// The form of `test_elicitation_sep1034_defaults`: every primitive type with a default.
fn sep1034_schema() -> Value {
    object_schema(
        json!({
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": { "type": "boolean", "description": "Verification status", "default": true }
        }),
        &[],
    )
}

/// The form of `test_elicitation_sep1330_enums`: the five enum schema variants.
fn sep1330_schema() -> Value {
    object_schema(
        json!({
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"]
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": [
                    { "const": "value1", "title": "First Option" },
                    { "const": "value2", "title": "Second Option" },
                    { "const": "value3", "title": "Third Option" }
                ]
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "anyOf": [
                        { "const": "value1", "title": "First Choice" },
                        { "const": "value2", "title": "Second Choice" },
                        { "const": "value3", "title": "Third Choice" }
                    ]
                }
            }
        }),
        &[],
    )
}

/// The direct resources.
fn resources() -> Vec<Value> {
    vec![
        json!({
            "uri": "test://static-text",
            "name": "static-text",
            "title": "Static Text Resource",
            "description": "A static text resource",
            "mimeType": "text/plain"
        }),
        json!({
            "uri": "test://static-binary",
            "name": "static-binary",
            "title": "Static Binary Resource",
            "description": "A static binary resource (a PNG image)",
            "mimeType": "image/png"
        }),
        json!({
            "uri": WATCHED_URI,
            "name": "watched-resource",
            "title": "Watched Resource",
            "description": "A subscribable resource that changes every 3 s while subscribed",
            "mimeType": "text/plain"
        }),
    ]
}

/// The resource templates.
fn resource_templates() -> Vec<Value> {
    vec![json!({
        "uriTemplate": "test://template/{id}/data",
        "name": "template",
        "title": "Resource Template",
        "description": "A resource template with parameter substitution",
        "mimeType": "application/json"
    })]
}

/// The `{id}` of a URI of the template `test://template/{id}/data`.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri.strip_prefix("test://template/")?.strip_suffix("/data")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// One argument of a prompt.
struct PromptArgument {
    name: &'static str,
    description: &'static str,
}

/// A prompt: name, title, description, arguments (all required).
struct Prompt {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    arguments: &'static [PromptArgument],
}

const PROMPTS: &[Prompt] = &[
    Prompt {
        name: "test_simple_prompt",
        title: "Simple Test Prompt",
        description: "A simple prompt without arguments",
        arguments: &[],
    },
    Prompt {
        name: "test_prompt_with_arguments",
        title: "Prompt With Arguments",
        description: "A prompt with required arguments",
        arguments: &[
            PromptArgument { name: "arg1", description: "First test argument" },
            PromptArgument { name: "arg2", description: "Second test argument" },
        ],
    },
    Prompt {
        name: "test_prompt_with_embedded_resource",
        title: "Prompt With Embedded Resource",
        description: "A prompt that includes an embedded resource",
        arguments: &[PromptArgument { name: "resourceUri", description: "URI of the resource to embed" }],
    },
    Prompt {
        name: "test_prompt_with_image",
        title: "Prompt With Image",
        description: "A prompt that includes image content",
        arguments: &[],
    },
];

/// Completion candidates for every prompt argument.
const ARGUMENT_CANDIDATES: &[&str] = &["hello", "help", "test", "testing", "world"];

/// Completion candidates for the template's `id`.
const ID_CANDIDATES: &[&str] = &["1", "2", "3", "42", "123"];

/// The prompt that asks the client for input while it is built.
const INPUT_PROMPT: &str = "test_input_required_result_prompt";

fn prompts() -> Vec<Value> {
    let input = json!({"name": INPUT_PROMPT, "description": "Asks the user for context (elicitation)"});
    PROMPTS
        .iter()
        .map(|p| {
            let arguments: Vec<Value> = p
                .arguments
                .iter()
                .map(|a| json!({ "name": a.name, "description": a.description, "required": true }))
                .collect();
            json!({ "name": p.name, "title": p.title, "description": p.description, "arguments": arguments })
        })
        .chain(std::iter::once(input))
        .collect()
}

/// `prompts/get`: every argument is required and must be a string.
fn get_prompt(params: &Map<String, Value>) -> Answer {
    let name = required_str(params, "name")?;
    let Some(prompt) = PROMPTS.iter().find(|p| p.name == name) else {
        return Err(RpcError::invalid_params(format!("Unknown prompt: {name}")));
    };
    let empty = Map::new();
    let args = match params.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(args)) => args,
        Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
    };
    let mut values = HashMap::new();
    for argument in prompt.arguments {
        let Some(value) = args.get(argument.name).and_then(Value::as_str) else {
            return Err(RpcError::invalid_params(format!("missing required string argument '{}'", argument.name)));
        };
        values.insert(argument.name, value);
    }
    let user = |content: Value| json!({ "role": "user", "content": content });
    let messages = match prompt.name {
        "test_simple_prompt" => vec![user(json!({ "type": "text", "text": "This is a simple prompt for testing." }))],
        "test_prompt_with_arguments" => {
            let text = format!("Prompt with arguments: arg1='{}', arg2='{}'", values["arg1"], values["arg2"]);
            vec![user(json!({ "type": "text", "text": text }))]
        }
        "test_prompt_with_embedded_resource" => vec![
            user(json!({ "type": "resource", "resource": {
                "uri": values["resourceUri"],
                "mimeType": "text/plain",
                "text": "Embedded resource content for testing."
            } })),
            user(json!({ "type": "text", "text": "Please process the embedded resource above." })),
        ],
        _ => vec![
            user(json!({ "type": "image", "data": IMAGE_PNG_BASE64, "mimeType": "image/png" })),
            user(json!({ "type": "text", "text": "Please analyze the image above." })),
        ],
    };
    Ok(json!({ "description": prompt.description, "messages": messages }))
}

/// `completion/complete` for a prompt argument or the template's `id`: the
/// candidates that start with the typed value.
fn complete(params: &Map<String, Value>) -> Answer {
    let reference = params.get("ref").ok_or_else(|| RpcError::invalid_params("missing param 'ref'"))?;
    let argument = params.get("argument").ok_or_else(|| RpcError::invalid_params("missing param 'argument'"))?;
    let (Some(argument_name), Some(typed)) =
        (argument.get("name").and_then(Value::as_str), argument.get("value").and_then(Value::as_str))
    else {
        return Err(RpcError::invalid_params("argument must have string 'name' and 'value'"));
    };
    let candidates: &[&str] = match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt") => {
            let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
            let Some(prompt) = PROMPTS.iter().find(|p| p.name == name) else {
                return Err(RpcError::invalid_params(format!("Unknown prompt: {name}")));
            };
            if prompt.arguments.iter().any(|a| a.name == argument_name) {
                ARGUMENT_CANDIDATES
            } else {
                &[]
            }
        }
        Some("ref/resource") => {
            let uri = reference.get("uri").and_then(Value::as_str).unwrap_or("");
            if uri == "test://template/{id}/data" && argument_name == "id" {
                ID_CANDIDATES
            } else {
                &[]
            }
        }
        _ => return Err(RpcError::invalid_params("ref.type must be 'ref/prompt' or 'ref/resource'")),
    };
    let typed = typed.to_lowercase();
    let values: Vec<&str> = candidates.iter().copied().filter(|c| c.starts_with(&typed)).collect();
    Ok(json!({ "completion": { "values": values, "total": values.len(), "hasMore": false } }))
}
