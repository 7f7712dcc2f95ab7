//! What is reported about a file that is wrong: keys at the wrong level, typos,
//! repeated keys, the engine's own shape, and several problems at once; and that
//! files other tools write still load as they did.

use super::*;
use tether_core::config::PolicyOverrides;
use tether_core::ServerConfig;

/// The lines of an error, without the file name each starts with.
fn problems(text: &str) -> Vec<String> {
    parse_err(text).lines().map(|line| line.strip_prefix("test.json: ").unwrap_or(line).to_string()).collect()
}

#[test]
fn tether_keys_beside_command_say_where_they_belong() {
    assert_eq!(
        problems(r#"{"mcpServers": {"fs": {"command": "x", "vital": true}}}"#),
        ["mcpServers.fs.vital: \"vital\" is not read here; it belongs at mcpServers.fs.tether.vital"]
    );
    assert_eq!(
        problems(r#"{"servers": {"fs": {"command": "x", "policy": {"crash_limit": 5}, "crash_limit": 5}}}"#),
        [
            "servers.fs.policy: \"policy\" is not read here; it belongs at servers.fs.tether.policy",
            "servers.fs.crash_limit: \"crash_limit\" is not read here; it belongs at servers.fs.tether.policy.crash_limit",
        ]
    );
    assert_eq!(
        problems(r#"{"mcpServers": {"fs": {"command": "x", "separator": "--"}}}"#),
        ["mcpServers.fs.separator: \"separator\" is not read here; it belongs at tether.separator"]
    );
}

#[test]
fn gateway_keys_at_the_top_or_in_a_server_say_where_they_belong() {
    assert_eq!(
        problems(r#"{"tether": {}, "separator": "--", "max_sessions": 3, "mcpServers": {}}"#),
        [
            "separator: \"separator\" is not read here; it belongs at tether.separator",
            "max_sessions: \"max_sessions\" is not read here; it belongs at tether.limits.max_sessions",
        ]
    );
    assert_eq!(
        problems(r#"{"mcpServers": {"fs": {"command": "x", "tether": {"mode": "meta", "max_in_flight": 9}}}}"#),
        [
            "mcpServers.fs.tether.mode: \"mode\" is not read here; it belongs at tether.mode",
            "mcpServers.fs.tether.max_in_flight: \"max_in_flight\" is not read here; it belongs at tether.limits.max_in_flight",
        ]
    );
}

#[test]
fn keys_in_the_wrong_tether_section_say_where_they_belong() {
    assert_eq!(
        problems(
            r#"{"tether": {"vital": true, "request_timeout_ms": 5, "disabled": true, "servers": {},
                           "policy": {"max_sessions": 2}, "limits": {"crash_limit": 2}}}"#
        ),
        [
            "tether.vital: \"vital\" is not read here; it belongs at mcpServers.NAME.tether.vital",
            "tether.request_timeout_ms: \"request_timeout_ms\" is not read here; it belongs at tether.policy.request_timeout_ms",
            "tether.disabled: \"disabled\" is not read here; it belongs at mcpServers.NAME.disabled",
            "tether.servers: \"servers\" is not read here; it belongs at the top level",
            "tether.policy.max_sessions: \"max_sessions\" is not read here; it belongs at tether.limits.max_sessions",
            "tether.limits.crash_limit: \"crash_limit\" is not read here; it belongs at tether.policy.crash_limit",
        ]
    );
    assert_eq!(
        problems(r#"{"mcpServers": {"fs": {"command": "x", "tether": {"crash_limit": 2, "policy": {"lazy": true}}}}}"#),
        [
            "mcpServers.fs.tether.crash_limit: \"crash_limit\" is not read here; it belongs at mcpServers.fs.tether.policy.crash_limit",
            "mcpServers.fs.tether.policy.lazy: \"lazy\" is not read here; it belongs at mcpServers.fs.tether.lazy",
        ]
    );
}

#[test]
fn keys_valid_at_several_levels_are_accepted_at_each() {
    let config = parse_ok(
        r#"{"tether": {"policy": {"crash_limit": 4}},
            "mcpServers": {"a": {"command": "x", "disabled": true},
                           "b": {"command": "x", "tether": {"disabled": true, "policy": {"crash_limit": 2}}}}}"#,
    );
    assert!(config.servers["a"].disabled && config.servers["b"].disabled);
    assert_eq!((config.policy.crash_limit, config.policy_for("b").crash_limit), (4, 2));
}

#[test]
fn typos_of_known_keys_suggest_the_key_and_its_place() {
    assert_eq!(
        problems(r#"{"mcpServers": {"fs": {"command": "x", "vitall": true, "request_timeout": 9}}}"#),
        [
            "mcpServers.fs.vitall: unknown key (did you mean \"vital\"? it belongs at mcpServers.fs.tether.vital)",
            "mcpServers.fs.request_timeout: unknown key (did you mean \"request_timeout_ms\"? it belongs at mcpServers.fs.tether.policy.request_timeout_ms)",
        ]
    );
    assert_eq!(
        problems(r#"{"mcpServers": {"web": {"url": "https://x.test/mcp", "hedaers": {"A": "b"}}}}"#),
        ["mcpServers.web.hedaers: unknown key (did you mean \"headers\"?)"]
    );
    // Swapped letters are one slip of the fingers (with `agrs`, npx once ran bare).
    assert_eq!(
        problems(r#"{"mcpServers": {"fs": {"command": "npx", "agrs": ["-y", "x"], "evn": {"A": "b"}}}}"#),
        [
            "mcpServers.fs.agrs: unknown key (did you mean \"args\"?)",
            "mcpServers.fs.evn: unknown key (did you mean \"env\"?)",
        ]
    );
    assert_eq!(
        problems(r#"{"mcpServer": {"fs": {"command": "x"}}, "tehter": {}}"#),
        ["mcpServer: unknown key (did you mean \"mcpServers\"?)", "tehter: unknown key (did you mean \"tether\"?)"]
    );
    assert_eq!(
        problems(r#"{"tether": {"policy": {"request_timeout": 9}, "limits": {"maxSessions": 2}}}"#),
        [
            "tether.policy.request_timeout: unknown key (did you mean \"request_timeout_ms\"?)",
            "tether.limits.maxSessions: unknown key (did you mean \"max_sessions\"?)",
        ]
    );
}

#[test]
fn repeated_keys_are_reported() {
    assert_eq!(
        problems(r#"{"mcpServers": {"fs": {"command": "x"}, "fs": {"command": "y", "env": {"A": "1", "A": "2"}}}}"#),
        [
            "mcpServers.fs: appears more than once in this object; keep one",
            "mcpServers.fs.env.A: appears more than once in this object; keep one",
        ]
    );
}

#[test]
fn every_problem_of_a_file_is_reported_at_once_in_document_order() {
    let text = r#"{
      "mcpServers": {
        "fs": {"command": "x", "args": ["ok", 3], "vitall": true,
               "tether": {"lazy": "yes", "policy": {"crash_limit": 0, "request_timeout": 5}}},
        "web": {"url": "https://x.test/mcp", "headers": {"Authorization": "${TOKEN}"}},
        "bad name": {"command": "x"}
      },
      "tether": {"mode": "metaa", "max_sessions": 3, "policy": {"breaker_threshold": 0}, "separator": "."}
    }"#;
    let err = parse(text, "test.json", &no_env).unwrap_err();
    assert!(matches!(&err, ConfigFileError::Problems { problems, .. } if problems.len() == 11), "{err:?}");
    assert_eq!(
        err.to_string(),
        [
            "test.json: mcpServers.fs.args[1]: must be a string",
            "test.json: mcpServers.fs.vitall: unknown key (did you mean \"vital\"? it belongs at mcpServers.fs.tether.vital)",
            "test.json: mcpServers.fs.tether.lazy: must be true or false",
            "test.json: mcpServers.fs.tether.policy.crash_limit: must be between 1 and 16",
            "test.json: mcpServers.fs.tether.policy.request_timeout: unknown key (did you mean \"request_timeout_ms\"?)",
            "test.json: mcpServers.web.headers.Authorization: environment variable TOKEN is not set",
            "test.json: mcpServers.bad name: server names must be 1 to 48 characters from [A-Za-z0-9_-]",
            "test.json: tether.mode: unknown variant `metaa`, expected `flat` or `meta`",
            "test.json: tether.max_sessions: \"max_sessions\" is not read here; it belongs at tether.limits.max_sessions",
            "test.json: tether.policy.breaker_threshold: must be at least 1",
            "test.json: tether.separator: must be 1 to 8 characters from [A-Za-z0-9_-]",
        ]
        .join("\n")
    );
}

/// The engine's own `Config` as the README shows it: tether-core's Rust API shape,
/// not a config file.
const ENGINE_CONFIG: &str = r#"{
  "servers": {
    "fs":  { "type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
             "env": { "DEBUG": "0" }, "vital": true },
    "web": { "type": "http", "url": "https://example.com/mcp", "headers": { "Authorization": "Bearer …" },
             "policy": { "breaker_threshold": 3 } },
    "old": { "type": "sse", "url": "https://legacy.example.com/sse", "lazy": true }
  },
  "separator": "__",
  "policy": { "request_timeout_ms": 120000 },
  "limits": { "max_in_flight": 1024 }
}"#;

#[test]
fn the_engines_own_config_is_not_taken_for_a_config_file() {
    assert_eq!(
        problems(ENGINE_CONFIG),
        [
            "this looks like tether-core's own Config (the engine's JSON), which a config file does not take as is: \
             gateway settings go in a top-level \"tether\" section, a server's settings in a \"tether\" section of its entry",
            "servers.fs.vital: \"vital\" is not read here; it belongs at servers.fs.tether.vital",
            "servers.web.policy: \"policy\" is not read here; it belongs at servers.web.tether.policy",
            "servers.old.lazy: \"lazy\" is not read here; it belongs at servers.old.tether.lazy",
            "separator: \"separator\" is not read here; it belongs at tether.separator",
            "policy: \"policy\" is not read here; it belongs at tether.policy",
            "limits: \"limits\" is not read here; it belongs at tether.limits",
        ]
    );
    // Moved where the messages say, it loads to the same settings.
    let config = parse_ok(
        r#"{
          "servers": {
            "fs":  { "type": "stdio", "command": "npx", "tether": { "vital": true } },
            "web": { "type": "http", "url": "https://example.com/mcp", "tether": { "policy": { "breaker_threshold": 3 } } },
            "old": { "type": "sse", "url": "https://legacy.example.com/sse", "tether": { "lazy": true } }
          },
          "tether": { "separator": "__", "policy": { "request_timeout_ms": 120000 }, "limits": { "max_in_flight": 1024 } }
        }"#,
    );
    assert!(config.servers["fs"].vital && config.servers["old"].lazy);
    assert_eq!(config.policy_for("web").breaker_threshold, 3);
    assert_eq!((config.policy.request_timeout_ms, config.limits.max_in_flight), (120_000, 1024));
}

fn stdio(command: &str, args: &[&str], env: &[(&str, &str)]) -> ServerConfig {
    let mut server = ServerConfig::stdio(command, args);
    if let Transport::Stdio { env: vars, .. } = &mut server.transport {
        *vars = map(env);
    }
    server
}

fn remote(transport: Transport, oauth: bool) -> ServerConfig {
    ServerConfig { transport, oauth, ..ServerConfig::stdio("x", &[]) }
}

#[test]
fn files_other_tools_write_load_as_before() {
    // Claude Desktop / Cursor, with keys of Cline, Roo, Windsurf and Gemini CLI.
    let claude = parse_ok(
        r#"{
          "globalShortcut": "Ctrl+Space",
          "preferences": {"menuBarEnabled": false},
          "mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                   "env": {"DEBUG": "1"}, "autoApprove": ["read_file"], "alwaysAllow": [], "timeout": 60,
                   "transportType": "stdio", "watchPaths": ["/tmp"], "disabledTools": [], "trust": true,
                   "includeTools": ["read"], "description": "files"},
            "web": {"url": "https://example.test/mcp", "headers": {"X-Team": "core"}, "disabled": false},
            "off": {"command": "old-server", "disabled": true}
          }
        }"#,
    );
    let mut off = stdio("old-server", &[], &[]);
    off.disabled = true;
    let servers = [
        ("fs", stdio("npx", &["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], &[("DEBUG", "1")])),
        (
            "web",
            remote(
                Transport::Http { url: "https://example.test/mcp".into(), headers: map(&[("X-Team", "core")]) },
                true,
            ),
        ),
        ("off", off),
    ];
    let expected = servers.into_iter().fold(Config::default(), |c, (name, s)| c.server(name, s));
    assert_eq!(claude, expected);

    // VS Code's mcp.json, with its inputs, envFile and dev keys.
    let vscode = parse_ok(
        r#"{
          // Workspace servers
          "inputs": [{"type": "promptString", "id": "token", "description": "API token", "password": true}],
          "servers": {
            "git": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git"], "envFile": "${workspaceFolder}/.env",
                    "dev": {"watch": "src/**/*.ts", "debug": {"type": "node"}}},
            "events": {"type": "sse", "url": "https://example.test/stream", "headers": {"Authorization": "Bearer x"}},
          },
        }"#,
    );
    let events =
        Transport::Sse { url: "https://example.test/stream".into(), headers: map(&[("Authorization", "Bearer x")]) };
    let expected =
        Config::default().server("git", stdio("uvx", &["mcp-server-git"], &[])).server("events", remote(events, false));
    assert_eq!(vscode, expected);
    assert_eq!(vscode.servers["git"].policy, PolicyOverrides::default());
}

#[test]
fn an_empty_file_loads_with_no_servers() {
    assert!(parse_ok("{}").servers.is_empty());
    assert!(parse_ok(r#"{"mcpServers": {}}"#).servers.is_empty());
    assert!(parse_ok(r#"{"servers": {}, "tether": {"mode": "meta"}}"#).servers.is_empty());
}

#[test]
fn the_authorization_section_gives_the_engine_its_scopes_and_is_checked_whole() {
    let config = parse_ok(
        r#"{"tether": {"authorization": {"issuer": "https://login.example.com/", "required_scopes": ["mcp"],
            "scopes": {"mcp:time": {"servers": ["time"]}, "mcp:echo": {"tools": ["everything__echo"]}}}},
            "mcpServers": {"time": {"command": "t"}}}"#,
    );
    assert_eq!(config.scopes["mcp:time"].servers, ["time"]);
    assert_eq!(config.scopes["mcp:echo"].tools, ["everything__echo"]);

    let typo =
        problems(r#"{"tether": {"authorization": {"issuer": "https://a.example/", "isuer": "x"}}, "mcpServers": {}}"#);
    assert!(typo.iter().any(|p| p.starts_with("tether.authorization: unknown field `isuer`")), "{typo:?}");
    let hmac = problems(
        r#"{"tether": {"authorization": {"issuer": "https://a.example/", "algorithms": ["HS256"]}}, "mcpServers": {}}"#,
    );
    assert!(hmac.iter().any(|p| p.starts_with("tether.authorization.algorithms: ") && p.contains("HS256")), "{hmac:?}");
    let plain = problems(r#"{"tether": {"authorization": {"issuer": "http://login.example.com/"}}, "mcpServers": {}}"#);
    assert!(plain.iter().any(|p| p.starts_with("tether.authorization.issuer: ") && p.contains("https")), "{plain:?}");
    let empty = problems(
        r#"{"tether": {"authorization": {"issuer": "https://a.example/", "scopes": {"s": {}}}}, "mcpServers": {}}"#,
    );
    assert!(empty.iter().any(|p| p.starts_with("tether.authorization.scopes.s: grants nothing")), "{empty:?}");
}

#[test]
fn the_cluster_section_gives_the_engine_its_drain_and_its_key_ring_is_checked_at_load() {
    let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let config = parse_ok(&format!(
        r#"{{"tether": {{"cluster": {{"session_keys": "1:{key}", "drain_delay_ms": 1000}}}}, "mcpServers": {{}}}}"#
    ));
    let cluster = config.cluster.expect("a cluster section");
    assert_eq!((cluster.drain_delay_ms, cluster.drain_timeout_ms), (1000, 25_000));
    assert!(parse_ok(r#"{"mcpServers": {}}"#).cluster.is_none(), "no section: a stop stops at once");
    let missing = problems(r#"{"tether": {"cluster": {"drain_delay_ms": 1000}}, "mcpServers": {}}"#);
    assert!(missing.iter().any(|p| p.starts_with("tether.cluster.session_keys: required")), "{missing:?}");
    let short = problems(r#"{"tether": {"cluster": {"session_keys": "1:c2hvcnQ="}}, "mcpServers": {}}"#);
    assert!(short.iter().any(|p| p.contains("5 bytes")), "{short:?}");
    let typo = problems(&format!(
        r#"{{"tether": {{"cluster": {{"session_keys": "1:{key}", "drain_dely_ms": 1}}}}, "mcpServers": {{}}}}"#
    ));
    assert!(typo.iter().any(|p| p.contains("drain_dely_ms")), "{typo:?}");
    let order = problems(&format!(
        r#"{{"tether": {{"cluster": {{"session_keys": "1:{key}", "drain_delay_ms": 9000, "drain_timeout_ms": 1000}}}}, "mcpServers": {{}}}}"#
    ));
    assert!(order.iter().any(|p| p.contains("drain_timeout_ms")), "{order:?}");
}
