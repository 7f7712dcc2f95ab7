//! One remote backend's credential, held by the host: the steps the engine asks for
//! ([`AuthStep`]) carried out against the authorization server and the store, and
//! the token put on every request.
//!
//! The refresh is the heart of it, because a rotating refresh token may be used
//! once: under the store's lock, a token another process refreshed meanwhile is
//! adopted (no request at all); otherwise the refresh grant is sent and its answer
//! written to the store before it is held (so no process ever uses a refresh token
//! that is not on disk); and an `invalid_grant` is believed only after the store
//! was read again and still holds the refresh token that failed.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tether_core::credential::{AuthStep, Challenge, CredentialFailure, CredentialUpdate};
use tether_core::ServerName;

use super::assertion::SigningKey;
use super::discovery::{self, Discovery};
use super::dpop::{self, DpopKey};
use super::login::{self, AuthorizationRequest, Expected, Loopback};
use super::pkce::{self, Pkce};
use super::registration;
use super::secret::Secret;
use super::shared_login::{PendingLogin, SharedLogin};
use super::store::{store_key, ClientRecord, ClientSource, CredentialStore, StoredCredential, TokenRecord};
use super::token::{self, ClientAuth, Granted};
use super::transport::Http;
use super::{browser, unix_now, Failure, Grant, OAuthSettings};

/// How long the store's lock is held at most: longer than a token request may take
/// ([`super::transport::REQUEST_TIMEOUT`]), so a live holder never loses it.
const LEASE: Duration = Duration::from_secs(45);
/// A stored token expiring sooner than this is refreshed rather than adopted.
const ADOPT_MARGIN_SECS: u64 = 10;
/// How soon after a hint put a token in hand a refresh asked for it is taken
/// to be the engine's timer for the token before (the race is milliseconds).
const HINT_RACE: Duration = Duration::from_secs(2);
/// How often a rotated credential the store did not take is written again.
const PERSIST_RETRY: Duration = Duration::from_millis(250);

/// Reports a step's outcome to the engine (from a worker or a login thread).
pub type Report = Arc<dyn Fn(CredentialUpdate) + Send + Sync>;

/// What `tether auth status` shows about a backend's credential: no secrets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuthStatus {
    /// How tokens are obtained: `oauth (authorization code)` or `client credentials`.
    pub method: &'static str,
    /// Whether a person logs in (the authorization code grant), rather than tether
    /// obtaining tokens unattended.
    pub person_logs_in: bool,
    /// Whether a usable token is held or stored (fresh, or renewable without a person).
    pub logged_in: bool,
    /// The authorization server's issuer, if known.
    pub issuer: Option<String>,
    /// The granted scopes, if known.
    pub scope: Option<String>,
    /// When the access token expires (unix seconds), if known.
    pub expires_at: Option<u64>,
    /// Whether it can be renewed without a person.
    pub refreshable: bool,
    /// Whether an interactive login is waiting for the person.
    pub login_pending: bool,
}

impl std::fmt::Display for AuthStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.method, if self.logged_in { "logged in" } else { "not logged in" })?;
        if let Some(issuer) = &self.issuer {
            write!(f, ", issuer {issuer}")?;
        }
        if let Some(scope) = &self.scope {
            write!(f, ", scope {scope:?}")?;
        }
        if let Some(at) = self.expires_at {
            let now = unix_now();
            if at > now {
                write!(f, ", expires in {}s", at - now)?;
            } else {
                write!(f, ", expired")?;
            }
        }
        if self.refreshable {
            write!(f, ", refreshable")?;
        }
        if self.login_pending {
            write!(f, ", login pending")?;
        }
        Ok(())
    }
}

/// What a finished `tether auth login` got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoginSummary {
    /// The authorization server's issuer.
    pub issuer: String,
    /// The granted scopes, if known.
    pub scope: Option<String>,
    /// When the access token expires (unix seconds), if said.
    pub expires_at: Option<u64>,
    /// Whether it can be renewed without a person.
    pub refreshable: bool,
}

/// What this process holds for the backend.
#[derive(Default)]
struct Held {
    /// The credential in use (its access token goes on requests).
    credential: Option<StoredCredential>,
    /// The last challenge with anything in it: a login that follows an `Obtain`
    /// (whose challenge the engine does not repeat) still knows the scope asked for.
    challenge: Challenge,
    /// The scopes the last authorization request asked for.
    requested_scope: Option<String>,
    /// The refresh token the last `invalid_grant` was about: what `Discard` deletes.
    dead_refresh: Option<Secret>,
}

/// A login prepared up to the authorization URL.
struct Prepared {
    /// The listener of a loopback redirect (none when logins finish through
    /// the shared callback).
    loopback: Option<Loopback>,
    expected: Expected,
    url: String,
    exchange: Exchange,
}

/// What the code exchange of a prepared login needs (stored, sealed, while a
/// login waits for the shared callback).
#[derive(Serialize, Deserialize)]
pub(super) struct Exchange {
    discovery: Discovery,
    client: ClientRecord,
    redirect_uri: String,
    verifier: Secret,
    scope: Option<String>,
}

/// One remote backend's OAuth credential and the means to keep it alive. Shared as
/// `Arc<Authority>` by the backend's connection (which calls [`Authority::bearer`]
/// per request) and the worker that runs [`Authority::execute`].
pub struct Authority {
    server: ServerName,
    url: String,
    settings: OAuthSettings,
    store: Arc<dyn CredentialStore>,
    key: String,
    http: Http,
    signing_key: Option<Result<SigningKey, String>>,
    /// The DPoP key in use (bound to the held token, or made for the next grant),
    /// kept so the nonces servers asked for stay with it.
    dpop: Mutex<Option<Arc<DpopKey>>>,
    held: Mutex<Held>,
    /// The cancel flag of the login waiting in the background, if any.
    login: Mutex<Option<Arc<AtomicBool>>>,
    /// Logins finish through the cluster's public callback, on any replica.
    shared_login: Option<SharedLogin>,
    /// The `state` of the login this process put in the shared store, if any,
    /// and where to report when a replica finishes it.
    shared_pending: Mutex<Option<(String, Report)>>,
    /// Where the engine's last step reported: a token taken from a store hint
    /// is reported there too, so the engine plans its refresh by it.
    reporter: Mutex<Option<Report>>,
    /// The access token held when the engine asked for a refresh (see
    /// [`Authority::step_asked`]): what the refresh is to replace.
    refresh_asked_for: Mutex<Option<Secret>>,
    /// The access token a store hint last put in hand, and when: the engine
    /// may ask to renew it before it has heard of it (its timer was for the
    /// old one).
    hint_swapped: Mutex<Option<(Secret, std::time::Instant)>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("server", &self.server)
            .field("url", &self.url)
            .field("key", &self.key)
            .finish()
    }
}

impl Authority {
    /// The credential keeper of backend `server` at `url`, with its settings and the
    /// store shared by all backends. Nothing is read or sent until a step asks.
    pub fn new(server: ServerName, url: String, settings: OAuthSettings, store: Arc<dyn CredentialStore>) -> Self {
        let key = store_key(&url, settings.client_id.as_deref());
        let signing_key = load_signing_key(&settings);
        Authority {
            server,
            url,
            settings,
            store,
            key,
            http: Http::new(),
            signing_key,
            dpop: Mutex::new(None),
            held: Mutex::new(Held::default()),
            login: Mutex::new(None),
            shared_login: None,
            shared_pending: Mutex::new(None),
            reporter: Mutex::new(None),
            refresh_asked_for: Mutex::new(None),
            hint_swapped: Mutex::new(None),
        }
    }

    /// Logins redirect to the cluster's public callback and wait in the shared
    /// store, so any replica finishes them (instead of a loopback listener here).
    pub fn with_shared_login(mut self, login: SharedLogin) -> Self {
        self.shared_login = Some(login);
        self
    }

    /// The engine asked for `step` (called where it asks, before the step runs
    /// on a worker). A refresh notes the token it is to replace: a store hint
    /// may swap a newer token in before the refresh takes the lease, and the
    /// refresh then adopts that one instead of renewing it again.
    pub fn step_asked(&self, step: &AuthStep) {
        if matches!(step, AuthStep::Refresh) {
            let held = self.held().credential.as_ref().and_then(|c| c.token.as_ref()).map(|t| t.access_token.clone());
            *self.refresh_asked_for.lock().unwrap_or_else(|e| e.into_inner()) = held;
        }
    }

    /// `text` with every secret this authority knows hidden (for pages and logs).
    pub(super) fn hidden_message(&self, text: &str) -> String {
        self.hide(text)
    }

    /// Finishes a login whose callback landed here through the shared
    /// callback: the code is exchanged and the credential stored (every
    /// replica, this one too, reads it from there).
    pub(super) fn finish_shared_login(&self, exchange: Exchange, code: &Secret) -> Result<(), Failure> {
        let update = self.finish_login(exchange, code)?;
        let held = self.held().credential.as_ref().and_then(|c| c.token.as_ref()).map(|t| t.access_token.clone());
        let stored = self.read_store().and_then(|c| c.token).map(|t| t.access_token);
        if held.is_none() || stored != held {
            return Err(Failure::unavailable(
                "the login succeeded but the shared store did not take the credential: the other replicas do not \
                 have it; log in again once the store answers",
            ));
        }
        // This replica's own engine hears at once if it waits for a login
        // (the others read the store on their own, or hear the hint).
        let waiting = self.shared_pending.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((state, report)) = waiting {
            if let Some(shared) = &self.shared_login {
                shared.forget(&state);
            }
            report(update);
        }
        self.cancel_login();
        Ok(())
    }

    /// The access token to put on a request now (`Authorization: Bearer ...`), if
    /// one is held. Cheap: called for every request.
    pub fn bearer(&self) -> Option<String> {
        let held = self.held();
        held.credential.as_ref()?.token.as_ref().map(|t| t.access_token.expose().to_owned())
    }

    /// The credential headers for a `method` request to the backend at `url`:
    /// `Authorization` (`Bearer`, or `DPoP` with a fresh proof for a bound token).
    ///
    /// An expired token is never sent (nothing then): a server may take an expired
    /// token for a stolen one and revoke the grant (FastMCP's in-memory provider
    /// deletes the refresh token), and it would be refused anyway. The engine
    /// refreshes such a token at once and the request waits for it.
    pub fn authorize(&self, method: &str, url: &str) -> Option<(String, Option<String>)> {
        let token = self.held().credential.as_ref()?.token.clone()?;
        // Stored in whole seconds, rounded down: past its second, it is expired.
        if token.expires_at.is_some_and(|at| at < unix_now()) {
            return None;
        }
        let access = token.access_token.expose();
        if !token.dpop_bound() {
            return Some((format!("Bearer {access}"), None));
        }
        let key = self.dpop_key(Some(&token)).ok().flatten()?;
        match key.resource_proof(method, url, access, unix_now()) {
            Ok(proof) => Some((format!("DPoP {access}"), Some(proof))),
            Err(e) => {
                tracing::warn!(server = %self.server, "DPoP: {e}");
                None
            }
        }
    }

    /// The backend sent a `DPoP-Nonce`: the next proofs carry it. Whether it is new.
    pub fn resource_nonce(&self, nonce: &str) -> bool {
        let token = self.held().credential.as_ref().and_then(|c| c.token.clone());
        match self.dpop_key(token.as_ref()) {
            Ok(Some(key)) => key.rs_nonce(nonce),
            _ => false,
        }
    }

    /// The DPoP key for `token` (the one it is bound to) or, for a new grant where
    /// the authorization server supports DPoP (`algs`), the key to bind it to.
    fn dpop_key(&self, token: Option<&TokenRecord>) -> Result<Option<Arc<DpopKey>>, Failure> {
        self.dpop_key_for(token, None)
    }

    /// A new grant is bound only where the authorization server signs DPoP proofs
    /// tether can make and the resource (`discovery`) takes bound tokens.
    fn dpop_key_for(
        &self,
        token: Option<&TokenRecord>,
        discovery: Option<&Discovery>,
    ) -> Result<Option<Arc<DpopKey>>, Failure> {
        let mut held = self.dpop.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stored) = token.filter(|t| t.dpop_bound()).and_then(|t| t.dpop_key.as_ref()) {
            if let Some(key) = held.as_ref().filter(|k| k.stored() == stored) {
                return Ok(Some(key.clone()));
            }
            let key = Arc::new(DpopKey::from_stored(stored).map_err(Failure::rejected)?);
            *held = Some(key.clone());
            return Ok(Some(key));
        }
        let Some(discovery) = discovery.filter(|d| d.resource_dpop) else { return Ok(None) };
        if !self.settings.dpop || !dpop::supported(discovery.server.dpop_signing_alg_values_supported.as_deref()) {
            return Ok(None);
        }
        if let Some(key) = held.as_ref() {
            return Ok(Some(key.clone()));
        }
        let key = Arc::new(DpopKey::generate().map_err(Failure::rejected)?);
        *held = Some(key.clone());
        Ok(Some(key))
    }

    /// Carries out `step` and reports its outcome through `report`. Blocking: run it
    /// on a worker thread. `Login` returns once the URL is reported
    /// (`LoginPending`); its outcome is reported later from the login's own thread.
    /// `Discard` reports nothing.
    pub fn execute(self: &Arc<Self>, step: AuthStep, report: Report) {
        tracing::debug!(server = %self.server, "oauth step: {step}");
        *self.reporter.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.clone());
        let outcome = match step {
            AuthStep::Load => Ok(self.load()),
            AuthStep::Obtain { challenge } => self.obtain(&challenge),
            AuthStep::Refresh => self.refresh(),
            AuthStep::Login { challenge } => match self.start_login(&challenge, report.clone()) {
                Ok(()) => return,
                Err(f) => Err(f),
            },
            AuthStep::Discard => {
                self.discard();
                return;
            }
        };
        let update = self.hidden(outcome.unwrap_or_else(Failure::update));
        tracing::debug!(server = %self.server, "oauth outcome: {update}");
        report(update);
    }

    /// Every secret this backend's credential holds or is configured with: tokens,
    /// the client's secret, its private key.
    fn known_secrets(&self) -> Vec<String> {
        let held = self.held();
        let mut secrets: Vec<String> = Vec::new();
        if let Some(c) = &held.credential {
            if let Some(t) = &c.token {
                secrets.push(t.access_token.expose().to_owned());
                secrets.extend(t.refresh_token.as_ref().map(|r| r.expose().to_owned()));
            }
            secrets.extend(c.client.client_secret.as_ref().map(|s| s.expose().to_owned()));
        }
        secrets.extend(held.dead_refresh.as_ref().map(|r| r.expose().to_owned()));
        secrets.extend(self.settings.client_secret.as_ref().map(|s| s.expose().to_owned()));
        secrets.extend(self.settings.private_key.as_ref().map(|s| s.expose().to_owned()));
        secrets.extend(self.settings.assertion.as_ref().map(|s| s.expose().to_owned()));
        secrets.extend(self.settings.idp_client_secret.as_ref().map(|s| s.expose().to_owned()));
        secrets.extend(self.settings.id_token.as_ref().map(|s| s.expose().to_owned()));
        secrets
    }

    /// `text` (from a server, say) with every secret this authority knows hidden.
    fn hide(&self, text: &str) -> String {
        let secrets = self.known_secrets();
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        super::secret::hide(text, &secrets)
    }

    /// `update` as the engine (and the log) may see it: a failure's message, which
    /// may quote what a server said, with every secret this authority knows hidden.
    fn hidden(&self, update: CredentialUpdate) -> CredentialUpdate {
        match update {
            CredentialUpdate::Failed { reason, message } => {
                CredentialUpdate::Failed { reason, message: self.hide(&message) }
            }
            other => other,
        }
    }

    /// The interactive login of `tether auth login NAME`: prints the URL to `out`,
    /// opens the browser if allowed, waits for the person (at most ten minutes),
    /// stores the credential. With the client credentials grant, just gets and
    /// stores a token.
    pub fn login_blocking(&self, out: &mut dyn Write) -> Result<LoginSummary, String> {
        if self.settings.grant.unattended() {
            let discovery =
                discovery::discover(&self.http, &self.url, &Challenge::default(), None).map_err(|f| f.message)?;
            self.unattended(&discovery, &Challenge::default()).map_err(|f| f.message)?;
        } else {
            let challenge = self.probe_challenge();
            let mut prepared = self.prepare_login(&challenge).map_err(|f| f.message)?;
            let io = |e: std::io::Error| e.to_string();
            let mut waiting = None;
            if prepared.loopback.is_none() {
                // Through the cluster's public callback: the login waits in
                // the store, and the person opens tether's start link for it.
                let shared = self.shared_login.as_ref().ok_or("no shared callback")?;
                let state = prepared.expected.state.clone();
                let pending = PendingLogin {
                    key: self.key.clone(),
                    server: self.server.to_string(),
                    expected: prepared.expected.clone(),
                    exchange: prepared.exchange,
                };
                prepared.url = shared.put(&pending, &prepared.url, login::LOGIN_TIMEOUT).map_err(|f| f.message)?;
                prepared.exchange = pending.exchange;
                waiting = Some(state);
            }
            writeln!(out, "To log in to {}, open this URL in a browser:\n\n    {}\n", self.server, prepared.url)
                .map_err(io)?;
            if self.settings.open_browser {
                if let Err(e) = browser::open(&prepared.url) {
                    writeln!(out, "({e}; open the URL by hand.)").map_err(io)?;
                }
            }
            writeln!(
                out,
                "Waiting for the login to finish (at most {} minutes)...",
                login::LOGIN_TIMEOUT.as_secs() / 60
            )
            .map_err(io)?;
            out.flush().map_err(io)?;
            let Some(loopback) = prepared.loopback else {
                // A replica finishes it and stores the credential, which this
                // process waits to see.
                let state = waiting.ok_or("no shared login")?;
                return self.await_shared_login(&state);
            };
            let never = AtomicBool::new(false);
            let code = match loopback.wait(&prepared.expected, login::LOGIN_TIMEOUT, &never) {
                Some(Ok(code)) => code,
                Some(Err(f)) => return Err(f.message),
                None => return Err("the login was cancelled".into()),
            };
            drop(loopback);
            self.finish_login(prepared.exchange, &code).map_err(|f| f.message)?;
        }
        self.summary()
    }

    /// [`Authority::login_blocking`] through the shared callback: the login's
    /// state goes to the store, and the store is read until a credential newer
    /// than the one there before arrives (a replica finished the login).
    fn await_shared_login(&self, state: &str) -> Result<LoginSummary, String> {
        let shared = self.shared_login.as_ref().ok_or("no shared callback")?;
        let deadline = std::time::Instant::now() + login::LOGIN_TIMEOUT;
        while std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(250));
            match shared.outcome(state) {
                Ok(None) => continue,
                Ok(Some(Ok(()))) => {
                    let stored =
                        self.read_store().ok_or("the login finished, but its credential is not in the store")?;
                    self.held().credential = Some(stored);
                    return self.summary();
                }
                Ok(Some(Err(message))) => return Err(message),
                Err(e) => tracing::debug!(server = %self.server, "waiting for the login: {e}"),
            }
        }
        shared.forget(state);
        Err(format!("the login was not finished within {} minutes", login::LOGIN_TIMEOUT.as_secs() / 60))
    }

    /// What the held credential amounts to, after a login.
    fn summary(&self) -> Result<LoginSummary, String> {
        let held = self.held();
        let credential = held.credential.as_ref().ok_or("no credential after the login")?;
        let token = credential.token.as_ref().ok_or("no token after the login")?;
        Ok(LoginSummary {
            issuer: credential.issuer.clone(),
            scope: token.scope.clone(),
            expires_at: token.expires_at,
            refreshable: self.refreshable(token),
        })
    }

    /// Where the credential stands, from memory or else the store (no network).
    pub fn status(&self) -> AuthStatus {
        let method = match self.settings.grant {
            Grant::AuthorizationCode => "oauth (authorization code)",
            Grant::ClientCredentials => "client credentials",
            Grant::JwtBearer => "workload identity (jwt-bearer)",
            Grant::EnterpriseManaged => "enterprise-managed (identity assertion)",
        };
        let login_pending = self.login.lock().unwrap_or_else(|e| e.into_inner()).is_some()
            || self.shared_pending.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        let credential = self.held().credential.clone().or_else(|| self.read_store());
        let token = credential.as_ref().and_then(|c| c.token.as_ref());
        let refreshable = token.is_some_and(|t| self.refreshable(t));
        AuthStatus {
            method,
            person_logs_in: self.settings.grant == Grant::AuthorizationCode,
            logged_in: token.is_some_and(|t| refreshable || t.fresh_at(unix_now(), 0)),
            issuer: credential.as_ref().map(|c| c.issuer.clone()),
            scope: token.and_then(|t| t.scope.clone()),
            expires_at: token.and_then(|t| t.expires_at),
            refreshable,
            login_pending,
        }
    }

    /// Logs out: revokes the refresh token, then the access token, where the
    /// authorization server offers revocation (failures there are logged, not
    /// fatal), and deletes the stored credential (registration included).
    pub fn logout(&self) -> Result<(), String> {
        self.cancel_login();
        let _guard = self.store.lock(&self.key, LEASE).map_err(|e| format!("locking the credential store: {e}"))?;
        let credential = self.read_store().or_else(|| self.held().credential.clone());
        if let Some(c) = &credential {
            if let (Some(endpoint), Some(t)) = (&c.revocation_endpoint, &c.token) {
                match self.client_auth(&c.client, &c.issuer, None) {
                    Ok(auth) => {
                        let tokens =
                            [(t.refresh_token.as_ref(), "refresh_token"), (Some(&t.access_token), "access_token")];
                        for (value, hint) in tokens {
                            if let Some(value) = value {
                                if let Err(f) = token::revoke(&self.http, endpoint, &auth, value, hint) {
                                    tracing::warn!(server = %self.server, "revoking the {hint}: {}", self.hide(&f.message));
                                }
                            }
                        }
                    }
                    Err(f) => tracing::warn!(server = %self.server, "cannot revoke: {}", self.hide(&f.message)),
                }
            }
        }
        self.store.delete(&self.key).map_err(|e| format!("deleting the stored credential: {e}"))?;
        let mut held = self.held();
        held.credential = None;
        held.requested_scope = None;
        Ok(())
    }

    /// The key of its credential in the store.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Another process announced a write of this credential (a store hint):
    /// a newer token it stored is taken at once, so requests carry it before
    /// this process's own refresh would have come round (which then adopts it
    /// anyway, reading the store under the lease). A token this process holds,
    /// or one near its end, is left alone.
    pub fn hinted(&self) {
        // Waiting for a login (here, through the shared callback, or by
        // `tether auth login` anywhere): one finished elsewhere is taken now,
        // not at the engine's next look.
        let waiting = self.shared_pending.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(_, r)| r.clone());
        let holding = self.held().credential.is_some();
        let waiting = waiting
            .or_else(|| (!holding).then(|| self.reporter.lock().unwrap_or_else(|e| e.into_inner()).clone()).flatten());
        if let Some(report) = waiting {
            let update = self.load();
            if matches!(update, CredentialUpdate::Ready { .. }) {
                tracing::debug!(server = %self.server, "a login finished on another replica");
                report(self.hidden(update));
            }
            return;
        }
        let before = self.held().credential.as_ref().and_then(|c| c.token.as_ref()).map(|t| t.access_token.clone());
        let Some(stored) = self.read_store() else { return };
        let Some(token) = stored.token.as_ref() else { return };
        let mut held = self.held();
        let Some(current) = held.credential.as_ref() else { return };
        let held_access = current.token.as_ref().map(|t| &t.access_token);
        if held_access != before.as_ref() {
            // This process renewed (or took) a token while the store was read:
            // what was read may be older than it.
            return;
        }
        if current.issuer == stored.issuer && adoptable(&stored, token, held_access) {
            tracing::debug!(server = %self.server, "took the token another replica stored");
            let update = self.ready(token);
            held.credential = Some(stored.clone());
            drop(held);
            let swapped = (token.access_token.clone(), std::time::Instant::now());
            *self.hint_swapped.lock().unwrap_or_else(|e| e.into_inner()) = Some(swapped);
            // The engine plans the next refresh by the new token's life, not
            // the old one's (which would refresh a token just renewed).
            let reporter = self.reporter.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let (Some(update), Some(report)) = (update, reporter) {
                report(self.hidden(update));
            }
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read_store(&self) -> Option<StoredCredential> {
        match self.store.load(&self.key) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(server = %self.server, "reading the stored credential: {e}");
                None
            }
        }
    }

    fn lock_store(&self) -> Result<Box<dyn super::store::LeaseGuard>, Failure> {
        self.store
            .lock(&self.key, LEASE)
            .map_err(|e| Failure::unavailable(format!("locking the credential store: {e}")))
    }

    /// What a newly granted token is stored as: tied to the issuer, resource and
    /// token endpoint it came from, so it is only ever refreshed there.
    fn fresh_credential(
        &self,
        discovery: &Discovery,
        token_endpoint: &str,
        client: ClientRecord,
        token: TokenRecord,
    ) -> StoredCredential {
        StoredCredential {
            server_url: self.url.clone(),
            issuer: discovery.server.issuer.clone(),
            resource: discovery.resource.clone(),
            token_endpoint: token_endpoint.to_owned(),
            revocation_endpoint: discovery.server.revocation_endpoint.clone(),
            client,
            token: Some(token),
            updated_at: unix_now(),
        }
    }

    /// Writes `credential` (the caller holds the store's lock) and then holds it. A
    /// failed write is logged: the token still works in this process.
    fn persist_locked(&self, credential: StoredCredential) {
        if let Err(e) = self.store.save(&self.key, &credential) {
            tracing::warn!(server = %self.server, "storing the credential failed, it lasts only this process: {e}");
        }
        self.held().credential = Some(credential);
    }

    /// [`Authority::persist_locked`] for a rotated refresh token, with the
    /// store's lease `guard`. The write failing (a shared store down), the
    /// refresh token the store still holds is dead at the authorization server
    /// and this process alone has the new one: the lease is kept and the write
    /// tried again in the background until it lands, is fenced out (the lease
    /// lapsed and another replica took it) or the lease's span is over. While
    /// the lease is held no replica refreshes with the dead token (which a
    /// rotating server takes for a stolen one and revokes the whole grant).
    fn persist_rotated(
        &self,
        guard: Box<dyn super::store::LeaseGuard>,
        leased_at: std::time::Instant,
        credential: StoredCredential,
    ) {
        let Err(e) = self.store.save(&self.key, &credential) else {
            self.held().credential = Some(credential);
            return;
        };
        tracing::warn!(server = %self.server, "storing the rotated credential failed ({e}): holding the lease and trying again");
        self.held().credential = Some(credential.clone());
        let (store, key, server) = (self.store.clone(), self.key.clone(), self.server.clone());
        // Not a moment past the lease's own end (less a margin for the store's
        // clock): after it, this process might hold a newer lease on the key,
        // and a write here would pass that one's fence.
        let until = leased_at + LEASE - Duration::from_secs(2);
        let spawned = std::thread::Builder::new().name(format!("tether-persist-{}", self.server)).spawn(move || {
            let _guard = guard;
            while std::time::Instant::now() < until {
                std::thread::sleep(PERSIST_RETRY);
                match store.save(&key, &credential) {
                    Ok(()) => {
                        tracing::info!(server = %server, "the rotated credential is stored now");
                        return;
                    }
                    Err(e) if super::store::is_write_refused(&e) => break,
                    Err(_) => continue,
                }
            }
            tracing::error!(
                server = %server,
                "the rotated credential could not be stored while this replica held the lease: other replicas \
                 will find its refresh token dead and ask for a login"
            );
        });
        if let Err(e) = spawned {
            tracing::warn!(server = %self.server, "cannot keep trying to store the credential: {e}");
        }
    }

    fn refreshable(&self, token: &TokenRecord) -> bool {
        token.refresh_token.is_some() || self.settings.grant.unattended()
    }

    /// `Ready` for a held token, or `None` when it is expired and cannot be renewed.
    fn ready(&self, token: &TokenRecord) -> Option<CredentialUpdate> {
        let refreshable = self.refreshable(token);
        let expires_in_ms = token.expires_at.map(|at| at.saturating_sub(unix_now()).saturating_mul(1000));
        if expires_in_ms == Some(0) && !refreshable {
            return None;
        }
        Some(CredentialUpdate::Ready { expires_in_ms, refreshable, scope: token.scope.clone() })
    }

    /// Holds `credential` (read from the store) and says `Ready`.
    fn adopt(&self, credential: StoredCredential) -> Result<CredentialUpdate, Failure> {
        let update = credential.token.as_ref().and_then(|t| self.ready(t));
        match update {
            Some(update) => {
                self.held().credential = Some(credential);
                Ok(update)
            }
            None => Ok(CredentialUpdate::LoginRequired),
        }
    }

    /// Remembers a challenge with content; returns the one to act on.
    fn effective_challenge(&self, challenge: &Challenge) -> Challenge {
        let mut held = self.held();
        if *challenge != Challenge::default() {
            held.challenge = challenge.clone();
        }
        held.challenge.clone()
    }

    /// The issuer of what is held or stored: preferred when a protected resource
    /// lists several authorization servers.
    fn known_issuer(&self, stored: Option<&StoredCredential>) -> Option<String> {
        self.held().credential.as_ref().or(stored).map(|c| c.issuer.clone())
    }

    // ----- Load

    fn load(&self) -> CredentialUpdate {
        let Some(credential) = self.read_store() else {
            return CredentialUpdate::Missing;
        };
        match credential.token.as_ref().and_then(|t| self.ready(t)) {
            Some(update) => {
                self.held().credential = Some(credential);
                // A login finished elsewhere (`tether auth login`, another process):
                // the one this process prepared waits for nobody now, and its
                // listener would hold the registration's redirect port.
                self.cancel_login();
                update
            }
            None => CredentialUpdate::Missing,
        }
    }

    // ----- Obtain

    fn obtain(&self, challenge: &Challenge) -> Result<CredentialUpdate, Failure> {
        let challenge = self.effective_challenge(challenge);
        let stored = self.read_store();
        let preferred = self.known_issuer(stored.as_ref());
        let discovery = discovery::discover(&self.http, &self.url, &challenge, preferred.as_deref())?;
        let issuer = discovery.server.issuer.clone();
        {
            // Tokens of another authorization server are never presented again.
            let mut held = self.held();
            if held.credential.as_ref().is_some_and(|c| c.issuer != issuer) {
                held.credential = None;
            }
        }
        if self.settings.grant.unattended() {
            return self.unattended(&discovery, &challenge);
        }
        let Some(stored) = stored.filter(|c| c.issuer == issuer) else {
            return Ok(CredentialUpdate::LoginRequired);
        };
        let Some(token) = &stored.token else {
            return Ok(CredentialUpdate::LoginRequired);
        };
        let held_access =
            self.held().credential.as_ref().and_then(|c| c.token.as_ref()).map(|t| t.access_token.clone());
        if adoptable(&stored, token, held_access.as_ref()) {
            return self.adopt(stored);
        }
        if token.refresh_token.is_some() {
            return self.refresh();
        }
        Ok(CredentialUpdate::LoginRequired)
    }

    /// A grant with no person (client credentials or a workload's JWT).
    fn unattended(&self, discovery: &Discovery, challenge: &Challenge) -> Result<CredentialUpdate, Failure> {
        let _guard = self.lock_store()?;
        self.unattended_locked(discovery, challenge)
    }

    /// An unattended grant, its refusals classified for the engine: nobody can log
    /// in to mend a refused assertion (a workload's JWT, an ID token kept fresh by
    /// SSO tooling), a file not there yet, or a trust not yet set up at the server;
    /// the platform, the tooling or an administrator does, so the engine tries again
    /// on its backoff ([`CredentialFailure::Unavailable`]) instead of waiting for a
    /// login that cannot come.
    fn unattended_locked(&self, discovery: &Discovery, challenge: &Challenge) -> Result<CredentialUpdate, Failure> {
        self.unattended_grant(discovery, challenge).map_err(|f| match f.reason {
            CredentialFailure::InvalidGrant => Failure::unavailable(f.message),
            _ => f,
        })
    }

    fn unattended_grant(&self, discovery: &Discovery, challenge: &Challenge) -> Result<CredentialUpdate, Failure> {
        match self.settings.grant {
            Grant::JwtBearer => {
                let assertion = self.secret_from(
                    "assertion",
                    self.settings.assertion.as_ref(),
                    self.settings.assertion_file.as_deref(),
                )?;
                self.jwt_bearer_locked(discovery, challenge, &assertion)
            }
            Grant::EnterpriseManaged => {
                let assertion = self.identity_assertion(discovery, challenge)?;
                self.jwt_bearer_locked(discovery, challenge, &assertion)
            }
            _ => self.client_credentials_locked(discovery, challenge),
        }
    }

    /// The scope to ask an unattended grant for: configured, else the challenge's,
    /// else what the resource lists.
    fn unattended_scope(&self, discovery: &Discovery, challenge: &Challenge) -> Option<String> {
        self.settings
            .scope
            .clone()
            .or_else(|| challenge.scope.clone())
            .or_else(|| discovery.resource_scopes.as_ref().filter(|s| !s.is_empty()).map(|s| s.join(" ")))
    }

    /// A secret configured as `key`, or read from `key_file` now (platforms and
    /// SSO helpers rotate these files; an old copy may have expired).
    fn secret_from(
        &self,
        key: &str,
        value: Option<&Secret>,
        file: Option<&std::path::Path>,
    ) -> Result<Secret, Failure> {
        if let Some(value) = value {
            return Ok(value.clone());
        }
        let grant = self.settings.grant.name();
        let path = file.ok_or_else(|| Failure::rejected(format!("the {grant} grant needs {key} or {key}_file")))?;
        // A file not written yet (or being rewritten) may be there at the next try;
        // one that cannot be read (permissions, a directory, not UTF-8) will not.
        let text = crate::safe_file::read_regular_text(path, crate::safe_file::SECRET_LIMIT).map_err(|e| {
            let message = format!("reading the {key}_file {}: {e}", path.display());
            match e.kind() {
                std::io::ErrorKind::NotFound => Failure::unavailable(message),
                _ => Failure::rejected(message),
            }
        })?;
        let text = text.trim();
        if text.is_empty() {
            return Err(Failure::unavailable(format!("the {key}_file {} is empty", path.display())));
        }
        Ok(Secret::new(text.to_owned()))
    }

    /// Enterprise-managed authorization, first half: the person's ID token for an
    /// ID-JAG at the organisation's identity provider, addressed to this backend's
    /// authorization server and resource.
    fn identity_assertion(&self, discovery: &Discovery, challenge: &Challenge) -> Result<Secret, Failure> {
        let endpoint = self
            .settings
            .idp_token_endpoint
            .as_deref()
            .ok_or_else(|| Failure::rejected("the enterprise_managed grant needs idp_token_endpoint"))?;
        let client_id = self
            .settings
            .idp_client_id
            .as_deref()
            .ok_or_else(|| Failure::rejected("the enterprise_managed grant needs idp_client_id"))?;
        let id_token =
            self.secret_from("id_token", self.settings.id_token.as_ref(), self.settings.id_token_file.as_deref())?;
        let secret = self.settings.idp_client_secret.as_ref();
        let method = if secret.is_some() { token::BASIC } else { token::NONE };
        let auth = ClientAuth::for_method(method, client_id, secret);
        let scope = self.unattended_scope(discovery, challenge);
        let audience = &discovery.server.issuer;
        token::exchange_for_id_jag(
            &self.http,
            endpoint,
            &auth,
            &id_token,
            audience,
            &discovery.resource,
            scope.as_deref(),
        )
    }

    /// The JWT-bearer grant: a JWT (the workload's, or an ID-JAG) for a token, with
    /// the configured client (if any) authenticating as it is set up to.
    fn jwt_bearer_locked(
        &self,
        discovery: &Discovery,
        challenge: &Challenge,
        assertion: &Secret,
    ) -> Result<CredentialUpdate, Failure> {
        let server = &discovery.server;
        registration::check_configured_issuer(&self.settings, &server.issuer)?;
        let mut client = ClientRecord {
            client_id: self.settings.client_id.clone().unwrap_or_default(),
            client_secret: None,
            source: ClientSource::Configured,
            redirect_uri: None,
            auth_method: None,
        };
        let auth = if client.client_id.is_empty() {
            ClientAuth::Unidentified
        } else {
            self.client_auth(&client, &server.issuer, server.token_endpoint_auth_methods_supported.as_deref())?
        };
        let scope = self.unattended_scope(discovery, challenge);
        let endpoint = server.token_endpoint()?;
        let dpop = self.dpop_key_for(None, Some(discovery))?;
        let (resource, scope_ref) = (&discovery.resource, scope.as_deref());
        let granted = token::jwt_bearer(&self.http, endpoint, &auth, assertion, resource, scope_ref, dpop.as_deref())?;
        client.auth_method = Some(auth.method().to_owned());
        Ok(self.keep_unattended(discovery, endpoint, client, granted, scope, dpop.as_deref()))
    }

    /// Stores what an unattended grant granted and says so to the engine (always
    /// renewable: the grant is made again).
    fn keep_unattended(
        &self,
        discovery: &Discovery,
        endpoint: &str,
        client: ClientRecord,
        granted: Granted,
        scope: Option<String>,
        dpop: Option<&DpopKey>,
    ) -> CredentialUpdate {
        let token = token_record(granted, None, scope, dpop);
        let update = self.ready(&token).unwrap_or(CredentialUpdate::Ready {
            expires_in_ms: None,
            refreshable: true,
            scope: None,
        });
        self.persist_locked(self.fresh_credential(discovery, endpoint, client, token));
        update
    }

    fn client_credentials_locked(
        &self,
        discovery: &Discovery,
        challenge: &Challenge,
    ) -> Result<CredentialUpdate, Failure> {
        let client_id = self
            .settings
            .client_id
            .clone()
            .ok_or_else(|| Failure::rejected("the client_credentials grant needs a configured client_id"))?;
        let mut client = ClientRecord {
            client_id,
            client_secret: None,
            source: ClientSource::Configured,
            redirect_uri: None,
            auth_method: None,
        };
        let server = &discovery.server;
        registration::check_configured_issuer(&self.settings, &server.issuer)?;
        if let (Some(Ok(key)), Some(algs)) =
            (&self.signing_key, &server.token_endpoint_auth_signing_alg_values_supported)
        {
            if !algs.iter().any(|a| a == key.alg()) {
                tracing::warn!(server = %self.server, "the authorization server does not list {} for private_key_jwt; trying it anyway", key.alg());
            }
        }
        let auth =
            self.client_auth(&client, &server.issuer, server.token_endpoint_auth_methods_supported.as_deref())?;
        if matches!(auth, ClientAuth::None { .. }) {
            return Err(Failure::rejected("the client_credentials grant needs a client_secret or a private_key"));
        }
        let scope = self.unattended_scope(discovery, challenge);
        let endpoint = server.token_endpoint()?;
        let dpop = self.dpop_key_for(None, Some(discovery))?;
        let granted = token::client_credentials(
            &self.http,
            endpoint,
            &auth,
            &discovery.resource,
            scope.as_deref(),
            dpop.as_deref(),
        )?;
        client.auth_method = Some(auth.method().to_owned());
        Ok(self.keep_unattended(discovery, endpoint, client, granted, scope, dpop.as_deref()))
    }

    // ----- Refresh

    fn refresh(&self) -> Result<CredentialUpdate, Failure> {
        let asked_for = self.refresh_asked_for.lock().unwrap_or_else(|e| e.into_inner()).take();
        let guard = self.lock_store()?;
        let leased_at = std::time::Instant::now();
        let stored = self.read_store();
        let held = self.held().credential.clone();
        let held_access = held.as_ref().and_then(|c| c.token.as_ref()).map(|t| t.access_token.clone());
        // The token the engine asked to replace, if known (a hint may have put
        // a newer one in hand since): only that one is refreshed.
        let held_access = asked_for.or(held_access);
        // A hint put the stored token in hand just before the engine asked to
        // renew what it held (its timer was for the token before): taken as
        // renewed, once. A token the backend refused is asked again, and then
        // renewed.
        let swapped = self.hint_swapped.lock().unwrap_or_else(|e| e.into_inner()).take();
        let just_hinted =
            swapped.is_some_and(|(token, at)| at.elapsed() < HINT_RACE && held_access.as_ref() == Some(&token));
        // Another process refreshed (or logged in) since this one read the store.
        if let Some(s) = &stored {
            if let Some(t) = &s.token {
                let hinted = just_hinted && Some(&t.access_token) == held_access.as_ref();
                if adoptable(s, t, held_access.as_ref()) || (hinted && adoptable(s, t, None)) {
                    tracing::debug!(server = %self.server, "adopting the token another process stored");
                    return self.adopt(s.clone());
                }
            }
        }
        let base = stored.filter(|c| c.token.is_some()).or(held);
        if self.settings.grant.unattended() {
            let discovery = match &base {
                Some(c) => stored_discovery(c),
                None => {
                    discovery::discover(&self.http, &self.url, &self.effective_challenge(&Challenge::default()), None)?
                }
            };
            // The same scope as the token it renews.
            let scope = base.as_ref().and_then(|c| c.token.as_ref()).and_then(|t| t.scope.clone());
            return self.unattended_locked(&discovery, &Challenge { scope, ..Challenge::default() });
        }
        let Some(base) = base else {
            return Ok(CredentialUpdate::LoginRequired);
        };
        let Some(old) = base.token.as_ref().and_then(|t| t.refresh_token.clone()) else {
            return Ok(CredentialUpdate::LoginRequired);
        };
        let auth = self.client_auth(&base.client, &base.issuer, None)?;
        let dpop = self.dpop_key(base.token.as_ref())?;
        match token::refresh(&self.http, &base.token_endpoint, &auth, &old, &base.resource, dpop.as_deref()) {
            Ok(granted) => {
                let previous_scope = base.token.as_ref().and_then(|t| t.scope.clone());
                let token = token_record(granted, Some(old), previous_scope, dpop.as_deref());
                let update = self.ready(&token).unwrap_or(CredentialUpdate::LoginRequired);
                // Written before it is held: a rotated refresh token is on disk
                // before anything can use it.
                let rotated = StoredCredential { token: Some(token), updated_at: unix_now(), ..base };
                self.persist_rotated(guard, leased_at, rotated);
                Ok(update)
            }
            Err(f) if f.reason == CredentialFailure::InvalidGrant => {
                let now_stored = self.read_store();
                let rotated = now_stored
                    .as_ref()
                    .and_then(|c| c.token.as_ref())
                    .is_some_and(|t| t.refresh_token.as_ref() != Some(&old));
                if rotated {
                    tracing::debug!(server = %self.server, "refresh token was rotated by another process: adopting its credential");
                    return self.adopt(now_stored.expect("checked above"));
                }
                self.held().dead_refresh = Some(old);
                Err(f)
            }
            Err(f)
                if f.reason == CredentialFailure::ClientRefused && base.client.source == ClientSource::Registered =>
            {
                // The server forgot the client tether registered (its restart, a
                // purge): the registration and the grant made under it are dead.
                // Dropped, so the next login registers anew instead of sending a
                // person to an error page with the dead client_id.
                self.forget_registration(&base.client.client_id);
                Err(Failure::invalid_grant(format!(
                    "{}; the authorization server no longer knows the client tether registered, which was \
                     dropped: the next login registers again",
                    f.message
                )))
            }
            Err(f) => Err(f),
        }
    }

    /// [`Authority::forget_registration`] under the store's lock.
    fn forget_registration_unlocked(&self, client_id: &str) {
        match self.lock_store() {
            Ok(_guard) => self.forget_registration(client_id),
            Err(e) => tracing::warn!(server = %self.server, "dropping a registration the server forgot: {}", e.message),
        }
    }

    /// Whether the authorization server refuses an authorization request outright
    /// (a 4xx where a login page or a redirect should be: an unknown client, a
    /// redirect URI it does not know), with what it said. Asked without following
    /// redirects, so nothing reaches the login's listener.
    fn authorization_refused(&self, url: &str) -> Option<String> {
        match self.http.peek(url) {
            Ok(answer) if (400..500).contains(&answer.status) => Some(answer.oauth_error().1),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(server = %self.server, "asking the authorization endpoint first: {}", e.message);
                None
            }
        }
    }

    /// Deletes the stored credential of the registered client `client_id` (the
    /// store's lock is held by the caller), and what is held of it.
    fn forget_registration(&self, client_id: &str) {
        let stored = self.read_store();
        if stored.as_ref().is_some_and(|c| c.client.client_id == client_id) {
            if let Err(e) = self.store.delete(&self.key) {
                tracing::warn!(server = %self.server, "dropping a registration the server forgot: {e}");
            }
        }
        let mut held = self.held();
        if held.credential.as_ref().is_some_and(|c| c.client.client_id == client_id) {
            held.credential = None;
        }
        tracing::warn!(server = %self.server, "the authorization server no longer knows client {client_id}: registration dropped");
    }

    /// How the client authenticates at the token endpoint: a signed assertion for a
    /// configured client with a private key; else its secret (the configured one,
    /// or the one its registration issued) by the method its registration or the
    /// server names; else as a public client.
    fn client_auth(
        &self,
        client: &ClientRecord,
        issuer: &str,
        supported: Option<&[String]>,
    ) -> Result<ClientAuth, Failure> {
        if client.source == ClientSource::Configured {
            if let Some(key) = &self.signing_key {
                let key = key.as_ref().map_err(|e| Failure::rejected(format!("private_key: {e}")))?;
                let assertion =
                    key.client_assertion(&client.client_id, issuer, unix_now()).map_err(Failure::rejected)?;
                return Ok(ClientAuth::Jwt { assertion: Secret::new(assertion) });
            }
        }
        let secret = match client.source {
            ClientSource::Configured => self.settings.client_secret.clone(),
            _ => client.client_secret.clone(),
        };
        let method = token::choose_method(secret.is_some(), client.auth_method.as_deref(), supported);
        Ok(ClientAuth::for_method(method, &client.client_id, secret.as_ref()))
    }

    // ----- Login

    fn start_login(self: &Arc<Self>, challenge: &Challenge, report: Report) -> Result<(), Failure> {
        // A new login replaces one still waiting (its listener closes).
        self.cancel_login();
        let prepared = self.prepare_login(challenge)?;
        let Some(loopback) = prepared.loopback else {
            return self.start_shared_login(prepared.expected, prepared.exchange, prepared.url, report);
        };
        let prepared = Prepared { loopback: Some(loopback), ..prepared };
        let cancel = Arc::new(AtomicBool::new(false));
        *self.login.lock().unwrap_or_else(|e| e.into_inner()) = Some(cancel.clone());
        let url = prepared.url.clone();
        report(CredentialUpdate::LoginPending { url: url.clone() });
        let this = Arc::clone(self);
        let flag = cancel.clone();
        let spawned = std::thread::Builder::new().name(format!("tether-login-{}", self.server)).spawn(move || {
            let Prepared { loopback, expected, exchange, .. } = prepared;
            let loopback = loopback.expect("a loopback login");
            let Some(outcome) = loopback.wait(&expected, login::LOGIN_TIMEOUT, &flag) else {
                return; // replaced by a newer login, or logged out
            };
            drop(loopback);
            let update = match outcome.and_then(|code| this.finish_login(exchange, &code)) {
                Ok(update) => update,
                Err(f) => {
                    let update = this.hidden(f.update());
                    if let CredentialUpdate::Failed { message, .. } = &update {
                        tracing::warn!(server = %this.server, "login failed: {message}");
                    }
                    update
                }
            };
            if this.finish_waiting(&flag) {
                report(update);
            }
        });
        if let Err(e) = spawned {
            self.cancel_login();
            return Err(Failure::rejected(format!("cannot wait for the login: {e}")));
        }
        if self.settings.open_browser {
            if let Err(e) = browser::open(&url) {
                tracing::info!(server = %self.server, "{e}; the login URL is reported instead");
            }
        }
        Ok(())
    }

    /// A login through the shared callback: its state goes to the store for
    /// as long as a person has to log in, and the URL is reported (and opened,
    /// if so set). Whichever replica the callback reaches finishes it.
    fn start_shared_login(
        &self,
        expected: Expected,
        exchange: Exchange,
        url: String,
        report: Report,
    ) -> Result<(), Failure> {
        let shared = self.shared_login.as_ref().expect("prepared for the shared callback");
        let state = expected.state.clone();
        let pending = PendingLogin { key: self.key.clone(), server: self.server.to_string(), expected, exchange };
        // The person is given tether's own start link, not the authorization
        // URL: it ties the login to the browser that opens it first.
        let url = shared.put(&pending, &url, login::LOGIN_TIMEOUT)?;
        *self.shared_pending.lock().unwrap_or_else(|e| e.into_inner()) = Some((state, report.clone()));
        report(CredentialUpdate::LoginPending { url: url.clone() });
        if self.settings.open_browser {
            if let Err(e) = browser::open(&url) {
                tracing::info!(server = %self.server, "{e}; the login URL is reported instead");
            }
        }
        Ok(())
    }

    /// Cancels the login waiting in the background, if any (one waiting in the
    /// shared store is dropped from it).
    fn cancel_login(&self) {
        if let Some(flag) = self.login.lock().unwrap_or_else(|e| e.into_inner()).take() {
            flag.store(true, Ordering::SeqCst);
        }
        let pending = self.shared_pending.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let (Some((state, _)), Some(shared)) = (pending, &self.shared_login) {
            shared.forget(&state);
        }
    }

    /// The login with `flag` ended: forgets it unless a newer one replaced it.
    /// True if it was still the current one (its outcome is worth reporting).
    fn finish_waiting(&self, flag: &Arc<AtomicBool>) -> bool {
        let mut current = self.login.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, flag)) {
            *current = None;
            return true;
        }
        false
    }

    /// Whether the backend asks for a login at all: one unauthenticated GET, as a
    /// client without a token would make. `tether auth status` asks this of a
    /// server it holds nothing for, so a public server is not reported as
    /// "not logged in" (tether cannot tell from the configuration: an OAuth
    /// server is one that answers 401).
    pub fn asks_for_login(&self) -> Result<bool, String> {
        match self.http.probe(&self.url) {
            Ok((401, _)) => Ok(true),
            // 403 is a refusal for lack of scope when it carries a challenge, and
            // some other refusal (an IP rule, a WAF) when it does not.
            Ok((403, challenge)) => Ok(challenge.is_some()),
            Ok(_) => Ok(false),
            Err(failure) => Err(self.hide(&failure.message)),
        }
    }

    /// Provokes the backend's challenge (for the CLI, which has none at hand).
    fn probe_challenge(&self) -> Challenge {
        match self.http.probe(&self.url) {
            Ok((401 | 403, Some(header))) => super::challenge::parse(&header).unwrap_or_default(),
            _ => Challenge::default(),
        }
    }

    fn prepare_login(&self, challenge: &Challenge) -> Result<Prepared, Failure> {
        if self.settings.grant.unattended() {
            return Err(Failure::rejected(
                "this backend uses the client_credentials or jwt_bearer grant: no person logs in",
            ));
        }
        let challenge = self.effective_challenge(challenge);
        let stored = self.read_store();
        let preferred = self.known_issuer(stored.as_ref());
        let discovery = discovery::discover(&self.http, &self.url, &challenge, preferred.as_deref())?;
        let server = &discovery.server;
        if !server.supports_s256() {
            return Err(Failure::rejected(format!(
                "the authorization server {} does not list PKCE S256 in code_challenge_methods_supported: refusing to log in",
                server.issuer
            )));
        }
        let endpoint = server.authorization_endpoint.clone().ok_or_else(|| {
            Failure::rejected(format!("the authorization server {} has no authorization endpoint", server.issuer))
        })?;
        // Only this issuer's registration may be reused (never another's).
        let kept = stored.as_ref().filter(|c| c.issuer == server.issuer).map(|c| c.client.clone());
        let (loopback, redirect_uri) = match &self.shared_login {
            Some(shared) => (None, shared.redirect_uri().to_owned()),
            None => {
                let loopback = self.listen(kept.as_ref()).map_err(Failure::rejected)?;
                tracing::debug!(server = %self.server, "the login redirect listens on 127.0.0.1:{}", loopback.port());
                let redirect_uri = loopback.redirect_uri();
                (Some(loopback), redirect_uri)
            }
        };
        let mut client = registration::identify(&self.http, &self.settings, server, kept.as_ref(), &redirect_uri)?;
        let reused =
            kept.as_ref().is_some_and(|k| k.source == ClientSource::Registered && k.client_id == client.client_id);
        let configured = client.source == ClientSource::Configured;
        let prior: Vec<String> = {
            let held = self.held();
            let granted = held.credential.as_ref().and_then(|c| c.token.as_ref()).and_then(|t| t.scope.clone());
            granted.into_iter().chain(held.requested_scope.clone()).collect()
        };
        let prior: Vec<&str> = prior.iter().map(String::as_str).collect();
        let scope = login::select_scope(
            challenge.scope.as_deref(),
            &prior,
            self.settings.scope.as_deref(),
            discovery.resource_scopes.as_deref(),
            server,
        );
        let pkce = Pkce::new();
        let state = pkce::state();
        let url_for = |client_id: &str| {
            AuthorizationRequest {
                endpoint: &endpoint,
                client_id,
                redirect_uri: &redirect_uri,
                code_challenge: &pkce.challenge,
                state: &state,
                resource: &discovery.resource,
                scope: scope.as_deref(),
            }
            .url()
        };
        let mut url = url_for(&client.client_id)?;
        if reused {
            // A registration from an earlier login: the server may have forgotten
            // it (a restart, a purge), and then shows the person an error page it
            // cannot redirect from, and the login would wait for nothing. Asked
            // first; a refused one is dropped and the client registers again.
            if let Some(refusal) = self.authorization_refused(&url) {
                tracing::warn!(server = %self.server, "the authorization server refuses the stored registration ({refusal}): registering again");
                self.forget_registration_unlocked(&client.client_id);
                client = registration::identify(&self.http, &self.settings, server, None, &redirect_uri)?;
                url = url_for(&client.client_id)?;
            }
        } else if configured {
            // A configured client the server refuses by name (an OAuth error in
            // its answer, not just any page): no login can succeed, say so now.
            if let Some((Some(error), text)) =
                self.http.peek(&url).ok().filter(|a| (400..500).contains(&a.status)).map(|a| a.oauth_error())
            {
                if matches!(error.as_str(), "invalid_client" | "unauthorized_client") {
                    return Err(Failure::client_refused(format!(
                        "the authorization server refuses client {:?} at its authorization endpoint ({text})",
                        client.client_id
                    )));
                }
            }
        }
        self.held().requested_scope = scope.clone();
        let expected = Expected {
            state,
            issuer: server.issuer.clone(),
            iss_required: server.authorization_response_iss_parameter_supported,
        };
        Ok(Prepared {
            loopback,
            expected,
            url,
            exchange: Exchange { discovery, client, redirect_uri, verifier: pkce.verifier, scope },
        })
    }

    /// The loopback listener: on the configured port; else on the port of the
    /// stored registration (so its redirect URI still matches), falling back to any
    /// free port (and so to a new registration) when that one is taken.
    fn listen(&self, kept: Option<&ClientRecord>) -> Result<Loopback, String> {
        if let Some(port) = self.settings.redirect_port {
            return Loopback::bind(port);
        }
        let kept_port = kept
            .filter(|c| c.source == ClientSource::Registered)
            .and_then(|c| c.redirect_uri.as_deref())
            .and_then(|u| url::Url::parse(u).ok())
            .and_then(|u| u.port());
        if let Some(port) = kept_port {
            // The listener of a login that just ended may take a moment to close.
            for attempt in 0..3 {
                if let Ok(loopback) = Loopback::bind(port) {
                    return Ok(loopback);
                }
                if attempt < 2 {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            tracing::debug!(server = %self.server, "port {port} of the stored registration is taken: registering anew");
        }
        Loopback::bind(0)
    }

    /// Exchanges the code and stores the credential (the registration with it).
    fn finish_login(&self, exchange: Exchange, code: &Secret) -> Result<CredentialUpdate, Failure> {
        let Exchange { discovery, mut client, redirect_uri, verifier, scope } = exchange;
        let server = &discovery.server;
        let endpoint = server.token_endpoint()?;
        let auth =
            self.client_auth(&client, &server.issuer, server.token_endpoint_auth_methods_supported.as_deref())?;
        // A refused code (expired, used, for another redirect) is a failed login, not
        // a dead grant: the credential in hand, if any (a step-up), stays.
        let dpop = self.dpop_key_for(None, Some(&discovery))?;
        let (resource, dpop_ref) = (&discovery.resource, dpop.as_deref());
        let code = token::Code { code, redirect_uri: &redirect_uri, verifier: &verifier };
        let granted =
            token::exchange_code(&self.http, endpoint, &auth, code, resource, dpop_ref).map_err(|f| {
                match f.reason {
                    CredentialFailure::InvalidGrant => Failure::rejected(f.message),
                    _ => f,
                }
            })?;
        client.auth_method = Some(auth.method().to_owned());
        let token = token_record(granted, None, scope, dpop.as_deref());
        let update = self
            .ready(&token)
            .ok_or_else(|| Failure::rejected("the token endpoint granted an access token that had already expired"))?;
        let _guard = self.lock_store()?;
        self.persist_locked(self.fresh_credential(&discovery, endpoint, client, token));
        tracing::info!(server = %self.server, issuer = %server.issuer, "logged in");
        Ok(update)
    }

    // ----- Discard

    /// Forgets the dead credential: in memory always; in the store only if the
    /// store still holds the dead one (another process may have logged in since).
    /// Does not wait for the store's lock.
    /// A dynamic registration is kept (it is not a grant), so the next login reuses it.
    fn discard(&self) {
        let (held, dead) = {
            let mut held = self.held();
            (held.credential.take(), held.dead_refresh.take())
        };
        // Never waits (the engine may run this inline): a process holding the lock
        // is refreshing or storing this credential, and what it writes replaces the
        // dead one anyway.
        let _guard = match self.store.try_lock(&self.key, LEASE) {
            Ok(Some(g)) => g,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(server = %self.server, "discard: locking the credential store: {e}");
                return;
            }
        };
        let Some(mut stored) = self.read_store() else { return };
        let Some(token) = &stored.token else { return };
        let same_refresh = dead.is_some() && token.refresh_token == dead;
        let same_access =
            held.as_ref().and_then(|c| c.token.as_ref()).is_some_and(|t| t.access_token == token.access_token);
        if !(same_refresh || same_access) {
            return;
        }
        let result = if stored.client.source == ClientSource::Registered {
            stored.token = None;
            stored.updated_at = unix_now();
            self.store.save(&self.key, &stored)
        } else {
            self.store.delete(&self.key)
        };
        if let Err(e) = result {
            tracing::warn!(server = %self.server, "discarding the stored credential: {e}");
        }
    }
}

/// What a refresh needs to know of the authorization server, from a stored
/// credential (no network).
fn stored_discovery(c: &StoredCredential) -> Discovery {
    Discovery {
        resource: c.resource.clone(),
        resource_scopes: None,
        resource_dpop: false,
        server: discovery::ServerMetadata {
            issuer: c.issuer.clone(),
            token_endpoint: Some(c.token_endpoint.clone()),
            revocation_endpoint: c.revocation_endpoint.clone(),
            documented: true,
            ..discovery::ServerMetadata::default()
        },
    }
}

/// The stored form of a grant: a refresh token not rotated keeps the old one, a
/// scope not stated is the one asked for (or held before).
fn token_record(
    granted: Granted,
    previous_refresh: Option<Secret>,
    scope: Option<String>,
    dpop: Option<&DpopKey>,
) -> TokenRecord {
    let bound = granted.token_type.eq_ignore_ascii_case("dpop");
    TokenRecord {
        access_token: granted.access_token,
        refresh_token: granted.refresh_token.or(previous_refresh),
        expires_at: granted.expires_in.map(|s| unix_now().saturating_add(s)),
        scope: granted.scope.or(scope),
        token_type: granted.token_type,
        dpop_key: dpop.filter(|_| bound).map(|k| k.stored().clone()),
    }
}

fn load_signing_key(settings: &OAuthSettings) -> Option<Result<SigningKey, String>> {
    let pem = match (&settings.private_key, &settings.private_key_file) {
        (Some(key), _) => key.expose().to_owned(),
        (None, Some(path)) => match crate::safe_file::read_regular_text(path, crate::safe_file::SECRET_LIMIT) {
            Ok(text) => text,
            Err(e) => return Some(Err(format!("reading {}: {e}", path.display()))),
        },
        (None, None) => return None,
    };
    Some(SigningKey::from_pem(&pem, settings.signing_alg.as_deref()))
}

/// Whether `token`, stored by another process (`credential` holds it), is to be
/// taken instead of refreshing: it is not the one this process holds, and a
/// fifth of its life is left (at most `ADOPT_MARGIN_SECS` asked), so that
/// replicas sharing short-lived tokens adopt each refresh instead of making
/// their own.
fn adoptable(credential: &StoredCredential, token: &TokenRecord, held_access: Option<&Secret>) -> bool {
    let lifetime = token.expires_at.map_or(u64::MAX, |e| e.saturating_sub(credential.updated_at));
    let margin = ADOPT_MARGIN_SECS.min(lifetime / 5);
    held_access != Some(&token.access_token) && token.fresh_at(unix_now(), margin)
}
