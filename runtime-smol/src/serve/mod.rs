//! Serving: the smol runtime that drives the engine (the host loop, stdio and
//! HTTP clients, stdio and HTTP backends, the control channel, the status
//! endpoints). The commands reach it only through what this module re-exports:
//! loading a configuration, building a [`Host`], and reading what it reports.

mod app;
mod byte_queue;
mod client_stdio;
mod control;
mod host;
mod http_server;
mod line_reader;
mod status;
mod stdio_backend;

pub use app::{host as build_host, init_logging, load_config, serve};
pub use client_stdio::ClientFrames;
pub use host::{Host, Report};
