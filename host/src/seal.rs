//! Sealed tokens: state a client carries for tether (a session id, a
//! continuation) sealed with AES-256-GCM under a key ring, so that any replica
//! holding the ring can open what another sealed, and nobody else can read or
//! change it. The first key of the ring seals; every key opens, so keys rotate
//! without dropping what is out there (add the new key first, retire the old one
//! once its tokens have expired).
//!
//! A token is `base64url(version | key id | expiry | nonce | ciphertext+tag)`.
//! The key id and the expiry are readable (a replica refuses an unknown key or
//! an expired token without trying) and authenticated with the purpose, so a
//! token sealed for one purpose never opens as another. Nonces are random
//! (96 bits): a key seals far fewer than 2^32 tokens before it is rotated.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hmac;

/// The format of a token, its first byte.
const VERSION: u8 = 1;

/// Bytes before the ciphertext: version, key id, expiry (ms since the Unix
/// epoch, big-endian), nonce.
const HEADER: usize = 1 + 1 + 8 + NONCE_LEN;

/// The longest token opened, in characters: anything longer is refused unread.
pub const MAX_TOKEN_CHARS: usize = 4096;

/// Why a token did not open. Callers answer each the same way (a 404 for a
/// session id): the distinction is for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealError {
    /// Not a token of this format (or too long).
    Malformed,
    /// Sealed under a key the ring does not hold (retired, or another ring's).
    UnknownKey,
    /// Its time is up.
    Expired,
    /// Changed, forged, or sealed for another purpose.
    Tampered,
}

impl std::fmt::Display for SealError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SealError::Malformed => "not a sealed token",
            SealError::UnknownKey => "sealed under a key this replica does not hold",
            SealError::Expired => "expired",
            SealError::Tampered => "does not open: changed, forged or sealed for something else",
        })
    }
}

/// Bytes of a principal's digest in a bound token.
pub const PRINCIPAL_DIGEST: usize = 16;

/// A principal's keyed digest: who a bound token belongs to, unreadable and
/// unguessable without the key.
pub type PrincipalDigest = [u8; PRINCIPAL_DIGEST];

/// What a bound token held, opened.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened {
    /// The payload.
    pub payload: Vec<u8>,
    /// The digest of the principal it was sealed for, if any.
    pub sealed_for: Option<PrincipalDigest>,
    /// The digest of the principal presented now, under the same key.
    pub presented: Option<PrincipalDigest>,
}

/// One key of a ring: the AEAD key, and the key that digests principals
/// (derived from it, so one secret per id is all an operator handles).
struct RingKey {
    id: u8,
    aead: LessSafeKey,
    principal: hmac::Key,
    /// The engine's key for the `requestState` tokens it signs (derived).
    continuation: [u8; 32],
}

/// Keys by id; the first seals.
pub struct KeyRing {
    keys: Vec<RingKey>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material.
        let ids: Vec<u8> = self.keys.iter().map(|k| k.id).collect();
        f.debug_struct("KeyRing").field("key_ids", &ids).finish()
    }
}

impl KeyRing {
    /// A ring of `keys` (id, 32 bytes), the first sealing. Errors on an empty
    /// ring or an id given twice.
    pub fn new(keys: &[(u8, [u8; 32])]) -> Result<KeyRing, String> {
        if keys.is_empty() {
            return Err("the key ring is empty: give at least one key".into());
        }
        let mut ring = Vec::with_capacity(keys.len());
        for (id, bytes) in keys {
            if ring.iter().any(|k: &RingKey| k.id == *id) {
                return Err(format!("key id {id} is given twice"));
            }
            let key = UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| "a key must be 32 bytes".to_string())?;
            let derived = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, bytes), b"tether principal digest key v1");
            let principal = hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref());
            let root = hmac::Key::new(hmac::HMAC_SHA256, bytes);
            let continuation = hmac::sign(&root, b"tether continuation key v1").as_ref()[..32]
                .try_into()
                .expect("HMAC-SHA256 is 32 bytes");
            ring.push(RingKey { id: *id, aead: LessSafeKey::new(key), principal, continuation });
        }
        Ok(KeyRing { keys: ring })
    }

    /// A ring of one random key, for a process alone: its tokens open nowhere
    /// else and not after a restart. `None` when the system gives no randomness.
    pub fn random() -> Option<KeyRing> {
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key).ok()?;
        KeyRing::new(&[(0, key)]).ok()
    }

    /// `payload` sealed for `purpose` under the first key, opening until
    /// `expires_unix_ms`. `None` when the system gives no randomness for the nonce.
    pub fn seal(&self, purpose: &str, expires_unix_ms: u64, payload: &[u8]) -> Option<String> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::getrandom(&mut nonce).ok()?;
        Some(self.seal_with_nonce(purpose, expires_unix_ms, payload, nonce))
    }

    fn seal_with_nonce(&self, purpose: &str, expires_unix_ms: u64, payload: &[u8], nonce: [u8; NONCE_LEN]) -> String {
        let RingKey { id, aead: key, .. } = &self.keys[0];
        let mut token = Vec::with_capacity(HEADER + payload.len() + AES_256_GCM.tag_len());
        token.push(VERSION);
        token.push(*id);
        token.extend_from_slice(&expires_unix_ms.to_be_bytes());
        token.extend_from_slice(&nonce);
        let mut sealed = payload.to_vec();
        let aad = aad(purpose, &token[..1 + 1 + 8]);
        key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut sealed)
            .expect("AES-GCM seals any length tether gives it");
        token.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// The payload of `token`, sealed for `purpose`, if it opens at `now_unix_ms`.
    pub fn open(&self, purpose: &str, token: &str, now_unix_ms: u64) -> Result<Vec<u8>, SealError> {
        self.open_up_to(purpose, token, now_unix_ms, MAX_TOKEN_CHARS)
    }

    /// [`KeyRing::open`] for a token of up to `max_chars` (data at rest, such as
    /// a stored credential whose tokens are long JWTs, rather than an id a
    /// stranger presents).
    pub fn open_up_to(
        &self,
        purpose: &str,
        token: &str,
        now_unix_ms: u64,
        max_chars: usize,
    ) -> Result<Vec<u8>, SealError> {
        if token.len() > max_chars {
            return Err(SealError::Malformed);
        }
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| SealError::Malformed)?;
        if bytes.len() < HEADER + AES_256_GCM.tag_len() || bytes[0] != VERSION {
            return Err(SealError::Malformed);
        }
        let key = self.key(bytes[1]).map(|k| &k.aead).ok_or(SealError::UnknownKey)?;
        let expires = u64::from_be_bytes(bytes[2..10].try_into().expect("8 bytes"));
        if now_unix_ms >= expires {
            return Err(SealError::Expired);
        }
        let nonce: [u8; NONCE_LEN] = bytes[10..HEADER].try_into().expect("nonce length");
        let mut sealed = bytes[HEADER..].to_vec();
        let aad = aad(purpose, &bytes[..1 + 1 + 8]);
        let opened = key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut sealed)
            .map_err(|_| SealError::Tampered)?;
        Ok(opened.to_vec())
    }

    /// Keys for the engine's `requestState` tokens, by the same ids, the first
    /// signing (see `Gateway::set_continuation_keys`): derived from the ring,
    /// so one secret per id is all an operator handles.
    pub fn continuation_keys(&self) -> Vec<(u8, [u8; 32])> {
        self.keys.iter().map(|k| (k.id, k.continuation)).collect()
    }

    fn key(&self, id: u8) -> Option<&RingKey> {
        self.keys.iter().find(|k| k.id == id)
    }

    /// Like [`KeyRing::seal`], bound to `principal` (an identity, kept only as
    /// a keyed digest): [`KeyRing::open_bound`] says whether who presents it
    /// is who it was sealed for.
    pub fn seal_bound(
        &self,
        purpose: &str,
        expires_unix_ms: u64,
        principal: Option<&str>,
        payload: &[u8],
    ) -> Option<String> {
        let mut bound = Vec::with_capacity(1 + PRINCIPAL_DIGEST + payload.len());
        match principal {
            Some(principal) => {
                bound.push(1);
                bound.extend_from_slice(&digest(&self.keys[0], principal));
            }
            None => bound.push(0),
        }
        bound.extend_from_slice(payload);
        self.seal(purpose, expires_unix_ms, &bound)
    }

    /// Opens a token of [`KeyRing::seal_bound`], with the digest it was sealed
    /// for and that of `presented` (who presents it now), for the caller to compare.
    pub fn open_bound(
        &self,
        purpose: &str,
        token: &str,
        now_unix_ms: u64,
        presented: Option<&str>,
    ) -> Result<Opened, SealError> {
        let bound = self.open(purpose, token, now_unix_ms)?;
        let (sealed_for, payload) = match bound.split_first() {
            Some((0, rest)) => (None, rest),
            Some((1, rest)) if rest.len() >= PRINCIPAL_DIGEST => {
                let (d, rest) = rest.split_at(PRINCIPAL_DIGEST);
                (Some(d.try_into().expect("digest length")), rest)
            }
            _ => return Err(SealError::Malformed),
        };
        // The token opened, so its key id names a key of the ring.
        let key = URL_SAFE_NO_PAD.decode(token).ok().and_then(|b| self.key(*b.get(1)?)).ok_or(SealError::UnknownKey)?;
        let presented = presented.map(|p| digest(key, p));
        Ok(Opened { payload: payload.to_vec(), sealed_for, presented })
    }
}

/// `principal`'s digest under `key`.
fn digest(key: &RingKey, principal: &str) -> PrincipalDigest {
    let tag = hmac::sign(&key.principal, principal.as_bytes());
    tag.as_ref()[..PRINCIPAL_DIGEST].try_into().expect("HMAC-SHA256 is 32 bytes")
}

/// What is authenticated besides the payload: the purpose, then the readable header.
fn aad(purpose: &str, header: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(purpose.len() + 1 + header.len());
    aad.extend_from_slice(purpose.as_bytes());
    aad.push(0);
    aad.extend_from_slice(header);
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn ring(ids: &[u8]) -> KeyRing {
        let keys: Vec<(u8, [u8; 32])> = ids.iter().map(|id| (*id, [*id; 32])).collect();
        KeyRing::new(&keys).expect("a ring")
    }

    #[test]
    fn a_token_opens_for_its_purpose_until_it_expires_and_says_nothing_of_its_payload() {
        let r = ring(&[1]);
        let token = r.seal("session", NOW + 1_000, b"alice's session").expect("sealed");
        assert!(!token.contains("alice"));
        assert_eq!(r.open("session", &token, NOW).as_deref(), Ok(&b"alice's session"[..]));
        assert_eq!(r.open("session", &token, NOW + 1_000), Err(SealError::Expired));
        assert_eq!(r.open("continuation", &token, NOW), Err(SealError::Tampered), "another purpose");
        // Two seals of the same payload differ (fresh nonces).
        assert_ne!(token, r.seal("session", NOW + 1_000, b"alice's session").expect("sealed"));
    }

    #[test]
    fn a_changed_byte_anywhere_or_a_moved_expiry_does_not_open() {
        let r = ring(&[1]);
        let token = r.seal_with_nonce("session", NOW + 1_000, b"payload", [7; NONCE_LEN]);
        let bytes = URL_SAFE_NO_PAD.decode(&token).expect("base64url");
        for i in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[i] ^= 0x01;
            let changed = URL_SAFE_NO_PAD.encode(changed);
            let refused = r.open("session", &changed, NOW);
            assert!(refused.is_err(), "byte {i} changed and it still opened");
        }
        // The expiry pushed later is refused as tampered, not honoured.
        let mut later = bytes.clone();
        later[2..10].copy_from_slice(&(NOW + 10_000_000).to_be_bytes());
        assert_eq!(r.open("session", &URL_SAFE_NO_PAD.encode(later), NOW), Err(SealError::Tampered));
    }

    #[test]
    fn keys_rotate_without_dropping_tokens_and_a_retired_key_opens_nothing() {
        let old = ring(&[1]);
        let token = old.seal("session", NOW + 1_000, b"p").expect("sealed");
        let rotating = ring(&[2, 1]);
        assert_eq!(rotating.open("session", &token, NOW).as_deref(), Ok(&b"p"[..]), "the old key still opens");
        let new_token = rotating.seal("session", NOW + 1_000, b"q").expect("sealed");
        assert_eq!(old.open("session", &new_token, NOW), Err(SealError::UnknownKey), "sealed under the new key");
        let retired = ring(&[2]);
        assert_eq!(retired.open("session", &token, NOW), Err(SealError::UnknownKey));
        // Another ring with the same id but another key: forged as far as this one knows.
        let other = KeyRing::new(&[(1, [9; 32])]).expect("a ring");
        assert_eq!(other.open("session", &token, NOW), Err(SealError::Tampered));
    }

    #[test]
    fn anything_that_is_not_a_token_is_malformed_and_rings_are_checked() {
        let r = ring(&[1]);
        for bad in ["", "not base64!", "AAAA", &"A".repeat(MAX_TOKEN_CHARS + 1)] {
            assert_eq!(r.open("session", bad, NOW), Err(SealError::Malformed), "{bad:.20}");
        }
        assert!(KeyRing::new(&[]).is_err());
        assert!(KeyRing::new(&[(1, [0; 32]), (1, [1; 32])]).is_err());
        assert!(!format!("{r:?}").contains("1, 1, 1"), "no key material in Debug");
    }

    #[test]
    fn a_bound_token_says_whom_it_was_sealed_for_under_any_key_of_the_ring() {
        let r = ring(&[1]);
        let token = r.seal_bound("session", NOW + 1_000, Some("iss|alice"), b"facts").expect("sealed");
        let opened = r.open_bound("session", &token, NOW, Some("iss|alice")).expect("opens");
        assert_eq!(opened.payload, b"facts");
        assert!(opened.sealed_for.is_some() && opened.sealed_for == opened.presented);
        let mallory = r.open_bound("session", &token, NOW, Some("iss|mallory")).expect("opens");
        assert_ne!(mallory.sealed_for, mallory.presented);
        assert_eq!(r.open_bound("session", &token, NOW, None).expect("opens").presented, None);
        // After rotation the digest is taken under the key that sealed.
        let rotated = ring(&[2, 1]);
        let opened = rotated.open_bound("session", &token, NOW, Some("iss|alice")).expect("opens");
        assert_eq!(opened.sealed_for, opened.presented);
        let anonymous = r.seal_bound("session", NOW + 1_000, None, b"x").expect("sealed");
        let opened = r.open_bound("session", &anonymous, NOW, None).expect("opens");
        assert_eq!((opened.sealed_for, opened.presented, opened.payload), (None, None, b"x".to_vec()));
        // A plain token is not a bound one.
        let plain = r.seal("session", NOW + 1_000, b"\x07junk").expect("sealed");
        assert_eq!(r.open_bound("session", &plain, NOW, None), Err(SealError::Malformed));
    }
}
