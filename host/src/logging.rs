//! Logging to stderr (stdout is the protocol), how core events are logged, and
//! the rate limit on what backends write to stderr.
//!
//! Quiet by default: at `info` a person sees one line per status change (a change
//! into trouble as a warning) and the warnings that need them (a breaker opened,
//! health degraded, a protocol violation, a name conflict). What restates a status
//! change (disconnected, reconnecting, reconnected, permanently failed, tools
//! discovered), process starts and exits, and the backends' own stderr are logged
//! at `debug`: a backend's stderr and events are kept for `tether logs NAME`.
//!
//! A backend's stderr is its log, and a backend can write it far faster than
//! anyone reads logs: each backend's lines go through a token bucket
//! ([`STDERR_BURST`] lines at once, [`STDERR_PER_SECOND`] a second after that), and
//! when lines were dropped, a summary line says how many before logging resumes.
//! Protocol violations (a backend writing garbage on stdout) are limited the same
//! way, per backend.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use tether_core::redact::Redactor;
use tether_core::{Event, ServerName, Status};

/// How many stderr lines of one backend are logged in a burst.
pub const STDERR_BURST: u32 = 50;

/// How many stderr lines of one backend are logged per second after a burst.
pub const STDERR_PER_SECOND: u32 = 10;

/// How many of a backend's last stderr lines are kept to hand to the core at the
/// end of the stream, when the rate limit kept the latest ones from it (the core
/// keeps as many as its crash message shows).
pub const STDERR_KEPT: usize = 8;

/// The levels `-v` and `-q` step through, quietest first.
const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// The log level to use: `explicit` (`--log-level` or `TETHER_LOG`) if given,
/// else `base` (the command's own) stepped up once per `-v` and down once per `-q`.
pub fn level(explicit: Option<&str>, base: &str, verbose: u8, quiet: u8) -> String {
    if let Some(level) = explicit {
        return level.to_string();
    }
    let at = LEVELS.iter().position(|l| *l == base).unwrap_or(2) as i32;
    let stepped = (at + i32::from(verbose) - i32::from(quiet)).clamp(0, LEVELS.len() as i32 - 1);
    LEVELS[stepped as usize].to_string()
}

/// Logs to stderr only, at `level` (a level name or a tracing filter).
pub fn init_logging(level: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_new(level).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .try_init();
}

/// Logs one core event: recoveries and discoveries at info, trouble at warn.
/// Protocol violations are rate-limited per backend like stderr lines.
pub fn log_event(event: &Event) {
    if let Event::ProtocolViolation { server, .. } = event {
        static BUCKETS: Mutex<Option<HashMap<ServerName, LineBudget>>> = Mutex::new(None);
        let mut buckets = BUCKETS.lock().unwrap_or_else(|p| p.into_inner());
        let budget = buckets.get_or_insert_with(HashMap::new).entry(server.clone()).or_default();
        match budget.admit(Instant::now()) {
            Admit::Drop => return,
            Admit::Log { dropped: 0 } => {}
            Admit::Log { dropped } => {
                tracing::warn!(server = %server, "{dropped} protocol violations not logged (rate limit)")
            }
        }
    }
    match event {
        Event::ServerStatusChanged { to, .. } if to.is_down() && *to != Status::Disconnected => {
            tracing::warn!("{event}")
        }
        Event::ServerStatusChanged { .. } | Event::ServerHealthRestored { .. } | Event::CircuitClosed { .. } => {
            tracing::info!("{event}")
        }
        // Each restates a status change logged beside it.
        Event::ServerDisconnected { .. }
        | Event::ServerReconnecting { .. }
        | Event::ServerReconnected { .. }
        | Event::ServerPermanentlyFailed { .. }
        | Event::ToolsDiscovered { .. } => tracing::debug!("{event}"),
        Event::CircuitOpened { .. }
        | Event::ServerHealthDegraded { .. }
        | Event::ProtocolViolation { .. }
        | Event::NameConflict { .. }
        | Event::CatalogCut { .. } => tracing::warn!("{event}"),
    }
}

/// Whether a line may be logged now, and how many were dropped before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Log it, after a summary of the `dropped` lines before it (if any).
    Log {
        /// Lines dropped since the last one logged.
        dropped: u64,
    },
    /// Over the rate: drop it (it is counted).
    Drop,
}

/// A token bucket of log lines: [`STDERR_BURST`] at once, refilled at
/// [`STDERR_PER_SECOND`], counting what it drops.
#[derive(Debug)]
pub struct LineBudget {
    tokens: f64,
    last: Instant,
    dropped: u64,
}

impl LineBudget {
    /// A full bucket.
    pub fn new() -> LineBudget {
        LineBudget { tokens: f64::from(STDERR_BURST), last: Instant::now(), dropped: 0 }
    }

    /// Takes a token for one line at `now`, if there is one.
    pub fn admit(&mut self, now: Instant) -> Admit {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * f64::from(STDERR_PER_SECOND)).min(f64::from(STDERR_BURST));
        if self.tokens < 1.0 {
            self.dropped += 1;
            return Admit::Drop;
        }
        self.tokens -= 1.0;
        Admit::Log { dropped: std::mem::take(&mut self.dropped) }
    }

    /// Lines dropped since the last one logged (and forgets them).
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }
}

impl Default for LineBudget {
    fn default() -> Self {
        Self::new()
    }
}

/// One backend process's stderr on its way to the log and to the core: lines
/// within the rate are logged (redacted) and handed on; the others are counted,
/// and the last few kept, so the core still sees how the stream ended.
#[derive(Debug)]
pub struct StderrLog {
    server: ServerName,
    redactor: Redactor,
    budget: LineBudget,
    /// The last lines seen, whether handed on or not.
    recent: VecDeque<String>,
    /// Some of `recent` were dropped by the rate limit.
    withheld: bool,
    /// Dropped lines not yet said in a summary, and how often summaries go out
    /// (once per [`crate::warn_limit::INTERVAL`]: a flooding backend would
    /// otherwise write one every time a line gets through, 10 a second).
    unsaid: u64,
    summaries: crate::warn_limit::WarnLimit,
}

impl StderrLog {
    /// The stderr of one process of backend `server`; `redactor` blanks the
    /// config's secrets in logged lines.
    pub fn new(server: ServerName, redactor: Redactor) -> StderrLog {
        StderrLog {
            server,
            redactor,
            budget: LineBudget::new(),
            recent: VecDeque::new(),
            withheld: false,
            unsaid: 0,
            summaries: crate::warn_limit::WarnLimit::new(),
        }
    }

    /// One line: logged if within the rate (after a summary of what was dropped);
    /// whether to hand it to the core too.
    pub fn line(&mut self, line: &str) -> bool {
        if self.recent.len() == STDERR_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(line.to_string());
        match self.budget.admit(Instant::now()) {
            Admit::Drop => {
                self.withheld = true;
                false
            }
            Admit::Log { dropped } => {
                if dropped > 0 {
                    self.unsaid += dropped;
                    let (server, unsaid) = (&self.server, self.unsaid);
                    let mut said = false;
                    self.summaries.warn(|_| {
                        summary(server, unsaid);
                        said = true;
                    });
                    if said {
                        self.unsaid = 0;
                    }
                }
                tracing::debug!(target: "backend", server = %self.server, "{}", self.redactor.redact(line));
                self.withheld = false;
                true
            }
        }
    }

    /// The stream ended: logs how many lines were dropped since the last one
    /// logged, and returns the last lines to hand to the core if the rate limit
    /// kept some of them from it (empty otherwise).
    pub fn finish(&mut self) -> Vec<String> {
        let dropped = self.budget.take_dropped() + std::mem::take(&mut self.unsaid);
        if dropped > 0 {
            summary(&self.server, dropped);
        }
        if !std::mem::take(&mut self.withheld) {
            return Vec::new();
        }
        self.recent.drain(..).collect()
    }

    /// Dropped lines not yet said in a summary (for tests).
    #[cfg(test)]
    fn unsaid(&self) -> u64 {
        self.unsaid
    }
}

fn summary(server: &ServerName, dropped: u64) {
    tracing::warn!(
        target: "backend",
        server = %server,
        "{dropped} stderr lines not logged (over {STDERR_PER_SECOND} lines/s)"
    );
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{level, Admit, LineBudget, STDERR_BURST, STDERR_PER_SECOND};

    #[test]
    fn the_level_steps_with_v_and_q_and_an_explicit_one_wins() {
        assert_eq!(level(None, "info", 0, 0), "info");
        assert_eq!(level(None, "info", 1, 0), "debug");
        assert_eq!(level(None, "info", 5, 0), "trace");
        assert_eq!(level(None, "info", 0, 1), "warn");
        assert_eq!(level(None, "error", 0, 3), "error");
        assert_eq!(level(None, "error", 2, 0), "info");
        assert_eq!(level(Some("tether=trace"), "error", 0, 2), "tether=trace");
    }

    #[test]
    fn a_flood_is_summarised_once_per_interval_and_the_rest_at_the_end() {
        let mut log = super::StderrLog::new("flood".into(), tether_core::redact::Redactor::default());
        let flood = |log: &mut super::StderrLog| {
            for _ in 0..(STDERR_BURST + 100) {
                log.line("spam");
            }
        };
        flood(&mut log);
        std::thread::sleep(Duration::from_millis(1_050));
        flood(&mut log); // the first line through says what was dropped
        assert_eq!(log.unsaid(), 0, "the first summary goes out at once");
        std::thread::sleep(Duration::from_millis(1_050));
        flood(&mut log); // within the interval: counted, not said
        assert!(log.unsaid() > 0, "a second summary within 10 s waits");
        assert!(!log.finish().is_empty(), "the kept lines go to the core");
        assert_eq!(log.unsaid(), 0, "the end says the rest");
    }

    #[test]
    fn a_burst_then_the_steady_rate_and_a_count_of_what_was_dropped() {
        let mut budget = LineBudget::new();
        let start = Instant::now();
        for _ in 0..STDERR_BURST {
            assert_eq!(budget.admit(start), Admit::Log { dropped: 0 });
        }
        for _ in 0..1000 {
            assert_eq!(budget.admit(start), Admit::Drop);
        }
        // One second later: the steady rate's worth, the first with the summary.
        let later = start + Duration::from_secs(1);
        assert_eq!(budget.admit(later), Admit::Log { dropped: 1000 });
        for _ in 1..STDERR_PER_SECOND {
            assert_eq!(budget.admit(later), Admit::Log { dropped: 0 });
        }
        assert_eq!(budget.admit(later), Admit::Drop);
        assert_eq!(budget.take_dropped(), 1);
    }
}
