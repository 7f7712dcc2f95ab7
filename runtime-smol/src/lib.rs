//! tether-smol: the `tether` binary's library. It drives `tether-core` with smol
//! and does only I/O: processes, sockets, the clock and timers. Every decision
//! (retries, status, timeouts, MCP semantics) is the core's.

pub mod app;
pub mod auth_cli;
pub mod byte_queue;
pub mod check;
pub mod cli;
pub mod client_stdio;
pub mod control;
pub mod control_cli;
pub mod demo;
pub mod host;
pub mod http_server;
pub mod import;
pub mod line_reader;
pub mod status;
pub mod status_cli;
pub mod stdio_backend;

pub use tether_host::{config_file, http_backend};
