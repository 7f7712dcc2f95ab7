//! The checks a token's claims go through, whether they came from a verified JWT
//! (RFC 7519, RFC 9068) or from an introspection answer (RFC 7662): issuer,
//! audience, expiry and not-before, and what the bearer is (subject, client,
//! scopes).

use serde_json::{Map, Value};

use super::{Rejection, Verified};

/// Clock skew tolerated on `exp` and `nbf`, in seconds.
pub(super) const LEEWAY: u64 = 60;

/// Whether a claim must be there (a JWT: RFC 9068 §2.2) or is checked only when it
/// is (an introspection answer: RFC 7662 §2.2 makes them all optional).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Presence {
    /// `iss`, `aud` and `exp` must be present.
    Required,
    /// Each is checked only if present.
    IfPresent,
}

/// What the claims must say.
#[derive(Clone, Debug)]
pub(super) struct Expectations {
    /// The issuer, compared exactly.
    pub(super) issuer: String,
    /// Every accepted `aud` value: the resource, with and without a trailing
    /// slash, and the configured extra audiences.
    pub(super) audiences: Vec<String>,
}

impl Expectations {
    /// The expectations for tokens of `issuer` meant for `resource` (or one of
    /// `extra`).
    pub(super) fn new(issuer: &str, resource: &str, extra: &[String]) -> Self {
        let mut audiences = vec![resource.to_owned()];
        match resource.strip_suffix('/') {
            Some(bare) if !bare.ends_with('/') => audiences.push(bare.to_owned()),
            Some(_) => {}
            None => audiences.push(format!("{resource}/")),
        }
        for aud in extra {
            if !audiences.contains(aud) {
                audiences.push(aud.clone());
            }
        }
        Expectations { issuer: issuer.to_owned(), audiences }
    }
}

/// Checks `claims` at `now` (unix seconds) and says what they grant.
pub(super) fn check(
    claims: &Map<String, Value>,
    expect: &Expectations,
    presence: Presence,
    now: u64,
) -> Result<Verified, Rejection> {
    let required = presence == Presence::Required;
    let expires_at = match claims.get("exp") {
        Some(v) => Some(numeric_date(v).ok_or_else(|| Rejection::invalid("malformed token"))?),
        None if required => return Err(Rejection::invalid("missing expiry")),
        None => None,
    };
    if expires_at.is_some_and(|exp| exp.saturating_add(LEEWAY) < now) {
        return Err(Rejection::invalid("expired"));
    }
    if let Some(v) = claims.get("nbf") {
        let nbf = numeric_date(v).ok_or_else(|| Rejection::invalid("malformed token"))?;
        if nbf > now.saturating_add(LEEWAY) {
            return Err(Rejection::invalid("not yet valid"));
        }
    }
    match claims.get("iss") {
        Some(Value::String(iss)) if *iss == expect.issuer => {}
        None if !required => {}
        _ => return Err(Rejection::invalid("unknown issuer")),
    }
    // The audience is required of introspection answers too: a token minted for
    // another resource must never pass here (MCP authorization, "Token Audience
    // Binding"), and without `aud` that cannot be told.
    match claims.get("aud") {
        Some(aud) if audience_matches(aud, &expect.audiences) => {}
        _ => return Err(Rejection::invalid("wrong audience")),
    }
    let text = |name: &str| claims.get(name).and_then(Value::as_str).map(str::to_owned);
    Ok(Verified {
        subject: text("sub"),
        client_id: text("client_id").or_else(|| text("azp")),
        scopes: scopes(claims),
        expires_at,
    })
}

/// A NumericDate (RFC 7519 §2): a non-negative number of seconds, possibly with a
/// fraction (dropped).
fn numeric_date(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_f64().filter(|f| f.is_finite() && *f >= 0.0).map(|f| f as u64))
}

/// Whether `aud` (a string, or an array of them: RFC 7519 §4.1.3) names one of
/// `accepted`.
fn audience_matches(aud: &Value, accepted: &[String]) -> bool {
    let is_accepted = |v: &Value| v.as_str().is_some_and(|a| accepted.iter().any(|x| x == a));
    match aud {
        Value::Array(values) => values.iter().any(is_accepted),
        v => is_accepted(v),
    }
}

/// The scopes granted: `scope`, a space-separated string (RFC 9068 §2.2.3, RFC 7662
/// §2.2), else `scp`, an array of strings or a space-separated string (as some
/// servers write it). Duplicates are dropped.
fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: &str| {
        if !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    };
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => s.split_whitespace().for_each(&mut add),
        (None, Some(Value::Array(values))) => {
            values.iter().filter_map(Value::as_str).flat_map(str::split_whitespace).for_each(&mut add)
        }
        _ => {}
    }
    out
}
