//! Gateway-side tasks (the stateless revision's tasks extension, served by tether
//! for a backend that runs none): a call not answered within the sync window
//! becomes a task that outlives its client's connection; status, result,
//! inputs and cancellation through `tasks/*`; crashes, expiry and the store's
//! bounds. Every client request here comes on its own short-lived HTTP session,
//! as a stateless client's do.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::{Action, Config, Input, SessionId};

const TASKS: &str = "io.modelcontextprotocol/tasks";
/// 2026-11-27T12:00:00.000Z
const WALL: u64 = 1_795_780_800_000;

fn config() -> Config {
    let mut config = one_stdio();
    config.stateless_clients = true;
    config
}

/// `fs`'s tools: `slow`, the read-only `lookup`, `quick` (forbidden as a task)
/// and `batch` (tasks only).
fn fs_tools() -> Value {
    json!({"tools":[
        {"name":"slow","inputSchema":{"type":"object"}},
        {"name":"lookup","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
        {"name":"quick","inputSchema":{"type":"object"},"execution":{"taskSupport":"forbidden"}},
        {"name":"batch","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}},
    ]})
}

/// `fs` (a handshake-era backend without tasks) online with `slow`, the
/// read-only `lookup`, `quick` (forbidden as a task) and `batch` (tasks only).
fn booted(config: Config) -> Sim {
    let mut sim = Sim::new(config);
    sim.input(Input::WallClock { unix_ms: WALL });
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
    sim.answer("fs", "tools/list", fs_tools());
    sim
}

/// Client capabilities that declare tasks (and elicitation).
fn with_tasks() -> Value {
    json!({"elicitation":{},"extensions":{ TASKS: {} }})
}

fn meta(caps: Value) -> Value {
    let mut m = stateless_meta();
    m["io.modelcontextprotocol/clientCapabilities"] = caps;
    m
}

/// A client request on a fresh per-request session `session` (an HTTP POST).
fn post(sim: &mut Sim, session: u64, id: u64, method: &str, mut params: Value, caps: Value) {
    params["_meta"] = meta(caps);
    let session = SessionId(session);
    sim.input(Input::ClientConnected { session, expires: true });
    sim.session(session, json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
}

/// The answers session `session` got to request `id`.
fn answers(sim: &Sim, session: u64, id: u64) -> Vec<Value> {
    sim.frames_to(SessionId(session))
        .into_iter()
        .filter(|f| f["id"] == json!(id) && f.get("method").is_none())
        .collect()
}

/// The one answer of session `session` (panics unless exactly one).
fn answer(sim: &Sim, session: u64, id: u64) -> Value {
    let a = answers(sim, session, id);
    assert_eq!(a.len(), 1, "expected one answer to {id} on session {session}, got {a:?}\n{}", sim.log);
    a.into_iter().next().unwrap()
}

/// Answers the latest `tools/call` fs got.
fn reply_last(sim: &mut Sim, result: Value) {
    let id = sim.last_request("fs", "tools/call");
    reply(sim, "fs", id, result);
}

fn call(sim: &mut Sim, session: u64, tool: &str, caps: Value) {
    post(sim, session, 1, "tools/call", json!({"name": format!("fs__{tool}"), "arguments":{}}), caps);
}

fn task_request(sim: &mut Sim, session: u64, method: &str, task: &str) -> Value {
    post(sim, session, 1, method, json!({ "taskId": task }), with_tasks());
    answer(sim, session, 1)
}

/// Starts a call of `tool` as a task on session `session`; returns the task id.
fn start_task(sim: &mut Sim, session: u64, tool: &str) -> String {
    call(sim, session, tool, with_tasks());
    sim.advance(500);
    let created = answer(sim, session, 1)["result"].clone();
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().unwrap().to_string()
}

#[test]
fn a_slow_call_becomes_a_task_that_outlives_its_client_and_keeps_its_result() {
    let mut sim = booted(config());
    sim.note("a stateless client that takes tasks calls a slow tool on its own HTTP request");
    call(&mut sim, 10, "slow", with_tasks());
    let backend_call = sim.last_request("fs", "tools/call");
    let (_, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert!(params["_meta"].get(TASKS).is_none() && params.get("task").is_none(), "{params}");
    sim.advance(499);
    assert!(answers(&sim, 10, 1).is_empty(), "inside the sync window the client waits");
    sim.note("the sync window passes: the client is answered with a task, its session closes");
    sim.advance(1);
    let created = answer(&sim, 10, 1)["result"].clone();
    assert_eq!(created["resultType"], "task");
    assert_eq!(created["status"], "working");
    assert_eq!(created["createdAt"], "2026-11-27T12:00:00.500Z");
    assert_eq!(created["lastUpdatedAt"], created["createdAt"]);
    assert_eq!((created["ttlMs"].clone(), created["pollIntervalMs"].clone()), (json!(3_600_000), json!(1000)));
    for absent in ["task", "result", "error", "inputRequests", "requestState", "ttl", "pollInterval"] {
        assert!(created.get(absent).is_none(), "{absent} in {created}");
    }
    let task = created["taskId"].as_str().unwrap().to_string();
    assert_eq!(task.len(), 32, "128 bits, unguessable");
    assert!(!sim.log.contains("notifications/cancelled"), "the call goes on without its client");

    sim.note("another request, another connection: the task is still working");
    let working = task_request(&mut sim, 11, "tasks/get", &task)["result"].clone();
    assert_eq!((working["status"].clone(), working["resultType"].clone()), (json!("working"), json!("complete")));
    assert!(working.get("result").is_none());

    sim.note("fs answers two minutes later (past request_timeout_ms: a task waits up to the hard maximum)");
    sim.advance(120_000);
    reply(&mut sim, "fs", backend_call, text_result("all done"));
    let done = task_request(&mut sim, 12, "tasks/get", &task)["result"].clone();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["content"][0]["text"], "all done");
    assert_eq!(done["lastUpdatedAt"], "2026-11-27T12:02:00.500Z");
    assert!(done["result"].get("_meta").is_none());
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_call_answered_within_the_window_or_of_a_tool_that_forbids_tasks_is_answered_directly() {
    let mut sim = booted(config());
    call(&mut sim, 10, "slow", with_tasks());
    sim.advance(300);
    reply_last(&mut sim, text_result("fast"));
    let result = answer(&sim, 10, 1)["result"].clone();
    assert_eq!(
        (result["resultType"].clone(), result["content"][0]["text"].clone()),
        (json!("complete"), json!("fast"))
    );

    call(&mut sim, 11, "quick", with_tasks());
    sim.advance(5000);
    assert!(answers(&sim, 11, 1).is_empty(), "a tool that forbids tasks never becomes one");
    reply_last(&mut sim, text_result("slowly"));
    assert_eq!(answer(&sim, 11, 1)["result"]["content"][0]["text"], "slowly");

    sim.note("a client without the extension waits as before");
    call(&mut sim, 12, "slow", json!({}));
    sim.advance(5000);
    assert!(answers(&sim, 12, 1).is_empty());
    reply_last(&mut sim, text_result("waited"));
    assert_eq!(answer(&sim, 12, 1)["result"]["content"][0]["text"], "waited");
}

#[test]
fn a_tool_that_runs_only_as_a_task_refuses_clients_without_tasks() {
    let mut sim = booted(config());
    call(&mut sim, 10, "batch", json!({}));
    let error = answer(&sim, 10, 1)["error"].clone();
    assert_eq!(error["code"], -32021);
    assert_eq!(error["data"], json!({"requiredCapabilities":{"extensions":{ TASKS: {} }}}));
    assert!(sim.requests_to("fs", "tools/call").is_empty(), "not sent");
    let task = start_task(&mut sim, 11, "batch");
    assert_eq!(task.len(), 32);
}

#[test]
fn tasks_methods_need_the_extension_and_a_known_task() {
    let mut sim = booted(config());
    let task = start_task(&mut sim, 10, "slow");
    post(&mut sim, 11, 1, "tasks/get", json!({ "taskId": task }), json!({}));
    let error = answer(&sim, 11, 1)["error"].clone();
    assert_eq!(
        (error["code"].clone(), error["data"].clone()),
        (json!(-32021), json!({"requiredCapabilities":{"extensions":{ TASKS: {} }}}))
    );
    for (session, method) in [(12, "tasks/get"), (13, "tasks/update"), (14, "tasks/cancel")] {
        let params = json!({"taskId":"0123456789abcdef0123456789abcdef","inputResponses":{}});
        post(&mut sim, session, 1, method, params, with_tasks());
        assert_eq!(answer(&sim, session, 1)["error"]["code"], -32602, "{method}");
    }
    for (session, method) in [(15, "tasks/result"), (16, "tasks/list")] {
        post(&mut sim, session, 1, method, json!({ "taskId": task }), with_tasks());
        assert_eq!(answer(&sim, session, 1)["error"]["code"], -32601, "{method} is not part of the extension");
    }
    post(&mut sim, 17, 1, "tasks/get", json!({}), with_tasks());
    assert_eq!(answer(&sim, 17, 1)["error"]["code"], -32602);
    sim.note("server/discover announces the extension");
    post(&mut sim, 18, 1, "server/discover", json!({}), json!({}));
    let caps = answer(&sim, 18, 1)["result"]["capabilities"].clone();
    assert_eq!(caps["extensions"], json!({ TASKS: {} }));
    assert!(caps.get("tasks").is_none());
}

#[test]
fn cancelling_a_task_stops_its_call_at_the_backend_and_later_answers_change_nothing() {
    let mut sim = booted(config());
    let task = start_task(&mut sim, 10, "slow");
    let backend_call = sim.last_request("fs", "tools/call");
    sim.note("the client cancels: fs is told, the task ends cancelled");
    let ack = task_request(&mut sim, 11, "tasks/cancel", &task);
    assert_eq!(ack["result"], json!({"resultType":"complete"}));
    let cancel = format!(r#""method":"notifications/cancelled","params":{{"requestId":{backend_call},"#);
    assert!(sim.log.contains(&cancel), "{}", sim.log);
    let got = task_request(&mut sim, 12, "tasks/get", &task)["result"].clone();
    assert_eq!(got["status"], "cancelled");
    assert!(got.get("result").is_none() && got.get("error").is_none());
    sim.note("fs answers anyway; the task stays cancelled, a second cancel is acknowledged the same");
    reply(&mut sim, "fs", backend_call, text_result("too late"));
    assert_eq!(task_request(&mut sim, 13, "tasks/get", &task)["result"]["status"], "cancelled");
    assert_eq!(task_request(&mut sim, 14, "tasks/cancel", &task)["result"], json!({"resultType":"complete"}));
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_tool_error_completes_the_task_and_a_protocol_error_fails_it() {
    let mut sim = booted(config());
    let tool_error = start_task(&mut sim, 10, "slow");
    let first = sim.last_request("fs", "tools/call");
    let protocol_error = start_task(&mut sim, 11, "slow");
    let second = sim.last_request("fs", "tools/call");
    reply(&mut sim, "fs", first, json!({"content":[{"type":"text","text":"no such file"}],"isError":true}));
    sim.backend("fs", json!({"jsonrpc":"2.0","id":second,"error":{"code":-32603,"message":"the tool crashed"}}));
    let completed = task_request(&mut sim, 12, "tasks/get", &tool_error)["result"].clone();
    assert_eq!(
        (completed["status"].clone(), completed["result"]["isError"].clone()),
        (json!("completed"), json!(true))
    );
    let failed = task_request(&mut sim, 13, "tasks/get", &protocol_error)["result"].clone();
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"], json!({"code":-32603,"message":"the tool crashed"}));
    assert!(failed.get("result").is_none());
}

#[test]
fn a_backend_crash_during_tasks_resends_the_safe_call_and_fails_the_other_with_a_clear_error() {
    let mut sim = booted(config());
    let safe = start_task(&mut sim, 10, "lookup");
    let unsafe_task = start_task(&mut sim, 11, "slow");
    sim.note("fs crashes with both calls in flight");
    sim.exit("fs", Some(1));
    let failed = task_request(&mut sim, 12, "tasks/get", &unsafe_task)["result"].clone();
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(message.contains("fs"), "{message}");
    assert_eq!(task_request(&mut sim, 13, "tasks/get", &safe)["result"]["status"], "working");
    sim.note("fs restarts; the read-only call is sent again on the new process and finishes its task");
    sim.advance(1000);
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
    let resent = sim.last_request("fs", "tools/call");
    reply(&mut sim, "fs", resent, text_result("found it"));
    let done = task_request(&mut sim, 14, "tasks/get", &safe)["result"].clone();
    assert_eq!(
        (done["status"].clone(), done["result"]["content"][0]["text"].clone()),
        (json!("completed"), json!("found it"))
    );
    insta::assert_snapshot!(sim.log);
}

#[test]
fn what_the_backend_asks_during_a_task_waits_for_tasks_update() {
    let mut sim = booted(config());
    let task = start_task(&mut sim, 10, "slow");
    let backend_call = sim.last_request("fs", "tools/call");
    sim.note("fs asks two questions at once, the handshake-era way");
    for key in ["q1", "q2"] {
        let ask = json!({"message": key, "requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}});
        sim.backend("fs", json!({"jsonrpc":"2.0","id":key,"method":"elicitation/create","params": ask}));
    }
    let waiting = task_request(&mut sim, 11, "tasks/get", &task)["result"].clone();
    assert_eq!(waiting["status"], "input_required");
    assert_eq!(waiting["inputRequests"]["q1"]["method"], "elicitation/create");
    assert_eq!(waiting["inputRequests"]["q2"]["params"]["message"], "q2");
    sim.note("one answer (and one key fs never asked): the task waits for the other");
    let params =
        json!({"taskId": task, "inputResponses": {"q1": {"action":"accept","content":{"ok":true}}, "nope": {}}});
    post(&mut sim, 12, 1, "tasks/update", params, with_tasks());
    assert_eq!(answer(&sim, 12, 1)["result"], json!({"resultType":"complete"}));
    assert!(sim
        .log
        .contains(r#"fs#1 <- {"jsonrpc":"2.0","id":"q1","result":{"action":"accept","content":{"ok":true}}}"#));
    let partial = task_request(&mut sim, 13, "tasks/get", &task)["result"].clone();
    assert_eq!(partial["status"], "input_required");
    assert_eq!(partial["inputRequests"].as_object().unwrap().keys().collect::<Vec<_>>(), ["q2"]);
    let params = json!({"taskId": task, "inputResponses": {"q2": {"action":"decline"}}});
    post(&mut sim, 14, 1, "tasks/update", params, with_tasks());
    assert_eq!(task_request(&mut sim, 15, "tasks/get", &task)["result"]["status"], "working");
    reply(&mut sim, "fs", backend_call, text_result("answered"));
    assert_eq!(task_request(&mut sim, 16, "tasks/get", &task)["result"]["status"], "completed");
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_task_expires_after_its_ttl_and_one_still_running_is_cancelled() {
    let mut config = config();
    config.tasks.ttl_ms = 60_000;
    config.policy.request_timeout_max_ms = 600_000;
    let mut sim = booted(config);
    let finished = start_task(&mut sim, 10, "slow");
    reply_last(&mut sim, text_result("kept a minute"));
    let running = start_task(&mut sim, 11, "slow");
    let backend_call = sim.last_request("fs", "tools/call");
    sim.advance(59_000);
    assert_eq!(task_request(&mut sim, 12, "tasks/get", &finished)["result"]["status"], "completed");
    sim.note("a minute after creation both are gone; fs is told to stop the running one");
    sim.advance(1000);
    for (session, task) in [(13, &finished), (14, &running)] {
        assert_eq!(task_request(&mut sim, session, "tasks/get", task)["error"]["code"], -32602);
    }
    let cancel = format!(
        r#""method":"notifications/cancelled","params":{{"requestId":{backend_call},"reason":"the task expired"}}"#
    );
    assert!(sim.log.contains(&cancel), "{}", sim.log);
}

#[test]
fn the_store_is_bounded_in_count_and_in_bytes_of_results() {
    let mut config = config();
    config.tasks.max_tasks = 2;
    config.tasks.max_result_bytes = 1024;
    let mut sim = booted(config);
    let first = start_task(&mut sim, 10, "slow");
    let first_call = sim.last_request("fs", "tools/call");
    start_task(&mut sim, 11, "slow");
    sim.note("two tasks running, the store is full: a third slow call is answered directly");
    call(&mut sim, 12, "slow", with_tasks());
    sim.advance(2000);
    assert!(answers(&sim, 12, 1).is_empty());
    reply_last(&mut sim, text_result("direct"));
    assert_eq!(answer(&sim, 12, 1)["result"]["content"][0]["text"], "direct");
    sim.note("a result too large for the store fails its task with a message saying so");
    reply(&mut sim, "fs", first_call, text_result(&"x".repeat(2000)));
    let failed = task_request(&mut sim, 13, "tasks/get", &first)["result"].clone();
    assert_eq!(failed["status"], "failed");
    assert!(failed["error"]["message"].as_str().unwrap().contains("tasks.max_result_bytes"), "{failed}");
    sim.note("a finished task makes room: the oldest finished one goes");
    let third = start_task(&mut sim, 14, "slow");
    assert_eq!(task_request(&mut sim, 15, "tasks/get", &first)["error"]["code"], -32602);
    assert_eq!(task_request(&mut sim, 16, "tasks/get", &third)["result"]["status"], "working");
}

// ----- 2025-11-25's experimental tasks (handshake-era clients) -----

/// Session `session` initializes at 2025-11-25 (with elicitation); its answer.
fn init_2025(sim: &mut Sim, session: u64) -> Value {
    let s = SessionId(session);
    sim.input(Input::ClientConnected { session: s, expires: true });
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"old","version":"1"}}});
    sim.session(s, init);
    sim.session(s, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    answer(sim, session, 0)
}

fn send(sim: &mut Sim, session: u64, id: u64, method: &str, params: Value) {
    sim.session(SessionId(session), json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
}

#[test]
fn a_2025_client_gets_its_task_at_once_and_fetches_the_result_from_a_new_session() {
    let mut sim = booted(config());
    let init = init_2025(&mut sim, 20)["result"].clone();
    assert_eq!(init["capabilities"]["tasks"], json!({"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}));
    sim.note("the client asks for a task: it has one before fs is even asked");
    send(&mut sim, 20, 1, "tools/call", json!({"name":"fs__slow","arguments":{},"task":{"ttl":60000}}));
    let created = answer(&sim, 20, 1)["result"].clone();
    let task = created["task"]["taskId"].as_str().unwrap().to_string();
    assert_eq!(created["task"]["status"], "working");
    assert_eq!(
        (created["task"]["ttl"].clone(), created["task"]["pollInterval"].clone()),
        (json!(3_600_000), json!(1000))
    );
    assert!(created.get("resultType").is_none() && created["task"].get("ttlMs").is_none(), "{created}");
    let (backend_call, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert!(params.get("task").is_none(), "fs runs no tasks: it gets a plain call: {params}");
    send(&mut sim, 20, 2, "tasks/get", json!({ "taskId": task }));
    let got = answer(&sim, 20, 2)["result"].clone();
    assert_eq!((got["taskId"].clone(), got["status"].clone()), (json!(task), json!("working")));
    send(&mut sim, 20, 3, "tasks/list", json!({}));
    assert_eq!(answer(&sim, 20, 3)["result"]["tasks"][0]["taskId"], json!(task));

    sim.note("the connection drops; the call goes on");
    sim.input(Input::ClientClosed { session: SessionId(20) });
    assert!(!sim.log.contains("notifications/cancelled"), "{}", sim.log);
    sim.note("a new session asks for the result, which waits for fs");
    init_2025(&mut sim, 21);
    send(&mut sim, 21, 1, "tasks/list", json!({}));
    assert_eq!(answer(&sim, 21, 1)["result"]["tasks"], json!([]), "another session's tasks are not listed");
    send(&mut sim, 21, 2, "tasks/result", json!({ "taskId": task }));
    assert!(answers(&sim, 21, 2).is_empty(), "tasks/result waits for the task to finish");
    reply(&mut sim, "fs", backend_call, text_result("worth the wait"));
    let result = answer(&sim, 21, 2)["result"].clone();
    assert_eq!(result["content"][0]["text"], "worth the wait");
    assert_eq!(result["_meta"]["io.modelcontextprotocol/related-task"], json!({ "taskId": task }));
    send(&mut sim, 21, 3, "tasks/cancel", json!({ "taskId": task }));
    assert_eq!(answer(&sim, 21, 3)["error"]["code"], -32602, "a finished task cannot be cancelled");
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_2025_client_cancels_its_task_and_answers_what_it_asks() {
    let mut sim = booted(config());
    init_2025(&mut sim, 20);
    send(&mut sim, 20, 1, "tools/call", json!({"name":"fs__slow","arguments":{},"task":{}}));
    let task = answer(&sim, 20, 1)["result"]["task"]["taskId"].as_str().unwrap().to_string();
    sim.note("fs asks for confirmation: the question goes to the task's client, tied to the task");
    let ask = json!({"message":"sure?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}});
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"c1","method":"elicitation/create","params": ask}));
    let asked = sim.frames_to(SessionId(20)).into_iter().find(|f| f["method"] == "elicitation/create").unwrap();
    assert_eq!(asked["params"]["_meta"]["io.modelcontextprotocol/related-task"], json!({ "taskId": task }));
    send(&mut sim, 20, 2, "tasks/get", json!({ "taskId": task }));
    assert_eq!(answer(&sim, 20, 2)["result"]["status"], "input_required");
    let answer_frame =
        json!({"jsonrpc":"2.0","id": asked["id"].clone(),"result":{"action":"accept","content":{"ok":true}}});
    sim.session(SessionId(20), answer_frame);
    assert!(sim
        .log
        .contains(r#"fs#1 <- {"jsonrpc":"2.0","id":"c1","result":{"action":"accept","content":{"ok":true}}}"#));
    send(&mut sim, 20, 3, "tasks/get", json!({ "taskId": task }));
    assert_eq!(answer(&sim, 20, 3)["result"]["status"], "working");
    sim.note("a tasks/result waits; the client cancels; the wait ends with an error");
    send(&mut sim, 20, 4, "tasks/result", json!({ "taskId": task }));
    send(&mut sim, 20, 5, "tasks/cancel", json!({ "taskId": task }));
    let cancelled = answer(&sim, 20, 5)["result"].clone();
    assert_eq!((cancelled["taskId"].clone(), cancelled["status"].clone()), (json!(task), json!("cancelled")));
    assert_eq!(answer(&sim, 20, 4)["error"]["code"], -32603);
    assert!(sim.log.contains(r#""method":"notifications/cancelled""#));

    sim.note("a tool that requires tasks, called without one; a tool that forbids them, called with one");
    send(&mut sim, 20, 6, "tools/call", json!({"name":"fs__batch","arguments":{}}));
    assert_eq!(answer(&sim, 20, 6)["error"]["code"], -32601);
    send(&mut sim, 20, 7, "tools/call", json!({"name":"fs__quick","arguments":{},"task":{}}));
    assert_eq!(answer(&sim, 20, 7)["error"]["code"], -32601);
    insta::assert_snapshot!(sim.log);
}

/// `tools/list` as session `session` gets it: each tool's served name and what
/// it says of tasks (`null`: nothing, which the spec reads as forbidden).
fn listed_task_support(sim: &mut Sim, session: u64, id: u64) -> Vec<(String, Value)> {
    send(sim, session, id, "tools/list", json!({}));
    let tools = answer(sim, session, id)["result"]["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().map(|t| (t["name"].as_str().unwrap().to_string(), t["execution"]["taskSupport"].clone())).collect()
}

#[test]
fn a_2025_client_is_told_it_may_call_as_tasks_the_tools_tether_runs_as_tasks() {
    let mut sim = booted(config());
    init_2025(&mut sim, 20);
    let listed = listed_task_support(&mut sim, 20, 1);
    let expected = [
        ("fs__slow", json!("optional")),
        ("fs__lookup", json!("optional")),
        ("fs__quick", json!("forbidden")),
        ("fs__batch", json!("required")),
    ];
    assert_eq!(listed, expected.map(|(n, s)| (n.to_string(), s)), "what tether runs as tasks is optional");
    send(&mut sim, 20, 2, "tools/call", json!({"name":"fs__lookup","arguments":{},"task":{}}));
    assert_eq!(answer(&sim, 20, 2)["result"]["task"]["status"], "working", "and such a call gets its task");

    let older = SessionId(30);
    sim.input(Input::ClientConnected { session: older, expires: true });
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"older","version":"1"}}});
    sim.session(older, init);
    let listed = listed_task_support(&mut sim, 30, 1);
    assert!(listed[..2].iter().all(|(_, s)| s.is_null()), "an older client is told nothing new: {listed:?}");
}

#[test]
fn a_tool_with_an_execution_object_that_says_nothing_of_tasks_keeps_the_rest_of_it() {
    let mut sim = Sim::new(config());
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
    let tools = json!({"tools":[
        {"name":"x","inputSchema":{"type":"object"},"execution":{"hint":"kept"}},
        {"name":"y","inputSchema":{"type":"object"},"execution":null},
    ]});
    sim.answer("fs", "tools/list", tools);
    init_2025(&mut sim, 20);
    send(&mut sim, 20, 1, "tools/list", json!({}));
    let tools = answer(&sim, 20, 1)["result"]["tools"].clone();
    assert_eq!(tools[0]["execution"], json!({"hint":"kept","taskSupport":"optional"}));
    assert_eq!(tools[0]["name"], "fs__x");
    assert_eq!(tools[1]["execution"], json!({"taskSupport":"optional"}), "not an object: as if absent");
}

#[test]
fn a_2025_client_sees_the_task_support_of_a_backend_that_runs_tasks_as_it_listed_it() {
    let mut sim = Sim::new(config());
    let caps = json!({"tools":{},"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}});
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities": caps}));
    let tools = json!({"tools":[{"name":"slow","inputSchema":{"type":"object"}}]});
    sim.answer("fs", "tools/list", tools);
    init_2025(&mut sim, 20);
    assert_eq!(listed_task_support(&mut sim, 20, 1), [("fs__slow".to_string(), Value::Null)]);
}

#[test]
fn clients_of_older_revisions_see_no_tasks() {
    let mut sim = booted(config());
    let s = SessionId(30);
    sim.input(Input::ClientConnected { session: s, expires: true });
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"older","version":"1"}}});
    sim.session(s, init);
    assert!(answer(&sim, 30, 0)["result"]["capabilities"].get("tasks").is_none());
    send(&mut sim, 30, 1, "tasks/list", json!({}));
    assert_eq!(answer(&sim, 30, 1)["error"]["code"], -32601);
    send(&mut sim, 30, 2, "tools/call", json!({"name":"fs__batch","arguments":{},"task":{}}));
    assert!(answers(&sim, 30, 2).is_empty(), "called as before: forwarded and answered by fs");
}

// ----- tasks a backend runs itself: passed through, ids namespaced -----

/// `fs` a stateless backend that runs tasks (the extension in its discover).
fn booted_stateless_with_tasks() -> Sim {
    let mut sim = Sim::new(config());
    sim.input(Input::WallClock { unix_ms: WALL });
    let discover = json!({"resultType":"complete","supportedVersions":[STATELESS],
        "capabilities":{"tools":{},"extensions":{ TASKS: {} }},"ttlMs":0,"cacheScope":"private"});
    sim.answer("fs", "server/discover", discover);
    let tools = json!({"resultType":"complete","tools":[{"name":"slow","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}}],"ttlMs":0,"cacheScope":"private"});
    sim.answer("fs", "tools/list", tools);
    sim
}

#[test]
fn tasks_of_a_backend_that_runs_them_pass_through_under_ids_of_tethers_own() {
    let mut sim = booted_stateless_with_tasks();
    sim.note("the client's tasks extension goes to fs, which answers with its own task");
    call(&mut sim, 10, "slow", with_tasks());
    let (backend_call, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"], json!({ TASKS: {} }));
    sim.advance(2000);
    assert!(answers(&sim, 10, 1).is_empty(), "no window of tether's own: fs decides");
    let created = json!({"resultType":"task","taskId":"t-7","status":"working","createdAt":"2026-11-27T12:00:00Z",
        "lastUpdatedAt":"2026-11-27T12:00:00Z","ttlMs":60000,"pollIntervalMs":500});
    reply(&mut sim, "fs", backend_call, created);
    let created = answer(&sim, 10, 1)["result"].clone();
    assert_eq!(created["resultType"], json!("task"));
    let ours = created["taskId"].as_str().unwrap().to_string();
    assert_eq!(ours.len(), 32, "an id of tether's own, not fs's guessable one: {ours}");

    sim.note("the backend's id, bare or namespaced, names nothing through tether");
    for (i, guess) in ["t-7", "fs__t-7"].into_iter().enumerate() {
        post(&mut sim, 30 + i as u64, 1, "tasks/get", json!({ "taskId": guess }), with_tasks());
        assert_eq!(answer(&sim, 30 + i as u64, 1)["error"]["code"], -32602, "{guess}");
    }
    assert!(sim.requests_to("fs", "tasks/get").is_empty());

    sim.note("tasks/get of tether's id goes to fs as t-7; the answer names tether's id again");
    post(&mut sim, 11, 1, "tasks/get", json!({ "taskId": ours }), with_tasks());
    let (get, params) = sim.requests_to("fs", "tasks/get").pop().unwrap();
    assert_eq!(params["taskId"], "t-7");
    assert_eq!(params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"], json!({ TASKS: {} }));
    let detailed = json!({"resultType":"complete","taskId":"t-7","status":"completed","createdAt":"2026-11-27T12:00:00Z",
        "lastUpdatedAt":"2026-11-27T12:00:02Z","ttlMs":60000,"result":{"content":[{"type":"text","text":"done"}]}});
    reply(&mut sim, "fs", get, detailed);
    let got = answer(&sim, 11, 1)["result"].clone();
    assert_eq!((got["taskId"].clone(), got["result"]["content"][0]["text"].clone()), (json!(ours), json!("done")));

    sim.note("cancel and update go the same way; an id of no backend is unknown");
    post(&mut sim, 12, 1, "tasks/cancel", json!({ "taskId": ours }), with_tasks());
    let (cancel, params) = sim.requests_to("fs", "tasks/cancel").pop().unwrap();
    assert_eq!(params["taskId"], "t-7");
    reply(&mut sim, "fs", cancel, json!({"resultType":"complete"}));
    assert_eq!(answer(&sim, 12, 1)["result"], json!({"resultType":"complete"}));
    post(&mut sim, 13, 1, "tasks/get", json!({"taskId":"other__t-7"}), with_tasks());
    assert_eq!(answer(&sim, 13, 1)["error"]["code"], -32602);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_client_of_the_other_form_gets_tasks_tether_runs_even_from_a_backend_that_runs_its_own() {
    let mut sim = booted_stateless_with_tasks();
    init_2025(&mut sim, 20);
    send(&mut sim, 20, 1, "tools/call", json!({"name":"fs__slow","arguments":{},"task":{}}));
    let task = answer(&sim, 20, 1)["result"]["task"]["taskId"].as_str().unwrap().to_string();
    assert_eq!(task.len(), 32, "tether's own task");
    let (backend_call, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert!(params.get("task").is_none(), "{params}");
    let caps = &params["_meta"]["io.modelcontextprotocol/clientCapabilities"];
    assert!(caps.get("extensions").is_none(), "fs is asked for a plain answer: {caps}");
    reply(&mut sim, "fs", backend_call, text_result("plain"));
    send(&mut sim, 20, 2, "tasks/result", json!({ "taskId": task }));
    assert_eq!(answer(&sim, 20, 2)["result"]["content"][0]["text"], "plain");
}

/// The frames tether sent to backends after the first `since` actions.
fn backend_frames_since(sim: &Sim, since: usize) -> Vec<String> {
    sim.actions[since..]
        .iter()
        .filter_map(|(_, a)| match a {
            Action::SendToBackend { frame, .. } => Some(frame.clone()),
            _ => None,
        })
        .collect()
}

/// `fs` as a stateless backend that runs no tasks, with its one tool `slow`.
fn booted_stateless() -> Sim {
    booted_stateless_with(config())
}

fn booted_stateless_with(config: Config) -> Sim {
    let mut sim = Sim::new(config);
    sim.input(Input::WallClock { unix_ms: WALL });
    let discover = json!({"resultType":"complete","supportedVersions":[STATELESS],"capabilities":{"tools":{}},"ttlMs":0,"cacheScope":"private"});
    sim.answer("fs", "server/discover", discover);
    let tools = json!({"resultType":"complete","tools":[{"name":"slow","inputSchema":{"type":"object"}}],"ttlMs":0,"cacheScope":"private"});
    sim.answer("fs", "tools/list", tools);
    sim
}

#[test]
fn a_stateless_backends_input_required_during_a_task_is_answered_through_tasks_update() {
    let mut sim = booted_stateless();
    let task = start_task(&mut sim, 10, "slow");
    sim.note("fs (which runs no tasks) needs a name: tether's task waits for it");
    let ask = json!({"resultType":"input_required","requestState":"st-1",
        "inputRequests":{"name":{"method":"elicitation/create","params":{"message":"name?"}}}});
    reply_last(&mut sim, ask);
    let waiting = task_request(&mut sim, 11, "tasks/get", &task)["result"].clone();
    assert_eq!(waiting["status"], "input_required");
    assert_eq!(waiting["inputRequests"]["name"]["params"]["message"], "name?");
    let params = json!({"taskId": task, "inputResponses": {"name": {"action":"accept","content":{"name":"Ada"}}}});
    post(&mut sim, 12, 1, "tasks/update", params, with_tasks());
    assert_eq!(answer(&sim, 12, 1)["result"], json!({"resultType":"complete"}));
    sim.note("the call goes to fs again with the answer and fs's own requestState");
    let (retry, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(params["requestState"], "st-1");
    assert_eq!(params["inputResponses"]["name"]["content"]["name"], "Ada");
    assert_eq!(task_request(&mut sim, 13, "tasks/get", &task)["result"]["status"], "working");
    reply(&mut sim, "fs", retry, text_result("hello Ada"));
    let done = task_request(&mut sim, 14, "tasks/get", &task)["result"].clone();
    assert_eq!(
        (done["status"].clone(), done["result"]["content"][0]["text"].clone()),
        (json!("completed"), json!("hello Ada"))
    );
    assert_eq!(sim.requests_to("fs", "tools/call").len(), 2);
}

/// What a stateless backend asks during a 2025-11-25 client's task belongs to the
/// task, not to the session it was put to: when that session goes, the backend is
/// told nothing (its inputs are answered by the call's retry, never as JSON-RPC
/// responses), and whoever asks for the task's result next is asked instead.
#[test]
fn a_tasks_question_outlives_the_session_it_was_put_to() {
    let mut sim = booted_stateless();
    init_2025(&mut sim, 20);
    send(&mut sim, 20, 1, "tools/call", json!({"name":"fs__slow","arguments":{},"task":{}}));
    let task = answer(&sim, 20, 1)["result"]["task"]["taskId"].as_str().unwrap().to_string();
    let ask = json!({"resultType":"input_required","requestState":"st-1",
        "inputRequests":{"name":{"method":"elicitation/create","params":{"message":"name?"}}}});
    reply_last(&mut sim, ask);
    let asked = |sim: &Sim, session: u64| {
        sim.frames_to(SessionId(session))
            .into_iter()
            .filter(|f| f["method"] == "elicitation/create")
            .collect::<Vec<_>>()
    };
    assert_eq!(asked(&sim, 20).len(), 1, "the task's client is asked\n{}", sim.log);
    let sent_to_fs = sim.actions.len();
    sim.input(Input::ClientClosed { session: SessionId(20) });
    let told = backend_frames_since(&sim, sent_to_fs);
    assert!(told.is_empty(), "fs is told nothing when the session goes: {told:?}");
    init_2025(&mut sim, 21);
    send(&mut sim, 21, 1, "tasks/result", json!({ "taskId": task }));
    let question = asked(&sim, 21);
    assert_eq!(question.len(), 1, "whoever waits for the result is asked\n{}", sim.log);
    assert_eq!(question[0]["params"]["message"], "name?");
    let reply_frame =
        json!({"jsonrpc":"2.0","id": question[0]["id"].clone(),"result":{"action":"accept","content":{"name":"Ada"}}});
    sim.session(SessionId(21), reply_frame);
    let (retry, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(params["inputResponses"]["name"]["content"]["name"], "Ada", "{params}");
    reply(&mut sim, "fs", retry, text_result("hello Ada"));
    assert_eq!(answer(&sim, 21, 1)["result"]["content"][0]["text"], "hello Ada");
}

/// A 2025-11-25 client (session 20) calls `fs__slow` as a task and stateless
/// `fs` answers `input_required` for a name: the question the client is asked.
fn asked_during_a_task(sim: &mut Sim) -> Value {
    init_2025(sim, 20);
    send(sim, 20, 1, "tools/call", json!({"name":"fs__slow","arguments":{},"task":{}}));
    let ask = json!({"resultType":"input_required","requestState":"st-1",
        "inputRequests":{"name":{"method":"elicitation/create","params":{"message":"name?"}}}});
    reply_last(sim, ask);
    sim.frames_to(SessionId(20)).into_iter().find(|f| f["method"] == "elicitation/create").unwrap()
}

/// A stateless backend's question during a task lives in tether, not in the
/// connection: the backend going idle meanwhile neither cancels it at the client
/// nor loses the answer, which brings the backend back with the call's retry.
#[test]
fn a_stateless_backends_question_outlasts_its_connection() {
    let mut sim = booted_stateless();
    let question = asked_during_a_task(&mut sim);
    sim.advance(200_000);
    assert_eq!(sim.status("fs"), tether_core::Status::Dormant, "fs went idle\n{}", sim.log);
    let cancelled =
        sim.frames_to(SessionId(20)).into_iter().filter(|f| f["method"] == "notifications/cancelled").count();
    assert_eq!(cancelled, 0, "the question stands\n{}", sim.log);
    let answer_frame =
        json!({"jsonrpc":"2.0","id": question["id"].clone(),"result":{"action":"accept","content":{"name":"Ada"}}});
    sim.session(SessionId(20), answer_frame);
    sim.answer("fs", "server/discover", json!({"resultType":"complete","supportedVersions":[STATELESS],"capabilities":{"tools":{}},"ttlMs":0,"cacheScope":"private"}));
    let (_, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(params["inputResponses"]["name"]["content"]["name"], "Ada", "{}", sim.log);
}

/// A stateless backend's inputs are answered by its call's retry: a client's
/// answer that comes after the task is gone (expired) is dropped, never sent to
/// the backend as a JSON-RPC response (whose id would be the input's key).
#[test]
fn an_answer_to_a_stateless_backends_question_after_its_task_expired_goes_nowhere() {
    let mut config = config();
    config.tasks.ttl_ms = 10_000;
    let mut sim = booted_stateless_with(config);
    let question = asked_during_a_task(&mut sim);
    sim.advance(11_000);
    assert!(sim.log.contains(r#""status":"cancelled""#), "the task expired\n{}", sim.log);
    let moot = sim.frames_to(SessionId(20)).into_iter().find(|f| f["method"] == "notifications/cancelled");
    assert_eq!(moot.map(|f| f["params"]["requestId"].clone()), Some(question["id"].clone()), "the client is told");
    let before = sim.actions.len();
    for answer in [json!({"error":{"code":-1,"message":"no"}}), json!({"result":{"action":"decline"}})] {
        let mut frame = answer;
        frame["jsonrpc"] = json!("2.0");
        frame["id"] = question["id"].clone();
        sim.session(SessionId(20), frame);
    }
    let told = backend_frames_since(&sim, before);
    assert!(told.is_empty(), "fs is told nothing of a question its call's retry would have carried: {told:?}");
}

/// `fs` as a 2025-11-25 backend whose `tools/call` takes tasks, with `slow`.
fn booted_2025_task_runner() -> Sim {
    let mut sim = Sim::new(config());
    sim.input(Input::WallClock { unix_ms: WALL });
    let caps = json!({"tools":{},"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}});
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities": caps}));
    let tools =
        json!({"tools":[{"name":"slow","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}}]});
    sim.answer("fs", "tools/list", tools);
    sim
}

#[test]
fn a_2025_backends_tasks_pass_through_to_a_2025_client_status_notifications_included() {
    let mut sim = booted_2025_task_runner();
    init_2025(&mut sim, 20);
    send(&mut sim, 20, 1, "tools/call", json!({"name":"fs__slow","arguments":{},"task":{"ttl":5000}}));
    let (call, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(params["task"], json!({"ttl":5000}), "fs runs the task: it is asked for one");
    let task = json!({"taskId":"b1","status":"working","createdAt":"2026-11-27T12:00:00Z","lastUpdatedAt":"2026-11-27T12:00:00Z","ttl":5000});
    reply(&mut sim, "fs", call, json!({ "task": task }));
    let ours = answer(&sim, 20, 1)["result"]["task"]["taskId"].as_str().unwrap().to_string();
    assert_eq!(ours.len(), 32, "an id of tether's own: {ours}");
    sim.note("fs's status notification reaches the client that asked, with tether's id");
    let mut status = task.clone();
    status["status"] = json!("completed");
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tasks/status","params": status}));
    let told = sim.frames_to(SessionId(20)).into_iter().find(|f| f["method"] == "notifications/tasks/status").unwrap();
    assert_eq!((told["params"]["taskId"].clone(), told["params"]["status"].clone()), (json!(ours), json!("completed")));
    sim.note("tasks/list shows the session its own tasks fs runs, as last seen; another session none");
    send(&mut sim, 20, 3, "tasks/list", json!({}));
    let listed = answer(&sim, 20, 3)["result"]["tasks"].clone();
    assert_eq!((listed[0]["taskId"].clone(), listed[0]["status"].clone()), (json!(ours), json!("completed")));
    init_2025(&mut sim, 21);
    send(&mut sim, 21, 1, "tasks/list", json!({}));
    assert_eq!(answer(&sim, 21, 1)["result"]["tasks"], json!([]));
    send(&mut sim, 20, 2, "tasks/result", json!({ "taskId": ours }));
    let (result_call, params) = sim.requests_to("fs", "tasks/result").pop().unwrap();
    assert_eq!(params["taskId"], "b1");
    let payload = json!({"content":[{"type":"text","text":"ok"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"b1"}}});
    reply(&mut sim, "fs", result_call, payload);
    let result = answer(&sim, 20, 2)["result"].clone();
    assert_eq!(result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], json!(ours));
    assert_eq!(result["content"][0]["text"], "ok");
}

#[test]
fn a_reload_that_keeps_fewer_tasks_cancels_the_oldest_and_keeps_the_rest() {
    let mut sim = booted(config());
    let oldest = start_task(&mut sim, 10, "slow");
    let oldest_call = sim.last_request("fs", "tools/call");
    let newest = start_task(&mut sim, 11, "slow");
    let mut smaller = sim.gw.config().clone();
    smaller.tasks.max_tasks = 1;
    sim.input(Input::ConfigReloaded { config: smaller });
    let cancel = format!(r#""method":"notifications/cancelled","params":{{"requestId":{oldest_call},"#);
    assert!(sim.log.contains(&cancel), "{}", sim.log);
    assert_eq!(task_request(&mut sim, 12, "tasks/get", &oldest)["error"]["code"], -32602);
    assert_eq!(task_request(&mut sim, 13, "tasks/get", &newest)["result"]["status"], "working");
}

/// Whether a backend runs tasks decides what a 2025-11-25 client is told of its
/// tools: when a restart brings that capability, the client hears its list
/// changed once more than after a restart that changes nothing.
#[test]
fn a_backend_that_starts_running_tasks_changes_a_2025_clients_tool_list() {
    let same = json!({"tools":{}});
    let with_tasks = json!({"tools":{},"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}});
    // A client whose token's scopes choose what it sees is told the same.
    for scoped in [false, true] {
        let (unchanged, _) = restarted_with(same.clone(), scoped);
        let (changed, listed) = restarted_with(with_tasks.clone(), scoped);
        assert_eq!(changed, unchanged + 1, "one more list_changed when only the task capability changed ({scoped})");
        assert_eq!(listed, Value::Null, "fs__slow as fs lists it now");
    }
}

/// `fs` restarts and comes back with `capabilities` and the same tools: how many
/// `list_changed` a 2025-11-25 client got (one whose scopes grant `fs`, when
/// `scoped`), and what it is then told of `fs__slow`.
fn restarted_with(capabilities: Value, scoped: bool) -> (usize, Value) {
    let mut config = config();
    if scoped {
        let grant = tether_core::access::ScopeGrant { servers: vec!["fs".into()], tools: vec![] };
        config.scopes.insert("files".into(), grant);
    }
    let mut sim = booted(config);
    if scoped {
        sim.input(Input::ClientConnected { session: SessionId(20), expires: true });
        sim.input(Input::ClientAccess { session: SessionId(20), scopes: vec!["files".into()], principal: None });
    }
    init_2025(&mut sim, 20);
    assert_eq!(listed_task_support(&mut sim, 20, 1)[0], ("fs__slow".to_string(), json!("optional")));
    sim.exit("fs", Some(1));
    sim.advance(5_000);
    sim.answer("fs", "initialize", json!({"protocolVersion":"2025-11-25","capabilities": capabilities}));
    sim.answer("fs", "tools/list", fs_tools());
    sim.advance(5_000);
    let told =
        sim.frames_to(SessionId(20)).iter().filter(|f| f["method"] == "notifications/tools/list_changed").count();
    (told, listed_task_support(&mut sim, 20, 2)[0].1.clone())
}

#[test]
fn a_task_is_unknown_to_a_session_whose_scopes_do_not_show_its_server() {
    let mut config = config();
    config
        .scopes
        .insert("fs".into(), tether_core::access::ScopeGrant { servers: vec!["fs".into()], tools: Vec::new() });
    config.scopes.insert(
        "other".into(),
        tether_core::access::ScopeGrant { servers: vec!["elsewhere".into()], tools: Vec::new() },
    );
    let mut sim = booted(config);
    let scoped = |sim: &mut Sim, session: u64, scope: &str| {
        sim.input(Input::ClientConnected { session: SessionId(session), expires: true });
        sim.input(Input::ClientAccess {
            session: SessionId(session),
            scopes: vec![scope.to_string()],
            principal: None,
        });
    };
    scoped(&mut sim, 1, "fs");
    let task = start_task(&mut sim, 1, "slow");
    scoped(&mut sim, 2, "fs");
    assert_eq!(task_request(&mut sim, 2, "tasks/get", &task)["result"]["taskId"], task.as_str(), "fs may read it");
    scoped(&mut sim, 3, "other");
    let refused = task_request(&mut sim, 3, "tasks/get", &task);
    let message = refused["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("unknown task"), "the same answer as for no task: {refused}");
    scoped(&mut sim, 4, "other");
    let cancel = task_request(&mut sim, 4, "tasks/cancel", &task);
    assert!(cancel.get("error").is_some(), "nor cancelled: {cancel}");
    scoped(&mut sim, 5, "fs");
    assert_eq!(task_request(&mut sim, 5, "tasks/get", &task)["result"]["status"], "working", "still running");
}

/// A stateless request of `method` on a fresh session held by `principal`.
fn post_as(sim: &mut Sim, principal: &str, session: u64, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = meta(with_tasks());
    let s = SessionId(session);
    sim.input(Input::ClientConnected { session: s, expires: true });
    sim.input(Input::ClientAccess { session: s, scopes: Vec::new(), principal: Some(principal.into()) });
    sim.session(s, json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}));
    sim.advance(500);
    answer(sim, session, 1)
}

#[test]
fn a_task_tether_runs_is_unknown_to_another_identity_that_learns_its_id() {
    let mut sim = booted(config());
    let created = post_as(&mut sim, "alice", 1, "tools/call", json!({"name":"fs__slow","arguments":{}}));
    let task = created["result"]["taskId"].as_str().unwrap().to_string();
    for (session, method) in [(2, "tasks/get"), (3, "tasks/update"), (4, "tasks/cancel")] {
        let mut params = json!({ "taskId": task });
        if method == "tasks/update" {
            params["inputResponses"] = json!({});
        }
        let refused = post_as(&mut sim, "bob", session, method, params);
        let message = refused["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains("unknown task"), "{method}: the same answer as for no task: {refused}");
    }
    let got = post_as(&mut sim, "alice", 5, "tasks/get", json!({ "taskId": task }));
    assert_eq!(got["result"]["status"], "working", "alice reads it from a new session; bob's cancel did nothing");
}

#[test]
fn a_backends_task_is_bound_to_the_identity_that_asked_and_its_own_ids_name_nothing() {
    let mut sim = booted_2025_task_runner();
    let as_2025 = |sim: &mut Sim, session: u64, principal: &str| {
        let s = SessionId(session);
        sim.input(Input::ClientConnected { session: s, expires: true });
        sim.input(Input::ClientAccess { session: s, scopes: Vec::new(), principal: Some(principal.into()) });
        let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}});
        sim.session(s, init);
        sim.session(s, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    };
    as_2025(&mut sim, 20, "alice");
    send(&mut sim, 20, 1, "tools/call", json!({"name":"fs__slow","arguments":{},"task":{}}));
    let (call, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    let task = json!({"taskId":"1","status":"working","createdAt":"2026-11-27T12:00:00Z","lastUpdatedAt":"2026-11-27T12:00:00Z","ttl":5000});
    reply(&mut sim, "fs", call, json!({ "task": task }));
    let ours = answer(&sim, 20, 1)["result"]["task"]["taskId"].as_str().unwrap().to_string();

    as_2025(&mut sim, 21, "bob");
    for (id, guess) in [(1, ours.as_str()), (2, "fs__1"), (3, "1")] {
        send(&mut sim, 21, id, "tasks/result", json!({ "taskId": guess }));
        let refused = answer(&sim, 21, id);
        assert_eq!(refused["error"]["code"], -32602, "bob may not name alice's task as {guess}: {refused}");
    }
    assert!(sim.requests_to("fs", "tasks/result").is_empty(), "nothing of bob's reached fs");

    as_2025(&mut sim, 22, "alice");
    send(&mut sim, 22, 1, "tasks/result", json!({ "taskId": ours }));
    let (_, params) = sim.requests_to("fs", "tasks/result").pop().expect("alice's new session reaches her task");
    assert_eq!(params["taskId"], "1");

    sim.note("fs restarts its numbering: its new task 1 is bob's, alice's old id names nothing");
    send(&mut sim, 21, 9, "tools/call", json!({"name":"fs__slow","arguments":{},"task":{}}));
    let call = sim.last_request("fs", "tools/call");
    reply(&mut sim, "fs", call, json!({ "task": task }));
    let bobs = answer(&sim, 21, 9)["result"]["task"]["taskId"].as_str().unwrap().to_string();
    assert_ne!(bobs, ours);
    send(&mut sim, 22, 2, "tasks/get", json!({ "taskId": ours }));
    assert_eq!(answer(&sim, 22, 2)["error"]["code"], -32602, "alice's old id no longer reaches fs's task 1");
}

/// At most 16 `tasks/result` requests wait on one task: the 16th waits, the 17th
/// is refused at once (-32003), and the 16 that waited all get the result.
#[test]
fn sixteen_result_requests_wait_on_a_task_and_the_seventeenth_is_refused() {
    let mut sim = booted(config());
    init_2025(&mut sim, 20);
    send(&mut sim, 20, 1, "tools/call", json!({"name":"fs__slow","arguments":{},"task":{"ttl":60000}}));
    let task = answer(&sim, 20, 1)["result"]["task"]["taskId"].as_str().unwrap().to_string();
    let (backend_call, _) = sim.requests_to("fs", "tools/call").pop().unwrap();
    for id in 100..116 {
        send(&mut sim, 20, id, "tasks/result", json!({ "taskId": task }));
        assert!(answers(&sim, 20, id).is_empty(), "waiter {} waits", id - 99);
    }
    send(&mut sim, 20, 116, "tasks/result", json!({ "taskId": task }));
    assert_eq!(answer(&sim, 20, 116)["error"]["code"], -32003, "the 17th is refused");
    reply(&mut sim, "fs", backend_call, text_result("done"));
    for id in 100..116 {
        assert_eq!(answer(&sim, 20, id)["result"]["content"][0]["text"], "done");
    }
}
