//! The handshake mode (the default): MCP 2025-11-25 with an `initialize` handshake,
//! one session per process, and server-to-client requests (sampling, elicitation,
//! roots) sent while a tool call waits for their answers.
//!
//! Tool calls (and the prompt that asks for input) run on their own threads, so a
//! tool can wait for the client's answer to its request while the reader goes on
//! reading; a `notifications/cancelled` for a call still running suppresses its
//! response and cuts short the pauses of the tasks scenarios' tools, which only
//! this mode offers ([`tasks_tools`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::catalog::{self, Dynamic, Level, INPUT_PROMPT, WATCHED_URI, WATCH_INTERVAL};
use crate::tasks_tools::{self, Cancel};
use crate::wire::{
    lock, params_object, parse_line, required_str, text_result, tool_arguments, tool_error, Answer, Incoming, Out,
    RpcError,
};

/// The protocol revision this mode implements, answered when the client asks for
/// a revision this fixture does not know.
const PROTOCOL_VERSION: &str = "2025-11-25";

/// Revisions echoed back when a client asks for them in `initialize`.
const KNOWN_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// How long a tool waits for the client to answer its sampling or elicitation request.
const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

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
    /// Tool calls still running by id (as JSON text), each with its cancellation;
    /// an entry goes when its call is answered.
    in_flight: HashMap<String, Arc<Cancel>>,
}

/// The server: its output, its session, and its requests to the client awaiting answers.
#[derive(Default)]
pub struct Fixture {
    out: Out,
    session: Mutex<Session>,
    dynamic: Dynamic,
    /// Our requests to the client by id (as JSON text), each with the channel its
    /// answer (result or error object) goes to, and which ask it is (a request
    /// asked again under the same chosen id replaces the older one, whose end
    /// must then leave the newer one alone).
    pending: Mutex<HashMap<String, (u64, Waiter)>>,
    next_request: AtomicU64,
}

/// Where the client's answer to one of our requests goes: its result, or its error object.
type Waiter = mpsc::Sender<Result<Value, Value>>;

/// A request sent to the client, its answer not awaited yet.
struct Asked {
    /// Its id, as JSON text (the key of `pending`).
    id: String,
    method: String,
    /// Which ask it is (see `pending`).
    ask: u64,
    answer: mpsc::Receiver<Result<Value, Value>>,
}

impl Fixture {
    /// Starts the watched resource's ticker.
    pub fn start(self: &Arc<Self>) {
        self.start_watch_ticker();
    }

    // ---- input ----------------------------------------------------------------

    /// Handles one line of stdin: a request, a notification, or an answer to one of
    /// our requests.
    pub fn handle_line(self: &Arc<Self>, line: &str) {
        match parse_line(line) {
            None => {}
            Some(Incoming::Invalid { id, error }) => self.out.send_error(&id, &error),
            Some(Incoming::Request { id, method, params }) => match params_object(params) {
                Ok(params) => self.handle_request(id, method, params),
                Err(e) => self.out.send_error(&id, &e.to_json()),
            },
            Some(Incoming::Notification { method, params }) => self.handle_notification(&method, params.as_ref()),
            Some(Incoming::Answer { id, outcome }) => self.handle_answer(&id, outcome),
        }
    }

    fn handle_request(self: &Arc<Self>, id: Value, method: String, params: Map<String, Value>) {
        if method == "prompts/get" && params.get("name").and_then(Value::as_str) == Some(INPUT_PROMPT) {
            // Asks the client while it is being built: off the reader thread.
            let fixture = Arc::clone(self);
            thread::spawn(move || {
                let asked = catalog::ask_string("What context should the prompt use?", "context");
                let answer = match fixture.ask_client_as("user_context", "elicitation/create", asked) {
                    Ok(answer) => {
                        Ok(catalog::input_prompt_result(answer["content"]["context"].as_str().unwrap_or("none")))
                    }
                    Err(e) => Err(RpcError::invalid_params(e)),
                };
                fixture.finish(&id, answer);
            });
            return;
        }
        if method == "tools/call" {
            // Tools may wait for the client; the reader must go on reading meanwhile.
            let cancel = Arc::new(Cancel::default());
            lock(&self.session).in_flight.insert(id.to_string(), Arc::clone(&cancel));
            let fixture = Arc::clone(self);
            thread::spawn(move || {
                let answer = fixture.call_tool(&params, &cancel);
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
            "tools/list" => {
                let mut tools = catalog::tools(&self.dynamic);
                tools.extend(tasks_tools::tools());
                Ok(json!({ "tools": tools }))
            }
            "resources/list" => Ok(json!({ "resources": catalog::resources() })),
            "resources/templates/list" => Ok(json!({ "resourceTemplates": catalog::resource_templates(false) })),
            "resources/read" => {
                let revision = lock(&self.session).watched_revision;
                catalog::read_resource(required_str(params, "uri")?, revision)
            }
            "resources/subscribe" => self.subscribe(required_str(params, "uri")?),
            "resources/unsubscribe" => {
                lock(&self.session).subscriptions.remove(required_str(params, "uri")?);
                Ok(json!({}))
            }
            "prompts/list" => Ok(json!({ "prompts": catalog::prompts(&self.dynamic) })),
            "prompts/get" => catalog::get_prompt(params, &self.dynamic),
            "completion/complete" => catalog::complete(params),
            "logging/setLevel" => self.set_level(params),
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    fn handle_notification(&self, method: &str, params: Option<&Value>) {
        if method == "notifications/cancelled" {
            let Some(request) = params.and_then(|p| p.get("requestId")) else {
                return;
            };
            if let Some(cancel) = lock(&self.session).in_flight.get(&request.to_string()) {
                cancel.cancel();
            }
        }
        // notifications/initialized, roots/list_changed and the rest need nothing.
    }

    /// Routes the client's answer to the tool that asked.
    fn handle_answer(&self, id: &Value, answer: Result<Value, Value>) {
        match lock(&self.pending).remove(&id.to_string()) {
            Some((_, waiter)) => {
                let _ = waiter.send(answer);
            }
            None => eprintln!("conformance-fixture: ignoring a response to unknown request {id}"),
        }
    }

    // ---- output ---------------------------------------------------------------

    /// Answers a request, unless the client cancelled it.
    fn finish(&self, id: &Value, answer: Answer) {
        let cancelled = lock(&self.session).in_flight.remove(&id.to_string()).is_some_and(|c| c.is_cancelled());
        if cancelled {
            return;
        }
        match answer {
            Ok(result) => self.out.send_result(id, result),
            Err(e) => self.out.send_error(id, &e.to_json()),
        }
    }

    /// Whether a log message at `level` passes the level set by `logging/setLevel`.
    fn logs_at(&self, level: Level) -> bool {
        !lock(&self.session).log_level.is_some_and(|threshold| level < threshold)
    }

    /// Sends a request to the client and waits for its answer.
    fn ask_client(&self, method: &str, params: Value) -> Result<Value, String> {
        self.ask_client_as(&format!("fixture-{}", self.next_request.fetch_add(1, Ordering::Relaxed)), method, params)
    }

    /// `ask_client` with a chosen request id: a gateway serving a stateless-era
    /// client turns the request into an `input_required` entry under this name.
    fn ask_client_as(&self, id: &str, method: &str, params: Value) -> Result<Value, String> {
        let asked = self.send_ask(id, method, params);
        self.await_ask(asked)
    }

    /// Sends a request to the client under `id`; its answer is awaited with
    /// [`Fixture::await_ask`] (several may be out at once).
    fn send_ask(&self, id: &str, method: &str, params: Value) -> Asked {
        let (waiter, answer) = mpsc::channel();
        let ask = self.next_request.fetch_add(1, Ordering::Relaxed);
        let id = Value::String(id.to_string());
        // Keyed by the id as JSON text, as answers are looked up.
        lock(&self.pending).insert(id.to_string(), (ask, waiter));
        self.out.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        Asked { id: id.to_string(), method: method.to_string(), ask, answer }
    }

    /// The client's answer to a request [`Fixture::send_ask`] sent.
    fn await_ask(&self, asked: Asked) -> Result<Value, String> {
        let Asked { id, method, ask, answer } = asked;
        let answer = answer.recv_timeout(CLIENT_ANSWER_TIMEOUT);
        let mut pending = lock(&self.pending);
        if pending.get(&id).is_some_and(|(current, _)| *current == ask) {
            pending.remove(&id);
        }
        drop(pending);
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
                fixture.out.notify("notifications/resources/updated", json!({ "uri": WATCHED_URI }));
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

    fn subscribe(&self, uri: &str) -> Answer {
        if !catalog::is_resource(uri) {
            return Err(RpcError::resource_not_found(uri));
        }
        lock(&self.session).subscriptions.insert(uri.to_string());
        Ok(json!({}))
    }

    // ---- tools ----------------------------------------------------------------

    /// Runs one `tools/call` (on its own thread). Unknown tools and malformed params
    /// are protocol errors; a tool that fails is an `isError` result.
    fn call_tool(&self, params: &Map<String, Value>, cancel: &Cancel) -> Answer {
        let name = required_str(params, "name")?;
        let args = tool_arguments(params)?;
        let elicit = |id: Option<&str>, asked: Value| match id {
            Some(id) => self.ask_client_as(id, "elicitation/create", asked),
            None => self.ask_client("elicitation/create", asked),
        };
        if let Some(answer) = tasks_tools::call(name, &args, cancel, &elicit) {
            return answer;
        }
        if let Some(result) = catalog::plain_tool(name, &args, &self.dynamic) {
            return Ok(result);
        }
        let result = match name {
            "test_tool_with_logging" | "test_logging_tool" => catalog::logging_tool(&self.out, |l| self.logs_at(l)),
            "test_tool_with_progress" => {
                let token = params.get("_meta").and_then(|m| m.get("progressToken"));
                catalog::progress_tool(&self.out, token)
            }
            "test_sampling" => self.sampling_tool(&args),
            "test_elicitation" => self.elicitation_tool(&args),
            "test_elicitation_sep1034_defaults" => self.elicit(
                "Please review and update the form fields with defaults",
                catalog::sep1034_schema(),
                "Elicitation completed",
            ),
            "test_elicitation_sep1330_enums" => self.elicit(
                "Please select options from the enum fields",
                catalog::sep1330_schema(),
                "Elicitation completed",
            ),
            "test_trigger_tool_change" => {
                self.dynamic.toggle_tool();
                self.out.notify("notifications/tools/list_changed", json!({}));
                text_result("The tool list changed.")
            }
            "test_trigger_prompt_change" => {
                self.dynamic.toggle_prompt();
                self.out.notify("notifications/prompts/list_changed", json!({}));
                text_result("The prompt list changed.")
            }
            _ => match self.input_tool(name) {
                Some(result) => result,
                None => return Err(RpcError::invalid_params(format!("Unknown tool: {name}"))),
            },
        };
        Ok(result)
    }

    /// The stateless revision's `input_required` scenarios, played the handshake-era
    /// way: the fixture asks its client, names each request like the scenario's
    /// input key, and finishes with the answers. `None` for other tools.
    fn input_tool(&self, name: &str) -> Option<Value> {
        let ask_name = |key: &str| {
            self.ask_client_as(key, "elicitation/create", catalog::ask_string("What is your name?", "name"))
                .map(|answer| answer["content"]["name"].as_str().unwrap_or("stranger").to_string())
        };
        let result = match name {
            "test_input_required_result_elicitation" | "test_streaming_elicitation" => match ask_name("user_name") {
                Ok(name) => text_result(&format!("Hello, {name}!")),
                Err(e) => tool_error(&e),
            },
            "test_input_required_result_sampling" => {
                let question = catalog::ask_llm("What is the capital of France?", 100);
                match self.ask_client_as("capital_question", "sampling/createMessage", question) {
                    Ok(answer) => text_result(&catalog::sampled_text(&answer)),
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
                    self.ask_client_as(key, "elicitation/create", catalog::ask_string(message, field))
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
            "test_input_required_result_multiple_inputs" => {
                // All three at once, written back to back (JSON-RPC lets a server
                // have several requests out), as the stateless revision's single
                // round asks them; then their answers.
                let name =
                    self.send_ask("user_name", "elicitation/create", catalog::ask_string("What is your name?", "name"));
                let question = catalog::ask_llm("Generate a greeting", 50);
                let greeting = self.send_ask("greeting", "sampling/createMessage", question);
                let roots = self.send_ask("client_roots", "roots/list", json!({}));
                let name = self
                    .await_ask(name)
                    .map(|answer| answer["content"]["name"].as_str().unwrap_or("stranger").to_string());
                let (greeting, roots) = (self.await_ask(greeting), self.await_ask(roots));
                match name.and_then(|n| greeting.and_then(|g| roots.map(|r| (n, g, r)))) {
                    Ok((name, greeting, roots)) => text_result(&format!(
                        "{name}: {} (roots: {})",
                        catalog::sampled_text(&greeting),
                        roots["roots"]
                    )),
                    Err(e) => tool_error(&e),
                }
            }
            "test_input_required_result_capabilities" => {
                // Asks only what the client declared it can answer.
                let mut answers = Vec::new();
                if self.client_supports("sampling") {
                    let question = catalog::ask_llm("What is the capital of France?", 100);
                    match self.ask_client_as("capital_question", "sampling/createMessage", question) {
                        Ok(answer) => answers.push(format!("sampling: {}", catalog::sampled_text(&answer))),
                        Err(e) => return Some(tool_error(&e)),
                    }
                }
                if self.client_supports("elicitation") {
                    match ask_name("user_name") {
                        Ok(name) => answers.push(format!("elicitation: {name}")),
                        Err(e) => return Some(tool_error(&e)),
                    }
                }
                if answers.is_empty() {
                    tool_error("the client declared neither sampling nor elicitation")
                } else {
                    text_result(&answers.join("; "))
                }
            }
            "test_missing_capability" => {
                if !self.client_supports("sampling") {
                    return Some(tool_error("the client does not support sampling (no 'sampling' capability)"));
                }
                let question = catalog::ask_llm("What is the capital of France?", 100);
                match self.ask_client_as("capital_question", "sampling/createMessage", question) {
                    Ok(answer) => text_result(&catalog::sampled_text(&answer)),
                    Err(e) => tool_error(&e),
                }
            }
            _ => return None,
        };
        Some(result)
    }

    /// `test_sampling`: asks the client's LLM to answer `prompt`.
    fn sampling_tool(&self, args: &Map<String, Value>) -> Value {
        let Some(prompt) = args.get("prompt").and_then(Value::as_str) else {
            return tool_error("missing required string argument 'prompt'");
        };
        if !self.client_supports("sampling") {
            return tool_error("the client does not support sampling (no 'sampling' capability)");
        }
        match self.ask_client("sampling/createMessage", catalog::ask_llm(prompt, 100)) {
            Ok(result) => text_result(&format!("LLM response: {}", catalog::sampled_text(&result))),
            Err(e) => tool_error(&e),
        }
    }

    /// `test_elicitation`: asks the user for a username and an email address.
    fn elicitation_tool(&self, args: &Map<String, Value>) -> Value {
        let Some(message) = args.get("message").and_then(Value::as_str) else {
            return tool_error("missing required string argument 'message'");
        };
        self.elicit(message, catalog::elicitation_tool_schema(), "User response")
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
