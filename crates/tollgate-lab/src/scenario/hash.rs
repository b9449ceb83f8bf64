//! The lab's one stateless hash, [`mix64`]: arrivals to clients, keys to stagger offsets, arrivals to hot Envoys.

/// SplitMix64's step and finalizer: a well-spread 64-bit hash of `x`, the
/// lab's one stateless hash (clients, stagger offsets, Envoys).
pub(super) fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
