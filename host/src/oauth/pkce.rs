//! Proof Key for Code Exchange (RFC 7636) and the other unguessable values of a
//! login: the code verifier and its S256 challenge, and `state`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use super::secret::Secret;

/// `bytes` random bytes from the operating system, base64url without padding (so
/// only unreserved URL characters: `A-Z a-z 0-9 - _`).
///
/// # Panics
/// If the operating system has no random number generator to give: nothing safe
/// can be done without one.
pub(crate) fn random_string(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::getrandom(&mut buf).expect("the operating system's random number generator failed");
    URL_SAFE_NO_PAD.encode(buf)
}

/// A fresh `state` for one authorization request (128 bits).
pub(super) fn state() -> String {
    random_string(16)
}

/// The verifier tether keeps and the challenge it sends.
#[derive(Debug)]
pub(super) struct Pkce {
    /// Sent only to the token endpoint, with the code.
    pub verifier: Secret,
    /// `BASE64URL(SHA256(verifier))`, sent in the authorization request.
    pub challenge: String,
}

impl Pkce {
    /// A fresh pair: a 64-character verifier (48 random bytes, within RFC 7636's
    /// 43..=128) and its S256 challenge.
    pub(super) fn new() -> Self {
        let verifier = random_string(48);
        let challenge = s256(&verifier);
        Pkce { verifier: Secret::new(verifier), challenge }
    }
}

impl Default for Pkce {
    fn default() -> Self {
        Pkce::new()
    }
}

/// The S256 transformation of a verifier.
pub(super) fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7636_appendix_b() {
        assert_eq!(s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    }

    #[test]
    fn verifiers_are_long_unreserved_and_fresh() {
        let a = Pkce::new();
        let b = Pkce::new();
        let v = a.verifier.expose();
        assert!((43..=128).contains(&v.len()));
        assert!(v.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_ne!(v, b.verifier.expose());
        assert_eq!(a.challenge, s256(v));
        assert_ne!(state(), state());
        assert_eq!(state().len(), 22);
    }
}
