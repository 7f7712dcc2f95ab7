//! Finding a backend's authorization server: its Protected Resource Metadata
//! (RFC 9728), then that server's metadata (RFC 8414, or OpenID Connect Discovery),
//! with the checks that keep a hostile document from steering tether: the
//! resource it names must cover the backend's URL, and the metadata's `issuer`
//! must be the identifier its location was built from.
//!
//! Order, as the MCP authorization spec (2025-11-25 and later) lays it out:
//! - Protected Resource Metadata: the `resource_metadata` URL of the challenge,
//!   else `/.well-known/oauth-protected-resource/<path>` (path-aware), else the
//!   same at the root.
//! - Authorization server metadata for an issuer with a path:
//!   `/.well-known/oauth-authorization-server/<path>`,
//!   `/.well-known/openid-configuration/<path>`,
//!   `<issuer>/.well-known/openid-configuration`; without a path, the two root forms.
//! - No Protected Resource Metadata at all (a 2025-03-26 server): the authorization
//!   server is the backend's origin; without metadata there either, its endpoints
//!   are `/authorize`, `/token` and `/register` at that origin.
//!
//! A 5xx, 429 or unreachable host on the way is `Unavailable` (try later); other
//! refusals (404, 401, a non-JSON page) move on to the next location.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_core::credential::Challenge;

use super::resource;
use super::transport::Http;
use super::Failure;

/// What a protected resource says about itself (RFC 9728 §2), the parts tether uses.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct ResourceMetadata {
    /// Its resource identifier.
    #[serde(default)]
    pub resource: Option<String>,
    /// The issuers that may grant tokens for it.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// The scopes it knows.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// JWS algorithms it accepts in DPoP proofs (RFC 9728 §2): it takes DPoP.
    #[serde(default)]
    pub dpop_signing_alg_values_supported: Option<Vec<String>>,
    /// It takes DPoP-bound tokens only (RFC 9728 §2).
    #[serde(default)]
    pub dpop_bound_access_tokens_required: bool,
}

impl ResourceMetadata {
    /// Whether the resource says it takes DPoP-bound tokens.
    pub(crate) fn takes_dpop(&self) -> bool {
        self.dpop_bound_access_tokens_required
            || self.dpop_signing_alg_values_supported.as_ref().is_some_and(|algs| !algs.is_empty())
    }
}

/// An authorization server's metadata (RFC 8414 §2), the parts tether uses.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ServerMetadata {
    /// Its issuer identifier.
    pub issuer: String,
    /// Where a person logs in.
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    /// Where tokens are obtained.
    #[serde(default)]
    pub token_endpoint: Option<String>,
    /// Dynamic Client Registration (RFC 7591), if offered.
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    /// Token revocation (RFC 7009), if offered.
    #[serde(default)]
    pub revocation_endpoint: Option<String>,
    /// The scopes it knows (`offline_access` among them means it can be asked for
    /// a refresh token explicitly).
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// PKCE methods; tether needs `S256`.
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// How clients may authenticate at the token endpoint.
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// JWS algorithms for `private_key_jwt`.
    #[serde(default)]
    pub token_endpoint_auth_signing_alg_values_supported: Option<Vec<String>>,
    /// JWS algorithms it accepts in DPoP proofs (RFC 9449 §5.1).
    #[serde(default)]
    pub dpop_signing_alg_values_supported: Option<Vec<String>>,
    /// Whether a Client ID Metadata Document URL may serve as `client_id`.
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    /// Whether authorization responses carry `iss` (RFC 9207).
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
    /// Where its token-signing keys are (tether as a protected resource checks
    /// access tokens with them).
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// False for the 2025-03-26 default endpoints, which no document described.
    #[serde(skip)]
    pub documented: bool,
}

impl ServerMetadata {
    /// The endpoints a 2025-03-26 server has when it publishes no metadata.
    pub(crate) fn defaults(origin: &str) -> Self {
        ServerMetadata {
            issuer: origin.to_owned(),
            authorization_endpoint: Some(format!("{origin}/authorize")),
            token_endpoint: Some(format!("{origin}/token")),
            registration_endpoint: Some(format!("{origin}/register")),
            ..ServerMetadata::default()
        }
    }

    /// Whether the server supports PKCE with S256. The MCP spec says a client must
    /// refuse to go on when the metadata does not list it; a server with no
    /// metadata (2025-03-26 defaults) cannot say, and is trusted to.
    pub(crate) fn supports_s256(&self) -> bool {
        !self.documented
            || self.code_challenge_methods_supported.as_ref().is_some_and(|m| m.iter().any(|m| m == "S256"))
    }

    /// Whether `scopes_supported` lists `scope`.
    pub(crate) fn lists_scope(&self, scope: &str) -> bool {
        self.scopes_supported.as_ref().is_some_and(|s| s.iter().any(|s| s == scope))
    }

    /// The token endpoint, which every use needs.
    pub(crate) fn token_endpoint(&self) -> Result<&str, Failure> {
        self.token_endpoint
            .as_deref()
            .ok_or_else(|| Failure::rejected(format!("the authorization server {} has no token endpoint", self.issuer)))
    }
}

/// The outcome of discovery: whom to ask for tokens, and for which resource.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Discovery {
    /// The `resource` parameter to send (RFC 8707): the identifier the protected
    /// resource declared (checked to cover the backend's URL), else the backend's
    /// canonical URL.
    pub resource: String,
    /// The protected resource's `scopes_supported`, if it published metadata.
    pub resource_scopes: Option<Vec<String>>,
    /// The authorization server.
    pub server: ServerMetadata,
    /// The protected resource takes DPoP-bound tokens: its metadata says so, or
    /// its refusal offered the `DPoP` scheme. Only then is a new grant bound to a
    /// key: a resource that answers `Bearer` alone refuses `Authorization: DPoP`
    /// (FastMCP's verifier, tether's own listener), and a public client's refresh
    /// token bound to a key it refuses would never serve.
    pub resource_dpop: bool,
}

/// Discovers the authorization server of the backend at `server_url`. When the
/// protected resource lists several, `preferred` (the issuer of a stored
/// credential) is taken if listed, else the first.
pub(crate) fn discover(
    http: &Http,
    server_url: &str,
    challenge: &Challenge,
    preferred: Option<&str>,
) -> Result<Discovery, Failure> {
    let server = resource::parse(server_url).map_err(Failure::rejected)?;
    let canonical = resource::canonical(server_url).map_err(Failure::rejected)?;
    let origin = resource::origin(&server);
    let Some(prm) = protected_resource(http, &server, challenge)? else {
        // 2025-03-26: the authorization server is the backend's origin.
        let metadata = authorization_server(http, &origin)?.unwrap_or_else(|| ServerMetadata::defaults(&origin));
        return Ok(Discovery {
            resource: canonical,
            resource_scopes: None,
            server: metadata,
            resource_dpop: challenge.dpop,
        });
    };
    let resource = match prm.resource.as_deref().map(str::trim) {
        Some(r) if resource::covers(r, server_url) => r.to_owned(),
        Some(r) => {
            return Err(Failure::rejected(format!(
                "the protected resource metadata is for {r:?}, not for {canonical}: refusing to authorize"
            )))
        }
        None => return Err(Failure::rejected("the protected resource metadata names no resource")),
    };
    let issuer = match preferred.filter(|p| prm.authorization_servers.iter().any(|s| s == p)) {
        Some(p) => p.to_owned(),
        None => prm.authorization_servers.first().cloned().unwrap_or(origin),
    };
    let metadata = authorization_server(http, &issuer)?
        .ok_or_else(|| Failure::rejected(format!("no authorization server metadata found for {issuer}")))?;
    let resource_dpop = challenge.dpop || prm.takes_dpop();
    Ok(Discovery { resource, resource_scopes: prm.scopes_supported, server: metadata, resource_dpop })
}

/// The protected resource's metadata, or `None` when it publishes none.
fn protected_resource(
    http: &Http,
    server: &url::Url,
    challenge: &Challenge,
) -> Result<Option<ResourceMetadata>, Failure> {
    let mut locations = Vec::new();
    if let Some(url) = challenge.resource_metadata.as_deref().filter(|u| resource::parse(u).is_ok()) {
        locations.push(url.to_owned());
    }
    if !resource::path_of(server).is_empty() {
        locations.push(resource::well_known(server, "oauth-protected-resource"));
    }
    locations.push(format!("{}/.well-known/oauth-protected-resource", resource::origin(server)));
    locations.dedup();
    for url in locations {
        if let Some(doc) = fetch(http, &url)? {
            return serde_json::from_value(doc)
                .map(Some)
                .map_err(|e| Failure::rejected(format!("{url}: malformed protected resource metadata: {e}")));
        }
    }
    Ok(None)
}

/// The metadata of the authorization server `issuer`, or `None` when none of its
/// well-known locations has any. A document whose `issuer` is not exactly `issuer`
/// is refused (`Rejected`): its endpoints are never used.
pub(crate) fn authorization_server(http: &Http, issuer: &str) -> Result<Option<ServerMetadata>, Failure> {
    let url = resource::parse(issuer).map_err(Failure::rejected)?;
    let path = resource::path_of(&url);
    let mut locations = vec![
        resource::well_known(&url, "oauth-authorization-server"),
        resource::well_known(&url, "openid-configuration"),
    ];
    if !path.is_empty() {
        locations.push(format!("{}{path}/.well-known/openid-configuration", resource::origin(&url)));
    }
    for location in locations {
        let Some(doc) = fetch(http, &location)? else { continue };
        let mut metadata: ServerMetadata = serde_json::from_value(doc)
            .map_err(|e| Failure::rejected(format!("{location}: malformed authorization server metadata: {e}")))?;
        if metadata.issuer != issuer {
            return Err(Failure::rejected(format!(
                "{location} says its issuer is {:?}, not {issuer:?}: refusing to use it",
                metadata.issuer
            )));
        }
        metadata.documented = true;
        return Ok(Some(metadata));
    }
    Ok(None)
}

/// A JSON object at `url`, `None` when there is none there, `Unavailable` when the
/// server failed.
fn fetch(http: &Http, url: &str) -> Result<Option<Value>, Failure> {
    let answer = http.get_json(url)?;
    if answer.server_failed() {
        return Err(Failure::unavailable(format!("{url}: HTTP {}", answer.status)));
    }
    if answer.status != 200 {
        return Ok(None);
    }
    Ok(answer.json.filter(Value::is_object))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_support_is_read_from_documented_metadata_only() {
        let mut m = ServerMetadata { documented: true, ..ServerMetadata::default() };
        assert!(!m.supports_s256());
        m.code_challenge_methods_supported = Some(vec!["plain".into()]);
        assert!(!m.supports_s256());
        m.code_challenge_methods_supported = Some(vec!["plain".into(), "S256".into()]);
        assert!(m.supports_s256());
        assert!(ServerMetadata::defaults("http://a").supports_s256());
    }

    #[test]
    fn a_resource_takes_dpop_when_its_metadata_says_so() {
        let prm = |doc: Value| serde_json::from_value::<ResourceMetadata>(doc).unwrap();
        assert!(!prm(serde_json::json!({"resource": "https://a"})).takes_dpop());
        assert!(!prm(serde_json::json!({"dpop_signing_alg_values_supported": []})).takes_dpop());
        assert!(prm(serde_json::json!({"dpop_signing_alg_values_supported": ["ES256"]})).takes_dpop());
        assert!(prm(serde_json::json!({"dpop_bound_access_tokens_required": true})).takes_dpop());
    }

    #[test]
    fn defaults_sit_at_the_origin() {
        let m = ServerMetadata::defaults("http://127.0.0.1:9");
        assert_eq!(m.authorization_endpoint.as_deref(), Some("http://127.0.0.1:9/authorize"));
        assert_eq!(m.token_endpoint().unwrap(), "http://127.0.0.1:9/token");
        assert_eq!(m.registration_endpoint.as_deref(), Some("http://127.0.0.1:9/register"));
    }
}
