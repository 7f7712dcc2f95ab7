//! The token endpoint (OAuth 2.1 §3.2, RFC 6749 §§4–6) and revocation (RFC 7009):
//! the grants tether uses (and the token exchange one of them starts with), client authentication, and what the answers mean
//! for the engine.
//!
//! Every request carries `resource` (RFC 8707) so the token is bound to the MCP
//! server. A refresh sends no `scope`: the grant keeps the scope it had. Failures:
//! `invalid_grant` is [`CredentialFailure::InvalidGrant`] (only a new login helps);
//! a 5xx, a 429, a refused connection or a timeout is `Unavailable`; anything else
//! is `Rejected`.
//!
//! [`CredentialFailure::InvalidGrant`]: tether_core::credential::CredentialFailure::InvalidGrant

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;
use url::form_urlencoded;

use super::dpop::DpopKey;
use super::secret::Secret;
use super::transport::{Answer, Http};
use super::Failure;

/// `none`: a public client, identified by `client_id` in the body.
pub(crate) const NONE: &str = "none";
/// `client_secret_basic`: HTTP Basic with the form-encoded id and secret.
pub(crate) const BASIC: &str = "client_secret_basic";
/// `client_secret_post`: id and secret in the body.
pub(crate) const POST: &str = "client_secret_post";
/// `private_key_jwt`: a signed JWT assertion in the body (RFC 7523).
pub(crate) const PRIVATE_KEY_JWT: &str = "private_key_jwt";

/// How tether proves who it is to the token endpoint for one request.
#[derive(Debug, Clone)]
pub(crate) enum ClientAuth {
    /// A public client.
    None {
        /// Its `client_id`.
        client_id: String,
    },
    /// HTTP Basic.
    Basic {
        /// `client_id`.
        client_id: String,
        /// `client_secret`.
        secret: Secret,
    },
    /// Secret in the body.
    Post {
        /// `client_id`.
        client_id: String,
        /// `client_secret`.
        secret: Secret,
    },
    /// No client authentication and no `client_id` (a grant whose assertion says
    /// who is asking, RFC 7523 §3.1).
    Unidentified,
    /// A signed JWT assertion.
    Jwt {
        /// The assertion (it authenticates: a secret for its short life).
        assertion: Secret,
    },
}

impl ClientAuth {
    /// Builds the authentication for `method` (one of the constants here, except
    /// `private_key_jwt`, which needs an assertion: see [`ClientAuth::Jwt`]).
    pub(crate) fn for_method(method: &str, client_id: &str, secret: Option<&Secret>) -> ClientAuth {
        let client_id = client_id.to_owned();
        match (method, secret) {
            (BASIC, Some(s)) => ClientAuth::Basic { client_id, secret: s.clone() },
            (POST, Some(s)) => ClientAuth::Post { client_id, secret: s.clone() },
            _ => ClientAuth::None { client_id },
        }
    }

    /// The method's name in metadata.
    pub(crate) fn method(&self) -> &'static str {
        match self {
            ClientAuth::None { .. } | ClientAuth::Unidentified => NONE,
            ClientAuth::Basic { .. } => BASIC,
            ClientAuth::Post { .. } => POST,
            ClientAuth::Jwt { .. } => PRIVATE_KEY_JWT,
        }
    }

    /// Adds its body parameters to `form` and returns the `Authorization` header
    /// value it needs, if any.
    fn apply(&self, form: &mut Vec<(&'static str, String)>) -> Option<String> {
        match self {
            ClientAuth::None { client_id } => {
                form.push(("client_id", client_id.clone()));
                None
            }
            ClientAuth::Unidentified => None,
            ClientAuth::Basic { client_id, secret } => {
                // The client_id goes in the body too (RFC 6749 §3.2.1 lets a client
                // name itself there; it authenticates nothing): some servers read
                // it from the body only, whatever the Basic header says (the MCP
                // Python SDK's authorization server, hence FastMCP's, answers
                // `invalid_client: Missing client_id` without it).
                form.push(("client_id", client_id.clone()));
                Some(basic_authorization(client_id, secret.expose()))
            }
            ClientAuth::Post { client_id, secret } => {
                form.push(("client_id", client_id.clone()));
                form.push(("client_secret", secret.expose().to_owned()));
                None
            }
            ClientAuth::Jwt { assertion } => {
                form.push(("client_assertion_type", super::assertion::ASSERTION_TYPE.to_owned()));
                form.push(("client_assertion", assertion.expose().to_owned()));
                None
            }
        }
    }
}

/// `Basic base64(urlencode(id) ":" urlencode(secret))`, the encoding RFC 6749 §2.3.1
/// asks for (so a `:` in the id cannot be misread).
pub(crate) fn basic_authorization(client_id: &str, secret: &str) -> String {
    let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    format!("Basic {}", STANDARD.encode(format!("{}:{}", encode(client_id), encode(secret))))
}

/// Chooses how a client holding a secret (or not) authenticates, given the method
/// its registration named and the methods the server lists (absent means
/// `client_secret_basic`, RFC 8414 §2). Without a secret, always `none`.
pub(crate) fn choose_method(has_secret: bool, registered: Option<&str>, supported: Option<&[String]>) -> &'static str {
    if !has_secret {
        return NONE;
    }
    let listed = |m: &str| supported.map_or(m == BASIC, |s| s.iter().any(|x| x == m));
    if let Some(m) = [BASIC, POST, NONE].into_iter().find(|m| Some(*m) == registered) {
        if supported.is_none() || listed(m) {
            return m;
        }
    }
    [BASIC, POST, NONE].into_iter().find(|m| listed(m)).unwrap_or(BASIC)
}

/// What the token endpoint granted.
#[derive(Debug, Clone)]
pub(crate) struct Granted {
    /// The access token.
    pub access_token: Secret,
    /// A refresh token, if one was issued (or rotated).
    pub refresh_token: Option<Secret>,
    /// Seconds until the access token expires, if said.
    pub expires_in: Option<u64>,
    /// The granted scope, if said (else it is the requested one).
    pub scope: Option<String>,
    /// `token_type` (always Bearer, case aside: others are refused).
    pub token_type: String,
}

/// What a login brought back to exchange: the code, where it was sent, and the
/// PKCE verifier of the login.
pub(crate) struct Code<'a> {
    /// The authorization code.
    pub code: &'a Secret,
    /// The redirect URI the login used.
    pub redirect_uri: &'a str,
    /// The PKCE verifier.
    pub verifier: &'a Secret,
}

/// Exchanges an authorization code (with its PKCE verifier).
pub(crate) fn exchange_code(
    http: &Http,
    endpoint: &str,
    auth: &ClientAuth,
    code: Code<'_>,
    resource: &str,
    dpop: Option<&DpopKey>,
) -> Result<Granted, Failure> {
    let form = vec![
        ("grant_type", "authorization_code".to_owned()),
        ("code", code.code.expose().to_owned()),
        ("redirect_uri", code.redirect_uri.to_owned()),
        ("code_verifier", code.verifier.expose().to_owned()),
        ("resource", resource.to_owned()),
    ];
    grant(http, endpoint, auth, form, dpop)
}

/// Uses a refresh token.
pub(crate) fn refresh(
    http: &Http,
    endpoint: &str,
    auth: &ClientAuth,
    refresh_token: &Secret,
    resource: &str,
    dpop: Option<&DpopKey>,
) -> Result<Granted, Failure> {
    let form = vec![
        ("grant_type", "refresh_token".to_owned()),
        ("refresh_token", refresh_token.expose().to_owned()),
        ("resource", resource.to_owned()),
    ];
    grant(http, endpoint, auth, form, dpop)
}

/// The client credentials grant (no person, no refresh token).
pub(crate) fn client_credentials(
    http: &Http,
    endpoint: &str,
    auth: &ClientAuth,
    resource: &str,
    scope: Option<&str>,
    dpop: Option<&DpopKey>,
) -> Result<Granted, Failure> {
    let mut form = vec![("grant_type", "client_credentials".to_owned()), ("resource", resource.to_owned())];
    if let Some(scope) = scope {
        form.push(("scope", scope.to_owned()));
    }
    grant(http, endpoint, auth, form, dpop)
}

/// `grant_type` of the JWT-bearer authorization grant (RFC 7523 §2.1).
pub(crate) const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The JWT-bearer grant (RFC 7523 §2.1): a JWT the platform issued to this
/// workload (workload identity federation) is the grant itself. No person and
/// no refresh token: the assertion is exchanged again when a token is needed.
pub(crate) fn jwt_bearer(
    http: &Http,
    endpoint: &str,
    auth: &ClientAuth,
    assertion: &Secret,
    resource: &str,
    scope: Option<&str>,
    dpop: Option<&DpopKey>,
) -> Result<Granted, Failure> {
    let mut form = vec![
        ("grant_type", JWT_BEARER.to_owned()),
        ("assertion", assertion.expose().to_owned()),
        ("resource", resource.to_owned()),
    ];
    if let Some(scope) = scope {
        form.push(("scope", scope.to_owned()));
    }
    grant(http, endpoint, auth, form, dpop)
}

/// Revokes a token (RFC 7009); `hint` is `refresh_token` or `access_token`.
pub(crate) fn revoke(
    http: &Http,
    endpoint: &str,
    auth: &ClientAuth,
    token: &Secret,
    hint: &str,
) -> Result<(), Failure> {
    let mut form = vec![("token", token.expose().to_owned()), ("token_type_hint", hint.to_owned())];
    let authorization = auth.apply(&mut form);
    let answer = post(http, endpoint, &form, authorization.as_deref())?;
    let text = answer.oauth_error_hiding(&sent_secrets(&form, authorization.as_deref())).1;
    match answer.status {
        200..=299 => Ok(()),
        _ if answer.server_failed() => Err(Failure::unavailable(format!("revocation: {text}"))),
        _ => Err(Failure::rejected(format!("revocation: {text}"))),
    }
}

/// The form fields that carry secrets: tokens, codes, verifiers, client secrets
/// and assertions.
const SECRET_FIELDS: &[&str] = &[
    "token",
    "refresh_token",
    "code",
    "code_verifier",
    "client_secret",
    "client_assertion",
    "assertion",
    "subject_token",
];

/// The secrets a token endpoint request carried (its secret fields and its
/// `Authorization` header), to hide from what the server says back.
fn sent_secrets<'a>(form: &'a [(&'static str, String)], authorization: Option<&'a str>) -> Vec<&'a str> {
    let fields = form.iter().filter(|(k, _)| SECRET_FIELDS.contains(k)).map(|(_, v)| v.as_str());
    let header = authorization.into_iter().flat_map(|a| [a, a.split_once(' ').map_or(a, |(_, v)| v)]);
    fields.chain(header).collect()
}

fn post(
    http: &Http,
    endpoint: &str,
    form: &[(&'static str, String)],
    authorization: Option<&str>,
) -> Result<Answer, Failure> {
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    http.post_form(endpoint, &pairs, authorization)
}

fn grant(
    http: &Http,
    endpoint: &str,
    auth: &ClientAuth,
    form: Vec<(&'static str, String)>,
    dpop: Option<&DpopKey>,
) -> Result<Granted, Failure> {
    request(http, endpoint, auth, form, "token endpoint", dpop, |answer| parse_granted(answer, dpop.is_some()))
}

/// Posts `form` to a token endpoint and reads a 200 answer with `read`; `name`
/// says which endpoint in messages. What the server says back never carries
/// what it was sent.
fn request<T>(
    http: &Http,
    endpoint: &str,
    auth: &ClientAuth,
    mut form: Vec<(&'static str, String)>,
    name: &str,
    dpop: Option<&DpopKey>,
    read: impl FnOnce(&Answer) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let authorization = auth.apply(&mut form);
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let send = || {
        let proof = dpop.map(|key| key.token_request_proof(endpoint, super::unix_now())).transpose();
        let proof = proof.map_err(|e| Failure::rejected(format!("{name}: {e}")))?;
        http.post_form_with(endpoint, &pairs, authorization.as_deref(), proof.as_deref())
    };
    let mut answer = send()?;
    if let (Some(key), Some(nonce)) = (dpop, &answer.dpop_nonce) {
        key.as_nonce(nonce);
        // The server wants its nonce in the proof (RFC 9449 §8): once more, with it.
        if answer.status == 400 && answer.oauth_error().0.as_deref() == Some("use_dpop_nonce") {
            answer = send()?;
            if let Some(nonce) = &answer.dpop_nonce {
                key.as_nonce(nonce);
            }
        }
    }
    // A server may quote what it was sent: none of that goes further.
    let secrets = sent_secrets(&form, authorization.as_deref());
    if answer.server_failed() {
        return Err(Failure::unavailable(format!("{name}: {}", answer.oauth_error_hiding(&secrets).1)));
    }
    if answer.status != 200 {
        let (error, text) = answer.oauth_error_hiding(&secrets);
        let message = format!("{name}: {text}");
        return Err(match error.as_deref() {
            Some("invalid_grant") => Failure::invalid_grant(message),
            Some("invalid_client") => Failure::client_refused(message),
            _ => Failure::rejected(message),
        });
    }
    read(&answer).map_err(|f| Failure { message: super::secret::hide(&f.message, &secrets), ..f })
}

/// `grant_type` of token exchange (RFC 8693).
pub(crate) const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The Identity Assertion JWT Authorization Grant's token type (ID-JAG).
pub(crate) const ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";
/// An OpenID Connect ID token, as a token exchange's subject.
const ID_TOKEN: &str = "urn:ietf:params:oauth:token-type:id_token";

/// Enterprise-managed authorization, first half: the person's ID token from their
/// organisation's identity provider is exchanged there (RFC 8693) for an ID-JAG
/// addressed to the MCP server's authorization server (`audience`) and the MCP
/// server (`resource`). The second half is [`jwt_bearer`] with the ID-JAG.
pub(crate) fn exchange_for_id_jag(
    http: &Http,
    endpoint: &str,
    auth: &ClientAuth,
    id_token: &Secret,
    audience: &str,
    resource: &str,
    scope: Option<&str>,
) -> Result<Secret, Failure> {
    let mut form = vec![
        ("grant_type", TOKEN_EXCHANGE.to_owned()),
        ("requested_token_type", ID_JAG.to_owned()),
        ("audience", audience.to_owned()),
        ("resource", resource.to_owned()),
        ("subject_token", id_token.expose().to_owned()),
        ("subject_token_type", ID_TOKEN.to_owned()),
    ];
    if let Some(scope) = scope {
        form.push(("scope", scope.to_owned()));
    }
    request(http, endpoint, auth, form, "identity provider token exchange", None, |answer| {
        let malformed = |what: &str| Failure::rejected(format!("identity provider token exchange: the answer {what}"));
        let obj = answer.object().ok_or_else(|| malformed("is not a JSON object"))?;
        let issued = obj.get("issued_token_type").and_then(Value::as_str);
        if issued.is_some_and(|t| t != ID_JAG) {
            return Err(malformed("is not an ID-JAG"));
        }
        let jag = obj.get("access_token").and_then(Value::as_str).filter(|s| !s.is_empty());
        jag.map(Secret::new).ok_or_else(|| malformed("has no access_token"))
    })
}

/// A token endpoint's answer; a `DPoP` token type is accepted when the request
/// carried a proof (`dpop`).
fn parse_granted(answer: &Answer, dpop: bool) -> Result<Granted, Failure> {
    let malformed = |what: &str| Failure::rejected(format!("token endpoint: the answer {what}"));
    let obj = answer.object().ok_or_else(|| malformed("is not a JSON object"))?;
    let text = |k: &str| obj.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let access_token = text("access_token").ok_or_else(|| malformed("has no access_token"))?;
    let token_type = text("token_type").unwrap_or("Bearer");
    let dpop_bound = dpop && token_type.eq_ignore_ascii_case("dpop");
    if !token_type.eq_ignore_ascii_case("bearer") && !dpop_bound {
        return Err(Failure::rejected(format!(
            "token endpoint: token type {:?} is not supported (only Bearer, or DPoP after a proof)",
            super::transport::printable(token_type)
        )));
    }
    let expires_in = match obj.get("expires_in") {
        Some(Value::Number(n)) => n.as_u64().or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Some(Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    };
    Ok(Granted {
        access_token: Secret::new(access_token),
        refresh_token: text("refresh_token").map(Secret::new),
        expires_in,
        scope: text("scope").map(str::to_owned),
        token_type: token_type.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tether_core::credential::CredentialFailure;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn basic_encodes_the_parts_first() {
        assert_eq!(basic_authorization("id", "secret"), format!("Basic {}", STANDARD.encode("id:secret")));
        assert_eq!(basic_authorization("a:b", "c d/é"), format!("Basic {}", STANDARD.encode("a%3Ab:c+d%2F%C3%A9")));
    }

    #[test]
    fn method_choice() {
        assert_eq!(choose_method(false, Some(BASIC), None), NONE);
        assert_eq!(choose_method(true, None, None), BASIC);
        assert_eq!(choose_method(true, Some(POST), None), POST);
        assert_eq!(choose_method(true, Some(POST), Some(&list(&[BASIC]))), BASIC);
        assert_eq!(choose_method(true, None, Some(&list(&[POST]))), POST);
        assert_eq!(choose_method(true, None, Some(&list(&[NONE]))), NONE);
        assert_eq!(choose_method(true, Some(BASIC), Some(&list(&[POST, BASIC]))), BASIC);
        assert_eq!(choose_method(true, None, Some(&list(&[PRIVATE_KEY_JWT]))), BASIC);
    }

    #[test]
    fn auth_goes_where_the_method_says() {
        let secret = Secret::new("s");
        let mut form = Vec::new();
        assert!(ClientAuth::for_method(POST, "id", Some(&secret)).apply(&mut form).is_none());
        assert_eq!(form, vec![("client_id", "id".to_owned()), ("client_secret", "s".to_owned())]);
        let mut form = Vec::new();
        assert!(ClientAuth::for_method(BASIC, "id", Some(&secret)).apply(&mut form).is_some());
        assert_eq!(form, vec![("client_id", "id".to_owned())], "the id in the body too, never the secret");
        let mut form = Vec::new();
        assert_eq!(ClientAuth::for_method(BASIC, "id", None).method(), NONE);
        ClientAuth::for_method(NONE, "id", Some(&secret)).apply(&mut form);
        assert_eq!(form, vec![("client_id", "id".to_owned())]);
        assert!(!format!("{:?}", ClientAuth::for_method(POST, "id", Some(&secret))).contains("\"s\""));
    }

    #[test]
    fn answers() {
        let ok = |body| Answer { status: 200, json: Some(body), dpop_nonce: None };
        let g = parse_granted(&ok(json!({"access_token": "a", "token_type": "bearer", "expires_in": "60", "refresh_token": "r", "scope": "x y"})), false).unwrap();
        assert_eq!((g.access_token.expose(), g.expires_in, g.scope.as_deref()), ("a", Some(60), Some("x y")));
        assert_eq!(g.refresh_token.unwrap().expose(), "r");
        let g = parse_granted(&ok(json!({"access_token": "a", "expires_in": 3600})), false).unwrap();
        assert_eq!((g.expires_in, g.refresh_token.is_none(), g.token_type.as_str()), (Some(3600), true, "Bearer"));
        assert_eq!(
            parse_granted(&ok(json!({"access_token": "a", "token_type": "DPoP"})), false).unwrap_err().reason,
            CredentialFailure::Rejected
        );
        assert_eq!(
            parse_granted(&ok(json!({"token_type": "Bearer"})), false).unwrap_err().reason,
            CredentialFailure::Rejected
        );
        assert_eq!(
            parse_granted(&Answer { status: 200, json: None, dpop_nonce: None }, false).unwrap_err().reason,
            CredentialFailure::Rejected
        );
    }
}
