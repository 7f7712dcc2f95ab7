//! `subscriptions/listen` from stateless-era clients: the 2026-07-28 revision's
//! only way to be told of changes. A listen is a request that stays open; tether
//! acknowledges it at once with what it will deliver, then sends each list change
//! and resource update it asked for on it, tagged with its id, whichever era the
//! backend behind the change speaks. It ends when the client cancels it or goes
//! away (closing the HTTP response stream).

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::super::backends::Backends;
use super::super::sessions::Sessions;
use super::super::Gateway;
use crate::catalog::Catalog;
use crate::catalog::ListKind;
use crate::io::{Action, RawId, SessionId};
use crate::protocol::{self, code, Era};
use alloc::collections::VecDeque;

/// The `_meta` key naming the listen a notification belongs to.
pub(crate) const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// What one client listen asked for and tether agreed to deliver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::gateway) struct ClientListen {
    pub tools: bool,
    pub prompts: bool,
    /// `notifications/resources/list_changed` (resources and templates).
    pub resources: bool,
    /// Served resource URIs whose `notifications/resources/updated` it wants.
    pub uris: Vec<String>,
}

impl ClientListen {
    /// Whether it wants the `list_changed` notification of `kind`.
    pub(in crate::gateway) fn wants(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => self.tools,
            ListKind::Prompts => self.prompts,
            ListKind::Resources | ListKind::ResourceTemplates => self.resources,
        }
    }

    /// The filter as the revision spells it (`notifications` of the request and
    /// of the acknowledgement): only what is set.
    fn to_filter(&self) -> Map<String, Value> {
        let mut filter = Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                filter.insert(key.into(), Value::Bool(true));
            }
        }
        if !self.uris.is_empty() {
            filter.insert(
                "resourceSubscriptions".into(),
                Value::Array(self.uris.iter().cloned().map(Value::String).collect()),
            );
        }
        filter
    }
}

/// A notification's params with `_meta` naming listen `id` (raw JSON) first,
/// then `members` (raw `"key":value` pairs, may be empty).
fn tagged_params(id: &str, members: &str) -> String {
    let sep = if members.is_empty() { "" } else { "," };
    format!(r#"{{"_meta":{{"{SUBSCRIPTION_ID}":{id}}}{sep}{members}}}"#)
}

impl Gateway {
    /// `subscriptions/listen` from a stateless-era client: acknowledged at once
    /// with the subset tether can honour, then left open.
    pub(in crate::gateway) fn client_listen(
        &mut self,
        session: SessionId,
        id: RawId,
        params: Option<Map<String, Value>>,
    ) {
        if !self.sessions.open.get(&session).is_some_and(|s| s.era == Era::Stateless) {
            let msg = "method not found: subscriptions/listen (a 2026-07-28 request; this session initialized with an earlier revision, where resources/subscribe and list_changed notifications do this)";
            return self.reply_error(session, &id, code::METHOD_NOT_FOUND, msg, None);
        }
        let Some(Value::Object(filter)) = params.as_ref().and_then(|p| p.get("notifications")) else {
            return self.reply_error(session, &id, code::INVALID_PARAMS, "missing notifications (an object)", None);
        };
        let flag = |key: &str| filter.get(key) == Some(&Value::Bool(true));
        let mut listen = ClientListen {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris: Vec::new(),
        };
        let requested: Vec<String> = match filter.get("resourceSubscriptions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(uris)) if uris.iter().all(Value::is_string) => {
                uris.iter().filter_map(Value::as_str).map(ToString::to_string).collect()
            }
            Some(_) => {
                let msg = "resourceSubscriptions must be an array of URIs";
                return self.reply_error(session, &id, code::INVALID_PARAMS, msg, None);
            }
        };
        let mut total: usize = self.sessions.subscriptions.values().map(BTreeSet::len).sum();
        for uri in requested {
            if listen.uris.contains(&uri)
                || !can_subscribe(&self.catalog, &self.backends, &uri)
                || self.view(session).uri(&uri).is_none()
            {
                continue;
            }
            let subscribed = self.sessions.subscriptions.get(&uri).is_some_and(|s| s.contains(&session));
            if !subscribed && total >= self.config.limits.max_subscriptions as usize {
                continue;
            }
            total += usize::from(!subscribed);
            listen.uris.push(uri);
        }
        if self.sessions.open.get(&session).is_some_and(|s| s.listens.is_empty()) {
            // What it saw before listening is unknown: changes count from now.
            self.fingerprints.mark_seen(&mut self.sessions, session, &self.catalog, &self.backends, &self.config);
        }
        let s = self.sessions.open.get_mut(&session).expect("checked");
        s.listens.insert(id.clone(), listen.clone());
        let members = format!(r#""notifications":{}"#, Value::Object(listen.to_filter()));
        let ack = tagged_params(&id, &members);
        self.push(Action::related(
            session,
            Some(&id),
            protocol::notification("notifications/subscriptions/acknowledged", Some(&ack)),
        ));
        for uri in listen.uris {
            self.subscribe_for(session, uri);
        }
    }

    /// Adds `session` to the subscribers of `uri`, subscribing at the backend
    /// when it is the first.
    fn subscribe_for(&mut self, session: SessionId, uri: String) {
        let first = !self.sessions.subscriptions.get(&uri).is_some_and(|s| !s.is_empty());
        self.sessions.subscriptions.entry(uri.clone()).or_default().insert(session);
        if !first {
            return;
        }
        let Some((server, original)) =
            self.catalog.resolve_uri(&uri).map(|(s, u)| (self.backends.name(s), u.to_string()))
        else {
            return;
        };
        let Some(b) = self.backends.get(&*server) else { return };
        match b.era {
            Era::Stateless => self.parts(|p, cx| p.backends.relisten(cx, &server)),
            // Not ready: subscribed once it is (`resubscribe`).
            Era::Handshake if b.sup.is_ready() => {
                let params = format!(r#"{{"uri":{}}}"#, protocol::quote(&original));
                self.parts(|p, cx| p.backends.quiet_request(cx, &server, "resources/subscribe", &params));
            }
            Era::Handshake => {}
        }
    }

    /// Ends listen `id` of `session` (the client cancelled it): its resource
    /// subscriptions go unless another listen of the session holds them.
    /// Whether there was such a listen.
    pub(in crate::gateway) fn end_client_listen(&mut self, session: SessionId, id: &str) -> bool {
        let Some(s) = self.sessions.open.get_mut(&session) else { return false };
        let Some(listen) = s.listens.remove(id) else { return false };
        s.in_flight.remove(id);
        let still: BTreeSet<String> = s.listens.values().flat_map(|l| l.uris.iter().cloned()).collect();
        for uri in listen.uris.into_iter().filter(|u| !still.contains(u)) {
            let Some(sessions) = self.sessions.subscriptions.get_mut(&uri) else { continue };
            sessions.remove(&session);
            if sessions.is_empty() {
                self.sessions.subscriptions.remove(&uri);
                self.parts(|p, cx| p.backends.unsubscribe_backend(cx, &uri));
            }
        }
        self.sessions.answered(session);
        true
    }
}

impl Sessions {
    /// `list_changed` of `kinds` to each listen of stateless `session` that asked
    /// for it: one notification per method and listen.
    pub(in crate::gateway) fn announce_to_listens(
        &self,
        session: SessionId,
        kinds: &[ListKind],
        actions: &mut VecDeque<Action>,
    ) {
        let Some(s) = self.open.get(&session) else { return };
        let mut frames = Vec::new();
        for (id, listen) in &s.listens {
            let mut sent: Vec<&'static str> = Vec::new();
            for kind in kinds.iter().filter(|k| listen.wants(**k)) {
                if !sent.contains(&kind.list_changed()) {
                    sent.push(kind.list_changed());
                    let params = tagged_params(id, "");
                    frames.push((id.clone(), protocol::notification(kind.list_changed(), Some(&params))));
                }
            }
        }
        for (id, frame) in frames {
            actions.push_back(Action::related(session, Some(&id), frame));
        }
    }

    /// `notifications/resources/updated` for served `uri` to each listen of
    /// stateless `session` that subscribed to it; `members` are the params'
    /// other members (raw), `uri` among them.
    pub(in crate::gateway) fn update_listens(
        &self,
        session: SessionId,
        uri: &str,
        members: &str,
        actions: &mut VecDeque<Action>,
    ) {
        let Some(s) = self.open.get(&session) else { return };
        let ids: Vec<RawId> =
            s.listens.iter().filter(|(_, l)| l.uris.iter().any(|u| u == uri)).map(|(id, _)| id.clone()).collect();
        for id in ids {
            let params = tagged_params(&id, members);
            let frame = protocol::notification("notifications/resources/updated", Some(&params));
            actions.push_back(Action::related(session, Some(&id), frame));
        }
    }
}

/// Whether updates of served `uri` can be delivered: it belongs to a backend
/// that is not known to lack resource subscriptions.
fn can_subscribe(catalog: &Catalog, backends: &Backends, uri: &str) -> bool {
    let Some((server, _)) = catalog.resolve_uri(uri) else { return false };
    let Some(b) = backends.get(server) else { return false };
    if b.capabilities.is_empty() {
        // Not connected yet: subscribed when it is.
        return true;
    }
    b.capabilities.get("resources").and_then(|r| r.get("subscribe")).and_then(Value::as_bool) == Some(true)
}
