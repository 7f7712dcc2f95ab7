//! `tether-bench --quick` still runs end to end: every path answers, the report
//! has its ratio line and its targets. (The figures themselves are not checked:
//! this is a debug build on a shared machine.)

use std::process::{Command, Stdio};
use std::time::Duration;

use tether_tests::tether_bin;

#[test]
fn quick_bench_runs_and_prints_the_ratio_line() {
    let child = Command::new(env!("CARGO_BIN_EXE_tether-bench"))
        .arg("--quick")
        .arg("--tether")
        .arg(tether_bin())
        .arg("--mock")
        .arg(env!("CARGO_BIN_EXE_mock-mcp"))
        .arg("--relay")
        .arg(env!("CARGO_BIN_EXE_null-relay"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tether-bench");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(out) => out.expect("tether-bench output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-s", "KILL", &pid.to_string()]).status();
            panic!("tether-bench --quick did not finish within 120 s");
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tether-bench --quick failed ({})\n{stdout}\n{stderr}", out.status);
    assert!(stdout.lines().any(|l| l.starts_with("ratios ")), "no ratio line:\n{stdout}");
    let verdicts = stdout.lines().filter(|l| l.ends_with(" MET") || l.ends_with(" MISSED")).count();
    assert_eq!(verdicts, 5, "expected five targets with a verdict:\n{stdout}");
}
