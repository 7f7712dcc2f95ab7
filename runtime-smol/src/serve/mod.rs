//! Serving: the smol runtime that drives the engine (the host loop, stdio and
//! HTTP clients, stdio and HTTP backends, the control channel, the status
//! endpoints). The commands reach it only through what this module re-exports:
//! loading a configuration, building a [`Host`], and reading what it reports.

pub mod app;
pub mod byte_queue;
pub mod client_stdio;
pub mod control;
pub mod host;
pub mod http_server;
pub mod line_reader;
pub mod status;
pub mod stdio_backend;

pub use app::{host as build_host, init_logging, load_config, serve};
pub use client_stdio::ClientFrames;
pub use host::{Host, Report};
