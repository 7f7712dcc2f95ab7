//! tether-host: the parts of a tether host process that do not depend on how it
//! schedules work. Both runtimes — `tether-smol` (the `tether` binary) and
//! `tether-blocking` (plain threads) — use them, so they read the same files, take
//! the same flags, talk to remote backends the same way and log the same lines.
//!
//! Nothing here decides anything about backends: that is the core's job.

#![warn(unreachable_pub)]

pub mod backlog;
pub mod clock;
pub mod cluster;
pub mod config_file;
pub mod config_watch;
pub mod control;
pub mod credentials;
pub mod driver;
pub mod entropy;
pub mod flags;
pub mod http_backend;
pub mod keep_alive;
pub mod launch;
pub mod lifecycle;
pub mod line_reader;
pub mod locations;
pub mod logging;
pub mod oauth;
pub mod pipe_reader;
pub mod pipe_writer;
pub mod platform;
pub mod process_tree;
pub mod recorder;
pub mod reload;
pub mod resource_auth;
pub mod safe_file;
pub mod seal;
pub mod shared;
pub mod status_document;
pub mod warn_limit;
