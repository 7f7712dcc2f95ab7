//! Scenarios of a remote (Streamable HTTP) backend failing and recovering:
//! refused connections and the reconnect schedule, the circuit breaker,
//! expired credentials, recovery detection, failed re-discovery, admin and
//! call-triggered reconnects, lost upstream sessions and the aggregation
//! deadline. Each is pinned as a readable transcript (time in ms, `>` an input,
//! indented lines the actions it caused, `#` narration) and checked with
//! assertions on the documented behaviour (docs/reference.md).

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::{Action, AdminCommand, Event, Failure, Status};

// ----- helpers local to these scenarios -----

/// Connections opened to `server` so far, as (time, generation).
fn connects(sim: &Sim, server: &str) -> Vec<(u64, u64)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::ConnectHttp { server: s, generation, .. } if &**s == server => Some((*at, generation.0)),
            _ => None,
        })
        .collect()
}

/// When the client was told `notifications/tools/list_changed`.
fn tools_changed_at(sim: &Sim) -> Vec<u64> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::SendToClient { session, frame, .. } if *session == CLIENT => {
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
            Action::SendToClient { session, frame, .. } if *session == CLIENT => {
                let v: Value = serde_json::from_str(frame).ok()?;
                (v["id"] == json!(id) && v.get("method").is_none()).then_some(*at)
            }
            _ => None,
        })
        .collect()
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
        let before = request_times(&sim, "web", "tools/call").len();
        sim.note(&format!("the call waits {wait} ms, then is resent"));
        sim.advance(wait - 1);
        assert_eq!(request_times(&sim, "web", "tools/call").len(), before, "resent early");
        sim.advance(1);
        assert_eq!(request_times(&sim, "web", "tools/call").len(), before + 1, "not resent after {wait} ms");
    }
    let times: Vec<u64> = request_times(&sim, "web", "tools/call").iter().map(|(at, _)| *at).collect();
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
            Event::ServerReconnecting { server, attempt, next_retry_ms } if &*server == "web" => {
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
            Event::ServerReconnected { server, attempts_taken, .. } if &*server == "web" => Some(attempts_taken),
            _ => None,
        })
        .collect();
    assert_eq!(reconnected, [16]);
    assert_eq!(sim.status("web"), Status::Online);
    assert_eq!(sim.gw.status("web").unwrap().reconnect_attempt, 0);
    assert_eq!(request_times(&sim, "web", "tools/list").len(), 2, "discovered once at start, once after the reconnect");
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
    assert_eq!(request_times(sim, "web", "tools/call").len(), 5, "HTTP 500 on a call that may have run is not resent");
    let opened: Vec<(u64, u64)> = events(sim)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::CircuitOpened { server, cooldown_ms } if &*server == "web" => Some((at, cooldown_ms)),
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
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 5, "a rejected call never reaches the backend");

    sim.advance(opened_at + 30_000 - sim.now);
    sim.note("the 30 s cooldown is over: one probe call goes through, a concurrent call is rejected");
    sim.call(7, "web__search");
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 6, "the probe is sent");
    sim.call(8, "web__search");
    let err = error_of(&sim, 8);
    assert!(err["message"].as_str().unwrap().contains("probe"), "{err}");
    assert_eq!(err["data"]["breaker"], "half_open");
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 6, "only one probe at a time");

    sim.note("the probe succeeds: the breaker closes and calls flow again");
    let probe = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", probe, text_result("found"));
    assert_eq!(sim.response(7)["result"], text_result("found"));
    assert_eq!(circuit_events(&sim), [(opened_at, "opened"), (sim.now, "closed")]);
    assert_eq!(sim.gw.status("web").unwrap().breaker, tether_core::policy::BreakerState::Closed);
    sim.call(9, "web__search");
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 7);
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
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 6, "the probe is sent");
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
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 6);

    sim.advance(1);
    sim.note("30 s after the failed probe: the next call is the new probe");
    sim.call(9, "web__search");
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 7);
    let id = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", id, text_result("ok"));
    assert_eq!(sim.response(9)["result"], text_result("ok"));
    assert_eq!(circuit_events(&sim).last().unwrap(), &(sim.now, "closed"));
    insta::assert_snapshot!(sim.log);
}

// ----- 3. expired credentials -----

/// The backend's status and that no reconnect or other timer is pending for it.
fn assert_waiting_for_the_user(sim: &mut Sim) {
    let st = sim.gw.status("web").unwrap();
    assert_eq!(st.status, Status::RequiresReauth);
    assert_eq!(st.next_retry_ms, None, "no reconnect is scheduled");
    let before = connects(sim, "web").len();
    sim.advance(3_600_000);
    sim.note("an hour later: still waiting for the user, no reconnect was tried");
    assert_eq!(connects(sim, "web").len(), before, "an hour passes and nothing reconnects");
    assert_eq!(sim.status("web"), Status::RequiresReauth);
}

/// A call refused at once because the backend needs new credentials.
fn assert_refused_for_reauth(sim: &mut Sim, id: u64) {
    let calls = request_times(sim, "web", "tools/call").len();
    sim.call(id, "web__search");
    assert_eq!(request_times(sim, "web", "tools/call").len(), calls, "nothing is sent to a backend that rejects us");
    let err = error_of(sim, id);
    assert_eq!(err["code"], -32004);
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("'web'") && msg.contains("re-authentication") && msg.contains("reconnect"), "{msg}");
    assert_eq!(err["data"]["status"], "requires_reauth");
}

#[test]
fn http_401_on_a_call_requires_reauth_until_an_admin_reconnect() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.note("four calls fail with HTTP 500: one more counted failure would open the breaker");
    for id in 1..=4 {
        sim.call(id, "web__search");
        fail_latest(&mut sim, "web", "tools/call", Failure::Http { status: 500 });
    }
    sim.note("the token expires: the next call gets HTTP 401");
    sim.call(5, "web__search");
    fail_latest(&mut sim, "web", "tools/call", Failure::Http { status: 401 });
    let err = error_of(&sim, 5);
    assert_eq!(err["code"], -32004, "the client is told to re-authenticate: {err}");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("'web'") && msg.contains("re-authentication"), "{msg}");
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 5, "a 401 is never retried");
    assert!(circuit_events(&sim).is_empty(), "a 401 does not count against the breaker");
    assert_eq!(sim.gw.status("web").unwrap().breaker, tether_core::policy::BreakerState::Closed);
    assert_eq!(tools_changed_at(&sim), [sim.now], "web's tools are hidden while it waits for the user");
    assert!(!events(&sim).iter().any(|(_, e)| matches!(e, Event::ServerReconnecting { .. })));

    sim.note("nothing happens by itself; calls are refused with what the user must do");
    assert_waiting_for_the_user(&mut sim);
    assert_refused_for_reauth(&mut sim, 6);

    sim.note("the user renewed the token and asks for a reconnect: a fresh connection");
    let gen_before = sim.gen("web");
    sim.admin(AdminCommand::Reconnect { server: "web".into() });
    assert_eq!(connects(&sim, "web").last().unwrap(), &(sim.now, gen_before.0 + 1));
    assert_eq!(sim.status("web"), Status::Connecting);
    sim.boot("web", &["search"]);
    use Status::*;
    assert_eq!(
        status_path(&sim, "web"),
        [Connecting, DiscoveringTools, Online, RequiresReauth, Connecting, DiscoveringTools, Online]
    );
    sim.call(7, "web__search");
    let id = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", id, text_result("ok"));
    assert_eq!(sim.response(7)["result"], text_result("ok"));
    insta::assert_snapshot!(sim.log);
}

#[test]
fn http_401_on_initialize_requires_reauth_and_the_waiting_call_says_so() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.note("the server restarts: the connection drops");
    sim.fail("web", None, Failure::Reset);
    assert_eq!(sim.status("web"), Status::Offline);
    sim.note("a call arrives while offline: it waits for the scheduled reconnect, whose initialize gets HTTP 401");
    let before = connects(&sim, "web").len();
    sim.call(1, "web__search");
    assert_eq!(connects(&sim, "web").len(), before, "the backoff holds for calls too");
    sim.advance(sim.gw.status("web").unwrap().next_retry_ms.unwrap());
    assert_eq!(connects(&sim, "web").last().unwrap().0, sim.now);
    fail_latest(&mut sim, "web", "initialize", Failure::Http { status: 401 });
    let err = error_of(&sim, 1);
    assert_eq!(err["code"], -32004, "the waiting call is told to re-authenticate: {err}");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("'web'") && msg.contains("re-authentication"), "{msg}");
    assert_eq!(err["data"]["status"], "requires_reauth");
    assert!(circuit_events(&sim).is_empty());
    assert_waiting_for_the_user(&mut sim);
    assert_refused_for_reauth(&mut sim, 2);

    sim.note("admin reconnect: a fresh connection, the catalog is fetched again");
    sim.admin(AdminCommand::Reconnect { server: "web".into() });
    assert_eq!(connects(&sim, "web").last().unwrap().0, sim.now);
    sim.boot("web", &["search"]);
    assert_eq!(sim.status("web"), Status::Online);
    assert_eq!(listed_tools(&mut sim, 100), ["web__search"]);
    insta::assert_snapshot!(sim.log);
}

// ----- 4. recovery detection -----

#[test]
fn two_calls_on_an_offline_backend_start_one_reconnect_and_one_rediscovery() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.note("the connection drops: web is offline, a reconnect is scheduled");
    sim.fail("web", None, Failure::Reset);
    assert_eq!(sim.status("web"), Status::Offline);
    let scheduled = sim.now + sim.gw.status("web").unwrap().next_retry_ms.unwrap();
    sim.advance(100);

    sim.note("two calls arrive before the scheduled retry: both wait for it (the backoff holds for calls too)");
    sim.call(1, "web__search");
    sim.call(2, "web__search");
    assert_eq!(connects(&sim, "web").len(), 1, "no attempt of the calls' own");
    sim.advance(scheduled - sim.now);
    let attempt_at = sim.now;
    assert_eq!(connects(&sim, "web").len(), 2, "exactly one reconnect for both calls");
    assert_eq!(request_times(&sim, "web", "initialize").len(), 2, "exactly one initialize for both calls");
    assert!(sim.responses_for(1).is_empty() && sim.responses_for(2).is_empty());

    sim.note("the handshake completes: both calls go out at once, re-discovery runs beside them");
    sim.answer(
        "web",
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"web","version":"1"}}),
    );
    assert_eq!(sim.status("web"), Status::DiscoveringTools);
    let calls = request_times(&sim, "web", "tools/call");
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|(at, _)| *at == sim.now), "both calls sent right after the handshake");
    assert_eq!(request_times(&sim, "web", "tools/list").len(), 2, "one re-discovery (plus the one at start)");
    let reconnected: Vec<u32> = events(&sim)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Event::ServerReconnected { attempts_taken, .. } => Some(attempts_taken),
            _ => None,
        })
        .collect();
    assert_eq!(reconnected, [1]);

    sim.note("the backend answers both calls before its tools/list: the callers are not delayed");
    reply(&mut sim, "web", calls[0].1, text_result("one"));
    reply(&mut sim, "web", calls[1].1, text_result("two"));
    assert_eq!(sim.response(1)["result"], text_result("one"));
    assert_eq!(sim.response(2)["result"], text_result("two"));
    assert_eq!(sim.status("web"), Status::DiscoveringTools, "discovery is still running");
    assert_eq!(request_times(&sim, "web", "tools/list").len(), 2, "successful calls start no further discovery");

    sim.answer_tools("web", &["search"]);
    assert_eq!(sim.status("web"), Status::Online);
    sim.advance(scheduled + 10_000 - sim.now);
    assert_eq!(connects(&sim, "web").last().unwrap().0, attempt_at, "no further attempt");
    assert_eq!(request_times(&sim, "web", "tools/list").len(), 2);
    insta::assert_snapshot!(sim.log);
}

// ----- 5. failed re-discovery -----

/// `web` online with `search` and `fetch`, then its connection drops and the
/// scheduled reconnect completes its handshake; re-discovery is under way.
fn reconnected_and_rediscovering() -> Sim {
    let mut sim = Sim::new(one_http());
    sim.boot("web", &["search", "fetch"]);
    sim.client_init();
    assert_eq!(listed_tools(&mut sim, 100), ["web__search", "web__fetch"]);
    sim.advance(1000);
    sim.note("the connection drops; the scheduled reconnect succeeds");
    sim.fail("web", None, Failure::Reset);
    sim.advance(sim.gw.status("web").unwrap().next_retry_ms.unwrap());
    sim.answer(
        "web",
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"web","version":"1"}}),
    );
    assert_eq!(sim.status("web"), Status::DiscoveringTools);
    assert_eq!(request_times(&sim, "web", "tools/list").len(), 2);
    sim
}

fn discovered_counts(sim: &Sim) -> Vec<u32> {
    events(sim)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Event::ToolsDiscovered { count, .. } => Some(count),
            _ => None,
        })
        .collect()
}

#[test]
fn rediscovery_answered_with_an_error_keeps_the_cached_catalog() {
    let mut sim = reconnected_and_rediscovering();
    sim.note("the re-discovery's tools/list is answered with an error: the cached tools stay");
    sim.answer_error("web", "tools/list", -32603, "catalog unavailable");
    assert_eq!(sim.status("web"), Status::Online);
    assert_eq!(discovered_counts(&sim), [2], "nothing new was discovered");
    assert_eq!(sim.gw.status("web").unwrap().tools, 2);
    // Told when the tools went away and when they came back: no sooner than the
    // list-change window after the first.
    let window = tether_core::Config::default().list_changed_debounce_ms;
    sim.advance(window);
    let changed = tools_changed_at(&sim);
    assert_eq!(changed.len(), 2, "told when the tools went away and when they came back: {changed:?}");
    assert!(changed[1] >= changed[0] + window, "{changed:?}");
    assert_eq!(listed_tools(&mut sim, 101), ["web__search", "web__fetch"]);
    sim.call(1, "web__fetch");
    let id = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", id, text_result("fetched"));
    assert_eq!(sim.response(1)["result"], text_result("fetched"));
    insta::assert_snapshot!(sim.log);
}

#[test]
fn rediscovery_that_times_out_keeps_the_cached_catalog() {
    let mut sim = reconnected_and_rediscovering();
    let handshake_at = sim.now;
    sim.note("the re-discovery's tools/list is never answered");
    sim.advance(59_999);
    assert_eq!(sim.status("web"), Status::DiscoveringTools);
    sim.note("one ms later the 60 s request timeout ends the discovery: web goes online with the cached tools");
    sim.advance(1);
    assert_eq!(sim.status("web"), Status::Online);
    let online_at = events(&sim)
        .into_iter()
        .filter_map(|(at, e)| matches!(e, Event::ServerStatusChanged { to: Status::Online, .. }).then_some(at))
        .next_back()
        .unwrap();
    assert_eq!(online_at, handshake_at + 60_000);
    assert_eq!(discovered_counts(&sim), [2]);
    assert_eq!(tools_changed_at(&sim).len(), 2);
    assert_eq!(listed_tools(&mut sim, 101), ["web__search", "web__fetch"]);
    insta::assert_snapshot!(sim.log);
}

// ----- 6. reconnect now: admin command, or a call arriving while offline -----

#[test]
fn an_admin_reconnect_tries_at_once_a_call_waits_for_the_backoff_and_a_failure_is_a_structured_error() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.note("the server goes away: offline, first reconnect scheduled");
    sim.fail("web", None, Failure::Refused);
    let first_retry = sim.now + sim.gw.status("web").unwrap().next_retry_ms.unwrap();
    sim.advance(500);

    sim.note("the operator asks for a reconnect: tried at once, the scheduled retry is cancelled");
    sim.admin(AdminCommand::Reconnect { server: "web".into() });
    assert_eq!(connects(&sim, "web").last().unwrap().0, sim.now);
    assert_eq!(sim.status("web"), Status::Connecting);
    assert_eq!(sim.gw.status("web").unwrap().next_retry_ms, None);
    fail_latest(&mut sim, "web", "initialize", Failure::Refused);
    let st = sim.gw.status("web").unwrap();
    assert_eq!((st.status, st.reconnect_attempt), (Status::Offline, 2));
    assert_jittered(2, st.next_retry_ms.unwrap());
    let connects_so_far = connects(&sim, "web").len();
    sim.advance(first_retry + 1 - sim.now);
    assert_eq!(connects(&sim, "web").len(), connects_so_far, "the cancelled retry does not fire");

    sim.note("a call arrives while offline: it waits for the scheduled attempt (the backoff holds for calls too)");
    sim.call(1, "web__search");
    assert_eq!(connects(&sim, "web").len(), connects_so_far, "no attempt of the call's own");
    sim.advance(sim.gw.status("web").unwrap().next_retry_ms.unwrap());
    assert_eq!(connects(&sim, "web").last().unwrap().0, sim.now);
    assert!(sim.responses_for(1).is_empty(), "the call waits for the attempt");
    sim.note("that attempt is refused too: the call gets a structured error");
    fail_latest(&mut sim, "web", "initialize", Failure::Refused);
    let st = sim.gw.status("web").unwrap();
    assert_eq!((st.status, st.reconnect_attempt), (Status::Offline, 3));
    let err = error_of(&sim, 1);
    assert_eq!(err["code"], -32001);
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("'web'") && msg.contains("offline") && msg.contains("connection refused"), "{msg}");
    let data = &err["data"];
    assert_eq!(data["server"], "web");
    assert_eq!(data["status"], "offline");
    assert_eq!(data["attempt"], 3);
    assert_eq!(data["next_retry_ms"], json!(st.next_retry_ms.unwrap()));
    assert_jittered(3, data["next_retry_ms"].as_u64().unwrap());
    assert_eq!(data["last_error"], "connection refused (https://web.example)", "it says where");
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 0, "the call never reached the backend");

    sim.note("the next scheduled attempt succeeds");
    let failed_at = sim.now;
    sim.advance(st.next_retry_ms.unwrap());
    assert_eq!(connects(&sim, "web").last().unwrap().0, failed_at + st.next_retry_ms.unwrap());
    sim.boot("web", &["search"]);
    assert_eq!(sim.status("web"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

// ----- 7. upstream session lost (HTTP 404) -----

#[test]
fn http_404_reinitializes_and_resends_once_and_a_second_404_backs_off() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.note("the server restarted and forgot our session: the call's POST gets HTTP 404");
    sim.call(1, "web__search");
    let gen1 = sim.gen("web");
    fail_latest(&mut sim, "web", "tools/call", Failure::Http { status: 404 });
    assert_eq!(connects(&sim, "web").last().unwrap(), &(sim.now, gen1.0 + 1), "re-initialized at once, new generation");
    assert!(sim.responses_for(1).is_empty(), "the client is not bothered");
    sim.note("the fresh session's handshake completes: the call is resent on it and answered");
    sim.boot("web", &["search"]);
    let calls = request_times(&sim, "web", "tools/call");
    assert_eq!(calls.len(), 2, "resent exactly once");
    reply(&mut sim, "web", calls[1].1, text_result("found"));
    assert_eq!(sim.response(1)["result"], text_result("found"));
    assert_eq!(sim.status("web"), Status::Online);
    assert!(circuit_events(&sim).is_empty());

    sim.advance(1000);
    sim.note("again a 404, and the resent call gets a 404 on the fresh session as well: no hot loop");
    sim.call(2, "web__search");
    fail_latest(&mut sim, "web", "tools/call", Failure::Http { status: 404 });
    sim.boot("web", &["search"]);
    let gen3 = sim.gen("web");
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 4);
    fail_latest(&mut sim, "web", "tools/call", Failure::Http { status: 404 });
    let err = error_of(&sim, 2);
    assert_eq!(err["code"], -32001);
    assert!(err["message"].as_str().unwrap().contains("404"), "{err}");
    let st = sim.gw.status("web").unwrap();
    assert_eq!(st.status, Status::Error);
    assert_eq!(st.reconnect_attempt, 1);
    let wait = st.next_retry_ms.expect("a reconnect with backoff");
    assert_jittered(1, wait);
    let failed_at = sim.now;
    sim.advance(wait - 1);
    assert_eq!(sim.gen("web"), gen3, "no reconnect before the backoff ends");
    assert_eq!(request_times(&sim, "web", "tools/call").len(), 4, "the call was not resent a second time");
    sim.note("the backoff ends: a new connection");
    sim.advance(1);
    assert_eq!(connects(&sim, "web").last().unwrap(), &(failed_at + wait, gen3.0 + 1));
    sim.boot("web", &["search"]);
    assert_eq!(sim.status("web"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn http_404_with_other_calls_in_flight_leaves_none_unanswered() {
    let tools = json!({"tools":[
        {"name":"search","inputSchema":{"type":"object"}},
        {"name":"lookup","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
    ]});
    let init =
        json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"web","version":"1"}});
    let mut sim = Sim::new(one_http());
    sim.answer("web", "initialize", init.clone());
    sim.answer("web", "tools/list", tools.clone());
    sim.client_init();
    sim.advance(1000);
    sim.note("three calls in flight: search (not safe to resend once delivered), lookup (read-only), search again");
    sim.call(1, "web__search");
    sim.call(2, "web__lookup");
    sim.call(3, "web__search");
    let first = request_times(&sim, "web", "tools/call");
    sim.note("the session is lost: the third call's POST gets HTTP 404. That call never ran and lookup is");
    sim.note("read-only: both wait for the new session. The first search may have run: it fails now");
    sim.fail("web", Some(first[2].1), Failure::Http { status: 404 });
    let err = error_of(&sim, 1);
    assert_eq!(err["code"], -32001);
    assert!(err["message"].as_str().unwrap().contains("session"), "{err}");
    assert_eq!(err["data"]["status"], "connecting", "the error shows the new session being set up: {err}");
    assert!(sim.responses_for(2).is_empty() && sim.responses_for(3).is_empty());
    sim.answer("web", "initialize", init);
    sim.answer("web", "tools/list", tools);
    let resent: Vec<u64> = request_times(&sim, "web", "tools/call")[3..].iter().map(|(_, id)| *id).collect();
    assert_eq!(resent.len(), 2, "the 404'd call and the read-only call are resent");
    for id in resent {
        reply(&mut sim, "web", id, text_result("ok"));
    }
    assert_eq!(sim.response(2)["result"], text_result("ok"));
    assert_eq!(sim.response(3)["result"], text_result("ok"));
    assert_eq!(sim.gw.in_flight(), 0);
    insta::assert_snapshot!(sim.log);
}

// ----- 8. the aggregation deadline -----

#[test]
fn a_slow_backend_delays_tools_list_by_at_most_two_seconds_and_is_announced_when_it_arrives() {
    let mut sim = Sim::new(two_backends());
    sim.note("both backends are starting; the client's initialize is answered at once anyway");
    sim.client_init();
    assert_eq!(answered_at(&sim, 0), [0]);
    sim.advance(100);
    sim.note("the client lists tools: parked while backends are still starting");
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    let asked_at = sim.now;
    sim.advance(100);
    sim.note("fs answers fast; web never answers its initialize");
    sim.boot("fs", &["read_file"]);
    assert!(sim.responses_for(1).is_empty(), "still within the deadline, web may yet come");
    sim.note("the list waits at most 2 s for web, then is answered with what is online");
    sim.advance(asked_at + 1999 - sim.now);
    assert!(sim.responses_for(1).is_empty());
    sim.advance(1);
    assert_eq!(answered_at(&sim, 1), [asked_at + 2000]);
    let list = sim.response(1);
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fs__read_file"]);
    // The short list explains itself: which server is still starting, and what follows.
    let told: Vec<Value> =
        sim.client_frames().into_iter().filter(|f| f["params"]["data"]["event"] == "servers_starting").collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["params"]["data"]["servers"], json!(["web"]));
    assert!(told[0]["params"]["data"]["message"].as_str().unwrap().contains("list_changed follows"));
    assert!(tools_changed_at(&sim).is_empty(), "the client saw the list it was answered with: nothing to announce");

    sim.note("web's connect deadline (30 s) passes: offline, reconnect scheduled");
    sim.advance(30_000 - sim.now);
    assert_eq!(sim.status("web"), Status::Offline);
    assert!(tools_changed_at(&sim).is_empty(), "web never had visible tools: nothing changed for the client");
    let wait = sim.gw.status("web").unwrap().next_retry_ms.unwrap();
    sim.advance(wait);
    sim.note("the reconnect works: web's tools arrive and the client is told");
    sim.boot("web", &["search"]);
    assert_eq!(sim.status("web"), Status::Online);
    assert_eq!(tools_changed_at(&sim), [sim.now]);
    assert_eq!(listed_tools(&mut sim, 2), ["fs__read_file", "web__search"]);
    insta::assert_snapshot!(sim.log);
}

/// A URL whose path names no MCP endpoint answers the very first request with
/// 404: no session was lost, the URL is wrong, and the status says so.
#[test]
fn a_404_to_the_first_initialize_says_the_path_is_wrong() {
    let mut sim = Sim::new(one_http());
    fail_latest(&mut sim, "web", "server/discover", Failure::Http { status: 404 });
    if !sim.requests_to("web", "initialize").is_empty() {
        fail_latest(&mut sim, "web", "initialize", Failure::Http { status: 404 });
    }
    let status = sim.gw.status("web").unwrap();
    let message = status.last_error.unwrap_or_default();
    assert!(message.contains("HTTP 404") && message.contains("check its path"), "{message}");
    assert!(!message.contains("session lost"), "{message}");
}
