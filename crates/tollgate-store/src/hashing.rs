//! The per-store random seeds and the hash that places a key in a shard and a slot.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use crate::key::{Key, KeyId};

/// An odd 64-bit constant (2⁶⁴ / φ) used to spread bits in a multiply.
const SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;

/// Multiplies two words to 128 bits and folds the halves together.
///
/// Every output bit depends on every input bit of both factors, which is
/// what makes one multiply enough for a table hash.
#[inline]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The random seeds of one store and the hashes made from them.
///
/// Each store draws its own seeds (from the standard library's per-process
/// random keys, so no extra dependency), so an attacker who chooses keys
/// cannot aim them at one shard or one probe chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyHashing {
    key_seed: u64,
    mix_hi: u64,
    mix_lo: u64,
    mix_out: u64,
}

impl KeyHashing {
    /// Seeds drawn at random.
    pub(crate) fn random() -> Self {
        let source = RandomState::new();
        KeyHashing {
            key_seed: source.hash_one(0u8),
            mix_hi: source.hash_one(1u8),
            mix_lo: source.hash_one(2u8),
            mix_out: source.hash_one(3u8),
        }
    }

    /// The identity of `key` in this store.
    #[inline]
    pub(crate) fn key_id<K: Key + ?Sized>(&self, key: &K) -> KeyId {
        key.key_id(self.key_seed)
    }

    /// The seeded 64-bit hash of an identity.
    ///
    /// Its low bits choose the shard and its high bits (through a
    /// multiply-shift) the home slot. Two folded multiplies: one alone maps
    /// sequential integers to a lattice in which the low and high bits are
    /// correlated (whole shards' tables then cluster); the second breaks it.
    #[inline]
    pub(crate) fn probe_hash(&self, id: KeyId) -> u64 {
        let mixed = folded_multiply(id.hi() ^ self.mix_hi, id.lo() ^ self.mix_lo);
        folded_multiply(mixed ^ self.mix_out, SPREAD)
    }

    /// A hasher builder for maps keyed by [`KeyId`], seeded like the probe hash.
    pub(crate) fn map_hashing(&self) -> KeyIdHashing {
        KeyIdHashing { seed: self.mix_hi }
    }
}

/// Builds [`KeyIdHasher`]s: a fast seeded hasher for maps whose keys are already hashes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyIdHashing {
    seed: u64,
}

impl BuildHasher for KeyIdHashing {
    type Hasher = KeyIdHasher;

    fn build_hasher(&self) -> KeyIdHasher {
        KeyIdHasher { acc: self.seed }
    }
}

/// A multiply-fold hasher over 64-bit words (a [`KeyId`] hashes as two).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyIdHasher {
    acc: u64,
}

impl Hasher for KeyIdHasher {
    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.acc = folded_multiply(self.acc ^ word, SPREAD);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_between_stores() {
        let a = KeyHashing::random();
        let b = KeyHashing::random();
        let id = KeyId::of_integer(1);
        assert_ne!(a.probe_hash(id), b.probe_hash(id));
        assert_ne!(a.key_id("x"), b.key_id("x"));
    }

    /// Sequential and strided integer keys spread over (shard, home slot)
    /// pairs like random ones, for many seeds.
    #[test]
    fn integer_keys_spread_over_shards_and_home_slots() {
        for _ in 0..10 {
            let hashing = KeyHashing::random();
            for stride in [1, 64, 1000, 1 << 32] {
                spreads_like_a_random_hash(|n| hashing.probe_hash(KeyId::of_integer(n * stride)));
            }
        }
    }

    fn spreads_like_a_random_hash(hash: impl Fn(u64) -> u64) {
        // 64 shards × 64 home slots, 4 keys per cell on average.
        let mut cells = vec![0u32; 64 * 64];
        for n in 0..64 * 64 * 4 {
            let h = hash(n);
            let shard = (h & 63) as usize;
            let home = ((u128::from(h) * 64) >> 64) as usize;
            cells[shard * 64 + home] += 1;
        }
        let empty = cells.iter().filter(|&&c| c == 0).count();
        let max = *cells.iter().max().unwrap();
        // A uniform hash leaves e⁻⁴ ≈ 1.8% of cells empty (a single
        // multiply-fold left up to 89% empty for some seeds); allow up to 5%.
        assert!(empty < cells.len() / 20, "{empty} empty cells");
        assert!(max < 20);
    }
}
