//! Sans-IO framing: newline-delimited JSON for stdio, Server-Sent Events for HTTP.

pub mod ndjson;
pub mod sse;

pub use ndjson::{encode_line, LineDecoder, LineError};
pub use sse::{SseDecoder, SseError, SseEvent};
