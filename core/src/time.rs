//! The core's own clock types: milliseconds on a monotonic clock the host owns.
//!
//! The core never reads a clock. Every input carries `now`, and every deadline the
//! core hands back is an [`Instant`] on the same scale, so a trace replays exactly.

use core::fmt;
use core::ops::{Add, Sub};
use serde::{Deserialize, Serialize};

/// A point on the host's monotonic clock, in milliseconds since an arbitrary origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Instant(u64);

/// A span of time in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Duration(u64);

impl Instant {
    /// The origin of the clock.
    pub const ZERO: Instant = Instant(0);

    /// An instant `ms` milliseconds after the origin.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms)
    }

    /// Milliseconds since the origin.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

/// The earlier of two optional deadlines (`None`: no deadline).
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration(0);

    /// A duration of `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms)
    }

    /// A duration of `s` seconds.
    pub const fn from_secs(s: u64) -> Self {
        Duration(s.saturating_mul(1000))
    }

    /// The duration in milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.0
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d.0))
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// Days since 1970-01-01 as a (proleptic Gregorian) `(year, month, day)`, by
/// Howard Hinnant's `civil_from_days`: hosts stamp files with it, the engine
/// its task timestamps.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `unix_ms` (milliseconds since 1970-01-01 UTC) as an RFC 3339 timestamp,
/// `2026-11-27T12:05:45.123Z`: what MCP's task timestamps are.
pub fn rfc3339(unix_ms: u64) -> alloc::string::String {
    let (days, ms_of_day) = (unix_ms / 86_400_000, unix_ms % 86_400_000);
    let (year, month, day) = civil_from_days(days as i64);
    let (h, m, s, ms) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    alloc::format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{ms:03}Z")
}

/// The wall clock as the host last told it (`Input::WallClock`): the engine's
/// own clock only counts from an arbitrary start, and task timestamps are
/// wall-clock times.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WallClock {
    /// `(engine time, ms since the Unix epoch)` when the host told it.
    anchor: Option<(Instant, u64)>,
}

impl WallClock {
    /// At engine time `now` it was `unix_ms`.
    pub(crate) fn set(&mut self, now: Instant, unix_ms: u64) {
        self.anchor = Some((now, unix_ms));
    }

    /// The wall-clock time (ms since the Unix epoch) at engine time `at`; the
    /// engine time itself until the host told the wall clock.
    pub(crate) fn unix_ms(&self, at: Instant) -> u64 {
        match self.anchor {
            Some((anchor, unix_ms)) => unix_ms.saturating_add(at.saturating_since(anchor).as_millis()),
            None => at.as_millis(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{rfc3339, Instant, WallClock};

    #[test]
    fn the_wall_clock_runs_from_what_the_host_said() {
        let mut clock = WallClock::default();
        assert_eq!(clock.unix_ms(Instant::from_millis(250)), 250, "untold: engine time");
        clock.set(Instant::from_millis(1_000), 1_795_781_145_000);
        assert_eq!(clock.unix_ms(Instant::from_millis(1_123)), 1_795_781_145_123);
        assert_eq!(clock.unix_ms(Instant::from_millis(500)), 1_795_781_145_000, "never before it was told");
    }

    #[test]
    fn unix_milliseconds_read_as_utc_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_781_145_123), "2026-11-27T12:05:45.123Z");
        assert_eq!(rfc3339(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }
}
