use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::*;

const TETHER_BIN: &str = "/opt/tether/bin/tether";

fn request(dir: &Path, client: &str, rewrite: bool, dry_run: bool) -> Request {
    Request {
        client_file: dir.join(client),
        tether_file: dir.join("tether").join("config.json"),
        project: None,
        tether_command: PathBuf::from(TETHER_BIN),
        rewrite,
        dry_run,
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

fn backups(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".bak-"))
        .collect();
    found.sort();
    found
}

const CLAUDE_DESKTOP: &str = r#"{
  "mcpServers": {
    "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
    "web": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer abc"}}
  },
  "globalShortcut": "Ctrl+Space"
}"#;

#[test]
fn claude_desktop_servers_go_into_a_new_tether_file() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("claude_desktop_config.json"), CLAUDE_DESKTOP).unwrap();
    let req = request(dir.path(), "claude_desktop_config.json", false, false);
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.added, ["fs", "web"]);
    assert!(outcome.tether_created && outcome.tether_written);
    assert_eq!(outcome.client, ClientChange::NotAsked);
    let tether = read_json(&req.tether_file);
    assert_eq!(tether["mcpServers"]["fs"]["command"], "npx");
    assert_eq!(tether["mcpServers"]["web"]["url"], "https://example.com/mcp");
    // The client's file is untouched without --rewrite.
    assert_eq!(fs::read_to_string(&req.client_file).unwrap(), CLAUDE_DESKTOP);
    let text = outcome.to_string();
    assert!(text.contains("  added      fs\n  added      web\n"), "{text}");
    assert!(text.contains("Created "), "{text}");
}

#[test]
fn cursor_import_keeps_tether_sections_and_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let cursor = r#"{"mcpServers": {"git": {"command": "uvx", "args": ["mcp-server-git"]}, "zeta": {"command": "z"}}}"#;
    fs::write(dir.path().join("mcp.json"), cursor).unwrap();
    let req = request(dir.path(), "mcp.json", false, false);
    fs::create_dir_all(req.tether_file.parent().unwrap()).unwrap();
    let tether = r#"{
  // tether's own settings
  "tether": {"separator": "__", "policy": {"crash_limit": 5}},
  "mcpServers": {
    "zeta": {"command": "z"},
    "alpha": {"command": "a", "tether": {"vital": true}},
  }
}"#;
    fs::write(&req.tether_file, tether).unwrap();
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.added, ["git"]);
    assert_eq!(outcome.unchanged, ["zeta"]);
    assert!(!outcome.tether_created);
    let text = fs::read_to_string(&req.tether_file).unwrap();
    assert!(text.contains("// tether's own settings"), "{text}");
    let value = config_file::parse_jsonc(&text, "t").unwrap().to_value();
    assert_eq!(value["tether"], json!({"separator": "__", "policy": {"crash_limit": 5}}));
    assert_eq!(value["mcpServers"]["alpha"], json!({"command": "a", "tether": {"vital": true}}));
    // Keys stay in their order; the new server comes last.
    let (t, z, a, g) = (
        text.find("\"tether\"").unwrap(),
        text.find("\"zeta\"").unwrap(),
        text.find("\"alpha\"").unwrap(),
        text.find("\"git\"").unwrap(),
    );
    assert!(t < z && z < a && a < g, "{text}");
    // tether loads the result.
    assert_eq!(tether_host::config_file::load(&req.tether_file).unwrap().servers.len(), 3);
}

const VSCODE: &str = r#"{
  // Inputs VS Code prompts for.
  "inputs": [{"type": "promptString", "id": "key", "password": true,},],
  "servers": {
    /* a local server */
    "memory": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory",],},
    "remote": {"type": "http", "url": "https://example.com/mcp",},
  },
}"#;

#[test]
fn vscode_servers_with_comments_are_imported_and_the_client_rewritten_once() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("mcp.json"), VSCODE).unwrap();
    let req = request(dir.path(), "mcp.json", true, false);
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.client_key, "servers");
    assert_eq!(outcome.added, ["memory", "remote"]);
    let ClientChange::Rewritten { backup } = &outcome.client else { panic!("{outcome:?}") };
    assert_eq!(fs::read_to_string(backup).unwrap(), VSCODE);
    assert_eq!(backups(dir.path()), std::slice::from_ref(backup));
    let name = backup.file_name().unwrap().to_string_lossy().into_owned();
    let stamp = name.strip_prefix("mcp.json.bak-").unwrap();
    assert!(stamp.len() == 15 && stamp.as_bytes()[8] == b'-', "{name}");

    let tether = read_json(&req.tether_file);
    assert_eq!(tether["mcpServers"]["memory"]["type"], "stdio");
    assert_eq!(tether["mcpServers"]["remote"]["url"], "https://example.com/mcp");
    let client = read_json(&req.client_file);
    assert_eq!(client["inputs"][0]["id"], "key");
    let config = req.tether_file.to_string_lossy().into_owned();
    assert_eq!(
        client["servers"],
        json!({"tether": {"type": "stdio", "command": TETHER_BIN, "args": ["--config", config]}})
    );

    // The second run changes nothing.
    let tether_before = fs::read_to_string(&req.tether_file).unwrap();
    let client_before = fs::read_to_string(&req.client_file).unwrap();
    let again = import(&req).unwrap();
    assert!(again.added.is_empty() && again.conflicts.is_empty() && again.unchanged.is_empty());
    assert_eq!(again.skipped, ["tether"]);
    assert!(!again.tether_written);
    assert_eq!(again.client, ClientChange::AlreadyTether);
    assert_eq!(fs::read_to_string(&req.tether_file).unwrap(), tether_before);
    assert_eq!(fs::read_to_string(&req.client_file).unwrap(), client_before);
    assert_eq!(backups(dir.path()).len(), 1);
    let text = again.to_string();
    assert!(text.contains("already points at tether"), "{text}");
}

#[test]
fn claude_code_rewrite_keeps_every_other_key_and_a_second_run_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let claude_code = json!({
        "numStartups": 12,
        "projects": {"/home/me/project": {"allowedTools": [], "mcpServers": {}}},
        "mcpServers": {
            "search": {"type": "stdio", "command": "search-mcp", "args": [], "env": {"KEY": "k"}},
            "docs": {"type": "http", "url": "https://docs.example.com/mcp"}
        },
        "theme": "dark"
    });
    fs::write(dir.path().join(".claude.json"), serde_json::to_string_pretty(&claude_code).unwrap()).unwrap();
    let req = request(dir.path(), ".claude.json", true, false);
    let first = import(&req).unwrap();
    assert_eq!(first.added, ["docs", "search"]); // json! sorts its keys
    assert!(matches!(first.client, ClientChange::Rewritten { .. }));
    let client = read_json(&req.client_file);
    assert_eq!(client["numStartups"], 12);
    assert_eq!(client["theme"], "dark");
    assert_eq!(client["projects"], claude_code["projects"]);
    assert_eq!(client["mcpServers"]["tether"]["command"], TETHER_BIN);
    assert_eq!(client["mcpServers"].as_object().unwrap().len(), 1);
    let tether = read_json(&req.tether_file);
    assert_eq!(tether["mcpServers"]["search"], claude_code["mcpServers"]["search"]);
    assert!(tether["mcpServers"].get("tether").is_none());

    let second = import(&req).unwrap();
    assert_eq!(second.client, ClientChange::AlreadyTether);
    assert!(second.added.is_empty() && !second.tether_written);
    assert_eq!(backups(dir.path()).len(), 1);

    // Without --rewrite, a second import of the original reports everything unchanged.
    let original = dir.path().join("original.json");
    fs::write(&original, serde_json::to_string(&claude_code).unwrap()).unwrap();
    let again = import(&Request { client_file: original, rewrite: false, ..req.clone() }).unwrap();
    assert_eq!(again.unchanged, ["docs", "search"]);
    assert!(again.added.is_empty() && !again.tether_written);
}

#[test]
fn conflicts_are_reported_not_overwritten_and_block_the_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("claude.json"), CLAUDE_DESKTOP).unwrap();
    let req = request(dir.path(), "claude.json", true, false);
    fs::create_dir_all(req.tether_file.parent().unwrap()).unwrap();
    let tether = r#"{"mcpServers": {"fs": {"command": "my-fs"}}}"#;
    fs::write(&req.tether_file, tether).unwrap();
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.conflicts, ["fs"]);
    assert_eq!(outcome.added, ["web"]);
    assert_eq!(outcome.client, ClientChange::KeptForConflicts);
    assert_eq!(outcome.exit_code(), ExitCode::from(1));
    let written = read_json(&req.tether_file);
    assert_eq!(written["mcpServers"]["fs"], json!({"command": "my-fs"}));
    assert_eq!(written["mcpServers"]["web"]["url"], "https://example.com/mcp");
    assert_eq!(fs::read_to_string(&req.client_file).unwrap(), CLAUDE_DESKTOP);
    assert!(backups(dir.path()).is_empty());
    let text = outcome.to_string();
    assert!(text.contains("  conflict   fs: "), "{text}");
    assert!(text.contains("1 conflict(s): fs; every other server is in tether's file"), "{text}");
    assert!(text.contains("not rewritten: resolve the conflicts first"), "{text}");
}

#[test]
fn a_dry_run_reports_the_same_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("claude.json"), CLAUDE_DESKTOP).unwrap();
    let req = request(dir.path(), "claude.json", true, true);
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.added, ["fs", "web"]);
    assert!(matches!(outcome.client, ClientChange::Rewritten { .. }));
    assert!(!req.tether_file.exists());
    assert!(backups(dir.path()).is_empty());
    assert_eq!(fs::read_to_string(&req.client_file).unwrap(), CLAUDE_DESKTOP);
    let text = outcome.to_string();
    assert!(
        text.contains("Would create ") && text.contains("Would back up ") && text.contains("Would rewrite "),
        "{text}"
    );
    assert!(text.ends_with("(dry run: nothing written)\n"), "{text}");
}

#[test]
fn files_that_do_not_parse_or_would_not_load_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("broken.json"), r#"{"mcpServers": {"fs": {"command": "x"}"#).unwrap();
    let req = request(dir.path(), "broken.json", true, false);
    let err = import(&req).unwrap_err();
    assert!(err.contains("broken.json"), "{err}");
    assert!(!req.tether_file.exists() && backups(dir.path()).is_empty());

    // An entry with neither command nor url: tether would refuse the file.
    fs::write(dir.path().join("odd.json"), r#"{"mcpServers": {"odd": {"args": ["x"]}}}"#).unwrap();
    let req = request(dir.path(), "odd.json", true, false);
    let err = import(&req).unwrap_err();
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!req.tether_file.exists() && backups(dir.path()).is_empty());

    fs::write(dir.path().join("none.json"), r#"{"other": 1}"#).unwrap();
    let err = import(&request(dir.path(), "none.json", false, false)).unwrap_err();
    assert!(err.contains("no \"mcpServers\" or \"servers\""), "{err}");
}

#[test]
fn a_tether_entry_is_never_imported_but_its_neighbours_are() {
    let dir = tempfile::tempdir().unwrap();
    let client = r#"{"mcpServers": {"tether": {"command": "C:\\tools\\Tether.exe"}, "new": {"command": "n"}}}"#;
    fs::write(dir.path().join("c.json"), client).unwrap();
    let req = request(dir.path(), "c.json", false, false);
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.added, ["new"]);
    assert_eq!(outcome.skipped, ["tether"]);
    assert!(read_json(&req.tether_file)["mcpServers"].get("tether").is_none());
}

#[test]
fn client_paths_per_platform() {
    let cwd = Path::new("/work/project");
    let env = |name: &str| match name {
        "HOME" => Some("/home/me".to_string()),
        "USERPROFILE" => Some("C:\\Users\\me".to_string()),
        "APPDATA" => Some("C:\\Users\\me\\AppData\\Roaming".to_string()),
        _ => None,
    };
    let path = |client, os| client_path(client, os, &env, cwd).unwrap();
    assert_eq!(
        path(Client::ClaudeDesktop, "macos"),
        Path::new("/home/me/Library/Application Support/Claude/claude_desktop_config.json")
    );
    assert_eq!(path(Client::ClaudeDesktop, "linux"), Path::new("/home/me/.config/Claude/claude_desktop_config.json"));
    assert_eq!(
        path(Client::ClaudeDesktop, "windows"),
        Path::new("C:\\Users\\me\\AppData\\Roaming").join("Claude").join("claude_desktop_config.json")
    );
    assert_eq!(path(Client::Cursor, "linux"), Path::new("/home/me/.cursor/mcp.json"));
    assert_eq!(path(Client::ClaudeCode, "macos"), Path::new("/home/me/.claude.json"));
    assert_eq!(path(Client::VsCode, "linux"), Path::new("/home/me/.config/Code/User/mcp.json"));
    assert_eq!(path(Client::VsCode, "macos"), Path::new("/home/me/Library/Application Support/Code/User/mcp.json"));

    // A workspace's .vscode/mcp.json wins over the user's.
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join(".vscode")).unwrap();
    fs::write(dir.path().join(".vscode").join("mcp.json"), "{}").unwrap();
    assert_eq!(client_path(Client::VsCode, "linux", &env, dir.path()).unwrap(), dir.path().join(".vscode/mcp.json"));

    let nothing = |_: &str| None;
    assert!(client_path(Client::Cursor, "linux", &nothing, cwd).is_err());
}

#[test]
fn from_names_clients_or_files() {
    assert_eq!("cursor".parse::<Source>().unwrap(), Source::Client(Client::Cursor));
    assert_eq!("claude-code".parse::<Source>().unwrap(), Source::Client(Client::ClaudeCode));
    assert_eq!("./x.json".parse::<Source>().unwrap(), Source::File(PathBuf::from("./x.json")));
    assert!("".parse::<Source>().is_err());
}

#[test]
fn backup_stamps_are_utc_civil_dates() {
    assert_eq!(stamp(0), "19700101-000000");
    assert_eq!(stamp(951_782_400 + 3661), "20000229-010101");
    assert_eq!(stamp(1_767_225_599), "20251231-235959");
    assert_eq!(backup_path(Path::new("/a/b.json"), stamp(0)), Path::new("/a/b.json.bak-19700101-000000"));
}

/// tether's own file keeps its comments, layout and trailing commas when servers are
/// added to it: the new entries are inserted as text at the end of its server map.
#[test]
fn tether_file_comments_and_layout_survive_an_import() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("claude_desktop_config.json"), CLAUDE_DESKTOP).unwrap();
    let req = request(dir.path(), "claude_desktop_config.json", false, false);
    fs::create_dir_all(req.tether_file.parent().unwrap()).unwrap();
    let before = r#"// tether for my laptop
{
    "mcpServers": {
        // the notes server: keep it first
        "notes": { "command": "notes-mcp" }, // trailing comma next
    },
    /* policy tuned by hand */
    "tether": { "policy": { "request_timeout_ms": 90000 } }
}
"#;
    fs::write(&req.tether_file, before).unwrap();
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.added, ["fs", "web"]);
    let after = fs::read_to_string(&req.tether_file).unwrap();
    for kept in [
        "// tether for my laptop",
        "// the notes server: keep it first",
        r#""notes": { "command": "notes-mcp" }, // trailing comma next"#,
        "/* policy tuned by hand */",
        r#""tether": { "policy": { "request_timeout_ms": 90000 } }"#,
    ] {
        assert!(after.contains(kept), "lost {kept:?}:\n{after}");
    }
    // Indented like its neighbours, in order, and tether reads all three.
    assert!(after.contains("\n        \"fs\": {\n            \"command\": \"npx\","), "{after}");
    let root = config_file::parse_jsonc(&after, "t").unwrap().to_value();
    let names: Vec<&String> = root["mcpServers"].as_object().unwrap().keys().collect();
    assert_eq!(names.len(), 3, "{after}");
    assert_eq!(root["mcpServers"]["web"]["headers"]["Authorization"], "Bearer abc");
    assert_eq!(root["tether"]["policy"]["request_timeout_ms"], 90000);
}

/// The same for a file without a server map yet, one whose map is empty and one
/// written on a single line: each ends up as tether reads it, its comment kept.
#[test]
fn servers_are_spliced_into_empty_missing_and_one_line_maps() {
    let cases = [
        "{\n  // only settings so far\n  \"tether\": {}\n}\n",
        "{\n  // nothing yet\n  \"mcpServers\": {}\n}\n",
        "{ \"mcpServers\": { \"a\": { \"url\": \"https://a.example/mcp\" } } } // one line\n",
        "\u{feff}{ /* c */ \"mcpServers\": { \"a\": { \"url\": \"https://a.example/mcp\" } /* end */ } }\n",
    ];
    for before in cases {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("claude_desktop_config.json"), CLAUDE_DESKTOP).unwrap();
        let req = request(dir.path(), "claude_desktop_config.json", false, false);
        fs::create_dir_all(req.tether_file.parent().unwrap()).unwrap();
        fs::write(&req.tether_file, before).unwrap();
        import(&req).unwrap();
        let after = fs::read_to_string(&req.tether_file).unwrap();
        let comment = before.split(['/']).nth(1).map(|_| before.find("/").unwrap()).unwrap();
        let comment_text: String = before[comment..].chars().take(6).collect();
        assert!(after.contains(&comment_text), "comment {comment_text:?} lost:\n{after}");
        let root = config_file::parse_jsonc(&after, "t").unwrap().to_value();
        assert_eq!(root["mcpServers"]["fs"]["command"], "npx", "{after}");
        assert_eq!(root["mcpServers"]["web"]["url"], "https://example.com/mcp", "{after}");
    }
}

/// VS Code before `mcp.json`: servers in the `mcp` block of the user's
/// `settings.json`, beside every other setting. They are imported, and a rewrite
/// leaves every other setting (and the block's `inputs`) as it was.
#[test]
fn vscode_settings_mcp_block_is_imported_and_rewritten_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let settings = r#"{
  "editor.fontSize": 14,
  // MCP servers, the old way
  "mcp": {
    "inputs": [],
    "servers": {
      "git": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git"]},
    },
  },
}"#;
    fs::write(dir.path().join("settings.json"), settings).unwrap();
    let req = request(dir.path(), "settings.json", true, false);
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.client_key, "mcp.servers");
    assert_eq!(outcome.added, ["git"]);
    assert_eq!(read_json(&req.tether_file)["mcpServers"]["git"]["command"], "uvx");
    let client = config_file::parse_jsonc(&fs::read_to_string(&req.client_file).unwrap(), "s").unwrap().to_value();
    assert_eq!(client["editor.fontSize"], 14);
    assert_eq!(client["mcp"]["inputs"], json!([]));
    assert_eq!(client["mcp"]["servers"]["tether"]["type"], "stdio");
    assert_eq!(client["mcp"]["servers"].as_object().unwrap().len(), 1);
    assert_eq!(import(&req).unwrap().client, ClientChange::AlreadyTether);

    // `--from vscode` finds settings.json when the user folder has no mcp.json.
    let home = tempfile::tempdir().unwrap();
    let user = home.path().join(".config").join("Code").join("User");
    fs::create_dir_all(&user).unwrap();
    fs::write(user.join("settings.json"), settings).unwrap();
    let home_dir = home.path().to_string_lossy().into_owned();
    let env = move |name: &str| (name == "HOME").then(|| home_dir.clone());
    let found = client_path(Client::VsCode, "linux", &env, dir.path()).unwrap();
    assert_eq!(found, user.join("settings.json"));
    fs::write(user.join("mcp.json"), "{}").unwrap();
    assert_eq!(client_path(Client::VsCode, "linux", &env, dir.path()).unwrap(), user.join("mcp.json"));
}

/// Claude Code keeps servers per project in `~/.claude.json` (`projects.<dir>`).
/// Importing from inside that directory takes them with the user-wide ones (the
/// project's win a shared name, as in Claude Code); another project's are not
/// taken. A rewrite runs tether user-wide and empties the project's map.
#[test]
fn claude_code_project_servers_of_the_current_directory_are_imported() {
    let dir = tempfile::tempdir().unwrap();
    let claude_code = json!({
        "mcpServers": { "docs": {"type": "http", "url": "https://docs.example.com/mcp"},
                        "db": {"command": "db-mcp", "args": ["--global"]} },
        "projects": {
            "/home/me/app": { "allowedTools": [], "mcpServers": {
                "db": {"command": "db-mcp", "args": ["--app"]},
                "app-only": {"command": "app-mcp"} } },
            "/home/me/other": { "mcpServers": { "other-only": {"command": "other-mcp"} } }
        }
    });
    fs::write(dir.path().join(".claude.json"), serde_json::to_string_pretty(&claude_code).unwrap()).unwrap();
    let req =
        Request { project: Some(PathBuf::from("/home/me/app")), ..request(dir.path(), ".claude.json", true, false) };
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.client_key, r#"mcpServers and projects["/home/me/app"].mcpServers"#);
    let mut added = outcome.added.clone();
    added.sort();
    assert_eq!(added, ["app-only", "db", "docs"]);
    let tether = read_json(&req.tether_file);
    assert_eq!(tether["mcpServers"]["db"]["args"], json!(["--app"]));
    assert!(tether["mcpServers"].get("other-only").is_none());

    let client = read_json(&req.client_file);
    assert_eq!(client["mcpServers"].as_object().unwrap().keys().collect::<Vec<_>>(), ["tether"]);
    assert_eq!(client["projects"]["/home/me/app"]["mcpServers"], json!({}));
    assert_eq!(client["projects"]["/home/me/app"]["allowedTools"], json!([]));
    assert_eq!(client["projects"]["/home/me/other"], claude_code["projects"]["/home/me/other"]);
    // Once rewritten, the project has no servers left and the file runs tether.
    assert_eq!(import(&req).unwrap().client, ClientChange::AlreadyTether);

    // Only a project's servers (no user-wide map): those, and the rewrite runs tether there.
    let only = json!({ "projects": { "/home/me/app": { "mcpServers": { "x": {"command": "x-mcp"} } } } });
    fs::write(dir.path().join("only.json"), only.to_string()).unwrap();
    let req = Request { client_file: dir.path().join("only.json"), ..req };
    let outcome = import(&req).unwrap();
    assert_eq!(outcome.added, ["x"]);
    let client = read_json(&req.client_file);
    assert_eq!(client["projects"]["/home/me/app"]["mcpServers"]["tether"]["command"], TETHER_BIN);
}
