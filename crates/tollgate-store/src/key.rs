//! Keys and the 128-bit identities a store files them under.

use std::fmt;

use xxhash_rust::xxh3::xxh3_128_with_seed;

/// The 128-bit identity of a key; `hi` is never 0.
///
/// Integer keys map exactly: `hi = 1`, `lo = the integer`, so two integers
/// never share an identity and no hashing is done. Byte-string keys are
/// hashed with xxh3-128 under a seed chosen at random by each store, and the
/// top bit of `hi` is set, so a byte string never shares an identity with an
/// integer (whose `hi` is 1) and `hi` is never 0. Bits 31 to 62 of `hi`
/// (`SPARE_HI_BITS`) are 0 in every identity: a word store files a key's
/// arrival there. Two distinct byte strings share an identity with
/// probability about 2⁻⁹⁵.
///
/// A store keeps only the identity, never the key itself.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId {
    hi: u64,
    lo: u64,
}

/// The bits of [`KeyId::hi`] that no identity uses (bits 31 to 62).
pub(crate) const SPARE_HI_BITS: u64 = ((1 << 32) - 1) << 31;

impl KeyId {
    /// The identity with the given halves, or `None` when `hi` is 0 (the
    /// empty-slot marker) or has a bit of `SPARE_HI_BITS` set.
    pub const fn new(hi: u64, lo: u64) -> Option<Self> {
        if hi == 0 || hi & SPARE_HI_BITS != 0 {
            None
        } else {
            Some(KeyId { hi, lo })
        }
    }

    /// The identity of an integer key: `hi = 1`, `lo = n`.
    pub const fn of_integer(n: u64) -> Self {
        KeyId { hi: 1, lo: n }
    }

    /// The identity of a byte-string key under `seed`.
    pub fn of_bytes(bytes: &[u8], seed: u64) -> Self {
        let hash = xxh3_128_with_seed(bytes, seed);
        KeyId {
            hi: (((hash >> 64) as u64) & !SPARE_HI_BITS) | (1 << 63),
            lo: hash as u64,
        }
    }

    /// The high half; never 0.
    pub const fn hi(self) -> u64 {
        self.hi
    }

    /// The low half.
    pub const fn lo(self) -> u64 {
        self.lo
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({:016x}:{:016x})", self.hi, self.lo)
    }
}

/// Something that can be turned into a [`KeyId`].
///
/// `seed` is the store's own random seed; implementations that hash must
/// use it, so that the identities in one store cannot be predicted from
/// outside. `u32` and `u64` keys ignore it (they map exactly), and so do
/// `str` and `[u8]` keys with equal bytes: `"ab"` and `b"ab"` are one key,
/// and so are `7u32` and `7u64`.
pub trait Key {
    /// The identity of this key under `seed`.
    fn key_id(&self, seed: u64) -> KeyId;
}

impl Key for u64 {
    #[inline]
    fn key_id(&self, _seed: u64) -> KeyId {
        KeyId::of_integer(*self)
    }
}

impl Key for u32 {
    #[inline]
    fn key_id(&self, _seed: u64) -> KeyId {
        KeyId::of_integer(u64::from(*self))
    }
}

impl Key for [u8] {
    #[inline]
    fn key_id(&self, seed: u64) -> KeyId {
        KeyId::of_bytes(self, seed)
    }
}

impl Key for str {
    #[inline]
    fn key_id(&self, seed: u64) -> KeyId {
        KeyId::of_bytes(self.as_bytes(), seed)
    }
}

impl Key for String {
    #[inline]
    fn key_id(&self, seed: u64) -> KeyId {
        KeyId::of_bytes(self.as_bytes(), seed)
    }
}

impl Key for Vec<u8> {
    #[inline]
    fn key_id(&self, seed: u64) -> KeyId {
        KeyId::of_bytes(self, seed)
    }
}

/// An identity computed earlier is its own key (whatever the seed).
impl Key for KeyId {
    #[inline]
    fn key_id(&self, _seed: u64) -> KeyId {
        *self
    }
}

impl<T: Key + ?Sized> Key for &T {
    #[inline]
    fn key_id(&self, seed: u64) -> KeyId {
        (**self).key_id(seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_map_exactly_and_ignore_the_seed() {
        assert_eq!(7u64.key_id(1), KeyId::new(1, 7).unwrap());
        assert_eq!(7u32.key_id(2), 7u64.key_id(3));
        assert_eq!(u64::MAX.key_id(0).lo(), u64::MAX);
        assert_ne!(0u64.key_id(0), 1u64.key_id(0));
    }

    #[test]
    fn byte_strings_never_meet_integers_and_depend_on_the_seed() {
        let s = "01234567";
        let n = u64::from_le_bytes(*b"01234567");
        let id = s.key_id(42);
        assert_ne!(id, n.key_id(42));
        assert_eq!(id.hi() >> 63, 1, "top bit marks the byte-string domain");
        assert_eq!(id, b"01234567"[..].key_id(42));
        assert_eq!(id, String::from(s).key_id(42));
        assert_eq!(id, s.as_bytes().to_vec().key_id(42));
        assert_eq!(id, (&s).key_id(42));
        assert_ne!(id, s.key_id(43), "another store, another identity");
        assert_ne!("".key_id(0).hi(), 0);
        for n in 0..64u64 {
            assert_eq!(n.to_string().key_id(n).hi() & SPARE_HI_BITS, 0);
        }
    }

    #[test]
    fn a_zero_high_half_is_not_an_identity() {
        assert_eq!(KeyId::new(0, 5), None);
        assert_eq!(KeyId::new(1 | (1 << 31), 5), None);
        assert_eq!(KeyId::new(1 << 62, 5), None);
        assert_eq!(
            format!("{:?}", KeyId::of_integer(255)),
            "KeyId(0000000000000001:00000000000000ff)"
        );
    }
}
