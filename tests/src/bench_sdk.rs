//! The SDK path of `tether-bench`: the official Python SDK's client calling the
//! official Python SDK's server over stdio, directly, behind a byte relay and
//! behind tether, so the figures are those of the implementations people run
//! (the Rust client and mock of the rest of the bench agree with tether; these
//! were written by others).
//!
//! The bench writes the two scripts below to its scratch directory and runs the
//! client with a Python that has the `mcp` package (`--python PATH`). The client
//! starts the path's first process itself (as a desktop client does), lists the
//! tools until the echo tool is there, warms up, says `ready`, waits for a line
//! on stdin, makes the calls and prints their latencies as one JSON line, then
//! waits for another line before it exits: between `ready` and the result the
//! bench reads the CPU time of the client's child (the proxy, or the server
//! when called directly).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::bench::{child_pid, process_cpu_ns};

/// The SDK's stdio server: one `echo` tool.
pub const SERVER_PY: &str = r#"
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-sdk")


@server.tool()
def echo(text: str) -> str:
    """Echoes the text back."""
    return text


server.run()
"#;

/// The SDK's client: see the module's doc. Its one argument is a JSON object:
/// `command`, `args`, `tool`, `calls`, `warmup`, `pace_us`.
pub const CLIENT_PY: &str = r#"
import json, sys, time
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

spec = json.loads(sys.argv[1])
tool, pace = spec["tool"], spec["pace_us"] / 1e6


def failed(result):
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


async def main():
    params = StdioServerParameters(command=spec["command"], args=spec["args"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(400):
                listed = await session.list_tools()
                if any(t.name == tool for t in listed.tools):
                    break
                await anyio.sleep(0.05)
            for _ in range(spec["warmup"]):
                await session.call_tool(tool, {"text": "warm"})
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            latencies = []
            for _ in range(spec["calls"]):
                if pace:
                    time.sleep(pace)
                start = time.perf_counter()
                result = await session.call_tool(tool, {"text": "hello from tether-bench"})
                latencies.append((time.perf_counter() - start) * 1e6)
                if failed(result):
                    print(json.dumps({"error": str(result)}), flush=True)
                    return
            print(json.dumps({"latencies_us": latencies}), flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)


anyio.run(main)
"#;

/// One SDK path: what the client starts, and the tool it calls there.
pub struct SdkPath {
    /// Its name in the report.
    pub name: String,
    pub command: PathBuf,
    pub args: Vec<String>,
    pub tool: &'static str,
    /// The client's child is a proxy (its CPU time is the proxy's).
    pub proxied: bool,
}

/// What one measurement of an SDK path gave.
#[derive(Clone, Copy, Debug)]
pub struct SdkSample {
    pub p50_us: f64,
    pub p99_us: f64,
    /// CPU time per call of the client's child (the proxy, or the server).
    pub child_cpu_us: Option<f64>,
}

/// How many calls, after how many warm-up calls, spaced how.
#[derive(Clone, Copy, Debug)]
pub struct SdkLoad {
    pub calls: usize,
    pub warmup: usize,
    pub pace: Duration,
}

/// The running client of one measurement.
struct ClientRun {
    child: Child,
    stdin: ChildStdin,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl ClientRun {
    fn next_line(&mut self, what: &str) -> Result<String, String> {
        match self.lines.next() {
            Some(Ok(line)) => Ok(line),
            _ => Err(format!("the SDK client ended before {what} (see its stderr)")),
        }
    }

    fn say(&mut self) -> Result<(), String> {
        self.stdin.write_all(b"go\n").and_then(|()| self.stdin.flush()).map_err(|e| format!("SDK client: {e}"))
    }
}

impl Drop for ClientRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the SDK client (`python` `client_py`) on `path` once.
pub fn measure(
    python: &Path,
    client_py: &Path,
    path: &SdkPath,
    load: SdkLoad,
    stderr: &Path,
) -> Result<SdkSample, String> {
    let spec = json!({
        "command": path.command,
        "args": path.args,
        "tool": path.tool,
        "calls": load.calls,
        "warmup": load.warmup,
        "pace_us": load.pace.as_micros() as u64,
    });
    let log = std::fs::File::create(stderr).map_err(|e| format!("{}: {e}", stderr.display()))?;
    let mut child = Command::new(python)
        .arg(client_py)
        .arg(spec.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let stdin = child.stdin.take().expect("piped");
    let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut run = ClientRun { child, stdin, lines };
    let ready = run.next_line("it was ready")?;
    if ready.trim() != "ready" {
        return Err(format!("SDK client said {ready:?} instead of ready"));
    }
    let measured = child_pid(run.child.id());
    let before = measured.and_then(|pid| process_cpu_ns(pid).ok());
    run.say()?;
    let result = run.next_line("its result")?;
    let after = measured.and_then(|pid| process_cpu_ns(pid).ok());
    run.say()?;
    let result: Value = serde_json::from_str(&result).map_err(|e| format!("SDK client result {result:?}: {e}"))?;
    if let Some(error) = result.get("error") {
        return Err(format!("{}: a call failed: {error}", path.name));
    }
    let mut latencies: Vec<f64> =
        result["latencies_us"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()).unwrap_or_default();
    if latencies.is_empty() {
        return Err(format!("{}: no latencies in {result}", path.name));
    }
    latencies.sort_by(f64::total_cmp);
    let at = |p: f64| latencies[((p * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len()) - 1];
    let child_cpu_us = match (before, after) {
        (Some(b), Some(a)) => Some((a.saturating_sub(b)) as f64 / 1e3 / load.calls as f64),
        _ => None,
    };
    Ok(SdkSample { p50_us: at(0.5), p99_us: at(0.99), child_cpu_us })
}

/// What the SDK section measures with.
pub struct SdkSetup<'a> {
    /// A Python with the `mcp` package.
    pub python: &'a Path,
    /// Where the scripts and configs go.
    pub dir: &'a Path,
    /// The `tether` binary.
    pub tether: &'a Path,
    /// socat, the byte relay, if measured.
    pub socat: Option<&'a Path>,
    pub runs: usize,
    pub load: SdkLoad,
}

/// tether's added p50 over the SDK's direct path, at most this many times the
/// byte relay's.
pub const TARGET_ADDED_VS_SOCAT: f64 = 1.5;

/// When the relay adds nothing (its p50 at or below the direct path's, as
/// happens: the Python peers wake each other less with a process between
/// them), tether's p50 is held to within this much of the relay's instead.
pub const TARGET_P50_VS_SOCAT: f64 = 1.1;

/// Measures every SDK path `runs` times, the order rotating from run to run,
/// and prints medians, the added latency of each path over the direct one, and
/// tether's against socat's. Returns whether tether met its target (`true`
/// when socat is not measured: there is nothing to hold it to).
pub fn section(setup: &SdkSetup<'_>) -> Result<bool, String> {
    let write = |name: &str, text: &str| -> Result<PathBuf, String> {
        let path = setup.dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    };
    let server = write("sdk_server.py", SERVER_PY)?;
    let client = write("sdk_client.py", CLIENT_PY)?;
    let python = setup.python.display().to_string();
    let entry = json!({ "command": python, "args": [server.display().to_string()] });
    let mut stateless = entry.clone();
    stateless["tether"] = json!({ "era": "stateless" });
    let auto_config = write("sdk-auto.json", &json!({ "mcpServers": { "py": entry } }).to_string())?;
    let stateless_config = write("sdk-stateless.json", &json!({ "mcpServers": { "py": stateless } }).to_string())?;
    let tether_path = |name: &str, config: &Path| SdkPath {
        name: name.to_string(),
        command: setup.tether.to_path_buf(),
        args: vec!["--config".into(), config.display().to_string(), "--log-level".into(), "warn".into()],
        tool: "py__echo",
        proxied: true,
    };
    let mut paths = vec![SdkPath {
        name: "direct".into(),
        command: setup.python.to_path_buf(),
        args: vec![server.display().to_string()],
        tool: "echo",
        proxied: false,
    }];
    if let Some(socat) = setup.socat {
        paths.push(SdkPath {
            name: "socat".into(),
            command: socat.to_path_buf(),
            args: vec!["STDIO".into(), format!("EXEC:{python} {}", server.display())],
            tool: "echo",
            proxied: true,
        });
    }
    // On stdio, `auto` opens a server that speaks both eras in the handshake era.
    paths.push(tether_path("tether", &auto_config));
    paths.push(tether_path("tether (era: stateless)", &stateless_config));
    let mut samples: Vec<Vec<SdkSample>> = vec![Vec::new(); paths.len()];
    for r in 0..setup.runs {
        for k in 0..paths.len() {
            let i = (k + r) % paths.len();
            let stderr = setup.dir.join(format!("sdk-client-{r}-{i}.stderr"));
            samples[i].push(measure(setup.python, &client, &paths[i], setup.load, &stderr)?);
        }
    }
    let med = |i: usize, f: fn(&SdkSample) -> Option<f64>| {
        crate::bench::median(&samples[i].iter().filter_map(f).collect::<Vec<_>>())
    };
    // Added latency per run (against that run's direct figure), then the median.
    let added = |i: usize| {
        let per_run: Vec<f64> = samples[i].iter().zip(&samples[0]).map(|(s, d)| s.p50_us - d.p50_us).collect();
        crate::bench::median(&per_run)
    };
    println!();
    println!(
        "SDK path: the official Python SDK's client and server over stdio ({} calls per run{}, medians of {} runs)",
        setup.load.calls,
        if setup.load.pace.is_zero() {
            String::new()
        } else {
            format!(", each {} µs after the previous answer", setup.load.pace.as_micros())
        },
        setup.runs
    );
    println!("  {:<24} {:>9} {:>9} {:>14} {:>22}", "", "p50 µs", "p99 µs", "added p50 µs", "CPU per call µs");
    for (i, path) in paths.iter().enumerate() {
        let whose = if path.proxied { "proxy" } else { "server" };
        println!(
            "  {:<24} {:>9.0} {:>9.0} {:>14} {:>22}",
            path.name,
            med(i, |s| Some(s.p50_us)),
            med(i, |s| Some(s.p99_us)),
            if i == 0 { "—".to_string() } else { format!("{:+.0}", added(i)) },
            format!("{:.1} ({whose})", med(i, |s| s.child_cpu_us)),
        );
    }
    let Some(socat) = paths.iter().position(|p| p.name == "socat") else { return Ok(true) };
    let tether = paths.iter().position(|p| p.name == "tether").expect("always measured");
    let relay_added = added(socat);
    let (ok, figure) = if relay_added > 0.0 {
        let ratio = added(tether) / relay_added;
        let figure = format!("{ratio:.2}× ({:+.0} µs vs socat {relay_added:+.0} µs)", added(tether));
        (ratio <= TARGET_ADDED_VS_SOCAT, figure)
    } else {
        let per_run: Vec<f64> = samples[tether].iter().zip(&samples[socat]).map(|(t, r)| t.p50_us / r.p50_us).collect();
        let ratio = crate::bench::median(&per_run);
        let figure = format!("socat adds nothing ({relay_added:+.0} µs): tether's p50 {ratio:.2}× socat's");
        (ratio <= TARGET_P50_VS_SOCAT, figure)
    };
    println!(
        "  target: tether adds at most {TARGET_ADDED_VS_SOCAT}× socat's p50 (within {TARGET_P50_VS_SOCAT}× of \
         socat's p50 when socat adds nothing): {figure} {}",
        if ok { "MET" } else { "MISSED" }
    );
    let met = ok;
    Ok(met)
}
