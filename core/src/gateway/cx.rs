//! The context a part of the engine works in: the open requests, the clock,
//! the jitter and ids, the configuration, the catalog, the sessions (read
//! only), and an ordered outbox for what it sends, announces and answers.
//! The gateway builds it around a part's call and applies the outbox after.

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

use super::backends::Backends;
use super::calls::ClientCall;
use super::eras::EraBridge;
use super::router::Router;
use super::sessions::Sessions;
use super::tasks::TaskStore;
use crate::catalog::Catalog;
use crate::config::Config;
use crate::io::{Action, Event, RawId, ServerName, SessionId};
use crate::redact::Redactor;
use crate::rng::Rng;
use crate::secret_ids::SecretIds;
use crate::time::Instant;

/// What a part sends, announces and answers, in the order it did.
#[derive(Clone, Debug, Default)]
pub(super) struct Outbox(pub(super) Vec<Out>);

/// One item of an [`Outbox`].
#[derive(Clone, Debug)]
pub(super) enum Out {
    /// An action for the host.
    Action(Action),
    /// An event, already counted and logged by its backend: clients and the
    /// host are told of it when the outbox is emptied.
    Event(Event),
    /// An error answer to a client's request (redacted, and kept for a retry
    /// or a task as any answer is, when the outbox is emptied).
    ReplyError { session: SessionId, id: RawId, code: i64, message: String, data: Option<String> },
    /// A client's call is over: its id is free in its session.
    Release { session: SessionId, id: RawId },
    /// A call waiting for a stateless client's retry timed out (by `requestState`).
    InputExpired(String),
    /// An answer to a client's request (kept for a retry or a task as any answer is).
    Reply { session: SessionId, id: RawId, result: String },
    /// A whole answer frame to a client's request, owed to it.
    ReplyToClient { session: SessionId, id: RawId, frame: String },
    /// A client's call goes to its backend (or waits for it) as if just asked.
    Admit { server: ServerName, call: alloc::boxed::Box<ClientCall> },
}

/// What a part of the engine (the backend side, the era bridge) sees and may
/// change besides its own state. What it sends, announces and answers goes
/// out through the outbox, in order; the gateway empties it after each call.
pub(super) struct Cx<'a> {
    /// The host's action queue: an action goes straight there while nothing
    /// waits in the outbox before it (the order is the same, with no detour).
    pub(super) actions: &'a mut VecDeque<Action>,
    pub(super) out: &'a mut Outbox,
    /// Open requests: tether's own go in, ids come from here.
    pub router: &'a mut Router,
    pub now: Instant,
    pub rng: &'a mut Rng,
    /// Unguessable ids (task ids, `requestState`).
    pub ids: &'a mut SecretIds,
    pub config: &'a Config,
    /// Discovery installs what backends list here.
    pub catalog: &'a mut Catalog,
    /// The sessions, read only: what a call's client declared, who subscribed
    /// to what. Answers to clients go through the outbox.
    pub sessions: &'a Sessions,
    /// The level the last `logging/setLevel` asked for (stateless backends get it per request).
    pub log_level: Option<&'a str>,
    pub redactor: &'a Redactor,
    /// The wall clock as the host last told it (task timestamps).
    pub wall_clock: crate::time::WallClock,
}

impl Cx<'_> {
    /// An action for the host, after what was sent before it.
    pub(super) fn push(&mut self, action: Action) {
        if self.out.0.is_empty() {
            return self.actions.push_back(action);
        }
        self.out.0.push(Out::Action(action));
    }

    /// `event`, noted at its backend already: clients and the host are told of
    /// it when the outbox is applied.
    pub(super) fn announce(&mut self, event: Event) {
        self.out.0.push(Out::Event(event));
    }

    /// An error answer to `session`'s request `id`.
    pub(super) fn reply_error(&mut self, session: SessionId, id: &str, code: i64, message: &str, data: Option<&str>) {
        let (id, message, data) = (RawId::new(id), message.into(), data.map(String::from));
        self.out.0.push(Out::ReplyError { session, id, code, message, data });
    }

    /// `call` is over: its id is free in its session.
    pub(super) fn release(&mut self, call: &ClientCall) {
        self.out.0.push(Out::Release { session: call.session, id: call.id.clone() });
    }

    /// An answer to `session`'s request `id`.
    pub(super) fn reply(&mut self, session: SessionId, id: &str, result: &str) {
        self.out.0.push(Out::Reply { session, id: RawId::new(id), result: result.into() });
    }

    /// A whole answer frame to `session`'s request `id`.
    pub(super) fn reply_to_client(&mut self, session: SessionId, id: &str, frame: String) {
        self.out.0.push(Out::ReplyToClient { session, id: RawId::new(id), frame });
    }

    /// Request `id` of `session` is answered otherwise: its id is free.
    pub(super) fn release_id(&mut self, session: SessionId, id: &str) {
        self.out.0.push(Out::Release { session, id: RawId::new(id) });
    }

    /// `call` goes to `server` (or waits for it) as if just asked.
    pub(super) fn admit(&mut self, server: ServerName, call: ClientCall) {
        self.out.0.push(Out::Admit { server, call: alloc::boxed::Box::new(call) });
    }

    /// Nobody retried the call waiting under `state` in time.
    pub(super) fn input_expired(&mut self, state: &str) {
        self.out.0.push(Out::InputExpired(state.into()));
    }

    /// A frame to `session`.
    #[allow(clippy::wrong_self_convention)] // "send to", not a conversion
    pub(super) fn to_client(&mut self, session: SessionId, frame: String) {
        self.push(Action::to_session(session, frame));
    }

    /// A frame to `session`, on behalf of its request `id` (or to the session).
    pub(super) fn related_to_client(&mut self, session: SessionId, id: Option<&str>, frame: String) {
        self.push(Action::related(session, id, frame));
    }
}

/// The parts that work in a [`Cx`]: each owns its state and is given the
/// others it needs explicitly.
pub(super) struct Parts<'a> {
    pub backends: &'a mut Backends,
    pub eras: &'a mut EraBridge,
    pub tasks: &'a mut TaskStore,
}

impl super::Gateway {
    /// Runs `f` on the parts in a context, then sends what it sent and
    /// announces and answers what it did, in its order.
    pub(super) fn parts<R>(&mut self, f: impl FnOnce(&mut Parts<'_>, &mut Cx<'_>) -> R) -> R {
        let mut out = core::mem::take(&mut self.outbox);
        let result = {
            let mut cx = Cx {
                actions: &mut self.actions,
                out: &mut out,
                router: &mut self.router,
                now: self.now,
                rng: &mut self.rng,
                ids: &mut self.ids,
                config: &self.config,
                catalog: &mut self.catalog,
                sessions: &self.sessions,
                log_level: self.log_level.as_deref(),
                redactor: &self.redactor,
                wall_clock: self.wall_clock,
            };
            let mut parts = Parts { backends: &mut self.backends, eras: &mut self.eras, tasks: &mut self.tasks };
            f(&mut parts, &mut cx)
        };
        self.apply(&mut out);
        // The buffer is kept for the next call.
        self.outbox = out;
        result
    }

    /// Sends what a part sent and announces and answers what it did, in its
    /// order (not generic: applying may run a part again).
    fn apply(&mut self, out: &mut Outbox) {
        for item in out.0.drain(..) {
            match item {
                Out::Action(action) => self.push(action),
                Out::Event(event) => {
                    let to = super::client_events::Audience {
                        config: &self.config,
                        sessions: &self.sessions,
                        catalog: &self.catalog,
                    };
                    self.notices.announce(event, self.now, to, &mut self.actions);
                }
                Out::ReplyError { session, id, code, message, data } => {
                    self.reply_error(session, &id, code, &message, data.as_deref());
                }
                Out::Release { session, id } => {
                    if let Some(s) = self.sessions.open.get_mut(&session) {
                        s.in_flight.remove(&id);
                    }
                }
                Out::InputExpired(state) => self.parts(|p, cx| p.eras.input_expired(p.backends, cx, &state)),
                Out::Reply { session, id, result } => self.reply(session, &id, &result),
                Out::ReplyToClient { session, id, frame } => self.reply_to_client(session, &id, frame),
                Out::Admit { server, call } => self.admit(&server, *call),
            }
        }
    }
}
