//! Clients of the stateless 2026-07-28 revision (`config.stateless_clients`): the era
//! is decided by a session's first request, every stateless request is checked on
//! its own, `server/discover` is answered from the aggregate, and results carry
//! `resultType` (lists also `ttlMs`/`cacheScope`) whatever era the backend speaks.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::{Config, Input, SessionId};

fn config(stateless_clients: bool) -> Config {
    let mut config = one_stdio();
    config.stateless_clients = stateless_clients;
    config
}

/// `fs` (a handshake-era backend) online with one tool.
fn booted(stateless_clients: bool) -> Sim {
    let mut sim = Sim::new(config(stateless_clients));
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
    sim.answer_tools("fs", &["read"]);
    sim
}

#[test]
fn a_stateless_client_discovers_lists_and_calls_through_a_handshake_backend() {
    let mut sim = booted(true);
    sim.note("a stateless client: no initialize, _meta on every request");
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": stateless_meta()}}));
    let discover = sim.response(1)["result"].clone();
    assert_eq!(discover["resultType"], "complete");
    assert_eq!(discover["supportedVersions"][0], STATELESS);
    assert!(discover["supportedVersions"].as_array().unwrap().contains(&json!("2025-11-25")));
    assert_eq!((discover["ttlMs"].clone(), discover["cacheScope"].clone()), (json!(0), json!("private")));
    assert_eq!(discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "tether");
    assert!(discover["capabilities"]["tools"].is_object());

    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta": stateless_meta()}}));
    let list = sim.response(2)["result"].clone();
    assert_eq!(list["tools"][0]["name"], "fs__read");
    assert_eq!((list["resultType"].clone(), list["ttlMs"].clone()), (json!("complete"), json!(0)));
    assert_eq!(list["cacheScope"], "private");

    sim.note("a call: the backend's result has no resultType; the client's has");
    sim.client(
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fs__read","arguments":{},"_meta": stateless_meta()}}),
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
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": stateless_meta()}}));
    assert!(sim.response(1)["result"].is_object());

    // The session speaks the stateless revision now: _meta is required on every request.
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}));
    assert_eq!(sim.response(2)["error"]["code"], -32602);
    // Required keys.
    let mut no_caps = stateless_meta();
    no_caps.as_object_mut().unwrap().remove("io.modelcontextprotocol/clientCapabilities");
    sim.client(json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta": no_caps}}));
    let error = sim.response(3)["error"].clone();
    assert_eq!(error["code"], -32602);
    assert!(error["message"].as_str().unwrap().contains("clientCapabilities"), "{error}");
    // An unknown revision: -32022 with what tether speaks.
    let mut future = stateless_meta();
    future["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    sim.client(json!({"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta": future}}));
    let error = sim.response(4)["error"].clone();
    assert_eq!(error["code"], -32022);
    assert_eq!(error["data"]["requested"], "2099-01-01");
    assert_eq!(error["data"]["supported"][0], STATELESS);
    // Methods the revision removed.
    for (id, method) in [(5, "ping"), (6, "initialize"), (7, "logging/setLevel"), (8, "resources/subscribe")] {
        sim.client(json!({"jsonrpc":"2.0","id":id,"method":method,"params":{"_meta": stateless_meta()}}));
        assert_eq!(sim.response(id)["error"]["code"], -32601, "{method}");
    }
    // Still served afterwards: a refusal is per request.
    sim.client(json!({"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"_meta": stateless_meta()}}));
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
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta": stateless_meta()}}));
    assert_eq!(sim.response(2)["result"], json!({}));
}

#[test]
fn without_the_switch_a_discover_probe_gets_method_not_found_and_the_client_falls_back() {
    let mut sim = booted(false);
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": stateless_meta()}}));
    assert_eq!(sim.response(1)["error"]["code"], -32601);
    sim.client_init();
    assert!(sim.response(0)["result"]["protocolVersion"].is_string());
}

/// `stateless_meta()` with these client capabilities.
fn meta_with(caps: Value) -> Value {
    let mut m = stateless_meta();
    m["io.modelcontextprotocol/clientCapabilities"] = caps;
    m
}

fn call_params(caps: Value) -> Value {
    json!({"name":"fs__read","arguments":{},"_meta": meta_with(caps)})
}

#[test]
fn a_handshake_backends_sampling_request_becomes_input_required_and_the_retry_resumes_the_call() {
    let mut sim = booted(true);
    sim.note("a stateless client that can sample calls a tool");
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call_params(json!({"sampling":{}}))}));
    let call = sim.last_request("fs", "tools/call");
    sim.note("fs asks its client to sample, the handshake-era way");
    let sampling = json!({"messages":[{"role":"user","content":{"type":"text","text":"hi?"}}],"maxTokens":5});
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params": sampling}));
    sim.advance(50); // the moment tether waits for more requests of the same round
    let answer = sim.response(1)["result"].clone();
    assert_eq!(answer["resultType"], "input_required", "{answer}");
    let requests = answer["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1);
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(key, "s1", "a backend's string request id names the input");
    assert_eq!(request, &json!({"method":"sampling/createMessage","params": sampling}));
    let state = answer["requestState"].as_str().unwrap().to_string();

    sim.note("the client retries with the sampled message (a new id), and fs finishes the call");
    let mut retry = call_params(json!({"sampling":{}}));
    retry["inputResponses"] =
        json!({ key.as_str(): {"role":"assistant","content":{"type":"text","text":"hello"},"model":"m"} });
    retry["requestState"] = json!(state);
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params": retry}));
    let to_fs = sim.client_frames().len();
    let sampled = sim.requests_to("fs", "tools/call").len();
    assert_eq!(sampled, 1, "the retry does not start a second call");
    reply(&mut sim, "fs", call, text_result("done"));
    let result = sim.response(2)["result"].clone();
    assert_eq!(
        (result["resultType"].clone(), result["content"][0]["text"].clone()),
        (json!("complete"), json!("done"))
    );
    assert_eq!(sim.responses_for(1).len(), 1, "the first request got exactly its input_required answer");
    assert!(sim.client_frames().len() > to_fs);
    // The sampled message reached fs as the answer to its request.
    assert!(sim.log.contains(r#"fs#1 <- {"jsonrpc":"2.0","id":"s1","result":{"#), "{}", sim.log);

    sim.note("a requestState used once is gone");
    let mut again = call_params(json!({"sampling":{}}));
    again["requestState"] = json!(state);
    sim.client(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params": again}));
    assert_eq!(sim.response(3)["error"]["code"], -32602);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn input_a_stateless_client_did_not_declare_fails_its_call_with_missing_capability() {
    let mut sim = booted(true);
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call_params(json!({}))}));
    let call = sim.last_request("fs", "tools/call");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"e1","method":"elicitation/create","params":{"message":"name?"}}));
    let error = sim.response(1)["error"].clone();
    assert_eq!(error["code"], -32021, "{error}");
    assert_eq!(error["data"], json!({"requiredCapabilities":{"elicitation":{}}}));
    // The backend's request is refused and its call stopped.
    assert!(sim.log.contains(r#"fs#1 <- {"jsonrpc":"2.0","id":"e1","error":{"code":-32601"#), "{}", sim.log);
    let cancel = format!(r#""method":"notifications/cancelled","params":{{"requestId":{call},"#);
    assert!(sim.log.contains(&cancel), "{}", sim.log);
    // The tool's late answer changes nothing: one answer per request.
    reply(&mut sim, "fs", call, text_result("failed without elicitation"));
    assert_eq!(sim.responses_for(1).len(), 1);
    insta::assert_snapshot!(sim.log);
}

/// Servers ask for roots on their own too (server-everything does after
/// connecting), so an undeclared `roots/list` is refused and the call goes on.
#[test]
fn an_undeclared_roots_request_is_refused_without_failing_the_call() {
    let mut sim = booted(true);
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call_params(json!({}))}));
    let call = sim.last_request("fs", "tools/call");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"r1","method":"roots/list"}));
    assert!(sim.log.contains(r#"fs#1 <- {"jsonrpc":"2.0","id":"r1","error":{"code":-32601"#), "{}", sim.log);
    assert!(sim.responses_for(1).is_empty(), "the call goes on");
    reply(&mut sim, "fs", call, text_result("done"));
    assert_eq!(sim.response(1)["result"]["content"][0]["text"], "done");
}

#[test]
fn an_unanswered_input_request_is_declined_when_the_call_times_out() {
    let mut sim = booted(true);
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call_params(json!({"elicitation":{}}))}));
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"e1","method":"elicitation/create","params":{"message":"name?"}}));
    sim.advance(50); // the moment tether waits for more requests of the same round
    assert_eq!(sim.response(1)["result"]["resultType"], "input_required");
    sim.advance(Config::default().policy.request_timeout_max_ms + 1);
    assert!(sim.log.contains(r#"fs#1 <- {"jsonrpc":"2.0","id":"e1","result":{"action":"cancel"}}"#), "{}", sim.log);
    assert_eq!(sim.responses_for(1).len(), 1, "nothing more is sent for the answered request");
}

#[test]
fn a_backend_lost_while_waiting_for_input_fails_the_retry_not_the_answered_request() {
    let mut sim = booted(true);
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call_params(json!({"roots":{}}))}));
    sim.backend("fs", json!({"jsonrpc":"2.0","id":7,"method":"roots/list"}));
    sim.advance(50); // the moment tether waits for more requests of the same round
    let answer = sim.response(1)["result"].clone();
    let key = answer["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    sim.exit("fs", Some(1));
    assert_eq!(sim.responses_for(1).len(), 1, "the answered request gets nothing more");
    let mut retry = call_params(json!({"roots":{}}));
    retry["inputResponses"] = json!({ key: {"roots":[]} });
    retry["requestState"] = answer["requestState"].clone();
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params": retry}));
    let error = sim.response(2)["error"].clone();
    assert_eq!(error["code"], -32001, "{error}");
}

/// An `input_required` answer completes the request, so the client may use its
/// id again at once. The waiting call and the new request never trade answers.
#[test]
fn an_id_used_again_after_input_required_gets_its_own_answer() {
    let mut sim = booted(true);
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call_params(json!({"roots":{}}))}));
    let waiting = sim.last_request("fs", "tools/call");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"r1","method":"roots/list"}));
    sim.advance(50); // the moment tether waits for more requests of the same round
    let answer = sim.response(1)["result"].clone();
    assert_eq!(answer["resultType"], "input_required");
    sim.note("the client sends a new request under id 1 before it retries");
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call_params(json!({"roots":{}}))}));
    let second = sim.last_request("fs", "tools/call");
    assert_ne!(second, waiting);
    sim.note("the waiting call fails first: its error waits for the retry, not for the new request");
    sim.fail("fs", Some(waiting), tether_core::Failure::Other { message: "stream broke".into() });
    assert_eq!(sim.responses_for(1).len(), 1, "the new request 1 is still unanswered");
    reply(&mut sim, "fs", second, text_result("second"));
    let answers = sim.responses_for(1);
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[1]["result"]["content"][0]["text"], "second");
    sim.note("the retry gets the waiting call's answer");
    let mut retry = call_params(json!({"roots":{}}));
    retry["inputResponses"] = json!({ "r1": {"roots":[]} });
    retry["requestState"] = answer["requestState"].clone();
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params": retry}));
    let error = sim.response(2)["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("stream broke"), "{error}");
}

#[test]
fn over_http_each_stateless_request_is_its_own_session_and_a_call_waiting_for_input_outlives_it() {
    use tether_core::{Action, Input, SessionId};
    let mut sim = booted(true);
    let closes = |sim: &Sim, session: SessionId| {
        sim.actions.iter().filter(|(_, a)| matches!(a, Action::CloseClient { session: s } if *s == session)).count()
    };
    sim.note("POST 1: a discover, in a session of its own, closed with its answer");
    let (p1, p2, p3) = (SessionId(11), SessionId(12), SessionId(13));
    sim.input(Input::ClientConnected { session: p1, expires: true });
    sim.session(p1, json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": stateless_meta()}}));
    assert_eq!(sim.frames_to(p1)[0]["result"]["resultType"], "complete");
    assert_eq!(closes(&sim, p1), 1);

    sim.note("POST 2: a call; fs asks for roots; the answer is input_required and the session closes");
    sim.input(Input::ClientConnected { session: p2, expires: true });
    sim.session(p2, json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params": call_params(json!({"roots":{}}))}));
    let call = sim.last_request("fs", "tools/call");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"r1","method":"roots/list"}));
    sim.advance(50); // the moment tether waits for more requests of the same round
    let answer = sim.frames_to(p2)[0]["result"].clone();
    assert_eq!(answer["resultType"], "input_required");
    assert_eq!(closes(&sim, p2), 1);
    assert!(!sim.log.contains(r#""requestId":"#), "the waiting call is not cancelled:\n{}", sim.log);

    sim.note("POST 3: the retry takes the call over and gets its result");
    let key = answer["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let mut retry = call_params(json!({"roots":{}}));
    retry["inputResponses"] = json!({ key: {"roots":[{"uri":"file:///w"}]} });
    retry["requestState"] = answer["requestState"].clone();
    sim.input(Input::ClientConnected { session: p3, expires: true });
    sim.session(p3, json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params": retry}));
    assert!(sim.log.contains(r#"fs#1 <- {"jsonrpc":"2.0","id":"r1","result":{"roots":[{"uri":"file:///w"}]}}"#));
    reply(&mut sim, "fs", call, text_result("listed"));
    let result = sim.frames_to(p3)[0]["result"].clone();
    assert_eq!(result["content"][0]["text"], "listed");
    assert_eq!(closes(&sim, p3), 1);
    assert_eq!(sim.frames_to(p2).len(), 1, "nothing more for the closed POST");
}

/// `names` as stateless backends whose tool lists say `ttlMs`/`cacheScope`.
fn stateless_backends(hints: &[(&str, u64, &str)]) -> Sim {
    stateless_backends_in(Config::default(), hints)
}

/// A config whose tokens' scopes choose what is seen (a mapping is set).
fn scoped(mut config: Config) -> Config {
    let grant = tether_core::access::ScopeGrant { servers: vec!["*".into()], tools: vec![] };
    config.scopes.insert("mcp".into(), grant);
    config
}

/// [`stateless_backends`] added to `config`.
fn stateless_backends_in(mut config: Config, hints: &[(&str, u64, &str)]) -> Sim {
    for (name, _, _) in hints {
        config = config.server(name, tether_core::ServerConfig::stdio("server", &[]));
    }
    config.stateless_clients = true;
    let mut sim = Sim::new(config);
    for (name, ttl, scope) in hints {
        sim.answer(
            name,
            "server/discover",
            json!({"resultType":"complete","supportedVersions":[STATELESS],"capabilities":{"tools":{}},"ttlMs":0,"cacheScope":"private"}),
        );
        sim.answer(
            name,
            "tools/list",
            json!({"resultType":"complete","tools":[{"name":"t","inputSchema":{"type":"object"}}],"ttlMs":ttl,"cacheScope":scope}),
        );
    }
    sim
}

fn list_hint(sim: &mut Sim, id: u64) -> (Value, Value) {
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/list","params":{"_meta": stateless_meta()}}));
    let result = sim.response(id)["result"].clone();
    (result["ttlMs"].clone(), result["cacheScope"].clone())
}

#[test]
fn an_aggregated_list_may_be_cached_as_long_as_its_shortest_lived_part() {
    let mut sim = stateless_backends(&[("a", 60_000, "public"), ("b", 30_000, "public")]);
    assert_eq!(list_hint(&mut sim, 1), (json!(30_000), json!("public")));

    let mut sim = stateless_backends(&[("a", 60_000, "public"), ("b", 90_000, "private")]);
    assert_eq!(list_hint(&mut sim, 1), (json!(60_000), json!("private")), "private if any part is");
    sim.note("a backend goes down: the list may change any moment");
    sim.exit("b", Some(1));
    assert_eq!(list_hint(&mut sim, 2), (json!(0), json!("private")));

    // A handshake-era backend gives no hints: its part is stale at once.
    let mut sim = booted(true);
    assert_eq!(list_hint(&mut sim, 1), (json!(0), json!("private")));

    // Where tokens' scopes choose what is seen, no list is everyone's.
    let mut sim = stateless_backends_in(scoped(Config::default()), &[("a", 60_000, "public")]);
    assert_eq!(list_hint(&mut sim, 1), (json!(60_000), json!("private")));
}

#[test]
fn a_read_keeps_its_stateless_backends_hint() {
    let result = read_with_hint(Config::default());
    assert_eq!((result["ttlMs"].clone(), result["cacheScope"].clone()), (json!(5000), json!("public")), "{result}");
    assert_eq!(result["contents"][0]["uri"], "fs+file:///a");
    // Where tokens' scopes choose what may be read, a shared cache must not keep it.
    let result = read_with_hint(scoped(Config::default()));
    assert_eq!((result["ttlMs"].clone(), result["cacheScope"].clone()), (json!(5000), json!("private")), "{result}");
    assert_eq!(result["contents"][0]["text"], "x");
}

/// A stateless client reads `fs+file:///a` from a stateless backend that says
/// the read may be cached by anyone for 5 s; the result it gets.
fn read_with_hint(config: Config) -> Value {
    let mut config = config.server("fs", tether_core::ServerConfig::stdio("server", &[]));
    config.stateless_clients = true;
    let mut sim = Sim::new(config);
    sim.answer(
        "fs",
        "server/discover",
        json!({"resultType":"complete","supportedVersions":[STATELESS],"capabilities":{"resources":{}},"ttlMs":0,"cacheScope":"private"}),
    );
    sim.answer("fs", "resources/templates/list", json!({"resultType":"complete","resourceTemplates":[]}));
    sim.answer("fs", "resources/list", json!({"resultType":"complete","resources":[{"uri":"file:///a","name":"a"}]}));
    sim.client(
        json!({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"fs+file:///a","_meta": stateless_meta()}}),
    );
    let (id, _) = sim.requests_to("fs", "resources/read").pop().unwrap();
    reply(
        &mut sim,
        "fs",
        id,
        json!({"resultType":"complete","contents":[{"uri":"file:///a","text":"x"}],"ttlMs":5000,"cacheScope":"public"}),
    );
    sim.response(1)["result"].clone()
}

#[test]
fn a_stateless_clients_log_level_brings_it_the_backends_messages_during_its_call() {
    let mut sim = booted(true);
    let mut m = stateless_meta();
    m["io.modelcontextprotocol/logLevel"] = json!("warning");
    sim.client(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__read","arguments":{},"_meta": m}}),
    );
    let from = sim.actions.len();
    for level in ["info", "error"] {
        sim.backend(
            "fs",
            json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":level,"data":format!("{level} line")}}),
        );
    }
    let logs = routed_since(&sim, from);
    assert_eq!(logs.len(), 1, "only from warning up: {logs:?}");
    assert_eq!(logs[0].0, tether_core::ClientRoute::Related("1".into()), "on the call's stream");
    assert_eq!(logs[0].1["params"]["data"], "error line");
    assert_eq!(logs[0].1["params"]["logger"], "fs");
    let (id, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    reply(&mut sim, "fs", id, text_result("done"));
    sim.note("after the call, nothing: the level was for that request");
    let from = sim.actions.len();
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","data":"late"}}),
    );
    assert!(routed_since(&sim, from).is_empty());

    // Not a level: refused like any malformed _meta.
    let mut m = stateless_meta();
    m["io.modelcontextprotocol/logLevel"] = json!("loud");
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta": m}}));
    assert_eq!(sim.response(2)["error"]["code"], -32602);
}

/// A handshake-era backend may have several requests out at once; a stateless
/// client gets them in one `input_required` round, as a stateless server asks.
#[test]
fn requests_a_backend_sends_together_make_one_round_and_a_later_one_the_next() {
    let mut sim = booted(true);
    let caps = json!({"elicitation":{},"sampling":{},"roots":{}});
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call_params(caps.clone())}));
    let sampling = json!({"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5});
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","id":"user_name","method":"elicitation/create","params":{"message":"name?"}}),
    );
    sim.advance(10);
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"greeting","method":"sampling/createMessage","params": sampling}));
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"client_roots","method":"roots/list"}));
    assert!(sim.responses_for(1).is_empty(), "still gathering");
    sim.advance(40);
    let answer = sim.response(1)["result"].clone();
    let keys: Vec<&String> = answer["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["client_roots", "greeting", "user_name"], "{answer}");
    sim.note("a request after the round was answered waits for the retry's round");
    sim.advance(100);
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"late","method":"elicitation/create","params":{"message":"again?"}}));
    let mut retry = call_params(caps);
    retry["requestState"] = answer["requestState"].clone();
    retry["inputResponses"] = json!({
        "user_name": {"action":"accept","content":{"name":"Al"}},
        "greeting": {"role":"assistant","content":{"type":"text","text":"hello"},"model":"m"},
        "client_roots": {"roots":[]},
    });
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params": retry}));
    let second = sim.response(2)["result"].clone();
    assert_eq!(second["resultType"], "input_required");
    assert_eq!(second["inputRequests"].as_object().unwrap().keys().collect::<Vec<_>>(), ["late"]);
}

#[test]
fn a_request_state_answers_only_the_identity_it_was_given_to() {
    let mut sim = booted(true);
    let open = |sim: &mut Sim, session: u64, principal: &str| {
        let session = SessionId(session);
        sim.input(Input::ClientConnected { session, expires: true });
        sim.input(Input::ClientAccess { session, scopes: Vec::new(), principal: Some(principal.into()) });
        session
    };
    let alice = open(&mut sim, 10, "alice");
    sim.session(
        alice,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call_params(json!({"sampling":{}}))}),
    );
    let call = sim.last_request("fs", "tools/call");
    let sampling = json!({"messages":[{"role":"user","content":{"type":"text","text":"hi?"}}],"maxTokens":5});
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params": sampling}));
    sim.advance(50);
    let asked = sim.frames_to(alice).pop().unwrap();
    let state = asked["result"]["requestState"].as_str().expect("input_required").to_string();
    let mut retry = call_params(json!({"sampling":{}}));
    retry["inputResponses"] =
        json!({"s1": {"role":"assistant","content":{"type":"text","text":"from bob"},"model":"m"}});
    retry["requestState"] = json!(state);

    let bob = open(&mut sim, 11, "bob");
    sim.session(bob, json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params": retry}));
    let refused = sim.frames_to(bob).pop().unwrap();
    assert_eq!(refused["error"]["code"], -32602, "bob's retry with alice's state is refused: {refused}");
    assert!(!sim.log.contains("from bob"), "nothing of bob's reached fs");
    assert_eq!(sim.requests_to("fs", "tools/call").len(), 1, "nor did it start a call");

    let again = open(&mut sim, 12, "alice");
    retry["inputResponses"]["s1"]["content"]["text"] = json!("from alice");
    sim.session(again, json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params": retry}));
    assert!(sim.log.contains("from alice"), "alice's retry from a new session answers fs: {}", sim.log);
    reply(&mut sim, "fs", call, text_result("done"));
    let done = sim.frames_to(again).pop().unwrap();
    assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");
}
