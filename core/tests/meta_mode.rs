//! Meta mode, the admin tools, events told to clients and the list-change
//! window, as scenarios in simulated time.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::config::Mode;
use tether_core::{Config, Failure, Status};

const META_TOOLS: [&str; 6] =
    ["list_servers", "search_tools", "describe_tool", "execute_tool", "reconnect_server", "server_events"];

/// `fs` (stdio) with file tools and `web` (HTTP) with a search tool, both online,
/// a client initialized.
fn booted(config: Config) -> Sim {
    let mut sim = Sim::new(config);
    sim.answer(
        "fs",
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"fs","version":"1"}}),
    );
    sim.answer(
        "fs",
        "tools/list",
        json!({"tools":[
            {"name":"read_file","description":"Read the complete contents of a file from disk.","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]},"annotations":{"readOnlyHint":true}},
            {"name":"write_file","description":"Create or overwrite a file.","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}}}}
        ]}),
    );
    sim.answer(
        "web",
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"web","version":"1"}}),
    );
    sim.answer(
        "web",
        "tools/list",
        json!({"tools":[{"name":"search","description":"Search the web for pages.","inputSchema":{"type":"object","properties":{"query":{"type":"string"}}}}]}),
    );
    sim.client_init();
    sim
}

fn meta() -> Config {
    Config { mode: Mode::Meta, ..two_backends() }
}

fn call_tool(sim: &mut Sim, id: u64, name: &str, arguments: Value) -> Value {
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":arguments}}));
    sim.response(id)
}

/// The structured content of a successful own-tool result.
fn structured(response: &Value) -> Value {
    let result = &response["result"];
    assert_ne!(result["isError"], true, "{response}");
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, result["structuredContent"], "the text is the structured content");
    result["structuredContent"].clone()
}

/// The message of an own-tool result that reports a mistake.
fn tool_error(response: &Value) -> String {
    assert_eq!(response["result"]["isError"], true, "{response}");
    response["result"]["content"][0]["text"].as_str().unwrap().to_string()
}

/// `notifications/message` params from logger `tether` the client received.
fn tether_messages(sim: &Sim) -> Vec<Value> {
    sim.client_frames()
        .into_iter()
        .filter(|f| f["method"] == "notifications/message" && f["params"]["logger"] == "tether")
        .map(|f| f["params"].clone())
        .collect()
}

fn list_changed_count(sim: &Sim) -> usize {
    sim.client_frames().iter().filter(|f| f["method"] == "notifications/tools/list_changed").count()
}

#[test]
fn meta_mode_serves_six_tools_and_a_backend_tool_is_found_described_and_executed() {
    let mut sim = booted(meta());
    sim.note("tools/list: tether's six tools, none of the backends'");
    assert_eq!(listed_tools(&mut sim, 1), META_TOOLS);

    sim.note("search_tools ranks the backends' tools by the query");
    let found = structured(&call_tool(&mut sim, 2, "search_tools", json!({"query":"read a file"})));
    let first = &found["tools"][0];
    assert_eq!(
        (first["name"].as_str(), first["server"].as_str(), first["available"].as_bool()),
        (Some("fs__read_file"), Some("fs"), Some(true))
    );
    assert_eq!(first["description"], "Read the complete contents of a file from disk.");
    assert_eq!(found["searched"], 3);

    sim.note("describe_tool gives the whole definition");
    let described = structured(&call_tool(&mut sim, 3, "describe_tool", json!({"name":"fs__read_file"})));
    assert_eq!(described["tool"]["inputSchema"]["required"], json!(["path"]));
    assert_eq!(described["tool"]["annotations"]["readOnlyHint"], true);
    assert_eq!((described["server"].as_str(), described["status"].as_str()), (Some("fs"), Some("online")));
    let own = structured(&call_tool(&mut sim, 30, "describe_tool", json!({"name":"search_tools"})));
    assert_eq!((own["server"].as_str(), own["tool"]["name"].as_str()), (Some("tether"), Some("search_tools")));

    sim.note("execute_tool is the backend's own call, progress token and all; its result is the tool's");
    sim.client(json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"execute_tool","arguments":{"name":"fs__read_file","arguments":{"path":"/a"}},"_meta":{"progressToken":"p1"}}}));
    let (call, params) = sim.requests_to("fs", "tools/call").pop().expect("forwarded");
    assert_eq!((params["name"].as_str(), &params["arguments"]), (Some("read_file"), &json!({"path":"/a"})));
    assert!(params["_meta"]["progressToken"].is_number() || params["_meta"]["progressToken"].is_string());
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":params["_meta"]["progressToken"],"progress":1}}),
    );
    reply(&mut sim, "fs", call, text_result("hello"));
    assert_eq!(sim.response(4)["result"]["content"][0]["text"], "hello");
    let progress: Vec<Value> =
        sim.client_frames().into_iter().filter(|f| f["method"] == "notifications/progress").collect();
    assert_eq!(progress[0]["params"]["progressToken"], "p1");

    sim.note("a backend tool called by its own name still works in meta mode");
    sim.call(5, "web__search");
    let id = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", id, text_result("found"));
    assert_eq!(sim.response(5)["result"]["content"][0]["text"], "found");
    insta::assert_snapshot!(sim.log);
}

#[test]
fn execute_tool_has_the_resilience_of_a_direct_call() {
    let mut sim = booted(meta());
    sim.note("web goes offline; execute_tool on it waits for the scheduled attempt, then answers the structured error");
    sim.fail("web", None, Failure::Refused);
    assert_eq!(sim.status("web"), Status::Offline);
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_tool","arguments":{"name":"web__search","arguments":{"query":"x"}}}}));
    assert_eq!(sim.status("web"), Status::Offline, "the backoff holds: no attempt of the call's own");
    let wait = sim.gw.status("web").unwrap().next_retry_ms.unwrap();
    sim.advance(wait);
    assert_eq!(sim.status("web"), Status::Connecting, "the scheduled attempt");
    sim.fail("web", None, Failure::Refused);
    let error = sim.response(1)["error"].clone();
    assert_eq!(error["code"], -32001, "{error}");
    assert_eq!((error["data"]["server"].as_str(), error["data"]["status"].as_str()), (Some("web"), Some("offline")));

    sim.note("search_tools still finds web's tools, marked unavailable");
    let found = structured(&call_tool(&mut sim, 2, "search_tools", json!({"query":"search the web"})));
    assert_eq!(
        (found["tools"][0]["name"].as_str(), found["tools"][0]["available"].as_bool()),
        (Some("web__search"), Some(false))
    );
}

#[test]
fn mistakes_in_own_tool_arguments_are_tool_errors_the_model_can_read() {
    let mut sim = booted(meta());
    assert!(tool_error(&call_tool(&mut sim, 1, "describe_tool", json!({"name":"nope"}))).contains("search_tools"));
    assert!(tool_error(&call_tool(&mut sim, 2, "describe_tool", json!({}))).contains("'name' is required"));
    assert!(tool_error(&call_tool(&mut sim, 3, "execute_tool", json!({"name":"nope"}))).contains("unknown tool 'nope'"));
    assert!(tool_error(&call_tool(&mut sim, 4, "execute_tool", json!({"name":"list_servers"})))
        .contains("call it directly"));
    let bad_args = call_tool(&mut sim, 5, "execute_tool", json!({"name":"fs__read_file","arguments":"x"}));
    assert!(tool_error(&bad_args).contains("must be an object"));
    assert!(tool_error(&call_tool(&mut sim, 6, "search_tools", json!({"query":"x","limit":0}))).contains("limit"));
    assert!(tool_error(&call_tool(&mut sim, 7, "search_tools", json!({"query":"x","server":"zz"}))).contains("fs, web"));
    assert!(tool_error(&call_tool(&mut sim, 8, "reconnect_server", json!({"server":"zz"}))).contains("unknown server"));
    assert!(tool_error(&call_tool(&mut sim, 9, "server_events", json!({"since":-1}))).contains("since"));
    let empty = structured(&call_tool(&mut sim, 10, "search_tools", json!({"query":"weather"})));
    assert_eq!(empty["tools"], json!([]));
    assert!(empty["hint"].as_str().unwrap().contains("other or fewer keywords"));
    assert!(sim.requests_to("fs", "tools/call").is_empty() && sim.requests_to("web", "tools/call").is_empty());
}

#[test]
fn admin_tools_join_flat_mode_only_when_switched_on() {
    let mut plain = booted(two_backends());
    assert_eq!(listed_tools(&mut plain, 1), ["fs__read_file", "fs__write_file", "web__search"]);
    plain.call(2, "list_servers");
    assert_eq!(plain.response(2)["error"]["code"], -32602, "not a tool without the switch");

    let mut sim = booted(Config { admin_tools: true, ..two_backends() });
    assert_eq!(
        listed_tools(&mut sim, 1),
        ["list_servers", "reconnect_server", "server_events", "fs__read_file", "fs__write_file", "web__search"]
    );
    let servers = structured(&call_tool(&mut sim, 2, "list_servers", json!({})));
    let fs = &servers["servers"][0];
    assert_eq!(fs["server"], "fs");
    for key in [
        "status",
        "breaker",
        "reconnect_attempt",
        "next_retry_ms",
        "health",
        "crashes_in_window",
        "tools",
        "estimated_tokens",
        "last_error",
    ] {
        assert!(fs.get(key).is_some(), "list_servers shows {key}: {fs}");
    }
    assert_eq!(
        (fs["status"].as_str(), fs["tools"].as_u64(), fs["health"].as_str()),
        (Some("online"), Some(2), Some("ok"))
    );
    sim.call(3, "search_tools");
    assert_eq!(sim.response(3)["error"]["code"], -32602, "meta mode's search is not an admin tool");
}

#[test]
fn reconnect_server_follows_the_backends_state() {
    let mut sim = booted(Config { admin_tools: true, ..two_backends() });
    sim.note("connected: a fresh connection");
    let done = structured(&call_tool(&mut sim, 1, "reconnect_server", json!({"server":"fs"})));
    assert_eq!((done["was"].as_str(), done["status"].as_str()), (Some("online"), Some("connecting")));
    assert_eq!(sim.gw.status("fs").unwrap().generation, tether_core::Generation(2));

    sim.note("offline: the scheduled retry is cancelled and tried now");
    sim.fail("web", None, Failure::Refused);
    let retry = sim.gw.status("web").unwrap().next_retry_ms;
    assert!(retry.is_some());
    let done = structured(&call_tool(&mut sim, 2, "reconnect_server", json!({"server":"web"})));
    assert_eq!((done["was"].as_str(), done["status"].as_str()), (Some("offline"), Some("connecting")));

    sim.note("permanently failed: restarted with its crash history cleared");
    sim.boot("fs", &["read_file"]);
    for _ in 0..3 {
        sim.exit("fs", Some(1));
        sim.advance(20_000);
        if sim.status("fs") != Status::PermanentlyFailed {
            sim.boot("fs", &["read_file"]);
        }
    }
    assert_eq!(sim.status("fs"), Status::PermanentlyFailed);
    let done = structured(&call_tool(&mut sim, 3, "reconnect_server", json!({"server":"fs"})));
    assert_eq!((done["was"].as_str(), done["action"].as_str()), (Some("permanently_failed"), Some("restarting")));
    assert_eq!(sim.gw.status("fs").unwrap().crashes_in_window, 0);
    assert_eq!(sim.status("fs"), Status::Connecting);
}

#[test]
fn server_events_reads_what_changed_by_cursor() {
    let mut sim = booted(Config { admin_tools: true, ..two_backends() });
    let recent = structured(&call_tool(&mut sim, 1, "server_events", json!({})));
    let cursor = recent["next_since"].as_u64().unwrap();
    assert!(!recent["events"].as_array().unwrap().is_empty(), "the startup is there");

    sim.note("web goes offline: polling from the cursor gives exactly that");
    sim.fail("web", None, Failure::Refused);
    let new = structured(&call_tool(&mut sim, 2, "server_events", json!({"since": cursor})));
    let kinds: Vec<&str> = new["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["server_disconnected", "server_reconnecting", "server_status_changed"]);
    assert!(new["events"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["server"] == "web" && e["seq"].as_u64() >= Some(cursor)));
    let cursor = new["next_since"].as_u64().unwrap();
    let none = structured(&call_tool(&mut sim, 3, "server_events", json!({"since": cursor})));
    assert_eq!((none["events"].clone(), none["next_since"].as_u64()), (json!([]), Some(cursor)));

    sim.note("filtered by server, and limited");
    let fs_only = structured(&call_tool(&mut sim, 4, "server_events", json!({"since": 0, "server": "fs", "limit": 2})));
    let fs_events = fs_only["events"].as_array().unwrap();
    assert_eq!(fs_events.len(), 2);
    assert!(fs_events.iter().all(|e| e["server"] == "fs"));
    assert_eq!(fs_only["next_since"].as_u64(), Some(fs_events[1]["seq"].as_u64().unwrap() + 1));
}

#[test]
fn events_reach_clients_as_log_messages_at_their_level_and_rationed() {
    let mut sim = booted(two_backends());
    let before = tether_messages(&sim).len();
    sim.note("web goes offline: the client hears it, structured");
    sim.fail("web", None, Failure::Refused);
    let told = tether_messages(&sim)[before..].to_vec();
    let offline = told.iter().find(|m| m["data"]["event"] == "server_status_changed").expect("told");
    assert_eq!(offline["level"], "warning");
    assert_eq!((offline["data"]["server"].as_str(), offline["data"]["to"].as_str()), (Some("web"), Some("offline")));
    assert!(offline["data"]["seq"].is_u64());

    sim.note("at level error the client hears only errors");
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"error"}}));
    let before = tether_messages(&sim).len();
    sim.admin(tether_core::AdminCommand::Reconnect { server: "web".into() });
    sim.fail("web", None, Failure::Refused);
    assert_eq!(tether_messages(&sim).len(), before, "warnings are below error");
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}));

    sim.note("a flapping backend: at most 20 of its events a minute reach the client, then a count of the rest");
    let before = tether_messages(&sim).len();
    for _ in 0..15 {
        sim.admin(tether_core::AdminCommand::Reconnect { server: "web".into() });
        sim.fail("web", None, Failure::Refused);
    }
    // Three of this minute's 20 went when web first went offline.
    assert_eq!(tether_messages(&sim).len() - before, 20 - 3);
    let before = tether_messages(&sim).len();
    sim.advance(60_000);
    sim.admin(tether_core::AdminCommand::Reconnect { server: "web".into() });
    let next = tether_messages(&sim)[before].clone();
    assert!(next["data"]["suppressed_before"].as_u64().unwrap() > 10, "{next}");
    assert!(next["data"]["note"].as_str().unwrap().contains("server_events"));
}

#[test]
fn a_flapping_backend_cannot_flood_the_client_with_list_changes() {
    let mut sim = booted(two_backends());
    assert_eq!(list_changed_count(&sim), 0);
    sim.note("web goes away: the client is told at once");
    sim.fail("web", None, Failure::Refused);
    assert_eq!(list_changed_count(&sim), 1);
    sim.note("then it flaps four times within the 2 s window, ending away: nothing more to tell");
    for _ in 0..2 {
        sim.advance(200);
        sim.admin(tether_core::AdminCommand::Reconnect { server: "web".into() });
        sim.boot("web", &["search"]);
        assert_eq!(sim.status("web"), Status::Online);
        sim.advance(200);
        sim.fail("web", None, Failure::Refused);
    }
    sim.advance(2_000);
    assert_eq!(list_changed_count(&sim), 1, "back to what the client last heard");

    sim.note("it comes back: told at once (a new window); it flaps inside that window and ends away: told once, at the window's end");
    sim.admin(tether_core::AdminCommand::Reconnect { server: "web".into() });
    sim.boot("web", &["search"]);
    assert_eq!(list_changed_count(&sim), 2, "a new window: told at once");
    sim.fail("web", None, Failure::Refused);
    sim.advance(100);
    sim.admin(tether_core::AdminCommand::Reconnect { server: "web".into() });
    sim.boot("web", &["search"]);
    sim.fail("web", None, Failure::Refused);
    assert_eq!(list_changed_count(&sim), 2, "held inside the window");
    sim.advance(2_000);
    assert_eq!(list_changed_count(&sim), 3, "told once when the window ends");
}

#[test]
fn an_unprefixed_backend_tool_named_like_an_admin_tool_is_shadowed_not_listed_twice() {
    let mut config = Config { admin_tools: true, ..one_stdio() };
    config.servers.get_mut("fs").unwrap().prefixed = false;
    let mut sim = Sim::new(config);
    sim.boot("fs", &["list_servers", "read"]);
    sim.client_init();
    assert_eq!(listed_tools(&mut sim, 1), ["list_servers", "reconnect_server", "server_events", "read"]);
    let servers = structured(&call_tool(&mut sim, 2, "list_servers", json!({})));
    assert_eq!(servers["servers"][0]["server"], "fs", "tether's own answered");
    assert!(sim.requests_to("fs", "tools/call").is_empty());
}
