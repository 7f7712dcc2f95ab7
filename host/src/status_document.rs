//! The `/status` document, the same from every runtime and every way of asking
//! (HTTP `/status`, the control channel): the gateway, and every backend's
//! status row with its calls and recent latencies. `tether status` renders it.

use serde_json::{json, Value};
use tether_core::metrics::BackendMetrics;
use tether_core::{BackendStatus, Gateway};

/// One backend's row of `/status`: the core's status row, with its calls and
/// recent latencies.
fn backend_json(s: &BackendStatus, m: Option<&BackendMetrics>) -> Value {
    let default = BackendMetrics::default();
    let m = m.unwrap_or(&default);
    let mut row = s.to_json();
    row["calls"] = json!({"ok": m.calls_ok, "error": m.calls_error, "failed": m.calls_failed});
    row["latency_ms"] = json!(m.recent_latency_ms);
    row
}

/// The document: the gateway and every backend, by name.
pub fn document(gw: &Gateway, uptime_ms: u64) -> Value {
    let backends: Vec<Value> = gw.statuses().iter().map(|s| backend_json(s, gw.metrics(&s.server))).collect();
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
