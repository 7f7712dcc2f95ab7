//! What happened to one backend lately, for an operator asking "why" (`tether
//! logs NAME`): its stderr lines and its events, oldest first, across restarts
//! (the crashed process's last words are the ones that matter), bounded in
//! entries and in bytes so a chatty backend cannot grow it.

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

use crate::time::Instant;

/// Entries kept per backend.
pub(crate) const RECENT_ENTRIES: usize = 200;
/// Bytes of text kept per backend.
pub(crate) const RECENT_BYTES: usize = 32 * 1024;

/// Where a line of a backend's recent log came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogSource {
    /// The backend process wrote it to stderr (already redacted, at most 512 bytes).
    Stderr,
    /// tether emitted this event about the backend.
    Event,
}

/// One line of a backend's recent log.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LogLine {
    /// When, on the engine's clock.
    pub at: Instant,
    /// Where it came from.
    pub source: LogSource,
    /// The line, redacted.
    pub text: String,
}

/// The bounded log of one backend.
#[derive(Clone, Debug, Default)]
pub(super) struct Recent {
    lines: VecDeque<LogLine>,
    bytes: usize,
}

impl Recent {
    /// Adds a line, dropping the oldest ones beyond the bounds.
    pub(super) fn push(&mut self, at: Instant, source: LogSource, text: String) {
        self.bytes += text.len();
        self.lines.push_back(LogLine { at, source, text });
        while self.lines.len() > RECENT_ENTRIES || (self.bytes > RECENT_BYTES && self.lines.len() > 1) {
            if let Some(old) = self.lines.pop_front() {
                self.bytes -= old.text.len();
            }
        }
    }

    /// The last `n` lines, oldest first.
    pub(super) fn last(&self, n: usize) -> Vec<LogLine> {
        self.lines.iter().skip(self.lines.len().saturating_sub(n)).cloned().collect()
    }

    /// Whether the bounds hold.
    pub(super) fn check_invariants(&self) -> Result<(), String> {
        let bytes: usize = self.lines.iter().map(|l| l.text.len()).sum();
        if bytes != self.bytes || self.lines.len() > RECENT_ENTRIES || (bytes > RECENT_BYTES && self.lines.len() > 1) {
            return Err(alloc::format!("recent log over its bounds: {} lines, {bytes} bytes", self.lines.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn bounded_in_lines_and_bytes_oldest_dropped_first() {
        let mut r = Recent::default();
        for i in 0..(RECENT_ENTRIES + 10) {
            r.push(Instant::ZERO, LogSource::Stderr, i.to_string());
        }
        let kept = r.last(usize::MAX);
        assert_eq!(kept.len(), RECENT_ENTRIES);
        assert_eq!(kept[0].text, "10");
        r.push(Instant::ZERO, LogSource::Event, "x".repeat(RECENT_BYTES));
        assert_eq!(r.last(usize::MAX).len(), 1, "a line as large as the bound pushes out the rest");
        r.check_invariants().unwrap();
        assert_eq!(r.last(0).len(), 0);
    }
}
