//! tether-smol: the `tether` binary's library. It drives `tether-core` with smol
//! and does only I/O: processes, sockets, the clock and timers. Every decision
//! (retries, status, timeouts, MCP semantics) is the core's.
//!
//! Two trees: [`serve`] (the runtime) and [`commands`] (what a person runs beside
//! it), with [`cli`] (the arguments) shared.

#![warn(unreachable_pub)]

pub mod cli;
pub mod commands;
pub mod serve;

pub use tether_host::{config_file, http_backend};
