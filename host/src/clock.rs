//! The monotonic clock a host measures the core's [`Instant`]s on.

use std::time::Duration;

use tether_core::Instant;

/// Milliseconds since the host started, as the core counts time.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: std::time::Instant,
}

impl Clock {
    /// A clock starting now.
    pub fn start() -> Clock {
        Clock { origin: std::time::Instant::now() }
    }

    /// Milliseconds since the start.
    pub fn now(&self) -> Instant {
        Instant::from_millis(self.origin.elapsed().as_millis() as u64)
    }

    /// What the engine is told of the wall clock at start (task timestamps are
    /// wall-clock times; the engine reads no clock).
    pub fn wall_clock() -> tether_core::Input {
        let unix_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        tether_core::Input::WallClock { unix_ms }
    }

    /// The wall-clock instant of a core `Instant`.
    pub fn at(&self, t: Instant) -> std::time::Instant {
        self.origin + Duration::from_millis(t.as_millis())
    }
}
