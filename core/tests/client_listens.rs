//! `subscriptions/listen` from clients of the stateless 2026-07-28 revision: the
//! listen is acknowledged with what tether will deliver, every change then comes
//! on it tagged with its id, from backends of either era (a handshake-era
//! backend's `list_changed` and `resources/updated`, a stateless backend's own
//! listen), and it ends when the client cancels it or goes away, taking its
//! resource subscriptions with it. A listen is never answered while open.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::{Action, ClientRoute, Config, ServerConfig, SessionId};

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// `fs`, a handshake-era backend with tools and subscribable resources, and
/// `stateless`, a stateless one announcing tool list changes; both online.
fn booted() -> Sim {
    let mut config = Config::default()
        .server("fs", ServerConfig::stdio("fs-server", &[]))
        .server("stateless", ServerConfig::stdio("stateless-server", &[]));
    config.stateless_clients = true;
    let mut sim = Sim::new(config);
    sim.answer(
        "fs",
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"resources":{"subscribe":true,"listChanged":true}}}),
    );
    sim.answer_tools("fs", &["read"]);
    sim.answer("fs", "resources/templates/list", json!({"resourceTemplates":[]}));
    sim.answer("fs", "resources/list", json!({"resources":[{"uri":"file:///a.txt","name":"a"}]}));
    sim.answer(
        "stateless",
        "server/discover",
        json!({"resultType":"complete","supportedVersions":[STATELESS],"capabilities":{"tools":{"listChanged":true}},"ttlMs":0,"cacheScope":"private"}),
    );
    sim.answer(
        "stateless",
        "tools/list",
        json!({"resultType":"complete","tools":[{"name":"now","inputSchema":{"type":"object"}}],"ttlMs":0,"cacheScope":"private"}),
    );
    sim
}

fn on_listen(id: &str) -> ClientRoute {
    ClientRoute::Related(id.into())
}

fn listen(sim: &mut Sim, id: Value, notifications: Value) -> Vec<(ClientRoute, Value)> {
    let from = sim.actions.len();
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"subscriptions/listen","params":{"_meta":meta(),"notifications":notifications}}));
    routed_since(sim, from)
}

#[test]
fn changes_from_backends_of_both_eras_arrive_on_the_listen_until_it_is_cancelled() {
    let mut sim = booted();
    sim.note("a stateless client listens for tool list changes and one resource (and one tether cannot serve)");
    let acked = listen(
        &mut sim,
        json!("L"),
        json!({"toolsListChanged":true,"resourceSubscriptions":["fs+file:///a.txt","nope+file:///x"]}),
    );
    assert_eq!(acked.len(), 1, "{acked:?}");
    let (route, ack) = &acked[0];
    assert_eq!(*route, on_listen(r#""L""#));
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], "L");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged":true,"resourceSubscriptions":["fs+file:///a.txt"]}),
        "only what tether can honour"
    );
    let (_, sub) = sim.requests_to("fs", "resources/subscribe").pop().expect("subscribed at the handshake backend");
    assert_eq!(sub["uri"], "file:///a.txt");

    sim.note("the handshake-era backend's tools change");
    let from = sim.actions.len();
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("fs", &["read", "write"]);
    let sent = routed_since(&sim, from);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, on_listen(r#""L""#));
    assert_eq!(sent[0].1["method"], "notifications/tools/list_changed");
    assert_eq!(sent[0].1["params"]["_meta"][SUBSCRIPTION_ID], "L");

    sim.note("two seconds later (list changes are told at most once per 2 s) the stateless backend's tools change, announced on tether's own listen to it");
    sim.advance(Config::default().list_changed_debounce_ms);
    let (backend_listen, _) = sim.requests_to("stateless", "subscriptions/listen").pop().unwrap();
    let from = sim.actions.len();
    sim.backend(
        "stateless",
        json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{SUBSCRIPTION_ID:backend_listen}}}),
    );
    sim.answer(
        "stateless",
        "tools/list",
        json!({"resultType":"complete","tools":[{"name":"now","inputSchema":{"type":"object"}},{"name":"later","inputSchema":{"type":"object"}}],"ttlMs":0,"cacheScope":"private"}),
    );
    let sent = routed_since(&sim, from);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1["params"]["_meta"][SUBSCRIPTION_ID], "L", "tether's listen id, not the backend's");

    sim.note("a resource update: served URI, tagged with the listen");
    let from = sim.actions.len();
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a.txt"}}),
    );
    let sent = routed_since(&sim, from);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1["params"], json!({"_meta":{SUBSCRIPTION_ID:"L"},"uri":"fs+file:///a.txt"}));

    sim.note("the client cancels the listen: no answer, the subscription goes, nothing more arrives");
    let from = sim.actions.len();
    sim.client(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"L"}}));
    assert!(routed_since(&sim, from).is_empty());
    let (_, unsub) = sim.requests_to("fs", "resources/unsubscribe").pop().expect("unsubscribed");
    assert_eq!(unsub["uri"], "file:///a.txt");
    let from = sim.actions.len();
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("fs", &["read"]);
    assert!(routed_since(&sim, from).is_empty());
    assert!(sim.responses_for(0).is_empty());
    insta::assert_snapshot!(sim.log);
}

#[test]
fn each_listen_gets_what_it_asked_for_and_a_handshake_client_gets_plain_notifications() {
    let mut sim = booted();
    let handshake = SessionId(2);
    sim.session(handshake, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}));
    sim.session(handshake, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    listen(&mut sim, json!(1), json!({"toolsListChanged":true}));
    listen(&mut sim, json!(2), json!({"promptsListChanged":true,"resourcesListChanged":true}));
    let from = sim.actions.len();
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("fs", &["read", "write"]);
    let mut to_stateless = Vec::new();
    let mut to_handshake = Vec::new();
    for (_, a) in &sim.actions[from..] {
        if let Action::SendToClient { session, frame, route } = a {
            let frame: Value = serde_json::from_str(frame).unwrap();
            if *session == CLIENT {
                to_stateless.push((route.clone(), frame));
            } else if *session == handshake {
                to_handshake.push(frame);
            }
        }
    }
    assert_eq!(to_stateless.len(), 1, "only the listen that asked for tools: {to_stateless:?}");
    assert_eq!(to_stateless[0].0, on_listen("1"));
    assert_eq!(to_handshake, [json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"})]);
}

#[test]
fn a_listen_is_refused_when_malformed_or_outside_the_stateless_revision() {
    let mut sim = booted();
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"_meta":meta()}}));
    assert_eq!(sim.response(1)["error"]["code"], -32602);
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"subscriptions/listen","params":{"_meta":meta(),"notifications":{"resourceSubscriptions":"fs+file:///a.txt"}}}));
    assert_eq!(sim.response(2)["error"]["code"], -32602);
    // A handshake-era session has resources/subscribe and list_changed instead.
    let handshake = SessionId(2);
    sim.session(handshake, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}));
    let from = sim.actions.len();
    sim.session(
        handshake,
        json!({"jsonrpc":"2.0","id":3,"method":"subscriptions/listen","params":{"notifications":{}}}),
    );
    let refused: Vec<Value> = sim.actions[from..]
        .iter()
        .filter_map(|(_, a)| match a {
            Action::SendToClient { frame, .. } => serde_json::from_str(frame).ok(),
            _ => None,
        })
        .collect();
    assert_eq!(refused[0]["error"]["code"], -32601);
}

#[test]
fn a_client_that_goes_away_takes_its_listens_subscriptions_with_it() {
    let mut sim = booted();
    listen(&mut sim, json!(1), json!({"resourceSubscriptions":["fs+file:///a.txt"]}));
    listen(&mut sim, json!(2), json!({"resourceSubscriptions":["fs+file:///a.txt"]}));
    assert_eq!(sim.requests_to("fs", "resources/subscribe").len(), 1, "one backend subscription for both");
    sim.client(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}));
    assert!(sim.requests_to("fs", "resources/unsubscribe").is_empty(), "listen 2 still holds it");
    let from = sim.actions.len();
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a.txt"}}),
    );
    let sent = routed_since(&sim, from);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, on_listen("2"));
    sim.input(tether_core::Input::ClientClosed { session: CLIENT });
    assert_eq!(sim.requests_to("fs", "resources/unsubscribe").len(), 1);
}

#[test]
fn a_listening_http_client_is_not_closed_as_idle() {
    let mut sim = booted();
    let idle = u64::from(tether_core::Config::default().limits.idle_session_ms);
    sim.input(tether_core::Input::ClientConnected { session: CLIENT, expires: true });
    listen(&mut sim, json!(1), json!({"toolsListChanged":true}));
    // Health checks come every two minutes: answered, so the backends stay up.
    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..(2 * idle / 60_000) {
        sim.advance(60_000);
        for (server, method) in [("fs", "ping"), ("stateless", "server/discover")] {
            for (id, _) in sim.requests_to(server, method) {
                if answered.insert((server, id)) {
                    let result = match method {
                        "ping" => json!({}),
                        _ => {
                            json!({"resultType":"complete","supportedVersions":[STATELESS],"capabilities":{"tools":{"listChanged":true}},"ttlMs":0,"cacheScope":"private"})
                        }
                    };
                    reply(&mut sim, server, id, result);
                }
            }
        }
    }
    let closed =
        |sim: &Sim| sim.actions.iter().any(|(_, a)| matches!(a, Action::CloseClient { session } if *session == CLIENT));
    assert!(!closed(&sim), "a listen is a request in flight");
    sim.note("once the listen ends, the session is idle like any other");
    sim.client(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}));
    sim.advance(idle + 1);
    assert!(closed(&sim));
}
