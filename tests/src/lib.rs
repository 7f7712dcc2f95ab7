//! tether-tests: end-to-end tests of the real `tether` binary against the mock
//! backend (`mock-mcp`, the same mock `tether demo` uses), driven by a small
//! blocking MCP client.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The directory holding the workspace's binaries (target/debug or target/release).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>
    exe.parent().and_then(Path::parent).expect("target dir").to_path_buf()
}

/// The `tether` binary under test.
pub fn tether_bin() -> PathBuf {
    let path = bin_dir().join("tether");
    assert!(
        path.exists(),
        "{} missing: run `cargo build -p tether-smol` (cargo test --workspace does)",
        path.display()
    );
    path
}

/// The mock backend binary.
pub fn mock_bin() -> PathBuf {
    bin_dir().join("mock-mcp")
}

/// A stdio server entry running the mock with `args`.
pub fn mock_server(args: &[&str]) -> Value {
    json!({ "command": mock_bin(), "args": args })
}

/// A running `tether` with a client session over its stdio.
pub struct Tether {
    child: Child,
    stdin: Option<ChildStdin>,
    frames: Receiver<Value>,
    /// Frames received that were not the awaited response (notifications, server requests).
    pub inbox: Vec<Value>,
    /// Everything tether wrote to stderr.
    pub stderr: Arc<Mutex<String>>,
    next_id: u64,
    /// Where the config (and anything else the test needs) lives.
    pub dir: tempfile::TempDir,
}

impl Tether {
    /// Starts `tether --config <file with config>` plus `args`.
    pub fn start(config: Value, args: &[&str]) -> Tether {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        let mut child = Command::new(tether_bin())
            .arg("--config")
            .arg(&path)
            .arg("--log-level")
            .arg("debug")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tether");
        let stdout = child.stdout.take().unwrap();
        let (tx, frames) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Err(e) => panic!("tether wrote a non-JSON line to stdout ({e}): {line}"),
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let stdin = child.stdin.take();
        Tether { child, stdin, frames, inbox: Vec::new(), stderr, next_id: 1, dir }
    }

    /// Sends one frame.
    pub fn send(&mut self, frame: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{frame}").expect("write to tether");
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
        self.wait_for(|f| f["id"] == json!(id) && f.get("method").is_none(), timeout)
            .unwrap_or_else(|| panic!("no response to {method} #{id} within {timeout:?}\n{}", self.stderr_text()))
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

    /// Polls `cond` on the stderr log until it holds.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.stderr_text().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
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
                panic!("tether did not exit after stdin closed\n{}", self.stderr_text());
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
