//! A simulated host for scenario tests: simulated time, scripted backends and
//! client, and a readable transcript of every input and the actions it caused.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{json, Value};
use tether_core::trace::{header_line, input_line, TraceHeader, TRACE_VERSION};
use tether_core::{
    Action, AdminCommand, Config, Event, Failure, Gateway, Input, Instant, ServerConfig, SessionId, Status,
};

/// The client session most scenarios use.
pub const CLIENT: SessionId = SessionId(1);

pub struct Sim {
    pub gw: Gateway,
    pub now: u64,
    /// Readable transcript for snapshots.
    pub log: String,
    /// Every action so far, with time.
    pub actions: Vec<(u64, Action)>,
    /// Current generation per backend, learned from spawn/connect actions.
    pub gens: BTreeMap<tether_core::ServerName, tether_core::Generation>,
    /// The trace of this run (header + inputs), for replay tests.
    pub trace: String,
    /// Log ticks that produced nothing too.
    pub verbose_ticks: bool,
}

impl Sim {
    pub fn new(config: Config) -> Sim {
        Sim::with_seed(config, 42)
    }

    pub fn with_seed(config: Config, seed: u64) -> Sim {
        let header = TraceHeader {
            tether_trace: TRACE_VERSION,
            seed,
            start: Instant::ZERO,
            config: config.clone(),
            id_key: None,
            continuation_keys: Vec::new(),
        };
        let gw = Gateway::new(config, seed, Instant::ZERO).expect("valid config");
        let mut sim = Sim {
            gw,
            now: 0,
            log: String::new(),
            actions: Vec::new(),
            gens: BTreeMap::new(),
            trace: header_line(&header) + "\n",
            verbose_ticks: false,
        };
        sim.note("gateway started");
        sim.drain();
        sim
    }

    /// A line in the transcript that is not an input (scenario narration).
    pub fn note(&mut self, text: &str) {
        writeln!(self.log, "[{:>9}] # {text}", self.now).unwrap();
    }

    fn drain(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(a) = self.gw.poll_action() {
            match &a {
                Action::Spawn { server, generation, .. } | Action::ConnectHttp { server, generation, .. } => {
                    self.gens.insert(server.clone(), *generation);
                }
                _ => {}
            }
            writeln!(self.log, "[{:>9}]     {a}", self.now).unwrap();
            self.actions.push((self.now, a.clone()));
            out.push(a);
        }
        if let Err(e) = self.gw.check_invariants() {
            panic!("invariant broken at {} ms: {e}\n{}", self.now, self.log);
        }
        out
    }

    /// Feeds one input now; returns the actions it caused.
    pub fn input(&mut self, input: Input) -> Vec<Action> {
        let quiet_tick = matches!(input, Input::Tick) && !self.verbose_ticks;
        let mark = self.log.len();
        if !quiet_tick {
            writeln!(self.log, "[{:>9}] > {input}", self.now).unwrap();
        }
        self.trace.push_str(&input_line(Instant::from_millis(self.now), &input));
        self.trace.push('\n');
        self.gw.handle(Instant::from_millis(self.now), input).expect("host contract");
        let actions = self.drain();
        if quiet_tick && !actions.is_empty() {
            self.log.insert_str(mark, &format!("[{:>9}] > tick\n", self.now));
        }
        actions
    }

    /// Moves time forward by `ms`, firing every timer on the way.
    pub fn advance(&mut self, ms: u64) -> Vec<Action> {
        let target = self.now + ms;
        let mut out = Vec::new();
        for _ in 0..100_000 {
            match self.gw.poll_timeout() {
                Some(at) if at.as_millis() <= target => {
                    self.now = self.now.max(at.as_millis());
                    out.extend(self.input(Input::Tick));
                }
                _ => break,
            }
        }
        self.now = target;
        out
    }

    pub fn gen(&self, server: &str) -> tether_core::Generation {
        self.gens.get(server).copied().unwrap_or_default()
    }

    pub fn client(&mut self, frame: Value) -> Vec<Action> {
        self.input(Input::ClientFrame { session: CLIENT, frame: frame.to_string(), param_headers: None })
    }

    pub fn client_raw(&mut self, frame: &str) -> Vec<Action> {
        self.input(Input::ClientFrame { session: CLIENT, frame: frame.to_string(), param_headers: None })
    }

    pub fn session(&mut self, session: SessionId, frame: Value) -> Vec<Action> {
        self.input(Input::ClientFrame { session, frame: frame.to_string(), param_headers: None })
    }

    pub fn backend(&mut self, server: &str, frame: Value) -> Vec<Action> {
        let generation = self.gen(server);
        self.input(Input::BackendFrame { server: server.into(), generation, frame: frame.to_string() })
    }

    pub fn backend_raw(&mut self, server: &str, frame: &str) -> Vec<Action> {
        let generation = self.gen(server);
        self.input(Input::BackendFrame { server: server.into(), generation, frame: frame.to_string() })
    }

    pub fn stderr(&mut self, server: &str, line: &str) -> Vec<Action> {
        let generation = self.gen(server);
        self.input(Input::BackendStderr { server: server.into(), generation, line: line.into() })
    }

    pub fn exit(&mut self, server: &str, code: Option<i32>) -> Vec<Action> {
        let generation = self.gen(server);
        self.input(Input::BackendExited { server: server.into(), generation, code })
    }

    pub fn fail(&mut self, server: &str, request: Option<u64>, failure: Failure) -> Vec<Action> {
        let generation = self.gen(server);
        self.input(Input::BackendFailed { server: server.into(), generation, request, failure })
    }

    pub fn admin(&mut self, command: AdminCommand) -> Vec<Action> {
        self.input(Input::Admin { command })
    }

    /// Requests sent to `server` (any generation) with `method`, as (id, params).
    pub fn requests_to(&self, server: &str, method: &str) -> Vec<(u64, Value)> {
        self.actions
            .iter()
            .filter_map(|(_, a)| match a {
                Action::SendToBackend { server: s, frame, .. } if &**s == server => {
                    let v: Value = serde_json::from_str(frame).ok()?;
                    (v["method"] == method && v.get("id").is_some())
                        .then(|| (v["id"].as_u64().unwrap(), v["params"].clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// The id of the latest request sent to `server` with `method`.
    pub fn last_request(&self, server: &str, method: &str) -> u64 {
        self.requests_to(server, method)
            .last()
            .unwrap_or_else(|| panic!("no {method} sent to {server}\n{}", self.log))
            .0
    }

    /// Answers the latest `method` request sent to `server`. Answering
    /// `initialize` first refuses a `server/discover` probe still waiting for its
    /// answer, as a handshake-era server does (-32601).
    pub fn answer(&mut self, server: &str, method: &str, result: Value) -> Vec<Action> {
        if method == "initialize" {
            self.refuse_probe(server);
        }
        if method == "server/discover" {
            self.refuse_initialize(server);
        }
        let id = self.last_request(server, method);
        self.backend(server, json!({"jsonrpc":"2.0","id":id,"result":result}))
    }

    /// The handshake-era answer to a pending `server/discover` probe of `server`'s
    /// current connection: method not found, then tether sends `initialize`.
    pub fn refuse_probe(&mut self, server: &str) {
        let Some((probe, _)) = self.requests_to(server, "server/discover").last().cloned() else { return };
        let answered = self.initialize_sent_after(server, probe);
        if !answered {
            self.backend(
                server,
                json!({"jsonrpc":"2.0","id":probe,"error":{"code":-32601,"message":"Method not found"}}),
            );
        }
    }

    /// A stateless-only server's answer to a pending `initialize` (a stdio
    /// backend of unknown era is sent it first): the revision is not spoken
    /// (-32022), then tether probes with `server/discover`.
    pub fn refuse_initialize(&mut self, server: &str) {
        let Some((init, _)) = self.requests_to(server, "initialize").last().cloned() else { return };
        let probed = self.requests_to(server, "server/discover").iter().any(|(i, _)| *i > init);
        if !probed {
            let error =
                json!({"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"]}});
            self.backend(server, json!({"jsonrpc":"2.0","id":init,"error":error}));
        }
    }

    /// Whether `initialize` went to `server` after request `id`.
    fn initialize_sent_after(&self, server: &str, id: u64) -> bool {
        self.requests_to(server, "initialize").iter().any(|(i, _)| *i > id)
    }

    /// Answers the latest `method` request sent to `server` with a JSON-RPC error.
    pub fn answer_error(&mut self, server: &str, method: &str, code: i64, message: &str) -> Vec<Action> {
        let id = self.last_request(server, method);
        self.backend(server, json!({"jsonrpc":"2.0","id":id,"error":{"code":code,"message":message}}))
    }

    /// Completes the handshake and tools-only discovery of `server`.
    pub fn boot(&mut self, server: &str, tools: &[&str]) {
        self.answer(
            server,
            "initialize",
            json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":server,"version":"1"}}),
        );
        self.answer_tools(server, tools);
    }

    /// Answers the latest `tools/list` of `server` with these tools.
    pub fn answer_tools(&mut self, server: &str, tools: &[&str]) {
        let list: Vec<Value> = tools
            .iter()
            .map(|t| json!({"name": t, "description": format!("{t} tool"), "inputSchema": {"type":"object"}}))
            .collect();
        self.answer(server, "tools/list", json!({ "tools": list }));
    }

    /// A client handshake on session 1.
    pub fn client_init(&mut self) {
        self.client(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"roots":{}},"clientInfo":{"name":"test","version":"1"}}}));
        self.client(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    }

    pub fn call(&mut self, id: u64, tool: &str) -> Vec<Action> {
        self.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":{}}}))
    }

    /// Frames sent to client session 1 so far, parsed.
    pub fn client_frames(&self) -> Vec<Value> {
        self.frames_to(CLIENT)
    }

    /// Frames sent to client `session` so far, parsed. A frame that is not JSON
    /// fails the test: tether never sends a client garbage.
    pub fn frames_to(&self, session: SessionId) -> Vec<Value> {
        self.actions
            .iter()
            .filter_map(|(_, a)| match a {
                Action::SendToClient { session: s, frame, .. } if *s == session => {
                    Some(serde_json::from_str(frame).unwrap_or_else(|e| {
                        panic!("tether sent client {} a frame that is not JSON ({e}): {frame}", s.0)
                    }))
                }
                _ => None,
            })
            .collect()
    }

    /// Responses the client received for request `id`.
    pub fn responses_for(&self, id: u64) -> Vec<Value> {
        self.client_frames().into_iter().filter(|f| f["id"] == json!(id) && f.get("method").is_none()).collect()
    }

    /// The one response the client received for request `id` (panics unless exactly one).
    pub fn response(&self, id: u64) -> Value {
        let r = self.responses_for(id);
        assert_eq!(r.len(), 1, "expected exactly one response to {id}, got {r:?}\n{}", self.log);
        r.into_iter().next().unwrap()
    }

    pub fn status(&self, server: &str) -> tether_core::Status {
        self.gw.status(server).unwrap().status
    }
}

/// One stdio backend `fs` and one HTTP backend `web`.
pub fn two_backends() -> Config {
    Config::default()
        .server("fs", ServerConfig::stdio("fs-server", &["--root", "/tmp"]))
        .server("web", ServerConfig::http("https://web.example/mcp"))
}

pub fn one_stdio() -> Config {
    Config::default().server("fs", ServerConfig::stdio("fs-server", &[]))
}

pub fn one_http() -> Config {
    Config::default().server("web", ServerConfig::http("https://web.example/mcp"))
}

// ----- queries over a run, shared by the scenario suites -----

/// The error object of the one response to `id` (panics unless it is an error).
pub fn error_of(sim: &Sim, id: u64) -> Value {
    let r = sim.response(id);
    assert!(r.get("error").is_some(), "response to {id} is not an error: {r}\n{}", sim.log);
    r["error"].clone()
}

/// Every event emitted so far, with its time.
pub fn events(sim: &Sim) -> Vec<(u64, Event)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::Emit { event } => Some((*at, event.clone())),
            _ => None,
        })
        .collect()
}

/// Frames to client session 1 from action `from` on, with their routes, in order.
pub fn routed_since(sim: &Sim, from: usize) -> Vec<(tether_core::ClientRoute, Value)> {
    sim.actions[from..]
        .iter()
        .filter_map(|(_, a)| match a {
            Action::SendToClient { session, frame, route } if *session == CLIENT => {
                Some((route.clone(), serde_json::from_str(frame).unwrap()))
            }
            _ => None,
        })
        .collect()
}

/// The statuses `server` went through, in order (the `to` of each change).
pub fn status_path(sim: &Sim, server: &str) -> Vec<Status> {
    events(sim)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Event::ServerStatusChanged { server: s, to, .. } if &*s == server => Some(to),
            _ => None,
        })
        .collect()
}

/// Names of the tools the client is served now (asks with a fresh request id).
pub fn listed_tools(sim: &mut Sim, id: u64) -> Vec<String> {
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}));
    let r = sim.response(id);
    r["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// Answers a request of the backend by id.
pub fn reply(sim: &mut Sim, server: &str, id: u64, result: Value) {
    sim.backend(server, json!({"jsonrpc":"2.0","id":id,"result":result}));
}

pub fn text_result(text: &str) -> Value {
    json!({"content":[{"type":"text","text":text}]})
}

/// Requests with `method` sent to `server` (any generation), as (time, id).
pub fn request_times(sim: &Sim, server: &str, method: &str) -> Vec<(u64, u64)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::SendToBackend { server: s, frame, .. } if &**s == server => {
                let v: Value = serde_json::from_str(frame).ok()?;
                (v["method"] == method && v.get("id").is_some()).then(|| (*at, v["id"].as_u64().unwrap()))
            }
            _ => None,
        })
        .collect()
}

// ----- the stateless revision -----

/// The revision stateless clients and backends speak in these tests.
pub const STATELESS: &str = "2026-07-28";

/// The per-request `_meta` of a stateless client that declares no capabilities.
pub fn stateless_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "stateless", "version": "1"},
    })
}
