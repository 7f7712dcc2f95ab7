//! The `traffic` driver: the same promises, under traffic shaped like a day of
//! use instead of arbitrary inputs. Clients mostly call tools; backends answer
//! correctly unless their mood says otherwise, and moods last: a backend is
//! healthy, flaky, failing (5xx, or crashing), hung or down for a while, then
//! changes. So calls mostly succeed, failures come in runs that trip breakers,
//! crash loops give up, and at the end everything heals and must recover (an
//! operator restarts what gave up, as one would).
//!
//! `gateway` explores what can happen; this one walks what usually does, where
//! the success, breaker and recovery paths are.

use alloc::string::{String, ToString};
use serde_json::json;

use super::{Choices, Coverage, Harness, Violation, SERVERS};
use crate::io::{AdminCommand, Input, SessionId, Status};
use crate::policy::breaker::BreakerState;
use crate::policy::Failure;

/// How a backend behaves for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mood {
    /// Answers everything correctly.
    Healthy,
    /// Answers, one time in three with an error.
    Flaky,
    /// A remote answers 5xx; a process exits on its next request.
    Failing,
    /// Answers nothing (timeouts).
    Hung,
    /// A remote refuses connections; a process exits as it starts.
    Down,
}

impl Mood {
    /// A new mood, healthy half the time.
    fn pick(c: &mut Choices<'_>) -> Mood {
        match c.below(10) {
            0..=4 => Mood::Healthy,
            5 | 6 => Mood::Flaky,
            7 => Mood::Failing,
            8 => Mood::Hung,
            _ => Mood::Down,
        }
    }
}

/// The `traffic` target: a day of use decoded from `data`.
pub fn traffic(data: &[u8]) -> Result<(), Violation> {
    traffic_coverage(data).map(|_| ())
}

/// [`traffic`], returning what the run reached.
pub fn traffic_coverage(data: &[u8]) -> Result<Coverage, Violation> {
    let mut c = Choices::new(data);
    // Every backend configured, tools served flat (so calls reach the backends).
    let variant = c.byte() & !(8 | 64);
    let seed = c.byte();
    let mut h = Harness::new(variant, u64::from(seed))?;
    h.open_sessions(variant)?;
    let mut day = Day { moods: [Mood::Healthy; 3], stateless: variant & 16 == 16, prefixed_a: variant & 4 == 0 };
    day.serve(&mut h, &mut c)?;
    let mut steps = 0;
    while !c.is_empty() && steps < 300 {
        steps += 1;
        match c.below(16) {
            0..=8 => {
                for _ in 0..1 + c.below(3) {
                    day.call(&mut h, &mut c)?;
                }
            }
            9 | 10 => {
                let ms = [20, 50, 150, 400, 1_200, 6_000, 31_000, 130_000][c.below(8)];
                day.pass(&mut h, &mut c, ms)?;
            }
            11 | 12 => day.moods[c.below(3)] = Mood::pick(&mut c),
            13 => {
                let method = ["tools/list", "resources/list", "prompts/list", "ping"][c.below(4)];
                let id = h.fresh_id();
                let frame = json!({"jsonrpc":"2.0","id":id,"method":method}).to_string();
                h.input(Input::ClientFrame { session: SessionId(1 + c.below(2) as u64), frame, param_headers: None })?;
            }
            14 => {
                // A person gives up on a slow call.
                let asked: alloc::vec::Vec<_> = h.calls_asked.iter().cloned().collect();
                if let Some((session, id)) = asked.get(c.below(asked.len().max(1))) {
                    let frame = alloc::format!(
                        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
                    );
                    h.input(Input::ClientFrame { session: SessionId(*session), frame, param_headers: None })?;
                }
            }
            _ => day.operator(&mut h)?,
        }
        day.serve(&mut h, &mut c)?;
        let ms = 10 + 10 * c.below(5) as u64;
        day.pass(&mut h, &mut c, ms)?;
    }
    // The world heals: breakers cool down, an operator restarts what gave up,
    // and calls to every backend must find it again, once the longest reconnect
    // wait (180 s + 10 %) has passed: calls keep to the backoff too.
    day.moods = [Mood::Healthy; 3];
    day.operator(&mut h)?;
    for round in 0..3 {
        day.pass(&mut h, &mut c, if round == 2 { 200_000 } else { 31_000 })?;
        for server in 0..3 {
            let id = day.call_to(&mut h, server, 1)?;
            // By the last round every breaker has cooled and every backend can be
            // reached at once: its call must succeed.
            if round == 2 {
                h.must_succeed.insert((1, id.to_string()));
            }
        }
        day.serve(&mut h, &mut c)?;
    }
    for server in SERVERS {
        let status = h.gw.status(server).ok_or("a backend vanished")?;
        if status.status != Status::Online || status.breaker != BreakerState::Closed {
            return Err(alloc::format!(
                "{server} is {:?} with its breaker {:?} after the world healed and a call succeeded",
                status.status,
                status.breaker
            ));
        }
    }
    h.settle()?;
    Ok(h.coverage)
}

/// The backends' moods and what the clients look like.
struct Day {
    moods: [Mood; 3],
    /// Session 3 is a stateless client.
    stateless: bool,
    /// Backend `a`'s tools carry its prefix.
    prefixed_a: bool,
}

impl Day {
    /// A client calls a tool of some backend.
    fn call(&self, h: &mut Harness, c: &mut Choices<'_>) -> Result<(), Violation> {
        let server = [0, 0, 1, 2, 2][c.below(5)];
        let session = 1 + c.below(if self.stateless { 3 } else { 2 }) as u64;
        self.call_to(h, server, session).map(|_| ())
    }

    /// `session` calls a tool of `SERVERS[server]`, tagged so its retries are followed.
    fn call_to(&self, h: &mut Harness, server: usize, session: u64) -> Result<u64, Violation> {
        let id = h.fresh_id();
        h.next_tag += 1;
        let tool: String = match server {
            0 if !self.prefixed_a => "echo".into(),
            0 => "a__echo".into(),
            1 => "b__echo".into(),
            _ if id % 3 == 0 => "web__write".into(),
            _ => "web__echo".into(),
        };
        let mut params = json!({"name": tool, "arguments": {"n": h.next_tag}});
        // Now and then a long job, run as a task (both forms).
        let task = id % 8 == 0;
        if session == 3 {
            let extensions = if task { json!({"io.modelcontextprotocol/tasks": {}}) } else { json!({}) };
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
            });
        } else if task {
            params["task"] = json!({"ttl": 60_000});
        }
        let frame = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":params}).to_string();
        h.input(Input::ClientFrame { session: SessionId(session), frame, param_headers: None })?;
        Ok(id)
    }

    /// Time passes; backends act on what they are sent as it arrives (a healthy
    /// one answers a handshake at once, not when the driver next looks).
    fn pass(&self, h: &mut Harness, c: &mut Choices<'_>, ms: u64) -> Result<(), Violation> {
        let until = h.now + ms;
        self.serve(h, c)?;
        for _ in 0..10_000 {
            let next = h.gw.poll_timeout().map_or(until, |at| at.as_millis().clamp(h.now, until));
            h.advance(next - h.now)?;
            self.serve(h, c)?;
            if h.now >= until {
                return Ok(());
            }
        }
        Err("timers keep firing without time passing (livelock)".into())
    }

    /// Every backend acts on what it was sent, as its mood says.
    fn serve(&self, h: &mut Harness, c: &mut Choices<'_>) -> Result<(), Violation> {
        for _ in 0..4 {
            let mut acted = false;
            for (i, server) in SERVERS.iter().enumerate() {
                acted |= self.act(h, server, self.moods[i], c)?;
            }
            if !acted {
                break;
            }
        }
        Ok(())
    }

    /// One backend handles its open requests; whether it did anything.
    fn act(&self, h: &mut Harness, server: &str, mood: Mood, c: &mut Choices<'_>) -> Result<bool, Violation> {
        let open = h.open.get(server).cloned().unwrap_or_default();
        let stdio = server != "web";
        let generation = h.generation(server);
        let live = h.gw.status(server).is_some_and(|s| {
            s.generation == generation
                && matches!(s.status, Status::Connecting | Status::DiscoveringTools | Status::Online)
        });
        if !live {
            return Ok(false);
        }
        let calling = open.iter().any(|(_, m)| m == "tools/call");
        match mood {
            Mood::Hung => Ok(false),
            _ if open.is_empty() => Ok(false),
            // A process that cannot start, or that crashes on the call it gets.
            Mood::Down | Mood::Failing if stdio && (mood == Mood::Down || calling) => {
                let code = Some(if mood == Mood::Down { 127 } else { 1 });
                h.input(Input::BackendExited { server: server.into(), generation, code })?;
                Ok(true)
            }
            Mood::Down => {
                let failure = Failure::Refused;
                h.input(Input::BackendFailed { server: server.into(), generation, request: None, failure })?;
                Ok(true)
            }
            _ => {
                for (id, method) in open {
                    let fails = match mood {
                        Mood::Failing => true,
                        Mood::Flaky => c.below(3) == 0,
                        _ => false,
                    };
                    if method == "prompts/list" {
                        // One page (the drivers' stock answer always has another).
                        h.reply(server, id, &json!({"jsonrpc":"2.0","id":id,"result":{"prompts":[{"name":"greet"}]}}))?;
                    } else if !fails || method != "tools/call" || stdio && mood == Mood::Failing {
                        h.answer(server, id, &method, 0)?;
                    } else if stdio && c.below(2) == 0 {
                        h.answer(server, id, &method, 5)?;
                    } else if stdio {
                        // The tool ran and reports its own failure.
                        let result = json!({"content":[{"type":"text","text":"no such file"}],"isError":true});
                        h.reply(server, id, &json!({"jsonrpc":"2.0","id":id,"result":result}))?;
                    } else {
                        h.settled(server, id);
                        let failure = Failure::Http { status: [500, 502, 503][c.below(3)] };
                        let generation = h.generation(server);
                        h.input(Input::BackendFailed {
                            server: server.into(),
                            generation,
                            request: Some(id),
                            failure,
                        })?;
                    }
                }
                Ok(true)
            }
        }
    }

    /// An operator restarts what gave up.
    fn operator(&self, h: &mut Harness) -> Result<(), Violation> {
        for server in SERVERS {
            if h.gw.status(server).is_some_and(|s| s.status == Status::PermanentlyFailed) {
                h.input(Input::Admin { command: AdminCommand::Restart { server: server.into() } })?;
            }
        }
        Ok(())
    }
}
