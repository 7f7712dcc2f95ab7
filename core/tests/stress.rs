//! Randomised episodes: clients, backends and time misbehave in every order the
//! PRNG can think of. After every input the engine's invariants must hold, and
//! once everything has settled every client request has exactly one answer
//! (or was cancelled by its client).
//!
//! `STRESS_EPISODES=N cargo test --release -p tether-core --test stress` runs more.

mod support;

use std::collections::BTreeMap;

use serde_json::{json, Value};
use support::Sim;
use tether_core::{Action, AdminCommand, Config, Failure, Input, Rng, ServerConfig, SessionId};

const SERVERS: [&str; 3] = ["a", "b", "web"];

fn config(rng: &mut Rng) -> Config {
    let mut web = ServerConfig::http("https://web.example/mcp");
    web.policy.call_retry_delays_ms = Some(vec![100, 200]);
    let mut b = ServerConfig::stdio("b-server", &[]);
    b.vital = rng.next_u64() % 2 == 0;
    let mut config =
        Config::default().server("a", ServerConfig::stdio("a-server", &[])).server("b", b).server("web", web);
    config.limits.max_in_flight = 16;
    config.limits.max_queued_per_backend = 4;
    config.limits.max_in_flight_per_session = 8;
    config.limits.max_pending_server_requests = 2;
    config.policy.request_timeout_ms = 5_000;
    config.policy.request_timeout_max_ms = 20_000;
    config.policy.idle_timeout_ms = 30_000;
    config
}

struct Episode {
    sim: Sim,
    rng: Rng,
    next_id: u64,
    /// (session, id) -> cancelled by the client
    asked: BTreeMap<(u64, u64), bool>,
}

impl Episode {
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[(self.rng.next_u64() % items.len() as u64) as usize].clone()
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.next_u64() % 100 < percent
    }

    /// Requests a backend has been sent and not yet answered by this driver.
    fn open_requests(&self, server: &str) -> Vec<(u64, String)> {
        let generation = self.sim.gen(server);
        let mut open = BTreeMap::new();
        for (_, a) in &self.sim.actions {
            if let Action::SendToBackend { server: s, generation: g, frame, .. } = a {
                if s != server || *g != generation {
                    continue;
                }
                let Ok(v) = serde_json::from_str::<Value>(frame) else { continue };
                if let (Some(id), Some(m)) = (v["id"].as_u64(), v["method"].as_str()) {
                    open.insert(id, m.to_string());
                }
            }
        }
        open.into_iter().collect()
    }

    fn client_request(&mut self) {
        let session = self.pick(&[1u64, 2]);
        let id = self.next_id;
        self.next_id += 1;
        let tool = self.pick(&["a__echo", "b__echo", "web__echo", "a__nope", "ghost"]);
        let frame = match self.rng.next_u64() % 8 {
            0 => json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}),
            1 => json!({"jsonrpc":"2.0","id":id,"method":"ping"}),
            2 => json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri":"a+file:///x"}}),
            3 => json!({"jsonrpc":"2.0","id":id,"method":"prompts/list","params":{"cursor":"p0"}}),
            _ => {
                json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":{},"_meta":{"progressToken":id}}})
            }
        };
        self.asked.insert((session, id), false);
        self.sim.session(SessionId(session), frame);
    }

    fn step(&mut self) {
        match self.rng.next_u64() % 16 {
            0..=3 => self.client_request(),
            4..=8 => {
                let server = self.pick(&SERVERS);
                let open = self.open_requests(server);
                if open.is_empty() {
                    return;
                }
                let (id, method) = open[(self.rng.next_u64() % open.len() as u64) as usize].clone();
                let result = match method.as_str() {
                    "initialize" => json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{},"resources":{}}}),
                    "tools/list" => json!({"tools":[{"name":"echo","annotations":{"readOnlyHint": true}}]}),
                    "resources/list" => json!({"resources":[]}),
                    "resources/templates/list" => json!({"resourceTemplates":[]}),
                    _ => json!({"content":[]}),
                };
                let frame = match self.rng.next_u64() % 10 {
                    0 => json!({"jsonrpc":"2.0","id":id,"error":{"code":-32603,"message":"boom"}}),
                    1 => json!({"jsonrpc":"2.0","id":id + 1000,"result":{}}),
                    2 => {
                        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":id,"progress":1}})
                    }
                    3 => json!({"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}),
                    4 => json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}),
                    _ => json!({"jsonrpc":"2.0","id":id,"result":result}),
                };
                self.sim.backend(server, frame);
            }
            9 => {
                let server = self.pick(&["a", "b"]);
                let code = self.pick(&[Some(1), None]);
                self.sim.exit(server, code);
            }
            10 => {
                let failure = self.pick(&[
                    Failure::Refused,
                    Failure::Timeout,
                    Failure::Http { status: 500 },
                    Failure::Http { status: 404 },
                    Failure::Http { status: 401 },
                    Failure::Reset,
                ]);
                let open = self.open_requests("web");
                let request = if !open.is_empty() && self.chance(70) {
                    Some(open[(self.rng.next_u64() % open.len() as u64) as usize].0)
                } else {
                    None
                };
                self.sim.fail("web", request, failure);
            }
            11 => {
                let ms = self.pick(&[1u64, 50, 500, 2_000, 30_000, 200_000]);
                self.sim.advance(ms);
            }
            12 => {
                let (session, id) = match self.asked.keys().nth((self.rng.next_u64() % 8) as usize) {
                    Some(k) => *k,
                    None => return,
                };
                self.asked.insert((session, id), true);
                self.sim.session(
                    SessionId(session),
                    json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id}}),
                );
            }
            13 => {
                let server = self.pick(&SERVERS).to_string();
                if self.sim.gw.status(&server).is_none() {
                    return; // removed by a reload: an admin command for it is a host error
                }
                let command = match self.rng.next_u64() % 3 {
                    0 => AdminCommand::Reconnect { server },
                    1 => AdminCommand::Restart { server },
                    _ => AdminCommand::Reconnect { server },
                };
                self.sim.admin(command);
            }
            14 => {
                // Answer a pending server-to-client request, or send garbage.
                let session = self.pick(&[1u64, 2]);
                let frame = if self.chance(50) {
                    "{oops".to_string()
                } else {
                    json!({"jsonrpc":"2.0","id":self.next_id % 7,"result":{}}).to_string()
                };
                self.sim.input(Input::ClientFrame { session: SessionId(session), frame });
            }
            _ => {
                let mut config = config(&mut self.rng);
                if self.chance(30) {
                    config.servers.remove("b");
                }
                self.sim.input(Input::ConfigReloaded { config });
            }
        }
    }

    /// Every request answered exactly once, unless its client cancelled it.
    fn check_answers(&self) {
        let mut answers: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        for (_, a) in &self.sim.actions {
            if let Action::SendToClient { session, frame } = a {
                let v: Value = serde_json::from_str(frame).unwrap();
                if v.get("method").is_none() {
                    if let Some(id) = v["id"].as_u64() {
                        *answers.entry((session.0, id)).or_default() += 1;
                    }
                }
            }
        }
        for (key, cancelled) in &self.asked {
            let n = answers.get(key).copied().unwrap_or(0);
            if *cancelled {
                assert!(n <= 1, "request {key:?} answered {n} times");
            } else {
                assert_eq!(n, 1, "request {key:?} answered {n} times\n{}", self.sim.log);
            }
        }
    }
}

fn episode(seed: u64) {
    let mut rng = Rng::new(seed);
    let config = config(&mut rng);
    let mut e = Episode { sim: Sim::with_seed(config, seed), rng, next_id: 1, asked: BTreeMap::new() };
    for session in [1, 2] {
        e.sim.session(
            SessionId(session),
            json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"sampling":{}}}}),
        );
        e.sim.session(SessionId(session), json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    }
    e.asked.insert((1, 0), false);
    e.asked.insert((2, 0), false);
    for _ in 0..150 {
        e.step();
    }
    // Settle: nobody answers anything any more; every timer fires.
    e.sim.advance(3_600_000);
    e.check_answers();
}

#[test]
fn random_episodes_keep_every_promise() {
    let episodes: u64 = std::env::var("STRESS_EPISODES").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    for seed in 0..episodes {
        let result = std::panic::catch_unwind(|| episode(seed));
        if let Err(e) = result {
            let message = e.downcast_ref::<String>().map(String::as_str).unwrap_or("panic");
            let head: String = message.chars().take(400).collect();
            panic!("episode with seed {seed} failed: {head}");
        }
    }
}
