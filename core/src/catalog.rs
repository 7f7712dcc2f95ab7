//! Tools, resources, resource templates and prompts of every backend, and the
//! names under which clients see them.
//!
//! Namespacing works both ways through lookup tables, never by splitting strings:
//! a served name maps to its backend and original name, so any separator is
//! unambiguous. Served names stay within `[A-Za-z0-9_-]{1,64}`; anything longer or
//! with other characters is shortened reversibly (a hash suffix, kept in the table).
//! Resource URIs get a per-backend scheme prefix (`fs+file:///x`), which every
//! client SDK still accepts as a URI and which round-trips exactly.
//!
//! The catalog keeps what a backend last listed whatever its status; callers pass
//! a visibility predicate when serving. What the config hides of a backend (its
//! [`Selection`]) is kept aside, unserved, so that a changed selection applies
//! without asking the backend again, and a call to a hidden name gets an answer
//! that says why.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write;
use serde_json::{Map, Value};

use crate::config::is_name_byte;
use crate::param_headers::{self, ParamHeader};
use crate::selection::{Filter, Selection};

/// Longest served tool or prompt name.
pub const MAX_NAME_LEN: usize = 64;

/// The four lists a backend can offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListKind {
    /// `tools/list`
    Tools,
    /// `resources/list`
    Resources,
    /// `resources/templates/list`
    ResourceTemplates,
    /// `prompts/list`
    Prompts,
}

impl ListKind {
    /// All kinds, in discovery order.
    pub const ALL: [ListKind; 4] =
        [ListKind::Tools, ListKind::Resources, ListKind::ResourceTemplates, ListKind::Prompts];

    /// The list method.
    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Resources => "resources/list",
            ListKind::ResourceTemplates => "resources/templates/list",
            ListKind::Prompts => "prompts/list",
        }
    }

    /// The key of the array in the list result.
    pub fn result_key(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Resources => "resources",
            ListKind::ResourceTemplates => "resourceTemplates",
            ListKind::Prompts => "prompts",
        }
    }

    /// The server capability that announces this list.
    pub fn capability(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Resources | ListKind::ResourceTemplates => "resources",
            ListKind::Prompts => "prompts",
        }
    }

    /// The notification a client gets when the visible list changes.
    pub fn list_changed(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Resources | ListKind::ResourceTemplates => "notifications/resources/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
        }
    }

    /// The list kind a list method asks for.
    pub fn from_method(method: &str) -> Option<ListKind> {
        ListKind::ALL.into_iter().find(|k| k.method() == method)
    }

    fn index(self) -> usize {
        self as usize
    }

    fn cursor_tag(self) -> char {
        match self {
            ListKind::Tools => 't',
            ListKind::Resources => 'r',
            ListKind::ResourceTemplates => 'u',
            ListKind::Prompts => 'p',
        }
    }

    /// The field that names an item (`name`, `uri` or `uriTemplate`).
    fn key_field(self) -> &'static str {
        match self {
            ListKind::Tools | ListKind::Prompts => "name",
            ListKind::Resources => "uri",
            ListKind::ResourceTemplates => "uriTemplate",
        }
    }
}

/// One tool, resource, template or prompt as a client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Name (or URI) at the backend.
    pub original: String,
    /// Name (or URI) served to clients.
    pub served: String,
    /// The item's JSON with the served name and URIs substituted; `_meta` kept.
    pub json: String,
    /// Tool annotations say it is read-only or idempotent: safe to retry.
    pub retry_safe: bool,
    /// Estimated tokens of a tool definition: (name + description + schema) chars / 4.
    pub estimated_tokens: u32,
    /// The tool's arguments mirrored into `Mcp-Param-*` headers on HTTP, read
    /// once here from its `inputSchema` (empty for nearly every tool).
    pub param_headers: Vec<ParamHeader>,
    /// What the tool says about running as a task (`execution.taskSupport`).
    pub task_support: TaskSupport,
    /// The item carries an `execution` object (what a client is told of tasks
    /// goes in there).
    lists_execution: bool,
    /// The item as the backend listed it, kept when the config overrides what
    /// clients see of it (so a changed selection can start from the original).
    raw: Option<alloc::boxed::Box<Map<String, Value>>>,
    /// Where the backend listed it, so a changed selection keeps its order.
    position: usize,
}

impl Entry {
    /// Whether the item carries an `execution` object.
    pub(crate) fn lists_execution(&self) -> bool {
        self.lists_execution
    }
}

/// What a tool says about running as a task (`execution.taskSupport`): whether
/// a client that declared tasks may, or must, get a task for a call of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskSupport {
    /// The tool says nothing: it may run as a task that tether keeps.
    #[default]
    Unspecified,
    /// `"forbidden"`: always answered directly.
    Forbidden,
    /// `"optional"`.
    Optional,
    /// `"required"`: only clients that take tasks may call it.
    Required,
}

impl TaskSupport {
    fn of(item: &Map<String, Value>) -> TaskSupport {
        match item.get("execution").and_then(|e| e.get("taskSupport")).and_then(Value::as_str) {
            Some("forbidden") => TaskSupport::Forbidden,
            Some("optional") => TaskSupport::Optional,
            Some("required") => TaskSupport::Required,
            _ => TaskSupport::Unspecified,
        }
    }
}

/// An item the config hides: never served, kept to apply a changed selection
/// and to tell a client that asks for it why it is not there.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hidden {
    /// The name (tools, prompts) or URI it would be served under.
    served: String,
    /// The item as the backend listed it.
    item: Map<String, Value>,
    /// Where the backend listed it.
    position: usize,
}

/// What one backend last listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendCatalog {
    lists: [Vec<Entry>; 4],
    /// What the selection hides of each list.
    hidden: [Vec<Hidden>; 4],
    /// Items not served for another reason (a name another item holds, an
    /// invalid definition), with where the backend listed them: kept so that a
    /// changed selection (which may free a name) can try them again.
    held: [Vec<(usize, Map<String, Value>)>; 4],
    discovered: bool,
    /// Some tool mirrors arguments into headers.
    mirrors_params: bool,
}

impl BackendCatalog {
    /// Items of one kind.
    pub fn entries(&self, kind: ListKind) -> &[Entry] {
        &self.lists[kind.index()]
    }

    /// Whether a discovery has ever completed, so the lists mean something.
    pub fn is_discovered(&self) -> bool {
        self.discovered
    }

    /// Number of tools.
    pub fn tool_count(&self) -> u32 {
        self.lists[0].len() as u32
    }

    /// Sum of estimated tokens over tools.
    pub fn estimated_tokens(&self) -> u32 {
        self.lists[0].iter().map(|e| e.estimated_tokens).sum()
    }

    /// Whether any tool mirrors arguments into headers: when none does (nearly
    /// always), a call needs no look at its tool's declarations.
    pub fn mirrors_params(&self) -> bool {
        self.mirrors_params
    }

    /// A tool by the backend's own name for it.
    pub fn tool(&self, original: &str) -> Option<&Entry> {
        self.lists[0].iter().find(|e| e.original == original)
    }
}

#[derive(Clone, Debug)]
struct Registration {
    prefixed: bool,
    alias: String,
    selection: Selection,
    catalog: BackendCatalog,
}

/// A served name, the backend behind it and that backend's name for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved<'a> {
    /// Backend.
    pub server: &'a str,
    /// The entry (original name, retry safety).
    pub entry: &'a Entry,
}

/// Every backend's lists plus the indexes that map served names back.
#[derive(Clone, Debug)]
pub struct Catalog {
    separator: String,
    backends: BTreeMap<String, Registration>,
    /// Served tool name -> backend and entry.
    tools: BTreeMap<String, Slot>,
    /// Served prompt name -> backend and entry.
    prompts: BTreeMap<String, Slot>,
    /// URI scheme alias -> backend.
    aliases: BTreeMap<String, String>,
    /// Bumped on every change, so callers can cache what they derive from it.
    version: u64,
}

/// Where a served tool or prompt name leads: its backend, and the position of
/// its entry in that backend's list (so a call finds it without a search).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Slot {
    server: String,
    entry: usize,
}

/// A name clash found while installing a list: the item was not served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The served name both items wanted.
    pub name: String,
}

/// A tool whose definition is invalid, so it is not served: clients of the
/// HTTP transport must leave out a tool with an invalid `x-mcp-header`
/// annotation, and one catalog serves every client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The tool's name at the backend.
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
}

/// What installing a backend's lists left out, for the caller to report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Installed {
    /// Items whose served name another item holds.
    pub conflicts: Vec<Conflict>,
    /// Tools with an invalid definition.
    pub rejected: Vec<Rejected>,
}

/// Bytes after which a page of a list served to clients ends (it then holds at
/// least one item): a catalog of large items reaches clients in pages of a few
/// megabytes, not in one frame of hundreds.
pub const PAGE_BYTES: usize = 4 * 1024 * 1024;

impl Catalog {
    /// An empty catalog joining backend and item names with `separator`.
    pub fn new(separator: &str) -> Self {
        Catalog {
            separator: separator.to_string(),
            backends: BTreeMap::new(),
            tools: BTreeMap::new(),
            prompts: BTreeMap::new(),
            aliases: BTreeMap::new(),
            version: 0,
        }
    }

    /// Changes whenever any list, name or registration changes.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Registers a backend (idempotent). Its URI alias is fixed here.
    pub fn register(&mut self, server: &str, prefixed: bool) {
        self.version += 1;
        if let Some(reg) = self.backends.get_mut(server) {
            if reg.prefixed != prefixed {
                reg.prefixed = prefixed;
                self.rekey(server, !prefixed);
            }
            return;
        }
        let alias = self.fresh_alias(server);
        self.aliases.insert(alias.clone(), server.to_string());
        let selection = Selection::default();
        let reg = Registration { prefixed, alias, selection, catalog: BackendCatalog::default() };
        self.backends.insert(server.to_string(), reg);
    }

    /// Sets which of a registered backend's items are served, and how; a change
    /// applies at once to what it last listed.
    /// Items another backend's names kept out are tried again, since a name the
    /// change freed may now be theirs.
    pub fn select(&mut self, server: &str, selection: &Selection) {
        let Some(reg) = self.backends.get_mut(server) else { return };
        if reg.selection == *selection {
            return;
        }
        self.version += 1;
        reg.selection = selection.clone();
        let prefixed = reg.prefixed;
        self.rekey(server, prefixed);
        let waiting: Vec<(String, bool)> = self
            .backends
            .iter()
            .filter(|(name, r)| name.as_str() != server && r.catalog.held.iter().any(|h| !h.is_empty()))
            .map(|(name, r)| (name.clone(), r.prefixed))
            .collect();
        for (name, prefixed) in waiting {
            self.rekey(&name, prefixed);
        }
    }

    /// The backend whose config hides the tool or prompt a client asked for by
    /// `served` name (`None`: no backend hides one of that name).
    pub fn hidden_by(&self, kind: ListKind, served: &str) -> Option<&str> {
        self.backends
            .iter()
            .find(|(_, r)| r.catalog.hidden[kind.index()].iter().any(|h| h.served == served))
            .map(|(name, _)| name.as_str())
    }

    /// Whether the config of `server` hides the resource at its `uri` (the
    /// backend's own URI), so it may not be read or subscribed to.
    fn hides_uri(&self, server: &str, uri: &str) -> bool {
        self.backends.get(server).is_some_and(|r| !r.selection.resources.serves_resource(uri))
    }

    /// Forgets a backend and its items.
    pub fn unregister(&mut self, server: &str) {
        self.version += 1;
        self.clear_index(server);
        if let Some(reg) = self.backends.remove(server) {
            self.aliases.remove(&reg.alias);
        }
    }

    /// The lists of one backend.
    pub fn backend(&self, server: &str) -> Option<&BackendCatalog> {
        self.backends.get(server).map(|r| &r.catalog)
    }

    /// The URI scheme alias of a backend (`fs` serves `fs+file:///x`).
    pub fn alias(&self, server: &str) -> Option<&str> {
        self.backends.get(server).map(|r| r.alias.as_str())
    }

    /// Replaces one backend's discovered lists (raw item objects as the backend sent
    /// them). Items whose served name another backend already holds are skipped and
    /// returned as conflicts; tools with invalid `x-mcp-header` annotations are
    /// skipped and returned as rejected.
    pub fn install(&mut self, server: &str, lists: [Vec<Map<String, Value>>; 4]) -> Installed {
        let raw = lists.map(|list| Some(list.into_iter().map(|m| Value::Object(m).to_string().into()).collect()));
        self.replace(server, raw)
    }

    /// [`Catalog::install`] of items as the backend sent them (raw JSON objects,
    /// parsed one at a time, so a large list is never held twice as parsed
    /// values); a kind given as `None` keeps what it holds (a backend re-listed
    /// one list on its `list_changed`).
    pub fn replace(&mut self, server: &str, mut lists: [Option<Vec<alloc::boxed::Box<str>>>; 4]) -> Installed {
        self.version += 1;
        let Some(reg) = self.backends.get_mut(server) else {
            return Installed::default();
        };
        let (prefixed, alias, selection) = (reg.prefixed, reg.alias.clone(), reg.selection.clone());
        let mut kept = core::mem::take(&mut reg.catalog);
        let replaced = |kind: ListKind| lists[kind.index()].is_some();
        self.tools.retain(|_, slot| slot.server != server || !replaced(ListKind::Tools));
        self.prompts.retain(|_, slot| slot.server != server || !replaced(ListKind::Prompts));
        let mut conflicts = Vec::new();
        let mut rejected = Vec::new();
        let mut built: [Vec<Entry>; 4] = Default::default();
        let mut hidden: [Vec<Hidden>; 4] = Default::default();
        let mut held: [Vec<(usize, Map<String, Value>)>; 4] = Default::default();
        for kind in ListKind::ALL {
            let k = kind.index();
            let Some(items) = lists[k].take() else {
                built[k] = core::mem::take(&mut kept.lists[k]);
                hidden[k] = core::mem::take(&mut kept.hidden[k]);
                held[k] = core::mem::take(&mut kept.held[k]);
                continue;
            };
            let mut seen = BTreeMap::new();
            let filter = selection.filter(kind);
            // Each item's text is dropped once its entry is built.
            let parsed = items.into_iter().filter_map(|raw| serde_json::from_str::<Map<String, Value>>(&raw).ok());
            for (position, item) in parsed.enumerate() {
                let item = &item;
                let key = item.get(kind.key_field()).and_then(Value::as_str).unwrap_or("");
                let shown = match kind {
                    ListKind::Resources | ListKind::ResourceTemplates => filter.serves_resource(key),
                    ListKind::Tools | ListKind::Prompts => filter.serves(key),
                };
                if !key.is_empty() && !shown {
                    let served = self.served_key(server, prefixed, &alias, kind, key, filter);
                    hidden[kind.index()].push(Hidden { served, item: item.clone(), position });
                    continue;
                }
                let param_headers = match kind {
                    ListKind::Tools => match item.get("inputSchema").map(param_headers::declarations) {
                        None => Vec::new(),
                        Some(Ok(declared)) => declared,
                        Some(Err(reason)) => {
                            let name = item.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                            rejected.push(Rejected { name, reason });
                            held[kind.index()].push((position, item.clone()));
                            continue;
                        }
                    },
                    _ => Vec::new(),
                };
                let Some(mut entry) = self.build_entry(server, (prefixed, &alias), kind, item, filter, param_headers)
                else {
                    continue;
                };
                entry.position = position;
                let index = match kind {
                    ListKind::Tools => Some(&mut self.tools),
                    ListKind::Prompts => Some(&mut self.prompts),
                    _ => None,
                };
                if seen.insert(entry.served.clone(), ()).is_some() {
                    conflicts.push(Conflict { name: entry.served });
                    held[kind.index()].push((position, item.clone()));
                    continue;
                }
                if let Some(index) = index {
                    if index.contains_key(&entry.served) {
                        conflicts.push(Conflict { name: entry.served });
                        held[kind.index()].push((position, item.clone()));
                        continue;
                    }
                    let slot = Slot { server: server.to_string(), entry: built[kind.index()].len() };
                    index.insert(entry.served.clone(), slot);
                }
                built[kind.index()].push(entry);
            }
        }
        let mirrors_params = built[ListKind::Tools.index()].iter().any(|e| !e.param_headers.is_empty());
        if let Some(reg) = self.backends.get_mut(server) {
            reg.catalog = BackendCatalog { lists: built, hidden, held, discovered: true, mirrors_params };
        }
        Installed { conflicts, rejected }
    }

    /// Whether any backend's tool mirrors arguments into headers.
    pub fn mirrors_params(&self) -> bool {
        self.backends.values().any(|r| r.catalog.mirrors_params)
    }

    /// The backend and entry behind a served tool name.
    pub fn resolve_tool(&self, served: &str) -> Option<Resolved<'_>> {
        self.resolve(&self.tools, ListKind::Tools, served)
    }

    /// The backend and entry behind a served prompt name.
    pub fn resolve_prompt(&self, served: &str) -> Option<Resolved<'_>> {
        self.resolve(&self.prompts, ListKind::Prompts, served)
    }

    fn resolve<'a>(&'a self, index: &'a BTreeMap<String, Slot>, kind: ListKind, served: &str) -> Option<Resolved<'a>> {
        let slot = index.get(served)?;
        let entries = self.backends.get(&slot.server)?.catalog.entries(kind);
        let entry = entries.get(slot.entry).filter(|e| e.served == served);
        let entry = entry.or_else(|| entries.iter().find(|e| e.served == served))?;
        Some(Resolved { server: &slot.server, entry })
    }

    /// The backend and original URI behind a served URI: `fs+file:///x` -> `fs`,
    /// `file:///x` for a prefixed backend; an unprefixed backend serves its URIs
    /// unchanged, so a bare URI goes to the unprefixed backend that lists it, else
    /// whose template's fixed prefix matches it best, else the only unprefixed one.
    /// A URI the config hides resolves to nothing (see [`Catalog::hidden_uri`]).
    pub fn resolve_uri<'a>(&'a self, served: &'a str) -> Option<(&'a str, &'a str)> {
        self.locate_uri(served).filter(|(server, uri)| !self.hides_uri(server, uri))
    }

    /// The backend whose config hides the resource at the served URI a client
    /// asked for (`None`: none hides it).
    pub fn hidden_uri<'a>(&'a self, served: &'a str) -> Option<&'a str> {
        self.locate_uri(served).filter(|(server, uri)| self.hides_uri(server, uri)).map(|(server, _)| server)
    }

    fn locate_uri<'a>(&'a self, served: &'a str) -> Option<(&'a str, &'a str)> {
        if served.is_empty() {
            return None;
        }
        let unprefixed = || self.backends.iter().filter(|(_, r)| !r.prefixed);
        let listed =
            unprefixed().find(|(_, r)| r.catalog.entries(ListKind::Resources).iter().any(|e| e.served == served));
        if let Some((server, _)) = listed {
            return Some((server.as_str(), served));
        }
        if let Some((alias, rest)) = served.split_once('+') {
            if let Some(server) = self.aliases.get(alias) {
                if self.backends.get(server).is_some_and(|r| r.prefixed) && !rest.is_empty() {
                    return Some((server.as_str(), rest));
                }
            }
        }
        let fixed = |t: &str| t.split('{').next().unwrap_or("").len();
        let templated = unprefixed()
            .filter_map(|(server, r)| {
                let entries = r.catalog.entries(ListKind::ResourceTemplates).iter();
                let best =
                    entries.filter(|e| served.starts_with(&e.served[..fixed(&e.served)])).map(|e| fixed(&e.served));
                best.max().map(|len| (len, server))
            })
            .max_by_key(|(len, _)| *len);
        if let Some((_, server)) = templated {
            return Some((server.as_str(), served));
        }
        let mut all = unprefixed();
        match (all.next(), all.next()) {
            (Some((server, _)), None) => Some((server.as_str(), served)),
            _ => None,
        }
    }

    /// The URI a client sees for a backend's `uri` (itself for an unprefixed backend).
    pub fn serve_uri(&self, server: &str, uri: &str) -> Option<String> {
        let reg = self.backends.get(server)?;
        Some(if reg.prefixed { format!("{}+{uri}", reg.alias) } else { uri.to_string() })
    }

    /// Every item of `kind` that `keep` accepts (given its backend and the
    /// item), in a stable order.
    pub fn visible<'a>(
        &'a self,
        kind: ListKind,
        keep: impl Fn(&str, &Entry) -> bool + 'a,
    ) -> impl Iterator<Item = (&'a str, &'a Entry)> + 'a {
        self.backends
            .iter()
            .flat_map(move |(name, reg)| reg.catalog.entries(kind).iter().map(move |e| (name.as_str(), e)))
            .filter(move |(name, e)| keep(name, e))
    }

    /// A hash of what `keep` lets clients see of `kind`, to send `list_changed`
    /// only when the visible list really changed.
    pub fn visible_hash(&self, kind: ListKind, keep: impl Fn(&str, &Entry) -> bool) -> u64 {
        let mut h = Fnv::new();
        for (_, entry) in self.visible(kind, keep) {
            h.write(entry.json.as_bytes());
            h.write(&[0]);
        }
        h.finish()
    }

    /// One page of the aggregated list as a JSON result, with tether's own cursor.
    /// Errors when the cursor is not one tether issued for this kind.
    /// A page also ends once it holds [`PAGE_BYTES`] (after at least one item).
    pub fn page(
        &self,
        kind: ListKind,
        cursor: Option<&str>,
        page_size: usize,
        keep: impl Fn(&str, &Entry) -> bool,
    ) -> Result<String, ()> {
        self.page_edited(kind, cursor, page_size, keep, |_, _, _| false)
    }

    /// [`Catalog::page`], each item written by `edit` when it returns `true` (else
    /// as listed): for what one client must be told differently. `edit` gets the
    /// backend's name, the entry and the page to append the item to; returning
    /// `false`, it must have appended nothing.
    pub fn page_edited(
        &self,
        kind: ListKind,
        cursor: Option<&str>,
        page_size: usize,
        keep: impl Fn(&str, &Entry) -> bool,
        edit: impl Fn(&str, &Entry, &mut String) -> bool,
    ) -> Result<String, ()> {
        let start = match cursor {
            None => 0,
            Some(c) => {
                let mut chars = c.chars();
                if chars.next() != Some(kind.cursor_tag()) {
                    return Err(());
                }
                chars.as_str().parse::<usize>().map_err(|_| ())?
            }
        };
        let mut out = String::with_capacity(256);
        out.push_str("{\"");
        out.push_str(kind.result_key());
        out.push_str("\":[");
        let mut count = 0;
        let mut more = false;
        for (i, (server, entry)) in self.visible(kind, keep).enumerate().skip(start) {
            if count == page_size || out.len() >= PAGE_BYTES {
                more = i >= start;
                break;
            }
            if count > 0 {
                out.push(',');
            }
            if !edit(server, entry, &mut out) {
                out.push_str(&entry.json);
            }
            count += 1;
        }
        out.push(']');
        if more {
            let _ = write!(out, ",\"nextCursor\":\"{}{}\"", kind.cursor_tag(), start + count);
        }
        out.push('}');
        Ok(out)
    }

    /// Checks that served names are valid and unique and that every one resolves
    /// back to the entry it came from (used by invariant checks and fuzzing).
    pub fn check_invariants(&self) -> Result<(), String> {
        for (index, kind) in [(&self.tools, ListKind::Tools), (&self.prompts, ListKind::Prompts)] {
            let mut served = 0;
            for (server, reg) in &self.backends {
                for (position, entry) in reg.catalog.entries(kind).iter().enumerate() {
                    served += 1;
                    let name = &entry.served;
                    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.bytes().all(is_name_byte) {
                        return Err(format!("served name {name:?} is not a valid name"));
                    }
                    if index.get(name) != Some(&Slot { server: server.clone(), entry: position }) {
                        return Err(format!("served name {name:?} of {server} does not resolve back to it"));
                    }
                }
            }
            if served != index.len() {
                return Err(format!("{kind:?} index has {} names for {served} entries", index.len()));
            }
        }
        for (alias, server) in &self.aliases {
            if self.backends.get(server).map(|r| &r.alias) != Some(alias) {
                return Err(format!("alias {alias} does not belong to {server}"));
            }
        }
        Ok(())
    }

    /// Re-derives served names after a backend's `prefixed` flag changed
    /// (`was_prefixed`: the entries carry the old, aliased URIs).
    fn rekey(&mut self, server: &str, was_prefixed: bool) {
        let Some(reg) = self.backends.get(server) else { return };
        if !reg.catalog.discovered {
            return;
        }
        let mut lists: [Vec<Map<String, Value>>; 4] = Default::default();
        for kind in ListKind::ALL {
            // Served and hidden items, back in the order the backend listed them.
            let mut items: Vec<(usize, Map<String, Value>)> = Vec::new();
            for e in reg.catalog.entries(kind) {
                if let Some(raw) = &e.raw {
                    items.push((e.position, (**raw).clone()));
                } else if let Ok(Value::Object(mut m)) = serde_json::from_str::<Value>(&e.json) {
                    m.insert(kind.key_field().into(), Value::String(e.original.clone()));
                    if was_prefixed {
                        unalias_meta(&mut m, &reg.alias);
                    }
                    items.push((e.position, m));
                }
            }
            items.extend(reg.catalog.hidden[kind.index()].iter().map(|h| (h.position, h.item.clone())));
            items.extend(reg.catalog.held[kind.index()].iter().cloned());
            items.sort_by_key(|(position, _)| *position);
            lists[kind.index()] = items.into_iter().map(|(_, item)| item).collect();
        }
        self.install(server, lists);
    }

    fn clear_index(&mut self, server: &str) {
        self.tools.retain(|_, slot| slot.server != server);
        self.prompts.retain(|_, slot| slot.server != server);
    }

    fn fresh_alias(&self, server: &str) -> String {
        let mut base: String = server.chars().map(|c| if c == '_' { '-' } else { c.to_ascii_lowercase() }).collect();
        if !base.starts_with(|c: char| c.is_ascii_alphabetic()) {
            base.insert_str(0, "s-");
        }
        let mut alias = base.clone();
        let mut n = 2;
        while self.aliases.contains_key(&alias) {
            alias = format!("{base}-{n}");
            n += 1;
        }
        alias
    }

    /// The name (tools, prompts) or URI a client sees for the item the backend
    /// calls `key`.
    fn served_key(&self, server: &str, prefixed: bool, alias: &str, kind: ListKind, key: &str, filter: &Filter) -> String {
        match kind {
            ListKind::Tools | ListKind::Prompts => {
                let name = filter.override_for(key).and_then(|o| o.name.as_deref()).unwrap_or(key);
                served_name(&if prefixed { format!("{server}{}{name}", self.separator) } else { name.to_string() })
            }
            ListKind::Resources | ListKind::ResourceTemplates if prefixed => format!("{alias}+{key}"),
            ListKind::Resources | ListKind::ResourceTemplates => key.to_string(),
        }
    }

    fn build_entry(
        &self,
        server: &str,
        (prefixed, alias): (bool, &str),
        kind: ListKind,
        item: &Map<String, Value>,
        filter: &Filter,
        param_headers: Vec<ParamHeader>,
    ) -> Option<Entry> {
        let original = item.get(kind.key_field())?.as_str()?.to_string();
        if original.is_empty() {
            return None;
        }
        let served = self.served_key(server, prefixed, alias, kind, &original, filter);
        let mut obj = item.clone();
        obj.insert(kind.key_field().into(), Value::String(served.clone()));
        let overridden = filter.override_for(&original);
        if let Some(o) = overridden {
            for (field, text) in [("title", &o.title), ("description", &o.description)] {
                if let Some(text) = text {
                    obj.insert(field.into(), Value::String(text.clone()));
                }
            }
        }
        let raw = overridden.map(|_| alloc::boxed::Box::new(item.clone()));
        if prefixed {
            alias_meta(&mut obj, alias);
        }
        let annotations = item.get("annotations");
        let hint = |h: &str| annotations.and_then(|a| a.get(h)).and_then(Value::as_bool).unwrap_or(false);
        let retry_safe = kind == ListKind::Tools && (hint("readOnlyHint") || hint("idempotentHint"));
        let estimated_tokens = if kind == ListKind::Tools {
            let desc = obj.get("description").and_then(Value::as_str).map_or(0, str::len);
            let schema = item.get("inputSchema").map_or(0, |s| serde_json::to_string(s).map_or(0, |s| s.len()));
            ((original.len() + desc + schema) / 4) as u32
        } else {
            0
        };
        let mut json = serde_json::to_string(&obj).ok()?;
        // Written by doubling a buffer: kept at its length, not its capacity.
        json.shrink_to_fit();
        let task_support = if kind == ListKind::Tools { TaskSupport::of(item) } else { TaskSupport::Unspecified };
        let lists_execution = obj.contains_key("execution");
        Some(Entry {
            original,
            served,
            json,
            retry_safe,
            estimated_tokens,
            param_headers,
            task_support,
            lists_execution,
            raw,
            position: 0,
        })
    }
}

/// Rewrites `_meta.ui.resourceUri` (MCP Apps) to the served form.
fn alias_meta(obj: &mut Map<String, Value>, alias: &str) {
    if let Some(Value::String(uri)) =
        obj.get_mut("_meta").and_then(|m| m.get_mut("ui")).and_then(|ui| ui.get_mut("resourceUri"))
    {
        *uri = format!("{alias}+{uri}");
    }
}

fn unalias_meta(obj: &mut Map<String, Value>, alias: &str) {
    if let Some(Value::String(uri)) =
        obj.get_mut("_meta").and_then(|m| m.get_mut("ui")).and_then(|ui| ui.get_mut("resourceUri"))
    {
        if let Some(rest) = uri.strip_prefix(alias).and_then(|r| r.strip_prefix('+')) {
            *uri = rest.to_string();
        }
    }
}

/// The served form of a joined name: itself when it is valid, else a sanitized,
/// shortened form with a hash of the original, so distinct names stay distinct.
pub fn served_name(joined: &str) -> String {
    if !joined.is_empty() && joined.len() <= MAX_NAME_LEN && joined.bytes().all(is_name_byte) {
        return joined.to_string();
    }
    let mut h = Fnv::new();
    h.write(joined.as_bytes());
    let suffix = format!("_{:08x}", h.finish() as u32);
    let keep = MAX_NAME_LEN - suffix.len();
    let mut out: String =
        joined.chars().map(|c| if c.is_ascii() && is_name_byte(c as u8) { c } else { '_' }).take(keep).collect();
    out.push_str(&suffix);
    out
}

/// FNV-1a, 64 bit: a small, deterministic hash for names and list fingerprints.
#[derive(Clone, Copy, Debug)]
pub struct Fnv(u64);

impl Fnv {
    /// A fresh hasher.
    pub const fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    /// Feeds bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    /// The hash so far.
    pub const fn finish(self) -> u64 {
        self.0
    }
}

impl Default for Fnv {
    fn default() -> Self {
        Fnv::new()
    }
}

#[cfg(test)]
mod tests;
