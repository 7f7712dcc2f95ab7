//! `tether-bench --quick` still runs end to end: every path answers, the stdio
//! ones and the HTTP ones (`mock-mcp --http`, `tether serve --listen`), and the
//! report has its ratio line, its CPU table and its targets. (The figures
//! themselves are not checked: this is a debug build on a shared machine.)

use std::process::{Command, Stdio};
use std::time::Duration;

use tether_tests::tether_bin;

/// A smoke test of shape only: every path runs and every target gets a verdict,
/// MET or MISSED alike (timing on a shared machine is no test; the figures are
/// the benchmark's, read by a person).
#[test]
fn quick_bench_smoke_checks_the_report_shape_not_the_figures() {
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
    for row in ["direct HTTP", "tether HTTP"] {
        assert!(stdout.lines().any(|l| l.trim_start().starts_with(row)), "no {row} row:\n{stdout}");
    }
    assert!(stdout.contains("CPU per call, µs"), "no CPU table:\n{stdout}");
    assert!(stdout.contains("targets for the HTTP front"), "no HTTP targets:\n{stdout}");
    let verdicts: Vec<&str> = stdout.lines().filter(|l| l.ends_with(" MET") || l.ends_with(" MISSED")).collect();
    // Five for tether over stdio, one for its HTTP front.
    assert_eq!(verdicts.len(), 6, "expected six targets with a verdict:\n{stdout}");
    for target in [
        "proxy CPU per call (sequential) <= 35 µs",
        "p50 added latency <= 1.3× the null relay's",
        "throughput with 32 concurrent calls >= 0.95× direct",
        "peak RSS with 10 idle backends <= 15 MiB",
        "median recovery after a stdio crash",
        "CPU per request over HTTP (sequential) <= 60 µs",
    ] {
        assert!(verdicts.iter().any(|l| l.contains(target)), "no target line `{target}`:\n{stdout}");
    }
}
