//! How many keys a store may hold and how it splits them into shards.

/// The shard count used unless the configuration says otherwise.
pub const DEFAULT_SHARDS: usize = 64;

/// The most shards a store uses, whatever the configuration asks.
pub const MAX_SHARDS: usize = 1 << 16;

/// Bytes of table per key when a shard of a [`WordStore`](crate::WordStore) is full.
///
/// A slot is 24 bytes and a table is never more than 80% occupied, so a
/// shard holding its whole share of `max_keys` uses 24 / 0.8 = 30 bytes per
/// key. [`StoreConfig::with_max_bytes`] divides by this.
pub const BYTES_PER_KEY_AT_FULL_LOAD: usize = 30;

/// The most sliding-log entries one [`LogStore`](crate::LogStore) holds unless configured otherwise (4 Mi, 64 MiB at 16 bytes each).
pub const DEFAULT_MAX_LOG_ENTRIES: usize = 4 << 20;

/// The fewest keys per shard a store aims for; small stores use fewer shards.
const MIN_KEYS_PER_SHARD: usize = 16;

/// The size of a store: how many keys it may hold, and across how many shards.
///
/// Each shard may hold `max_keys / shards` keys (its *share*); the store as
/// a whole never holds more than `max_keys`. Keys are spread over shards by
/// a seeded hash, so a store starts evicting in its fullest shard slightly
/// before it holds `max_keys` keys in total (about 1% before, for 64 shards
/// of 15 625 keys). Size a store with some headroom over the keys it must
/// keep.
///
/// `shards` is rounded up to a power of two (at most 65 536), and lowered
/// so that every shard has a share of at least 16 keys; a `max_keys` of 0
/// counts as 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StoreConfig {
    /// The most keys the store holds at once.
    pub max_keys: usize,
    /// How many independent shards the keys are split over (a power of two).
    pub shards: usize,
    /// The most sliding-log entries a [`LogStore`](crate::LogStore) holds
    /// (each shard its share); past it a shard merges entries of its logs
    /// in pairs, which only makes decisions stricter. Other stores ignore it.
    pub max_log_entries: usize,
}

impl StoreConfig {
    /// A store of at most `max_keys` keys over the default 64 shards.
    pub fn with_max_keys(max_keys: usize) -> Self {
        StoreConfig {
            max_keys,
            shards: DEFAULT_SHARDS,
            max_log_entries: DEFAULT_MAX_LOG_ENTRIES,
        }
    }

    /// A [`WordStore`](crate::WordStore) whose tables and shard headers never
    /// pass `max_bytes` (at 64 shards).
    ///
    /// After the fixed cost of the shard headers, every
    /// [`BYTES_PER_KEY_AT_FULL_LOAD`] bytes buy one key, so that
    /// [`WordStore::max_memory_bytes`](crate::WordStore::max_memory_bytes)
    /// is at most `max_bytes` (the store always holds at least one key, so a
    /// budget below the fixed cost gives the smallest store). A
    /// [`LogStore`](crate::LogStore) holds the same number of keys but uses
    /// more per key (see its docs).
    pub fn with_max_bytes(max_bytes: usize) -> Self {
        let fixed = DEFAULT_SHARDS * crate::word_store::FIXED_BYTES_PER_SHARD;
        StoreConfig::with_max_keys(max_bytes.saturating_sub(fixed) / BYTES_PER_KEY_AT_FULL_LOAD)
    }

    /// The shard count and per-shard share this configuration gives.
    pub(crate) fn layout(&self) -> ShardLayout {
        let max_keys = self.max_keys.max(1);
        let requested = self.shards.clamp(1, MAX_SHARDS).next_power_of_two();
        let fitting = largest_power_of_two_at_most((max_keys / MIN_KEYS_PER_SHARD).max(1));
        let count = requested.min(fitting);
        ShardLayout {
            count,
            share: max_keys / count,
        }
    }

    /// This configuration with at most `max_log_entries` sliding-log entries.
    #[must_use]
    pub fn with_max_log_entries(self, max_log_entries: usize) -> Self {
        StoreConfig {
            max_log_entries,
            ..self
        }
    }
}

impl Default for StoreConfig {
    /// One million keys over 64 shards, [`DEFAULT_MAX_LOG_ENTRIES`] log entries.
    fn default() -> Self {
        StoreConfig::with_max_keys(1_000_000)
    }
}

/// How a store is split: `count` shards (a power of two) of `share` keys each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardLayout {
    pub(crate) count: usize,
    pub(crate) share: usize,
}

impl ShardLayout {
    /// The number of keys to keep when a full shard evicts: 7/8 of the
    /// share (at least one fewer than the share), so one eviction pass makes
    /// room for many inserts.
    pub(crate) fn keep_after_eviction(&self) -> usize {
        self.share - (self.share / 8).max(1)
    }
}

/// The largest power of two not above `n` (`n ≥ 1`).
fn largest_power_of_two_at_most(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.max(1).leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_a_power_of_two_with_a_useful_share() {
        let l = StoreConfig::with_max_keys(1024).layout();
        assert_eq!((l.count, l.share), (64, 16));
        let l = StoreConfig::with_max_keys(1000).layout();
        assert_eq!((l.count, l.share), (32, 31));
        let l = StoreConfig {
            max_keys: 1 << 20,
            shards: 48,
            ..StoreConfig::default()
        }
        .layout();
        assert_eq!((l.count, l.share), (64, 1 << 14));
        let l = StoreConfig {
            max_keys: 0,
            shards: 0,
            ..StoreConfig::default()
        }
        .layout();
        assert_eq!((l.count, l.share), (1, 1));
        let l = StoreConfig {
            max_keys: usize::MAX,
            shards: usize::MAX,
            ..StoreConfig::default()
        }
        .layout();
        assert_eq!(l.count, MAX_SHARDS);
    }

    #[test]
    fn the_store_never_holds_more_than_max_keys() {
        for max_keys in [1, 2, 15, 16, 17, 100, 1000, 1023, 1024, 99_999] {
            for shards in [1, 3, 64, 1000] {
                let l = StoreConfig {
                    max_keys,
                    shards,
                    ..StoreConfig::default()
                }
                .layout();
                assert!(l.count * l.share <= max_keys, "{max_keys} {shards}");
                assert!(l.share >= 1);
                assert!(l.keep_after_eviction() < l.share);
            }
        }
    }

    #[test]
    fn eviction_keeps_seven_eighths() {
        let l = ShardLayout {
            count: 1,
            share: 64,
        };
        assert_eq!(l.keep_after_eviction(), 56);
        let l = ShardLayout { count: 1, share: 1 };
        assert_eq!(l.keep_after_eviction(), 0);
    }
}
