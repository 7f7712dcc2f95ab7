//! W3C Trace Context as MCP carries it: `traceparent`, `tracestate` and
//! `baggage` in a request's `params._meta` (the 2026-07-28 revision's SEP-414;
//! over HTTP the `traceparent` header says the same). The engine reads a
//! client request's context, makes the parent of its own spans from it, and
//! gives each attempt toward a backend a child context of its own.
//!
//! Everything here is bounded and refuses rather than repairs: a malformed
//! `traceparent` is no context at all (a new trace begins, as the W3C
//! specification asks), a `tracestate` beyond its limits is dropped whole, and
//! `baggage` beyond its limits is not passed on. Ids are bytes the caller
//! supplies (from the engine's seeded generator), so replays make the same spans.

use alloc::string::String;
use core::fmt::Write as _;
use serde_json::{Map, Value};

/// The `_meta` keys (and HTTP header names) of the three fields.
pub mod keys {
    /// The parent span and sampling decision.
    pub const TRACEPARENT: &str = "traceparent";
    /// Vendors' own state, passed on unchanged.
    pub const TRACESTATE: &str = "tracestate";
    /// Application key-value pairs, passed on unchanged.
    pub const BAGGAGE: &str = "baggage";
}

/// The longest `tracestate` passed on (W3C: at least 512 characters must be
/// propagated; beyond that a vendor may drop it).
pub const MAX_TRACESTATE_CHARS: usize = 512;
/// The most `tracestate` members (W3C: 32).
pub const MAX_TRACESTATE_MEMBERS: usize = 32;
/// The longest `baggage` passed on (W3C Baggage: 8192 bytes).
pub const MAX_BAGGAGE_BYTES: usize = 8192;
/// The most `baggage` members (W3C Baggage: 64).
pub const MAX_BAGGAGE_MEMBERS: usize = 64;

/// A parsed `traceparent`: the trace, the caller's span, and the flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace's id (never all zeros).
    pub trace_id: [u8; 16],
    /// The id of the span that is the parent (never all zeros).
    pub parent_id: [u8; 8],
    /// Trace flags; bit 0 is `sampled`.
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value. Version `00` must be exactly that long;
    /// a later version is read by its first four fields, as the specification
    /// asks of a reader that does not know it; version `ff` is invalid.
    /// Uppercase hex, zero ids and any other shape are refused.
    pub fn parse(text: &str) -> Option<TraceParent> {
        let text = text.trim_matches(|c| c == ' ' || c == '\t');
        let bytes = text.as_bytes();
        if bytes.len() < 55 || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let version = hex_byte(&bytes[0..2])?;
        match version {
            0xff => return None,
            0 if bytes.len() != 55 => return None,
            0 => {}
            // A later version may carry more, after a dash.
            _ if bytes.len() > 55 && bytes[55] != b'-' => return None,
            _ => {}
        }
        let mut trace_id = [0u8; 16];
        for (i, b) in trace_id.iter_mut().enumerate() {
            *b = hex_byte(&bytes[3 + 2 * i..5 + 2 * i])?;
        }
        let mut parent_id = [0u8; 8];
        for (i, b) in parent_id.iter_mut().enumerate() {
            *b = hex_byte(&bytes[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&bytes[53..55])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent { trace_id, parent_id, flags })
    }

    /// Whether the caller sampled the trace.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The same trace and flags, with `span_id` as the parent: what a span of
    /// this trace hands to what it calls. A zero `span_id` (which W3C forbids)
    /// is made non-zero.
    pub fn child(&self, span_id: [u8; 8]) -> TraceParent {
        let span_id = if span_id == [0; 8] { [0, 0, 0, 0, 0, 0, 0, 1] } else { span_id };
        TraceParent { trace_id: self.trace_id, parent_id: span_id, flags: self.flags }
    }

    /// A new trace (no caller context): its id and the first span's, sampled
    /// or not. Zero ids are made non-zero.
    pub fn root(trace_id: [u8; 16], span_id: [u8; 8], sampled: bool) -> TraceParent {
        let trace_id = if trace_id == [0; 16] { [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1] } else { trace_id };
        TraceParent { trace_id, parent_id: [0; 8], flags: u8::from(sampled) }.child(span_id)
    }

    /// The value as sent: version `00`, lowercase hex.
    pub fn header(&self) -> String {
        let mut out = String::with_capacity(55);
        out.push_str("00-");
        push_hex(&mut out, &self.trace_id);
        out.push('-');
        push_hex(&mut out, &self.parent_id);
        let _ = write!(out, "-{:02x}", self.flags);
        out
    }
}

/// A request's whole context: its parent, and the vendors' and application's
/// strings carried beside it (checked against their limits, else dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    /// The parent span.
    pub parent: TraceParent,
    /// `tracestate`, if present and within its limits.
    pub state: Option<String>,
    /// `baggage`, if present and within its limits.
    pub baggage: Option<String>,
}

impl TraceContext {
    /// The context in a request's `params._meta`, if its `traceparent` is valid.
    pub fn from_meta(meta: &Map<String, Value>) -> Option<TraceContext> {
        let parent = TraceParent::parse(meta.get(keys::TRACEPARENT)?.as_str()?)?;
        let state = meta.get(keys::TRACESTATE).and_then(Value::as_str).filter(|s| tracestate_ok(s));
        let baggage = meta.get(keys::BAGGAGE).and_then(Value::as_str).filter(|s| baggage_ok(s));
        Some(TraceContext { parent, state: state.map(String::from), baggage: baggage.map(String::from) })
    }

    /// This context with `span_id` as the parent (what an attempt toward a
    /// backend carries).
    pub fn child(&self, span_id: [u8; 8]) -> TraceContext {
        TraceContext { parent: self.parent.child(span_id), ..self.clone() }
    }

    /// Writes the three fields into `meta`, replacing what was there (an
    /// absent `tracestate` or `baggage` is removed: it was not passed on).
    pub fn write_meta(&self, meta: &mut Map<String, Value>) {
        meta.insert(keys::TRACEPARENT.into(), Value::String(self.parent.header()));
        for (key, value) in [(keys::TRACESTATE, &self.state), (keys::BAGGAGE, &self.baggage)] {
            match value {
                Some(v) => meta.insert(key.into(), Value::String(v.clone())),
                None => meta.remove(key),
            };
        }
    }
}

/// Whether a `tracestate` is within the limits and made of `key=value`
/// members (empty members, from `,,`, are allowed and not counted).
fn tracestate_ok(text: &str) -> bool {
    if text.len() > MAX_TRACESTATE_CHARS || !text.is_ascii() {
        return false;
    }
    let members: alloc::vec::Vec<&str> = text.split(',').map(str::trim).filter(|m| !m.is_empty()).collect();
    members.len() <= MAX_TRACESTATE_MEMBERS
        && members.iter().all(|m| {
            m.split_once('=').is_some_and(|(k, v)| {
                !k.is_empty()
                    && k.len() <= 256
                    && k.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/@".contains(&b))
                    && !v.is_empty()
                    && v.len() <= 256
                    && v.bytes().all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
            })
        })
}

/// Whether a `baggage` is within the limits (its members are passed on as
/// they are: tether neither reads nor changes them).
fn baggage_ok(text: &str) -> bool {
    text.len() <= MAX_BAGGAGE_BYTES
        && text.split(',').filter(|m| !m.trim().is_empty()).count() <= MAX_BAGGAGE_MEMBERS
        && text.bytes().all(|b| (0x20..=0x7e).contains(&b) || b == b'\t')
}

/// Two lowercase hex digits.
fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;
    use serde_json::json;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specifications_examples_parse_and_print_back() {
        let p = TraceParent::parse(VALID).unwrap();
        assert!(p.sampled());
        assert_eq!(p.header(), VALID);
        assert_eq!(p.parent_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        let unsampled = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.sampled());
        // A later version is read by its first fields; what follows is ignored.
        let later = TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes").unwrap();
        assert_eq!(later.header(), VALID, "passed on as the version this build knows");
    }

    #[test]
    fn malformed_values_are_no_context() {
        let bad = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-0",
        ];
        for text in bad {
            assert_eq!(TraceParent::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_child_keeps_the_trace_and_flags_and_never_has_a_zero_id() {
        let p = TraceParent::parse(VALID).unwrap();
        let c = p.child([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(c.header(), "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01");
        assert_ne!(p.child([0; 8]).parent_id, [0; 8]);
        let root = TraceParent::root([0; 16], [0; 8], false);
        assert!(TraceParent::parse(&root.header()).is_some(), "{}", root.header());
        assert!(!root.sampled());
    }

    #[test]
    fn meta_round_trips_and_oversized_companions_are_dropped() {
        let meta = json!({"traceparent": VALID, "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", "baggage": "userId=alice", "other": 1});
        let ctx = TraceContext::from_meta(meta.as_object().unwrap()).unwrap();
        assert_eq!(ctx.state.as_deref(), Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"));
        let child = ctx.child([9; 8]);
        let mut out = meta.as_object().unwrap().clone();
        child.write_meta(&mut out);
        assert_eq!(out["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-0909090909090909-01");
        assert_eq!(
            (&out["tracestate"], &out["baggage"], &out["other"]),
            (&meta["tracestate"], &meta["baggage"], &json!(1))
        );

        let long_state = (0..40).map(|i| format!("k{i}=v")).collect::<alloc::vec::Vec<_>>().join(",");
        let huge_baggage = "k=".to_string() + &"v".repeat(MAX_BAGGAGE_BYTES);
        let meta = json!({"traceparent": VALID, "tracestate": long_state, "baggage": huge_baggage});
        let ctx = TraceContext::from_meta(meta.as_object().unwrap()).unwrap();
        assert_eq!((&ctx.state, &ctx.baggage), (&None, &None), "beyond their limits: not passed on");
        let mut out = meta.as_object().unwrap().clone();
        ctx.child([1; 8]).write_meta(&mut out);
        assert!(!out.contains_key("tracestate") && !out.contains_key("baggage"));
        for broken in [json!({"traceparent": "nonsense"}), json!({"traceparent": 7}), json!({})] {
            assert_eq!(TraceContext::from_meta(broken.as_object().unwrap()), None);
        }
        assert!(!tracestate_ok("UPPER=1") && !tracestate_ok("a=b=c") && tracestate_ok("a=1,,b=2"));
    }

    #[test]
    fn any_context_printed_parses_back_and_no_input_panics() {
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..2000 {
            let mut trace_id = [0u8; 16];
            let mut span_id = [0u8; 8];
            trace_id.iter_mut().chain(span_id.iter_mut()).for_each(|b| *b = rng.next_u64() as u8);
            let p = TraceParent::root(trace_id, span_id, rng.next_u64() & 1 == 1);
            assert_eq!(TraceParent::parse(&p.header()), Some(p));
            // Mangled: one byte replaced by anything printable.
            let mut text = p.header().into_bytes();
            let at = (rng.next_u64() % text.len() as u64) as usize;
            text[at] = 0x20 + (rng.next_u64() % 95) as u8;
            let _ = TraceParent::parse(core::str::from_utf8(&text).unwrap());
        }
    }
}
