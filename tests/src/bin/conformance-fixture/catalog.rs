//! What the fixture offers, the same in both modes: the tools, resources and prompts
//! the suite's scenarios call, and the handlers that need no conversation with the
//! client (the ones that do live in each mode, because the two eras ask differently).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::wire::{required_str, text_result, tool_error, Answer, Out, RpcError};

/// A 2x2 RGB PNG (red, green, blue, white), base64.
pub const IMAGE_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR42mP4z8DAAMIM/4EAAB/uBfvxq7p3AAAAAElFTkSuQmCC";

/// Eight samples of 16-bit mono PCM at 8 kHz as a WAV file, base64.
const AUDIO_WAV_BASE64: &str = "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAOgD0AfoAwAAGPww+Bj8";

/// The resource whose content changes while it is subscribed.
pub const WATCHED_URI: &str = "test://watched-resource";

/// How often the watched resource changes while subscribed.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(3);

/// The pause between the steps of the logging and progress tools.
const STEP_DELAY: Duration = Duration::from_millis(50);

/// The `logger` of every log message this fixture sends.
const LOGGER: &str = "conformance-fixture";

/// The prompt that asks the client for input while it is built.
pub const INPUT_PROMPT: &str = "test_input_required_result_prompt";

/// The tool that `test_trigger_tool_change` adds and removes.
const DYNAMIC_TOOL: &str = "test_dynamic_tool";

/// The prompt that `test_trigger_prompt_change` adds and removes.
const DYNAMIC_PROMPT: &str = "test_dynamic_prompt";

/// The resource template whose reads ask the client for input (stateless mode only:
/// the suite has no scenario for it, it is there so a `resources/read` answered
/// `input_required` goes through tether too).
pub const INPUT_TEMPLATE: &str = "test://input-required/{topic}";

/// The severity of a log message, in the order of RFC 5424 (lowest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
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

    pub fn parse(name: &str) -> Option<Level> {
        Level::ALL.iter().find(|(_, n)| *n == name).map(|(level, _)| *level)
    }

    fn name(self) -> &'static str {
        Level::ALL.iter().find(|(level, _)| *level == self).map_or("info", |(_, n)| n)
    }
}

/// The parts of the catalog the trigger tools change (the suite's list_changed
/// checks): each trigger adds its entry, or removes it when it is there.
#[derive(Default)]
pub struct Dynamic {
    tool: AtomicBool,
    prompt: AtomicBool,
}

impl Dynamic {
    /// Adds or removes `test_dynamic_tool`.
    pub fn toggle_tool(&self) {
        self.tool.fetch_xor(true, Ordering::SeqCst);
    }

    /// Adds or removes `test_dynamic_prompt`.
    pub fn toggle_prompt(&self) {
        self.prompt.fetch_xor(true, Ordering::SeqCst);
    }

    fn has_tool(&self) -> bool {
        self.tool.load(Ordering::SeqCst)
    }

    fn has_prompt(&self) -> bool {
        self.prompt.load(Ordering::SeqCst)
    }
}

// ---- tools -------------------------------------------------------------------------

/// An object input schema with `properties` and `required`.
pub fn object_schema(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

/// Every tool, in a fixed order (the suite's header checks call the first one with
/// no arguments: it must be `test_simple_text`).
pub fn tools(dynamic: &Dynamic) -> Vec<Value> {
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
    // The 2026-07-28 scenarios' tools, added after the 2025-11-25 ones.
    let later = [
        ("test_input_required_result_multiple_inputs", "Asks for a name, a greeting and the client's roots at once"),
        (
            "test_input_required_result_capabilities",
            "Asks the client for what it declared it can answer: sampling, elicitation or both",
        ),
        ("test_missing_capability", "Asks the LLM a question; needs the client's sampling capability"),
        ("test_streaming_elicitation", "Asks the user a question (elicitation)"),
        ("test_logging_tool", "Sends three info log messages (at the request's log level), then returns"),
        ("test_trigger_tool_change", "Adds or removes the tool test_dynamic_tool (tools list changed)"),
        ("test_trigger_prompt_change", "Adds or removes the prompt test_dynamic_prompt (prompts list changed)"),
    ];
    tools.extend(
        later
            .iter()
            .map(|(name, description)| json!({ "name": name, "description": description, "inputSchema": no_args() })),
    );
    tools.push(json!({
        "name": "test_custom_headers",
        "description": "Echoes its region; the region is mirrored into the Mcp-Param-Region HTTP header (SEP-2243)",
        "inputSchema": object_schema(
            json!({ "region": { "type": "string", "description": "A region name", "x-mcp-header": "Region" } }),
            &["region"],
        )
    }));
    if dynamic.has_tool() {
        tools.push(json!({
            "name": DYNAMIC_TOOL,
            "description": "Added by test_trigger_tool_change",
            "inputSchema": no_args()
        }));
    }
    tools
}

/// The result of a tool that needs nothing from the client and no output before
/// its result; `None` for the other tools (and unknown ones).
pub fn plain_tool(name: &str, args: &Map<String, Value>, dynamic: &Dynamic) -> Option<Value> {
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
        "test_error_handling" => tool_error("This tool intentionally returns an error for testing"),
        "test_reconnection" => text_result("Reconnection test completed successfully."),
        "json_schema_2020_12_tool" => {
            text_result(&format!("JSON Schema 2020-12 tool called with: {}", Value::Object(args.clone())))
        }
        "test_custom_headers" => match args.get("region").and_then(Value::as_str) {
            Some(region) => text_result(&format!("region: {region}")),
            None => tool_error("missing required string argument 'region'"),
        },
        DYNAMIC_TOOL if dynamic.has_tool() => text_result("The dynamic tool ran."),
        _ => return None,
    };
    Some(result)
}

/// `test_tool_with_logging` and `test_logging_tool`: three `info` messages 50 ms
/// apart, each sent if `wanted` lets `info` through.
pub fn logging_tool(out: &Out, wanted: impl Fn(Level) -> bool) -> Value {
    let log = |data: &str| {
        if wanted(Level::Info) {
            out.notify("notifications/message", json!({ "level": Level::Info.name(), "logger": LOGGER, "data": data }));
        }
    };
    log("Tool execution started");
    thread::sleep(STEP_DELAY);
    log("Tool processing data");
    thread::sleep(STEP_DELAY);
    log("Tool execution completed");
    text_result("Tool with logging executed successfully")
}

/// `test_tool_with_progress`: progress 0, 50, 100 of 100 on `token` (none without one).
pub fn progress_tool(out: &Out, token: Option<&Value>) -> Value {
    for (step, progress) in [0, 50, 100].into_iter().enumerate() {
        if step > 0 {
            thread::sleep(STEP_DELAY);
        }
        if let Some(token) = token {
            out.notify(
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

/// The form of `test_elicitation`.
pub fn elicitation_tool_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "username": { "type": "string", "description": "User's response" },
            "email": { "type": "string", "description": "User's email address" }
        },
        "required": ["username", "email"]
    })
}

/// The form of `test_elicitation_sep1034_defaults`: every primitive type with a default.
pub fn sep1034_schema() -> Value {
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
pub fn sep1330_schema() -> Value {
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

/// An `elicitation/create` request's params: `message` and a form of one required
/// string `field`.
pub fn ask_string(message: &str, field: &str) -> Value {
    let schema = json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]});
    json!({"message": message, "requestedSchema": schema})
}

/// A `sampling/createMessage` request's params for one user question.
pub fn ask_llm(question: &str, max_tokens: u32) -> Value {
    json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}],
        "maxTokens": max_tokens
    })
}

/// The text of a `sampling/createMessage` result (one content item or an array).
pub fn sampled_text(result: &Value) -> String {
    match result.get("content") {
        Some(Value::Array(items)) => {
            items.iter().filter_map(|item| item.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" ")
        }
        Some(item) => item.get("text").and_then(Value::as_str).unwrap_or("(no text)").to_string(),
        None => "(no content)".to_string(),
    }
}

// ---- resources ---------------------------------------------------------------------

/// The direct resources.
pub fn resources() -> Vec<Value> {
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

/// The resource templates (`stateless`: with [`INPUT_TEMPLATE`] last).
pub fn resource_templates(stateless: bool) -> Vec<Value> {
    let mut templates = vec![json!({
        "uriTemplate": "test://template/{id}/data",
        "name": "template",
        "title": "Resource Template",
        "description": "A resource template with parameter substitution",
        "mimeType": "application/json"
    })];
    if stateless {
        templates.push(json!({
            "uriTemplate": INPUT_TEMPLATE,
            "name": "input-required",
            "title": "Resource That Asks",
            "description": "Reading it asks the user what to say about the topic (elicitation)",
            "mimeType": "text/plain"
        }));
    }
    templates
}

/// The `{id}` of a URI of the template `test://template/{id}/data`.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri.strip_prefix("test://template/")?.strip_suffix("/data")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// The `{topic}` of a URI of [`INPUT_TEMPLATE`].
pub fn input_topic(uri: &str) -> Option<&str> {
    let topic = uri.strip_prefix("test://input-required/")?;
    (!topic.is_empty() && !topic.contains('/')).then_some(topic)
}

/// Whether `uri` names a resource this fixture can read (not counting [`INPUT_TEMPLATE`]).
pub fn is_resource(uri: &str) -> bool {
    resources().iter().any(|r| r["uri"] == uri) || template_id(uri).is_some()
}

/// `resources/read` of everything but [`INPUT_TEMPLATE`]; `watched_revision` is how
/// often the watched resource has changed.
pub fn read_resource(uri: &str, watched_revision: u64) -> Answer {
    let content = match uri {
        "test://static-text" => {
            json!({ "uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource." })
        }
        "test://static-binary" => json!({ "uri": uri, "mimeType": "image/png", "blob": IMAGE_PNG_BASE64 }),
        WATCHED_URI => {
            let text = format!("Watched resource content, revision {watched_revision}");
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

// ---- prompts -----------------------------------------------------------------------

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

pub fn prompts(dynamic: &Dynamic) -> Vec<Value> {
    let input = json!({"name": INPUT_PROMPT, "description": "Asks the user for context (elicitation)"});
    let added = json!({"name": DYNAMIC_PROMPT, "description": "Added by test_trigger_prompt_change"});
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
        .chain(dynamic.has_prompt().then_some(added))
        .collect()
}

/// The result of [`INPUT_PROMPT`] once the user gave `context`.
pub fn input_prompt_result(context: &str) -> Value {
    let text = format!("Use this context: {context}");
    json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]})
}

/// `prompts/get` of every prompt but [`INPUT_PROMPT`]: every argument is required
/// and must be a string.
pub fn get_prompt(params: &Map<String, Value>, dynamic: &Dynamic) -> Answer {
    let name = required_str(params, "name")?;
    if name == DYNAMIC_PROMPT && dynamic.has_prompt() {
        let text = "This prompt was added by test_trigger_prompt_change.";
        return Ok(json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]}));
    }
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
pub fn complete(params: &Map<String, Value>) -> Answer {
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
