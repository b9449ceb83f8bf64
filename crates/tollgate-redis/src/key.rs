//! The Redis key of a counter: a hash tag of its descriptor, then the engine's key; or envoyproxy/ratelimit's own key of a fixed window.

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
    out.extend_from_slice(&key_head(tag));
    out.extend_from_slice(key);
    out
}

/// `tg{` + 16 lowercase hex digits of `tag` + `}`: what starts [`redis_key`].
pub(crate) fn key_head(tag: u64) -> [u8; 20] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut head = *b"tg{0000000000000000}";
    for (i, digit) in head[3..19].iter_mut().enumerate() {
        *digit = DIGITS[((tag >> (60 - 4 * i)) & 0xf) as usize];
    }
    head
}

/// What starts a counter key that is envoyproxy/ratelimit's own key
/// ([`upstream_key`]); the engine's keys start with `tg`.
const UPSTREAM_MARK: &[u8] = b"\0envoyproxy\0";

/// The seconds of envoyproxy/ratelimit's units, `SECOND` to `YEAR`: the
/// windows its keys can name (a month is 30 days, a year 365).
pub const UPSTREAM_UNITS: [u64; 7] = [1, 60, 3_600, 86_400, 604_800, 2_592_000, 31_536_000];

/// The counter key of a fixed window of `window` (whole seconds, one of
/// [`UPSTREAM_UNITS`]) that counts in envoyproxy/ratelimit's Redis key, for
/// a clock at `now_s` Unix seconds; None for any other window.
///
/// Upstream's key is `domain_` then `key_value_` for each entry, then the
/// window's start in Unix seconds (`now / unit * unit`); the store puts
/// its key prefix (`CACHE_KEY_PREFIX`) in front and counts in it with
/// upstream's `INCRBY` and `EXPIRE` (`check.lua`). The counter key carries a
/// mark no engine key starts with, so the store knows it.
pub fn upstream_key<'a>(
    domain: &str,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    window: std::time::Duration,
    now_s: u64,
) -> Option<Vec<u8>> {
    let unit_s = window.as_secs();
    if window.subsec_nanos() != 0 || !UPSTREAM_UNITS.contains(&unit_s) {
        return None;
    }
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(UPSTREAM_MARK);
    out.extend_from_slice(domain.as_bytes());
    out.push(b'_');
    for (k, v) in entries {
        out.extend_from_slice(k.as_bytes());
        out.push(b'_');
        out.extend_from_slice(v.as_bytes());
        out.push(b'_');
    }
    out.extend_from_slice((now_s / unit_s * unit_s).to_string().as_bytes());
    Some(out)
}

/// Upstream's key without the store's prefix, when `key` is one ([`upstream_key`]).
pub(crate) fn as_upstream(key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(UPSTREAM_MARK)
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
        assert_eq!(&key_head(u64::MAX), b"tg{ffffffffffffffff}");
        assert_eq!(&key_head(0x0123_4567_89ab_cdef), b"tg{0123456789abcdef}");
        assert_ne!(redis_key(1, b"x"), redis_key(1, b"y"));
        let slot = |k: &[u8]| redis::cluster_routing::Slot::for_key(k);
        assert_eq!(slot(&redis_key(7, b"one")), slot(&redis_key(7, b"two")));
    }

    #[test]
    fn upstream_keys_follow_its_layout_and_only_its_units() {
        let secs = std::time::Duration::from_secs;
        let entries = [("remote_address", "10.0.0.1"), ("path", "/a")];
        let key = upstream_key("edge", entries, secs(60), 1_700_000_059).expect("a minute");
        assert_eq!(
            as_upstream(&key),
            Some(&b"edge_remote_address_10.0.0.1_path_/a_1700000040"[..])
        );
        assert_eq!(
            as_upstream(&upstream_key("d", [], secs(86_400), 86_400 * 3 + 5).expect("a day")),
            Some(&b"d_259200"[..])
        );
        assert_eq!(upstream_key("d", [], secs(120), 0), None);
        let half_minute = std::time::Duration::from_millis(60_500);
        assert_eq!(upstream_key("d", [], half_minute, 0), None);
        assert_eq!(as_upstream(&redis_key(1, b"tg1x")), None);
        assert_eq!(as_upstream(b"tg1edge"), None);
    }
}
