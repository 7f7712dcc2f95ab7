//! The measuring parts of `tether-bench`: a minimal MCP client over a child's
//! stdio, latency statistics, and processes' memory and CPU readings. (The client
//! over Streamable HTTP is in [`crate::bench_http`].)
//!
//! The client writes each request as one newline-delimited JSON-RPC line with one
//! `write` to the child's stdin, and one reader thread reads the child's stdout,
//! stamping every line with the time it was read before parsing it, so a
//! latency is "request written" to "answer read", without the hand-off between
//! threads.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long any single answer may take before the benchmark gives up.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// One line the child wrote to stdout.
#[derive(Debug)]
pub struct Frame {
    /// When the reader thread had read the whole line.
    pub at: Instant,
    /// The id of a response (a frame with an id and no method).
    pub response_id: Option<u64>,
    /// The line, parsed (a string holding the raw line if it was not JSON).
    pub value: Value,
}

/// A child process speaking MCP over its stdio, and the client end of that.
pub struct Peer {
    /// What it is, for messages.
    pub label: String,
    child: Child,
    stdin: Option<ChildStdin>,
    frames: Receiver<Frame>,
    next_id: u64,
    stderr_path: Option<std::path::PathBuf>,
    line: String,
}

impl Peer {
    /// Starts `program args`; its stderr goes to `stderr_path` (read back for error
    /// messages) or nowhere.
    pub fn spawn(label: &str, program: &Path, args: &[String], stderr_path: Option<&Path>) -> Result<Peer, String> {
        let stderr = match stderr_path {
            Some(path) => Stdio::from(File::create(path).map_err(|e| format!("{}: {e}", path.display()))?),
            None => Stdio::null(),
        };
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("{label}: cannot start {}: {e}", program.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, frames) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("{label}-reader"))
            .spawn(move || {
                let mut reader = BufReader::with_capacity(64 * 1024, stdout);
                let mut line = String::new();
                loop {
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let at = Instant::now();
                    let value = serde_json::from_str::<Value>(&line).unwrap_or_else(|_| Value::String(line.clone()));
                    let response_id = match value.get("method") {
                        None => value.get("id").and_then(Value::as_u64),
                        Some(_) => None,
                    };
                    if tx.send(Frame { at, response_id, value }).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| format!("cannot start a reader thread: {e}"))?;
        let stdin = child.stdin.take();
        Ok(Peer {
            label: label.to_string(),
            child,
            stdin,
            frames,
            next_id: 1,
            stderr_path: stderr_path.map(Path::to_path_buf),
            line: String::with_capacity(256),
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of the child's stderr, for error messages.
    pub fn stderr_tail(&self) -> String {
        let Some(path) = &self.stderr_path else { return String::new() };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        if tail.is_empty() {
            String::new()
        } else {
            format!("\n--- last lines of {}'s stderr ---\n{tail}", self.label)
        }
    }

    fn fail(&self, what: String) -> String {
        format!("{}: {what}{}", self.label, self.stderr_tail())
    }

    /// Writes a request whose `method` and `params` are already JSON text; returns
    /// its id and when it was written. One `write` per request.
    pub fn send_raw(&mut self, method: &str, params_json: &str) -> Result<(u64, Instant), String> {
        let id = self.next_id;
        self.next_id += 1;
        self.line.clear();
        use std::fmt::Write as _;
        let _ = writeln!(self.line, r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params_json}}}"#);
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        let at = Instant::now();
        if let Err(e) = stdin.write_all(self.line.as_bytes()) {
            return Err(self.fail(format!("cannot write request #{id}: {e}")));
        }
        Ok((id, at))
    }

    /// Writes a request; returns its id and when it was written.
    pub fn send(&mut self, method: &str, params: &Value) -> Result<(u64, Instant), String> {
        self.send_raw(method, &params.to_string())
    }

    /// Writes a notification.
    pub fn notify(&mut self, method: &str) -> Result<(), String> {
        let line = format!("{}\n", json!({"jsonrpc": "2.0", "method": method}));
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        stdin.write_all(line.as_bytes()).map_err(|e| format!("cannot write {method}: {e}"))
    }

    /// The next response (of any id), skipping notifications and server requests.
    pub fn next_response(&mut self, timeout: Duration) -> Result<Frame, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(frame) if frame.response_id.is_some() => return Ok(frame),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => return Err(self.fail(format!("no answer within {timeout:?}"))),
                Err(RecvTimeoutError::Disconnected) => return Err(self.fail("stdout closed".to_string())),
            }
        }
    }

    /// The response to request `id` (earlier responses to other ids are dropped).
    pub fn response(&mut self, id: u64, timeout: Duration) -> Result<Frame, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = self.next_response(left)?;
            if frame.response_id == Some(id) {
                return Ok(frame);
            }
        }
    }

    /// Sends a request and waits for its answer.
    pub fn request(&mut self, method: &str, params: &Value) -> Result<Frame, String> {
        let (id, _) = self.send(method, params)?;
        self.response(id, ANSWER_TIMEOUT)
    }

    /// The MCP handshake: `initialize`, then `notifications/initialized`.
    pub fn initialize(&mut self) -> Result<Value, String> {
        let params = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "tether-bench", "version": env!("CARGO_PKG_VERSION")},
        });
        let frame = self.request("initialize", &params)?;
        if frame.value.get("result").is_none() {
            return Err(self.fail(format!("initialize failed: {}", frame.value)));
        }
        self.notify("notifications/initialized")?;
        Ok(frame.value)
    }

    /// The names `tools/list` returns now (first page).
    pub fn tool_names(&mut self) -> Result<Vec<String>, String> {
        let frame = self.request("tools/list", &json!({}))?;
        let tools = frame.value.pointer("/result/tools").and_then(Value::as_array).cloned().unwrap_or_default();
        Ok(tools.iter().filter_map(|t| t["name"].as_str().map(String::from)).collect())
    }

    /// Polls `tools/list` until it lists at least `count` tools, `name` among them.
    pub fn wait_for_tools(&mut self, name: &str, count: usize, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let names = self.tool_names()?;
            if names.len() >= count && names.iter().any(|n| n == name) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.fail(format!(
                    "tools/list still lists {} tools (want {count}, with {name}) after {timeout:?}",
                    names.len()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Checks that a response is a successful tool result.
    pub fn check_ok(&self, frame: &Frame) -> Result<(), String> {
        if tool_ok(&frame.value) {
            Ok(())
        } else {
            Err(self.fail(format!("call failed: {}", frame.value)))
        }
    }

    /// Closes stdin and waits up to `grace` for the child to exit, then kills it.
    pub fn finish(mut self, grace: Duration) {
        self.close(grace);
    }

    fn close(&mut self, grace: Duration) {
        drop(self.stdin.take());
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            self.close(Duration::from_secs(3));
        }
    }
}

/// Whether a response is a successful tool result (no JSON-RPC error, not `isError`).
pub fn tool_ok(response: &Value) -> bool {
    response.get("error").is_none()
        && response.get("result").is_some()
        && response.pointer("/result/isError") != Some(&Value::Bool(true))
}

/// The text of a tool result's first content item.
pub fn tool_text(response: &Value) -> Option<&str> {
    response.pointer("/result/content/0/text").and_then(Value::as_str)
}

/// Latencies and how long they took altogether.
#[derive(Clone, Debug)]
pub struct Series {
    /// Calls answered.
    pub calls: usize,
    /// From the first request written to the last answer read.
    pub elapsed: Duration,
    /// Per-call latencies, sorted.
    pub sorted: Vec<Duration>,
}

impl Series {
    /// A series from unsorted latencies.
    pub fn new(mut latencies: Vec<Duration>, elapsed: Duration) -> Series {
        latencies.sort_unstable();
        Series { calls: latencies.len(), elapsed, sorted: latencies }
    }

    /// Calls per second.
    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `p`-th percentile (nearest rank), in microseconds.
    pub fn percentile_us(&self, p: f64) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.sorted.len() as f64).ceil() as usize;
        let i = rank.clamp(1, self.sorted.len()) - 1;
        self.sorted[i].as_secs_f64() * 1e6
    }
}

/// Sequential calls: each request is written once the previous answer was read.
pub fn sequential(peer: &mut Peer, method: &str, params_json: &str, n: usize) -> Result<Series, String> {
    sequential_paced(peer, method, params_json, n, Duration::ZERO)
}

/// [`sequential`], each request written `pace` after the previous answer was
/// read (as clients space their calls: a model thinks between tool calls).
/// Back to back, every party stays awake and hot; paced, each call pays for
/// waking the processes on its path, which is what a real client sees.
pub fn sequential_paced(
    peer: &mut Peer,
    method: &str,
    params_json: &str,
    n: usize,
    pace: Duration,
) -> Result<Series, String> {
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        if !pace.is_zero() {
            std::thread::sleep(pace);
        }
        let (id, sent) = peer.send_raw(method, params_json)?;
        let frame = peer.response(id, ANSWER_TIMEOUT)?;
        peer.check_ok(&frame)?;
        latencies.push(frame.at.saturating_duration_since(sent));
    }
    Ok(Series::new(latencies, start.elapsed()))
}

/// `n` calls with `concurrency` of them in flight: a new request is written as soon
/// as an answer is read.
pub fn concurrent(
    peer: &mut Peer,
    method: &str,
    params_json: &str,
    n: usize,
    concurrency: usize,
) -> Result<Series, String> {
    let concurrency = concurrency.max(1);
    let mut in_flight = std::collections::HashMap::with_capacity(concurrency * 2);
    let mut latencies = Vec::with_capacity(n);
    let mut sent = 0;
    let start = Instant::now();
    while sent < n.min(concurrency) {
        let (id, at) = peer.send_raw(method, params_json)?;
        in_flight.insert(id, at);
        sent += 1;
    }
    while latencies.len() < n {
        let frame = peer.next_response(ANSWER_TIMEOUT)?;
        let Some(sent_at) = frame.response_id.and_then(|id| in_flight.remove(&id)) else { continue };
        peer.check_ok(&frame)?;
        latencies.push(frame.at.saturating_duration_since(sent_at));
        if sent < n {
            let (id, at) = peer.send_raw(method, params_json)?;
            in_flight.insert(id, at);
            sent += 1;
        }
    }
    Ok(Series::new(latencies, start.elapsed()))
}

/// A field of `/proc/<pid>/status` in KiB (`VmHWM`, `VmRSS`).
pub fn proc_status_kib(pid: u32, field: &str) -> io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(field)?.strip_prefix(':')?;
            rest.trim().trim_end_matches("kB").trim().parse().ok()
        })
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("no {field} in /proc/{pid}/status")))
}

/// What a process has used so far: CPU time of all its threads, those that
/// already exited included (its CPU-time clock, see [`process_cpu_ns`]), and
/// context switches summed over the threads alive now (`/proc/<pid>/task/*/status`:
/// the switches of threads that exited are not counted).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcCost {
    /// Nanoseconds on a CPU.
    pub cpu_ns: u64,
    /// Voluntary and involuntary context switches of the live threads.
    pub switches: u64,
    /// Threads.
    pub threads: usize,
}

impl ProcCost {
    /// Reads the counters of process `pid` now.
    pub fn read(pid: u32) -> io::Result<ProcCost> {
        let mut cost = ProcCost { cpu_ns: process_cpu_ns(pid)?, ..ProcCost::default() };
        for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            // A thread may exit between listing and reading: skip it.
            let Ok(status) = std::fs::read_to_string(entry?.path().join("status")) else { continue };
            cost.threads += 1;
            for line in status.lines() {
                if let Some(rest) = line
                    .strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                {
                    cost.switches += rest.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
        Ok(cost)
    }

    /// CPU microseconds per call between `before` and `self`.
    pub fn cpu_per_call_since(&self, before: &ProcCost, calls: usize) -> f64 {
        self.cpu_ns.saturating_sub(before.cpu_ns) as f64 / 1e3 / calls.max(1) as f64
    }

    /// CPU microseconds and context switches per call between `before` and `self`.
    pub fn per_call_since(&self, before: &ProcCost, calls: usize) -> (f64, f64) {
        let switches = self.switches.saturating_sub(before.switches) as f64 / calls.max(1) as f64;
        (self.cpu_per_call_since(before, calls), switches)
    }
}

/// The CPU time process `pid` has used, in ns: its CPU-time clock
/// (`clock_getcpuclockid`), the sum over all its threads, live and exited, which
/// is what `utime + stime` in `/proc/<pid>/stat` count, but to the nanosecond
/// rather than in 10 ms ticks.
#[cfg(target_os = "linux")]
pub fn process_cpu_ns(pid: u32) -> io::Result<u64> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid, writable clockid_t.
    let rc = unsafe { libc::clock_getcpuclockid(pid, &mut clock) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

/// The CPU time of another process is read on Linux only.
#[cfg(not(target_os = "linux"))]
pub fn process_cpu_ns(_pid: u32) -> io::Result<u64> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// The pid of a child of process `pid` (any of its threads' children), if it has
/// one (`/proc/<pid>/task/*/children`).
pub fn child_pid(pid: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    tasks.filter_map(Result::ok).find_map(|task| {
        let children = std::fs::read_to_string(task.path().join("children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    })
}

/// The median of some numbers (the mean of the middle two for an even count); NaN
/// for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_medians() {
        let s = Series::new((1..=100).rev().map(Duration::from_micros).collect(), Duration::from_millis(1));
        assert_eq!(s.percentile_us(50.0).round(), 50.0);
        assert_eq!(s.percentile_us(99.0).round(), 99.0);
        assert_eq!(s.percentile_us(100.0).round(), 100.0);
        assert_eq!(s.rate().round(), 100_000.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn reads_own_peak_rss() {
        let kib = proc_status_kib(std::process::id(), "VmHWM").unwrap();
        assert!(kib > 0);
    }

    /// `utime + stime` of `/proc/<pid>/stat`, in ms (10 ms ticks).
    #[cfg(target_os = "linux")]
    fn proc_stat_cpu_ms(pid: u32) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
        // utime and stime are fields 14 and 15; `fields` starts at field 3.
        (fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()) * 10
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn process_cpu_counts_threads_that_exited() {
        let pid = std::process::id();
        let before = process_cpu_ns(pid).unwrap();
        std::thread::spawn(|| {
            let start = Instant::now();
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(200) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        })
        .join()
        .unwrap();
        let used_ms = (process_cpu_ns(pid).unwrap() - before) / 1_000_000;
        // Most of the 200 ms busy loop, even on a machine shared with other tests.
        assert!(used_ms >= 50, "the exited thread's CPU time is missing: {used_ms} ms");
        // The same sum as /proc/<pid>/stat, to its 10 ms ticks (and what ran between the readings).
        let stat_ms = proc_stat_cpu_ms(pid);
        let clock_ms = process_cpu_ns(pid).unwrap() / 1_000_000;
        assert!(stat_ms.abs_diff(clock_ms) <= 50, "/proc/{pid}/stat {stat_ms} ms vs clock {clock_ms} ms");
    }
}
