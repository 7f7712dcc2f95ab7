//! What operators see of a running tether: `/status` (JSON), `/metrics`
//! (Prometheus), `/readyz`, and the event log `/events` streams. The host loop
//! answers queries from the engine's state at the moment they arrive; this
//! module only renders what the core decided and counted.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use async_channel::Sender;
use hyper::body::Bytes;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use tether_core::metrics::{BackendMetrics, LATENCY_BUCKETS_MS};
use tether_core::{AdminCommand, BackendStatus, Event, Gateway, Status};

/// Events kept for a new `/events` stream (and `Last-Event-ID`).
const KEPT_EVENTS: usize = 64;

/// A question for the host loop, answered from the engine's state then.
pub enum Query {
    /// `/status` as JSON text.
    Status(Sender<String>),
    /// `/metrics` as Prometheus text.
    Metrics(Sender<String>),
    /// `/readyz`: the vital backends not online (empty: ready).
    Ready(Sender<Vec<String>>),
    /// An admin action; `Err` names what is wrong (an unknown backend).
    Admin(AdminCommand, Sender<Result<(), String>>),
}

/// The event log `/events` serves: the last events with their sequence
/// numbers, and the streams waiting for new ones.
#[derive(Default)]
pub struct EventLog {
    inner: Mutex<LogInner>,
}

#[derive(Default)]
struct LogInner {
    next_seq: u64,
    kept: VecDeque<(u64, Bytes)>,
    streams: Vec<Sender<Bytes>>,
}

impl EventLog {
    /// Logs `event` (already redacted by the core) at `at_ms`, and sends it to
    /// every open stream; streams whose client left are dropped.
    pub fn push(&self, at_ms: u64, event: &Event) {
        let mut log = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = log.next_seq;
        log.next_seq += 1;
        let mut data = serde_json::to_value(event).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut data {
            map.insert("seq".into(), json!(seq));
            map.insert("at_ms".into(), json!(at_ms));
        }
        let text = Bytes::from(format!("id: {seq}\nevent: tether\ndata: {data}\n\n"));
        if log.kept.len() == KEPT_EVENTS {
            log.kept.pop_front();
        }
        log.kept.push_back((seq, text.clone()));
        log.streams.retain(|s| s.try_send(text.clone()).is_ok());
    }

    /// A new stream: the kept events after `last_seen` (all when `None`), then
    /// every new one.
    pub fn subscribe(&self, last_seen: Option<u64>) -> async_channel::Receiver<Bytes> {
        let (tx, rx) = async_channel::bounded(1024);
        let mut log = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for (seq, text) in &log.kept {
            if last_seen.map_or(true, |last| *seq > last) {
                let _ = tx.try_send(text.clone());
            }
        }
        log.streams.push(tx);
        rx
    }
}

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

/// `/status`: the gateway and every backend, by name.
pub fn status_json(gw: &Gateway, uptime_ms: u64) -> String {
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
    .to_string()
}

/// The numbers of one scrape, taken from the engine at once.
#[derive(Debug)]
struct Scrape {
    backends: Vec<(BackendStatus, BackendMetrics)>,
    sessions: u64,
    in_flight: u64,
}

/// Every status, for the `tether_backend_status` gauge (1 for the current one).
const STATUSES: [Status; 11] = [
    Status::Provisioning,
    Status::Connecting,
    Status::DiscoveringTools,
    Status::Online,
    Status::Dormant,
    Status::Restarting,
    Status::Offline,
    Status::Error,
    Status::RequiresReauth,
    Status::PermanentlyFailed,
    Status::Disconnected,
];

impl Scrape {
    /// One counter per backend, `value` read from its metrics.
    fn counter(
        &self,
        encoder: &mut DescriptorEncoder<'_>,
        name: &str,
        help: &str,
        value: impl Fn(&BackendMetrics) -> u64,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (s, m) in &self.backends {
            ConstCounter::new(value(m)).encode(family.encode_family(&[("server", s.server.as_str())])?)?;
        }
        Ok(())
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut calls = encoder.encode_descriptor(
            "tether_calls",
            "Client calls by backend and outcome (ok: a result; error: the backend's error; failed: no answer: timeout, lost connection, refused)",
            None,
            MetricType::Counter,
        )?;
        for (s, m) in &self.backends {
            for (outcome, n) in [("ok", m.calls_ok), ("error", m.calls_error), ("failed", m.calls_failed)] {
                let labels = [("server", s.server.as_str()), ("outcome", outcome)];
                ConstCounter::new(n).encode(calls.encode_family(&labels)?)?;
            }
        }
        let mut latency = encoder.encode_descriptor(
            "tether_call_latency_seconds",
            "Client call latency as the client saw it (from its request to its answer)",
            None,
            MetricType::Histogram,
        )?;
        for (s, m) in &self.backends {
            let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_MS
                .iter()
                .map(|b| *b as f64 / 1000.0)
                .chain([f64::MAX])
                .zip(m.latency_buckets.iter().copied())
                .collect();
            latency
                .encode_family(&[("server", s.server.as_str())])?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    m.latency_sum_ms as f64 / 1000.0,
                    m.calls(),
                    &buckets,
                    None,
                )?;
        }
        self.counter(&mut encoder, "tether_backend_restarts", "Stdio processes started again", |m| m.restarts)?;
        self.counter(&mut encoder, "tether_backend_reconnects", "HTTP connections opened again", |m| m.reconnects)?;
        self.counter(&mut encoder, "tether_backend_disconnects", "Connections lost (not closed on purpose)", |m| {
            m.disconnects
        })?;
        self.counter(&mut encoder, "tether_breaker_opened", "Circuit breaker transitions to open", |m| {
            m.breaker_opened
        })?;
        self.counter(&mut encoder, "tether_breaker_closed", "Circuit breaker transitions back to closed", |m| {
            m.breaker_closed
        })?;
        let mut status = encoder.encode_descriptor(
            "tether_backend_status",
            "1 for the backend's current status, 0 for the others",
            None,
            MetricType::Gauge,
        )?;
        for (s, _) in &self.backends {
            for candidate in STATUSES {
                let labels = [("server", s.server.as_str()), ("status", candidate.as_str())];
                ConstGauge::new(i64::from(s.status == candidate)).encode(status.encode_family(&labels)?)?;
            }
        }
        let gauge = |encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64| {
            ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?)
        };
        gauge(&mut encoder, "tether_client_requests_in_flight", "Client requests not answered yet", self.in_flight)?;
        gauge(&mut encoder, "tether_client_sessions", "Client sessions open", self.sessions)?;
        Ok(())
    }
}

/// `/metrics` in the Prometheus text format (OpenMetrics flavour).
pub fn metrics_text(gw: &Gateway) -> String {
    let scrape = Scrape {
        backends: gw
            .statuses()
            .into_iter()
            .map(|s| {
                let m = gw.metrics(&s.server).cloned().unwrap_or_default();
                (s, m)
            })
            .collect(),
        sessions: gw.session_count() as u64,
        in_flight: gw.client_requests_in_flight() as u64,
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
        tracing::error!("the metrics could not be encoded");
    }
    text
}
