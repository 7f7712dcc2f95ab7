//! What `tether status` prints: a `/status` report in, text out. Nothing here
//! reads the network or the clock, so every line is tested as plain text.

use std::collections::VecDeque;
use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::Value;
use tether_core::Status;

/// `/status` as tether sends it (fields it lacks read as empty: an older or newer
/// tether still shows what it has).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Report {
    /// The instance.
    pub tether: Instance,
    /// Every backend, sorted by name.
    pub backends: Vec<Backend>,
}

/// The `tether` member of `/status`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Instance {
    /// tether's version.
    pub version: String,
    /// Since tether started.
    pub uptime_ms: u64,
    /// Client sessions open.
    pub sessions: u64,
    /// Client requests not answered yet.
    pub in_flight: u64,
    /// How tools are presented (`flat`).
    pub mode: Value,
}

/// One backend's row of `/status`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Backend {
    /// Its name.
    pub server: String,
    /// `stdio`, `http` or `sse`.
    pub transport: String,
    /// Lifecycle status (`online`, `restarting`, `error`, …).
    pub status: StatusText,
    /// `closed`, `open` or `half_open`.
    pub breaker: String,
    /// Reconnect attempts since the last success.
    pub reconnect_attempt: u64,
    /// Until the scheduled restart or reconnect.
    pub next_retry_ms: Option<u64>,
    /// `ok` or `degraded`.
    pub health: String,
    /// Crashes within the crash window.
    pub crashes_in_window: u64,
    /// Tools it offers.
    pub tools: u64,
    /// Estimated tokens of their definitions.
    pub estimated_tokens: u64,
    /// Its last error (redacted by tether), possibly several stderr lines.
    pub last_error: Option<String>,
    /// Since its connection came online.
    pub uptime_ms: Option<u64>,
    /// Protocol revision it speaks.
    pub era: String,
    /// Client calls by outcome.
    pub calls: Calls,
    /// Where to log in, while it waits for a person.
    pub login_url: Option<String>,
}

/// Client calls by outcome.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Calls {
    /// Answered with a result.
    pub ok: u64,
    /// Answered with the backend's error.
    pub error: u64,
    /// Not answered: timeout, lost connection, refused.
    pub failed: u64,
}

/// A backend's status as `/status` sent it: the core's [`Status`] when this
/// tether knows the name, the text as sent otherwise (a newer tether's status is
/// still shown, uncoloured).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum StatusText {
    /// A status this tether knows.
    Known(Status),
    /// Any other text.
    Unknown(String),
}

impl Default for StatusText {
    fn default() -> Self {
        StatusText::Unknown(String::new())
    }
}

impl StatusText {
    /// The status, when known.
    pub fn known(&self) -> Option<Status> {
        match self {
            StatusText::Known(status) => Some(*status),
            StatusText::Unknown(_) => None,
        }
    }

    /// The name as sent.
    pub fn as_str(&self) -> &str {
        match self {
            StatusText::Known(status) => status.as_str(),
            StatusText::Unknown(text) => text,
        }
    }
}

impl Report {
    /// Parses a `/status` body; `Err` says why it is not one.
    pub fn parse(body: &str) -> Result<Report, String> {
        let value: Value = serde_json::from_str(body).map_err(|e| format!("not JSON ({e})"))?;
        if !value.get("backends").is_some_and(Value::is_array) {
            return Err("not a tether /status answer (no backends list)".into());
        }
        Report::deserialize(value).map_err(|e| format!("not a tether /status answer ({e})"))
    }

    /// Whether every backend is serving: online, or dormant (idle, started again
    /// on the next call). This is `tether status`'s exit code 0.
    pub fn all_online(&self) -> bool {
        self.backends.iter().all(|b| b.status.known().is_some_and(Status::is_serving))
    }
}

/// How a status cell is coloured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tone {
    Good,
    Waiting,
    Bad,
    Plain,
}

impl Tone {
    fn of_status(status: &StatusText) -> Tone {
        match status.known() {
            Some(Status::Online) => Tone::Good,
            // Dormant serves, but is started again by the next call: shown as waiting.
            Some(s) if s.is_starting() || s == Status::Dormant => Tone::Waiting,
            Some(s) if s.is_down() => Tone::Bad,
            _ => Tone::Plain,
        }
    }

    fn of_breaker(breaker: &str) -> Tone {
        match breaker {
            "open" => Tone::Bad,
            "half_open" => Tone::Waiting,
            _ => Tone::Plain,
        }
    }

    fn of_health(health: &str) -> Tone {
        if health == "degraded" {
            Tone::Waiting
        } else {
            Tone::Plain
        }
    }

    /// `text` wrapped in this tone's ANSI colour.
    fn paint(self, text: &str) -> String {
        let code = match self {
            Tone::Good => "32",
            Tone::Waiting => "33",
            Tone::Bad => "31",
            Tone::Plain => return text.to_string(),
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }

    /// [`Tone::paint`] when colours are on.
    fn paint_if(self, color: bool, text: &str) -> String {
        if color {
            self.paint(text)
        } else {
            text.to_string()
        }
    }
}

/// Where and how the text is shown.
#[derive(Clone, Debug)]
pub struct View {
    /// The instance's URL, for the header.
    pub url: String,
    /// ANSI colours in the status, breaker and health cells.
    pub color: bool,
    /// The terminal's width: the last error is cut to fit it. `None` (not a
    /// terminal): cut at [`UNBOUNDED_ERROR_CHARS`].
    pub width: Option<usize>,
    /// How old the report is: countdowns and uptimes move on by this much.
    pub age_ms: u64,
}

/// The last error's length when the width is not known.
pub const UNBOUNDED_ERROR_CHARS: usize = 200;

/// The last error is never cut shorter than this (the line wraps instead).
const MIN_ERROR_CHARS: usize = 24;

/// Between columns.
const GAP: &str = "  ";

/// The header line and one row per backend, each line ending in `\n`.
pub fn render(report: &Report, view: &View) -> String {
    let t = &report.tether;
    let mut out = String::new();
    // Dormant (idle, started again by the next call) is available, not down.
    let serving = report.backends.iter().filter(|b| b.status.known().is_some_and(Status::is_serving)).count();
    let idle = report.backends.iter().filter(|b| b.status.known() == Some(Status::Dormant)).count();
    let idle = if idle > 0 { format!(" ({idle} idle)") } else { String::new() };
    let _ = writeln!(
        out,
        "tether {} at {}  up {}  sessions {}  in flight {}  mode {}  backends {serving}/{} available{idle}",
        clean(&t.version),
        view.url,
        human_ms(t.uptime_ms.saturating_add(view.age_ms)),
        t.sessions,
        t.in_flight,
        t.mode.as_str().map_or_else(|| t.mode.to_string(), clean),
        report.backends.len(),
    );
    if report.backends.is_empty() {
        out.push_str("no backends configured\n");
        return out;
    }
    let rows: Vec<Row> = report.backends.iter().map(|b| Row::of(b, view.age_ms)).collect();
    let mut widths = HEADERS.map(|(name, _)| name.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(&row.cells) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let before_error: usize = widths.iter().sum::<usize>() + GAP.len() * widths.len();
    let error_chars = view.width.map_or(UNBOUNDED_ERROR_CHARS, |w| w.saturating_sub(before_error).max(MIN_ERROR_CHARS));
    let header: Vec<String> = HEADERS.iter().map(|(name, _)| name.to_string()).collect();
    push_line(&mut out, &header, &[Tone::Plain; COLUMNS], &widths, "last error");
    for row in &rows {
        let tones = {
            let mut tones = [Tone::Plain; COLUMNS];
            if view.color {
                tones[STATUS] = row.status;
                tones[BREAKER] = row.breaker;
                tones[HEALTH] = row.health;
            }
            tones
        };
        push_line(&mut out, &row.cells, &tones, &widths, &truncate(&row.error, error_chars));
    }
    // Logins in full, under the table: the error column cuts long URLs.
    for b in &report.backends {
        if let Some(url) = &b.login_url {
            let name = clean(&b.server);
            let _ = writeln!(out, "log in to {name}: tether auth login {name}, or open {}", clean(url));
        }
    }
    out
}

/// Columns before the last error, with whether they are numbers (right-aligned).
const HEADERS: [(&str, bool); COLUMNS] = [
    ("server", false),
    ("via", false),
    ("status", false),
    ("breaker", false),
    ("retry", false),
    ("health", false),
    ("crashes", true),
    ("tools", true),
    ("tokens", true),
    ("era", false),
    ("ok/err/fail", false),
    ("up", false),
];
const COLUMNS: usize = 12;
const STATUS: usize = 2;
const BREAKER: usize = 3;
const HEALTH: usize = 5;

/// One backend's cells, uncoloured, and the tones they would take.
struct Row {
    cells: Vec<String>,
    error: String,
    status: Tone,
    breaker: Tone,
    health: Tone,
}

impl Row {
    fn of(b: &Backend, age_ms: u64) -> Row {
        let retry = match (b.reconnect_attempt, b.next_retry_ms) {
            (0, None) => "-".to_string(),
            (0, Some(ms)) => format!("in {}", human_ms(ms.saturating_sub(age_ms))),
            (n, None) => format!("#{n}"),
            (n, Some(ms)) => format!("#{n} in {}", human_ms(ms.saturating_sub(age_ms))),
        };
        // Health is that of a backend that runs: none for one that is down.
        let down = b.status.known().is_some_and(Status::is_down);
        let health = if down { "-".to_string() } else { clean(&b.health) };
        let cells = vec![
            clean(&b.server),
            clean(&b.transport),
            clean(b.status.as_str()),
            clean(&b.breaker),
            retry,
            health,
            b.crashes_in_window.to_string(),
            b.tools.to_string(),
            b.estimated_tokens.to_string(),
            clean(&b.era),
            format!("{}/{}/{}", b.calls.ok, b.calls.error, b.calls.failed),
            b.uptime_ms.map_or_else(|| "-".to_string(), |ms| human_ms(ms.saturating_add(age_ms))),
        ];
        Row {
            cells,
            error: b.last_error.as_deref().map_or_else(|| "-".to_string(), one_line),
            status: Tone::of_status(&b.status),
            breaker: Tone::of_breaker(&b.breaker),
            health: if down { Tone::Plain } else { Tone::of_health(&b.health) },
        }
    }
}

/// Appends one padded line (colour outside the padding, so columns stay aligned).
fn push_line(out: &mut String, cells: &[String], tones: &[Tone], widths: &[usize], last: &str) {
    for ((cell, tone), ((_, number), width)) in cells.iter().zip(tones).zip(HEADERS.iter().zip(widths)) {
        let pad = " ".repeat(width - cell.chars().count());
        let painted = tone.paint(cell);
        if *number {
            let _ = write!(out, "{pad}{painted}{GAP}");
        } else {
            let _ = write!(out, "{painted}{pad}{GAP}");
        }
    }
    out.push_str(last);
    out.push('\n');
}

/// A duration as people read it: `2.4s`, `42s`, `5m03s`, `2h05m`, `3d04h`.
pub fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    match ms {
        0..=9_999 => format!("{}.{}s", s, ms % 1000 / 100),
        10_000..=59_999 => format!("{s}s"),
        60_000..=3_599_999 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..=86_399_999 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Text from the network made safe for one terminal cell: control characters
/// (escape sequences a backend printed: OSC 52 writing the clipboard, screen
/// clears, carriage returns over the line) and bidirectional overrides shown
/// escaped, not obeyed.
pub(crate) fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_default()),
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out
}

/// Several lines (a stderr tail) as one, ` | ` between them.
fn one_line(text: &str) -> String {
    let lines: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(clean).collect();
    if lines.is_empty() {
        "-".to_string()
    } else {
        lines.join(" | ")
    }
}

/// `text` cut to `max` characters, `…` marking the cut.
fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The screen of `tether status --watch`: the table (or why there is none), the
/// state of the event stream, and the latest events.
pub fn render_watch(
    report: Option<&Report>,
    view: &View,
    problem: Option<&str>,
    link: &str,
    events: &VecDeque<Value>,
) -> String {
    let mut out = match report {
        Some(report) => render(report, view),
        None => String::new(),
    };
    if let Some(problem) = problem {
        let stale = match report {
            Some(_) => format!(" (the table is {} old)", human_ms(view.age_ms)),
            None => String::new(),
        };
        let _ = writeln!(out, "{}", Tone::Bad.paint_if(view.color, &format!("tether status: {problem}{stale}")));
    }
    let _ = writeln!(out, "\nevents: {link}");
    let now_ms = report.map(|r| r.tether.uptime_ms.saturating_add(view.age_ms));
    let width = view.width.unwrap_or(UNBOUNDED_ERROR_CHARS);
    for event in events.iter().rev() {
        let _ = writeln!(out, "{}", truncate(&event_line(event, now_ms), width));
    }
    out
}

/// One event of `/events` as a line: `  #17  3.2s ago  fs  online → error: exited with code 1`.
/// `now_ms` is tether's uptime now (events count from its start), if known.
pub fn event_line(event: &Value, now_ms: Option<u64>) -> String {
    let text = |key: &str| event.get(key).map_or_else(String::new, |v| v.as_str().map_or_else(|| v.to_string(), clean));
    let number = |key: &str| event.get(key).and_then(Value::as_u64).unwrap_or(0);
    let seq = event.get("seq").map_or_else(|| "?".to_string(), |s| s.to_string());
    let when = match (now_ms, event.get("at_ms").and_then(Value::as_u64)) {
        (Some(now), Some(at)) => format!("{} ago", human_ms(now.saturating_sub(at))),
        (None, Some(at)) => format!("at {}", human_ms(at)),
        _ => String::new(),
    };
    let name = text("event");
    let what = match name.as_str() {
        "server_status_changed" => match event.get("message").and_then(Value::as_str) {
            Some(message) => format!("{} → {}: {}", text("from"), text("to"), one_line(message)),
            None => format!("{} → {}", text("from"), text("to")),
        },
        "server_disconnected" if event["intentional"] == true => "disconnected (on purpose)".to_string(),
        "server_disconnected" => "connection lost".to_string(),
        "server_reconnecting" => {
            format!("reconnect #{} in {}", number("attempt"), human_ms(number("next_retry_ms")))
        }
        "server_reconnected" => format!("reconnected after {} attempt(s)", number("attempts_taken")),
        "server_health_degraded" => {
            format!("health degraded ({} failures): {}", number("consecutive_failures"), one_line(&text("last_error")))
        }
        "server_health_restored" => "health restored".to_string(),
        "server_permanently_failed" => {
            format!("permanently failed: {} crashes in {}", number("crashes"), human_ms(number("window_ms")))
        }
        "circuit_opened" => format!("breaker open for {}", human_ms(number("cooldown_ms"))),
        "circuit_closed" => "breaker closed".to_string(),
        "tools_discovered" => format!("{} tools (~{} tokens)", number("count"), number("estimated_tokens")),
        "protocol_violation" => format!("protocol violation: {}", one_line(&text("detail"))),
        "name_conflict" => format!("name conflict: {}", text("name")),
        _ => {
            let mut rest = event.as_object().cloned().unwrap_or_default();
            for key in ["seq", "at_ms", "event", "server"] {
                rest.remove(key);
            }
            format!("{name} {}", clean(&Value::Object(rest).to_string()))
        }
    };
    format!("  #{seq}  {when}  {}  {what}", text("server"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn report() -> Report {
        Report::parse(
            &json!({
                "tether": {"version": "0.1.0", "uptime_ms": 3_723_000, "sessions": 2, "in_flight": 1, "mode": "flat"},
                "backends": [
                    {"server": "fs", "transport": "stdio", "status": "online", "breaker": "closed",
                     "reconnect_attempt": 0, "next_retry_ms": null, "health": "ok", "crashes_in_window": 0,
                     "tools": 3, "estimated_tokens": 120, "last_error": null, "uptime_ms": 5000,
                     "era": "2025-11-25", "calls": {"ok": 10, "error": 1, "failed": 0}, "latency_ms": [12, 15]},
                    {"server": "leaky", "transport": "stdio", "status": "restarting", "breaker": "half_open",
                     "reconnect_attempt": 2, "next_retry_ms": 2400, "health": "degraded", "crashes_in_window": 2,
                     "tools": 0, "estimated_tokens": 0,
                     "last_error": "exited with code 1\nfatal: API_KEY=[redacted] was rejected\n\u{1b}[2Jgone",
                     "uptime_ms": null, "era": "2025-11-25", "calls": {"ok": 0, "error": 0, "failed": 4}},
                    {"server": "remote", "transport": "http", "status": "error", "breaker": "open",
                     "reconnect_attempt": 7, "next_retry_ms": null, "health": "ok", "crashes_in_window": 0,
                     "tools": 12, "estimated_tokens": 4321, "last_error": "connection refused",
                     "uptime_ms": null, "era": "2026-07-28", "calls": {"ok": 0, "error": 0, "failed": 0}},
                    {"server": "linear", "transport": "http", "status": "requires_reauth", "breaker": "closed",
                     "reconnect_attempt": 0, "next_retry_ms": null, "health": "ok", "crashes_in_window": 0,
                     "tools": 9, "estimated_tokens": 900,
                     "last_error": "refresh token revoked: run `tether auth login linear` or open https://auth.example/authorize?client_id=tether&state=abc",
                     "uptime_ms": null, "era": "2025-11-25", "calls": {"ok": 0, "error": 0, "failed": 1},
                     "login_url": "https://auth.example/authorize?client_id=tether&state=abc"}
                ]
            })
            .to_string(),
        )
        .unwrap()
    }

    fn view() -> View {
        View { url: "http://127.0.0.1:8080".into(), color: false, width: None, age_ms: 0 }
    }

    #[test]
    fn a_row_per_backend_with_every_column() {
        insta::assert_snapshot!("table", render(&report(), &view()));
    }

    /// `text` without ANSI colour sequences.
    fn plain(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("\x1b[") {
            out.push_str(&rest[..at]);
            rest = &rest[at..];
            rest = &rest[rest.find('m').unwrap() + 1..];
        }
        out + rest
    }

    #[test]
    fn colour_marks_the_status_breaker_and_health_cells_without_moving_columns() {
        let coloured = render(&report(), &View { color: true, ..view() });
        assert!(coloured.contains("\x1b[32monline\x1b[0m      "), "{coloured:?}");
        assert!(coloured.contains("\x1b[33mrestarting\x1b[0m"), "{coloured:?}");
        assert!(coloured.contains("\x1b[31merror\x1b[0m"), "{coloured:?}");
        assert!(coloured.contains("\x1b[31mopen\x1b[0m"), "{coloured:?}");
        assert!(coloured.contains("\x1b[33mdegraded\x1b[0m"), "{coloured:?}");
        assert!(!coloured.contains("\x1b[2J"), "a backend's escape sequence is shown, not obeyed");
        assert_eq!(plain(&coloured), render(&report(), &view()));
    }

    #[test]
    fn the_last_error_is_cut_to_the_terminal_width() {
        let text = render(&report(), &View { width: Some(150), ..view() });
        let leaky = text.lines().find(|l| l.starts_with("leaky")).unwrap();
        assert_eq!(leaky.chars().count(), 150, "{leaky}");
        assert!(leaky.ends_with('…'), "{leaky}");
        let narrow = render(&report(), &View { width: Some(40), ..view() });
        let leaky = narrow.lines().find(|l| l.starts_with("leaky")).unwrap();
        assert!(leaky.ends_with("  exited with code 1 | fa…"), "never shorter than 24 characters: {leaky}");
    }

    #[test]
    fn an_older_report_counts_the_retry_down_and_the_uptimes_up() {
        let text = render(&report(), &View { age_ms: 1000, ..view() });
        assert!(text.contains("  #2 in 1.4s  "), "{text}");
        assert!(text.contains("  6.0s  "), "{text}");
        assert!(text.contains(" up 1h02m "), "{text}");
        let overdue = render(&report(), &View { age_ms: 60_000, ..view() });
        assert!(overdue.contains("  #2 in 0.0s  "), "{overdue}");
    }

    #[test]
    fn durations_read_as_people_write_them() {
        let cases = [
            (0, "0.0s"),
            (2_449, "2.4s"),
            (9_999, "9.9s"),
            (42_000, "42s"),
            (303_000, "5m03s"),
            (7_500_000, "2h05m"),
            (273_600_000, "3d04h"),
        ];
        for (ms, text) in cases {
            assert_eq!(human_ms(ms), text, "{ms}");
        }
    }

    #[test]
    fn exit_code_zero_needs_every_backend_online_or_dormant() {
        assert!(!report().all_online());
        let one = |status: &str| {
            Report::parse(&json!({"tether": {}, "backends": [{"server": "a", "status": status}]}).to_string()).unwrap()
        };
        assert!(one("online").all_online());
        assert!(one("dormant").all_online());
        for status in ["provisioning", "connecting", "restarting", "error", "offline", "permanently_failed"] {
            assert!(!one(status).all_online(), "{status}");
        }
        assert!(Report::parse(r#"{"tether":{},"backends":[]}"#).unwrap().all_online());
    }

    #[test]
    fn a_status_this_tether_does_not_know_is_shown_as_sent_and_uncoloured() {
        let report = Report::parse(r#"{"tether":{},"backends":[{"server":"a","status":"hibernating"}]}"#).unwrap();
        let status = &report.backends[0].status;
        assert_eq!((status.known(), status.as_str()), (None, "hibernating"));
        assert_eq!(Tone::of_status(status), Tone::Plain);
        assert!(!report.all_online());
        let known = Report::parse(r#"{"tether":{},"backends":[{"server":"a","status":"requires_reauth"}]}"#).unwrap();
        assert_eq!(known.backends[0].status.known(), Some(Status::RequiresReauth));
        assert_eq!(Tone::of_status(&known.backends[0].status), Tone::Bad);
    }

    #[test]
    fn what_is_not_a_status_answer_says_so() {
        assert!(Report::parse("<html>").unwrap_err().starts_with("not JSON"));
        assert!(Report::parse(r#"{"status":"ok"}"#).unwrap_err().contains("no backends list"));
        let empty = Report::parse(r#"{"tether":{"version":"9"},"backends":[]}"#).unwrap();
        assert_eq!(render(&empty, &view()).lines().nth(1), Some("no backends configured"));
    }

    #[test]
    fn events_read_as_one_line_each() {
        let now = Some(20_000);
        let line = |event: Value| event_line(&event, now);
        let cases = [
            (
                json!({"seq": 3, "at_ms": 17_600, "event": "server_status_changed", "server": "fs", "from": "online", "to": "error", "message": "exited\nwith code 1"}),
                "  #3  2.4s ago  fs  online → error: exited | with code 1",
            ),
            (
                json!({"seq": 4, "at_ms": 18_000, "event": "server_reconnecting", "server": "remote", "attempt": 2, "next_retry_ms": 1500}),
                "  #4  2.0s ago  remote  reconnect #2 in 1.5s",
            ),
            (
                json!({"seq": 5, "at_ms": 19_000, "event": "server_permanently_failed", "server": "leaky", "crashes": 5, "window_ms": 60_000}),
                "  #5  1.0s ago  leaky  permanently failed: 5 crashes in 1m00s",
            ),
            (
                json!({"seq": 6, "at_ms": 20_000, "event": "tools_discovered", "server": "fs", "count": 3, "estimated_tokens": 120}),
                "  #6  0.0s ago  fs  3 tools (~120 tokens)",
            ),
            (
                json!({"seq": 7, "at_ms": 20_000, "event": "server_disconnected", "server": "fs", "intentional": false}),
                "  #7  0.0s ago  fs  connection lost",
            ),
            (
                json!({"seq": 8, "at_ms": 20_000, "event": "something_new", "server": "fs", "n": 1}),
                "  #8  0.0s ago  fs  something_new {\"n\":1}",
            ),
        ];
        for (event, text) in cases {
            assert_eq!(line(event), text);
        }
        assert_eq!(
            event_line(&json!({"seq": 1, "at_ms": 1500, "event": "circuit_closed", "server": "fs"}), None),
            "  #1  at 1.5s  fs  breaker closed"
        );
    }

    #[test]
    fn the_watch_screen_shows_the_table_the_stream_and_the_latest_events_first() {
        let events: VecDeque<Value> = [
            json!({"seq": 1, "at_ms": 3_720_000, "event": "circuit_opened", "server": "remote", "cooldown_ms": 30_000}),
            json!({"seq": 2, "at_ms": 3_722_000, "event": "server_status_changed", "server": "leaky", "from": "online", "to": "restarting"}),
        ]
        .into();
        let screen = render_watch(Some(&report()), &view(), None, "live", &events);
        insta::assert_snapshot!("watch", screen);
        let lost = render_watch(
            None,
            &view(),
            Some("http://127.0.0.1:8080/status: cannot reach tether"),
            "connecting",
            &VecDeque::new(),
        );
        assert_eq!(lost, "tether status: http://127.0.0.1:8080/status: cannot reach tether\n\nevents: connecting\n");
        let stale = render_watch(Some(&report()), &View { age_ms: 3000, ..view() }, Some("gone"), "lost", &events);
        assert!(stale.contains("\ntether status: gone (the table is 3.0s old)\n\nevents: lost\n"), "{stale}");
    }
}
