//! `tether import`: copies the MCP servers of a client's configuration (Claude
//! Desktop, Cursor, VS Code, Claude Code, or any file of those shapes) into
//! tether's configuration file and, with `--rewrite`, points the client at tether.
//!
//! A file's servers are in one map or more: `mcpServers` (Claude, Cursor) or
//! `servers` (VS Code's `mcp.json`) at the top, `mcp.servers` in VS Code's
//! `settings.json`, and in Claude Code's `~/.claude.json` also the servers of the
//! project in the current directory (`projects.<dir>.mcpServers`), which win over
//! user-wide ones of the same name, as in Claude Code.
//!
//! Nothing is ever overwritten: a server tether's file already has with another
//! definition is a conflict, left as it is. The client's file is rewritten only
//! after tether's file was written, only when there was no conflict, and only
//! after a backup of it was made. Every write is a temporary file in the same
//! directory renamed over the target. Servers are added to tether's file as
//! inserted text, so its comments and layout stay; comments in a rewritten client
//! file do not (the backup has them).

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

use tether_host::config_file::{self, ConfigFileError, Node};

use crate::cli::{Cli, ImportArgs};

/// A client whose configuration file `tether import --from` knows where to find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// Claude Desktop's `claude_desktop_config.json`.
    ClaudeDesktop,
    /// Cursor's `~/.cursor/mcp.json`.
    Cursor,
    /// VS Code's `.vscode/mcp.json` in the current directory, else the user's
    /// `mcp.json`, else the `mcp` block of the user's `settings.json`.
    VsCode,
    /// Claude Code's `~/.claude.json`: its user-wide `mcpServers` and those of the
    /// project in the current directory.
    ClaudeCode,
}

/// What `--from` names: a known client, or a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A client's file at its usual place.
    Client(Client),
    /// A file with an `mcpServers` or `servers` map.
    File(PathBuf),
}

impl FromStr for Source {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "claude-desktop" => Source::Client(Client::ClaudeDesktop),
            "cursor" => Source::Client(Client::Cursor),
            "vscode" => Source::Client(Client::VsCode),
            "claude-code" => Source::Client(Client::ClaudeCode),
            "" => return Err("empty; expected claude-desktop, cursor, vscode, claude-code or a file".into()),
            path => Source::File(PathBuf::from(path)),
        })
    }
}

/// Where `client`'s configuration file is on `os` (`std::env::consts::OS`), with
/// variables from `env` and relative paths under `cwd`.
pub fn client_path(
    client: Client,
    os: &str,
    env: &dyn Fn(&str) -> Option<String>,
    cwd: &Path,
) -> Result<PathBuf, String> {
    let places = tether_host::locations::Locations::new(os, env);
    let home =
        || places.home().ok_or_else(|| "cannot find the home directory (set HOME); give --from PATH".to_string());
    // Where applications keep their settings: Application Support, %APPDATA%, XDG.
    let app_config =
        || places.app_config_dir().ok_or_else(|| "cannot find the settings folder; give --from PATH".to_string());
    Ok(match client {
        Client::ClaudeDesktop => app_config()?.join("Claude").join("claude_desktop_config.json"),
        Client::Cursor => home()?.join(".cursor").join("mcp.json"),
        Client::VsCode => {
            let workspace = cwd.join(".vscode").join("mcp.json");
            let user = app_config()?.join("Code").join("User");
            if workspace.is_file() {
                workspace
            } else if !user.join("mcp.json").is_file() && user.join("settings.json").is_file() {
                // Before VS Code had mcp.json, servers lived in settings.json's "mcp".
                user.join("settings.json")
            } else {
                user.join("mcp.json")
            }
        }
        Client::ClaudeCode => home()?.join(".claude.json"),
    })
}

/// One import, with every path explicit.
#[derive(Clone, Debug)]
pub struct Request {
    /// The client's configuration file.
    pub client_file: PathBuf,
    /// Tether's configuration file (created if absent).
    pub tether_file: PathBuf,
    /// The directory whose project servers to take from a Claude Code file (the
    /// current directory).
    pub project: Option<PathBuf>,
    /// The tether binary the rewritten client entry runs.
    pub tether_command: PathBuf,
    /// Point the client at tether once its servers are in tether's file.
    pub rewrite: bool,
    /// Report what would change, write nothing.
    pub dry_run: bool,
}

/// What happened (or, in a dry run, would happen) to the client's file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientChange {
    /// `--rewrite` was not given.
    NotAsked,
    /// Its server map already holds only the entry that runs tether.
    AlreadyTether,
    /// Not rewritten because of conflicts (its definitions would be lost from it).
    KeptForConflicts,
    /// Rewritten to run tether, after a copy to `backup`.
    Rewritten {
        /// The copy of the file as it was.
        backup: PathBuf,
    },
}

/// What an import did, printed by its `Display`.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The client's file.
    pub client_file: PathBuf,
    /// Tether's file.
    pub tether_file: PathBuf,
    /// The client's server maps, as a person reads them (`mcpServers`,
    /// `mcp.servers`, `mcpServers and projects["/home/me/app"].mcpServers`).
    pub client_key: String,
    /// Servers copied into tether's file.
    pub added: Vec<String>,
    /// Servers tether's file already had, defined the same.
    pub unchanged: Vec<String>,
    /// Servers tether's file already had, defined differently (left as they are).
    pub conflicts: Vec<String>,
    /// Client entries that run tether itself (never imported).
    pub skipped: Vec<String>,
    /// Whether tether's file was (or would be) written.
    pub tether_written: bool,
    /// Whether tether's file was created.
    pub tether_created: bool,
    /// What happened to the client's file.
    pub client: ClientChange,
    /// Nothing was written.
    pub dry_run: bool,
}

impl Outcome {
    /// 1 when there were conflicts, else 0.
    pub fn exit_code(&self) -> ExitCode {
        if self.conflicts.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (client, tether) = (self.client_file.display(), self.tether_file.display());
        let would = |done: &'static str, planned: &'static str| if self.dry_run { planned } else { done };
        writeln!(f, "Importing the {} of {client} into {tether}", self.client_key)?;
        for name in &self.added {
            writeln!(f, "  added      {name}")?;
        }
        for name in &self.unchanged {
            writeln!(f, "  unchanged  {name}")?;
        }
        for name in &self.conflicts {
            writeln!(f, "  conflict   {name}: {tether} already has a different definition; left as it is")?;
        }
        for name in &self.skipped {
            writeln!(f, "  skipped    {name}: it runs tether")?;
        }
        if self.tether_written {
            let verb = match (self.tether_created, self.dry_run) {
                (true, false) => "Created",
                (true, true) => "Would create",
                (false, _) => would("Wrote", "Would write"),
            };
            writeln!(f, "{verb} {tether} ({} server(s) added)", self.added.len())?;
        } else {
            writeln!(f, "{tether}: nothing to add")?;
        }
        match &self.client {
            ClientChange::NotAsked => {}
            ClientChange::AlreadyTether => writeln!(f, "{client} already points at tether; not rewritten")?,
            ClientChange::KeptForConflicts => {
                writeln!(f, "{client} not rewritten: resolve the conflicts first, then run it again")?
            }
            ClientChange::Rewritten { backup } => {
                writeln!(f, "{} {client} to {}", would("Backed up", "Would back up"), backup.display())?;
                let verb = would("Rewrote", "Would rewrite");
                writeln!(f, "{verb} {client}: its servers are now only \"tether\"")?;
            }
        }
        if !self.conflicts.is_empty() {
            let rest = if self.added.is_empty() && self.unchanged.is_empty() {
                String::new()
            } else {
                "; every other server is in tether's file".to_string()
            };
            writeln!(f, "{} conflict(s): {}{rest}", self.conflicts.len(), self.conflicts.join(", "))?;
        }
        if self.dry_run {
            writeln!(f, "(dry run: nothing written)")?;
        }
        Ok(())
    }
}

/// `tether import`: resolves the paths, imports, prints what changed.
pub fn run(cli: &Cli, args: &ImportArgs) -> Result<ExitCode, String> {
    let tether_file = tether_host::flags::config_path(cli.config.as_deref())
        .ok_or("no --config given and no default path (set HOME or TETHER_CONFIG)")?;
    let cwd = std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let client_file = match &args.from {
        Source::File(path) => cwd.join(path),
        Source::Client(client) => {
            let env = |name: &str| std::env::var_os(name).and_then(|v| v.into_string().ok());
            client_path(*client, std::env::consts::OS, &env, &cwd)?
        }
    };
    let tether_command =
        std::env::current_exe().map_err(|e| format!("cannot find the path of the tether binary: {e}"))?;
    let request = Request {
        client_file,
        tether_file: cwd.join(tether_file),
        project: Some(cwd.clone()),
        tether_command,
        rewrite: args.rewrite,
        dry_run: args.dry_run,
    };
    let outcome = import(&request)?;
    print!("{outcome}");
    Ok(outcome.exit_code())
}

/// Imports the client's servers into tether's file as `request` says. Errors
/// (a file that cannot be read or does not parse, a result tether could not
/// load, a failed write) leave both files as they were.
pub fn import(request: &Request) -> Result<Outcome, String> {
    let client_origin = request.client_file.display().to_string();
    let client_text = fs::read_to_string(&request.client_file).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{client_origin}: no such file (name another with --from CLIENT|PATH)"),
        _ => format!("{client_origin}: cannot read: {e}"),
    })?;
    let mut client_root = config_file::parse_jsonc(&client_text, &client_origin).map_err(|e| e.to_string())?;
    let maps = server_maps(&client_root, &client_origin, request.project.as_deref())?;
    let mut client_servers: Vec<(String, Node)> = Vec::new();
    for map in &maps {
        let what = format!("{client_origin}: {}", describe(map));
        for (name, entry) in dedup(object(lookup_path(&client_root, map), &what)?) {
            match client_servers.iter_mut().find(|(k, _)| *k == name) {
                Some(slot) => slot.1 = entry,
                None => client_servers.push((name, entry)),
            }
        }
    }
    let client_key = maps.iter().map(|m| describe(m)).collect::<Vec<_>>().join(" and ");

    let tether_origin = request.tether_file.display().to_string();
    let tether_created = !request.tether_file.exists();
    let tether_text = if tether_created {
        None
    } else {
        Some(fs::read_to_string(&request.tether_file).map_err(|e| format!("{tether_origin}: cannot read: {e}"))?)
    };
    let mut tether_root = match &tether_text {
        None => Node::Object(Vec::new()),
        Some(text) => config_file::parse_jsonc(text, &tether_origin).map_err(|e| e.to_string())?,
    };
    let had_key = server_key(&tether_root, &tether_origin)?;
    let tether_key = had_key.unwrap_or("mcpServers");

    let mut outcome = Outcome {
        client_file: request.client_file.clone(),
        tether_file: request.tether_file.clone(),
        client_key,
        added: Vec::new(),
        unchanged: Vec::new(),
        conflicts: Vec::new(),
        skipped: Vec::new(),
        tether_written: false,
        tether_created,
        client: ClientChange::NotAsked,
        dry_run: request.dry_run,
    };
    {
        let tether_servers = object_entry_mut(&mut tether_root, tether_key, &tether_origin)?;
        for (name, entry) in &client_servers {
            if runs_tether(entry) {
                outcome.skipped.push(name.clone());
                continue;
            }
            match tether_servers.iter().rev().find(|(k, _)| k == name) {
                None => {
                    tether_servers.push((name.clone(), entry.clone()));
                    outcome.added.push(name.clone());
                }
                Some((_, existing)) if existing.to_value() == entry.to_value() => outcome.unchanged.push(name.clone()),
                Some(_) => outcome.conflicts.push(name.clone()),
            }
        }
    }

    if !outcome.added.is_empty() {
        let text = match &tether_text {
            Some(text) => in_place(text, had_key, &client_servers, &outcome.added, &tether_root),
            None => None,
        };
        let text = match text {
            Some(text) => text,
            None => pretty(&tether_root)?,
        };
        check_loads(&text, &tether_origin)?;
        if !request.dry_run {
            write_atomically(&request.tether_file, &text).map_err(|e| format!("{tether_origin}: cannot write: {e}"))?;
        }
        outcome.tether_written = true;
    }

    if request.rewrite {
        outcome.client = if !outcome.conflicts.is_empty() {
            ClientChange::KeptForConflicts
        } else {
            let primary = &maps[0];
            let shape = primary.last().map_or("mcpServers", String::as_str);
            let entry = tether_entry(&request.tether_command, &request.tether_file, shape);
            let servers = vec![("tether".to_string(), entry)];
            if client_servers == servers {
                ClientChange::AlreadyTether
            } else {
                // tether now serves every imported map's servers: the first map runs
                // tether, the others (a project's) are emptied.
                set_path(&mut client_root, primary, Node::Object(servers));
                for map in &maps[1..] {
                    set_path(&mut client_root, map, Node::Object(Vec::new()));
                }
                let text = pretty(&client_root)?;
                let backup = backup_path(&request.client_file, now_utc_stamp());
                if !request.dry_run {
                    copy_new(&request.client_file, &backup)
                        .map_err(|e| format!("{}: cannot write the backup: {e}", backup.display()))?;
                    write_atomically(&request.client_file, &text)
                        .map_err(|e| format!("{client_origin}: cannot write: {e}"))?;
                }
                ClientChange::Rewritten { backup }
            }
        };
    }
    Ok(outcome)
}

/// Tether's file `text` with the `added` servers of `client` inserted as text, so
/// its comments and layout stay; `None` (write it whole) unless the result reads
/// back as exactly `expected`.
fn in_place(
    text: &str,
    key: Option<&str>,
    client: &[(String, Node)],
    added: &[String],
    expected: &Node,
) -> Option<String> {
    let entries: Vec<(String, Node)> = client.iter().filter(|(name, _)| added.contains(name)).cloned().collect();
    let spliced = match key {
        Some(key) => splice::add_entries(text, &[key], &entries)?,
        None => splice::add_entries(text, &[], &[("mcpServers".to_string(), Node::Object(entries))])?,
    };
    let reread = config_file::parse_jsonc(&spliced, "").ok()?;
    (reread.to_value() == expected.to_value()).then_some(spliced)
}

/// The entry a client runs tether with: `command` and `args` (and `"type":
/// "stdio"` in VS Code's `servers` shape, which expects one).
pub fn tether_entry(command: &Path, tether_file: &Path, key: &str) -> Node {
    let string = |s: &str| Node::String(s.to_string());
    let mut entry = Vec::new();
    if key == "servers" {
        entry.push(("type".to_string(), string("stdio")));
    }
    entry.push(("command".to_string(), string(&command.to_string_lossy())));
    let args = vec![string("--config"), string(&tether_file.to_string_lossy())];
    entry.push(("args".to_string(), Node::Array(args)));
    Node::Object(entry)
}

/// Whether a client entry runs tether (its command's file name is `tether`,
/// `.exe` and case aside).
fn runs_tether(entry: &Node) -> bool {
    let Some(Node::String(command)) = lookup(entry, "command") else { return false };
    let name = command.rsplit(['/', '\\']).next().unwrap_or(command);
    let name = if name.len() > 4 && name[name.len() - 4..].eq_ignore_ascii_case(".exe") {
        &name[..name.len() - 4]
    } else {
        name
    };
    name.eq_ignore_ascii_case("tether")
}

/// The server maps of a client's file, each as its keys from the root: the map at
/// the top (`mcpServers` or `servers`), else VS Code settings' `mcp.servers`; then
/// the Claude Code project's of `project` when it has servers. An error when there
/// is none.
fn server_maps(root: &Node, origin: &str, project: Option<&Path>) -> Result<Vec<Vec<String>>, String> {
    let mut maps = Vec::new();
    if let Some(key) = server_key(root, origin)? {
        maps.push(vec![key.to_string()]);
    } else if lookup(root, "mcp").and_then(|mcp| lookup(mcp, "servers")).is_some() {
        maps.push(vec!["mcp".to_string(), "servers".to_string()]);
    }
    if let (Some(project), Some(Node::Object(projects))) = (project, lookup(root, "projects")) {
        let wanted = project.to_string_lossy();
        let same = |key: &str| key == wanted || key.replace('\\', "/") == wanted.replace('\\', "/");
        let found = projects.iter().rev().find(|(key, _)| same(key));
        if let Some((key, project)) = found {
            if matches!(lookup(project, "mcpServers"), Some(Node::Object(servers)) if !servers.is_empty()) {
                maps.push(vec!["projects".to_string(), key.clone(), "mcpServers".to_string()]);
            }
        }
    }
    if maps.is_empty() {
        return Err(format!("{origin}: has no \"mcpServers\" or \"servers\" map"));
    }
    Ok(maps)
}

/// A map's keys as a person reads them: `mcp.servers`, `projects["/app"].mcpServers`.
fn describe(map: &[String]) -> String {
    match map {
        [projects, dir, key] if projects == "projects" => format!("projects[{dir:?}].{key}"),
        keys => keys.join("."),
    }
}

/// The node at `path` (keys from the root).
fn lookup_path<'a>(root: &'a Node, path: &[String]) -> Option<&'a Node> {
    path.iter().try_fold(root, |node, key| lookup(node, key))
}

/// Sets the node at `path`, whose parents exist (they were found by [`server_maps`]).
fn set_path(root: &mut Node, path: &[String], value: Node) {
    match path {
        [] => {}
        [key] => set_key(root, key, value),
        [key, rest @ ..] => {
            if let Node::Object(entries) = root {
                if let Some((_, child)) = entries.iter_mut().rev().find(|(k, _)| k == key) {
                    set_path(child, rest, value);
                }
            }
        }
    }
}

/// Which of `mcpServers` and `servers` the file has (an error if both).
fn server_key(root: &Node, origin: &str) -> Result<Option<&'static str>, String> {
    if !matches!(root, Node::Object(_)) {
        return Err(format!("{origin}: the top level must be a JSON object"));
    }
    let present: Vec<_> = ["mcpServers", "servers"].into_iter().filter(|k| lookup(root, k).is_some()).collect();
    match present[..] {
        [] => Ok(None),
        [key] => Ok(Some(key)),
        _ => Err(format!("{origin}: both \"mcpServers\" and \"servers\" are present; keep only one")),
    }
}

/// `key`'s (last) value in the object `node`, an explicit `null` counting as absent.
fn lookup<'a>(node: &'a Node, key: &str) -> Option<&'a Node> {
    match node {
        Node::Object(entries) => {
            entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v).filter(|v| **v != Node::Null)
        }
        _ => None,
    }
}

fn object<'a>(node: Option<&'a Node>, what: &str) -> Result<&'a [(String, Node)], String> {
    match node {
        Some(Node::Object(entries)) => Ok(entries),
        _ => Err(format!("{what} must be an object mapping server names to entries")),
    }
}

/// The entries with a repeated name kept once, at its first place, with its last value.
fn dedup(entries: &[(String, Node)]) -> Vec<(String, Node)> {
    let mut out: Vec<(String, Node)> = Vec::new();
    for (name, value) in entries {
        match out.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value.clone(),
            None => out.push((name.clone(), value.clone())),
        }
    }
    out
}

/// The object under `key` in `root`, added (empty) if absent.
fn object_entry_mut<'a>(root: &'a mut Node, key: &str, origin: &str) -> Result<&'a mut Vec<(String, Node)>, String> {
    if lookup(root, key).is_none() {
        set_key(root, key, Node::Object(Vec::new()));
    }
    let Node::Object(entries) = root else { unreachable!("checked by server_key") };
    match entries.iter_mut().rev().find(|(k, _)| k == key) {
        Some((_, Node::Object(servers))) => Ok(servers),
        _ => Err(format!("{origin}: {key} must be an object mapping server names to entries")),
    }
}

/// Sets `key` in the object `root` to `value`: at its first place if present
/// (other occurrences dropped), else at the end.
fn set_key(root: &mut Node, key: &str, value: Node) {
    let Node::Object(entries) = root else { return };
    match entries.iter().position(|(k, _)| k == key) {
        Some(at) => {
            entries[at].1 = value;
            let mut index = 0;
            entries.retain(|(k, _)| {
                index += 1;
                index - 1 == at || k != key
            });
        }
        None => entries.push((key.to_string(), value)),
    }
}

fn pretty(root: &Node) -> Result<String, String> {
    serde_json::to_string_pretty(root).map(|text| text + "\n").map_err(|e| e.to_string())
}

/// Refuses a tether file tether could not load. An unset `${VAR}` is not held
/// against it: the variable may be set where tether runs.
fn check_loads(text: &str, origin: &str) -> Result<(), String> {
    let env = |name: &str| std::env::var(name).ok();
    let problems = match config_file::parse(text, origin, &env) {
        Ok(_) => return Ok(()),
        Err(ConfigFileError::Invalid { path, message, .. }) => vec![config_file::Problem { path, message }],
        Err(ConfigFileError::Problems { problems, .. }) => problems,
        Err(other) => return Err(other.to_string()),
    };
    let real: Vec<String> = problems
        .into_iter()
        .filter(|p| !(p.message.starts_with("environment variable ") && p.message.ends_with(" is not set")))
        .map(|p| format!("{origin}: {p}"))
        .collect();
    if real.is_empty() {
        return Ok(());
    }
    Err(format!("tether could not load the result, so nothing was written:\n{}", real.join("\n")))
}

/// `<file>.bak-STAMP`.
fn backup_path(file: &Path, stamp: String) -> PathBuf {
    let mut name = file.as_os_str().to_os_string();
    name.push(format!(".bak-{stamp}"));
    PathBuf::from(name)
}

/// Copies `from` to `to`, which must not exist yet.
fn copy_new(from: &Path, to: &Path) -> std::io::Result<()> {
    let bytes = fs::read(from)?;
    let mut file = fs::OpenOptions::new().write(true).create_new(true).open(to)?;
    if let Ok(meta) = fs::metadata(from) {
        file.set_permissions(meta.permissions())?;
    }
    file.write_all(&bytes)?;
    file.sync_all()
}

/// Writes `text` to a temporary file beside `path` (through a symlink: beside
/// its target), with the permissions of the file it replaces, then renames it over.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir)?;
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = fs::remove_file(&temp);
    let result = (|| {
        let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&temp)?;
        if let Ok(meta) = fs::metadata(&target) {
            file.set_permissions(meta.permissions())?;
        }
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, &target)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// The current time (UTC) as `YYYYMMDD-HHMMSS`.
fn now_utc_stamp() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    stamp(secs)
}

/// `secs` since the Unix epoch (UTC) as `YYYYMMDD-HHMMSS`.
fn stamp(secs: u64) -> String {
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let (year, month, day) = tether_core::time::civil_from_days(days);
    format!("{year:04}{month:02}{day:02}-{:02}{:02}{:02}", rest / 3600, rest % 3600 / 60, rest % 60)
}

mod splice;

#[cfg(test)]
mod tests;
