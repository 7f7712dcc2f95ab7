//! Tether as an OAuth 2.1 protected resource: checking the access tokens HTTP
//! clients present to tether's own listener (MCP authorization, 2025-11-25;
//! RFC 9728, RFC 7662, RFC 8414, RFC 7519, RFC 9068, RFC 8725).
//!
//! One [`TokenValidator`] per listener, shared by its connections. It trusts one
//! authorization server (the configured issuer) and checks tokens one of two ways:
//! - **JWTs, locally** (the default): the header is screened (an allow-list of
//!   asymmetric algorithms; no `none`, no HMAC), the signature verified with a key
//!   from the issuer's JWKS (`jwks_uri`, or found in its RFC 8414 / OpenID
//!   metadata), then `iss` (exactly), `aud` (tether's resource URI or a configured
//!   audience), `exp` and `nbf` (60 s of leeway). The key set is cached, refreshed
//!   hourly, and fetched again for an unknown `kid` at most every 30 s.
//! - **By introspection** (RFC 7662) when an introspection endpoint is
//!   configured (opaque tokens); answers are cached by token hash for up to a
//!   minute.
//!
//! Either way the token must carry the `required_scopes`. The verdict is a
//! [`Verified`] (who, which client, which scopes) or a [`Rejection`] the HTTP
//! server turns into a 401, 403 or 503 with a `WWW-Authenticate` challenge.
//!
//! The listener calls [`TokenValidator::check_cached`] first, which never touches
//! the network and decides most requests; only when it cannot does it call
//! [`TokenValidator::validate`] on a worker thread. Nothing here logs a token or
//! its claims: rejections are logged at debug with their reason and `kid` only.
//!
//! Files, one job each: `settings` (the config), `jwt` (header and signature),
//! `jwks` (key sets), `key_store` (caching and refetching them), `metadata`
//! (finding `jwks_uri`), `claims` (the checks both kinds share), `introspection`,
//! `cache` (verdicts by token hash), `single_flight`, `clock`.

mod cache;
mod claims;
mod clock;
mod introspection;
mod jwks;
mod jwt;
mod key_store;
mod metadata;
mod settings;
mod single_flight;

#[cfg(test)]
mod tests;

use std::fmt;

use jsonwebtoken::Algorithm;

use crate::oauth::transport::Http;
use claims::{Expectations, Presence};
use clock::{unix_now, Clock};
use introspection::Introspector;
use jwks::Lookup;
use jwt::Header;
use key_store::{KeyStore, Why};

pub use settings::{ResourceAuthSettings, DEFAULT_ALGORITHMS};

/// The longest token looked at: longer ones are refused unread.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

/// What a valid token says about its bearer: what the engine needs to decide what
/// the request may reach. Its `Debug` hides the subject (a person's identifier);
/// never log it whole otherwise.
#[derive(Clone, PartialEq, Eq)]
pub struct Verified {
    /// The bearer (`sub`), if the token names one.
    pub subject: Option<String>,
    /// The client the token was issued to (`client_id`, else `azp`).
    pub client_id: Option<String>,
    /// The scopes granted (`scope`, else `scp`).
    pub scopes: Vec<String>,
    /// When the token expires, in unix seconds (`exp`), if known.
    pub expires_at: Option<u64>,
}

impl Verified {
    /// Whether the token grants `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

impl fmt::Debug for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verified")
            .field("subject", &self.subject.as_ref().map(|_| "[redacted]"))
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Why a token is refused, as the HTTP server answers it (RFC 6750 §3.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// 401 `error="invalid_token"`: malformed, bad signature, wrong issuer or
    /// audience, expired, not yet valid, unknown signing key, disallowed
    /// algorithm, not active. The text is short, generic and safe to send: never
    /// the token or its claims.
    Invalid(String),
    /// 403 `error="insufficient_scope"`: the token is valid but lacks scopes that
    /// are required; carries the scopes needed (all of `required_scopes`, for the
    /// challenge's `scope`).
    InsufficientScope(Vec<String>),
    /// 503: the signing keys or the introspection endpoint could not be reached or
    /// read; the token may be good. The text is generic (details go to the log).
    Unavailable(String),
}

impl Rejection {
    /// An `Invalid` with a fixed description.
    fn invalid(description: &str) -> Rejection {
        Rejection::Invalid(description.to_owned())
    }

    /// The HTTP status to answer with: 401, 403 or 503.
    pub fn status(&self) -> u16 {
        match self {
            Rejection::Invalid(_) => 401,
            Rejection::InsufficientScope(_) => 403,
            Rejection::Unavailable(_) => 503,
        }
    }

    /// The `error` of the `WWW-Authenticate` challenge (RFC 6750 §3.1), if any.
    pub fn error_code(&self) -> Option<&'static str> {
        match self {
            Rejection::Invalid(_) => Some("invalid_token"),
            Rejection::InsufficientScope(_) => Some("insufficient_scope"),
            Rejection::Unavailable(_) => None,
        }
    }

    /// A short description for the client (`error_description`).
    pub fn description(&self) -> &str {
        match self {
            Rejection::Invalid(text) | Rejection::Unavailable(text) => text,
            Rejection::InsufficientScope(_) => "insufficient scope",
        }
    }
}

/// How tokens are checked.
enum Mode {
    /// As JWTs, with the issuer's keys.
    Jwt(KeyStore),
    /// By asking the introspection endpoint.
    Introspection(Introspector),
}

/// The next step for a JWT.
enum Step {
    /// Decided.
    Done(Result<Verified, Rejection>),
    /// A key-set fetch is due first.
    Fetch(Why),
}

/// Checks the access tokens presented to tether's HTTP listener against the
/// configured authorization server. `Send + Sync`: the HTTP server shares one
/// behind an `Arc`; its caches and fetches are internally synchronised.
pub struct TokenValidator {
    settings: ResourceAuthSettings,
    resource: String,
    expect: Expectations,
    algorithms: Vec<Algorithm>,
    http: Http,
    clock: Clock,
    mode: Mode,
}

impl fmt::Debug for TokenValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenValidator")
            .field("issuer", &self.settings.issuer)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl TokenValidator {
    /// A validator for `settings`, protecting `resource` (tether's canonical URI,
    /// already defaulted by the host; it overrides `settings.resource`). Nothing is
    /// fetched until a token needs it. Configured algorithms that are not accepted
    /// (`none`, `HS*`, unknown) are dropped with a warning:
    /// [`ResourceAuthSettings::check`] reports them before.
    pub fn new(settings: ResourceAuthSettings, resource: String) -> TokenValidator {
        let algorithms = settings.accepted_algorithms();
        if settings.algorithms.as_ref().is_some_and(|names| names.len() != algorithms.len()) {
            tracing::warn!(
                "authorization.algorithms: only RS*, PS*, ES256, ES384 and EdDSA are accepted; others are ignored"
            );
        }
        let expect = Expectations::new(&settings.issuer, &resource, &settings.audience);
        let mode = match &settings.introspection_endpoint {
            Some(endpoint) => Mode::Introspection(Introspector::new(
                endpoint,
                settings.client_id.as_deref(),
                settings.client_secret.as_ref(),
            )),
            None => Mode::Jwt(KeyStore::new(&settings.issuer, settings.jwks_uri.as_deref())),
        };
        TokenValidator { settings, resource, expect, algorithms, http: Http::new(), clock: Clock::default(), mode }
    }

    /// The verdict on `token` from what is already known, without the network:
    /// `Some` for a malformed token, a JWT whose key is in the cached key set (or
    /// certainly is not), or a cached introspection answer; `None` when a fetch is
    /// needed first (then call [`TokenValidator::validate`] off the event loop).
    pub fn check_cached(&self, token: &str) -> Option<Result<Verified, Rejection>> {
        let mut kid = None;
        let verdict = match self.screen(token) {
            Err(rejection) => Some(Err(rejection)),
            Ok(header) => {
                kid = header.as_ref().and_then(|h| h.kid.clone());
                match (&self.mode, header) {
                    (Mode::Jwt(store), Some(header)) => match self.jwt_step(store, token, &header) {
                        Step::Done(verdict) => Some(verdict),
                        Step::Fetch(_) => None,
                    },
                    (Mode::Introspection(introspector), _) => introspector.cached(token, self.clock.now()),
                    (Mode::Jwt(_), None) => None,
                }
            }
        };
        verdict.map(|v| self.finish(v, kid.as_deref()))
    }

    /// The verdict on `token`, fetching what is needed: the issuer's metadata and
    /// key set, or an introspection answer. Blocks on the network (bounded by the
    /// HTTP client's timeouts): call it on a worker thread.
    pub fn validate(&self, token: &str) -> Result<Verified, Rejection> {
        let header = match self.screen(token) {
            Err(rejection) => return self.finish(Err(rejection), None),
            Ok(header) => header,
        };
        let verdict = match (&self.mode, &header) {
            (Mode::Jwt(store), Some(header)) => self.validate_jwt(store, token, header),
            (Mode::Introspection(introspector), _) => introspector.check(&self.http, &self.clock, &self.expect, token),
            (Mode::Jwt(_), None) => Err(Rejection::invalid("malformed token")),
        };
        self.finish(verdict, header.as_ref().and_then(|h| h.kid.as_deref()))
    }

    /// The canonical resource URI tokens must be meant for (for the challenge's
    /// `resource_metadata` and the Protected Resource Metadata).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The trusted issuer (the metadata's `authorization_servers`).
    pub fn issuer(&self) -> &str {
        &self.settings.issuer
    }

    /// The scopes every token must carry (the metadata's `scopes_supported` and
    /// the challenge's `scope` start from these).
    pub fn required_scopes(&self) -> &[String] {
        &self.settings.required_scopes
    }

    /// The settings the validator was built from (`resource_name`, `scopes`, ...).
    pub fn settings(&self) -> &ResourceAuthSettings {
        &self.settings
    }

    /// Checks that need no key: the token's size and alphabet (RFC 6750 §2.1
    /// `b64token`), and for JWT mode its header (`Some`). Introspection mode reads
    /// no header (`None`).
    fn screen(&self, token: &str) -> Result<Option<Header>, Rejection> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(Rejection::invalid("token too large"));
        }
        if !is_b64token(token) {
            return Err(Rejection::invalid("malformed token"));
        }
        match self.mode {
            Mode::Jwt(_) => jwt::screen(token, &self.algorithms).map(Some),
            Mode::Introspection(_) => Ok(None),
        }
    }

    /// Validates a JWT, fetching keys as the store's policy allows.
    fn validate_jwt(&self, store: &KeyStore, token: &str, header: &Header) -> Result<Verified, Rejection> {
        // A fetch makes the same fetch undue: the second step decides. The third
        // is only for a fetch of another kind in between.
        for _ in 0..3 {
            match self.jwt_step(store, token, header) {
                Step::Done(verdict) => return verdict,
                Step::Fetch(why) => store.fetch(&self.http, &self.clock, why),
            }
        }
        Err(keys_unavailable())
    }

    /// Decides a JWT with the cached keys, or says which fetch is due first.
    fn jwt_step(&self, store: &KeyStore, token: &str, header: &Header) -> Step {
        let snapshot = store.snapshot(self.clock.now());
        let Some(keys) = &snapshot.keys else {
            return if snapshot.due(Why::Missing) {
                Step::Fetch(Why::Missing)
            } else {
                Step::Done(Err(keys_unavailable()))
            };
        };
        if snapshot.due(Why::Stale) {
            return Step::Fetch(Why::Stale);
        }
        let keys = match keys.lookup(header.kid.as_deref(), header.alg) {
            Lookup::Found(keys) => keys,
            Lookup::Unknown if snapshot.due(Why::UnknownKey) => return Step::Fetch(Why::UnknownKey),
            // Perhaps a rotation tether could not see: the token may be good.
            Lookup::Unknown if snapshot.last_failed => return Step::Done(Err(keys_unavailable())),
            Lookup::Unknown | Lookup::Unfit => return Step::Done(Err(Rejection::invalid("unknown signing key"))),
        };
        Step::Done(
            jwt::verify(token, header.alg, &keys)
                .and_then(|claims| claims::check(&claims, &self.expect, Presence::Required, unix_now())),
        )
    }

    /// Applies `required_scopes` to a verdict and logs a refusal (reason and
    /// `kid` only).
    fn finish(&self, verdict: Result<Verified, Rejection>, kid: Option<&str>) -> Result<Verified, Rejection> {
        let verdict = verdict.and_then(|verified| {
            let required = &self.settings.required_scopes;
            if required.iter().all(|s| verified.has_scope(s)) {
                Ok(verified)
            } else {
                Err(Rejection::InsufficientScope(required.clone()))
            }
        });
        if let Err(rejection) = &verdict {
            let kid = kid.map(|k| k.chars().take(64).collect::<String>());
            tracing::debug!(reason = rejection.description(), kid = ?kid, "access token refused");
        }
        verdict
    }
}

fn keys_unavailable() -> Rejection {
    Rejection::Unavailable("signing keys unavailable".to_owned())
}

/// Whether `token` is an RFC 6750 `b64token`: `1*( ALPHA / DIGIT / "-" / "." /
/// "_" / "~" / "+" / "/" ) *"="`.
fn is_b64token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/'))
}
