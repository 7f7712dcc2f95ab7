//! Metrics the core keeps for status and `/metrics`: call outcomes and their
//! latency as the client saw it, restarts, lost connections, uptime.

mod support;

use serde_json::json;
use support::*;

#[test]
fn calls_are_counted_by_outcome_with_the_latency_the_client_saw() {
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.advance(1000);
    sim.input(tether_core::Input::Tick); // status is read at the engine's time: bring it to now
    assert_eq!(sim.gw.status("fs").unwrap().uptime_ms, Some(1000));

    sim.call(1, "fs__read");
    sim.advance(40);
    let id = sim.last_request("fs", "tools/call");
    reply(&mut sim, "fs", id, text_result("ok"));
    sim.call(2, "fs__read");
    let id = sim.last_request("fs", "tools/call");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"bad"}}));
    sim.call(3, "fs__read");
    sim.advance(700);
    sim.exit("fs", Some(1));

    let m = sim.gw.metrics("fs").unwrap().clone();
    assert_eq!((m.calls_ok, m.calls_error), (1, 1));
    assert_eq!(m.recent_latency_ms.front(), Some(&40), "from the client's request to its answer");
    assert_eq!(m.disconnects, 1);
    assert_eq!(sim.gw.status("fs").unwrap().uptime_ms, None, "not online any more");
    sim.advance(5000);
    let m = sim.gw.metrics("fs").unwrap().clone();
    assert_eq!(m.restarts, 1, "the second process is a restart");
    // Call 3 was in flight when fs crashed: a tool call not marked safe to repeat
    // is not resent, so it failed: answered once, counted once, as failed.
    assert_eq!(sim.responses_for(3).len(), 1);
    assert!(sim.responses_for(3)[0].get("error").is_some(), "{:?}", sim.responses_for(3));
    assert_eq!((m.calls_ok, m.calls_error, m.calls_failed), (1, 1, 1));
}

/// The last hour the status page draws: minutes online, the minute a crash took
/// the backend out (time in offline/starting, not online), and the latency of the
/// calls of each minute, all in engine time.
#[test]
fn the_last_hour_shows_time_online_the_outage_and_each_minutes_latency() {
    use tether_core::history::{Condition, MINUTE_MS};
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.call(1, "fs__read");
    sim.advance(40);
    let id = sim.last_request("fs", "tools/call");
    reply(&mut sim, "fs", id, text_result("ok"));
    sim.advance(2 * MINUTE_MS);
    sim.exit("fs", Some(1));
    sim.advance(500);
    sim.input(tether_core::Input::Tick);

    let hour = sim.gw.history("fs").unwrap();
    let index = |c: Condition| Condition::ALL.iter().position(|x| *x == c).unwrap();
    let online: u64 = hour.iter().map(|m| u64::from(m.ms[index(Condition::Online)])).sum();
    assert!((2 * MINUTE_MS..=2 * MINUTE_MS + 100).contains(&online), "online {online} ms: {hour:?}");
    let now = hour.last().unwrap();
    assert_eq!(now.ago, 0);
    let out = now.ms[index(Condition::Offline)] + now.ms[index(Condition::Starting)];
    assert!(out > 0, "the crash's minute shows time out of online: {now:?}");
    let first = hour.first().unwrap();
    assert_eq!((first.ago, first.calls), (2, 1), "{hour:?}");
    let p50 = first.p50_ms.unwrap();
    assert!((40..=50).contains(&p50), "p50 {p50}");
    assert!(hour.iter().skip(1).all(|m| m.calls == 0));
}

/// A server that announces `tools/list_changed` right after it starts (the
/// reference "everything" server does) makes tether list its tools again; when
/// nothing changed that is no second `tools_discovered` (it was logged twice per
/// start). A real change still is one.
#[test]
fn a_rediscovery_that_finds_the_same_tools_is_no_second_tools_discovered() {
    let discovered = |sim: &Sim| {
        events(sim).into_iter().filter(|(_, e)| matches!(e, tether_core::Event::ToolsDiscovered { .. })).count()
    };
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read", "write"]);
    assert_eq!(discovered(&sim), 1);
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("fs", &["read", "write"]);
    assert_eq!(discovered(&sim), 1, "the same tools again");
    sim.backend("fs", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer_tools("fs", &["read", "write", "delete"]);
    assert_eq!(discovered(&sim), 2, "a new tool");
    // After a restart, the first discovery of the new process is an event again.
    sim.exit("fs", Some(1));
    sim.advance(1_000);
    sim.boot("fs", &["read", "write", "delete"]);
    assert_eq!(discovered(&sim), 3);
}
