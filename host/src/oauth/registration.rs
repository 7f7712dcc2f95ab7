//! Who tether is to an authorization server: a pre-registered client from the
//! settings, a Client ID Metadata Document URL, or a client registered on the fly
//! (RFC 7591), in that order of preference (the MCP spec's order).
//!
//! A dynamic registration is kept with the credential (per backend and issuer) and
//! reused while its redirect URI is the one the login listens on. Loopback ports are
//! ephemeral, so the login first tries to listen on the port of the stored
//! registration again and registers anew only when that port is taken (see
//! `login`); authorization servers that follow RFC 8252 §7.3 accept any port on a
//! loopback redirect anyway, but many compare redirect URIs exactly.

use serde_json::{json, Value};

use super::discovery::ServerMetadata;
use super::secret::Secret;
use super::store::{ClientRecord, ClientSource};
use super::token;
use super::transport::Http;
use super::{Failure, OAuthSettings};

/// The client identity for a login at `server` with `redirect_uri`. `stored` is the
/// identity kept for this backend at this same issuer, if any (one kept for another
/// issuer must never be passed: credentials do not travel between authorization
/// servers).
pub(super) fn identify(
    http: &Http,
    settings: &OAuthSettings,
    server: &ServerMetadata,
    stored: Option<&ClientRecord>,
    redirect_uri: &str,
) -> Result<ClientRecord, Failure> {
    if let Some(client_id) = &settings.client_id {
        check_configured_issuer(settings, &server.issuer)?;
        return Ok(ClientRecord {
            client_id: client_id.clone(),
            client_secret: None, // read from the settings when needed, never stored
            source: ClientSource::Configured,
            redirect_uri: Some(redirect_uri.to_owned()),
            auth_method: None,
        });
    }
    if let Some(url) = settings.client_metadata_url.as_ref().filter(|_| server.client_id_metadata_document_supported) {
        return Ok(ClientRecord {
            client_id: url.clone(),
            client_secret: None,
            source: ClientSource::MetadataDocument,
            redirect_uri: Some(redirect_uri.to_owned()),
            auth_method: Some(token::NONE.to_owned()),
        });
    }
    if let Some(kept) =
        stored.filter(|c| c.source == ClientSource::Registered && c.redirect_uri.as_deref() == Some(redirect_uri))
    {
        return Ok(kept.clone());
    }
    match &server.registration_endpoint {
        Some(endpoint) => register(http, endpoint, redirect_uri, registration_method(server)),
        None => Err(Failure::rejected(format!(
            "the authorization server {} offers no client registration: configure a client_id for this backend",
            server.issuer
        ))),
    }
}

/// Refuses a configured client bound (`issuer` setting) to another authorization
/// server than the one the backend names now.
pub(super) fn check_configured_issuer(settings: &OAuthSettings, issuer: &str) -> Result<(), Failure> {
    match &settings.issuer {
        Some(bound) if bound != issuer => Err(Failure::rejected(format!(
            "the configured client_id belongs to the authorization server {bound}, but the backend now names {issuer}: \
             refusing to present it there"
        ))),
        _ => Ok(()),
    }
}

/// The token endpoint authentication method to register with: `none` (a native
/// public client, protected by PKCE) unless the server does not take it, then
/// `client_secret_post`, then `client_secret_basic`.
pub(super) fn registration_method(server: &ServerMetadata) -> &'static str {
    let Some(supported) = &server.token_endpoint_auth_methods_supported else {
        return token::NONE;
    };
    // `client_secret_post` before `client_secret_basic` where both are offered:
    // every server that takes it reads the client from the form, where some read
    // it only (the MCP Python SDK's, so FastMCP's, also at revocation).
    [token::NONE, token::POST, token::BASIC]
        .into_iter()
        .find(|m| supported.iter().any(|s| s == m))
        .unwrap_or(token::NONE)
}

/// The registration request tether sends.
fn metadata(redirect_uri: &str, auth_method: &str) -> Value {
    json!({
        "client_name": "tether",
        "application_type": "native",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": auth_method,
        "software_id": "tether",
        "software_version": env!("CARGO_PKG_VERSION"),
    })
}

/// Registers tether at `endpoint` (RFC 7591 §3).
pub(super) fn register(
    http: &Http,
    endpoint: &str,
    redirect_uri: &str,
    auth_method: &str,
) -> Result<ClientRecord, Failure> {
    let answer = http.post_json(endpoint, &metadata(redirect_uri, auth_method))?;
    if answer.server_failed() {
        return Err(Failure::unavailable(format!("client registration: {}", answer.oauth_error().1)));
    }
    if !(200..300).contains(&answer.status) {
        return Err(Failure::rejected(format!("client registration refused: {}", answer.oauth_error().1)));
    }
    let obj =
        answer.object().ok_or_else(|| Failure::rejected("client registration: the answer is not a JSON object"))?;
    let text = |k: &str| obj.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let client_id =
        text("client_id").ok_or_else(|| Failure::rejected("client registration: the answer has no client_id"))?;
    Ok(ClientRecord {
        client_id: client_id.to_owned(),
        client_secret: text("client_secret").map(Secret::new),
        source: ClientSource::Registered,
        redirect_uri: Some(redirect_uri.to_owned()),
        auth_method: text("token_endpoint_auth_method").map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(methods: Option<&[&str]>) -> ServerMetadata {
        ServerMetadata {
            issuer: "https://as".into(),
            token_endpoint_auth_methods_supported: methods.map(|m| m.iter().map(|s| s.to_string()).collect()),
            documented: true,
            ..ServerMetadata::default()
        }
    }

    #[test]
    fn registers_as_a_public_client_when_allowed() {
        assert_eq!(registration_method(&server(None)), "none");
        assert_eq!(registration_method(&server(Some(&["client_secret_post", "none"]))), "none");
        assert_eq!(
            registration_method(&server(Some(&["client_secret_basic", "client_secret_post"]))),
            "client_secret_post",
            "the form where both are offered"
        );
        assert_eq!(registration_method(&server(Some(&["client_secret_basic"]))), "client_secret_basic");
        assert_eq!(registration_method(&server(Some(&["client_secret_post"]))), "client_secret_post");
    }

    #[test]
    fn the_request_is_a_native_app_with_refresh() {
        let m = metadata("http://127.0.0.1:5/callback", "none");
        assert_eq!(m["redirect_uris"], json!(["http://127.0.0.1:5/callback"]));
        assert_eq!(m["grant_types"], json!(["authorization_code", "refresh_token"]));
        assert_eq!(m["application_type"], "native");
        assert_eq!(m["response_types"], json!(["code"]));
    }

    #[test]
    fn identity_order() {
        let http = Http::new();
        let redirect = "http://127.0.0.1:5/callback";
        let mut settings = OAuthSettings {
            client_id: Some("pre".into()),
            client_metadata_url: Some("https://tether.example/client.json".into()),
            ..OAuthSettings::default()
        };
        let mut s = server(None);
        s.client_id_metadata_document_supported = true;
        let c = identify(&http, &settings, &s, None, redirect).unwrap();
        assert_eq!((c.client_id.as_str(), c.source), ("pre", ClientSource::Configured));
        settings.issuer = Some("https://elsewhere".into());
        let e = identify(&http, &settings, &s, None, redirect).unwrap_err();
        assert!(e.message.contains("https://elsewhere"), "{}", e.message);
        settings.issuer = Some("https://as".into());
        identify(&http, &settings, &s, None, redirect).unwrap();
        settings.client_id = None;
        let c = identify(&http, &settings, &s, None, redirect).unwrap();
        assert_eq!(
            (c.client_id.as_str(), c.source),
            ("https://tether.example/client.json", ClientSource::MetadataDocument)
        );
        s.client_id_metadata_document_supported = false;
        let kept = ClientRecord {
            client_id: "dyn".into(),
            client_secret: None,
            source: ClientSource::Registered,
            redirect_uri: Some(redirect.into()),
            auth_method: None,
        };
        assert_eq!(identify(&http, &settings, &s, Some(&kept), redirect).unwrap(), kept);
        // A different port and no registration endpoint: nothing left to try.
        let e = identify(&http, &settings, &s, Some(&kept), "http://127.0.0.1:6/callback").unwrap_err();
        assert!(e.message.contains("client_id"), "{}", e.message);
    }
}
