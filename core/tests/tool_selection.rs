//! Choosing what a backend serves: allow and deny lists, renamed and
//! redescribed tools, hidden prompts and resources, and a reload that changes
//! the choice, as scenarios in simulated time.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::config::{Filter, Mode, Override, Selection};
use tether_core::{Action, Config, Input, ServerConfig};

/// `fs`, a filesystem-like backend with four tools, two prompts and two
/// resources, served with `selection`.
fn config(selection: Selection) -> Config {
    Config::default().server("fs", ServerConfig { selection, ..ServerConfig::stdio("fs-server", &[]) })
}

/// Read tools only, and nothing about media.
fn read_only() -> Selection {
    Selection {
        tools: Filter {
            allow: vec!["read_*".into(), "list_*".into()],
            deny: vec!["*media*".into()],
            ..Filter::default()
        },
        ..Selection::default()
    }
}

fn booted(config: Config) -> Sim {
    let mut sim = Sim::new(config);
    sim.answer(
        "fs",
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"prompts":{},"resources":{}},"serverInfo":{"name":"fs","version":"1"}}),
    );
    sim.answer(
        "fs",
        "tools/list",
        json!({"tools":[
            {"name":"read_file","description":"Read the complete contents of a file.","inputSchema":{"type":"object"}},
            {"name":"read_media_file","description":"Read an image or audio file.","inputSchema":{"type":"object"}},
            {"name":"list_directory","description":"List the entries of a directory.","inputSchema":{"type":"object"}},
            {"name":"write_file","description":"Create or overwrite a file.","inputSchema":{"type":"object"}}
        ]}),
    );
    sim.answer("fs", "prompts/list", json!({"prompts":[{"name":"summarize"},{"name":"delete_all"}]}));
    sim.answer(
        "fs",
        "resources/list",
        json!({"resources":[{"name":"notes","uri":"file:///notes/a.md"},{"name":"secrets","uri":"file:///etc/secrets"}]}),
    );
    sim.answer("fs", "resources/templates/list", json!({"resourceTemplates":[]}));
    sim.client_init();
    sim
}

fn spawns(sim: &Sim) -> usize {
    sim.actions.iter().filter(|(_, a)| matches!(a, Action::Spawn { .. })).count()
}

fn list_changed(sim: &Sim) -> usize {
    sim.client_frames().iter().filter(|f| f["method"] == "notifications/tools/list_changed").count()
}

fn tool(sim: &mut Sim, id: u64, name: &str) -> Value {
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}));
    let tools = sim.response(id)["result"]["tools"].as_array().unwrap().clone();
    tools.into_iter().find(|t| t["name"] == name).unwrap_or(Value::Null)
}

#[test]
fn hidden_tools_are_neither_listed_nor_callable() {
    let mut sim = booted(config(read_only()));
    assert_eq!(listed_tools(&mut sim, 1), ["fs__read_file", "fs__list_directory"]);

    let sent = sim.requests_to("fs", "tools/call").len();
    sim.call(2, "fs__write_file");
    let error = error_of(&sim, 2);
    assert_eq!(error["code"], -32602);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("'fs__write_file' is not served") && message.contains("server 'fs' hides it"),
        "{message}"
    );
    sim.call(3, "fs__read_media_file");
    assert!(error_of(&sim, 3)["message"].as_str().unwrap().contains("hides it"), "deny wins over allow");
    assert_eq!(sim.requests_to("fs", "tools/call").len(), sent, "nothing hidden reaches the backend");

    sim.call(4, "fs__no_such_tool");
    assert_eq!(error_of(&sim, 4)["message"], "unknown tool: fs__no_such_tool", "unknown is not hidden");

    sim.call(5, "fs__read_file");
    let (id, call) = sim.requests_to("fs", "tools/call").last().cloned().unwrap();
    assert_eq!(call["name"], "read_file");
    reply(&mut sim, "fs", id, text_result("contents"));
    assert_eq!(sim.response(5)["result"]["content"][0]["text"], "contents");
}

#[test]
fn overrides_change_what_the_client_sees_and_calls_reach_the_backend_under_its_own_name() {
    let renamed = Override {
        name: Some("read".into()),
        title: Some("Read a note".into()),
        description: Some("Read one note from the notes folder.".into()),
    };
    let selection = Selection {
        tools: Filter { overrides: [("read_file".to_string(), renamed)].into_iter().collect(), ..Filter::default() },
        ..Selection::default()
    };
    let mut sim = booted(config(selection));
    let served = tool(&mut sim, 1, "fs__read");
    assert_eq!(served["title"], "Read a note");
    assert_eq!(served["description"], "Read one note from the notes folder.");
    assert_eq!(served["inputSchema"], json!({"type":"object"}), "the rest is the backend's");
    assert_eq!(tool(&mut sim, 2, "fs__read_file"), Value::Null, "served under the new name only");

    sim.call(3, "fs__read");
    let (id, call) = sim.requests_to("fs", "tools/call").last().cloned().unwrap();
    assert_eq!(call["name"], "read_file");
    reply(&mut sim, "fs", id, text_result("note"));
    assert_eq!(sim.response(3)["result"]["content"][0]["text"], "note");
}

#[test]
fn a_reload_that_changes_the_selection_tells_the_client_without_restarting_the_backend() {
    let mut sim = booted(config(Selection::default()));
    assert_eq!(listed_tools(&mut sim, 1).len(), 4);
    sim.advance(5_000);
    let (spawned, told) = (spawns(&sim), list_changed(&sim));

    sim.note("reload: only the read tools");
    sim.input(Input::ConfigReloaded { config: config(read_only()) });
    assert_eq!(list_changed(&sim), told + 1, "the client is told its tools changed");
    assert_eq!(listed_tools(&mut sim, 2), ["fs__read_file", "fs__list_directory"]);
    assert_eq!(spawns(&sim), spawned, "a selection change needs no restart");
    assert_eq!(sim.status("fs"), tether_core::Status::Online);

    sim.advance(5_000);
    sim.note("reload: everything again");
    sim.input(Input::ConfigReloaded { config: config(Selection::default()) });
    assert_eq!(list_changed(&sim), told + 2);
    assert_eq!(
        listed_tools(&mut sim, 3),
        ["fs__read_file", "fs__read_media_file", "fs__list_directory", "fs__write_file"]
    );

    sim.advance(5_000);
    sim.note("reload: the same again: nothing to tell");
    sim.input(Input::ConfigReloaded { config: config(Selection::default()) });
    assert_eq!(list_changed(&sim), told + 2);
    assert_eq!(spawns(&sim), spawned);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn meta_search_and_execute_never_reach_hidden_tools() {
    let mut sim = booted(Config { mode: Mode::Meta, ..config(read_only()) });
    let search = json!({"name":"search_tools","arguments":{"query":"write or overwrite a file"}});
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":search}));
    let found = sim.response(1)["result"]["structuredContent"].clone();
    let names: Vec<&str> = found["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"fs__write_file") && !names.contains(&"fs__read_media_file"), "{names:?}");
    assert_eq!(found["searched"], 2, "only the served tools are searched");

    let execute = json!({"name":"execute_tool","arguments":{"name":"fs__write_file","arguments":{}}});
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":execute}));
    let result = sim.response(2)["result"].clone();
    assert_eq!(result["isError"], true);
    assert!(result["content"][0]["text"].as_str().unwrap().contains("hides it"), "{result}");
    let describe = json!({"name":"describe_tool","arguments":{"name":"fs__write_file"}});
    sim.client(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":describe}));
    assert!(sim.response(3)["result"]["content"][0]["text"].as_str().unwrap().contains("hides it"));
    assert!(sim.requests_to("fs", "tools/call").is_empty());
}

#[test]
fn prompts_and_resources_are_chosen_the_same_way() {
    let selection = Selection {
        prompts: Filter { deny: vec!["delete_*".into()], ..Filter::default() },
        resources: Filter { allow: vec!["file:///notes/*".into()], ..Filter::default() },
        ..Selection::default()
    };
    let mut sim = booted(config(selection));
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"prompts/list"}));
    assert_eq!(sim.response(1)["result"]["prompts"], json!([{"name":"fs__summarize"}]));
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"fs__delete_all"}}));
    assert!(error_of(&sim, 2)["message"].as_str().unwrap().contains("prompt 'fs__delete_all' is not served"));

    sim.client(json!({"jsonrpc":"2.0","id":3,"method":"resources/list"}));
    assert_eq!(sim.response(3)["result"]["resources"], json!([{"name":"notes","uri":"fs+file:///notes/a.md"}]));
    // Not listed, and not readable by URI either (as a template could make it).
    sim.client(json!({"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"fs+file:///etc/secrets"}}));
    let message = error_of(&sim, 4)["message"].as_str().unwrap().to_string();
    assert!(message.contains("resource fs+file:///etc/secrets is not served"), "{message}");
    sim.client(
        json!({"jsonrpc":"2.0","id":5,"method":"resources/subscribe","params":{"uri":"fs+file:///etc/secrets"}}),
    );
    assert!(error_of(&sim, 5).get("message").is_some());
    assert!(
        sim.requests_to("fs", "resources/read").is_empty() && sim.requests_to("fs", "resources/subscribe").is_empty()
    );

    sim.client(json!({"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"fs+file:///notes/a.md"}}));
    assert_eq!(sim.requests_to("fs", "resources/read").len(), 1);

    // Dressed up to pass the rule, as the backend would resolve it: refused all the same.
    for (id, walk) in [
        (7, "fs+file:///notes/../etc/secrets"),
        (8, "fs+file:///notes/%2e%2e/etc/secrets"),
        (9, "fs+file:///notes/..%2Fetc/secrets"),
        (10, "fs+file:///notes/%zz"),
    ] {
        sim.client(json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri":walk}}));
        let message = error_of(&sim, id)["message"].as_str().unwrap().to_string();
        assert!(message.contains("is not served"), "{walk}: {message}");
    }
    assert_eq!(sim.requests_to("fs", "resources/read").len(), 1, "none of them reached the backend");
}

#[test]
fn hiding_a_name_hands_it_to_the_backend_it_kept_out() {
    let unprefixed =
        |selection: Selection| ServerConfig { prefixed: false, selection, ..ServerConfig::stdio("x", &[]) };
    let config =
        |a: Selection| Config::default().server("a", unprefixed(a)).server("b", unprefixed(Selection::default()));
    let mut sim = Sim::new(config(Selection::default()));
    sim.boot("a", &["search"]);
    sim.boot("b", &["search", "other"]);
    sim.client_init();
    assert_eq!(listed_tools(&mut sim, 1), ["search", "other"], "a holds `search`");

    sim.note("reload: a hides its search; b's is served");
    let deny = Selection { tools: Filter { deny: vec!["search".into()], ..Filter::default() }, ..Selection::default() };
    sim.input(Input::ConfigReloaded { config: config(deny) });
    let mut names = listed_tools(&mut sim, 2);
    names.sort();
    assert_eq!(names, ["other", "search"]);
    sim.call(3, "search");
    assert_eq!(sim.requests_to("b", "tools/call").len(), 1, "the call goes to b");
    assert!(sim.requests_to("a", "tools/call").is_empty());
}
