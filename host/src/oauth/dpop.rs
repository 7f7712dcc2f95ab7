//! DPoP (RFC 9449): tokens bound to a key tether holds, so a stolen token is
//! useless without the key. Used when a backend's authorization server lists
//! `ES256` in `dpop_signing_alg_values_supported`.
//!
//! Each backend's credential gets its own P-256 key, made at its first token
//! request and stored with the token (a DPoP-bound refresh token only works with
//! the key it was bound to). Every token request and every request to the
//! backend carries a fresh proof: a JWT signed by the key, naming the method and
//! URL (and, toward the backend, the token's hash), with a new `jti`. A server
//! that wants a nonce says so with `DPoP-Nonce`; the latest one is put in the
//! following proofs.

use std::sync::Mutex;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::digest::{digest, SHA256};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::json;

use super::pkce;
use super::secret::Secret;

/// The one algorithm tether signs proofs with.
pub(super) const ALG: &str = "ES256";

/// A backend's DPoP key and the nonces its servers asked for.
pub(crate) struct DpopKey {
    pair: EcdsaKeyPair,
    /// The PKCS#8 document, base64url, as stored with the token.
    stored: Secret,
    /// The public key as a JWK (`kty`, `crv`, `x`, `y`, in the order RFC 7638
    /// hashes them).
    jwk: serde_json::Value,
    rng: SystemRandom,
    /// The latest nonce from the authorization server, and from the backend.
    as_nonce: Mutex<Option<String>>,
    rs_nonce: Mutex<Option<String>>,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DpopKey({})", self.thumbprint())
    }
}

impl DpopKey {
    /// A new key.
    pub(crate) fn generate() -> Result<DpopKey, String> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| "cannot generate a DPoP key".to_owned())?;
        DpopKey::from_stored(&Secret::new(URL_SAFE_NO_PAD.encode(pkcs8.as_ref())))
    }

    /// The key stored with a token.
    pub(crate) fn from_stored(stored: &Secret) -> Result<DpopKey, String> {
        let der = URL_SAFE_NO_PAD.decode(stored.expose()).map_err(|_| "the stored DPoP key is not base64url")?;
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng)
            .map_err(|_| "the stored DPoP key is not a P-256 key")?;
        // An uncompressed point: 0x04, then x and y, 32 bytes each.
        let point = pair.public_key().as_ref();
        let (x, y) = point[1..].split_at(32);
        let jwk = json!({"crv": "P-256", "kty": "EC", "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y)});
        Ok(DpopKey { pair, stored: stored.clone(), jwk, rng, as_nonce: Mutex::new(None), rs_nonce: Mutex::new(None) })
    }

    /// The form stored with the token.
    pub(crate) fn stored(&self) -> &Secret {
        &self.stored
    }

    /// The JWK thumbprint (RFC 7638), as a token's `cnf.jkt` names the key.
    pub(crate) fn thumbprint(&self) -> String {
        URL_SAFE_NO_PAD.encode(digest(&SHA256, self.jwk.to_string().as_bytes()))
    }

    /// A proof for a token request to `endpoint`, with the authorization
    /// server's nonce if it gave one.
    pub(crate) fn token_request_proof(&self, endpoint: &str, now: u64) -> Result<String, String> {
        let nonce = self.as_nonce.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.proof("POST", endpoint, None, nonce.as_deref(), now)
    }

    /// A proof for a `method` request to the backend at `url` carrying `token`.
    pub(crate) fn resource_proof(&self, method: &str, url: &str, token: &str, now: u64) -> Result<String, String> {
        let nonce = self.rs_nonce.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let ath = URL_SAFE_NO_PAD.encode(digest(&SHA256, token.as_bytes()));
        self.proof(method, url, Some(&ath), nonce.as_deref(), now)
    }

    /// The authorization server asked for `nonce`.
    pub(crate) fn as_nonce(&self, nonce: &str) {
        *self.as_nonce.lock().unwrap_or_else(|e| e.into_inner()) = Some(nonce.to_owned());
    }

    /// The backend asked for `nonce`; whether it is new.
    pub(crate) fn rs_nonce(&self, nonce: &str) -> bool {
        let mut held = self.rs_nonce.lock().unwrap_or_else(|e| e.into_inner());
        let new = held.as_deref() != Some(nonce);
        *held = Some(nonce.to_owned());
        new
    }

    fn proof(&self, htm: &str, url: &str, ath: Option<&str>, nonce: Option<&str>, now: u64) -> Result<String, String> {
        let header = json!({"typ": "dpop+jwt", "alg": ALG, "jwk": self.jwk});
        let mut claims = json!({"jti": pkce::random_string(16), "htm": htm, "htu": htu(url), "iat": now});
        if let Some(ath) = ath {
            claims["ath"] = json!(ath);
        }
        if let Some(nonce) = nonce {
            claims["nonce"] = json!(nonce);
        }
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = self.pair.sign(&self.rng, input.as_bytes()).map_err(|_| "signing a DPoP proof failed")?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref())))
    }
}

/// The `htu` of a proof: the URL without its query and fragment (RFC 9449 §4.2).
fn htu(url: &str) -> &str {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    &url[..end]
}

/// Whether an authorization server's metadata lets tether bind tokens with DPoP.
pub(super) fn supported(algs: Option<&[String]>) -> bool {
    algs.is_some_and(|algs| algs.iter().any(|a| a == ALG))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

    fn parts(jwt: &str) -> (serde_json::Value, serde_json::Value, Vec<u8>, String) {
        let mut it = jwt.split('.');
        let (h, c, s) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let json = |p: &str| serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).unwrap()).unwrap();
        (json(h), json(c), URL_SAFE_NO_PAD.decode(s).unwrap(), format!("{h}.{c}"))
    }

    #[test]
    fn proofs_are_signed_fresh_and_name_what_they_are_for() {
        let key = DpopKey::generate().unwrap();
        let again = DpopKey::from_stored(key.stored()).unwrap();
        assert_eq!(key.thumbprint(), again.thumbprint(), "the stored key is the same key");
        let first = key.resource_proof("POST", "https://mcp.example/mcp?x=1#f", "tok", 1_000).unwrap();
        let (header, claims, signature, input) = parts(&first);
        assert_eq!(header["typ"], "dpop+jwt");
        assert_eq!(header["alg"], "ES256");
        assert!(header["jwk"].get("d").is_none(), "no private part in the header");
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], "https://mcp.example/mcp");
        assert_eq!(claims["iat"], 1_000);
        assert_eq!(claims["ath"], URL_SAFE_NO_PAD.encode(digest(&SHA256, b"tok")));
        assert!(claims.get("nonce").is_none());
        let public = [
            &[4u8][..],
            &URL_SAFE_NO_PAD.decode(header["jwk"]["x"].as_str().unwrap()).unwrap()[..],
            &URL_SAFE_NO_PAD.decode(header["jwk"]["y"].as_str().unwrap()).unwrap()[..],
        ]
        .concat();
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, public).verify(input.as_bytes(), &signature).unwrap();
        // A fresh jti every time; nonces once asked for.
        assert!(key.rs_nonce("n1"));
        assert!(!key.rs_nonce("n1"));
        let second = key.resource_proof("GET", "https://mcp.example/mcp", "tok", 1_001).unwrap();
        let (_, claims2, _, _) = parts(&second);
        assert_ne!(claims["jti"], claims2["jti"]);
        assert_eq!(claims2["nonce"], "n1");
        key.as_nonce("a1");
        let (_, token_claims, _, _) = parts(&key.token_request_proof("https://as.example/token", 5).unwrap());
        assert_eq!((token_claims["nonce"].as_str(), token_claims.get("ath")), (Some("a1"), None));
        // RFC 7638's example key has this thumbprint.
        let jwk = json!({"crv":"P-256","kty":"EC","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"});
        assert_eq!(
            jwk.to_string(),
            r#"{"crv":"P-256","kty":"EC","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}"#,
            "members in lexicographic order, no spaces"
        );
    }
}
