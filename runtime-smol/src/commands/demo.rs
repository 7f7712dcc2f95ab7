//! `tether demo`: a self-contained tour. tether re-executes itself as built-in
//! mock backends (two stdio, one that crash-loops, one over HTTP on localhost)
//! and a scripted client shows discovery, a call, a crash and restart, a crash
//! loop ending in `permanently_failed`, a breaker trip and recovery, and an HTTP
//! backend going down and coming back.
//!
//! The HTTP backend is a second tether, `tether serve --listen`, serving a stdio
//! mock: the binary has one HTTP server, its own, and the mock none.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

use async_channel::{Receiver, Sender};
use futures_lite::future;
use serde_json::{json, Value};
use tether_core::{Config, Event, Input, ServerConfig, SessionId, Status};

use crate::serve::{Host, Report};

const CLIENT: SessionId = SessionId(1);

/// Runs the demo.
pub fn run() -> Result<ExitCode, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own binary: {e}"))?;
    let exe = exe.to_string_lossy().to_string();
    let port = free_port()?;
    let mut web = WebBackend::start(&exe, port)?;
    let config = demo_config(&exe, port);
    let mut host = Host::new(config, 7).map_err(|e| e.to_string())?;
    let reports = host.reports();
    let frames_rx = host.attach_client(CLIENT);
    let inputs = host.inputs();
    let mut script =
        Script { inputs, frames: frames_rx, reports, view: View::default(), next_id: 1, start: Instant::now() };
    let outcome = smol::block_on(async {
        let outcome = future::or(async { Some(script.play(&mut web).await) }, async {
            host.run(|_, _| false).await;
            None
        })
        .await;
        host.shutdown().await;
        outcome
    });
    web.stop();
    match outcome {
        Some(Ok(())) => {
            println!(
                "\nDemo complete: every failure above was detected and reported; tether recovered from each, \
                 except the backend that crashed on every start, which it stopped restarting and left \
                 permanently_failed (in your own tether: fix what it says, then `tether restart NAME`)."
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(Err(e)) => Err(format!("demo failed: {e}")),
        None => Err("the gateway stopped unexpectedly".into()),
    }
}

fn demo_config(exe: &str, port: u16) -> Config {
    let mock = |name: &str, extra: &[&str]| {
        let mut args = vec!["mock-backend", "--name", name];
        args.extend_from_slice(extra);
        ServerConfig::stdio(exe, &args)
    };
    let mut notes = mock("notes", &[]);
    notes.policy.request_timeout_ms = Some(500);
    notes.policy.breaker_threshold = Some(3);
    notes.policy.breaker_cooldown_ms = Some(3000);
    notes.vital = true;
    let flaky =
        mock("flaky", &["--exit-on-start", "1", "--stderr", "flaky: cannot open /var/db/flaky.sqlite: disk I/O error"]);
    let mut web = ServerConfig::http(&format!("http://127.0.0.1:{port}/mcp"));
    web.policy.reconnect_initial_ms = Some(500);
    web.policy.call_retry_delays_ms = Some(vec![200, 400]);
    let mut config = Config::default()
        .server("files", mock("files", &[]))
        .server("notes", notes)
        .server("flaky", flaky)
        .server("web", web);
    config.policy.health_interval_ms = 600_000;
    config
}

/// The status of every backend as the events tell it.
#[derive(Default)]
struct View {
    status: BTreeMap<tether_core::ServerName, (Status, Option<String>)>,
    tools: BTreeMap<tether_core::ServerName, u32>,
    breaker_open: BTreeMap<tether_core::ServerName, bool>,
}

impl View {
    fn apply(&mut self, event: &Event) {
        match event {
            Event::ServerStatusChanged { server, to, message, .. } => {
                self.status.insert(server.clone(), (*to, message.clone()));
            }
            Event::ToolsDiscovered { server, count, .. } => {
                self.tools.insert(server.clone(), *count);
            }
            Event::CircuitOpened { server, .. } => {
                self.breaker_open.insert(server.clone(), true);
            }
            Event::CircuitClosed { server } => {
                self.breaker_open.insert(server.clone(), false);
            }
            _ => {}
        }
    }

    fn print(&self) {
        println!("  ┌──────────┬────────────────────┬─────────┬───────┬──────────────────────────────────────────");
        println!("  │ {:<8} │ {:<18} │ {:<7} │ {:>5} │ last message", "server", "status", "breaker", "tools");
        println!("  ├──────────┼────────────────────┼─────────┼───────┼──────────────────────────────────────────");
        for (server, (status, message)) in &self.status {
            let breaker = if self.breaker_open.get(server).copied().unwrap_or(false) { "open" } else { "closed" };
            let tools = self.tools.get(server).copied().unwrap_or(0);
            let mut message = message.clone().unwrap_or_default();
            if message.len() > 60 {
                message.truncate(message.char_indices().nth(57).map_or(message.len(), |(i, _)| i));
                message.push('…');
            }
            println!("  │ {:<8} │ {:<18} │ {:<7} │ {:>5} │ {}", server, status.as_str(), breaker, tools, message);
        }
        println!("  └──────────┴────────────────────┴─────────┴───────┴──────────────────────────────────────────");
    }
}

struct Script {
    inputs: Sender<Input>,
    frames: crate::serve::ClientFrames,
    reports: Receiver<Report>,
    view: View,
    next_id: u64,
    start: Instant,
}

impl Script {
    fn say(&self, text: &str) {
        println!("[{:>6.1}s] {text}", self.start.elapsed().as_secs_f64());
    }

    fn step(&self, title: &str) {
        println!();
        println!("━━ {title}");
    }

    async fn play(&mut self, web: &mut WebBackend) -> Result<(), String> {
        self.step("1. Discovery: four backends start; tether lists their tools as one server");
        self.request("initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"demo","version":"1"}})).await?;
        self.notify("notifications/initialized").await;
        for server in ["files", "notes", "web"] {
            self.wait_status(server, Status::Online, 20).await?;
        }
        let list = self.request("tools/list", json!({})).await?;
        let tools = list["result"]["tools"].as_array().map_or(0, Vec::len);
        self.say(&format!("tools/list: {tools} tools, namespaced as <server>__<tool>"));
        self.view.print();

        self.step("2. A call is routed to its backend");
        let text = self.call_text("files__echo", json!({"text":"hello through tether"})).await?;
        self.say(&format!("files__echo → {text:?}"));

        self.step("3. A backend crashes; tether restarts it and the next call succeeds");
        let before = self.call_text("files__pid", json!({})).await?;
        self.say(&format!("files runs as pid {before}; calling files__crash…"));
        let crashed = self.call("files__crash", json!({})).await?;
        self.say(&format!("the client is told: {}", crashed["error"]["message"].as_str().unwrap_or("?")));
        self.wait_status("files", Status::Online, 20).await?;
        let after = self.call_text("files__pid", json!({})).await?;
        self.say(&format!("restarted: files now runs as pid {after}"));

        self.step("4. A backend that crashes on start: 3 crashes in 5 min → permanently_failed");
        self.wait_status("flaky", Status::PermanentlyFailed, 30).await?;
        self.say("tether stopped restarting it; its stderr tail is the status message:");
        self.view.print();

        self.step("5. Circuit breaker: 3 timeouts open it, calls are refused at once, a probe closes it");
        for i in 1..=3 {
            let r = self.call("notes__hang", json!({})).await?;
            self.say(&format!("notes__hang #{i} → {}", r["error"]["message"].as_str().unwrap_or("?")));
        }
        let refused = self.call("notes__echo", json!({"text":"x"})).await?;
        self.say(&format!("notes__echo → {}", refused["error"]["message"].as_str().unwrap_or("?")));
        self.say("waiting out the 3 s cooldown…");
        async_io::Timer::after(Duration::from_millis(3100)).await;
        let probe = self.call_text("notes__echo", json!({"text":"probe"})).await?;
        self.say(&format!("probe notes__echo → {probe:?}"));
        self.drain_reports();
        self.view.print();

        self.step("6. The HTTP backend goes away, tether reconnects with backoff, it comes back");
        web.stop();
        self.say("web's server is stopped; calling web__echo…");
        let down = self.call("web__echo", json!({"text":"anyone?"})).await?;
        self.say(&format!("after retries the client is told: {}", down["error"]["message"].as_str().unwrap_or("?")));
        self.wait_status("web", Status::Offline, 10).await?;
        self.view.print();
        async_io::Timer::after(Duration::from_millis(1500)).await;
        web.restart()?;
        self.say("web's server is back; tether reconnects on its schedule…");
        self.wait_status("web", Status::Online, 30).await?;
        let back = self.call_text("web__echo", json!({"text":"back"})).await?;
        self.say(&format!("web__echo → {back:?}"));
        self.view.print();
        Ok(())
    }

    async fn notify(&mut self, method: &str) {
        let frame = json!({"jsonrpc":"2.0","method":method}).to_string();
        let _ = self.inputs.send(Input::ClientFrame { session: CLIENT, frame, param_headers: None }).await;
    }

    async fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let frame = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        self.inputs
            .send(Input::ClientFrame { session: CLIENT, frame, param_headers: None })
            .await
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = future::or(async { self.frames.recv().await }, async {
                async_io::Timer::after(left).await;
                None
            })
            .await
            .ok_or_else(|| format!("no answer to {method} within 30 s"))?;
            self.drain_reports();
            let Ok(v) = serde_json::from_str::<Value>(&frame) else { continue };
            if v["id"] == json!(id) && v.get("method").is_none() {
                return Ok(v);
            }
        }
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Result<Value, String> {
        self.request("tools/call", json!({"name": tool, "arguments": arguments})).await
    }

    async fn call_text(&mut self, tool: &str, arguments: Value) -> Result<String, String> {
        let r = self.call(tool, arguments).await?;
        r["result"]["content"][0]["text"].as_str().map(String::from).ok_or_else(|| format!("{tool} failed: {r}"))
    }

    fn drain_reports(&mut self) {
        while let Ok(report) = self.reports.try_recv() {
            if let Report::Event(e) = report {
                self.print_event(&e);
                self.view.apply(&e);
            }
        }
    }

    fn print_event(&self, event: &Event) {
        match event {
            Event::ServerStatusChanged { .. }
            | Event::CircuitOpened { .. }
            | Event::CircuitClosed { .. }
            | Event::ServerPermanentlyFailed { .. }
            | Event::ServerReconnecting { .. }
            | Event::ServerReconnected { .. } => self.say(&format!("  event: {event}")),
            _ => {}
        }
    }

    async fn wait_status(&mut self, server: &str, status: Status, secs: u64) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            self.drain_reports();
            if self.view.status.get(server).is_some_and(|(s, _)| *s == status) {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("{server} did not become {status} within {secs} s"));
            }
            let report = future::or(async { self.reports.recv().await.ok() }, async {
                async_io::Timer::after(left.min(Duration::from_millis(200))).await;
                None
            })
            .await;
            if let Some(Report::Event(e)) = report {
                self.print_event(&e);
                self.view.apply(&e);
            }
        }
    }
}

/// The HTTP backend, a child process we stop and start to simulate an outage: a
/// second tether serving Streamable HTTP on the port (`serve --listen`), in front
/// of one stdio mock named `web` whose tools it serves unprefixed.
struct WebBackend {
    exe: String,
    port: u16,
    /// The child's configuration file, removed on drop.
    config: PathBuf,
    child: Option<Child>,
}

impl WebBackend {
    fn start(exe: &str, port: u16) -> Result<WebBackend, String> {
        let config = std::env::temp_dir().join(format!("tether-demo-web-{}.json", std::process::id()));
        let entry = json!({"command": exe, "args": ["mock-backend", "--name", "web"], "tether": {"prefixed": false}});
        let text = json!({"tether": {"client_events": false}, "mcpServers": {"web": entry}});
        std::fs::write(&config, text.to_string())
            .map_err(|e| format!("cannot write the HTTP backend's config {}: {e}", config.display()))?;
        let mut w = WebBackend { exe: exe.to_string(), port, config, child: None };
        w.restart()?;
        Ok(w)
    }

    /// Starts the child and waits until it is ready (`/readyz`: its mock is online).
    fn restart(&mut self) -> Result<(), String> {
        let mut command = std::process::Command::new(&self.exe);
        command
            .arg("--config")
            .arg(&self.config)
            .args(["--log-level", "error", "serve", "--listen", &format!("127.0.0.1:{}", self.port)])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // Our own settings (a TETHER_AUTH_TOKEN, a TETHER_CONFIG) are not the child's.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("TETHER_") {
                command.env_remove(name);
            }
        }
        let child = command.spawn().map_err(|e| format!("cannot start the HTTP backend: {e}"))?;
        self.child = Some(child);
        let ready = format!("http://127.0.0.1:{}/readyz", self.port);
        let deadline = Instant::now() + Duration::from_secs(10);
        while ureq::get(&ready).timeout(Duration::from_secs(1)).call().is_err() {
            if Instant::now() > deadline {
                return Err("the HTTP backend did not become ready".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Stops the child, gently first so that it stops its mock too.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        tether_host::platform::signal_process(child.id(), tether_host::platform::Signal::Terminate);
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for WebBackend {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.config);
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}
