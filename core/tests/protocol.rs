//! MCP surface through the gateway: every request gets exactly one answer, names
//! and URIs are rewritten both ways, and backend features pass through.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::{Action, ClientRoute, Config, Input, ServerConfig, SessionId, StreamRef};

fn full_caps() -> Value {
    json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{},"resources":{"subscribe":true},"prompts":{},"logging":{},"completions":{}},"serverInfo":{"name":"fs","version":"1"}})
}

/// `fs` online with a tool, a resource, a template and a prompt; client ready.
fn booted() -> Sim {
    let mut sim = Sim::new(one_stdio());
    sim.answer("fs", "initialize", full_caps());
    sim.answer("fs", "tools/list", json!({"tools":[{"name":"read","inputSchema":{"type":"object"}}]}));
    sim.answer("fs", "resources/list", json!({"resources":[{"uri":"file:///a.txt","name":"a"}]}));
    sim.answer(
        "fs",
        "resources/templates/list",
        json!({"resourceTemplates":[{"uriTemplate":"file:///{path}","name":"any"}]}),
    );
    sim.answer("fs", "prompts/list", json!({"prompts":[{"name":"greet"}]}));
    sim.client_init();
    sim
}

#[test]
fn discovery_follows_backend_cursors() {
    let mut sim = Sim::new(one_stdio());
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
    sim.answer("fs", "tools/list", json!({"tools":[{"name":"a"}],"nextCursor":"page2"}));
    let (_, params) = sim.requests_to("fs", "tools/list").pop().unwrap();
    assert_eq!(params["cursor"], "page2");
    sim.answer("fs", "tools/list", json!({"tools":[{"name":"b"}]}));
    sim.client_init();
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    let names: Vec<_> =
        sim.response(1)["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, [json!("fs__a"), json!("fs__b")]);
}

#[test]
fn lists_are_paginated_with_tethers_own_cursor() {
    let mut config = one_stdio();
    config.limits.page_size = 2;
    let mut sim = Sim::new(config);
    sim.boot("fs", &["a", "b", "c"]);
    sim.client_init();
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    let first = sim.response(1);
    assert_eq!(first["result"]["tools"].as_array().unwrap().len(), 2);
    let cursor = first["result"]["nextCursor"].as_str().unwrap().to_string();
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":cursor}}));
    let second = sim.response(2);
    assert_eq!(second["result"]["tools"][0]["name"], "fs__c");
    assert!(second["result"].get("nextCursor").is_none());
    sim.client(json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"bogus"}}));
    assert_eq!(sim.response(3)["error"]["code"], -32602);
}

#[test]
fn resources_templates_and_reads_round_trip_uris() {
    let mut sim = booted();
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"resources/list"}));
    assert_eq!(sim.response(1)["result"]["resources"][0]["uri"], "fs+file:///a.txt");
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"resources/templates/list"}));
    assert_eq!(sim.response(2)["result"]["resourceTemplates"][0]["uriTemplate"], "fs+file:///{path}");
    sim.client(json!({"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"fs+file:///b/c.txt"}}));
    let (id, params) = sim.requests_to("fs", "resources/read").pop().unwrap();
    assert_eq!(params["uri"], "file:///b/c.txt");
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","id":id,"result":{"contents":[{"uri":"file:///b/c.txt","text":"hi","_meta":{"k":1}}]}}),
    );
    let read = sim.response(3);
    assert_eq!(read["result"]["contents"][0]["uri"], "fs+file:///b/c.txt");
    assert_eq!(read["result"]["contents"][0]["_meta"]["k"], 1);
    sim.client(json!({"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"nope+file:///x"}}));
    assert_eq!(sim.response(4)["error"]["code"], -32602);
}

#[test]
fn subscriptions_route_updates_to_subscribers_only() {
    let mut sim = booted();
    let other = SessionId(2);
    sim.session(other, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}));
    sim.session(other, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"fs+file:///a.txt"}}));
    let (id, params) = sim.requests_to("fs", "resources/subscribe").pop().unwrap();
    assert_eq!(params["uri"], "file:///a.txt");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{}}));
    assert!(sim.response(1)["result"].is_object());
    let before = sim.actions.len();
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a.txt"}}),
    );
    let updates: Vec<_> = sim.actions[before..]
        .iter()
        .filter_map(|(_, a)| match a {
            Action::SendToClient { session, frame, .. } => Some((*session, frame.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0].0, CLIENT);
    assert!(updates[0].1.contains("fs+file:///a.txt"));
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"resources/unsubscribe","params":{"uri":"fs+file:///a.txt"}}));
    let id = sim.last_request("fs", "resources/unsubscribe");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{}}));
    assert!(sim.response(2)["result"].is_object());
}

#[test]
fn prompts_and_completions_are_routed_by_served_name() {
    let mut sim = booted();
    sim.client(
        json!({"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"fs__greet","arguments":{"who":"x"}}}),
    );
    let (id, params) = sim.requests_to("fs", "prompts/get").pop().unwrap();
    assert_eq!(params["name"], "greet");
    assert_eq!(params["arguments"]["who"], "x");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{"messages":[]}}));
    assert!(sim.response(1)["result"]["messages"].is_array());
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"fs__greet"},"argument":{"name":"who","value":"a"}}}));
    let (id, params) = sim.requests_to("fs", "completion/complete").pop().unwrap();
    assert_eq!(params["ref"]["name"], "greet");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{"completion":{"values":["ab"]}}}));
    assert_eq!(sim.response(2)["result"]["completion"]["values"][0], "ab");
    sim.client(json!({"jsonrpc":"2.0","id":3,"method":"completion/complete","params":{"ref":{"type":"ref/resource","uri":"fs+file:///{path}"},"argument":{"name":"path","value":"a"}}}));
    let (_, params) = sim.requests_to("fs", "completion/complete").pop().unwrap();
    assert_eq!(params["ref"]["uri"], "file:///{path}");
}

#[test]
fn logging_set_level_fans_out_and_logs_come_back_labelled() {
    let mut sim = booted();
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}));
    assert!(sim.response(1)["result"].is_object());
    let (_, params) = sim.requests_to("fs", "logging/setLevel").pop().unwrap();
    assert_eq!(params["level"], "debug");
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"io","data":"x"}}),
    );
    let log = sim.client_frames().into_iter().rfind(|f| f["method"] == "notifications/message").unwrap();
    assert_eq!(log["params"]["logger"], "fs/io");
}

#[test]
fn sampling_is_routed_to_the_calling_session_and_back() {
    let mut sim = booted();
    sim.call(1, "fs__read");
    let call_id = sim.last_request("fs", "tools/call");
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":10}}),
    );
    let req = sim.client_frames().into_iter().rfind(|f| f["method"] == "sampling/createMessage").unwrap();
    let gid = req["id"].clone();
    sim.client(json!({"jsonrpc":"2.0","id":gid,"result":{"role":"assistant","content":{"type":"text","text":"ok"},"model":"m"}}));
    let forwarded = sim.actions.iter().rev().find_map(|(_, a)| match a {
        Action::SendToBackend { frame, .. } if frame.contains("\"s-1\"") => Some(frame.clone()),
        _ => None,
    });
    let forwarded: Value = serde_json::from_str(&forwarded.expect("answer forwarded")).unwrap();
    assert_eq!(forwarded["result"]["model"], "m");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":call_id,"result":{"content":[]}}));
    sim.response(1);
}

/// Over Streamable HTTP the transport says which call a backend's request is for:
/// the one whose POST stream it came on. It goes to that call's client, even when
/// another client's call is newer, and even between two token holders, where a
/// request without that word is refused rather than guessed.
#[test]
fn a_request_on_a_calls_post_stream_goes_to_that_calls_client() {
    let mut sim = Sim::new(one_http());
    sim.boot("web", &["search"]);
    let (alice, bob) = (SessionId(10), SessionId(11));
    for session in [alice, bob] {
        sim.input(Input::ClientConnected { session, expires: true });
        sim.input(Input::ClientAccess { session, scopes: vec!["mcp".into()], principal: None });
        sim.session(session, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"t","version":"1"}}}));
        sim.session(session, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    }
    let call = |sim: &mut Sim, session, id: u64| {
        sim.session(
            session,
            json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"web__search","arguments":{}}}),
        );
        sim.last_request("web", "tools/call")
    };
    let alices = call(&mut sim, alice, 7);
    let _bobs = call(&mut sim, bob, 8);
    let sampling = |id: &str| json!({"jsonrpc":"2.0","id":id,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}});
    let asked = |sim: &Sim, session| -> Vec<Value> {
        sim.frames_to(session).into_iter().filter(|f| f["method"] == "sampling/createMessage").collect()
    };

    // On Alice's POST stream, without an event id: Alice's, though Bob's call is newer.
    let generation = sim.gen("web");
    let frame = sampling("s1").to_string();
    let stream = StreamRef::Request(alices);
    sim.input(Input::BackendEvent { server: "web".into(), generation, stream, event_id: None, frame });
    let to_alice = asked(&sim, alice);
    assert_eq!((to_alice.len(), asked(&sim, bob).len()), (1, 0), "{}", sim.log);
    let route = sim.actions.iter().rev().find_map(|(_, a)| match a {
        Action::SendToClient { session, frame, route } if *session == alice && frame.contains("sampling") => {
            Some(route.clone())
        }
        _ => None,
    });
    assert_eq!(route.map(|r| format!("{r:?}")), Some(r#"Related("7")"#.to_string()), "on Alice's call's stream");

    // Alice answers; the backend gets the answer under its own id.
    let gid = to_alice[0]["id"].clone();
    sim.session(alice, json!({"jsonrpc":"2.0","id":gid,"result":{"role":"assistant","content":{"type":"text","text":"ok"},"model":"m"}}));
    let answered = sim.actions.iter().rev().find_map(|(_, a)| match a {
        Action::SendToBackend { frame, .. } if frame.contains("\"s1\"") => Some(frame.clone()),
        _ => None,
    });
    assert!(answered.is_some_and(|f| f.contains("\"model\":\"m\"")), "the answer reaches the backend");

    // The same request as a bare frame names no call: between two token holders
    // nobody is asked, and the backend is told why.
    sim.backend("web", sampling("s2"));
    assert_eq!((asked(&sim, alice).len(), asked(&sim, bob).len()), (1, 0));
    let refused = sim.actions.iter().rev().find_map(|(_, a)| match a {
        Action::SendToBackend { frame, .. } if frame.contains("\"s2\"") => Some(frame.clone()),
        _ => None,
    });
    assert!(refused.is_some_and(|f| f.contains("cannot tell which")), "the backend gets an error");

    // Alice's call is answered; a request on its stream then is no client's: Bob,
    // whose call is in flight, is not asked for it.
    sim.backend("web", json!({"jsonrpc":"2.0","id":alices,"result":{"content":[]}}));
    let frame = sampling("s3").to_string();
    sim.input(Input::BackendEvent { server: "web".into(), generation, stream, event_id: None, frame });
    assert_eq!((asked(&sim, alice).len(), asked(&sim, bob).len()), (1, 0), "{}", sim.log);
    let refused = sim.actions.iter().rev().find_map(|(_, a)| match a {
        Action::SendToBackend { frame, .. } if frame.contains("\"s3\"") => Some(frame.clone()),
        _ => None,
    });
    assert!(refused.is_some_and(|f| f.contains("error")), "the backend gets an error");
}

#[test]
fn roots_request_without_client_support_is_refused_to_the_backend() {
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read"]);
    sim.client(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}));
    sim.client(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let actions = sim.backend("fs", json!({"jsonrpc":"2.0","id":9,"method":"roots/list"}));
    assert!(actions.iter().any(
        |a| matches!(a, Action::SendToBackend { frame, .. } if frame.contains("\"id\":9") && frame.contains("error"))
    ));
}

#[test]
fn client_cancellation_reaches_the_backend_and_nothing_is_answered() {
    let mut sim = booted();
    sim.call(1, "fs__read");
    let id = sim.last_request("fs", "tools/call");
    sim.client(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user"}}));
    let cancel = sim.actions.iter().rev().find_map(|(_, a)| match a {
        Action::SendToBackend { frame, .. } if frame.contains("notifications/cancelled") => Some(frame.clone()),
        _ => None,
    });
    let cancel: Value = serde_json::from_str(&cancel.unwrap()).unwrap();
    assert_eq!(cancel["params"]["requestId"], id);
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{"content":[]}}));
    assert!(sim.responses_for(1).is_empty());
    // The id is free again.
    sim.call(1, "fs__read");
    assert_eq!(sim.requests_to("fs", "tools/call").len(), 2);
}

#[test]
fn backend_list_changed_triggers_rediscovery_and_client_notification() {
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["a"]);
    sim.client_init();
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("fs", &["a"]);
    let changed =
        |sim: &Sim| sim.client_frames().iter().filter(|f| f["method"] == "notifications/tools/list_changed").count();
    assert_eq!(changed(&sim), 0, "same list: no notification");
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("fs", &["a", "b"]);
    assert_eq!(changed(&sim), 1);
}

#[test]
fn duplicate_ids_and_capacity_are_refused_clearly() {
    let mut config = one_stdio();
    config.limits.max_in_flight_per_session = 2;
    let mut sim = Sim::new(config);
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.call(1, "fs__read");
    sim.call(1, "fs__read");
    assert_eq!(sim.response(1)["error"]["code"], -32600);
    sim.call(2, "fs__read");
    sim.call(3, "fs__read");
    assert_eq!(sim.response(3)["error"]["code"], -32003);
}

#[test]
fn sessions_beyond_the_limit_are_closed() {
    let mut config = one_stdio();
    config.limits.max_sessions = 1;
    let mut sim = Sim::new(config);
    sim.input(Input::ClientConnected { session: SessionId(1), expires: false });
    let actions = sim.input(Input::ClientConnected { session: SessionId(2), expires: false });
    assert_eq!(actions, [Action::CloseClient { session: SessionId(2) }]);
}

#[test]
fn unprefixed_backend_serves_bare_names() {
    let mut server = ServerConfig::stdio("fs-server", &[]);
    server.prefixed = false;
    let mut sim = Sim::new(Config::default().server("fs", server));
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.call(1, "read");
    let (_, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(params["name"], "read");
}

#[test]
fn a_call_before_discovery_waits_for_the_starting_backend() {
    let mut sim = Sim::new(one_stdio());
    sim.client_init();
    sim.call(1, "fs__read");
    assert!(sim.responses_for(1).is_empty(), "parked, not refused as unknown");
    sim.boot("fs", &["read"]);
    let id = sim.last_request("fs", "tools/call");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{"content":[]}}));
    sim.response(1);
    // A name that never appears is refused once discovery is over.
    sim.call(2, "fs__nope");
    assert_eq!(sim.response(2)["error"]["code"], -32602);
}

#[test]
fn a_slow_first_start_delays_lists_once_not_every_time() {
    let mut sim = Sim::new(two_backends());
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    assert!(sim.responses_for(1).is_empty());
    sim.advance(2000);
    sim.response(1);
    sim.advance(1000);
    // web is still connecting, but its aggregation window has passed: no new wait.
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}));
    assert_eq!(sim.response(2)["result"]["tools"].as_array().unwrap().len(), 1);
}

#[test]
fn a_list_during_rediscovery_after_a_restart_waits_instead_of_missing_tools() {
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.exit("fs", Some(1));
    sim.advance(1000);
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    assert!(sim.responses_for(1).is_empty(), "waits for the re-discovery");
    sim.answer_tools("fs", &["read"]);
    assert_eq!(sim.response(1)["result"]["tools"][0]["name"], "fs__read");
}

#[test]
fn a_list_changed_re_lists_only_that_list() {
    let mut sim = booted();
    let before = |sim: &Sim, m: &str| sim.requests_to("fs", m).len();
    let (tools, prompts, resources) =
        (before(&sim, "tools/list"), before(&sim, "prompts/list"), before(&sim, "resources/list"));
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer("fs", "tools/list", json!({"tools":[{"name":"read"},{"name":"write"}]}));
    assert_eq!(before(&sim, "tools/list"), tools + 1);
    assert_eq!(before(&sim, "prompts/list"), prompts);
    assert_eq!(before(&sim, "resources/list"), resources);
    // The lists that were not re-listed are still served.
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"prompts/list"}));
    assert_eq!(sim.response(1)["result"]["prompts"][0]["name"], "fs__greet");
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}));
    assert_eq!(sim.response(2)["result"]["tools"].as_array().unwrap().len(), 2);
}

#[test]
fn frames_say_which_client_request_they_belong_to() {
    let mut sim = booted();
    let before = routed_since(&sim, 0).len();
    sim.client(json!({"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"fs__read","arguments":{},"_meta":{"progressToken":"p"}}}));
    let (id, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":id,"progress":1}}),
    );
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"working"}}),
    );
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}),
    );
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{"content":[]}}));
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"idle"}}),
    );
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("fs", &["read", "write"]);
    let frames = routed_since(&sim, 0).split_off(before);
    let call = ClientRoute::Related("\"c-1\"".into());
    let kinds: Vec<(ClientRoute, String)> = frames
        .iter()
        .map(|(r, f)| (r.clone(), f["method"].as_str().map_or_else(|| format!("answer {}", f["id"]), str::to_string)))
        .collect();
    assert_eq!(
        kinds,
        [
            (call.clone(), "notifications/progress".to_string()),
            (call.clone(), "notifications/message".to_string()),
            (call, "sampling/createMessage".to_string()),
            (ClientRoute::Reply("\"c-1\"".into()), "answer \"c-1\"".to_string()),
            (ClientRoute::Session, "notifications/message".to_string()),
            (ClientRoute::Session, "notifications/tools/list_changed".to_string()),
        ]
    );
}

#[test]
fn idle_http_sessions_expire_but_not_while_a_request_is_in_flight() {
    const WEB: SessionId = SessionId(7);
    let mut config = one_stdio();
    config.limits.idle_session_ms = 60_000;
    config.policy.request_timeout_ms = 300_000;
    let mut sim = Sim::new(config);
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.input(Input::ClientConnected { session: WEB, expires: true });
    sim.session(WEB, json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"web","version":"1"}}}));
    sim.session(WEB, json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs__read","arguments":{}}}));
    let closed =
        |actions: &[Action]| actions.iter().any(|a| matches!(a, Action::CloseClient { session } if *session == WEB));
    // The call takes two minutes: the session is busy, not idle.
    assert!(!closed(&sim.advance(59_000)));
    let (id, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert!(!closed(&sim.advance(61_000)));
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{"content":[]}}));
    assert!(!closed(&sim.advance(59_000)), "idle for 59 s after its answer");
    assert!(closed(&sim.advance(1_000)), "idle for 60 s");
    // The stdio session, idle all along, stays.
    assert!(!sim.actions.iter().any(|(_, a)| matches!(a, Action::CloseClient { session } if *session == CLIENT)));
    sim.call(3, "fs__read");
    assert_eq!(sim.requests_to("fs", "tools/call").len(), 2);
}

#[test]
fn an_http_session_over_the_limit_is_told_why_before_it_is_closed() {
    const WEB: SessionId = SessionId(9);
    let mut config = one_stdio();
    config.limits.max_sessions = 1;
    let mut sim = Sim::new(config);
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.input(Input::ClientConnected { session: WEB, expires: true });
    let actions = sim.session(WEB, json!({"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"web","version":"1"}}}));
    let mut out = actions.iter().filter(
        |a| matches!(a, Action::SendToClient { session, .. } | Action::CloseClient { session } if *session == WEB),
    );
    match out.next() {
        Some(Action::SendToClient { frame, route, .. }) => {
            let v: Value = serde_json::from_str(frame).unwrap();
            assert_eq!((v["id"].as_str(), v["error"]["code"].as_i64()), (Some("i"), Some(-32003)), "{frame}");
            assert!(v["error"]["message"].as_str().unwrap().contains("at most 1 client sessions"), "{frame}");
            assert_eq!(route, &ClientRoute::Reply("\"i\"".into()));
        }
        other => panic!("expected the refusal first, got {other:?}"),
    }
    assert!(matches!(out.next(), Some(Action::CloseClient { .. })));
    // The stdio session is untouched.
    sim.call(2, "fs__read");
    assert_eq!(sim.requests_to("fs", "tools/call").len(), 1);
}
