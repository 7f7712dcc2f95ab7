//! The router: every request between clients and backends that is still open —
//! requests in flight to backends, backend-to-client requests, list requests
//! waiting on the aggregation deadline, and calls waiting for a client's input.
//! Owns those tables and their deadlines; the gateway decides what happens when
//! one comes due.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::calls::{Call, CallKind, InputRound, ParkedList, PendingInput, ServerRequest};
use crate::config::Limits;
use crate::time::Instant;

/// The router's tables.
#[derive(Clone)]
pub(super) struct Router {
    /// Requests in flight to backends, by the id the gateway gave them.
    pub calls: BTreeMap<u64, Call>,
    /// The next id the gateway gives a request.
    pub next_request_id: u64,
    /// Backend-to-client requests in flight, by the id the gateway gave them.
    pub server_requests: BTreeMap<u64, ServerRequest>,
    /// List requests (and calls to names not known yet) waiting for discovery.
    pub parked_lists: Vec<ParkedList>,
    /// Stateless clients' calls waiting for a retry with inputs, by `requestState`.
    pub pending_inputs: BTreeMap<String, PendingInput>,
    /// Handshake-era clients' calls waiting for the inputs a stateless backend
    /// asked for, by round id.
    pub input_rounds: BTreeMap<u64, InputRound>,
    /// Calls that become tasks if not answered by then, by the call's id (an
    /// entry outlives its call by at most the window: it is dropped when due).
    pub task_windows: BTreeMap<u64, Instant>,
    /// Requests a handshake-era backend asked during a stateless client's call,
    /// gathered for one `input_required` round until the deadline, by the call's id.
    pub gathering: BTreeMap<u64, super::calls::Gathering>,
}

/// A router deadline that came due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RouterTimer<'a> {
    /// A request to a backend timed out.
    Call(u64),
    /// Parked lists reached the aggregation deadline.
    ParkedLists,
    /// Nobody retried a call waiting for input in time (by `requestState`).
    Input(&'a str),
    /// A round of inputs asked of a handshake-era client expired.
    Round(u64),
    /// A call's sync window passed: it may become a task.
    TaskWindow(u64),
    /// The requests of a call were gathered: its client is asked.
    Gathered(u64),
}

impl Default for Router {
    fn default() -> Self {
        Router {
            calls: BTreeMap::new(),
            next_request_id: 1,
            server_requests: BTreeMap::new(),
            parked_lists: Vec::new(),
            pending_inputs: BTreeMap::new(),
            input_rounds: BTreeMap::new(),
            task_windows: BTreeMap::new(),
            gathering: BTreeMap::new(),
        }
    }
}

impl Router {
    /// Every router deadline, in the order they fire when several are due.
    pub(super) fn timers(&self) -> impl Iterator<Item = (Instant, RouterTimer<'_>)> {
        let calls = self.calls.iter().filter_map(|(id, c)| Some((c.deadline?, RouterTimer::Call(*id))));
        // Asked after every input: the tables that are nearly always empty cost nothing then.
        let rare = (!self.parked_lists.is_empty()
            || !self.pending_inputs.is_empty()
            || !self.input_rounds.is_empty()
            || !self.task_windows.is_empty()
            || !self.gathering.is_empty())
        .then(|| self.rare_timers());
        calls.chain(rare.into_iter().flatten())
    }

    /// The deadlines of parked lists, calls waiting for input and input rounds.
    fn rare_timers(&self) -> impl Iterator<Item = (Instant, RouterTimer<'_>)> {
        let parked = self.parked_lists.iter().map(|p| p.deadline).min().map(|at| (at, RouterTimer::ParkedLists));
        let inputs = self.pending_inputs.iter().map(|(state, p)| (p.deadline, RouterTimer::Input(state)));
        let rounds = self.input_rounds.iter().map(|(id, r)| (r.deadline, RouterTimer::Round(*id)));
        let windows = self.task_windows.iter().map(|(id, at)| (*at, RouterTimer::TaskWindow(*id)));
        let gathering = self.gathering.iter().map(|(id, g)| (g.deadline, RouterTimer::Gathered(*id)));
        parked.into_iter().chain(inputs).chain(rounds).chain(windows).chain(gathering)
    }

    /// A fresh id for a request the gateway sends.
    pub(super) fn alloc_id(&mut self) -> u64 {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    /// Checks the router's own bounds and cross-references between its tables.
    pub(super) fn check_invariants(&self, limits: &Limits, internal_calls: usize) -> Result<(), String> {
        if self.calls.len() > limits.max_in_flight as usize + internal_calls {
            return Err(format!("{} calls in flight, limit {}", self.calls.len(), limits.max_in_flight));
        }
        if self.server_requests.len() > limits.max_pending_server_requests as usize {
            return Err("too many pending server requests".into());
        }
        if self.server_requests.values().any(|r| r.round.is_some_and(|round| !self.input_rounds.contains_key(&round))) {
            return Err("input request of a round that is gone".into());
        }
        if self.task_windows.len() > 2 * (limits.max_in_flight as usize + internal_calls) {
            return Err(format!("{} task windows watched", self.task_windows.len()));
        }
        if self.pending_inputs.len() + self.gathering.len() > limits.max_pending_server_requests as usize {
            return Err("too many calls waiting for inputs".into());
        }
        for (state, p) in &self.pending_inputs {
            let waiting =
                |c: &Call| matches!(&c.kind, CallKind::Client(cc) if cc.awaiting_input.as_deref() == Some(state));
            if p.answer.is_none() && !self.calls.get(&p.call).is_some_and(waiting) {
                return Err(format!("requestState {state} waits for a call that is not waiting"));
            }
        }
        Ok(())
    }
}
