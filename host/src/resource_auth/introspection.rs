//! Opaque tokens, checked by asking the authorization server (RFC 7662): a POST of
//! the token to the introspection endpoint, tether authenticating as a client
//! (`client_secret_basic`). The answer's claims go through the same checks as a
//! JWT's, each only when present; the verdict is cached by token hash until the
//! token expires or for [`ACTIVE_TTL`], whichever is sooner ([`INACTIVE_TTL`] for
//! refusals), so a client's stream of requests costs one introspection a minute.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::cache::{key_of, VerdictCache, CAPACITY};
use super::claims::{self, Expectations, Presence};
use super::clock::{unix_now, Clock};
use super::single_flight::Gates;
use super::{Rejection, Verified};
use crate::oauth::token::basic_authorization;
use crate::oauth::transport::Http;
use crate::oauth::Secret;
use crate::warn_limit::WarnLimit;

/// The longest an active token's verdict is kept: a revoked token stops working
/// within this time.
pub(super) const ACTIVE_TTL: Duration = Duration::from_secs(60);
/// How long a refusal (inactive, wrong audience, ...) is kept.
pub(super) const INACTIVE_TTL: Duration = Duration::from_secs(10);

/// What the endpoint said.
enum Answer {
    /// `active: true`, with the rest of the answer.
    Active(Map<String, Value>),
    /// `active: false` (or no `active: true`).
    Inactive,
    /// A 4xx about the token (node-oidc-provider answers `unsupported_token_type`
    /// for a JWT where RFC 7662 §2.2 says `active: false`): a refusal of the token,
    /// with what the server said.
    Refused(String),
}

/// The introspection endpoint and what it said lately.
pub(super) struct Introspector {
    endpoint: String,
    client_id: Option<String>,
    client_secret: Option<Secret>,
    pub(super) cache: VerdictCache,
    pub(super) gates: Gates,
    /// When the endpoint last failed: requests that waited for that attempt do not
    /// try again at once.
    failed_at: Mutex<Option<Instant>>,
    /// Its failures, which any client can cause with a new token: logged at most
    /// once per interval.
    failure_warning: WarnLimit,
}

impl Introspector {
    /// An introspector for `endpoint`, authenticating as `client_id`.
    pub(super) fn new(endpoint: &str, client_id: Option<&str>, client_secret: Option<&Secret>) -> Self {
        Introspector {
            endpoint: endpoint.to_owned(),
            client_id: client_id.map(str::to_owned),
            client_secret: client_secret.cloned(),
            cache: VerdictCache::new(CAPACITY),
            gates: Gates::default(),
            failed_at: Mutex::new(None),
            failure_warning: WarnLimit::new(),
        }
    }

    /// The cached verdict on `token`, if any.
    pub(super) fn cached(&self, token: &str, now: Instant) -> Option<Result<Verified, Rejection>> {
        self.cache.get(&key_of(token), now)
    }

    /// The verdict on `token`: cached, or asked for (one request per token at a
    /// time). Blocks on the network.
    pub(super) fn check(
        &self,
        http: &Http,
        clock: &Clock,
        expect: &Expectations,
        token: &str,
    ) -> Result<Verified, Rejection> {
        let key = key_of(token);
        let started = clock.now();
        self.gates.run(key, || {
            if let Some(verdict) = self.cache.get(&key, clock.now()) {
                return verdict;
            }
            let failed_at = *self.failed_at.lock().unwrap_or_else(PoisonError::into_inner);
            if failed_at.is_some_and(|t| t >= started) {
                return Err(unavailable());
            }
            let answer = match self.ask(http, token) {
                Ok(answer) => answer,
                Err(message) => {
                    self.failure_warning.warn(|left_out| {
                        let more = crate::warn_limit::more(left_out);
                        tracing::warn!(endpoint = %self.endpoint, "token introspection failed: {message}{more}");
                    });
                    *self.failed_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(clock.now());
                    return Err(unavailable());
                }
            };
            let verdict = match answer {
                Answer::Inactive => Err(Rejection::invalid("token not active")),
                Answer::Refused(text) => {
                    tracing::debug!(endpoint = %self.endpoint, "token introspection refused the token: {text}");
                    Err(Rejection::invalid("token not active"))
                }
                // Only access tokens open the door: a refresh token is not one.
                Answer::Active(claims) if claims.get("token_type").and_then(Value::as_str) == Some("refresh_token") => {
                    Err(Rejection::invalid("wrong token type"))
                }
                Answer::Active(claims) => claims::check(&claims, expect, Presence::IfPresent, unix_now()),
            };
            let ttl = match &verdict {
                Ok(Verified { expires_at: Some(exp), .. }) => {
                    ACTIVE_TTL.min(Duration::from_secs(exp.saturating_sub(unix_now())))
                }
                Ok(_) => ACTIVE_TTL,
                Err(_) => INACTIVE_TTL,
            };
            let now = clock.now();
            self.cache.put(key, verdict.clone(), now + ttl, now);
            verdict
        })
    }

    /// One introspection request. Errors (the endpoint cannot answer: unreachable,
    /// 5xx, 429, or tether itself refused or misdirected: 401, 403, 404, 405) are
    /// for the log, and never quote the token; any other 4xx refuses the token.
    fn ask(&self, http: &Http, token: &str) -> Result<Answer, String> {
        let mut form = vec![("token", token), ("token_type_hint", "access_token")];
        let authorization = match (&self.client_id, &self.client_secret) {
            (Some(id), Some(secret)) => Some(basic_authorization(id, secret.expose())),
            (Some(id), None) => {
                form.push(("client_id", id.as_str()));
                None
            }
            (None, _) => None,
        };
        let answer = http.post_form(&self.endpoint, &form, authorization.as_deref()).map_err(|f| f.message)?;
        if answer.status != 200 {
            let secrets: Vec<&str> =
                [Some(token), self.client_secret.as_ref().map(Secret::expose)].into_iter().flatten().collect();
            let text = answer.oauth_error_hiding(&secrets).1;
            return match answer.status {
                401 | 403 => Err(format!("{text} (the introspection client tether is configured as is refused)")),
                404 | 405 => Err(format!("{text} (is the introspection endpoint right?)")),
                400..=499 if !answer.server_failed() => Ok(Answer::Refused(text)),
                _ => Err(text),
            };
        }
        let Some(Value::Object(obj)) = answer.json else {
            return Err("the answer is not a JSON object".to_owned());
        };
        Ok(match obj.get("active") {
            Some(Value::Bool(true)) => Answer::Active(obj),
            _ => Answer::Inactive,
        })
    }
}

fn unavailable() -> Rejection {
    Rejection::Unavailable("token introspection unavailable".to_owned())
}
