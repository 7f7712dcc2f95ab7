//! The last lines a stdio backend wrote to stderr, and the one that says most
//! about what went wrong (a typed error over a line naming trouble over any
//! other line; stack frames never), for crash messages and status.

use alloc::collections::VecDeque;
use alloc::string::String;

/// Lines of stderr kept per backend for crash messages.
pub(super) const STDERR_TAIL: usize = 8;

/// Longest line kept, in bytes (cut at a character boundary).
const LINE_BYTES: usize = 512;

/// A backend's last stderr lines and its most telling one.
#[derive(Clone, Debug, Default)]
pub(super) struct StderrTail {
    lines: VecDeque<String>,
    /// The most telling line since the connection began, with its score.
    telling: Option<(u8, String)>,
}

impl StderrTail {
    /// Keeps `line` (cut to 512 bytes), the oldest going past the bound;
    /// returns it as kept.
    pub(super) fn push(&mut self, mut line: String) -> String {
        if self.lines.len() == STDERR_TAIL {
            self.lines.pop_front();
        }
        if line.len() > LINE_BYTES {
            let mut end = LINE_BYTES;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
        }
        self.lines.push_back(line.clone());
        let score = telling(&line);
        if self.telling.as_ref().map_or(score > 0, |(best, _)| outranks(score, *best)) {
            self.telling = Some((score, line.clone()));
        }
        line
    }

    /// The line that says most about what went wrong, if any said anything.
    pub(super) fn telling(&self) -> Option<&str> {
        self.telling.as_ref().map(|(_, line)| line.as_str())
    }

    /// Lines kept.
    pub(super) fn len(&self) -> usize {
        self.lines.len()
    }

    /// A new connection: what the last one wrote no longer tells anything.
    pub(super) fn clear(&mut self) {
        self.lines.clear();
        self.telling = None;
    }
}

/// Whether a line scoring `score` replaces the one kept, scoring `best`: a
/// higher score does; of trouble, the first stays (a cause comes before its
/// consequences); of chatter, the latest.
fn outranks(score: u8, best: u8) -> bool {
    score > best || (score == 1 && best == 1)
}

/// How much a stderr line says about a failure (the line of a process's stderr
/// that [`outranks`] the others is the one its failure shows): 0 nothing (blank, a stack frame,
/// punctuation), 1 an ordinary line, 2 one that mentions trouble, 3 an error
/// message (`Error: ...`, `ModuleNotFoundError: ...`, `fatal: ...`, a panic).
fn telling(line: &str) -> u8 {
    let t = line.trim();
    let frame = t.starts_with("at ") || t.starts_with("File \"") || t.starts_with("^");
    if frame || !t.chars().any(char::is_alphanumeric) {
        return 0;
    }
    let lower = t.to_ascii_lowercase();
    let head = lower.split(':').next().unwrap_or("");
    let typed = t.contains(':')
        && !head.contains(' ')
        && (head.ends_with("error") || head.ends_with("exception") || matches!(head, "fatal" | "panic" | "critical"));
    if typed || lower.contains("panicked at") {
        return 3;
    }
    #[rustfmt::skip]
    const TROUBLE: [&str; 16] = [
        "error", "fatal", "fail", "cannot", "can't", "unable", "denied", "refused", "not found", "no such", "panic",
        "exception", "out of memory", "timed out", "killed", "crash",
    ];
    if TROUBLE.iter().any(|w| lower.contains(w)) {
        return 2;
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn the_tail_is_bounded_and_long_lines_are_cut_at_a_character() {
        let mut tail = StderrTail::default();
        for n in 0..20 {
            tail.push(n.to_string());
        }
        assert_eq!(tail.len(), STDERR_TAIL);
        let long = "é".repeat(400);
        assert_eq!(tail.push(long).len(), 512, "256 two-byte characters");
        tail.clear();
        assert_eq!((tail.len(), tail.telling()), (0, None));
    }

    #[test]
    fn a_typed_error_tells_more_than_trouble_and_frames_tell_nothing() {
        let mut tail = StderrTail::default();
        tail.push("starting server on port 3000".into());
        assert_eq!(tail.telling(), Some("starting server on port 3000"));
        tail.push("could not connect: connection refused".into());
        tail.push("ValueError: API_KEY is not set".into());
        tail.push("  File \"server.py\", line 3, in <module>".into());
        tail.push("warning: retrying".into());
        assert_eq!(tail.telling(), Some("ValueError: API_KEY is not set"));
    }

    /// The line a failure would show, as the backend picks it while lines come.
    fn pick(lines: &[&'static str]) -> Option<String> {
        let mut tail = StderrTail::default();
        for line in lines {
            tail.push((*line).into());
        }
        tail.telling().map(|line| line.trim().into())
    }

    #[test]
    fn the_error_message_wins_over_chatter_and_stack_frames() {
        // Node: the message, then a stack, then chatter.
        let node = [
            "Starting default (STDIO) server...",
            "node:internal/modules/cjs/loader:1228",
            "  throw err;",
            "  ^",
            "Error: Cannot find module '/nonexistent/index.js'",
            "    at Module._resolveFilename (node:internal/modules/cjs/loader:1225:15)",
            "  code: 'MODULE_NOT_FOUND',",
            "Node.js v20.20.2",
        ];
        assert_eq!(pick(&node).as_deref(), Some("Error: Cannot find module '/nonexistent/index.js'"));
        // Python: the last line of a traceback.
        let python = [
            "Traceback (most recent call last):",
            "  File \"/srv/server.py\", line 1, in <module>",
            "ModuleNotFoundError: No module named 'mcp'",
        ];
        assert_eq!(pick(&python).as_deref(), Some("ModuleNotFoundError: No module named 'mcp'"));
        assert_eq!(
            pick(&["loading index", "thread 'main' panicked at src/main.rs:3:5:", "index is corrupt"]).as_deref(),
            Some("thread 'main' panicked at src/main.rs:3:5:")
        );
        assert_eq!(
            pick(&["listening on stdio", "could not open /data: permission denied"]).as_deref(),
            Some("could not open /data: permission denied")
        );
        assert_eq!(pick(&["one", "two"]).as_deref(), Some("two"), "no trouble: the last line");
        assert_eq!(
            pick(&["error: cannot open /x", "fatal: giving up"]).as_deref(),
            Some("error: cannot open /x"),
            "the cause"
        );
        assert_eq!(pick(&["", "  "]).as_deref(), None);
    }
}
