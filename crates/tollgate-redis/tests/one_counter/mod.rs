//! One counter of one hit on `key`, as the engine hands the store a single descriptor's check: shared by the library and upgrade tests.

use tollgate_core::AnyAlgorithm;
use tollgate_store::Counter;

/// A counter of `algorithm` on `key`, one hit, no give-back, no stagger.
pub fn counter(key: &[u8], algorithm: AnyAlgorithm) -> Counter<'_> {
    Counter {
        group: 0,
        key,
        tag: xxhash_rust::xxh3::xxh3_64(key),
        algorithm,
        hits: 1,
        give_back: false,
        phase_ns: 0,
    }
}
