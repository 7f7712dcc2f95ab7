//! A JSON Web Key Set (RFC 7517 §5) read into verification keys, and the choice
//! of the keys a token may have been signed with.
//!
//! Keys tether cannot use are skipped, not fatal (a set may hold encryption keys,
//! keys of other types, algorithms this crate does not know): `use` other than
//! `sig`, `key_ops` without `verify`, symmetric (`oct`) keys, curves other than
//! P-256, P-384 and Ed25519, an `alg` that is not an accepted asymmetric one.

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::settings::algorithm;

/// The most keys a token without `kid` is tried against, so that a large set
/// cannot make each forged token cost many signature checks.
const MAX_CANDIDATES: usize = 8;

/// What a key is, as far as which algorithms may use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Kind {
    /// Whether a key of this kind can verify `alg` signatures.
    fn fits(self, alg: Algorithm) -> bool {
        use Algorithm::*;
        match self {
            Kind::Rsa => matches!(alg, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
            Kind::P256 => alg == ES256,
            Kind::P384 => alg == ES384,
            Kind::Ed25519 => alg == EdDSA,
        }
    }
}

/// One usable verification key of the set.
pub(super) struct Key {
    /// Its `kid`, if it has one.
    kid: Option<String>,
    /// Its `alg`, if it names one: then only that algorithm may use it.
    alg: Option<Algorithm>,
    kind: Kind,
    /// The key as `jsonwebtoken` verifies with it.
    pub(super) decoding: DecodingKey,
}

impl Key {
    /// The key a JWK describes, or `None` when tether cannot or must not verify
    /// signatures with it.
    fn from_jwk(value: &Value) -> Option<Key> {
        let obj = value.as_object()?;
        if obj.get("use").is_some_and(|u| u != "sig") {
            return None;
        }
        if let Some(ops) = obj.get("key_ops") {
            if !ops.as_array()?.iter().any(|op| op == "verify") {
                return None;
            }
        }
        let alg = match obj.get("alg") {
            Some(name) => Some(algorithm(name.as_str()?)?),
            None => None,
        };
        let kid = match obj.get("kid") {
            Some(kid) => Some(kid.as_str()?.to_owned()),
            None => None,
        };
        let jwk: Jwk = serde_json::from_value(value.clone()).ok()?;
        let kind = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Kind::Rsa,
            AlgorithmParameters::EllipticCurve(p) => match p.curve {
                EllipticCurve::P256 => Kind::P256,
                EllipticCurve::P384 => Kind::P384,
                _ => return None,
            },
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => Kind::Ed25519,
            // `oct` keys are shared secrets: never accepted from a key set.
            _ => return None,
        };
        let decoding = DecodingKey::from_jwk(&jwk).ok()?;
        Some(Key { kid, alg, kind, decoding })
    }

    /// Whether this key may verify an `alg` signature: its type fits, and its own
    /// `alg`, if any, is that one.
    fn fits(&self, alg: Algorithm) -> bool {
        self.kind.fits(alg) && !matches!(self.alg, Some(a) if a != alg)
    }
}

/// Which keys may have signed a token.
pub(super) enum Lookup<'a> {
    /// These (at least one).
    Found(Vec<&'a Key>),
    /// None: the set has no key of that `kid` (or, for a token without `kid`, no
    /// key that fits its algorithm). A newer set may have it.
    Unknown,
    /// The set has keys of that `kid`, but none fits the token's algorithm.
    Unfit,
}

/// The usable keys of a JWKS.
pub(super) struct KeySet {
    keys: Vec<Key>,
}

impl KeySet {
    /// Reads a JWKS document. An object without a `keys` array is an error; a set
    /// with no usable key is not (every token is then signed by an unknown key).
    pub(super) fn parse(doc: &Value) -> Result<KeySet, String> {
        let keys = doc.get("keys").and_then(Value::as_array).ok_or("the JWKS has no \"keys\" array")?;
        Ok(KeySet { keys: keys.iter().filter_map(Key::from_jwk).collect() })
    }

    /// How many usable keys the set holds.
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The keys a token whose header says `kid` and `alg` may have been signed
    /// with: those of that `kid`, or, without one, every key that fits `alg`.
    pub(super) fn lookup(&self, kid: Option<&str>, alg: Algorithm) -> Lookup<'_> {
        let named: Vec<&Key> = match kid {
            Some(kid) => self.keys.iter().filter(|k| k.kid.as_deref() == Some(kid)).collect(),
            None => self.keys.iter().collect(),
        };
        let fit: Vec<&Key> = named.iter().copied().filter(|k| k.fits(alg)).take(MAX_CANDIDATES).collect();
        match (named.is_empty(), fit.is_empty(), kid.is_some()) {
            (_, false, _) => Lookup::Found(fit),
            (false, true, true) => Lookup::Unfit,
            _ => Lookup::Unknown,
        }
    }
}
