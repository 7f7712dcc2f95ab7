//! The HTTP exchanges with authorization servers and metadata hosts, bounded: a
//! connect timeout, a deadline for the whole request including its body, and a cap
//! on every body read, so a slow or hostile server can neither hang a worker thread
//! nor fill memory.

// ureq 2's error carries a whole response; requests are built in closures that
// return it as ureq does (PooledAgent::send), so it is not boxed here.
#![allow(clippy::result_large_err)]

use std::io::Read;
use std::time::Duration;

use serde_json::Value;

use super::secret::hide;
use super::Failure;
use crate::keep_alive::PooledAgent;

/// How long a TCP (and TLS) connect may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a whole request may take, its answer's body included.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of an answer's body that is read.
pub(crate) const BODY_LIMIT: u64 = 64 * 1024;

/// An answer of any status, its body read (within [`BODY_LIMIT`]).
#[derive(Debug)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body as JSON, when it is JSON.
    pub json: Option<Value>,
    /// The `DPoP-Nonce` the server sent, if any (RFC 9449 §8).
    pub dpop_nonce: Option<String>,
}

impl Answer {
    /// Whether the server failed in a way that may pass (5xx, 429): the caller
    /// should report `Unavailable`.
    pub(crate) fn server_failed(&self) -> bool {
        self.status >= 500 || self.status == 429
    }

    /// The body as a JSON object, if it is one.
    pub(crate) fn object(&self) -> Option<&serde_json::Map<String, Value>> {
        self.json.as_ref().and_then(Value::as_object)
    }

    /// `error` and `error_description` of an OAuth error answer (RFC 6749 §5.2), for
    /// people: short and printable.
    pub(crate) fn oauth_error(&self) -> (Option<String>, String) {
        self.oauth_error_hiding(&[])
    }

    /// [`Answer::oauth_error`] with `secrets` (what the request carried) hidden
    /// from what the server wrote, before it is cut short: a server may quote them.
    pub(crate) fn oauth_error_hiding(&self, secrets: &[&str]) -> (Option<String>, String) {
        let obj = self.object();
        let field = |k: &str| obj.and_then(|o| o.get(k)).and_then(Value::as_str).map(|v| printable(&hide(v, secrets)));
        let error = field("error");
        let text = match (&error, field("error_description")) {
            (Some(e), Some(d)) => format!("HTTP {}: {e}: {d}", self.status),
            (Some(e), None) => format!("HTTP {}: {e}", self.status),
            (None, _) => format!("HTTP {}", self.status),
        };
        (error, text)
    }
}

/// Cuts text a server chose down to something safe to show: at most 200
/// characters, control characters dropped.
pub(crate) fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(200).collect()
}

/// The client for OAuth exchanges. Cheap to clone (the agents share their pools).
/// Its connections are kept as toward backends ([`PooledAgent`]): retired before
/// the server drops them, a request lost to one the server closed sent again.
#[derive(Clone)]
pub(crate) struct Http {
    /// For metadata GETs: follows a few redirects.
    fetch: PooledAgent,
    /// For POSTs (token, registration, revocation): never follows a redirect, so a
    /// secret in a body is never sent anywhere but where it was addressed.
    post: PooledAgent,
}

impl Default for Http {
    fn default() -> Self {
        Http::new()
    }
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Http")
    }
}

impl Http {
    /// A client with the bounds above.
    pub(crate) fn new() -> Self {
        let builder = || {
            ureq::AgentBuilder::new()
                .timeout_connect(CONNECT_TIMEOUT)
                .timeout(REQUEST_TIMEOUT)
                .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
        };
        Http {
            fetch: PooledAgent::new(move || builder().redirects(3)),
            post: PooledAgent::new(move || builder().redirects(0)),
        }
    }

    /// GET a JSON document.
    pub(crate) fn get_json(&self, url: &str) -> Result<Answer, Failure> {
        answer(&self.fetch, self.fetch.send(|a| a.get(url).set("Accept", "application/json").call()))
    }

    /// GET any URL and return the status and the `WWW-Authenticate` header: used to
    /// provoke a protected resource's challenge.
    pub(crate) fn probe(&self, url: &str) -> Result<(u16, Option<String>), Failure> {
        let result = self.fetch.send(|a| a.get(url).set("Accept", "application/json, text/event-stream").call());
        match result {
            Ok(r) | Err(ureq::Error::Status(_, r)) => {
                let answer = (r.status(), r.header("WWW-Authenticate").map(str::to_owned));
                // A refusal's body is read within bounds so the connection can serve
                // the next request; anything else may be an event stream that never
                // ends (a server without a login answers the GET with its SSE
                // stream), and is dropped with its connection.
                if matches!(answer.0, 401 | 403) {
                    let _ = std::io::copy(&mut self.fetch.body(r).take(BODY_LIMIT), &mut std::io::sink());
                }
                Ok(answer)
            }
            Err(ureq::Error::Transport(t)) => Err(Failure::unavailable(format!("{url}: {t}"))),
        }
    }

    /// GET `url` without following a redirect: its status (a redirect is an
    /// answer), and its body as JSON when it is JSON.
    pub(crate) fn peek(&self, url: &str) -> Result<Answer, Failure> {
        answer(&self.post, self.post.send(|a| a.get(url).set("Accept", "application/json, text/html").call()))
    }

    /// POST a form (`application/x-www-form-urlencoded`), with an `Authorization`
    /// header when given.
    pub(crate) fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
        authorization: Option<&str>,
    ) -> Result<Answer, Failure> {
        self.post_form_with(url, form, authorization, None)
    }

    /// [`Http::post_form`] with a `DPoP` proof header when given.
    pub(crate) fn post_form_with(
        &self,
        url: &str,
        form: &[(&str, &str)],
        authorization: Option<&str>,
        dpop: Option<&str>,
    ) -> Result<Answer, Failure> {
        let sent = self.post.send(|agent| {
            let mut request = agent.post(url).set("Accept", "application/json");
            if let Some(value) = authorization {
                request = request.set("Authorization", value);
            }
            if let Some(proof) = dpop {
                request = request.set("DPoP", proof);
            }
            request.send_form(form)
        });
        answer(&self.post, sent)
    }

    /// POST a JSON document.
    pub(crate) fn post_json(&self, url: &str, body: &Value) -> Result<Answer, Failure> {
        let body = body.to_string();
        let sent = self.post.send(|agent| {
            agent.post(url).set("Accept", "application/json").set("Content-Type", "application/json").send_string(&body)
        });
        answer(&self.post, sent)
    }
}

fn answer(agent: &PooledAgent, result: Result<ureq::Response, ureq::Error>) -> Result<Answer, Failure> {
    let response = match result {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t)) => return Err(Failure::unavailable(t.to_string())),
    };
    let status = response.status();
    let url = response.get_url().to_owned();
    let dpop_nonce = response.header("DPoP-Nonce").map(str::to_owned);
    let mut body = Vec::new();
    if let Err(e) = agent.body(response).take(BODY_LIMIT + 1).read_to_end(&mut body) {
        return Err(Failure::unavailable(format!("{url}: reading the answer: {e}")));
    }
    if body.len() as u64 > BODY_LIMIT {
        return Err(Failure::rejected(format!("{url}: the answer is larger than {} KiB", BODY_LIMIT / 1024)));
    }
    Ok(Answer { status, json: serde_json::from_slice(&body).ok(), dpop_nonce })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn oauth_errors_are_short_and_printable() {
        let a = Answer {
            status: 400,
            json: Some(json!({"error": "invalid_grant", "error_description": "gone\n\u{7}"})),
            dpop_nonce: None,
        };
        assert_eq!(a.oauth_error(), (Some("invalid_grant".into()), "HTTP 400: invalid_grant: gone".into()));
        let a = Answer { status: 503, json: None, dpop_nonce: None };
        assert!(a.server_failed());
        assert_eq!(a.oauth_error(), (None, "HTTP 503".into()));
        assert_eq!(printable(&"x".repeat(500)).len(), 200);
    }

    #[test]
    fn oauth_errors_hide_what_the_request_carried_even_when_cut_short() {
        // Cut at 200 characters, the quote would keep 15 characters of the token.
        let quoted = format!("{} refresh token rt-0123456789abcdef is gone", "x".repeat(170));
        let a = Answer {
            status: 400,
            json: Some(json!({"error": "invalid_grant", "error_description": quoted})),
            dpop_nonce: None,
        };
        let (error, text) = a.oauth_error_hiding(&["rt-0123456789abcdef"]);
        assert_eq!(error.as_deref(), Some("invalid_grant"));
        assert!(text.contains("refresh token [redacted]") && !text.contains("rt-0123"), "{text}");
    }

    #[test]
    fn refused_connections_are_unavailable() {
        // A loopback port that was just free: nothing listens there now.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let err = Http::new().get_json(&format!("http://127.0.0.1:{port}/x")).unwrap_err();
        assert_eq!(err.reason, tether_core::credential::CredentialFailure::Unavailable);
    }
}
