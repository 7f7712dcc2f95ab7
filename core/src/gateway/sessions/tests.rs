//! Sessions on their own: each request's era, per-request sessions closing
//! with their answer, idle time, and the form of tasks a session speaks.

use super::*;
use crate::config::Tasks;
use crate::gateway::tasks::Form;

const STATELESS: &str = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},"io.modelcontextprotocol/logLevel":"info"}}"#;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

#[test]
fn a_stateless_request_makes_its_session_stateless_with_that_requests_capabilities() {
    let mut s = Session::new(true, at(0));
    assert_eq!(s.check_era("tools/call", Some(STATELESS)), Ok(()));
    assert_eq!((s.era, s.era_known, s.protocol_version.as_deref()), (Era::Stateless, true, Some("2026-07-28")));
    assert!(s.request_caps.as_ref().is_some_and(|c| c.contains_key("elicitation")));
    assert!(s.per_request(), "over HTTP it serves this one request");
    // Once stateless, every request must say so.
    let (code, message, _) = s.check_era("tools/list", Some("{}")).unwrap_err();
    assert_eq!(code, code::INVALID_PARAMS);
    assert!(message.contains("io.modelcontextprotocol/protocolVersion"), "{message}");
}

#[test]
fn methods_the_stateless_revision_removed_are_not_found_there() {
    for method in ["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"] {
        let mut s = Session::new(true, at(0));
        let (code, message, _) = s.check_era(method, Some(STATELESS)).unwrap_err();
        assert_eq!(code, code::METHOD_NOT_FOUND, "{method}");
        assert!(message.contains(method));
    }
}

#[test]
fn a_handshake_session_is_opened_only_by_initialize_over_http_and_anything_on_stdio() {
    let mut http = Session::new(true, at(0));
    assert!(http.check_era("tools/list", None).is_err(), "neither initialize nor a stateless request");
    assert_eq!(http.check_era("initialize", Some("{}")), Ok(()));
    assert_eq!(http.check_era("tools/list", None), Ok(()), "initialized: the handshake era holds");
    assert!(!http.per_request());
    let mut stdio = Session::new(false, at(0));
    assert_eq!(stdio.check_era("tools/list", None), Ok(()));
}

#[test]
fn a_per_request_session_closes_once_when_answered_and_a_handshake_one_does_not() {
    let mut sessions = Sessions::default();
    let mut stateless = Session::new(true, at(0));
    stateless.era = Era::Stateless;
    sessions.open.insert(SessionId(1), stateless);
    sessions.open.insert(SessionId(2), Session::new(true, at(0)));
    for id in [1, 1, 2, 9] {
        sessions.answered(SessionId(id));
    }
    assert_eq!(sessions.closing, [SessionId(1)]);
    sessions.touch(SessionId(2), at(5_000));
    assert_eq!(sessions.open[&SessionId(2)].expiry(1_000), Some(at(6_000)));
}

#[test]
fn the_task_form_follows_the_era_and_revision_and_tasks_off_means_none() {
    let mut sessions = Sessions::default();
    let mut stateless = Session::new(true, at(0));
    stateless.era = Era::Stateless;
    let mut experimental = Session::new(true, at(0));
    experimental.protocol_version = Some("2025-11-25".into());
    let mut older = Session::new(true, at(0));
    older.protocol_version = Some("2025-06-18".into());
    for (id, s) in [(1, stateless), (2, experimental), (3, older)] {
        sessions.open.insert(SessionId(id), s);
    }
    let on = Tasks::default();
    assert!(on.max_tasks > 0);
    let forms: Vec<_> = (1..=4).map(|id| sessions.task_form(SessionId(id), &on)).collect();
    assert_eq!(forms, [Some(Form::Extension), Some(Form::Experimental), None, None]);
    let off = Tasks { max_tasks: 0, ..Tasks::default() };
    assert_eq!(sessions.task_form(SessionId(1), &off), None);
}
