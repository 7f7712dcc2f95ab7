//! One remote backend's OAuth credential: its lifecycle as a small state machine
//! with no knowledge of MCP or HTTP, and the words the engine and its host use
//! about it.
//!
//! The engine never sees a token. The host holds the credential (in memory and in
//! its store), puts the current access token on every request, and carries out the
//! steps the engine asks for ([`AuthStep`]): read the store, get a token without a
//! person, refresh, prepare an interactive login, forget a dead credential. It
//! reports what happened as a [`CredentialUpdate`]. What to do about a 401, when to
//! refresh, how many refreshes may run at once (one), when a person must be asked,
//! and when to try the token endpoint again are decided here, so a trace replays
//! the same decisions and the rules are tested with simulated time.
//!
//! States: `Unknown` (not read from the store yet) · `Missing` (nothing usable) ·
//! `Valid` (an access token, maybe refreshable) · `Refreshing` (one refresh in
//! flight; the old token is still used while it lasts) · `Reauth` (a person must
//! log in; a login may be pending with its URL).

use alloc::format;
use alloc::string::String;
use core::fmt;
use serde::{Deserialize, Serialize};

use crate::policy::Backoff;
use crate::rng::Rng;
use crate::time::{Duration, Instant};

/// What a backend said when it refused a token (`WWW-Authenticate: Bearer ...`).
/// None of it is secret.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Challenge {
    /// `error` (`invalid_token`, `insufficient_scope`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `scope`: the scopes the resource wants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// `resource_metadata`: where its Protected Resource Metadata is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_metadata: Option<String>,
    /// `error_description`: the server's words on what is wrong, for people
    /// (printable, cut short by the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The refusal offered the `DPoP` scheme (RFC 9449 §7.1): the resource takes
    /// proof-of-possession tokens. A resource that offers only `Bearer` refuses them.
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    pub dpop: bool,
}

impl Challenge {
    /// Whether the token was good but lacks a scope the request needs.
    pub fn is_insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }

    /// `use_dpop_nonce`: the server wants a nonce of its own in the DPoP proof
    /// (RFC 9449 §9); the token itself is fine.
    pub fn is_dpop_nonce(&self) -> bool {
        self.error.as_deref() == Some("use_dpop_nonce")
    }
}

/// Work on a backend's credential the engine asks its host to do. Each is
/// answered with one or more [`CredentialUpdate`]s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum AuthStep {
    /// Read the stored credential, no network: answered `Ready` or `Missing`, at
    /// once (before anything the connection that follows reports: an update does
    /// not say which step it answers). The host puts the token it read on that
    /// connection.
    Load,
    /// Get a token without a person: discover the authorization server (from the
    /// challenge), then use a stored refresh token or the configured
    /// `client_credentials` grant. Answered `Ready`, `LoginRequired` or `Failed`.
    Obtain {
        /// What the backend's refusal said.
        #[serde(default)]
        challenge: Challenge,
    },
    /// Refresh the access token. Across processes sharing the store: under the
    /// store's lock, adopt a token another process refreshed meanwhile, else use
    /// the refresh token and persist the answer (a rotated refresh token before it
    /// is used again). On `invalid_grant`, re-read first: only when the stored
    /// credential is the one that failed is it `InvalidGrant`.
    Refresh,
    /// Prepare an interactive login (authorization code + PKCE, loopback redirect)
    /// and open the browser if the host may. Answered `LoginPending` with the URL at
    /// once, then `Ready` when the person finishes or `Failed` when it ends
    /// otherwise (timed out, refused, mismatched issuer).
    Login {
        /// What the backend's refusal said (scope, metadata location).
        #[serde(default)]
        challenge: Challenge,
    },
    /// The credential is dead (`invalid_grant`, revoked): delete it from memory and
    /// the store, so it is never presented again. Not answered.
    Discard,
}

/// Why getting or refreshing a token failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialFailure {
    /// The grant is gone (`invalid_grant`: revoked, expired, already rotated by
    /// someone else): only a new login helps.
    InvalidGrant,
    /// The authorization server could not be reached or failed (refused, timeout,
    /// 5xx): trying again later may help.
    Unavailable,
    /// Anything else that a retry will not fix (a metadata or issuer mismatch, an
    /// unsupported method, a refused registration, a login that timed out).
    Rejected,
    /// The authorization server refuses the client tether is configured as
    /// (`invalid_client`): no login mends that, the configuration must change. (A
    /// client tether registered by itself and the server forgot is registered
    /// anew by the host, which reports the grant gone instead.)
    ClientRefused,
}

/// What the host reports about a backend's credential.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "credential", rename_all = "snake_case")]
pub enum CredentialUpdate {
    /// A usable access token is in the host's hands now (loaded, obtained,
    /// refreshed, adopted from another process, or from a finished login).
    Ready {
        /// Its remaining lifetime, if the server said (`expires_in`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_in_ms: Option<u64>,
        /// Whether a refresh token (or a client credentials grant) can renew it.
        refreshable: bool,
        /// The scopes it carries: the token response's `scope`, else the scopes
        /// that were asked for (a step-up asks for these plus the new ones).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
    },
    /// Nothing is stored for this backend.
    Missing,
    /// A person has to log in (the authorization code grant, nothing refreshable).
    LoginRequired,
    /// A login is prepared: this URL starts it in a browser.
    LoginPending {
        /// The authorization URL (it carries no secret: `state` and the PKCE
        /// challenge are public).
        url: String,
    },
    /// The step failed.
    Failed {
        /// Why, in a word the engine acts on.
        reason: CredentialFailure,
        /// For people (never a token or code).
        message: String,
    },
}

/// Where a credential stands, for status and decisions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum CredentialState {
    /// Not read from the store yet.
    Unknown,
    /// Nothing usable; the next refusal asks the host to obtain one.
    Missing,
    /// A token is held.
    Valid,
    /// One refresh is in flight.
    Refreshing,
    /// A person must log in.
    Reauth,
}

/// What the engine should do after a credential event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Ask the host for this step.
    Step(AuthStep),
    /// Wait: a step is already in flight (single flight) or a retry is scheduled.
    Wait,
    /// Resend what waited, once, with the new token.
    Resend,
    /// Give up on the waiting requests: a person must log in (or nothing helps).
    Reauth,
    /// Fail the requests waiting for a wider scope; the credential in hand stays good.
    FailWaiting,
}

/// One backend's credential lifecycle.
#[derive(Clone, Debug)]
pub(crate) struct Credential {
    state: CredentialState,
    /// Bumped on every `Ready`: a refusal of a request sent under an older epoch
    /// is answered by resending, not by another refresh.
    epoch: u64,
    /// When the current token expires (if the server said).
    expires_at: Option<Instant>,
    /// When to refresh ahead of expiry.
    refresh_at: Option<Instant>,
    refreshable: bool,
    scope: Option<String>,
    /// When to try the token endpoint again after it was unavailable.
    retry_at: Option<Instant>,
    /// While a person must log in: when to read the store again (a login from
    /// another process, `tether auth login`, lands there).
    recheck_at: Option<Instant>,
    retry: Backoff,
    retries: u32,
    /// A step is in flight (Obtain or Refresh): answer comes as an update.
    in_flight: bool,
    /// An interactive login is prepared: its URL.
    login_url: Option<String>,
    /// Step-ups done since the last success: bounded so a server that always
    /// wants more scope cannot loop.
    step_ups: u32,
    /// Why the person must log in.
    reason: Option<String>,
    /// The backend's last refusal: a login asks for the scope it named.
    challenge: Challenge,
    /// The backend's last refusal as it came: what it said goes into the status.
    refusal: Challenge,
    /// The epoch whose token was resent once for a DPoP nonce: one such resend
    /// per token, so a server that never takes the proof cannot loop.
    nonce_resent: Option<u64>,
    /// The token in hand came from a token request of this process (not the
    /// store) and the backend has not accepted it yet.
    unproven: bool,
    /// When the token in hand arrived.
    issued_at: Option<Instant>,
    /// Tokens refused by the backend before it accepted any of them, in a row:
    /// they count on the backoff like failed connections.
    fresh_refusals: u32,
    /// When the last [`MAX_REFUSAL_ASKS`] token requests that refusals caused were
    /// made, oldest first.
    refusal_asks: heapless::Deque<Instant, MAX_REFUSAL_ASKS>,
    /// The step in flight is a store read.
    loading_store: bool,
    /// The authorization server refuses the configured client: the person must
    /// fix the configuration, a login would fail the same way.
    misconfigured: bool,
}

/// At most this many token requests a minute are made because the backend refused
/// a token; beyond, tether waits for the minute to pass. Scheduled refreshes ahead
/// of expiry do not count.
pub(crate) const MAX_REFUSAL_ASKS: usize = 6;

/// A token refused this soon after it was issued, before the backend took it, is
/// refused for what it is (its audience, its kind), not for its age.
pub(crate) const FRESH_WINDOW: Duration = Duration::from_millis(10_000);

/// The window of [`MAX_REFUSAL_ASKS`].
pub(crate) const REFUSAL_ASKS_WINDOW: Duration = Duration::from_millis(60_000);

/// How many times a 403 `insufficient_scope` may send the person to log in again
/// before the request fails.
pub(crate) const MAX_STEP_UPS: u32 = 2;

/// The shortest pause between tries to renew a token that still serves
/// (see the `Unavailable` arm of [`Credential::on_update`]).
pub(crate) const MIN_RETRY_BEFORE_EXPIRY: Duration = Duration::from_millis(500);

/// While a person must log in, the store is read this often for a login done by
/// another process.
pub(crate) const RECHECK: Duration = Duration::from_millis(1_500);

impl Credential {
    /// A credential not yet read from the store; retries of an unavailable token
    /// endpoint follow `retry`.
    pub(crate) fn new(retry: Backoff) -> Self {
        Credential {
            state: CredentialState::Unknown,
            epoch: 0,
            expires_at: None,
            refresh_at: None,
            refreshable: false,
            scope: None,
            retry_at: None,
            recheck_at: None,
            retry,
            retries: 0,
            nonce_resent: None,
            unproven: false,
            issued_at: None,
            fresh_refusals: 0,
            refusal_asks: heapless::Deque::new(),
            loading_store: false,
            misconfigured: false,
            in_flight: false,
            login_url: None,
            step_ups: 0,
            reason: None,
            challenge: Challenge::default(),
            refusal: Challenge::default(),
        }
    }

    /// Where it stands.
    pub(crate) fn state(&self) -> &CredentialState {
        &self.state
    }

    /// The number of tokens received so far: stamp a request with it when it is sent.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The URL of a prepared login, if any.
    pub(crate) fn login_url(&self) -> Option<&str> {
        self.login_url.as_deref()
    }

    /// What the backend said when it last refused a token.
    pub(crate) fn last_refusal(&self) -> &Challenge {
        &self.refusal
    }

    /// Why a person must log in, while in `Reauth`.
    pub(crate) fn reauth_reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Whether the token endpoint failed and tether asks it again on the backoff
    /// (nobody needs to log in for that).
    pub(crate) fn retrying(&self) -> bool {
        self.retry_at.is_some()
    }

    /// Whether the store must be read before the first connection.
    pub(crate) fn needs_load(&self) -> bool {
        self.state == CredentialState::Unknown
    }

    /// The host was asked to read the store.
    pub(crate) fn loading(&mut self) {
        if self.state == CredentialState::Unknown {
            self.state = CredentialState::Missing;
        }
    }

    /// The backend answered a request sent under the token in hand: it takes it.
    /// A success: the step-ups are counted again from here.
    pub(crate) fn accepted(&mut self) {
        self.unproven = false;
        self.fresh_refusals = 0;
        self.step_ups = 0;
    }

    /// The backend refused a request sent under `epoch` with 401 (or 403 without
    /// `insufficient_scope`... that is [`Credential::on_insufficient_scope`]).
    ///
    /// A token the authorization server has just issued and the backend refuses
    /// before accepting any (wrong audience, a bound token where only Bearer is
    /// taken, a misconfigured resource) is a failure like a refused connection:
    /// the next token is asked for on the backoff, never at once, and the refusal's
    /// words become the reason. However a refusal comes, token requests it causes
    /// are bounded ([`MAX_REFUSAL_ASKS`] a minute).
    pub(crate) fn on_unauthorized(&mut self, now: Instant, epoch: u64, challenge: &Challenge, rng: &mut Rng) -> Next {
        self.refusal = challenge.clone();
        if challenge.scope.is_some() || challenge.resource_metadata.is_some() {
            self.challenge = challenge.clone();
        }
        if epoch < self.epoch && matches!(self.state, CredentialState::Valid) {
            // A newer token arrived after this request left: just resend.
            return Next::Resend;
        }
        if challenge.is_dpop_nonce() && self.state == CredentialState::Valid && self.nonce_resent != Some(self.epoch) {
            // The token is good; the server wants its nonce in the proof (RFC 9449
            // §9), which the host now holds: resend once with it.
            self.nonce_resent = Some(self.epoch);
            return Next::Resend;
        }
        match self.state.clone() {
            CredentialState::Reauth => Next::Reauth,
            CredentialState::Refreshing => Next::Wait,
            _ if self.in_flight => Next::Wait,
            // The token endpoint failed a moment ago and is tried again on the
            // backoff: asking it once more for every refused request would hammer
            // it (and an identity provider behind it). The request fails now.
            _ if self.retry_at.is_some() => Next::Reauth,
            CredentialState::Valid if self.just_issued(now) => {
                self.fresh_refusals = self.fresh_refusals.saturating_add(1);
                let delay = self.retry.delay(self.fresh_refusals, rng);
                // The backoff's asks are refusals' asks too: a jittered backoff
                // alone could fit one more than the bound into a minute.
                self.retry_at = Some(self.ask_slot(now + delay));
                self.refresh_at = None;
                self.reason = Some(format!(
                    "the backend refused a token the authorization server had just issued ({} in a row){}; \
                     check that the authorization server issues tokens for this server (its resource, the \
                     audience) of a kind it takes (Bearer or DPoP)",
                    self.fresh_refusals,
                    refusal_words(challenge)
                ));
                Next::Reauth
            }
            _ if self.young(now, None) && !self.may_ask(now) => {
                self.reason = Some(format!(
                    "the backend refused {MAX_REFUSAL_ASKS} tokens within a minute{}",
                    refusal_words(challenge)
                ));
                Next::Reauth
            }
            CredentialState::Valid if self.refreshable => {
                self.state = CredentialState::Refreshing;
                self.in_flight = true;
                self.refresh_at = None;
                Next::Step(AuthStep::Refresh)
            }
            CredentialState::Unknown | CredentialState::Missing | CredentialState::Valid => {
                self.in_flight = true;
                Next::Step(AuthStep::Obtain { challenge: challenge.clone() })
            }
        }
    }

    /// The backend refused a request with 403 `insufficient_scope`: send the person
    /// to log in again asking for the scopes held plus the ones it named, only when
    /// it named one not held yet, and at most [`MAX_STEP_UPS`] times in a row (no
    /// request accepted in between), so a server that always wants more cannot loop.
    pub(crate) fn on_insufficient_scope(&mut self, challenge: &Challenge) -> Next {
        if self.in_flight || self.login_url.is_some() {
            return Next::Wait;
        }
        let held = self.scope.as_deref().unwrap_or("");
        let wanted = challenge.scope.as_deref().unwrap_or("");
        let adds = wanted.split_ascii_whitespace().any(|s| !held.split_ascii_whitespace().any(|h| h == s));
        if !adds || self.step_ups >= MAX_STEP_UPS {
            return Next::FailWaiting;
        }
        self.step_ups += 1;
        self.in_flight = true;
        let mut union = String::from(held.trim());
        for s in wanted.split_ascii_whitespace() {
            if !union.split_ascii_whitespace().any(|h| h == s) {
                if !union.is_empty() {
                    union.push(' ');
                }
                union.push_str(s);
            }
        }
        let mut challenge = challenge.clone();
        challenge.scope = Some(union);
        self.challenge = challenge.clone();
        Next::Step(AuthStep::Login { challenge })
    }

    /// Whether the authorization server refuses the configured client (the
    /// configuration must change; no login helps).
    pub(crate) fn misconfigured(&self) -> bool {
        self.misconfigured
    }

    /// A call found the backend waiting for a person: prepare a login (and open the
    /// browser) unless one is pending or under way, or none can help.
    pub(crate) fn want_login(&mut self) -> Option<AuthStep> {
        if self.state != CredentialState::Reauth || self.in_flight || self.login_url.is_some() || self.misconfigured {
            return None;
        }
        self.in_flight = true;
        Some(AuthStep::Login { challenge: self.challenge.clone() })
    }

    /// Whether the token in hand was issued moments ago and the backend never took
    /// it: then a refusal is about the token's kind, not its age.
    fn just_issued(&self, now: Instant) -> bool {
        self.unproven && self.young(now, Some(FRESH_WINDOW))
    }

    /// Whether the token in hand is in the first half of its life (and within
    /// `cap` of its arrival): a refusal then is no matter of age. One refused late
    /// in its life has likely expired by the backend's clock, and renewing it is
    /// what is needed, however often short-lived tokens make that.
    fn young(&self, now: Instant, cap: Option<Duration>) -> bool {
        let Some(at) = self.issued_at else { return false };
        let half = self.expires_at.map(|exp| Duration::from_millis(exp.saturating_since(at).as_millis() / 2));
        let window = match (half, cap) {
            (Some(h), Some(c)) => Some(h.min(c)),
            (h, c) => h.or(c),
        };
        window.map_or(true, |w| now < at + w)
    }

    /// Whether a refusal may cause a token request now: fewer than
    /// [`MAX_REFUSAL_ASKS`] in the last minute. Noted as made when it may; when it
    /// may not, the next try waits for the oldest to leave the window.
    fn may_ask(&mut self, now: Instant) -> bool {
        while self.refusal_asks.front().is_some_and(|&at| at + REFUSAL_ASKS_WINDOW <= now) {
            self.refusal_asks.pop_front();
        }
        match self.refusal_asks.front() {
            Some(&oldest) if self.refusal_asks.is_full() => {
                self.retry_at = Some(oldest + REFUSAL_ASKS_WINDOW);
                false
            }
            _ => {
                let _ = self.refusal_asks.push_back(now);
                true
            }
        }
    }

    /// The time a token request a refusal causes may be made, at `at` or
    /// later: when [`MAX_REFUSAL_ASKS`] fall within the minute before `at`, once
    /// the oldest of them has left it. Noted as made then.
    fn ask_slot(&mut self, at: Instant) -> Instant {
        while self.refusal_asks.front().is_some_and(|&asked| asked + REFUSAL_ASKS_WINDOW <= at) {
            self.refusal_asks.pop_front();
        }
        let at = match self.refusal_asks.front() {
            Some(&oldest) if self.refusal_asks.is_full() => {
                self.refusal_asks.pop_front();
                at.max(oldest + REFUSAL_ASKS_WINDOW)
            }
            _ => at,
        };
        let _ = self.refusal_asks.push_back(at);
        at
    }

    /// The host reported on the credential.
    pub(crate) fn on_update(&mut self, now: Instant, update: &CredentialUpdate, rng: &mut Rng) -> Next {
        let from_store = core::mem::take(&mut self.loading_store);
        match update {
            CredentialUpdate::Ready { expires_in_ms, refreshable, scope } => {
                // A token a request of ours just got, not one read from the store
                // (an old one there may simply have expired).
                self.unproven = self.in_flight && !from_store;
                self.issued_at = Some(now);
                self.misconfigured = false;
                self.epoch += 1;
                self.state = CredentialState::Valid;
                self.in_flight = false;
                self.login_url = None;
                self.reason = None;
                self.retries = 0;
                self.retry_at = None;
                self.recheck_at = None;
                self.refreshable = *refreshable;
                self.scope = scope.clone();
                self.expires_at = expires_in_ms.map(|ms| now + Duration::from_millis(ms));
                self.refresh_at = match (*refreshable, *expires_in_ms) {
                    (true, Some(ms)) => Some(now + Duration::from_millis(ms - refresh_margin(ms))),
                    _ => None,
                };
                if *refreshable && *expires_in_ms == Some(0) {
                    // Expired already (read from the store after a while): renewed
                    // before anything goes out with it; what waits goes after.
                    self.state = CredentialState::Refreshing;
                    self.in_flight = true;
                    self.refresh_at = None;
                    return Next::Step(AuthStep::Refresh);
                }
                Next::Resend
            }
            CredentialUpdate::Missing => {
                if self.state == CredentialState::Unknown {
                    self.state = CredentialState::Missing;
                }
                if self.state == CredentialState::Reauth {
                    self.recheck_at = Some(now + RECHECK);
                }
                self.in_flight = false;
                Next::Wait
            }
            CredentialUpdate::LoginRequired => {
                self.in_flight = false;
                self.enter_reauth(now, String::from("login required"));
                if self.login_url.is_some() {
                    return Next::Reauth;
                }
                self.in_flight = true;
                Next::Step(AuthStep::Login { challenge: self.challenge.clone() })
            }
            CredentialUpdate::LoginPending { url } => {
                self.in_flight = false;
                self.login_url = Some(url.clone());
                if self.state == CredentialState::Valid {
                    // A step-up: the token in hand still serves other requests.
                    return Next::Wait;
                }
                self.enter_reauth(now, String::from("login required"));
                Next::Reauth
            }
            CredentialUpdate::Failed { reason, message } => {
                let asked_token = self.in_flight;
                self.in_flight = false;
                match reason {
                    CredentialFailure::InvalidGrant => {
                        self.expires_at = None;
                        self.refresh_at = None;
                        self.refreshable = false;
                        self.enter_reauth(now, message.clone());
                        Next::Step(AuthStep::Discard)
                    }
                    CredentialFailure::Unavailable => {
                        self.retries = self.retries.saturating_add(1);
                        let delay = self.retry.delay(self.retries, rng);
                        if self.state == CredentialState::Refreshing {
                            self.state = CredentialState::Valid;
                        }
                        let mut at = now + delay;
                        if let Some(expiry) = self.expires_at.filter(|_| self.token_usable(now)) {
                            // While the token in hand serves, the next try comes
                            // before it ends (halfway there, at least
                            // `MIN_RETRY_BEFORE_EXPIRY` apart): a store or token
                            // endpoint back in time then costs no call.
                            // Jittered: replicas sharing a token do not all try at once.
                            let half = expiry.saturating_since(now).as_millis() / 2;
                            let half = Duration::from_millis(rng.jitter(half, 10));
                            let step = if half.as_millis() < MIN_RETRY_BEFORE_EXPIRY.as_millis() {
                                MIN_RETRY_BEFORE_EXPIRY
                            } else {
                                half
                            };
                            if (now + step).as_millis() < at.as_millis() {
                                at = now + step;
                            }
                        }
                        self.retry_at = Some(at);
                        // What a request the backend refuses meanwhile is told.
                        self.reason = Some(message.clone());
                        if self.token_usable(now) {
                            Next::Wait
                        } else {
                            Next::Reauth
                        }
                    }
                    CredentialFailure::ClientRefused => {
                        self.login_url = None;
                        self.expires_at = None;
                        self.refresh_at = None;
                        self.enter_reauth(now, message.clone());
                        self.misconfigured = true;
                        Next::Reauth
                    }
                    CredentialFailure::Rejected => {
                        self.login_url = None;
                        if self.state == CredentialState::Valid && self.step_ups > 0 {
                            // A step-up login failed: the token in hand is still good.
                            return Next::FailWaiting;
                        }
                        if !asked_token && self.token_usable(now) {
                            // Nothing was asked of the token endpoint: this is the late
                            // end of a login that a token from elsewhere (the store, after
                            // `tether auth login` in a terminal) made moot; the host ends
                            // such a login, but its end may already be on its way. Keep
                            // the token.
                            return Next::Wait;
                        }
                        self.enter_reauth(now, message.clone());
                        Next::Reauth
                    }
                }
            }
        }
    }

    /// The earliest time [`Credential::on_timer`] has something to do.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        if self.in_flight {
            return None;
        }
        [self.refresh_at, self.retry_at, self.recheck_at].into_iter().flatten().min()
    }

    /// Time passed: refresh ahead of expiry, or try an unavailable token endpoint again.
    pub(crate) fn on_timer(&mut self, now: Instant) -> Option<AuthStep> {
        if self.in_flight {
            return None;
        }
        let due = |t: Option<Instant>| t.is_some_and(|t| t <= now);
        if !(due(self.refresh_at) || due(self.retry_at) || due(self.recheck_at)) {
            return None;
        }
        self.refresh_at = None;
        self.retry_at = None;
        self.recheck_at = None;
        match self.state {
            CredentialState::Reauth => {
                self.in_flight = true;
                self.loading_store = true;
                Some(AuthStep::Load)
            }
            CredentialState::Valid if self.refreshable => {
                self.state = CredentialState::Refreshing;
                self.in_flight = true;
                Some(AuthStep::Refresh)
            }
            CredentialState::Valid | CredentialState::Missing => {
                self.in_flight = true;
                Some(AuthStep::Obtain { challenge: Challenge::default() })
            }
            _ => None,
        }
    }

    /// A person logged in elsewhere, or an operator asked to start over: forget the
    /// reauth state so the next refusal or connection asks the store again, and a
    /// token endpoint waiting for its retry is asked again then.
    pub(crate) fn reset(&mut self) {
        self.retry_at = None;
        self.retries = 0;
        self.fresh_refusals = 0;
        self.refusal_asks.clear();
        self.misconfigured = false;
        if self.state == CredentialState::Reauth {
            self.state = CredentialState::Unknown;
            self.reason = None;
            self.step_ups = 0;
        }
    }

    fn token_usable(&self, now: Instant) -> bool {
        self.state == CredentialState::Valid && self.expires_at.map_or(true, |t| t > now)
    }

    fn enter_reauth(&mut self, now: Instant, reason: String) {
        self.state = CredentialState::Reauth;
        self.step_ups = 0;
        self.reason = Some(reason);
        self.refresh_at = None;
        self.retry_at = None;
        self.recheck_at = Some(now + RECHECK);
    }
}

/// What a refusal said, for the reason a person reads: `: error: description`.
fn refusal_words(challenge: &Challenge) -> String {
    match (&challenge.error, &challenge.description) {
        (Some(e), Some(d)) => format!(": {e}: {d}"),
        (Some(e), None) => format!(": {e}"),
        (None, Some(d)) => format!(": {d}"),
        (None, None) => String::new(),
    }
}

/// How long before expiry a token is refreshed: a fifth of its lifetime, at most a
/// minute, so a one-hour token is renewed a minute early and a two-second one at
/// 1.6 s.
pub(crate) fn refresh_margin(lifetime_ms: u64) -> u64 {
    (lifetime_ms / 5).min(60_000)
}

impl fmt::Display for AuthStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthStep::Load => f.write_str("load"),
            AuthStep::Obtain { challenge } => write!(f, "obtain{challenge}"),
            AuthStep::Refresh => f.write_str("refresh"),
            AuthStep::Login { challenge } => write!(f, "login{challenge}"),
            AuthStep::Discard => f.write_str("discard"),
        }
    }
}

impl fmt::Display for Challenge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(e) = &self.error {
            write!(f, " error={e}")?;
        }
        if let Some(s) = &self.scope {
            write!(f, " scope={s:?}")?;
        }
        Ok(())
    }
}

impl fmt::Display for CredentialUpdate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialUpdate::Ready { expires_in_ms, refreshable, .. } => {
                write!(f, "ready refreshable={refreshable}")?;
                match expires_in_ms {
                    Some(ms) => write!(f, " expires_in_ms={ms}"),
                    None => Ok(()),
                }
            }
            CredentialUpdate::Missing => f.write_str("missing"),
            CredentialUpdate::LoginRequired => f.write_str("login required"),
            CredentialUpdate::LoginPending { .. } => f.write_str("login pending"),
            CredentialUpdate::Failed { reason, message } => write!(f, "failed ({reason:?}): {message}"),
        }
    }
}

#[cfg(test)]
mod tests;
