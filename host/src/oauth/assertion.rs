//! Client authentication with a signed JWT (`private_key_jwt`, RFC 7523 §2.2 and
//! OpenID Connect Core §9): for machine clients that hold a private key instead of
//! a shared secret (the `client_credentials` grant of the MCP extension).
//!
//! Keys come as PEM: PKCS#8 (`PRIVATE KEY`) for EC P-256 (`ES256`), P-384
//! (`ES384`), Ed25519 (`EdDSA`) and RSA (`RS256/384/512`, `PS256/384/512`), or
//! PKCS#1 (`RSA PRIVATE KEY`). The algorithm is inferred from the key unless the
//! settings name one. Signing uses `ring`, already in the tree for TLS.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, RsaKeyPair};

use super::pkce;

/// The `client_assertion_type` of a JWT assertion.
pub(super) const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How long an assertion is valid: long enough for clock skew, short enough that a
/// captured one is soon useless.
const LIFETIME_SECS: u64 = 300;

/// A private key ready to sign client assertions. Its `Debug` names the algorithm
/// only.
pub(super) struct SigningKey {
    alg: &'static str,
    key: Key,
    rng: SystemRandom,
}

enum Key {
    Ecdsa(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
    Rsa(RsaKeyPair, &'static dyn signature::RsaEncoding),
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.alg)
    }
}

impl SigningKey {
    /// Reads a PEM private key; `alg` (a JWS name) picks the algorithm, else it is
    /// inferred from the key. Errors say what is wrong without quoting the key.
    pub(super) fn from_pem(pem: &str, alg: Option<&str>) -> Result<Self, String> {
        let (label, der) = pem_der(pem)?;
        let rng = SystemRandom::new();
        let pkcs1 = match label.as_str() {
            "PRIVATE KEY" => false,
            "RSA PRIVATE KEY" => true,
            "ENCRYPTED PRIVATE KEY" => return Err("encrypted private keys are not supported: decrypt it first".into()),
            "EC PRIVATE KEY" => {
                return Err("SEC1 EC keys are not supported: convert with `openssl pkcs8 -topk8 -nocrypt`".into())
            }
            other => return Err(format!("a PEM \"{other}\" is not a private key")),
        };
        let rsa = |encoding: &'static dyn signature::RsaEncoding| {
            let pair = if pkcs1 { RsaKeyPair::from_der(&der) } else { RsaKeyPair::from_pkcs8(&der) };
            pair.map(|k| Key::Rsa(k, encoding)).map_err(|e| format!("not a usable RSA key: {e}"))
        };
        let ecdsa = |alg: &'static signature::EcdsaSigningAlgorithm, curve: &str| {
            EcdsaKeyPair::from_pkcs8(alg, &der, &rng)
                .map(Key::Ecdsa)
                .map_err(|e| format!("not a usable {curve} key: {e}"))
        };
        let (alg, key) = match alg {
            Some("ES256") => ("ES256", ecdsa(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, "P-256")?),
            Some("ES384") => ("ES384", ecdsa(&signature::ECDSA_P384_SHA384_FIXED_SIGNING, "P-384")?),
            Some("EdDSA") => (
                "EdDSA",
                Key::Ed25519(
                    Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der)
                        .map_err(|e| format!("not a usable Ed25519 key: {e}"))?,
                ),
            ),
            Some("RS256") => ("RS256", rsa(&signature::RSA_PKCS1_SHA256)?),
            Some("RS384") => ("RS384", rsa(&signature::RSA_PKCS1_SHA384)?),
            Some("RS512") => ("RS512", rsa(&signature::RSA_PKCS1_SHA512)?),
            Some("PS256") => ("PS256", rsa(&signature::RSA_PSS_SHA256)?),
            Some("PS384") => ("PS384", rsa(&signature::RSA_PSS_SHA384)?),
            Some("PS512") => ("PS512", rsa(&signature::RSA_PSS_SHA512)?),
            Some(other) => return Err(format!("signing algorithm {other:?} is not supported")),
            None if pkcs1 => ("RS256", rsa(&signature::RSA_PKCS1_SHA256)?),
            None => {
                if let Ok(k) = ecdsa(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, "P-256") {
                    ("ES256", k)
                } else if let Ok(k) = ecdsa(&signature::ECDSA_P384_SHA384_FIXED_SIGNING, "P-384") {
                    ("ES384", k)
                } else if let Ok(k) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der) {
                    ("EdDSA", Key::Ed25519(k))
                } else if let Ok(k) = rsa(&signature::RSA_PKCS1_SHA256) {
                    ("RS256", k)
                } else {
                    return Err("the private key is none of P-256, P-384, Ed25519 or RSA (2048 bits or more)".into());
                }
            }
        };
        Ok(SigningKey { alg, key, rng })
    }

    /// The JWS algorithm it signs with.
    pub(super) fn alg(&self) -> &'static str {
        self.alg
    }

    /// A client assertion: `iss` and `sub` the client, `aud` the authorization
    /// server's issuer, valid for five minutes from `now` (unix seconds), with a
    /// random `jti`.
    pub(super) fn client_assertion(&self, client_id: &str, audience: &str, now: u64) -> Result<String, String> {
        let header = serde_json::json!({ "alg": self.alg, "typ": "JWT" });
        let claims = serde_json::json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + LIFETIME_SECS,
            "jti": pkce::random_string(16),
        });
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = self.sign(input.as_bytes())?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, String> {
        let failed = |_| "signing the client assertion failed".to_owned();
        match &self.key {
            Key::Ecdsa(k) => k.sign(&self.rng, message).map(|s| s.as_ref().to_vec()).map_err(failed),
            Key::Ed25519(k) => Ok(k.sign(message).as_ref().to_vec()),
            Key::Rsa(k, encoding) => {
                let mut out = vec![0; k.public().modulus_len()];
                k.sign(*encoding, &self.rng, message, &mut out).map_err(failed)?;
                Ok(out)
            }
        }
    }
}

/// The label and DER bytes of the first PEM block in `pem`.
fn pem_der(pem: &str) -> Result<(String, Vec<u8>), String> {
    let not_pem = || "the private key is not PEM text (-----BEGIN ...-----)".to_owned();
    let start = pem.find("-----BEGIN ").ok_or_else(not_pem)? + "-----BEGIN ".len();
    let rest = &pem[start..];
    let label_end = rest.find("-----").ok_or_else(not_pem)?;
    let label = rest[..label_end].to_owned();
    let body = &rest[label_end + 5..];
    let end = body.find("-----END ").ok_or_else(not_pem)?;
    let text: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
    if text.contains(':') {
        return Err("encrypted private keys are not supported: decrypt it first".into());
    }
    let der = STANDARD.decode(text).map_err(|_| "the private key's PEM body is not base64".to_owned())?;
    Ok((label, der))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::KeyPair;

    fn pem(label: &str, der: &[u8]) -> String {
        let b64 = STANDARD.encode(der);
        let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
    }

    /// The test RSA key as PEM (kept unarmoured on disk).
    fn rsa_pem() -> String {
        let body: String = include_str!("testdata/rsa-2048.pkcs8.b64").split_whitespace().collect();
        pem("PRIVATE KEY", &STANDARD.decode(body).unwrap())
    }

    fn parts(jwt: &str) -> (serde_json::Value, serde_json::Value, Vec<u8>, String) {
        let mut it = jwt.split('.');
        let (h, c, s) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        assert!(it.next().is_none());
        let json = |p: &str| serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).unwrap()).unwrap();
        (json(h), json(c), URL_SAFE_NO_PAD.decode(s).unwrap(), format!("{h}.{c}"))
    }

    #[test]
    fn es256_assertions_verify_and_carry_the_claims() {
        let rng = SystemRandom::new();
        let der = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der.as_ref(), &rng).unwrap();
        let key = SigningKey::from_pem(&pem("PRIVATE KEY", der.as_ref()), None).unwrap();
        assert_eq!(key.alg(), "ES256");
        assert_eq!(format!("{key:?}"), "SigningKey(ES256)");
        let jwt = key.client_assertion("cid", "https://as.example.com", 1000).unwrap();
        let (header, claims, sig, input) = parts(&jwt);
        assert_eq!(header["alg"], "ES256");
        assert_eq!(claims["iss"], "cid");
        assert_eq!(claims["sub"], "cid");
        assert_eq!(claims["aud"], "https://as.example.com");
        assert_eq!(claims["iat"], 1000);
        assert_eq!(claims["exp"], 1300);
        assert!(claims["jti"].as_str().unwrap().len() >= 16);
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, pair.public_key().as_ref())
            .verify(input.as_bytes(), &sig)
            .unwrap();
    }

    #[test]
    fn ed25519_and_rsa_keys() {
        let rng = SystemRandom::new();
        let der = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(der.as_ref()).unwrap();
        let key = SigningKey::from_pem(&pem("PRIVATE KEY", der.as_ref()), None).unwrap();
        assert_eq!(key.alg(), "EdDSA");
        let (_, _, sig, input) = parts(&key.client_assertion("c", "a", 1).unwrap());
        signature::UnparsedPublicKey::new(&signature::ED25519, pair.public_key().as_ref())
            .verify(input.as_bytes(), &sig)
            .unwrap();

        let rsa_pem = &rsa_pem();
        let (_, rsa_der) = pem_der(rsa_pem).unwrap();
        let public = RsaKeyPair::from_pkcs8(&rsa_der).unwrap().public().as_ref().to_vec();
        for (alg, verify) in [
            (None, &signature::RSA_PKCS1_2048_8192_SHA256 as &dyn signature::VerificationAlgorithm),
            (Some("PS256"), &signature::RSA_PSS_2048_8192_SHA256),
        ] {
            let key = SigningKey::from_pem(rsa_pem, alg).unwrap();
            let (header, _, sig, input) = parts(&key.client_assertion("c", "a", 1).unwrap());
            assert_eq!(header["alg"], alg.unwrap_or("RS256"));
            signature::UnparsedPublicKey::new(verify, &public).verify(input.as_bytes(), &sig).unwrap();
        }
    }

    #[test]
    fn bad_keys_are_explained_without_their_content() {
        assert!(SigningKey::from_pem("nope", None).unwrap_err().contains("not PEM"));
        let e = SigningKey::from_pem(&pem("EC PRIVATE KEY", b"secretbytes"), None).unwrap_err();
        assert!(e.contains("openssl pkcs8"));
        let e = SigningKey::from_pem(&pem("PRIVATE KEY", b"secretbytes"), None).unwrap_err();
        assert!(!e.contains("secretbytes") && !e.contains(&STANDARD.encode("secretbytes")));
        let e = SigningKey::from_pem(&rsa_pem(), Some("ES256")).unwrap_err();
        assert!(e.contains("P-256"), "{e}");
        assert!(SigningKey::from_pem(&rsa_pem(), Some("HS256")).is_err());
    }
}
