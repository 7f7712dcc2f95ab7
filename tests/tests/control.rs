//! The control channel: `tether status`, `restart`, `reconnect` and `logs`
//! reaching a tether that serves stdio only (as a client's child does), with no
//! HTTP listener and no flag but `--config`, on both runtimes.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::{mock_server, on_both_runtimes, tether_bin, Runtime, Tether};

const SOON: Duration = Duration::from_secs(15);

/// Runs `tether ARGS --config CONFIG` to completion, without environment
/// variables that would stand in for flags.
fn tether(config: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(tether_bin());
    command.args(args).arg("--config").arg(config);
    for name in ["TETHER_AUTH_TOKEN", "TETHER_STATUS_URL", "TETHER_CONFIG", "NO_COLOR", "CLICOLOR_FORCE"] {
        command.env_remove(name);
    }
    let output = command.stdin(Stdio::null()).output().expect("run tether");
    assert!(output.status.code().is_some(), "tether {args:?} was killed");
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `fs` works; `bad` crashes at every start, saying why on stderr, until it is
/// given up on (three crashes, 100 ms apart).
fn config() -> Value {
    let mut bad = mock_server(&["--name", "bad", "--exit-on-start", "3", "--stderr", "bad: cannot open /data/db"]);
    bad["tether"] = json!({"policy": {"restart_delays_ms": [100, 100, 100]}});
    json!({ "mcpServers": { "fs": mock_server(&["--name", "fs"]), "bad": bad } })
}

/// Waits until `tether logs bad` shows a line with `needle`.
fn wait_for_log(config: &Path, needle: &str) -> String {
    let deadline = Instant::now() + SOON;
    loop {
        let out = stdout(&tether(config, &["logs", "bad", "-n", "200"]));
        if out.contains(needle) {
            return out;
        }
        assert!(Instant::now() < deadline, "no {needle:?} in the logs:\n{out}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

on_both_runtimes!(status_restart_reconnect_and_logs_reach_a_stdio_tether);
fn status_restart_reconnect_and_logs_reach_a_stdio_tether(rt: Runtime) {
    let mut t = Tether::start_with(rt, config(), &[]);
    t.initialize();
    let path = t.config_path();
    let logs = wait_for_log(&path, "-> permanently_failed");
    assert!(logs.contains("stderr  bad: cannot open /data/db"), "the backend's stderr is kept:\n{logs}");
    assert!(logs.contains("event   server_status_changed bad: provisioning -> connecting"), "{logs}");

    let status = tether(&path, &["status"]);
    assert_eq!(status.status.code(), Some(1), "not every backend is online:\n{}", stderr(&status));
    let table = stdout(&status);
    assert!(table.contains(&format!("at pid {}", t.pid())), "{table}");
    let row = |name: &str| table.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_string();
    assert!(row("fs").contains("online") && row("bad").contains("permanently_failed"), "{table}");
    let json: Value = serde_json::from_str(&stdout(&tether(&path, &["status", "--json"]))).expect("status JSON");
    assert_eq!(json["backends"].as_array().map(Vec::len), Some(2));

    let restart = tether(&path, &["restart", "bad"]);
    assert_eq!(restart.status.code(), Some(0), "{}", stderr(&restart));
    assert_eq!(stdout(&restart), "restarting bad\n");
    wait_for_log(&path, "bad: permanently_failed -> connecting");

    let reconnect = tether(&path, &["reconnect", "fs"]);
    assert_eq!(reconnect.status.code(), Some(0), "{}", stderr(&reconnect));
    let unknown = tether(&path, &["restart", "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(stderr(&unknown).contains("nope"), "{}", stderr(&unknown));
    assert_eq!(tether(&path, &["logs", "nope"]).status.code(), Some(1));

    // The client's calls were never disturbed.
    assert_eq!(t.call_text("fs__echo", json!({"text": "still here"})), "still here");

    t.finish();
    let gone = tether(&path, &["status"]);
    assert_eq!(gone.status.code(), Some(2));
    assert!(stderr(&gone).contains("no running tether serves"), "{}", stderr(&gone));
}

#[test]
fn a_tether_started_with_no_control_is_not_found() {
    let t = Tether::start_with(Runtime::Smol, config(), &["--no-control"]);
    let status = tether(&t.config_path(), &["status"]);
    assert_eq!(status.status.code(), Some(2), "{}", stdout(&status));
    assert!(stderr(&status).contains("--no-control"), "the message says why it may not be found");
}
