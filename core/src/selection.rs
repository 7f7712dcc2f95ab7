//! Which of a backend's tools, prompts and resources tether serves, and how it
//! presents them: the per-server choice a person makes in the config ("filesystem's
//! read tools but not `write_file`", "none of this server's prompts", "call
//! `search` `find_notes`, and say what it searches").
//!
//! Patterns are globs over the backend's own names (resources: their URIs and URI
//! templates): `*` matches any run of characters, `?` one character, everything
//! else itself, case-sensitively. An item is served when the allow list is empty or
//! one of its patterns matches, and no deny pattern matches. The catalog applies
//! this when it installs a backend's lists: a hidden item is neither listed nor
//! callable, and meta mode's search never sees it.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// The selection for one backend: a filter per kind of list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// Which tools are served, under what names and descriptions.
    #[serde(default, skip_serializing_if = "Filter::is_everything")]
    pub tools: Filter,
    /// Which prompts are served, under what names and descriptions.
    #[serde(default, skip_serializing_if = "Filter::is_everything")]
    pub prompts: Filter,
    /// Which resources and resource templates are served (matched against their
    /// URI or URI template) and may be read or subscribed to (matched against the
    /// URI asked for).
    #[serde(default, skip_serializing_if = "Filter::is_everything")]
    pub resources: Filter,
}

/// Allow and deny patterns for one kind of list, and per-item overrides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Globs of the items to serve; empty: every item.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Globs of items never to serve, whatever `allow` says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// What the client sees of an item instead of what the backend says, by the
    /// backend's name for it (tools and prompts).
    #[serde(default, rename = "override", skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, Override>,
}

/// What a client sees of one item instead of the backend's own words.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Override {
    /// The name to serve (namespaced like any other: `server__name` for a
    /// prefixed backend). Calls still reach the backend under its own name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The title to show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The description to give (what a model reads to choose the tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Filter {
    /// Whether this filter serves everything as the backend says it (the default).
    pub fn is_everything(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty() && self.overrides.is_empty()
    }

    /// Whether the item the backend calls `name` is served.
    pub fn serves(&self, name: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|p| glob(p, name))) && !self.deny.iter().any(|p| glob(p, name))
    }

    /// Whether the resource at `uri` (or the template) is served, matched as the
    /// backend will understand it ([`crate::uri::normalize`]: dot segments, percent
    /// escapes, duplicate slashes, the case of scheme and host), patterns alike. A
    /// URI that cannot be normalised is not served. Deny patterns also match
    /// whatever the case (a case-insensitive file system reads `/SRV/PRIV` as
    /// `/srv/priv`); allow patterns match the case they name.
    pub fn serves_resource(&self, uri: &str) -> bool {
        if self.allow.is_empty() && self.deny.is_empty() {
            return true;
        }
        let Some(uri) = crate::uri::normalize(uri) else { return false };
        let pattern = |p: &String| crate::uri::normalize(p).unwrap_or_else(|| p.clone());
        let lower = uri.to_lowercase();
        (self.allow.is_empty() || self.allow.iter().any(|p| glob(&pattern(p), &uri)))
            && !self.deny.iter().any(|p| glob(&pattern(p).to_lowercase(), &lower))
    }

    /// The override for the item the backend calls `name`, if any.
    pub fn override_for(&self, name: &str) -> Option<&Override> {
        self.overrides.get(name)
    }

    /// What is wrong with the filter, if anything: an empty pattern, or an
    /// override that renames to an empty name.
    pub fn check(&self) -> Result<(), String> {
        if self.allow.iter().chain(&self.deny).any(String::is_empty) {
            return Err("a pattern is empty".into());
        }
        for (name, o) in &self.overrides {
            if o.name.as_deref().is_some_and(str::is_empty) {
                return Err(alloc::format!("override.{name}.name is empty"));
            }
        }
        Ok(())
    }
}

impl Selection {
    /// The filter for one kind of list (resource templates share the resources').
    pub(crate) fn filter(&self, kind: crate::catalog::ListKind) -> &Filter {
        use crate::catalog::ListKind;
        match kind {
            ListKind::Tools => &self.tools,
            ListKind::Prompts => &self.prompts,
            ListKind::Resources | ListKind::ResourceTemplates => &self.resources,
        }
    }

    /// Whether everything is served as the backend says it (the default).
    pub fn is_everything(&self) -> bool {
        self.tools.is_everything() && self.prompts.is_everything() && self.resources.is_everything()
    }
}

/// Whether `text` matches the glob `pattern` (`*`: any run, `?`: one character).
/// Linear in practice: the classic greedy match with one backtrack point.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and where in the text it started matching.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                // Let the last `*` take one more character, and retry.
                Some((sp, st)) => {
                    star = Some((sp, st + 1));
                    pi = sp + 1;
                    ti = st + 1;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    #[test]
    fn globs_match_runs_and_single_characters() {
        assert!(glob("read_*", "read_file"));
        assert!(glob("read_*", "read_"));
        assert!(!glob("read_*", "write_file"));
        assert!(glob("*file*", "read_text_file"));
        assert!(glob("*_file", "write_file"));
        assert!(!glob("*_file", "write_files"));
        assert!(glob("get_?", "get_x"));
        assert!(!glob("get_?", "get_xy"));
        assert!(glob("*", ""));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "Exact"), "case-sensitive");
        assert!(glob("file:///home/*/docs/*", "file:///home/me/docs/a.md"));
        assert!(glob("a*b*c", "axxbyybzc"));
        assert!(!glob("a*b*c", "axxbyyb"));
        assert!(glob("**x", "x"));
        assert!(glob("é*", "éa"), "characters, not bytes");
    }

    #[test]
    fn deny_wins_over_allow_and_an_empty_allow_serves_everything() {
        let f = Filter {
            allow: vec!["read_*".into(), "list_*".into()],
            deny: vec!["*_media_*".into()],
            ..Default::default()
        };
        assert!(f.serves("read_file"));
        assert!(f.serves("list_directory"));
        assert!(!f.serves("read_media_file"));
        assert!(!f.serves("write_file"));
        let only_deny = Filter { deny: vec!["write_file".into()], ..Default::default() };
        assert!(only_deny.serves("anything"));
        assert!(!only_deny.serves("write_file"));
        assert!(Filter::default().serves("x"));
    }

    #[test]
    fn resource_rules_see_the_uri_the_backend_will_read() {
        let allow = Filter { allow: vec!["file:///srv/pub/*".into()], ..Default::default() };
        assert!(allow.serves_resource("file:///srv/pub/notes.txt"));
        assert!(allow.serves_resource("FILE:///srv/pub/./notes.txt"));
        for walk in [
            "file:///srv/pub/../priv/secret.txt",
            "file:///srv/pub/%2e%2e/priv/secret.txt",
            "file:///srv/pub/..%2fpriv/secret.txt",
            "file:///srv/pub/..\\priv\\secret.txt",
            "file:///srv/pub/%zz",
        ] {
            assert!(!allow.serves_resource(walk), "{walk}");
        }
        let deny = Filter { deny: vec!["file:///srv/priv/*".into()], ..Default::default() };
        for walk in [
            "file:///srv/priv/secret.txt",
            "file:///srv//priv/secret.txt",
            "file:///srv/./priv/secret.txt",
            "file:///x/../srv/priv/secret.txt",
            "file:///srv/%70riv/secret.txt",
            "file:///SRV/PRIV/secret.txt",
            "file:///srv/priv%00/secret.txt",
        ] {
            assert!(!deny.serves_resource(walk), "{walk}");
        }
        assert!(deny.serves_resource("file:///srv/pub/x"));
        assert!(Filter::default().serves_resource("anything at all"), "no rule, nothing to match");
    }

    #[test]
    fn the_config_shape_reads_and_checks() {
        let s: Selection = serde_json::from_str(
            r#"{"tools": {"deny": ["write_*"], "override": {"search": {"name": "find_notes", "description": "d"}}}}"#,
        )
        .unwrap();
        assert_eq!(s.tools.override_for("search").and_then(|o| o.name.as_deref()), Some("find_notes"));
        assert!(s.prompts.is_everything() && !s.is_everything());
        assert!(serde_json::from_str::<Selection>(r#"{"tools": {"alow": []}}"#).is_err());
        let empty = Filter { deny: vec!["".to_string()], ..Default::default() };
        assert!(empty.check().is_err());
        // The default serializes to nothing, so traces recorded before stay as they were.
        assert_eq!(serde_json::to_string(&Selection::default()).unwrap(), "{}");
    }
}
