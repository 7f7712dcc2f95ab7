//! What a tether killed with SIGKILL left running dies when the next tether
//! starts (Linux). Its own test binary, run alone: any tether started meanwhile
//! (another test's) would kill the leftovers too, which is the point, but not
//! what one test can watch.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tether_tests::{mock_server, process_running, wait_until, Runtime, Tether};

/// Long enough for anything that should happen "soon" on a loaded machine.
const SOON: Duration = Duration::from_secs(10);

/// The pids a mock appended to its `--grandchild-pid-file`.
fn pids_in(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The end of a log, for failure messages.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Each runtime in turn (never at once: each would sweep the other's leftovers).
#[test]
fn what_a_killed_tether_left_running_dies_when_the_next_one_starts() {
    for rt in [Runtime::Smol, Runtime::Blocking] {
        killed_then_swept(rt);
    }
}

/// tether is killed with SIGKILL (nothing of it runs to stop its backends):
/// the backends themselves die with it (parent-death signal), but a process in
/// a backend's group and a daemon in a session of its own are reparented to
/// init and live on. The next tether kills them as it starts, and says so.
fn killed_then_swept(rt: Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let files = [dir.path().join("same-group.pids"), dir.path().join("new-session.pids")];
    let backend = |name: &str, place: &str, file: &Path| {
        mock_server(&["--name", name, "--spawn-grandchild", place, "--grandchild-pid-file", file.to_str().unwrap()])
    };
    let config = json!({
        "mcpServers": {
            "grp": backend("grp", "same-group", &files[0]),
            "ses": backend("ses", "new-session", &files[1]),
        },
    });
    let mut t = Tether::start_with(rt, config, &[]);
    t.initialize();
    let spawned = wait_until(SOON, || files.iter().all(|f| pids_in(f).len() == 1));
    assert!(spawned, "{rt}: the grandchildren were not started\n{}", tail(&t.stderr_text()));
    let leftovers: Vec<u32> = files.iter().flat_map(|f| pids_in(f)).collect();
    t.signal("KILL");
    assert!(wait_until(SOON, || !process_running(t.pid())), "{rt}: tether did not die");
    std::thread::sleep(Duration::from_millis(300));
    let alive: Vec<u32> = leftovers.iter().copied().filter(|p| process_running(*p)).collect();
    assert_eq!(alive, leftovers, "{rt}: the leftovers outlive a SIGKILL (what this test is about)");

    let mut next = Tether::start_with(rt, json!({"mcpServers": { "ok": mock_server(&["--name", "ok"]) }}), &[]);
    next.initialize();
    let gone = wait_until(SOON, || leftovers.iter().all(|p| !process_running(*p)));
    let survivors: Vec<u32> = leftovers.iter().copied().filter(|p| process_running(*p)).collect();
    for pid in &survivors {
        let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(gone, "{rt}: {survivors:?} survived the next tether's start\n{}", tail(&next.stderr_text()));
    // It says so: at least these two (leftovers of earlier tests' killed tethers count too).
    let said = next.stderr_text();
    let killed =
        said.split("killed ").nth(1).and_then(|rest| rest.split(' ').next()).and_then(|n| n.parse::<usize>().ok());
    assert!(killed.is_some_and(|n| n >= 2) && said.contains("left running"), "{rt}: it says so\n{}", tail(&said));
}
