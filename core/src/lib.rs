//! tether-core: the deterministic, sans-IO engine of the tether MCP gateway.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod codec;
pub mod policy;
pub mod rng;
pub mod time;

pub use rng::Rng;
pub use time::{Duration, Instant};
