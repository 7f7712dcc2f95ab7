//! What a client may see and call, by the OAuth scopes its access token carries:
//! the mapping an organisation writes in the config ("a token with `tools:time`
//! sees the `time` server; one with `echo` sees `everything__echo`").
//!
//! The transport that checks tokens tells the engine each session's scopes
//! ([`crate::Input::ClientAccess`]); the engine decides from them, against the
//! mapping of the config in force (so a reload applies to sessions already
//! open). A session whose scopes were never given (stdio, a static bearer token)
//! sees everything; so does every session while the mapping is empty. Otherwise
//! a session sees the union of what its scopes grant, and nothing else: what it
//! may not call is neither listed, nor searchable, nor callable, nor named in an
//! error (an unknown name and a withheld one get the same answer).

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::selection::glob;

/// What one scope grants.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeGrant {
    /// Globs of server names (as in the config) whose tools, prompts and
    /// resources the scope grants whole, and which its holder may see in
    /// `list_servers`, `server_events` and reconnect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// Globs of tool names as clients see them (`everything__echo`): single tools
    /// of servers not granted whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

/// The scope mapping of a config: scope name to what it grants.
pub type ScopeMap = BTreeMap<String, ScopeGrant>;

/// Checks a mapping: scope names are scope tokens (RFC 6749 §3.3: printable
/// ASCII without space, `"` or `\`), patterns are not empty, and every scope
/// grants something.
pub fn check(scopes: &ScopeMap) -> Result<(), (String, &'static str)> {
    for (name, grant) in scopes {
        if !is_scope_token(name) {
            return Err((name.clone(), "a scope name is 1 or more printable ASCII characters, no space, \" or \\"));
        }
        if grant.servers.is_empty() && grant.tools.is_empty() {
            return Err((name.clone(), "grants nothing: give it servers or tools"));
        }
        if grant.servers.iter().chain(&grant.tools).any(String::is_empty) {
            return Err((name.clone(), "a pattern is empty"));
        }
    }
    Ok(())
}

/// Whether `scope` is a scope token (RFC 6749 §3.3): printable ASCII, no space,
/// `"` or `\`. Scopes end up quoted in `WWW-Authenticate` challenges.
pub fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty() && scope.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// A session's access: the scopes it holds, judged against a mapping.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    mapping: &'a ScopeMap,
    /// `None`: the transport gave no scopes (everything is visible).
    held: Option<&'a [String]>,
}

impl<'a> Access<'a> {
    /// The access of a session holding `held` (`None`: not restricted) under `mapping`.
    pub fn new(mapping: &'a ScopeMap, held: Option<&'a [String]>) -> Self {
        Access { mapping, held }
    }

    /// Whether nothing is withheld from this session.
    pub fn is_unrestricted(&self) -> bool {
        self.held.is_none() || self.mapping.is_empty()
    }

    fn grants(&self) -> impl Iterator<Item = &'a ScopeGrant> + 'a {
        let mapping = self.mapping;
        self.held.unwrap_or(&[]).iter().filter_map(move |s| mapping.get(s))
    }

    /// Whether the session is granted `server` whole.
    pub fn server(&self, server: &str) -> bool {
        self.is_unrestricted() || self.grants().any(|g| g.servers.iter().any(|p| glob(p, server)))
    }

    /// Whether the session may see and call the tool clients know as `served`, of `server`.
    pub fn tool(&self, server: &str, served: &str) -> bool {
        self.server(server) || self.grants().any(|g| g.tools.iter().any(|p| glob(p, served)))
    }

    /// Whether the session may see `server` at all (whole, or one of its tools):
    /// in `list_servers` and in events.
    pub fn sees_server(&self, server: &str, mut tools: impl Iterator<Item = &'a str>) -> bool {
        self.server(server) || (!self.is_unrestricted() && tools.any(|t| self.tool(server, t)))
    }
}

/// Every scope a mapping names, in order (for the protected resource metadata).
pub fn scope_names(scopes: &ScopeMap) -> impl Iterator<Item = &str> {
    scopes.keys().map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    fn mapping() -> ScopeMap {
        let mut m = ScopeMap::new();
        m.insert("time".into(), ScopeGrant { servers: vec!["time".into()], tools: vec![] });
        m.insert("echo".into(), ScopeGrant { servers: vec![], tools: vec!["everything__echo".into()] });
        m
    }

    #[test]
    fn scopes_grant_the_union_of_their_servers_and_tools() {
        let m = mapping();
        let held = ["time".to_string(), "other".to_string()];
        let a = Access::new(&m, Some(&held));
        assert!(a.server("time") && a.tool("time", "time__now"));
        assert!(!a.server("everything") && !a.tool("everything", "everything__echo"));
        let both = ["time".to_string(), "echo".to_string()];
        let b = Access::new(&m, Some(&both));
        assert!(b.tool("everything", "everything__echo") && !b.tool("everything", "everything__add"));
        assert!(!b.server("everything"), "one tool does not grant its server");
        assert!(b.sees_server("everything", ["everything__add", "everything__echo"].into_iter()));
        assert!(!a.sees_server("everything", ["everything__echo"].into_iter()));
    }

    #[test]
    fn no_scopes_given_or_no_mapping_withholds_nothing() {
        let m = mapping();
        assert!(Access::new(&m, None).tool("everything", "everything__add"));
        let none: [String; 0] = [];
        assert!(!Access::new(&m, Some(&none)).tool("time", "time__now"), "a token without a mapped scope sees nothing");
        assert!(Access::new(&ScopeMap::new(), Some(&none)).tool("time", "time__now"));
    }

    #[test]
    fn bad_mappings_are_named() {
        let mut m = mapping();
        m.insert("has space".into(), ScopeGrant { servers: vec!["x".into()], tools: vec![] });
        assert_eq!(check(&m).unwrap_err().0, "has space");
        let mut m = mapping();
        m.insert("empty".into(), ScopeGrant::default());
        assert_eq!(check(&m).unwrap_err().0, "empty");
        assert!(check(&mapping()).is_ok());
    }
}
