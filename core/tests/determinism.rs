//! The same trace gives the same actions, byte for byte, every time, and equals
//! the live run that recorded it.

mod support;

use serde_json::json;
use support::*;
use tether_core::trace::{render, replay, TraceError};
use tether_core::{Failure, Instant};

/// A busy run: boots, calls, a crash with restart, HTTP refusals with jittered reconnects.
fn busy_run(seed: u64) -> Sim {
    let mut sim = Sim::with_seed(two_backends(), seed);
    sim.boot("fs", &["read"]);
    sim.boot("web", &["search"]);
    sim.client_init();
    sim.call(1, "fs__read");
    sim.exit("fs", Some(1));
    sim.advance(1000);
    sim.boot("fs", &["read"]);
    sim.call(2, "web__search");
    let id = sim.last_request("web", "tools/call");
    sim.fail("web", Some(id), Failure::Refused);
    sim.advance(600_000);
    sim.client(json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}));
    sim
}

fn live_actions(sim: &Sim) -> Vec<(Instant, tether_core::Action)> {
    sim.actions.iter().map(|(t, a)| (Instant::from_millis(*t), a.clone())).collect()
}

#[test]
fn replay_is_identical_twice_and_equals_the_live_run() {
    let sim = busy_run(7);
    let first = replay(&sim.trace).unwrap();
    let second = replay(&sim.trace).unwrap();
    assert_eq!(render(&first), render(&second));
    assert_eq!(first, live_actions(&sim));
    let json_a: Vec<String> = first.iter().map(|(_, a)| serde_json::to_string(a).unwrap()).collect();
    let json_b: Vec<String> = second.iter().map(|(_, a)| serde_json::to_string(a).unwrap()).collect();
    assert_eq!(json_a, json_b);
}

#[test]
fn the_seed_decides_the_jitter() {
    let a = busy_run(1);
    let b = busy_run(2);
    // Same scenario, different seeds: reconnect waits differ.
    assert_ne!(render(&live_actions(&a)), render(&live_actions(&b)));
}

#[test]
fn bad_traces_are_reported_with_their_line() {
    assert_eq!(replay(""), Err(TraceError::Empty));
    let sim = busy_run(3);
    let mut lines: Vec<&str> = sim.trace.lines().collect();
    lines.insert(2, "{\"at\":5,\"input\":{\"type\":\"nope\"}}");
    let broken = lines.join("\n");
    assert!(matches!(replay(&broken), Err(TraceError::Parse { line: 3, .. })));
    let backwards = format!("{}\n{}\n", sim.trace.lines().next().unwrap(), r#"{"at":10,"input":{"type":"tick"}}"#)
        + r#"{"at":5,"input":{"type":"tick"}}"#;
    assert!(matches!(replay(&backwards), Err(TraceError::Host { line: 3, .. })));
}
