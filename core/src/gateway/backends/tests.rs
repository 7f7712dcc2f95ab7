//! The questions asked of the backends together, each on its own.

use super::*;
use crate::config::{Policy, ServerConfig};
use crate::protocol::CacheHint;
use crate::supervisor::Supervisor;
use serde_json::json;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn backend(status: Status) -> Backend {
    let mut sup = Supervisor::new(true, false, Policy::default(), at(0));
    sup.set_status(status, None);
    Backend::new(ServerConfig::stdio("x", &[]), sup)
}

fn with(list: &[(&str, Backend)]) -> Backends {
    let mut backends = Backends::default();
    for (name, b) in list {
        backends.insert((*name).into(), b.clone());
    }
    backends
}

#[test]
fn lists_are_cached_as_long_as_the_shortest_part_and_public_only_if_every_part_is() {
    let mut a = backend(Status::Online);
    a.capabilities = json!({"tools": {}}).as_object().cloned().unwrap_or_default();
    a.cache[ListKind::Tools as usize] = CacheHint { ttl_ms: 60_000, public: true };
    let mut b = backend(Status::Dormant);
    b.capabilities = a.capabilities.clone();
    b.cache[ListKind::Tools as usize] = CacheHint { ttl_ms: 5_000, public: false };
    // A backend without the list's capability has no say in it.
    let c = backend(Status::Online);
    let both = with(&[("a", a.clone()), ("b", b), ("c", c)]);
    assert_eq!(both.cache_hint(ListKind::Tools), CacheHint { ttl_ms: 5_000, public: false });
    assert_eq!(with(&[("a", a.clone())]).cache_hint(ListKind::Tools), CacheHint { ttl_ms: 60_000, public: true });
    // One on its way up or down may change the list at any moment.
    let starting = with(&[("a", a), ("s", backend(Status::Connecting))]);
    assert_eq!(starting.cache_hint(ListKind::Tools), CacheHint::STALE);
    assert_eq!(Backends::default().cache_hint(ListKind::Tools), CacheHint::STALE);
}

#[test]
fn lists_wait_for_a_backend_connecting_only_within_the_window_and_never_for_a_disabled_one() {
    let mut b = backend(Status::Connecting);
    b.connect_started_at = Some(at(1_000));
    b.first_connect_at = Some(at(1_000));
    let backends = with(&[("b", b.clone())]);
    assert!(backends.connection_pending(at(1_499), 500));
    assert!(!backends.connection_pending(at(1_500), 500));
    assert!(backends.first_discovery_pending(at(1_499), 500));
    b.catalog_discovered = true;
    assert!(!with(&[("b", b.clone())]).first_discovery_pending(at(1_000), 500), "its tools came once already");
    b.config.disabled = true;
    assert!(!with(&[("b", b)]).connection_pending(at(1_000), 500));
}

#[test]
fn catalog_room_is_the_own_bound_or_what_the_others_leave_of_the_total() {
    let limits = Limits { max_catalog_bytes: 1_000, max_total_catalog_bytes: 2_500, ..Limits::default() };
    let mut a = backend(Status::Online);
    a.catalog_bytes = [400, 100, 0, 100];
    let mut b = backend(Status::Online);
    b.catalog_bytes = [1_000, 0, 0, 0];
    let backends = with(&[("a", a), ("b", b)]);
    // Re-listing everything of `a`: b's 1000 leave 1500, more than a's own bound.
    assert_eq!(backends.catalog_room("a", 0b1111, &limits), 1_000);
    // Re-listing only a's tools: its other lists (200) stay counted.
    let limits = Limits { max_total_catalog_bytes: 1_500, ..limits };
    assert_eq!(backends.catalog_room("a", kind_bit(ListKind::Tools), &limits), 300);
}

#[test]
fn tasks_run_at_a_backend_only_in_the_form_its_era_announces() {
    let mut handshake = backend(Status::Online);
    handshake.capabilities =
        json!({"tasks": {"requests": {"tools": {"call": {}}}}}).as_object().cloned().unwrap_or_default();
    let mut stateless = backend(Status::Online);
    stateless.era = Era::Stateless;
    stateless.capabilities = json!({"extensions": {EXTENSION: {}}}).as_object().cloned().unwrap_or_default();
    assert!(handshake.runs_tasks(Form::Experimental) && !handshake.runs_tasks(Form::Extension));
    assert!(stateless.runs_tasks(Form::Extension) && !stateless.runs_tasks(Form::Experimental));
    let backends = with(&[("h", handshake), ("s", stateless), ("n", backend(Status::Online))]);
    assert_ne!(backends.tasks_hash(|_| true), backends.tasks_hash(|s| s != "h"));
    assert_eq!(backends.tasks_hash(|s| s != "h"), Backends::default().tasks_hash(|_| true));
}

#[test]
fn a_stateless_backend_gets_the_per_request_meta_on_tethers_own_requests() {
    let mut s = backend(Status::Online);
    s.era = Era::Stateless;
    let backends = with(&[("h", backend(Status::Online)), ("s", s)]);
    assert_eq!(backends.request_frame("h", 3, "ping", None), r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
    let frame: Value = serde_json::from_str(&backends.request_frame("s", 3, "ping", None)).unwrap();
    assert!(frame["params"]["_meta"].is_object(), "{frame}");
}

#[test]
fn an_unavailable_backend_is_described_by_status_attempt_and_breaker() {
    let mut b = backend(Status::Offline);
    b.sup.set_status(Status::Offline, Some("exited with 1".into()));
    let backends = with(&[("b", b)]);
    let data: Value = serde_json::from_str(&backends.unavailable_data("b", at(0))).unwrap();
    assert_eq!(data["server"], "b");
    assert_eq!(data["status"], Status::Offline.as_str());
    assert_eq!(data["last_error"], "exited with 1");
    assert_eq!(data["breaker"], "closed");
    assert_eq!(backends.unavailable_data("gone", at(0)), "{}");
    assert!(backends.reauth_message("b").contains("update the `headers`"));
    assert!(!backends.available("b", at(0)) && !backends.available("gone", at(0)));
}

#[test]
fn an_input_is_current_only_for_the_live_connection_and_a_future_generation_is_an_error() {
    let mut b = backend(Status::Offline);
    let generation = b.sup.begin_connect(at(0));
    let mut backends = with(&[("b", b)]);
    assert_eq!(backends.current("b", generation), Ok(true));
    assert_eq!(backends.current("gone", generation), Ok(false));
    assert!(backends.current("b", Generation(generation.0 + 1)).is_err());
    backends.get_mut("b").expect("b").sup.begin_connect(at(1));
    assert_eq!(backends.current("b", generation), Ok(false), "a late report of the old connection");
}

#[test]
fn events_count_breaker_trips_and_unintended_disconnects_and_mark_the_uptime() {
    let mut backends = with(&[("b", backend(Status::Connecting))]);
    let server: ServerName = "b".into();
    let online = Event::ServerStatusChanged {
        server: server.clone(),
        from: Status::Connecting,
        to: Status::Online,
        message: None,
    };
    backends.count_event(&online, at(7));
    backends.count_event(&Event::CircuitClosed { server: server.clone() }, at(8));
    backends.count_event(&Event::ServerDisconnected { server: server.clone(), intentional: true }, at(9));
    let b = &backends["b"];
    assert_eq!((b.online_since, b.metrics.breaker_closed, b.metrics.disconnects), (Some(at(7)), 1, 0));
}
