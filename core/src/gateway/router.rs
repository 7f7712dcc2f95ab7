//! The router: every request between clients and backends that is still open —
//! requests in flight to backends, backend-to-client requests, list requests
//! waiting on the aggregation deadline, and calls' task windows (what waits for
//! a client's input is the era bridge's). Owns those tables and their deadlines; the gateway decides what happens when
//! one comes due.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::calls::{Call, CallKind, ParkedList, ServerRequest};
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
    /// Calls that become tasks if not answered by then, by the call's id (an
    /// entry outlives its call by at most the window: it is dropped when due).
    pub task_windows: BTreeMap<u64, Instant>,
}

/// A router deadline that came due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RouterTimer {
    /// A request to a backend timed out.
    Call(u64),
    /// Parked lists reached the aggregation deadline.
    ParkedLists,
    /// A call's sync window passed: it may become a task.
    TaskWindow(u64),
}

impl Default for Router {
    fn default() -> Self {
        Router {
            calls: BTreeMap::new(),
            next_request_id: 1,
            server_requests: BTreeMap::new(),
            parked_lists: Vec::new(),
            task_windows: BTreeMap::new(),
        }
    }
}

impl Router {
    /// Every router deadline, in the order they fire when several are due.
    pub(super) fn timers(&self) -> impl Iterator<Item = (Instant, RouterTimer)> + '_ {
        let calls = self.calls.iter().filter_map(|(id, c)| Some((c.deadline?, RouterTimer::Call(*id))));
        // Asked after every input: the tables that are nearly always empty cost nothing then.
        let rare = (!self.parked_lists.is_empty() || !self.task_windows.is_empty()).then(|| self.rare_timers());
        calls.chain(rare.into_iter().flatten())
    }

    /// The deadlines of parked lists and task windows.
    fn rare_timers(&self) -> impl Iterator<Item = (Instant, RouterTimer)> + '_ {
        let parked = self.parked_lists.iter().map(|p| p.deadline).min().map(|at| (at, RouterTimer::ParkedLists));
        let windows = self.task_windows.iter().map(|(id, at)| (*at, RouterTimer::TaskWindow(*id)));
        parked.into_iter().chain(windows)
    }

    /// The newest client call in flight on `server`: a handshake-era backend's
    /// request names no call, and is taken to be for that one.
    pub(super) fn newest_client_call(&self, server: &str) -> Option<u64> {
        self.calls.iter().rev().find_map(|(id, c)| match &c.kind {
            CallKind::Client(_) if &*c.server == server => Some(*id),
            _ => None,
        })
    }

    /// A call that may become a task has been sent: its window is watched.
    pub(super) fn watch_task_window(&mut self, call_id: u64, window: Instant, now: Instant) {
        self.task_windows.insert(call_id, window.max(now));
    }

    /// The task client call `call` runs for, if any: a backend request for the
    /// call is asked for that task.
    pub(super) fn call_task(&self, call: u64) -> Option<String> {
        match &self.calls.get(&call)?.kind {
            CallKind::Client(cc) => cc.task.clone(),
            _ => None,
        }
    }
    /// A fresh id for a request the gateway sends.
    pub(super) fn alloc_id(&mut self) -> u64 {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    /// Checks the router's own bounds and cross-references between its tables.
    pub(super) fn check_invariants(
        &self,
        limits: &Limits,
        internal_calls: usize,
        has_round: impl Fn(u64) -> bool,
    ) -> Result<(), String> {
        if self.calls.len() > limits.max_in_flight as usize + internal_calls {
            return Err(format!("{} calls in flight, limit {}", self.calls.len(), limits.max_in_flight));
        }
        if self.server_requests.len() > limits.max_pending_server_requests as usize {
            return Err("too many pending server requests".into());
        }
        if self.server_requests.values().any(|r| r.round.is_some_and(|round| !has_round(round))) {
            return Err("input request of a round that is gone".into());
        }
        if self.task_windows.len() > 2 * (limits.max_in_flight as usize + internal_calls) {
            return Err(format!("{} task windows watched", self.task_windows.len()));
        }
        Ok(())
    }
}
