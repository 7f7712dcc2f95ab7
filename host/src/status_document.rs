//! The `/status` document, the same from every runtime and every way of asking
//! (HTTP `/status`, the control channel): the gateway, and every backend's
//! status row with its calls, recent latencies and last hour. `tether status`
//! renders it; the status page draws the last hour as a timeline.

use serde_json::{json, Value};
use tether_core::history::{Condition, MinuteView, MINUTE_MS};
use tether_core::metrics::BackendMetrics;
use tether_core::{BackendStatus, Gateway};

/// One backend's row of `/status`: the core's status row, with its calls and
/// recent latencies.
fn backend_json(s: &BackendStatus, m: Option<&BackendMetrics>, history: &[MinuteView]) -> Value {
    let default = BackendMetrics::default();
    let m = m.unwrap_or(&default);
    let mut row = s.to_json();
    row["calls"] = json!({"ok": m.calls_ok, "error": m.calls_error, "failed": m.calls_failed});
    row["latency_ms"] = json!(m.recent_latency_ms);
    row["history"] = history_json(history);
    row
}

/// The last hour: `conditions` names the columns of each minute's `ms`; minutes
/// oldest first, `ago` 0 being the current one. Compact, since `/status` is polled:
/// about 60 bytes a minute.
fn history_json(history: &[MinuteView]) -> Value {
    let minutes: Vec<Value> = history
        .iter()
        .map(|m| {
            let mut minute = json!({"ago": m.ago, "ms": m.ms});
            if m.calls > 0 {
                minute["calls"] = json!(m.calls);
                minute["p50_ms"] = json!(m.p50_ms);
                minute["p99_ms"] = json!(m.p99_ms);
            }
            minute
        })
        .collect();
    let conditions: Vec<&str> = Condition::ALL.iter().map(|c| c.as_str()).collect();
    json!({"minute_ms": MINUTE_MS, "conditions": conditions, "minutes": minutes})
}

/// The document: the gateway and every backend, by name.
pub fn document(gw: &Gateway, uptime_ms: u64) -> Value {
    let backends: Vec<Value> = gw
        .statuses()
        .iter()
        .map(|s| backend_json(s, gw.metrics(&s.server), &gw.history(&s.server).unwrap_or_default()))
        .collect();
    json!({
        "tether": {
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_ms": uptime_ms,
            "sessions": gw.session_count(),
            "in_flight": gw.client_requests_in_flight(),
            "mode": gw.config().mode,
        },
        "backends": backends,
    })
}
