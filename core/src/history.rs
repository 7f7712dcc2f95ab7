//! A backend's last hour, minute by minute: how long it spent in each condition
//! (online, degraded, starting, dormant, offline, failed) and how long its calls
//! took (p50 and p99). The status page draws it as a coloured strip and a
//! sparkline, so a person sees at a glance that a backend flapped at 10:40 or got
//! slow since 11:05, which a current status alone cannot show.
//!
//! Bounded: 60 minutes of fixed-size slots per backend (about 20 KiB), whatever the
//! traffic; older minutes are dropped. Minutes are counted in engine time, so a
//! simulated day produces the same history as a real one.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::io::Status;
use crate::time::Instant;
use crate::BreakerState;

/// Minutes kept.
pub const HISTORY_MINUTES: usize = 60;
/// One slot's length, ms.
pub const MINUTE_MS: u64 = 60_000;
/// Latency histogram bins per minute; bin `i` holds latencies up to
/// [`latency_bound_ms`]`(i)`, each bound about 1.25× the one before (1 ms .. ~20 min).
const LATENCY_BINS: usize = 64;

/// What a backend was doing, in the few kinds a timeline shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Online, breaker closed, health fine.
    Online,
    /// Online but its breaker is not closed or its health checks fail.
    Degraded,
    /// Starting, discovering tools or restarting.
    Starting,
    /// Not running by choice: idle (dormant), lazy and not yet needed, removed.
    Dormant,
    /// Unreachable, failed or waiting for a login; recovers by itself or with a login.
    Offline,
    /// Crashed too often: stays down until someone restarts it.
    Failed,
}

impl Condition {
    /// Every condition, in the order of [`MinuteView::ms`].
    pub const ALL: [Condition; 6] = [
        Condition::Online,
        Condition::Degraded,
        Condition::Starting,
        Condition::Dormant,
        Condition::Offline,
        Condition::Failed,
    ];

    /// Its name in `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Online => "online",
            Condition::Degraded => "degraded",
            Condition::Starting => "starting",
            Condition::Dormant => "dormant",
            Condition::Offline => "offline",
            Condition::Failed => "failed",
        }
    }

    /// The condition of a backend with this status, breaker and health.
    pub fn of(status: Status, breaker: BreakerState, health_degraded: bool) -> Condition {
        match status {
            Status::Online if breaker != BreakerState::Closed || health_degraded => Condition::Degraded,
            Status::Online => Condition::Online,
            Status::Connecting | Status::DiscoveringTools | Status::Restarting => Condition::Starting,
            Status::Provisioning | Status::Dormant | Status::Disconnected => Condition::Dormant,
            Status::Offline | Status::Error | Status::RequiresReauth => Condition::Offline,
            Status::PermanentlyFailed => Condition::Failed,
        }
    }

    fn index(self) -> usize {
        Condition::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }
}

/// Each latency bin's upper bound (ms), computed once at compile time.
const LATENCY_BOUNDS: [u64; LATENCY_BINS] = {
    let mut bounds = [1u64; LATENCY_BINS];
    let mut i = 1;
    while i < LATENCY_BINS {
        let b = bounds[i - 1];
        bounds[i] = if b * 5 / 4 > b + 1 { b * 5 / 4 } else { b + 1 };
        i += 1;
    }
    bounds
};

/// The upper bound (ms) of latency bin `bin`.
pub fn latency_bound_ms(bin: usize) -> u64 {
    LATENCY_BOUNDS[bin.min(LATENCY_BINS - 1)]
}

/// The bin of a latency: the first whose bound holds it (the last takes the rest).
fn latency_bin(ms: u64) -> usize {
    LATENCY_BOUNDS.partition_point(|bound| *bound < ms).min(LATENCY_BINS - 1)
}

#[derive(Clone, Debug)]
struct Slot {
    /// Minutes since the engine's time 0.
    minute: u64,
    /// ms spent in each condition ([`Condition::ALL`] order).
    ms: [u32; 6],
    latency: [u32; LATENCY_BINS],
}

impl Slot {
    fn new(minute: u64) -> Slot {
        Slot { minute, ms: [0; 6], latency: [0; LATENCY_BINS] }
    }
}

/// One backend's last hour (see the module doc). Empty until the first
/// [`History::observe`].
#[derive(Clone, Debug, Default)]
pub struct History {
    slots: VecDeque<Slot>,
    /// The condition now, and the time up to which it has been counted; `None`
    /// before the first observation.
    current: Option<(Condition, u64)>,
}

impl History {
    /// A history that starts at `now` in `condition`.
    pub fn new(now: Instant, condition: Condition) -> History {
        let mut history = History::default();
        history.observe(now, condition);
        history
    }

    /// The backend is in `condition` from `now` on (the first call starts the history).
    pub fn observe(&mut self, now: Instant, condition: Condition) {
        match self.current {
            Some((held, _)) if held == condition => {}
            Some(_) => {
                self.count_to(now.as_millis());
                self.current = self.current.map(|(_, to)| (condition, to));
            }
            None => self.current = Some((condition, now.as_millis())),
        }
    }

    /// A call that took `latency_ms` ended at `now`.
    pub fn record_call(&mut self, now: Instant, latency_ms: u64) {
        let slot = self.slot(now.as_millis() / MINUTE_MS);
        let bin = &mut slot.latency[latency_bin(latency_ms)];
        *bin = bin.saturating_add(1);
    }

    /// The last hour up to `now`, oldest minute first; minutes before the history
    /// began are absent.
    pub fn view(&self, now: Instant) -> Vec<MinuteView> {
        let mut counted = self.clone();
        counted.count_to(now.as_millis());
        let current = now.as_millis() / MINUTE_MS;
        counted
            .slots
            .iter()
            .filter(|s| current.saturating_sub(s.minute) < HISTORY_MINUTES as u64)
            .map(|s| {
                let calls: u64 = s.latency.iter().map(|n| u64::from(*n)).sum();
                MinuteView {
                    ago: current.saturating_sub(s.minute) as u32,
                    ms: s.ms,
                    calls,
                    p50_ms: quantile(&s.latency, calls, 50),
                    p99_ms: quantile(&s.latency, calls, 99),
                }
            })
            .collect()
    }

    /// Adds the time from `counted_to` to `to` to the current condition, minute by
    /// minute (at most the last hour of it).
    fn count_to(&mut self, to: u64) {
        let Some((condition, counted_to)) = self.current else { return };
        let from = counted_to.max(to.saturating_sub(HISTORY_MINUTES as u64 * MINUTE_MS));
        self.current = Some((condition, to.max(counted_to)));
        let index = condition.index();
        let mut at = from;
        while at < to {
            let minute = at / MINUTE_MS;
            let end = ((minute + 1) * MINUTE_MS).min(to);
            let slot = self.slot(minute);
            slot.ms[index] = slot.ms[index].saturating_add((end - at) as u32);
            at = end;
        }
    }

    /// The slot of `minute`, made (and the oldest dropped) when new.
    fn slot(&mut self, minute: u64) -> &mut Slot {
        if self.slots.back().map_or(true, |s| s.minute < minute) {
            self.slots.push_back(Slot::new(minute));
            while self.slots.front().is_some_and(|s| minute - s.minute >= HISTORY_MINUTES as u64) {
                self.slots.pop_front();
            }
        }
        // Minutes only move forward; an older minute (never asked for) shares the newest.
        let at = self.slots.iter().rposition(|s| s.minute <= minute).unwrap_or(self.slots.len() - 1);
        &mut self.slots[at]
    }
}

/// The `q`th percentile's bin bound, from a histogram holding `calls`.
fn quantile(bins: &[u32; LATENCY_BINS], calls: u64, q: u64) -> Option<u64> {
    if calls == 0 {
        return None;
    }
    let rank = (calls * q).div_ceil(100).max(1);
    let mut seen = 0u64;
    for (bin, n) in bins.iter().enumerate() {
        seen += u64::from(*n);
        if seen >= rank {
            return Some(latency_bound_ms(bin));
        }
    }
    Some(latency_bound_ms(LATENCY_BINS - 1))
}

/// One minute of a backend's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinuteView {
    /// 0 for the current minute, 1 for the one before, ... 59.
    pub ago: u32,
    /// ms spent in each condition, in [`Condition::ALL`] order.
    pub ms: [u32; 6],
    /// Calls that ended in this minute.
    pub calls: u64,
    /// Median latency, ms (to ~25%: the bound of its histogram bin); `None` without calls.
    pub p50_ms: Option<u64>,
    /// 99th percentile latency, ms (likewise).
    pub p99_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn time_in_each_condition_is_split_at_minute_boundaries() {
        let mut h = History::new(at(30_000), Condition::Starting);
        h.observe(at(40_000), Condition::Online);
        h.observe(at(100_000), Condition::Offline); // 60 s online: 20 s in minute 0, 40 s in minute 1
        let view = h.view(at(130_000));
        assert_eq!(view.len(), 3);
        assert_eq!((view[0].ago, view[0].ms), (2, [20_000, 0, 10_000, 0, 0, 0]));
        assert_eq!((view[1].ago, view[1].ms), (1, [40_000, 0, 0, 0, 20_000, 0]));
        assert_eq!((view[2].ago, view[2].ms), (0, [0, 0, 0, 0, 10_000, 0]));
        // A view counts up to now without changing the history.
        assert_eq!(h.view(at(130_000)), view);
    }

    #[test]
    fn only_the_last_hour_is_kept_and_a_long_quiet_spell_costs_nothing() {
        let mut h = History::new(at(0), Condition::Online);
        for minute in 0..200u64 {
            h.record_call(at(minute * MINUTE_MS + 5), 10);
        }
        assert!(h.slots.len() <= HISTORY_MINUTES);
        // Ten days in one condition: at most an hour of slots is walked and kept.
        h.observe(at(10 * 86_400_000), Condition::Failed);
        let view = h.view(at(10 * 86_400_000 + 1));
        assert_eq!(view.len(), HISTORY_MINUTES);
        assert!(view.iter().all(|m| m.ago < HISTORY_MINUTES as u32));
        assert_eq!(view[0].ms[0], MINUTE_MS as u32, "a whole minute online");
        assert_eq!(view.last().unwrap().ms[5], 1, "then failed");
    }

    #[test]
    fn percentiles_per_minute_come_from_the_calls_of_that_minute() {
        let mut h = History::new(at(0), Condition::Online);
        for i in 0..100u64 {
            h.record_call(at(1_000 + i), if i < 98 { 20 } else { 900 });
        }
        h.record_call(at(MINUTE_MS + 1), 3);
        let view = h.view(at(MINUTE_MS + 2));
        let (first, second) = (&view[0], &view[1]);
        assert_eq!(first.calls, 100);
        let p50 = first.p50_ms.unwrap();
        assert!((20..=25).contains(&p50), "p50 {p50}");
        let p99 = first.p99_ms.unwrap();
        assert!((900..=1_125).contains(&p99), "p99 {p99}");
        assert_eq!((second.calls, second.p50_ms), (1, Some(3)));
        assert_eq!(History::new(at(0), Condition::Online).view(at(5)).first().map(|m| m.p50_ms), Some(None));
    }

    #[test]
    fn conditions_follow_status_breaker_and_health() {
        use BreakerState::*;
        assert_eq!(Condition::of(Status::Online, Closed, false), Condition::Online);
        assert_eq!(Condition::of(Status::Online, Open, false), Condition::Degraded);
        assert_eq!(Condition::of(Status::Online, Closed, true), Condition::Degraded);
        assert_eq!(Condition::of(Status::Dormant, Closed, false), Condition::Dormant);
        assert_eq!(Condition::of(Status::RequiresReauth, Closed, false), Condition::Offline);
        assert_eq!(Condition::of(Status::PermanentlyFailed, Closed, false), Condition::Failed);
        assert_eq!(latency_bound_ms(0), 1);
        assert!(latency_bound_ms(LATENCY_BINS - 1) > 20 * 60_000);
        for ms in [0, 1, 2, 7, 100, 5_000, 10_000_000] {
            let bin = latency_bin(ms);
            assert!(ms <= latency_bound_ms(bin) || bin == LATENCY_BINS - 1);
            assert!(bin == 0 || ms > latency_bound_ms(bin - 1), "{ms} in bin {bin}");
        }
    }
}
