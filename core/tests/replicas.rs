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
    b.input(Input::ClientAdopted { session: SessionId(3), facts, state: None });
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
    let out = sim.input(Input::ClientAdopted { session: WEB, facts, state: None });
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

// ----- continuations (`requestState`) across replicas -----

const RING: [(u8, [u8; 32]); 1] = [(1, [7; 32])];

/// A replica (its own seed, so its own name) whose `fs` serves `read`
/// (read-only) and `write` (no hints); stateless clients served.
fn stateless_replica(seed: u64) -> Sim {
    let mut config = one_stdio();
    config.stateless_clients = true;
    let mut sim = Sim::with_seed(config, seed);
    sim.gw.set_continuation_keys(&RING);
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
    let tools = json!({"tools":[
        {"name":"read","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
        {"name":"write","inputSchema":{"type":"object"}}
    ]});
    sim.answer("fs", "tools/list", tools);
    sim
}

fn stateless_call(tool: &str, extra: Value) -> Value {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
    });
    let mut params = json!({"name": format!("fs__{tool}"), "arguments": {"path": "/a"}, "_meta": meta});
    if let (Value::Object(p), Value::Object(e)) = (&mut params, extra) {
        p.extend(e);
    }
    params
}

/// Replica `a` answers a call of `tool` `input_required` (fs asks to sample): its requestState.
fn issued_on(a: &mut Sim, id: u64, tool: &str) -> String {
    a.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params": stateless_call(tool, json!({}))}));
    let sampling = json!({"messages":[],"maxTokens":5});
    a.backend("fs", json!({"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params": sampling}));
    a.advance(50);
    let answer = a.response(id)["result"].clone();
    assert_eq!(answer["resultType"], "input_required", "{answer}");
    answer["requestState"].as_str().unwrap().to_string()
}

fn retry(sim: &mut Sim, id: u64, tool: &str, state: &str) -> Value {
    let extra = json!({"requestState": state, "inputResponses": {"s1": {"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"}}});
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params": stateless_call(tool, extra)}));
    sim.responses_for(id).pop().unwrap_or(Value::Null)
}

#[test]
fn a_continuation_from_another_replica_is_resent_when_safe_and_refused_at_once_when_not() {
    let mut a = stateless_replica(1);
    let mut b = stateless_replica(2);
    let read = issued_on(&mut a, 1, "read");
    b.note("the retry reaches replica b, which never saw the call: read is read-only, so it runs again");
    let before = b.requests_to("fs", "tools/call").len();
    assert_eq!(retry(&mut b, 2, "read", &read), Value::Null, "not answered yet: running");
    let (_, params) = b.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(b.requests_to("fs", "tools/call").len(), before + 1);
    assert!(params.get("requestState").is_none() && params.get("inputResponses").is_none(), "{params}");
    assert_eq!(params["name"], "read");

    let write = issued_on(&mut a, 11, "write");
    let refused = retry(&mut b, 3, "write", &write);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("another tether replica") && message.contains("fs__write"), "{message}");
    assert_eq!(b.requests_to("fs", "tools/call").len(), before + 1, "write is not run again");
    insta::assert_snapshot!(b.log);
}

#[test]
fn changed_expired_foreign_and_misused_continuations_are_refused_at_once() {
    let mut a = stateless_replica(1);
    let mut b = stateless_replica(2);
    let state = issued_on(&mut a, 1, "read");
    let mut changed = state.clone().into_bytes();
    let at = changed.len() - 3;
    changed[at] = if changed[at] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(changed).unwrap();
    let refused = retry(&mut b, 2, "read", &changed);
    assert!(refused.get("error").is_some(), "{refused}\n{}", b.log);
    assert!(refused["error"]["message"].as_str().unwrap().contains("not one tether issued"), "{refused}");
    // Another request under the same state.
    let refused = retry(&mut b, 3, "write", &state);
    assert!(refused["error"]["message"].as_str().unwrap().contains("another request"), "{refused}");
    // Another identity.
    b.input(Input::ClientAccess {
        session: tether_core::SessionId(1),
        scopes: vec![],
        principal: Some("mallory".into()),
    });
    let refused = retry(&mut b, 4, "read", &state);
    assert!(refused["error"]["message"].as_str().unwrap().contains("another identity"), "{refused}");
    // A replica with other keys.
    let mut stranger = stateless_replica(3);
    stranger.gw.set_continuation_keys(&[(1, [8; 32])]);
    let refused = retry(&mut stranger, 5, "read", &state);
    assert!(refused["error"]["message"].as_str().unwrap().contains("not one tether issued"), "{refused}");
    // Expired: the call's hard maximum (request_timeout_max_ms) passed.
    let max = a.gw.config().policy.request_timeout_max_ms;
    let mut fresh = stateless_replica(2);
    fresh.advance(max + 1_000);
    let refused = retry(&mut fresh, 6, "read", &state);
    assert!(refused["error"]["message"].as_str().unwrap().contains("expired"), "{refused}");
    // Its own replica still continues it (nothing above touched it).
    let mut a2 = stateless_replica(1);
    let own = issued_on(&mut a2, 1, "read");
    let before = a2.requests_to("fs", "tools/call").len();
    assert_eq!(retry(&mut a2, 7, "read", &own), Value::Null);
    assert_eq!(a2.requests_to("fs", "tools/call").len(), before, "continued, not run again");
}

/// A replica whose backend `fs` serves one subscribable resource.
fn with_resources() -> Sim {
    let mut sim = Sim::new(one_stdio());
    sim.answer(
        "fs",
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{},"resources":{"subscribe":true},"logging":{}},"serverInfo":{"name":"fs","version":"1"}}),
    );
    sim.answer_tools("fs", &["read"]);
    sim.answer("fs", "resources/templates/list", json!({"resourceTemplates":[]}));
    sim.answer("fs", "resources/list", json!({"resources":[{"uri":"file:///a.txt","name":"a"}]}));
    sim
}

/// The states `session` was reported with ([`Action::SessionState`]), in order.
fn states(sim: &Sim, session: SessionId) -> Vec<tether_core::cluster::SessionState> {
    sim.actions
        .iter()
        .filter_map(|(_, a)| match a {
            Action::SessionState { session: s, state } if *s == session => Some(state.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_sealed_sessions_log_level_and_subscriptions_follow_it_to_the_replica_that_adopts_it() {
    let mut a = with_resources();
    a.client_init();
    init(&mut a, WEB);
    let facts = sealed(&a).pop().unwrap().1;
    a.session(WEB, json!({"jsonrpc":"2.0","id":1,"method":"resources/list"}));
    let uri = a.frames_to(WEB).last().unwrap()["result"]["resources"][0]["uri"].as_str().unwrap().to_owned();
    a.session(WEB, json!({"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri": uri}}));
    a.answer("fs", "resources/subscribe", json!({}));
    a.session(WEB, json!({"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"error"}}));
    let reported = states(&a, WEB);
    assert_eq!(reported.len(), 2, "one report per change: {reported:?}");
    let last = reported.last().unwrap().clone();
    assert_eq!((last.log_level.as_deref(), last.subscriptions.clone()), (Some("error"), vec![uri.clone()]));
    a.client(json!({"jsonrpc":"2.0","id":4,"method":"logging/setLevel","params":{"level":"debug"}}));
    assert_eq!(states(&a, tether_core::SessionId(1)), vec![], "a stdio session has no id to follow");

    let b_session = SessionId(3);
    let mut b = with_resources();
    b.note("replica b adopts the session with the state replica a reported");
    b.input(Input::ClientAdopted { session: b_session, facts, state: Some(last) });
    let (_, subscribe) = b.requests_to("fs", "resources/subscribe").pop().expect("subscribed at b's backend");
    assert_eq!(subscribe["uri"], "file:///a.txt");
    b.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a.txt"}}),
    );
    let frames = b.frames_to(b_session);
    assert!(frames.iter().any(|f| f["method"] == "notifications/resources/updated"), "{frames:?}");
    b.note("a second session adopted at level debug: tether's own messages reach it, not the first");
    let chatty = SessionId(4);
    let debug = tether_core::cluster::SessionState { log_level: Some("debug".into()), subscriptions: vec![] };
    let facts = sealed(&a).pop().unwrap().1;
    b.input(Input::ClientAdopted { session: chatty, facts, state: Some(debug) });
    let from = b.actions.len();
    b.exit("fs", Some(1));
    let told = |s: SessionId| {
        routed_to(&b, s, from).into_iter().filter(|(_, f)| f["method"] == "notifications/message").count()
    };
    assert!(told(chatty) > 0, "the debug session hears of the crash");
    assert_eq!(told(b_session), 0, "the session restored at level error does not");
    b.session(b_session, json!({"jsonrpc":"2.0","id":9,"method":"resources/unsubscribe","params":{"uri": uri}}));
    let now = states(&b, b_session);
    assert_eq!(now.last().map(|s| s.subscriptions.len()), Some(0), "b reports what changed there: {now:?}");
}
