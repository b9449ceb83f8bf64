//! The order in which a full store evicts keys: least used first, so that an eviction changes the fewest decisions.
//!
//! A full shard of a store must let go of live keys to take a new one.
//! Refusing the new key is no option: not storing it would stop counting it (a client
//! with a new key would be limited by nothing), and denying it would lock
//! out innocent clients. The bound must hold too, since it is the memory
//! bound. So the shard evicts, and chooses the keys whose eviction changes
//! the fewest decisions.
//!
//! An evicted key starts fresh the next time it is seen. That hands back
//! what its state held against it:
//! [`WordAlgorithm::used`](tollgate_core::WordAlgorithm::used)`(state, now)`
//! units, `C − remaining` of a check-only request (`C` the capacity), which
//! is a fixed window's count (`limit + 1` once a denial closed it), a
//! bucket's `⌈(TAT − now)/T⌉` missing units, the sliding window counter's
//! estimate rounded up. For the rate meters and the fixed window that is
//! all an eviction can ever hand back, and for every algorithm the
//! difference is gone at the state's `fresh_at`. A shard therefore evicts
//! in the order of `used`, least first, and among keys that used the same,
//! the soonest fresh (whose difference lasts least). A key at count 1 goes
//! before one at its limit.
//!
//! Since an eviction keeps the `7/8 × share` keys that come last in that
//! order, **a key that has used `u` units is evicted only if at least 7/8
//! of its shard's share of keys have used at least `u` units too** (ties in
//! `used` and `fresh_at` go in an order set by the store's secret hash
//! seed). So:
//!
//! * a flood of new keys that have each used less than a key has (one
//!   request each, against a key at a limit of 2 or more, or at any limit
//!   once a fixed window's denial closed it) never evicts that key, however
//!   many keys it brings: every eviction takes flood keys first. (If 7/8 of
//!   the shard already were keys at least as used, the first new key of
//!   any kind evicts it: that is a store too small for its traffic.)
//! * to evict a key that has used `u`, an attacker must hold `7/8 × share`
//!   keys of the same store (the same limit) and the same shard, each at
//!   `u` or more, all at once. Shards are picked by a hash seeded per store,
//!   so that means about `7/8 × max_keys` keys across the store, and
//!   spending about `7/8 × max_keys × u` units of cost on them while they
//!   are all live (one request per key where a client picks its own cost);
//!   the gain is what the one key had used, at most its limit;
//! * when every key of a full shard has used its whole budget, a new key
//!   still gets in and 1/8 of the share is evicted, least used first. The
//!   key bound, and with it the memory bound, holds whatever the traffic.
//!
//! The [`LogStore`](crate::LogStore) evicts in the same order, a log's used
//! budget being the units it still holds in its window.

use tollgate_core::Timestamp;

/// Where a key stands in the order of eviction: the smallest goes first.
///
/// Least used first, then the soonest fresh, then in an order set by the
/// store's secret hash seed. The last part keeps ties (a flood of keys
/// alike) from being evicted by their place in the table: that would evict
/// one end of a table every time, pack the survivors into the other, and
/// lengthen every probe there (a flood far past the bound then ran over
/// 10× slower). The bits a key's place comes from (the probe hash's
/// highest) end up lowest here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct EvictionRank {
    used: u64,
    fresh_at: Timestamp,
    tie: u64,
}

impl EvictionRank {
    /// The rank of a key that has used `used` units, is fresh at `fresh_at`
    /// and has the probe hash `probe_hash`.
    pub(crate) fn new(used: u64, fresh_at: Timestamp, probe_hash: u64) -> Self {
        EvictionRank {
            used,
            fresh_at,
            tie: probe_hash.reverse_bits(),
        }
    }
}

/// Removes all but the `keep` highest-ranked of `keys` and returns the removed ones.
pub(crate) fn evict_least_used<T>(
    keys: &mut Vec<T>,
    keep: usize,
    rank: impl FnMut(&T) -> EvictionRank,
) -> std::vec::Drain<'_, T> {
    let evict = keys.len().saturating_sub(keep);
    if evict > 0 {
        keys.select_nth_unstable_by_key(evict - 1, rank);
    }
    keys.drain(..evict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_used_go_first_then_the_soonest_fresh() {
        let t = Timestamp::from_secs;
        let mut keys = vec![
            ("at its limit", EvictionRank::new(10, t(60), 1)),
            ("one request", EvictionRank::new(1, t(60), 2)),
            ("half used, fresh later", EvictionRank::new(5, t(90), 3)),
            ("half used, fresh sooner", EvictionRank::new(5, t(70), 4)),
        ];
        let evicted: Vec<_> = evict_least_used(&mut keys, 2, |k| k.1)
            .map(|k| k.0)
            .collect();
        assert_eq!(evicted.len(), 2);
        assert!(evicted.contains(&"one request"));
        assert!(evicted.contains(&"half used, fresh sooner"));
        assert_eq!(evict_least_used(&mut keys, 5, |k| k.1).count(), 0);
        assert_eq!(keys.len(), 2);
    }
}
