//! The driver on its own, with a runtime that only records what it is asked.

use std::sync::{Arc, Mutex};

use super::*;
use tether_core::Status;

/// What the fake runtime and its connections were asked, in order.
type Log = Arc<Mutex<Vec<String>>>;

struct FakeStdio {
    name: String,
    log: Log,
    holding: bool,
}

impl StdioConnection for FakeStdio {
    fn send(&mut self, frame: &str) {
        let method =
            serde_json::from_str::<serde_json::Value>(frame).ok().and_then(|v| v["method"].as_str().map(String::from));
        self.log.lock().unwrap().push(format!("send {} {}", self.name, method.unwrap_or_default()));
    }

    /// As the runtimes' pipes do: `true` only when it was not holding yet.
    fn hold(&mut self) -> bool {
        if self.holding {
            return false;
        }
        self.holding = true;
        self.log.lock().unwrap().push(format!("hold {}", self.name));
        true
    }

    fn release(&mut self) {
        self.holding = false;
        self.log.lock().unwrap().push(format!("release {}", self.name));
    }

    fn close(self) {
        self.log.lock().unwrap().push(format!("close {}", self.name));
    }
}

struct FakeRuntime {
    log: Log,
}

impl Runtime for FakeRuntime {
    type Stdio = FakeStdio;

    fn start_stdio(&mut self, launch: Launch<'_>) -> (Option<FakeStdio>, Input) {
        let name = format!("{}#{}", launch.server, launch.generation);
        self.log.lock().unwrap().push(format!("start {name}"));
        let report = Input::BackendStarted { server: launch.server.clone(), generation: launch.generation, pid: None };
        (Some(FakeStdio { name, log: self.log.clone(), holding: false }), report)
    }

    fn http_inputs(&self) -> InputSink {
        Arc::new(|_| true)
    }

    fn auth_inputs(&self) -> InputSink {
        Arc::new(|_| true)
    }

    fn spawner(&self, _purpose: &'static str) -> Spawner {
        Arc::new(|_| {})
    }

    fn deliver(&mut self, session: SessionId, _route: ClientRoute, _frame: String, burst: bool) {
        self.log.lock().unwrap().push(format!("deliver {} burst={burst}", session.0));
    }

    fn close_client(&mut self, session: SessionId) {
        self.log.lock().unwrap().push(format!("close client {}", session.0));
    }

    fn emit(&mut self, _event: Event) {}

    fn end_burst(&mut self) {
        self.log.lock().unwrap().push("end burst".into());
    }
}

fn driver(servers: &str) -> (Driver<FakeRuntime>, Log) {
    let text = format!(r#"{{"mcpServers": {servers}}}"#);
    let config = crate::config_file::parse(&text, "test", &|_| None).expect("config");
    let clock = Clock::start();
    let gw = Gateway::new(config, 1, clock.now()).expect("gateway");
    let log = Log::default();
    (Driver::new(gw, clock, FakeRuntime { log: log.clone() }), log)
}

fn taken(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

const ONE: &str = r#"{"fs": {"command": "fs-server"}}"#;

#[test]
fn a_spawn_waits_at_a_reader_thread_and_runs_at_home_with_what_followed_it() {
    let (mut d, log) = driver(ONE);
    d.run(Place::Reader);
    assert!(d.has_deferred(), "the start-up spawn waits for home");
    assert!(taken(&log).is_empty(), "nothing after it ran either");
    d.run(Place::Home);
    assert!(!d.has_deferred());
    let done = taken(&log);
    assert_eq!(done.first().map(String::as_str), Some("start fs#1"), "{done:?}");
    assert!(done.iter().any(|l| l == "send fs#1 initialize"), "the start report was fed and the opener sent: {done:?}");
    assert!(d.stdio("fs", tether_core::Generation(1)).is_some());
    assert!(d.stdio("fs", tether_core::Generation(2)).is_none(), "only the current generation");
}

#[test]
fn a_burst_holds_each_pipe_once_and_releases_it_and_the_clients_at_its_end() {
    let (mut d, log) = driver(ONE);
    d.run(Place::Home);
    let init = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}}"#;
    let frame = |frame: &str| Input::BackendFrame {
        server: "fs".into(),
        generation: tether_core::Generation(1),
        frame: frame.to_string(),
    };
    taken(&log);
    d.feed_burst([frame(init)], Place::Reader);
    let done = taken(&log);
    let holds = done.iter().filter(|l| l.starts_with("hold")).count();
    assert_eq!(holds, 1, "held once however many frames: {done:?}");
    assert_eq!(done.iter().filter(|l| l.starts_with("release")).count(), 1, "{done:?}");
    let sends = done.iter().filter(|l| l.starts_with("send fs#1")).count();
    assert!(sends >= 2, "initialized and the lists went out: {done:?}");
    let release = done.iter().position(|l| l == "release fs#1").expect("released");
    let last_send = done.iter().rposition(|l| l.starts_with("send fs#1")).unwrap();
    assert!(release > last_send, "released after the burst's last frame: {done:?}");
    assert_eq!(done.last().map(String::as_str), Some("end burst"));
}

#[test]
fn the_core_closing_a_backend_closes_its_connection_once() {
    let (mut d, log) = driver(ONE);
    d.run(Place::Home);
    taken(&log);
    d.feed(Input::BackendExited { server: "fs".into(), generation: tether_core::Generation(1), code: Some(1) });
    d.run(Place::Home);
    assert_ne!(d.gateway().status("fs").map(|s| s.status), Some(Status::Online));
    let done = taken(&log);
    assert_eq!(done.iter().filter(|l| *l == "close fs#1").count(), 1, "{done:?}");
    assert!(d.take_connections().is_empty(), "none left until the restart delay is over");
}
