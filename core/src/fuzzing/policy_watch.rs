//! The policy numbers, checked by the generic drivers against the config they
//! generated, so a change to how the engine applies them fails fuzzing and
//! stress as well as the scenario that pins it:
//! - a call retried after a retryable transport failure is not sent again
//!   before the configured wait for that retry, and is retried at most as many
//!   times as there are waits;
//! - a remote backend's reconnect is scheduled within the jitter band of its
//!   attempt's backoff (`initial × multiplier^(attempt-1)`, capped, ± jitter);
//! - a crashed process's restart is scheduled after the delay of the restart
//!   table for its crash count, or at once when it had run long enough.
//!
//! The expected numbers are computed here from the config, not by the engine's
//! policy code, so a mistake there is seen too.

use alloc::collections::BTreeMap;
use alloc::format;

use super::peek::{CallParams, Envelope};
use super::Violation;
use crate::gateway::Gateway;
use crate::io::{Generation, ServerName, Status};
use crate::policy::Failure;

/// A client call the drivers tagged (`arguments.n`) as it passes to a backend.
#[derive(Clone, Default)]
struct CallTrack {
    /// Retryable transport failures so far (each should be followed by one retry).
    failures: usize,
    /// When the last one happened, while its retry has not been sent.
    failed_at: Option<u64>,
}

/// What the checks remember between inputs.
#[derive(Clone, Default)]
pub(super) struct PolicyWatch {
    /// Backend request ids of tagged calls in flight: (server, id) → tag.
    sent: BTreeMap<(ServerName, u64), u64>,
    /// Per tag.
    calls: BTreeMap<u64, CallTrack>,
    /// When each backend's current process or connection started.
    started: BTreeMap<ServerName, (Generation, u64)>,
    /// The last reconnect schedule seen per backend: (attempt, due at).
    scheduled: BTreeMap<ServerName, (u32, u64)>,
}

/// A call's tag: the `n` the drivers put in its arguments.
fn tag(frame: &str) -> Option<u64> {
    if !frame.contains("\"n\":") {
        return None;
    }
    let params = Envelope::read(frame).ok()?.params?;
    let arguments = serde_json::from_str::<CallParams<'_>>(params.get()).ok()?.arguments?;
    let value: serde_json::Value = serde_json::from_str(arguments.get()).ok()?;
    value.get("n")?.as_u64()
}

impl PolicyWatch {
    /// A process was spawned or a connection begun.
    pub(super) fn started(&mut self, server: &ServerName, generation: Generation, now: u64) {
        self.started.insert(server.clone(), (generation, now));
        // Requests of the connection before are gone with it: a failure reported
        // for one later (a stale report) is no failure of a call in flight.
        self.sent.retain(|(s, _), _| s != server);
    }

    /// A request went to a backend: a tagged call's retry must respect its wait.
    pub(super) fn sent(
        &mut self,
        gw: &Gateway,
        server: &ServerName,
        id: u64,
        frame: &str,
        now: u64,
    ) -> Result<(), Violation> {
        let Some(n) = tag(frame) else { return Ok(()) };
        self.sent.insert((server.clone(), id), n);
        let track = self.calls.entry(n).or_default();
        let Some(failed_at) = track.failed_at.take() else { return Ok(()) };
        let waits = &gw.config().policy_for(server).call_retry_delays_ms;
        let Some(wait) = waits.get(track.failures - 1) else {
            return Err(format!(
                "{server}: call {n} sent again after {} retryable failures; only {} retries are configured",
                track.failures,
                waits.len()
            ));
        };
        if now < failed_at + wait {
            return Err(format!(
                "{server}: call {n} retried {} ms after its failure; retry {} waits {wait} ms",
                now - failed_at,
                track.failures
            ));
        }
        Ok(())
    }

    /// The tag of the call sent to `server` under request `id`, if it had one.
    pub(super) fn tag_of(&self, server: &str, id: u64) -> Option<u64> {
        self.sent.get(&(ServerName::from(server), id)).copied()
    }

    /// A backend request failed in transport.
    pub(super) fn failed(&mut self, server: &ServerName, id: u64, failure: &Failure, now: u64) {
        let Some(n) = self.sent.remove(&(server.clone(), id)) else { return };
        if failure.classify().retryable {
            let track = self.calls.entry(n).or_default();
            track.failures += 1;
            track.failed_at = Some(now);
        }
    }

    /// After each input: every reconnect newly scheduled is within its band.
    pub(super) fn check_reconnects(&mut self, gw: &Gateway, servers: &[&str], now: u64) -> Result<(), Violation> {
        for &server in servers {
            let Some(status) = gw.status(server) else { continue };
            let waiting = matches!(status.status, Status::Offline | Status::Error) && status.transport != "stdio";
            let (Some(wait), true, attempt @ 1..) = (status.next_retry_ms, waiting, status.reconnect_attempt) else {
                self.scheduled.remove(server);
                continue;
            };
            let schedule = (attempt, now + wait);
            if self.scheduled.insert(server.into(), schedule).is_some_and(|seen| seen.0 == attempt) {
                continue;
            }
            let policy = gw.config().policy_for(server);
            let factor = u64::from(policy.reconnect_multiplier).saturating_pow(attempt - 1);
            let base = policy.reconnect_initial_ms.saturating_mul(factor).min(policy.reconnect_max_ms);
            let spread = base / 100 * u64::from(policy.reconnect_jitter_percent.min(100));
            let (low, high) = (base - spread, base.saturating_add(spread + 1));
            if wait < low || wait > high {
                return Err(format!(
                    "{server}: reconnect attempt {attempt} scheduled in {wait} ms, outside {low}..={high} ms \
                     (backoff {base} ms ± {}%)",
                    policy.reconnect_jitter_percent
                ));
            }
        }
        Ok(())
    }

    /// After a live process exited: its restart is scheduled by the restart table.
    pub(super) fn check_restart(&self, gw: &Gateway, server: &ServerName, now: u64) -> Result<(), Violation> {
        let Some(status) = gw.status(server) else { return Ok(()) };
        let (Status::Error, Some(wait)) = (status.status, status.next_retry_ms) else { return Ok(()) };
        let Some(&(_, started)) = self.started.get(server) else { return Ok(()) };
        let policy = gw.config().policy_for(server);
        let delays = &policy.restart_delays_ms;
        let expected = if now - started > policy.restart_immediately_after_ms || delays.is_empty() {
            0
        } else {
            let crashes = usize::from(status.crashes_in_window.max(1));
            delays[(crashes - 1).min(delays.len() - 1)]
        };
        if wait != expected {
            let ran = now - started;
            let crashes = status.crashes_in_window;
            return Err(format!(
                "{server}: restart scheduled in {wait} ms after crash {crashes} (ran {ran} ms); the table says {expected} ms"
            ));
        }
        Ok(())
    }
}
