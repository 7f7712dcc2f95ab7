//! The stateless mode (`--stateless`): a stateless-only server of MCP 2026-07-28 on
//! stdio, so the suite's 2026-07-28 scenarios can run through tether with a backend
//! of that revision behind it (run e of `tests/conformance/run.sh`).
//!
//! - No handshake: `server/discover` describes the server; `initialize`, `ping`,
//!   `logging/setLevel` and `resources/(un)subscribe` are -32601 (removed methods),
//!   the first naming the supported version.
//! - Every request carries `_meta` with the protocol version and the client
//!   capabilities: -32602 without them, -32022 with `data: {supported, requested}`
//!   for another version. Nothing is remembered between requests; capabilities
//!   and the log level are the request's own.
//! - Results carry `resultType` and `_meta` serverInfo; discover, lists and reads
//!   also `ttlMs`/`cacheScope`.
//! - The server never sends a request: a tool (or prompt, or read) that needs the
//!   client answers `input_required` with `inputRequests` (only of capabilities
//!   the request declares: -32021 with `data.requiredCapabilities` when one it
//!   needs is missing) and, when it has something to remember, a tamper-evident
//!   `requestState` (see `request_state`). The retry carries `inputResponses` and
//!   the state; missing responses are asked again, invalid ones are -32602, extra
//!   ones are ignored.
//! - Change notifications only go to open `subscriptions/listen` requests, each
//!   acknowledged first and tagged with its subscription id; a listen lasts until
//!   the client's `notifications/cancelled`.
//! - Log messages only at the request's `_meta` log level; progress on its
//!   `_meta.progressToken`.
//! - The tasks extension (SEP-2663) natively ([`tasks`]): `server/discover` lists
//!   it under `capabilities.extensions`; a `tools/call` of a task-supporting tool of
//!   [`tasks_tools`] from a request that declares it returns a `CreateTaskResult`
//!   (the server alone decides: a legacy `task` param changes nothing), and
//!   `tasks/get`, `tasks/update`, `tasks/cancel` serve such tasks (-32021 without
//!   the extension; `tasks/result` and `tasks/list` are -32601). Without the
//!   extension the optional ones run synchronously (their questions as
//!   `input_required`), the required ones (`failing_job`, `test_tool_with_task`)
//!   are -32021. `test_tool_with_task` first asks the user's name the
//!   `input_required` way, then creates its task on the round that brings it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{json, Map, Value};

use crate::catalog::{self, Dynamic, Level, INPUT_PROMPT, WATCHED_URI, WATCH_INTERVAL};
use crate::request_state::Minter;
use crate::tasks::{self, input_key};
use crate::tasks_tools::{self, Cancel, USER_NAME_KEY};
use crate::wire::{
    code, lock, params_object, parse_line, required_str, text_result, tool_arguments, tool_error, Answer, Incoming,
    Out, RpcError,
};

/// The one revision this mode speaks.
const PROTOCOL_VERSION: &str = "2026-07-28";

/// The reserved `_meta` keys of the revision.
mod meta {
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
}

/// The methods served.
const METHODS: &[&str] = &[
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
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// How long clients may cache `server/discover` (it never changes).
const DISCOVER_TTL_MS: u64 = 60_000;

/// How long clients may cache a list: the trigger tools change them, and say so on
/// the listens, which invalidates the cached copy (the revision's caching rules).
const LIST_TTL_MS: u64 = 30_000;

/// How long clients may cache a read of a resource that never changes (the
/// watched one is stale at once).
const READ_TTL_MS: u64 = 60_000;

/// One request's `_meta`, checked.
struct RequestMeta {
    capabilities: Map<String, Value>,
    /// The least severe level the client wants logged; `None`: no logs at all.
    log_level: Option<Level>,
    progress_token: Option<Value>,
}

impl RequestMeta {
    /// -32602 when the protocol version or the client capabilities are missing or
    /// ill-typed, or the log level is unknown; -32022 for a version but 2026-07-28.
    fn parse(params: &Map<String, Value>) -> Result<Self, RpcError> {
        let Some(Value::Object(m)) = params.get("_meta") else {
            return Err(RpcError::invalid_params("missing params._meta (every request of this revision carries it)"));
        };
        let version = match m.get(meta::PROTOCOL_VERSION) {
            Some(Value::String(version)) => version,
            Some(_) => {
                return Err(RpcError::invalid_params(format!("_meta[\"{}\"] must be a string", meta::PROTOCOL_VERSION)))
            }
            None => return Err(RpcError::invalid_params(format!("missing _meta[\"{}\"]", meta::PROTOCOL_VERSION))),
        };
        let capabilities = match m.get(meta::CLIENT_CAPABILITIES) {
            Some(Value::Object(capabilities)) => capabilities.clone(),
            Some(_) => {
                return Err(RpcError::invalid_params(format!(
                    "_meta[\"{}\"] must be an object",
                    meta::CLIENT_CAPABILITIES
                )))
            }
            None => return Err(RpcError::invalid_params(format!("missing _meta[\"{}\"]", meta::CLIENT_CAPABILITIES))),
        };
        if version != PROTOCOL_VERSION {
            return Err(RpcError {
                code: code::UNSUPPORTED_VERSION,
                message: format!("Unsupported protocol version: {version}"),
                data: Some(json!({ "supported": [PROTOCOL_VERSION], "requested": version })),
            });
        }
        let log_level = match m.get(meta::LOG_LEVEL) {
            None => None,
            Some(level) => Some(
                level
                    .as_str()
                    .and_then(Level::parse)
                    .ok_or_else(|| RpcError::invalid_params(format!("unknown log level {level}")))?,
            ),
        };
        Ok(RequestMeta { capabilities, log_level, progress_token: m.get("progressToken").cloned() })
    }

    fn declares(&self, capability: &str) -> bool {
        self.capabilities.get(capability).is_some_and(Value::is_object)
    }

    /// Whether the request declares the tasks extension (`extensions[...]`, an object).
    fn declares_tasks(&self) -> bool {
        self.capabilities.get("extensions").and_then(|e| e.get(tasks::EXTENSION)).is_some_and(Value::is_object)
    }

    /// -32021 naming the tasks extension, unless the request declares it.
    fn require_tasks(&self) -> Result<(), RpcError> {
        if self.declares_tasks() {
            return Ok(());
        }
        Err(RpcError {
            code: code::MISSING_CAPABILITY,
            message: format!("Missing required client capability: extension {}", tasks::EXTENSION),
            data: Some(json!({ "requiredCapabilities": { "extensions": { (tasks::EXTENSION): {} } } })),
        })
    }

    /// -32021 naming every capability of `needed` the request does not declare.
    fn require(&self, needed: &[&str]) -> Result<(), RpcError> {
        let missing: Map<String, Value> =
            needed.iter().filter(|c| !self.declares(c)).map(|c| (c.to_string(), json!({}))).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let names: Vec<&String> = missing.keys().collect();
        Err(RpcError {
            code: code::MISSING_CAPABILITY,
            message: format!("Missing required client capability: {names:?}"),
            data: Some(json!({ "requiredCapabilities": missing })),
        })
    }
}

/// What the client asked to hear on one `subscriptions/listen`, as acknowledged.
struct Listen {
    id: Value,
    tools: bool,
    prompts: bool,
    uris: Vec<String>,
}

/// The tool calls running, by id (as JSON text), for cancellation.
#[derive(Default)]
struct Calls {
    in_flight: HashSet<String>,
    /// Calls still running that the client cancelled: their answers are dropped.
    cancelled: HashSet<String>,
}

/// The server. It remembers no client: only the open listens, the calls running
/// (for cancellation), and what the trigger tools and the ticker changed.
#[derive(Default)]
pub struct Server {
    out: Out,
    dynamic: Dynamic,
    states: Minter,
    listens: Mutex<Vec<Listen>>,
    calls: Mutex<Calls>,
    /// The tasks of the tasks extension.
    tasks: Arc<tasks::Store>,
    /// How often the watched resource has changed.
    watched_revision: AtomicU64,
}

impl Server {
    /// Starts the watched resource's ticker.
    pub fn start(self: &Arc<Self>) {
        let server = Arc::clone(self);
        thread::spawn(move || loop {
            thread::sleep(WATCH_INTERVAL);
            server.tick_watched();
        });
    }

    pub fn handle_line(self: &Arc<Self>, line: &str) {
        match parse_line(line) {
            None => {}
            Some(Incoming::Invalid { id, error }) => self.out.send_error(&id, &error),
            Some(Incoming::Request { id, method, params }) => self.handle_request(id, &method, params),
            Some(Incoming::Notification { method, params }) => self.handle_notification(&method, params.as_ref()),
            Some(Incoming::Answer { id, .. }) => {
                eprintln!("conformance-fixture: ignoring a response to {id}: this server sends no requests")
            }
        }
    }

    fn handle_request(self: &Arc<Self>, id: Value, method: &str, params: Option<Value>) {
        let checked = if method == "initialize" {
            Err(RpcError {
                code: code::METHOD_NOT_FOUND,
                message: format!("Method not found: initialize (this server speaks only MCP {PROTOCOL_VERSION})"),
                data: Some(json!({ "supported": [PROTOCOL_VERSION] })),
            })
        } else if !METHODS.contains(&method) {
            Err(RpcError::method_not_found(method))
        } else {
            params_object(params).and_then(|params| RequestMeta::parse(&params).map(|meta| (params, meta)))
        };
        let (params, meta) = match checked {
            Ok(checked) => checked,
            Err(e) => return self.out.send_error(&id, &e.to_json()),
        };
        match method {
            "tools/call" => {
                // Tools may take a while (logging, progress): the reader goes on reading.
                lock(&self.calls).in_flight.insert(id.to_string());
                let server = Arc::clone(self);
                thread::spawn(move || {
                    let answer = server.call_tool(&params, &meta);
                    server.finish(&id, answer);
                });
            }
            "subscriptions/listen" => {
                if let Err(e) = self.listen(&id, &params) {
                    self.out.send_error(&id, &e.to_json());
                }
            }
            _ => {
                let answer = self.dispatch(method, &params, &meta);
                self.finish(&id, answer);
            }
        }
    }

    fn dispatch(&self, method: &str, params: &Map<String, Value>, meta: &RequestMeta) -> Answer {
        match method {
            "server/discover" => Ok(cacheable(self.discover(), DISCOVER_TTL_MS)),
            "tools/list" => {
                let mut tools = catalog::tools(&self.dynamic);
                tools.extend(tasks_tools::tools());
                Ok(cacheable(json!({ "tools": tools }), LIST_TTL_MS))
            }
            "resources/list" => Ok(cacheable(json!({ "resources": catalog::resources() }), LIST_TTL_MS)),
            "resources/templates/list" => {
                Ok(cacheable(json!({ "resourceTemplates": catalog::resource_templates(true) }), LIST_TTL_MS))
            }
            "resources/read" => {
                let uri = required_str(params, "uri")?;
                if let Some(topic) = catalog::input_topic(uri) {
                    return self.input_resource(uri, topic, params, meta);
                }
                let result = catalog::read_resource(uri, self.watched_revision.load(Ordering::SeqCst))?;
                Ok(cacheable(result, if uri == WATCHED_URI { 0 } else { READ_TTL_MS }))
            }
            "prompts/list" => Ok(cacheable(json!({ "prompts": catalog::prompts(&self.dynamic) }), LIST_TTL_MS)),
            "prompts/get" if params.get("name").and_then(Value::as_str) == Some(INPUT_PROMPT) => {
                self.input_prompt(params, meta)
            }
            "prompts/get" => catalog::get_prompt(params, &self.dynamic),
            "completion/complete" => catalog::complete(params),
            "tasks/get" => meta.require_tasks().and_then(|()| self.tasks.get(params)),
            "tasks/update" => meta.require_tasks().and_then(|()| self.tasks.update(params)),
            "tasks/cancel" => meta.require_tasks().and_then(|()| self.tasks.cancel(params)),
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    fn handle_notification(&self, method: &str, params: Option<&Value>) {
        if method != "notifications/cancelled" {
            return; // the revision defines no other client notification
        }
        let Some(request) = params.and_then(|p| p.get("requestId")) else {
            return;
        };
        // Ends a listen (no answer: the client stopped listening), or suppresses the
        // answer of a call still running.
        lock(&self.listens).retain(|l| &l.id != request);
        let key = request.to_string();
        let mut calls = lock(&self.calls);
        if calls.in_flight.contains(&key) {
            calls.cancelled.insert(key);
        }
    }

    /// Answers a request, unless the client cancelled it: results get their
    /// `resultType` (`complete` unless set) and the server's identity.
    fn finish(&self, id: &Value, answer: Answer) {
        let key = id.to_string();
        {
            let mut calls = lock(&self.calls);
            calls.in_flight.remove(&key);
            if calls.cancelled.remove(&key) {
                return;
            }
        }
        match answer {
            Ok(mut result) => {
                if result.get("resultType").is_none() {
                    result["resultType"] = json!("complete");
                }
                if !result.get("_meta").is_some_and(Value::is_object) {
                    result["_meta"] = json!({});
                }
                result["_meta"][meta::SERVER_INFO] = server_info();
                self.out.send_result(id, result);
            }
            Err(e) => self.out.send_error(id, &e.to_json()),
        }
    }

    fn discover(&self) -> Value {
        json!({
            "supportedVersions": [PROTOCOL_VERSION],
            "capabilities": {
                "tools": { "listChanged": true },
                "resources": { "subscribe": true },
                "prompts": { "listChanged": true },
                "logging": {},
                "completions": {},
                "extensions": { (tasks::EXTENSION): {} }
            },
            "instructions": "Test fixture for the MCP conformance suite's server scenarios (stateless revision)."
        })
    }

    // ---- subscriptions/listen ----------------------------------------------------------

    /// Opens a listen: acknowledges the notification types it will get (the list
    /// changes of tools and prompts, updates of readable resources; resources
    /// never change as a list), then holds it with no answer until it is cancelled.
    fn listen(&self, id: &Value, params: &Map<String, Value>) -> Result<(), RpcError> {
        let Some(Value::Object(wanted)) = params.get("notifications") else {
            return Err(RpcError::invalid_params("subscriptions/listen needs the object 'notifications'"));
        };
        let flag = |key: &str| match wanted.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(RpcError::invalid_params(format!("notifications.{key} must be a boolean"))),
        };
        let (tools, prompts) = (flag("toolsListChanged")?, flag("promptsListChanged")?);
        flag("resourcesListChanged")?;
        let uris: Vec<String> = match wanted.get("resourceSubscriptions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(uris)) => uris
                .iter()
                .map(|u| u.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| RpcError::invalid_params("notifications.resourceSubscriptions must be strings"))?,
            Some(_) => return Err(RpcError::invalid_params("notifications.resourceSubscriptions must be an array")),
        };
        let uris: Vec<String> = uris.into_iter().filter(|u| catalog::is_resource(u)).collect();
        let mut honoured = Map::new();
        if tools {
            honoured.insert("toolsListChanged".into(), json!(true));
        }
        if prompts {
            honoured.insert("promptsListChanged".into(), json!(true));
        }
        if !uris.is_empty() {
            honoured.insert("resourceSubscriptions".into(), json!(uris));
        }
        // The acknowledgement goes out under the lock, so no notification of this
        // listen can overtake it.
        let mut listens = lock(&self.listens);
        self.out.notify(
            "notifications/subscriptions/acknowledged",
            json!({ "_meta": { meta::SUBSCRIPTION_ID: id }, "notifications": honoured }),
        );
        listens.push(Listen { id: id.clone(), tools, prompts, uris });
        Ok(())
    }

    /// Sends `method` to every listen `wants`, tagged with its subscription id.
    fn notify_listens(&self, method: &str, params: &Value, wants: impl Fn(&Listen) -> bool) {
        for listen in lock(&self.listens).iter().filter(|l| wants(l)) {
            let mut params = params.clone();
            params["_meta"] = json!({ meta::SUBSCRIPTION_ID: listen.id });
            self.out.notify(method, params);
        }
    }

    /// Changes the watched resource if a listen watches it, and tells those listens.
    fn tick_watched(&self) {
        let watched = |l: &Listen| l.uris.iter().any(|u| u == WATCHED_URI);
        if !lock(&self.listens).iter().any(watched) {
            return;
        }
        self.watched_revision.fetch_add(1, Ordering::SeqCst);
        self.notify_listens("notifications/resources/updated", &json!({ "uri": WATCHED_URI }), watched);
    }

    // ---- tools -------------------------------------------------------------------------

    fn call_tool(&self, params: &Map<String, Value>, meta: &RequestMeta) -> Answer {
        let name = required_str(params, "name")?;
        let args = tool_arguments(params)?;
        if let Some(listing) = tasks_tools::tools().into_iter().find(|tool| tool["name"] == name) {
            let support = listing["execution"]["taskSupport"].as_str().map(str::to_string);
            return self.call_task_tool(name, args, support.as_deref(), params, meta);
        }
        if let Some(result) = catalog::plain_tool(name, &args, &self.dynamic) {
            return Ok(result);
        }
        let round =
            Round::new(&self.states, params, json!({ "method": "tools/call", "name": name, "arguments": args }));
        let result = match name {
            "test_tool_with_logging" | "test_logging_tool" => {
                catalog::logging_tool(&self.out, |level| meta.log_level.is_some_and(|wanted| level >= wanted))
            }
            "test_tool_with_progress" => catalog::progress_tool(&self.out, meta.progress_token.as_ref()),
            "test_trigger_tool_change" => {
                self.dynamic.toggle_tool();
                self.notify_listens("notifications/tools/list_changed", &json!({}), |l| l.tools);
                text_result("The tool list changed.")
            }
            "test_trigger_prompt_change" => {
                self.dynamic.toggle_prompt();
                self.notify_listens("notifications/prompts/list_changed", &json!({}), |l| l.prompts);
                text_result("The prompt list changed.")
            }
            _ => return input_tool(name, &args, &round?, meta).or_else(Halt::into_answer),
        };
        Ok(result)
    }

    /// A tool of the tasks scenarios; `support` is its `execution.taskSupport`
    /// (`None`: never a task). With the extension declared a task-supporting tool
    /// becomes a task; without it an optional one runs here and a required one is
    /// -32021. `test_tool_with_task` asks the user's name first, `input_required`.
    fn call_task_tool(
        &self,
        name: &str,
        args: Map<String, Value>,
        support: Option<&str>,
        params: &Map<String, Value>,
        meta: &RequestMeta,
    ) -> Answer {
        let native = meta.declares_tasks() && support.is_some();
        if support == Some("required") {
            meta.require_tasks()?;
        }
        let round =
            Round::new(&self.states, params, json!({ "method": "tools/call", "name": name, "arguments": args }))?;
        let mut prefilled = Map::new();
        if name == "test_tool_with_task" {
            let asked = catalog::ask_string("What is your name?", "name");
            match round.elicit(meta, USER_NAME_KEY, asked) {
                Ok(answer) => {
                    prefilled.insert(USER_NAME_KEY.to_string(), answer.clone());
                }
                Err(halt) => return halt.into_answer(),
            }
        }
        if native {
            return Ok(self.tasks.create(name, args, prefilled, meta.declares("elicitation")));
        }
        sync_task_tool(name, &args, &round, meta)
    }

    /// [`INPUT_PROMPT`]: asks the user for context, then builds the prompt with it.
    fn input_prompt(&self, params: &Map<String, Value>, meta: &RequestMeta) -> Answer {
        let subject = json!({ "method": "prompts/get", "name": INPUT_PROMPT, "arguments": params.get("arguments") });
        let round = Round::new(&self.states, params, subject)?;
        let asked = catalog::ask_string("What context should the prompt use?", "context");
        let step = round
            .elicit(meta, "user_context", asked)
            .map(|answer| catalog::input_prompt_result(answer["content"]["context"].as_str().unwrap_or("none")));
        step.or_else(Halt::into_answer)
    }

    /// A read of [`catalog::INPUT_TEMPLATE`]: asks the user for a note on the topic.
    fn input_resource(&self, uri: &str, topic: &str, params: &Map<String, Value>, meta: &RequestMeta) -> Answer {
        let round = Round::new(&self.states, params, json!({ "method": "resources/read", "uri": uri }))?;
        let asked = catalog::ask_string(&format!("What should the resource say about {topic}?"), "note");
        let step = round.elicit(meta, "topic_note", asked).map(|answer| {
            let note = answer["content"]["note"].as_str().unwrap_or("(nothing)");
            json!({ "contents": [{ "uri": uri, "mimeType": "text/plain", "text": format!("{topic}: {note}") }] })
        });
        // A read that needed input is about this one request: not for caches.
        step.map(|result| cacheable(result, 0)).or_else(Halt::into_answer)
    }
}

/// A tool of the tasks scenarios run synchronously (no task): its questions are
/// answered from the request's `inputResponses`; those still unanswered make an
/// `input_required` result (keyed by [`input_key`], so the retry brings answers
/// under the same keys; no state needed).
fn sync_task_tool(name: &str, args: &Map<String, Value>, round: &Round<'_>, meta: &RequestMeta) -> Answer {
    let missing = Mutex::new(Map::new());
    let invalid = Mutex::new(None);
    let elicit = |request: Option<&str>, asked: Value| {
        let key = input_key(request, &asked);
        match round.response(&key, check_elicit) {
            Ok(Some(answer)) => Ok(answer.clone()),
            Ok(None) => {
                lock(&missing).insert(key, json!({ "method": "elicitation/create", "params": asked }));
                Err("not answered yet".to_string())
            }
            Err(e) => {
                let why = e.message.clone();
                *lock(&invalid) = Some(e);
                Err(why)
            }
        }
    };
    let answer = tasks_tools::call(name, args, &Cancel::default(), &elicit)
        .unwrap_or_else(|| Err(RpcError::invalid_params(format!("Unknown tool: {name}"))));
    if let Some(e) = lock(&invalid).take() {
        return Err(e);
    }
    let missing = std::mem::take(&mut *lock(&missing));
    if missing.is_empty() {
        return answer;
    }
    meta.require(&["elicitation"])?;
    Ok(round.input_required(missing, Value::Null))
}

/// The tools that need the client, on the stateless side: each returns its result,
/// or halts with the `input_required` result that asks for what it lacks.
fn input_tool(name: &str, args: &Map<String, Value>, round: &Round<'_>, meta: &RequestMeta) -> Step<Value> {
    let hello =
        |answer: &Value| text_result(&format!("Hello, {}!", answer["content"]["name"].as_str().unwrap_or("stranger")));
    let capital = || catalog::ask_llm("What is the capital of France?", 100);
    let result = match name {
        "test_input_required_result_elicitation" | "test_streaming_elicitation" => {
            hello(round.elicit(meta, "user_name", catalog::ask_string("What is your name?", "name"))?)
        }
        "test_input_required_result_sampling" => {
            let answer = round.ask(meta, "capital_question", "sampling/createMessage", capital())?;
            text_result(&catalog::sampled_text(answer))
        }
        "test_missing_capability" => {
            let answer = round.ask(meta, "capital_question", "sampling/createMessage", capital())?;
            text_result(&format!("LLM response: {}", catalog::sampled_text(answer)))
        }
        "test_input_required_result_list_roots" => {
            let answer = round.ask(meta, "client_roots", "roots/list", json!({}))?;
            text_result(&format!("Roots: {}", answer["roots"]))
        }
        "test_input_required_result_request_state" | "test_input_required_result_tampered_state" => {
            // The confirmation counts only with the state minted when it was asked.
            let schema = json!({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]});
            let asked = json!({"message": "Please confirm", "requestedSchema": schema});
            meta.require(&["elicitation"])?;
            let ask =
                || Halt::Ask(round.input_required(ask_map("confirm", "elicitation/create", asked.clone()), json!({})));
            match round.response("confirm", check_elicit)? {
                Some(answer) if round.data.is_some() => {
                    text_result(&format!("state-ok: confirmed={}", answer["content"]["ok"]))
                }
                _ => return Err(ask()),
            }
        }
        "test_input_required_result_multi_round" => multi_round(round, meta)?,
        "test_input_required_result_multiple_inputs" => multiple_inputs(round, meta)?,
        "test_input_required_result_capabilities" => declared_inputs(round, meta)?,
        "test_sampling" => {
            let Some(prompt) = args.get("prompt").and_then(Value::as_str) else {
                return Ok(tool_error("missing required string argument 'prompt'"));
            };
            let answer = round.ask(meta, "llm_answer", "sampling/createMessage", catalog::ask_llm(prompt, 100))?;
            text_result(&format!("LLM response: {}", catalog::sampled_text(answer)))
        }
        "test_elicitation" => {
            let Some(message) = args.get("message").and_then(Value::as_str) else {
                return Ok(tool_error("missing required string argument 'message'"));
            };
            let asked = json!({ "message": message, "requestedSchema": catalog::elicitation_tool_schema() });
            elicited("User response", round.elicit(meta, "user_response", asked)?)
        }
        "test_elicitation_sep1034_defaults" => {
            let message = "Please review and update the form fields with defaults";
            let asked = json!({ "message": message, "requestedSchema": catalog::sep1034_schema() });
            elicited("Elicitation completed", round.elicit(meta, "user_response", asked)?)
        }
        "test_elicitation_sep1330_enums" => {
            let message = "Please select options from the enum fields";
            let asked = json!({ "message": message, "requestedSchema": catalog::sep1330_schema() });
            elicited("Elicitation completed", round.elicit(meta, "user_response", asked)?)
        }
        _ => return Err(Halt::Fail(RpcError::invalid_params(format!("Unknown tool: {name}")))),
    };
    Ok(result)
}

/// `test_input_required_result_multi_round`: the name (`step1`), then the color
/// (`step2`); the state says which round it is and carries the name.
fn multi_round(round: &Round<'_>, meta: &RequestMeta) -> Step<Value> {
    meta.require(&["elicitation"])?;
    let step1 = || ask_map("step1", "elicitation/create", catalog::ask_string("Step 1: What is your name?", "name"));
    let step2 =
        || ask_map("step2", "elicitation/create", catalog::ask_string("Step 2: What is your favorite color?", "color"));
    let data = round.data.clone().unwrap_or_default();
    match data.get("name").and_then(Value::as_str) {
        None if round.data.is_none() => Err(Halt::Ask(round.input_required(step1(), json!({ "round": 1 })))),
        None => match round.response("step1", check_elicit)? {
            Some(answer) => {
                let name = answer["content"]["name"].as_str().unwrap_or("?");
                Err(Halt::Ask(round.input_required(step2(), json!({ "round": 2, "name": name }))))
            }
            None => Err(Halt::Ask(round.input_required(step1(), json!({ "round": 1 })))),
        },
        Some(name) => match round.response("step2", check_elicit)? {
            Some(answer) => {
                Ok(text_result(&format!("{name} likes {}", answer["content"]["color"].as_str().unwrap_or("?"))))
            }
            None => Err(Halt::Ask(round.input_required(step2(), data.clone()))),
        },
    }
}

/// `test_input_required_result_multiple_inputs`: a name, a greeting and the roots,
/// asked at once; responses that came in an earlier round ride in the state, and
/// only what is still missing is asked again.
fn multiple_inputs(round: &Round<'_>, meta: &RequestMeta) -> Step<Value> {
    meta.require(&["elicitation", "sampling", "roots"])?;
    let asks: [(&str, &str, Value, Check); 3] = [
        ("user_name", "elicitation/create", catalog::ask_string("What is your name?", "name"), check_elicit),
        ("greeting", "sampling/createMessage", catalog::ask_llm("Generate a greeting", 50), check_sampling),
        ("client_roots", "roots/list", json!({}), check_roots),
    ];
    let mut got = match round.data.as_ref().and_then(|d| d.get("got")) {
        Some(Value::Object(got)) => got.clone(),
        _ => Map::new(),
    };
    let mut missing = Map::new();
    for (key, method, params, check) in asks {
        if got.contains_key(key) {
            continue;
        }
        match round.response(key, check)? {
            Some(answer) => {
                got.insert(key.to_string(), answer.clone());
            }
            None => {
                missing.insert(key.to_string(), json!({ "method": method, "params": params }));
            }
        }
    }
    if !missing.is_empty() {
        return Err(Halt::Ask(round.input_required(missing, json!({ "got": got }))));
    }
    let name = got["user_name"]["content"]["name"].as_str().unwrap_or("stranger");
    Ok(text_result(&format!(
        "{name}: {} (roots: {})",
        catalog::sampled_text(&got["greeting"]),
        got["client_roots"]["roots"]
    )))
}

/// `test_input_required_result_capabilities`: asks only what the request declares
/// it can answer (sampling, elicitation); -32021 when it declares neither.
fn declared_inputs(round: &Round<'_>, meta: &RequestMeta) -> Step<Value> {
    let mut wanted: Vec<(&str, &str, Value, Check)> = Vec::new();
    if meta.declares("sampling") {
        let question = catalog::ask_llm("What is the capital of France?", 100);
        wanted.push(("capital_question", "sampling/createMessage", question, check_sampling));
    }
    if meta.declares("elicitation") {
        let asked = catalog::ask_string("What is your name?", "name");
        wanted.push(("user_name", "elicitation/create", asked, check_elicit));
    }
    if wanted.is_empty() {
        let mut error = meta.require(&["sampling"]).expect_err("sampling is not declared");
        error.message = "This tool needs sampling or elicitation; the request declares neither".into();
        return Err(Halt::Fail(error));
    }
    let mut answers = Vec::new();
    let mut missing = Map::new();
    for (key, method, params, check) in wanted {
        match round.response(key, check)? {
            Some(answer) if method == "sampling/createMessage" => {
                answers.push(format!("sampling: {}", catalog::sampled_text(answer)))
            }
            Some(answer) => answers.push(format!("elicitation: {}", answer["content"]["name"])),
            None => {
                missing.insert(key.to_string(), json!({ "method": method, "params": params }));
            }
        }
    }
    if !missing.is_empty() {
        return Err(Halt::Ask(round.input_required(missing, Value::Null)));
    }
    Ok(text_result(&answers.join("; ")))
}

/// The text result of an elicitation tool: the user's action and content.
fn elicited(label: &str, answer: &Value) -> Value {
    let action = answer.get("action").and_then(Value::as_str).unwrap_or("(none)");
    let content = answer.get("content").cloned().unwrap_or_else(|| json!({}));
    text_result(&format!("{label}: action={action}, content={content}"))
}

// ---- one round of an input_required exchange -------------------------------------------------

/// Why a handler stopped before its result: it needs input (the `input_required`
/// result to answer with), or it failed.
enum Halt {
    Ask(Value),
    Fail(RpcError),
}

impl From<RpcError> for Halt {
    fn from(error: RpcError) -> Self {
        Halt::Fail(error)
    }
}

impl Halt {
    fn into_answer(self) -> Answer {
        match self {
            Halt::Ask(result) => Ok(result),
            Halt::Fail(error) => Err(error),
        }
    }
}

type Step<T> = Result<T, Halt>;

/// Checks one input response; the error says what is wrong with it.
type Check = fn(&Value) -> Result<(), &'static str>;

/// An `ElicitResult`: `action` accept, decline or cancel; `content` an object if any.
pub(crate) fn check_elicit(answer: &Value) -> Result<(), &'static str> {
    let action = answer.get("action").and_then(Value::as_str);
    if !matches!(action, Some("accept" | "decline" | "cancel")) {
        return Err("an elicitation result needs 'action': accept, decline or cancel");
    }
    match answer.get("content") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err("an elicitation result's 'content' must be an object"),
    }
}

/// A `CreateMessageResult`: `role` and `content` (one block or an array).
fn check_sampling(answer: &Value) -> Result<(), &'static str> {
    match (answer.get("role").and_then(Value::as_str), answer.get("content")) {
        (Some(_), Some(Value::Object(_) | Value::Array(_))) => Ok(()),
        _ => Err("a sampling result needs 'role' and 'content'"),
    }
}

/// A `ListRootsResult`: `roots`, an array.
fn check_roots(answer: &Value) -> Result<(), &'static str> {
    match answer.get("roots") {
        Some(Value::Array(_)) => Ok(()),
        _ => Err("a roots result needs the array 'roots'"),
    }
}

/// `{key: {method, params}}`, one input request.
fn ask_map(key: &str, method: &str, params: Value) -> Map<String, Value> {
    let mut requests = Map::new();
    requests.insert(key.to_string(), json!({ "method": method, "params": params }));
    requests
}

/// A request that may be a retry: its `inputResponses` and the `data` of its
/// `requestState` (checked), and what a new state would be bound to.
struct Round<'a> {
    states: &'a Minter,
    subject: Value,
    responses: Map<String, Value>,
    data: Option<Value>,
}

impl<'a> Round<'a> {
    /// -32602 for `inputResponses` that are not an object, or a `requestState` that
    /// is not a string this server minted for this very request.
    fn new(states: &'a Minter, params: &Map<String, Value>, subject: Value) -> Result<Self, RpcError> {
        let responses = match params.get("inputResponses") {
            None => Map::new(),
            Some(Value::Object(responses)) => responses.clone(),
            Some(_) => return Err(RpcError::invalid_params("inputResponses must be an object")),
        };
        let data = match params.get("requestState") {
            None => None,
            Some(Value::String(state)) => Some(states.open(state, &subject)?),
            Some(_) => return Err(RpcError::invalid_params("requestState must be a string")),
        };
        Ok(Round { states, subject, responses, data })
    }

    /// The response under `key`, if the client sent one; -32602 if it is not
    /// what `check` wants.
    fn response(&self, key: &str, check: Check) -> Result<Option<&Value>, RpcError> {
        match self.responses.get(key) {
            None => Ok(None),
            Some(answer) => match check(answer) {
                Ok(()) => Ok(Some(answer)),
                Err(why) => Err(RpcError::invalid_params(format!("inputResponses.{key}: {why}"))),
            },
        }
    }

    /// The answer to one input request, asked (under `key`, with no state) when the
    /// client has not sent it; -32021 unless the request declares the capability.
    fn ask(&self, meta: &RequestMeta, key: &str, method: &str, params: Value) -> Step<&Value> {
        let (capability, check): (&str, Check) = match method {
            "sampling/createMessage" => ("sampling", check_sampling),
            "roots/list" => ("roots", check_roots),
            _ => ("elicitation", check_elicit),
        };
        meta.require(&[capability])?;
        match self.response(key, check)? {
            Some(answer) => Ok(answer),
            None => Err(Halt::Ask(self.input_required(ask_map(key, method, params), Value::Null))),
        }
    }

    fn elicit(&self, meta: &RequestMeta, key: &str, params: Value) -> Step<&Value> {
        self.ask(meta, key, "elicitation/create", params)
    }

    /// An `input_required` result asking `requests`, with a state carrying `data`
    /// (none when `data` is null: the retry needs nothing remembered).
    fn input_required(&self, requests: Map<String, Value>, data: Value) -> Value {
        let mut result = json!({ "resultType": "input_required", "inputRequests": requests });
        if !data.is_null() {
            result["requestState"] = json!(self.states.mint(&self.subject, data));
        }
        result
    }
}

/// Adds the caching hints of the revision: `ttlMs`, and `cacheScope` public (no
/// result of this server depends on who asks).
fn cacheable(mut result: Value, ttl_ms: u64) -> Value {
    result["ttlMs"] = json!(ttl_ms);
    result["cacheScope"] = json!("public");
    result
}

fn server_info() -> Value {
    json!({ "name": "tether-conformance-fixture", "title": "tether conformance fixture", "version": env!("CARGO_PKG_VERSION") })
}
