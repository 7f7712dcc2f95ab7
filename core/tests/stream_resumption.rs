//! Scenarios of a Streamable HTTP backend whose SSE streams end early (SEP-1699):
//! a POST's stream that ends before its response is resumed with a GET carrying
//! `Last-Event-ID` after the server's `retry` delay, and the response reaches the
//! waiting client once; the standalone GET stream is reopened whenever it drops;
//! a refused resumption (404) repairs the session; resumptions that keep failing
//! end in a clean error. Pinned as transcripts, checked with assertions.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::{Action, Failure, Input, Status, StreamRef};

/// `web` online with tool `search`, and a ready client.
fn web_online() -> Sim {
    let mut sim = Sim::new(one_http());
    sim.boot("web", &["search"]);
    sim.client_init();
    sim
}

/// The host reports that `stream` of `web` ended.
fn ended(
    sim: &mut Sim,
    stream: StreamRef,
    last_event_id: Option<&str>,
    retry_ms: Option<u64>,
    events: u32,
    failure: Option<Failure>,
) {
    let generation = sim.gen("web");
    sim.input(Input::StreamEnded {
        server: "web".into(),
        generation,
        stream,
        last_event_id: last_event_id.map(String::from),
        retry_ms,
        events,
        failure,
    });
}

/// An SSE event with an id of its own, on `stream` of `web`.
fn event(sim: &mut Sim, stream: StreamRef, id: &str, frame: Value) {
    let generation = sim.gen("web");
    sim.input(Input::BackendEvent {
        server: "web".into(),
        generation,
        stream,
        event_id: Some(id.into()),
        frame: frame.to_string(),
    });
}

/// Resumptions asked for so far, as (time, stream, Last-Event-ID).
fn resumes(sim: &Sim) -> Vec<(u64, StreamRef, Option<String>)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::ResumeStream { stream, last_event_id, .. } => Some((*at, *stream, last_event_id.clone())),
            _ => None,
        })
        .collect()
}

/// What `web`'s status says now.
fn last_status(sim: &Sim) -> tether_core::BackendStatus {
    sim.gw.status("web").unwrap()
}

/// Log messages the client received.
fn log_messages(sim: &Sim) -> Vec<Value> {
    sim.client_frames().into_iter().filter(|f| f["method"] == "notifications/message").collect()
}

fn log_frame(text: &str) -> Value {
    json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":text}})
}

#[test]
fn a_post_stream_that_ends_early_is_resumed_after_the_retry_hint_and_answered_once() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.call(1, "web__search");
    let id = sim.last_request("web", "tools/call");
    let stream = StreamRef::Request(id);
    sim.note("the call's POST stream brings a log message (event e1), then the server ends it before the response");
    event(&mut sim, stream, "e1", log_frame("working"));
    ended(&mut sim, stream, Some("e1"), Some(500), 1, None);
    let closed_at = sim.now;
    assert!(sim.responses_for(1).is_empty(), "the client keeps waiting");
    sim.advance(499);
    assert!(resumes(&sim).is_empty(), "resumed before the server's retry delay");
    sim.note("exactly the server's 500 ms later: a GET with Last-Event-ID e1");
    sim.advance(1);
    assert_eq!(resumes(&sim), [(closed_at + 500, stream, Some("e1".to_string()))]);
    sim.note("the resumed stream replays e1 (dropped), then brings the response as e2");
    event(&mut sim, stream, "e1", log_frame("working"));
    event(&mut sim, stream, "e2", json!({"jsonrpc":"2.0","id":id,"result":text_result("found")}));
    assert_eq!(sim.response(1)["result"], text_result("found"));
    assert_eq!(log_messages(&sim).len(), 1, "the replayed log message was delivered twice");
    sim.note("the host reports the end of the resumed stream: nothing more to do");
    ended(&mut sim, stream, Some("e2"), Some(500), 1, None);
    sim.advance(60_000);
    assert_eq!(resumes(&sim).len(), 1);
    assert_eq!(sim.status("web"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn the_standalone_stream_is_reopened_after_the_retry_hint_whenever_it_drops() {
    let mut sim = web_online();
    sim.advance(1000);
    let changed = json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"});
    sim.note("the standalone GET stream brings a list change (event g1), then the load balancer cuts it");
    event(&mut sim, StreamRef::Standalone, "g1", changed.clone());
    sim.answer_tools("web", &["search", "fetch"]);
    ended(&mut sim, StreamRef::Standalone, Some("g1"), Some(2500), 1, Some(Failure::Reset));
    let dropped_at = sim.now;
    sim.advance(2499);
    assert!(resumes(&sim).is_empty());
    sim.advance(1);
    assert_eq!(resumes(&sim), [(dropped_at + 2500, StreamRef::Standalone, Some("g1".to_string()))]);
    sim.note("the reopened stream replays g1 (dropped: no second discovery), then ends cleanly");
    let lists = sim.requests_to("web", "tools/list").len();
    event(&mut sim, StreamRef::Standalone, "g1", changed);
    assert_eq!(sim.requests_to("web", "tools/list").len(), lists, "a replayed list change was acted on");
    ended(&mut sim, StreamRef::Standalone, None, None, 0, None);
    let ended_at = sim.now;
    sim.note("no new hint: the last one (2500 ms) holds, and the last event id too");
    sim.advance(2500);
    assert_eq!(resumes(&sim)[1], (ended_at + 2500, StreamRef::Standalone, Some("g1".to_string())));
    sim.note("this time the server answers 405: it has no GET stream any more, so it stays closed");
    ended(&mut sim, StreamRef::Standalone, Some("g1"), None, 0, Some(Failure::Http { status: 405 }));
    sim.advance(60_000);
    assert_eq!(resumes(&sim).len(), 2);
    assert_eq!(sim.status("web"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_resumption_refused_with_404_reinitializes_and_resends_the_call() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.call(1, "web__search");
    let id = sim.last_request("web", "tools/call");
    let gen1 = sim.gen("web");
    ended(&mut sim, StreamRef::Request(id), Some("e1"), Some(500), 0, None);
    sim.advance(500);
    assert_eq!(resumes(&sim).len(), 1);
    sim.note("the server restarted meanwhile: the resuming GET gets HTTP 404 for the session");
    ended(&mut sim, StreamRef::Request(id), None, None, 0, Some(Failure::Http { status: 404 }));
    assert_eq!(sim.gen("web"), gen1.next(), "a fresh session at once");
    assert!(sim.responses_for(1).is_empty(), "the client is not bothered");
    sim.boot("web", &["search"]);
    let calls = request_times(&sim, "web", "tools/call");
    assert_eq!(calls.len(), 2, "resent exactly once on the fresh session");
    reply(&mut sim, "web", calls[1].1, text_result("found"));
    assert_eq!(sim.response(1)["result"], text_result("found"));
    assert_eq!(sim.status("web"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn resumptions_that_keep_failing_end_the_call_with_a_clear_error() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.call(1, "web__search");
    let id = sim.last_request("web", "tools/call");
    let stream = StreamRef::Request(id);
    sim.note("the POST stream ends before the response, without a retry hint: tether's own backoff");
    ended(&mut sim, stream, Some("e1"), None, 0, None);
    let mut waits = Vec::new();
    for attempt in 1..=5u32 {
        let (before, last) = (resumes(&sim).len(), sim.now);
        while resumes(&sim).len() == before {
            sim.advance(10);
            assert!(sim.now - last < 40_000, "resumption {attempt} never came");
        }
        let (at, s, last_id) = resumes(&sim).last().cloned().unwrap();
        assert_eq!((s, last_id.as_deref()), (stream, Some("e1")));
        waits.push(at - last);
        sim.note(&format!("resumption {attempt} is refused (connection refused)"));
        ended(&mut sim, stream, None, None, 0, Some(Failure::Refused));
    }
    for (i, wait) in waits.iter().enumerate() {
        let base = 1000u64 << i;
        assert!((base - base / 10..=base + base / 10 + 10).contains(wait), "wait {i}: {wait} ms, base {base}");
    }
    let err = error_of(&sim, 1);
    assert_eq!(err["code"], -32001);
    let message = err["message"].as_str().unwrap();
    assert!(message.contains("failed 6 times in a row: connection refused"), "{message}");
    sim.note("refused every time: the backend is unreachable, and its status says so");
    let status = last_status(&sim);
    assert_eq!(status.status, Status::Offline);
    assert_eq!(status.last_error.as_deref(), Some("connection refused (https://web.example)"));
    assert!(status.next_retry_ms.is_some(), "a reconnection is scheduled");
    assert_eq!(err["data"]["status"], "offline", "{err}");
    sim.advance(60_000);
    assert_eq!(resumes(&sim).len(), 5, "no resumption after the call failed");
    assert_eq!(sim.responses_for(1).len(), 1);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_post_stream_without_event_ids_cannot_be_resumed_and_fails_as_before() {
    let mut sim = web_online();
    sim.call(1, "web__search");
    let id = sim.last_request("web", "tools/call");
    ended(&mut sim, StreamRef::Request(id), None, Some(500), 0, None);
    assert!(resumes(&sim).is_empty());
    assert!(error_of(&sim, 1)["message"].as_str().unwrap().contains("connection reset"));
}

#[test]
fn resumptions_that_only_replay_what_was_seen_are_no_progress() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.call(1, "web__search");
    let id = sim.last_request("web", "tools/call");
    let stream = StreamRef::Request(id);
    event(&mut sim, stream, "e1", log_frame("working"));
    ended(&mut sim, stream, Some("e1"), Some(100), 1, None);
    sim.note("every resumption replays e1 and ends again without the response");
    for _ in 0..10 {
        let before = resumes(&sim).len();
        sim.advance(100);
        if resumes(&sim).len() == before {
            break;
        }
        event(&mut sim, stream, "e1", log_frame("working"));
        ended(&mut sim, stream, Some("e1"), Some(100), 1, None);
    }
    assert_eq!(resumes(&sim).len(), 5, "replays alone never reset the bound");
    let err = error_of(&sim, 1);
    assert!(err["message"].as_str().unwrap().contains("ended 6 times in a row"), "{err}");
    sim.note("the server is reachable and ends streams on purpose: online, with the failure as its last error");
    let status = last_status(&sim);
    assert_eq!(status.status, Status::Online);
    let last_error = status.last_error.unwrap_or_default();
    assert!(last_error.contains("ended 6 times in a row without bringing anything"), "{last_error}");
    assert_eq!(log_messages(&sim).len(), 1);
    sim.note("a resumption that brings something new does reset it");
    sim.call(2, "web__search");
    let id = sim.last_request("web", "tools/call");
    let stream = StreamRef::Request(id);
    ended(&mut sim, stream, Some("f0"), Some(100), 0, None);
    for n in 1..=8 {
        sim.advance(100);
        event(&mut sim, stream, &format!("f{n}"), log_frame("more"));
        ended(&mut sim, stream, Some(&format!("f{n}")), Some(100), 1, None);
    }
    assert!(sim.responses_for(2).is_empty(), "a stream that keeps bringing news is resumed on");
}

#[test]
fn a_standalone_stream_that_cannot_be_reopened_shows_in_the_status() {
    let mut sim = web_online();
    sim.advance(1000);
    sim.note("the server ends the GET stream at once, every time, with nothing on it");
    for _ in 0..10 {
        ended(&mut sim, StreamRef::Standalone, None, Some(100), 0, None);
        sim.advance(100);
    }
    assert_eq!(resumes(&sim).len(), 5);
    let status = last_status(&sim);
    assert_eq!(status.status, Status::Online, "calls still work");
    let last_error = status.last_error.unwrap_or_default();
    assert!(last_error.contains("stream of server messages ended 6 times"), "{last_error}");
    sim.note("on a later connection the GET stream is refused in transport, every time");
    let mut sim = web_online();
    sim.advance(1000);
    let generation = sim.gen("web");
    ended(&mut sim, StreamRef::Standalone, None, None, 0, Some(Failure::Reset));
    for _ in 0..5 {
        let before = resumes(&sim).len();
        while resumes(&sim).len() == before {
            sim.advance(10);
        }
        ended(&mut sim, StreamRef::Standalone, None, None, 0, Some(Failure::Refused));
    }
    let status = last_status(&sim);
    assert_eq!(status.status, Status::Offline);
    assert_eq!(status.last_error.as_deref(), Some("connection refused (https://web.example)"));
    sim.note("the reconnection that follows reopens it");
    sim.advance(status.next_retry_ms.unwrap());
    assert!(sim.gen("web") > generation, "a new connection was made");
}
