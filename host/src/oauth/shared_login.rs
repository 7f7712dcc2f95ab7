//! Logins that any replica finishes: with `tether.cluster.login_redirect_uri`,
//! a login redirects to that public URL instead of a loopback listener on the
//! machine that started it. What the code exchange needs (PKCE verifier,
//! `state`, issuer, client, redirect) is sealed with the cluster's key ring and
//! put in the shared store for as long as a person has to log in, under a
//! digest of its `state`.
//!
//! The person is given tether's own start link (the callback URL with
//! `?start=`), not the authorization URL: the first browser to open it gets a
//! cookie and is sent on to the authorization server, and only a callback
//! carrying that cookie finishes the login. Someone who sees the authorization
//! URL later (a history, a shared screen) cannot finish it with an account of
//! their own, as a loopback redirect also ensured.
//!
//! The callback lands on whichever replica the balancer picks;
//! [`LoginDesk::handle`] checks the browser, takes the pending login out of the
//! store (get-and-delete: a replayed or twice-clicked callback finds nothing),
//! checks the response (`state`, RFC 9207 `iss`), exchanges the code and stores
//! the credential. Every replica reads it from the store within moments.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::authority::{Authority, Exchange};
use super::login::{check_callback, Callback, Expected};
use super::Failure;
use crate::seal::KeyRing;
use crate::shared::SharedStore;

/// What a pending login is sealed for (its digest appended).
const PURPOSE: &str = "tether login ";
/// The largest sealed pending login opened.
const MAX_SEALED: usize = 64 * 1024;

/// Where logins started here redirect to, and where their state waits.
#[derive(Clone)]
pub struct SharedLogin {
    redirect_uri: String,
    store: Arc<dyn SharedStore>,
    keys: Arc<KeyRing>,
}

impl std::fmt::Debug for SharedLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLogin").field("redirect_uri", &self.redirect_uri).finish()
    }
}

/// A login waiting for its callback, as stored (sealed).
#[derive(Serialize, Deserialize)]
pub(super) struct PendingLogin {
    /// The credential key of the backend (finds its authority on any replica).
    pub key: String,
    /// The backend's name, for messages.
    pub server: String,
    /// What the callback must carry.
    pub expected: Expected,
    /// What the code exchange needs.
    pub exchange: Exchange,
}

impl SharedLogin {
    /// Logins redirecting to `redirect_uri`, their state in `store`, sealed with `keys`.
    pub fn new(redirect_uri: String, store: Arc<dyn SharedStore>, keys: Arc<KeyRing>) -> SharedLogin {
        SharedLogin { redirect_uri, store, keys }
    }

    /// The redirect URI every login uses.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// Stores `pending` until `ttl` ends, with a start link for it that sends a
    /// browser on to `authorization_url`: the URL to give the person.
    pub(super) fn put(
        &self,
        pending: &PendingLogin,
        authorization_url: &str,
        ttl: Duration,
    ) -> Result<String, Failure> {
        let digest = digest(&pending.expected.state);
        let opener = super::pkce::random_string(18);
        let start = format!("{digest} {authorization_url}");
        self.store
            .put_expiring(&format!("login-start/{opener}"), start.as_bytes(), ttl)
            .map_err(|e| Failure::unavailable(format!("keeping the login's start in the shared store: {e}")))?;
        let json = serde_json::to_vec(pending).map_err(|e| Failure::rejected(e.to_string()))?;
        let sealed = self
            .keys
            .seal(&format!("{PURPOSE}{digest}"), u64::MAX, &json)
            .ok_or_else(|| Failure::rejected("no randomness from the operating system to seal the login"))?;
        self.store
            .put_expiring(&format!("login/{digest}"), sealed.as_bytes(), ttl)
            .map_err(|e| Failure::unavailable(format!("keeping the login's state in the shared store: {e}")))?;
        Ok(format!("{}?start={opener}", self.redirect_uri))
    }

    /// The first browser opening the start link `opener`: the authorization
    /// URL to send it on to, and the nonce its cookie carries (its digest is
    /// what the callback must match). `None`: no such link (used, expired).
    fn start(&self, opener: &str) -> Result<Option<(String, String)>, String> {
        let taken = self.store.take(&format!("login-start/{opener}")).map_err(|e| e.to_string())?;
        let Some(bytes) = taken else { return Ok(None) };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let Some((digest, url)) = text.split_once(' ') else { return Ok(None) };
        let nonce = super::pkce::random_string(24);
        let ttl = super::login::LOGIN_TIMEOUT;
        self.store
            .put_expiring(&format!("login-browser/{digest}"), self::digest(&nonce).as_bytes(), ttl)
            .map_err(|e| e.to_string())?;
        Ok(Some((url.to_owned(), nonce)))
    }

    /// Whether the browser presenting `cookie` is the one that opened the
    /// start link of the login with `state`.
    fn same_browser(&self, state: &str, cookie: Option<&str>) -> Result<bool, String> {
        let bound = self.store.get_expiring(&format!("login-browser/{}", digest(state))).map_err(|e| e.to_string())?;
        Ok(match (bound, cookie) {
            (Some(bound), Some(cookie)) => bound == digest(cookie).as_bytes(),
            _ => false,
        })
    }

    /// Drops the pending login of `state` (a login finished elsewhere).
    pub(super) fn forget(&self, state: &str) {
        let digest = digest(state);
        for key in [format!("login/{digest}"), format!("login-browser/{digest}")] {
            if let Err(e) = self.store.forget(&key) {
                tracing::debug!("dropping a pending login: {e}");
            }
        }
    }

    /// How the login of `state` ended, once a replica finished it (taken: asked
    /// once): `Ok` logged in, `Err` with what went wrong.
    pub(super) fn outcome(&self, state: &str) -> std::io::Result<Option<Result<(), String>>> {
        let Some(bytes) = self.store.take(&format!("login-done/{}", digest(state)))? else { return Ok(None) };
        let text = String::from_utf8_lossy(&bytes);
        Ok(Some(match text.strip_prefix("error ") {
            Some(message) => Err(message.to_owned()),
            None => Ok(()),
        }))
    }

    /// Says how the login of `state` ended, for a `tether auth login` waiting
    /// on another machine (kept a minute; the message holds no secret).
    fn finished(&self, state: &str, outcome: Result<(), &str>) {
        let text = match outcome {
            Ok(()) => "ok".to_owned(),
            Err(message) => format!("error {message}"),
        };
        let key = format!("login-done/{}", digest(state));
        if let Err(e) = self.store.put_expiring(&key, text.as_bytes(), Duration::from_secs(60)) {
            tracing::debug!("recording how a login ended: {e}");
        }
    }

    /// Takes the pending login of `state` out of the store (once).
    fn take(&self, state: &str) -> Result<Option<PendingLogin>, String> {
        let digest = digest(state);
        let taken = self.store.take(&format!("login/{digest}")).map_err(|e| e.to_string())?;
        let Some(bytes) = taken else { return Ok(None) };
        let sealed = String::from_utf8_lossy(&bytes);
        let opened = self
            .keys
            .open_up_to(&format!("{PURPOSE}{digest}"), &sealed, 0, MAX_SEALED)
            .map_err(|why| format!("the login's stored state does not open ({why})"))?;
        serde_json::from_slice(&opened).map(Some).map_err(|e| format!("the login's stored state is unreadable: {e}"))
    }
}

/// A hex digest of a login's `state`: its key in the store (the state itself,
/// which the browser carries, is not written there).
fn digest(state: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, state.as_bytes());
    digest.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Finishes the logins whose callback lands on this replica: served by the
/// HTTP listener at the path of the redirect URI.
pub struct LoginDesk {
    login: SharedLogin,
    authorities: Arc<Mutex<HashMap<String, Arc<Authority>>>>,
}

impl std::fmt::Debug for LoginDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginDesk").field("login", &self.login).finish()
    }
}

/// What the browser is shown.
#[derive(Debug)]
pub struct DeskAnswer {
    /// The HTTP status.
    pub status: u16,
    /// A small HTML page.
    pub page: String,
    /// Where to send the browser on (a start link: the authorization server).
    pub location: Option<String>,
    /// A `Set-Cookie` value (a start link: the browser's login nonce).
    pub cookie: Option<String>,
}

/// The cookie that ties a login to the browser that opened its start link.
pub const COOKIE: &str = "tether_login";

impl LoginDesk {
    pub(crate) fn new(login: SharedLogin, authorities: Arc<Mutex<HashMap<String, Arc<Authority>>>>) -> LoginDesk {
        LoginDesk { login, authorities }
    }

    /// The path the listener serves the callback at.
    pub fn path(&self) -> String {
        url::Url::parse(&self.login.redirect_uri).map(|u| u.path().to_owned()).unwrap_or_default()
    }

    /// Handles one request at the callback's path: a start link (`start=`)
    /// or the authorization server's redirect back (`state=`), with the
    /// browser's [`COOKIE`], if it sent one. Blocking: the code exchange goes
    /// to the authorization server.
    pub fn handle(&self, query: &str, cookie: Option<&str>) -> DeskAnswer {
        let answer = |status, text: &str| DeskAnswer {
            status,
            page: super::login::page_html(text),
            location: None,
            cookie: None,
        };
        let well_formed = |s: &str| {
            (16..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        let opener = url::form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "start").map(|(_, v)| v);
        if let Some(opener) = opener {
            if !well_formed(&opener) {
                return answer(400, "This login link is malformed.");
            }
            return match self.login.start(&opener) {
                Ok(Some((url, nonce))) => {
                    let secure = if self.login.redirect_uri.starts_with("https:") { "; Secure" } else { "" };
                    let seconds = super::login::LOGIN_TIMEOUT.as_secs();
                    let cookie = format!(
                        "{COOKIE}={nonce}; Path={}; Max-Age={seconds}; HttpOnly; SameSite=Lax{secure}",
                        self.path()
                    );
                    DeskAnswer { location: Some(url), cookie: Some(cookie), ..answer(302, "Logging in...") }
                }
                Ok(None) => answer(
                    400,
                    "This login link was already opened, or has expired. Start the login again \
                     (tether auth login, or the URL in the status).",
                ),
                Err(e) => {
                    tracing::warn!("a login start link could not be read: {e}");
                    answer(503, "The shared store could not be read. Try again.")
                }
            };
        }
        self.complete(query, cookie)
    }

    fn complete(&self, query: &str, cookie: Option<&str>) -> DeskAnswer {
        let answer = |status, text: &str| DeskAnswer {
            status,
            page: super::login::page_html(text),
            location: None,
            cookie: None,
        };
        let state = url::form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "state").map(|(_, v)| v);
        // tether's states are short runs of URL-safe characters: anything else
        // is no login of tether's, answered without asking the store.
        let well_formed = |s: &str| {
            (16..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        let Some(state) = state.filter(|s| well_formed(s)) else {
            return answer(400, "This is tether's login callback; this request carries no login of tether's.");
        };
        match self.login.same_browser(&state, cookie) {
            Ok(true) => {}
            Ok(false) => {
                return answer(
                    400,
                    "This login was not started in this browser: open the login link tether gave \
                     (it ties the login to the browser that opens it), then log in there.",
                )
            }
            Err(e) => {
                tracing::warn!("a login callback arrived and its browser could not be checked: {e}");
                return answer(503, "The shared store could not be read; this login could not be finished. Try again.");
            }
        }
        let pending = match self.login.take(&state) {
            Ok(Some(pending)) => {
                self.login.forget(&state);
                pending
            }
            Ok(None) => {
                return answer(
                    400,
                    "This login link is unknown, already used or expired. Start the login again \
                     (tether auth login, or the URL in the status).",
                )
            }
            Err(e) => {
                tracing::warn!("a login callback arrived and its state could not be read: {e}");
                return answer(503, "The shared store could not be read; this login could not be finished. Try again.");
            }
        };
        let authority = self.authorities.lock().unwrap_or_else(|e| e.into_inner()).get(&pending.key).cloned();
        let Some(authority) = authority else {
            tracing::warn!(server = %pending.server, "a login callback for a backend this replica does not have");
            return answer(
                500,
                "This replica does not have the backend this login is for (do all replicas share one configuration?).",
            );
        };
        let outcome = match check_callback(query, &pending.expected) {
            Callback::Code(code) => authority.finish_shared_login(pending.exchange, &code),
            Callback::Failed(failure) => Err(failure),
            Callback::Stray => Err(Failure::rejected("the callback's state does not match the login")),
        };
        let outcome = outcome.map_err(|f| authority.hidden_message(&f.message));
        self.login.finished(&state, outcome.as_ref().copied().map_err(String::as_str));
        match outcome {
            Ok(()) => {
                tracing::info!(server = %pending.server, "login finished through the shared callback");
                answer(200, &format!("Logged in to {}. You can close this window.", pending.server))
            }
            Err(message) => {
                tracing::warn!(server = %pending.server, "login failed: {message}");
                answer(400, &format!("The login to {} failed: {message}", pending.server))
            }
        }
    }
}
