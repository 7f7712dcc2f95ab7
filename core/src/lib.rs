//! tether-core: the deterministic, sans-IO engine of the tether MCP gateway.
//!
//! The engine holds every decision a resilient MCP gateway makes — which
//! backend serves a tool, when a crashed process restarts, when a breaker
//! opens, what a client is told while a backend is away — and none of the I/O.
//! A host (the `tether` binary, the threads runtime, a test) owns processes,
//! sockets and the clock, and drives one [`Gateway`]:
//!
//! - **inputs go in** with [`Gateway::handle`]: a client's frame, a backend's
//!   frame, a crash, a stream that ended, a credential, a reloaded config, or
//!   just [`Input::Tick`] when a deadline passed;
//! - **actions come out** of [`Gateway::poll_action`]: spawn or connect a
//!   backend, send a frame, resume a stream, close, emit an [`Event`];
//! - **time is a number** the host passes in ([`Instant`]); [`Gateway::poll_timeout`]
//!   says when the engine next needs a [`Input::Tick`].
//!
//! Given the same config, seed and inputs, the engine produces the same actions,
//! so a recorded session replays exactly ([`trace`]) and a day of failures can
//! be simulated in milliseconds.
//!
//! # The run loop
//!
//! ```no_run
//! use tether_core::{Action, Config, Gateway, Input, Instant, ServerConfig};
//!
//! # fn next_input(_deadline: Option<Instant>) -> (Instant, Input) { unimplemented!() }
//! # fn execute(_action: Action) {}
//! let config = Config::default().server("fs", ServerConfig::stdio("fs-server", &[]));
//! let mut gw = Gateway::new(config, 42, Instant::ZERO)?;
//! loop {
//!     // 1. Carry out every action, in order.
//!     while let Some(action) = gw.poll_action() {
//!         execute(action);
//!     }
//!     // 2. Wait for the next input, or until the deadline (then it is a Tick).
//!     let (now, input) = next_input(gw.poll_timeout());
//!     gw.handle(now, input)?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Call-order rules
//!
//! - After every [`Gateway::handle`], drain [`Gateway::poll_action`] to `None`,
//!   then read [`Gateway::poll_timeout`]. Actions are ordered: execute them in
//!   the order given (a frame sent before a close goes out before the close).
//! - `now` never goes backwards. Early or spurious ticks are harmless.
//! - Reports about a backend carry the [`Generation`] of the connection they
//!   concern: the engine ignores reports about connections it has replaced.
//! - `handle` returns [`HostError`] only when the host breaks these rules; a
//!   peer's fault (bad JSON, a crash, a hostile frame) always becomes actions,
//!   and every client request gets exactly one answer.
//!
//! # Features
//!
//! - `std` (default): `std::error::Error` impls. The engine itself is `no_std` + `alloc`.
//! - `unstable`: the internal layers (`policy`, `supervisor`, `catalog`,
//!   `tool_search`) as public modules, for benches and experiments; no
//!   stability promise.
//! - `fuzzing`: the fuzz drivers and their invariant checks (`fuzzing`), used
//!   by the fuzz targets and the stress tests.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

/// Declares an internal layer: public with the `unstable` feature, else crate-private.
macro_rules! layer {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[cfg(feature = "unstable")]
        pub mod $name;
        $(#[$doc])*
        #[cfg(not(feature = "unstable"))]
        #[allow(unreachable_pub, dead_code)]
        mod $name;
    };
}

mod continuation;
mod gateway;
mod io;
mod rng;
mod secret_ids;
pub mod time;

layer!(
    /// The catalog: every backend's tools, resources and prompts, namespaced.
    catalog
);
layer!(
    /// Resilience policies: backoff, breaker, crash window, health, failure classes.
    policy
);
layer!(
    /// One backend's lifecycle state machine.
    supervisor
);
layer!(
    /// Ranking tools against a request in meta mode.
    tool_search
);

pub mod access;
pub mod cluster;
pub mod codec;
pub mod config;
pub mod credential;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod history;
/// The stateless revision's HTTP request headers (`MCP-Protocol-Version`,
/// `Mcp-Method`, `Mcp-Name`) a host puts on a POST to a backend, derived from the frame.
pub mod http_headers;
pub mod metrics;
pub mod param_headers;
pub mod protocol;
pub mod redact;
pub mod selection;
pub mod trace;
pub mod trace_context;
pub mod uri;

pub use config::{Config, ConfigError, ServerConfig, Transport};
pub use gateway::{BackendStatus, Gateway, HostError, LogLine, LogSource};
pub use io::{
    Action, AdminCommand, ClientRoute, Event, Generation, Input, RawId, ServerName, SessionId, Status, StreamRef,
};
pub use policy::{BreakerState, Failure};
pub use rng::Rng;
pub use time::{Duration, Instant};
