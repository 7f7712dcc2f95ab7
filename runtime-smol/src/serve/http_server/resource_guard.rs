//! The listener as an OAuth 2.1 protected resource (MCP authorization,
//! RFC 9728, RFC 6750): it publishes its Protected Resource Metadata, so a
//! client learns which authorization server to log in at; it asks for a token
//! with a challenge that points there; and it checks every request's access
//! token with the [`TokenValidator`] (JWT against the issuer's keys, or
//! introspection). What a valid token's scopes let its bearer see is the
//! engine's business: the listener reports them ([`Input::ClientAccess`](tether_core::Input)).
//!
//! Refusals, per RFC 6750 §3:
//! - no token: 401, `WWW-Authenticate: Bearer resource_metadata="…", scope="…"`;
//! - a token that is not valid (signature, issuer, audience, expiry…): 401 with
//!   `error="invalid_token"` and a short description (never the token's claims);
//! - a valid token without the required scopes: 403 with
//!   `error="insufficient_scope"` and the scopes to ask for;
//! - the keys or the introspection endpoint cannot be reached: 503, `Retry-After`.

use std::sync::Arc;

use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};
use tether_host::resource_auth::{Rejection, TokenValidator};
use tether_host::warn_limit::{self, WarnLimit};

use super::reply::{self, Body};

/// The well-known prefix of Protected Resource Metadata (RFC 9728 §3).
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// Token checks that need the network (keys, introspection) running at once;
/// more are refused with 503 rather than queued, so a flood of made-up tokens
/// neither fills the blocking pool (HTTP backends use it too) nor waits forever.
const CHECKS_IN_FLIGHT: usize = 16;

/// Who a request's valid token says its bearer is, and what it may do.
#[derive(Clone, Debug)]
pub(super) struct Bearer {
    /// What binds a session to its bearer: the token's subject, else its client,
    /// else (neither given) the token itself, hashed.
    pub(super) identity: String,
    /// The token's scopes.
    pub(super) scopes: Vec<String>,
}

/// Checks tokens for the listener and answers what a client needs to get one.
pub struct ResourceGuard {
    validator: Arc<TokenValidator>,
    /// Bounds the checks that wait on the network.
    checks: smol::lock::Semaphore,
    /// Keys the hash that stands for a token without subject or client.
    hasher: std::collections::hash_map::RandomState,
    /// Where the metadata is served on this listener: under the resource's own
    /// path, under the endpoint's path (they differ behind a proxy), and the root.
    metadata_paths: Vec<String>,
    /// The metadata's URL as clients reach it, for challenges.
    metadata_url: String,
    /// The metadata document.
    document: String,
    /// The scopes a challenge tells clients to ask for, space-separated.
    challenge_scope: String,
    /// "Cannot check access tokens now", which any client can cause per request.
    unavailable_warning: WarnLimit,
}

impl std::fmt::Debug for ResourceGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceGuard").field("resource", &self.validator.resource()).finish_non_exhaustive()
    }
}

impl ResourceGuard {
    /// A guard for the endpoint at `endpoint_path`, publishing `scopes_supported`
    /// (the required scopes and every scope the config maps, in that order) and
    /// `resource_name` when given.
    pub fn new(
        validator: TokenValidator,
        endpoint_path: &str,
        scopes_supported: Vec<String>,
        resource_name: Option<&str>,
    ) -> Result<ResourceGuard, String> {
        let resource = validator.resource().to_string();
        let url = url::Url::parse(&resource).map_err(|e| format!("authorization.resource {resource}: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() || url.fragment().is_some() {
            return Err(format!("authorization.resource {resource}: must be an http(s) URL without a fragment"));
        }
        let resource_path = url.path().trim_end_matches('/');
        let metadata_url = format!("{}{WELL_KNOWN}{resource_path}", url.origin().ascii_serialization());
        let mut metadata_paths = vec![format!("{WELL_KNOWN}{resource_path}"), WELL_KNOWN.to_string()];
        let local = format!("{WELL_KNOWN}{}", endpoint_path.trim_end_matches('/'));
        if !metadata_paths.contains(&local) {
            metadata_paths.push(local);
        }
        let mut document = serde_json::json!({
            "resource": resource,
            "authorization_servers": [validator.issuer()],
            "scopes_supported": scopes_supported,
            "bearer_methods_supported": ["header"],
        });
        if let Some(name) = resource_name {
            document["resource_name"] = serde_json::Value::String(name.to_string());
        }
        // Clients are pointed at what they need, not at the operators' scope.
        let admin = validator.settings().admin_scope.clone();
        let challenge: Vec<&str> =
            scopes_supported.iter().map(String::as_str).filter(|s| Some(*s) != admin.as_deref()).collect();
        Ok(ResourceGuard {
            challenge_scope: challenge.join(" "),
            validator: Arc::new(validator),
            checks: smol::lock::Semaphore::new(CHECKS_IN_FLIGHT),
            hasher: std::collections::hash_map::RandomState::new(),
            metadata_paths,
            metadata_url,
            document: document.to_string(),
            unavailable_warning: WarnLimit::new(),
        })
    }

    /// Whether `path` is where this listener serves its metadata.
    pub(super) fn is_metadata_path(&self, path: &str) -> bool {
        self.metadata_paths.iter().any(|p| p == path)
    }

    /// The metadata document (public: it is how a client finds where to log in).
    pub(super) fn metadata(&self) -> Response<Body> {
        let mut response = reply::json(StatusCode::OK, self.document.clone());
        response.headers_mut().insert(hyper::header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
        response
    }

    /// The bearer of a request, or the refusal to answer with. Network work
    /// (fetching keys, introspecting) runs on a blocking thread.
    pub(super) async fn authenticate(&self, headers: &HeaderMap) -> Result<Bearer, Response<Body>> {
        let Some(token) = bearer(headers) else {
            return Err(self.challenge(StatusCode::UNAUTHORIZED, None, "unauthorized: a bearer token is required"));
        };
        let verdict = match self.validator.check_cached(&token) {
            Some(verdict) => verdict,
            None => {
                let Some(_permit) = self.checks.try_acquire() else {
                    tracing::debug!("access token refused for now: {CHECKS_IN_FLIGHT} checks wait on the network");
                    let mut busy = reply::error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "service unavailable: too many access tokens are being checked; retry",
                    );
                    busy.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
                    return Err(busy);
                };
                let (validator, token) = (self.validator.clone(), token.clone());
                smol::unblock(move || validator.validate(&token)).await
            }
        };
        let verified = verdict.map_err(|rejection| self.refusal(&rejection))?;
        let identity = match (&verified.subject, &verified.client_id) {
            (Some(subject), _) => format!("sub:{subject}"),
            (None, Some(client)) => format!("client:{client}"),
            (None, None) => {
                use std::hash::BuildHasher;
                format!("token:{:016x}", self.hasher.hash_one(&token))
            }
        };
        Ok(Bearer { identity, scopes: verified.scopes })
    }

    /// The refusal of `bearer` at the status endpoint `path`, if refused: the
    /// health checks take any valid token, the rest need the operators' scope.
    pub(super) fn refuse_operator(&self, path: &str, bearer: &Bearer) -> Option<Response<Body>> {
        if matches!(path, "/healthz" | "/readyz") {
            return None;
        }
        match &self.validator.settings().admin_scope {
            Some(admin) if bearer.scopes.contains(admin) => None,
            Some(admin) => Some(self.refusal(&Rejection::InsufficientScope(vec![admin.clone()]))),
            None => Some(reply::error(
                StatusCode::FORBIDDEN,
                "forbidden: the status endpoints are not served to OAuth clients here; set \
                 authorization.admin_scope, or use `tether status` on this machine",
            )),
        }
    }

    fn refusal(&self, rejection: &Rejection) -> Response<Body> {
        match rejection {
            Rejection::Invalid(why) => {
                tracing::debug!("access token refused: {why}");
                let error = format!(r#"error="invalid_token", error_description="{}""#, quotable(why));
                self.challenge(StatusCode::UNAUTHORIZED, Some(&error), &format!("unauthorized: invalid token: {why}"))
            }
            Rejection::InsufficientScope(needed) => {
                let needed = needed.join(" ");
                let error = format!(r#"error="insufficient_scope", scope="{}""#, quotable(&needed));
                let message = format!("forbidden: the token lacks the scopes {needed}");
                let mut response = reply::error(StatusCode::FORBIDDEN, &message);
                let value = format!(r#"Bearer {error}, resource_metadata="{}""#, self.metadata_url);
                if let Ok(value) = HeaderValue::from_str(&value) {
                    response.headers_mut().insert(WWW_AUTHENTICATE, value);
                }
                response
            }
            Rejection::Unavailable(why) => {
                self.unavailable_warning.warn(|left_out| {
                    tracing::warn!("cannot check access tokens now: {why}{}", warn_limit::more(left_out));
                });
                let mut response = reply::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "service unavailable: the authorization server cannot be reached to check the token; retry",
                );
                response.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("5"));
                response
            }
        }
    }

    /// `status` with a challenge pointing at the metadata, `error` and the scopes to ask for.
    fn challenge(&self, status: StatusCode, error: Option<&str>, message: &str) -> Response<Body> {
        let mut response = reply::error(status, message);
        let mut value = String::from("Bearer ");
        if let Some(error) = error {
            value.push_str(error);
            value.push_str(", ");
        }
        value.push_str(&format!(r#"resource_metadata="{}""#, self.metadata_url));
        if !self.challenge_scope.is_empty() {
            value.push_str(&format!(r#", scope="{}""#, quotable(&self.challenge_scope)));
        }
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive).
fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

/// Text safe inside a quoted auth-param: no quotes, backslashes or controls.
fn quotable(text: &str) -> String {
    text.chars().filter(|c| *c != '"' && *c != '\\' && !c.is_control()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_case_insensitively_and_nothing_else_is() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert(AUTHORIZATION, HeaderValue::from_static("bearer abc.def"));
        assert_eq!(bearer(&headers).as_deref(), Some("abc.def"));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&headers), None);
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&headers), None);
    }

    #[test]
    fn quoted_values_cannot_break_out_of_their_quotes() {
        assert_eq!(quotable("a\"b\\c\nd"), "abcd");
    }
}
