//! tether-bench: what tether costs over a direct stdio connection, and how fast it
//! recovers, for each runtime: `tether` (the smol runtime) and
//! `tether-blocking` (the plain-threads runtime).
//!
//! ```sh
//! cargo build --release -p tether-smol -p tether-blocking -p tether-tests
//! cargo run --release -p tether-tests --bin tether-bench
//! ```
//!
//! It measures, over stdio, `mock-mcp` called directly, behind `null-relay` (the
//! smallest possible proxy: it copies bytes both ways and nothing else) and behind
//! each tether binary: sequential calls (rate, p50, p99), calls with C in flight,
//! the proxy's peak RSS; then each tether's peak RSS with 10 idle backends, and the
//! time it takes to answer again after its backend crashed, beside the backend's own
//! start time. Every measurement is repeated (`--runs`), direct, relay and the
//! tethers interleaved within each run; the report gives medians of the runs, and
//! ratios computed within each run, then their median, and the performance targets for
//! each tether binary. It builds nothing: the binaries must exist.
//!
//! Which tethers: with neither `--tether` nor `--tether-blocking`, `tether` next to
//! this executable and `tether-blocking` next to that if it was built; with either
//! flag, exactly the binaries given (`--no-blocking` leaves the blocking one out).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::bench::{self, median, proc_status_kib, tool_ok, tool_text, Peer, ProcCost, Series};

const USAGE: &str = "\
usage: tether-bench [--runs R] [--calls N] [--warmup W] [--concurrency C] [--quick]
                    [--tether PATH] [--tether-blocking PATH] [--no-blocking]
                    [--mock PATH] [--relay PATH]

  --runs R         repeat every measurement R times (default 3); medians are reported
  --calls N        calls per measurement (default 2000)
  --warmup W       warm-up calls before each measurement (default 200)
  --concurrency C  calls in flight in the concurrent measurement (default 32)
  --quick          small numbers, for a smoke test (1 run, 200 calls, 3 recoveries)
  --tether PATH    the tether binary (smol runtime; default: next to this executable)
  --tether-blocking PATH
                   the tether-blocking binary (plain-threads runtime; default: next to
                   the tether binary, measured if it is there)
  --no-blocking    measure tether only
  --mock PATH      the mock-mcp binary (default: next to this executable)
  --relay PATH     the null-relay binary (default: next to this executable)

Given --tether or --tether-blocking, only the binaries given are measured.

Build the binaries first: cargo build --release -p tether-smol -p tether-blocking -p tether-tests";

/// The crash policy of the recovery measurement: every crash restarted at once and
/// never given up on (a 1 ms window holds only the crash just recorded).
const RECOVERY_POLICY: &str = r#"{"crash_limit":16,"crash_window_ms":1,"restart_delays_ms":[0]}"#;

/// Idle backends in the memory measurement.
const IDLE_BACKENDS: usize = 10;

/// The echo call's arguments.
const ECHO_TEXT: &str = "hello from tether-bench";

// The performance targets each tether binary is held to.
const TARGET_ADDED_P50_US: f64 = 25.0;
const TARGET_ADDED_VS_RELAY: f64 = 1.5;
const TARGET_THROUGHPUT_VS_DIRECT: f64 = 0.8;
const TARGET_IDLE_RSS_MIB: f64 = 15.0;
const TARGET_RECOVERY_SLACK_MS: f64 = 20.0;

struct Options {
    runs: usize,
    calls: usize,
    warmup: usize,
    concurrency: usize,
    recoveries: usize,
    start_samples: usize,
    quick: bool,
    /// The tether binaries to measure, in report order.
    tethers: Vec<TetherBin>,
    mock: PathBuf,
    relay: PathBuf,
}

/// One tether binary under measurement.
struct TetherBin {
    /// Its name in the report: `tether` or `tether-blocking`.
    label: &'static str,
    /// Which runtime, for the report's headings.
    runtime: &'static str,
    path: PathBuf,
}

fn parse_args() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let (mut runs, mut calls, mut warmup, mut concurrency) = (None, None, None, None);
    let (mut tether, mut blocking, mut mock, mut relay) = (None, None, None, None);
    let (mut quick, mut no_blocking) = (false, false);
    fn number(flag: &str, value: Option<String>) -> Result<usize, String> {
        let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
        match value.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{flag}: expected a positive integer, got `{value}`")),
        }
    }
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next());
        match flag.as_str() {
            "--runs" => runs = Some(number(&flag, value())?),
            "--calls" => calls = Some(number(&flag, value())?),
            "--warmup" => warmup = Some(number(&flag, value())?),
            "--concurrency" => concurrency = Some(number(&flag, value())?),
            "--quick" => quick = true,
            "--tether" => tether = Some(PathBuf::from(value().ok_or("--tether needs a path")?)),
            "--tether-blocking" => {
                blocking = Some(PathBuf::from(value().ok_or("--tether-blocking needs a path")?));
            }
            "--no-blocking" => no_blocking = true,
            "--mock" => mock = Some(PathBuf::from(value().ok_or("--mock needs a path")?)),
            "--relay" => relay = Some(PathBuf::from(value().ok_or("--relay needs a path")?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument `{arg}`\n\n{USAGE}")),
        }
    }
    let here = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .ok_or("cannot find the directory of this executable")?;
    let profile = here.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let release = if profile == "release" { " --release" } else { "" };
    let locate = |given: Option<PathBuf>, name: &str, flag: &str, package: &str| match given {
        Some(path) if path.is_file() => Ok(path),
        Some(path) => Err(format!("{flag} {}: no such file", path.display())),
        None if here.join(name).is_file() => Ok(here.join(name)),
        None => Err(format!(
            "{name} not found at {}: build it first with `cargo build{release} -p {package}` \
             (or `cargo build{release} -p tether-smol -p tether-blocking -p tether-tests`), or pass {flag} PATH",
            here.join(name).display()
        )),
    };
    if no_blocking && blocking.is_some() {
        return Err("--no-blocking and --tether-blocking contradict each other".to_string());
    }
    let mut tethers = Vec::new();
    let explicit = tether.is_some() || blocking.is_some();
    let smol = TetherBin { label: "tether", runtime: "smol runtime", path: PathBuf::new() };
    let threads = TetherBin { label: "tether-blocking", runtime: "plain-threads runtime", path: PathBuf::new() };
    if !explicit || tether.is_some() {
        tethers.push(TetherBin { path: locate(tether, "tether", "--tether", "tether-smol")?, ..smol });
    }
    match blocking {
        Some(path) => tethers.push(TetherBin {
            path: locate(Some(path), "tether-blocking", "--tether-blocking", "tether-blocking")?,
            ..threads
        }),
        // By default, beside `tether` when it was built.
        None if !explicit && !no_blocking => {
            let next_to_tether = tethers[0].path.with_file_name("tether-blocking");
            if next_to_tether.is_file() {
                tethers.push(TetherBin { path: next_to_tether, ..threads });
            }
        }
        None => {}
    }
    let mock = locate(mock, "mock-mcp", "--mock", "tether-tests")?;
    let relay = locate(relay, "null-relay", "--relay", "tether-tests")?;
    Ok(Options {
        runs: runs.unwrap_or(if quick { 1 } else { 3 }),
        calls: calls.unwrap_or(if quick { 200 } else { 2000 }),
        warmup: warmup.unwrap_or(if quick { 50 } else { 200 }),
        concurrency: concurrency.unwrap_or(32),
        recoveries: if quick { 3 } else { 20 },
        start_samples: if quick { 3 } else { 10 },
        quick,
        tethers,
        mock,
        relay,
    })
}

/// How the client reaches the mock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Direct,
    Relay,
    /// Through `opts.tethers[i]`.
    Tether(usize),
}

impl Via {
    /// Every path, in report order: direct, relay, then each tether.
    fn all(tethers: usize) -> Vec<Via> {
        [Via::Direct, Via::Relay].into_iter().chain((0..tethers).map(Via::Tether)).collect()
    }
}

/// One path's figures in one run.
#[derive(Clone)]
struct PathSample {
    seq: Series,
    conc: Series,
    /// Peak RSS of the proxy process (relay, tether), KiB.
    proxy_hwm_kib: Option<u64>,
    /// The proxy's CPU µs and context switches per call, sequential and concurrent.
    seq_cost: Option<(f64, f64)>,
    conc_cost: Option<(f64, f64)>,
    /// The proxy's threads at the end.
    threads: usize,
}

/// What one run measured of one tether binary.
struct TetherRun {
    path: PathSample,
    idle_hwm_kib: u64,
    recovery_ms: Vec<f64>,
    recovery_attempts: Vec<usize>,
}

/// Everything one run measured.
struct Run {
    direct: PathSample,
    relay: PathSample,
    /// One per `opts.tethers`, in that order.
    tethers: Vec<TetherRun>,
    start_ms: Vec<f64>,
}

impl Run {
    fn path(&self, via: Via) -> &PathSample {
        match via {
            Via::Direct => &self.direct,
            Via::Relay => &self.relay,
            Via::Tether(i) => &self.tethers[i].path,
        }
    }
}

struct Bench {
    opts: Options,
    dir: tempfile::TempDir,
    /// Tools one mock offers (so the idle measurement knows when all are listed).
    mock_tools: usize,
    spawned: usize,
}

impl Bench {
    /// A fresh file name in the scratch directory.
    fn scratch(&mut self, name: &str) -> PathBuf {
        self.spawned += 1;
        self.dir.path().join(format!("{}-{name}", self.spawned))
    }

    fn write_config(&mut self, config: &Value) -> Result<PathBuf, String> {
        let path = self.scratch("config.json");
        std::fs::write(&path, serde_json::to_string_pretty(config).expect("json"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    fn mock_entry(&self, name: &str) -> Value {
        json!({"command": self.opts.mock, "args": ["--name", name]})
    }

    /// The label of `opts.tethers[t]`, with `what` it is doing.
    fn tether_label(&self, t: usize, what: &str) -> String {
        let label = self.opts.tethers[t].label;
        if what.is_empty() {
            label.to_string()
        } else {
            format!("{label} ({what})")
        }
    }

    /// Starts `opts.tethers[t]` with `--config <config>` and shakes hands.
    fn start_tether(&mut self, t: usize, what: &str, config: &Value) -> Result<Peer, String> {
        let config = self.write_config(config)?;
        let stderr = self.scratch(&format!("{}.stderr", self.opts.tethers[t].label));
        let args = vec!["--config".to_string(), config.display().to_string()];
        let label = self.tether_label(t, what);
        let mut peer = Peer::spawn(&label, &self.opts.tethers[t].path, &args, Some(&stderr))?;
        peer.initialize()?;
        Ok(peer)
    }

    /// Checks the mock starts and answers, and counts its tools.
    fn probe_mock(&mut self) -> Result<(), String> {
        let stderr = self.scratch("mock.stderr");
        let mut peer = Peer::spawn("mock-mcp", &self.opts.mock, &["--name".into(), "m".into()], Some(&stderr))?;
        peer.initialize()?;
        self.mock_tools = peer.tool_names()?.len();
        peer.finish(Duration::from_secs(3));
        Ok(())
    }

    /// Sequential and concurrent echo calls through one path.
    fn measure_path(&mut self, path: Via) -> Result<PathSample, String> {
        let mock = self.opts.mock.display().to_string();
        let (mut peer, tool) = match path {
            Via::Direct => {
                let stderr = self.scratch("direct.stderr");
                let args = vec!["--name".to_string(), "m".to_string()];
                (Peer::spawn("mock-mcp (direct)", &self.opts.mock, &args, Some(&stderr))?, "echo")
            }
            Via::Relay => {
                let stderr = self.scratch("relay.stderr");
                let args = vec![mock, "--name".to_string(), "m".to_string()];
                (Peer::spawn("null-relay", &self.opts.relay, &args, Some(&stderr))?, "echo")
            }
            Via::Tether(t) => {
                let config = json!({"mcpServers": {"m": self.mock_entry("m")}});
                (self.start_tether(t, "", &config)?, "m__echo")
            }
        };
        if !matches!(path, Via::Tether(_)) {
            peer.initialize()?;
        }
        peer.wait_for_tools(tool, 1, Duration::from_secs(15))?;
        let params = json!({"name": tool, "arguments": {"text": ECHO_TEXT}}).to_string();
        let warm = bench::sequential(&mut peer, "tools/call", &params, self.opts.warmup)?;
        let frame = peer.request("tools/call", &json!({"name": tool, "arguments": {"text": ECHO_TEXT}}))?;
        if tool_text(&frame.value) != Some(ECHO_TEXT) {
            return Err(format!("{}: echo answered {}", peer.label, frame.value));
        }
        drop(warm);
        // The proxy's own cost; the direct mock runs every request on a thread that
        // exits, so its counters would miss most of it.
        let pid = peer.pid();
        let cost = || match path {
            Via::Direct => None,
            _ => ProcCost::read(pid).ok(),
        };
        let before = cost();
        let seq = bench::sequential(&mut peer, "tools/call", &params, self.opts.calls)?;
        let after_seq = cost();
        let c = self.opts.concurrency;
        bench::concurrent(&mut peer, "tools/call", &params, self.opts.warmup.max(c), c)?;
        let before_conc = cost();
        let conc = bench::concurrent(&mut peer, "tools/call", &params, self.opts.calls, c)?;
        let after_conc = cost();
        let per_call = |a: Option<ProcCost>, b: Option<ProcCost>, n| Some(b?.per_call_since(&a?, n));
        let seq_cost = per_call(before, after_seq, seq.calls);
        let conc_cost = per_call(before_conc, after_conc, conc.calls);
        let threads = after_conc.map_or(0, |c| c.threads);
        let proxy_hwm_kib = match path {
            Via::Direct => None,
            _ => Some(proc_status_kib(peer.pid(), "VmHWM").map_err(|e| format!("{}: {e}", peer.label))?),
        };
        peer.finish(Duration::from_secs(5));
        Ok(PathSample { seq, conc, proxy_hwm_kib, seq_cost, conc_cost, threads })
    }

    /// `opts.tethers[t]`'s peak RSS once `IDLE_BACKENDS` mocks are online and listed.
    fn idle_backends(&mut self, t: usize) -> Result<u64, String> {
        let servers: serde_json::Map<String, Value> =
            (0..IDLE_BACKENDS).map(|i| (format!("b{i}"), self.mock_entry(&format!("b{i}")))).collect();
        let mut peer = self.start_tether(t, "idle backends", &json!({"mcpServers": servers}))?;
        let want = IDLE_BACKENDS * self.mock_tools;
        peer.wait_for_tools(&format!("b{}__echo", IDLE_BACKENDS - 1), want, Duration::from_secs(30))?;
        let hwm = proc_status_kib(peer.pid(), "VmHWM").map_err(|e| format!("{}: {e}", peer.label))?;
        peer.finish(Duration::from_secs(5));
        Ok(hwm)
    }

    /// Crash `opts.tethers[t]`'s backend `recoveries` times; for each, the time from
    /// sending `m__crash` to the first successful `m__pid` answer from a new process,
    /// and how many `m__pid` calls that took.
    fn recovery(&mut self, t: usize) -> Result<(Vec<f64>, Vec<usize>), String> {
        let policy: Value = serde_json::from_str(RECOVERY_POLICY).expect("policy json");
        let config = json!({"mcpServers": {"m": self.mock_entry("m")}, "tether": {"policy": policy}});
        let mut peer = self.start_tether(t, "recovery", &config)?;
        peer.wait_for_tools("m__pid", 1, Duration::from_secs(15))?;
        let pid_call = json!({"name": "m__pid", "arguments": {}});
        let (mut times, mut attempts) = (Vec::new(), Vec::new());
        for i in 0..self.opts.recoveries {
            let frame = peer.request("tools/call", &pid_call)?;
            let old = tool_text(&frame.value)
                .filter(|_| tool_ok(&frame.value))
                .ok_or_else(|| format!("{}: m__pid before crash {} failed: {}", peer.label, i + 1, frame.value))?
                .to_string();
            let (_, crashed_at) = peer.send("tools/call", &json!({"name": "m__crash", "arguments": {}}))?;
            let mut tries = 0;
            loop {
                tries += 1;
                let (id, _) = peer.send("tools/call", &pid_call)?;
                let frame = peer.response(id, bench::ANSWER_TIMEOUT)?;
                if tool_ok(&frame.value) && tool_text(&frame.value).is_some_and(|pid| pid != old) {
                    times.push(frame.at.saturating_duration_since(crashed_at).as_secs_f64() * 1e3);
                    attempts.push(tries);
                    break;
                }
                if crashed_at.elapsed() > Duration::from_secs(30) {
                    return Err(format!(
                        "{}: no answer from a new backend 30 s after crash {}; last: {}{}",
                        peer.label,
                        i + 1,
                        frame.value,
                        peer.stderr_tail()
                    ));
                }
            }
        }
        peer.finish(Duration::from_secs(5));
        Ok((times, attempts))
    }

    /// The mock's own start time: spawn to its `initialize` answer, in ms.
    fn backend_start(&mut self) -> Result<Vec<f64>, String> {
        let mut times = Vec::new();
        for _ in 0..self.opts.start_samples {
            let stderr = self.scratch("start.stderr");
            let args = vec!["--name".to_string(), "m".to_string()];
            let started = Instant::now();
            let mut peer = Peer::spawn("mock-mcp (start time)", &self.opts.mock, &args, Some(&stderr))?;
            let frame = peer.request(
                "initialize",
                &json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "tether-bench", "version": "1"}}),
            )?;
            if frame.value.get("result").is_none() {
                return Err(format!("mock-mcp: initialize failed: {}", frame.value));
            }
            times.push(frame.at.saturating_duration_since(started).as_secs_f64() * 1e3);
            peer.finish(Duration::from_secs(3));
        }
        Ok(times)
    }

    fn run(&mut self, r: usize) -> Result<Run, String> {
        let all = Via::all(self.opts.tethers.len());
        let mut paths: Vec<Option<PathSample>> = vec![None; all.len()];
        // Rotate the order from run to run so no path always goes first.
        for k in 0..all.len() {
            let i = (k + r) % all.len();
            paths[i] = Some(self.measure_path(all[i])?);
        }
        let mut paths = paths.into_iter().map(|p| p.expect("measured"));
        let (direct, relay) = (paths.next().expect("direct"), paths.next().expect("relay"));
        let mut tethers = Vec::new();
        for (t, path) in paths.enumerate() {
            let idle_hwm_kib = self.idle_backends(t)?;
            let (recovery_ms, recovery_attempts) = self.recovery(t)?;
            tethers.push(TetherRun { path, idle_hwm_kib, recovery_ms, recovery_attempts });
        }
        let start_ms = self.backend_start()?;
        Ok(Run { direct, relay, tethers, start_ms })
    }
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

/// An integer with thousands separators.
fn int(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".to_string();
    }
    let digits = format!("{}", x.round().abs() as u64);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x.round() < 0.0 {
        out.insert(0, '-');
    }
    out
}

fn mib(kib: f64) -> String {
    if kib.is_finite() {
        format!("{:.1} MiB", kib / 1024.0)
    } else {
        "—".to_string()
    }
}

fn ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}×")
    } else {
        "n/a".to_string()
    }
}

fn signed_us(x: f64) -> String {
    if x.is_finite() {
        format!("{x:+.1} µs")
    } else {
        "n/a".to_string()
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "MISSED"
    }
}

/// The figures of one path: sequential rate, p50, p99; concurrent the same; peak RSS.
struct Row {
    seq_rate: f64,
    seq_p50: f64,
    seq_p99: f64,
    conc_rate: f64,
    conc_p50: f64,
    conc_p99: f64,
    hwm_kib: f64,
}

impl Row {
    fn of(s: &PathSample) -> Row {
        Row {
            seq_rate: s.seq.rate(),
            seq_p50: s.seq.percentile_us(50.0),
            seq_p99: s.seq.percentile_us(99.0),
            conc_rate: s.conc.rate(),
            conc_p50: s.conc.percentile_us(50.0),
            conc_p99: s.conc.percentile_us(99.0),
            hwm_kib: s.proxy_hwm_kib.map_or(f64::NAN, |k| k as f64),
        }
    }

    fn median_of(rows: &[Row]) -> Row {
        let m = |f: fn(&Row) -> f64| median(&rows.iter().map(f).collect::<Vec<_>>());
        Row {
            seq_rate: m(|r| r.seq_rate),
            seq_p50: m(|r| r.seq_p50),
            seq_p99: m(|r| r.seq_p99),
            conc_rate: m(|r| r.conc_rate),
            conc_p50: m(|r| r.conc_p50),
            conc_p99: m(|r| r.conc_p99),
            hwm_kib: m(|r| r.hwm_kib),
        }
    }

    fn print(&self, name: &str) {
        println!(
            "  {name:<15} {:>9} {:>8} {:>8} {:>11} {:>9} {:>9} {:>12}",
            int(self.seq_rate),
            int(self.seq_p50),
            int(self.seq_p99),
            int(self.conc_rate),
            int(self.conc_p50),
            int(self.conc_p99),
            mib(self.hwm_kib),
        );
    }
}

fn print_header(c: usize) {
    println!(
        "  {:<15} {:>9} {:>8} {:>8} {:>11} {:>9} {:>9} {:>12}",
        "",
        "seq/s",
        "p50 µs",
        "p99 µs",
        format!("c={c} /s"),
        "p50 µs",
        "p99 µs",
        "proxy VmHWM"
    );
}

/// Ratios within one run, of one tether binary against direct and relay.
struct Ratios {
    relay_p50: f64,
    tether_p50: f64,
    relay_added: f64,
    tether_added: f64,
    added_vs_relay: f64,
    relay_conc: f64,
    tether_conc: f64,
    tether_conc_vs_relay: f64,
}

impl Ratios {
    fn of(run: &Run, t: usize) -> Ratios {
        let [d, r, t] = [Via::Direct, Via::Relay, Via::Tether(t)].map(|via| Row::of(run.path(via)));
        let (relay_added, tether_added) = (r.seq_p50 - d.seq_p50, t.seq_p50 - d.seq_p50);
        Ratios {
            relay_p50: r.seq_p50 / d.seq_p50,
            tether_p50: t.seq_p50 / d.seq_p50,
            relay_added,
            tether_added,
            // Undefined when the relay added nothing measurable.
            added_vs_relay: if relay_added > 0.0 { tether_added / relay_added } else { f64::NAN },
            relay_conc: r.conc_rate / d.conc_rate,
            tether_conc: t.conc_rate / d.conc_rate,
            tether_conc_vs_relay: t.conc_rate / r.conc_rate,
        }
    }

    fn median_of(all: &[Ratios]) -> Ratios {
        let m = |f: fn(&Ratios) -> f64| median(&all.iter().map(f).collect::<Vec<_>>());
        Ratios {
            relay_p50: m(|r| r.relay_p50),
            tether_p50: m(|r| r.tether_p50),
            relay_added: m(|r| r.relay_added),
            tether_added: m(|r| r.tether_added),
            added_vs_relay: m(|r| r.added_vs_relay),
            relay_conc: m(|r| r.relay_conc),
            tether_conc: m(|r| r.tether_conc),
            tether_conc_vs_relay: m(|r| r.tether_conc_vs_relay),
        }
    }
}

/// A path's name in the report.
fn via_name(opts: &Options, via: Via) -> &'static str {
    match via {
        Via::Direct => "direct",
        Via::Relay => "relay",
        Via::Tether(t) => opts.tethers[t].label,
    }
}

/// The proxies' CPU time and context switches per call (medians over `runs`).
fn print_cost(opts: &Options, runs: &[&Run], c: usize) {
    let mut parts = Vec::new();
    for via in Via::all(opts.tethers.len()).into_iter().skip(1) {
        let samples: Vec<&PathSample> = runs.iter().map(|r| r.path(via)).collect();
        let m =
            |f: &dyn Fn(&PathSample) -> Option<f64>| median(&samples.iter().filter_map(|s| f(s)).collect::<Vec<_>>());
        parts.push(format!(
            "{} {:.1} µs, {:.1} switches | {:.1} µs, {:.1} switches ({} threads)",
            via_name(opts, via),
            m(&|s| s.seq_cost.map(|c| c.0)),
            m(&|s| s.seq_cost.map(|c| c.1)),
            m(&|s| s.conc_cost.map(|c| c.0)),
            m(&|s| s.conc_cost.map(|c| c.1)),
            m(&|s| Some(s.threads as f64)),
        ));
    }
    println!("  proxy CPU time and context switches per call (sequential | c={c}): {}", parts.join("; "));
}

fn print_run(opts: &Options, run: &Run) {
    let c = opts.concurrency;
    print_header(c);
    for via in Via::all(opts.tethers.len()) {
        Row::of(run.path(via)).print(via_name(opts, via));
    }
    print_cost(opts, &[run], c);
    for (bin, t) in opts.tethers.iter().zip(&run.tethers) {
        let attempts: Vec<f64> = t.recovery_attempts.iter().map(|&a| a as f64).collect();
        println!(
            "  {} with {IDLE_BACKENDS} idle backends: VmHWM {}; recovery ({}×): median {:.1} ms, max {:.1} ms \
             ({} m__pid calls per recovery, median)",
            bin.label,
            mib(t.idle_hwm_kib as f64),
            t.recovery_ms.len(),
            median(&t.recovery_ms),
            t.recovery_ms.iter().copied().fold(f64::NAN, f64::max),
            median(&attempts),
        );
    }
    println!("  backend start ({}×): median {:.1} ms", run.start_ms.len(), median(&run.start_ms));
}

/// The medians over the runs of one tether binary's own measurements.
struct TetherSummary {
    idle_kib: f64,
    recovery_ms: f64,
    recovery_max_ms: f64,
    ratios: Ratios,
}

impl TetherSummary {
    fn of(runs: &[Run], t: usize) -> TetherSummary {
        TetherSummary {
            idle_kib: median(&runs.iter().map(|r| r.tethers[t].idle_hwm_kib as f64).collect::<Vec<_>>()),
            recovery_ms: median(&runs.iter().map(|r| median(&r.tethers[t].recovery_ms)).collect::<Vec<_>>()),
            recovery_max_ms: runs
                .iter()
                .flat_map(|r| r.tethers[t].recovery_ms.iter().copied())
                .fold(f64::NAN, f64::max),
            ratios: Ratios::median_of(&runs.iter().map(|r| Ratios::of(r, t)).collect::<Vec<_>>()),
        }
    }
}

fn report(opts: &Options, runs: &[Run]) {
    let c = opts.concurrency;
    let n = runs.len();
    let all = Via::all(opts.tethers.len());
    println!();
    println!("medians of {n} run(s)");
    print_header(c);
    let rows: Vec<Row> =
        all.iter().map(|&via| Row::median_of(&runs.iter().map(|r| Row::of(r.path(via))).collect::<Vec<_>>())).collect();
    for (&via, row) in all.iter().zip(&rows) {
        row.print(via_name(opts, via));
    }
    print_cost(opts, &runs.iter().collect::<Vec<_>>(), c);
    let start = median(&runs.iter().map(|r| median(&r.start_ms)).collect::<Vec<_>>());
    let summaries: Vec<TetherSummary> = (0..opts.tethers.len()).map(|t| TetherSummary::of(runs, t)).collect();
    for (bin, sum) in opts.tethers.iter().zip(&summaries) {
        println!("  {} with {IDLE_BACKENDS} idle backends: VmHWM {}", bin.label, mib(sum.idle_kib));
        println!(
            "  {} recovery after a stdio crash: median {:.1} ms, max {:.1} ms \
             (crash sent -> first m__pid answer from the new process; median of run medians, max of all)",
            bin.label, sum.recovery_ms, sum.recovery_max_ms
        );
    }
    println!("  backend start (spawn mock-mcp -> its initialize answer): median {start:.1} ms");

    let direct = &rows[0];
    for (t, (bin, sum)) in opts.tethers.iter().zip(&summaries).enumerate() {
        let label = bin.label;
        let ratios = &sum.ratios;
        let row = &rows[2 + t];
        println!();
        println!(
            "ratios for {label} (median over runs, each within a run): seq p50 relay/direct {}, {label}/direct {}; \
             added p50 relay {}, {label} {}, {label}/relay {}; c={c} throughput relay/direct {}, \
             {label}/direct {}, {label}/relay {}",
            ratio(ratios.relay_p50),
            ratio(ratios.tether_p50),
            signed_us(ratios.relay_added),
            signed_us(ratios.tether_added),
            ratio(ratios.added_vs_relay),
            ratio(ratios.relay_conc),
            ratio(ratios.tether_conc),
            ratio(ratios.tether_conc_vs_relay),
        );

        println!();
        println!("targets for {label} ({}, {})", bin.runtime, bin.path.display());
        let line = |target: &str, figure: String, met: bool| println!("  {target:<72} {figure:<34} {}", verdict(met));
        line(
            &format!("p50 added latency per sequential call <= {TARGET_ADDED_P50_US} µs over direct"),
            format!("{label} {}", signed_us(ratios.tether_added)),
            ratios.tether_added <= TARGET_ADDED_P50_US,
        );
        line(
            &format!("p50 added latency <= {TARGET_ADDED_VS_RELAY}× the null relay's added latency"),
            format!(
                "{} ({} vs {})",
                ratio(ratios.added_vs_relay),
                signed_us(ratios.tether_added),
                signed_us(ratios.relay_added)
            ),
            ratios.added_vs_relay <= TARGET_ADDED_VS_RELAY,
        );
        let at = if c == 32 { String::new() } else { format!(" (measured at c={c})") };
        line(
            &format!("throughput with 32 concurrent calls through tether >= {TARGET_THROUGHPUT_VS_DIRECT}× direct{at}"),
            format!("{} ({} vs {} calls/s)", ratio(ratios.tether_conc), int(row.conc_rate), int(direct.conc_rate)),
            ratios.tether_conc >= TARGET_THROUGHPUT_VS_DIRECT,
        );
        line(
            &format!("peak RSS with {IDLE_BACKENDS} idle backends <= {TARGET_IDLE_RSS_MIB} MiB"),
            mib(sum.idle_kib),
            sum.idle_kib / 1024.0 <= TARGET_IDLE_RSS_MIB,
        );
        line(
            &format!("median recovery after a stdio crash <= backend start + {TARGET_RECOVERY_SLACK_MS} ms"),
            format!("{:.1} ms vs {start:.1} + {TARGET_RECOVERY_SLACK_MS} ms", sum.recovery_ms),
            sum.recovery_ms <= start + TARGET_RECOVERY_SLACK_MS,
        );
    }

    // Side by side, when there is more than one tether binary (against the first).
    let (first, base) = (&opts.tethers[0], &summaries[0]);
    for (t, (bin, sum)) in opts.tethers.iter().zip(&summaries).enumerate().skip(1) {
        let (a, b) = (&rows[2], &rows[2 + t]);
        println!();
        println!(
            "{} vs {}: seq p50 {} vs {} µs, c={c} throughput {} vs {} calls/s ({}), idle VmHWM {} vs {}, \
             recovery median {:.1} vs {:.1} ms",
            bin.label,
            first.label,
            int(b.seq_p50),
            int(a.seq_p50),
            int(b.conc_rate),
            int(a.conc_rate),
            ratio(b.conc_rate / a.conc_rate),
            mib(sum.idle_kib),
            mib(base.idle_kib),
            sum.recovery_ms,
            base.recovery_ms,
        );
    }
}

fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(opts) => opts,
        Err(e) => {
            eprintln!("tether-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = match tempfile::Builder::new().prefix("tether-bench").tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("tether-bench: cannot create a scratch directory: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "tether-bench: {} run(s); per path {} sequential calls and {} with {} in flight, each after {} warm-up calls{}",
        opts.runs,
        opts.calls,
        opts.calls,
        opts.concurrency,
        opts.warmup.max(opts.concurrency),
        if opts.quick { " (--quick)" } else { "" },
    );
    for bin in &opts.tethers {
        println!("  {:<15} {} ({})", bin.label, bin.path.display(), bin.runtime);
    }
    println!("  {:<15} {}", "mock-mcp", opts.mock.display());
    println!("  {:<15} {}", "null-relay", opts.relay.display());
    println!(
        "  paths: direct = client <-> mock-mcp; relay = client <-> null-relay <-> mock-mcp; \
         tether = client <-> tether --config (one mock, default policy) <-> mock-mcp, for each tether binary; \
         call: echo / m__echo"
    );
    println!(
        "  recovery: {} crashes per run with tether policy {RECOVERY_POLICY} (restart at once, never give up); \
         backend start: {} spawns per run",
        opts.recoveries, opts.start_samples
    );
    let mut bench = Bench { opts, dir, mock_tools: 0, spawned: 0 };
    if let Err(e) = bench.probe_mock() {
        eprintln!("tether-bench: {e}");
        return ExitCode::FAILURE;
    }
    let mut runs = Vec::new();
    for r in 0..bench.opts.runs {
        println!();
        println!("run {} of {}", r + 1, bench.opts.runs);
        match bench.run(r) {
            Ok(run) => {
                print_run(&bench.opts, &run);
                runs.push(run);
            }
            Err(e) => {
                eprintln!("tether-bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    report(&bench.opts, &runs);
    ExitCode::SUCCESS
}
