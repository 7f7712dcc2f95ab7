//! The backend side on its own: a harness gives it backends and a context,
//! and reads what it put in the outbox.

use super::*;
use crate::catalog::Catalog;
use crate::config::Config;
use crate::config::{Policy, ServerConfig};
use crate::gateway::backend::Backend;
use crate::gateway::backends::Backends;
use crate::gateway::calls::ClientCall;
use crate::gateway::cx::{Out, Outbox};
use crate::gateway::router::Router;
use crate::gateway::sessions::Sessions;
use crate::io::SessionId;
use crate::policy::Failure;
use crate::rng::Rng;
use crate::secret_ids::SecretIds;
use crate::supervisor::Supervisor;

struct Harness {
    backends: Backends,
    actions: alloc::collections::VecDeque<Action>,
    out: Outbox,
    router: Router,
    rng: Rng,
    config: Config,
    catalog: Catalog,
    sessions: Sessions,
    redactor: Redactor,
    ids: SecretIds,
    now: Instant,
}

impl Harness {
    /// One online stdio backend `a` on its first connection.
    fn new() -> Self {
        let mut h = Harness {
            backends: Backends::default(),
            actions: Default::default(),
            out: Outbox::default(),
            router: Router::default(),
            rng: Rng::new(7),
            config: Config::default(),
            catalog: Catalog::new("__"),
            sessions: Sessions::default(),
            redactor: Redactor::default(),
            ids: SecretIds::from_seed(7),
            now: Instant::from_millis(1_000),
        };
        let mut sup = Supervisor::new(true, false, Policy::default(), Instant::ZERO);
        sup.begin_connect(h.now);
        sup.on_handshake(h.now, false, &mut h.rng);
        sup.on_discovered(h.now, &mut h.rng);
        h.backends.insert("a".into(), Backend::new(ServerConfig::stdio("x", &[]), sup));
        h
    }

    fn run<R>(&mut self, f: impl FnOnce(&mut Backends, &mut Cx<'_>) -> R) -> R {
        let mut cx = Cx {
            actions: &mut self.actions,
            out: &mut self.out,
            router: &mut self.router,
            now: self.now,
            rng: &mut self.rng,
            ids: &mut self.ids,
            config: &self.config,
            catalog: &mut self.catalog,
            sessions: &self.sessions,
            log_level: None,
            redactor: &self.redactor,
            wall_clock: Default::default(),
        };
        f(&mut self.backends, &mut cx)
    }

    /// What the part did, in order: the actions that went straight to the
    /// queue, then the outbox.
    fn drain(&mut self) -> Vec<Out> {
        let direct = self.actions.drain(..).map(Out::Action);
        direct.chain(core::mem::take(&mut self.out.0)).collect()
    }

    /// The methods of the frames sent to backends, in order.
    fn sent(items: &[Out]) -> Vec<String> {
        items
            .iter()
            .filter_map(|o| match o {
                Out::Action(Action::SendToBackend { frame, .. }) => {
                    let v: Value = serde_json::from_str(frame).ok()?;
                    v["method"].as_str().map(String::from)
                }
                _ => None,
            })
            .collect()
    }
}

#[test]
fn the_outbox_keeps_the_order_and_an_event_is_noted_at_its_backend_at_once() {
    let mut h = Harness::new();
    h.run(|b, cx| {
        b.announce_reconnect(cx, "a", 1, 500);
        cx.push(Action::CloseClient { session: SessionId(1) });
    });
    let items = h.drain();
    assert!(matches!(&items[..], [Out::Event(Event::ServerReconnecting { attempt: 1, .. }), Out::Action(_)]));
    let log = h.backends["a"].recent.last(5);
    assert!(log.iter().any(|l| l.text.contains("reconnect")), "{log:?}");
}

#[test]
fn reconnect_announcements_are_throttled_after_the_first_ten_within_the_interval() {
    let mut h = Harness::new();
    for attempt in 1..=12 {
        h.run(|b, cx| b.announce_reconnect(cx, "a", attempt, 1_000));
    }
    assert_eq!(h.drain().len(), 10, "attempts 11 and 12 come within the interval");
    h.now = h.now + Duration::from_millis(RECONNECT_EVENT_INTERVAL_MS);
    h.run(|b, cx| b.announce_reconnect(cx, "a", 13, 1_000));
    assert_eq!(h.drain().len(), 1);
}

#[test]
fn a_health_check_is_a_ping_until_the_backend_says_it_has_none_then_a_tools_list() {
    let mut h = Harness::new();
    h.run(|b, cx| b.health_check(cx, "a"));
    let items = h.drain();
    assert_eq!(Harness::sent(&items), ["ping"]);
    let (id, call) = h.router.calls.iter().next().map(|(id, c)| (*id, c.clone())).expect("a call");
    assert!(matches!(call.kind, CallKind::Health));
    assert_eq!(call.deadline, Some(h.now + Duration::from_millis(Policy::default().health_timeout_ms)));
    h.router.calls.remove(&id);
    let not_found = r#"{"code":-32601,"message":"method not found"}"#;
    h.run(|b, cx| b.health_answer(cx, "a", Err(not_found)));
    assert!(h.backends["a"].ping_unsupported);
    assert!(h.drain().is_empty(), "method not found is no failure of health");
    h.run(|b, cx| b.health_check(cx, "a"));
    assert_eq!(Harness::sent(&h.drain()), ["tools/list"]);
}

#[test]
fn a_lost_connection_answers_a_call_it_may_not_resend_with_an_error_then_releases_it() {
    let mut h = Harness::new();
    let generation = h.backends["a"].sup.generation();
    // Already resent once: it is not sent a second time.
    let call = ClientCall { resent: true, ..ClientCall::for_test(1, "7") };
    let id = h.router.alloc_id();
    h.router.calls.insert(id, Call { server: "a".into(), generation, deadline: None, kind: CallKind::Client(call) });
    h.run(|b, cx| b.connection_lost(cx, "a", Failure::Reset));
    assert!(h.router.calls.is_empty());
    let items = h.drain();
    let error =
        items.iter().position(|o| matches!(o, Out::ReplyError { session: SessionId(1), id, .. } if id.as_str() == "7"));
    let release = items.iter().position(|o| matches!(o, Out::Release { session: SessionId(1), .. }));
    assert!(error.is_some() && release.is_some() && error < release, "{items:?}");
    assert!(items.iter().any(|o| matches!(o, Out::Event(Event::ServerDisconnected { intentional: false, .. }))));
    assert_eq!(h.backends["a"].metrics.disconnects, 1, "counted when emitted");
}

#[test]
fn a_dispatched_call_is_in_flight_with_its_deadline_and_sent_under_a_fresh_id() {
    let mut h = Harness::new();
    let call = ClientCall::for_test(1, "7");
    h.run(|b, cx| b.dispatch(cx, "a", call));
    let (id, deadline) = h.router.calls.iter().next().map(|(id, c)| (*id, c.deadline)).expect("in flight");
    assert_eq!(deadline, Some(h.now + Duration::from_millis(Policy::default().request_timeout_ms)));
    let items = h.drain();
    let [Out::Action(Action::SendToBackend { frame, request, .. })] = &items[..] else { panic!("{items:?}") };
    assert_eq!(*request, Some(id));
    let v: Value = serde_json::from_str(frame).expect("JSON");
    assert_eq!((v["id"].as_u64(), v["method"].as_str()), (Some(id), Some("tools/call")));
}
