//! The era bridge: clients and backends of different protocol eras served as
//! one. A handshake-era backend asks its client (sampling, elicitation, roots)
//! during a stateless client's call ([`to_stateless`]: an `input_required`
//! answer and the client's retry); a stateless backend answers a handshake-era
//! client's call `input_required` ([`to_handshake`]: tether asks the client and
//! sends the call again); a stateless client listens for changes whichever era
//! the backend behind them speaks ([`listens`]).
//!
//! [`EraBridge`] owns what waits for a client's input, with its bounds and
//! deadlines, and has its own tests; the gateway applies what it decides.

mod bridge;
pub(super) mod listens;
mod to_handshake;
mod to_stateless;

pub(super) use bridge::{BridgeTimer, EraBridge};
pub(super) use to_stateless::call_subject;
