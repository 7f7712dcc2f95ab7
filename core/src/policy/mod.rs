//! Resilience policies as small value types with no knowledge of MCP.

pub mod backoff;
pub mod breaker;
pub mod classify;
pub mod crash_window;
pub mod health;

pub use backoff::Backoff;
pub use breaker::{Admission, BreakerState, BreakerTransition, CircuitBreaker};
pub use classify::{Delivery, Failure, FailureStatus};
pub use crash_window::{restart_delay, CrashWindow};
pub use health::{HealthChange, HealthTracker};
