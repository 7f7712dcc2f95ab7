//! tether's own tools on their own: which are served, and the read-only ones
//! answered from what one session may see.

use super::*;
use crate::access::{Access, ScopeGrant, ScopeMap};
use crate::config::{Policy, ServerConfig};
use crate::gateway::backend::Backend;
use crate::supervisor::Supervisor;
use alloc::vec;

fn config(mode: Mode, admin_tools: bool) -> Config {
    Config { mode, admin_tools, ..Config::default() }
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

#[test]
fn meta_mode_serves_six_flat_mode_three_admin_tools_or_none() {
    let names = |c: &Config| OwnTool::served(c).iter().map(|t| t.name()).collect::<Vec<_>>();
    assert_eq!(names(&config(Mode::Meta, false)).len(), 6);
    assert_eq!(names(&config(Mode::Flat, true)), ["list_servers", "reconnect_server", "server_events"]);
    assert!(names(&config(Mode::Flat, false)).is_empty());
    assert_eq!(OwnTool::named(&config(Mode::Flat, true), "search_tools"), None, "not served in flat mode");
    assert_eq!(OwnTool::named(&config(Mode::Meta, false), "search_tools"), Some(OwnTool::SearchTools));
    for definition in OwnTool::definitions(&config(Mode::Meta, false)) {
        let tool: Value = serde_json::from_str(definition).expect("valid JSON");
        assert!(tool["inputSchema"]["type"] == "object", "{definition}");
    }
}

#[test]
fn an_execute_tool_call_names_its_target_only_in_meta_mode() {
    let call = args(json!({"name": "execute_tool", "arguments": {"name": "time__now"}}));
    assert_eq!(execute_target(&config(Mode::Meta, false), &call), Some("time__now"));
    assert_eq!(execute_target(&config(Mode::Flat, true), &call), None);
    assert_eq!(execute_target(&config(Mode::Meta, false), &args(json!({"name": "time__now"}))), None);
}

/// Backends `time` (tool `now`) and `files` (tools `read`, `write`), both online.
fn setup() -> (Backends, Catalog) {
    let mut backends = Backends::default();
    let mut catalog = Catalog::new("__");
    let tool = |n: &str, d: &str| {
        json!({"name": n, "description": d, "inputSchema": {"type": "object"}}).as_object().cloned().unwrap_or_default()
    };
    for (server, tools) in [
        ("time", vec![tool("now", "current time")]),
        ("files", vec![tool("read", "read a file"), tool("write", "write a file")]),
    ] {
        let mut sup = Supervisor::new(true, false, Policy::default(), Instant::ZERO);
        sup.set_status(Status::Online, None);
        backends.insert(server.into(), Backend::new(ServerConfig::stdio("x", &[]), sup));
        catalog.register(server, true);
        catalog.install(server, [tools, vec![], vec![], vec![]]);
    }
    (backends, catalog)
}

#[test]
fn the_read_only_tools_answer_only_of_what_the_session_may_see() {
    let (backends, catalog) = setup();
    let journal = Journal::default();
    let config = config(Mode::Meta, false);
    let mut mapping = ScopeMap::new();
    mapping.insert("read".into(), ScopeGrant { servers: vec![], tools: vec!["files__read".into()] });
    let held = ["read".to_string()];
    let view = SessionView::new(Access::new(&mapping, Some(&held)), &catalog);
    let inspector = Inspector {
        backends: &backends,
        catalog: &catalog,
        journal: &journal,
        view,
        config: &config,
        now: Instant::ZERO,
    };

    let servers = inspector.list_servers();
    let rows = servers["servers"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{servers}");
    assert_eq!((rows[0]["server"].as_str(), rows[0]["tools"].as_u64()), (Some("files"), Some(1)), "the granted part");
    assert_eq!(rows[0]["available"], true);

    let found = inspector.search_tools(&args(json!({"query": "file"}))).expect("a search");
    let names: Vec<&str> = found["tools"].as_array().expect("hits").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["files__read"]);
    let error = inspector.search_tools(&args(json!({"query": "x", "server": "time"}))).unwrap_err();
    assert_eq!(error, "unknown server 'time'; the servers are: files", "an unseen server is not named");

    assert_eq!(inspector.describe_tool(&args(json!({"name": "files__read"}))).expect("granted")["server"], "files");
    let withheld = inspector.describe_tool(&args(json!({"name": "files__write"}))).unwrap_err();
    assert!(withheld.starts_with("unknown tool 'files__write'"), "{withheld}");
    assert_eq!(inspector.describe_tool(&args(json!({"name": "search_tools"}))).expect("own")["server"], "tether");
    assert!(inspector.search_tools(&args(json!({"query": 3}))).is_err(), "arguments are checked");
}
