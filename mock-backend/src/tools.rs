//! What the mock offers: the built-in tools and how they run, the resources, the
//! prompt and the completions.

use std::process;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::protocol::*;
use crate::server::Mock;
use crate::{CRASH_EXIT_CODE, STATELESS_PROTOCOL_VERSION};

/// The built-in tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Builtin {
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
    pub(crate) fn available(stateless: bool) -> Vec<Builtin> {
        let extra = if stateless { &Builtin::STATELESS_ONLY[..] } else { &[] };
        Builtin::ALL.iter().chain(extra).copied().collect()
    }

    pub(crate) fn name(self) -> &'static str {
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

    pub(crate) fn from_name(name: &str) -> Option<Builtin> {
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
pub(crate) enum Tool {
    Builtin(Builtin),
    /// `t<N>` from `--extra-tools`.
    Extra(usize),
    /// The tool `add_tool` adds.
    Added,
}

/// What a tool sees of the `tools/call` that runs it.
pub(crate) struct ToolCall<'a> {
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
pub(crate) struct RequestMeta {
    capabilities: Map<String, Value>,
    /// The index in [`LOG_LEVELS`] of the least severe level the client wants
    /// logged, when it wants logs at all.
    log_threshold: Option<usize>,
}

impl RequestMeta {
    /// Reads `params._meta`: -32602 when the protocol version or the client
    /// capabilities are missing or ill-typed (or the log level is unknown), -32022
    /// when the version is not [`STATELESS_PROTOCOL_VERSION`].
    pub(crate) fn parse(params: &Value) -> Result<Self, RpcError> {
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
pub(crate) fn complete_result(mut result: Value) -> Value {
    result["resultType"] = json!("complete");
    result
}

/// Adds a stateless list (or read) result's caching hints: stale at once, and
/// for this client only.
pub(crate) fn cacheable(mut result: Value) -> Value {
    result["ttlMs"] = json!(0);
    result["cacheScope"] = json!("private");
    result
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A tool result with one text item.
pub(crate) fn text_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}]})
}

/// The call a `requestState` was minted for: a tool and its arguments.
pub(crate) type MintedFor = (String, Map<String, Value>);

impl Mock {
    /// The tools offered now, in `tools/list` order.
    fn tools(&self) -> Vec<Tool> {
        let builtins = self.offered.iter().map(|&tool| Tool::Builtin(tool));
        let extras = (0..self.options.extra_tools).map(Tool::Extra);
        let added = self.tool_added.load(Ordering::SeqCst).then_some(Tool::Added);
        builtins.chain(extras).chain(added).collect()
    }

    /// A `tools/list` result: one page of `--tools-page-size` tools from the
    /// request's `cursor` (an offset), with the next cursor; all without a size.
    pub(crate) fn tool_page(&self, params: &Value) -> Value {
        let no_arguments = json!({"type": "object", "properties": {}});
        let define = |name: String, description: String| json!({"name": name, "description": description, "inputSchema": no_arguments});
        let pad = self.options.extra_tool_bytes;
        let tools = self.tools();
        let from = params
            .get("cursor")
            .and_then(Value::as_str)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0usize)
            .min(tools.len());
        let to = match self.options.tools_page_size {
            0 => tools.len(),
            size => (from + size).min(tools.len()),
        };
        let page: Vec<Value> = tools[from..to]
            .iter()
            .map(|tool| match *tool {
                Tool::Builtin(builtin) => builtin.definition(),
                Tool::Extra(n) => {
                    let mut description = format!("Trivial tool number {n}; returns its name.");
                    if description.len() < pad {
                        description.extend(std::iter::repeat('.').take(pad - description.len()));
                    }
                    define(format!("t{n}"), description)
                }
                Tool::Added => define(ADDED_TOOL.to_string(), "The tool add_tool added.".to_string()),
            })
            .collect();
        match to < tools.len() {
            true => json!({"tools": page, "nextCursor": to.to_string()}),
            false => json!({"tools": page}),
        }
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

    pub(crate) fn call_tool(
        &self,
        session: &Session,
        params: &Value,
        call: &Arc<Call>,
        outlet: &dyn Outlet,
        meta: Option<&RequestMeta>,
    ) -> Result<Value, Stop> {
        if self.options.junk_on_call > 0 {
            match self.options.http {
                None => crate::hostile::junk_line(self.options.junk_on_call),
                Some(_) => outlet.junk_event(self.options.junk_on_call),
            }
            return Err(call.await_cancel());
        }
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
        let mut result = match tool {
            Tool::Builtin(builtin) => self.run_builtin(builtin, &tool_call),
            Tool::Extra(n) => Ok(text_result(format!("t{n}"))),
            Tool::Added => Ok(text_result("hello from the added tool")),
        };
        if let (Ok(Value::Object(result)), pad @ 1..) = (&mut result, self.options.pad_results) {
            result.insert("_meta".into(), json!({ "pad": "p".repeat(pad) }));
        }
        result
    }

    fn run_builtin(&self, tool: Builtin, t: &ToolCall<'_>) -> Result<Value, Stop> {
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
    fn progress(&self, t: &ToolCall<'_>) -> Result<Value, Stop> {
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
    fn sample(&self, t: &ToolCall<'_>) -> Result<Value, Stop> {
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
    fn sample_stateless(&self, t: &ToolCall<'_>, meta: &RequestMeta) -> Result<Value, Stop> {
        let prompt = t.str_arg("prompt")?;
        let request = json!({"method": "sampling/createMessage", "params": sampling_params(prompt)});
        let answer = self.input_response(t, meta, "sample", "sampling", request)?;
        sampled_text(&answer)
            .map(text_result)
            .ok_or_else(|| Stop::ToolError(format!("the sampling answer has no text content: {answer}")))
    }

    /// `elicit` (stateless mode only): asks for a name with a form-mode
    /// `elicitation/create`, and greets it (or says it was declined or cancelled).
    fn elicit(&self, t: &ToolCall<'_>, meta: &RequestMeta) -> Result<Value, Stop> {
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
        t: &ToolCall<'_>,
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
    fn mint_state(&self, t: &ToolCall<'_>) -> String {
        let serial = self.next_state.fetch_add(1, Ordering::SeqCst);
        let state = hex(json!({"n": serial, "tool": t.name, "arguments": t.arguments}).to_string().as_bytes());
        lock(&self.minted_states).insert(state.clone(), (t.name.to_string(), t.arguments.clone()));
        state
    }

    /// Whether `state` was minted for a call of this tool with these arguments.
    fn check_state(&self, state: &str, t: &ToolCall<'_>) -> Result<(), RpcError> {
        match lock(&self.minted_states).get(state) {
            Some((tool, arguments)) if tool == t.name && arguments == t.arguments => Ok(()),
            Some(_) => Err(RpcError::invalid_params("`requestState` was minted for another call")),
            None => Err(RpcError::invalid_params("`requestState` is not one this server minted")),
        }
    }

    /// `resources/read`; an unknown URI gets the error `not_found` makes.
    pub(crate) fn read_resource(&self, params: &Value, not_found: fn(&str) -> RpcError) -> Result<Value, Stop> {
        let uri = str_param(params, "uri")?;
        let text = self.resource_text(uri).ok_or_else(|| not_found(uri))?;
        Ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}))
    }

    /// The text of a readable resource.
    pub(crate) fn resource_text(&self, uri: &str) -> Option<String> {
        if uri == INFO_URI {
            return Some(format!("This is the mock MCP server `{}`.", self.options.name));
        }
        let id = uri.strip_prefix(ITEM_PREFIX).filter(|id| !id.is_empty())?;
        Some(format!("item {id}"))
    }
}

/// The `resources/list` result: the one resource, `mock://info`.
pub(crate) fn resource_list() -> Value {
    json!({"resources": [{
        "uri": INFO_URI,
        "name": "info",
        "description": "What this mock is.",
        "mimeType": "text/plain",
    }]})
}

/// The `resources/templates/list` result: the one template, `mock://item/{id}`.
pub(crate) fn resource_template_list() -> Value {
    json!({"resourceTemplates": [{
        "uriTemplate": format!("{ITEM_PREFIX}{{id}}"),
        "name": "item",
        "description": "An item by id; reads as `item <id>`.",
        "mimeType": "text/plain",
    }]})
}

/// The `prompts/list` result: the one prompt, `greet`.
pub(crate) fn prompt_list() -> Value {
    json!({"prompts": [{
        "name": "greet",
        "description": "Greets someone by name.",
        "arguments": [{"name": "name", "description": "Who to greet.", "required": true}],
    }]})
}

/// A required string parameter of a request.
pub(crate) fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("missing string parameter `{name}`")))
}

/// The params of the `sampling/createMessage` the `sample` tool asks for.
pub(crate) fn sampling_params(prompt: &str) -> Value {
    json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": 256,
    })
}

/// The first text of a `sampling/createMessage` result, whose `content` is one
/// content item or (since 2025-11-25) a list of them.
pub(crate) fn sampled_text(result: &Value) -> Option<String> {
    let content = result.get("content")?;
    let items = match content {
        Value::Array(items) => items.as_slice(),
        item => std::slice::from_ref(item),
    };
    items.iter().find_map(|item| item.get("text").and_then(Value::as_str)).map(String::from)
}

/// `prompts/get` for the one prompt, `greet`.
pub(crate) fn get_prompt(params: &Value) -> Result<Value, Stop> {
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
pub(crate) fn complete(params: &Value) -> Result<Value, Stop> {
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
