//! tether-bench: what tether costs over a direct connection, and how fast it
//! recovers, for each runtime: `tether` (the smol runtime) and
//! `tether-blocking` (the plain-threads runtime).
//!
//! ```sh
//! cargo build --release -p tether-smol -p tether-blocking -p tether-tests
//! cargo run --release -p tether-tests --bin tether-bench
//! ```
//!
//! It measures `mock-mcp` called directly over stdio, behind `null-relay` (the
//! smallest possible proxy: it copies bytes both ways and nothing else), behind
//! `socat` (a native byte relay others can run too, when it is installed) and
//! behind each tether binary over stdio; then over Streamable HTTP, `mock-mcp --http`
//! called directly and `tether serve --listen` in front of a stdio mock (`tether`
//! only: `tether-blocking` has no HTTP front; `--no-http` leaves both out). For
//! each path: sequential calls (rate, p50, p99), calls with C in flight, the CPU
//! time per call of every process on it (proxy, backend, the client itself), the
//! proxy's context switches and peak RSS; then each tether's peak RSS with 10 idle
//! backends, and the time it takes to answer again after its backend crashed,
//! beside the backend's own start time. Every measurement is repeated (`--runs`).
//! Within a run the stdio paths run side by side: all started, then their calls
//! made in small blocks, one path after the other, so that a slow moment of the
//! machine falls on every path alike; the HTTP paths take turns. The report gives
//! medians of the runs, and ratios computed within each run, then their median,
//! and the performance targets. It builds nothing: the binaries must exist.
//!
//! Which tethers: with neither `--tether` nor `--tether-blocking`, `tether` next to
//! this executable and `tether-blocking` next to that if it was built; with either
//! flag, exactly the binaries given (`--no-blocking` leaves the blocking one out).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::bench::{self, child_pid, median, proc_status_kib, tool_ok, tool_text, Peer, ProcCost, Series};
use tether_tests::bench_http::{self, BodyKinds, HttpClient, HttpServer};
use tether_tests::bench_sdk;

const USAGE: &str = "\
usage: tether-bench [--runs R] [--calls N] [--warmup W] [--concurrency C] [--quick]
                    [--tether PATH] [--tether-blocking PATH] [--no-blocking] [--no-http]
                    [--mock PATH] [--relay PATH] [--socat PATH | --no-socat] [--pace-us P]
                    [--python PATH [--sdk-only]] [--guard FILE]

  --runs R         repeat every measurement R times (default 5); medians are reported
  --calls N        calls per measurement (default 2000)
  --warmup W       warm-up calls before each measurement (default 200)
  --concurrency C  calls in flight in the concurrent measurement (default 32)
  --quick          small numbers, for a smoke test (1 run, 200 calls, 3 recoveries)
  --tether PATH    the tether binary (smol runtime; default: next to this executable)
  --tether-blocking PATH
                   the tether-blocking binary (plain-threads runtime; default: next to
                   the tether binary, measured if it is there)
  --no-blocking    measure tether only
  --no-http        leave out the HTTP paths (mock-mcp --http, tether serve --listen)
  --mock PATH      the mock-mcp binary (default: next to this executable)
  --relay PATH     the null-relay binary (default: next to this executable)
  --socat PATH     socat, measured as a native byte relay (default: `socat` on PATH,
                   left out if there is none); --no-socat leaves it out
  --pace-us P      wait P microseconds before each sequential call (default 0: back
                   to back), as clients space their calls
  --python PATH    a Python with the official SDK (`pip install mcp`): adds the SDK
                   path, its client calling its server directly, behind socat and
                   behind tether (each era); --sdk-only measures only that
  --guard FILE     exit 1 when a ratio named in FILE (JSON: {\"baseline\": {name: ratio},
                   \"regression\": 1.5}) exceeds its baseline by more than the regression
                   factor: each a median over the runs of a ratio taken within a run

Given --tether or --tether-blocking, only the binaries given are measured.

Build the binaries first: cargo build --release -p tether-smol -p tether-blocking -p tether-tests";

/// The crash policy of the recovery measurement: every crash restarted at once and
/// never given up on (a 1 ms window holds only the crash just recorded).
const RECOVERY_POLICY: &str = r#"{"crash_limit":16,"crash_window_ms":1,"restart_delays_ms":[0]}"#;

/// Idle backends in the memory measurement.
const IDLE_BACKENDS: usize = 10;

/// The echo call's arguments.
const ECHO_TEXT: &str = "hello from tether-bench";

// The performance targets each tether binary is held to over stdio.
const TARGET_PROXY_CPU_US: f64 = 35.0;
const TARGET_ADDED_VS_RELAY: f64 = 1.3;
/// The added-latency target when the relay adds nothing measurable (its added p50
/// is <= 0, so the ratio is undefined).
const TARGET_ADDED_FLOOR_US: f64 = 5.0;
const TARGET_THROUGHPUT_VS_DIRECT: f64 = 0.95;
const TARGET_IDLE_RSS_MIB: f64 = 15.0;
const TARGET_RECOVERY_SLACK_MS: f64 = 20.0;
// The HTTP front's target.
const TARGET_HTTP_CPU_US: f64 = 60.0;

/// What `mock-mcp --http` logs before the address it bound.
const MOCK_LISTENING: &str = "listening on ";
/// What `tether serve --listen` logs before its endpoint's URL.
const TETHER_LISTENING: &str = "tether listening on ";

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
    /// The one among `tethers` whose HTTP front is measured (the smol `tether`),
    /// unless `--no-http`.
    http: Option<usize>,
    mock: PathBuf,
    relay: PathBuf,
    /// socat, the native byte relay, if it is measured.
    socat: Option<PathBuf>,
    /// The wait before each sequential call.
    pace: Duration,
    /// A Python with the `mcp` package: the SDK path is measured.
    python: Option<PathBuf>,
    /// Only the SDK path.
    sdk_only: bool,
    /// The regression guard's file.
    guard: Option<PathBuf>,
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
    let (mut quick, mut no_blocking, mut no_http, mut no_socat) = (false, false, false, false);
    let (mut socat, mut pace_us, mut python, mut sdk_only, mut guard) = (None, 0u64, None, false, None);
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
            "--no-http" => no_http = true,
            "--mock" => mock = Some(PathBuf::from(value().ok_or("--mock needs a path")?)),
            "--relay" => relay = Some(PathBuf::from(value().ok_or("--relay needs a path")?)),
            "--socat" => socat = Some(PathBuf::from(value().ok_or("--socat needs a path")?)),
            "--no-socat" => no_socat = true,
            "--python" => python = Some(PathBuf::from(value().ok_or("--python needs a path")?)),
            "--sdk-only" => sdk_only = true,
            "--guard" => guard = Some(PathBuf::from(value().ok_or("--guard needs a path")?)),
            "--pace-us" => {
                let given = value().ok_or("--pace-us needs a value")?;
                pace_us = given.parse().map_err(|_| format!("--pace-us: expected microseconds, got `{given}`"))?;
            }
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
    let http = if no_http { None } else { tethers.iter().position(|t| t.label == "tether") };
    let socat = match (socat, no_socat) {
        (Some(_), true) => return Err("--socat and --no-socat contradict each other".to_string()),
        (Some(path), false) if path.is_file() => Some(path),
        (Some(path), false) => return Err(format!("--socat {}: no such file", path.display())),
        (None, true) => None,
        (None, false) => find_on_path("socat"),
    };
    if sdk_only && python.is_none() {
        return Err("--sdk-only needs --python".to_string());
    }
    Ok(Options {
        runs: runs.unwrap_or(if quick { 1 } else { 5 }),
        calls: calls.unwrap_or(if quick { 200 } else { 2000 }),
        warmup: warmup.unwrap_or(if quick { 50 } else { 200 }),
        concurrency: concurrency.unwrap_or(32),
        recoveries: if quick { 3 } else { 20 },
        start_samples: if quick { 3 } else { 10 },
        quick,
        tethers,
        http,
        mock,
        relay,
        socat,
        pace: Duration::from_micros(pace_us),
        python,
        sdk_only,
        guard,
    })
}

/// `name` in one of the directories of `PATH`, if it is there.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// How the client reaches the mock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Via {
    Direct,
    Relay,
    /// Behind `socat`, a native byte relay.
    Socat,
    /// Through `opts.tethers[i]`, over stdio.
    Tether(usize),
    /// `mock-mcp --http`, over Streamable HTTP.
    DirectHttp,
    /// Through `opts.tethers[i]`'s HTTP front.
    TetherHttp(usize),
}

impl Via {
    /// Every path, in report order: direct, relay, each tether, then the HTTP paths.
    fn all(opts: &Options) -> Vec<Via> {
        let socat = opts.socat.is_some().then_some(Via::Socat);
        let stdio = [Via::Direct, Via::Relay].into_iter().chain(socat).chain((0..opts.tethers.len()).map(Via::Tether));
        let http = opts.http.into_iter().flat_map(|t| [Via::DirectHttp, Via::TetherHttp(t)]);
        stdio.chain(http).collect()
    }

    /// The path's name in the report.
    fn name(self, opts: &Options) -> String {
        match self {
            Via::Direct => "direct".to_string(),
            Via::Relay => "relay".to_string(),
            Via::Socat => "socat".to_string(),
            Via::Tether(t) => opts.tethers[t].label.to_string(),
            Via::DirectHttp => "direct HTTP".to_string(),
            Via::TetherHttp(t) => format!("{} HTTP", opts.tethers[t].label),
        }
    }

    /// Over Streamable HTTP (else over stdio).
    fn is_http(self) -> bool {
        matches!(self, Via::DirectHttp | Via::TetherHttp(_))
    }

    /// The echo tool's name on this path.
    fn echo_tool(self) -> &'static str {
        match self {
            Via::Direct | Via::Relay | Via::Socat | Via::DirectHttp => "echo",
            Via::Tether(_) | Via::TetherHttp(_) => "m__echo",
        }
    }
}

/// The processes on a path besides the client: the proxy (relay, tether) if
/// any, and the backend (the mock).
#[derive(Clone, Copy)]
struct Pids {
    proxy: Option<u32>,
    backend: Option<u32>,
}

impl Pids {
    /// A direct path: the mock alone.
    fn direct(backend: u32) -> Pids {
        Pids { proxy: None, backend: Some(backend) }
    }

    /// A proxy and the backend it started.
    fn proxied(proxy: u32) -> Pids {
        Pids { proxy: Some(proxy), backend: child_pid(proxy) }
    }

    /// Every process's counters now, the client's (this process) included.
    fn snapshot(&self) -> Snapshot {
        let read = |pid: Option<u32>| pid.and_then(|pid| ProcCost::read(pid).ok());
        Snapshot { proxy: read(self.proxy), backend: read(self.backend), client: read(Some(std::process::id())) }
    }
}

/// The counters of the processes on a path at one moment.
#[derive(Clone, Copy)]
struct Snapshot {
    proxy: Option<ProcCost>,
    backend: Option<ProcCost>,
    client: Option<ProcCost>,
}

/// What each process on a path spent per call during one measurement.
#[derive(Clone, Copy, Default)]
struct PhaseCost {
    /// The proxy's CPU µs and context switches per call.
    proxy: Option<(f64, f64)>,
    /// The backend's CPU µs per call.
    backend_cpu: Option<f64>,
    /// The client's (this process's) CPU µs per call.
    client_cpu: Option<f64>,
}

impl PhaseCost {
    /// The cost of `calls` calls made between `before` and `after`.
    fn between(before: &Snapshot, after: &Snapshot, calls: usize) -> PhaseCost {
        let cpu = |a: Option<ProcCost>, b: Option<ProcCost>| Some(b?.cpu_per_call_since(&a?, calls));
        PhaseCost {
            proxy: before.proxy.zip(after.proxy).map(|(a, b)| b.per_call_since(&a, calls)),
            backend_cpu: cpu(before.backend, after.backend),
            client_cpu: cpu(before.client, after.client),
        }
    }
}

/// Rounds of sequential calls on each stdio path in one run (see `Bench::measure_stdio`).
const SEQ_BLOCKS: usize = 10;
/// Rounds of concurrent calls on each stdio path in one run: fewer, as each
/// starts by filling the pipeline and ends by draining it.
const CONC_BLOCKS: usize = 4;

/// Round `round`'s share of `total` calls split into `rounds` (the first rounds
/// take the remainder).
fn share(total: usize, rounds: usize, round: usize) -> usize {
    total / rounds + usize::from(round < total % rounds)
}

/// `total` calls on each open path, made by `measure` in `rounds` blocks, one path
/// after the other, the order rotating from round to round (and run `r` to run).
fn in_blocks(
    open: &mut [(Peer, String, Pids)],
    rounds: usize,
    total: usize,
    r: usize,
    mut measure: impl FnMut(&mut Peer, &str, usize) -> Result<Series, String>,
) -> Result<Vec<Blocks>, String> {
    let n = open.len();
    let mut blocks = vec![Blocks::default(); n];
    for round in 0..rounds {
        for k in 0..n {
            let i = (k + round + r) % n;
            let (peer, params, pids) = &mut open[i];
            let before = pids.snapshot();
            let series = measure(peer, params, share(total, rounds, round))?;
            blocks[i].add(series, &before, &pids.snapshot());
        }
    }
    Ok(blocks)
}

/// One path's measurements made in blocks, added up: the latencies, the time
/// spent and what each process spent.
#[derive(Clone, Default)]
struct Blocks {
    latencies: Vec<Duration>,
    elapsed: Duration,
    proxy: Option<ProcCost>,
    backend_ns: Option<u64>,
    client_ns: Option<u64>,
}

impl Blocks {
    /// Adds a block of calls and the counters around it.
    fn add(&mut self, series: Series, before: &Snapshot, after: &Snapshot) {
        self.latencies.extend(series.sorted);
        self.elapsed += series.elapsed;
        let spent = |a: Option<ProcCost>, b: Option<ProcCost>| Some(b?.cpu_ns.saturating_sub(a?.cpu_ns));
        let sum = |total: Option<u64>, more: Option<u64>| Some(total.unwrap_or(0) + more?);
        if let (Some(a), Some(b)) = (before.proxy, after.proxy) {
            let total = self.proxy.get_or_insert_with(ProcCost::default);
            total.cpu_ns += b.cpu_ns.saturating_sub(a.cpu_ns);
            total.switches += b.switches.saturating_sub(a.switches);
        }
        self.backend_ns = sum(self.backend_ns, spent(before.backend, after.backend));
        self.client_ns = sum(self.client_ns, spent(before.client, after.client));
    }

    /// The calls of every block as one series, and their cost per call.
    fn total(self) -> (Series, PhaseCost) {
        let series = Series::new(self.latencies, self.elapsed);
        let calls = series.calls.max(1) as f64;
        let per_call = |ns: u64| ns as f64 / 1e3 / calls;
        let cost = PhaseCost {
            proxy: self.proxy.map(|p| (per_call(p.cpu_ns), p.switches as f64 / calls)),
            backend_cpu: self.backend_ns.map(per_call),
            client_cpu: self.client_ns.map(per_call),
        };
        (series, cost)
    }
}

/// One path's figures in one run.
#[derive(Clone)]
struct PathSample {
    seq: Series,
    conc: Series,
    /// Peak RSS of the proxy process (relay, tether), KiB.
    proxy_hwm_kib: Option<u64>,
    /// What the processes spent per call, sequential and concurrent.
    seq_cost: PhaseCost,
    conc_cost: PhaseCost,
    /// The proxy's threads at the end.
    threads: usize,
    /// Over HTTP: how the measured answers came (JSON bodies or SSE streams).
    kinds: BodyKinds,
}

/// What one run measured of one tether binary besides its path.
struct TetherRun {
    idle_hwm_kib: u64,
    recovery_ms: Vec<f64>,
    recovery_attempts: Vec<usize>,
}

/// Everything one run measured.
struct Run {
    /// Every path's figures, in `Via::all` order.
    paths: Vec<(Via, PathSample)>,
    /// One per `opts.tethers`, in that order.
    tethers: Vec<TetherRun>,
    start_ms: Vec<f64>,
}

impl Run {
    fn path(&self, via: Via) -> &PathSample {
        &self.paths.iter().find(|(v, _)| *v == via).expect("every path is measured in every run").1
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

    /// The echo call's params, as JSON text.
    fn echo_params(via: Via) -> String {
        json!({"name": via.echo_tool(), "arguments": {"text": ECHO_TEXT}}).to_string()
    }

    /// Starts a stdio path's first process (mock, relay or tether), handshake done.
    fn open_stdio(&mut self, via: Via) -> Result<Peer, String> {
        let mock_args = vec!["--name".to_string(), "m".to_string()];
        let mut peer = match via {
            Via::Direct => {
                let stderr = self.scratch("direct.stderr");
                Peer::spawn("mock-mcp (direct)", &self.opts.mock, &mock_args, Some(&stderr))?
            }
            Via::Relay => {
                let stderr = self.scratch("relay.stderr");
                let args: Vec<String> = [self.opts.mock.display().to_string()].into_iter().chain(mock_args).collect();
                Peer::spawn("null-relay", &self.opts.relay, &args, Some(&stderr))?
            }
            Via::Socat => {
                let stderr = self.scratch("socat.stderr");
                let socat = self.opts.socat.clone().expect("measured only when found");
                // socat splits EXEC's command line at spaces: the mock's path must have none.
                let exec = format!("EXEC:{} {}", self.opts.mock.display(), mock_args.join(" "));
                Peer::spawn("socat", &socat, &["STDIO".to_string(), exec], Some(&stderr))?
            }
            Via::Tether(t) => {
                let config = json!({"mcpServers": {"m": self.mock_entry("m")}});
                return self.start_tether(t, "", &config);
            }
            Via::DirectHttp | Via::TetherHttp(_) => unreachable!("an HTTP path"),
        };
        peer.initialize()?;
        Ok(peer)
    }

    /// The stdio paths of one run, side by side: every path's processes are
    /// started and warmed first, then the calls go in blocks, one path after the
    /// other, [`SEQ_BLOCKS`] rounds of sequential calls and [`CONC_BLOCKS`] of
    /// concurrent ones, the order rotating from round to round. A slow moment of
    /// the machine then falls on every path alike instead of on whichever ran
    /// then, which is what the ratios between paths need.
    fn measure_stdio(&mut self, vias: &[Via], r: usize) -> Result<Vec<PathSample>, String> {
        let c = self.opts.concurrency;
        let mut open = Vec::with_capacity(vias.len());
        for &via in vias {
            let mut peer = self.open_stdio(via)?;
            peer.wait_for_tools(via.echo_tool(), 1, Duration::from_secs(15))?;
            let params = Self::echo_params(via);
            let frame = peer.request("tools/call", &serde_json::from_str(&params).expect("json"))?;
            if tool_text(&frame.value) != Some(ECHO_TEXT) {
                return Err(format!("{}: echo answered {}", peer.label, frame.value));
            }
            let pids = match via {
                Via::Direct => Pids::direct(peer.pid()),
                _ => Pids::proxied(peer.pid()),
            };
            open.push((peer, params, pids));
        }
        for (peer, params, _) in &mut open {
            bench::sequential(peer, "tools/call", params, self.opts.warmup)?;
            bench::concurrent(peer, "tools/call", params, self.opts.warmup.max(c), c)?;
        }
        let calls = self.opts.calls;
        let pace = self.opts.pace;
        let seq = in_blocks(&mut open, SEQ_BLOCKS, calls, r, |peer, params, n| {
            bench::sequential_paced(peer, "tools/call", params, n, pace)
        })?;
        let conc = in_blocks(&mut open, CONC_BLOCKS, calls, r, |peer, params, n| {
            bench::concurrent(peer, "tools/call", params, n, c)
        })?;
        let mut samples = Vec::with_capacity(vias.len());
        for (((peer, _, pids), seq), conc) in open.into_iter().zip(seq).zip(conc) {
            let proxy_hwm_kib = peak_rss(pids.proxy, &peer.label)?;
            let threads = pids.snapshot().proxy.map_or(0, |c| c.threads);
            peer.finish(Duration::from_secs(5));
            let (seq, seq_cost) = seq.total();
            let (conc, conc_cost) = conc.total();
            samples.push(PathSample {
                seq,
                conc,
                seq_cost,
                conc_cost,
                proxy_hwm_kib,
                threads,
                kinds: BodyKinds::default(),
            });
        }
        Ok(samples)
    }

    /// Starts an HTTP path's server: `mock-mcp --http` or `tether serve --listen`,
    /// each on a port of its choosing (`127.0.0.1:0`).
    fn start_http(&mut self, via: Via) -> Result<HttpServer, String> {
        let listen = "127.0.0.1:0".to_string();
        match via {
            Via::DirectHttp => {
                let stderr = self.scratch("direct-http.stderr");
                let args = ["--name", "m", "--http", &listen].map(String::from);
                HttpServer::spawn("mock-mcp --http", &self.opts.mock, &args, &stderr, MOCK_LISTENING)
            }
            Via::TetherHttp(t) => {
                let config = self.write_config(&json!({"mcpServers": {"m": self.mock_entry("m")}}))?;
                let stderr = self.scratch("tether-http.stderr");
                let args = ["serve", "--listen", &listen, "--config", &config.display().to_string()].map(String::from);
                let label = format!("{} serve --listen", self.opts.tethers[t].label);
                HttpServer::spawn(&label, &self.opts.tethers[t].path, &args, &stderr, TETHER_LISTENING)
            }
            Via::Direct | Via::Relay | Via::Socat | Via::Tether(_) => unreachable!("a stdio path"),
        }
    }

    /// An HTTP path: sequential calls on one keep-alive connection, then C
    /// connections on C threads.
    fn measure_http(&mut self, via: Via) -> Result<PathSample, String> {
        let server = self.start_http(via)?;
        let label = server.label.clone();
        let with_label = |e: String| format!("{label}: {e}");
        let mut client = HttpClient::new(server.url());
        client.initialize().map_err(with_label)?;
        client.wait_for_tool(via.echo_tool(), Duration::from_secs(15)).map_err(with_label)?;
        let params = Self::echo_params(via);
        client.calls("tools/call", &params, self.opts.warmup).map_err(with_label)?;
        let answer = client.request("tools/call", &serde_json::from_str(&params).expect("json")).map_err(with_label)?;
        if tool_text(&answer) != Some(ECHO_TEXT) {
            return Err(format!("{label}: echo answered {answer}"));
        }
        let pids = match via {
            Via::DirectHttp => Pids::direct(server.pid()),
            _ => Pids::proxied(server.pid()),
        };
        let before = pids.snapshot();
        let (seq, seq_kinds) =
            bench_http::sequential(&mut client, "tools/call", &params, self.opts.calls, self.opts.pace)
                .map_err(with_label)?;
        let after_seq = pids.snapshot();
        let (c, warm_each) = (self.opts.concurrency, (self.opts.warmup / self.opts.concurrency).max(2));
        let (conc, conc_kinds, before_conc, after_conc) =
            bench_http::concurrent(&client.session(), "tools/call", &params, (self.opts.calls, c, warm_each), || {
                pids.snapshot()
            })
            .map_err(with_label)?;
        let proxy_hwm_kib = peak_rss(pids.proxy, &label)?;
        server.stop(Duration::from_secs(5));
        Ok(PathSample {
            seq_cost: PhaseCost::between(&before, &after_seq, seq.calls),
            conc_cost: PhaseCost::between(&before_conc, &after_conc, conc.calls),
            seq,
            conc,
            proxy_hwm_kib,
            threads: after_conc.proxy.map_or(0, |c| c.threads),
            kinds: BodyKinds { json: seq_kinds.json + conc_kinds.json, sse: seq_kinds.sse + conc_kinds.sse },
        })
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
        let all = Via::all(&self.opts);
        let stdio: Vec<Via> = all.iter().copied().filter(|v| !v.is_http()).collect();
        let mut paths: Vec<(Via, PathSample)> = stdio.iter().copied().zip(self.measure_stdio(&stdio, r)?).collect();
        // The HTTP paths one after the other, the order rotating from run to run.
        let http: Vec<Via> = all.iter().copied().filter(|v| v.is_http()).collect();
        let mut measured: Vec<Option<PathSample>> = vec![None; http.len()];
        for k in 0..http.len() {
            let i = (k + r) % http.len();
            measured[i] = Some(self.measure_http(http[i])?);
        }
        paths.extend(http.into_iter().zip(measured.into_iter().map(|p| p.expect("measured"))));
        let mut tethers = Vec::new();
        for t in 0..self.opts.tethers.len() {
            let idle_hwm_kib = self.idle_backends(t)?;
            let (recovery_ms, recovery_attempts) = self.recovery(t)?;
            tethers.push(TetherRun { idle_hwm_kib, recovery_ms, recovery_attempts });
        }
        let start_ms = self.backend_start()?;
        Ok(Run { paths, tethers, start_ms })
    }
}

/// The peak RSS of `pid`, if there is one, in KiB.
fn peak_rss(pid: Option<u32>, label: &str) -> Result<Option<u64>, String> {
    pid.map(|pid| proc_status_kib(pid, "VmHWM")).transpose().map_err(|e| format!("{label}: {e}"))
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

    /// The medians over `runs` of `via`'s figures.
    fn median_of(runs: &[&Run], via: Via) -> Row {
        let rows: Vec<Row> = runs.iter().map(|r| Row::of(r.path(via))).collect();
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

/// Every path's latency and rate figures (medians over `runs`).
fn print_table(opts: &Options, runs: &[&Run]) {
    println!(
        "  {:<15} {:>9} {:>8} {:>8} {:>11} {:>9} {:>9} {:>12}",
        "",
        "seq/s",
        "p50 µs",
        "p99 µs",
        format!("c={} /s", opts.concurrency),
        "p50 µs",
        "p99 µs",
        "proxy VmHWM"
    );
    for via in Via::all(opts) {
        Row::median_of(runs, via).print(&via.name(opts));
    }
}

/// One figure of a [`PhaseCost`].
#[derive(Clone, Copy)]
enum Field {
    ProxyCpu,
    ProxySwitches,
    BackendCpu,
    ClientCpu,
}

impl PhaseCost {
    fn get(&self, field: Field) -> Option<f64> {
        match field {
            Field::ProxyCpu => self.proxy.map(|p| p.0),
            Field::ProxySwitches => self.proxy.map(|p| p.1),
            Field::BackendCpu => self.backend_cpu,
            Field::ClientCpu => self.client_cpu,
        }
    }
}

impl PathSample {
    /// The cost of the sequential or the concurrent measurement.
    fn cost(&self, concurrent: bool) -> &PhaseCost {
        if concurrent {
            &self.conc_cost
        } else {
            &self.seq_cost
        }
    }
}

/// The median over `runs` of a figure of each run (runs without it left out).
fn median_over(runs: &[&Run], f: impl Fn(&Run) -> Option<f64>) -> f64 {
    median(&runs.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
}

/// `via`'s proxy CPU per call over the relay's, within one run.
fn cpu_vs_relay(run: &Run, via: Via, concurrent: bool) -> Option<f64> {
    let cpu = |v: Via| run.path(v).cost(concurrent).get(Field::ProxyCpu);
    Some(cpu(via)? / cpu(Via::Relay)?)
}

/// "a | b": a sequential and a concurrent figure, "—" when neither is known.
fn pair(seq: f64, conc: f64, f: fn(f64) -> String) -> String {
    if seq.is_nan() && conc.is_nan() {
        "—".to_string()
    } else {
        format!("{} | {}", f(seq), f(conc))
    }
}

/// A figure with one decimal.
fn dec(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1}")
    } else {
        "n/a".to_string()
    }
}

/// Every path's CPU time per call (medians over `runs`): the proxy's, also as a
/// multiple of the relay's, its context switches and threads; the backend's; the
/// client's (this process).
fn print_cpu(opts: &Options, runs: &[&Run]) {
    println!(
        "  CPU per call, µs (sequential | c={}); proxy × relay: the proxy's CPU per call over the null relay's, \
         within each run",
        opts.concurrency
    );
    println!(
        "  {:<15} {:>15} {:>15} {:>13} {:>7} {:>15} {:>15}",
        "", "proxy", "proxy × relay", "switches", "threads", "backend", "client"
    );
    for via in Via::all(opts) {
        let fig = |field: Field| {
            let m = |conc: bool| median_over(runs, |r| r.path(via).cost(conc).get(field));
            (m(false), m(true))
        };
        let rel = |conc: bool| median_over(runs, |r| cpu_vs_relay(r, via, conc));
        let threads = median_over(runs, |r| r.path(via).seq_cost.proxy.map(|_| r.path(via).threads as f64));
        let [proxy, switches, backend, client] =
            [Field::ProxyCpu, Field::ProxySwitches, Field::BackendCpu, Field::ClientCpu].map(fig);
        println!(
            "  {:<15} {:>15} {:>15} {:>13} {:>7} {:>15} {:>15}",
            via.name(opts),
            pair(proxy.0, proxy.1, dec),
            pair(rel(false), rel(true), ratio),
            pair(switches.0, switches.1, dec),
            if threads.is_nan() { "—".to_string() } else { int(threads) },
            pair(backend.0, backend.1, dec),
            pair(client.0, client.1, dec),
        );
    }
}

fn print_run(opts: &Options, run: &Run) {
    print_table(opts, &[run]);
    print_cpu(opts, &[run]);
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
    cpu_vs_relay: f64,
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
            cpu_vs_relay: f64::NAN,
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
            cpu_vs_relay: m(|r| r.cpu_vs_relay),
        }
    }
}

/// The medians over the runs of one tether binary's own measurements.
struct TetherSummary {
    idle_kib: f64,
    recovery_ms: f64,
    recovery_max_ms: f64,
    /// Its proxy CPU µs per call, sequential and with C in flight.
    cpu_us: (f64, f64),
    ratios: Ratios,
}

impl TetherSummary {
    fn of(runs: &[&Run], t: usize) -> TetherSummary {
        let cpu = |conc: bool| median_over(runs, |r| r.path(Via::Tether(t)).cost(conc).get(Field::ProxyCpu));
        let ratios = runs
            .iter()
            .map(|r| Ratios {
                cpu_vs_relay: cpu_vs_relay(r, Via::Tether(t), false).unwrap_or(f64::NAN),
                ..Ratios::of(r, t)
            })
            .collect::<Vec<_>>();
        TetherSummary {
            idle_kib: median_over(runs, |r| Some(r.tethers[t].idle_hwm_kib as f64)),
            recovery_ms: median_over(runs, |r| Some(median(&r.tethers[t].recovery_ms))),
            recovery_max_ms: runs
                .iter()
                .flat_map(|r| r.tethers[t].recovery_ms.iter().copied())
                .fold(f64::NAN, f64::max),
            cpu_us: (cpu(false), cpu(true)),
            ratios: Ratios::median_of(&ratios),
        }
    }
}

/// Peak RSS with idle backends, recovery and the backend's start time (medians).
fn print_tether_extras(opts: &Options, summaries: &[TetherSummary], start: f64) {
    for (bin, sum) in opts.tethers.iter().zip(summaries) {
        println!("  {} with {IDLE_BACKENDS} idle backends: VmHWM {}", bin.label, mib(sum.idle_kib));
        println!(
            "  {} recovery after a stdio crash: median {:.1} ms, max {:.1} ms \
             (crash sent -> first m__pid answer from the new process; median of run medians, max of all)",
            bin.label, sum.recovery_ms, sum.recovery_max_ms
        );
    }
    println!("  backend start (spawn mock-mcp -> its initialize answer): median {start:.1} ms");
}

/// One target: what it is, the figure, and MET or MISSED.
fn target_line(target: &str, figure: String, met: bool) {
    println!("  {target:<76} {figure:<40} {}", verdict(met));
}

/// The ratio line of one stdio tether binary.
fn print_ratios(label: &str, c: usize, r: &Ratios) {
    println!();
    println!(
        "ratios for {label} (median over runs, each within a run): seq p50 relay/direct {}, {label}/direct {}; \
         added p50 relay {}, {label} {}, {label}/relay {}; c={c} throughput relay/direct {}, \
         {label}/direct {}, {label}/relay {}; proxy CPU per call {label}/relay {}",
        ratio(r.relay_p50),
        ratio(r.tether_p50),
        signed_us(r.relay_added),
        signed_us(r.tether_added),
        ratio(r.added_vs_relay),
        ratio(r.relay_conc),
        ratio(r.tether_conc),
        ratio(r.tether_conc_vs_relay),
        ratio(r.cpu_vs_relay),
    );
}

/// The added-latency target's figure and verdict: within 1.3× the relay's added
/// p50, or, when the relay adds nothing measurable (<= 0, ratio undefined), at
/// most `TARGET_ADDED_FLOOR_US`.
fn added_latency_target(label: &str, r: &Ratios) -> (String, bool) {
    if r.relay_added > 0.0 && r.added_vs_relay.is_finite() {
        let figure = format!(
            "{} ({} vs relay {})",
            ratio(r.added_vs_relay),
            signed_us(r.tether_added),
            signed_us(r.relay_added)
        );
        (figure, r.added_vs_relay <= TARGET_ADDED_VS_RELAY)
    } else {
        let figure = format!(
            "relay {} <= 0, ratio undefined: {label} {} vs <= {TARGET_ADDED_FLOOR_US} µs",
            signed_us(r.relay_added),
            signed_us(r.tether_added)
        );
        (figure, r.tether_added <= TARGET_ADDED_FLOOR_US)
    }
}

/// The targets of one stdio tether binary.
fn print_tether_targets(opts: &Options, t: usize, sum: &TetherSummary, medians: &[&Run], start: f64) {
    let (bin, c, r) = (&opts.tethers[t], opts.concurrency, &sum.ratios);
    let (direct, row) = (Row::median_of(medians, Via::Direct), Row::median_of(medians, Via::Tether(t)));
    println!();
    println!("targets for {} ({}, {})", bin.label, bin.runtime, bin.path.display());
    target_line(
        &format!("proxy CPU per call (sequential) <= {TARGET_PROXY_CPU_US} µs"),
        format!("{:.1} µs ({} relay's; c={c}: {:.1} µs)", sum.cpu_us.0, ratio(r.cpu_vs_relay), sum.cpu_us.1),
        sum.cpu_us.0 <= TARGET_PROXY_CPU_US,
    );
    let (figure, met) = added_latency_target(bin.label, r);
    target_line(
        &format!(
            "p50 added latency <= {TARGET_ADDED_VS_RELAY}× the null relay's (<= {TARGET_ADDED_FLOOR_US} µs if the relay's is <= 0)"
        ),
        figure,
        met,
    );
    let at = if c == 32 { String::new() } else { format!(" (measured at c={c})") };
    target_line(
        &format!("throughput with 32 concurrent calls >= {TARGET_THROUGHPUT_VS_DIRECT}× direct{at}"),
        format!("{} ({} vs {} calls/s)", ratio(r.tether_conc), int(row.conc_rate), int(direct.conc_rate)),
        r.tether_conc >= TARGET_THROUGHPUT_VS_DIRECT,
    );
    target_line(
        &format!("peak RSS with {IDLE_BACKENDS} idle backends <= {TARGET_IDLE_RSS_MIB} MiB"),
        mib(sum.idle_kib),
        sum.idle_kib / 1024.0 <= TARGET_IDLE_RSS_MIB,
    );
    target_line(
        &format!("median recovery after a stdio crash <= backend start + {TARGET_RECOVERY_SLACK_MS} ms"),
        format!("{:.1} ms vs {start:.1} + {TARGET_RECOVERY_SLACK_MS} ms", sum.recovery_ms),
        sum.recovery_ms <= start + TARGET_RECOVERY_SLACK_MS,
    );
}

/// The HTTP front's target, its latency and throughput against direct HTTP, how
/// the answers came, and whether the client could have been the limit.
fn print_http(opts: &Options, runs: &[&Run], t: usize) {
    let (bin, c) = (&opts.tethers[t], opts.concurrency);
    let (dv, tv) = (Via::DirectHttp, Via::TetherHttp(t));
    let (direct, front) = (Row::median_of(runs, dv), Row::median_of(runs, tv));
    let cpu = |conc: bool| median_over(runs, |r| r.path(tv).cost(conc).get(Field::ProxyCpu));
    let added = median_over(runs, |r| Some(Row::of(r.path(tv)).seq_p50 - Row::of(r.path(dv)).seq_p50));
    let vs_direct = |f: fn(&Row) -> f64| median_over(runs, |r| Some(f(&Row::of(r.path(tv))) / f(&Row::of(r.path(dv)))));
    let name = tv.name(opts);
    println!();
    println!("targets for the HTTP front ({} serve --listen, {}, {})", bin.label, bin.runtime, bin.path.display());
    target_line(
        &format!("{}'s CPU per request over HTTP (sequential) <= {TARGET_HTTP_CPU_US} µs", bin.label),
        format!(
            "{:.1} µs ({} relay's; c={c}: {:.1} µs)",
            cpu(false),
            ratio(median_over(runs, |r| cpu_vs_relay(r, tv, false))),
            cpu(true)
        ),
        cpu(false) <= TARGET_HTTP_CPU_US,
    );
    println!(
        "  no target: p50 added latency over direct HTTP {} ({name} {} µs vs direct HTTP {} µs, {})",
        signed_us(added),
        int(front.seq_p50),
        int(direct.seq_p50),
        ratio(vs_direct(|r| r.seq_p50)),
    );
    println!(
        "  no target: c={c} throughput vs direct HTTP {} ({} vs {} calls/s)",
        ratio(vs_direct(|r| r.conc_rate)),
        int(front.conc_rate),
        int(direct.conc_rate),
    );
    print_http_client_check(opts, runs, (dv, tv), (&direct, &front));
}

/// How the HTTP answers came, and whether the client could be what limits the
/// HTTP figures: sequentially, it is not when the same client drove direct HTTP
/// faster; with C in flight, the CPU time per call of client, proxy and backend
/// together bounds the rate on this machine's CPUs, and the client's share of it
/// is what it takes from the others.
fn print_http_client_check(opts: &Options, runs: &[&Run], (dv, tv): (Via, Via), (direct, front): (&Row, &Row)) {
    let kinds = |via: Via| {
        let (json, sse) = runs.iter().map(|r| r.path(via).kinds).fold((0, 0), |(j, s), k| (j + k.json, s + k.sse));
        format!("{} {json} JSON, {sse} SSE", via.name(opts))
    };
    println!("  answers to the measured calls: {}; {}", kinds(dv), kinds(tv));
    let c = opts.concurrency;
    let fig = |via: Via, conc: bool, field: Field| median_over(runs, |r| r.path(via).cost(conc).get(field));
    println!(
        "  HTTP client check: the client's own CPU per call {} µs (direct HTTP), {} µs (tether HTTP), sequential | c={c}",
        pair(fig(dv, false, Field::ClientCpu), fig(dv, true, Field::ClientCpu), dec),
        pair(fig(tv, false, Field::ClientCpu), fig(tv, true, Field::ClientCpu), dec),
    );
    let sequential = if direct.seq_rate > front.seq_rate {
        "not the limit: it drove direct HTTP faster"
    } else {
        "it may be the limit: it drove direct HTTP no faster"
    };
    println!(
        "    sequential: direct HTTP {} calls/s, tether HTTP {}: {sequential}",
        int(direct.seq_rate),
        int(front.seq_rate)
    );
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let [client, proxy, backend] = [Field::ClientCpu, Field::ProxyCpu, Field::BackendCpu].map(|f| fig(tv, true, f));
    let total = client + proxy + backend;
    let ceiling = cpus as f64 * 1e6 / total;
    let bound = if front.conc_rate >= 0.8 * ceiling {
        format!("CPU-bound, the client's share of the CPU {:.0} %", 100.0 * client / total)
    } else {
        "not CPU-bound".to_string()
    };
    println!(
        "    c={c}: tether HTTP CPU per call client {} + proxy {} + backend {} = {} µs, at most {} calls/s on {cpus} \
         CPUs; it ran at {} ({:.0} % of that): {bound}",
        dec(client),
        dec(proxy),
        dec(backend),
        dec(total),
        int(ceiling),
        int(front.conc_rate),
        100.0 * front.conc_rate / ceiling,
    );
}

/// Each further tether binary beside the first.
fn print_side_by_side(opts: &Options, runs: &[&Run], summaries: &[TetherSummary]) {
    let c = opts.concurrency;
    let (first, base) = (&opts.tethers[0], &summaries[0]);
    let a = Row::median_of(runs, Via::Tether(0));
    for (t, (bin, sum)) in opts.tethers.iter().zip(summaries).enumerate().skip(1) {
        let b = Row::median_of(runs, Via::Tether(t));
        println!();
        println!(
            "{} vs {}: seq p50 {} vs {} µs, c={c} throughput {} vs {} calls/s ({}), proxy CPU per call {:.1} vs \
             {:.1} µs, idle VmHWM {} vs {}, recovery median {:.1} vs {:.1} ms",
            bin.label,
            first.label,
            int(b.seq_p50),
            int(a.seq_p50),
            int(b.conc_rate),
            int(a.conc_rate),
            ratio(b.conc_rate / a.conc_rate),
            sum.cpu_us.0,
            base.cpu_us.0,
            mib(sum.idle_kib),
            mib(base.idle_kib),
            sum.recovery_ms,
            base.recovery_ms,
        );
    }
}

fn report(opts: &Options, runs: &[Run]) {
    let runs: Vec<&Run> = runs.iter().collect();
    println!();
    println!("medians of {} run(s)", runs.len());
    print_table(opts, &runs);
    print_cpu(opts, &runs);
    let start = median_over(&runs, |r| Some(median(&r.start_ms)));
    let summaries: Vec<TetherSummary> = (0..opts.tethers.len()).map(|t| TetherSummary::of(&runs, t)).collect();
    print_tether_extras(opts, &summaries, start);
    for (t, sum) in summaries.iter().enumerate() {
        print_ratios(opts.tethers[t].label, opts.concurrency, &sum.ratios);
        print_tether_targets(opts, t, sum, &runs, start);
    }
    if let Some(t) = opts.http {
        print_http(opts, &runs, t);
    }
    print_side_by_side(opts, &runs, &summaries);
}

/// What is measured, and with which binaries.
fn print_intro(opts: &Options) {
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
    match &opts.socat {
        Some(socat) => println!("  {:<15} {}", "socat", socat.display()),
        None => println!("  {:<15} not measured (none on PATH, or --no-socat)", "socat"),
    }
    println!(
        "  paths: direct = client <-> mock-mcp; relay = client <-> null-relay <-> mock-mcp; \
         socat = client <-> socat STDIO EXEC:mock-mcp; \
         tether = client <-> tether --config (one mock, default policy) <-> mock-mcp, for each tether binary; \
         call: echo / m__echo"
    );
    if !opts.pace.is_zero() {
        println!("  sequential calls paced: each sent {} µs after the previous answer", opts.pace.as_micros());
    }
    match opts.http {
        Some(t) => println!(
            "  HTTP paths: direct HTTP = client <-> mock-mcp --http; {0} HTTP = client <-> {0} serve --listen \
             <-> mock-mcp (stdio); Streamable HTTP, one keep-alive connection per client thread, {1} threads \
             in the concurrent measurement",
            opts.tethers[t].label, opts.concurrency
        ),
        None => println!("  HTTP paths: not measured (--no-http, or no smol `tether` among the binaries)"),
    }
    println!(
        "  recovery: {} crashes per run with tether policy {RECOVERY_POLICY} (restart at once, never give up); \
         backend start: {} spawns per run",
        opts.recoveries, opts.start_samples
    );
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
    print_intro(&opts);
    let mut bench = Bench { opts, dir, mock_tools: 0, spawned: 0 };
    if let Err(e) = bench.probe_mock() {
        eprintln!("tether-bench: {e}");
        return ExitCode::FAILURE;
    }
    let mut runs = Vec::new();
    let main_runs = if bench.opts.sdk_only { 0 } else { bench.opts.runs };
    for r in 0..main_runs {
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
    let mut guarded = true;
    if !runs.is_empty() {
        report(&bench.opts, &runs);
        if let Some(file) = &bench.opts.guard {
            match guard(&bench.opts, &runs, file) {
                Ok(held) => guarded = held,
                Err(e) => {
                    eprintln!("tether-bench: --guard {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            }
        }
    }
    if let Some(python) = &bench.opts.python {
        let tether = bench.opts.tethers.iter().find(|t| t.label == "tether").unwrap_or(&bench.opts.tethers[0]);
        let setup = bench_sdk::SdkSetup {
            python,
            dir: bench.dir.path(),
            tether: &tether.path,
            socat: bench.opts.socat.as_deref(),
            runs: bench.opts.runs,
            load: bench_sdk::SdkLoad { calls: bench.opts.calls, warmup: bench.opts.warmup, pace: bench.opts.pace },
        };
        if let Err(e) = bench_sdk::section(&setup) {
            eprintln!("tether-bench: SDK path: {e}");
            return ExitCode::FAILURE;
        }
    }
    if guarded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The ratios the regression guard can hold, by name: each the median over the
/// runs of a ratio taken within one run, so a slow machine moves both sides.
fn guard_ratios(opts: &Options, runs: &[Run]) -> Vec<(String, f64)> {
    let runs: Vec<&Run> = runs.iter().collect();
    let mut ratios = Vec::new();
    for (t, bin) in opts.tethers.iter().enumerate() {
        let cpu = median_over(&runs, |r| cpu_vs_relay(r, Via::Tether(t), false));
        ratios.push((format!("{}.cpu_x_relay", bin.label), cpu));
    }
    if let Some(t) = opts.http {
        let (dv, tv) = (Via::DirectHttp, Via::TetherHttp(t));
        let label = opts.tethers[t].label;
        ratios.push((format!("{label}.http_cpu_x_relay"), median_over(&runs, |r| cpu_vs_relay(r, tv, false))));
        let added = median_over(&runs, |r| {
            let (front, direct) = (Row::of(r.path(tv)).seq_p50, Row::of(r.path(dv)).seq_p50);
            Some((front - direct) / direct)
        });
        ratios.push((format!("{label}.http_added_p50_x_direct"), added));
    }
    ratios
}

/// Holds the ratios `file` names to their baselines: prints each, and whether
/// it regressed by more than the file's factor. `Ok(false)` on a regression.
fn guard(opts: &Options, runs: &[Run], file: &Path) -> Result<bool, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let spec: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let factor = spec["regression"].as_f64().ok_or("`regression` (a number) is missing")?;
    let baseline = spec["baseline"].as_object().ok_or("`baseline` (an object) is missing")?;
    let measured = guard_ratios(opts, runs);
    println!();
    println!("regression guard ({}): each ratio at most {factor}× its baseline", file.display());
    let mut held = true;
    for (name, base) in baseline {
        let base = base.as_f64().ok_or_else(|| format!("baseline {name}: not a number"))?;
        let Some((_, now)) = measured.iter().find(|(n, _)| n == name) else {
            println!("  {name}: not measured in this run (skipped)");
            continue;
        };
        let ok = !now.is_nan() && *now <= base * factor;
        held &= ok;
        println!("  {name}: {now:.2} (baseline {base:.2}, limit {:.2}) {}", base * factor, verdict(ok));
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ratios with only the added latencies set, as `Ratios::of` computes them.
    fn added(relay_added: f64, tether_added: f64) -> Ratios {
        Ratios {
            relay_p50: f64::NAN,
            tether_p50: f64::NAN,
            relay_added,
            tether_added,
            added_vs_relay: if relay_added > 0.0 { tether_added / relay_added } else { f64::NAN },
            relay_conc: f64::NAN,
            tether_conc: f64::NAN,
            tether_conc_vs_relay: f64::NAN,
            cpu_vs_relay: f64::NAN,
        }
    }

    #[test]
    fn added_latency_is_held_to_the_relays_or_to_the_floor_when_the_relay_adds_nothing() {
        assert!(added_latency_target("tether", &added(10.0, 13.0)).1);
        assert!(!added_latency_target("tether", &added(10.0, 13.5)).1);
        let (figure, met) = added_latency_target("tether", &added(-1.0, 4.0));
        assert!(met && figure.contains("ratio undefined"), "{figure}");
        assert!(!added_latency_target("tether", &added(0.0, 6.0)).1);
    }
}
