//! The era bridge on its own: gathering, the bound, retries by their own
//! identity, outcomes that wait for the retry, orphans, and rounds.

use super::*;
use crate::gateway::calls::ClientCall;
use crate::io::{Generation, RawId};
use serde_json::Value;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn input(generation: u64, backend_id: &str, method: &str) -> AskedInput {
    AskedInput {
        generation: Generation(generation),
        backend_id: backend_id.into(),
        method: method.into(),
        params: None,
        in_round: false,
    }
}

fn pending(call: u64, session: u64, principal: Option<&str>) -> PendingInput {
    let mut asked = BTreeMap::new();
    asked.insert("k".to_string(), input(1, "\"k\"", "sampling/createMessage"));
    PendingInput {
        call,
        server: "s".into(),
        session: SessionId(session),
        client_id: RawId::new(format!("awaiting input {call}")),
        asked,
        answer: None,
        deadline: at(10_000),
        principal: principal.map(String::from),
    }
}

fn round(server: &str, session: u64, id: &str, keys: &[(&str, &str)]) -> InputRound {
    InputRound {
        server: server.into(),
        call: ClientCall::for_test(session, id),
        request_state: Some("\"theirs\"".into()),
        asked: keys.iter().map(|(k, m)| (k.to_string(), m.to_string())).collect(),
        answers: BTreeMap::new(),
        deadline: at(5_000),
    }
}

#[test]
fn requests_asked_together_gather_into_one_round_with_one_deadline() {
    let mut eras = EraBridge::default();
    let first = eras.ask(9, None, "s".into(), "a".into(), input(1, "\"a\"", "roots/list"), 4, at(50));
    let second = eras.ask(9, None, "s".into(), "b".into(), input(1, "\"b\"", "sampling/createMessage"), 4, at(60));
    assert_eq!((first, second), (Asked::Gathering, Asked::Joined));
    assert!(eras.key_taken(9, None, "a") && !eras.key_taken(9, None, "c") && !eras.key_taken(8, None, "a"));
    assert_eq!(eras.timers().collect::<Vec<_>>(), [(at(50), BridgeTimer::Gathered(9))]);
    let gathered = eras.take_gathering(9).unwrap();
    assert_eq!(gathered.asked.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert!(eras.is_empty());
}

#[test]
fn the_bound_counts_gatherings_and_parked_calls_and_refuses_at_it_not_before() {
    let mut eras = EraBridge::default();
    eras.park("s1".into(), pending(1, 1, None));
    assert_eq!(eras.ask(2, None, "s".into(), "a".into(), input(1, "1", "roots/list"), 2, at(50)), Asked::Gathering);
    // Two wait with a limit of two: a third call's request is refused...
    assert_eq!(eras.ask(3, None, "s".into(), "a".into(), input(1, "2", "roots/list"), 2, at(50)), Asked::Full);
    // ...but more requests of calls already waiting still join.
    assert_eq!(eras.ask(2, None, "s".into(), "b".into(), input(1, "3", "roots/list"), 2, at(50)), Asked::Joined);
    assert_eq!(eras.ask(1, Some("s1"), "s".into(), "b".into(), input(1, "4", "roots/list"), 2, at(50)), Asked::Joined);
    assert!(eras.key_taken(1, Some("s1"), "b"));
}

#[test]
fn a_retry_is_taken_once_and_only_by_the_identity_that_was_asked() {
    let mut eras = EraBridge::default();
    eras.park("st".into(), pending(1, 1, Some("alice")));
    assert!(eras.holds("st"));
    assert!(eras.take_for_retry("st", Some("mallory")).is_none());
    assert!(eras.take_for_retry("st", None).is_none());
    assert!(eras.holds("st"), "a stranger's attempt leaves the state usable by its owner");
    assert_eq!(eras.take_for_retry("st", Some("alice")).unwrap().call, 1);
    assert!(eras.take_for_retry("st", Some("alice")).is_none(), "single use");
    // Created without an identity (stdio, no tokens): anyone who holds the state.
    eras.park("open".into(), pending(2, 1, None));
    assert!(eras.take_for_retry("open", Some("bob")).is_some());
}

#[test]
fn the_first_outcome_waits_for_the_retry_and_a_later_one_does_not_replace_it() {
    let mut eras = EraBridge::default();
    eras.park("st".into(), pending(1, 4, None));
    assert!(eras.awaits_retry(SessionId(4), "awaiting input 1"));
    eras.hold_answer(SessionId(4), "awaiting input 1", Ok("{\"ok\":1}".into()));
    eras.hold_outcome("st", Err("late".into()));
    assert_eq!(eras.take_for_retry("st", None).unwrap().answer, Some(Ok("{\"ok\":1}".into())));
}

#[test]
fn orphans_are_entries_without_an_outcome_whose_call_no_longer_waits() {
    let mut eras = EraBridge::default();
    eras.park("a".into(), pending(1, 1, None));
    eras.park("b".into(), pending(2, 1, None));
    eras.park("c".into(), pending(3, 1, None));
    eras.hold_outcome("c", Ok("{}".into()));
    // Call 1 still waits under "a"; call 2 is gone; call 3 is gone but answered.
    let orphans = eras.take_orphans(|call, state| call == 1 && state == "a");
    assert_eq!(orphans.iter().map(|p| p.call).collect::<Vec<_>>(), [2]);
    assert!(eras.holds("a") && !eras.holds("b") && eras.holds("c"));
    assert!(eras.check_invariants(8, |call, state| call == 1 && state == "a", |_| true).is_ok());
    assert!(eras.check_invariants(2, |call, state| call == 1 && state == "a", |_| true).is_ok());
    assert!(eras.check_invariants(1, |call, state| call == 1 && state == "a", |_| true).is_err());
    assert!(eras.take_expired("a").is_some() && eras.take_expired("a").is_none());
}

#[test]
fn a_round_completes_with_its_last_answer_and_a_cancelled_elicitation_counts_as_one() {
    let mut eras = EraBridge::default();
    eras.open_round(5, round("s", 1, "7", &[("e", "elicitation/create"), ("r", "roots/list")]));
    assert!(matches!(eras.answer_round(5, "e", Err("cannot show it")), RoundAnswer::Waiting));
    assert!(eras.has_round(5));
    let RoundAnswer::Complete(done) = eras.answer_round(5, "r", Ok("{\"roots\":[]}")) else { panic!("complete") };
    assert_eq!(done.answers["e"], r#"{"action":"cancel"}"#);
    assert_eq!(done.answers["r"], r#"{"roots":[]}"#);
    assert!(!eras.has_round(5) && matches!(eras.answer_round(5, "r", Ok("{}")), RoundAnswer::Waiting));
}

#[test]
fn a_refused_input_ends_the_round_and_names_the_method() {
    let mut eras = EraBridge::default();
    eras.open_round(5, round("s", 1, "7", &[("m", "sampling/createMessage"), ("r", "roots/list")]));
    let RoundAnswer::Refused { round, method } = eras.answer_round(5, "m", Err("no")) else { panic!("refused") };
    assert_eq!((method.as_str(), round.call.id.as_str()), ("sampling/createMessage", "7"));
    assert!(!eras.has_round(5));
}

#[test]
fn rounds_are_found_by_call_ended_by_backend_and_dropped_with_their_session() {
    let mut eras = EraBridge::default();
    eras.open_round(1, round("a", 1, "x", &[("k", "roots/list")]));
    eras.open_round(2, round("b", 1, "y", &[("k", "roots/list")]));
    eras.open_round(3, round("a", 2, "x", &[("k", "roots/list")]));
    assert_eq!((eras.round_of(SessionId(2), "x"), eras.round_of(SessionId(2), "y")), (Some(3), None));
    assert!(eras.check_invariants(8, |_, _| true, |s| s == SessionId(1)).is_err(), "session 2 is closed");
    let ended: Vec<u64> = eras.take_rounds_of("a").into_iter().map(|(id, _)| id).collect();
    assert_eq!(ended, [1, 3]);
    eras.drop_session(SessionId(1));
    assert!(eras.is_empty());
}

#[test]
fn input_required_lists_each_request_under_its_key_with_the_state() {
    let mut asked = BTreeMap::new();
    let mut sampling = input(1, "4", "sampling/createMessage");
    sampling.params = Some(r#"{"maxTokens":5}"#.into());
    asked.insert("tether-4".to_string(), sampling);
    asked.insert("r\"1".to_string(), input(1, "\"r\\\"1\"", "roots/list"));
    let result: Value = serde_json::from_str(&input_required_result(&asked, "st")).unwrap();
    let expected = serde_json::json!({
        "resultType": "input_required",
        "inputRequests": {
            "r\"1": {"method": "roots/list"},
            "tether-4": {"method": "sampling/createMessage", "params": {"maxTokens": 5}},
        },
        "requestState": "st",
    });
    assert_eq!(result, expected);
}

#[test]
fn refusals_cancel_elicitations_err_the_rest_and_skip_other_connections_and_round_inputs() {
    let mut round_input = input(2, "\"k\"", "sampling/createMessage");
    round_input.in_round = true;
    let asked = [
        input(2, "1", "elicitation/create"),
        input(2, "2", "sampling/createMessage"),
        input(1, "3", "roots/list"),
        round_input,
    ];
    let frames = refusals(asked.iter(), Some(Generation(2)), "too late");
    assert_eq!(frames.len(), 2);
    let first: Value = serde_json::from_str(&frames[0]).unwrap();
    let second: Value = serde_json::from_str(&frames[1]).unwrap();
    assert_eq!((first["id"].clone(), first["result"]["action"].clone()), (1.into(), "cancel".into()));
    assert_eq!((second["id"].clone(), second["error"]["message"].clone()), (2.into(), "too late".into()));
    assert!(refusals(asked.iter(), None, "gone").is_empty(), "a removed backend gets nothing");
}
