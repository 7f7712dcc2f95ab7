//! Sessions known by sealed ids: what a new session's id seals (see
//! [`super::HttpServer::seal_session`]), and taking in a session whose id this
//! process did not issue (another replica did, or this one before a restart),
//! so a client the balancer sends anywhere keeps its session.
//!
//! An id opens only under a key of the ring, unexpired, for the same principal
//! (the bearer's identity under OAuth, the static token otherwise), with facts
//! the engine can serve; anything else is a session this replica does not know
//! (404, as for any unknown id: never 400, and never a plaintext mode). A
//! session closed here is not taken back in here. Whether to adopt is decided by
//! [`tether_core::cluster::SessionFacts::adoptable`]; the engine takes the
//! session in with [`Input::ClientAdopted`].

use std::sync::Arc;

use tether_core::cluster::SessionFacts;
use tether_core::{Input, SessionId};

use super::resource_guard::Bearer;
use super::{ServerOptions, Shared};

/// What session ids are sealed for: no other sealed token opens as one.
pub(super) const PURPOSE: &str = "tether mcp-session-id";

/// Milliseconds since the Unix epoch now (0 if the clock is before it).
pub(super) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The principal every request has when the listener checks a static token:
/// the token (only its keyed digest is sealed), so a new token ends old sessions.
pub(super) fn static_principal(options: &ServerOptions) -> Option<String> {
    options.auth_token.as_ref().map(|token| format!("static token {token}"))
}

/// Who presents a request: the bearer's identity (OAuth) or the static token.
fn presented(options: &ServerOptions, bearer: Option<&Bearer>) -> Option<String> {
    bearer.map(|b| b.identity.clone()).or_else(|| static_principal(options))
}

/// The session `key` names: one open here, or one another replica opened,
/// taken in now. `None`: no session this replica may serve (404).
pub(super) async fn find_or_adopt(shared: &Arc<Shared>, key: &str, bearer: Option<&Bearer>) -> Option<SessionId> {
    {
        let table = shared.table();
        if let Some(session) = table.find(key) {
            return Some(session);
        }
        if table.is_retired(key) {
            return None;
        }
    }
    let presented = presented(&shared.options, bearer);
    let opened = match shared.cluster.keys.open_bound(PURPOSE, key, unix_ms(), presented.as_deref()) {
        Ok(opened) => opened,
        Err(why) => {
            tracing::debug!("Mcp-Session-Id not adopted: {why}");
            return None;
        }
    };
    let facts = SessionFacts::from_bytes(&opened.payload)?;
    let sealed_for = opened.sealed_for.as_ref().map(|d| &d[..]);
    if let Err(why) = facts.adoptable(sealed_for, opened.presented.as_ref().map(|d| &d[..])) {
        tracing::debug!("Mcp-Session-Id not adopted: {why:?}");
        return None;
    }
    // What it changed on the replica that held it, and whether its client
    // ended it there. The store down: adopted as the id says (its seal is
    // still good), without its later state.
    let mut state = None;
    if let Some(store) = shared.sessions.clone() {
        let id = key.to_string();
        let (closed, kept) = smol::unblock(move || (store.is_closed(&id), store.state(&id))).await;
        if matches!(closed, Ok(true)) {
            tracing::debug!("Mcp-Session-Id not adopted: its client ended it on another replica");
            return None;
        }
        match kept {
            Ok(kept) => state = kept,
            Err(e) => tracing::warn!("adopting a session without its state: {e}"),
        }
    }
    // One adoption at a time: a second request with the same id waits here and
    // then finds the session, so its frames follow the adoption.
    let _adopting = shared.adopting.lock().await;
    let session = {
        let mut table = shared.table();
        if let Some(session) = table.find(key) {
            return Some(session);
        }
        table.reserve()?
    };
    tracing::debug!(session = session.0, client = facts.client.as_deref().unwrap_or(""), "HTTP session adopted");
    shared.inputs.send(Input::ClientAdopted { session, facts, state }).await.ok()?;
    let mut table = shared.table();
    table.insert(key.to_string(), session, true);
    if let Some(bearer) = bearer {
        table.set_owner(session, bearer.identity.clone());
    }
    Some(session)
}
