//! Scenarios of a remote (Streamable HTTP) backend failing and recovering:
//! refused connections and the reconnect schedule, the circuit breaker,
//! expired credentials, recovery detection, failed re-discovery, admin and
//! call-triggered reconnects, lost upstream sessions and the aggregation
//! deadline. Each is pinned as a readable transcript (time in ms, `>` an input,
//! indented lines the actions it caused, `#` narration) and checked with
//! assertions on the behaviour DESIGN.md asks for.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::{Action, AdminCommand, Event, Failure, Status};

// ----- helpers local to these scenarios -----

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

/// Connections opened to `server` so far, as (time, generation).
fn connects(sim: &Sim, server: &str) -> Vec<(u64, u64)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::ConnectHttp { server: s, generation, .. } if s == server => Some((*at, *generation)),
            _ => None,
        })
        .collect()
}

/// Requests with `method` sent to `server` (any generation), as (time, id).
fn sent(sim: &Sim, server: &str, method: &str) -> Vec<(u64, u64)> {
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

/// When the client was told `notifications/tools/list_changed`.
fn tools_changed_at(sim: &Sim) -> Vec<u64> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::SendToClient { session, frame } if *session == CLIENT => {
                let v: Value = serde_json::from_str(frame).ok()?;
                (v["method"] == "notifications/tools/list_changed").then_some(*at)
            }
            _ => None,
        })
        .collect()
}

/// When the client's answer to request `id` was sent.
fn answered_at(sim: &Sim, id: u64) -> Vec<u64> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::SendToClient { session, frame } if *session == CLIENT => {
                let v: Value = serde_json::from_str(frame).ok()?;
                (v["id"] == json!(id) && v.get("method").is_none()).then_some(*at)
            }
            _ => None,
        })
        .collect()
}

/// Names of the tools the client is served now (asks with request `id`).
fn listed_tools(sim: &mut Sim, id: u64) -> Vec<String> {
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}));
    let r = sim.response(id);
    r["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// Answers backend request `id` of `server` with `result`.
fn reply(sim: &mut Sim, server: &str, id: u64, result: Value) {
    sim.backend(server, json!({"jsonrpc":"2.0","id":id,"result":result}));
}

fn text_result(text: &str) -> Value {
    json!({"content":[{"type":"text","text":text}]})
}

/// Fails the latest `method` request sent to `server` with `failure`.
fn fail_latest(sim: &mut Sim, server: &str, method: &str, failure: Failure) {
    let id = sim.last_request(server, method);
    sim.fail(server, Some(id), failure);
}

/// The un-jittered reconnect wait before `attempt`: 1 s doubling, capped at 180 s.
fn reconnect_base_ms(attempt: u32) -> u64 {
    1000u64.saturating_mul(1 << (attempt - 1).min(20)).min(180_000)
}

/// Asserts `wait` is the reconnect wait of `attempt` give or take 10 % jitter.
fn assert_jittered(attempt: u32, wait: u64) {
    let base = reconnect_base_ms(attempt);
    let (lo, hi) = (base - base / 10, base + base / 10);
    assert!((lo..=hi).contains(&wait), "attempt {attempt}: wait {wait} ms outside {lo}..={hi}");
    assert!(wait <= 198_000, "attempt {attempt}: wait {wait} ms above the 180 s cap plus jitter");
}

/// The error object of the one response to `id`.
fn error_of(sim: &Sim, id: u64) -> Value {
    let r = sim.response(id);
    assert!(r.get("error").is_some(), "response to {id} is not an error: {r}\n{}", sim.log);
    r["error"].clone()
}

/// `web` online with tool `search` (no annotations: not safe to retry once
/// delivered), and a ready client.
fn web_online() -> Sim {
    let mut sim = Sim::new(one_http());
    sim.boot("web", &["search"]);
    sim.client_init();
    sim
}

// ----- 1. refused: call retries, then offline and the reconnect schedule -----

#[test]
fn refused_call_is_retried_then_the_backend_reconnects_with_capped_jittered_backoff() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.note("the server goes down: the POST of a tool call is refused (never delivered, so safe to resend)");
    sim.call(1, "web__search");
    let start = sim.now;
    for wait in [500, 1000, 2000] {
        fail_latest(&mut sim, "web", "tools/call", Failure::Refused);
        assert_eq!(sim.status("web"), Status::Online, "call retries do not take the backend down yet");
        assert!(sim.responses_for(1).is_empty(), "the client waits while the call is retried");
        let before = sent(&sim, "web", "tools/call").len();
        sim.note(&format!("the call waits {wait} ms, then is resent"));
        sim.advance(wait - 1);
        assert_eq!(sent(&sim, "web", "tools/call").len(), before, "resent early");
        sim.advance(1);
        assert_eq!(sent(&sim, "web", "tools/call").len(), before + 1, "not resent after {wait} ms");
    }
    let times: Vec<u64> = sent(&sim, "web", "tools/call").iter().map(|(at, _)| *at).collect();
    assert_eq!(times, [start, start + 500, start + 1500, start + 3500]);

    sim.note("the third retry is refused too: the call fails and the backend goes offline");
    fail_latest(&mut sim, "web", "tools/call", Failure::Refused);
    let err = error_of(&sim, 1);
    assert_eq!(err["code"], -32001);
    assert!(err["message"].as_str().unwrap().contains("connection refused"), "{err}");
    assert_eq!(sim.status("web"), Status::Offline);
    assert_eq!(err["data"]["status"], "offline", "the error shows what the backend is doing now: {err}");
    assert_eq!(err["data"]["attempt"], 1);
    assert_eq!(err["data"]["next_retry_ms"], json!(sim.gw.status("web").unwrap().next_retry_ms.unwrap()));
    assert_eq!(tools_changed_at(&sim), [sim.now], "web's tools went away: the client is told");
    assert!(listed_tools(&mut sim, 100).is_empty());

    sim.note("every reconnect attempt is refused: waits double from 1 s up to the 180 s cap, each jittered ±10 %");
    let mut failed_at = sim.now;
    let mut waits = Vec::new();
    for attempt in 1..=16u32 {
        let st = sim.gw.status("web").unwrap();
        assert_eq!(st.status, Status::Offline);
        assert_eq!(st.reconnect_attempt, attempt);
        let wait = st.next_retry_ms.expect("a reconnect is scheduled");
        assert_jittered(attempt, wait);
        waits.push(wait);
        let before = connects(&sim, "web").len();
        sim.advance(wait - 1);
        assert_eq!(connects(&sim, "web").len(), before, "attempt {attempt} started early");
        sim.advance(1);
        let (at, _) = *connects(&sim, "web").last().unwrap();
        assert_eq!(connects(&sim, "web").len(), before + 1, "attempt {attempt} did not start");
        assert_eq!(at, failed_at + wait, "attempt {attempt} started at the wrong time");
        assert_eq!(sim.status("web"), Status::Connecting);
        if attempt == 16 {
            break;
        }
        fail_latest(&mut sim, "web", "initialize", Failure::Refused);
        failed_at = sim.now;
    }
    assert!(waits[8..].iter().all(|w| (162_000..=198_000).contains(w)), "cap not held: {waits:?}");
    assert!(waits.windows(2).any(|w| w[0] != w[1]), "no jitter: {waits:?}");

    // server_reconnecting: one per attempt up to 10, then at most one per 10 minutes.
    let reconnecting: Vec<(u64, u32, u64)> = events(&sim)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::ServerReconnecting { server, attempt, next_retry_ms } if server == "web" => {
                Some((at, attempt, next_retry_ms))
            }
            _ => None,
        })
        .collect();
    let attempts: Vec<u32> = reconnecting.iter().map(|r| r.1).collect();
    assert_eq!(attempts[..10], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    for (i, (_, attempt, next_retry_ms)) in reconnecting.iter().enumerate() {
        assert_eq!(*next_retry_ms, waits[*attempt as usize - 1], "event {i} carries the wrong wait");
    }
    let late = &reconnecting[9..];
    assert!(late.len() >= 2, "a long outage still reports now and then: {attempts:?}");
    assert!(late.len() < 7, "attempts after the 10th are throttled: {attempts:?}");
    for w in late.windows(2) {
        assert!(w[1].0 - w[0].0 >= 600_000, "two reconnect events within 10 minutes: {w:?}");
        assert!(w[1].0 - w[0].0 <= 600_000 + 198_000, "a throttled event came too late: {w:?}");
    }

    sim.note("the server is back: attempt 16 completes the handshake and the catalog is fetched again");
    sim.boot("web", &["search"]);
    let reconnected: Vec<u32> = events(&sim)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Event::ServerReconnected { server, attempts_taken, .. } if server == "web" => Some(attempts_taken),
            _ => None,
        })
        .collect();
    assert_eq!(reconnected, [16]);
    assert_eq!(sim.status("web"), Status::Online);
    assert_eq!(sim.gw.status("web").unwrap().reconnect_attempt, 0);
    assert_eq!(sent(&sim, "web", "tools/list").len(), 2, "discovered once at start, once after the reconnect");
    let changed = tools_changed_at(&sim);
    assert_eq!(changed.len(), 2, "told when the tools went away and when they came back");
    assert_eq!(changed[1], sim.now);
    assert_eq!(listed_tools(&mut sim, 101), ["web__search"]);
    insta::assert_snapshot!(sim.log);
}

// ----- 2. the circuit breaker -----

/// Five calls of `search` answered with HTTP 500: not safe to resend (the tool has
/// no read-only or idempotent hint and the request may have been acted on), so each
/// fails at once and counts. The fifth opens the breaker.
fn trip_breaker(sim: &mut Sim) {
    sim.note("five calls in a row fail with HTTP 500: each counts against the breaker, none is retried");
    for id in 1..=5 {
        sim.call(id, "web__search");
        fail_latest(sim, "web", "tools/call", Failure::Http { status: 500 });
        let err = error_of(sim, id);
        assert_eq!(err["code"], -32001);
        assert!(err["message"].as_str().unwrap().contains("HTTP 500"), "{err}");
    }
    assert_eq!(sent(sim, "web", "tools/call").len(), 5, "HTTP 500 on a call that may have run is not resent");
    let opened: Vec<(u64, u64)> = events(sim)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::CircuitOpened { server, cooldown_ms } if server == "web" => Some((at, cooldown_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(opened, [(sim.now, 30_000)], "opened by the fifth failure, not before");
    assert_eq!(sim.gw.status("web").unwrap().breaker, tether_core::policy::BreakerState::Open);
    assert_eq!(sim.status("web"), Status::Online, "the breaker is shown beside the status, not as one");
}

fn circuit_events(sim: &Sim) -> Vec<(u64, &'static str)> {
    events(sim)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::CircuitOpened { .. } => Some((at, "opened")),
            Event::CircuitClosed { .. } => Some((at, "closed")),
            _ => None,
        })
        .collect()
}

#[test]
fn breaker_opens_after_five_failures_rejects_then_a_successful_probe_closes_it() {
    let mut sim = web_online();
    sim.advance(1000);
    trip_breaker(&mut sim);
    let opened_at = sim.now;

    sim.advance(10_000);
    sim.note("10 s later: a call is rejected at once, naming the backend and the seconds left");
    sim.call(6, "web__search");
    let err = error_of(&sim, 6);
    assert_eq!(err["code"], -32001);
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("'web'") && msg.contains("retry in 20 s"), "{msg}");
    assert_eq!(err["data"]["breaker"], "open");
    assert_eq!(answered_at(&sim, 6), [sim.now]);
    assert_eq!(sent(&sim, "web", "tools/call").len(), 5, "a rejected call never reaches the backend");

    sim.advance(opened_at + 30_000 - sim.now);
    sim.note("the 30 s cooldown is over: one probe call goes through, a concurrent call is rejected");
    sim.call(7, "web__search");
    assert_eq!(sent(&sim, "web", "tools/call").len(), 6, "the probe is sent");
    sim.call(8, "web__search");
    let err = error_of(&sim, 8);
    assert!(err["message"].as_str().unwrap().contains("probe"), "{err}");
    assert_eq!(err["data"]["breaker"], "half_open");
    assert_eq!(sent(&sim, "web", "tools/call").len(), 6, "only one probe at a time");

    sim.note("the probe succeeds: the breaker closes and calls flow again");
    let probe = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", probe, text_result("found"));
    assert_eq!(sim.response(7)["result"], text_result("found"));
    assert_eq!(circuit_events(&sim), [(opened_at, "opened"), (sim.now, "closed")]);
    assert_eq!(sim.gw.status("web").unwrap().breaker, tether_core::policy::BreakerState::Closed);
    sim.call(9, "web__search");
    assert_eq!(sent(&sim, "web", "tools/call").len(), 7);
    let id = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", id, text_result("again"));
    assert_eq!(sim.response(9)["result"], text_result("again"));
    insta::assert_snapshot!(sim.log);
}

#[test]
fn failed_probe_reopens_the_breaker_with_a_fresh_cooldown() {
    let mut sim = web_online();
    sim.advance(1000);
    trip_breaker(&mut sim);
    let opened_at = sim.now;

    sim.advance(30_000);
    sim.note("cooldown over: the probe call fails with HTTP 500 too");
    sim.call(6, "web__search");
    assert_eq!(sent(&sim, "web", "tools/call").len(), 6, "the probe is sent");
    fail_latest(&mut sim, "web", "tools/call", Failure::Http { status: 500 });
    assert_eq!(error_of(&sim, 6)["code"], -32001);
    let reopened_at = sim.now;
    assert_eq!(circuit_events(&sim), [(opened_at, "opened"), (reopened_at, "opened")]);

    sim.note("open again, with a fresh 30 s cooldown counted from the failed probe");
    sim.call(7, "web__search");
    let msg = error_of(&sim, 7)["message"].as_str().unwrap().to_string();
    assert!(msg.contains("'web'") && msg.contains("retry in 30 s"), "{msg}");
    sim.advance(29_999);
    sim.call(8, "web__search");
    let msg = error_of(&sim, 8)["message"].as_str().unwrap().to_string();
    assert!(msg.contains("retry in 1 s"), "{msg}");
    assert_eq!(sent(&sim, "web", "tools/call").len(), 6);

    sim.advance(1);
    sim.note("30 s after the failed probe: the next call is the new probe");
    sim.call(9, "web__search");
    assert_eq!(sent(&sim, "web", "tools/call").len(), 7);
    let id = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", id, text_result("ok"));
    assert_eq!(sim.response(9)["result"], text_result("ok"));
    assert_eq!(circuit_events(&sim).last().unwrap(), &(sim.now, "closed"));
    insta::assert_snapshot!(sim.log);
}
