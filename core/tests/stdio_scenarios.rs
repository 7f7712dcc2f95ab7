//! Scenarios of a local (stdio) backend failing and recovering: crashes and
//! restarts, crash loops, idling, request timeouts, disconnects, safe retries,
//! config reloads and health checks. Each is pinned as a readable transcript
//! (time in ms, `>` an input, indented lines the actions it caused, `#` narration)
//! and checked with assertions on the documented behaviour (docs/reference.md).

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::protocol::code;
use tether_core::{Action, AdminCommand, Config, Event, Input, ServerConfig, SessionId, Status};

// ----- helpers local to these scenarios -----

/// Spawns of `server` so far, as (time, generation).
fn spawns(sim: &Sim, server: &str) -> Vec<(u64, u64)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::Spawn { server: s, generation, .. } if &**s == server => Some((*at, generation.0)),
            _ => None,
        })
        .collect()
}

/// Connections of `server` closed by the gateway so far, as (time, generation).
fn closes(sim: &Sim, server: &str) -> Vec<(u64, u64)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::CloseBackend { server: s, generation } if &**s == server => Some((*at, generation.0)),
            _ => None,
        })
        .collect()
}

/// Frames sent to `server` on connection `generation`, parsed, with their time.
fn frames_to(sim: &Sim, server: &str, generation: u64) -> Vec<(u64, Value)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::SendToBackend { server: s, generation: g, frame, .. } if &**s == server && g.0 == generation => {
                Some((*at, serde_json::from_str(frame).unwrap()))
            }
            _ => None,
        })
        .collect()
}

/// Methods of the requests and notifications sent to `server` on `generation`.
fn methods_to(sim: &Sim, server: &str, generation: u64) -> Vec<String> {
    frames_to(sim, server, generation)
        .into_iter()
        .filter_map(|(_, f)| f["method"].as_str().map(str::to_string))
        .collect()
}

/// Notifications with `method` the client received, their params.
fn client_notifications(sim: &Sim, method: &str) -> Vec<Value> {
    sim.client_frames()
        .into_iter()
        .filter(|f| f["method"] == method && f.get("id").is_none())
        .map(|f| f["params"].clone())
        .collect()
}

/// Answers the latest `initialize` sent to `server` with these capabilities.
fn answer_initialize(sim: &mut Sim, server: &str, capabilities: Value) {
    sim.answer(
        server,
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":capabilities,"serverInfo":{"name":server,"version":"1"}}),
    );
}

/// Answers the latest `tools/list` of `server` with full tool objects (annotations included).
fn answer_tool_objects(sim: &mut Sim, server: &str, tools: Value) {
    sim.answer(server, "tools/list", json!({ "tools": tools }));
}

/// A running gateway with `fs` online (tools `read_file`, `write_file`) and a ready client.
fn fs_online(config: Config) -> Sim {
    let mut sim = Sim::new(config);
    sim.boot("fs", &["read_file", "write_file"]);
    sim.client_init();
    sim
}

// ----- 1. crash and restart -----

#[test]
fn crash_of_a_young_process_restarts_after_one_second_and_rediscovers() {
    let mut sim = fs_online(one_stdio());
    assert_eq!(listed_tools(&mut sim, 1), ["fs__read_file", "fs__write_file"]);

    sim.advance(10_000);
    sim.note("fs crashes after running 10 s (< 60 s): restart in 1 s");
    sim.exit("fs", Some(1));
    assert_eq!(sim.status("fs"), Status::Error);
    assert_eq!(sim.gw.status("fs").unwrap().next_retry_ms, Some(1000));
    assert_eq!(sim.gw.status("fs").unwrap().crashes_in_window, 1);
    sim.note("while it is down its tools are hidden from the client");
    assert_eq!(listed_tools(&mut sim, 2), Vec::<String>::new());

    sim.advance(999);
    assert_eq!(spawns(&sim, "fs").len(), 1, "no restart before 1 s\n{}", sim.log);
    sim.advance(1);
    assert_eq!(spawns(&sim, "fs"), [(0, 1), (11_000, 2)]);
    assert_eq!(sim.status("fs"), Status::Connecting);

    sim.note("the fresh process completes the handshake and is discovered again");
    sim.boot("fs", &["read_file", "write_file"]);
    assert_eq!(methods_to(&sim, "fs", 2), ["initialize", "notifications/initialized", "tools/list"]);
    assert_eq!(sim.status("fs"), Status::Online);
    sim.note("the client hears its tools are back once 2 s have passed since it heard they went");
    assert_eq!(client_notifications(&sim, "notifications/tools/list_changed").len(), 1);
    sim.advance(1_000);
    assert_eq!(listed_tools(&mut sim, 3), ["fs__read_file", "fs__write_file"]);
    assert_eq!(
        status_path(&sim, "fs"),
        [
            Status::Connecting,
            Status::DiscoveringTools,
            Status::Online,
            Status::Error,
            Status::Connecting,
            Status::DiscoveringTools,
            Status::Online
        ]
    );
    // The client was told its tool list changed when fs went away and when it came back.
    assert_eq!(client_notifications(&sim, "notifications/tools/list_changed").len(), 2);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn crash_of_a_long_running_process_restarts_at_once() {
    let mut sim = fs_online(
        Config::default().server("fs", ServerConfig { policy: no_idle(), ..ServerConfig::stdio("fs-server", &[]) }),
    );
    sim.note("fs serves for 70 s (health pings answered), then dies of a signal");
    advance_answering_pings(&mut sim, "fs", 70_000);
    sim.exit("fs", None);
    assert_eq!(spawns(&sim, "fs"), [(0, 1), (70_000, 2)], "restarted in the same instant\n{}", sim.log);
    let message = sim.gw.status("fs").unwrap().last_error.unwrap();
    assert!(message.contains("killed by a signal"), "{message}");
    sim.boot("fs", &["read_file", "write_file"]);
    assert_eq!(sim.status("fs"), Status::Online);
    assert_eq!(listed_tools(&mut sim, 1), ["fs__read_file", "fs__write_file"]);
    insta::assert_snapshot!(sim.log);
}

/// Policy overrides that switch idling off (so a quiet backend stays up).
fn no_idle() -> tether_core::config::PolicyOverrides {
    tether_core::config::PolicyOverrides { idle_timeout_ms: Some(0), ..Default::default() }
}

/// Advances `ms`, answering every health ping `server` receives on the way.
fn advance_answering_pings(sim: &mut Sim, server: &str, ms: u64) {
    let target = sim.now + ms;
    loop {
        let answered = request_times(sim, server, "ping").len();
        let next = sim.gw.poll_timeout().map(|t| t.as_millis());
        match next {
            Some(at) if at <= target => {
                sim.advance(at - sim.now);
            }
            _ => {
                sim.advance(target - sim.now);
                return;
            }
        }
        let pings = request_times(sim, server, "ping");
        if pings.len() > answered {
            let id = pings.last().unwrap().1;
            reply(sim, server, id, json!({}));
        }
    }
}

// ----- 2. crash loop -----

#[test]
fn crash_loop_gives_up_until_an_admin_restart() {
    let mut sim = fs_online(one_stdio());

    sim.advance(5_000);
    sim.note("crash 1 of 3 within 5 min: restart after 1 s");
    sim.stderr("fs", "listening on stdio");
    sim.exit("fs", Some(1));
    sim.advance(1_000);
    assert_eq!(spawns(&sim, "fs").len(), 2);

    sim.advance(500);
    sim.note("crash 2 happens before the handshake completes: it counts, restart after 5 s");
    sim.stderr("fs", "loading index");
    sim.stderr("fs", "panic: index file /tmp/idx is corrupt");
    sim.exit("fs", Some(101));
    assert_eq!(sim.status("fs"), Status::Error);
    let st = sim.gw.status("fs").unwrap();
    assert_eq!((st.crashes_in_window, st.next_retry_ms), (2, Some(5_000)));
    assert!(st.last_error.as_deref().unwrap().contains("panic: index file /tmp/idx is corrupt"), "{st:?}");
    sim.advance(4_999);
    assert_eq!(spawns(&sim, "fs").len(), 2);
    sim.advance(1);
    assert_eq!(spawns(&sim, "fs").len(), 3);
    sim.boot("fs", &["read_file", "write_file"]);
    assert_eq!(sim.status("fs"), Status::Online);
    sim.advance(20_000);

    sim.note("crash 3 within 5 min (the stderr tail explains it): permanently failed");
    sim.stderr("fs", "error: cannot open /tmp/idx: permission denied");
    sim.stderr("fs", "fatal: giving up");
    sim.exit("fs", Some(2));
    assert_eq!(sim.status("fs"), Status::PermanentlyFailed);
    let st = sim.gw.status("fs").unwrap();
    let message = st.last_error.clone().unwrap();
    assert!(message.contains("process exited with code 2"), "{message}");
    assert!(message.ends_with("stderr: error: cannot open /tmp/idx: permission denied"), "the cause, whole: {message}");
    assert!(!message.contains("panic"), "the tail is of the last process only: {message}");
    assert_eq!(st.next_retry_ms, None);
    let failed: Vec<_> =
        events(&sim).into_iter().filter(|(_, e)| matches!(e, Event::ServerPermanentlyFailed { .. })).collect();
    assert_eq!(
        failed,
        [(31_500, Event::ServerPermanentlyFailed { server: "fs".into(), crashes: 3, window_ms: 300_000 })]
    );
    let changed = events(&sim).into_iter().find_map(|(_, e)| match e {
        Event::ServerStatusChanged { to: Status::PermanentlyFailed, message, .. } => message,
        _ => None,
    });
    assert_eq!(changed.as_deref(), Some(message.as_str()), "the status change carries the stderr tail");

    sim.note("hours pass: nothing is restarted");
    assert_eq!(sim.gw.poll_timeout(), None);
    sim.advance(6 * 3600 * 1000);
    assert_eq!(spawns(&sim, "fs").len(), 3);
    assert_eq!(sim.status("fs"), Status::PermanentlyFailed);

    sim.note("a client calls one of its tools: refused with what to do");
    sim.call(10, "fs__read_file");
    let r = sim.response(10);
    let text = r["error"]["message"].as_str().unwrap();
    assert!(text.contains("backend 'fs' crashed 3 times within 300 s"), "{text}");
    assert!(text.contains("fix it, then restart it"), "{text}");
    assert!(text.contains("`tether restart fs`"), "{text}");
    assert!(text.contains("error: cannot open /tmp/idx: permission denied"), "{text}");
    assert_eq!(r["error"]["data"]["status"], "permanently_failed");
    assert_eq!(spawns(&sim, "fs").len(), 3, "a call does not restart a permanently failed backend");

    sim.note("the operator restarts it: history cleared, spawned and discovered again");
    sim.admin(AdminCommand::Restart { server: "fs".into() });
    assert_eq!(spawns(&sim, "fs").len(), 4);
    assert_eq!(sim.gw.status("fs").unwrap().crashes_in_window, 0);
    sim.boot("fs", &["read_file", "write_file"]);
    assert_eq!(sim.status("fs"), Status::Online);
    sim.call(11, "fs__read_file");
    sim.answer("fs", "tools/call", text_result("back"));
    assert_eq!(sim.response(11)["result"]["content"][0]["text"], "back");
    insta::assert_snapshot!(sim.log);
}

// ----- 3. idle -> dormant -> respawn without re-discovery -----

#[test]
fn idle_backend_goes_dormant_and_a_call_respawns_it_without_rediscovery() {
    let mut sim = fs_online(one_stdio());
    sim.note("no traffic: the health ping (about 120 s) is answered but is not traffic");
    advance_answering_pings(&mut sim, "fs", 179_999);
    assert_eq!(sim.status("fs"), Status::Online);
    assert_eq!(request_times(&sim, "fs", "ping").len(), 1);
    sim.advance(1);
    sim.note("180 s without traffic: stopped, dormant, catalog kept");
    assert_eq!(sim.status("fs"), Status::Dormant);
    assert_eq!(closes(&sim, "fs"), [(180_000, 1)]);
    assert!(events(&sim)
        .iter()
        .any(|(at, e)| *at == 180_000 && *e == Event::ServerDisconnected { server: "fs".into(), intentional: true }));
    assert_eq!(sim.gw.poll_timeout(), None, "a dormant backend has no timers");
    assert_eq!(listed_tools(&mut sim, 1), ["fs__read_file", "fs__write_file"]);
    assert!(client_notifications(&sim, "notifications/tools/list_changed").is_empty(), "nothing visible changed");

    sim.advance(3600 * 1000);
    assert_eq!(spawns(&sim, "fs").len(), 1, "a dormant backend stays down until needed");

    sim.note("a call wakes it: respawned, handshake only, then the queued call goes out");
    sim.call(2, "fs__read_file");
    assert_eq!(spawns(&sim, "fs"), [(0, 1), (3_780_000, 2)]);
    answer_initialize(&mut sim, "fs", json!({"tools":{"listChanged":true}}));
    assert_eq!(methods_to(&sim, "fs", 2), ["initialize", "notifications/initialized", "tools/call"]);
    assert_eq!(sim.status("fs"), Status::Online);
    sim.answer("fs", "tools/call", text_result("awake"));
    assert_eq!(sim.response(2)["result"]["content"][0]["text"], "awake");
    assert_eq!(
        status_path(&sim, "fs"),
        [
            Status::Connecting,
            Status::DiscoveringTools,
            Status::Online,
            Status::Dormant,
            Status::Connecting,
            Status::Online
        ]
    );
    assert_eq!(listed_tools(&mut sim, 3), ["fs__read_file", "fs__write_file"]);
    assert!(
        client_notifications(&sim, "notifications/tools/list_changed").is_empty(),
        "the tools stayed listed through idling and waking"
    );
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_hung_backend_that_ignores_health_pings_still_goes_dormant() {
    let mut sim = fs_online(one_stdio());
    sim.note("the health ping near 126 s is never answered; it is still in flight at 180 s");
    let (p1, _) = until_request(&mut sim, "fs", "ping");
    assert!(p1 + 60_000 > 180_000, "the ping would still be in flight at 180 s: {p1}");
    sim.advance(180_000 - sim.now);
    sim.note("180 s without traffic: dormant all the same (a ping is not traffic)");
    assert_eq!(sim.status("fs"), Status::Dormant);
    assert_eq!(closes(&sim, "fs"), [(180_000, 1)]);
    assert!(health_events(&sim).is_empty(), "a closed connection's ping is not a failed check");
    insta::assert_snapshot!(sim.log);
}

// ----- 4. request timeout, progress and the hard maximum -----

#[test]
fn unanswered_call_times_out_after_60_s_and_is_cancelled_at_the_backend() {
    let mut sim = fs_online(one_stdio());
    sim.advance(1_000);
    sim.note("a call the backend never answers");
    sim.call(1, "fs__write_file");
    let (sent_at, id) = *request_times(&sim, "fs", "tools/call").last().unwrap();
    assert_eq!(sent_at, 1_000);
    sim.advance(59_999);
    assert!(sim.responses_for(1).is_empty(), "still waiting at 59.999 s");
    sim.advance(1);
    sim.note("60 s without an answer: cancelled at the backend, error to the client");
    let r = sim.response(1);
    assert_eq!(r["error"]["code"], code::REQUEST_TIMEOUT);
    let text = r["error"]["message"].as_str().unwrap();
    assert!(text.contains("did not answer tools/call in time"), "{text}");
    let cancels: Vec<_> =
        frames_to(&sim, "fs", 1).into_iter().filter(|(_, f)| f["method"] == "notifications/cancelled").collect();
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0].0, 61_000);
    assert_eq!(cancels[0].1["params"]["requestId"], id);

    sim.note("the backend answers late: dropped, the client already has its one answer");
    reply(&mut sim, "fs", id, text_result("too late"));
    assert_eq!(sim.responses_for(1).len(), 1);
    assert_eq!(sim.status("fs"), Status::Online, "a slow call does not take the backend down");
    insta::assert_snapshot!(sim.log);
}

/// A client call with a progress token.
fn call_with_progress(sim: &mut Sim, id: u64, tool: &str, token: Value) {
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":tool,"arguments":{},"_meta":{"progressToken":token}}}));
}

fn progress(sim: &mut Sim, server: &str, token: u64, done: u64) {
    sim.backend(
        server,
        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":token,"progress":done,"total":20}}),
    );
}

#[test]
fn progress_resets_the_timeout_and_its_token_is_mapped_both_ways() {
    let mut sim = fs_online(one_stdio());
    sim.advance(1_000);
    sim.note("the client asks for progress with its own token");
    call_with_progress(&mut sim, 1, "fs__write_file", json!("tok-1"));
    let (_, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    let id = sim.last_request("fs", "tools/call");
    assert_eq!(params["_meta"]["progressToken"], id, "the backend sees the gateway's token");

    sim.note("progress at 50 s and 100 s keeps the call alive past 60 s");
    advance_answering_pings(&mut sim, "fs", 50_000);
    progress(&mut sim, "fs", id, 1);
    advance_answering_pings(&mut sim, "fs", 50_000);
    progress(&mut sim, "fs", id, 2);
    let forwarded = client_notifications(&sim, "notifications/progress");
    assert_eq!(forwarded.len(), 2);
    assert_eq!(forwarded[0], json!({"progressToken":"tok-1","progress":1,"total":20}));
    assert_eq!(forwarded[1]["progressToken"], "tok-1");

    sim.note("then silence: it times out 60 s after the last progress");
    advance_answering_pings(&mut sim, "fs", 59_999);
    assert!(sim.responses_for(1).is_empty(), "alive 159.999 s after it started\n{}", sim.log);
    advance_answering_pings(&mut sim, "fs", 1);
    let r = sim.response(1);
    assert_eq!(r["error"]["code"], code::REQUEST_TIMEOUT);
    assert_eq!(cancel_times(&sim, "fs", id), [161_000]);

    sim.note("progress for a finished call is not forwarded");
    progress(&mut sim, "fs", id, 3);
    assert_eq!(client_notifications(&sim, "notifications/progress").len(), 2);
    insta::assert_snapshot!(sim.log);
}

/// When `notifications/cancelled` for backend request `id` was sent to `server`.
fn cancel_times(sim: &Sim, server: &str, id: u64) -> Vec<u64> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::SendToBackend { server: s, frame, .. } if &**s == server => {
                let v: Value = serde_json::from_str(frame).ok()?;
                (v["method"] == "notifications/cancelled" && v["params"]["requestId"] == id).then_some(*at)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn progress_cannot_keep_a_call_alive_beyond_the_10_minute_maximum() {
    let mut sim = fs_online(one_stdio());
    sim.advance(1_000);
    call_with_progress(&mut sim, 1, "fs__write_file", json!(7));
    let id = sim.last_request("fs", "tools/call");
    sim.note("the backend reports progress every 50 s, forever");
    for step in 1..=11 {
        advance_answering_pings(&mut sim, "fs", 50_000);
        progress(&mut sim, "fs", id, step);
    }
    assert_eq!(sim.now, 551_000);
    assert!(sim.responses_for(1).is_empty());
    assert_eq!(client_notifications(&sim, "notifications/progress").len(), 11);
    assert!(client_notifications(&sim, "notifications/progress").iter().all(|p| p["progressToken"] == 7));
    sim.note("10 min after the request arrived it is cancelled, whatever the progress");
    advance_answering_pings(&mut sim, "fs", 49_999);
    assert!(sim.responses_for(1).is_empty());
    advance_answering_pings(&mut sim, "fs", 1);
    let r = sim.response(1);
    assert_eq!(r["error"]["code"], code::REQUEST_TIMEOUT);
    assert_eq!(cancel_times(&sim, "fs", id), [601_000]);
    assert_eq!(sim.status("fs"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

// ----- 5. backend disconnect with a call and a sampling request pending -----

#[test]
fn disconnect_fails_the_call_and_cancels_the_sampling_request_it_caused() {
    const SECOND: SessionId = SessionId(2);
    let mut sim = fs_online(one_stdio());
    sim.note("a second client session, also able to sample");
    sim.session(SECOND, json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"second","version":"1"}}}));
    sim.session(SECOND, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    sim.advance(2_000);

    sim.note("session 2 calls a tool; while working on it the backend asks for a sampling");
    sim.session(
        SECOND,
        json!({"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"fs__write_file","arguments":{}}}),
    );
    sim.backend(
        "fs",
        json!({"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":10}}),
    );
    let to_second = sim.frames_to(SECOND);
    let sampling = to_second.iter().find(|f| f["method"] == "sampling/createMessage").expect("routed to session 2");
    let sampling_id = sampling["id"].clone();
    assert!(
        sim.frames_to(CLIENT).iter().all(|f| f["method"] != "sampling/createMessage"),
        "not sent to the session that did not make the call"
    );

    sim.advance(500);
    sim.note("the process crashes");
    sim.stderr("fs", "out of memory");
    sim.exit("fs", Some(137));
    let to_second = sim.frames_to(SECOND);
    let answer: Vec<_> = to_second.iter().filter(|f| f["id"] == "c1").collect();
    assert_eq!(answer.len(), 1);
    let text = answer[0]["error"]["message"].as_str().unwrap();
    assert!(text.contains("backend 'fs' disconnected"), "{text}");
    assert!(text.contains("out of memory"), "{text}");
    assert_eq!(answer[0]["error"]["data"]["status"], "error");
    assert_eq!(answer[0]["error"]["data"]["next_retry_ms"], 1000);
    let cancelled: Vec<_> = to_second.iter().filter(|f| f["method"] == "notifications/cancelled").collect();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["params"]["requestId"], sampling_id);
    assert!(cancelled[0]["params"]["reason"].as_str().unwrap().contains("disconnected"));
    assert!(sim.frames_to(CLIENT).iter().all(|f| f["method"] != "notifications/cancelled"));

    sim.note("restarted after 1 s; session 2 answers the sampling request late: dropped");
    sim.advance(1_000);
    sim.boot("fs", &["read_file", "write_file"]);
    let before = frames_to(&sim, "fs", 2).len();
    sim.session(SECOND, json!({"jsonrpc":"2.0","id":sampling_id,"result":{"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"}}));
    assert_eq!(frames_to(&sim, "fs", 2).len(), before, "nothing forwarded to the new process");
    assert!(frames_to(&sim, "fs", 1).iter().all(|(_, f)| f["id"] != "s-1"), "nor to the old one");
    assert_eq!(sim.status("fs"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

// ----- 6. safe retry after a crash; calls arriving during a restart -----

/// `fs` online with a read-only tool `stat` and a tool without hints `delete`.
fn fs_with_hinted_tools() -> Sim {
    let mut sim = Sim::new(one_stdio());
    answer_initialize(&mut sim, "fs", json!({"tools":{}}));
    answer_hinted_tools(&mut sim);
    sim.client_init();
    sim
}

fn answer_hinted_tools(sim: &mut Sim) {
    answer_tool_objects(
        sim,
        "fs",
        json!([
            {"name":"stat","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
            {"name":"delete","inputSchema":{"type":"object"}}
        ]),
    );
}

#[test]
fn after_a_crash_only_the_read_only_call_is_resent_and_answered_once() {
    let mut sim = fs_with_hinted_tools();
    sim.advance(3_000);
    sim.note("two calls in flight: a read-only one and one without hints");
    sim.call(1, "fs__stat");
    sim.call(2, "fs__delete");
    let old_stat = sim.requests_to("fs", "tools/call")[0].0;

    sim.note("first crash: the read-only call is resent on a fresh process at once; the other fails");
    sim.exit("fs", Some(1));
    let r2 = sim.response(2);
    assert!(r2["error"]["message"].as_str().unwrap().contains("backend 'fs' disconnected"), "{r2}");
    assert!(sim.responses_for(1).is_empty(), "the read-only call waits for the fresh process");
    assert_eq!(spawns(&sim, "fs"), [(0, 1), (3_000, 2)], "respawned now, not after the 1 s wait");
    answer_initialize(&mut sim, "fs", json!({"tools":{}}));
    let resent: Vec<_> = frames_to(&sim, "fs", 2).into_iter().filter(|(_, f)| f["method"] == "tools/call").collect();
    assert_eq!(resent.len(), 1, "only the read-only call is resent\n{}", sim.log);
    assert_eq!(resent[0].1["params"]["name"], "stat");
    let new_id = resent[0].1["id"].as_u64().unwrap();

    sim.note("the old process's late answer is ignored; the fresh one answers");
    sim.input(Input::BackendFrame {
        server: "fs".into(),
        generation: tether_core::Generation(1),
        frame: json!({"jsonrpc":"2.0","id":old_stat,"result":text_result("stale")}).to_string(),
    });
    reply(&mut sim, "fs", new_id, text_result("size 42"));
    assert_eq!(sim.response(1)["result"]["content"][0]["text"], "size 42");
    answer_hinted_tools(&mut sim);
    assert_eq!(sim.status("fs"), Status::Online);
    assert_eq!(sim.response(1)["result"]["content"][0]["text"], "size 42", "exactly one answer");
    insta::assert_snapshot!(sim.log);
}

/// Found by the interop test (tests/interop): server-everything's long-running tool,
/// resent after a crash, counts its progress from 1 again. MCP says progress must
/// increase, so the repeats are not forwarded (they still keep the call alive).
#[test]
fn progress_of_a_resent_call_never_goes_backwards_for_the_client() {
    let mut sim = fs_with_hinted_tools();
    sim.advance(3_000);
    call_with_progress(&mut sim, 1, "fs__stat", json!("tok"));
    let first = sim.last_request("fs", "tools/call");
    progress(&mut sim, "fs", first, 1);
    progress(&mut sim, "fs", first, 2);
    sim.exit("fs", Some(1));
    answer_initialize(&mut sim, "fs", json!({"tools":{}}));
    let (_, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    let second = sim.last_request("fs", "tools/call");
    assert_ne!(first, second, "resent with a fresh id");
    assert_eq!(params["_meta"]["progressToken"], second, "the resent call asks for progress too");
    for done in [1, 2, 3] {
        progress(&mut sim, "fs", second, done);
    }
    let forwarded: Vec<_> =
        client_notifications(&sim, "notifications/progress").iter().map(|p| p["progress"].clone()).collect();
    assert_eq!(forwarded, [json!(1), json!(2), json!(3)], "{}", sim.log);
    reply(&mut sim, "fs", second, text_result("done"));
    assert_eq!(sim.response(1)["result"]["content"][0]["text"], "done");
}

#[test]
fn calls_arriving_while_the_backend_restarts_wait_for_it_and_are_answered() {
    let mut sim = fs_with_hinted_tools();
    sim.advance(3_000);
    sim.note("fs crashes with nothing in flight: restart scheduled in 1 s");
    sim.exit("fs", Some(1));
    assert_eq!(sim.gw.status("fs").unwrap().next_retry_ms, Some(1000));

    sim.advance(200);
    sim.note("the first call after the crash (no hints) arrives: it waits, and the restart starts now");
    sim.call(1, "fs__delete");
    assert_eq!(spawns(&sim, "fs"), [(0, 1), (3_200, 2)]);
    assert!(sim.responses_for(1).is_empty(), "the first call after a crash does not fail");

    sim.advance(100);
    sim.note("another call arrives while the fresh process is starting: it waits too");
    sim.call(2, "fs__stat");
    assert_eq!(spawns(&sim, "fs").len(), 2, "no second spawn");
    assert!(sim.responses_for(2).is_empty());
    assert_eq!(sim.gw.poll_timeout().map(|t| t.as_millis()), Some(33_200), "only the 30 s connect deadline is pending");

    sim.advance(400);
    sim.note("handshake done: both calls go out on the fresh process and are answered");
    answer_initialize(&mut sim, "fs", json!({"tools":{}}));
    let sent: Vec<_> = frames_to(&sim, "fs", 2).into_iter().filter(|(_, f)| f["method"] == "tools/call").collect();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        (sent[0].1["params"]["name"].clone(), sent[1].1["params"]["name"].clone()),
        (json!("delete"), json!("stat"))
    );
    for (_, f) in &sent {
        let id = f["id"].as_u64().unwrap();
        reply(&mut sim, "fs", id, text_result(f["params"]["name"].as_str().unwrap()));
    }
    answer_hinted_tools(&mut sim);
    assert_eq!(sim.response(1)["result"]["content"][0]["text"], "delete");
    assert_eq!(sim.response(2)["result"]["content"][0]["text"], "stat");
    assert_eq!(sim.status("fs"), Status::Online);
    assert_eq!(spawns(&sim, "fs").len(), 2);
    insta::assert_snapshot!(sim.log);
}

// ----- 7. differential config reload -----

#[test]
fn config_reload_adds_changes_and_removes_backends_and_leaves_the_rest_alone() {
    let before = Config::default()
        .server("fs", ServerConfig::stdio("fs-server", &["--root", "/tmp"]))
        .server("git", ServerConfig::stdio("git-server", &["--repo", "/src/a"]))
        .server("web", ServerConfig::http("https://web.example/mcp"));
    let mut sim = Sim::new(before);
    sim.boot("fs", &["read_file"]);
    sim.boot("git", &["log"]);
    sim.boot("web", &["search"]);
    sim.client_init();
    assert_eq!(listed_tools(&mut sim, 1), ["fs__read_file", "git__log", "web__search"]);
    sim.advance(10_000);

    sim.note("reload: db added, git's args changed, web removed, fs unchanged");
    let after = Config::default()
        .server("db", ServerConfig::stdio("db-server", &[]))
        .server("fs", ServerConfig::stdio("fs-server", &["--root", "/tmp"]))
        .server("git", ServerConfig::stdio("git-server", &["--repo", "/src/b"]));
    sim.input(Input::ConfigReloaded { config: after });

    assert!(sim.gw.status("web").is_none(), "web is gone");
    assert!(events(&sim).contains(&(10_000, Event::ServerDisconnected { server: "web".into(), intentional: true })));
    assert!(events(&sim).contains(&(10_000, Event::ServerDisconnected { server: "git".into(), intentional: true })));
    assert_eq!(closes(&sim, "web"), [(10_000, 1)]);
    assert_eq!(closes(&sim, "git"), [(10_000, 1)]);
    assert_eq!(spawns(&sim, "db"), [(10_000, 1)]);
    assert_eq!(spawns(&sim, "git"), [(0, 1), (10_000, 2)]);
    assert!(
        matches!(&sim.actions.iter().find(|(_, a)| matches!(a, Action::Spawn { server, generation: tether_core::Generation(2), .. } if &**server == "git")).unwrap().1,
        Action::Spawn { args, .. } if args == &["--repo", "/src/b"])
    );
    assert_eq!(spawns(&sim, "fs"), [(0, 1)], "fs untouched");
    assert!(closes(&sim, "fs").is_empty());
    assert_eq!(sim.status("fs"), Status::Online);
    assert_eq!(status_path(&sim, "git")[3..], [Status::Restarting, Status::Connecting]);
    let told: Vec<u64> = sim
        .actions
        .iter()
        .filter(|(at, a)| {
            *at == 10_000 && matches!(a, Action::SendToClient { frame, .. } if frame.contains("tools/list_changed"))
        })
        .map(|(at, _)| *at)
        .collect();
    assert_eq!(told, [10_000], "the client is told once that its tools changed");
    sim.note("the client lists tools while db starts for the first time: answered within 2 s, fs only");
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}));
    assert!(sim.responses_for(2).is_empty());
    sim.advance(2_000);
    let names: Vec<_> =
        sim.response(2)["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, [json!("fs__read_file")]);

    sim.note("git is discovered again on its new process, db for the first time");
    sim.boot("git", &["log", "blame"]);
    sim.boot("db", &["query"]);
    assert_eq!(methods_to(&sim, "git", 2), ["initialize", "notifications/initialized", "tools/list"]);
    assert_eq!(listed_tools(&mut sim, 3), ["db__query", "fs__read_file", "git__log", "git__blame"]);
    assert!(frames_to(&sim, "fs", 1).iter().all(|(at, _)| *at < 10_000), "nothing sent to fs because of the reload");
    sim.call(4, "web__search");
    assert!(sim.response(4)["error"]["message"].as_str().unwrap().contains("web__search"));
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_backend_removed_and_added_back_starts_clean() {
    let config = one_stdio();
    let mut sim = Sim::new(config.clone());
    let discover = |sim: &mut Sim| {
        sim.answer_tools("fs", &["read_file"]);
        sim.answer("fs", "resources/list", json!({"resources":[{"uri":"file:///a","name":"a"}]}));
        sim.answer("fs", "resources/templates/list", json!({"resourceTemplates":[]}));
    };
    answer_initialize(&mut sim, "fs", json!({"tools":{},"resources":{"subscribe":true}}));
    discover(&mut sim);
    sim.client_init();
    sim.note("the client subscribes to a resource of fs");
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"fs+file:///a"}}));
    sim.answer("fs", "resources/subscribe", json!({}));
    assert!(sim.response(1).get("result").is_some());

    sim.advance(1_000);
    sim.note("fs is removed from the config, then added back");
    sim.input(Input::ConfigReloaded { config: Config::default() });
    sim.input(Input::ConfigReloaded { config });
    assert_eq!(spawns(&sim, "fs"), [(0, 1), (1_000, 2)], "the new process gets a generation never used before");
    sim.note("the removed process's exit is reported late: it concerns an old generation, ignored");
    sim.input(Input::BackendExited { server: "fs".into(), generation: tether_core::Generation(1), code: Some(0) });
    assert_eq!(sim.status("fs"), Status::Connecting);
    assert_eq!(sim.gw.status("fs").unwrap().crashes_in_window, 0);

    answer_initialize(&mut sim, "fs", json!({"tools":{},"resources":{"subscribe":true}}));
    discover(&mut sim);
    assert_eq!(sim.status("fs"), Status::Online);
    assert!(
        !methods_to(&sim, "fs", 2).contains(&"resources/subscribe".to_string()),
        "the old subscription died with the old backend\n{}",
        sim.log
    );
    sim.note("subscribing again reaches the new backend");
    sim.client(json!({"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"fs+file:///a"}}));
    assert_eq!(methods_to(&sim, "fs", 2).iter().filter(|m| *m == "resources/subscribe").count(), 1, "{}", sim.log);
    insta::assert_snapshot!(sim.log);
}

// ----- 8. health checks -----

/// Advances until `server` is sent a new request with `method`; returns (time, id).
fn until_request(sim: &mut Sim, server: &str, method: &str) -> (u64, u64) {
    let seen = request_times(sim, server, method).len();
    for _ in 0..100 {
        let at = sim.gw.poll_timeout().expect("a timer is pending").as_millis();
        sim.advance(at - sim.now);
        let sent = request_times(sim, server, method);
        if sent.len() > seen {
            return *sent.last().unwrap();
        }
    }
    panic!("no {method} sent to {server}\n{}", sim.log);
}

fn health_events(sim: &Sim) -> Vec<(u64, Event)> {
    events(sim)
        .into_iter()
        .filter(|(_, e)| matches!(e, Event::ServerHealthDegraded { .. } | Event::ServerHealthRestored { .. }))
        .collect()
}

/// `fs` with idling switched off, so a backend with no traffic stays up to be checked.
fn fs_never_idle() -> Config {
    Config::default().server("fs", ServerConfig { policy: no_idle(), ..ServerConfig::stdio("fs-server", &[]) })
}

#[test]
fn failing_health_checks_degrade_then_restore_without_a_reconnect() {
    let mut sim = fs_online(fs_never_idle());
    let jittered = |from: u64, at: u64| (108_000..=132_000).contains(&(at - from));

    sim.note("no traffic: the first ping comes after about 120 s; it is never answered");
    let (p1, _) = until_request(&mut sim, "fs", "ping");
    assert!(jittered(0, p1), "first ping at {p1}");
    sim.advance(59_999);
    assert!(health_events(&sim).is_empty());
    sim.advance(1);
    sim.note("ping 1 timed out after 60 s: failure 1 of 3, nothing to report yet");
    assert!(!sim.gw.status("fs").unwrap().health_degraded, "one failure is not degradation");

    sim.note("the second ping is answered with an error");
    let (p2, id2) = until_request(&mut sim, "fs", "ping");
    assert!(jittered(p1 + 60_000, p2), "second ping at {p2}");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id2,"error":{"code":-32603,"message":"internal error"}}));

    sim.note("the third ping times out: three failures in a row, degraded (told once)");
    let (p3, _) = until_request(&mut sim, "fs", "ping");
    assert!(jittered(p2, p3), "third ping at {p3}");
    sim.advance(60_000);
    let degraded = Event::ServerHealthDegraded {
        server: "fs".into(),
        consecutive_failures: 3,
        last_error: "health check timed out".into(),
    };
    assert_eq!(health_events(&sim), [(p3 + 60_000, degraded.clone())]);
    assert!(sim.gw.status("fs").unwrap().health_degraded);
    assert_eq!(sim.status("fs"), Status::Online, "degraded is a warning, not a status");

    sim.note("a fourth failure says nothing new");
    let (_, id4) = until_request(&mut sim, "fs", "ping");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id4,"error":{"code":-32000,"message":"busy"}}));
    assert_eq!(health_events(&sim).len(), 1);

    sim.note("the next ping succeeds: restored");
    let (p5, id5) = until_request(&mut sim, "fs", "ping");
    reply(&mut sim, "fs", id5, json!({}));
    assert_eq!(health_events(&sim)[1], (p5, Event::ServerHealthRestored { server: "fs".into() }));
    assert!(!sim.gw.status("fs").unwrap().health_degraded);

    sim.note("after a successful ping the next one still comes about 120 s later");
    let (p6, id6) = until_request(&mut sim, "fs", "ping");
    assert!(jittered(p5, p6), "ping at {p6} after a success at {p5}");
    reply(&mut sim, "fs", id6, json!({}));

    assert_eq!(spawns(&sim, "fs").len(), 1, "never respawned");
    assert!(closes(&sim, "fs").is_empty(), "never closed");
    assert_eq!(methods_to(&sim, "fs", 1).iter().filter(|m| *m == "initialize").count(), 1, "never re-initialized");
    assert!(status_path(&sim, "fs").ends_with(&[Status::Online]));
    assert_eq!(status_path(&sim, "fs").len(), 3, "no status change at all after going online");
    insta::assert_snapshot!(sim.log);
}

#[test]
fn ping_unsupported_switches_health_checks_to_tools_list_and_traffic_skips_them() {
    let mut sim = fs_online(fs_never_idle());
    sim.note("the backend does not know ping: -32601 counts as alive, and checks move to tools/list");
    let (p1, id1) = until_request(&mut sim, "fs", "ping");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id1,"error":{"code":-32601,"message":"Method not found"}}));
    let (t1, id) = until_request(&mut sim, "fs", "tools/list");
    assert!((108_000..=132_000).contains(&(t1 - p1)), "{t1} after {p1}");
    reply(&mut sim, "fs", id, json!({"tools":[]}));
    assert_eq!(sim.gw.status("fs").unwrap().tools, 2, "a health check's answer is not a re-discovery");
    assert_eq!(request_times(&sim, "fs", "ping").len(), 1, "no more pings");
    assert!(health_events(&sim).is_empty());

    sim.note("real traffic succeeds shortly before the next check is due: the check is skipped");
    let due = sim.gw.poll_timeout().unwrap().as_millis();
    sim.advance(due - sim.now - 10_000);
    sim.call(1, "fs__read_file");
    sim.answer("fs", "tools/call", text_result("ok"));
    let traffic_at = sim.now;
    let checks_before = request_times(&sim, "fs", "tools/list").len();
    sim.advance(10_000);
    sim.note("the check fell due meanwhile and was skipped: traffic had just succeeded");
    assert_eq!(request_times(&sim, "fs", "tools/list").len(), checks_before, "skipped\n{}", sim.log);
    let (t2, _) = until_request(&mut sim, "fs", "tools/list");
    assert!(t2 - traffic_at >= 120_000 - 10_000, "checked again only once traffic is an interval old: {t2}");
    assert_eq!(spawns(&sim, "fs").len(), 1);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn successful_traffic_ends_a_degraded_episode() {
    let mut sim = fs_online(fs_never_idle());
    sim.note("three pings time out: degraded");
    for _ in 0..3 {
        until_request(&mut sim, "fs", "ping");
        sim.advance(60_000);
    }
    assert!(sim.gw.status("fs").unwrap().health_degraded);
    sim.note("from now on the backend is busy with real calls that succeed");
    for id in 1..=6 {
        sim.advance(30_000);
        sim.call(id, "fs__read_file");
        sim.answer("fs", "tools/call", text_result("ok"));
    }
    assert_eq!(request_times(&sim, "fs", "ping").len(), 3, "checks are skipped while traffic succeeds");
    assert!(!sim.gw.status("fs").unwrap().health_degraded, "successful traffic proves health\n{}", sim.log);
    let restored: Vec<_> =
        health_events(&sim).into_iter().filter(|(_, e)| matches!(e, Event::ServerHealthRestored { .. })).collect();
    assert_eq!(restored.len(), 1);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn the_recent_log_keeps_stderr_and_events_across_restarts() {
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read"]);
    sim.stderr("fs", "listening on stdio");
    sim.stderr("fs", "fatal: token=abc cannot open /data");
    sim.exit("fs", Some(1));
    sim.advance(1_000);
    sim.boot("fs", &["read"]);
    sim.stderr("fs", "listening on stdio again");

    let log = sim.gw.recent_log("fs", 100).unwrap();
    let texts: Vec<&str> = log.iter().map(|l| l.text.as_str()).collect();
    let at =
        |needle: &str| texts.iter().position(|t| t.contains(needle)).unwrap_or_else(|| panic!("{needle}: {texts:?}"));
    assert!(at("listening on stdio") < at("fatal:"), "oldest first");
    assert!(at("fatal:") < at("online -> error"), "the crash's stderr, then the event");
    assert!(at("online -> error") < at("listening on stdio again"), "kept across the restart");
    assert_eq!(log[at("fatal:")].source, tether_core::LogSource::Stderr);
    assert_eq!(log[at("online -> error")].source, tether_core::LogSource::Event);
    assert_eq!(sim.gw.recent_log("fs", 1).unwrap().len(), 1, "the last lines only");
    assert!(sim.gw.recent_log("nope", 10).is_none());
}

/// An entry the config file could not complete (an unset variable) stays in
/// `error` with the file's message, never started, whoever asks (an operator's
/// restart included); the others run. Mended by a reload, it starts.
#[test]
fn a_broken_entry_stays_in_error_and_starts_once_mended() {
    let why = "mcpServers.gh.env.TOKEN: environment variable GH_TOKEN is not set; set it and reload";
    let broken = ServerConfig { broken: Some(why.into()), ..ServerConfig::stdio("gh-server", &[]) };
    let config = Config::default().server("fs", ServerConfig::stdio("fs-server", &[])).server("gh", broken);
    let mut sim = Sim::new(config.clone());
    sim.boot("fs", &["read"]);
    assert!(spawns(&sim, "gh").is_empty(), "never started");
    let status = sim.gw.status("gh").unwrap();
    assert_eq!((status.status, status.last_error.as_deref()), (Status::Error, Some(why)));
    assert_eq!(sim.status("fs"), Status::Online);
    sim.input(Input::Admin { command: AdminCommand::Restart { server: "gh".into() } });
    assert!(spawns(&sim, "gh").is_empty(), "an operator's restart does not start it either");
    assert_eq!(sim.gw.status("gh").unwrap().last_error.as_deref(), Some(why));

    let mut mended = config;
    mended.servers.get_mut("gh").unwrap().broken = None;
    sim.input(Input::ConfigReloaded { config: mended });
    assert_eq!(spawns(&sim, "gh").len(), 1, "started once mended");
    assert_eq!(spawns(&sim, "fs").len(), 1, "fs untouched");
}
