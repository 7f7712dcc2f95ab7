//! Scenarios of a local (stdio) backend failing and recovering: crashes and
//! restarts, crash loops, idling, request timeouts, disconnects, safe retries,
//! config reloads and health checks. Each is pinned as a readable transcript
//! (time in ms, `>` an input, indented lines the actions it caused, `#` narration)
//! and checked with assertions on the behaviour DESIGN.md asks for.

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
            Action::Spawn { server: s, generation, .. } if s == server => Some((*at, *generation)),
            _ => None,
        })
        .collect()
}

/// Connections of `server` closed by the gateway so far, as (time, generation).
fn closes(sim: &Sim, server: &str) -> Vec<(u64, u64)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::CloseBackend { server: s, generation } if s == server => Some((*at, *generation)),
            _ => None,
        })
        .collect()
}

/// Every event emitted so far, with its time.
fn events(sim: &Sim) -> Vec<(u64, Event)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::Emit { event } => Some((*at, event.clone())),
            _ => None,
        })
        .collect()
}

/// The statuses `server` went through, in order (the `to` of each change).
fn status_path(sim: &Sim, server: &str) -> Vec<Status> {
    events(sim)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Event::ServerStatusChanged { server: s, to, .. } if s == server => Some(to),
            _ => None,
        })
        .collect()
}

/// Frames sent to `server` on connection `generation`, parsed, with their time.
fn frames_to(sim: &Sim, server: &str, generation: u64) -> Vec<(u64, Value)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::SendToBackend { server: s, generation: g, frame, .. } if s == server && *g == generation => {
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

/// Requests with `method` sent to `server` (any generation), as (time, id).
fn request_times(sim: &Sim, server: &str, method: &str) -> Vec<(u64, u64)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::SendToBackend { server: s, frame, .. } if s == server => {
                let v: Value = serde_json::from_str(frame).ok()?;
                (v["method"] == method && v.get("id").is_some()).then(|| (*at, v["id"].as_u64().unwrap()))
            }
            _ => None,
        })
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

/// Names of the tools the client is served now (asks with a fresh request id).
fn listed_tools(sim: &mut Sim, id: u64) -> Vec<String> {
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}));
    let r = sim.response(id);
    r["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
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

/// Answers a request of the backend by id.
fn reply(sim: &mut Sim, server: &str, id: u64, result: Value) {
    sim.backend(server, json!({"jsonrpc":"2.0","id":id,"result":result}));
}

fn text_result(text: &str) -> Value {
    json!({"content":[{"type":"text","text":text}]})
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
    let mut sim = fs_online(Config::default().server(
        "fs",
        ServerConfig { policy: no_idle(), ..ServerConfig::stdio("fs-server", &[]) },
    ));
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
    assert!(message.contains("cannot open /tmp/idx: permission denied | fatal: giving up"), "{message}");
    assert!(!message.contains("panic"), "the tail is of the last process only: {message}");
    assert_eq!(st.next_retry_ms, None);
    let failed: Vec<_> = events(&sim)
        .into_iter()
        .filter(|(_, e)| matches!(e, Event::ServerPermanentlyFailed { .. }))
        .collect();
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
    assert!(text.contains("fatal: giving up"), "{text}");
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
        .any(|(at, e)| *at == 180_000
            && *e == Event::ServerDisconnected { server: "fs".into(), intentional: true }));
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
        [Status::Connecting, Status::DiscoveringTools, Status::Online, Status::Dormant, Status::Connecting, Status::Online]
    );
    assert_eq!(listed_tools(&mut sim, 3), ["fs__read_file", "fs__write_file"]);
    assert!(
        client_notifications(&sim, "notifications/tools/list_changed").is_empty(),
        "the tools stayed listed through idling and waking"
    );
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
    let cancels: Vec<_> = frames_to(&sim, "fs", 1)
        .into_iter()
        .filter(|(_, f)| f["method"] == "notifications/cancelled")
        .collect();
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
        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":token,"progress":done,"total":10}}),
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
    assert_eq!(forwarded[0], json!({"progressToken":"tok-1","progress":1,"total":10}));
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
            Action::SendToBackend { server: s, frame, .. } if s == server => {
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
    advance_answering_pings(&mut sim, "fs", 49_999);
    assert!(sim.responses_for(1).is_empty());
    sim.note("10 min after the request arrived: cancelled whatever the progress");
    advance_answering_pings(&mut sim, "fs", 1);
    let r = sim.response(1);
    assert_eq!(r["error"]["code"], code::REQUEST_TIMEOUT);
    assert_eq!(cancel_times(&sim, "fs", id), [601_000]);
    assert_eq!(sim.status("fs"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

// ----- 5. backend disconnect with a call and a sampling request pending -----

/// Frames sent to client `session` so far, parsed.
fn frames_to_session(sim: &Sim, session: SessionId) -> Vec<Value> {
    sim.actions
        .iter()
        .filter_map(|(_, a)| match a {
            Action::SendToClient { session: s, frame } if *s == session => serde_json::from_str(frame).ok(),
            _ => None,
        })
        .collect()
}

#[test]
fn disconnect_fails_the_call_and_cancels_the_sampling_request_it_caused() {
    const SECOND: SessionId = SessionId(2);
    let mut sim = fs_online(one_stdio());
    sim.note("a second client session, also able to sample");
    sim.session(SECOND, json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"second","version":"1"}}}));
    sim.session(SECOND, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    sim.advance(2_000);

    sim.note("session 2 calls a tool; while working on it the backend asks for a sampling");
    sim.session(SECOND, json!({"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"fs__write_file","arguments":{}}}));
    sim.backend("fs", json!({"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":10}}));
    let to_second = frames_to_session(&sim, SECOND);
    let sampling = to_second.iter().find(|f| f["method"] == "sampling/createMessage").expect("routed to session 2");
    let sampling_id = sampling["id"].clone();
    assert!(
        frames_to_session(&sim, CLIENT).iter().all(|f| f["method"] != "sampling/createMessage"),
        "not sent to the session that did not make the call"
    );

    sim.advance(500);
    sim.note("the process crashes");
    sim.stderr("fs", "out of memory");
    sim.exit("fs", Some(137));
    let to_second = frames_to_session(&sim, SECOND);
    let answer: Vec<_> = to_second.iter().filter(|f| f["id"] == "c1").collect();
    assert_eq!(answer.len(), 1);
    let text = answer[0]["error"]["message"].as_str().unwrap();
    assert!(text.contains("backend 'fs' disconnected"), "{text}");
    assert!(text.contains("out of memory"), "{text}");
    let cancelled: Vec<_> = to_second.iter().filter(|f| f["method"] == "notifications/cancelled").collect();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["params"]["requestId"], sampling_id);
    assert!(cancelled[0]["params"]["reason"].as_str().unwrap().contains("disconnected"));
    assert!(frames_to_session(&sim, CLIENT).iter().all(|f| f["method"] != "notifications/cancelled"));

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
