//! `tether.authorization` as the config file spells it, and the checks a config
//! reader can run on it before a validator is built.

use jsonwebtoken::Algorithm;
use serde::Deserialize;

use crate::oauth::resource;
use crate::oauth::Secret;

/// The algorithms accepted when the settings name none: the asymmetric ones
/// authorization servers commonly sign access tokens with.
pub const DEFAULT_ALGORITHMS: &[&str] = &["RS256", "PS256", "ES256", "EdDSA"];

/// `tether.authorization` in the config file, minus `scopes` (the engine reads that
/// mapping): which authorization server tether trusts for the tokens clients
/// present to its HTTP listener, and how it checks them. Secrets are [`Secret`]s,
/// so the settings can be logged with `{:?}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceAuthSettings {
    /// The authorization server's issuer identifier. Compared to a token's `iss`
    /// (and the metadata's `issuer`) exactly, as a string (RFC 8414 §3.3).
    pub issuer: String,
    /// Tether's canonical URI as clients reach it (e.g. `https://gw.example.com/mcp`):
    /// the audience tokens must be minted for (RFC 8707). The host fills a default.
    #[serde(default)]
    pub resource: Option<String>,
    /// Further `aud` values accepted besides the resource (an authorization server
    /// that mints tokens for a logical API name, say).
    #[serde(default)]
    pub audience: Vec<String>,
    /// Where the signing keys are; by default read from the issuer's metadata.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// When set, tokens are checked by RFC 7662 introspection there instead of as
    /// JWTs (for opaque tokens).
    #[serde(default)]
    pub introspection_endpoint: Option<String>,
    /// Tether's client at the introspection endpoint (`client_secret_basic`).
    #[serde(default)]
    pub client_id: Option<String>,
    /// That client's secret.
    #[serde(default)]
    pub client_secret: Option<Secret>,
    /// Scopes every token must carry, whatever it is used for.
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// The JWS algorithms accepted (default [`DEFAULT_ALGORITHMS`]). `none` and the
    /// HMAC ones (`HS*`) are never accepted: a resource holds no shared secret, and
    /// a public key must not double as one (RFC 8725 §3.1, §3.2).
    #[serde(default)]
    pub algorithms: Option<Vec<String>>,
    /// The scope that lets its holder use the status endpoints and admin actions
    /// (`/status`, `/metrics`, `/events`, `/logs/NAME`, `/admin/...`) of an
    /// OAuth-protected listener: they show every backend, whatever the other
    /// scopes grant. Without it they are refused there (`/healthz` and `/readyz`
    /// take any valid token).
    #[serde(default)]
    pub admin_scope: Option<String>,
    /// A name for people, published in tether's Protected Resource Metadata.
    #[serde(default)]
    pub resource_name: Option<String>,
    /// The engine's mapping of scopes to servers and tools: read by the engine,
    /// ignored here.
    #[serde(default)]
    pub scopes: serde_json::Value,
}

impl ResourceAuthSettings {
    /// What is wrong with the settings, for the config reader to report before a
    /// validator is built: URLs that are not http(s), algorithms that are unknown,
    /// symmetric or `none`, a secret without a client.
    pub fn check(&self) -> Result<(), String> {
        // Where keys and verdicts come from must be authenticated itself: whoever
        // could answer for them in plain HTTP could forge any token.
        secure_url(&self.issuer).map_err(|e| format!("authorization.issuer: {e}"))?;
        for (name, url) in [("jwks_uri", &self.jwks_uri), ("introspection_endpoint", &self.introspection_endpoint)] {
            if let Some(url) = url {
                secure_url(url).map_err(|e| format!("authorization.{name}: {e}"))?;
            }
        }
        if let Some(url) = &self.resource {
            resource::parse(url).map_err(|e| format!("authorization.resource: {e}"))?;
        }
        let scopes = self.required_scopes.iter().map(|s| ("required_scopes", s));
        for (name, scope) in scopes.chain(self.admin_scope.iter().map(|s| ("admin_scope", s))) {
            if !tether_core::access::is_scope_token(scope) {
                return Err(format!(
                    "authorization.{name}: {scope:?} is not a scope (printable ASCII, no space, \" or \\)"
                ));
            }
        }
        if let Some(names) = &self.algorithms {
            if names.is_empty() {
                return Err("authorization.algorithms: empty: no token could be accepted".to_owned());
            }
            for name in names {
                if algorithm(name).is_none() {
                    return Err(format!(
                        "authorization.algorithms: {name:?} is not accepted (use RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 or EdDSA)"
                    ));
                }
            }
        }
        if self.client_secret.is_some() && self.client_id.is_none() {
            return Err("authorization.client_secret needs authorization.client_id".to_owned());
        }
        Ok(())
    }

    /// The accepted algorithms: the configured ones that [`algorithm`] knows (the
    /// others are dropped: [`ResourceAuthSettings::check`] reports them), else the
    /// defaults.
    pub(super) fn accepted_algorithms(&self) -> Vec<Algorithm> {
        match &self.algorithms {
            Some(names) => names.iter().filter_map(|n| algorithm(n)).collect(),
            None => DEFAULT_ALGORITHMS.iter().filter_map(|n| algorithm(n)).collect(),
        }
    }
}

/// `raw` as an https URL, or an http one to this machine (loopback): where
/// tether gets keys or verdicts from.
pub(super) fn secure_url(raw: &str) -> Result<(), String> {
    let url = resource::parse(raw)?;
    let loopback = match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if url.scheme() == "https" || loopback {
        return Ok(());
    }
    Err(format!("{raw:?} must be https (plain http only to this machine)"))
}

/// The asymmetric JWS algorithm `name` spells (exactly, RFC 7518 §3.1), or `None`
/// for `none`, the HMAC family and anything unknown.
pub(super) fn algorithm(name: &str) -> Option<Algorithm> {
    Some(match name {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "PS256" => Algorithm::PS256,
        "PS384" => Algorithm::PS384,
        "PS512" => Algorithm::PS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        "EdDSA" => Algorithm::EdDSA,
        _ => return None,
    })
}
