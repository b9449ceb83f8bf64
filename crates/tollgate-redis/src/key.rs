//! The Redis key of a counter: a hash tag of its descriptor, then the engine's key.

use std::fmt::Write as _;

/// The Redis key for a counter with engine key `key` and descriptor hash `tag`.
///
/// `tg{` + 16 lowercase hex digits of `tag` + `}` + `key`. The engine's key
/// is already collision-free (length-prefixed parts, algorithm and window
/// in it), and the prefix is fixed-length, so two counters never share a
/// Redis key. Redis Cluster hashes only what is between the first `{` and
/// the next `}` (the hex digits, never a brace), so counters with the same
/// tag share a slot.
///
/// It is the counter's one key in both encodings (`prelude.lua`): a packed
/// string or, as releases before the packed encoding wrote it, a hash
/// ([`crate::Encoding`]).
pub fn redis_key(tag: u64, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + key.len());
    let mut hex = String::with_capacity(16);
    // Writing to a String cannot fail.
    let _ = write!(hex, "{tag:016x}");
    out.extend_from_slice(b"tg{");
    out.extend_from_slice(hex.as_bytes());
    out.push(b'}');
    out.extend_from_slice(key);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_tag_is_the_descriptor_hash_and_keys_stay_apart() {
        let a = redis_key(0xab, b"k{1}");
        assert_eq!(&a[..20], b"tg{00000000000000ab}");
        assert_eq!(&a[20..], b"k{1}");
        assert_ne!(redis_key(1, b"x"), redis_key(0x10, b"x"));
        assert_ne!(redis_key(1, b"x"), redis_key(1, b"y"));
        let slot = |k: &[u8]| redis::cluster_routing::Slot::for_key(k);
        assert_eq!(slot(&redis_key(7, b"one")), slot(&redis_key(7, b"two")));
    }
}
