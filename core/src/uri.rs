//! URIs as a backend will understand them, for access rules that cannot be walked
//! around: `file:///srv/pub/../priv/secret.txt` is `file:///srv/priv/secret.txt` to
//! the server that reads it, so that is the URI a rule must see.
//!
//! [`normalize`] applies RFC 3986 §6.2.2 syntax-based normalisation, then goes
//! further wherever a backend might: the scheme and host are lower-cased; every
//! percent-encoding in the path is decoded (a server that maps the path to a file
//! decodes `%2F` and `%2E` too); backslashes count as slashes (Windows paths);
//! runs of slashes become one; dot segments are removed (§5.2.4). The query and
//! fragment are kept as they are. What cannot be read that way (no scheme, a
//! broken percent-encoding, decoded bytes that are not UTF-8, control
//! characters) is `None`, and a rule refuses it.
//!
//! The result is for matching only: the backend still receives the URI the client
//! sent, and the normalised form is what any decoding on its side comes to.

use alloc::string::String;
use alloc::vec::Vec;

/// The normalised form of `uri` for matching access rules, or `None` when it cannot
/// be normalised (and so must be refused).
pub fn normalize(uri: &str) -> Option<String> {
    let colon = uri.find(':')?;
    let scheme = &uri[..colon];
    let mut chars = scheme.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return None;
    }
    if uri.chars().any(char::is_control) {
        return None;
    }
    let rest = &uri[colon + 1..];
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (hier, tail) = rest.split_at(end);
    let mut out = String::with_capacity(uri.len());
    out.push_str(&scheme.to_ascii_lowercase());
    out.push(':');
    let path = match hier.strip_prefix("//") {
        Some(after) => {
            let path_start = after.find('/').unwrap_or(after.len());
            let (authority, path) = after.split_at(path_start);
            out.push_str("//");
            // The host's case is not significant; the user information's is.
            match authority.rfind('@') {
                Some(at) => {
                    out.push_str(&authority[..=at]);
                    out.push_str(&authority[at + 1..].to_ascii_lowercase());
                }
                None => out.push_str(&authority.to_ascii_lowercase()),
            }
            path
        }
        None => hier,
    };
    let decoded = percent_decode(path)?;
    if decoded.chars().any(char::is_control) {
        return None;
    }
    out.push_str(&remove_dot_segments(&collapse_slashes(&decoded.replace('\\', "/"))));
    out.push_str(tail);
    Some(out)
}

/// Decodes every `%XX` of `text`; `None` for a broken escape or bytes that are not
/// UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(String::from(text));
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: u8| char::from(b).to_digit(16);
            let high = hex(*bytes.get(i + 1)?)?;
            let low = hex(*bytes.get(i + 2)?)?;
            out.push((high * 16 + low) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `a//b///c` → `a/b/c`.
fn collapse_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

/// RFC 3986 §5.2.4: `.` and `..` segments resolved; `..` never climbs above the
/// root.
fn remove_dot_segments(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut segments: Vec<&str> = Vec::new();
    let parts: Vec<&str> = path.split('/').collect();
    let last = parts.len().saturating_sub(1);
    let mut trailing_slash = false;
    for (i, segment) in parts.iter().enumerate() {
        match *segment {
            "." => trailing_slash = i == last,
            ".." => {
                segments.pop();
                trailing_slash = i == last;
            }
            "" if i == 0 && absolute => {}
            s => {
                segments.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    if absolute {
        out.push('/');
    }
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(segment);
    }
    if trailing_slash && !out.ends_with('/') {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(uri: &str) -> String {
        normalize(uri).unwrap_or_else(|| panic!("{uri} did not normalise"))
    }

    #[test]
    fn paths_mean_what_a_server_will_read() {
        assert_eq!(n("file:///srv/pub/../priv/secret.txt"), "file:///srv/priv/secret.txt");
        assert_eq!(n("file:///srv//priv/x"), "file:///srv/priv/x");
        assert_eq!(n("file:///srv/./priv/x"), "file:///srv/priv/x");
        assert_eq!(n("file:///x/../srv/priv/x"), "file:///srv/priv/x");
        assert_eq!(n("file:///srv/pub/%2e%2e/priv/x"), "file:///srv/priv/x");
        assert_eq!(n("file:///srv/pub/..%2Fpriv/x"), "file:///srv/priv/x");
        assert_eq!(n("file:///srv/pub/..\\priv\\x"), "file:///srv/priv/x");
        assert_eq!(n("file:///../../etc/passwd"), "file:///etc/passwd", "never above the root");
        assert_eq!(n("file:///srv/pub/"), "file:///srv/pub/");
        assert_eq!(n("file:///srv/pub/a/.."), "file:///srv/pub/");
        assert_eq!(n("file:///srv/pub/a%20b.txt"), "file:///srv/pub/a b.txt");
    }

    #[test]
    fn scheme_and_host_lose_their_case_the_rest_keeps_it() {
        assert_eq!(n("FILE:///Srv/X"), "file:///Srv/X");
        assert_eq!(n("HTTPS://User@EXAMPLE.com/A/../B?Q=1#F"), "https://User@example.com/B?Q=1#F");
        assert_eq!(n("ui://Widget/../Panel"), "ui://widget/Panel");
        assert_eq!(n("urn:x:y"), "urn:x:y");
        assert_eq!(n("memo://insights"), "memo://insights");
    }

    #[test]
    fn what_cannot_be_read_is_refused() {
        for uri in [
            "no scheme",
            "/srv/pub/x",
            "1x://a",
            "file:///srv/%zz",
            "file:///srv/%2",
            "file:///srv/%ff%fe",
            "file:///srv/%00x",
            "file:///srv/a\u{7}b",
            "",
        ] {
            assert_eq!(normalize(uri), None, "{uri:?}");
        }
    }
}
