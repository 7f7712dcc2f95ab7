//! Checks on a request's headers, before anything about sessions is looked at:
//! DNS rebinding (Host, Origin), the bearer token, content negotiation and the
//! protocol version.

use std::net::SocketAddr;

use hyper::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN};
use subtle::ConstantTimeEq;

use super::ServerOptions;

/// JSON, for `Accept` and `Content-Type`.
pub(super) const JSON: &str = "application/json";
/// Server-Sent Events.
pub(super) const SSE: &str = "text/event-stream";

/// Why a request is refused before it is looked at.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// More than one `Host` header: which one names the target is anyone's guess
    /// (a proxy in front may have read the other), and RFC 9112 §3.2 says 400.
    RepeatedHost,
    /// `Host` names something else than this loopback server (DNS rebinding).
    Host,
    /// `Origin` is neither loopback nor allowed.
    Origin,
    /// The bearer token is missing or wrong.
    Unauthorized,
}

/// Host, then Origin, then the token: a 401 reveals nothing behind it.
pub(super) fn admit(options: &ServerOptions, headers: &HeaderMap) -> Result<(), Refusal> {
    if headers.get_all(HOST).iter().nth(1).is_some() {
        return Err(Refusal::RepeatedHost);
    }
    if !host_allowed(options.listen, &options.allowed_origins, headers.get(HOST)) {
        return Err(Refusal::Host);
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let ok = origin.to_str().is_ok_and(|o| origin_allowed(o, &options.allowed_origins));
        if !ok {
            return Err(Refusal::Origin);
        }
    }
    if let Some(token) = &options.auth_token {
        if !authorized(headers.get(AUTHORIZATION), token) {
            return Err(Refusal::Unauthorized);
        }
    }
    Ok(())
}

/// Loopback host names, as they appear in `Host` and in origins.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Splits `host[:port]` (IPv6 in brackets) and returns the host, lowercased.
fn host_of(authority: &str) -> Option<String> {
    let authority = authority.trim();
    let host = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let rest = &authority[end + 1..];
        if !(rest.is_empty() || rest.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        &authority[..=end]
    } else {
        match authority.split_once(':') {
            Some((host, port)) if is_port(port) => host,
            Some(_) => return None,
            None => authority,
        }
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

fn is_port(port: &str) -> bool {
    !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit())
}

/// The `scheme://authority` of an origin (or of an allowed-origin setting), lowercased,
/// without a trailing slash; `None` if it is not one.
fn parse_origin(origin: &str) -> Option<(String, String)> {
    let origin = origin.trim().trim_end_matches('/');
    let (scheme, authority) = origin.split_once("://")?;
    if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
        return None;
    }
    Some((scheme.to_ascii_lowercase(), authority.to_ascii_lowercase()))
}

/// When listening on a loopback address, `Host` must be a loopback name (any
/// port) or the host of an allowed origin. A request without `Host` (HTTP/1.0) is
/// not a browser's and passes.
fn host_allowed(listen: SocketAddr, allowed_origins: &[String], host: Option<&HeaderValue>) -> bool {
    if !listen.ip().is_loopback() {
        return true;
    }
    let Some(host) = host else { return true };
    let Some(host) = host.to_str().ok().and_then(host_of) else { return false };
    LOOPBACK_HOSTS.contains(&host.as_str())
        || allowed_origins
            .iter()
            .filter_map(|o| parse_origin(o))
            .any(|(_, authority)| host_of(&authority).is_some_and(|h| h == host))
}

/// Loopback origins (`http` or `https`, any port), or one of `allowed` exactly.
pub(super) fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let Some((scheme, authority)) = parse_origin(origin) else { return false };
    let loopback = matches!(scheme.as_str(), "http" | "https")
        && host_of(&authority).is_some_and(|h| LOOPBACK_HOSTS.contains(&h.as_str()));
    loopback || allowed.iter().filter_map(|a| parse_origin(a)).any(|(s, a)| s == scheme && a == authority)
}

/// `Authorization: Bearer <token>`, compared in constant time.
fn authorized(header: Option<&HeaderValue>, token: &str) -> bool {
    let Some(value) = header else { return false };
    let value = value.as_bytes();
    if value.len() < 7 || !value[..7].eq_ignore_ascii_case(b"bearer ") {
        return false;
    }
    let given = value[7..].trim_ascii();
    bool::from(given.ct_eq(token.as_bytes()))
}

/// Whether `Accept` admits `media` (`type/subtype`). No header admits anything;
/// wildcards count; `q=0` excludes.
pub(super) fn accepts(headers: &HeaderMap, media: &str) -> bool {
    let mut values = headers.get_all(ACCEPT).iter().peekable();
    if values.peek().is_none() {
        return true;
    }
    let (kind, _) = media.split_once('/').unwrap_or((media, ""));
    values.filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|range| {
        let mut parts = range.split(';');
        let range = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let refused = parts.any(|p| {
            let p = p.trim();
            p.len() > 2 && p[..2].eq_ignore_ascii_case("q=") && p[2..].trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
        });
        let matches = range == media || range == "*/*" || range.strip_suffix("/*").is_some_and(|k| k == kind);
        matches && !refused
    })
}

/// The media type of `Content-Type` (`type/subtype`, lowercased, parameters
/// such as `charset` left out); `None` without one or when it is not text.
pub(super) fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    Some(value.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
}

/// A `Content-Type` that is absent or JSON (`application/json`, `…+json`).
pub(super) fn json_body(headers: &HeaderMap) -> bool {
    if headers.get(CONTENT_TYPE).is_none() {
        return true;
    }
    let Some(media) = media_type(headers) else { return false };
    media == JSON || (media.starts_with("application/") && media.ends_with("+json"))
}

/// `MCP-Protocol-Version`, when present, must be a version tether speaks
/// (the stateless revision's too when `stateless` clients are served).
pub(super) fn version_supported(headers: &HeaderMap, stateless: bool) -> bool {
    use tether_core::protocol::{STATELESS_VERSIONS, SUPPORTED_VERSIONS};
    match headers.get("mcp-protocol-version").map(|v| v.to_str().map(str::trim)) {
        None => true,
        Some(Ok(v)) => SUPPORTED_VERSIONS.contains(&v) || (stateless && STATELESS_VERSIONS.contains(&v)),
        Some(Err(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn loopback_and_allowed_origins_pass() {
        let allowed = vec!["https://app.example.com/".to_string()];
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "https://127.0.0.1:8443",
            "http://[::1]:9",
            "HTTP://LOCALHOST",
        ] {
            assert!(origin_allowed(ok, &[]), "{ok}");
        }
        assert!(origin_allowed("https://app.example.com", &allowed));
        for bad in [
            "null",
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io",
            "http://localhost:80@evil.example",
            "ftp://localhost",
            "http://app.example.com",
            "https://app.example.com:444",
        ] {
            assert!(!origin_allowed(bad, &allowed), "{bad}");
        }
    }

    #[test]
    fn hosts_are_checked_only_on_loopback_listeners() {
        let loopback: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert!(host_allowed(loopback, &[], Some(&v("localhost:8080"))));
        assert!(host_allowed(loopback, &[], Some(&v("127.0.0.1"))));
        assert!(host_allowed(loopback, &[], Some(&v("[::1]:8080"))));
        assert!(host_allowed(loopback, &[], None));
        assert!(!host_allowed(loopback, &[], Some(&v("evil.example:8080"))));
        assert!(!host_allowed(loopback, &[], Some(&v("localhost:evil"))));
        assert!(host_allowed(loopback, &["http://mcp.internal:9000".into()], Some(&v("mcp.internal:8080"))));
        assert!(host_allowed(any, &[], Some(&v("evil.example"))));
    }

    #[test]
    fn two_host_headers_are_refused_on_every_listener() {
        let options = ServerOptions { listen: "0.0.0.0:8080".parse().unwrap(), ..ServerOptions::default() };
        let two = headers(&[("host", "localhost"), ("host", "evil.example")]);
        assert_eq!(admit(&options, &two), Err(Refusal::RepeatedHost));
        assert_eq!(admit(&options, &headers(&[("host", "localhost")])), Ok(()));
    }

    #[test]
    fn bearer_tokens_must_match_exactly() {
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert!(authorized(Some(&v("Bearer s3cret")), "s3cret"));
        assert!(authorized(Some(&v("bearer s3cret")), "s3cret"));
        assert!(!authorized(Some(&v("Bearer s3cre")), "s3cret"));
        assert!(!authorized(Some(&v("Bearer s3cretX")), "s3cret"));
        assert!(!authorized(Some(&v("Basic s3cret")), "s3cret"));
        assert!(!authorized(None, "s3cret"));
    }

    #[test]
    fn accept_negotiation() {
        let both = headers(&[("accept", "application/json, text/event-stream")]);
        assert!(accepts(&both, JSON) && accepts(&both, SSE));
        let json_only = headers(&[("accept", "application/json")]);
        assert!(accepts(&json_only, JSON) && !accepts(&json_only, SSE));
        let any = headers(&[("accept", "*/*")]);
        assert!(accepts(&any, JSON) && accepts(&any, SSE));
        let partial = headers(&[("accept", "application/*;q=0.5"), ("accept", "text/*")]);
        assert!(accepts(&partial, JSON) && accepts(&partial, SSE));
        let refused = headers(&[("accept", "application/json, text/event-stream;q=0")]);
        assert!(!accepts(&refused, SSE));
        assert!(accepts(&HeaderMap::new(), SSE));
    }

    #[test]
    fn media_types_match_exactly_with_parameters_left_out() {
        let media = |v: &str| media_type(&headers(&[("content-type", v)]));
        assert_eq!(media("application/json").as_deref(), Some(JSON));
        assert_eq!(media(" Application/JSON ; charset=utf-8").as_deref(), Some(JSON));
        assert_ne!(media("application/jsonx").as_deref(), Some(JSON));
        assert_ne!(media("application/json-patch+json").as_deref(), Some(JSON));
        assert_ne!(media("text/plain; application/json").as_deref(), Some(JSON));
        assert_eq!(media_type(&HeaderMap::new()), None);
        assert!(!json_body(&headers(&[("content-type", "application/jsonx")])));
        assert!(json_body(&headers(&[("content-type", "application/merge-patch+json")])));
    }

    #[test]
    fn content_types_and_versions() {
        assert!(json_body(&headers(&[("content-type", "application/json; charset=utf-8")])));
        assert!(json_body(&HeaderMap::new()));
        assert!(!json_body(&headers(&[("content-type", "text/plain")])));
        assert!(version_supported(&headers(&[("mcp-protocol-version", "2025-11-25")]), false));
        assert!(version_supported(&HeaderMap::new(), false));
        assert!(!version_supported(&headers(&[("mcp-protocol-version", "1999-01-01")]), true));
        assert!(!version_supported(&headers(&[("mcp-protocol-version", "2026-07-28")]), false));
        assert!(version_supported(&headers(&[("mcp-protocol-version", "2026-07-28")]), true));
    }
}
