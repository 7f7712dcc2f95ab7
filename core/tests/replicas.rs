//! One replica of several behind a load balancer: a handshake-era session's
//! facts are sealed into its id before the `initialize` answer, another replica
//! adopts the session from them and serves it with no re-initialize, a stream
//! resumed on a replica that did not hold it answers its lost request with an
//! error at once, and a replica asked to stop drains: not ready at once, new
//! requests taken for `drain_delay_ms`, calls in flight finished up to
//! `drain_timeout_ms`, then streams end.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::cluster::SessionFacts;
use tether_core::config::Cluster;
use tether_core::{Action, ClientRoute, Config, Input, SessionId};

const WEB: SessionId = SessionId(7);

fn booted(config: Config) -> Sim {
    let mut sim = Sim::new(config);
    sim.boot("fs", &["read"]);
    sim
}

fn init(sim: &mut Sim, session: SessionId) {
    sim.input(Input::ClientConnected { session, expires: true });
    sim.input(Input::ClientAccess { session, scopes: vec![], principal: Some("iss|alice".into()) });
    sim.session(session, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"experimental":{"x":{}}},"clientInfo":{"name":"agent","version":"2"}}}));
    sim.session(session, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
}

fn sealed(sim: &Sim) -> Vec<(usize, SessionFacts)> {
    sim.actions
        .iter()
        .enumerate()
        .filter_map(|(at, (_, a))| match a {
            Action::SealSession { facts, .. } => Some((at, facts.clone())),
            _ => None,
        })
        .collect()
}

/// What `session` was sent from action `from` on, with its route.
fn routed_to(sim: &Sim, session: SessionId, from: usize) -> Vec<(ClientRoute, Value)> {
    sim.actions[from..]
        .iter()
        .filter_map(|(_, a)| match a {
            Action::SendToClient { session: s, frame, route } if *s == session => {
                Some((route.clone(), serde_json::from_str(frame).unwrap()))
            }
            _ => None,
        })
        .collect()
}

fn position(sim: &Sim, session: SessionId, id: Value) -> usize {
    sim.actions
        .iter()
        .position(|(_, a)| match a {
            Action::SendToClient { session: s, frame, .. } if *s == session => {
                serde_json::from_str::<Value>(frame).unwrap()["id"] == id
            }
            _ => false,
        })
        .expect("answered")
}

#[test]
fn an_http_session_is_sealed_before_its_initialize_answer_and_a_stdio_one_never() {
    let mut sim = booted(one_stdio());
    sim.client_init();
    assert!(sealed(&sim).is_empty(), "a stdio session has no id to seal into");
    init(&mut sim, WEB);
    let seals = sealed(&sim);
    assert_eq!(seals.len(), 1);
    let (at, facts) = &seals[0];
    assert!(*at < position(&sim, WEB, json!(0)), "sealed before the answer that carries the id");
    assert_eq!(facts.protocol_version, "2025-11-25");
    assert_eq!(facts.capabilities, r#"{"sampling":{}}"#, "only what the gateway acts on");
    assert_eq!(facts.client.as_deref(), Some("agent/2"));
    assert_eq!(facts.principal.as_deref(), Some("iss|alice"));
}

#[test]
fn another_replica_adopts_a_sealed_session_and_serves_it_without_initialize() {
    let mut a = booted(one_stdio());
    init(&mut a, WEB);
    let facts = sealed(&a).pop().unwrap().1;

    let mut b = booted(one_stdio());
    b.note("replica b: the balancer sends the session's next request here");
    b.input(Input::ClientAdopted { session: SessionId(3), facts });
    b.input(Input::ClientAccess { session: SessionId(3), scopes: vec![], principal: Some("iss|alice".into()) });
    b.session(
        SessionId(3),
        json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"fs__read","arguments":{}}}),
    );
    let (backend_id, _) = b.requests_to("fs", "tools/call").pop().expect("routed to the backend");
    b.note("the backend asks the client to sample: the sealed capabilities say it can");
    b.backend(
        "fs",
        json!({"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}),
    );
    b.backend("fs", json!({"jsonrpc":"2.0","id":backend_id,"result":{"content":[]}}));
    let frames = b.frames_to(SessionId(3));
    assert!(frames.iter().any(|f| f["method"] == "sampling/createMessage"), "{frames:?}");
    assert_eq!(frames.last().unwrap()["id"], json!(5));
    assert!(frames.last().unwrap().get("result").is_some());
    assert!(sealed(&b).is_empty(), "an adopted session keeps the id it came with");
    insta::assert_snapshot!(b.log);
}

#[test]
fn an_adopted_session_of_a_version_this_build_does_not_speak_is_closed() {
    let mut sim = booted(one_stdio());
    let facts = SessionFacts {
        protocol_version: "2099-01-01".into(),
        capabilities: "{}".into(),
        client: None,
        log_level: None,
        principal: None,
    };
    let out = sim.input(Input::ClientAdopted { session: WEB, facts });
    assert_eq!(out, vec![Action::CloseClient { session: WEB }]);
    assert!(sim.gw.session_era(WEB).is_none());
}

#[test]
fn a_lost_stream_gets_one_list_changed_and_an_error_for_its_request_at_once() {
    let mut sim = booted(one_stdio());
    init(&mut sim, WEB);
    let from = sim.actions.len();
    sim.input(Input::ClientStreamLost { session: WEB, request: Some("41".into()) });
    let routed = routed_to(&sim, WEB, from);
    assert_eq!(routed.len(), 2, "{routed:?}");
    assert_eq!(routed[0].0, ClientRoute::Related("41".into()));
    assert_eq!(routed[0].1["method"], "notifications/tools/list_changed");
    assert_eq!(routed[1].0, ClientRoute::Reply("41".into()));
    assert_eq!(routed[1].1["error"]["code"], -32603);
    assert!(routed[1].1["error"]["message"].as_str().unwrap().contains("replica"));

    // The standalone stream: only the list_changed.
    let from = sim.actions.len();
    sim.input(Input::ClientStreamLost { session: WEB, request: None });
    let routed = routed_to(&sim, WEB, from);
    assert_eq!(routed.len(), 1);
    assert_eq!(routed[0].0, ClientRoute::Session);
}

#[test]
fn a_request_still_in_flight_here_is_not_answered_as_lost() {
    let mut sim = booted(one_stdio());
    init(&mut sim, WEB);
    sim.session(WEB, json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"fs__read","arguments":{}}}));
    let from = sim.actions.len();
    sim.input(Input::ClientStreamLost { session: WEB, request: Some("9".into()) });
    let routed = routed_to(&sim, WEB, from);
    assert!(routed.iter().all(|(route, _)| *route != ClientRoute::Reply("9".into())), "{routed:?}");
    let (backend_id, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    sim.backend("fs", json!({"jsonrpc":"2.0","id":backend_id,"result":{"content":[]}}));
    assert_eq!(sim.frames_to(WEB).iter().filter(|f| f["id"] == json!(9)).count(), 1);
}

fn clustered() -> Config {
    let mut config = one_stdio();
    config.cluster = Some(Cluster { drain_delay_ms: 5_000, drain_timeout_ms: 25_000 });
    config
}

fn drain_steps(sim: &Sim) -> Vec<(u64, String)> {
    sim.actions
        .iter()
        .filter(|(_, a)| matches!(a, Action::StopAccepting | Action::EndClientStreams))
        .map(|(at, a)| (*at, a.to_string()))
        .collect()
}

#[test]
fn a_drain_takes_requests_for_the_delay_then_waits_for_calls_in_flight_then_ends_streams() {
    let mut sim = booted(clustered());
    init(&mut sim, WEB);
    sim.session(WEB, json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__read","arguments":{}}}));
    sim.note("SIGTERM");
    let began = sim.now;
    sim.input(Input::Drain);
    assert!(sim.gw.draining() && !sim.gw.drained());
    sim.advance(4_000);
    sim.note("still taking requests while the balancer notices");
    sim.session(WEB, json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs__read","arguments":{}}}));
    sim.advance(1_000);
    assert_eq!(drain_steps(&sim), vec![(began + 5_000, "stop accepting".to_string())]);
    let calls = sim.requests_to("fs", "tools/call");
    assert_eq!(calls.len(), 2);
    sim.advance(2_000);
    sim.backend("fs", json!({"jsonrpc":"2.0","id":calls[0].0,"result":{"content":[]}}));
    assert!(!sim.gw.drained(), "one call still in flight");
    sim.advance(1_000);
    sim.backend("fs", json!({"jsonrpc":"2.0","id":calls[1].0,"result":{"content":[]}}));
    assert!(sim.gw.drained());
    let steps = drain_steps(&sim);
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[1], (sim.now, "end client streams".to_string()));
    for id in [1, 2] {
        let answers: Vec<Value> = sim.frames_to(WEB).into_iter().filter(|f| f["id"] == json!(id)).collect();
        assert!(answers.len() == 1 && answers[0].get("result").is_some(), "{answers:?}");
    }
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_drain_gives_up_on_calls_at_its_timeout_and_without_a_delay_stops_taking_requests_at_once() {
    let mut config = clustered();
    config.cluster = Some(Cluster { drain_delay_ms: 0, drain_timeout_ms: 10_000 });
    let mut sim = booted(config);
    init(&mut sim, WEB);
    sim.session(WEB, json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__read","arguments":{}}}));
    sim.input(Input::Drain);
    assert_eq!(drain_steps(&sim), vec![(sim.now, "stop accepting".to_string())]);
    sim.advance(9_999);
    assert!(!sim.gw.drained());
    sim.advance(1);
    assert!(sim.gw.drained());
    assert_eq!(drain_steps(&sim).last().unwrap().1, "end client streams");
}

#[test]
fn an_idle_replica_drains_as_soon_as_the_delay_is_over() {
    let mut sim = booted(clustered());
    init(&mut sim, WEB);
    sim.input(Input::Drain);
    sim.input(Input::Drain);
    sim.advance(5_000);
    assert!(sim.gw.drained());
    let steps: Vec<String> = drain_steps(&sim).into_iter().map(|(_, s)| s).collect();
    assert_eq!(steps, ["stop accepting", "end client streams"]);
}
