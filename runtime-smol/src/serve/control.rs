//! The control channel's answers (see [`tether_host::control`]): questions put
//! to the host loop through the same queue as the HTTP status endpoints', from
//! the control channel's threads.

use async_channel::Sender;
use serde_json::Value;
use tether_core::{AdminCommand, LogLine};
use tether_host::control::ControlTarget;

use crate::serve::status::Query;

/// Answers control requests by asking the host loop.
pub(super) struct HostControl {
    queries: Sender<Query>,
}

impl HostControl {
    /// Asks the host loop through `queries` (a [`crate::serve::status::StatusHandle`]'s).
    pub(super) fn new(queries: Sender<Query>) -> HostControl {
        HostControl { queries }
    }

    /// Sends the query `make` builds around a reply channel; waits for the answer.
    fn ask<T>(&self, make: impl FnOnce(Sender<T>) -> Query) -> Result<T, String> {
        let (tx, rx) = async_channel::bounded(1);
        self.queries.send_blocking(make(tx)).map_err(|_| "tether is shutting down".to_string())?;
        rx.recv_blocking().map_err(|_| "tether is shutting down".to_string())
    }
}

impl ControlTarget for HostControl {
    fn status(&self) -> Result<Value, String> {
        let text = self.ask(Query::Status)?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }

    fn admin(&self, command: AdminCommand) -> Result<(), String> {
        self.ask(|reply| Query::Admin(command, reply))?
    }

    fn logs(&self, server: &str, lines: usize) -> Result<Vec<LogLine>, String> {
        self.ask(|reply| Query::Logs(server.to_string(), lines, reply))?
    }
}
