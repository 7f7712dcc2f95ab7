//! tether-blocking: the tether gateway on plain std threads, for hosts without an
//! async runtime (a synchronous application, a plugin host, a small device).
//!
//! The [`tether_core::Gateway`] sits behind a lock. Each backend stream has a
//! reader thread (stdout and stderr of a process, the event streams of a remote
//! server); the thread that reads an input takes the lock, feeds the engine and
//! executes its actions in place — a frame read from the client is written to the
//! backend by the same thread, with no hand-off. A timer thread sleeps until the
//! core's next deadline (`poll_timeout`). Writes that could block go to a writer
//! thread. The core decides everything; this crate only moves bytes and time.
//!
//! ```no_run
//! let config = tether_host::config_file::load("mcp.json".as_ref()).unwrap();
//! let host = tether_blocking::Host::builder(config).on_event(|e| eprintln!("{e}")).start().unwrap();
//! let mut client = host.client().unwrap();
//! for tool in client.list_tools().unwrap() {
//!     println!("{}", tool["name"]);
//! }
//! drop(client);
//! host.shutdown();
//! ```

mod client;
mod engine;
mod host;
mod stdio_backend;

pub use client::{Client, RpcError};
pub use engine::{ClientSink, EventSink};
pub use host::{Handle, Host, HostBuilder};
pub use tether_host::pipe_writer::{Pipe, PipeWriter};

pub use tether_core::{AdminCommand, BackendStatus, ClientRoute, Config, Event, SessionId, Status};
pub use tether_host::backlog::Backlog;
pub use tether_host::line_reader::LineReader;
