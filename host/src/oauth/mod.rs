//! The host side of tether's OAuth client: everything the engine's credential
//! lifecycle (`tether_core::credential`) asks a host to do for a remote backend
//! that requires OAuth 2.1 as the MCP authorization spec lays it out (2025-11-25,
//! with the 2026-07-28 additions), and the CLI's `auth login/status/logout`.
//!
//! The engine decides when; this module does: discovery (RFC 9728, RFC 8414,
//! OpenID Connect Discovery, and the 2025-03-26 fallbacks), client identity
//! (pre-registered, Client ID Metadata Document, or RFC 7591 registration),
//! the authorization code flow with PKCE and a loopback redirect, the refresh and
//! client credentials grants (client secret or `private_key_jwt`), revocation, and
//! a store that several processes can share without racing on a rotating refresh
//! token. One [`Authority`] per remote backend holds its credential; the engine
//! never sees a token.
//!
//! Modules, one job each: [`challenge`] (reading `WWW-Authenticate`), `resource`
//! (URL forms), `transport` (bounded HTTP), `discovery`, `registration`, `pkce`,
//! `assertion` (JWT client authentication), `token`, `login` (scopes, the
//! authorization URL, the loopback listener), `browser`, [`store`], `authority`.

mod assertion;
mod authority;
mod browser;
pub mod challenge;
pub(crate) mod discovery;
mod dpop;
mod login;
pub(crate) mod pkce;
mod registration;
pub(crate) mod resource;
mod secret;
pub mod shared_credentials;
pub mod shared_login;
pub mod store;
pub(crate) mod token;
pub(crate) mod transport;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use tether_core::credential::{CredentialFailure, CredentialUpdate};

pub use authority::{AuthStatus, Authority, LoginSummary, Report};
pub use secret::{hide, Secret};
pub use shared_credentials::SharedCredentials;
pub use shared_login::{LoginDesk, SharedLogin};
pub use store::{CredentialStore, FileStore, StoredCredential};

/// Which grant gets this backend its tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// A person logs in in a browser (authorization code + PKCE); refresh tokens
    /// keep the login alive.
    #[default]
    AuthorizationCode,
    /// No person: the client's own credentials (a secret or a private key) get a
    /// token whenever one is needed (the MCP `oauth-client-credentials` extension).
    ClientCredentials,
    /// No person: a JWT the platform issues to this workload (a Kubernetes
    /// service account token, a cloud identity token) is exchanged for a token
    /// whenever one is needed (RFC 7523 §2.1; MCP workload identity federation).
    JwtBearer,
    /// Enterprise-managed authorization (the MCP extension, ID-JAG): the
    /// person's ID token from the organisation's identity provider is exchanged
    /// there for an identity assertion, which the MCP server's authorization
    /// server takes as a JWT-bearer grant. The organisation decides who may use
    /// which server; nobody clicks "allow".
    EnterpriseManaged,
}

impl Grant {
    /// Whether tokens come without a person at the browser (nothing to log in to).
    pub fn unattended(self) -> bool {
        matches!(self, Grant::ClientCredentials | Grant::JwtBearer | Grant::EnterpriseManaged)
    }

    /// As the config spells it.
    pub fn name(self) -> &'static str {
        match self {
            Grant::AuthorizationCode => "authorization_code",
            Grant::ClientCredentials => "client_credentials",
            Grant::JwtBearer => "jwt_bearer",
            Grant::EnterpriseManaged => "enterprise_managed",
        }
    }
}

/// A remote backend's OAuth settings, all optional: with none, tether discovers
/// everything and registers itself. Secrets in here are [`Secret`]s, so the
/// settings can be logged with `{:?}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSettings {
    /// A pre-registered `client_id` (used before any other kind of registration).
    #[serde(default)]
    pub client_id: Option<String>,
    /// The pre-registered client's secret, if it is confidential.
    #[serde(default)]
    pub client_secret: Option<Secret>,
    /// The issuer the pre-registered client belongs to. When the backend's metadata
    /// names another authorization server, tether refuses to present the client
    /// there (credentials do not travel between authorization servers) and says so.
    #[serde(default)]
    pub issuer: Option<String>,
    /// The HTTPS URL of tether's Client ID Metadata Document, used as `client_id`
    /// where the authorization server supports such documents.
    #[serde(default)]
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for (space-separated) when the backend does not say.
    #[serde(default)]
    pub scope: Option<String>,
    /// The grant to use.
    #[serde(default)]
    pub grant: Grant,
    /// A PEM private key for `private_key_jwt` client authentication.
    #[serde(default)]
    pub private_key: Option<Secret>,
    /// A file holding that PEM key (when `private_key` is not given).
    #[serde(default)]
    pub private_key_file: Option<PathBuf>,
    /// The JWS algorithm for the key (`ES256`, `RS256`, ...); inferred if absent.
    #[serde(default)]
    pub signing_alg: Option<String>,
    /// The workload's JWT for the `jwt_bearer` grant, given as is.
    #[serde(default)]
    pub assertion: Option<Secret>,
    /// A file holding that JWT, read again at every exchange (platforms rotate
    /// these files, e.g. a projected service account token).
    #[serde(default)]
    pub assertion_file: Option<PathBuf>,
    /// `enterprise_managed`: the identity provider's token endpoint.
    #[serde(default)]
    pub idp_token_endpoint: Option<String>,
    /// `enterprise_managed`: tether's client at the identity provider.
    #[serde(default)]
    pub idp_client_id: Option<String>,
    /// `enterprise_managed`: that client's secret, if it is confidential.
    #[serde(default)]
    pub idp_client_secret: Option<Secret>,
    /// `enterprise_managed`: the person's ID token from the identity provider.
    #[serde(default)]
    pub id_token: Option<Secret>,
    /// A file holding that ID token, read again at every exchange (an SSO
    /// helper keeps it fresh).
    #[serde(default)]
    pub id_token_file: Option<PathBuf>,
    /// Bind tokens to a key with DPoP (RFC 9449) where the authorization server
    /// supports it (`ES256`); `false` keeps plain bearer tokens.
    #[serde(default = "default_true")]
    pub dpop: bool,
    /// A fixed port for the loopback redirect URI (for an authorization server that
    /// compares redirect URIs exactly and was given this one).
    #[serde(default)]
    pub redirect_port: Option<u16>,
    /// Whether a login opens the browser by itself (the URL is reported anyway).
    #[serde(default = "default_true")]
    pub open_browser: bool,
}

fn default_true() -> bool {
    true
}

impl Default for OAuthSettings {
    fn default() -> Self {
        OAuthSettings {
            client_id: None,
            client_secret: None,
            issuer: None,
            client_metadata_url: None,
            scope: None,
            grant: Grant::default(),
            private_key: None,
            private_key_file: None,
            signing_alg: None,
            assertion: None,
            assertion_file: None,
            idp_token_endpoint: None,
            idp_client_id: None,
            idp_client_secret: None,
            id_token: None,
            id_token_file: None,
            dpop: true,
            redirect_port: None,
            open_browser: true,
        }
    }
}

/// Why a step failed, in the engine's words, with a message for people that never
/// holds a token, code, verifier or secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// What the engine should make of it.
    pub reason: CredentialFailure,
    /// What happened.
    pub message: String,
}

impl Failure {
    /// A failure a retry will not fix.
    pub fn rejected(message: impl Into<String>) -> Self {
        Failure { reason: CredentialFailure::Rejected, message: message.into() }
    }

    /// A failure that may pass (unreachable, timed out, 5xx).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Failure { reason: CredentialFailure::Unavailable, message: message.into() }
    }

    /// The authorization server refuses the client itself (`invalid_client`).
    pub fn client_refused(message: impl Into<String>) -> Self {
        Failure { reason: CredentialFailure::ClientRefused, message: message.into() }
    }

    /// The grant is dead: only a new login helps.
    pub fn invalid_grant(message: impl Into<String>) -> Self {
        Failure { reason: CredentialFailure::InvalidGrant, message: message.into() }
    }

    /// As the engine hears it.
    pub fn update(self) -> CredentialUpdate {
        CredentialUpdate::Failed { reason: self.reason, message: self.message }
    }
}

/// Now, in unix seconds (token expiry is stored that way).
fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod settings_tests {
    use super::*;

    #[test]
    fn settings_parse_with_defaults_and_refuse_unknown_keys() {
        let s: OAuthSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(s, OAuthSettings::default());
        assert!(s.open_browser);
        assert_eq!(s.grant, Grant::AuthorizationCode);
        let s: OAuthSettings = serde_json::from_str(
            r#"{"client_id":"a","client_secret":"shh","grant":"client_credentials","redirect_port":8765,"open_browser":false}"#,
        )
        .unwrap();
        assert_eq!(s.grant, Grant::ClientCredentials);
        assert_eq!(s.redirect_port, Some(8765));
        assert!(!s.open_browser);
        assert!(!format!("{s:?}").contains("shh"));
        assert!(serde_json::from_str::<OAuthSettings>(r#"{"clientId":"a"}"#).is_err());
        assert!(serde_json::from_str::<OAuthSettings>(r#"{"grant":"password"}"#).is_err());
    }
}
