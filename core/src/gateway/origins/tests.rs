//! Whom a backend's request goes to, over hand-made calls and sessions.

use super::*;
use crate::gateway::calls::{Call, ClientCall};
use crate::gateway::sessions::Session;
use crate::io::Generation;
use crate::time::Instant;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

fn session(caps: &[&str], ready: bool, scopes: Option<&[&str]>) -> Session {
    let mut s = Session::new(true, Instant::ZERO);
    s.ready = ready;
    for cap in caps {
        s.capabilities.insert((*cap).into(), serde_json::json!({}));
    }
    s.scopes = scopes.map(|list| list.iter().map(|x| String::from(*x)).collect());
    s
}

fn client_call(server: &str, session: u64, id: &str) -> Call {
    Call {
        server: server.into(),
        generation: Generation(1),
        deadline: None,
        kind: CallKind::Client(ClientCall::for_test(session, id)),
    }
}

fn tables(calls: &[(u64, Call)], sessions: Vec<(u64, Session)>) -> (Router, Sessions) {
    let mut router = Router::default();
    for (id, call) in calls {
        router.calls.insert(*id, call.clone());
    }
    let mut all = Sessions::default();
    for (id, s) in sessions {
        all.open.insert(SessionId(id), s);
    }
    (router, all)
}

#[test]
fn a_request_goes_to_the_newest_call_on_its_backend_when_that_client_can_answer() {
    let calls = [(1, client_call("a", 1, "x")), (2, client_call("a", 2, "y")), (3, client_call("b", 1, "z"))];
    let (router, sessions) =
        tables(&calls, vec![(1, session(&["sampling"], true, None)), (2, session(&["sampling"], true, None))]);
    let origins = Origins { router: &router, sessions: &sessions };
    assert_eq!(origins.of_server("a", "sampling"), Some((SessionId(2), Some(RawId::new("y")))));
    assert_eq!(origins.latest_call("a", Some(SessionId(1))), Some((SessionId(1), RawId::new("x"))));
    assert_eq!(origins.of_call(3, "sampling"), Some((SessionId(1), Some(RawId::new("z")))));
    // The newest call's client cannot answer: nobody else is asked in its place.
    assert_eq!(origins.of_server("a", "elicitation"), None);
    assert_eq!(origins.of_call(1, "roots"), None);
}

#[test]
fn a_request_no_call_made_goes_to_a_ready_session_that_holds_no_token() {
    let sessions = vec![
        (1, session(&["roots"], false, None)),
        (2, session(&["roots"], true, Some(&["read"]))),
        (3, session(&["roots"], true, None)),
    ];
    let (router, sessions) = tables(&[], sessions);
    let origins = Origins { router: &router, sessions: &sessions };
    assert_eq!(origins.callless("roots"), Some((SessionId(3), None)));
    assert_eq!(origins.of_server("idle", "roots"), Some((SessionId(3), None)));
    assert_eq!(origins.callless("sampling"), None);
}

#[test]
fn calls_of_several_sessions_are_ambiguous_only_when_a_token_holder_is_among_them() {
    let calls = [(1, client_call("a", 1, "x")), (2, client_call("a", 2, "y"))];
    let (router, open) = tables(&calls, vec![(1, session(&[], true, None)), (2, session(&[], true, None))]);
    assert!(!Origins { router: &router, sessions: &open }.ambiguous("a"), "one person, two sessions");
    let (router, tokens) = tables(&calls, vec![(1, session(&[], true, None)), (2, session(&[], true, Some(&[])))]);
    assert!(Origins { router: &router, sessions: &tokens }.ambiguous("a"));
    assert!(!Origins { router: &router, sessions: &tokens }.ambiguous("b"));
}

#[test]
fn a_call_is_stateless_when_its_session_is_or_it_waits_for_input() {
    let mut waiting = client_call("a", 1, "x");
    if let CallKind::Client(cc) = &mut waiting.kind {
        cc.awaiting_input = Some("state".into());
    }
    let mut stateless = session(&[], true, None);
    stateless.era = Era::Stateless;
    let calls = [(1, client_call("a", 1, "x")), (2, client_call("a", 2, "y")), (3, waiting)];
    let (router, sessions) = tables(&calls, vec![(1, session(&[], true, None)), (2, stateless)]);
    let origins = Origins { router: &router, sessions: &sessions };
    let answers: Vec<bool> = (1..=4).map(|call| origins.is_stateless_call(call)).collect();
    assert_eq!(answers, [false, true, true, false]);
}
