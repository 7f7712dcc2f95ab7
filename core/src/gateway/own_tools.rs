//! tether's own tools. In meta mode the client sees only these six instead of
//! every backend's tools: `search_tools` finds a tool by keywords,
//! `describe_tool` gives its schema, `execute_tool` calls it with every
//! resilience behaviour of a direct call. `list_servers`, `reconnect_server` and
//! `server_events` (the admin tools, also in flat mode behind `admin_tools`) let a
//! model see and act on the gateway's state from inside the conversation, since
//! most clients never show it MCP notifications.
//!
//! Mistakes in a call's arguments are tool results with `isError` (the model
//! reads them and can correct itself), not protocol errors.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{json, Map, Value};

use super::access::SessionView;
use super::backends::Backends;
use super::calls::RawFields;
use super::client_events::{event_json, Journal, Journaled, JOURNAL_LEN};
use super::BackendStatus;
use super::Gateway;
use crate::catalog::Catalog;
use crate::catalog::ListKind;
use crate::config::{Config, Mode};
use crate::io::{AdminCommand, RawId, SessionId, Status};
use crate::protocol;
use crate::time::Instant;
use crate::tool_search::{self, Searchable};

/// One of tether's own tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OwnTool {
    ListServers,
    SearchTools,
    DescribeTool,
    ExecuteTool,
    ReconnectServer,
    ServerEvents,
}

/// Search results per call by default, and at most.
const SEARCH_LIMIT: (u64, u64) = (10, 50);
/// Events per `server_events` call by default, and at most.
const EVENTS_LIMIT: (u64, u64) = (50, JOURNAL_LEN as u64);
/// Longest one-line description in search results.
const SEARCH_DESCRIPTION_CHARS: usize = 160;

impl OwnTool {
    /// Meta mode's tools, in the order they are listed.
    const META: [OwnTool; 6] = [
        OwnTool::ListServers,
        OwnTool::SearchTools,
        OwnTool::DescribeTool,
        OwnTool::ExecuteTool,
        OwnTool::ReconnectServer,
        OwnTool::ServerEvents,
    ];
    /// The admin tools flat mode adds when `admin_tools` is on.
    const ADMIN: [OwnTool; 3] = [OwnTool::ListServers, OwnTool::ReconnectServer, OwnTool::ServerEvents];

    pub(super) fn name(self) -> &'static str {
        match self {
            OwnTool::ListServers => "list_servers",
            OwnTool::SearchTools => "search_tools",
            OwnTool::DescribeTool => "describe_tool",
            OwnTool::ExecuteTool => "execute_tool",
            OwnTool::ReconnectServer => "reconnect_server",
            OwnTool::ServerEvents => "server_events",
        }
    }

    /// The tool's definition as listed.
    pub(super) fn definition(self) -> &'static str {
        match self {
            OwnTool::ListServers => concat!(
                r#"{"name":"list_servers","description":"List the backend MCP servers behind this gateway with their health: status (online, offline, error, requires_reauth, permanently_failed, ...), circuit breaker, reconnect attempt and ms until the next retry, crashes, tool count and estimated tokens, and the last error. Use it when a tool fails or seems missing.","#,
                r#""inputSchema":{"type":"object","properties":{}},"annotations":{"title":"List servers","readOnlyHint":true,"openWorldHint":false}}"#
            ),
            OwnTool::SearchTools => concat!(
                r#"{"name":"search_tools","description":"Find tools of the backend servers by keywords in their names and descriptions. Returns the best matches with their server, a one-line description and whether the server is available now. Then call describe_tool for a tool's parameters and execute_tool to run it.","#,
                r#""inputSchema":{"type":"object","properties":{"query":{"type":"string","description":"Keywords, e.g. 'read file' or 'weather forecast'"},"server":{"type":"string","description":"Only tools of this server"},"limit":{"type":"integer","minimum":1,"maximum":50,"description":"Most results to return (default 10)"}},"required":["query"]},"annotations":{"title":"Search tools","readOnlyHint":true,"openWorldHint":false}}"#
            ),
            OwnTool::DescribeTool => concat!(
                r#"{"name":"describe_tool","description":"Show one tool's full definition: description, input schema (the arguments execute_tool needs), output schema and annotations, and its server's status.","#,
                r#""inputSchema":{"type":"object","properties":{"name":{"type":"string","description":"The tool's name as search_tools gave it"}},"required":["name"]},"annotations":{"title":"Describe tool","readOnlyHint":true,"openWorldHint":false}}"#
            ),
            OwnTool::ExecuteTool => concat!(
                r#"{"name":"execute_tool","description":"Run a tool of a backend server by the name search_tools gave it, with its arguments. The result is the tool's own result.","#,
                r#""inputSchema":{"type":"object","properties":{"name":{"type":"string","description":"The tool's name as search_tools gave it"},"arguments":{"type":"object","description":"The tool's arguments, as its input schema says"}},"required":["name"]},"annotations":{"title":"Execute tool","openWorldHint":true}}"#
            ),
            OwnTool::ReconnectServer => concat!(
                r#"{"name":"reconnect_server","description":"Reconnect a backend server now. Connected: a fresh connection. Offline or in error: stop waiting for the next retry and try at once. Permanently failed: restart it with its crash history cleared. Returns at once; list_servers or server_events show the outcome.","#,
                r#""inputSchema":{"type":"object","properties":{"server":{"type":"string","description":"The server's name as list_servers gives it"}},"required":["server"]},"annotations":{"title":"Reconnect server","readOnlyHint":false,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}}"#
            ),
            OwnTool::ServerEvents => concat!(
                r#"{"name":"server_events","description":"What happened to the backend servers: status changes, disconnects, reconnect attempts, breaker trips, health warnings, tool discoveries. Pass the next_since of the previous answer as since to get only what is new.","#,
                r#""inputSchema":{"type":"object","properties":{"since":{"type":"integer","minimum":0,"description":"Return events numbered from this one (the previous answer's next_since); omit for the most recent"},"server":{"type":"string","description":"Only events of this server"},"limit":{"type":"integer","minimum":1,"maximum":256,"description":"Most events to return (default 50)"}}},"annotations":{"title":"Server events","readOnlyHint":true,"openWorldHint":false}}"#
            ),
        }
    }
}

/// A tool result: the structured value, and its JSON text for clients that
/// only read `content`.
fn structured(value: Value) -> String {
    let text = serde_json::to_string_pretty(&value).unwrap_or_default();
    json!({"content": [{"type": "text", "text": text}], "structuredContent": value}).to_string()
}

/// A tool result saying what was wrong, for the model to read and correct.
fn tool_error(message: &str) -> String {
    json!({"content": [{"type": "text", "text": message}], "isError": true}).to_string()
}

/// An argument that must be a string.
fn string_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("argument '{key}' must be a string")),
    }
}

/// An argument that must be a whole number within `range` (a default when absent).
fn count_arg(args: &Map<String, Value>, key: &str, (default, max): (u64, u64), min: u64) -> Result<u64, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if n >= min && n <= max => Ok(n),
            _ => Err(format!("argument '{key}' must be a whole number from {min} to {max}")),
        },
    }
}

impl OwnTool {
    /// The tools of tether's own the client is served under `config`.
    pub(super) fn served(config: &Config) -> &'static [OwnTool] {
        match config.mode {
            Mode::Meta => &OwnTool::META,
            Mode::Flat if config.admin_tools => &OwnTool::ADMIN,
            Mode::Flat => &[],
        }
    }

    /// The own tool a served name means, if it is one under `config`.
    pub(super) fn named(config: &Config, name: &str) -> Option<OwnTool> {
        OwnTool::served(config).iter().copied().find(|t| t.name() == name)
    }

    /// The served own tools' definitions, for `tools/list`.
    pub(super) fn definitions(config: &Config) -> Vec<&'static str> {
        OwnTool::served(config).iter().map(|t| t.definition()).collect()
    }
}

/// The server name of an own-tool `execute_tool` call's target, for routing
/// decisions made before the call is parsed (a stateless client's retry).
pub(super) fn execute_target<'a>(config: &Config, params: &'a Map<String, Value>) -> Option<&'a str> {
    let name = params.get("name").and_then(Value::as_str)?;
    (OwnTool::named(config, name) == Some(OwnTool::ExecuteTool))
        .then(|| params.get("arguments").and_then(|a| a.get("name")).and_then(Value::as_str))
        .flatten()
}

fn unknown_tool(name: &str) -> String {
    format!("unknown tool '{name}'; search_tools finds tools by keyword and gives their exact names")
}

/// The read-only side of tether's own tools (`list_servers`, `search_tools`,
/// `describe_tool`, `server_events`), answered from what one session may see.
pub(super) struct Inspector<'a> {
    pub backends: &'a Backends,
    pub catalog: &'a Catalog,
    pub journal: &'a Journal,
    /// What the asking session may see.
    pub view: SessionView<'a>,
    pub config: &'a Config,
    pub now: Instant,
}

impl Inspector<'_> {
    /// `list_servers`: every backend the session sees, with its health; a
    /// server granted in part shows that part's tools.
    pub(super) fn list_servers(&self) -> Value {
        let servers: Vec<Value> = self
            .backends
            .iter()
            .map(|(name, b)| BackendStatus::of(name, b, self.catalog, self.now))
            .filter(|s| self.view.sees_server(&s.server))
            .map(|mut s| {
                // A server granted in part shows the part.
                let access = self.view.access;
                if !access.server(&s.server) {
                    let tools = self.catalog.backend(&s.server).map(|b| b.entries(ListKind::Tools)).unwrap_or(&[]);
                    let granted = tools.iter().filter(|e| access.tool(&s.server, &e.served));
                    let (count, tokens) = granted.fold((0, 0), |(n, t), e| (n + 1, t + e.estimated_tokens));
                    (s.tools, s.estimated_tokens) = (count, tokens);
                }
                let mut row = s.to_json();
                row["available"] = Value::Bool(self.backends.available(&s.server, self.now));
                row
            })
            .collect();
        json!({ "servers": servers })
    }

    /// `search_tools`: the best keyword matches among the tools the session may call.
    pub(super) fn search_tools(&self, args: &Map<String, Value>) -> Result<Value, String> {
        let query = string_arg(args, "query")?.unwrap_or("");
        let only = string_arg(args, "server")?;
        let limit = count_arg(args, "limit", SEARCH_LIMIT, 1)? as usize;
        if let Some(server) = only.filter(|s| !self.backends.contains_key(*s) || !self.view.sees_server(s)) {
            return Err(self.unknown_server(server));
        }
        let backends = &self.backends;
        let access = self.view.access;
        let searched = |s: &str, e: &crate::catalog::Entry| {
            only.is_none_or_eq(s) && backends.get(s).is_some_and(|b| !b.config.disabled) && access.tool(s, &e.served)
        };
        let parsed: Vec<(&str, Value)> = self
            .catalog
            .visible(ListKind::Tools, searched)
            .map(|(server, entry)| (server, serde_json::from_str(&entry.json).unwrap_or(Value::Null)))
            .collect();
        let tools: Vec<Searchable<'_>> =
            parsed.iter().map(|(server, tool)| tool_search::searchable(server, tool)).collect();
        let hits = tool_search::rank(&tools, query, limit);
        let results: Vec<Value> = hits
            .iter()
            .map(|hit| {
                let t = &tools[hit.index];
                json!({
                    "name": t.name,
                    "server": t.server,
                    "description": tool_search::one_line(t.description, SEARCH_DESCRIPTION_CHARS),
                    "available": self.backends.available(t.server, self.now),
                    "status": self.backends.get(t.server).map(|b| b.sup.status()),
                })
            })
            .collect();
        let mut out = json!({ "query": query, "tools": results, "searched": tools.len() });
        if hits.is_empty() {
            let hint = "no tool matched; try other or fewer keywords, or an empty query to list every tool. list_servers shows servers that are down (their tools are searched only once they were discovered)";
            out["hint"] = Value::String(hint.to_string());
        }
        Ok(out)
    }

    /// `describe_tool`: one tool's whole definition and its server's state.
    pub(super) fn describe_tool(&self, args: &Map<String, Value>) -> Result<Value, String> {
        let Some(name) = string_arg(args, "name")? else { return Err("argument 'name' is required".into()) };
        if let Some(own) = OwnTool::named(self.config, name) {
            let tool: Value = serde_json::from_str(own.definition()).unwrap_or(Value::Null);
            return Ok(json!({ "server": "tether", "status": "online", "available": true, "tool": tool }));
        }
        let Some(r) = self.view.tool(name) else {
            let hidden =
                super::routing::hidden_message(self.catalog, ListKind::Tools, name).filter(|_| !self.view.restricted());
            return Err(hidden.unwrap_or_else(|| unknown_tool(name)));
        };
        let tool: Value = serde_json::from_str(&r.entry.json).unwrap_or(Value::Null);
        Ok(json!({
            "server": r.server,
            "status": self.backends.get(r.server).map(|b| b.sup.status()),
            "available": self.backends.available(r.server, self.now),
            "tool": tool,
        }))
    }

    /// `server_events`: the journal of the servers the session sees, from a
    /// cursor or the most recent.
    pub(super) fn server_events(&self, args: &Map<String, Value>) -> Result<Value, String> {
        let limit = count_arg(args, "limit", EVENTS_LIMIT, 1)? as usize;
        let only = string_arg(args, "server")?;
        if let Some(server) = only.filter(|s| !self.backends.contains_key(*s) || !self.view.sees_server(s)) {
            return Err(self.unknown_server(server));
        }
        let since = match args.get("since") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or("argument 'since' must be a whole number")?),
        };
        let wanted = |e: &&Journaled| only.is_none_or_eq(e.event.server()) && self.view.sees_server(e.event.server());
        let next = self.journal.next_seq();
        let (events, missed, next_since) = match since {
            // From a cursor: the oldest first, as many as fit; the rest next time.
            Some(since) => {
                let (iter, missed) = self.journal.since(since);
                let events: Vec<Value> = iter.filter(wanted).take(limit).map(event_json).collect();
                let last = events.last().and_then(|e| e["seq"].as_u64());
                // Past the filtered-out events too when everything fit.
                let next_since = match last {
                    Some(seq) if events.len() == limit => seq + 1,
                    _ => next.max(since),
                };
                (events, missed, next_since)
            }
            // No cursor: the most recent ones.
            None => {
                let (iter, _) = self.journal.since(0);
                let all: Vec<Value> = iter.filter(wanted).map(event_json).collect();
                let skip = all.len().saturating_sub(limit);
                (all.into_iter().skip(skip).collect(), 0, next)
            }
        };
        let mut out = json!({ "events": events, "next_since": next_since });
        if missed > 0 {
            out["missed"] = Value::from(missed);
        }
        Ok(out)
    }

    /// The error for a server the session does not know, naming those it does.
    pub(super) fn unknown_server(&self, server: &str) -> String {
        let known: Vec<&str> = self.backends.keys().map(|n| &**n).filter(|n| self.view.sees_server(n)).collect();
        format!("unknown server '{server}'; the servers are: {}", known.join(", "))
    }
}

impl Gateway {
    /// A `tools/call` of one of tether's own tools.
    pub(super) fn call_own_tool(&mut self, session: SessionId, id: RawId, tool: OwnTool, fields: &RawFields<'_>) {
        let args: Map<String, Value> = match fields.get("arguments").map(serde_json::from_str::<Value>) {
            None | Some(Ok(Value::Null)) => Map::new(),
            Some(Ok(Value::Object(m))) => m,
            Some(_) => return self.reply(session, &id, &tool_error("arguments must be an object")),
        };
        let inspector = Inspector {
            backends: &self.backends,
            catalog: &self.catalog,
            journal: &self.notices.journal,
            view: self.view(session),
            config: &self.config,
            now: self.now,
        };
        let outcome = match tool {
            OwnTool::ListServers => Ok(inspector.list_servers()),
            OwnTool::SearchTools => inspector.search_tools(&args),
            OwnTool::DescribeTool => inspector.describe_tool(&args),
            OwnTool::ReconnectServer => self.reconnect_server(session, &args),
            OwnTool::ServerEvents => inspector.server_events(&args),
            OwnTool::ExecuteTool => return self.execute_tool(session, id, fields, &args),
        };
        let result = match outcome {
            Ok(value) => structured(value),
            Err(message) => tool_error(&message),
        };
        self.reply(session, &id, &result);
    }

    /// `execute_tool`: the named backend tool is called as if the client had
    /// called it directly (queueing, retries, breaker, timeouts, progress, input
    /// requests): the call's own params with `name` and `arguments` replaced.
    fn execute_tool(&mut self, session: SessionId, id: RawId, fields: &RawFields<'_>, args: &Map<String, Value>) {
        let target = match string_arg(args, "name") {
            Ok(Some(name)) => name,
            Ok(None) => return self.reply(session, &id, &tool_error("argument 'name' is required")),
            Err(e) => return self.reply(session, &id, &tool_error(&e)),
        };
        if OwnTool::named(&self.config, target).is_some() {
            let msg = format!("'{target}' is one of the gateway's own tools: call it directly");
            return self.reply(session, &id, &tool_error(&msg));
        }
        if self.view(session).tool(target).is_none() {
            let restricted = self.view(session).restricted();
            let hidden = super::routing::hidden_message(&self.catalog, ListKind::Tools, target).filter(|_| !restricted);
            let withheld = restricted && self.catalog.resolve_tool(target).is_some();
            if hidden.is_some()
                || withheld
                || !self.backends.first_discovery_pending(self.now, self.config.policy.connect_timeout_ms)
            {
                let msg = hidden.unwrap_or_else(|| unknown_tool(target));
                return self.reply(session, &id, &tool_error(&msg));
            }
        }
        let arguments = match args.get("arguments") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => return self.reply(session, &id, &tool_error("argument 'arguments' must be an object")),
        };
        let mut params = String::from("{");
        params.push_str(&format!(r#""name":{},"arguments":{arguments}"#, protocol::quote(target)));
        for (key, value) in fields.iter().filter(|(k, _)| !matches!(&***k, "name" | "arguments")) {
            params.push_str(&format!(",{}:{}", protocol::quote(key), value));
        }
        params.push('}');
        self.route_named(session, id, "tools/call", Some(&params), ListKind::Tools, true);
    }

    fn reconnect_server(&mut self, session: SessionId, args: &Map<String, Value>) -> Result<Value, String> {
        // `name` is what some gateways call it; `server` is what the schema says.
        let server = match (string_arg(args, "server")?, string_arg(args, "name")?) {
            (Some(s), _) | (None, Some(s)) => s.to_string(),
            (None, None) => return Err("argument 'server' is required".into()),
        };
        // Reconnecting is for whoever is granted the server whole.
        let granted = self.view(session).access.server(&server);
        let Some(b) = self.backends.get(server.as_str()).filter(|_| granted) else {
            let inspector = Inspector {
                backends: &self.backends,
                catalog: &self.catalog,
                journal: &self.notices.journal,
                view: self.view(session),
                config: &self.config,
                now: self.now,
            };
            return Err(inspector.unknown_server(&server));
        };
        if b.config.disabled {
            return Err(format!("server '{server}' is disabled in the configuration; enable it there"));
        }
        let before = b.sup.status();
        let (action, command) = match before {
            Status::PermanentlyFailed => ("restarting", AdminCommand::Restart { server: self.backends.name(&server) }),
            Status::Online | Status::DiscoveringTools => (
                "reconnecting with a fresh connection",
                AdminCommand::Reconnect { server: self.backends.name(&server) },
            ),
            _ => ("connecting now", AdminCommand::Reconnect { server: self.backends.name(&server) }),
        };
        let _ = self.admin(command);
        let after = self.backends.get(server.as_str()).map(|b| b.sup.status());
        Ok(json!({
            "server": server,
            "was": before,
            "action": action,
            "status": after,
            "next": "call list_servers or server_events to see whether it came back",
        }))
    }
}

/// A `tools/list` page without the later tools of a name listed earlier: the
/// backend tools tether's own tools shadow.
pub(super) fn without_shadowed(page: &str) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(page) else { return page.to_string() };
    if let Some(Value::Array(tools)) = value.get_mut("tools") {
        let mut seen: Vec<String> = Vec::new();
        tools.retain(|t| {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            let first = !seen.contains(&name);
            seen.push(name);
            first
        });
    }
    serde_json::to_string(&value).unwrap_or_else(|_| page.to_string())
}

/// `None` matches everything; `Some(x)` only `x`.
trait MatchesAll {
    fn is_none_or_eq(&self, value: &str) -> bool;
}

impl MatchesAll for Option<&str> {
    fn is_none_or_eq(&self, value: &str) -> bool {
        self.map_or(true, |s| s == value)
    }
}

#[cfg(test)]
mod tests;
