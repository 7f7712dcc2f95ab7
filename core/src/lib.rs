//! tether-core: the deterministic, sans-IO engine of the tether MCP gateway.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod catalog;
pub mod codec;
pub mod config;
pub mod credential;
#[cfg(feature = "std")]
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
/// The stateless revision's HTTP request headers (`MCP-Protocol-Version`,
/// `Mcp-Method`, `Mcp-Name`) a host puts on a POST to a backend, derived from the frame.
pub mod http_headers;
pub mod io;
pub mod metrics;
pub mod param_headers;
pub mod policy;
pub mod protocol;
pub mod redact;
pub mod rng;
pub mod supervisor;
pub mod time;
pub mod tool_search;
pub mod trace;

pub use config::{Config, ConfigError, ServerConfig, Transport};
pub use gateway::{BackendStatus, Gateway, HostError};
pub use io::{
    Action, AdminCommand, ClientRoute, Event, Generation, Input, RawId, ServerName, SessionId, Status, StreamRef,
};
pub use policy::Failure;
pub use rng::Rng;
pub use time::{Duration, Instant};
