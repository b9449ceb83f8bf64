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
//! is a fixed window's count, a bucket's `⌈(TAT − now)/T⌉` missing units,
//! the sliding window counter's estimate rounded up. A shard therefore
//! evicts in the order of `used`, least first, counting every key that has
//! used its whole capacity as exhausted alike (a fixed window closed by a
//! denial, which counts `limit + 1`, ranks with one at exactly its limit).
//! Among keys that used the same, it evicts **the newest first**: the key
//! that arrived in the store last (each shard numbers its keys as they
//! arrive).
//!
//! The newest-first part is what makes the order hold against a caller who
//! picks costs. A flood key can be brought to any used budget in one
//! request (a cost of `C` spends it all; a cost above `C` is denied but
//! closes a fixed window), so it can always tie with an exhausted key; an
//! order that broke that tie by anything else (the soonest fresh, which is
//! the key exhausted first; or a hash, which is fixed per key) evicted the
//! same exhausted key at every eviction pass, each `share/8` flood keys
//! once the store was full: seen as a "5 per hour" key admitted 15 to 20
//! times during a 1.5-million-key flood of `hits_addend` 6.
//!
//! Since an eviction keeps the `7/8 × share` keys that come last in that
//! order, **a key that has used `u` units is evicted only if at least 7/8
//! of its shard's share of keys have used more, or as much and arrived
//! before it**. So:
//!
//! * a flood of keys that arrive after a key and have each used no more
//!   than it has never evicts that key, however many keys it brings and
//!   whatever they cost. An exhausted key (one that has spent its
//!   capacity, whatever the costs it spent it with) cannot be outranked at
//!   all: no flood that begins after it is exhausted evicts it.
//! * what an attacker *can* do: evict a key that has used `u` with keys
//!   that each used more than `u` (the gain is `u`: a key not yet exhausted,
//!   or a rate meter's key once it has refilled some units), or with
//!   `7/8 × share` keys at `u` or more that arrived **before** it and are
//!   still live (about `7/8 × max_keys` across the store, shards being
//!   picked by a hash seeded per store): a store filled before the key
//!   arrived. A key that arrives while such a store is kept full is then
//!   evicted at each eviction pass (every `share/8` new keys) and gets up
//!   to what it used back each time.
//! * when every key of a full shard has used its whole budget, a new key
//!   still gets in and 1/8 of the share is evicted, the newest first. The
//!   key bound, and with it the memory bound, holds whatever the traffic.
//!
//! The [`LogStore`](crate::LogStore) evicts in the same order, a log's used
//! budget being the units it still holds in its window.

use std::cmp::Reverse;

/// Where a key stands in the order of eviction: the smallest goes first.
///
/// Least used first (every exhausted key alike), then the newest arrival.
/// Arrivals are numbered per shard, so no two keys of a shard tie; they
/// also carry no trace of a key's place in the table (evicting by place
/// would evict one end of a table every time, pack the survivors into the
/// other, and lengthen every probe there).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct EvictionRank {
    used: u64,
    newest_first: Reverse<u64>,
}

impl EvictionRank {
    /// The rank of a key that has used `used` of its `capacity` units and
    /// was its shard's `arrival`-th key.
    pub(crate) fn new(used: u64, capacity: u64, arrival: u64) -> Self {
        EvictionRank {
            used: used.min(capacity),
            newest_first: Reverse(arrival),
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
    fn the_least_used_go_first_then_the_newest() {
        let mut keys = vec![
            ("at its limit, old", EvictionRank::new(10, 10, 1)),
            ("closed by a denial, newer", EvictionRank::new(11, 10, 5)),
            ("one request", EvictionRank::new(1, 10, 2)),
            ("half used, arrived first", EvictionRank::new(5, 10, 3)),
            ("half used, arrived last", EvictionRank::new(5, 10, 4)),
        ];
        let evicted: Vec<_> = evict_least_used(&mut keys, 3, |k| k.1)
            .map(|k| k.0)
            .collect();
        assert_eq!(evicted.len(), 2);
        assert!(evicted.contains(&"one request"));
        assert!(evicted.contains(&"half used, arrived last"));
        let evicted: Vec<_> = evict_least_used(&mut keys, 1, |k| k.1)
            .map(|k| k.0)
            .collect();
        assert_eq!(evicted.len(), 2);
        assert!(evicted.contains(&"half used, arrived first"));
        assert!(
            evicted.contains(&"closed by a denial, newer"),
            "an exhausted key outranks no older exhausted key"
        );
        assert_eq!(evict_least_used(&mut keys, 5, |k| k.1).count(), 0);
        assert_eq!(keys.len(), 1);
    }
}
