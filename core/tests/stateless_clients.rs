//! Clients of the stateless 2026-07-28 revision (`config.modern_clients`): the era
//! is decided by a session's first request, every stateless request is checked on
//! its own, `server/discover` is answered from the aggregate, and results carry
//! `resultType` (lists also `ttlMs`/`cacheScope`) whatever era the backend speaks.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::Config;

const MODERN: &str = "2026-07-28";

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "modern", "version": "1"},
    })
}

fn config(modern_clients: bool) -> Config {
    let mut config = one_stdio();
    config.modern_clients = modern_clients;
    config
}

/// `fs` (a handshake-era backend) online with one tool.
fn booted(modern_clients: bool) -> Sim {
    let mut sim = Sim::new(config(modern_clients));
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
    sim.answer_tools("fs", &["read"]);
    sim
}

#[test]
fn a_stateless_client_discovers_lists_and_calls_through_a_handshake_backend() {
    let mut sim = booted(true);
    sim.note("a stateless client: no initialize, _meta on every request");
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": meta()}}));
    let discover = sim.response(1)["result"].clone();
    assert_eq!(discover["resultType"], "complete");
    assert_eq!(discover["supportedVersions"][0], MODERN);
    assert!(discover["supportedVersions"].as_array().unwrap().contains(&json!("2025-11-25")));
    assert_eq!((discover["ttlMs"].clone(), discover["cacheScope"].clone()), (json!(0), json!("private")));
    assert_eq!(discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "tether");
    assert!(discover["capabilities"]["tools"].is_object());

    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta": meta()}}));
    let list = sim.response(2)["result"].clone();
    assert_eq!(list["tools"][0]["name"], "fs__read");
    assert_eq!((list["resultType"].clone(), list["ttlMs"].clone()), (json!("complete"), json!(0)));
    assert_eq!(list["cacheScope"], "private");

    sim.note("a call: the backend's result has no resultType; the client's has");
    sim.client(
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fs__read","arguments":{},"_meta": meta()}}),
    );
    let (id, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    // The client's protocol fields are its exchange with tether, not tether's with fs.
    assert_eq!(params["_meta"], json!({}), "{params}");
    reply(&mut sim, "fs", id, text_result("contents"));
    let result = sim.response(3)["result"].clone();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["content"][0]["text"], "contents");
    insta::assert_snapshot!(sim.log);
}

#[test]
fn stateless_requests_are_checked_one_by_one() {
    let mut sim = booted(true);
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": meta()}}));
    assert!(sim.response(1)["result"].is_object());

    // The session speaks the stateless revision now: _meta is required on every request.
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}));
    assert_eq!(sim.response(2)["error"]["code"], -32602);
    // Required keys.
    let mut no_caps = meta();
    no_caps.as_object_mut().unwrap().remove("io.modelcontextprotocol/clientCapabilities");
    sim.client(json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta": no_caps}}));
    let error = sim.response(3)["error"].clone();
    assert_eq!(error["code"], -32602);
    assert!(error["message"].as_str().unwrap().contains("clientCapabilities"), "{error}");
    // An unknown revision: -32022 with what tether speaks.
    let mut future = meta();
    future["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    sim.client(json!({"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta": future}}));
    let error = sim.response(4)["error"].clone();
    assert_eq!(error["code"], -32022);
    assert_eq!(error["data"]["requested"], "2099-01-01");
    assert_eq!(error["data"]["supported"][0], MODERN);
    // Methods the revision removed.
    for (id, method) in [(5, "ping"), (6, "initialize"), (7, "logging/setLevel"), (8, "resources/subscribe")] {
        sim.client(json!({"jsonrpc":"2.0","id":id,"method":method,"params":{"_meta": meta()}}));
        assert_eq!(sim.response(id)["error"]["code"], -32601, "{method}");
    }
    // Still served afterwards: a refusal is per request.
    sim.client(json!({"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"_meta": meta()}}));
    assert_eq!(sim.response(9)["result"]["resultType"], "complete");
}

#[test]
fn a_handshake_client_is_unchanged_when_stateless_clients_are_served() {
    let mut sim = booted(true);
    sim.client_init();
    assert!(sim.response(0)["result"]["protocolVersion"].is_string());
    // Its requests need no _meta, and a stray stateless _meta does not switch it.
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    let list = sim.response(1)["result"].clone();
    assert!(list.get("resultType").is_none() && list.get("ttlMs").is_none(), "{list}");
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta": meta()}}));
    assert_eq!(sim.response(2)["result"], json!({}));
}

#[test]
fn without_the_switch_a_discover_probe_gets_method_not_found_and_the_client_falls_back() {
    let mut sim = booted(false);
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": meta()}}));
    assert_eq!(sim.response(1)["error"]["code"], -32601);
    sim.client_init();
    assert!(sim.response(0)["result"]["protocolVersion"].is_string());
}
