//! End-to-end scenarios: the real tether binaries, real `mock-mcp` backends (over
//! stdio and HTTP), and a client speaking MCP over tether's stdio. Each test walks
//! one documented failure path and checks what the client sees, what tether logs
//! and what the backend processes did.
//!
//! Every scenario runs against both runtimes (see `on_both_runtimes!`): the smol
//! runtime's `tether` and the plain-threads runtime's `tether-blocking`, which take
//! the same config files and flags and log the same lines. The tests are named
//! `<scenario>::smol` and `<scenario>::blocking`, so either half runs alone:
//!
//! ```sh
//! cargo test -p tether-tests --test e2e -- ::smol
//! cargo test -p tether-tests --test e2e -- ::blocking
//! ```
//!
//! Each binary is built on first use (`TETHER_BIN` / `TETHER_BLOCKING_BIN` test
//! another build instead). All scenarios here use stdio towards the client, which
//! both runtimes serve; HTTP *backends* are supported by both and tested on both.
//! What only the smol runtime has (serving HTTP, `--listen`) is tested in
//! http_serve.rs, against `tether` alone.
//!
//! Policies are shortened through the config's `tether` section so every scenario
//! runs in seconds. Waits are for frames and log lines, always bounded; time bounds
//! are generous, since these machines are slow and noisy.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::{
    free_port, mock_server, on_both_runtimes, process_exists, process_running, state_lines, wait_until, HttpMock,
    Runtime, Tether,
};

/// Long enough for anything that should happen "soon" on a loaded machine.
const SOON: Duration = Duration::from_secs(10);

/// Short resilience timings (each test adds or overrides what it needs).
fn fast_policy() -> Value {
    json!({
        "restart_delays_ms": [100, 200, 300],
        "reconnect_initial_ms": 100,
        "reconnect_max_ms": 500,
        "call_retry_delays_ms": [50, 100],
        "breaker_cooldown_ms": 1000,
    })
}

/// `fast_policy` with `extra`'s fields on top.
fn policy(extra: Value) -> Value {
    let mut p = fast_policy();
    for (k, v) in extra.as_object().expect("object") {
        p[k] = v.clone();
    }
    p
}

/// A Claude Desktop style config with a `tether` policy section.
/// List changes are told at once here (no 2 s window): these tests follow the
/// path end to end; the window itself is specified in `core/tests/meta_mode.rs`.
fn config(servers: Value, policy: Value) -> Value {
    json!({ "tether": { "policy": policy, "list_changed_debounce_ms": 0 }, "mcpServers": servers })
}

/// A stdio mock named `name` with extra flags.
fn mock(name: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--name", name];
    args.extend_from_slice(extra);
    mock_server(&args)
}

/// A mock that records every message it receives in `state`.
fn recording_mock(name: &str, state: &Path, extra: &[&str]) -> Value {
    let state = state.to_str().expect("utf-8 path");
    let mut args = vec!["--state-file", state];
    args.extend_from_slice(extra);
    mock(name, &args)
}

fn pid_of(t: &mut Tether, tool: &str) -> u32 {
    let text = t.call_text(tool, json!({}));
    text.parse().unwrap_or_else(|_| panic!("{tool} returned {text:?}"))
}

fn error_message(response: &Value) -> String {
    response["error"]["message"].as_str().unwrap_or_else(|| panic!("expected an error, got {response}")).to_string()
}

/// The log lines containing `needle`.
fn log_lines(t: &Tether, needle: &str) -> Vec<String> {
    t.stderr_text().lines().filter(|l| l.contains(needle)).map(String::from).collect()
}

/// Checks the log for what must never happen, whatever the scenario: a broken host
/// contract, a panic, an error-level line, a backend breaking the protocol.
fn assert_clean_log(log: &str) {
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("host contract violation")
                || l.contains("panicked")
                || l.contains(" ERROR ")
                || l.contains("protocol_violation")
        })
        .collect();
    assert!(bad.is_empty(), "unexpected log lines:\n{}", bad.join("\n"));
}

/// How many processes a mock with this state file has started (one `initialize` each).
fn initializes(state: &Path) -> usize {
    state_lines(state).iter().filter(|l| *l == "initialize").count()
}

on_both_runtimes!(crashed_backend_is_restarted_and_the_next_call_succeeds);
/// Scenario 1: A stdio backend crashes: the call in flight is told the backend disconnected,
/// tether restarts it, the next call runs on a new process, its tools stay listed,
/// and the client hears `tools/list_changed`.
fn crashed_backend_is_restarted_and_the_next_call_succeeds(rt: Runtime) {
    let mut t = Tether::start_with(rt, config(json!({ "fs": mock("fs", &[]) }), fast_policy()), &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"fs__pid".to_string()));
    let before = pid_of(&mut t, "fs__pid");

    let crashed = t.call("fs__crash", json!({}));
    let message = error_message(&crashed);
    assert!(message.contains("disconnected"), "crash error: {crashed}");
    assert_eq!(crashed["error"]["code"], -32001, "{crashed}");
    assert!(t.wait_log("server_status_changed fs: online -> error", SOON), "{}", t.stderr_text());

    let after = pid_of(&mut t, "fs__pid");
    assert_ne!(before, after, "the call after the crash must run on a new process");
    assert!(wait_until(SOON, || !process_exists(before)), "the crashed process {before} was not reaped");

    // Tools are listed again once the restarted process is rediscovered (a list
    // taken during the rediscovery omits them, and `list_changed` follows).
    assert!(t.wait_log_count("server_status_changed fs: discovering_tools -> online", 2, SOON), "{}", t.stderr_text());
    let tools = t.tool_names();
    for tool in ["fs__pid", "fs__crash", "fs__echo"] {
        assert!(tools.contains(&tool.to_string()), "{tool} missing after the restart: {tools:?}");
    }
    assert!(
        t.notification("notifications/tools/list_changed", SOON).is_some(),
        "no tools/list_changed after the crash and restart"
    );
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(first_safe_call_after_a_crash_succeeds);
/// Scenario 1b: The first call after a crash does not fail when it is safe to send
/// again: a read-only call that meets a dying process is resent to the fresh one.
fn first_safe_call_after_a_crash_succeeds(rt: Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fs.state");
    // Exits right after answering its first tool call.
    let servers = json!({ "fs": recording_mock("fs", &state, &["--crash-after", "1"]) });
    let mut t = Tether::start_with(rt, config(servers, fast_policy()), &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"fs__echo".to_string()));

    assert_eq!(t.call_text("fs__echo", json!({"text": "one"})), "one");
    // Sent at once: it meets the process while it dies, or the restart after.
    assert_eq!(t.call_text("fs__echo", json!({"text": "two"})), "two");
    assert!(t.wait_log("server_status_changed fs: online -> error", SOON), "{}", t.stderr_text());
    assert!(initializes(&state) >= 2, "{:?}", state_lines(&state));
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(backend_crashing_on_start_becomes_permanently_failed_with_its_stderr);
/// Scenario 2a: A backend that dies on start is restarted until the crash limit, then left
/// `permanently_failed` with its stderr as the reason; the gateway and the other
/// backend are unaffected.
fn backend_crashing_on_start_becomes_permanently_failed_with_its_stderr(rt: Runtime) {
    let servers = json!({
        "ok": mock("ok", &[]),
        "flaky": mock("flaky", &["--exit-on-start", "1", "--stderr", "boom: db locked"]),
    });
    let mut t = Tether::start_with(rt, config(servers, fast_policy()), &[]);
    let init = t.initialize();
    assert!(init["result"]["serverInfo"].is_object(), "initialize failed: {init}");

    assert!(t.wait_log("server_permanently_failed flaky crashes=3", SOON), "{}", t.stderr_text());
    // The status change is the next log line, a separate write: wait for it too.
    assert!(t.wait_log("flaky: connecting -> permanently_failed", SOON), "{}", t.stderr_text());
    let failed = log_lines(&t, "server_status_changed flaky: connecting -> permanently_failed");
    assert_eq!(failed.len(), 1, "{}", t.stderr_text());
    assert!(failed[0].contains("boom: db locked"), "the status message lacks the stderr tail: {}", failed[0]);

    // One dead backend does not take the gateway down.
    let tools = t.tool_names();
    assert!(tools.contains(&"ok__echo".to_string()), "{tools:?}");
    assert!(!tools.iter().any(|n| n.starts_with("flaky__")), "{tools:?}");
    assert_eq!(t.call_text("ok__echo", json!({"text": "still here"})), "still here");

    // Three processes, then no more restarts (the longest restart delay is 300 ms).
    let spawned = || log_lines(&t, "started").iter().filter(|l| l.contains("server=flaky")).count();
    assert_eq!(spawned(), 3, "{}", t.stderr_text());
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(spawned(), 3, "flaky was restarted after it was given up on");
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(crash_loop_ends_in_permanently_failed_and_calls_are_refused);
/// Scenario 2b: A backend that crashes on every call: after the third crash within the window
/// calls are refused with a message saying what to do, and no process is started any
/// more.
fn crash_loop_ends_in_permanently_failed_and_calls_are_refused(rt: Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("db.state");
    let servers = json!({ "db": recording_mock("db", &state, &["--crash-after", "0", "--stderr", "boom: db locked"]) });
    let mut t = Tether::start_with(rt, config(servers, fast_policy()), &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"db__pid".to_string()));

    for crash in 1..=3 {
        let r = t.call("db__pid", json!({}));
        assert!(error_message(&r).contains("disconnected"), "call {crash}: {r}");
    }
    assert!(t.wait_log("server_permanently_failed db crashes=3", SOON), "{}", t.stderr_text());
    // The status change is the next log line, a separate write: wait for it too.
    assert!(t.wait_log("-> permanently_failed", SOON), "{}", t.stderr_text());
    let failed = log_lines(&t, "-> permanently_failed");
    assert_eq!(failed.len(), 1, "{}", t.stderr_text());
    // The most telling line the process wrote: why it went down, whole.
    assert!(failed[0].contains("stderr: db: crashing after 0 tool calls (--crash-after))"), "{}", failed[0]);

    let refused = t.call("db__pid", json!({}));
    let message = error_message(&refused);
    assert!(message.contains("restart"), "the refusal should say to restart the backend: {refused}");
    assert_eq!(refused["error"]["data"]["status"], "permanently_failed", "{refused}");

    assert_eq!(initializes(&state), 3, "{:?}", state_lines(&state));
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(initializes(&state), 3, "processes kept being started: {:?}", state_lines(&state));
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(http_backend_down_then_up_reconnects);
/// Scenario 3: An HTTP backend goes away: calls fail after their retries with a structured
/// error; when it comes back on the same port, calls work again and tether logs
/// `server_reconnected`.
fn http_backend_down_then_up_reconnects(rt: Runtime) {
    let port = free_port();
    let web = HttpMock::start(port, &["--name", "web"]);
    let servers = json!({ "web": { "url": web.url() } });
    let mut t = Tether::start_with(rt, config(servers, fast_policy()), &[]);
    t.initialize();
    assert_eq!(t.call_text("web__echo", json!({"text": "up"})), "up");

    web.stop();
    let started = Instant::now();
    let down = t.call("web__echo", json!({"text": "anyone?"}));
    assert_eq!(down["error"]["code"], -32001, "{down}");
    let data = &down["error"]["data"];
    assert_eq!(data["server"], "web", "{down}");
    assert!(matches!(data["status"].as_str(), Some("offline" | "error")), "unexpected status in {down}");
    assert!(data.get("attempt").is_some() && data.get("next_retry_ms").is_some(), "{down}");
    // Two retries (50 ms and 100 ms) were made first.
    assert!(started.elapsed() >= Duration::from_millis(140), "answered before the retries: {:?}", started.elapsed());
    assert!(t.wait_log("server_status_changed web: online -> offline", SOON), "{}", t.stderr_text());

    let _web = HttpMock::start(port, &["--name", "web"]);
    let mut answer = None;
    let back = wait_until(SOON, || {
        let r = t.call("web__echo", json!({"text": "back"}));
        let ok = r["result"]["content"][0]["text"] == "back";
        answer = Some(r);
        ok
    });
    assert!(back, "calls did not work again: {answer:?}\n{}", t.stderr_text());
    assert!(t.wait_log("server_reconnected web", SOON), "{}", t.stderr_text());
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(an_http_answer_over_the_frame_bound_fails_the_call_at_once);
/// An HTTP backend answers a small call with a JSON body over `max_frame_bytes`:
/// the call fails at once saying so, not after its timeout, and the next call
/// (a small answer) works.
fn an_http_answer_over_the_frame_bound_fails_the_call_at_once(rt: Runtime) {
    let port = free_port();
    let web = HttpMock::start(port, &["--name", "web", "--pad-results", "200000"]);
    let servers = json!({ "web": { "url": web.url() } });
    let mut policy = fast_policy();
    policy["request_timeout_ms"] = json!(20_000);
    let mut config = config(servers, policy);
    config["tether"]["limits"] = json!({ "max_frame_bytes": 131_072 });
    let mut t = Tether::start_with(rt, config, &[]);
    t.initialize();
    let started = Instant::now();
    let big = t.call("web__echo", json!({"text": "big"}));
    assert!(started.elapsed() < Duration::from_secs(5), "waited {:?} for {big}", started.elapsed());
    assert!(big.get("error").is_some(), "{big}");
    assert!(big.to_string().contains("frame limit"), "says why: {big}");
}

on_both_runtimes!(breaker_opens_after_timeouts_and_a_probe_closes_it);
/// Scenario 4: Circuit breaker from the command-line flags: two timeouts open it, the next
/// call is refused at once, and after the cooldown a probe closes it.
fn breaker_opens_after_timeouts_and_a_probe_closes_it(rt: Runtime) {
    let p = json!({"restart_delays_ms": [100, 200, 300], "request_timeout_ms": 700});
    let mut t = Tether::start_with(
        rt,
        config(json!({ "fs": mock("fs", &[]) }), p),
        &["--failure-threshold", "2", "--cooldown", "1"],
    );
    t.initialize();
    assert!(t.tool_names().contains(&"fs__hang".to_string()));

    for n in 1..=2 {
        let r = t.call("fs__hang", json!({}));
        assert_eq!(r["error"]["code"], -32002, "hang {n}: {r}");
    }
    let opened_at = Instant::now();
    assert!(t.wait_log("circuit_opened fs cooldown_ms=1000", SOON), "{}", t.stderr_text());

    let asked = Instant::now();
    let refused = t.call("fs__echo", json!({"text": "x"}));
    assert!(error_message(&refused).contains("circuit breaker is open"), "{refused}");
    assert_eq!(refused["error"]["data"]["breaker"], "open", "{refused}");
    assert!(asked.elapsed() < Duration::from_secs(5), "a refusal should be immediate: {:?}", asked.elapsed());

    let mut last = None;
    let closed = wait_until(SOON, || {
        let r = t.call("fs__echo", json!({"text": "probe"}));
        let ok = r["result"]["content"][0]["text"] == "probe";
        last = Some(r);
        ok
    });
    assert!(closed, "no call succeeded after the cooldown: {last:?}");
    assert!(opened_at.elapsed() >= Duration::from_millis(500), "the breaker let a call through during its cooldown");
    assert!(t.wait_log("circuit_closed fs", SOON), "{}", t.stderr_text());
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(idle_backend_goes_dormant_and_the_next_call_respawns_it);
/// Scenario 5: An idle stdio backend is stopped (`dormant`), its tools stay listed, and the
/// next call respawns it without discovering its catalog again.
fn idle_backend_goes_dormant_and_the_next_call_respawns_it(rt: Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fs.state");
    let servers = json!({ "fs": recording_mock("fs", &state, &[]) });
    let mut t = Tether::start_with(rt, config(servers, policy(json!({"idle_timeout_ms": 800}))), &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"fs__pid".to_string()));
    let first = pid_of(&mut t, "fs__pid");
    t.take_inbox(|_| true);

    assert!(t.wait_log("server_status_changed fs: online -> dormant", SOON), "{}", t.stderr_text());
    assert!(wait_until(SOON, || !process_exists(first)), "the idle process {first} is still there");

    let tools = t.tool_names();
    assert!(tools.contains(&"fs__pid".to_string()), "a dormant backend's tools stay listed: {tools:?}");
    let second = pid_of(&mut t, "fs__pid");
    assert_ne!(first, second);
    assert!(process_running(second));

    let lines = state_lines(&state);
    let starts: Vec<usize> = lines.iter().enumerate().filter(|(_, l)| *l == "initialize").map(|(i, _)| i).collect();
    assert_eq!(starts.len(), 2, "{lines:?}");
    let respawned = &lines[starts[1]..];
    assert!(!respawned.iter().any(|l| l == "tools/list"), "the respawned process was asked for its tools: {lines:?}");
    assert!(respawned.iter().any(|l| l == "tools/call"), "{lines:?}");
    assert!(
        t.take_inbox(|f| f["method"] == "notifications/tools/list_changed").is_empty(),
        "going dormant and waking up changes nothing the client sees"
    );
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(timed_out_call_is_cancelled_at_the_backend);
/// Scenario 6: A call that never answers times out with -32002, and the backend is told
/// to cancel it.
fn timed_out_call_is_cancelled_at_the_backend(rt: Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fs.state");
    let servers = json!({ "fs": recording_mock("fs", &state, &[]) });
    let mut t = Tether::start_with(rt, config(servers, policy(json!({"request_timeout_ms": 500}))), &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"fs__hang".to_string()));

    let asked = Instant::now();
    let r = t.call("fs__hang", json!({}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(asked.elapsed() >= Duration::from_millis(450), "timed out early: {:?}", asked.elapsed());
    assert!(
        wait_until(SOON, || state_lines(&state).iter().any(|l| l == "notifications/cancelled")),
        "the backend never got notifications/cancelled: {:?}",
        state_lines(&state)
    );
    // The backend is still fine.
    assert_eq!(t.call_text("fs__echo", json!({"text": "ok"})), "ok");
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(calls_in_flight_fail_when_the_backend_disconnects);
/// Scenario 7: A backend dies with calls in flight: each gets exactly one error saying the
/// backend disconnected, at once rather than at its timeout.
fn calls_in_flight_fail_when_the_backend_disconnects(rt: Runtime) {
    let mut t = Tether::start_with(rt, config(json!({ "fs": mock("fs", &[]) }), fast_policy()), &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"fs__slow".to_string()));

    let asked = Instant::now();
    let slow = t.send_request("tools/call", json!({"name": "fs__slow", "arguments": {"ms": 20000}}));
    let crash = t.send_request("tools/call", json!({"name": "fs__crash", "arguments": {}}));
    for id in [slow, crash] {
        let r = t.response(id, SOON).unwrap_or_else(|| panic!("no response to #{id}\n{}", t.stderr_text()));
        assert!(error_message(&r).contains("disconnected"), "#{id}: {r}");
    }
    assert!(asked.elapsed() < Duration::from_secs(10), "the slow call waited: {:?}", asked.elapsed());

    t.collect_for(Duration::from_millis(1000));
    let extra = t.take_inbox(|f| f.get("method").is_none() && (f["id"] == json!(slow) || f["id"] == json!(crash)));
    assert!(extra.is_empty(), "more than one response per id: {extra:?}");
    // And the backend serves again.
    assert_eq!(t.call_text("fs__echo", json!({"text": "again"})), "again");
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(sighup_reloads_the_config);
/// Scenario 8: SIGHUP reloads the config differentially: a removed backend goes, a changed
/// one restarts with its new tools, an added one appears; the client is told. (The file
/// is not watched here, so only the signal can have reloaded it.)
fn sighup_reloads_the_config(rt: Runtime) {
    reloads_the_config(rt, &["--no-watch"], |t, config| t.reload(config));
}

on_both_runtimes!(editing_the_config_file_reloads_it);
/// Scenario 8 without a signal (as on Windows): writing the file is enough.
fn editing_the_config_file_reloads_it(rt: Runtime) {
    reloads_the_config(rt, &[], |t, config| t.write_config(config));
}

fn reloads_the_config(rt: Runtime, args: &[&str], reload: impl Fn(&Tether, &Value)) {
    let servers = json!({
        "a": mock("a", &["--tools", "echo"]),
        "b": mock("b", &["--tools", "echo,pid"]),
    });
    let mut t = Tether::start_with(rt, config(servers, fast_policy()), args);
    t.initialize();
    let mut names = t.tool_names();
    names.sort();
    assert_eq!(names, ["a__echo", "b__echo", "b__pid"]);
    let old_b = pid_of(&mut t, "b__pid");
    t.take_inbox(|_| true);

    let reloaded = json!({
        "b": mock("b", &["--tools", "echo,add"]),
        "c": mock("c", &["--tools", "echo"]),
    });
    reload(&t, &config(reloaded, fast_policy()));

    let expected = ["b__add", "b__echo", "c__echo"];
    let deadline = Instant::now() + SOON;
    let mut told = 0;
    loop {
        let mut names = t.tool_names();
        names.sort();
        if names == expected {
            break;
        }
        assert!(Instant::now() < deadline, "tools after the reload: {names:?}\n{}", t.stderr_text());
        told += usize::from(t.notification("notifications/tools/list_changed", Duration::from_millis(200)).is_some());
    }
    told += t.take_inbox(|f| f["method"] == "notifications/tools/list_changed").len();
    assert!(told > 0, "the client was not told its tools changed");
    assert!(t.wait_log("server_disconnected a intentional=true", SOON), "{}", t.stderr_text());
    assert!(wait_until(SOON, || !process_exists(old_b)), "b's old process {old_b} outlived the reload");
    assert_eq!(t.call_text("b__add", json!({"a": 2, "b": 3})), "5");
    assert_eq!(t.call_text("c__echo", json!({"text": "new"})), "new");
    let gone = t.call("a__echo", json!({"text": "x"}));
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    assert_eq!(t.stderr_text().matches("reloading ").count(), 1, "one reload:\n{}", t.stderr_text());
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(the_config_chooses_and_renames_tools);
/// A server's `tether.tools` section: a denied tool is neither listed nor callable, a
/// renamed one is served under its new name and description and still reaches the
/// backend; editing the section takes effect without restarting the backend.
fn the_config_chooses_and_renames_tools(rt: Runtime) {
    let chosen = |tools: Value| {
        let mut entry = mock("fs", &["--tools", "echo,add,pid"]);
        entry["tether"] = json!({ "tools": tools });
        config(json!({ "fs": entry }), fast_policy())
    };
    let tools = json!({"deny": ["add"], "override": {"echo": {"name": "say", "description": "Say it back."}}});
    let mut t = Tether::start_with(rt, chosen(tools), &[]);
    t.initialize();
    let mut names = t.tool_names();
    names.sort();
    assert_eq!(names, ["fs__pid", "fs__say"]);
    assert_eq!(t.call_text("fs__say", json!({"text": "hi"})), "hi");
    let hidden = t.call("fs__add", json!({"a": 1, "b": 2}));
    assert!(hidden["error"]["message"].as_str().unwrap_or("").contains("hides it"), "{hidden}");
    let pid = pid_of(&mut t, "fs__pid");

    t.write_config(&chosen(json!({})));
    let deadline = Instant::now() + SOON;
    loop {
        let mut names = t.tool_names();
        names.sort();
        if names == ["fs__add", "fs__echo", "fs__pid"] {
            break;
        }
        assert!(Instant::now() < deadline, "tools after the edit: {names:?}\n{}", t.stderr_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(t.call_text("fs__add", json!({"a": 1, "b": 2})), "3");
    assert_eq!(pid_of(&mut t, "fs__pid"), pid, "the backend was not restarted");
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(progress_passes_through_with_the_clients_token);
/// Scenario 9a: Progress notifications pass through with the client's own token, before
/// the result.
fn progress_passes_through_with_the_clients_token(rt: Runtime) {
    let mut t = Tether::start_with(rt, config(json!({ "fs": mock("fs", &[]) }), fast_policy()), &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"fs__progress".to_string()));
    t.take_inbox(|_| true);

    let r = t.request(
        "tools/call",
        json!({"name": "fs__progress", "arguments": {"steps": 3, "ms": 100}, "_meta": {"progressToken": "p1"}}),
    );
    assert_eq!(r["result"]["content"][0]["text"], "done 3 steps", "{r}");
    let progress = t.take_inbox(|f| f["method"] == "notifications/progress");
    assert_eq!(progress.len(), 3, "{progress:?}");
    for (i, p) in progress.iter().enumerate() {
        assert_eq!(p["params"]["progressToken"], "p1", "{p}");
        assert_eq!(p["params"]["progress"], i + 1, "{p}");
        assert_eq!(p["params"]["total"], 3, "{p}");
    }
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(client_cancellation_reaches_the_backend_and_nothing_answers);
/// Scenario 9b: A client's cancellation reaches the backend, and the cancelled request gets
/// no response.
fn client_cancellation_reaches_the_backend_and_nothing_answers(rt: Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fs.state");
    let mut t = Tether::start_with(rt, config(json!({ "fs": recording_mock("fs", &state, &[]) }), fast_policy()), &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"fs__slow".to_string()));

    let id = t.send_request("tools/call", json!({"name": "fs__slow", "arguments": {"ms": 5000}}));
    assert!(wait_until(SOON, || state_lines(&state).iter().any(|l| l == "tools/call")), "the call never arrived");
    let cancel = json!({"requestId": id, "reason": "changed my mind"});
    t.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}));
    assert!(
        wait_until(SOON, || state_lines(&state).iter().any(|l| l == "notifications/cancelled")),
        "the backend never got notifications/cancelled: {:?}",
        state_lines(&state)
    );
    let answer = t.response(id, Duration::from_millis(1200));
    assert!(answer.is_none(), "a cancelled request was answered: {answer:?}");
    assert_eq!(t.call_text("fs__echo", json!({"text": "after"})), "after");
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(sampling_request_is_routed_to_the_client_and_back);
/// Scenario 10: A backend's `sampling/createMessage` is routed to the client whose call
/// caused it, and the client's answer back to the backend.
fn sampling_request_is_routed_to_the_client_and_back(rt: Runtime) {
    let mut t = Tether::start_with(rt, config(json!({ "fs": mock("fs", &[]) }), fast_policy()), &[]);
    t.initialize();
    assert!(t.tool_names().contains(&"fs__sample".to_string()));

    let id = t.send_request("tools/call", json!({"name": "fs__sample", "arguments": {"prompt": "six times seven?"}}));
    let ask = t
        .wait_for(|f| f["method"] == "sampling/createMessage" && f.get("id").is_some(), SOON)
        .unwrap_or_else(|| panic!("no sampling request\n{}", t.stderr_text()));
    assert_eq!(ask["params"]["messages"][0]["content"]["text"], "six times seven?", "{ask}");
    t.send(&json!({
        "jsonrpc": "2.0",
        "id": ask["id"],
        "result": {
            "role": "assistant",
            "content": {"type": "text", "text": "forty-two"},
            "model": "test",
            "stopReason": "endTurn",
        },
    }));
    let r = t.response(id, SOON).unwrap_or_else(|| panic!("no tool result\n{}", t.stderr_text()));
    assert_eq!(r["result"]["content"][0]["text"], "forty-two", "{r}");
    assert_clean_log(&t.stderr_text());
}

on_both_runtimes!(closing_stdin_shuts_down_cleanly_with_the_backends);
/// Scenario 11: Closing tether's stdin ends it cleanly, and its backends with it.
fn closing_stdin_shuts_down_cleanly_with_the_backends(rt: Runtime) {
    let servers = json!({ "a": mock("a", &[]), "b": mock("b", &[]) });
    let mut t = Tether::start_with(rt, config(servers, fast_policy()), &[]);
    t.initialize();
    let pids = [pid_of(&mut t, "a__pid"), pid_of(&mut t, "b__pid")];
    assert!(pids.iter().all(|p| process_running(*p)));

    let log = t.stderr.clone();
    let closing = Instant::now();
    let status = t.finish();
    assert!(status.success(), "tether exited with {status}");
    assert!(closing.elapsed() < Duration::from_secs(8), "shutdown took {:?}", closing.elapsed());
    for pid in pids {
        assert!(wait_until(Duration::from_secs(5), || !process_running(pid)), "backend {pid} outlived tether");
    }
    assert_clean_log(&log.lock().unwrap());
}

on_both_runtimes!(a_stateless_server_slow_to_answer_the_probe_comes_up_stateless);
/// A server of the stateless revision that takes 4 s to answer `server/discover`
/// (past the 3 s probe timeout, as `uvx` on a cold cache does) refuses the
/// `initialize` tether sends meanwhile; its late answer still opens it.
fn a_stateless_server_slow_to_answer_the_probe_comes_up_stateless(rt: Runtime) {
    let servers = json!({ "slow": mock("slow", &["--stateless", "--init-delay-ms", "4000"]) });
    let mut t = Tether::start_with(rt, config(servers, fast_policy()), &[]);
    t.initialize();
    let online = wait_until(Duration::from_secs(15), || t.tool_names().contains(&"slow__echo".to_string()));
    assert!(online, "{rt}: the slow stateless server never came up\n{}", t.stderr_text());
    assert_eq!(t.call_text("slow__echo", json!({"text": "late"})), "late");
    assert!(!t.stderr_text().contains("permanently_failed"), "{rt}\n{}", t.stderr_text());
}

on_both_runtimes!(stateless_backends_serve_a_handshake_client);
/// Scenario: backends of the stateless 2026-07-28 revision (`mock-mcp --stateless`,
/// over stdio and over HTTP) beside a handshake-era one, behind a handshake-era
/// client: each is probed and spoken to in its era, a `sample` call's
/// `input_required` answer becomes a sampling request to the client and its answer
/// goes back as `inputResponses`, a tool added at a stateless backend reaches the
/// client as `list_changed` through tether's listen, and a crashed stateless backend
/// comes back and listens again.
fn stateless_backends_serve_a_handshake_client(rt: Runtime) {
    let port = free_port();
    let web = HttpMock::start(port, &["--name", "web", "--stateless"]);
    let servers = json!({
        "stateless": mock("stateless", &["--stateless"]),
        "old": mock("old", &[]),
        "web": { "url": web.url() },
    });
    let mut t = Tether::start_with(rt, config(servers, fast_policy()), &[]);
    t.initialize();
    let tools = t.tool_names();
    for name in ["stateless__echo", "old__echo", "web__echo", "stateless__sample", "web__sample"] {
        assert!(tools.contains(&name.to_string()), "{name} missing from {tools:?}\n{}", t.stderr_text());
    }
    for server in ["stateless", "old", "web"] {
        assert_eq!(t.call_text(&format!("{server}__echo"), json!({"text": server})), server);
    }

    for tool in ["stateless__sample", "web__sample"] {
        let id = t.send_request("tools/call", json!({"name": tool, "arguments": {"prompt": "six times seven?"}}));
        let ask = t
            .wait_for(|f| f["method"] == "sampling/createMessage" && f.get("id").is_some(), SOON)
            .unwrap_or_else(|| panic!("no sampling request for {tool}\n{}", t.stderr_text()));
        t.send(&json!({
            "jsonrpc": "2.0",
            "id": ask["id"],
            "result": {"role": "assistant", "content": {"type": "text", "text": "forty-two"}, "model": "test"},
        }));
        let r = t.response(id, SOON).unwrap_or_else(|| panic!("no {tool} result\n{}", t.stderr_text()));
        assert_eq!(r["result"]["content"][0]["text"], "forty-two", "{tool}: {r}");
    }

    t.call("stateless__add_tool", json!({}));
    t.wait_for(|f| f["method"] == "notifications/tools/list_changed", SOON)
        .unwrap_or_else(|| panic!("no list_changed from the listen\n{}", t.stderr_text()));
    assert!(wait_until(SOON, || t.tool_names().contains(&"stateless__added".to_string())));

    t.call("stateless__crash", json!({}));
    assert!(
        wait_until(SOON, || t.call("stateless__echo", json!({"text": "back"}))["result"]["content"][0]["text"]
            == "back"),
        "the stateless backend did not come back\n{}",
        t.stderr_text()
    );
    web.stop();
}
