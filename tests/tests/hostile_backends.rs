//! Misbehaving stdio backends beside a healthy one, against both runtimes: tether
//! stays alive, its memory stays bounded, calls to the healthy backend keep their
//! latency, nothing a backend starts outlives it, and tether's own secrets never
//! reach a backend.
//!
//! Each attack is a mode of the mock backend (`mock-mcp --help`):
//!
//! - **stdout flood** (`--flood-stdout`): log notifications as fast as the pipe
//!   takes them, all forwarded to the client, which reads them all;
//! - **stderr flood** (`--flood-stderr`): the log stays small (a rate limit per
//!   backend, with a summary of what was dropped);
//! - **closed stdout** (`--close-stdout-after-ms`): the process keeps running with
//!   its stdout closed; tether takes it for a lost connection, kills it and
//!   restarts it within seconds;
//! - **grandchildren** (`--spawn-grandchild`): a process left behind holding
//!   stdout, in the group or in a session of its own; the backend's exit is seen
//!   at once, and no grandchild survives the restart or tether's exit;
//! - **a 64 MiB line** (`--junk-on-call`): one line on stdout with no newline, and
//!   one from the client on stdin: neither is held (the frame bound drops them);
//! - **a 64 MiB SSE event** (`--junk-on-call` of an HTTP mock): one event on a
//!   call's response stream; the SSE decoder's bound drops it and the call fails
//!   at once saying why;
//! - **environment** (`--print-env`): tether's `TETHER_*` variables (the listener
//!   token above all) are not inherited, unless the config sets them.
//!
//! The bounds: tether's RSS under [`RSS_BOUND_KIB`] (Linux, from `/proc`), the
//! healthy backend's calls under [`LATENCY_BOUND`] each. Every scenario prints its
//! figures (`cargo test ... -- --nocapture` shows them).
//!
//! ```sh
//! cargo test -p tether-tests --test hostile_backends
//! ```

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::{
    free_port, mock_server, on_both_runtimes, process_running, wait_until, HttpMock, RssSampler, Runtime, Tether,
};

/// Largest resident set tether may reach under any attack (a debug build idles
/// at about 15 MiB).
const RSS_BOUND_KIB: u64 = 100 * 1024;

/// Longest a call to the healthy backend may take under any attack.
const LATENCY_BOUND: Duration = Duration::from_secs(2);

/// Long enough for anything that should happen "soon" on a loaded machine.
const SOON: Duration = Duration::from_secs(10);

/// The listener token planted in tether's environment.
const PLANTED_TOKEN: &str = "planted-listener-token-5f2c9e1a";

/// Another `TETHER_*` secret planted in tether's environment.
const PLANTED_OTHER: &str = "planted-other-secret-77d0b3";

/// A config with the healthy backend `ok`, the hostile one `bad` (a mock with
/// `bad_args`), and restarts that come fast.
fn config(bad: Value) -> Value {
    json!({
        "tether": { "policy": { "restart_delays_ms": [100, 200, 300] }, "list_changed_debounce_ms": 0 },
        "mcpServers": { "ok": mock_server(&["--name", "ok"]), "bad": bad },
    })
}

/// Starts tether with the secrets planted, past `initialize`, with `ok` online.
fn start(rt: Runtime, config: Value, args: &[&str]) -> Tether {
    let env: [(&str, &OsStr); 2] =
        [("TETHER_AUTH_TOKEN", OsStr::new(PLANTED_TOKEN)), ("TETHER_OTHER_SECRET", OsStr::new(PLANTED_OTHER))];
    let mut t = Tether::start_with_env(rt, config, args, &env);
    t.initialize();
    let listed = wait_until(SOON, || t.tool_names().iter().any(|n| n == "ok__echo"));
    assert!(listed, "{rt}: the healthy backend never came online\n{}", t.stderr_text());
    t
}

/// What one attack did to tether, as seen from outside.
struct Figures {
    peak_rss_kib: Option<u64>,
    latencies: Vec<Duration>,
    /// Frames the client received meanwhile.
    frames: usize,
}

impl Figures {
    fn percentile(&self, p: f64) -> Duration {
        tether_tests::percentile(&self.latencies, p)
    }

    /// Prints the figures and checks the bounds.
    fn check(&self, rt: Runtime, attack: &str, t: &Tether) {
        eprintln!(
            "{rt:<16} {attack:<14} peak RSS {:>7} KiB  calls {:>3}  p50 {:>5} ms  max {:>5} ms  frames {}",
            self.peak_rss_kib.map_or("-".into(), |k| k.to_string()),
            self.latencies.len(),
            self.percentile(0.5).as_millis(),
            self.percentile(1.0).as_millis(),
            self.frames,
        );
        assert!(process_running(t.pid()), "{rt} {attack}: tether died\n{}", tail(&t.stderr_text()));
        assert!(!self.latencies.is_empty(), "{rt} {attack}: no call to the healthy backend was made");
        let max = self.percentile(1.0);
        assert!(max < LATENCY_BOUND, "{rt} {attack}: a call to the healthy backend took {max:?}");
        if let Some(peak) = self.peak_rss_kib {
            assert!(peak < RSS_BOUND_KIB, "{rt} {attack}: RSS reached {peak} KiB (bound {RSS_BOUND_KIB} KiB)");
        }
    }
}

/// Calls the healthy backend every 50 ms for `how_long`, measuring each call and
/// tether's RSS, and forgetting what the client receives meanwhile.
fn measure(t: &mut Tether, how_long: Duration) -> Figures {
    let sampler = RssSampler::start(t.pid());
    let mut figures = Figures { peak_rss_kib: None, latencies: Vec::new(), frames: 0 };
    let end = Instant::now() + how_long;
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        let text = format!("ping {n}");
        let started = Instant::now();
        let id = t.send_request("tools/call", json!({"name": "ok__echo", "arguments": {"text": text}}));
        let answer = t.response(id, LATENCY_BOUND * 5);
        figures.latencies.push(started.elapsed());
        let answer = answer.unwrap_or_else(|| panic!("no answer to call {n}\n{}", tail(&t.stderr_text())));
        assert_eq!(answer["result"]["content"][0]["text"], text, "{answer}");
        figures.frames += t.forget_output();
        std::thread::sleep(Duration::from_millis(50));
    }
    figures.frames += t.forget_output();
    figures.peak_rss_kib = sampler.peak();
    figures
}

/// The last lines of a log, for failure messages.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The pid tether logged for the start of `server`'s `generation`.
fn started_pid(t: &Tether, server: &str, generation: u64) -> Option<u32> {
    let needle = format!("server={server} generation={generation} pid=");
    let log = t.stderr_text();
    let at = log.find(&needle)? + needle.len();
    log[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// The pids a mock appended to its `--grandchild-pid-file`.
fn pids_in(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

on_both_runtimes!(stdout_flood_is_read_no_faster_than_it_is_forwarded);
/// A backend writes log notifications as fast as it can: tether forwards them to
/// the client at the client's pace, its memory stays bounded, and calls to the
/// healthy backend keep answering promptly.
fn stdout_flood_is_read_no_faster_than_it_is_forwarded(rt: Runtime) {
    let mut t = start(rt, config(mock_server(&["--name", "bad", "--flood-stdout"])), &[]);
    let figures = measure(&mut t, Duration::from_secs(5));
    figures.check(rt, "stdout flood", &t);
    assert!(figures.frames > 1000, "{rt}: the flood never reached the client ({} frames)", figures.frames);
    assert!(t.finish().success());
}

on_both_runtimes!(stderr_flood_is_logged_at_a_bounded_rate);
/// A backend writes stderr as fast as it can: tether logs a burst of it, then a
/// few lines a second with summaries of what it dropped, and keeps serving.
fn stderr_flood_is_logged_at_a_bounded_rate(rt: Runtime) {
    let mut t = start(rt, config(mock_server(&["--name", "bad", "--flood-stderr"])), &[]);
    let started = Instant::now();
    let figures = measure(&mut t, Duration::from_secs(4));
    figures.check(rt, "stderr flood", &t);
    let log = t.stderr_text();
    let flood_lines = log.lines().filter(|l| l.contains("quick brown fox")).count();
    // A burst of 50, then 10 a second (and a second of slack).
    let allowed = 50 + 10 * (started.elapsed().as_secs() as usize + 1);
    assert!(flood_lines <= allowed, "{rt}: {flood_lines} flood lines logged (at most {allowed} expected)");
    assert!(flood_lines >= 50, "{rt}: only {flood_lines} flood lines logged\n{}", tail(&log));
    assert!(log.contains("stderr lines not logged"), "{rt}: no summary of the dropped lines\n{}", tail(&log));
    assert!(log.len() < 256 * 1024, "{rt}: {} bytes of log", log.len());
    assert!(t.finish().success());
}

on_both_runtimes!(closed_stdout_is_a_lost_connection);
/// A backend closes its stdout and keeps running: within seconds tether kills it,
/// reports the lost connection (the restart policy applies: it is restarted),
/// and the healthy backend is not disturbed.
fn closed_stdout_is_a_lost_connection(rt: Runtime) {
    let bad = mock_server(&["--name", "bad", "--close-stdout-after-ms", "500"]);
    let mut t = start(rt, config(bad), &[]);
    let first = wait_until(SOON, || started_pid(&t, "bad", 1).is_some());
    assert!(first, "{rt}: bad never started\n{}", tail(&t.stderr_text()));
    let pid = started_pid(&t, "bad", 1).unwrap();
    // Closed after 0.5 s, taken for lost 1 s later: reported within seconds.
    let reported = t.wait_log("error (the process closed its stdout and kept running)", Duration::from_secs(5));
    assert!(reported, "{rt}: the closed stdout was not reported\n{}", tail(&t.stderr_text()));
    let figures = measure(&mut t, Duration::from_secs(2));
    figures.check(rt, "closed stdout", &t);
    assert!(wait_until(SOON, || !process_running(pid)), "{rt}: the process {pid} with a closed stdout still runs");
    let restarted = wait_until(SOON, || started_pid(&t, "bad", 2).is_some());
    assert!(restarted, "{rt}: bad was not restarted\n{}", tail(&t.stderr_text()));
    assert!(t.finish().success());
}

on_both_runtimes!(grandchildren_die_with_their_backend);
/// Two backends each leave a process behind holding their stdout, one in their
/// process group and one in a session of its own, then crash on a call: the
/// crash is seen at once (stdout is still open), the grandchildren are killed
/// before the restart, and the restarted processes' grandchildren die with tether.
fn grandchildren_die_with_their_backend(rt: Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let files = [dir.path().join("same-group.pids"), dir.path().join("new-session.pids")];
    let backend = |name: &str, place: &str, file: &Path| {
        let file = file.to_str().unwrap();
        mock_server(&["--name", name, "--spawn-grandchild", place, "--grandchild-pid-file", file, "--crash-after", "1"])
    };
    let config = json!({
        "tether": { "policy": { "restart_delays_ms": [100, 200, 300] }, "list_changed_debounce_ms": 0 },
        "mcpServers": {
            "ok": mock_server(&["--name", "ok"]),
            "grp": backend("grp", "same-group", &files[0]),
            "ses": backend("ses", "new-session", &files[1]),
        },
    });
    let mut t = start(rt, config, &[]);
    let online = wait_until(SOON, || {
        let names = t.tool_names();
        names.iter().any(|n| n == "grp__echo") && names.iter().any(|n| n == "ses__echo")
    });
    assert!(online, "{rt}: the backends never came online\n{}", tail(&t.stderr_text()));
    for (server, file) in ["grp", "ses"].iter().zip(&files) {
        let first = pids_in(file);
        assert_eq!(first.len(), 1, "{rt} {server}: {first:?}");
        assert!(process_running(first[0]), "{rt} {server}: the grandchild is not running");
        let crashed_at = Instant::now();
        t.call(&format!("{server}__echo"), json!({"text": "last words"}));
        let seen = t.wait_log(&format!("process exited server={server} generation=1"), SOON);
        assert!(seen, "{rt} {server}: the exit was not noticed\n{}", tail(&t.stderr_text()));
        let noticed = crashed_at.elapsed();
        assert!(noticed < Duration::from_secs(5), "{rt} {server}: the exit took {noticed:?} to notice");
        let gone = wait_until(SOON, || !process_running(first[0]));
        assert!(gone, "{rt} {server}: grandchild {} survived its backend's exit", first[0]);
        let respawned = wait_until(SOON, || pids_in(file).len() == 2);
        assert!(respawned, "{rt} {server}: not restarted\n{}", tail(&t.stderr_text()));
        eprintln!("{rt:<16} {server}: exit noticed after {} ms, grandchild {} gone", noticed.as_millis(), first[0]);
    }
    let survivors: Vec<u32> = files.iter().flat_map(|f| pids_in(f)).filter(|p| process_running(*p)).collect();
    assert_eq!(survivors.len(), 2, "{rt}: the restarted backends' grandchildren: {survivors:?}");
    assert!(t.finish().success());
    let survivors: Vec<u32> = files.iter().flat_map(|f| pids_in(f)).filter(|p| process_running(*p)).collect();
    for pid in &survivors {
        kill_leftover(*pid);
    }
    assert!(survivors.is_empty(), "{rt}: grandchildren {survivors:?} survived tether's exit");
}

on_both_runtimes!(a_catalog_of_600_mb_is_cut_at_its_bound_and_memory_stays_under_twice_it);
/// A backend lists 6,000 tools of 100 KB (600 MB, in pages of 10 MB): tether
/// keeps what `limits.max_catalog_bytes` (64 MiB here) allows, asks for no page
/// past it, says so, and its memory stays under twice the bound.
fn a_catalog_of_600_mb_is_cut_at_its_bound_and_memory_stays_under_twice_it(rt: Runtime) {
    const BOUND: u64 = 64 * 1024 * 1024;
    let big = mock_server(&[
        "--name",
        "big",
        "--tools",
        "echo",
        "--extra-tools",
        "6000",
        "--extra-tool-bytes",
        "100000",
        "--tools-page-size",
        "100",
    ]);
    let config = json!({
        "tether": { "limits": { "max_catalog_bytes": BOUND, "max_catalog_items": 100000 } },
        "mcpServers": { "ok": mock_server(&["--name", "ok"]), "big": big },
    });
    let mut t = Tether::start_with(rt, config, &[]);
    let rss = RssSampler::start(t.pid());
    t.initialize();
    let cut = t.wait_log("catalog_cut big", Duration::from_secs(60));
    assert!(cut, "{rt}: no cut was logged\n{}", tail(&t.stderr_text()));
    let discovered = t.wait_log("tools_discovered big", SOON);
    assert!(discovered, "{rt}: discovery did not end\n{}", tail(&t.stderr_text()));
    let log = t.stderr_text();
    let at = log.find("tools_discovered big count=").unwrap() + "tools_discovered big count=".len();
    let kept: usize = log[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap();
    assert!((600..=672).contains(&kept), "{rt}: {kept} tools of 100 KB kept under a 64 MiB bound");
    // A client lists them in pages of a few megabytes.
    let first = t.request_timeout("tools/list", json!({}), Duration::from_secs(30));
    let tools = first["result"]["tools"].as_array().map_or(0, Vec::len);
    assert!(tools > 0 && tools < 100 && first["result"]["nextCursor"].is_string(), "{rt}: a page of {tools} tools");
    std::thread::sleep(Duration::from_millis(300));
    let peak = rss.peak();
    eprintln!("{rt:<16} 600 MB listed: {kept} tools kept, peak RSS {peak:?} KiB (bound {} KiB)", BOUND / 1024);
    if let Some(peak) = peak {
        assert!(peak < 2 * BOUND / 1024, "{rt}: RSS reached {peak} KiB, over twice the bound");
    }
}

on_both_runtimes!(a_64_mib_line_on_stdout_or_stdin_is_dropped_not_held);
/// Byte bounds where the hosts apply them: a backend writes a 64 MiB line with no
/// newline on stdout (its call times out with a clear error, the other backend
/// answers meanwhile), and the client sends a 64 MiB line on stdin (dropped; the
/// next request is answered). tether's memory stays far under the line's size
/// throughout: with `max_frame_bytes` at 1 MiB, neither line is held.
fn a_64_mib_line_on_stdout_or_stdin_is_dropped_not_held(rt: Runtime) {
    const LINE: usize = 64 * 1024 * 1024;
    const BOUND_KIB: u64 = 40 * 1024;
    let junk = mock_server(&["--name", "junk", "--junk-on-call", &LINE.to_string()]);
    let config = json!({
        "tether": {
            "policy": { "request_timeout_ms": 3000, "call_retry_delays_ms": [] },
            "limits": { "max_frame_bytes": 1024 * 1024 },
            "list_changed_debounce_ms": 0,
        },
        "mcpServers": { "ok": mock_server(&["--name", "ok"]), "junk": junk },
    });
    let mut t = Tether::start_with(rt, config, &[]);
    let rss = RssSampler::start(t.pid());
    t.initialize();
    let listed = wait_until(SOON, || {
        let names = t.tool_names();
        names.iter().any(|n| n == "ok__echo") && names.iter().any(|n| n == "junk__echo")
    });
    assert!(listed, "{rt}: backends never came online\n{}", tail(&t.stderr_text()));

    let started = Instant::now();
    let junk_call = t.send_request("tools/call", json!({"name": "junk__echo", "arguments": {"text": "x"}}));
    assert_eq!(t.call_text("ok__echo", json!({"text": "still here"})), "still here", "{rt}");
    let failed = t.response(junk_call, Duration::from_secs(20)).expect("the junk call is answered");
    assert!(failed.get("error").is_some(), "{rt}: {failed}");
    assert!(started.elapsed() < Duration::from_secs(15), "{rt}: answered after {:?}", started.elapsed());

    t.send_line(&"y".repeat(LINE));
    assert_eq!(t.call_text("ok__echo", json!({"text": "after"})), "after", "{rt}: the line after it is read");
    std::thread::sleep(Duration::from_millis(300));
    let peak = rss.peak();
    eprintln!("{rt:<16} 64 MiB lines: peak RSS {peak:?} KiB (bound {BOUND_KIB} KiB)");
    if let Some(peak) = peak {
        assert!(peak < BOUND_KIB, "{rt}: RSS reached {peak} KiB: a 64 MiB line was held");
    }
}

on_both_runtimes!(a_64_mib_sse_event_fails_its_call_at_once_and_is_not_held);
/// The SSE event bound where the HTTP backend transport applies it: an HTTP
/// backend answers a call with a stream whose one event is 64 MiB. The call fails
/// at once (well before its timeout) naming the frame limit, the other backend
/// answers meanwhile and after, and tether's memory stays far under the event's
/// size: with `max_frame_bytes` at 1 MiB the event is never held.
fn a_64_mib_sse_event_fails_its_call_at_once_and_is_not_held(rt: Runtime) {
    const EVENT: usize = 64 * 1024 * 1024;
    const BOUND_KIB: u64 = 40 * 1024;
    let web = HttpMock::start(free_port(), &["--name", "web", "--junk-on-call", &EVENT.to_string()]);
    let config = json!({
        "tether": {
            "policy": { "request_timeout_ms": 30_000, "call_retry_delays_ms": [] },
            "limits": { "max_frame_bytes": 1024 * 1024 },
            "list_changed_debounce_ms": 0,
        },
        "mcpServers": { "ok": mock_server(&["--name", "ok"]), "web": { "url": web.url() } },
    });
    let mut t = Tether::start_with(rt, config, &[]);
    let rss = RssSampler::start(t.pid());
    t.initialize();
    let listed = wait_until(SOON, || {
        let names = t.tool_names();
        names.iter().any(|n| n == "ok__echo") && names.iter().any(|n| n == "web__echo")
    });
    assert!(listed, "{rt}: backends never came online\n{}", tail(&t.stderr_text()));

    let started = Instant::now();
    let junk_call = t.send_request("tools/call", json!({"name": "web__echo", "arguments": {"text": "x"}}));
    assert_eq!(t.call_text("ok__echo", json!({"text": "still here"})), "still here", "{rt}");
    let failed = t.response(junk_call, Duration::from_secs(25)).expect("the junk call is answered");
    assert!(failed.to_string().contains("frame limit"), "{rt}: says why: {failed}");
    assert!(started.elapsed() < Duration::from_secs(15), "{rt}: answered after {:?}", started.elapsed());
    assert_eq!(t.call_text("ok__echo", json!({"text": "after"})), "after", "{rt}");
    std::thread::sleep(Duration::from_millis(300));
    let peak = rss.peak();
    eprintln!("{rt:<16} 64 MiB SSE event: peak RSS {peak:?} KiB (bound {BOUND_KIB} KiB)");
    if let Some(peak) = peak {
        assert!(peak < BOUND_KIB, "{rt}: RSS reached {peak} KiB: a 64 MiB event was held");
    }
}

/// Kills a leftover process so a failing test leaves nothing behind.
fn kill_leftover(pid: u32) {
    let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
}

on_both_runtimes!(secrets_stay_out_of_backends);
/// tether runs with a listener token and another `TETHER_*` secret in its
/// environment; a backend prints its environment and crashes: neither secret is
/// in what it printed, in tether's log, or (smol) in `/status`. A backend whose
/// config sets `TETHER_AUTH_TOKEN` explicitly gets it.
fn secrets_stay_out_of_backends(rt: Runtime) {
    let printer = json!({
        "command": tether_tests::mock_bin(),
        "args": ["--name", "bad", "--print-env", "--stderr", "about to crash", "--exit-on-start", "1"],
        "env": { "VISIBLE_SETTING": "visible-value" },
    });
    let mut config = config(printer);
    config["mcpServers"]["told"] = json!({
        "command": tether_tests::mock_bin(),
        "args": ["--name", "told", "--print-env"],
        "env": { "TETHER_AUTH_TOKEN": "explicitly-configured-token" },
    });
    let args: &[&str] = match rt {
        Runtime::Smol => &["serve", "--status-listen", "127.0.0.1:0"],
        Runtime::Blocking => &[],
    };
    let t = start(rt, config, args);
    assert!(t.wait_log("server_permanently_failed bad", SOON), "{rt}: bad did not crash\n{}", tail(&t.stderr_text()));
    let environment = |server: &str| -> Value {
        let needle = "environment: ";
        let log = t.stderr_text();
        let line = log.lines().find(|l| l.contains(needle) && l.contains(&format!("server={server}")));
        let line = line.unwrap_or_else(|| panic!("{rt}: {server} printed no environment\n{}", tail(&log)));
        let json = &line[line.find(needle).unwrap() + needle.len()..];
        let end = json.rfind('}').expect("a JSON object") + 1;
        serde_json::from_str(&json[..end]).unwrap_or_else(|e| panic!("{rt}: {server}'s environment: {e}: {line}"))
    };
    assert!(wait_until(SOON, || t.stderr_text().contains("server=told")), "{rt}: told printed nothing");
    let printed = environment("bad");
    // Values from the config are secrets to the log (redacted), but they are there.
    assert!(printed["VISIBLE_SETTING"].is_string(), "{rt}: the config's env is missing: {printed}");
    assert!(printed["TETHER_LINEAGE"].is_string(), "{rt}: no lineage mark: {printed}");
    for name in ["TETHER_AUTH_TOKEN", "TETHER_OTHER_SECRET"] {
        assert!(printed.get(name).is_none(), "{rt}: {name} was inherited: {printed}");
    }
    let told = environment("told");
    assert!(told["TETHER_AUTH_TOKEN"].is_string(), "{rt}: the configured token is missing: {told}");
    let log = t.stderr_text();
    for secret in [PLANTED_TOKEN, PLANTED_OTHER] {
        assert!(!log.contains(secret), "{rt}: a planted secret is in the log");
    }
    if rt == Runtime::Smol {
        let url = t.logged_url("tether status on ");
        let status = ureq::get(&format!("{url}status"))
            .set("Authorization", &format!("Bearer {PLANTED_TOKEN}"))
            .call()
            .map(|r| r.into_string().unwrap_or_default())
            .unwrap_or_else(|e| panic!("GET {url}status: {e}"));
        assert!(status.contains("about to crash"), "{rt}: the crash message is not in /status: {status}");
        for secret in [PLANTED_TOKEN, PLANTED_OTHER] {
            assert!(!status.contains(secret), "{rt}: a planted secret is in /status");
        }
    }
}
