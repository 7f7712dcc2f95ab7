//! The task store on its own: bounds, endings, waiters, inputs and rounds.

use super::*;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn task(server: &str, created_ms: u64, owner: Option<SessionId>) -> Task {
    Task {
        server: server.into(),
        status: TaskStatus::Working,
        created_unix_ms: 1_000 + created_ms,
        updated_unix_ms: 1_000 + created_ms,
        created: at(created_ms),
        expires: at(created_ms + 60_000),
        ttl_ms: 60_000,
        outcome: None,
        asked: BTreeMap::new(),
        message: None,
        principal: None,
        owner,
        forwarded: BTreeSet::new(),
        waiters: Vec::new(),
        round: None,
    }
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

fn call() -> ClientCall {
    ClientCall { task: Some("a".into()), ..ClientCall::for_test(1, "7") }
}

fn store_with(ids: &[(&str, u64)]) -> TaskStore {
    let mut store = TaskStore::default();
    for (id, created) in ids {
        store.insert((*id).into(), task("s", *created, None));
    }
    store
}

#[test]
fn room_is_made_by_the_oldest_finished_task_never_a_running_one() {
    let mut store = store_with(&[("a", 0), ("b", 10), ("c", 20)]);
    assert!(!store.make_room(3), "all running: no room");
    store.finish("c", Ok("{}".into()), 1 << 20, 5).unwrap();
    store.finish("b", Ok("{}".into()), 1 << 20, 5).unwrap();
    assert!(store.make_room(3));
    assert!(!store.tasks.contains_key("b") && store.tasks.contains_key("c"), "the oldest finished went");
    assert_eq!(store.expiries.len(), 2, "the expiry index follows");
    assert!(store.make_room(3), "below the bound: nothing to drop");
}

#[test]
fn a_result_over_the_byte_bound_evicts_older_ones_then_becomes_an_error() {
    const LIMIT: u64 = 1024;
    let mut store = store_with(&[("old", 0), ("a", 10)]);
    store.finish("old", Ok("x".repeat(600)), LIMIT, 5).unwrap();
    assert_eq!(store.bytes, 600);
    let ended = store.finish("a", Ok("y".repeat(900)), LIMIT, 6).unwrap();
    assert_eq!(*ended.server, *"s");
    assert!(!store.tasks.contains_key("old"), "the older result made room");
    assert_eq!(store.tasks["a"].status, TaskStatus::Completed);
    assert_eq!(store.bytes, 900);

    // Too large even alone: an error says so, and the older result gives way to it too.
    let mut store = store_with(&[("old", 0), ("b", 10)]);
    store.finish("old", Ok("x".repeat(1000)), LIMIT, 5).unwrap();
    store.finish("b", Ok("z".repeat(1025)), LIMIT, 7).unwrap();
    let t = &store.tasks["b"];
    assert_eq!(t.status, TaskStatus::Failed);
    let error = t.outcome.clone().unwrap().unwrap_err();
    assert!(error.contains("tasks.max_result_bytes = 1024"), "{error}");
    assert!(!store.tasks.contains_key("old"));
    assert!(store.bytes <= LIMIT);
    store.check_invariants(&crate::config::Tasks { max_result_bytes: LIMIT, ..Default::default() }).unwrap();
    assert!(store.finish("b", Ok("again".into()), LIMIT, 8).is_none(), "a finished task finishes once");
}

#[test]
fn ending_a_task_hands_back_what_it_asked_unless_it_was_a_round() {
    let mut store = store_with(&[("a", 0), ("r", 1)]);
    store.ask("a", Some("k".into()), || unreachable!(), input(3, "41", "sampling/createMessage"), 9).unwrap();
    let ended = store.cancel("a", "cancelled by the client", 10).unwrap();
    assert_eq!(ended.unanswered.keys().collect::<Vec<_>>(), ["k"]);
    let t = &store.tasks["a"];
    assert_eq!((t.status, t.updated_unix_ms), (TaskStatus::Cancelled, 10));
    assert_eq!(t.message.as_deref(), Some("cancelled by the client"));
    assert!(t.asked.is_empty());
    assert!(store.cancel("a", "again", 11).is_none(), "a cancelled task is not cancelled again");

    let requests: Map<String, Value> = serde_json::from_str(r#"{"q":{"method":"elicitation/create"}}"#).unwrap();
    store.start_round("r", requests, Generation(3), &call(), None, 12).unwrap();
    let ended = store.finish("r", Err("{}".into()), 1 << 20, 13).unwrap();
    assert!(ended.unanswered.is_empty(), "a round's inputs are no backend requests");
    assert!(store.tasks["r"].round.is_none());
}

#[test]
fn sixteen_waiters_wait_the_seventeenth_is_refused_and_an_end_takes_them_all() {
    let mut store = store_with(&[("a", 0)]);
    for n in 0..MAX_WAITERS {
        assert!(store.wait_for("a", SessionId(n as u64 % 3), RawId::new(n.to_string())), "waiter {n}");
    }
    assert!(!store.wait_for("a", SessionId(9), RawId::new("17")));
    assert!(!store.wait_for("nope", SessionId(9), RawId::new("1")), "no such task");
    store.forget_waiters(SessionId(0));
    assert_eq!(store.tasks["a"].waiters.len(), MAX_WAITERS - 6, "session 0's six left");
    store.tasks.get_mut("a").unwrap().forwarded.insert("k".into());
    let waiters = store.take_waiters("a");
    assert_eq!(waiters.len(), MAX_WAITERS - 6);
    assert!(store.tasks["a"].waiters.is_empty() && store.tasks["a"].forwarded.is_empty());
}

#[test]
fn inputs_are_bounded_keyed_and_the_task_works_again_once_answered() {
    let mut store = store_with(&[("a", 0)]);
    store.tasks.get_mut("a").unwrap().owner = Some(SessionId(4));
    let asked = store.ask("a", Some("k".into()), || unreachable!(), input(1, "\"k\"", "roots/list"), 20).unwrap();
    assert_eq!(asked, Asked { changed: true, owner: Some(SessionId(4)) });
    let mut fresh = 0;
    let asked = store
        .ask(
            "a",
            Some("k".into()),
            || {
                fresh += 1;
                "tether-1".into()
            },
            input(1, "\"k\"", "roots/list"),
            21,
        )
        .unwrap();
    assert_eq!((asked.changed, fresh), (false, 1), "a key in use gets a fresh one");
    for n in 2..MAX_ASKED {
        store.ask("a", None, || alloc::format!("tether-{n}"), input(1, "1", "roots/list"), 22).unwrap();
    }
    assert!(store.ask("a", None, || "x".into(), input(1, "1", "roots/list"), 23).is_none(), "the 17th is refused");

    for key in store.tasks["a"].asked.keys().cloned().collect::<Vec<_>>() {
        let answered = store.input_answered("a", &key, Ok("{}"), 30).unwrap();
        assert!(!answered.in_round);
        assert_eq!(answered.resumed, store.tasks["a"].asked.is_empty());
    }
    assert_eq!(store.tasks["a"].status, TaskStatus::Working);
    assert_eq!(store.tasks["a"].updated_unix_ms, 30);
}

#[test]
fn update_answers_become_frames_for_the_asking_connection_only() {
    let mut store = store_with(&[("a", 0)]);
    store.ask("a", Some("new".into()), || unreachable!(), input(2, "5", "elicitation/create"), 1).unwrap();
    store.ask("a", Some("old".into()), || unreachable!(), input(1, "6", "elicitation/create"), 1).unwrap();
    store.ask("a", Some("bad".into()), || unreachable!(), input(2, "7", "elicitation/create"), 1).unwrap();
    let responses: Map<String, Value> =
        serde_json::from_str(r#"{"new":{"action":"accept"},"old":{"action":"accept"},"bad":3,"never":{}}"#).unwrap();
    let (server, frames) = store.answer_inputs("a", &responses, Some(Generation(2)), 40).unwrap();
    assert_eq!(*server, *"s");
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert!(frames.iter().any(|f| f.contains(r#""id":5"#) && f.contains("accept")), "{frames:?}");
    assert!(frames.iter().any(|f| f.contains(r#""id":7"#) && f.contains("not an object")), "{frames:?}");
    assert_eq!(store.tasks["a"].status, TaskStatus::Working, "nothing is asked any more");
}

#[test]
fn a_round_sends_its_call_again_with_every_answer_and_the_state() {
    let mut store = store_with(&[("a", 0)]);
    let requests: Map<String, Value> = serde_json::from_str(
        r#"{"q1":{"method":"elicitation/create","params":{"message":"name?"}},"q2":{"method":"roots/list"}}"#,
    )
    .unwrap();
    let owner = store.start_round("a", requests, Generation(1), &call(), Some(r#""st8""#.into()), 50).unwrap();
    assert_eq!(owner, None);
    assert_eq!(store.tasks["a"].status, TaskStatus::InputRequired);
    assert!(store.tasks["a"]
        .detailed("a", 500)
        .contains(r#""inputRequests":{"q1":{"method":"elicitation/create","params":{"message":"name?"}}"#));
    assert_eq!(
        store.input_answered("a", "q1", Ok(r#"{"action":"accept"}"#), 51),
        Some(Answered { in_round: true, resumed: false })
    );
    assert!(store.end_round("a").is_none(), "q2 is still missing");
    store.input_answered("a", "q2", Err("refused"), 52).unwrap();
    let (server, call) = store.end_round("a").unwrap();
    assert_eq!(*server, *"s");
    let body = call.params.body();
    assert!(body.contains(r#""inputResponses":{"q1":{"action":"accept"},"q2":{"action":"decline"}}"#), "{body}");
    assert!(body.contains(r#""requestState":"st8""#), "{body}");
    assert_eq!(store.tasks["a"].status, TaskStatus::Working);
    assert!(store.end_round("a").is_none(), "a round ends once");
}

#[test]
fn messages_name_the_fields_as_each_form_does() {
    let mut t = task("s", 0, None);
    t.message = Some("it \"broke\"".into());
    let ext = t.fields("id1", Form::Extension, 500);
    assert!(ext.starts_with(r#""taskId":"id1","status":"working","createdAt":"1970-01-01T00:00:01.000Z""#), "{ext}");
    assert!(ext.contains(r#""ttlMs":60000,"pollIntervalMs":500,"statusMessage":"it \"broke\"""#), "{ext}");
    let exp = t.fields("id1", Form::Experimental, 500);
    assert!(exp.contains(r#""ttl":60000,"pollInterval":500"#), "{exp}");
    t.outcome = Some(Ok(r#"{"content":[]}"#.into()));
    assert!(t.detailed("id1", 500).ends_with(r#","result":{"content":[]}}"#));
}

#[test]
fn only_the_creating_identity_reaches_a_task_that_has_one() {
    let mut t = task("s", 0, None);
    assert!(t.reachable_by(None) && t.reachable_by(Some("alice")), "no identity: the id is the key");
    t.principal = Some("alice".into());
    assert!(t.reachable_by(Some("alice")));
    assert!(!t.reachable_by(Some("bob")) && !t.reachable_by(None));
}

#[test]
fn a_session_lists_its_own_tasks_of_backends_it_sees_oldest_first() {
    let mut store = TaskStore::default();
    store.insert("late".into(), task("s", 20, Some(SessionId(1))));
    store.insert("early".into(), task("s", 10, Some(SessionId(1))));
    store.insert("hidden".into(), task("secret", 5, Some(SessionId(1))));
    store.insert("theirs".into(), task("s", 1, Some(SessionId(2))));
    let listed = store.listed(SessionId(1), |server| server != "secret", 500);
    let early = listed.find("\"early\"").unwrap();
    let late = listed.find("\"late\"").unwrap();
    assert!(early < late, "{listed}");
    assert!(!listed.contains("hidden") && !listed.contains("theirs"), "{listed}");
}

#[test]
fn a_smaller_configuration_gives_up_finished_tasks_first() {
    let mut store = store_with(&[("a", 0), ("b", 10), ("c", 20)]);
    store.finish("c", Ok("{}".into()), 1 << 20, 5).unwrap();
    assert_eq!(store.over_bounds(3, 1 << 20), None);
    assert_eq!(store.over_bounds(2, 1 << 20).as_deref(), Some("c"), "finished first");
    store.remove("c");
    assert_eq!(store.over_bounds(1, 1 << 20).as_deref(), Some("a"), "then the oldest");
    assert_eq!(store.over_bounds(5, 0), None, "no bytes kept once c is gone");
}

#[test]
fn a_passed_through_task_is_found_by_its_id_and_form_for_its_own_identity_while_its_backend_runs_tasks() {
    let mut store = TaskStore::default();
    store.passed.push_back(PassedTask {
        id: "tether-1".into(),
        server: "s".into(),
        own: "backend-9".into(),
        session: SessionId(1),
        principal: Some("alice".into()),
        form: Form::Experimental,
        task: "{}".into(),
    });
    let found = store.passed_task("tether-1", Form::Experimental, Some("alice"), |_| true);
    assert_eq!(found, Some(("s".into(), "backend-9".into())));
    assert_eq!(store.passed_task("tether-1", Form::Extension, Some("alice"), |_| true), None, "another form");
    assert_eq!(store.passed_task("tether-1", Form::Experimental, Some("bob"), |_| true), None, "another identity");
    assert_eq!(
        store.passed_task("tether-1", Form::Experimental, Some("alice"), |_| false),
        None,
        "no longer runs tasks"
    );
    // The backend's ids in what it sends become tether's; unknown ones stay.
    let message = r#"{"taskId":"backend-9","task":{"taskId":"other"},"status":"working"}"#;
    let renamed: Value = serde_json::from_str(&store.client_task_ids("s", message).unwrap()).unwrap();
    assert_eq!((renamed["taskId"].as_str(), renamed["task"]["taskId"].as_str()), (Some("tether-1"), Some("other")));
    assert!(store.client_task_ids("t", message).unwrap().contains("backend-9"), "another backend's id is not ours");
    let seen: Map<String, Value> =
        serde_json::from_str(r#"{"taskId":"tether-1","status":"completed","_meta":{}}"#).unwrap();
    store.note_passed_task(&seen);
    assert_eq!(store.passed[0].task, r#"{"status":"completed","taskId":"tether-1"}"#);
}
