//! A day of failures: 50 backends (stdio and HTTP), 24 simulated hours, a client
//! calling tools throughout, and a world that crashes, hangs, refuses, rejects
//! credentials, answers 5xx, slows down, hibernates and reloads the config.
//!
//! After every input the engine's invariants must hold; at the end every call
//! has exactly one answer. A summary per seed is printed (`cargo test -- --nocapture`).
//! `SIM_SEEDS=N cargo test --release -p tether-core --test day_of_failures -- --nocapture`
//! runs more seeds.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use tether_core::{
    Action, AdminCommand, Config, Failure, Gateway, Input, Instant, Rng, ServerConfig, SessionId, Status,
};

const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;
const CLIENT: SessionId = SessionId(1);

/// What is wrong with a backend right now, as the world sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// The process crashed once (stdio).
    Crash,
    /// The next process crashes at once on start (stdio), until `until`.
    CrashLoop,
    /// Requests are never answered.
    Hang,
    /// Connections are refused (HTTP).
    Refuse,
    /// Credentials rejected until an operator reconnects (HTTP).
    Auth,
    /// Every request answered with HTTP 503.
    ServerError,
    /// Answers take 20 s.
    Slow,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::CrashLoop => "crash loop",
            Fault::Hang => "hang",
            Fault::Refuse => "refused",
            Fault::Auth => "401",
            Fault::ServerError => "5xx",
            Fault::Slow => "slow",
        }
    }
}

struct World {
    gw: Gateway,
    rng: Rng,
    now: u64,
    names: Vec<tether_core::ServerName>,
    stdio: BTreeSet<tether_core::ServerName>,
    gens: BTreeMap<tether_core::ServerName, u64>,
    faults: BTreeMap<tether_core::ServerName, (Fault, u64)>,
    /// Answers the world will deliver later: (time, server, generation, frame).
    pending: Vec<(u64, tether_core::ServerName, u64, String)>,
    next_call: u64,
    calls: BTreeMap<u64, u32>,
    answered_ok: u64,
    answered_err: u64,
    /// When each fault ended, per backend, waiting for the backend to be online again.
    recovering: BTreeMap<tether_core::ServerName, (Fault, u64)>,
    recovery: BTreeMap<&'static str, Vec<u64>>,
    crashes: u64,
    gave_up: BTreeSet<tether_core::ServerName>,
    reloads: u64,
    hibernations: u64,
}

impl World {
    fn new(seed: u64) -> World {
        let mut config = Config::default();
        let mut names = Vec::new();
        let mut stdio = BTreeSet::new();
        for i in 0..50 {
            let name = format!("s{i:02}");
            let server = if i % 5 < 3 {
                stdio.insert(name.as_str().into());
                ServerConfig::stdio("mock", &[&name])
            } else {
                ServerConfig::http(&format!("https://{name}.example/mcp"))
            };
            config.servers.insert(name.clone(), server);
            names.push(name.into());
        }
        let gw = Gateway::new(config, seed, Instant::ZERO).expect("config");
        let mut w = World {
            gw,
            rng: Rng::new(seed),
            now: 0,
            names,
            stdio,
            gens: BTreeMap::new(),
            faults: BTreeMap::new(),
            pending: Vec::new(),
            next_call: 100,
            calls: BTreeMap::new(),
            answered_ok: 0,
            answered_err: 0,
            recovering: BTreeMap::new(),
            recovery: BTreeMap::new(),
            crashes: 0,
            gave_up: BTreeSet::new(),
            reloads: 0,
            hibernations: 0,
        };
        w.drain();
        w.input(Input::ClientFrame {
            session: CLIENT,
            frame: r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}"#.into(),
            param_headers: None,
        });
        w.input(Input::ClientFrame {
            session: CLIENT,
            frame: r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(),
            param_headers: None,
        });
        w
    }

    fn fault(&self, server: &str) -> Option<Fault> {
        self.faults.get(server).filter(|(_, until)| *until > self.now).map(|(f, _)| *f)
    }

    fn input(&mut self, input: Input) {
        self.gw.handle(Instant::from_millis(self.now), input).expect("host contract");
        self.drain();
    }

    fn drain(&mut self) {
        let mut actions = Vec::new();
        while let Some(a) = self.gw.poll_action() {
            actions.push(a);
        }
        if let Err(e) = self.gw.check_invariants() {
            panic!("invariant broken at {} ms: {e}", self.now);
        }
        for a in actions {
            self.react(a);
        }
        self.note_recoveries();
    }

    /// The world's answer to what the gateway asks of it.
    fn react(&mut self, action: Action) {
        match action {
            Action::Spawn { server, generation, .. } => {
                self.gens.insert(server.clone(), generation);
                if self.fault(&server) == Some(Fault::CrashLoop) {
                    self.crashes += 1;
                    self.pending.push((self.now + 50, server, generation, "<exit>".into()));
                }
            }
            Action::ConnectHttp { server, generation, .. } => {
                self.gens.insert(server, generation);
            }
            Action::SendToBackend { server, generation, frame, request, .. } => {
                let Some(id) = request else { return };
                let v: Value = serde_json::from_str(&frame).unwrap();
                let method = v["method"].as_str().unwrap_or("").to_string();
                let fault = self.fault(&server);
                let http = !self.stdio.contains(&server);
                let (delay, answer) = match fault {
                    Some(Fault::Hang) => return,
                    Some(Fault::Refuse) if http => (5, format!("<refused:{id}>")),
                    Some(Fault::Auth) if http => (20, format!("<401:{id}>")),
                    Some(Fault::ServerError) if http => (20, format!("<503:{id}>")),
                    Some(Fault::Slow) => (20_000, self.result(id, &method)),
                    _ => (5 + self.rng.next_u64() % 200, self.result(id, &method)),
                };
                self.pending.push((self.now + delay, server, generation, answer));
            }
            Action::SendToClient { frame, .. } => {
                let v: Value = serde_json::from_str(&frame).unwrap();
                if v.get("method").is_some() {
                    return;
                }
                let Some(id) = v["id"].as_u64() else { return };
                if let Some(n) = self.calls.get_mut(&id) {
                    *n += 1;
                    if v.get("error").is_some() {
                        self.answered_err += 1;
                    } else {
                        self.answered_ok += 1;
                    }
                }
            }
            Action::Emit { event: tether_core::Event::ServerPermanentlyFailed { server, .. } } => {
                self.gave_up.insert(server);
            }
            _ => {}
        }
    }

    fn result(&self, id: u64, method: &str) -> String {
        let result = match method {
            "initialize" => json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}),
            "tools/list" => json!({"tools":[{"name":"work","annotations":{"idempotentHint":true}},{"name":"write"}]}),
            _ => json!({"content":[{"type":"text","text":"ok"}]}),
        };
        json!({"jsonrpc":"2.0","id":id,"result":result}).to_string()
    }

    /// Delivers the world's pending answers due by now.
    fn deliver(&mut self) {
        loop {
            let Some(pos) = self.pending.iter().position(|p| p.0 <= self.now) else { return };
            let (_, server, generation, frame) = self.pending.swap_remove(pos);
            let input = if frame == "<exit>" {
                Input::BackendExited { server, generation, code: Some(1) }
            } else if let Some(marker) = frame.strip_prefix('<').and_then(|f| f.strip_suffix('>')) {
                let (kind, id) = marker.split_once(':').expect("kind:id");
                let failure = match kind {
                    "refused" => Failure::Refused,
                    "401" => Failure::Http { status: 401 },
                    _ => Failure::Http { status: 503 },
                };
                Input::BackendFailed { server, generation, request: id.parse().ok(), failure }
            } else {
                Input::BackendFrame { server, generation, frame }
            };
            self.input(input);
        }
    }

    /// Moves to `target`, firing gateway timers and world answers in time order.
    fn run_until(&mut self, target: u64) {
        loop {
            let timer = self.gw.poll_timeout().map(|t| t.as_millis());
            let answer = self.pending.iter().map(|p| p.0).min();
            let next = [timer, answer].into_iter().flatten().min();
            match next {
                Some(at) if at <= target => {
                    self.now = self.now.max(at);
                    self.deliver();
                    self.input(Input::Tick);
                }
                _ => break,
            }
        }
        self.now = self.now.max(target);
    }

    fn note_recoveries(&mut self) {
        let back: Vec<tether_core::ServerName> = self
            .recovering
            .keys()
            .filter(|s| self.gw.status(s).is_some_and(|st| matches!(st.status, Status::Online | Status::Dormant)))
            .cloned()
            .collect();
        for server in back {
            let (fault, since) = self.recovering.remove(&server).unwrap();
            self.recovery.entry(fault.name()).or_default().push(self.now - since);
        }
    }

    fn call(&mut self) {
        let server = self.names[(self.rng.next_u64() % self.names.len() as u64) as usize].clone();
        let tool = if self.rng.next_u64() % 3 == 0 { "write" } else { "work" };
        let id = self.next_call;
        self.next_call += 1;
        self.calls.insert(id, 0);
        let frame = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":format!("{server}__{tool}"),"arguments":{}}});
        self.input(Input::ClientFrame { session: CLIENT, frame: frame.to_string(), param_headers: None });
    }

    fn inject(&mut self) {
        let server = self.names[(self.rng.next_u64() % self.names.len() as u64) as usize].clone();
        let stdio = self.stdio.contains(&server);
        let r = self.rng.next_u64();
        match self.rng.next_u64() % 10 {
            0 | 1 if stdio => {
                // A single crash.
                if let Some(generation) = self.gens.get(&server).copied() {
                    self.crashes += 1;
                    self.recovering.entry(server.clone()).or_insert((Fault::Crash, self.now));
                    self.pending.push((self.now, server, generation, "<exit>".into()));
                }
            }
            2 if stdio => self.set_fault(&server, Fault::CrashLoop, 60_000 + r % 600_000),
            3 => self.set_fault(&server, Fault::Hang, 30_000 + r % 300_000),
            4 | 5 if !stdio => self.set_fault(&server, Fault::Refuse, 10_000 + r % (2 * HOUR)),
            6 if !stdio => self.set_fault(&server, Fault::Auth, 30 * 60_000),
            7 if !stdio => self.set_fault(&server, Fault::ServerError, 60_000 + r % 600_000),
            8 => self.set_fault(&server, Fault::Slow, 60_000 + r % 600_000),
            _ => {}
        }
    }

    fn set_fault(&mut self, server: &str, fault: Fault, duration: u64) {
        let until = self.now + duration;
        self.faults.insert(server.into(), (fault, until));
        // Recovery is measured from the end of the fault (see `operator`).
        self.recovering.remove(server);
    }

    /// Faults that ended start their recovery clock; the operator fixes what
    /// needs a person (re-authentication, a backend that gave up).
    fn operator(&mut self) {
        let ended: Vec<(tether_core::ServerName, Fault, u64)> = self
            .faults
            .iter()
            .filter(|(_, (_, until))| *until <= self.now)
            .map(|(s, (f, until))| (s.clone(), *f, *until))
            .collect();
        for (server, fault, until) in ended {
            self.faults.remove(&server);
            if fault != Fault::Slow {
                self.recovering.insert(server.clone(), (fault, until));
            }
            let status = self.gw.status(&server).map(|s| s.status);
            if matches!(status, Some(Status::RequiresReauth | Status::PermanentlyFailed)) {
                let command = if status == Some(Status::PermanentlyFailed) {
                    AdminCommand::Restart { server: server.clone() }
                } else {
                    AdminCommand::Reconnect { server: server.clone() }
                };
                self.input(Input::Admin { command });
            }
        }
    }

    fn reload(&mut self) {
        self.reloads += 1;
        let mut config = self.gw.config().clone();
        let i = (self.rng.next_u64() % 50) as usize;
        let name = self.names[i].clone();
        if let Some(server) = config.servers.get_mut(&*name) {
            server.vital = !server.vital;
            server.policy.request_timeout_ms = Some(30_000 + self.rng.next_u64() % 60_000);
        }
        self.input(Input::ConfigReloaded { config });
    }

    fn day(&mut self) {
        let mut next_call = 0;
        let mut next_fault = 60_000;
        let mut next_reload = 4 * HOUR;
        let mut next_hibernate = 6 * HOUR;
        while self.now < DAY {
            let next = next_call.min(next_fault).min(next_reload).min(next_hibernate).min(DAY);
            self.run_until(next);
            self.operator();
            if self.now >= next_call {
                self.call();
                next_call = self.now + 5_000 + self.rng.next_u64() % 25_000;
            }
            if self.now >= next_fault {
                self.inject();
                next_fault = self.now + 60_000 + self.rng.next_u64() % (10 * 60_000);
            }
            if self.now >= next_reload {
                self.reload();
                next_reload = self.now + 3 * HOUR + self.rng.next_u64() % (3 * HOUR);
            }
            if self.now >= next_hibernate {
                // The laptop sleeps: nothing runs, then everything wakes at once.
                self.hibernations += 1;
                let gap = HOUR + self.rng.next_u64() % (3 * HOUR);
                self.now += gap;
                self.pending.iter_mut().for_each(|p| p.0 = p.0.max(self.now));
                // Recovery clocks do not run while the machine sleeps.
                self.recovering.values_mut().for_each(|r| r.1 += gap);
                self.faults.values_mut().for_each(|f| f.1 += gap);
                self.input(Input::Tick);
                next_hibernate = self.now + 5 * HOUR + self.rng.next_u64() % (4 * HOUR);
            }
        }
        // The world heals; let every timer fire so every call is answered.
        self.faults.clear();
        self.run_until(self.now + 2 * HOUR);
    }

    fn summary(&self, seed: u64) -> String {
        let mut s = format!(
            "seed {seed}: {} calls, {} ok, {} errors; {} crashes, {} reloads, {} hibernations; gave up (then restarted by the operator): {}",
            self.calls.len(),
            self.answered_ok,
            self.answered_err,
            self.crashes,
            self.reloads,
            self.hibernations,
            self.gave_up.len()
        );
        for (kind, times) in &self.recovery {
            let max = times.iter().max().copied().unwrap_or(0);
            let mut sorted = times.clone();
            sorted.sort_unstable();
            let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
            s.push_str(&format!(
                "\n  recovery after {kind}: {} times, median {} ms, max {} ms",
                times.len(),
                median,
                max
            ));
        }
        s
    }
}

fn simulate(seed: u64) {
    let mut world = World::new(seed);
    world.day();
    for (id, n) in &world.calls {
        assert_eq!(*n, 1, "seed {seed}: call {id} answered {n} times");
    }
    assert!(
        world.answered_ok > world.calls.len() as u64 / 2,
        "seed {seed}: most calls should succeed\n{}",
        world.summary(seed)
    );
    println!("{}", world.summary(seed));
}

#[test]
fn a_day_of_failures_keeps_every_promise() {
    let seeds: u64 = std::env::var("SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for seed in 0..seeds {
        simulate(seed);
    }
}
