//! Resource and issuer identifiers as URLs: their canonical form (RFC 8707 §2), their
//! origin, which resource identifiers cover a server URL, and where RFC 8414 and
//! RFC 9728 put the well-known documents of an identifier.
//!
//! Issuer identifiers are compared as strings, exactly as written (RFC 8414 §3.3,
//! RFC 9207 §2.4); only resource identifiers are normalised.

use url::Url;

/// A URL tether may talk OAuth with: `http` or `https`, with a host.
pub(crate) fn parse(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw.trim()).map_err(|e| format!("{raw:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("{raw:?} is not an http(s) URL"));
    }
    Ok(url)
}

/// The canonical URI of a resource (RFC 8707 §2, MCP "Canonical Server URI"):
/// lower-case scheme and host, no default port, no fragment, and no trailing slash
/// on an empty path (`https://mcp.example.com`, not `https://mcp.example.com/`).
/// Other paths and any query are kept as they are.
pub(crate) fn canonical(raw: &str) -> Result<String, String> {
    let url = parse(raw)?;
    let path = match url.path() {
        "/" => "",
        p => p,
    };
    let query = url.query().map(|q| format!("?{q}")).unwrap_or_default();
    Ok(format!("{}{path}{query}", origin(&url)))
}

/// `scheme://host[:port]`, the port only when it is not the scheme's default.
pub(crate) fn origin(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// The path of `url` with no trailing slash: `""` for a bare origin.
pub(crate) fn path_of(url: &Url) -> &str {
    url.path().trim_end_matches('/')
}

/// Whether the resource identifier a Protected Resource Metadata document declares
/// covers the server tether connects to: same origin, and the server's path equal to
/// the resource's path or below it at a segment boundary. So `https://a.example`
/// covers `https://a.example/mcp`, `https://a.example/mcp` covers itself, and
/// `https://evil.example/mcp` or `https://a.example/mc` cover nothing of
/// `https://a.example/mcp`.
pub(crate) fn covers(resource: &str, server: &str) -> bool {
    let (Ok(resource), Ok(server)) = (parse(resource), parse(server)) else {
        return false;
    };
    if resource.fragment().is_some() || origin(&resource) != origin(&server) {
        return false;
    }
    let (r, s) = (path_of(&resource), path_of(&server));
    r.is_empty() || s == r || (s.starts_with(r) && s.as_bytes()[r.len()] == b'/')
}

/// The well-known URL of `name` for an identifier, by path insertion (RFC 8414 §3.1,
/// RFC 9728 §3.1): `https://h/.well-known/<name>/<path>`, or
/// `https://h/.well-known/<name>` when the identifier has no path.
pub(crate) fn well_known(url: &Url, name: &str) -> String {
    format!("{}/.well-known/{name}{}", origin(url), path_of(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form() {
        assert_eq!(canonical("HTTPS://MCP.Example.com:443/").unwrap(), "https://mcp.example.com");
        assert_eq!(canonical("https://mcp.example.com/mcp#frag").unwrap(), "https://mcp.example.com/mcp");
        assert_eq!(canonical("http://127.0.0.1:8080/mcp?x=1").unwrap(), "http://127.0.0.1:8080/mcp?x=1");
        assert_eq!(canonical("http://[::1]:9/a/").unwrap(), "http://[::1]:9/a/");
        assert!(canonical("ftp://x/").is_err());
        assert!(canonical("not a url").is_err());
    }

    #[test]
    fn coverage_is_same_origin_and_a_path_prefix_at_a_segment() {
        let server = "http://127.0.0.1:5000/mcp";
        assert!(covers("http://127.0.0.1:5000/mcp", server));
        assert!(covers("http://127.0.0.1:5000", server));
        assert!(covers("http://127.0.0.1:5000/", server));
        assert!(covers("HTTP://127.0.0.1:5000/mcp/", server));
        assert!(!covers("https://evil.example.com/mcp", server));
        assert!(!covers("http://127.0.0.1:5001/mcp", server));
        assert!(!covers("http://127.0.0.1:5000/mc", server));
        assert!(!covers("http://127.0.0.1:5000/mcp/v2", server));
        assert!(!covers("http://127.0.0.1:5000/mcp#x", server));
        assert!(!covers("", server));
    }

    #[test]
    fn well_known_inserts_the_path() {
        let u = parse("https://as.example.com/tenant1/").unwrap();
        assert_eq!(
            well_known(&u, "oauth-authorization-server"),
            "https://as.example.com/.well-known/oauth-authorization-server/tenant1"
        );
        let u = parse("https://as.example.com").unwrap();
        assert_eq!(well_known(&u, "openid-configuration"), "https://as.example.com/.well-known/openid-configuration");
    }
}
