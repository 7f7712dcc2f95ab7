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
//! `meta`), `stateless_clients` (serve 2026-07-28 stateless clients too; default
//! `true`), `admin_tools` (flat mode: serve `list_servers`, `reconnect_server`,
//! `server_events`; default `false`), `client_events` (events to clients as
//! `notifications/message`; default `true`), `list_changed_debounce_ms` (default
//! 2000), `policy` (any field of [`Policy`](tether_core::config::Policy)),
//! `limits` (any field of [`Limits`](tether_core::config::Limits)), `tasks`
//! (any field of [`Tasks`](tether_core::config::Tasks)) and `authorization`
//! (the HTTP listener as an OAuth protected resource: the fields of
//! [`ResourceAuthSettings`](crate::resource_auth::ResourceAuthSettings), whose
//! `scopes` become [`Config::scopes`]); on an entry it
//! may hold `prefixed`, `vital`, `lazy`, `disabled`, `era` and `policy` (any field
//! of [`PolicyOverrides`](tether_core::config::PolicyOverrides)).
//!
//! Keys are checked so that a file cannot be silently wrong:
//!
//! - inside `tether` sections every key must be known;
//! - a key of tether's at the wrong level (`"vital": true` beside `command`,
//!   `"policy"` at the top level, `"separator"` in a server's section) is an error
//!   that says where the key belongs; so is the engine's own `Config` shape
//!   (`servers` with `vital`, `policy`... in the entries and `policy`, `limits`,
//!   `separator` at the top), which is a Rust API, not a config file;
//! - a key within a typo of a known one (`vitall`, `request_timeout`, `hedaers`)
//!   is an error with a suggestion;
//! - a key repeated in one object is an error;
//! - other keys at the top level and in entries are other tools' (`inputs`,
//!   `envFile`, `autoApprove`, `timeout`...) and are ignored.
//!
//! Every string value of an entry (`command`, `args`, `env` values, `cwd`, `url`,
//! `headers` values) expands `${VAR}` and `${VAR:-default}` (the default, taken
//! literally, applies when `VAR` is unset or empty); `$$` is a literal `$`, and a
//! `$` followed by anything else is kept as it is. Comments and trailing commas,
//! which VS Code's `mcp.json` allows, are accepted.
//!
//! All the problems of a file are reported at once, in document order, each named
//! by its path in the file (`mcpServers.web.headers.Authorization`,
//! `tether.policy.crash_limit`, `servers.fs.tether.vital`), never by a value: `env`
//! and `headers` values are secrets. Fields found invalid by
//! [`Config::validate`] are named by where they are written in the file.

mod document;
mod expand;
mod jsonc;
mod read;
mod schema;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tether_core::Config;

pub use document::Node;
use expand::expand_strings;
use jsonc::strip_jsonc;

/// One thing wrong in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Dotted path of the field at fault as written in the file, e.g.
    /// `mcpServers.fs.command`; empty for the whole file.
    pub path: String,
    /// What is wrong with it (never the field's value).
    pub message: String,
}

impl Problem {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem { path: path.into(), message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

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
    /// Valid JSON that is not a usable configuration, for one reason.
    Invalid {
        /// The file, as given.
        origin: String,
        /// Dotted path of the field at fault, e.g. `mcpServers.fs.command`; empty for the whole file.
        path: String,
        /// What is wrong with it (never the field's value).
        message: String,
    },
    /// Valid JSON that is not a usable configuration, for several reasons.
    Problems {
        /// The file, as given.
        origin: String,
        /// Every problem found, in document order (at least two).
        problems: Vec<Problem>,
    },
}

impl ConfigFileError {
    fn from_problems(origin: &str, mut problems: Vec<Problem>) -> Self {
        let origin = origin.to_string();
        if problems.len() == 1 {
            let Problem { path, message } = problems.remove(0);
            return ConfigFileError::Invalid { origin, path, message };
        }
        ConfigFileError::Problems { origin, problems }
    }
}

/// One line per problem, each starting with the file's name.
impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigFileError::Io { origin, source } => write!(f, "{origin}: cannot read: {source}"),
            ConfigFileError::Syntax { origin, line, column, message } => {
                write!(f, "{origin}:{line}:{column}: {message}")
            }
            ConfigFileError::Invalid { origin, path, message } => {
                write!(f, "{origin}: {}", Problem { path: path.clone(), message: message.clone() })
            }
            ConfigFileError::Problems { origin, problems } => {
                for (i, problem) in problems.iter().enumerate() {
                    let newline = if i == 0 { "" } else { "\n" };
                    write!(f, "{newline}{origin}: {problem}")?;
                }
                Ok(())
            }
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

/// The configuration file's text: a regular file (a FIFO or a device in its place
/// is refused at once, never waited on) of at most [`crate::safe_file::CONFIG_LIMIT`].
fn read_text(path: &Path) -> std::io::Result<String> {
    crate::safe_file::read_regular_text(path, crate::safe_file::CONFIG_LIMIT)
}

/// Reads and parses the configuration file at `path`, expanding `${VAR}` from the
/// process environment, and validates the result.
pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
    let origin = path.display().to_string();
    let text = read_text(path).map_err(|source| ConfigFileError::Io { origin: origin.clone(), source })?;
    let config = parse(&text, &origin, &|name| std::env::var(name).ok())?;
    tracing::debug!(file = %origin, servers = config.servers.len(), "configuration loaded");
    Ok(config)
}

/// Parses configuration `text` (named `origin` in errors), expanding `${VAR}`
/// through `env`, and validates the result with [`Config::validate`].
pub fn parse(text: &str, origin: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigFileError> {
    let root: Node = json(text, origin)?;
    read::read(&root, env).map_err(|problems| ConfigFileError::from_problems(origin, problems))
}

/// Where the configuration is read from when `--config` is absent: `$TETHER_CONFIG`
/// if set, else the system's place for it (see [`crate::locations`]); `None` when
/// no variable says where the home directory is. Returned whether or not the
/// file exists.
pub fn default_path() -> Option<PathBuf> {
    crate::locations::Locations::here().config_file()
}

/// The `oauth` objects of the file's server entries, by server name, with `${VAR}`
/// expanded in their strings (client secrets and keys usually come from the
/// environment). Entries with `"oauth": true` or none have no object here.
pub fn oauth_sections(path: &Path) -> Result<BTreeMap<String, Value>, ConfigFileError> {
    let origin = path.display().to_string();
    let text = read_text(path).map_err(|source| ConfigFileError::Io { origin: origin.clone(), source })?;
    let root: Node = json(&text, &origin)?;
    let env = |name: &str| std::env::var(name).ok();
    let invalid = |p: Problem| ConfigFileError::from_problems(&origin, vec![p]);
    let root = root.as_object().ok_or_else(|| invalid(Problem::new("", "the top level must be a JSON object")))?;
    let sections: Vec<_> = read::server_sections(root).collect();
    if sections.len() > 1 {
        return Err(invalid(Problem::new("", "both \"mcpServers\" and \"servers\" are present; keep only one")));
    }
    let mut out = BTreeMap::new();
    for (key, section) in sections {
        let entries = section
            .as_object()
            .ok_or_else(|| invalid(Problem::new(key, "must be an object mapping server names to entries")))?;
        for (name, entry) in entries {
            let oauth = entry.as_object().and_then(|e| document::present(e, "oauth"));
            if let Some(section @ Node::Object(_)) = oauth {
                let expanded = expand_strings(&section.to_value(), &format!("{key}.{name}.oauth"), &env);
                out.insert(name.clone(), expanded.map_err(invalid)?);
            }
        }
    }
    Ok(out)
}

/// The file's `tether.authorization` object (the HTTP listener as an OAuth
/// protected resource), with `${VAR}` expanded in its strings (an introspection
/// client's secret usually comes from the environment); `None` when absent.
pub fn authorization_section(path: &Path) -> Result<Option<Value>, ConfigFileError> {
    let section = listener_section(path, "authorization")?;
    Ok(section.filter(Value::is_object))
}

/// The file's `tether.cluster` object, with `${VAR}` expanded in its strings
/// (the session keys usually come from the environment); `None` when absent.
pub fn cluster_section(path: &Path) -> Result<Option<Value>, ConfigFileError> {
    listener_section(path, "cluster")
}

/// `tether.KEY` of the file at `path`, `${VAR}` expanded: a section the HTTP
/// listener reads itself (the engine's config does not carry it).
fn listener_section(path: &Path, key: &str) -> Result<Option<Value>, ConfigFileError> {
    let origin = path.display().to_string();
    let text = read_text(path).map_err(|source| ConfigFileError::Io { origin: origin.clone(), source })?;
    let root: Node = json(&text, &origin)?;
    let invalid = |p: Problem| ConfigFileError::from_problems(&origin, vec![p]);
    let section = root
        .as_object()
        .and_then(|root| document::present(root, "tether"))
        .and_then(Node::as_object)
        .and_then(|tether| document::present(tether, key));
    let Some(section) = section else { return Ok(None) };
    let env = |name: &str| std::env::var(name).ok();
    expand_strings(&section.to_value(), &format!("tether.{key}"), &env).map(Some).map_err(invalid)
}

/// `text` (a leading byte-order mark, comments and trailing commas allowed) parsed
/// as JSON whose objects keep their keys in document order; errors are
/// [`ConfigFileError::Syntax`] naming `origin`. Nothing is checked beyond syntax.
pub fn parse_jsonc(text: &str, origin: &str) -> Result<Node, ConfigFileError> {
    json(text, origin)
}

/// `text` as plain JSON: comments and trailing commas blanked with spaces, every
/// other byte where it was, so a position found in the result is the same position
/// in `text` (for editing a file in place, comments kept).
pub fn jsonc_as_json(text: &str) -> String {
    strip_jsonc(text)
}

/// `text` (a leading byte-order mark, comments and trailing commas allowed) parsed
/// as JSON.
fn json<T: serde::de::DeserializeOwned>(text: &str, origin: &str) -> Result<T, ConfigFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str(&strip_jsonc(text)).map_err(|e| syntax_error(origin, text, &e))
}

fn syntax_error(origin: &str, text: &str, e: &serde_json::Error) -> ConfigFileError {
    let (mut line, mut column) = (e.line(), e.column());
    let full = e.to_string();
    let parser = full.strip_suffix(&format!(" at line {line} column {column}")).unwrap_or(&full);
    let message = match parser {
        p if p.starts_with("control character") => {
            // Found at a raw line break inside a string: the string is on the line before.
            if column == 0 && line > 1 {
                line -= 1;
                column = text.lines().nth(line - 1).map_or(1, |l| l.len() + 1);
            }
            "a string is not closed on this line, or holds a raw line break or tab (write \\n or \\t)".to_string()
        }
        p if p.starts_with("invalid escape") => {
            "invalid escape in a string: write a backslash as \\\\ (a Windows path as C:\\\\Users or C:/Users)"
                .to_string()
        }
        p if p.starts_with("EOF while parsing") => format!("{p}: the file ends before it is closed"),
        "trailing characters" => "something follows the end of the JSON value (a stray `}` or text?)".to_string(),
        "key must be a string" => "keys must be strings in double quotes".to_string(),
        p => p.to_string(),
    };
    ConfigFileError::Syntax { origin: origin.to_string(), line, column, message }
}
