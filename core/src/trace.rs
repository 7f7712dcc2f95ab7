//! Traces: a header (config, seed, start time) and one JSON line per input.
//!
//! Because the engine is deterministic, a trace recorded in production replays to
//! the same actions, byte for byte, in a test.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::gateway::{Gateway, HostError};
use crate::io::{Action, Input};
use crate::time::Instant;

/// Format version written in every header. Version 3: a stdio backend of
/// unknown era is sent `initialize` first (version 2 probed every backend with
/// `server/discover` first: such traces replay, with different actions from a
/// stdio backend's first connection on). Version 1 traces still replay: their
/// backends are pinned to the handshake era, which is all a version 1 engine
/// spoke.
pub const TRACE_VERSION: u32 = 3;

/// The first line of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// Format version ([`TRACE_VERSION`]).
    pub tether_trace: u32,
    /// Seed of the engine's PRNG.
    pub seed: u64,
    /// `now` given to [`Gateway::new`].
    pub start: Instant,
    /// The configuration given to [`Gateway::new`].
    pub config: Config,
    /// The key given to [`Gateway::set_id_key`], as 64 hex digits, if one was.
    /// Whoever holds the trace can tell the ids it gave out: it is as private
    /// as the calls it records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_key: Option<String>,
    /// The keys given to [`Gateway::set_continuation_keys`] (a cluster's), as
    /// `ID:HEX`, if any: as private as the id key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub continuation_keys: Vec<String>,
}

/// `keys` as a trace header holds them.
pub fn continuation_keys_text(keys: &[(u8, [u8; 32])]) -> Vec<String> {
    keys.iter().map(|(id, key)| format!("{id}:{}", id_key_hex(key))).collect()
}

/// `key` as the hex a trace header holds.
pub fn id_key_hex(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key a trace header holds, if it is 64 hex digits.
fn id_key_from_hex(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let pair = core::str::from_utf8(pair).ok()?;
        key[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(key)
}

/// One recorded input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TraceLine {
    /// When it was handled.
    pub at: Instant,
    /// What it was.
    pub input: Input,
}

/// Why a trace could not be replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceError {
    /// A line is not valid JSON of the expected shape (1-based line number).
    Parse {
        /// Line number.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// The header's version is not one this engine reads.
    Version(u32),
    /// The header's config does not validate.
    Config(crate::config::ConfigError),
    /// The trace breaks the host contract at a line.
    Host {
        /// Line number.
        line: usize,
        /// The violation.
        error: HostError,
    },
    /// The trace is empty.
    Empty,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Parse { line, message } => write!(f, "line {line}: {message}"),
            TraceError::Version(v) => write!(f, "unsupported trace version {v}"),
            TraceError::Config(e) => write!(f, "header config: {e}"),
            TraceError::Host { line, error } => write!(f, "line {line}: {error}"),
            TraceError::Empty => f.write_str("empty trace"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TraceError {}

/// Serialises a header as one line (no newline).
pub fn header_line(header: &TraceHeader) -> String {
    serde_json::to_string(header).unwrap_or_default()
}

/// Serialises one input as one line (no newline).
pub fn input_line(at: Instant, input: &Input) -> String {
    serde_json::to_string(&TraceLine { at, input: input.clone() }).unwrap_or_default()
}

/// Runs a trace through a fresh [`Gateway`] and returns every action with the
/// time of the input that produced it. Actions from `Gateway::new` come first.
pub fn replay(trace: &str) -> Result<Vec<(Instant, Action)>, TraceError> {
    let mut lines = trace.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines.next().ok_or(TraceError::Empty)?;
    let header: TraceHeader =
        serde_json::from_str(first).map_err(|e| TraceError::Parse { line: 1, message: format!("{e}") })?;
    if !(1..=TRACE_VERSION).contains(&header.tether_trace) {
        return Err(TraceError::Version(header.tether_trace));
    }
    let v1 = header.tether_trace == 1;
    let mut config = header.config;
    if v1 {
        pin_handshake_era(&mut config);
    }
    let mut gw = Gateway::new(config, header.seed, header.start).map_err(TraceError::Config)?;
    if let Some(hex) = &header.id_key {
        let key = id_key_from_hex(hex)
            .ok_or_else(|| TraceError::Parse { line: 1, message: "id_key: expected 64 hex digits".into() })?;
        gw.set_id_key(key);
    }
    if !header.continuation_keys.is_empty() {
        let mut keys = Vec::new();
        for text in &header.continuation_keys {
            let parsed = text.split_once(':').and_then(|(id, hex)| Some((id.parse().ok()?, id_key_from_hex(hex)?)));
            let bad = || TraceError::Parse { line: 1, message: "continuation_keys: expected ID:64 hex digits".into() };
            keys.push(parsed.ok_or_else(bad)?);
        }
        gw.set_continuation_keys(&keys);
    }
    let mut out = Vec::new();
    while let Some(a) = gw.poll_action() {
        out.push((header.start, a));
    }
    for (i, text) in lines {
        let mut line: TraceLine =
            serde_json::from_str(text).map_err(|e| TraceError::Parse { line: i + 1, message: format!("{e}") })?;
        if let (true, Input::ConfigReloaded { config }) = (v1, &mut line.input) {
            pin_handshake_era(config);
        }
        gw.handle(line.at, line.input).map_err(|error| TraceError::Host { line: i + 1, error })?;
        while let Some(a) = gw.poll_action() {
            out.push((line.at, a));
        }
    }
    Ok(out)
}

/// A version 1 engine opened every backend with `initialize`.
fn pin_handshake_era(config: &mut Config) {
    for server in config.servers.values_mut() {
        server.era.get_or_insert(crate::protocol::Era::Handshake);
    }
}

/// Renders actions one per line, `[time] action`, for people and snapshots.
pub fn render(actions: &[(Instant, Action)]) -> String {
    let mut out = String::new();
    for (at, a) in actions {
        out.push_str(&format!("[{:>9}] {a}\n", at.as_millis()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_key_survives_the_header() {
        let key: [u8; 32] = core::array::from_fn(|i| (i * 37) as u8);
        assert_eq!(id_key_from_hex(&id_key_hex(&key)), Some(key));
        assert_eq!(id_key_from_hex("00"), None);
        assert_eq!(id_key_from_hex(&"zz".repeat(32)), None);
    }

    #[test]
    fn continuation_keys_survive_the_header_and_a_bad_one_is_a_parse_error() {
        let header = TraceHeader {
            tether_trace: TRACE_VERSION,
            seed: 1,
            start: Instant::ZERO,
            config: Config::default(),
            id_key: None,
            continuation_keys: continuation_keys_text(&[(3, [9; 32])]),
        };
        assert_eq!(header.continuation_keys, [format!("3:{}", "09".repeat(32))]);
        assert!(replay(&header_line(&header)).is_ok());
        let bad = TraceHeader { continuation_keys: alloc::vec!["3:zz".into()], ..header };
        assert!(matches!(replay(&header_line(&bad)), Err(TraceError::Parse { line: 1, .. })));
    }
}
