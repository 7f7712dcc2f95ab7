//! Where each key of a config file belongs, and what to say about a key found where
//! it does not.
//!
//! A file has seven kinds of object ([`Level`]). Two of them, the top level and a
//! server entry, are shared with other tools (Claude Desktop, Cursor, VS Code...), so
//! keys tether does not know are allowed there; the other five are tether's own
//! sections, where every key must be known. Everywhere, a key of tether's at the
//! wrong level, or one within a typo of a known key, is an error that says where the
//! key belongs.

use std::sync::OnceLock;

use serde::Serialize;
use serde_json::Value;
use tether_core::config::{Limits, Policy, Tasks};

/// A kind of object in a config file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Level {
    /// The file's top level.
    Root,
    /// The top-level `tether` section.
    Gateway,
    /// `tether.policy`.
    GatewayPolicy,
    /// `tether.limits`.
    Limits,
    /// `tether.tasks`.
    Tasks,
    /// A server entry, `mcpServers.NAME`.
    Entry,
    /// A server entry's `tether` section.
    EntryTether,
    /// A server entry's `tether.policy`.
    EntryPolicy,
}

/// Levels in the order a key's home is looked for from outside any server entry;
/// from inside one, the server's own levels come first (see [`preference`]).
const GATEWAY_FIRST: [Level; 8] = [
    Level::Gateway,
    Level::GatewayPolicy,
    Level::Limits,
    Level::Tasks,
    Level::Root,
    Level::Entry,
    Level::EntryTether,
    Level::EntryPolicy,
];
const SERVER_FIRST: [Level; 8] = [
    Level::EntryTether,
    Level::EntryPolicy,
    Level::Entry,
    Level::Gateway,
    Level::GatewayPolicy,
    Level::Limits,
    Level::Tasks,
    Level::Root,
];

const ROOT_KEYS: &[&str] = &["mcpServers", "servers", "tether"];
const GATEWAY_KEYS: &[&str] = &[
    "separator",
    "mode",
    "stateless_clients",
    "modern_clients",
    "admin_tools",
    "client_events",
    "list_changed_debounce_ms",
    "policy",
    "limits",
    "tasks",
    "authorization",
    "cluster",
];
const ENTRY_KEYS: &[&str] = &["type", "command", "args", "env", "cwd", "url", "headers", "disabled", "oauth", "tether"];
const SERVER_KEYS: &[&str] =
    &["prefixed", "vital", "lazy", "disabled", "policy", "era", "tools", "prompts", "resources"];

impl Level {
    /// The keys this level reads.
    pub(super) fn keys(self) -> &'static [&'static str] {
        match self {
            Level::Root => ROOT_KEYS,
            Level::Gateway => GATEWAY_KEYS,
            Level::GatewayPolicy | Level::EntryPolicy => policy_keys(),
            Level::Limits => limits_keys(),
            Level::Tasks => tasks_keys(),
            Level::Entry => ENTRY_KEYS,
            Level::EntryTether => SERVER_KEYS,
        }
    }

    /// Whether this level reads `key`.
    pub(super) fn accepts(self, key: &str) -> bool {
        self.keys().contains(&key)
    }

    /// Tether's own sections, where every key must be known.
    fn strict(self) -> bool {
        !matches!(self, Level::Root | Level::Entry)
    }
}

/// Where the reader is: the key the file keeps its servers under and, inside a
/// server entry, the server's name.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scope<'a> {
    /// `mcpServers` or `servers`, whichever the file uses.
    pub servers_key: &'a str,
    /// The server whose entry is being read, if any.
    pub server: Option<&'a str>,
}

/// What is wrong with `key`, found in an object of level `here` that does not read
/// it; `None` for a key of another tool, which is left alone.
pub(super) fn stray_key(key: &str, here: Level, scope: Scope<'_>) -> Option<String> {
    // In a shared object only tether's own keys are taken for misplaced ones: a
    // `command` at the top level may mean something to another tool.
    let considered = |level: Level| here.strict() || level.strict() || level == here;
    if let Some(home) = preference(scope).into_iter().filter(|&l| considered(l)).find(|l| l.accepts(key)) {
        return Some(format!("\"{key}\" is not read here; it belongs at {}", location(home, key, scope)));
    }
    let mut candidates: Vec<(Level, &str)> = here.keys().iter().map(|k| (here, *k)).collect();
    for level in preference(scope).into_iter().filter(|&l| l != here && considered(l)) {
        candidates.extend(level.keys().iter().map(|k| (level, *k)));
    }
    match closest(key, &candidates, here.strict()) {
        Some((level, hint)) if level == here => Some(format!("unknown key (did you mean \"{hint}\"?)")),
        Some((level, hint)) => {
            Some(format!("unknown key (did you mean \"{hint}\"? it belongs at {})", location(level, hint, scope)))
        }
        None if here.strict() => Some(format!("unknown key; expected one of: {}", here.keys().join(", "))),
        None => None,
    }
}

/// What to tell a user who wrote tether-core's own `Config` (the engine's JSON, with
/// `policy`, `limits`, `separator`... at the top) into a config file.
pub(super) const ENGINE_SHAPE: &str = "this looks like tether-core's own Config (the engine's JSON), \
     which a config file does not take as is: gateway settings go in a top-level \"tether\" section, \
     a server's settings in a \"tether\" section of its entry";

/// Whether a top-level key is one of the engine's gateway settings.
pub(super) fn is_engine_key(key: &str) -> bool {
    Level::Gateway.accepts(key)
}

fn preference(scope: Scope<'_>) -> [Level; 8] {
    if scope.server.is_some() {
        SERVER_FIRST
    } else {
        GATEWAY_FIRST
    }
}

/// The JSON path where `key` goes at `level`.
fn location(level: Level, key: &str, scope: Scope<'_>) -> String {
    let server = format!("{}.{}", scope.servers_key, scope.server.unwrap_or("NAME"));
    match level {
        Level::Root => "the top level".to_string(),
        Level::Gateway => format!("tether.{key}"),
        Level::GatewayPolicy => format!("tether.policy.{key}"),
        Level::Limits => format!("tether.limits.{key}"),
        Level::Tasks => format!("tether.tasks.{key}"),
        Level::Entry => format!("{server}.{key}"),
        Level::EntryTether => format!("{server}.tether.{key}"),
        Level::EntryPolicy => format!("{server}.tether.policy.{key}"),
    }
}

fn policy_keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| field_names(&Policy::default()))
}

fn limits_keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| field_names(&Limits::default()))
}

fn tasks_keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| field_names(&Tasks::default()))
}

/// The field names of a struct, read from its serialized form (computed once per
/// struct, so leaking them is bounded).
fn field_names(value: &impl Serialize) -> Vec<&'static str> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map.into_iter().map(|(k, _)| &*k.leak()).collect(),
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------
// Typos

/// The known key nearest to a misspelt one, if it is close enough to be a typo;
/// the first of `candidates` wins a tie. `generous` (tether's own sections, where
/// an unknown key is an error anyway) allows one more edit for long keys.
fn closest<'a>(key: &str, candidates: &[(Level, &'a str)], generous: bool) -> Option<(Level, &'a str)> {
    let scored = candidates.iter().filter_map(|&(level, known)| {
        let score = typo_distance(key, known);
        let shorter = key.len().min(known.len());
        let limit = if shorter <= 4 {
            1
        } else if generous && key.len() > 8 {
            3
        } else {
            2
        };
        (score <= limit).then_some((score, level, known))
    });
    scored.min_by_key(|(score, _, _)| *score).map(|(_, level, known)| (level, known))
}

/// Edits between a key and a known one: case, `_` and `-` aside (`maxSessions` is
/// `max_sessions`), and a missing `_ms` counting as one edit.
fn typo_distance(key: &str, known: &str) -> usize {
    let (k, n) = (normalized(key), normalized(known));
    if k == n {
        return 0;
    }
    if format!("{k}ms") == n {
        return 1;
    }
    edit_distance(key, known).min(edit_distance(&k, &n))
}

fn normalized(key: &str) -> String {
    key.chars().filter(|c| *c != '_' && *c != '-').map(|c| c.to_ascii_lowercase()).collect()
}

/// Edit distance over bytes (keys are ASCII) where swapping two neighbours is
/// one edit, as typing makes it (`agrs`, `evn`): the optimal string alignment
/// form of Damerau–Levenshtein.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // Rows i-2, i-1 and i of the table.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut row: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        row[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1).min(row[j - 1] + 1).min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            row[j] = best;
        }
        core::mem::swap(&mut before, &mut previous);
        core::mem::swap(&mut previous, &mut row);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOP: Scope<'static> = Scope { servers_key: "mcpServers", server: None };
    const FS: Scope<'static> = Scope { servers_key: "mcpServers", server: Some("fs") };

    #[test]
    fn typos_are_measured_ignoring_case_separators_and_a_missing_ms() {
        assert_eq!(typo_distance("maxSessions", "max_sessions"), 0);
        assert_eq!(typo_distance("request_timeout", "request_timeout_ms"), 1);
        assert_eq!(typo_distance("vitall", "vital"), 1);
        assert_eq!(edit_distance("dev", "env"), 2);
        assert_eq!(edit_distance("agrs", "args"), 1, "a swap is one edit");
        assert_eq!(edit_distance("evn", "env"), 1);
        assert_eq!(edit_distance("", "env"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn swapped_letters_in_a_server_entry_are_caught() {
        assert_eq!(stray_key("agrs", Level::Entry, FS).as_deref(), Some("unknown key (did you mean \"args\"?)"));
        assert_eq!(stray_key("evn", Level::Entry, FS).as_deref(), Some("unknown key (did you mean \"env\"?)"));
        assert_eq!(stray_key("cwd_", Level::Entry, FS).as_deref(), Some("unknown key (did you mean \"cwd\"?)"));
    }

    #[test]
    fn short_keys_need_a_closer_match() {
        // VS Code's `dev` is two edits from `env`: another tool's key, not a typo.
        assert_eq!(stray_key("dev", Level::Entry, FS), None);
        assert_eq!(stray_key("models", Level::Root, TOP), None);
        assert_eq!(stray_key("arg", Level::Entry, FS).as_deref(), Some("unknown key (did you mean \"args\"?)"));
    }

    #[test]
    fn homes_are_looked_for_in_the_current_scope_first() {
        let at = |key, level, scope| stray_key(key, level, scope).unwrap();
        assert_eq!(
            at("policy", Level::Entry, FS),
            "\"policy\" is not read here; it belongs at mcpServers.fs.tether.policy"
        );
        assert_eq!(at("policy", Level::Root, TOP), "\"policy\" is not read here; it belongs at tether.policy");
        assert_eq!(
            at("disabled", Level::Gateway, TOP),
            "\"disabled\" is not read here; it belongs at mcpServers.NAME.disabled"
        );
        assert_eq!(at("servers", Level::Gateway, TOP), "\"servers\" is not read here; it belongs at the top level");
    }
}
