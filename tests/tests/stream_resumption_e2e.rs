//! A Streamable HTTP backend that cuts its SSE streams at
//! random points (`mock-mcp --cut-streams SEED`) under concurrent calls loses
//! nothing and duplicates nothing. Every POST stream opens with a priming event
//! (`id`, `retry: 50`); about half are cut before their response, which then
//! arrives on the GET that resumes the stream with `Last-Event-ID` (with a few
//! already delivered events replayed, and the GET itself sometimes cut again).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::{free_port, on_both_runtimes, HttpMock, Runtime, Tether};

/// How many tool calls are made.
const CALLS: usize = 200;
/// How many are in flight at once.
const IN_FLIGHT: usize = 12;
/// Every fourth call is `progress` (two notifications, then the answer).
const PROGRESS_EVERY: usize = 4;
/// The longest the whole run may take.
const DEADLINE: Duration = Duration::from_secs(20);

/// What call `n` is expected to answer.
fn expected(n: usize) -> String {
    if n % PROGRESS_EVERY == 0 {
        "done 2 steps".to_string()
    } else {
        format!("call {n}")
    }
}

on_both_runtimes!(cut_streams_lose_and_duplicate_nothing);
/// 200 calls, 12 at a time, through a backend that cuts streams at random: every
/// call gets exactly one answer with its own result, its progress notifications
/// arrive once each and in order, and streams were really cut.
fn cut_streams_lose_and_duplicate_nothing(rt: Runtime) {
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let log_path = dir.path().join("mock.stderr");
    let log = std::fs::File::create(&log_path).expect("mock log");
    let web = HttpMock::start_with_stderr(port, &["--name", "web", "--cut-streams", "20"], log);
    let config = json!({
        "tether": { "list_changed_debounce_ms": 0 },
        "mcpServers": { "web": { "url": web.url() } },
    });
    let mut t = Tether::start_with(rt, config, &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"web__echo".to_string()), "{}", t.stderr_text());

    let started = Instant::now();
    let mut ids: HashMap<u64, usize> = HashMap::new();
    let mut next = 0;
    let mut answered = 0;
    let mut responses: Vec<Value> = Vec::new();
    while answered < CALLS {
        while next < CALLS && next - answered < IN_FLIGHT {
            let params = if next % PROGRESS_EVERY == 0 {
                json!({"name": "web__progress", "arguments": {"steps": 2, "ms": 5},
                       "_meta": {"progressToken": format!("p{next}")}})
            } else {
                json!({"name": "web__echo", "arguments": {"text": format!("call {next}")}})
            };
            ids.insert(t.send_request("tools/call", params), next);
            next += 1;
        }
        let left = DEADLINE.saturating_sub(started.elapsed());
        let Some(response) = t.wait_for(|f| f.get("method").is_none() && f.get("id").is_some(), left) else {
            panic!(
                "only {answered} of {CALLS} calls answered within {DEADLINE:?}\n{}\nmock: {}",
                t.stderr_text(),
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        };
        responses.push(response);
        answered += 1;
    }
    // Anything late (a duplicate) would show up now.
    t.collect_for(Duration::from_millis(500));
    responses.extend(t.take_inbox(|f| f.get("method").is_none() && f.get("id").is_some()));

    let mut seen: HashMap<u64, usize> = HashMap::new();
    for response in &responses {
        let id = response["id"].as_u64().unwrap_or_else(|| panic!("unexpected response {response}"));
        *seen.entry(id).or_default() += 1;
        let n = *ids.get(&id).unwrap_or_else(|| panic!("a response to no call: {response}"));
        assert_eq!(response["result"]["content"][0]["text"], expected(n), "call {n} (id {id}): {response}");
    }
    let duplicated: Vec<_> = seen.iter().filter(|(_, count)| **count > 1).collect();
    assert!(duplicated.is_empty(), "answered more than once: {duplicated:?}");
    assert_eq!(seen.len(), CALLS, "every call answered");

    let mut progress: HashMap<String, Vec<Value>> = HashMap::new();
    for note in t.take_inbox(|f| f["method"] == "notifications/progress") {
        let token = note["params"]["progressToken"].as_str().unwrap_or_default().to_string();
        progress.entry(token).or_default().push(note["params"]["progress"].clone());
    }
    for n in (0..CALLS).filter(|n| n % PROGRESS_EVERY == 0) {
        assert_eq!(progress.remove(&format!("p{n}")), Some(vec![json!(1), json!(2)]), "progress of call {n}");
    }
    assert!(progress.is_empty(), "progress for no call: {progress:?}");

    let mock_log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let cuts = mock_log.matches("cut-streams: cut ").count();
    let resumed_cuts = mock_log.matches("resumed GET").count();
    eprintln!("{rt}: {CALLS} calls, {cuts} cuts ({resumed_cuts} of resumed GETs) in {:?}", started.elapsed());
    assert!(cuts >= CALLS / 5, "too few cuts ({cuts}) to test anything:\n{mock_log}");
    web.stop();
}
