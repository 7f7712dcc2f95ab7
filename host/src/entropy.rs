//! Randomness from the operating system for the engine: the seed of its jitter
//! and the key of the ids that work as capabilities (task ids, continuations;
//! see `Gateway::set_id_key`).

/// 256 bits from the operating system, or `None` when it has none to give (the
/// engine then keeps ids that follow its seed, and the caller says so).
pub fn id_key() -> Option<[u8; 32]> {
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).ok()?;
    Some(key)
}

/// A seed for the engine's jitter: from the operating system, else the clock.
pub fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::getrandom(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
    }
}
