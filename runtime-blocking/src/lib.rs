//! tether-blocking: the tether gateway on plain std threads, for hosts without an
//! async runtime (a synchronous application, a plugin host, a small device).
//!
//! One core thread owns the [`tether_core::Gateway`] and is fed by one channel;
//! each backend stream has a reader thread (stdout and stderr of a process, the
//! event streams of a remote server); timers are the channel's `recv_timeout`
//! until the core's next deadline. Writes that could block go to a writer thread;
//! the others are done in place. The core decides everything; this crate only
//! moves bytes and time.
//!
//! ```no_run
//! let config = tether_host::config_file::load("mcp.json".as_ref()).unwrap();
//! let host = tether_blocking::Host::builder(config).on_event(|e| eprintln!("{e}")).start().unwrap();
//! let mut client = host.client().unwrap();
//! for tool in client.list_tools().unwrap() {
//!     println!("{}", tool["name"]);
//! }
//! host.shutdown();
//! ```

mod client;
mod core_thread;
mod host;
mod line_reader;
mod pipe_writer;
mod stdio_backend;

pub use client::{Client, RpcError};
pub use core_thread::{ClientSink, EventSink};
pub use host::{Handle, Host, HostBuilder};
pub use pipe_writer::PipeWriter;

pub(crate) use core_thread::InputSender;
pub use line_reader::LineReader;
pub use tether_core::{AdminCommand, BackendStatus, ClientRoute, Config, Event, SessionId, Status};
