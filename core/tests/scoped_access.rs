//! What a client sees by the OAuth scopes of its token: lists, calls, reads,
//! searches, admin tools, events and `list_changed`, as scenarios in simulated
//! time. The HTTP listener reports each session's scopes (`ClientAccess`); the
//! config's `scopes` mapping says what each grants.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::access::ScopeGrant;
use tether_core::config::Mode;
use tether_core::{Action, Config, Input, ServerConfig, SessionId};

const TIME_ONLY: SessionId = SessionId(2);
const ECHO_ONLY: SessionId = SessionId(3);
const NO_SCOPE: SessionId = SessionId(4);

fn grant(servers: &[&str], tools: &[&str]) -> ScopeGrant {
    ScopeGrant {
        servers: servers.iter().map(|s| s.to_string()).collect(),
        tools: tools.iter().map(|s| s.to_string()).collect(),
    }
}

/// `time` (two tools) and `everything` (echo, add and a resource), with the
/// scope `time` granting the time server and `echo` the one tool.
fn config(mode: Mode) -> Config {
    let mut config = Config::default()
        .server("time", ServerConfig::stdio("time-server", &[]))
        .server("everything", ServerConfig::stdio("everything-server", &[]));
    config.mode = mode;
    config.list_changed_debounce_ms = 0;
    config.scopes.insert("time".into(), grant(&["time"], &[]));
    config.scopes.insert("echo".into(), grant(&[], &["everything__echo"]));
    config
}

fn booted(mode: Mode) -> Sim {
    let mut sim = Sim::new(config(mode));
    sim.boot("time", &["get_current_time", "convert_time"]);
    sim.answer(
        "everything",
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"resources":{},"logging":{}},"serverInfo":{"name":"everything","version":"1"}}),
    );
    sim.answer_tools("everything", &["echo", "add"]);
    sim.answer("everything", "resources/list", json!({"resources":[{"name":"a","uri":"test://a"}]}));
    sim.answer("everything", "resources/templates/list", json!({"resourceTemplates":[]}));
    sim.client_init();
    for (session, scopes) in [(TIME_ONLY, vec!["time"]), (ECHO_ONLY, vec!["echo", "unmapped"]), (NO_SCOPE, vec![])] {
        connect(&mut sim, session, &scopes);
    }
    sim
}

/// An HTTP session whose token carries `scopes`, through its handshake.
fn connect(sim: &mut Sim, session: SessionId, scopes: &[&str]) {
    sim.input(Input::ClientConnected { session, expires: true });
    sim.input(Input::ClientAccess { session, scopes: scopes.iter().map(|s| s.to_string()).collect(), principal: None });
    sim.session(session, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}));
    sim.session(session, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
}

/// The one answer `session` got to request `id`.
fn answer(sim: &Sim, session: SessionId, id: u64) -> Value {
    let answers: Vec<Value> =
        sim.frames_to(session).into_iter().filter(|f| f["id"] == json!(id) && f.get("method").is_none()).collect();
    assert_eq!(answers.len(), 1, "one answer to {id} on session {}: {answers:?}\n{}", session.0, sim.log);
    answers.into_iter().next().unwrap()
}

fn ask(sim: &mut Sim, session: SessionId, id: u64, method: &str, params: Value) -> Value {
    sim.session(session, json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
    answer(sim, session, id)
}

fn names(result: &Value, key: &str, field: &str) -> Vec<String> {
    result["result"][key].as_array().unwrap().iter().map(|t| t[field].as_str().unwrap().to_string()).collect()
}

fn list_changed(sim: &Sim, session: SessionId) -> usize {
    sim.frames_to(session).iter().filter(|f| f["method"] == "notifications/tools/list_changed").count()
}

#[test]
fn each_session_lists_and_calls_only_what_its_scopes_grant() {
    let mut sim = booted(Mode::Flat);
    let all = ask(&mut sim, support::CLIENT, 1, "tools/list", json!({}));
    assert_eq!(names(&all, "tools", "name").len(), 4, "a session without scopes (stdio) sees everything");

    let time = ask(&mut sim, TIME_ONLY, 1, "tools/list", json!({}));
    assert_eq!(names(&time, "tools", "name"), ["time__get_current_time", "time__convert_time"]);
    let echo = ask(&mut sim, ECHO_ONLY, 1, "tools/list", json!({}));
    assert_eq!(names(&echo, "tools", "name"), ["everything__echo"], "unmapped scopes grant nothing");
    let nothing = ask(&mut sim, NO_SCOPE, 1, "tools/list", json!({}));
    assert!(names(&nothing, "tools", "name").is_empty());

    // Resources follow whole-server grants only.
    let resources = ask(&mut sim, ECHO_ONLY, 2, "resources/list", json!({}));
    assert!(names(&resources, "resources", "uri").is_empty());
    let read = ask(&mut sim, ECHO_ONLY, 3, "resources/read", json!({"uri":"everything+test://a"}));
    assert_eq!(read["error"]["message"], "unknown resource: everything+test://a");

    // A withheld tool is answered like an unknown one, and never reaches its backend.
    let before = sim.requests_to("everything", "tools/call").len();
    let withheld = ask(&mut sim, TIME_ONLY, 4, "tools/call", json!({"name":"everything__echo","arguments":{}}));
    let unknown = ask(&mut sim, TIME_ONLY, 5, "tools/call", json!({"name":"everything__nope","arguments":{}}));
    assert_eq!(withheld["error"]["message"], "unknown tool: everything__echo");
    assert_eq!(withheld["error"]["code"], unknown["error"]["code"]);
    let add = ask(&mut sim, ECHO_ONLY, 6, "tools/call", json!({"name":"everything__add","arguments":{}}));
    assert_eq!(add["error"]["message"], "unknown tool: everything__add", "one tool does not grant its server");
    assert_eq!(sim.requests_to("everything", "tools/call").len(), before);

    sim.session(
        ECHO_ONLY,
        json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"everything__echo","arguments":{}}}),
    );
    let (id, call) = sim.requests_to("everything", "tools/call").last().cloned().unwrap();
    assert_eq!(call["name"], "echo");
    reply(&mut sim, "everything", id, text_result("hi"));
    assert_eq!(answer(&sim, ECHO_ONLY, 7)["result"]["content"][0]["text"], "hi");
}

#[test]
fn a_session_is_told_of_changes_it_can_see_and_of_no_other() {
    let mut sim = booted(Mode::Flat);
    for session in [support::CLIENT, TIME_ONLY, ECHO_ONLY] {
        ask(&mut sim, session, 1, "tools/list", json!({}));
    }
    // everything gains a tool: only who sees everything's tools beyond echo is told.
    sim.backend("everything", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("everything", &["echo", "add", "sum"]);
    assert_eq!(list_changed(&sim, support::CLIENT), 1);
    assert_eq!(list_changed(&sim, TIME_ONLY), 0, "nothing of everything is visible to it");
    assert_eq!(list_changed(&sim, ECHO_ONLY), 0, "its one tool did not change");

    // everything drops echo: the echo session's view changed.
    sim.backend("everything", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("everything", &["add", "sum"]);
    assert_eq!(list_changed(&sim, ECHO_ONLY), 1);
    assert_eq!(list_changed(&sim, TIME_ONLY), 0);

    // A token with more scopes (step-up) widens the view, and the session is told;
    // while the new scope grants nothing that exists, there is nothing to tell.
    sim.input(Input::ClientAccess { session: TIME_ONLY, scopes: vec!["time".into(), "echo".into()], principal: None });
    assert_eq!(list_changed(&sim, TIME_ONLY), 0);
    sim.backend("everything", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("everything", &["echo", "add", "sum"]);
    assert_eq!(list_changed(&sim, TIME_ONLY), 1);
    assert_eq!(list_changed(&sim, ECHO_ONLY), 2);
    sim.input(Input::ClientAccess { session: ECHO_ONLY, scopes: vec!["echo".into(), "time".into()], principal: None });
    assert_eq!(list_changed(&sim, ECHO_ONLY), 3, "the time tools appear");
    let time = ask(&mut sim, TIME_ONLY, 2, "tools/list", json!({}));
    assert_eq!(names(&time, "tools", "name"), ["everything__echo", "time__get_current_time", "time__convert_time"]);
    // The same scopes again change nothing.
    let told = list_changed(&sim, TIME_ONLY);
    sim.input(Input::ClientAccess { session: TIME_ONLY, scopes: vec!["echo".into(), "time".into()], principal: None });
    assert_eq!(list_changed(&sim, TIME_ONLY), told);
}

#[test]
fn meta_mode_searches_lists_and_runs_only_what_the_scopes_grant() {
    let mut sim = booted(Mode::Meta);
    let call = |sim: &mut Sim, session, id, tool: &str, args: Value| {
        let a = ask(sim, session, id, "tools/call", json!({"name": tool, "arguments": args}));
        let text = a["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
        (a["result"]["isError"] == json!(true), serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)))
    };
    let (_, found) = call(&mut sim, ECHO_ONLY, 1, "search_tools", json!({"query": ""}));
    let found: Vec<&str> = found["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(found, ["everything__echo"]);
    let (_, servers) = call(&mut sim, TIME_ONLY, 2, "list_servers", json!({}));
    let servers: Vec<&str> =
        servers["servers"].as_array().unwrap().iter().map(|s| s["server"].as_str().unwrap()).collect();
    assert_eq!(servers, ["time"]);
    let (_, servers) = call(&mut sim, ECHO_ONLY, 8, "list_servers", json!({}));
    let row = &servers["servers"][0];
    assert_eq!((row["server"].as_str(), row["tools"].as_u64()), (Some("everything"), Some(1)), "only its part: {row}");
    let (error, message) = call(&mut sim, TIME_ONLY, 3, "execute_tool", json!({"name": "everything__echo"}));
    assert!(error && message.as_str().unwrap().starts_with("unknown tool 'everything__echo'"), "{message}");
    let (error, message) = call(&mut sim, ECHO_ONLY, 4, "describe_tool", json!({"name": "everything__add"}));
    assert!(error && message.as_str().unwrap().starts_with("unknown tool"), "{message}");
    // Reconnecting a server is for sessions granted it whole; the error lists only what it sees.
    let spawns = sim.actions.iter().filter(|(_, a)| matches!(a, Action::Spawn { .. })).count();
    let (error, message) = call(&mut sim, ECHO_ONLY, 5, "reconnect_server", json!({"server": "everything"}));
    assert!(error, "{message}");
    assert_eq!(message, "unknown server 'everything'; the servers are: everything");
    let (error, message) = call(&mut sim, TIME_ONLY, 6, "reconnect_server", json!({"server": "everything"}));
    assert_eq!((error, message), (true, json!("unknown server 'everything'; the servers are: time")));
    assert_eq!(sim.actions.iter().filter(|(_, a)| matches!(a, Action::Spawn { .. })).count(), spawns);
    let (_, events) = call(&mut sim, TIME_ONLY, 7, "server_events", json!({}));
    let events = events["events"].as_array().unwrap();
    assert!(!events.is_empty() && events.iter().all(|e| e["server"] == "time"), "{events:?}");
}

#[test]
fn notifications_of_events_go_only_to_sessions_that_see_their_server() {
    let mut sim = booted(Mode::Flat);
    let mark: Vec<usize> = [TIME_ONLY, ECHO_ONLY, NO_SCOPE].iter().map(|s| sim.frames_to(*s).len()).collect();
    sim.exit("everything", Some(1));
    let events_to = |sim: &Sim, session: SessionId, from: usize| {
        sim.frames_to(session)[from..].iter().filter(|f| f["method"] == "notifications/message").count()
    };
    assert_eq!(events_to(&sim, TIME_ONLY, mark[0]), 0);
    assert!(events_to(&sim, ECHO_ONLY, mark[1]) > 0, "it sees one of everything's tools");
    assert_eq!(events_to(&sim, NO_SCOPE, mark[2]), 0);
}

#[test]
fn a_backend_log_or_request_reaches_no_session_that_cannot_see_it() {
    let mut sim = booted(Mode::Flat);
    // A session that takes roots requests and comes first in order, but sees only time.
    let early = SessionId(0);
    sim.input(Input::ClientConnected { session: early, expires: true });
    sim.input(Input::ClientAccess { session: early, scopes: vec!["time".into()], principal: None });
    sim.session(early, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"t","version":"1"}}}));
    sim.session(early, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let marks: Vec<usize> = [early, TIME_ONLY, NO_SCOPE].iter().map(|s| sim.frames_to(*s).len()).collect();
    sim.backend(
        "everything",
        json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","data":"secret plans"}}),
    );
    // A request of everything's with no call in flight goes to a session that sees it.
    sim.backend("everything", json!({"jsonrpc":"2.0","id":"r1","method":"roots/list"}));
    for (session, mark) in [early, TIME_ONLY, NO_SCOPE].into_iter().zip(marks) {
        let got = &sim.frames_to(session)[mark..];
        assert!(got.is_empty(), "session {} got {got:?}", session.0);
    }
    let to_client: Vec<Value> = sim.client_frames().into_iter().filter(|f| f["method"] == "roots/list").collect();
    assert_eq!(to_client.len(), 1, "the unrestricted client, which supports roots, is asked");
}

#[test]
fn a_task_of_a_backend_it_cannot_see_is_unknown_to_a_session() {
    let mut sim = Sim::new(config(Mode::Flat));
    sim.boot("time", &["get_current_time"]);
    let caps = json!({"tools":{},"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}});
    sim.answer("everything", "initialize", json!({"protocolVersion":"2025-11-25","capabilities": caps}));
    sim.answer_tools("everything", &["echo"]);
    connect(&mut sim, TIME_ONLY, &["time"]);
    let before = sim.requests_to("everything", "tasks/get").len();
    let asked = ask(&mut sim, TIME_ONLY, 1, "tasks/get", json!({"taskId":"everything__1"}));
    let unknown = ask(&mut sim, TIME_ONLY, 2, "tasks/get", json!({"taskId":"nothing__1"}));
    assert_eq!(asked["error"]["code"], unknown["error"]["code"]);
    assert!(asked["error"]["message"].as_str().unwrap().starts_with("unknown task"), "{asked}");
    assert_eq!(sim.requests_to("everything", "tasks/get").len(), before, "nothing reached everything");
}

#[test]
fn scopes_lost_take_their_subscriptions_and_a_new_mapping_is_announced() {
    let mut sim = booted(Mode::Flat);
    let both: Vec<String> = vec!["time".into(), "echo".into(), "all".into()];
    let mut config = config(Mode::Flat);
    config.scopes.insert("all".into(), grant(&["everything"], &[]));
    sim.input(Input::ConfigReloaded { config: config.clone() });
    sim.input(Input::ClientAccess { session: ECHO_ONLY, scopes: both, principal: None });
    sim.session(
        ECHO_ONLY,
        json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"everything+test://a"}}),
    );
    let subscribe = sim.last_request("everything", "resources/subscribe");
    reply(&mut sim, "everything", subscribe, json!({}));
    assert_eq!(answer(&sim, ECHO_ONLY, 1)["result"], json!({}));
    // A token without `all`: the subscription goes, at the backend too (the only subscriber).
    sim.input(Input::ClientAccess { session: ECHO_ONLY, scopes: vec!["echo".into()], principal: None });
    assert_eq!(sim.requests_to("everything", "resources/unsubscribe").len(), 1);
    let mark = sim.frames_to(ECHO_ONLY).len();
    sim.backend(
        "everything",
        json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"test://a"}}),
    );
    assert!(sim.frames_to(ECHO_ONLY)[mark..].iter().all(|f| f["method"] != "notifications/resources/updated"));
    // Unsubscribing what it may not see is answered as for a URI nobody serves.
    let gone = ask(&mut sim, ECHO_ONLY, 2, "resources/unsubscribe", json!({"uri":"everything+test://a"}));
    assert_eq!(gone["result"], json!({}));

    // A reload that changes only the mapping: sessions whose view changed are told.
    ask(&mut sim, TIME_ONLY, 3, "tools/list", json!({}));
    let told = list_changed(&sim, TIME_ONLY);
    config.scopes.insert("time".into(), grant(&["time"], &["everything__echo"]));
    sim.input(Input::ConfigReloaded { config });
    assert_eq!(list_changed(&sim, TIME_ONLY), told + 1);
    let listed = ask(&mut sim, TIME_ONLY, 4, "tools/list", json!({}));
    assert!(names(&listed, "tools", "name").contains(&"everything__echo".to_string()));
}

#[test]
fn a_restricted_session_sets_its_own_log_level_not_the_backends() {
    let mut sim = booted(Mode::Flat);
    let sent = sim.requests_to("everything", "logging/setLevel").len();
    let ok = ask(&mut sim, ECHO_ONLY, 1, "logging/setLevel", json!({"level":"debug"}));
    assert_eq!(ok["result"], json!({}));
    assert_eq!(sim.requests_to("everything", "logging/setLevel").len(), sent, "the backends' level is everyone's");
    ask(&mut sim, support::CLIENT, 2, "logging/setLevel", json!({"level":"debug"}));
    assert_eq!(sim.requests_to("everything", "logging/setLevel").len(), sent + 1, "an unrestricted session sets it");
}

#[test]
fn a_backend_request_goes_to_the_token_holder_whose_call_is_in_flight_and_never_guessed_between_two() {
    let mut sim = booted(Mode::Flat);
    let with_elicitation = |sim: &mut Sim, session: SessionId, scopes: &[&str]| {
        sim.input(Input::ClientConnected { session, expires: true });
        sim.input(Input::ClientAccess {
            session,
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            principal: None,
        });
        sim.session(session, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"t","version":"1"}}}));
        sim.session(session, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    };
    let (alice, bob) = (SessionId(10), SessionId(11));
    with_elicitation(&mut sim, alice, &["echo"]);
    with_elicitation(&mut sim, bob, &["echo"]);
    let asked =
        |sim: &Sim, session| sim.frames_to(session).iter().filter(|f| f["method"] == "elicitation/create").count();
    let elicit = json!({"message":"Your password?","requestedSchema":{"type":"object","properties":{}}});

    // One holder's call in flight: the request is its.
    sim.session(
        alice,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"everything__echo","arguments":{}}}),
    );
    sim.backend("everything", json!({"jsonrpc":"2.0","id":"e1","method":"elicitation/create","params":elicit}));
    assert_eq!((asked(&sim, alice), asked(&sim, bob)), (1, 0));

    // Both holders' calls in flight: nobody is asked, the backend is told why.
    sim.session(
        bob,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"everything__echo","arguments":{}}}),
    );
    sim.backend("everything", json!({"jsonrpc":"2.0","id":"e2","method":"elicitation/create","params":elicit}));
    assert_eq!((asked(&sim, alice), asked(&sim, bob)), (1, 0));
    let refused = sim.actions.iter().rev().find_map(|(_, a)| match a {
        Action::SendToBackend { frame, .. } if frame.contains("\"e2\"") => Some(frame.clone()),
        _ => None,
    });
    assert!(refused.is_some_and(|f| f.contains("cannot tell which")), "the backend gets an error");
}
