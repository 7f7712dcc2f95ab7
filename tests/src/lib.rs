//! tether-tests: end-to-end tests of the real `tether` binaries (the smol runtime's
//! `tether` and the plain-threads runtime's `tether-blocking`, see [`Runtime`])
//! against the mock backend (`mock-mcp`, the same mock `tether demo` uses), driven
//! by a small blocking MCP client.

pub mod bench;
pub mod bench_http;
pub mod bench_sdk;
pub mod oauth_backend;
pub mod redis_server;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The directory holding the workspace's binaries (target/debug or target/release).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>
    exe.parent().and_then(Path::parent).expect("target dir").to_path_buf()
}

/// A tether runtime: which binary a test runs. Both read the same config files,
/// take the same global flags and log the same lines (through `tether-host`); the
/// blocking one serves stdio only (no `--listen`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// `tether` (crate `tether-smol`), the product binary.
    Smol,
    /// `tether-blocking` (crate `tether-blocking`), the plain-threads runtime.
    Blocking,
}

impl Runtime {
    /// Every runtime, smol first.
    pub const ALL: [Runtime; 2] = [Runtime::Smol, Runtime::Blocking];

    /// The cargo package that builds it.
    pub fn package(self) -> &'static str {
        match self {
            Runtime::Smol => "tether-smol",
            Runtime::Blocking => "tether-blocking",
        }
    }

    /// The binary's name (in `target/<profile>/`).
    pub fn bin_name(self) -> &'static str {
        match self {
            Runtime::Smol => "tether",
            Runtime::Blocking => "tether-blocking",
        }
    }

    /// The environment variable naming another build to test instead.
    pub fn env_var(self) -> &'static str {
        match self {
            Runtime::Smol => "TETHER_BIN",
            Runtime::Blocking => "TETHER_BLOCKING_BIN",
        }
    }

    /// The binary under test: `$<env_var>` if set, else `target/<profile>/<bin_name>`,
    /// built on first use.
    ///
    /// `cargo test -p tether-tests` builds this package's binaries (`mock-mcp`) but
    /// not those of its dependencies, so the first call per runtime builds the
    /// binary with the cargo that runs the tests (a no-op when it is up to date).
    /// A failed build panics in every test that asks for it, with cargo's errors.
    pub fn bin(self) -> PathBuf {
        if let Some(path) = std::env::var_os(self.env_var()) {
            return PathBuf::from(path);
        }
        static BUILDS: [OnceLock<Result<(), String>>; 2] = [OnceLock::new(), OnceLock::new()];
        let slot = match self {
            Runtime::Smol => &BUILDS[0],
            Runtime::Blocking => &BUILDS[1],
        };
        if let Err(e) = slot.get_or_init(|| build_bin(self)) {
            panic!("{e}");
        }
        let path = bin_dir().join(self.bin_name());
        assert!(
            path.exists(),
            "{} missing: run `cargo build -p {} --bin {}` (or set {})",
            path.display(),
            self.package(),
            self.bin_name(),
            self.env_var()
        );
        path
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.bin_name())
    }
}

/// The `tether` binary under test (the smol runtime; `TETHER_BIN` overrides it).
pub fn tether_bin() -> PathBuf {
    Runtime::Smol.bin()
}

/// Builds `runtime`'s binary into the directory the tests run from.
fn build_bin(runtime: Runtime) -> Result<(), String> {
    let dir = bin_dir();
    let Some(target_dir) = dir.parent() else { return Ok(()) };
    let (package, bin) = (runtime.package(), runtime.bin_name());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", package, "--bin", bin])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    let release = dir.file_name().is_some_and(|n| n == "release");
    if release {
        cmd.arg("--release");
    }
    // The variables cargo sets for this test process describe tether-tests; build
    // scripts that watch them (ring's watches CARGO_MANIFEST_DIR) would rebuild.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let per_package = ["CARGO_PKG_", "CARGO_BIN_EXE_"].iter().any(|p| name.starts_with(p))
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
            ]
            .contains(&name.as_ref());
        if per_package {
            cmd.env_remove(name.as_ref());
        }
    }
    match cmd.output() {
        Ok(out) if out.status.success() => {
            // Warnings, if any: show them as cargo would have.
            std::io::stderr().write_all(&out.stderr).ok();
            Ok(())
        }
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = stderr.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            Err(format!(
                "cannot build the {runtime} binary under test: `cargo build{} -p {package} --bin {bin}` failed ({}). \
                 Does crate `{package}` have a `{bin}` binary yet, and does it compile? (Set {} to test a binary \
                 built elsewhere.)\n\
                 cargo said:\n{}",
                if release { " --release" } else { "" },
                out.status,
                runtime.env_var(),
                tail.join("\n")
            ))
        }
        // No cargo at hand: test whatever binary is there.
        Err(e) => {
            eprintln!("cannot run cargo to build {bin} ({e}); using the existing binary");
            Ok(())
        }
    }
}

/// One MCP POST over Streamable HTTP: the status, the `Mcp-Session-Id` header,
/// and the body (JSON, or the data of an SSE stream's last event). HTTP error
/// statuses are answers; only transport failures are `Err`.
pub fn mcp_post(
    agent: &ureq::Agent,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> Result<(u16, Option<String>, String), String> {
    let mut req =
        agent.post(url).set("Content-Type", "application/json").set("Accept", "application/json, text/event-stream");
    if let Some(token) = token {
        req = req.set("Authorization", &format!("Bearer {token}"));
    }
    if let Some(session) = session {
        req = req.set("Mcp-Session-Id", session).set("MCP-Protocol-Version", "2025-11-25");
    }
    let response = match req.send_string(&body.to_string()) {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(format!("POST {url}: {e}")),
    };
    let status = response.status();
    let session = response.header("mcp-session-id").map(str::to_string);
    let sse = response.content_type() == "text/event-stream";
    let mut text = response.into_string().map_err(|e| format!("reading the answer: {e}"))?;
    if sse {
        text = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|d| !d.is_empty())
            .unwrap_or("")
            .to_string();
    }
    Ok((status, session, text))
}

/// The mock backend binary.
pub fn mock_bin() -> PathBuf {
    bin_dir().join("mock-mcp")
}

/// A stdio server entry running the mock with `args`.
pub fn mock_server(args: &[&str]) -> Value {
    json!({ "command": mock_bin(), "args": args })
}

/// A running `tether` (either runtime) with a client session over its stdio.
pub struct Tether {
    child: Child,
    runtime: Runtime,
    stdin: Option<ChildStdin>,
    frames: Receiver<Value>,
    /// Frames received that were not the awaited response (notifications, server requests).
    pub inbox: Vec<Value>,
    /// Everything tether wrote to stderr.
    pub stderr: Arc<Mutex<String>>,
    /// Every line tether wrote to stdout, as written (parsed or not).
    pub stdout_lines: Arc<Mutex<Vec<String>>>,
    next_id: u64,
    /// Where the config (and anything else the test needs) lives.
    pub dir: tempfile::TempDir,
}

impl Tether {
    /// Starts `tether --config <file with config>` plus `args` (the smol runtime).
    pub fn start(config: Value, args: &[&str]) -> Tether {
        Tether::start_with(Runtime::Smol, config, args)
    }

    /// Starts `runtime`'s binary with `--config <file with config>` plus `args`.
    pub fn start_with(runtime: Runtime, config: Value, args: &[&str]) -> Tether {
        Tether::start_with_env(runtime, config, args, &[])
    }

    /// [`Tether::start_with`] with extra environment variables (say
    /// `TETHER_STATE_DIR`, so credentials stay in the test's directory).
    pub fn start_with_env(runtime: Runtime, config: Value, args: &[&str], env: &[(&str, &OsStr)]) -> Tether {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        let bin = runtime.bin();
        let mut child = Command::new(&bin)
            .envs(env.iter().copied())
            .arg("--config")
            .arg(&path)
            .arg("--log-level")
            .arg("debug")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, frames) = mpsc::channel();
        let stdout_lines = Arc::new(Mutex::new(Vec::new()));
        let raw = stdout_lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                raw.lock().unwrap().push(line.clone());
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Err(e) => panic!("{runtime} wrote a non-JSON line to stdout ({e}): {line}"),
                }
            }
        });
        let stderr = collect_lines(child.stderr.take().unwrap());
        let stdin = child.stdin.take();
        Tether { child, runtime, stdin, frames, inbox: Vec::new(), stderr, stdout_lines, next_id: 1, dir }
    }

    /// Which runtime this is.
    pub fn runtime(&self) -> Runtime {
        self.runtime
    }

    /// The configuration file tether was started with (rewrite it, then [`Tether::reload`]).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.json")
    }

    /// A path inside the test's temporary directory (for state files, traces).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Replaces the configuration file and sends SIGHUP so tether reloads it.
    pub fn reload(&self, config: &Value) {
        self.write_config(config);
        self.signal("HUP");
    }

    /// Replaces the config file (a running tether notices by itself, unless
    /// started with `--no-watch`).
    pub fn write_config(&self, config: &Value) {
        std::fs::write(self.config_path(), serde_json::to_string_pretty(config).unwrap()).unwrap();
    }

    /// Sends a signal (`HUP`, `TERM`, …) to tether.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").args(["-s", name, &self.pid().to_string()]).status().expect("run kill");
        assert!(status.success(), "kill -s {name} failed");
    }

    /// Sends a request without waiting; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        id
    }

    /// Waits for the response to request `id` (other frames go to `inbox`).
    pub fn response(&mut self, id: u64, timeout: Duration) -> Option<Value> {
        self.wait_for(|f| f["id"] == json!(id) && f.get("method").is_none(), timeout)
    }

    /// Removes and returns the frames in `inbox` matching `pred`, in arrival order.
    pub fn take_inbox(&mut self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let (taken, kept) = std::mem::take(&mut self.inbox).into_iter().partition(|f| pred(f));
        self.inbox = kept;
        taken
    }

    /// Moves every frame received so far into `inbox`, waiting `quiet` for more.
    pub fn collect_for(&mut self, quiet: Duration) {
        let deadline = Instant::now() + quiet;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(f) => self.inbox.push(f),
                Err(_) => return,
            }
        }
    }

    /// Drops every frame received so far (from `inbox`, the channel and
    /// `stdout_lines`); how many frames were received since the last call. For a
    /// test whose backend floods the client: memory stays bounded.
    pub fn forget_output(&mut self) -> usize {
        while let Ok(frame) = self.frames.try_recv() {
            self.inbox.push(frame);
        }
        self.inbox.clear();
        std::mem::take(&mut *self.stdout_lines.lock().unwrap()).len()
    }

    /// How many times `needle` occurs in the stderr log so far.
    pub fn log_count(&self, needle: &str) -> usize {
        self.stderr_text().matches(needle).count()
    }

    /// Waits until `needle` occurs at least `count` times in the stderr log.
    pub fn wait_log_count(&self, needle: &str, count: usize, timeout: Duration) -> bool {
        wait_until(timeout, || self.log_count(needle) >= count)
    }

    /// Sends one frame.
    pub fn send(&mut self, frame: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{frame}").expect("write to tether");
        stdin.flush().unwrap();
    }

    /// Sends one line as it is (for frames that are not JSON).
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to tether");
        stdin.flush().unwrap();
    }

    /// Sends a request and waits for its response (other frames go to `inbox`).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_timeout(method, params, Duration::from_secs(30))
    }

    /// As [`Tether::request`] with a timeout.
    pub fn request_timeout(&mut self, method: &str, params: Value, timeout: Duration) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        self.wait_for(|f| f["id"] == json!(id) && f.get("method").is_none(), timeout).unwrap_or_else(|| {
            panic!("no response to {method} #{id} from {} within {timeout:?}\n{}", self.runtime, self.stderr_text())
        })
    }

    /// Waits for a frame matching `pred`, keeping the others in `inbox`.
    pub fn wait_for(&mut self, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Option<Value> {
        if let Some(pos) = self.inbox.iter().position(&pred) {
            return Some(self.inbox.remove(pos));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(f) if pred(&f) => return Some(f),
                Ok(f) => self.inbox.push(f),
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Waits for a notification with `method`.
    pub fn notification(&mut self, method: &str, timeout: Duration) -> Option<Value> {
        self.wait_for(|f| f["method"] == method && f.get("id").is_none(), timeout)
    }

    /// The MCP handshake (with sampling and roots capabilities).
    pub fn initialize(&mut self) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"roots":{"listChanged":true}},"clientInfo":{"name":"e2e","version":"1"}}),
        );
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        r
    }

    /// Calls a tool and returns the whole response.
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// The text of a tool result's first content item.
    pub fn call_text(&mut self, tool: &str, arguments: Value) -> String {
        let r = self.call(tool, arguments);
        r["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {r}")).to_string()
    }

    /// Tool names currently listed.
    pub fn tool_names(&mut self) -> Vec<String> {
        let r = self.request("tools/list", json!({}));
        r["result"]["tools"]
            .as_array()
            .map_or_else(Vec::new, |t| t.iter().filter_map(|t| t["name"].as_str().map(String::from)).collect())
    }

    /// What tether logged so far.
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The URL tether logged right after `marker` (`"listening on "` for the MCP
    /// endpoint of `serve --listen`), waiting for the line.
    pub fn logged_url(&self, marker: &str) -> String {
        let line = format!("{marker}http");
        assert!(self.wait_log(&line, Duration::from_secs(20)), "no `{line}` in the log:\n{}", self.stderr_text());
        let log = self.stderr_text();
        let at = log.find(&line).unwrap() + marker.len();
        log[at..].split_whitespace().next().unwrap().to_string()
    }

    /// Polls the stderr log until it contains `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        wait_until(timeout, || self.stderr_text().contains(needle))
    }

    /// Closes stdin and waits for tether to exit; returns its exit status.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{} did not exit after stdin closed\n{}", self.runtime, self.stderr_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// tether's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Tether {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes; true if it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process with this id exists, zombies included (`/proc/<pid>` is there
/// until the parent reaps it).
pub fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether a process with this id exists and has not exited (a zombie has).
pub fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // pid (comm) state ...; comm may contain spaces and parentheses.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

/// The lines of a mock's `--state-file` (the methods it received, in order).
pub fn state_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|s| s.lines().map(String::from).collect()).unwrap_or_default()
}

/// A localhost port that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// A `mock-mcp --http` server run by the test (killed on drop).
pub struct HttpMock {
    child: Child,
    /// Where it listens.
    pub port: u16,
}

impl HttpMock {
    /// Starts `mock-mcp --http 127.0.0.1:<port>` plus `args` and waits until it accepts connections.
    pub fn start(port: u16, args: &[&str]) -> HttpMock {
        HttpMock::start_with_stderr(port, args, Stdio::null())
    }

    /// [`HttpMock::start`] with the mock's stderr going to `stderr` (say a file).
    pub fn start_with_stderr(port: u16, args: &[&str], stderr: impl Into<Stdio>) -> HttpMock {
        let child = Command::new(mock_bin())
            .arg("--http")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start mock-mcp --http");
        let mut mock = HttpMock { child, port };
        let up = wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() || mock.child.try_wait().ok().flatten().is_some()
        });
        assert!(up && mock.child.try_wait().unwrap().is_none(), "mock-mcp did not start listening on port {port}");
        mock
    }

    /// The endpoint URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Kills it and waits until it is gone.
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpMock {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `on_both_runtimes!(scenario);` turns `fn scenario(rt: Runtime)` into two tests,
/// `scenario::smol` and `scenario::blocking`.
#[macro_export]
macro_rules! on_both_runtimes {
    ($scenario:ident) => {
        mod $scenario {
            use $crate::Runtime;

            #[test]
            fn smol() {
                super::$scenario(Runtime::Smol);
            }

            #[test]
            fn blocking() {
                super::$scenario(Runtime::Blocking);
            }
        }
    };
}

/// A process's resident set in KiB (VmRSS; `None` off Linux or once it is gone).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Samples a process's RSS every 10 ms until dropped, keeping the peak: what
/// the hostile tests bound.
pub struct RssSampler {
    peak: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl RssSampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32) -> RssSampler {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let (peak, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Some(kib) = rss_kib(pid) {
                    p.fetch_max(kib, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        RssSampler { peak, stop }
    }

    /// The peak so far, in KiB (`None` where RSS cannot be read).
    pub fn peak(&self) -> Option<u64> {
        Some(self.peak.load(std::sync::atomic::Ordering::SeqCst)).filter(|k| *k > 0)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The latency below which a share `p` (0..=1) of `latencies` stayed (zero for none).
pub fn percentile(latencies: &[Duration], p: f64) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let Some(last) = sorted.len().checked_sub(1) else { return Duration::ZERO };
    sorted[((last as f64) * p).round() as usize]
}

/// Reads `stream` line by line on a thread of its own into a shared text (a
/// child's stderr, so the tests can read what it logged so far).
pub fn collect_lines(stream: impl std::io::Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let mut s = sink.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    text
}
