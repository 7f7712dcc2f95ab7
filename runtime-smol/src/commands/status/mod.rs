//! `tether status`: reads a running tether's `/status` and prints its backends as
//! a table; with `--watch`, follows `/events` and redraws on every event and every
//! second. What is printed is [`table`]'s, the stream format [`sse`]'s; this file
//! is the network and the redraw loop.

pub mod local;
pub mod sse;
pub mod table;

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

use self::sse::{SseEvent, SseParser};
use self::table::{Report, View};
use crate::cli::{ColorWhen, StatusArgs};

/// Every redraw of `--watch` on a terminal (next-retry countdowns move).
const TICK: Duration = Duration::from_secs(1);
/// Events shown under the table.
const RECENT_EVENTS: usize = 5;
/// The first wait before following `/events` again, doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Events closer together than this are one burst: one fetch, one redraw.
const BURST_GAP: Duration = Duration::from_millis(50);
const BURST_MAX: Duration = Duration::from_millis(300);

/// Exit codes: every backend online; one is not; tether not reached or refused us.
const ALL_ONLINE: u8 = 0;
const NOT_ALL_ONLINE: u8 = 1;
const UNREACHABLE: u8 = 2;

/// Runs `tether status`: over HTTP with `--url`, else over the control channel
/// of every tether serving `config`.
pub fn run(args: &StatusArgs, config: Option<&std::path::Path>) -> ExitCode {
    let Some(url) = &args.url else { return local::run(args, config) };
    let base = match base_url(url) {
        Ok(base) => base,
        Err(e) => return fail(&e),
    };
    let instance = Instance::new(base, args.token.clone());
    let terminal = std::io::stdout().is_terminal();
    let color = use_color(args.color, terminal, std::env::var_os("NO_COLOR"), std::env::var_os("CLICOLOR_FORCE"));
    let view = View { url: instance.base.clone(), color, width: None, age_ms: 0 };
    if args.watch {
        return watch(&instance, view, terminal);
    }
    let (body, report) = match instance.status() {
        Ok(answer) => answer,
        Err(e) => return fail(&e.to_string()),
    };
    let text = if args.json {
        format!("{}\n", body.trim_end())
    } else {
        table::render(&report, &View { width: terminal.then(terminal_width).flatten(), ..view })
    };
    // A reader that went away (`| head`) is not an error of ours.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
    ExitCode::from(if report.all_online() { ALL_ONLINE } else { NOT_ALL_ONLINE })
}

fn fail(message: &str) -> ExitCode {
    eprintln!("tether status: {message}");
    ExitCode::from(UNREACHABLE)
}

/// The base URL of an instance from what a user may paste: a base URL, its
/// `/mcp` or `/status` (or another endpoint's) URL, `host:port`, or a port.
pub fn base_url(input: &str) -> Result<String, String> {
    let input = input.trim();
    let url = if !input.is_empty() && input.bytes().all(|b| b.is_ascii_digit()) {
        format!("http://127.0.0.1:{input}")
    } else if input.contains("://") {
        input.to_string()
    } else {
        format!("http://{input}")
    };
    let scheme = url.split("://").next().unwrap_or("").to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!("{input}: not an http:// or https:// URL"));
    }
    let mut base = url.split(['?', '#']).next().unwrap_or(&url).trim_end_matches('/');
    for endpoint in ["/mcp", "/status", "/events", "/metrics", "/healthz", "/readyz"] {
        if let Some(rest) = base.strip_suffix(endpoint) {
            base = rest.trim_end_matches('/');
            break;
        }
    }
    if base.len() <= scheme.len() + "://".len() {
        return Err(format!("{input}: no host in the URL"));
    }
    Ok(base.to_string())
}

/// Whether to colour: `--color`, then `NO_COLOR` (set and not empty: never),
/// then `CLICOLOR_FORCE` (set and not `0`: always), then whether stdout is a terminal.
pub fn use_color(when: ColorWhen, terminal: bool, no_color: Option<OsString>, force: Option<OsString>) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto if no_color.is_some_and(|v| !v.is_empty()) => false,
        ColorWhen::Auto if force.is_some_and(|v| !v.is_empty() && v != "0") => true,
        ColorWhen::Auto => terminal,
    }
}

/// The terminal's columns (stdout's, or `$COLUMNS`).
fn terminal_width() -> Option<usize> {
    if let Some((terminal_size::Width(columns), _)) = terminal_size::terminal_size_of(std::io::stdout()) {
        if columns > 0 {
            return Some(usize::from(columns));
        }
    }
    std::env::var("COLUMNS").ok()?.trim().parse().ok()
}

/// Why an endpoint could not be read.
#[derive(Debug)]
struct FetchError {
    url: String,
    /// 401: no token, or the wrong one. Waiting will not help.
    unauthorized: bool,
    reason: String,
}

impl FetchError {
    fn new(url: &str, reason: impl Into<String>) -> FetchError {
        FetchError { url: url.to_string(), unauthorized: false, reason: reason.into() }
    }
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.url, self.reason)
    }
}

/// A running tether, as reached over HTTP.
#[derive(Clone)]
struct Instance {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Instance {
    fn new(base: String, token: Option<String>) -> Instance {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(3))
            // `/events` sends a keep-alive every 15 s: silence longer than this is a dead link.
            .timeout_read(Duration::from_secs(40))
            .build();
        Instance { base, token, agent }
    }

    fn get(&self, path: &str) -> (String, ureq::Request) {
        let url = format!("{}{path}", self.base);
        let mut request = self.agent.get(&url);
        if let Some(token) = &self.token {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        (url, request)
    }

    /// Sends a GET; an answer other than 200 is an error that says what to do.
    fn call(
        &self,
        path: &str,
        request: impl FnOnce(ureq::Request) -> ureq::Request,
    ) -> Result<ureq::Response, FetchError> {
        let (url, req) = self.get(path);
        let reason = match request(req).call() {
            Ok(response) => return Ok(response),
            Err(ureq::Error::Status(401, _)) => {
                let hint = match self.token {
                    Some(_) => "tether refused the token: check --token or TETHER_AUTH_TOKEN",
                    None => "pass --token or set TETHER_AUTH_TOKEN",
                };
                return Err(FetchError {
                    unauthorized: true,
                    ..FetchError::new(&url, format!("401 unauthorized: {hint}"))
                });
            }
            Err(ureq::Error::Status(404, _)) => {
                "404 not found: is this tether serving HTTP (`serve --listen` or `--status-listen`)?".to_string()
            }
            Err(ureq::Error::Status(code, response)) => {
                format!("answered {code}: {}", response.into_string().unwrap_or_default().trim())
            }
            // The innermost cause says it best ("Connection refused (os error 111)").
            Err(ureq::Error::Transport(e)) => match std::error::Error::source(&e) {
                Some(cause) => format!("cannot reach tether: {cause}"),
                None => format!("cannot reach tether: {}", e.kind()),
            },
        };
        Err(FetchError::new(&url, reason))
    }

    /// `/status`: the body as sent, and what it says.
    fn status(&self) -> Result<(String, Report), FetchError> {
        let url = format!("{}/status", self.base);
        let response = self.call("/status", |r| r.set("Accept", "application/json"))?;
        let body = response.into_string().map_err(|e| FetchError::new(&url, e.to_string()))?;
        let report = Report::parse(&body).map_err(|e| FetchError::new(&url, e))?;
        Ok((body, report))
    }

    /// `/events`, resuming after `last_id`: the open stream.
    fn events(&self, last_id: Option<&str>) -> Result<impl std::io::Read, FetchError> {
        let response = self.call("/events", |r| {
            let r = r.set("Accept", "text/event-stream");
            match last_id {
                Some(id) => r.set("Last-Event-ID", id),
                None => r,
            }
        })?;
        Ok(response.into_reader())
    }
}

/// What the thread following `/events` tells the redraw loop.
enum Note {
    /// The stream is open.
    Live,
    /// One event.
    Event(SseEvent),
    /// The stream broke or could not be opened; the next try is after `retry_in`.
    Lost { why: String, retry_in: Duration },
    /// tether was started again: the events listed were another run's.
    Restarted,
}

/// tether's uptime may lag the time since an event by this much without being
/// taken for a restart.
const RESTART_SLACK_MS: u64 = 2_000;

/// The last event seen: where to resume, and how to tell a restarted tether.
struct Resume {
    id: String,
    at_ms: u64,
    seen: Instant,
}

/// Follows `/events` for as long as the loop listens, opening it again after a
/// short, growing wait whenever it breaks. It resumes after the last event seen
/// (`Last-Event-ID`) unless tether was restarted meanwhile (its uptime is less
/// than that event's time plus the time since), when it starts from the kept
/// events of the new run.
fn follow(instance: Instance, notes: mpsc::Sender<Note>) {
    let mut resume: Option<Resume> = None;
    let mut backoff = FIRST_BACKOFF;
    loop {
        if let (Some(last), Ok((_, report))) = (&resume, instance.status()) {
            if report.tether.uptime_ms + RESTART_SLACK_MS < last.at_ms + millis(last.seen.elapsed()) {
                resume = None;
                if notes.send(Note::Restarted).is_err() {
                    return;
                }
            }
        }
        let why = match instance.events(resume.as_ref().map(|r| r.id.as_str())) {
            Ok(stream) => {
                backoff = FIRST_BACKOFF;
                if notes.send(Note::Live).is_err() {
                    return;
                }
                let mut parser = SseParser::default();
                let mut lines = BufReader::new(stream).lines();
                loop {
                    match lines.next() {
                        Some(Ok(line)) => {
                            let Some(event) = parser.line(&line) else { continue };
                            if let Some(id) = &event.id {
                                let at_ms = serde_json::from_str::<Value>(&event.data)
                                    .ok()
                                    .and_then(|v| v.get("at_ms")?.as_u64())
                                    .unwrap_or(0);
                                resume = Some(Resume { id: id.clone(), at_ms, seen: Instant::now() });
                            }
                            if notes.send(Note::Event(event)).is_err() {
                                return;
                            }
                        }
                        Some(Err(e)) => break e.to_string(),
                        None => break "tether closed the stream".to_string(),
                    }
                }
            }
            Err(e) => e.reason,
        };
        if notes.send(Note::Lost { why, retry_in: backoff }).is_err() {
            return;
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// What `--watch` shows, and when it last read `/status`.
struct Screen {
    report: Option<(Report, Instant)>,
    problem: Option<String>,
    live: bool,
    link: String,
    events: VecDeque<Value>,
}

impl Screen {
    /// Takes a note; whether it is worth a redraw where redraws are not timed
    /// (stdout not a terminal): events, and the stream opening or breaking.
    fn note(&mut self, note: Note) -> bool {
        match note {
            Note::Live => {
                self.link = "live".to_string();
                !std::mem::replace(&mut self.live, true)
            }
            Note::Lost { why, retry_in } => {
                self.link = format!("connection lost ({why}); trying again in {}", table::human_ms(millis(retry_in)));
                std::mem::replace(&mut self.live, false)
            }
            Note::Restarted => {
                self.events.clear();
                true
            }
            Note::Event(event) => {
                let value = serde_json::from_str(&event.data)
                    .unwrap_or_else(|_| serde_json::json!({"event": event.event, "data": event.data}));
                // Seen already (a stream opened again): the same number at the same time.
                let key = |v: &Value| (v.get("seq").cloned(), v.get("at_ms").cloned());
                if self.events.iter().any(|e| key(e) == key(&value)) {
                    return false;
                }
                if self.events.len() == RECENT_EVENTS {
                    self.events.pop_front();
                }
                self.events.push_back(value);
                true
            }
        }
    }

    /// Reads `/status` again; on failure keeps the last report and says why.
    fn refresh(&mut self, instance: &Instance) {
        match instance.status() {
            Ok((_, report)) => {
                self.report = Some((report, Instant::now()));
                self.problem = None;
            }
            Err(e) => self.problem = Some(e.to_string()),
        }
    }

    fn render(&self, view: &View) -> String {
        let (report, age_ms) = match &self.report {
            Some((report, at)) => (Some(report), millis(at.elapsed())),
            None => (None, 0),
        };
        table::render_watch(report, &View { age_ms, ..view.clone() }, self.problem.as_deref(), &self.link, &self.events)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `tether status --watch`: runs until interrupted, or until stdout goes away.
fn watch(instance: &Instance, view: View, terminal: bool) -> ExitCode {
    let mut screen =
        Screen { report: None, problem: None, live: false, link: "connecting".to_string(), events: VecDeque::new() };
    match instance.status() {
        Ok((_, report)) => screen.report = Some((report, Instant::now())),
        Err(e) if e.unauthorized => return fail(&e.to_string()),
        Err(e) => screen.problem = Some(e.to_string()),
    }
    let (notes, inbox) = mpsc::channel();
    let follower = instance.clone();
    std::thread::spawn(move || follow(follower, notes));
    let mut painter = Painter { terminal, drawn: false };
    let draw = |painter: &mut Painter, screen: &Screen| {
        let width = if terminal { terminal_width() } else { None };
        painter.draw(&screen.render(&View { width, ..view.clone() }))
    };
    // Not a terminal: the first screen waits (a second at most) for the stream,
    // so a log starts with the events rather than with "connecting".
    if terminal && draw(&mut painter, &screen).is_err() {
        return ExitCode::SUCCESS;
    }
    let mut next_tick = Instant::now() + TICK;
    loop {
        let redraw = match inbox.recv_timeout(next_tick.saturating_duration_since(Instant::now())) {
            Ok(note) => {
                let mut redraw = screen.note(note);
                let burst_end = Instant::now() + BURST_MAX;
                while Instant::now() < burst_end {
                    let Ok(note) = inbox.recv_timeout(BURST_GAP) else { break };
                    redraw |= screen.note(note);
                }
                redraw || terminal || !painter.drawn
            }
            Err(RecvTimeoutError::Timeout) => {
                next_tick = Instant::now() + TICK;
                terminal || !painter.drawn
            }
            Err(RecvTimeoutError::Disconnected) => return ExitCode::from(UNREACHABLE),
        };
        if redraw {
            screen.refresh(instance);
            if draw(&mut painter, &screen).is_err() {
                return ExitCode::SUCCESS;
            }
        }
    }
}

/// Puts a screen on stdout: over the last one on a terminal, else after it,
/// separated by a blank line.
struct Painter {
    terminal: bool,
    drawn: bool,
}

impl Painter {
    fn draw(&mut self, text: &str) -> std::io::Result<()> {
        let mut frame = String::with_capacity(text.len() + 256);
        if self.terminal {
            // Home, each line over the old one, then clear what is left below:
            // no blank flash between frames.
            frame.push_str(if self.drawn { "\x1b[H" } else { "\x1b[H\x1b[2J" });
            for line in text.lines() {
                frame.push_str(line);
                frame.push_str("\x1b[K\n");
            }
            frame.push_str("\x1b[J");
        } else {
            if self.drawn {
                frame.push('\n');
            }
            frame.push_str(text);
        }
        self.drawn = true;
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(frame.as_bytes())?;
        stdout.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_in_any_usual_form_becomes_the_base() {
        for (input, base) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
            ("http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080"),
            ("http://127.0.0.1:8080/status/", "http://127.0.0.1:8080"),
            ("https://gw.example.com/tether/mcp?x=1", "https://gw.example.com/tether"),
            ("localhost:9000", "http://localhost:9000"),
            ("9000", "http://127.0.0.1:9000"),
        ] {
            assert_eq!(base_url(input).as_deref(), Ok(base), "{input}");
        }
        assert!(base_url("ftp://host/").is_err());
        assert!(base_url("http:///mcp").is_err());
    }

    #[test]
    fn colour_follows_the_flag_then_no_color_then_clicolor_force_then_the_terminal() {
        let set = |v: &str| Some(OsString::from(v));
        assert!(use_color(ColorWhen::Auto, true, None, None));
        assert!(!use_color(ColorWhen::Auto, false, None, None));
        assert!(!use_color(ColorWhen::Auto, true, set("1"), None));
        assert!(use_color(ColorWhen::Auto, true, set(""), None), "an empty NO_COLOR is unset");
        assert!(use_color(ColorWhen::Auto, false, None, set("1")));
        assert!(!use_color(ColorWhen::Auto, false, None, set("0")));
        assert!(!use_color(ColorWhen::Auto, false, set("1"), set("1")));
        assert!(use_color(ColorWhen::Always, false, set("1"), None));
        assert!(!use_color(ColorWhen::Never, true, None, set("1")));
    }

    #[test]
    fn a_stream_opened_again_does_not_list_its_events_twice() {
        let mut screen =
            Screen { report: None, problem: None, live: false, link: String::new(), events: VecDeque::new() };
        let event = |seq: u64| {
            Note::Event(SseEvent {
                id: Some(seq.to_string()),
                event: "tether".into(),
                data: format!(r#"{{"seq":{seq},"at_ms":{},"event":"circuit_closed","server":"fs"}}"#, seq * 10),
            })
        };
        assert!(screen.note(Note::Live), "opening is news");
        assert!(!screen.note(Note::Live));
        for seq in 0..7 {
            assert!(screen.note(event(seq)));
        }
        assert!(!screen.note(event(6)));
        let seqs: Vec<u64> = screen.events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, [2, 3, 4, 5, 6]);
        assert!(screen.note(Note::Lost { why: "reset".into(), retry_in: FIRST_BACKOFF }));
        assert!(!screen.note(Note::Lost { why: "refused".into(), retry_in: MAX_BACKOFF }));
        assert_eq!(screen.link, "connection lost (refused); trying again in 5.0s");
    }
}
