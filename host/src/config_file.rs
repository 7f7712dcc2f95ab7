//! Reading the configuration files users already have into a [`tether_core::Config`].
//!
//! Two shapes are understood:
//!
//! - Claude Desktop / Cursor: `{"mcpServers": {"NAME": ENTRY}}`;
//! - VS Code: `{"servers": {"NAME": ENTRY}}` (its top-level `"inputs"` is ignored).
//!
//! An `ENTRY` is either a local process, `{"command", "args", "env", "cwd"}`, or a
//! remote server, `{"url", "headers"}`. An optional `"type"` picks the transport:
//! `"stdio"`, `"http"` (also spelled `"streamable-http"`) or `"sse"`. A `url` entry
//! without a type is Streamable HTTP, unless the URL path ends with `/sse`, which
//! means the legacy HTTP+SSE transport. `"disabled": true` on an entry is honoured.
//!
//! Tether's own settings live in `tether` sections, which the other tools ignore:
//!
//! ```json
//! {
//!   "tether": {"separator": "__", "policy": {"crash_limit": 5}, "limits": {"max_sessions": 8}},
//!   "mcpServers": {
//!     "fs": {"command": "fs-server", "tether": {"vital": true, "policy": {"idle_timeout_ms": 0}}}
//!   }
//! }
//! ```
//!
//! At the top level a `tether` section may hold `separator`, `mode` (`flat` or
//! `meta`), `modern_clients` (serve 2026-07-28 stateless clients too; default
//! `true`), `admin_tools` (flat mode: serve `list_servers`, `reconnect_server`,
//! `server_events`; default `false`), `client_events` (events to clients as
//! `notifications/message`; default `true`), `list_changed_debounce_ms` (default
//! 2000), `policy` (any
//! field of [`Policy`]) and `limits` (any field of [`Limits`]); on an entry it may
//! hold `prefixed`, `vital`, `lazy`, `disabled` and `policy` (any field of
//! [`PolicyOverrides`]). Unknown keys are ignored everywhere, so existing files load,
//! except inside `tether` sections, where a misspelt knob is an error.
//!
//! Every string value of an entry (`command`, `args`, `env` values, `cwd`, `url`,
//! `headers` values) expands `${VAR}` and `${VAR:-default}` (the default, taken
//! literally, applies when `VAR` is unset or empty); `$$` is a literal `$`, and a
//! `$` followed by anything else is kept as it is. Comments and trailing commas,
//! which VS Code's `mcp.json` allows, are accepted.
//!
//! Errors name the file and the field, never a value: `env` and `headers` values
//! are secrets. Fields of an entry are named `servers.NAME.FIELD` whichever top-level
//! key the file uses (`servers.web.headers.Authorization`); fields found invalid by
//! [`Config::validate`] are named by their place in tether's model
//! (`servers.fs.policy.crash_limit`, `policy.breaker_threshold`, `separator`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use tether_core::config::{Limits, Mode, Policy, PolicyOverrides};
use tether_core::protocol::Era;
use tether_core::{Config, ServerConfig, Transport};

/// Why a configuration file could not be turned into a [`Config`].
#[derive(Debug)]
pub enum ConfigFileError {
    /// The file could not be read.
    Io {
        /// The file, as given.
        origin: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The text is not JSON (comments and trailing commas aside).
    Syntax {
        /// The file, as given.
        origin: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column (in bytes) of the error.
        column: usize,
        /// What is wrong there.
        message: String,
    },
    /// Valid JSON that is not a usable configuration.
    Invalid {
        /// The file, as given.
        origin: String,
        /// Dotted path of the field at fault, e.g. `servers.fs.command`; empty for the whole file.
        path: String,
        /// What is wrong with it (never the field's value).
        message: String,
    },
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigFileError::Io { origin, source } => write!(f, "{origin}: cannot read: {source}"),
            ConfigFileError::Syntax { origin, line, column, message } => {
                write!(f, "{origin}:{line}:{column}: {message}")
            }
            ConfigFileError::Invalid { origin, path, message } if path.is_empty() => {
                write!(f, "{origin}: {message}")
            }
            ConfigFileError::Invalid { origin, path, message } => write!(f, "{origin}: {path}: {message}"),
        }
    }
}

impl std::error::Error for ConfigFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigFileError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reads and parses the configuration file at `path`, expanding `${VAR}` from the
/// process environment, and validates the result.
pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
    let origin = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigFileError::Io { origin: origin.clone(), source })?;
    let config = parse(&text, &origin, &|name| std::env::var(name).ok())?;
    tracing::debug!(file = %origin, servers = config.servers.len(), "configuration loaded");
    Ok(config)
}

/// Parses configuration `text` (named `origin` in errors), expanding `${VAR}`
/// through `env`, and validates the result with [`Config::validate`].
pub fn parse(text: &str, origin: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let root: Value = serde_json::from_str(&strip_jsonc(text)).map_err(|e| syntax_error(origin, &e))?;
    let config = build(&root, env).map_err(|e| e.in_file(origin))?;
    config.validate().map_err(|e| Invalid::new(e.path, e.message).in_file(origin))?;
    Ok(config)
}

/// Where the configuration is read from when `--config` is absent: `$TETHER_CONFIG`
/// if set, else `$XDG_CONFIG_HOME/tether/config.json`, else
/// `$HOME/.config/tether/config.json`; `None` when none of these variables is set.
/// The first candidate is returned whether or not the file exists.
pub fn default_path() -> Option<PathBuf> {
    default_path_from(&|name| std::env::var_os(name).and_then(|v| v.into_string().ok()))
}

fn default_path_from(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty());
    if let Some(file) = set("TETHER_CONFIG") {
        return Some(PathBuf::from(file));
    }
    // The XDG spec says relative values are to be ignored.
    if let Some(dir) = set("XDG_CONFIG_HOME").filter(|d| Path::new(d).is_absolute()) {
        return Some(Path::new(&dir).join("tether").join("config.json"));
    }
    set("HOME").map(|home| Path::new(&home).join(".config").join("tether").join("config.json"))
}

/// A semantic error before the file name is attached.
#[derive(Debug)]
struct Invalid {
    path: String,
    message: String,
}

impl Invalid {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid { path: path.into(), message: message.into() }
    }

    fn in_file(self, origin: &str) -> ConfigFileError {
        ConfigFileError::Invalid { origin: origin.to_string(), path: self.path, message: self.message }
    }
}

type Res<T> = Result<T, Invalid>;

fn syntax_error(origin: &str, e: &serde_json::Error) -> ConfigFileError {
    let (line, column) = (e.line(), e.column());
    let full = e.to_string();
    let message = full.strip_suffix(&format!(" at line {line} column {column}")).unwrap_or(&full).to_string();
    ConfigFileError::Syntax { origin: origin.to_string(), line, column, message }
}

// ---------------------------------------------------------------------------------
// The whole file

fn build(root: &Value, env: &dyn Fn(&str) -> Option<String>) -> Res<Config> {
    let root = root.as_object().ok_or_else(|| Invalid::new("", "the top level must be a JSON object"))?;
    let mut config = Config::default();
    if let Some(section) = present(root, "tether") {
        apply_gateway_section(&mut config, section)?;
    }
    for (name, entry) in server_entries(root)?.into_iter().flatten() {
        config.servers.insert(name.clone(), server(name, entry, env)?);
    }
    Ok(config)
}

/// The entries under `mcpServers` or `servers`, whichever the file has.
fn server_entries(root: &Map<String, Value>) -> Res<Option<&Map<String, Value>>> {
    let (key, section) = match (present(root, "mcpServers"), present(root, "servers")) {
        (Some(_), Some(_)) => {
            return Err(Invalid::new("", "both \"mcpServers\" and \"servers\" are present; keep only one"))
        }
        (Some(section), None) => ("mcpServers", section),
        (None, Some(section)) => ("servers", section),
        (None, None) => {
            tracing::warn!("no \"mcpServers\" or \"servers\" section: no backends configured");
            return Ok(None);
        }
    };
    let entries =
        section.as_object().ok_or_else(|| Invalid::new(key, "must be an object mapping server names to entries"))?;
    Ok(Some(entries))
}

/// `key`'s value, treating an explicit `null` as absent.
fn present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

// ---------------------------------------------------------------------------------
// One entry

const ENTRY_KEYS: &[&str] = &["type", "command", "args", "env", "cwd", "url", "headers", "disabled", "oauth", "tether"];

fn server(name: &str, entry: &Value, env: &dyn Fn(&str) -> Option<String>) -> Res<ServerConfig> {
    let path = format!("servers.{name}");
    let obj = entry.as_object().ok_or_else(|| Invalid::new(&path, "must be an object"))?;
    for key in obj.keys().filter(|k| !ENTRY_KEYS.contains(&k.as_str())) {
        tracing::debug!(server = name, key = key.as_str(), "ignoring unknown key");
    }
    let mut server = ServerConfig {
        transport: transport(&path, obj, env)?,
        prefixed: true,
        vital: false,
        lazy: false,
        disabled: false,
        policy: PolicyOverrides::default(),
        era: None,
        oauth: false,
    };
    if let Some(v) = present(obj, "disabled") {
        server.disabled = boolean(v, &format!("{path}.disabled"))?;
    }
    server.oauth = manages_oauth(&path, obj, &server.transport)?;
    if let Some(section) = present(obj, "tether") {
        apply_server_section(&mut server, section, &format!("{path}.tether"))?;
    }
    Ok(server)
}

/// Whether tether logs in to this remote with OAuth: yes unless `"oauth": false`
/// or the entry sends an `Authorization` header of its own (a static key).
fn manages_oauth(path: &str, obj: &Map<String, Value>, transport: &Transport) -> Res<bool> {
    let field = format!("{path}.oauth");
    let remote_headers = match transport {
        Transport::Stdio { .. } => {
            return match present(obj, "oauth") {
                Some(_) => Err(Invalid::new(field, "applies to remote servers (\"url\") only")),
                None => Ok(false),
            }
        }
        Transport::Http { headers, .. } | Transport::Sse { headers, .. } => headers,
    };
    match present(obj, "oauth") {
        Some(Value::Bool(on)) => Ok(*on),
        Some(Value::Object(_)) => Ok(true),
        Some(_) => Err(Invalid::new(field, "must be true, false or an object of OAuth settings")),
        None => Ok(!remote_headers.keys().any(|k| k.eq_ignore_ascii_case("authorization"))),
    }
}

/// The `oauth` objects of the file's server entries, by server name, with `${VAR}`
/// expanded in their strings (client secrets and keys usually come from the
/// environment). Entries with `"oauth": true` or none have no object here.
pub fn oauth_sections(path: &Path) -> Result<BTreeMap<String, Value>, ConfigFileError> {
    let origin = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigFileError::Io { origin: origin.clone(), source })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let root: Value = serde_json::from_str(&strip_jsonc(text)).map_err(|e| syntax_error(&origin, &e))?;
    let env = |name: &str| std::env::var(name).ok();
    let root =
        root.as_object().ok_or_else(|| Invalid::new("", "the top level must be a JSON object").in_file(&origin))?;
    let mut out = BTreeMap::new();
    for (name, entry) in server_entries(root).map_err(|e| e.in_file(&origin))?.into_iter().flatten() {
        if let Some(section @ Value::Object(_)) = entry.get("oauth") {
            let expanded =
                expand_strings(section, &format!("servers.{name}.oauth"), &env).map_err(|e| e.in_file(&origin))?;
            out.insert(name.clone(), expanded);
        }
    }
    Ok(out)
}

fn expand_strings(value: &Value, path: &str, env: &dyn Fn(&str) -> Option<String>) -> Res<Value> {
    Ok(match value {
        Value::String(s) => Value::String(expand(s, path, env)?),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), expand_strings(v, &format!("{path}.{k}"), env)?)))
                .collect::<Res<Map<String, Value>>>()?,
        ),
        Value::Array(a) => Value::Array(a.iter().map(|v| expand_strings(v, path, env)).collect::<Res<Vec<_>>>()?),
        other => other.clone(),
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stdio,
    Http,
    Sse,
}

fn transport(path: &str, obj: &Map<String, Value>, env: &dyn Fn(&str) -> Option<String>) -> Res<Transport> {
    let field = |name: &str| format!("{path}.{name}");
    match declared_kind(path, obj)? {
        Some(Kind::Stdio) => stdio(path, obj, env),
        Some(kind) => remote(kind, path, obj, env),
        None => match (present(obj, "command"), present(obj, "url")) {
            (Some(_), None) => stdio(path, obj, env),
            (None, Some(_)) => {
                let url = expand(string(obj, "url", &field("url"))?, &field("url"), env)?;
                let kind = if url_path_is_sse(&url) { Kind::Sse } else { Kind::Http };
                Ok(remote_transport(kind, url, headers(path, obj, env)?))
            }
            (Some(_), Some(_)) => {
                Err(Invalid::new(path, "has both \"command\" and \"url\"; add \"type\" to say which to use"))
            }
            (None, None) => Err(Invalid::new(path, "needs \"command\" (a local process) or \"url\" (a remote server)")),
        },
    }
}

fn declared_kind(path: &str, obj: &Map<String, Value>) -> Res<Option<Kind>> {
    let Some(value) = present(obj, "type") else { return Ok(None) };
    let path = format!("{path}.type");
    let kind = value.as_str().ok_or_else(|| Invalid::new(&path, "must be a string"))?;
    match kind {
        "stdio" => Ok(Some(Kind::Stdio)),
        "http" | "streamable-http" | "streamableHttp" | "streamable_http" => Ok(Some(Kind::Http)),
        "sse" => Ok(Some(Kind::Sse)),
        other => Err(Invalid::new(
            path,
            format!("unknown transport \"{other}\"; expected \"stdio\", \"http\", \"streamable-http\" or \"sse\""),
        )),
    }
}

fn stdio(path: &str, obj: &Map<String, Value>, env: &dyn Fn(&str) -> Option<String>) -> Res<Transport> {
    let field = |name: &str| format!("{path}.{name}");
    let command = expand(string(obj, "command", &field("command"))?, &field("command"), env)?;
    let args = match present(obj, "args") {
        None => Vec::new(),
        Some(v) => {
            let items = v.as_array().ok_or_else(|| Invalid::new(field("args"), "must be an array of strings"))?;
            let arg = |(i, item): (usize, &Value)| {
                let p = format!("{path}.args[{i}]");
                expand(item.as_str().ok_or_else(|| Invalid::new(&p, "must be a string"))?, &p, env)
            };
            items.iter().enumerate().map(arg).collect::<Res<Vec<_>>>()?
        }
    };
    let env_vars = string_map(obj, "env", path, env)?;
    let cwd = match present(obj, "cwd") {
        None => None,
        Some(_) => Some(expand(string(obj, "cwd", &field("cwd"))?, &field("cwd"), env)?),
    };
    Ok(Transport::Stdio { command, args, env: env_vars, cwd })
}

fn remote(kind: Kind, path: &str, obj: &Map<String, Value>, env: &dyn Fn(&str) -> Option<String>) -> Res<Transport> {
    let field = format!("{path}.url");
    let url = expand(string(obj, "url", &field)?, &field, env)?;
    Ok(remote_transport(kind, url, headers(path, obj, env)?))
}

fn remote_transport(kind: Kind, url: String, headers: BTreeMap<String, String>) -> Transport {
    match kind {
        Kind::Sse => Transport::Sse { url, headers },
        _ => Transport::Http { url, headers },
    }
}

fn headers(
    path: &str,
    obj: &Map<String, Value>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Res<BTreeMap<String, String>> {
    string_map(obj, "headers", path, env)
}

/// Whether the URL's path (query and fragment aside) ends with `/sse`.
fn url_path_is_sse(url: &str) -> bool {
    let without_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let Some(slash) = without_scheme.find('/') else { return false };
    let path = &without_scheme[slash..];
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let path = path.strip_suffix('/').unwrap_or(path);
    path.ends_with("/sse")
}

/// A required string field.
fn string<'a>(obj: &'a Map<String, Value>, key: &str, path: &str) -> Res<&'a str> {
    match present(obj, key) {
        None => Err(Invalid::new(path, "is required")),
        Some(v) => v.as_str().ok_or_else(|| Invalid::new(path, "must be a string")),
    }
}

/// An optional object of strings (`env`, `headers`), each value expanded.
fn string_map(
    obj: &Map<String, Value>,
    key: &str,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Res<BTreeMap<String, String>> {
    let Some(value) = present(obj, key) else { return Ok(BTreeMap::new()) };
    let map = value.as_object().ok_or_else(|| Invalid::new(format!("{path}.{key}"), "must be an object of strings"))?;
    let entry = |(name, v): (&String, &Value)| {
        let p = format!("{path}.{key}.{name}");
        let text = v.as_str().ok_or_else(|| Invalid::new(&p, "must be a string"))?;
        Ok((name.clone(), expand(text, &p, env)?))
    };
    map.iter().map(entry).collect()
}

// ---------------------------------------------------------------------------------
// `${VAR}` expansion

/// Expands `${VAR}`, `${VAR:-default}` and `$$` in `text`, the value of the field at
/// `path`. Errors name the field and never quote the text.
fn expand(text: &str, path: &str, env: &dyn Fn(&str) -> Option<String>) -> Res<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail
                .find('}')
                .ok_or_else(|| Invalid::new(path, "unterminated \"${\" (write \"$$\" for a literal \"$\")"))?;
            out.push_str(&substitute(&tail[..end], path, env)?);
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of one reference, `NAME` or `NAME:-default` (without the braces).
fn substitute(reference: &str, path: &str, env: &dyn Fn(&str) -> Option<String>) -> Res<String> {
    let (name, default) = match reference.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (reference, None),
    };
    if !is_variable_name(name) || default.is_some_and(|d| d.contains("${")) {
        return Err(Invalid::new(
            path,
            "malformed variable reference; expected ${NAME} or ${NAME:-default} (write \"$$\" for a literal \"$\")",
        ));
    }
    match (env(name), default) {
        (Some(value), Some(default)) if value.is_empty() => Ok(default.to_string()),
        (Some(value), _) => Ok(value),
        (None, Some(default)) => Ok(default.to_string()),
        (None, None) => Err(Invalid::new(path, format!("environment variable {name} is not set"))),
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

// ---------------------------------------------------------------------------------
// `tether` sections

const GATEWAY_KEYS: &[&str] = &[
    "separator",
    "mode",
    "modern_clients",
    "admin_tools",
    "client_events",
    "list_changed_debounce_ms",
    "policy",
    "limits",
];
const SERVER_KEYS: &[&str] = &["prefixed", "vital", "lazy", "disabled", "policy", "era"];

fn apply_gateway_section(config: &mut Config, section: &Value) -> Res<()> {
    for (key, value) in object(section, "tether")? {
        let path = format!("tether.{key}");
        match key.as_str() {
            "separator" => {
                config.separator = value.as_str().ok_or_else(|| Invalid::new(&path, "must be a string"))?.to_string()
            }
            "mode" => config.mode = typed::<Mode>(value, &path)?,
            "modern_clients" => config.modern_clients = boolean(value, &path)?,
            "admin_tools" => config.admin_tools = boolean(value, &path)?,
            "client_events" => config.client_events = boolean(value, &path)?,
            "list_changed_debounce_ms" => config.list_changed_debounce_ms = typed::<u64>(value, &path)?,
            "policy" => config.policy = typed_section::<Policy>(value, &path, &field_names(&Policy::default()))?,
            "limits" => config.limits = typed_section::<Limits>(value, &path, &field_names(&Limits::default()))?,
            _ => return Err(unknown_key(&path, key, GATEWAY_KEYS)),
        }
    }
    Ok(())
}

fn apply_server_section(server: &mut ServerConfig, section: &Value, path: &str) -> Res<()> {
    for (key, value) in object(section, path)? {
        let field = format!("{path}.{key}");
        match key.as_str() {
            "prefixed" => server.prefixed = boolean(value, &field)?,
            "vital" => server.vital = boolean(value, &field)?,
            "lazy" => server.lazy = boolean(value, &field)?,
            "disabled" => server.disabled = boolean(value, &field)?,
            "policy" => {
                server.policy = typed_section::<PolicyOverrides>(value, &field, &field_names(&Policy::default()))?
            }
            "era" => server.era = era(value, &field)?,
            _ => return Err(unknown_key(&field, key, SERVER_KEYS)),
        }
    }
    Ok(())
}

/// A backend's protocol era: `"auto"` (detect), `"handshake"` / `"2025-11-25"`,
/// or `"stateless"` / `"2026-07-28"`.
fn era(value: &Value, path: &str) -> Res<Option<Era>> {
    match value.as_str() {
        Some("auto") => Ok(None),
        Some("handshake" | "2025-11-25") => Ok(Some(Era::Handshake)),
        Some("stateless" | "2026-07-28") => Ok(Some(Era::Stateless)),
        _ => Err(Invalid::new(path, "must be \"auto\", \"handshake\" (2025-11-25) or \"stateless\" (2026-07-28)")),
    }
}

fn object<'a>(value: &'a Value, path: &str) -> Res<&'a Map<String, Value>> {
    value.as_object().ok_or_else(|| Invalid::new(path, "must be an object"))
}

fn boolean(value: &Value, path: &str) -> Res<bool> {
    value.as_bool().ok_or_else(|| Invalid::new(path, "must be true or false"))
}

fn typed<T: DeserializeOwned>(value: &Value, path: &str) -> Res<T> {
    T::deserialize(value).map_err(|e| Invalid::new(path, e.to_string()))
}

/// Deserializes an object section key by key, so an unknown key or a bad value is
/// reported at its own path. `known` lists the keys the section accepts.
fn typed_section<T: DeserializeOwned>(value: &Value, path: &str, known: &[String]) -> Res<T> {
    let obj = object(value, path)?;
    for (key, item) in obj {
        let field = format!("{path}.{key}");
        if !known.contains(key) {
            let known: Vec<&str> = known.iter().map(String::as_str).collect();
            return Err(unknown_key(&field, key, &known));
        }
        let single: Map<String, Value> = [(key.clone(), item.clone())].into_iter().collect();
        typed::<T>(&Value::Object(single), &field)?;
    }
    typed(value, path)
}

/// The top-level field names of a struct, read from its serialized form.
fn field_names(value: &impl Serialize) -> Vec<String> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map.into_iter().map(|(k, _)| k).collect(),
        _ => Vec::new(),
    }
}

fn unknown_key(path: &str, key: &str, known: &[&str]) -> Invalid {
    match closest(key, known) {
        Some(hint) => Invalid::new(path, format!("unknown key (did you mean \"{hint}\"?)")),
        None => Invalid::new(path, format!("unknown key; expected one of: {}", known.join(", "))),
    }
}

/// The known key nearest to a misspelt one, if it is close enough to be a typo.
fn closest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let best = known.iter().map(|k| (edit_distance(key, k), *k)).min()?;
    (best.0 <= 2 || (best.0 <= 3 && key.len() > 8)).then_some(best.1)
}

/// Levenshtein distance over bytes (keys are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

// ---------------------------------------------------------------------------------
// JSON with comments

/// Blanks `//` and `/* */` comments and trailing commas with spaces, keeping every
/// other byte (newlines included) in place so JSON errors keep their line and column.
fn strip_jsonc(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    blank_comments(&mut bytes);
    blank_trailing_commas(&mut bytes);
    // Only whole comments (ASCII-delimited) and ASCII commas were replaced, so the
    // bytes are still UTF-8; fall back to the original text rather than panic.
    String::from_utf8(bytes).unwrap_or_else(|_| text.to_string())
}

/// Walks `bytes` outside string literals, calling `visit` with each index there.
/// `visit` returns how many bytes it consumed (0 to let the walk step by one).
fn walk_outside_strings(bytes: &mut [u8], mut visit: impl FnMut(&mut [u8], usize) -> usize) {
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        if in_string {
            match bytes[i] {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
        } else if bytes[i] == b'"' {
            in_string = true;
            i += 1;
        } else {
            i += visit(bytes, i).max(1);
        }
    }
}

fn blank_comments(bytes: &mut [u8]) {
    walk_outside_strings(bytes, |b, i| {
        let end = match (b[i], b.get(i + 1)) {
            (b'/', Some(b'/')) => b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n),
            (b'/', Some(b'*')) => b[i + 2..].windows(2).position(|w| w == b"*/").map_or(b.len(), |n| i + 2 + n + 2),
            _ => return 0,
        };
        for c in &mut b[i..end] {
            if *c != b'\n' && *c != b'\r' {
                *c = b' ';
            }
        }
        end - i
    });
}

fn blank_trailing_commas(bytes: &mut [u8]) {
    walk_outside_strings(bytes, |b, i| {
        if b[i] == b',' {
            let next = b[i + 1..].iter().find(|c| !c.is_ascii_whitespace());
            if matches!(next, Some(b'}') | Some(b']')) {
                b[i] = b' ';
            }
        }
        0
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse_ok(text: &str) -> Config {
        parse(text, "test.json", &no_env).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse_err(text: &str) -> String {
        match parse(text, "test.json", &no_env) {
            Ok(config) => panic!("expected an error, got {config:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn claude_desktop_file_with_stdio_http_and_sse_entries() {
        let config = parse_ok(
            r#"{
              "globalShortcut": "Ctrl+Space",
              "mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                       "env": {"DEBUG": "1"}, "cwd": "/srv"},
                "web": {"url": "https://example.test/mcp", "headers": {"X-Team": "core"}},
                "legacy": {"url": "https://example.test/v1/sse?x=1"},
                "typed_sse": {"type": "sse", "url": "https://example.test/events"},
                "streamable": {"type": "streamable-http", "url": "https://example.test/sse"},
                "off": {"command": "old-server", "disabled": true}
              }
            }"#,
        );
        assert_eq!(
            config.servers["fs"].transport,
            Transport::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "@modelcontextprotocol/server-filesystem".into(), "/tmp".into()],
                env: map(&[("DEBUG", "1")]),
                cwd: Some("/srv".into()),
            }
        );
        assert_eq!(
            config.servers["web"].transport,
            Transport::Http { url: "https://example.test/mcp".into(), headers: map(&[("X-Team", "core")]) }
        );
        assert_eq!(config.servers["legacy"].transport.kind(), "sse");
        assert_eq!(config.servers["typed_sse"].transport.kind(), "sse");
        assert_eq!(config.servers["streamable"].transport.kind(), "http", "an explicit type wins over the path");
        assert!(config.servers["off"].disabled);
        assert!(!config.servers["fs"].disabled);
        assert!(config.servers["fs"].prefixed);
        assert_eq!(config.separator, "__");
        assert_eq!(config.policy, Policy::default());
    }

    #[test]
    fn vscode_file_with_typed_entries_and_inputs() {
        let config = parse_ok(
            r#"{
              "inputs": [{"type": "promptString", "id": "token", "description": "API token", "password": true}],
              "servers": {
                "git": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git"], "envFile": "${workspaceFolder}/.env"},
                "remote": {"type": "http", "url": "https://example.test/mcp", "headers": {"Accept": "application/json"}},
                "events": {"type": "sse", "url": "https://example.test/stream"}
              }
            }"#,
        );
        assert_eq!(config.servers.len(), 3);
        assert!(matches!(&config.servers["git"].transport, Transport::Stdio { command, args, .. }
            if command == "uvx" && args == &["mcp-server-git"]));
        assert_eq!(
            config.servers["remote"].transport,
            Transport::Http { url: "https://example.test/mcp".into(), headers: map(&[("Accept", "application/json")]) }
        );
        assert_eq!(
            config.servers["events"].transport,
            Transport::Sse { url: "https://example.test/stream".into(), headers: BTreeMap::new() }
        );
    }

    #[test]
    fn vscode_comments_and_trailing_commas_are_accepted() {
        let config = parse_ok(
            "{\n  // my servers\n  \"servers\": {\n    /* the \"fs\" one */\n    \"fs\": {\"command\": \"a//b\", \"args\": [\"/*x*/\", \",]\",],},\n  },\n}\n",
        );
        assert!(matches!(&config.servers["fs"].transport, Transport::Stdio { command, args, .. }
            if command == "a//b" && args == &["/*x*/", ",]"]));
        let err = parse_err("{\n  // a comment, with é\n  \"servers\": {\"fs\": {\"command\": \"x\"} \"y\"}\n}");
        // Column 38 is the `"` of `"y"`: blanking the comment moved nothing.
        assert_eq!(err, "test.json:3:38: expected `,` or `}`");
    }

    #[test]
    fn tether_sections_top_level_and_per_server() {
        let config = parse_ok(
            r#"{
              "tether": {"separator": "--", "mode": "flat", "modern_clients": true,
                         "policy": {"crash_limit": 4, "breaker_threshold": 7},
                         "limits": {"max_sessions": 8}},
              "mcpServers": {
                "fs": {"command": "fs-server",
                       "tether": {"prefixed": false, "vital": true, "lazy": true,
                                  "policy": {"crash_limit": 5, "idle_timeout_ms": 0}}},
                "web": {"url": "https://example.test/mcp", "disabled": true, "tether": {"disabled": false}},
                "other": {"command": "x", "tether": {"disabled": true}}
              }
            }"#,
        );
        assert_eq!(config.separator, "--");
        assert!(config.modern_clients);
        assert_eq!(config.policy.breaker_threshold, 7);
        assert_eq!(config.policy.crash_window_ms, Policy::default().crash_window_ms, "others keep their default");
        assert_eq!(config.limits.max_sessions, 8);
        assert_eq!(config.limits.page_size, Limits::default().page_size);
        let fs = &config.servers["fs"];
        assert!(!fs.prefixed && fs.vital && fs.lazy && !fs.disabled);
        assert_eq!(config.policy_for("fs").crash_limit, 5);
        assert_eq!(config.policy_for("fs").idle_timeout_ms, 0);
        assert_eq!(config.policy_for("fs").breaker_threshold, 7, "inherits the gateway policy");
        assert_eq!(config.policy_for("web").crash_limit, 4);
        assert!(!config.servers["web"].disabled, "the tether section wins");
        assert!(config.servers["other"].disabled);
    }

    #[test]
    fn tether_section_values_of_the_wrong_type_are_named() {
        let err = parse_err(r#"{"tether": {"policy": {"crash_limit": "many"}}}"#);
        assert!(err.starts_with("test.json: tether.policy.crash_limit: invalid type"), "{err}");
        let err = parse_err(r#"{"servers": {"fs": {"command": "x", "tether": {"vital": "yes"}}}}"#);
        assert_eq!(err, "test.json: servers.fs.tether.vital: must be true or false");
        let err = parse_err(r#"{"tether": {"limits": 3}}"#);
        assert_eq!(err, "test.json: tether.limits: must be an object");
    }

    #[test]
    fn env_expansion_with_defaults_and_escapes() {
        let env = env_of(&[("TOKEN", "s3cr3t"), ("EMPTY", ""), ("PORT", "8080")]);
        let config = parse(
            r#"{"mcpServers": {
                 "fs": {"command": "${TOOLS:-/opt/tools}/fs", "args": ["--price=$$5", "$HOME", "${EMPTY:-fallback}", "a$"],
                        "env": {"KEY": "${TOKEN}", "BLANK": "${EMPTY}"}, "cwd": "${WORK:-/srv}"},
                 "web": {"url": "http://localhost:${PORT}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
               }}"#,
            "test.json",
            &env,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            config.servers["fs"].transport,
            Transport::Stdio {
                command: "/opt/tools/fs".into(),
                args: vec!["--price=$5".into(), "$HOME".into(), "fallback".into(), "a$".into()],
                env: map(&[("BLANK", ""), ("KEY", "s3cr3t")]),
                cwd: Some("/srv".into()),
            }
        );
        assert_eq!(
            config.servers["web"].transport,
            Transport::Http {
                url: "http://localhost:8080/mcp".into(),
                headers: map(&[("Authorization", "Bearer s3cr3t")])
            }
        );
    }

    #[test]
    fn missing_variable_names_the_server_and_field() {
        let err = parse_err(
            r#"{"servers": {"web": {"url": "https://x.test/mcp", "headers": {"Authorization": "Bearer ${API_TOKEN}"}}}}"#,
        );
        assert_eq!(err, "test.json: servers.web.headers.Authorization: environment variable API_TOKEN is not set");
        let err = parse_err(r#"{"servers": {"fs": {"command": "x", "args": ["a", "${DIR}"]}}}"#);
        assert_eq!(err, "test.json: servers.fs.args[1]: environment variable DIR is not set");
        let err = parse_err(r#"{"servers": {"fs": {"command": "x", "args": ["${DIR"]}}}"#);
        assert!(err.starts_with("test.json: servers.fs.args[0]: unterminated"), "{err}");
        let err = parse_err(r#"{"servers": {"fs": {"command": "x", "args": ["${not valid}"]}}}"#);
        assert!(err.starts_with("test.json: servers.fs.args[0]: malformed variable reference"), "{err}");
    }

    #[test]
    fn syntax_errors_report_line_and_column() {
        let text = "{\n  \"mcpServers\": {\n    \"fs\": {\"command\": \"x\",}\n    \"web\": {}\n  }\n}";
        let err = parse(text, "cfg.json", &no_env).unwrap_err();
        assert!(matches!(err, ConfigFileError::Syntax { line: 4, column: 5, .. }), "{err:?}");
        assert_eq!(err.to_string(), "cfg.json:4:5: expected `,` or `}`");
        assert_eq!(parse_err("{\"servers\": {"), "test.json:1:13: EOF while parsing an object");
    }

    #[test]
    fn unknown_keys_in_tether_sections_are_rejected_with_their_path() {
        let err = parse_err(r#"{"tether": {"policy": {"breaker_treshold": 3}}}"#);
        assert_eq!(err, "test.json: tether.policy.breaker_treshold: unknown key (did you mean \"breaker_threshold\"?)");
        let err = parse_err(r#"{"tether": {"seperator": "__"}}"#);
        assert_eq!(err, "test.json: tether.seperator: unknown key (did you mean \"separator\"?)");
        let err = parse_err(r#"{"tether": {"limits": {"zzz": 1}}}"#);
        assert!(err.starts_with("test.json: tether.limits.zzz: unknown key; expected one of: "), "{err}");
        let err = parse_err(r#"{"mcpServers": {"fs": {"command": "x", "tether": {"critical": true}}}}"#);
        assert!(err.starts_with("test.json: servers.fs.tether.critical: unknown key"), "{err}");
        let err = parse_err(r#"{"mcpServers": {"fs": {"command": "x", "tether": {"policy": {"crash_limt": 2}}}}}"#);
        assert_eq!(err, "test.json: servers.fs.tether.policy.crash_limt: unknown key (did you mean \"crash_limit\"?)");
    }

    #[test]
    fn unknown_keys_elsewhere_are_ignored() {
        let config = parse_ok(
            r#"{"theme": "dark", "mcpServers": {"fs": {"command": "x", "autoApprove": ["read"], "timeout": 60,
                 "description": {"nested": [1, 2]}}}}"#,
        );
        assert_eq!(
            config.servers["fs"].transport,
            Transport::Stdio { command: "x".into(), args: vec![], env: BTreeMap::new(), cwd: None }
        );
    }

    #[test]
    fn both_server_sections_is_an_error() {
        let err = parse_err(r#"{"mcpServers": {}, "servers": {}}"#);
        assert_eq!(err, "test.json: both \"mcpServers\" and \"servers\" are present; keep only one");
    }

    #[test]
    fn entries_must_say_how_to_reach_the_server() {
        let err = parse_err(r#"{"mcpServers": {"ghost": {"env": {"A": "b"}}}}"#);
        assert!(err.starts_with("test.json: servers.ghost: needs \"command\""), "{err}");
        let err = parse_err(r#"{"mcpServers": {"both": {"command": "x", "url": "http://y"}}}"#);
        assert!(err.starts_with("test.json: servers.both: has both"), "{err}");
        let err = parse_err(r#"{"servers": {"s": {"type": "stdio", "url": "http://y"}}}"#);
        assert_eq!(err, "test.json: servers.s.command: is required");
        let err = parse_err(r#"{"servers": {"s": {"type": "websocket", "url": "ws://y"}}}"#);
        assert!(err.starts_with("test.json: servers.s.type: unknown transport \"websocket\""), "{err}");
        let err = parse_err(r#"{"servers": {"s": {"command": ["x"]}}}"#);
        assert_eq!(err, "test.json: servers.s.command: must be a string");
        let err = parse_err(r#"{"servers": {"s": 3}}"#);
        assert_eq!(err, "test.json: servers.s: must be an object");
    }

    #[test]
    fn secret_values_never_appear_in_errors() {
        const SECRET: &str = "hunter2-very-secret";
        let env = move |name: &str| (name == "TOKEN").then(|| SECRET.to_string());
        let cases = [
            format!(r#"{{"mcpServers": {{"w": {{"url": "https://x.test", "headers": {{"Authorization": "{SECRET} ${{MISSING}}"}}}}}}}}"#),
            format!(r#"{{"mcpServers": {{"w": {{"url": "https://x.test", "headers": {{"Authorization": "{SECRET} ${{bad name}}"}}}}}}}}"#),
            format!(r#"{{"mcpServers": {{"w": {{"command": "x", "env": {{"KEY": "{SECRET} ${{OPEN"}}}}}}}}"#),
            format!(r#"{{"mcpServers": {{"w": {{"command": "x", "env": {{"KEY": ["{SECRET}"]}}}}}}}}"#),
            r#"{"mcpServers": {"w": {"url": "ftp://${TOKEN}@x.test", "headers": {"A": "${TOKEN}"}}}}"#.to_string(),
            r#"{"mcpServers": {"w": {"command": "x", "env": {"A": "${TOKEN}"}, "tether": {"policy": {"crash_limit": 0}}}}}"#
                .to_string(),
        ];
        for text in &cases {
            let err = parse(text, "test.json", &env).expect_err(text).to_string();
            assert!(!err.contains(SECRET) && !err.contains("hunter2"), "leaked: {err}");
            assert!(err.starts_with("test.json: servers.w"), "{err}");
        }
    }

    #[test]
    fn core_validation_errors_name_the_field() {
        let err = parse_err(r#"{"servers": {"x": {"command": "x", "tether": {"policy": {"crash_limit": 0}}}}}"#);
        assert!(err.starts_with("test.json: servers.x.policy.crash_limit: must be between 1 and"), "{err}");
        let err = parse_err(r#"{"servers": {"fs": {"command": "  "}}}"#);
        assert_eq!(err, "test.json: servers.fs.command: must not be empty");
        let err = parse_err(r#"{"tether": {"separator": "."}, "servers": {}}"#);
        assert!(err.starts_with("test.json: separator: "), "{err}");
        let err = parse_err(r#"{"tether": {"limits": {"page_size": 0}}}"#);
        assert_eq!(err, "test.json: limits.page_size: must be at least 1");
        match parse(r#"{"servers": {"bad name": {"command": "x"}}}"#, "f", &no_env) {
            Err(ConfigFileError::Invalid { path, .. }) => assert_eq!(path, "servers.bad name"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sse_is_detected_from_the_url_path_only() {
        assert!(url_path_is_sse("https://x.test/sse"));
        assert!(url_path_is_sse("https://x.test/a/sse/"));
        assert!(url_path_is_sse("http://x.test/sse?token=1#f"));
        assert!(!url_path_is_sse("https://sse"));
        assert!(!url_path_is_sse("https://x.test/mcp?next=/sse"));
        assert!(!url_path_is_sse("https://x.test/classes"));
    }

    #[test]
    fn load_reads_a_file_and_names_it_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "\u{feff}{\"mcpServers\": {\"fs\": {\"command\": \"fs-server\"}}}").unwrap();
        let config = load(&path).unwrap();
        assert_eq!(config.servers["fs"].transport.kind(), "stdio");

        std::fs::write(&path, "{\"mcpServers\": {\"fs\": {}}}").unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("{}: servers.fs: needs \"command\" (a local process) or \"url\" (a remote server)", path.display())
        );

        let missing = dir.path().join("absent.json");
        let err = load(&missing).unwrap_err();
        assert!(matches!(err, ConfigFileError::Io { .. }));
        assert!(err.to_string().starts_with(&format!("{}: cannot read: ", missing.display())), "{err}");
    }

    #[test]
    fn default_path_prefers_tether_config_then_xdg_then_home() {
        let all = env_of(&[("TETHER_CONFIG", "/etc/t.json"), ("XDG_CONFIG_HOME", "/xdg"), ("HOME", "/home/u")]);
        assert_eq!(default_path_from(&all), Some(PathBuf::from("/etc/t.json")));
        let xdg = env_of(&[("XDG_CONFIG_HOME", "/xdg"), ("HOME", "/home/u")]);
        assert_eq!(default_path_from(&xdg), Some(PathBuf::from("/xdg/tether/config.json")));
        let home = env_of(&[("XDG_CONFIG_HOME", "relative"), ("TETHER_CONFIG", ""), ("HOME", "/home/u")]);
        assert_eq!(default_path_from(&home), Some(PathBuf::from("/home/u/.config/tether/config.json")));
        assert_eq!(default_path_from(&no_env), None);
    }

    #[test]
    fn no_input_panics() {
        let valid = r#"{"tether": {"policy": {"crash_limit": 2}}, "mcpServers": {"a": {"command": "${X:-y}", "args": ["$$"], "env": {"K": "v"}}, "b": {"url": "https://x.test/sse", "headers": {"H": "${Y}"}}}} // end"#;
        for end in 0..=valid.len() {
            let _ = parse(&valid[..end], "t", &no_env);
            let _ = parse(&valid[end..], "t", &no_env);
        }
        for text in [
            "",
            "null",
            "[]",
            "\"x\"",
            "{\"servers\": []}",
            "{\"servers\": {\"a\": null}}",
            "/*",
            "{\"a\": \"\\",
            "\"\\\"",
        ] {
            assert!(parse(text, "t", &no_env).is_err(), "{text}");
        }
        assert!(parse("{}", "t", &no_env).unwrap().servers.is_empty());
    }
}
