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
use tether_host::oauth::store::StoreHealth;

use crate::serve::byte_queue as queue;

/// Events kept for a new `/events` stream (and `Last-Event-ID`).
const KEPT_EVENTS: usize = 64;

/// Bytes queued for one `/events` subscriber before it counts as too slow: its
/// connection is closed (it may come back with `Last-Event-ID`). A new
/// subscriber's replay of the kept events takes half of it at most.
pub(super) const EVENTS_QUEUE_BYTES: usize = 256 * 1024;

/// What `/readyz` says: ready unless draining or waiting for a vital backend.
pub struct Readiness {
    /// The replica is draining (asked to stop): the balancer should send it nothing new.
    pub draining: bool,
    /// The vital backends not online.
    pub waiting_for: Vec<String>,
}

/// A question for the host loop, answered from the engine's state then.
pub enum Query {
    /// `/status` as JSON text.
    Status(Sender<String>),
    /// `/metrics` as Prometheus text.
    Metrics(Sender<String>),
    /// `/readyz`.
    Ready(Sender<Readiness>),
    /// An admin action; `Err` names what is wrong (an unknown backend).
    Admin(AdminCommand, Sender<Result<(), String>>),
    /// The last lines of a backend's recent log; `Err` for an unknown backend.
    Logs(String, usize, Sender<Result<Vec<tether_core::LogLine>, String>>),
}

/// What the status endpoints need from the host: a way to ask it questions and
/// the event log it keeps. The host hands it to the HTTP server, so the server
/// never depends on the host.
#[derive(Clone)]
pub struct StatusHandle {
    /// Answered by the host loop between inputs.
    pub queries: Sender<Query>,
    /// Every event the core emitted, the last ones kept.
    pub events: std::sync::Arc<EventLog>,
}

/// The event log `/events` serves: the last events with their sequence
/// numbers, and the streams waiting for new ones (each bounded in bytes).
#[derive(Default)]
pub struct EventLog {
    inner: Mutex<LogInner>,
}

#[derive(Default)]
struct LogInner {
    next_seq: u64,
    kept: VecDeque<(u64, Bytes)>,
    streams: Vec<queue::Sender>,
}

impl EventLog {
    /// Logs `event` (already redacted by the core) at `at_ms`, and sends it to
    /// every open stream; streams whose client left, or fell too far behind
    /// (and is disconnected), are dropped.
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
        log.streams.retain(|s| s.push(text.clone()).is_ok());
    }

    /// A new stream: `first`, the kept events after `last_seen` (all when
    /// `None`, the newest that fill half its queue at most), then every new one.
    pub(crate) fn subscribe(&self, last_seen: Option<u64>, first: Bytes) -> queue::Receiver {
        let (tx, rx) = queue::channel(EVENTS_QUEUE_BYTES);
        let _ = tx.push(first);
        let mut log = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut room = EVENTS_QUEUE_BYTES / 2;
        let mut replay = Vec::new();
        for (seq, text) in log.kept.iter().rev() {
            if last_seen.is_some_and(|last| *seq <= last) || text.len() > room {
                break;
            }
            room -= text.len();
            replay.push(text.clone());
        }
        for text in replay.into_iter().rev() {
            let _ = tx.push(text);
        }
        log.streams.push(tx);
        rx
    }
}

/// `/status`: the gateway and every backend, by name (the same document the
/// control channel serves).
pub(super) fn status_json(gw: &Gateway, uptime_ms: u64, store: Option<StoreHealth>) -> String {
    let mut document = tether_host::status_document::document(gw, uptime_ms);
    if let (Some(store), Some(fields)) = (store, document.as_object_mut()) {
        // Replicas sharing credentials: whether the store answers (calls go on
        // with the tokens in hand while it does not).
        fields.insert("credential_store".into(), serde_json::to_value(store).unwrap_or_default());
    }
    document.to_string()
}

/// The numbers of one scrape, taken from the engine at once.
#[derive(Debug)]
struct Scrape {
    backends: Vec<(BackendStatus, BackendMetrics)>,
    sessions: u64,
    in_flight: u64,
}

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
            // Every status, 1 for the current one.
            for candidate in Status::ALL {
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
pub(super) fn metrics_text(gw: &Gateway) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: usize) -> Event {
        Event::ServerDisconnected { server: format!("backend-{n}").as_str().into(), intentional: n % 2 == 0 }
    }

    #[test]
    fn a_subscriber_gets_the_kept_events_then_new_ones() {
        let log = EventLog::default();
        log.push(1, &event(0));
        let rx = log.subscribe(None, Bytes::from_static(b": hi\n\n"));
        log.push(2, &event(1));
        let got: Vec<Bytes> = std::iter::from_fn(|| rx.try_next()).collect();
        assert_eq!(got.len(), 3);
        assert!(got[1].starts_with(b"id: 0\n") && got[2].starts_with(b"id: 1\n"));
        let later = log.subscribe(Some(0), Bytes::new());
        assert_eq!(std::iter::from_fn(|| later.try_next()).count(), 2, "after Last-Event-ID 0: the priming and 1");
    }

    #[test]
    fn a_new_subscriber_gets_only_the_newest_kept_events_that_fit_its_queue() {
        let log = EventLog::default();
        let big =
            |n: usize| Event::ServerDisconnected { server: "b".repeat(8000 + n).as_str().into(), intentional: false };
        for n in 0..KEPT_EVENTS {
            log.push(n as u64, &big(n));
        }
        let (closer, closed) = queue::Closer::new();
        let rx = log.subscribe(None, Bytes::new());
        rx.bind(closer);
        assert!(!closed.is_closed(), "subscribing never overflows");
        let got: Vec<Bytes> = std::iter::from_fn(|| rx.try_next()).skip(1).collect();
        assert!(!got.is_empty() && got.len() < KEPT_EVENTS, "{} replayed", got.len());
        assert!(got.last().unwrap().starts_with(format!("id: {}\n", KEPT_EVENTS - 1).as_bytes()), "the newest last");
    }

    #[test]
    fn a_subscriber_that_does_not_read_is_disconnected_and_forgotten() {
        let log = EventLog::default();
        let (closer, closed) = queue::Closer::new();
        let stalled = log.subscribe(None, Bytes::new());
        stalled.bind(closer);
        let reader = log.subscribe(None, Bytes::new());
        let mut read = 0;
        for n in 0..EVENTS_QUEUE_BYTES / 50 {
            log.push(n as u64, &event(n));
            read += std::iter::from_fn(|| reader.try_next()).count();
        }
        assert!(closed.is_closed(), "its connection is told to close");
        assert!(stalled.is_closed(), "its stream failed");
        assert!(stalled.try_next().is_none(), "nothing stays queued for it");
        assert_eq!(log.inner.lock().unwrap().streams.len(), 1, "only the reader is still sent events");
        assert_eq!(read, 1 + EVENTS_QUEUE_BYTES / 50, "the reader got its first bytes and every event");
    }
}
