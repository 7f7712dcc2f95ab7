//! The HTTP half of `tether-bench`: an MCP client over Streamable HTTP, and the
//! servers it talks to, run as child processes that log the address they bound.
//!
//! The client is ureq's: one [`ureq::Agent`] per thread, so each thread keeps one
//! keep-alive connection. A latency is "request about to be written" to "whole
//! body read", before the body is parsed. Answers may be a JSON body or an SSE
//! stream; of the latter, the event holding the response to the request is taken.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bench::{tool_ok, Series, ANSWER_TIMEOUT};

/// The MCP revision the client asks for in `initialize`.
const PROTOCOL_VERSION: &str = "2025-11-25";

/// A child process serving MCP over Streamable HTTP at `/mcp`.
pub struct HttpServer {
    /// What it is, for messages.
    pub label: String,
    child: Child,
    stderr_path: PathBuf,
    url: String,
}

impl HttpServer {
    /// Starts `program args` (stdin and stdout closed, stderr to `stderr_path`) and
    /// waits for the stderr line holding `marker` then the bound address (`ADDR`
    /// or `http://ADDR/mcp`).
    pub fn spawn(
        label: &str,
        program: &Path,
        args: &[String],
        stderr_path: &Path,
        marker: &str,
    ) -> Result<HttpServer, String> {
        let stderr = File::create(stderr_path).map_err(|e| format!("{}: {e}", stderr_path.display()))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("{label}: cannot start {}: {e}", program.display()))?;
        let mut server =
            HttpServer { label: label.to_string(), child, stderr_path: stderr_path.to_path_buf(), url: String::new() };
        let addr = server.wait_for_address(marker, ANSWER_TIMEOUT)?;
        server.url = format!("http://{addr}/mcp");
        Ok(server)
    }

    /// Polls stderr until a line holds `marker`; the address that follows it.
    fn wait_for_address(&mut self, marker: &str, timeout: Duration) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
            if let Some(addr) = text.lines().find_map(|line| address_after(line, marker)) {
                return Ok(addr);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.fail(format!("exited ({status}) before listening")));
            }
            if Instant::now() > deadline {
                return Err(self.fail(format!("no `{marker}` line on stderr within {timeout:?}")));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The MCP endpoint, `http://ADDR/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn fail(&self, what: String) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        format!("{}: {what}\n--- last lines of its stderr ---\n{tail}", self.label)
    }

    /// Sends SIGTERM, waits up to `grace` for the process to exit, then kills it.
    pub fn stop(mut self, grace: Duration) {
        self.terminate(grace);
    }

    fn terminate(&mut self, grace: Duration) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-s", "TERM", &pid]).stderr(Stdio::null()).status();
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

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.terminate(Duration::from_secs(3));
    }
}

/// The address after `marker` in a log line: `127.0.0.1:PORT` from
/// `listening on 127.0.0.1:PORT` or `listening on http://127.0.0.1:PORT/mcp`.
pub fn address_after(line: &str, marker: &str) -> Option<String> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let token = rest.split_whitespace().next()?;
    let addr = token.strip_prefix("http://").unwrap_or(token);
    let addr = addr.strip_suffix("/mcp").unwrap_or(addr);
    addr.parse::<std::net::SocketAddr>().ok().map(|a| a.to_string())
}

/// What a client needs to join an MCP session: the endpoint, the session id (if
/// the server issued one) and the negotiated protocol version.
#[derive(Clone, Debug)]
pub struct Session {
    url: String,
    id: Option<String>,
    protocol: Option<String>,
}

/// One keep-alive connection to an MCP endpoint (a ureq agent used by one thread).
pub struct HttpClient {
    agent: ureq::Agent,
    session: Session,
    next_id: u64,
}

/// How an answer arrived: as a JSON body or in an SSE stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BodyKinds {
    /// Answers that were a JSON body.
    pub json: usize,
    /// Answers that came as an SSE stream.
    pub sse: usize,
}

impl HttpClient {
    /// A client of `url`, not yet in a session.
    pub fn new(url: &str) -> HttpClient {
        HttpClient::joining(Session { url: url.to_string(), id: None, protocol: None }, 1)
    }

    /// A client on a connection of its own in `session`; its request ids start at
    /// `first_id` (so clients sharing a session never reuse an id).
    pub fn joining(session: Session, first_id: u64) -> HttpClient {
        // Read and write timeouts rather than an overall one: with an overall
        // deadline ureq resets both socket timeouts before every read of the
        // response (about 14 more system calls per request).
        let agent = ureq::AgentBuilder::new()
            .timeout_read(ANSWER_TIMEOUT)
            .timeout_write(ANSWER_TIMEOUT)
            .max_idle_connections_per_host(1)
            .build();
        HttpClient { agent, session, next_id: first_id }
    }

    /// The session this client is in, for other clients to join.
    pub fn session(&self) -> Session {
        self.session.clone()
    }

    /// POSTs one JSON-RPC message with the MCP headers.
    fn post(&self, body: &str) -> Result<ureq::Response, String> {
        let mut request = self
            .agent
            .post(&self.session.url)
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream");
        if let Some(id) = &self.session.id {
            request = request.set("Mcp-Session-Id", id);
        }
        if let Some(version) = &self.session.protocol {
            request = request.set("MCP-Protocol-Version", version);
        }
        match request.send_string(body) {
            Ok(response) => Ok(response),
            Err(ureq::Error::Status(status, response)) => {
                let text = response.into_string().unwrap_or_default();
                Err(format!("POST {}: HTTP {status}: {text}", self.session.url))
            }
            Err(e) => Err(format!("POST {}: {e}", self.session.url)),
        }
    }

    /// Sends a request whose params are JSON text; the response, how long it took
    /// (written to body read) and whether it came as SSE.
    pub fn request_raw(&mut self, method: &str, params_json: &str) -> Result<(Value, Duration, bool), String> {
        let id = self.next_id;
        self.next_id += 1;
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params_json}}}"#);
        let sent = Instant::now();
        let response = self.post(&body).map_err(|e| format!("{method} #{id}: {e}"))?;
        if self.session.id.is_none() {
            self.session.id = response.header("Mcp-Session-Id").map(str::to_string);
        }
        let sse = response.content_type() == "text/event-stream";
        let text = response.into_string().map_err(|e| format!("{method} #{id}: reading the answer: {e}"))?;
        let took = sent.elapsed();
        let value = if sse { sse_response(&text, id) } else { serde_json::from_str(&text).ok() };
        let value = value.ok_or_else(|| format!("{method} #{id}: no JSON-RPC response in {text:?}"))?;
        Ok((value, took, sse))
    }

    /// Sends a request and returns its response.
    pub fn request(&mut self, method: &str, params: &Value) -> Result<Value, String> {
        self.request_raw(method, &params.to_string()).map(|(value, _, _)| value)
    }

    /// The MCP handshake: `initialize` (keeping the session id and the protocol
    /// version it settles), then `notifications/initialized`.
    pub fn initialize(&mut self) -> Result<Value, String> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "tether-bench", "version": env!("CARGO_PKG_VERSION")},
        });
        let answer = self.request("initialize", &params)?;
        let version = answer.pointer("/result/protocolVersion").and_then(Value::as_str);
        let Some(version) = version else { return Err(format!("initialize failed: {answer}")) };
        self.session.protocol = Some(version.to_string());
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        let response = self.post(&note)?;
        let status = response.status();
        let _ = response.into_string();
        if status != 202 && status != 200 {
            return Err(format!("notifications/initialized: HTTP {status}"));
        }
        Ok(answer)
    }

    /// Polls `tools/list` until it lists `name`.
    pub fn wait_for_tool(&mut self, name: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let answer = self.request("tools/list", &json!({}))?;
            let tools = answer.pointer("/result/tools").and_then(Value::as_array).cloned().unwrap_or_default();
            if tools.iter().any(|t| t["name"] == name) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("tools/list does not list {name} after {timeout:?}: {answer}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One call that must succeed: its latency and whether it came as SSE.
    pub fn call_ok(&mut self, method: &str, params_json: &str) -> Result<(Duration, bool), String> {
        let (value, took, sse) = self.request_raw(method, params_json)?;
        if !tool_ok(&value) {
            return Err(format!("call failed: {value}"));
        }
        Ok((took, sse))
    }

    /// `n` sequential calls; their latencies and how the answers came.
    pub fn calls(&mut self, method: &str, params_json: &str, n: usize) -> Result<(Vec<Duration>, BodyKinds), String> {
        self.calls_paced(method, params_json, n, Duration::ZERO)
    }

    /// [`HttpClient::calls`], each request sent `pace` after the previous answer.
    pub fn calls_paced(
        &mut self,
        method: &str,
        params_json: &str,
        n: usize,
        pace: Duration,
    ) -> Result<(Vec<Duration>, BodyKinds), String> {
        let mut latencies = Vec::with_capacity(n);
        let mut kinds = BodyKinds::default();
        for _ in 0..n {
            if !pace.is_zero() {
                std::thread::sleep(pace);
            }
            let (took, sse) = self.call_ok(method, params_json)?;
            latencies.push(took);
            if sse {
                kinds.sse += 1;
            } else {
                kinds.json += 1;
            }
        }
        Ok((latencies, kinds))
    }
}

/// The JSON-RPC response to request `id` in an SSE stream (an event's `data:`
/// lines joined by newlines, as SSE defines).
pub fn sse_response(text: &str, id: u64) -> Option<Value> {
    let events = text.replace("\r\n", "\n");
    events.split("\n\n").find_map(|event| {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        let value: Value = serde_json::from_str(&data.join("\n")).ok()?;
        (value.get("method").is_none() && value.get("id").and_then(Value::as_u64) == Some(id)).then_some(value)
    })
}

/// `n` sequential calls over `client`'s connection.
pub fn sequential(
    client: &mut HttpClient,
    method: &str,
    params_json: &str,
    n: usize,
    pace: Duration,
) -> Result<(Series, BodyKinds), String> {
    let start = Instant::now();
    let (latencies, kinds) = client.calls_paced(method, params_json, n, pace)?;
    Ok((Series::new(latencies, start.elapsed()), kinds))
}

/// `n` calls from `concurrency` threads, each on its own keep-alive connection in
/// `session`, each calling sequentially. Every thread first makes `warmup` calls
/// (at least one); `probe` runs once all are warm, just before the measured calls
/// start, and again once all have ended.
///
/// The connections are opened one after the other, each with its first call, before
/// the threads start: `mock-mcp --http`'s server (tiny_http) hands each connection
/// to a worker thread for its whole life, and of connections accepted in a burst it
/// can leave one queued behind busy workers, unserved while the others stay open.
pub fn concurrent<T>(
    session: &Session,
    method: &str,
    params_json: &str,
    (n, concurrency, warmup): (usize, usize, usize),
    probe: impl Fn() -> T,
) -> Result<(Series, BodyKinds, T, T), String> {
    let concurrency = concurrency.clamp(1, n.max(1));
    let mut clients = Vec::with_capacity(concurrency);
    for i in 0..concurrency {
        let mut client = HttpClient::joining(session.clone(), (i as u64 + 1) << 32);
        client.call_ok(method, params_json)?;
        clients.push(client);
    }
    let (ready, go) = (Barrier::new(concurrency + 1), Barrier::new(concurrency + 1));
    std::thread::scope(|scope| {
        let workers: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, mut client)| {
                let share = n / concurrency + usize::from(i < n % concurrency);
                let (ready, go) = (&ready, &go);
                scope.spawn(move || {
                    let warm = client.calls(method, params_json, warmup.saturating_sub(1));
                    ready.wait();
                    go.wait();
                    warm?;
                    client.calls(method, params_json, share)
                })
            })
            .collect();
        ready.wait();
        let before = probe();
        let start = Instant::now();
        go.wait();
        let mut latencies = Vec::with_capacity(n);
        let mut kinds = BodyKinds::default();
        let mut failure = None;
        for worker in workers {
            match worker.join().unwrap_or_else(|_| Err("a client thread panicked".to_string())) {
                Ok((mut l, k)) => {
                    latencies.append(&mut l);
                    kinds.json += k.json;
                    kinds.sse += k.sse;
                }
                Err(e) => failure = Some(e),
            }
        }
        let elapsed = start.elapsed();
        let after = probe();
        match failure {
            Some(e) => Err(e),
            None => Ok((Series::new(latencies, elapsed), kinds, before, after)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_from_log_lines() {
        assert_eq!(address_after("listening on 127.0.0.1:4242", "listening on ").as_deref(), Some("127.0.0.1:4242"));
        let line = "2026-01-01T00:00:00Z  INFO tether listening on http://127.0.0.1:39001/mcp";
        assert_eq!(address_after(line, "tether listening on ").as_deref(), Some("127.0.0.1:39001"));
        assert_eq!(address_after("tether status on http://127.0.0.1:1/", "tether listening on "), None);
    }

    #[test]
    fn the_response_is_picked_out_of_an_sse_stream() {
        let text = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
                    : comment\n\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\r\ndata: \"result\":{}}\r\n\r\n";
        let value = sse_response(text, 7).expect("response");
        assert_eq!(value["id"], 7);
        assert!(sse_response(text, 8).is_none());
    }
}
