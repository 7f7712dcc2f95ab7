//! Malformed and hostile frames from clients and backends never panic the engine
//! and always get exactly the right JSON-RPC error.

mod support;

use serde_json::json;
use support::*;
use tether_core::{Action, Config, ServerConfig, Status, Transport};

fn code_of(sim: &Sim) -> i64 {
    sim.client_frames().last().unwrap()["error"]["code"].as_i64().unwrap()
}

#[test]
fn client_garbage_gets_the_right_error_once_each() {
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read"]);
    let cases: &[(&str, i64)] = &[
        ("{not json", -32700),
        ("", -32700),
        ("\u{0}\u{1}", -32700),
        ("[]", -32600),
        ("42", -32600),
        (r#"{"jsonrpc":"2.0"}"#, -32600),
        (r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, -32600),
        (r#"{"id":1,"method":"ping"}"#, -32600),
        (r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#, -32600),
        (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, -32600),
        (r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}"#, -32600),
        (r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#, -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":7}"#, -32600),
        (r#"{"jsonrpc":"2.0","id":2,"method":"no/such"}"#, -32601),
        (r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":[1]}"#, -32602),
        (r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}"#, -32602),
        (r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope"}}"#, -32602),
        (r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":42}}"#, -32602),
        (r#"{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"x"}}"#, -32602),
        (r#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"cursor":5}}"#, -32602),
    ];
    for (frame, code) in cases {
        let before = sim.client_frames().len();
        sim.client_raw(frame);
        assert_eq!(sim.client_frames().len(), before + 1, "exactly one answer to {frame:?}");
        assert_eq!(code_of(&sim), *code, "{frame:?}");
        if let Some(id) = serde_json::from_str::<serde_json::Value>(frame).ok().and_then(|f| f.get("id").cloned()) {
            let answer = sim.client_frames().pop().unwrap();
            assert_eq!(answer["id"], id, "the answer carries the id as written: {frame:?}");
        }
    }
    insta::assert_snapshot!(sim.log);
}

#[test]
fn oversize_frames_are_refused() {
    let mut config = one_stdio();
    config.limits.max_frame_bytes = 1024;
    let mut sim = Sim::new(config);
    sim.client_raw(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":"{}"}}}}"#, "a".repeat(2000)));
    assert_eq!(code_of(&sim), -32600);
}

/// At the frame bound exactly: a client frame of `max_frame_bytes` is served, one
/// byte more is refused (-32600); the same for a backend's frame (one byte more
/// is a protocol violation, the call still waiting for a real answer).
#[test]
fn frames_of_exactly_the_bound_pass_and_one_byte_more_does_not() {
    let mut config = one_stdio();
    config.limits.max_frame_bytes = 1024;
    let mut sim = Sim::new(config);
    sim.boot("fs", &["read"]);
    sim.client_init();
    let sized = |id: u64, len: usize| {
        let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"x":""#);
        let tail = r#""}}"#;
        format!("{head}{}{tail}", "a".repeat(len - head.len() - tail.len()))
    };
    let at = sized(41, 1024);
    assert_eq!(at.len(), 1024);
    sim.client_raw(&at);
    assert!(sim.response(41).get("result").is_some(), "{}", sim.response(41));
    sim.client_raw(&sized(42, 1025));
    assert_eq!(code_of(&sim), -32600, "answered under id null: an oversized frame is not read");

    sim.call(7, "fs__read");
    let id = sim.last_request("fs", "tools/call");
    let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#);
    let tail = r#""}]}}"#;
    let over = format!("{head}{}{tail}", "b".repeat(1025 - head.len() - tail.len()));
    assert_eq!(over.len(), 1025);
    sim.backend_raw("fs", &over);
    assert!(sim.responses_for(7).is_empty(), "a frame over the bound answers nothing");
    let fits = format!("{head}{}{tail}", "b".repeat(1024 - head.len() - tail.len()));
    sim.backend_raw("fs", &fits);
    assert_eq!(sim.responses_for(7).len(), 1);
}

#[test]
fn notifications_and_stray_responses_from_clients_get_no_answer() {
    let mut sim = Sim::new(one_stdio());
    sim.client(json!({"jsonrpc":"2.0","method":"notifications/whatever"}));
    sim.client(json!({"jsonrpc":"2.0","id":999,"result":{}}));
    sim.client(json!({"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}));
    assert!(sim.client_frames().is_empty());
}

#[test]
fn backend_garbage_is_ignored_and_reported() {
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.call(1, "fs__read");
    for frame in [
        "{garbage",
        "[]",
        r#"{"jsonrpc":"2.0","id":12345,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":"x","result":{}}"#,
        r#"{"jsonrpc":"2.0","id":null,"error":{}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"zzz"}}"#,
    ] {
        sim.backend_raw("fs", frame);
    }
    assert_eq!(sim.status("fs"), Status::Online);
    assert!(sim.responses_for(1).is_empty());
    let violations: Vec<String> = events(&sim)
        .into_iter()
        .filter_map(|(_, e)| match e {
            tether_core::Event::ProtocolViolation { server, detail } if &*server == "fs" => Some(detail),
            _ => None,
        })
        .collect();
    // Each bad frame is reported once, saying what was wrong (a stray progress
    // notification is not a violation: tokens may outlive their calls).
    assert_eq!(
        violations,
        [
            "parse error: key must be a string at line 1 column 2",
            "jsonrpc must be \"2.0\"",
            "response to unknown request id 12345",
            "response to unknown request id \"x\"",
            "response to unknown request id null",
        ]
    );
    let id = sim.last_request("fs", "tools/call");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{"content":[]}}));
    sim.response(1);
    // A second answer to the same id is not delivered twice.
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{"content":[]}}));
    sim.response(1);
}

#[test]
fn bad_initialize_answer_is_a_failed_connection_not_a_panic() {
    let mut sim = Sim::new(one_stdio());
    sim.answer("fs", "initialize", json!("not an object"));
    assert_eq!(sim.status("fs"), Status::Error);
    sim.advance(1000);
    assert_eq!(sim.status("fs"), Status::Connecting);
}

#[test]
fn a_backend_that_prints_its_secret_does_not_leak_it() {
    const SECRET: &str = "sk-planted-7f3a9c";
    let mut server = ServerConfig::stdio("fs-server", &[]);
    if let Transport::Stdio { env, .. } = &mut server.transport {
        env.insert("API_KEY".into(), SECRET.into());
    }
    let mut sim = Sim::new(Config::default().server("fs", server));
    sim.boot("fs", &["read"]);
    sim.client_init();
    sim.call(1, "fs__read");
    sim.stderr("fs", &format!("fatal: key {SECRET} rejected"));
    sim.exit("fs", Some(1));
    let mut outputs = Vec::new();
    for (_, action) in &sim.actions {
        match action {
            Action::SendToClient { frame, .. } => outputs.push(frame.clone()),
            Action::Emit { event } => outputs.push(format!("{event} {}", serde_json::to_string(event).unwrap())),
            _ => {}
        }
    }
    for status in sim.gw.statuses() {
        outputs.push(format!("{status:?}"));
    }
    let all = outputs.join("\n");
    assert!(all.contains("[redacted]"), "the crash message quotes the redacted stderr line:\n{all}");
    assert!(!all.contains(SECRET), "{all}");
    let trace_header = serde_json::to_string(&sim.gw.config().redacted()).unwrap();
    assert!(!trace_header.contains(SECRET));
}
