//! Where the issuer publishes its signing keys, read from its metadata when the
//! settings do not say: RFC 8414 (`/.well-known/oauth-authorization-server`,
//! path-inserted for an issuer with a path), then OpenID Connect Discovery
//! (`/.well-known/openid-configuration`, path-inserted, then appended) — the order
//! `oauth::discovery` follows as a client. A document whose `issuer` is not
//! exactly the configured one is refused: its `jwks_uri` could be anyone's keys.

use crate::oauth::discovery::authorization_server;
use crate::oauth::transport::Http;

/// The `jwks_uri` of `issuer`'s metadata. Errors are for the log: an unreachable
/// or failing host, a document for another issuer, no document, no `jwks_uri`.
pub(super) fn jwks_uri(http: &Http, issuer: &str) -> Result<String, String> {
    let metadata = authorization_server(http, issuer)
        .map_err(|f| f.message)?
        .ok_or_else(|| format!("no authorization server metadata found for {issuer}"))?;
    let jwks_uri = metadata.jwks_uri.ok_or_else(|| format!("the metadata of {issuer} names no jwks_uri"))?;
    super::settings::secure_url(&jwks_uri).map_err(|e| format!("{issuer}: jwks_uri: {e}"))?;
    Ok(jwks_uri)
}
