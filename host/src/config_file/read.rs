//! Turning a parsed config file into a [`Config`], collecting every problem found on
//! the way instead of stopping at the first.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tether_core::config::{Limits, Mode, Policy, PolicyOverrides, Tasks};
use tether_core::protocol::Era;
use tether_core::{Config, ServerConfig, Transport};

use super::document::{join, ordinals, position, present, Node, Object};
use super::expand::{expand, Env};
use super::schema::{self, Level, Scope};
use super::Problem;

/// Reads the file's top level `root` into a validated [`Config`], or every problem
/// of the file, in document order.
pub(super) fn read(root: &Node, env: Env<'_>) -> Result<Config, Vec<Problem>> {
    let Some(obj) = root.as_object() else {
        return Err(vec![Problem::new("", "the top level must be a JSON object")]);
    };
    let mut reader = Reader { env, problems: Vec::new() };
    let mut config = reader.file(obj);
    if reader.problems.is_empty() {
        return Ok(config);
    }
    // Unset variables alone touch only the servers that name them: those stay in
    // `error` with the message, and the others run. With any other mistake the
    // whole file is refused, every problem listed.
    let server_of = |p: &Problem| {
        let (section, rest) = p.path.split_once('.')?;
        let name = rest.split(['.', '[']).next()?;
        (matches!(section, "mcpServers" | "servers") && config.servers.contains_key(name)).then(|| name.to_string())
    };
    if reader.problems.iter().all(|p| super::expand::is_unset(p) && server_of(p).is_some()) {
        let mut by_server: BTreeMap<String, Vec<&Problem>> = BTreeMap::new();
        for p in &reader.problems {
            by_server.entry(server_of(p).expect("checked above")).or_default().push(p);
        }
        for (name, problems) in by_server {
            let more = match problems.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            let why = format!("{}{more}; set it and reload", problems[0]);
            tracing::warn!(server = %name, "{why}");
            if let Some(server) = config.servers.get_mut(&name) {
                server.broken = Some(why);
            }
        }
        return Ok(config);
    }
    let order = ordinals(root);
    let mut problems = reader.problems;
    problems.sort_by_key(|p| position(&order, &p.path));
    Err(problems)
}

/// The server sections of the file with their keys: `mcpServers`, `servers`, or
/// (an error the reader reports) both, in that order.
pub(super) fn server_sections(root: &Object) -> impl Iterator<Item = (&'static str, &Node)> {
    ["mcpServers", "servers"].into_iter().filter_map(|key| present(root, key).map(|section| (key, section)))
}

struct Reader<'a> {
    env: Env<'a>,
    problems: Vec<Problem>,
}

impl Reader<'_> {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::new(path, message));
    }

    fn file(&mut self, root: &Object) -> Config {
        let sections: Vec<_> = server_sections(root).collect();
        if sections.len() > 1 {
            self.push("", "both \"mcpServers\" and \"servers\" are present; keep only one");
        }
        let servers_key = sections.first().map_or("mcpServers", |(key, _)| key);
        let scope = Scope { servers_key, server: None };
        self.keys(root, "", Level::Root, scope);
        // Without a `tether` section, tether's settings at the top are most likely
        // the engine's own shape.
        if present(root, "tether").is_none() && root.iter().any(|(key, _)| schema::is_engine_key(key)) {
            self.push("", schema::ENGINE_SHAPE);
        }
        let mut config = Config::default();
        if let Some(section) = present(root, "tether") {
            self.gateway_section(&mut config, section, scope);
        }
        for (key, section) in &sections {
            self.servers(&mut config, key, section);
        }
        if sections.is_empty() {
            tracing::warn!("no \"mcpServers\" or \"servers\" section: no backends configured");
        } else if config.servers.is_empty() {
            tracing::warn!(section = servers_key, "no server entries: no backends configured");
        }
        self.validate(&config, servers_key);
        config
    }

    /// Reports repeated keys of `obj` and keys that `level` does not read: tether's
    /// own keys at the wrong level, misspellings, and (in tether's own sections)
    /// anything unknown.
    fn keys(&mut self, obj: &Object, path: &str, level: Level, scope: Scope<'_>) {
        self.repeats(obj, path);
        for (key, _) in obj.iter().filter(|(key, _)| !level.accepts(key)) {
            match schema::stray_key(key, level, scope) {
                Some(message) => self.push(join(path, key), message),
                None => tracing::debug!(path, key = key.as_str(), "ignoring a key tether does not use"),
            }
        }
    }

    fn repeats(&mut self, obj: &Object, path: &str) {
        let mut seen = BTreeSet::new();
        for (key, _) in obj {
            if !seen.insert(key.as_str()) {
                self.push(join(path, key), "appears more than once in this object; keep one");
            }
        }
    }

    fn object<'n>(&mut self, value: &'n Node, path: &str) -> Option<&'n Object> {
        let obj = value.as_object();
        if obj.is_none() {
            self.push(path, "must be an object");
        }
        obj
    }

    fn boolean(&mut self, value: &Node, path: &str) -> Option<bool> {
        let b = value.as_bool();
        if b.is_none() {
            self.push(path, "must be true or false");
        }
        b
    }

    fn typed<T: DeserializeOwned>(&mut self, value: &Node, path: &str) -> Option<T> {
        T::deserialize(&value.to_value()).map_err(|e| self.push(path, e.to_string())).ok()
    }

    /// A `policy` or `limits` section, checked key by key so each bad value is
    /// reported at its own path; the keys that are fine are kept, so what the core
    /// finds wrong with their values is reported too.
    fn section<T: DeserializeOwned>(&mut self, value: &Node, path: &str, level: Level, scope: Scope<'_>) -> Option<T> {
        let obj = self.object(value, path)?;
        self.keys(obj, path, level, scope);
        let mut good = Map::new();
        for (key, item) in obj.iter().filter(|(key, _)| level.accepts(key)) {
            let single = Value::Object([(key.clone(), item.to_value())].into_iter().collect());
            match T::deserialize(&single) {
                Ok(_) => drop(good.insert(key.clone(), item.to_value())),
                Err(e) => self.push(join(path, key), e.to_string()),
            }
        }
        T::deserialize(&Value::Object(good)).map_err(|e| self.push(path, e.to_string())).ok()
    }

    // -----------------------------------------------------------------------------
    // `tether` sections

    fn gateway_section(&mut self, config: &mut Config, section: &Node, scope: Scope<'_>) {
        let Some(obj) = self.object(section, "tether") else { return };
        self.keys(obj, "tether", Level::Gateway, scope);
        for (key, value) in obj {
            let path = join("tether", key);
            match key.as_str() {
                "separator" => match value.as_str() {
                    Some(s) => config.separator = s.to_string(),
                    None => self.push(&path, "must be a string"),
                },
                "mode" => set(&mut config.mode, self.typed::<Mode>(value, &path)),
                // `modern_clients`: the key's name before 0.1 settled on "stateless".
                "stateless_clients" | "modern_clients" => {
                    set(&mut config.stateless_clients, self.boolean(value, &path))
                }
                "admin_tools" => set(&mut config.admin_tools, self.boolean(value, &path)),
                "client_events" => set(&mut config.client_events, self.boolean(value, &path)),
                "list_changed_debounce_ms" => set(&mut config.list_changed_debounce_ms, self.typed(value, &path)),
                "policy" => set(&mut config.policy, self.section::<Policy>(value, &path, Level::GatewayPolicy, scope)),
                "limits" => set(&mut config.limits, self.section::<Limits>(value, &path, Level::Limits, scope)),
                "tasks" => set(&mut config.tasks, self.section::<Tasks>(value, &path, Level::Tasks, scope)),
                "authorization" => self.authorization(config, value, &path),
                "cluster" => self.cluster(config, value, &path),
                _ => {}
            }
        }
    }

    /// `tether.authorization`: its `scopes` mapping is the engine's; the rest is
    /// the listener's, checked here so a mistake shows at load and reload.
    fn authorization(&mut self, config: &mut Config, value: &Node, path: &str) {
        let Some(obj) = self.object(value, path) else { return };
        self.repeats(obj, path);
        if let Some(scopes) = present(obj, "scopes") {
            set(&mut config.scopes, self.typed(scopes, &join(path, "scopes")));
        }
        // Checked as `serve` reads it: `${VAR}` expanded (a secret or an issuer from the environment).
        let expanded = match super::expand::expand_strings(&value.to_value(), path, self.env) {
            Ok(expanded) => expanded,
            Err(problem) => return self.problems.push(problem),
        };
        match <crate::resource_auth::ResourceAuthSettings as serde::Deserialize>::deserialize(expanded) {
            Ok(settings) => {
                if let Err(message) = settings.check() {
                    // The message names its field (`authorization.issuer: ...`).
                    match message.split_once(": ") {
                        Some((field, why)) => self.push(join("tether", field), why),
                        None => self.push(path, message),
                    }
                }
            }
            Err(e) => self.push(path, e.to_string()),
        }
    }

    /// `tether.cluster`: the drain timings are the engine's; the session keys
    /// the listener's, checked here (after `${VAR}` expansion) so a bad key
    /// shows at load and reload.
    fn cluster(&mut self, config: &mut Config, value: &Node, path: &str) {
        let Some(obj) = self.object(value, path) else { return };
        self.repeats(obj, path);
        let mut cluster = tether_core::config::Cluster::default();
        for (key, item) in obj {
            let field = join(path, key);
            match key.as_str() {
                "drain_delay_ms" => set(&mut cluster.drain_delay_ms, self.typed(item, &field)),
                "drain_timeout_ms" => set(&mut cluster.drain_timeout_ms, self.typed(item, &field)),
                _ => {}
            }
        }
        config.cluster = Some(cluster);
        let expanded = match super::expand::expand_strings(&value.to_value(), path, self.env) {
            Ok(expanded) => expanded,
            Err(problem) => return self.problems.push(problem),
        };
        if let Err(message) = crate::cluster::ClusterSettings::from_section(&expanded) {
            match message.split_once(": ") {
                Some((field, why)) => self.push(field.to_string(), why),
                None => self.push(path, message),
            }
        }
    }

    fn server_section(&mut self, server: &mut ServerConfig, section: &Node, path: &str, scope: Scope<'_>) {
        let Some(obj) = self.object(section, path) else { return };
        self.keys(obj, path, Level::EntryTether, scope);
        for (key, value) in obj {
            let field = join(path, key);
            match key.as_str() {
                "prefixed" => set(&mut server.prefixed, self.boolean(value, &field)),
                "vital" => set(&mut server.vital, self.boolean(value, &field)),
                "lazy" => set(&mut server.lazy, self.boolean(value, &field)),
                "disabled" => set(&mut server.disabled, self.boolean(value, &field)),
                "policy" => {
                    set(&mut server.policy, self.section::<PolicyOverrides>(value, &field, Level::EntryPolicy, scope))
                }
                "era" => set(&mut server.era, self.era(value, &field)),
                "tools" => set(&mut server.selection.tools, self.typed(value, &field)),
                "prompts" => set(&mut server.selection.prompts, self.typed(value, &field)),
                "resources" => set(&mut server.selection.resources, self.typed(value, &field)),
                _ => {}
            }
        }
    }

    /// A backend's protocol era: `"auto"` (detect), `"handshake"` / `"2025-11-25"`,
    /// or `"stateless"` / `"2026-07-28"`.
    fn era(&mut self, value: &Node, path: &str) -> Option<Option<Era>> {
        match value.as_str() {
            Some("auto") => Some(None),
            Some("handshake" | "2025-11-25") => Some(Some(Era::Handshake)),
            Some("stateless" | "2026-07-28") => Some(Some(Era::Stateless)),
            _ => {
                self.push(path, "must be \"auto\", \"handshake\" (2025-11-25) or \"stateless\" (2026-07-28)");
                None
            }
        }
    }

    // -----------------------------------------------------------------------------
    // Server entries

    fn servers(&mut self, config: &mut Config, key: &str, section: &Node) {
        let Some(entries) = section.as_object() else {
            self.push(key, "must be an object mapping server names to entries");
            return;
        };
        self.repeats(entries, key);
        for (name, entry) in entries {
            if let Some(server) = self.server(key, name, entry) {
                config.servers.insert(name.clone(), server);
            }
        }
    }

    /// One entry, or `None` when it is not an object. When there is no telling how
    /// to reach the server (a problem recorded, so the file is refused anyway) its
    /// transport is a stand-in, so the rest of the entry is still checked.
    fn server(&mut self, servers_key: &str, name: &str, entry: &Node) -> Option<ServerConfig> {
        let path = format!("{servers_key}.{name}");
        let Some(obj) = entry.as_object() else {
            self.push(&path, "must be an object");
            return None;
        };
        let scope = Scope { servers_key, server: Some(name) };
        self.keys(obj, &path, Level::Entry, scope);
        let transport = self.transport(&path, obj);
        let mut server = ServerConfig::stdio("unread", &[]);
        if let Some(v) = present(obj, "disabled") {
            set(&mut server.disabled, self.boolean(v, &join(&path, "disabled")));
        }
        server.oauth = self.manages_oauth(&path, obj, transport.as_ref());
        if let Some(section) = present(obj, "tether") {
            self.server_section(&mut server, section, &join(&path, "tether"), scope);
        }
        set(&mut server.transport, transport);
        Some(server)
    }

    /// Whether tether logs in to this remote with OAuth: yes unless `"oauth": false`
    /// or the entry sends an `Authorization` header of its own (a static key).
    fn manages_oauth(&mut self, path: &str, obj: &Object, transport: Option<&Transport>) -> bool {
        let field = join(path, "oauth");
        match (present(obj, "oauth"), transport) {
            (Some(_), Some(Transport::Stdio { .. })) => {
                self.push(field, "applies to remote servers (\"url\") only");
                false
            }
            (Some(Node::Bool(on)), _) => *on,
            (Some(Node::Object(_)), _) => true,
            (Some(_), _) => {
                self.push(field, "must be true, false or an object of OAuth settings");
                false
            }
            (None, Some(Transport::Http { headers, .. } | Transport::Sse { headers, .. })) => {
                !headers.keys().any(|k| k.eq_ignore_ascii_case("authorization"))
            }
            (None, _) => false,
        }
    }

    fn transport(&mut self, path: &str, obj: &Object) -> Option<Transport> {
        let declared = self.declared_kind(path, obj);
        match declared {
            Ok(Some(Kind::Stdio)) => self.stdio(path, obj),
            Ok(Some(kind)) => self.remote(Some(kind), path, obj),
            Ok(None) => match (present(obj, "command"), present(obj, "url")) {
                (Some(_), None) => self.stdio(path, obj),
                (None, Some(_)) => self.remote(None, path, obj),
                (Some(_), Some(_)) => {
                    self.push(path, "has both \"command\" and \"url\"; add \"type\" to say which to use");
                    self.stdio(path, obj);
                    self.remote(None, path, obj);
                    None
                }
                (None, None) => {
                    self.push(path, "needs \"command\" (a local process) or \"url\" (a remote server)");
                    None
                }
            },
            // The type is wrong, but what is there can still be checked.
            Err(()) => {
                if present(obj, "command").is_some() {
                    self.stdio(path, obj);
                }
                if present(obj, "url").is_some() {
                    self.remote(None, path, obj);
                }
                None
            }
        }
    }

    fn declared_kind(&mut self, path: &str, obj: &Object) -> Result<Option<Kind>, ()> {
        let Some(value) = present(obj, "type") else { return Ok(None) };
        let path = join(path, "type");
        let Some(kind) = value.as_str() else {
            self.push(path, "must be a string");
            return Err(());
        };
        match kind {
            "stdio" => Ok(Some(Kind::Stdio)),
            "http" | "streamable-http" | "streamableHttp" | "streamable_http" => Ok(Some(Kind::Http)),
            "sse" => Ok(Some(Kind::Sse)),
            other => {
                self.push(
                    path,
                    format!(
                        "unknown transport \"{other}\"; expected \"stdio\", \"http\", \"streamable-http\" or \"sse\""
                    ),
                );
                Err(())
            }
        }
    }

    fn stdio(&mut self, path: &str, obj: &Object) -> Option<Transport> {
        let command = self.required_string(obj, "command", path);
        let args = self.args(obj, path);
        let env = self.string_map(obj, "env", path);
        let cwd = match present(obj, "cwd") {
            None => Some(None),
            Some(v) => self.string(v, &join(path, "cwd")).map(Some),
        };
        Some(Transport::Stdio { command: command?, args: args?, env: env?, cwd: cwd? })
    }

    fn remote(&mut self, kind: Option<Kind>, path: &str, obj: &Object) -> Option<Transport> {
        let url = self.required_string(obj, "url", path);
        let headers = self.string_map(obj, "headers", path);
        let (url, headers) = (url?, headers?);
        let kind = kind.unwrap_or(if url_path_is_sse(&url) { Kind::Sse } else { Kind::Http });
        Some(match kind {
            Kind::Sse => Transport::Sse { url, headers },
            _ => Transport::Http { url, headers },
        })
    }

    fn args(&mut self, obj: &Object, path: &str) -> Option<Vec<String>> {
        let Some(value) = present(obj, "args") else { return Some(Vec::new()) };
        let Some(items) = value.as_array() else {
            self.push(join(path, "args"), "must be an array of strings");
            return None;
        };
        let args: Vec<Option<String>> =
            items.iter().enumerate().map(|(i, item)| self.string(item, &format!("{path}.args[{i}]"))).collect();
        args.into_iter().collect()
    }

    /// A required string field, expanded.
    fn required_string(&mut self, obj: &Object, key: &str, path: &str) -> Option<String> {
        match present(obj, key) {
            Some(value) => self.string(value, &join(path, key)),
            None => {
                self.push(join(path, key), "is required");
                None
            }
        }
    }

    /// A string value, expanded.
    fn string(&mut self, value: &Node, path: &str) -> Option<String> {
        let Some(text) = value.as_str() else {
            self.push(path, "must be a string");
            return None;
        };
        match expand(text, path, self.env) {
            Ok(expanded) => Some(expanded),
            Err(problem) => {
                // An unset variable may leave this server alone in error (see
                // `read`): the entry keeps its shape, the text as written.
                let unset = super::expand::is_unset(&problem);
                self.problems.push(problem);
                unset.then(|| text.to_string())
            }
        }
    }

    /// An optional object of strings (`env`, `headers`), each value expanded.
    fn string_map(&mut self, obj: &Object, key: &str, path: &str) -> Option<BTreeMap<String, String>> {
        let Some(value) = present(obj, key) else { return Some(BTreeMap::new()) };
        let field = join(path, key);
        let Some(map) = value.as_object() else {
            self.push(field, "must be an object of strings");
            return None;
        };
        self.repeats(map, &field);
        let entries: Vec<Option<(String, String)>> =
            map.iter().map(|(name, v)| Some((name.clone(), self.string(v, &join(&field, name))?))).collect();
        entries.into_iter().collect()
    }

    // -----------------------------------------------------------------------------
    // What tether-core checks

    /// Runs [`Config::validate`] on each part of the file separately (the gateway's
    /// separator, policy, limits and debounce, then each server), so every part's
    /// first error is reported, named by its path in the file.
    fn validate(&mut self, config: &Config, servers_key: &str) {
        let parts = [
            Config { separator: config.separator.clone(), ..Config::default() },
            Config { policy: config.policy.clone(), ..Config::default() },
            Config { limits: config.limits.clone(), ..Config::default() },
            Config { tasks: config.tasks.clone(), ..Config::default() },
            Config { list_changed_debounce_ms: config.list_changed_debounce_ms, ..Config::default() },
        ];
        for part in &parts {
            if let Err(e) = part.validate() {
                self.push(file_path(&e.path, servers_key, part), e.message);
            }
        }
        let policy = if parts[1].validate().is_ok() { config.policy.clone() } else { Policy::default() };
        for (name, server) in &config.servers {
            let one = Config {
                policy: policy.clone(),
                servers: [(name.clone(), server.clone())].into_iter().collect(),
                ..Config::default()
            };
            if let Err(e) = one.validate() {
                self.push(file_path(&e.path, servers_key, &one), e.message);
            }
        }
        // Whatever else the core may come to check.
        if self.problems.is_empty() {
            if let Err(e) = config.validate() {
                self.push(file_path(&e.path, servers_key, config), e.message);
            }
        }
    }
}

/// Stores `value`, when there is one, in `slot`.
fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *slot = value;
    }
}

/// Where a path of tether's model (`servers.fs.policy.crash_limit`, `separator`) is
/// in a config file (`mcpServers.fs.tether.policy.crash_limit`, `tether.separator`).
fn file_path(model: &str, servers_key: &str, config: &Config) -> String {
    let server = model.strip_prefix("servers.").and_then(|after| {
        config
            .servers
            .keys()
            .filter(|name| after == name.as_str() || after.starts_with(&format!("{name}.")))
            .max_by_key(|name| name.len())
            .map(|name| (name, &after[name.len()..]))
    });
    match server {
        Some((name, rest)) => {
            // The engine's fields that live in the entry's `tether` section.
            let tether = [".policy", ".tools", ".prompts", ".resources"]
                .iter()
                .any(|section| rest == *section || rest.starts_with(&format!("{section}.")));
            if tether {
                format!("{servers_key}.{name}.tether{rest}")
            } else {
                format!("{servers_key}.{name}{rest}")
            }
        }
        None if model.starts_with("scopes.") => format!("tether.authorization.{model}"),
        None => format!("tether.{model}"),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stdio,
    Http,
    Sse,
}

/// Whether the URL's path (query and fragment aside) ends with `/sse`.
pub(super) fn url_path_is_sse(url: &str) -> bool {
    let without_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let Some(slash) = without_scheme.find('/') else { return false };
    let path = &without_scheme[slash..];
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let path = path.strip_suffix('/').unwrap_or(path);
    path.ends_with("/sse")
}
