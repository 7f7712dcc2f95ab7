//! Sessions are shared fairly: a full table makes room by closing the longest
//! idle session of whoever holds the most, and one identity holds at most its
//! quota, so nobody locks everyone else out by opening sessions and sitting on them.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::{Action, Config, Input, ServerConfig, SessionId};

fn config(max_sessions: u32, per_identity: u32) -> Config {
    let mut config = Config::default().server("fs", ServerConfig::stdio("fs-server", &[]));
    config.limits.max_sessions = max_sessions;
    config.limits.max_sessions_per_identity = per_identity;
    config
}

/// Opens HTTP session `session` for `principal` (none: a listener without
/// tokens) with `initialize`; returns its answer.
fn open(sim: &mut Sim, session: u64, principal: Option<&str>) -> Value {
    let s = SessionId(session);
    sim.input(Input::ClientConnected { session: s, expires: true });
    if let Some(p) = principal {
        sim.input(Input::ClientAccess { session: s, scopes: Vec::new(), principal: Some(p.into()) });
    }
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}});
    sim.session(s, init);
    sim.session(s, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    sim.advance(10);
    sim.frames_to(s).into_iter().find(|f| f["id"] == 0).expect("an answer to initialize")
}

fn closed(sim: &Sim) -> Vec<u64> {
    sim.actions
        .iter()
        .filter_map(|(_, a)| match a {
            Action::CloseClient { session } => Some(session.0),
            _ => None,
        })
        .collect()
}

/// Starts a call on `session` that fs does not answer: the session is busy.
fn busy(sim: &mut Sim, session: u64) {
    sim.session(
        SessionId(session),
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__read","arguments":{}}}),
    );
}

#[test]
fn a_full_table_makes_room_by_closing_the_longest_idle_session() {
    let mut sim = Sim::new(config(4, 4));
    sim.boot("fs", &["read"]);
    for session in 10..14 {
        assert!(open(&mut sim, session, None).get("result").is_some());
    }
    busy(&mut sim, 10);
    sim.note("the table is full; 10 is busy, 11 has been idle the longest");
    let newcomer = open(&mut sim, 20, None);
    assert!(newcomer.get("result").is_some(), "the newcomer gets in: {newcomer}");
    assert_eq!(closed(&sim), [11]);
    let another = open(&mut sim, 21, None);
    assert!(another.get("result").is_some());
    assert_eq!(closed(&sim), [11, 12], "the busy session is never the one closed");

    sim.note("every session busy: a newcomer is refused, as before");
    for session in [13, 20, 21] {
        busy(&mut sim, session);
    }
    let refused = open(&mut sim, 22, None);
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
}

#[test]
fn one_identity_holds_at_most_its_quota_and_gives_up_its_own_sessions_first() {
    let mut sim = Sim::new(config(6, 3));
    sim.boot("fs", &["read"]);
    open(&mut sim, 1, Some("bob"));
    for session in 10..13 {
        open(&mut sim, session, Some("alice"));
    }
    sim.note("alice at her quota: her fourth takes the place of her own longest idle one");
    assert!(open(&mut sim, 13, Some("alice")).get("result").is_some());
    assert_eq!(closed(&sim), [10]);

    sim.note("all of alice's busy: her next is refused, and says why");
    for session in 11..14 {
        busy(&mut sim, session);
    }
    let refused = open(&mut sim, 14, Some("alice"));
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("max_sessions_per_identity"), "{refused}");
    assert_eq!(closed(&sim), [10, 14]);
    assert!(open(&mut sim, 2, Some("bob")).get("result").is_some(), "bob is not held back by alice");
}

#[test]
fn when_the_table_is_full_whoever_holds_the_most_gives_one_up() {
    let mut sim = Sim::new(config(5, 5));
    sim.boot("fs", &["read"]);
    sim.note("bob's session is the oldest idle one, but alice holds more");
    open(&mut sim, 1, Some("bob"));
    for session in 10..14 {
        open(&mut sim, session, Some("alice"));
    }
    assert!(open(&mut sim, 20, Some("carol")).get("result").is_some());
    assert_eq!(closed(&sim), [10], "alice's longest idle, not bob's older one");
}
