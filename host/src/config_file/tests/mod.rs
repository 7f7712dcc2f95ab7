//! The config file reader, end to end: the shapes other tools write, tether's own
//! sections, expansion, and what is reported about a wrong file.

mod checks;

use super::read::url_path_is_sse;
use super::*;
use tether_core::config::{Limits, Policy};
use tether_core::Transport;

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
          "tether": {"separator": "--", "mode": "flat", "stateless_clients": true,
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
    assert!(config.stateless_clients);
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
    // Alone, an unset variable puts only its server in error; the file loads.
    let config = parse_ok(
        r#"{"servers": {"web": {"url": "https://x.test/mcp", "headers": {"Authorization": "Bearer ${API_TOKEN}"}},
                        "fs": {"command": "x", "args": ["a", "${DIR}", "${DIR2}"]}, "ok": {"command": "y"}}}"#,
    );
    assert_eq!(
        config.servers["web"].broken.as_deref(),
        Some("servers.web.headers.Authorization: environment variable API_TOKEN is not set; set it and reload")
    );
    assert!(matches!(config.servers["web"].transport, Transport::Http { .. }), "the entry keeps its shape");
    assert_eq!(
        config.servers["fs"].broken.as_deref(),
        Some("servers.fs.args[1]: environment variable DIR is not set (and 1 more); set it and reload")
    );
    assert_eq!(config.servers["ok"].broken, None);
    // Beside a mistake of another kind, it is listed with it and the file refused.
    let err = parse_err(r#"{"servers": {"fs": {"command": "x", "args": ["a", "${DIR}"], "lazy": 3}}}"#);
    assert!(err.contains("servers.fs.args[1]: environment variable DIR is not set"), "{err}");
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
    assert_eq!(
        parse_err("{\"servers\": {"),
        "test.json:1:13: EOF while parsing an object: the file ends before it is closed"
    );
    // A string left open at the end of its line: the parser's own words were
    // "control character (\u0000-\u001F) found while parsing a string" at column 0
    // of the next line.
    let err = parse_err("{\"servers\": {\"fs\": {\"command\": \"x,\n  \"args\": []}}}");
    assert_eq!(
        err,
        "test.json:1:35: a string is not closed on this line, or holds a raw line break or tab (write \\n or \\t)"
    );
    let err = parse_err(r#"{"servers": {"fs": {"command": "C:\new\tools\x.exe"}}}"#);
    assert!(err.contains("invalid escape") && err.contains("C:/Users"), "{err}");
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
    assert!(err.starts_with("test.json: mcpServers.fs.tether.critical: unknown key"), "{err}");
    let err = parse_err(r#"{"mcpServers": {"fs": {"command": "x", "tether": {"policy": {"crash_limt": 2}}}}}"#);
    assert_eq!(err, "test.json: mcpServers.fs.tether.policy.crash_limt: unknown key (did you mean \"crash_limit\"?)");
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
    assert!(err.starts_with("test.json: mcpServers.ghost: needs \"command\""), "{err}");
    let err = parse_err(r#"{"mcpServers": {"both": {"command": "x", "url": "http://y"}}}"#);
    assert!(err.starts_with("test.json: mcpServers.both: has both"), "{err}");
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
    let unset = format!(
        r#"{{"mcpServers": {{"w": {{"url": "https://x.test", "headers": {{"Authorization": "{SECRET} ${{MISSING}}"}}}}}}}}"#
    );
    let broken = parse(&unset, "test.json", &env).unwrap().servers["w"].broken.clone().unwrap();
    assert!(!broken.contains(SECRET) && broken.starts_with("mcpServers.w.headers.Authorization"), "{broken}");
    let cases = [
        format!(r#"{{"mcpServers": {{"w": {{"url": "https://x.test", "headers": {{"Authorization": "{SECRET} ${{MISSING}}"}}, "lazy": 1}}}}}}"#),
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
        assert!(err.starts_with("test.json: mcpServers.w"), "{err}");
    }
}

#[test]
fn core_validation_errors_name_the_field() {
    let err = parse_err(r#"{"servers": {"x": {"command": "x", "tether": {"policy": {"crash_limit": 0}}}}}"#);
    assert!(err.starts_with("test.json: servers.x.tether.policy.crash_limit: must be between 1 and"), "{err}");
    let err = parse_err(r#"{"servers": {"fs": {"command": "  "}}}"#);
    assert_eq!(err, "test.json: servers.fs.command: must not be empty");
    let err = parse_err(r#"{"tether": {"separator": "."}, "servers": {}}"#);
    assert!(err.starts_with("test.json: tether.separator: "), "{err}");
    let err = parse_err(r#"{"tether": {"limits": {"page_size": 0}}}"#);
    assert_eq!(err, "test.json: tether.limits.page_size: must be at least 1");
    match parse(r#"{"servers": {"bad name": {"command": "x"}}}"#, "f", &no_env) {
        Err(ConfigFileError::Invalid { path, .. }) => assert_eq!(path, "servers.bad name"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn tool_selection_reads_from_the_entry_tether_section() {
    let config = parse_ok(
        r#"{"mcpServers": {"fs": {"command": "x", "tether": {
            "tools": {"allow": ["read_*", "list_*"], "deny": ["*media*"],
                      "override": {"read_text_file": {"name": "read", "description": "Read a note"}}},
            "prompts": {"deny": ["*"]},
            "resources": {"allow": ["file:///notes/*"]}
        }}}}"#,
    );
    let selection = &config.servers["fs"].selection;
    assert_eq!(selection.tools.allow, ["read_*", "list_*"]);
    assert_eq!(selection.tools.deny, ["*media*"]);
    assert_eq!(selection.tools.override_for("read_text_file").and_then(|o| o.name.as_deref()), Some("read"));
    assert!(!selection.prompts.serves("any"));
    assert!(selection.resources.serves("file:///notes/a.md") && !selection.resources.serves("file:///etc/passwd"));

    let err = parse_err(r#"{"mcpServers": {"fs": {"command": "x", "tether": {"tools": {"alow": ["x"]}}}}}"#);
    assert!(err.starts_with("test.json: mcpServers.fs.tether.tools: unknown field `alow`"), "{err}");
    let err = parse_err(r#"{"mcpServers": {"fs": {"command": "x", "tether": {"tools": {"deny": [""]}}}}}"#);
    assert_eq!(err, "test.json: mcpServers.fs.tether.tools: a pattern is empty");
    let err = parse_err(
        r#"{"mcpServers": {"fs": {"command": "x", "tether": {"resources": {"override": {"u": {"title": "t"}}}}}}}"#,
    );
    assert!(
        err.starts_with("test.json: mcpServers.fs.tether.resources.override: resources take allow and deny"),
        "{err}"
    );
    // At the entry's level, the key belongs in its tether section.
    let err = parse_err(r#"{"mcpServers": {"fs": {"command": "x", "tools": {"deny": ["x"]}}}}"#);
    assert!(err.contains("mcpServers.fs.tether.tools"), "{err}");
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
        format!("{}: mcpServers.fs: needs \"command\" (a local process) or \"url\" (a remote server)", path.display())
    );

    let missing = dir.path().join("absent.json");
    let err = load(&missing).unwrap_err();
    assert!(matches!(err, ConfigFileError::Io { .. }));
    assert!(err.to_string().starts_with(&format!("{}: cannot read: ", missing.display())), "{err}");
}

#[test]
fn no_input_panics() {
    let valid = r#"{"tether": {"policy": {"crash_limit": 2}}, "mcpServers": {"a": {"command": "${X:-y}", "args": ["$$"], "env": {"K": "v"}}, "b": {"url": "https://x.test/sse", "headers": {"H": "${Y}"}}}} // end"#;
    for end in 0..=valid.len() {
        let _ = parse(&valid[..end], "t", &no_env);
        let _ = parse(&valid[end..], "t", &no_env);
    }
    for text in
        ["", "null", "[]", "\"x\"", "{\"servers\": []}", "{\"servers\": {\"a\": null}}", "/*", "{\"a\": \"\\", "\"\\\""]
    {
        assert!(parse(text, "t", &no_env).is_err(), "{text}");
    }
    assert!(parse("{}", "t", &no_env).unwrap().servers.is_empty());
}
