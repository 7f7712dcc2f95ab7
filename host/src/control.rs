//! The control channel: every running tether listens on a local endpoint of
//! its user's (see [`crate::platform::LocalListener`]), so that `tether status`,
//! `tether restart NAME`, `tether reconnect NAME` and `tether logs NAME` reach it
//! with no flag and no network listener — also when it runs as a client's stdio
//! child.
//!
//! - **Where**: `tether-KEY-PID`, where KEY is derived from the config file's
//!   path (so the commands find the tethers serving the file they are pointed
//!   at, the default one without `--config`) and PID tells apart several tethers
//!   of one file (a desktop client and an editor may each start one).
//! - **What**: one request per connection, a line of JSON (`{"op": "status"}`,
//!   `{"op": "restart", "server": "fs"}`, `{"op": "reconnect", ...}`,
//!   `{"op": "logs", "server": "fs", "lines": 100}`), answered by one line of
//!   JSON (`{"ok": true, ...}` or `{"ok": false, "error": "..."}`).
//! - **Bounds**: a request line is at most [`MAX_REQUEST`] bytes, and the whole
//!   exchange must fit in [`REQUEST_WAIT`] (on unix; Windows pipes cannot time
//!   out); at most [`MAX_CONNECTIONS`] are served at once, others are closed at
//!   once. A client waits [`ANSWER_WAIT`] for each tether at most.
//! - **Trust**: clients look only in the user's private endpoint directory
//!   (unix), and remove an endpoint only when the process named in it is gone.
//!
//! The runtime answers through a [`ControlTarget`]; what the answers mean (a
//! restart, a status) is the core's, as for the HTTP admin endpoints.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tether_core::{AdminCommand, LogLine};

use crate::platform::{self, LocalListener, LocalStream};

/// Longest request line read.
pub const MAX_REQUEST: usize = 64 * 1024;
/// How long a connection may take to send its request.
pub const REQUEST_WAIT: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 8;
/// Lines `logs` returns when the request does not say.
pub const DEFAULT_LOG_LINES: usize = 50;
/// Longest answer read by [`ask`] (a status of many backends, many log lines).
const MAX_ANSWER: u64 = 16 * 1024 * 1024;

/// A request to a running tether.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The `/status` document: the gateway and every backend.
    Status,
    /// Restart a backend (also one that is `permanently_failed`).
    Restart {
        /// Which.
        server: String,
    },
    /// Reconnect a backend now (an offline remote: no waiting out the backoff).
    Reconnect {
        /// Which.
        server: String,
    },
    /// A backend's recent stderr and events, oldest first.
    Logs {
        /// Which.
        server: String,
        /// How many of the last lines (default [`DEFAULT_LOG_LINES`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lines: Option<usize>,
    },
}

/// What a running tether answers control requests from: the runtime's side.
pub trait ControlTarget: Send + Sync + 'static {
    /// The `/status` document.
    fn status(&self) -> Result<Value, String>;
    /// An operator command; `Err` says what is wrong (an unknown backend).
    fn admin(&self, command: AdminCommand) -> Result<(), String>;
    /// The last `lines` of a backend's recent log; `Err` for an unknown backend.
    fn logs(&self, server: &str, lines: usize) -> Result<Vec<LogLine>, String>;
}

/// The endpoint-name prefix of every tether serving the config file `config`
/// (`None`: tether runs without one).
pub fn prefix(config: Option<&Path>) -> String {
    let key = match config {
        Some(path) => {
            // The same file however it was named: relative, through a symlink.
            let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            let digest = ring::digest::digest(&ring::digest::SHA256, path.to_string_lossy().as_bytes());
            digest.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect()
        }
        None => "none".to_string(),
    };
    format!("tether-{key}-")
}

/// A running control listener; its endpoint is removed when it is dropped
/// (keep it for as long as tether serves).
pub struct Control {
    name: String,
    address: String,
}

impl Control {
    /// Where it listens, for the log and for tests.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        platform::remove_local_endpoint(&self.name);
    }
}

/// Starts the control channel of a tether serving `config` unless `disabled`;
/// a failure to start is logged (tether serves on without it).
pub fn start(config: Option<&Path>, disabled: bool, target: impl ControlTarget) -> Option<Control> {
    if disabled {
        return None;
    }
    match serve(config, target) {
        Ok(control) => {
            tracing::debug!("control channel at {}", control.address());
            Some(control)
        }
        Err(e) => {
            tracing::warn!("no control channel (tether status and restart cannot reach this tether): {e}");
            None
        }
    }
}

/// Starts listening for control requests for the tether serving `config`,
/// answered by `target`, on threads of their own for the rest of the process.
pub fn serve(config: Option<&Path>, target: impl ControlTarget) -> std::io::Result<Control> {
    sweep();
    let name = format!("{}{}", prefix(config), std::process::id());
    let listener = LocalListener::bind(&name)?;
    let address = listener.address();
    let control = Control { name, address };
    let target: Arc<dyn ControlTarget> = Arc::new(target);
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("control".into()).spawn(move || loop {
        let stream = match listener.accept() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!("control channel: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            busy.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let (target, busy) = (target.clone(), busy.clone());
        let spawned = std::thread::Builder::new().name("control-conn".into()).spawn(move || {
            answer(stream, target.as_ref());
            busy.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            tracing::warn!("control channel: cannot start a thread for a connection");
        }
    })?;
    Ok(control)
}

/// The process an endpoint name belongs to (its last `-` part).
fn pid_of(name: &str) -> Option<u32> {
    name.rsplit('-').next()?.parse().ok()
}

/// Removes the endpoints of tethers that are gone (killed, so they could not
/// remove their own), whatever config they served.
fn sweep() {
    for name in platform::local_endpoints("tether-") {
        if pid_of(&name).is_some_and(|pid| !platform::process_alive(pid)) {
            platform::remove_local_endpoint(&name);
        }
    }
}

/// Reads one request from `stream` and writes its answer; the whole exchange
/// must fit in [`REQUEST_WAIT`] (where the platform can time out I/O).
fn answer(mut stream: LocalStream, target: &dyn ControlTarget) {
    let deadline = Instant::now() + REQUEST_WAIT;
    let mut line = Vec::new();
    let within = Within { stream: &stream, deadline };
    let read = BufReader::new(within.take(MAX_REQUEST as u64 + 1)).read_until(b'\n', &mut line);
    let reply = match read {
        Err(e) => json!({"ok": false, "error": format!("reading the request: {e}")}),
        Ok(_) if line.len() > MAX_REQUEST => json!({"ok": false, "error": "request too long"}),
        Ok(_) => match serde_json::from_slice::<Request>(&line) {
            Err(e) => json!({"ok": false, "error": format!("not a request: {e}")}),
            Ok(request) => execute(request, target),
        },
    };
    let mut text = reply.to_string();
    text.push('\n');
    platform::limit_io(&stream, deadline.saturating_duration_since(Instant::now()));
    let _ = stream.write_all(text.as_bytes()).and_then(|()| stream.flush());
}

/// Reads from a stream until a deadline: each read may wait only for what is
/// left, so a client trickling bytes cannot hold a connection.
struct Within<'a> {
    stream: &'a LocalStream,
    deadline: Instant,
}

impl Read for Within<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        platform::limit_io(self.stream, left);
        let mut stream = self.stream;
        stream.read(buf)
    }
}

fn execute(request: Request, target: &dyn ControlTarget) -> Value {
    let outcome = match request {
        Request::Status => target.status().map(|status| json!({"status": status})),
        Request::Restart { server } => {
            target.admin(AdminCommand::Restart { server: server.into() }).map(|()| json!({}))
        }
        Request::Reconnect { server } => {
            target.admin(AdminCommand::Reconnect { server: server.into() }).map(|()| json!({}))
        }
        Request::Logs { server, lines } => {
            target.logs(&server, lines.unwrap_or(DEFAULT_LOG_LINES)).map(|lines| json!({"lines": lines}))
        }
    };
    let mut reply = match outcome {
        Ok(reply) => reply,
        Err(error) => return json!({"ok": false, "error": error}),
    };
    reply["ok"] = json!(true);
    reply["pid"] = json!(std::process::id());
    reply
}

/// The tethers serving `config` that can be reached now: their endpoint names.
pub fn instances(config: Option<&Path>) -> Vec<String> {
    platform::local_endpoints(&prefix(config))
}

/// Where endpoints are looked for, for messages.
pub fn endpoint_dir() -> String {
    platform::local_endpoint_dir()
}

/// How long [`ask`] waits for a tether (one suspended or stuck is passed over).
pub const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// Sends `request` to the tether at endpoint `name` and returns its answer
/// (`Err`: it could not be reached in [`ANSWER_WAIT`], or it said what was
/// wrong). An endpoint whose tether is gone is removed.
pub fn ask(name: &str, request: &Request) -> Result<Value, AskError> {
    let mut line = serde_json::to_string(request).expect("requests serialize");
    line.push('\n');
    let (tx, rx) = std::sync::mpsc::channel();
    let endpoint = name.to_string();
    // On a thread of its own: a Windows pipe cannot time out its reads.
    std::thread::Builder::new()
        .name("control-ask".into())
        .spawn(move || {
            let _ = tx.send(exchange(&endpoint, &line));
        })
        .map_err(AskError::Unreachable)?;
    let answer = match rx.recv_timeout(ANSWER_WAIT) {
        Ok(answer) => answer,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time")),
    };
    let answer = answer.map_err(|e| {
        let gone = matches!(e.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound);
        if gone && pid_of(name).is_some_and(|pid| !platform::process_alive(pid)) {
            // What a tether that died left behind.
            platform::remove_local_endpoint(name);
        }
        AskError::Unreachable(e)
    })?;
    let value: Value = serde_json::from_str(&answer)
        .map_err(|e| AskError::Refused(format!("answer is not JSON ({e}): {}", answer.trim())))?;
    if value["ok"] == true {
        Ok(value)
    } else {
        Err(AskError::Refused(value["error"].as_str().unwrap_or("refused").to_string()))
    }
}

/// Sends one request line to endpoint `name` and reads the answer line.
fn exchange(name: &str, line: &str) -> std::io::Result<String> {
    let mut stream = platform::local_connect(name)?;
    platform::limit_io(&stream, ANSWER_WAIT);
    stream.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(stream.take(MAX_ANSWER)).read_line(&mut answer)?;
    Ok(answer)
}

/// Why [`ask`] got no answer.
#[derive(Debug)]
pub enum AskError {
    /// The endpoint could not be reached (a tether that just exited).
    Unreachable(std::io::Error),
    /// The tether answered that the request was wrong.
    Refused(String),
}

impl std::fmt::Display for AskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AskError::Unreachable(e) => write!(f, "cannot reach it: {e}"),
            AskError::Refused(message) => f.write_str(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::{Instant, LogSource};

    struct Fake;

    impl ControlTarget for Fake {
        fn status(&self) -> Result<Value, String> {
            Ok(json!({"backends": [{"server": "fs"}]}))
        }
        fn admin(&self, command: AdminCommand) -> Result<(), String> {
            match command {
                AdminCommand::Restart { server } | AdminCommand::Reconnect { server } if &*server == "fs" => Ok(()),
                other => Err(format!("no such backend in {other:?}")),
            }
        }
        fn logs(&self, server: &str, lines: usize) -> Result<Vec<LogLine>, String> {
            let line = LogLine { at: Instant::ZERO, source: LogSource::Stderr, text: format!("{server} {lines}") };
            Ok(vec![line])
        }
    }

    #[test]
    fn requests_are_answered_over_the_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.json");
        std::fs::write(&config, "{}").unwrap();
        let control = serve(Some(&config), Fake).unwrap();
        let _keep = &control;
        let found = instances(Some(&config));
        assert_eq!(found.len(), 1, "{found:?} (listening at {})", control.address());
        let name = &found[0];

        let status = ask(name, &Request::Status).unwrap();
        assert_eq!(status["status"]["backends"][0]["server"], "fs");
        assert_eq!(status["pid"], std::process::id());
        assert!(ask(name, &Request::Restart { server: "fs".into() }).is_ok());
        match ask(name, &Request::Reconnect { server: "nope".into() }) {
            Err(AskError::Refused(message)) => assert!(message.contains("no such backend"), "{message}"),
            other => panic!("{other:?}"),
        }
        let logs = ask(name, &Request::Logs { server: "fs".into(), lines: Some(7) }).unwrap();
        assert_eq!(logs["lines"][0]["text"], "fs 7");
        assert_eq!(logs["lines"][0]["source"], "stderr");

        // Another file's tethers are not this one's.
        assert!(instances(Some(&dir.path().join("other.json"))).is_empty());
    }

    #[test]
    fn bad_requests_get_an_error_line() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("c.json");
        let _control = serve(Some(&config), Fake).unwrap();
        let name = &instances(Some(&config))[0];
        let mut stream = platform::local_connect(name).unwrap();
        stream.write_all(b"{\"op\": \"format_disk\"}\n").unwrap();
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).unwrap();
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["ok"], false);
        assert!(answer["error"].as_str().unwrap().contains("not a request"), "{answer}");
    }
}
