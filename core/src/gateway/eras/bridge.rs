//! The era bridge's own tables: what waits for a client's input while a call
//! crosses between eras. Pure bookkeeping with its bounds and deadlines; the
//! gateway decides what each outcome sends ([`super::to_stateless`],
//! [`super::to_handshake`]).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::super::calls::{AskedInput, Gathering, InputRound, PendingInput};
use super::super::tasks::reachable;
use crate::io::{ServerName, SessionId};
use crate::protocol::{self, code};
use crate::time::Instant;

/// Calls waiting for a client's input, in both directions.
#[derive(Clone, Debug, Default)]
pub(in crate::gateway) struct EraBridge {
    /// Stateless clients' calls answered `input_required`, waiting for the
    /// retry, by `requestState`.
    pending: BTreeMap<String, PendingInput>,
    /// Requests a handshake-era backend asked during a stateless client's call,
    /// gathered for one `input_required` round until the deadline, by the call's id.
    gathering: BTreeMap<u64, Gathering>,
    /// Handshake-era clients' calls waiting for the inputs a stateless backend
    /// asked for, by round id.
    rounds: BTreeMap<u64, InputRound>,
}

/// A bridge deadline that came due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::gateway) enum BridgeTimer<'a> {
    /// Nobody retried a call waiting for input in time (by `requestState`).
    Input(&'a str),
    /// A round of inputs asked of a handshake-era client expired.
    Round(u64),
    /// The requests of a call were gathered: its client is asked.
    Gathered(u64),
}

/// Where a handshake-era backend's request during a stateless call went.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::gateway) enum Asked {
    /// Added to the round already waiting for the client (or its retry).
    Joined,
    /// The first of a new round: the client is asked when the gathering ends.
    Gathering,
    /// Too many calls wait for input already: the request must be refused.
    Full,
}

/// What one answer to a round's input request did.
#[derive(Debug)]
pub(in crate::gateway) enum RoundAnswer {
    /// No such round (it ended), or answers are still missing.
    Waiting,
    /// Every input is in: the round is over, its call goes to the backend again.
    Complete(InputRound),
    /// The client refused an input the backend needs: the round is over.
    Refused {
        /// The round, removed.
        round: InputRound,
        /// The method refused.
        method: String,
    },
}

impl EraBridge {
    /// Every bridge deadline, in the order they fire when several are due.
    pub(in crate::gateway) fn timers(&self) -> impl Iterator<Item = (Instant, BridgeTimer<'_>)> {
        let inputs = self.pending.iter().map(|(state, p)| (p.deadline, BridgeTimer::Input(state)));
        let rounds = self.rounds.iter().map(|(id, r)| (r.deadline, BridgeTimer::Round(*id)));
        let gathering = self.gathering.iter().map(|(id, g)| (g.deadline, BridgeTimer::Gathered(*id)));
        inputs.chain(rounds).chain(gathering)
    }

    /// Nothing waits: the tables cost nothing to ask then.
    pub(in crate::gateway) fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.gathering.is_empty() && self.rounds.is_empty()
    }

    // ---- handshake-era backend, stateless client ----

    /// Whether `key` already names an input of call `call` (in the round
    /// waiting for its retry under `awaiting`, or in its gathering).
    pub(in crate::gateway) fn key_taken(&self, call: u64, awaiting: Option<&str>, key: &str) -> bool {
        awaiting.and_then(|s| self.pending.get(s)).is_some_and(|p| p.asked.contains_key(key))
            || self.gathering.get(&call).is_some_and(|g| g.asked.contains_key(key))
    }

    /// A backend request `asked` during call `call` (answered `input_required`
    /// under `awaiting` already, or not): joins the round it belongs to, or
    /// starts gathering one until `deadline`, unless `limit` calls wait already.
    #[allow(clippy::too_many_arguments)] // one request's facts; a struct would only rename them
    pub(in crate::gateway) fn ask(
        &mut self,
        call: u64,
        awaiting: Option<&str>,
        server: ServerName,
        key: String,
        asked: AskedInput,
        limit: usize,
        deadline: Instant,
    ) -> Asked {
        if let Some(state) = awaiting {
            // Asked again before the client retried: part of the next round. (A
            // state already gone means the call is ending: nothing to add to.)
            if let Some(p) = self.pending.get_mut(state) {
                p.asked.insert(key, asked);
            }
            return Asked::Joined;
        }
        if let Some(gathering) = self.gathering.get_mut(&call) {
            gathering.asked.insert(key, asked);
            return Asked::Joined;
        }
        if self.pending.len() + self.gathering.len() >= limit {
            return Asked::Full;
        }
        let mut gathered = BTreeMap::new();
        gathered.insert(key, asked);
        self.gathering.insert(call, Gathering { deadline, server, asked: gathered });
        Asked::Gathering
    }

    /// The gathering of call `call`, ended.
    pub(in crate::gateway) fn take_gathering(&mut self, call: u64) -> Option<Gathering> {
        self.gathering.remove(&call)
    }

    /// The client was answered `input_required` under `state`: the call waits
    /// for its retry.
    pub(in crate::gateway) fn park(&mut self, state: String, pending: PendingInput) {
        self.pending.insert(state, pending);
    }

    /// Whether `state` is a `requestState` tether handed out and still holds.
    #[cfg(test)]
    pub(in crate::gateway) fn holds(&self, state: &str) -> bool {
        self.pending.contains_key(state)
    }

    /// A retry under `state` by `principal`: the waiting call, taken. Another
    /// identity's state is unknown to this one, and stays usable by its own.
    pub(in crate::gateway) fn take_for_retry(&mut self, state: &str, principal: Option<&str>) -> Option<PendingInput> {
        if !self.pending.get(state).is_some_and(|p| reachable(p.principal.as_deref(), principal)) {
            return None;
        }
        self.pending.remove(state)
    }

    /// The call waiting under `state` was answered (or failed) before its
    /// retry: the outcome waits for the retry. The first outcome stays.
    pub(in crate::gateway) fn hold_outcome(&mut self, state: &str, outcome: Result<String, String>) {
        if let Some(p) = self.pending.get_mut(state).filter(|p| p.answer.is_none()) {
            p.answer = Some(outcome);
        }
    }

    /// An answer for request `id` of `session`, already answered
    /// `input_required`: the outcome waits for the retry.
    pub(in crate::gateway) fn hold_answer(&mut self, session: SessionId, id: &str, answer: Result<String, String>) {
        let waiting = self.pending.values_mut().find(|p| p.session == session && p.client_id == id);
        match waiting {
            Some(p) if p.answer.is_none() => p.answer = Some(answer),
            Some(_) => debug_assert!(false, "a second answer to request {id}"),
            None => debug_assert!(false, "an answer to request {id}, which no retry waits for"),
        }
    }

    /// Whether request `id` of `session` (closed since) was answered
    /// `input_required`: its outcome is still owed to the retry.
    pub(in crate::gateway) fn awaits_retry(&self, session: SessionId, id: &str) -> bool {
        self.pending.values().any(|p| p.session == session && p.client_id == id)
    }

    /// The entry under `state`, whose retry did not come in time.
    pub(in crate::gateway) fn take_expired(&mut self, state: &str) -> Option<PendingInput> {
        self.pending.remove(state)
    }

    /// Entries with no outcome whose call no longer waits for them (its client
    /// went away), taken.
    pub(in crate::gateway) fn take_orphans(&mut self, waits: impl Fn(u64, &str) -> bool) -> Vec<PendingInput> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let gone: Vec<String> = self
            .pending
            .iter()
            .filter(|(state, p)| p.answer.is_none() && !waits(p.call, state))
            .map(|(k, _)| k.clone())
            .collect();
        gone.iter().filter_map(|state| self.pending.remove(state)).collect()
    }

    // ---- stateless backend, handshake-era client ----

    /// Round `id` asked its client: it waits for the answers.
    pub(in crate::gateway) fn open_round(&mut self, id: u64, round: InputRound) {
        self.rounds.insert(id, round);
    }

    /// Whether round `id` is still open.
    pub(in crate::gateway) fn has_round(&self, id: u64) -> bool {
        self.rounds.contains_key(&id)
    }

    /// The client answered input `key` of round `round_id`. An elicitation the
    /// client could not show is one the user did not answer (cancelled); any
    /// other refusal ends the round.
    pub(in crate::gateway) fn answer_round(
        &mut self,
        round_id: u64,
        key: &str,
        answer: Result<&str, &str>,
    ) -> RoundAnswer {
        let Some(round) = self.rounds.get_mut(&round_id) else { return RoundAnswer::Waiting };
        let method = round.asked.get(key).cloned().unwrap_or_default();
        let value = match answer {
            Ok(result) => result.to_string(),
            Err(_) if method == "elicitation/create" => r#"{"action":"cancel"}"#.to_string(),
            Err(_) => {
                let Some(round) = self.rounds.remove(&round_id) else { return RoundAnswer::Waiting };
                return RoundAnswer::Refused { round, method };
            }
        };
        round.answers.insert(key.to_string(), value);
        if round.answers.len() < round.asked.len() {
            return RoundAnswer::Waiting;
        }
        self.rounds.remove(&round_id).map_or(RoundAnswer::Waiting, RoundAnswer::Complete)
    }

    /// Round `id`, ended.
    pub(in crate::gateway) fn take_round(&mut self, id: u64) -> Option<InputRound> {
        self.rounds.remove(&id)
    }

    /// The rounds of backend `server`, ended (it is gone).
    pub(in crate::gateway) fn take_rounds_of(&mut self, server: &str) -> Vec<(u64, InputRound)> {
        let ids: Vec<u64> = self.rounds.iter().filter(|(_, r)| &*r.server == server).map(|(id, _)| *id).collect();
        ids.into_iter().filter_map(|id| Some((id, self.rounds.remove(&id)?))).collect()
    }

    /// The round of `session`'s call `id`, if that call waits in one.
    pub(in crate::gateway) fn round_of(&self, session: SessionId, id: &str) -> Option<u64> {
        self.rounds.iter().find(|(_, r)| r.call.session == session && r.call.id == id).map(|(k, _)| *k)
    }

    /// A closed session's rounds go with it.
    pub(in crate::gateway) fn drop_session(&mut self, session: SessionId) {
        self.rounds.retain(|_, r| r.call.session != session);
    }

    /// Checks the bridge's bounds: at most `limit` calls wait for a stateless
    /// client's input, each entry without an outcome has a call that `waits`
    /// for it, and every round belongs to an `open` session.
    pub(in crate::gateway) fn check_invariants(
        &self,
        limit: usize,
        waits: impl Fn(u64, &str) -> bool,
        open: impl Fn(SessionId) -> bool,
    ) -> Result<(), String> {
        if self.pending.len() + self.gathering.len() > limit {
            return Err("too many calls waiting for inputs".into());
        }
        for (state, p) in &self.pending {
            if p.answer.is_none() && !waits(p.call, state) {
                return Err(format!("requestState {state} waits for a call that is not waiting"));
            }
        }
        if self.rounds.values().any(|r| !open(r.call.session)) {
            return Err("input round owed to a closed session".into());
        }
        Ok(())
    }
}

/// The `input_required` result asking `asked` under `state`.
pub(in crate::gateway) fn input_required_result(asked: &BTreeMap<String, AskedInput>, state: &str) -> String {
    let requests: Vec<String> = asked
        .iter()
        .map(|(key, a)| {
            let params = a.params.as_deref().map(|p| format!(r#","params":{p}"#)).unwrap_or_default();
            format!(r#"{}:{{"method":{}{params}}}"#, protocol::quote(key), protocol::quote(&a.method))
        })
        .collect();
    format!(
        r#"{{"resultType":"input_required","inputRequests":{{{}}},"requestState":{}}}"#,
        requests.join(","),
        protocol::quote(state)
    )
}

/// The answers for inputs nobody will give any more, asked on connection
/// `generation`: an elicitation is cancelled, anything else gets an error
/// saying `why`. Inputs of a stateless backend (`in_round`) and inputs asked of
/// an earlier connection get nothing.
pub(in crate::gateway) fn refusals<'a>(
    asked: impl Iterator<Item = &'a AskedInput>,
    generation: Option<crate::io::Generation>,
    why: &str,
) -> Vec<String> {
    asked
        .filter(|a| Some(a.generation) == generation && !a.in_round)
        .map(|a| {
            if a.method == "elicitation/create" {
                protocol::response(&a.backend_id, r#"{"action":"cancel"}"#)
            } else {
                protocol::error_response(&a.backend_id, code::INTERNAL_ERROR, why, None)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
