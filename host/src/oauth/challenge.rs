//! Reading a backend's refusal: the `WWW-Authenticate` header of a 401 or 403.
//!
//! The header is a list of challenges (RFC 9110 §11.6.1), each a scheme followed
//! either by a token68 or by comma-separated `name=value` parameters whose values
//! are tokens or quoted strings with backslash escapes. Commas separate both the
//! challenges and the parameters of one challenge, so a name followed by `=` is a
//! parameter and anything else starts the next challenge. Schemes and parameter
//! names are case-insensitive. Only the `Bearer` challenge (RFC 6750) matters to
//! tether: its `error`, `error_description`, `scope` and `resource_metadata` (RFC
//! 9728 §5.1), and whether a `DPoP` challenge (RFC 9449 §7.1) stands beside it.
//!
//! The parse result is `tether_core::credential::Challenge`, which the HTTP
//! backend attaches to the 401 or 403 it reports to the engine.

use tether_core::credential::Challenge;

/// The first `Bearer` challenge in a `WWW-Authenticate` value (several header
/// lines may be joined with `, `), or `None` when there is none. A server that
/// offers only `DPoP` (RFC 9449) is read the same way, so its `resource_metadata`
/// still leads to discovery. Malformed input yields what could be read before the
/// damage, never a panic.
pub fn parse(header: &str) -> Option<Challenge> {
    let all = challenges(header);
    let scheme = |name: &str| all.iter().find(|c| c.scheme.eq_ignore_ascii_case(name));
    let chosen = scheme("bearer").or_else(|| scheme("dpop"))?;
    let param = |name: &str| chosen.params.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    Some(Challenge {
        error: param("error"),
        scope: param("scope"),
        resource_metadata: param("resource_metadata"),
        description: param("error_description").map(|d| super::transport::printable(&d)),
        dpop: scheme("dpop").is_some(),
    })
}

/// One challenge: its scheme as written and its parameters, names lower-cased, in
/// order (a repeated name keeps every occurrence; readers take the first).
#[derive(Debug, PartialEq, Eq)]
struct AuthChallenge {
    scheme: String,
    params: Vec<(String, String)>,
}

fn challenges(header: &str) -> Vec<AuthChallenge> {
    let mut c = Cursor { s: header.as_bytes(), i: 0 };
    let mut out = Vec::new();
    loop {
        c.skip_while(|b| b == b',' || is_ws(b));
        if c.eof() {
            break;
        }
        let scheme = c.token();
        if scheme.is_empty() {
            break; // not a challenge: give up on the rest
        }
        let mut challenge = AuthChallenge { scheme, params: Vec::new() };
        let spaced = c.skip_while(is_ws) > 0;
        if spaced && !c.eof() && c.peek() != Some(b',') {
            let start = c.i;
            match c.auth_param() {
                Some(p) => challenge.params.push(p),
                None => {
                    c.i = start;
                    c.token68();
                }
            }
        }
        // Further parameters follow commas; a comma followed by anything but
        // `name=` begins the next challenge.
        loop {
            let save = c.i;
            c.skip_while(is_ws);
            if c.peek() != Some(b',') {
                c.i = save;
                break;
            }
            c.skip_while(|b| b == b',' || is_ws(b));
            let before = c.i;
            match c.auth_param() {
                Some(p) => challenge.params.push(p),
                None => {
                    c.i = before;
                    break;
                }
            }
        }
        out.push(challenge);
    }
    out
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn eof(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_while(&mut self, f: impl Fn(u8) -> bool) -> usize {
        let start = self.i;
        while self.peek().is_some_and(&f) {
            self.i += 1;
        }
        self.i - start
    }

    fn token(&mut self) -> String {
        let start = self.i;
        self.skip_while(is_tchar);
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    fn token68(&mut self) {
        self.skip_while(is_token68);
        self.skip_while(|b| b == b'=');
        self.skip_while(is_ws);
    }

    /// `name BWS "=" BWS (token / quoted-string)`, or `None` (position unspecified)
    /// when what follows is not a parameter.
    fn auth_param(&mut self) -> Option<(String, String)> {
        let name = self.token();
        if name.is_empty() {
            return None;
        }
        self.skip_while(is_ws);
        if self.peek() != Some(b'=') {
            return None;
        }
        self.i += 1;
        self.skip_while(is_ws);
        let value = if self.peek() == Some(b'"') { self.quoted_string() } else { self.token() };
        if value.is_empty() && self.s.get(self.i - 1) != Some(&b'"') {
            return None; // `abc=` is a token68 with padding, not a parameter
        }
        Some((name.to_ascii_lowercase(), value))
    }

    /// A quoted string after its opening quote is at the cursor; an unterminated
    /// one runs to the end of the header.
    fn quoted_string(&mut self) -> String {
        self.i += 1;
        let mut value = Vec::new();
        while let Some(b) = self.peek() {
            self.i += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    if let Some(next) = self.peek() {
                        value.push(next);
                        self.i += 1;
                    }
                }
                _ => value.push(b),
            }
        }
        String::from_utf8_lossy(&value).into_owned()
    }
}

fn is_ws(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token68(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(error: Option<&str>, scope: Option<&str>, rm: Option<&str>) -> Option<Challenge> {
        Some(Challenge {
            error: error.map(Into::into),
            scope: scope.map(Into::into),
            resource_metadata: rm.map(Into::into),
            ..Challenge::default()
        })
    }

    /// `challenge` with what else the header said.
    fn with(challenge: Option<Challenge>, description: Option<&str>, dpop: bool) -> Option<Challenge> {
        challenge.map(|c| Challenge { description: description.map(Into::into), dpop, ..c })
    }

    #[test]
    fn reads_the_mcp_challenges() {
        assert_eq!(
            parse(r#"Bearer resource_metadata="http://127.0.0.1:5/.well-known/oauth-protected-resource/mcp""#),
            bearer(None, None, Some("http://127.0.0.1:5/.well-known/oauth-protected-resource/mcp"))
        );
        assert_eq!(
            parse(
                r#"Bearer error="insufficient_scope", scope="mcp:write", resource_metadata="https://a/b", error_description="Scope upgrade, please""#
            ),
            with(
                bearer(Some("insufficient_scope"), Some("mcp:write"), Some("https://a/b")),
                Some("Scope upgrade, please"),
                false
            )
        );
        assert_eq!(
            parse(r#"Bearer scope="mcp:basic mcp:read", resource_metadata="https://a/b""#),
            bearer(None, Some("mcp:basic mcp:read"), Some("https://a/b"))
        );
    }

    #[test]
    fn scheme_and_names_are_case_insensitive_and_tokens_need_no_quotes() {
        assert_eq!(parse("bEaReR ERROR=invalid_token, Scope=read"), bearer(Some("invalid_token"), Some("read"), None));
        assert_eq!(
            parse("Bearer error = invalid_token ,scope = \"a\""),
            bearer(Some("invalid_token"), Some("a"), None)
        );
    }

    #[test]
    fn quoted_strings_keep_commas_and_unescape() {
        assert_eq!(
            parse(r#"Bearer realm="a, Basic b=c", scope="x \"y\" \\z""#),
            bearer(None, Some(r#"x "y" \z"#), None)
        );
    }

    #[test]
    fn several_challenges_in_one_header() {
        assert_eq!(parse(r#"Basic realm="x", Bearer scope="s""#), bearer(None, Some("s"), None));
        assert_eq!(
            parse(r#"DPoP algs="ES256 PS256", Bearer error="invalid_token""#),
            with(bearer(Some("invalid_token"), None, None), None, true)
        );
        assert_eq!(
            parse(r#"DPoP algs="ES256", resource_metadata="https://a/b""#),
            with(bearer(None, None, Some("https://a/b")), None, true)
        );
        assert_eq!(parse(r#"Negotiate abc+/==, Bearer scope="s", Basic realm="r""#), bearer(None, Some("s"), None));
        assert_eq!(parse("Newauth realm=\"apps\", type=1, title=\"Login\", Basic realm=\"simple\""), None);
        // The first Bearer wins; a repeated parameter keeps its first value.
        assert_eq!(parse(r#"Bearer scope="a", scope="b", Bearer scope="c""#), bearer(None, Some("a"), None));
        let all = challenges(r#"Newauth realm="apps", type=1, title="Login, please", Basic realm="simple""#);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].params.len(), 3);
        assert_eq!(all[1].scheme, "Basic");
    }

    #[test]
    fn descriptions_are_kept_short_and_printable() {
        let long = format!("Bearer error=\"invalid_token\", error_description=\"bad\\\u{7}{}\"", "x".repeat(500));
        let c = parse(&long).unwrap();
        assert_eq!(c.description.as_deref().map(str::len), Some(200));
        assert!(c.description.unwrap().starts_with("badx"));
    }

    #[test]
    fn a_bare_bearer_is_a_challenge_without_parameters() {
        assert_eq!(parse("Bearer"), Some(Challenge::default()));
        assert_eq!(parse("Basic, Bearer"), Some(Challenge::default()));
        assert_eq!(parse("Basic realm=\"x\""), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn garbage_never_panics() {
        for h in [
            "=",
            ",,,",
            "Bearer \"",
            "Bearer scope=\"unterminated",
            "Bearer scope=",
            "Bearer scope=,",
            "Bearer ==== , =",
            "Bearer \\",
            "\u{e9}\u{e9} Bearer",
            "Bearer scope=\"\u{e9}\"",
            "Bearer error=\"x\" trailing junk, Bearer",
        ] {
            let _ = parse(h);
        }
        assert_eq!(parse("Bearer scope=\"unterminated"), bearer(None, Some("unterminated"), None));
        assert_eq!(parse("Bearer scope=\"\""), bearer(None, Some(""), None));
    }
}
