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
    // Call 3 was in flight when fs crashed: resent on the new process (it has not
    // crashed before), so it has not ended yet, or it failed.
    assert_eq!(m.calls_failed as usize, sim.responses_for(3).len());
}
