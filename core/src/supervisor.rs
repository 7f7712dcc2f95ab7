//! One backend's lifecycle: status, connection generations, restart and reconnect
//! scheduling, breaker, crash window, health and idleness.
//!
//! The supervisor knows nothing of MCP. The gateway tells it what happened
//! (handshake done, discovery done, connection lost, a call wants the backend) and
//! it decides what comes next: which status, which timer, whether to start a new
//! connection. Status changes queue up as [`Transition`]s for the gateway to emit.

use alloc::string::String;
use alloc::vec::Vec;

use crate::config::Policy;
use crate::io::{Event, Generation, Status};
use crate::policy::{restart_delay, Backoff, BreakerState, CircuitBreaker, CrashWindow, Failure, FailureStatus, HealthTracker};
use crate::rng::Rng;
use crate::time::{Duration, Instant};

/// The timers of one backend: a fixed table, so the next deadline is a cheap min.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timer {
    /// Restart a crashed process or reconnect a remote.
    Retry,
    /// The handshake did not complete in time.
    ConnectDeadline,
    /// Time for a health check.
    HealthCheck,
    /// The backend has been idle long enough to stop.
    Idle,
}

const TIMERS: usize = 4;

impl Timer {
    const ALL: [Timer; TIMERS] = [Timer::Retry, Timer::ConnectDeadline, Timer::HealthCheck, Timer::Idle];
}

/// A status change for the gateway to announce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Old status.
    pub from: Status,
    /// New status.
    pub to: Status,
    /// Why.
    pub message: Option<String>,
}

impl Transition {
    /// The `server_status_changed` event announcing this change.
    pub fn into_event(self, server: crate::io::ServerName) -> Event {
        Event::ServerStatusChanged { server, from: self.from, to: self.to, message: self.message }
    }
}

/// What the supervisor decided after a connection was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterLoss {
    /// A stdio process will be restarted after `delay`.
    Restart {
        /// Wait before the restart.
        delay: Duration,
        /// Crashes within the window so far.
        crashes: u8,
    },
    /// A remote will be reconnected after `delay`.
    Reconnect {
        /// Attempt number scheduled.
        attempt: u32,
        /// Wait before it.
        delay: Duration,
    },
    /// The backend needs the user to log in again; nothing is scheduled.
    Reauth,
    /// Crashed too often; nothing is scheduled.
    GaveUp {
        /// Crashes within the window.
        crashes: u8,
    },
}

impl AfterLoss {
    /// Whether a new connection is scheduled.
    pub fn is_retry(&self) -> bool {
        matches!(self, AfterLoss::Restart { .. } | AfterLoss::Reconnect { .. })
    }
}

/// What a call should do about a backend that is not ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Connected: send now.
    Ready,
    /// A connection is under way: wait for it.
    Wait,
    /// Nothing under way: the gateway must start a connection now, then wait.
    StartNow,
    /// Refuse the call: the backend cannot serve until someone acts.
    Refuse,
}

/// One backend's lifecycle state machine.
#[derive(Clone, Debug)]
pub struct Supervisor {
    status: Status,
    message: Option<String>,
    generation: Generation,
    connected: bool,
    stdio: bool,
    vital: bool,
    policy: Policy,
    backoff: Backoff,
    /// Crash/restart history of a stdio process.
    pub crashes: CrashWindow,
    /// Circuit breaker over calls.
    pub breaker: CircuitBreaker,
    /// Health-check failure tracker.
    pub health: HealthTracker,
    reconnect_attempt: u32,
    attempts_before_success: u32,
    started_at: Instant,
    last_activity: Instant,
    timers: [Option<Instant>; TIMERS],
    transitions: Vec<Transition>,
    /// Status changes so far (lets the gateway cache what depends on status).
    changes: u64,
}

impl Supervisor {
    /// A backend that has not been started.
    pub fn new(stdio: bool, vital: bool, policy: Policy, now: Instant) -> Self {
        Supervisor {
            status: Status::Provisioning,
            message: None,
            generation: Generation(0),
            connected: false,
            stdio,
            vital,
            backoff: policy.reconnect_backoff(),
            crashes: policy.crash_window(),
            breaker: policy.breaker(),
            health: policy.health_tracker(),
            policy,
            reconnect_attempt: 0,
            attempts_before_success: 0,
            started_at: now,
            last_activity: now,
            timers: [None; TIMERS],
            transitions: Vec::new(),
            changes: 0,
        }
    }

    /// Current status.
    pub fn status(&self) -> Status {
        self.status
    }

    /// Why the backend is in its status (last error, stderr tail), if known.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// The current connection's generation (0 before the first).
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Numbers the next connection after `last` (a backend added back under the name
    /// of a removed one continues its generations).
    pub fn continue_generations(&mut self, last: Generation) {
        self.generation = self.generation.max(last);
    }

    /// Whether a connection exists (spawned or connected), handshake done or not.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Whether the handshake is done and requests may be sent.
    pub fn is_ready(&self) -> bool {
        self.connected && matches!(self.status, Status::Online | Status::DiscoveringTools)
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Reconnect attempts made since the last success.
    pub fn reconnect_attempt(&self) -> u32 {
        self.reconnect_attempt
    }

    /// Whether this is a vital backend.
    pub fn is_vital(&self) -> bool {
        self.vital
    }

    /// Whether this is a local process.
    pub fn is_stdio(&self) -> bool {
        self.stdio
    }

    /// When a timer is due.
    pub fn timer(&self, timer: Timer) -> Option<Instant> {
        self.timers[timer as usize]
    }

    /// How many times the status has changed since this supervisor was made.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Status changes not yet announced.
    pub fn drain_transitions(&mut self) -> impl Iterator<Item = Transition> + '_ {
        self.transitions.drain(..)
    }

    /// The earliest timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.iter().fold(None, |at, timer| crate::time::earliest(at, *timer))
    }

    /// Takes the earliest timer due at `now`, if any.
    pub fn take_expired(&mut self, now: Instant) -> Option<Timer> {
        let timer = Timer::ALL
            .into_iter()
            .filter(|t| self.timers[*t as usize].is_some_and(|at| at <= now))
            .min_by_key(|t| self.timers[*t as usize])?;
        self.timers[timer as usize] = None;
        Some(timer)
    }

    /// Starts a new connection: the returned generation tags everything about it.
    pub fn begin_connect(&mut self, now: Instant) -> Generation {
        self.generation = self.generation.next();
        self.connected = true;
        self.started_at = now;
        self.last_activity = now;
        self.timers = [None; TIMERS];
        self.timers[Timer::ConnectDeadline as usize] =
            Some(now + Duration::from_millis(self.policy.connect_timeout_ms));
        self.set_status(Status::Connecting, None);
        self.generation
    }

    /// The `initialize` handshake completed. With `skip_discovery` (a dormant
    /// backend respawned) the cached catalog is trusted and it goes straight online.
    /// Returns the reconnect attempts it took, when there were any.
    pub fn on_handshake(&mut self, now: Instant, skip_discovery: bool, rng: &mut Rng) -> Option<u32> {
        self.timers[Timer::ConnectDeadline as usize] = None;
        let attempts = core::mem::take(&mut self.reconnect_attempt);
        self.attempts_before_success = attempts;
        if skip_discovery {
            self.go_online(now, rng);
        } else {
            self.set_status(Status::DiscoveringTools, None);
        }
        (attempts > 0).then_some(attempts)
    }

    /// Discovery finished (or failed with a catalog cached): serving.
    pub fn on_discovered(&mut self, now: Instant, rng: &mut Rng) {
        self.go_online(now, rng);
    }

    fn go_online(&mut self, now: Instant, rng: &mut Rng) {
        self.set_status(Status::Online, None);
        self.schedule_health(now, rng);
        self.touch(now);
    }

    /// Real traffic happened: pushes back idling.
    pub fn touch(&mut self, now: Instant) {
        self.last_activity = now;
        let idle = self.policy.idle_timeout_ms;
        self.timers[Timer::Idle as usize] =
            (self.stdio && !self.vital && idle > 0 && self.connected).then(|| now + Duration::from_millis(idle));
    }

    /// When traffic last happened.
    pub fn last_activity(&self) -> Instant {
        self.last_activity
    }

    /// Schedules the next health check, jittered.
    pub fn schedule_health(&mut self, now: Instant, rng: &mut Rng) {
        let ms = rng.jitter(self.policy.health_interval_ms, self.policy.health_jitter_percent);
        self.timers[Timer::HealthCheck as usize] = Some(now + Duration::from_millis(ms));
    }

    /// The connection was lost or could not be made. Decides restart, reconnect,
    /// re-authentication or giving up, and schedules it.
    pub fn on_connection_lost(&mut self, now: Instant, failure: &Failure, message: String, rng: &mut Rng) -> AfterLoss {
        self.connected = false;
        self.timers = [None; TIMERS];
        let class = failure.classify();
        if class.status == FailureStatus::RequiresReauth {
            self.set_status(Status::RequiresReauth, Some(message));
            return AfterLoss::Reauth;
        }
        if self.stdio {
            let crashes = self.crashes.record(now);
            if self.crashes.exhausted(now) {
                self.set_status(Status::PermanentlyFailed, Some(message));
                return AfterLoss::GaveUp { crashes };
            }
            let ran_for = now.saturating_since(self.started_at);
            let delay = restart_delay(
                ran_for,
                crashes,
                Duration::from_millis(self.policy.restart_immediately_after_ms),
                &self.policy.restart_delays(),
            );
            self.timers[Timer::Retry as usize] = Some(now + delay);
            self.set_status(Status::Error, Some(message));
            return AfterLoss::Restart { delay, crashes };
        }
        self.reconnect_attempt = self.reconnect_attempt.saturating_add(1);
        let delay = self.backoff.delay(self.reconnect_attempt, rng);
        self.timers[Timer::Retry as usize] = Some(now + delay);
        let status = if class.status == FailureStatus::Error { Status::Error } else { Status::Offline };
        self.set_status(status, Some(message));
        AfterLoss::Reconnect { attempt: self.reconnect_attempt, delay }
    }

    /// The connection was closed on purpose; the backend rests in `status`.
    pub fn on_closed(&mut self, status: Status, message: Option<String>) {
        self.connected = false;
        self.timers = [None; TIMERS];
        self.set_status(status, message);
    }

    /// A call wants this backend at `now`. A remote backend waiting out its
    /// reconnect backoff keeps to it, whoever asks (calls do not each make an
    /// attempt): the call waits for the scheduled attempt, or is refused at once
    /// when that comes after the call's own timeout. Otherwise a scheduled
    /// retry (a stdio restart's delay) is cancelled and a connection tried now.
    pub fn readiness(&mut self, now: Instant) -> Readiness {
        match self.status {
            Status::Online | Status::DiscoveringTools if self.connected => Readiness::Ready,
            Status::Connecting | Status::Restarting if self.connected => Readiness::Wait,
            Status::RequiresReauth | Status::PermanentlyFailed | Status::Disconnected => Readiness::Refuse,
            _ => match self.timers[Timer::Retry as usize] {
                Some(at) if !self.stdio && at > now => {
                    let patience = Duration::from_millis(self.policy.request_timeout_ms);
                    if at.saturating_since(now) <= patience {
                        Readiness::Wait
                    } else {
                        Readiness::Refuse
                    }
                }
                _ => {
                    self.timers[Timer::Retry as usize] = None;
                    Readiness::StartNow
                }
            },
        }
    }

    /// An operator (or a config change) starts the backend over: history cleared.
    pub fn reset_history(&mut self) {
        self.crashes.clear();
        self.breaker.reset();
        self.health.reset();
        self.reconnect_attempt = 0;
    }

    /// A reloaded policy; state is kept.
    pub fn set_policy(&mut self, policy: Policy, vital: bool) {
        self.backoff = policy.reconnect_backoff();
        self.breaker.set_policy(policy.breaker_threshold, Duration::from_millis(policy.breaker_cooldown_ms));
        self.crashes.set_policy(policy.crash_limit, Duration::from_millis(policy.crash_window_ms));
        self.health.set_threshold(policy.health_failure_threshold);
        self.policy = policy;
        self.vital = vital;
    }

    /// Something went wrong that leaves the status as it is (a call's stream
    /// that could not be resumed): shown as the last error until the next
    /// status change.
    pub fn note_trouble(&mut self, message: String) {
        self.message = Some(message);
    }

    /// Announces a status (no-op when unchanged).
    pub fn set_status(&mut self, to: Status, message: Option<String>) {
        let from = self.status;
        if message.is_some() || to == Status::Online {
            self.message = message.clone();
        }
        if from == to {
            return;
        }
        self.status = to;
        self.changes += 1;
        self.transitions.push(Transition { from, to, message });
    }

    /// Checks the supervisor's own bounds (used by invariant checks and fuzzing).
    pub fn check_invariants(&self, now: Instant) -> Result<(), &'static str> {
        if self.breaker.consecutive_failures() > self.breaker.threshold().saturating_mul(64).max(1 << 20) {
            return Err("breaker failure count unbounded");
        }
        let closed = self.breaker.state(now) == BreakerState::Closed;
        if closed && self.breaker.consecutive_failures() >= self.breaker.threshold() {
            return Err("breaker closed at its failure threshold (it opens there)");
        }
        if self.crashes.count(now) > self.crashes.limit() {
            return Err("crash window exceeds its limit");
        }
        if matches!(self.status, Status::PermanentlyFailed | Status::RequiresReauth | Status::Disconnected)
            && (self.connected || self.timers[Timer::Retry as usize].is_some())
        {
            return Err("a given-up backend holds a connection or a retry");
        }
        if let Some(at) = self.timers[Timer::Retry as usize] {
            let max = if self.stdio {
                self.policy.restart_delays_ms.iter().copied().max().unwrap_or(0)
            } else {
                self.backoff.ceiling().as_millis()
            };
            if at.as_millis() > now.as_millis().saturating_add(max) {
                return Err("retry scheduled beyond its policy");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn stdio_crash_loop_gives_up_on_the_third_crash() {
        let mut rng = Rng::new(1);
        let mut s = Supervisor::new(true, false, Policy::default(), t(0));
        assert_eq!(s.begin_connect(t(0)), Generation(1));
        let exit = Failure::Exited { code: Some(1) };
        assert_eq!(
            s.on_connection_lost(t(100), &exit, "boom".to_string(), &mut rng),
            AfterLoss::Restart { delay: Duration::from_secs(1), crashes: 1 }
        );
        assert_eq!(s.take_expired(t(1099)), None);
        assert_eq!(s.take_expired(t(1100)), Some(Timer::Retry));
        assert_eq!(s.begin_connect(t(1100)), Generation(2));
        assert_eq!(
            s.on_connection_lost(t(1200), &exit, "boom".to_string(), &mut rng),
            AfterLoss::Restart { delay: Duration::from_secs(5), crashes: 2 }
        );
        s.begin_connect(t(6200));
        assert_eq!(
            s.on_connection_lost(t(6300), &exit, "boom".to_string(), &mut rng),
            AfterLoss::GaveUp { crashes: 3 }
        );
        assert_eq!(s.status(), Status::PermanentlyFailed);
        assert_eq!(s.readiness(t(6300)), Readiness::Refuse);
        assert_eq!(s.poll_timeout(), None);
        s.check_invariants(t(6300)).unwrap();
    }

    #[test]
    fn long_running_process_restarts_at_once() {
        let mut rng = Rng::new(1);
        let mut s = Supervisor::new(true, false, Policy::default(), t(0));
        s.begin_connect(t(0));
        let after = s.on_connection_lost(t(61_000), &Failure::Exited { code: None }, "x".into(), &mut rng);
        assert_eq!(after, AfterLoss::Restart { delay: Duration::ZERO, crashes: 1 });
    }

    #[test]
    fn remote_reconnects_with_backoff_which_a_call_waits_for() {
        let mut rng = Rng::new(9);
        let mut s = Supervisor::new(false, false, Policy::default(), t(0));
        s.begin_connect(t(0));
        let AfterLoss::Reconnect { attempt: 1, delay } =
            s.on_connection_lost(t(10), &Failure::Refused, "refused".into(), &mut rng)
        else {
            panic!()
        };
        assert!((900..=1100).contains(&delay.as_millis()));
        assert_eq!(s.status(), Status::Offline);
        assert_eq!(s.readiness(t(20)), Readiness::Wait, "the call waits for the scheduled attempt");
        assert!(s.timer(Timer::Retry).is_some(), "which stays where the backoff put it");
        let due = s.timer(Timer::Retry).unwrap();
        assert_eq!(s.readiness(due), Readiness::StartNow, "once due, a call may make it");
        s.begin_connect(due);
        assert_eq!(s.readiness(due), Readiness::Wait);
        assert_eq!(s.on_handshake(due, false, &mut rng), Some(1));
        assert_eq!(s.readiness(due), Readiness::Ready);
        s.on_discovered(t(40), &mut rng);
        assert_eq!(s.status(), Status::Online);
        let statuses: Vec<_> = s.drain_transitions().map(|t| t.to).collect();
        assert_eq!(
            statuses,
            [Status::Connecting, Status::Offline, Status::Connecting, Status::DiscoveringTools, Status::Online]
        );
    }

    #[test]
    fn auth_failure_waits_for_the_user() {
        let mut rng = Rng::new(1);
        let mut s = Supervisor::new(false, false, Policy::default(), t(0));
        s.begin_connect(t(0));
        assert_eq!(
            s.on_connection_lost(t(1), &Failure::Http { status: 401 }, "401".into(), &mut rng),
            AfterLoss::Reauth
        );
        assert_eq!(s.poll_timeout(), None);
        assert_eq!(s.readiness(t(1)), Readiness::Refuse);
    }

    #[test]
    fn idle_timer_only_for_non_vital_stdio() {
        let mut rng = Rng::new(1);
        let mut s = Supervisor::new(true, false, Policy::default(), t(0));
        s.begin_connect(t(0));
        s.on_handshake(t(0), true, &mut rng);
        assert_eq!(s.timer(Timer::Idle), Some(t(180_000)));
        let mut v = Supervisor::new(true, true, Policy::default(), t(0));
        v.begin_connect(t(0));
        v.on_handshake(t(0), true, &mut rng);
        assert_eq!(v.timer(Timer::Idle), None);
    }
}
