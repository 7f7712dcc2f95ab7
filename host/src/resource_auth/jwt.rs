//! JWT access tokens (RFC 7519, RFC 9068): the header screened before any key is
//! looked at, then the signature verified with `jsonwebtoken` (keys from the
//! JWKS). Claims are checked by [`super::claims`], not here.
//!
//! The header is read by hand first (RFC 8725): the algorithm must be on the
//! allow-list — never `none`, never HMAC (a public key used as an HMAC secret is
//! the classic confusion attack) — `typ`, if present, must say JWT or `at+jwt`,
//! and `crit` is refused (tether understands no extension). `jku`, `x5u` and `jwk`
//! are ignored: keys come only from the configured issuer.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::jwks::Key;
use super::settings::algorithm;
use super::Rejection;

/// What the header says, once screened.
#[derive(Clone, Debug)]
pub(super) struct Header {
    /// An accepted algorithm.
    pub(super) alg: Algorithm,
    /// The key it names, if any.
    pub(super) kid: Option<String>,
}

/// Reads and screens the header of the compact JWS `token`: three segments,
/// a JSON object header whose `alg` is in `accepted`, an acceptable `typ`, no
/// `crit`, a signature.
pub(super) fn screen(token: &str, accepted: &[Algorithm]) -> Result<Header, Rejection> {
    let malformed = || Rejection::invalid("malformed token");
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    if header.is_empty() || payload.is_empty() {
        return Err(malformed());
    }
    let bytes = URL_SAFE_NO_PAD.decode(header).map_err(|_| malformed())?;
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&bytes) else {
        return Err(malformed());
    };
    let alg = fields.get("alg").and_then(Value::as_str).ok_or_else(malformed)?;
    let alg =
        algorithm(alg).filter(|a| accepted.contains(a)).ok_or_else(|| Rejection::invalid("disallowed algorithm"))?;
    match fields.get("typ") {
        None => {}
        Some(Value::String(typ)) if typ_ok(typ) => {}
        Some(_) => return Err(Rejection::invalid("wrong token type")),
    }
    if fields.contains_key("crit") {
        return Err(Rejection::invalid("unsupported critical header"));
    }
    if signature.is_empty() {
        return Err(malformed());
    }
    let kid = match fields.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(malformed()),
    };
    Ok(Header { alg, kid })
}

/// Whether a `typ` header says this is a JWT or a JWT access token (RFC 9068
/// §2.1): `JWT` or `at+jwt`, in any case, with or without `application/`.
fn typ_ok(typ: &str) -> bool {
    let typ = typ.to_ascii_lowercase();
    let typ = typ.strip_prefix("application/").unwrap_or(&typ);
    typ == "jwt" || typ == "at+jwt"
}

/// Verifies `token`'s signature with each of `keys` in turn until one holds, and
/// returns its claims (unchecked). `alg` is the screened header's.
pub(super) fn verify(token: &str, alg: Algorithm, keys: &[&Key]) -> Result<Map<String, Value>, Rejection> {
    let mut validation = Validation::new(alg);
    // The claims are checked by `claims::check`, for JWTs and introspection alike.
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    for key in keys {
        match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation) {
            Ok(data) => return Ok(data.claims),
            Err(e) => match e.kind() {
                ErrorKind::InvalidToken | ErrorKind::Base64(_) | ErrorKind::Json(_) | ErrorKind::Utf8(_) => {
                    return Err(Rejection::invalid("malformed token"))
                }
                // A bad signature, or a key that cannot check it: try the next.
                _ => continue,
            },
        }
    }
    Err(Rejection::invalid("bad signature"))
}
