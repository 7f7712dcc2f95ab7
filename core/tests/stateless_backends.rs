//! Backends of the stateless 2026-07-28 revision: the era of each backend is
//! detected (a remote one probed with `server/discover`, falling back to
//! `initialize`; a stdio one sent `initialize` first, probed if it refuses) and
//! kept across reconnects; requests to a stateless backend carry
//! the per-request `_meta`; its change notifications come on a
//! `subscriptions/listen` tether keeps open; health checks use `server/discover`;
//! and its `input_required` answers become requests to a handshake-era client.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::protocol::Era;
use tether_core::{Config, Failure, Input, ServerConfig, Status};

const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPS_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

fn discover_result(tools_list_changed: bool) -> Value {
    json!({
        "resultType": "complete",
        "supportedVersions": [STATELESS],
        "capabilities": {"tools": {"listChanged": tools_list_changed}},
        "ttlMs": 60000, "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "stateless", "version": "1"}}
    })
}

fn tools_result(names: &[&str]) -> Value {
    let tools: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "description": format!("{n} tool"), "inputSchema": {"type": "object"}}))
        .collect();
    json!({"resultType": "complete", "tools": tools, "ttlMs": 60000, "cacheScope": "public"})
}

/// `fs` (stdio) refuses `initialize`, answers the probe as a stateless server
/// and lists `tools`.
fn boot_stateless(sim: &mut Sim, tools: &[&str]) {
    sim.answer("fs", "server/discover", discover_result(true));
    sim.answer("fs", "tools/list", tools_result(tools));
}

fn meta_of(params: &Value) -> &Value {
    &params["_meta"]
}

#[test]
fn a_stateless_backend_is_probed_listened_to_and_called_with_per_request_meta() {
    let mut sim = Sim::new(one_stdio());
    sim.note("a stdio backend of unknown era is sent initialize; a stateless-only one refuses it and is probed");
    assert!(sim.requests_to("fs", "server/discover").is_empty(), "no probe before initialize on stdio");
    sim.refuse_initialize("fs");
    let (_, probe) = sim.requests_to("fs", "server/discover").pop().unwrap();
    assert_eq!(meta_of(&probe)[VERSION_KEY], STATELESS);
    boot_stateless(&mut sim, &["read"]);
    assert_eq!(sim.requests_to("fs", "initialize").len(), 1, "initialize is not sent again");
    assert_eq!(sim.status("fs"), Status::Online);
    assert_eq!(sim.gw.status("fs").unwrap().era, Era::Stateless);
    let (_, list) = sim.requests_to("fs", "tools/list").pop().unwrap();
    assert_eq!(meta_of(&list)[VERSION_KEY], STATELESS, "every request carries the revision: {list}");
    sim.note("list changes come only on a listen: tether opens one for what the backend announces");
    let (listen, params) = sim.requests_to("fs", "subscriptions/listen").pop().unwrap();
    assert_eq!(params["notifications"], json!({"toolsListChanged": true}));
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":listen},"notifications":{"toolsListChanged":true}}}),
    );

    sim.note("a handshake-era client calls: the backend hears which inputs that client can give");
    sim.client_init();
    sim.call(1, "fs__read");
    let (id, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(meta_of(&params)[CAPS_KEY], json!({"sampling":{},"roots":{}}));
    reply(&mut sim, "fs", id, json!({"resultType":"complete","content":[{"type":"text","text":"ok"}]}));
    assert_eq!(sim.response(1)["result"]["content"][0]["text"], "ok");

    sim.note("a change notification on the listen: tools are listed again and the client told");
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":listen}}}),
    );
    sim.answer("fs", "tools/list", tools_result(&["read", "write"]));
    assert!(sim.client_frames().iter().any(|f| f["method"] == "notifications/tools/list_changed"));
    assert_eq!(listed_tools(&mut sim, 2), ["fs__read", "fs__write"]);

    sim.note("health checks: ping is gone in that revision; server/discover is the cheap request");
    sim.advance(200_000);
    assert!(sim.requests_to("fs", "ping").is_empty());
    assert!(sim.requests_to("fs", "server/discover").len() >= 2);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_handshake_backend_on_stdio_gets_initialize_first_and_never_a_probe() {
    let mut sim = Sim::new(one_stdio());
    let (init, _) = sim.requests_to("fs", "initialize").pop().expect("initialize at once");
    assert!(sim.requests_to("fs", "server/discover").is_empty());
    sim.note("a server slow to start answers when it can: nothing else was sent meanwhile");
    sim.advance(10_000);
    assert_eq!(sim.requests_to("fs", "initialize").len(), 1);
    reply(&mut sim, "fs", init, json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
    sim.answer_tools("fs", &["read"]);
    assert_eq!(sim.status("fs"), Status::Online);
    assert_eq!(sim.gw.status("fs").unwrap().era, Era::Handshake);
    assert!(sim.requests_to("fs", "server/discover").is_empty(), "never probed");
}

/// A server of the stateless revision only (slow to start or not) refuses the
/// `initialize` it is sent first, with -32022 or -32601: it is probed then and
/// comes up stateless; silence to both is a failed connection.
#[test]
fn a_stateless_only_server_on_stdio_refuses_initialize_and_comes_up_stateless() {
    for (code, message) in [(-32022, "Unsupported protocol version"), (-32601, "Method not found")] {
        let mut sim = Sim::new(one_stdio());
        sim.advance(5_000);
        sim.answer_error("fs", "initialize", code, message);
        sim.answer("fs", "server/discover", discover_result(true));
        sim.answer("fs", "tools/list", tools_result(&["read"]));
        assert_eq!(sim.status("fs"), Status::Online, "{code}\n{}", sim.log);
        assert_eq!(sim.gw.status("fs").unwrap().era, Era::Stateless);
        assert_eq!(sim.requests_to("fs", "initialize").len(), 1, "never asked again");
    }
    let mut sim = Sim::new(one_stdio());
    sim.answer_error("fs", "initialize", -32601, "Method not found");
    assert_eq!(sim.requests_to("fs", "server/discover").len(), 1);
    sim.advance(30_000);
    let lost = events(&sim).iter().any(|(_, e)| matches!(e, tether_core::Event::ServerDisconnected { .. }));
    assert!(lost, "silent to the probe: the connect timeout fails the connection\n{}", sim.log);
}

#[test]
fn the_era_is_kept_across_restarts() {
    let mut sim = Sim::new(one_stdio());
    sim.note("a stateless backend restarts: it opens with server/discover again and listens again");
    let mut sim = Sim::new(one_stdio());
    boot_stateless(&mut sim, &["read"]);
    assert_eq!(sim.requests_to("fs", "subscriptions/listen").len(), 1);
    sim.advance(61_000);
    sim.exit("fs", Some(1));
    let probes = sim.requests_to("fs", "server/discover").len();
    assert_eq!(probes, 2, "restarted at once (ran > 60 s), opened in its era");
    assert_eq!(sim.requests_to("fs", "initialize").len(), 1, "only the first process was sent initialize");
    boot_stateless(&mut sim, &["read"]);
    assert_eq!(sim.requests_to("fs", "subscriptions/listen").len(), 2, "the listen is re-established");
}

#[test]
fn a_backend_that_refuses_initialize_after_an_upgrade_is_probed_and_spoken_to_statelessly() {
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read"]);
    sim.advance(61_000);
    sim.exit("fs", Some(0));
    sim.note("the new process speaks only the stateless revision: initialize is refused");
    sim.answer_error("fs", "initialize", -32601, "initialize: this server speaks 2026-07-28");
    sim.answer("fs", "server/discover", discover_result(false));
    sim.answer("fs", "tools/list", tools_result(&["read"]));
    assert_eq!(sim.status("fs"), Status::Online);
    assert_eq!(sim.gw.status("fs").unwrap().era, Era::Stateless);
}

#[test]
fn over_http_a_probe_refused_without_a_stateless_error_falls_back_and_an_unknown_revision_fails() {
    for (failure, fallback) in [
        (Failure::Http { status: 400 }, true),
        (Failure::Http { status: 404 }, true),
        (Failure::Http { status: 405 }, true),
        (Failure::Http { status: 500 }, false),
    ] {
        let mut sim = Sim::new(one_http());
        let probe = sim.last_request("web", "server/discover");
        sim.fail("web", Some(probe), failure.clone());
        assert_eq!(sim.requests_to("web", "initialize").len(), usize::from(fallback), "{failure:?}");
    }
    sim_with_error(
        json!({"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2025-11-25"],"requested":STATELESS}}),
        true,
    );
    sim_with_error(json!({"code":-32601,"message":"Method not found"}), true);
    let sim = sim_with_error(
        json!({"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2099-01-01"],"requested":STATELESS}}),
        false,
    );
    let last_error = sim.gw.status("web").unwrap().last_error.unwrap();
    assert!(last_error.contains("2099-01-01"), "{last_error}");
    assert_eq!(sim.status("web"), Status::Error);
}

fn sim_with_error(error: Value, fallback: bool) -> Sim {
    let mut sim = Sim::new(one_http());
    let probe = sim.last_request("web", "server/discover");
    sim.backend("web", json!({"jsonrpc":"2.0","id":probe,"error":error}));
    assert_eq!(sim.requests_to("web", "initialize").len(), usize::from(fallback), "{error}");
    sim
}

#[test]
fn a_backend_configured_stateless_is_never_sent_initialize() {
    let config =
        Config::default().server("fs", ServerConfig { era: Some(Era::Stateless), ..ServerConfig::stdio("fs", &[]) });
    let mut sim = Sim::new(config);
    sim.advance(10_000);
    let probe = sim.last_request("fs", "server/discover");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":probe,"error":{"code":-32601,"message":"Method not found"}}));
    assert!(sim.requests_to("fs", "initialize").is_empty());
    assert_ne!(sim.status("fs"), Status::Online);
    let config =
        Config::default().server("fs", ServerConfig { era: Some(Era::Handshake), ..ServerConfig::stdio("fs", &[]) });
    let sim = Sim::new(config);
    assert!(sim.requests_to("fs", "server/discover").is_empty());
    assert_eq!(sim.requests_to("fs", "initialize").len(), 1);
}

#[test]
fn a_stateless_backends_input_required_becomes_requests_to_a_handshake_client_and_the_retry_carries_the_answers() {
    let mut sim = Sim::new(one_stdio());
    boot_stateless(&mut sim, &["book"]);
    sim.client(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"elicitation":{}},"clientInfo":{"name":"legacy","version":"1"}}}));
    sim.client(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    sim.client(json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fs__book","arguments":{"to":"Paris"},"_meta":{"progressToken":"p"}}}));
    let (first, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    sim.note("the backend needs a confirmation and a model answer: input_required");
    reply(
        &mut sim,
        "fs",
        first,
        json!({"resultType":"input_required","requestState":"opaque-1","inputRequests":{
            "confirm":{"method":"elicitation/create","params":{"mode":"form","message":"Book it?","requestedSchema":{"type":"object","properties":{}}}},
            "summary":{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":10}}}}),
    );
    assert!(sim.responses_for(7).is_empty(), "the client's call is still running");
    let asks: Vec<Value> =
        sim.client_frames().into_iter().filter(|f| f.get("method").is_some() && f.get("id").is_some()).collect();
    assert_eq!(asks.len(), 2, "{asks:?}");
    let by_method = |m: &str| asks.iter().find(|f| f["method"] == m).unwrap()["id"].clone();
    sim.note("the client answers both; the call goes to the backend again with them");
    sim.client(json!({"jsonrpc":"2.0","id":by_method("elicitation/create"),"result":{"action":"accept","content":{}}}));
    assert_eq!(sim.requests_to("fs", "tools/call").len(), 1, "not before every answer is in");
    sim.client(json!({"jsonrpc":"2.0","id":by_method("sampling/createMessage"),"result":{"role":"assistant","content":{"type":"text","text":"ok"},"model":"m"}}));
    let (second, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_ne!(second, first);
    assert_eq!(params["requestState"], "opaque-1");
    assert_eq!(params["inputResponses"]["confirm"], json!({"action":"accept","content":{}}));
    assert_eq!(params["inputResponses"]["summary"]["model"], "m");
    assert_eq!(params["arguments"], json!({"to":"Paris"}));
    assert_eq!(params["_meta"]["progressToken"], second, "progress still maps to the client's token");
    reply(&mut sim, "fs", second, json!({"resultType":"complete","content":[{"type":"text","text":"booked"}]}));
    assert_eq!(sim.response(7)["result"]["content"][0]["text"], "booked");
    insta::assert_snapshot!(sim.log);
}

#[test]
fn an_input_the_handshake_client_cannot_give_fails_the_call_and_an_unanswered_round_times_out() {
    let mut sim = Sim::new(one_stdio());
    boot_stateless(&mut sim, &["book"]);
    sim.client_init(); // sampling and roots, no elicitation
    sim.call(1, "fs__book");
    let (id, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    reply(
        &mut sim,
        "fs",
        id,
        json!({"resultType":"input_required","inputRequests":{"e":{"method":"elicitation/create","params":{}}}}),
    );
    let error = sim.response(1)["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("elicitation/create"), "{error}");

    sim.call(2, "fs__book");
    let (id, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    reply(&mut sim, "fs", id, json!({"resultType":"input_required","inputRequests":{"r":{"method":"roots/list"}}}));
    sim.advance(600_000);
    assert_eq!(sim.response(2)["error"]["code"], -32002);
    assert!(
        sim.client_frames().iter().any(|f| f["method"] == "notifications/cancelled"),
        "the roots request is withdrawn"
    );
}

#[test]
fn a_stateless_client_gets_a_stateless_backends_input_required_with_its_state_sealed_and_its_retry_reaches_the_backend()
{
    let mut config = one_stdio();
    config.stateless_clients = true;
    let mut sim = Sim::new(config);
    boot_stateless(&mut sim, &["book"]);
    let meta = json!({VERSION_KEY: STATELESS, CAPS_KEY: {"elicitation": {}}});
    sim.client(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__book","arguments":{},"_meta":meta}}),
    );
    let (id, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(meta_of(&params)[CAPS_KEY], json!({"elicitation":{}}), "the client's own capabilities");
    let asked = json!({"resultType":"input_required","requestState":"backend-state","inputRequests":{"c":{"method":"elicitation/create","params":{}}}});
    reply(&mut sim, "fs", id, asked.clone());
    let mut answer = sim.response(1)["result"].clone();
    // The backend's state rides inside tether's token, bound to this client's identity and request.
    let token = answer["requestState"].as_str().unwrap().to_string();
    assert!(token.starts_with("ts1.") && !token.contains("backend-state"), "{token}");
    answer["requestState"] = json!("backend-state");
    assert_eq!(answer, asked, "the rest as the backend said it");
    sim.input(Input::ClientAccess { session: CLIENT, scopes: vec![], principal: Some("mallory".into()) });
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs__book","arguments":{},"_meta":meta,"inputResponses":{"c":{"action":"decline"}},"requestState":token}}));
    assert!(sim.response(2)["error"]["message"].as_str().unwrap().contains("another identity"));
    let mut sim = Sim::new({
        let mut config = one_stdio();
        config.stateless_clients = true;
        config
    });
    boot_stateless(&mut sim, &["book"]);
    sim.client(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__book","arguments":{},"_meta":meta}}),
    );
    let (id, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    reply(&mut sim, "fs", id, asked);
    let token = sim.response(1)["result"]["requestState"].as_str().unwrap().to_string();
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs__book","arguments":{},"_meta":meta,"inputResponses":{"c":{"action":"decline"}},"requestState":token}}));
    let (retry, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(
        (params["requestState"].clone(), params["inputResponses"]["c"]["action"].clone()),
        (json!("backend-state"), json!("decline"))
    );
    reply(&mut sim, "fs", retry, json!({"resultType":"complete","content":[]}));
    assert_eq!(sim.response(2)["result"]["resultType"], "complete");
}

#[test]
fn a_handshake_clients_resource_subscription_on_a_stateless_backend_rides_its_listen() {
    let mut sim = Sim::new(one_stdio());
    let mut discovered = discover_result(false);
    discovered["capabilities"]["resources"] = json!({"subscribe": true});
    sim.answer("fs", "server/discover", discovered);
    sim.answer("fs", "tools/list", tools_result(&[]));
    sim.answer("fs", "resources/templates/list", json!({"resultType":"complete","resourceTemplates":[]}));
    sim.answer("fs", "resources/list", json!({"resultType":"complete","resources":[{"uri":"file:///a","name":"a"}]}));
    assert!(sim.requests_to("fs", "subscriptions/listen").is_empty(), "nothing to listen for yet");
    sim.client_init();
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"fs+file:///a"}}));
    assert_eq!(sim.response(1)["result"], json!({}));
    assert!(sim.requests_to("fs", "resources/subscribe").is_empty(), "removed in that revision");
    let (listen, params) = sim.requests_to("fs", "subscriptions/listen").pop().unwrap();
    assert_eq!(params["notifications"]["resourceSubscriptions"], json!(["file:///a"]));
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a","_meta":{"io.modelcontextprotocol/subscriptionId":listen}}}),
    );
    let updated: Vec<Value> =
        sim.client_frames().into_iter().filter(|f| f["method"] == "notifications/resources/updated").collect();
    assert_eq!(updated[0]["params"]["uri"], "fs+file:///a");
    sim.note("the last subscriber leaves: the listen ends (and nothing is left to listen for)");
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"resources/unsubscribe","params":{"uri":"fs+file:///a"}}));
    let cancelled: Vec<Value> = sim
        .actions
        .iter()
        .filter_map(|(_, a)| match a {
            tether_core::Action::SendToBackend { frame, .. } => serde_json::from_str::<Value>(frame).ok(),
            _ => None,
        })
        .filter(|f| f["method"] == "notifications/cancelled")
        .collect();
    assert_eq!(cancelled[0]["params"]["requestId"], listen);
}

#[test]
fn a_stateless_clients_log_level_goes_with_its_call_to_a_stateless_backend() {
    let mut config = one_stdio();
    config.stateless_clients = true;
    let mut sim = Sim::new(config);
    boot_stateless(&mut sim, &["read"]);
    let meta = json!({VERSION_KEY: STATELESS, CAPS_KEY: {}, "io.modelcontextprotocol/logLevel": "debug"});
    sim.client(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__read","arguments":{},"_meta": meta}}),
    );
    let (_, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(meta_of(&params)["io.modelcontextprotocol/logLevel"], "debug", "{params}");
    let meta = json!({VERSION_KEY: STATELESS, CAPS_KEY: {}});
    sim.client(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs__read","arguments":{},"_meta": meta}}),
    );
    let (_, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert!(meta_of(&params).get("io.modelcontextprotocol/logLevel").is_none(), "per request: {params}");
}

/// A stateless backend removed while a handshake client's answer to its
/// `input_required` is outstanding: the call fails at once, the question is
/// withdrawn, and the answer that comes later goes nowhere (there is no backend to
/// retry the call on).
#[test]
fn a_backend_removed_while_its_question_is_out_fails_the_call_and_withdraws_the_question() {
    let mut sim = Sim::new(one_stdio());
    boot_stateless(&mut sim, &["book"]);
    sim.client_init();
    sim.call(1, "fs__book");
    let (id, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    reply(&mut sim, "fs", id, json!({"resultType":"input_required","inputRequests":{"r":{"method":"roots/list"}}}));
    let asked = sim.client_frames().into_iter().find(|f| f["method"] == "roots/list").expect("asked");
    sim.admin(tether_core::AdminCommand::Remove { server: "fs".into() });
    assert_eq!(sim.response(1)["error"]["code"], -32001, "{}", sim.log);
    let withdrawn = sim.client_frames().into_iter().find(|f| f["method"] == "notifications/cancelled");
    assert_eq!(withdrawn.map(|f| f["params"]["requestId"].clone()), Some(asked["id"].clone()), "{}", sim.log);
    let before = sim.actions.len();
    sim.client(json!({"jsonrpc":"2.0","id": asked["id"].clone(),"result":{"roots":[]}}));
    assert_eq!(sim.actions.len(), before, "the late answer goes nowhere\n{}", sim.log);
}
