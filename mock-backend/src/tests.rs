//! Unit tests of the protocol, the tools and the stdio transport, driven through
//! an outlet that collects what the mock sends (the HTTP front's are in
//! `http/tests.rs`).

use std::io::{self, Cursor, Write};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use std::{fs, thread};

use serde_json::{json, Value};

use crate::protocol::*;
use crate::server::Mock;
use crate::stdio::*;
use crate::tools::*;
use crate::{MockOptions, PROTOCOL_VERSION, STATELESS_PROTOCOL_VERSION};

/// How long a test waits for something the mock should send.
pub(crate) const WAIT: Duration = Duration::from_secs(5);

/// Collects everything sent through it.
struct Collector(Sender<Value>);

impl Outlet for Collector {
    fn send(&self, message: &Value) {
        let _ = self.0.send(message.clone());
    }

    fn finish(&self, response: &Value) {
        let _ = self.0.send(response.clone());
    }
}

/// A mock and one session, with what they send arriving on the receiver.
struct Harness {
    mock: Arc<Mock>,
    session: Arc<Session>,
    outlet: Arc<dyn Outlet>,
    sent: Receiver<Value>,
}

impl Harness {
    fn new(options: MockOptions) -> Self {
        let (tx, sent) = mpsc::channel();
        let mock = Arc::new(Mock::new(options).expect("valid options"));
        Harness { mock, session: Arc::new(Session::new()), outlet: Arc::new(Collector(tx)), sent }
    }

    fn feed(&self, frame: Value) {
        let message = parse_message(frame.to_string().as_bytes()).expect("a valid message");
        self.mock.receive(&self.session, message, Arc::clone(&self.outlet));
    }

    fn request(&self, id: u64, method: &str, params: Value) -> Value {
        self.feed(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.next()
    }

    fn next(&self) -> Value {
        self.sent.recv_timeout(WAIT).expect("a message from the mock")
    }

    fn nothing_more(&self) {
        assert_eq!(self.sent.recv_timeout(Duration::from_millis(100)).ok(), None);
    }
}

#[test]
fn initialize_reports_the_server_and_its_capabilities() {
    let options = MockOptions { name: "alpha".into(), ..MockOptions::default() };
    let harness = Harness::new(options);
    let response = harness.request(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}}));
    assert_eq!(response["id"], 1);
    assert_eq!(response["result"]["protocolVersion"], PROTOCOL_VERSION);
    assert_eq!(response["result"]["serverInfo"]["name"], "alpha");
    assert_eq!(response["result"]["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(response["result"]["capabilities"]["resources"]["subscribe"], true);

    let again = harness.request(2, "initialize", json!({}));
    assert_eq!(again["error"]["code"], -32600, "a second initialize on one session is refused");
}

#[test]
fn initialize_answers_an_older_supported_version_and_a_default_for_unknown_ones() {
    let harness = Harness::new(MockOptions::default());
    let response = harness.request(1, "initialize", json!({"protocolVersion": "2025-03-26"}));
    assert_eq!(response["result"]["protocolVersion"], "2025-03-26");
    let harness = Harness::new(MockOptions::default());
    let response = harness.request(1, "initialize", json!({"protocolVersion": "1999-01-01"}));
    assert_eq!(response["result"]["protocolVersion"], PROTOCOL_VERSION);
}

#[test]
fn tools_list_offers_the_chosen_builtins_then_the_extras() {
    let options =
        MockOptions { tools: Some(vec!["echo".into(), "add".into()]), extra_tools: 2, ..MockOptions::default() };
    let harness = Harness::new(options);
    let response = harness.request(1, "tools/list", json!({}));
    let tools = response["result"]["tools"].as_array().expect("a tool list");
    let names: Vec<_> = tools.iter().map(|tool| tool["name"].as_str().unwrap_or_default()).collect();
    assert_eq!(names, ["echo", "add", "t0", "t1"]);
    assert_eq!(tools[0]["annotations"]["readOnlyHint"], true);
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["text"]));

    let hidden = harness.request(2, "tools/call", json!({"name": "slow", "arguments": {"ms": 1}}));
    assert_eq!(hidden["error"]["code"], -32602);
    let extra = harness.request(3, "tools/call", json!({"name": "t1"}));
    assert_eq!(extra["result"]["content"][0]["text"], "t1");
}

#[test]
fn an_unknown_name_in_tools_is_an_error() {
    let options = MockOptions { tools: Some(vec!["echo".into(), "nope".into()]), ..MockOptions::default() };
    let error = Mock::new(options).err().expect("rejected");
    assert!(error.to_string().contains("`nope`"), "{error}");
}

#[test]
fn echo_and_add_answer_with_text() {
    let harness = Harness::new(MockOptions::default());
    let echo = harness.request(1, "tools/call", json!({"name": "echo", "arguments": {"text": "hi"}}));
    assert_eq!(echo["result"], json!({"content": [{"type": "text", "text": "hi"}]}));
    let add = harness.request(2, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 3}}));
    assert_eq!(add["result"]["content"][0]["text"], "5");
    let add = harness.request(3, "tools/call", json!({"name": "add", "arguments": {"a": 0.5, "b": 1}}));
    assert_eq!(add["result"]["content"][0]["text"], "1.5");
}

#[test]
fn bad_tool_arguments_and_fail_are_tool_errors() {
    let harness = Harness::new(MockOptions::default());
    let echo = harness.request(1, "tools/call", json!({"name": "echo", "arguments": {}}));
    assert_eq!(echo["result"]["isError"], true);
    let fail = harness.request(2, "tools/call", json!({"name": "fail"}));
    assert_eq!(fail["result"]["isError"], true);
}

#[test]
fn unknown_methods_get_method_not_found_and_so_does_ping_with_no_ping() {
    let harness = Harness::new(MockOptions { no_ping: true, ..MockOptions::default() });
    assert_eq!(harness.request(1, "bogus/method", json!({}))["error"]["code"], -32601);
    assert_eq!(harness.request(2, "ping", json!({}))["error"]["code"], -32601);
    let harness = Harness::new(MockOptions::default());
    assert_eq!(harness.request(1, "ping", json!({}))["result"], json!({}));
}

#[test]
fn bad_frames_get_parse_error_or_invalid_request() {
    let parse = parse_message(b"{not json").expect_err("bad JSON");
    assert_eq!(parse["error"]["code"], -32700);
    assert_eq!(parse["id"], Value::Null);
    let not_object = parse_message(b"[1, 2]").expect_err("not an object");
    assert_eq!(not_object["error"]["code"], -32600);
    let no_version = parse_message(br#"{"id": 7, "method": "ping"}"#).expect_err("no jsonrpc");
    assert_eq!((no_version["id"].clone(), no_version["error"]["code"].clone()), (json!(7), json!(-32600)));
    let null_id = parse_message(br#"{"jsonrpc": "2.0", "id": null, "method": "ping"}"#).expect_err("null id");
    assert_eq!(null_id["error"]["code"], -32600);
}

#[test]
fn messages_are_sorted_by_kind() {
    let request = parse_message(br#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#);
    assert_eq!(request, Ok(Incoming::Request { id: json!("a"), method: "ping".into(), params: Value::Null }));
    let note = parse_message(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    assert!(matches!(note, Ok(Incoming::Notification { .. })));
    let answer = parse_message(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#);
    assert!(matches!(answer, Ok(Incoming::Response { outcome: Err(_), .. })));
}

#[test]
fn a_cancelled_slow_call_is_never_answered() {
    let harness = Harness::new(MockOptions::default());
    harness.feed(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"ms": 60_000}}}));
    harness.feed(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}));
    assert_eq!(harness.request(2, "ping", json!({}))["id"], 2);
    harness.nothing_more();
}

#[test]
fn progress_is_reported_with_the_callers_token_before_the_answer() {
    let harness = Harness::new(MockOptions::default());
    harness.feed(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "progress", "arguments": {"steps": 2, "ms": 1}, "_meta": {"progressToken": "p"}}}));
    for step in 1..=2 {
        let note = harness.next();
        assert_eq!(note["method"], "notifications/progress");
        assert_eq!(note["params"]["progressToken"], "p");
        assert_eq!((note["params"]["progress"].clone(), note["params"]["total"].clone()), (json!(step), json!(2)));
    }
    assert_eq!(harness.next()["result"]["content"][0]["text"], "done 2 steps");
}

#[test]
fn sample_asks_the_client_and_returns_its_text_or_its_refusal() {
    let harness = Harness::new(MockOptions::default());
    harness.feed(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "sample", "arguments": {"prompt": "hi?"}}}));
    let ask = harness.next();
    assert_eq!(ask["method"], "sampling/createMessage");
    assert_eq!(ask["params"]["messages"][0]["content"]["text"], "hi?");
    harness.feed(json!({"jsonrpc": "2.0", "id": ask["id"],
        "result": {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}}));
    assert_eq!(harness.next()["result"]["content"][0]["text"], "hello");

    harness.feed(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sample", "arguments": {"prompt": "again"}}}));
    let ask = harness.next();
    harness.feed(json!({"jsonrpc": "2.0", "id": ask["id"], "error": {"code": -1, "message": "user declined"}}));
    let refused = harness.next();
    assert_eq!(refused["result"]["isError"], true);
    assert!(refused["result"]["content"][0]["text"].as_str().unwrap_or_default().contains("user declined"));
}

#[test]
fn add_tool_announces_the_new_tool() {
    let harness = Harness::new(MockOptions { tools: Some(vec!["add_tool".into()]), ..MockOptions::default() });
    harness.feed(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add_tool"}}));
    assert_eq!(harness.next()["method"], "notifications/tools/list_changed");
    assert_eq!(harness.next()["id"], 1);
    let tools = harness.request(2, "tools/list", json!({}));
    assert_eq!(tools["result"]["tools"][1]["name"], ADDED_TOOL);
}

#[test]
fn echo_updates_a_subscribed_info_resource() {
    let harness = Harness::new(MockOptions::default());
    assert_eq!(harness.request(1, "resources/subscribe", json!({"uri": INFO_URI}))["result"], json!({}));
    harness.feed(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}}}));
    let update = harness.next();
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], INFO_URI);
    assert_eq!(harness.next()["id"], 2);
}

#[test]
fn resources_prompts_completions_and_logging() {
    let harness = Harness::new(MockOptions::default());
    let item = harness.request(1, "resources/read", json!({"uri": "mock://item/7"}));
    assert_eq!(item["result"]["contents"][0]["text"], "item 7");
    let missing = harness.request(2, "resources/read", json!({"uri": "mock://nope"}));
    assert_eq!(missing["error"]["code"], -32002);
    let greeting = harness.request(3, "prompts/get", json!({"name": "greet", "arguments": {"name": "Ann"}}));
    assert_eq!(greeting["result"]["messages"][0]["content"]["text"], "Hello, Ann!");
    let completion = harness.request(
        4,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": "b"}}),
    );
    assert_eq!(completion["result"]["completion"]["values"], json!(["bob"]));
    assert_eq!(harness.request(5, "logging/setLevel", json!({"level": "error"}))["result"], json!({}));
    harness.feed(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"name": "log", "arguments": {"message": "quiet"}}}));
    assert_eq!(harness.next()["id"], 6, "an info entry is below the error threshold");
}

#[test]
fn the_state_file_gets_one_line_per_method_received() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("state");
    let harness = Harness::new(MockOptions { state_file: Some(path.clone()), ..MockOptions::default() });
    harness.request(1, "initialize", json!({}));
    harness.feed(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    harness.request(2, "tools/list", json!({}));
    let lines = fs::read_to_string(&path).expect("the state file");
    assert_eq!(lines, "initialize\nnotifications/initialized\ntools/list\n");
}

/// A `--stateless` mock's options.
pub(crate) fn stateless() -> MockOptions {
    MockOptions { stateless: true, ..MockOptions::default() }
}

/// `params` with the stateless `_meta` of a client that can sample and elicit.
pub(crate) fn stateless_request(params: Value) -> Value {
    with_meta(params, json!({"sampling": {}, "elicitation": {}}))
}

/// `params` with the stateless `_meta` of a client with these capabilities.
pub(crate) fn with_meta(mut params: Value, capabilities: Value) -> Value {
    params["_meta"] = json!({
        META_PROTOCOL_VERSION: STATELESS_PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES: capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
    });
    params
}

#[test]
fn stateless_discover_describes_the_server() {
    let harness = Harness::new(MockOptions { name: "stateless".into(), ..stateless() });
    let discover = harness.request(1, "server/discover", stateless_request(json!({})));
    assert_eq!(
        discover["result"],
        json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "completions": {},
                "logging": {},
            },
            "instructions": INSTRUCTIONS,
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "stateless", "version": "1"}},
        })
    );
}

#[test]
fn stateless_requests_need_their_meta() {
    let harness = Harness::new(stateless());
    assert_eq!(harness.request(1, "tools/list", json!({}))["error"]["code"], -32602);
    let no_capabilities = json!({"_meta": {META_PROTOCOL_VERSION: STATELESS_PROTOCOL_VERSION}});
    assert_eq!(harness.request(2, "tools/list", no_capabilities)["error"]["code"], -32602);
    let numeric_version = json!({"_meta": {META_PROTOCOL_VERSION: 2026, META_CLIENT_CAPABILITIES: {}}});
    assert_eq!(harness.request(3, "server/discover", numeric_version)["error"]["code"], -32602);
    let old = json!({"_meta": {META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {}}});
    let refused = harness.request(4, "tools/list", old);
    assert_eq!(refused["error"]["code"], -32022);
    assert_eq!(refused["error"]["data"], json!({"supported": ["2026-07-28"], "requested": "2025-11-25"}));
    let mut bad_level = stateless_request(json!({}));
    bad_level["_meta"][META_LOG_LEVEL] = json!("loud");
    assert_eq!(harness.request(5, "tools/list", bad_level)["error"]["code"], -32602);
}

#[test]
fn stateless_refuses_the_handshake_era_methods() {
    let harness = Harness::new(stateless());
    let initialize = harness.request(1, "initialize", json!({"protocolVersion": PROTOCOL_VERSION}));
    assert_eq!(initialize["error"]["code"], -32601);
    assert_eq!(initialize["error"]["data"], json!({"supported": ["2026-07-28"]}));
    assert!(initialize["error"]["message"].as_str().unwrap_or_default().contains("2026-07-28"), "{initialize}");
    for (id, method) in
        [(2, "ping"), (3, "logging/setLevel"), (4, "resources/subscribe"), (5, "resources/unsubscribe"), (6, "x/y")]
    {
        assert_eq!(harness.request(id, method, stateless_request(json!({})))["error"]["code"], -32601, "{method}");
    }
    harness.feed(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    harness.nothing_more();
}

#[test]
fn stateless_results_are_complete_and_lists_are_cacheable() {
    let harness = Harness::new(stateless());
    let tools = harness.request(1, "tools/list", stateless_request(json!({})));
    assert_eq!(
        (&tools["result"]["resultType"], &tools["result"]["ttlMs"], &tools["result"]["cacheScope"]),
        (&json!("complete"), &json!(0), &json!("private"))
    );
    let names: Vec<_> = tools["result"]["tools"].as_array().into_iter().flatten().map(|t| t["name"].clone()).collect();
    assert!(names.contains(&json!("elicit")), "{names:?}");
    for (id, method) in [(2, "resources/list"), (3, "resources/templates/list"), (4, "prompts/list")] {
        let list = harness.request(id, method, stateless_request(json!({})));
        assert_eq!((&list["result"]["resultType"], &list["result"]["ttlMs"]), (&json!("complete"), &json!(0)));
    }
    let read = harness.request(5, "resources/read", stateless_request(json!({"uri": INFO_URI})));
    assert_eq!(read["result"]["cacheScope"], "private");
    let missing = harness.request(6, "resources/read", stateless_request(json!({"uri": "mock://nope"})));
    assert_eq!(missing["error"]["code"], -32602, "-32002 is retired");
    let echo =
        harness.request(7, "tools/call", stateless_request(json!({"name": "echo", "arguments": {"text": "hi"}})));
    assert_eq!(echo["result"], json!({"resultType": "complete", "content": [{"type": "text", "text": "hi"}]}));
    let fail = harness.request(8, "tools/call", stateless_request(json!({"name": "fail"})));
    assert_eq!((&fail["result"]["isError"], &fail["result"]["resultType"]), (&json!(true), &json!("complete")));
    let prompt =
        harness.request(9, "prompts/get", stateless_request(json!({"name": "greet", "arguments": {"name": "Ann"}})));
    assert_eq!(prompt["result"]["resultType"], "complete");
    assert!(prompt["result"].get("ttlMs").is_none());
}

#[test]
fn stateless_sample_asks_with_input_required_and_finishes_on_the_retry() {
    let harness = Harness::new(stateless());
    let call = json!({"name": "sample", "arguments": {"prompt": "hi?"}});
    let asked = harness.request(1, "tools/call", stateless_request(call.clone()));
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required");
    assert_eq!(
        result["inputRequests"]["sample"],
        json!({"method": "sampling/createMessage", "params": sampling_params("hi?")})
    );
    let state = result["requestState"].as_str().expect("a requestState").to_string();

    let mut retry = stateless_request(call.clone());
    retry["inputResponses"] =
        json!({"sample": {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}});
    retry["requestState"] = json!(state);
    let done = harness.request(2, "tools/call", retry.clone());
    assert_eq!(done["result"], json!({"resultType": "complete", "content": [{"type": "text", "text": "hello"}]}));

    let mut tampered = retry.clone();
    tampered["requestState"] = json!(format!("{state}00"));
    assert_eq!(harness.request(3, "tools/call", tampered)["error"]["code"], -32602);
    let mut other_arguments = retry.clone();
    other_arguments["arguments"] = json!({"prompt": "other"});
    assert_eq!(harness.request(4, "tools/call", other_arguments)["error"]["code"], -32602);
    let mut stateless_retry = retry;
    if let Some(params) = stateless_retry.as_object_mut() {
        params.remove("requestState");
    }
    assert_eq!(harness.request(5, "tools/call", stateless_retry)["error"]["code"], -32602);

    let unable = harness.request(6, "tools/call", with_meta(call, json!({"elicitation": {}})));
    assert_eq!(unable["error"]["code"], -32021);
    assert_eq!(unable["error"]["data"], json!({"requiredCapabilities": {"sampling": {}}}));
    harness.nothing_more();
}

#[test]
fn stateless_elicit_greets_declines_and_cancels() {
    let harness = Harness::new(stateless());
    let call = json!({"name": "elicit"});
    let asked = harness.request(1, "tools/call", stateless_request(call.clone()));
    let request = &asked["result"]["inputRequests"]["elicit"];
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["mode"], "form");
    assert_eq!(request["params"]["requestedSchema"]["required"], json!(["name"]));
    let state = asked["result"]["requestState"].clone();
    let answers = [
        (json!({"action": "accept", "content": {"name": "Ann"}}), "hello Ann"),
        (json!({"action": "decline"}), "declined"),
        (json!({"action": "cancel"}), "cancelled"),
    ];
    for (id, (answer, text)) in (2..).zip(answers) {
        let mut retry = stateless_request(call.clone());
        retry["inputResponses"] = json!({"elicit": answer});
        retry["requestState"] = state.clone();
        assert_eq!(harness.request(id, "tools/call", retry)["result"]["content"][0]["text"], text);
    }
    let unable = harness.request(9, "tools/call", with_meta(call, json!({})));
    assert_eq!(unable["error"]["data"], json!({"requiredCapabilities": {"elicitation": {}}}));
    let legacy = Harness::new(MockOptions::default());
    let tools = legacy.request(1, "tools/list", json!({}));
    assert!(!tools.to_string().contains("elicit"), "elicit is a stateless-only tool");
}

#[test]
fn stateless_log_needs_the_requests_log_level() {
    let harness = Harness::new(stateless());
    let call = json!({"name": "log", "arguments": {"message": "m"}});
    assert_eq!(harness.request(1, "tools/call", stateless_request(call.clone()))["id"], 1, "no level: no log");
    let mut params = stateless_request(call.clone());
    params["_meta"][META_LOG_LEVEL] = json!("error");
    assert_eq!(harness.request(2, "tools/call", params)["id"], 2, "info is below error");
    let mut params = stateless_request(call);
    params["_meta"][META_LOG_LEVEL] = json!("debug");
    let entry = harness.request(3, "tools/call", params);
    assert_eq!((&entry["method"], &entry["params"]["data"]), (&json!("notifications/message"), &json!("m")));
    assert_eq!(harness.next()["id"], 3);
}

#[test]
fn stateless_listen_acknowledges_then_delivers_changes_until_cancelled() {
    let harness = Harness::new(stateless());
    let filter = json!({"toolsListChanged": true, "resourceSubscriptions": [INFO_URI, "file:///nope"]});
    let ack = harness.request(1, "subscriptions/listen", stateless_request(json!({"notifications": filter})));
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"],
        json!({"_meta": {META_SUBSCRIPTION_ID: 1}, "notifications": {"toolsListChanged": true, "resourceSubscriptions": [INFO_URI]}})
    );
    let ack = harness.request(
        2,
        "subscriptions/listen",
        stateless_request(json!({"notifications": {"promptsListChanged": true}})),
    );
    assert_eq!(ack["params"]["notifications"], json!({"promptsListChanged": true}));

    harness.feed(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": stateless_request(json!({"name": "add_tool"}))}),
    );
    let changed = harness.next();
    assert_eq!(changed, notification("notifications/tools/list_changed", json!({"_meta": {META_SUBSCRIPTION_ID: 1}})));
    assert_eq!(harness.next()["id"], 3);
    harness.feed(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": stateless_request(json!({"name": "echo", "arguments": {"text": "x"}}))}));
    let updated = harness.next();
    assert_eq!(updated["method"], "notifications/resources/updated");
    assert_eq!(updated["params"], json!({"uri": INFO_URI, "_meta": {META_SUBSCRIPTION_ID: 1}}));
    assert_eq!(harness.next()["id"], 4);

    harness.feed(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}));
    let deadline = Instant::now() + WAIT;
    while lock(&harness.session.listens).open.len() > 1 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    harness.feed(
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": stateless_request(json!({"name": "add_tool"}))}),
    );
    assert_eq!(harness.next()["id"], 5, "the cancelled listen gets nothing more, and no response");
    let bad = harness.request(
        6,
        "subscriptions/listen",
        stateless_request(json!({"notifications": {"toolsListChanged": 1}})),
    );
    assert_eq!(bad["error"]["code"], -32602);
    harness.nothing_more();
}

#[test]
fn stateless_stdio_records_methods_and_ends_listens_at_eof() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("state");
    let frame = |id: u64, method: &str, params: Value| {
        format!("{}\n", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
    };
    let input = [
        frame(1, "server/discover", stateless_request(json!({}))),
        frame(2, "subscriptions/listen", stateless_request(json!({"notifications": {"toolsListChanged": true}}))),
        frame(3, "initialize", json!({})),
    ]
    .concat();
    let output = SharedBuffer::default();
    let mock =
        Arc::new(Mock::new(MockOptions { state_file: Some(path.clone()), ..stateless() }).expect("valid options"));
    let started = Instant::now();
    serve_stdio(mock, Cursor::new(input), output.clone()).expect("EOF ends the loop cleanly");
    assert!(started.elapsed() < EOF_GRACE, "an open listen does not hold up the exit");
    let text = String::from_utf8(lock(&output.0).clone()).expect("UTF-8 output");
    let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect();
    assert!(lines.len() == 2 || lines.len() == 3, "{lines:?}");
    assert_eq!(lines.iter().filter(|line| line["id"] == 1 || line["id"] == 3).count(), 2, "{lines:?}");
    assert!(lines.iter().all(|line| line["id"] != 2), "a listen gets no response");
    let lines = fs::read_to_string(&path).expect("the state file");
    let mut methods: Vec<_> = lines.lines().collect();
    methods.sort_unstable();
    assert_eq!(methods, ["initialize", "server/discover", "subscriptions/listen"]);
}

/// A writer whose bytes the test can read while the mock holds it.
#[derive(Clone, Default)]
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        lock(&self.0).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_stdio_loop_answers_each_line_and_stops_at_eof() {
    let input = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        "\n\n",
        "this is not json\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hey"}}}"#,
        "\n",
    );
    let output = SharedBuffer::default();
    let mock = Arc::new(Mock::new(MockOptions::default()).expect("valid options"));
    serve_stdio(mock, Cursor::new(input), output.clone()).expect("EOF ends the loop cleanly");

    let deadline = Instant::now() + WAIT;
    let lines = loop {
        let text = String::from_utf8(lock(&output.0).clone()).expect("UTF-8 output");
        let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect();
        if lines.len() >= 3 || Instant::now() > deadline {
            break lines;
        }
        thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(lines.len(), 3, "{lines:?}");
    let by_id = |id: Value| lines.iter().find(|line| line["id"] == id).cloned().unwrap_or_default();
    assert_eq!(by_id(json!(1))["result"]["serverInfo"]["name"], "mock");
    assert_eq!(by_id(json!(2))["result"]["content"][0]["text"], "hey");
    assert_eq!(by_id(Value::Null)["error"]["code"], -32700);
}

#[cfg(not(feature = "http"))]
#[test]
fn http_is_refused_at_once_without_the_http_front() {
    let options = MockOptions { http: Some("127.0.0.1:0".into()), ..MockOptions::default() };
    let error = crate::run(options).expect_err("no HTTP front in this build");
    assert_eq!(error.kind(), io::ErrorKind::Unsupported);
    assert!(error.to_string().contains("--http 127.0.0.1:0") && error.to_string().contains("tether serve --listen"));
}
