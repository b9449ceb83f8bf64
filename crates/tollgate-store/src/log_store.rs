//! [`LogStore`]: keys to sliding logs, for the [`SlidingLog`] algorithm.

use std::collections::HashMap;
use std::fmt;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use tollgate_core::{Decision, LogState, SlidingLog, Timestamp};

use crate::config::{ShardLayout, StoreConfig};
use crate::eviction::{EvictionRank, evict_least_used};
use crate::hashing::{KeyHashing, KeyIdHashing};
use crate::key::{Key, KeyId};

/// Keys to sliding logs, for [`SlidingLog`].
///
/// A log is a list of timestamps, too big for one atomic word, so each of a
/// power-of-two number of shards is a mutex around a hash map from
/// [`KeyId`] to [`LogState`]. A check locks one shard. Logs that end up
/// empty are removed at once; when a new key would take a shard past its
/// share of `max_keys`, the shard first drops the logs that are fresh (all
/// entries expired, so dropping them changes no decision) and, if still
/// full, evicts the logs that have used the least of their limit (the
/// fewest units still in the window, which is what an eviction hands
/// back), the newest among equals, down to 7/8 of its share. So a log at
/// its limit outlives a flood of later keys of any cost (the order and
/// what it guarantees are in [`eviction`](crate::eviction)). The
/// store never holds more than `max_keys` keys.
///
/// Memory per key: a map entry (about 64 bytes with the map's overhead)
/// plus the log, which holds at most `limit` entries of 16 bytes (its buffer
/// may reach twice that before it is trimmed). Entries are bounded for the
/// whole store too, by [`StoreConfig::max_log_entries`] (each shard its
/// share): a shard over its share merges the entries of its logs in pairs
/// ([`LogState::coalesce`]) down to 7/8 of the share, which keeps every
/// decision as strict or stricter, so a flood of logs at their limit costs
/// bounded memory and admits nothing more. Choose the sliding log for
/// strict, low-volume limits; [`memory_bytes`](Self::memory_bytes) reports
/// the total and [`entries`](Self::entries) the entries.
pub struct LogStore {
    algorithm: SlidingLog,
    shards: Box<[CachePadded<Mutex<LogShard>>]>,
    /// `shards.len() - 1`.
    shard_mask: usize,
    layout: ShardLayout,
    /// The most entries one shard holds before it merges them.
    entry_share: usize,
    hashing: KeyHashing,
}

/// One shard: its logs, the heap bytes they hold and their entries.
struct LogShard {
    logs: HashMap<KeyId, Logged, KeyIdHashing>,
    log_heap_bytes: usize,
    entries: usize,
    /// The arrival number of the next key inserted.
    next_arrival: u64,
}

/// A key's log and its arrival number in the shard (which the order of eviction reads).
struct Logged {
    log: LogState,
    arrival: u64,
}

impl LogShard {
    /// Runs `operation` on the key's log, inserting or removing the entry as the log fills or empties.
    fn apply(
        &mut self,
        id: KeyId,
        make_room: impl FnOnce(&mut Self),
        operation: impl FnOnce(&mut LogState) -> Decision,
    ) -> Decision {
        if let Some(Logged { log, .. }) = self.logs.get_mut(&id) {
            let before = log.heap_bytes();
            let entries_before = log.len();
            let decision = operation(log);
            let after = log.heap_bytes();
            let emptied = log.is_empty();
            self.log_heap_bytes = (self.log_heap_bytes + after).saturating_sub(before);
            self.entries = (self.entries + log.len()).saturating_sub(entries_before);
            if emptied {
                self.log_heap_bytes = self.log_heap_bytes.saturating_sub(after);
                self.logs.remove(&id);
            }
            return decision;
        }
        let mut log = LogState::default();
        let decision = operation(&mut log);
        if !log.is_empty() {
            make_room(self);
            self.log_heap_bytes += log.heap_bytes();
            self.entries += log.len();
            let arrival = self.next_arrival;
            self.next_arrival += 1;
            self.logs.insert(id, Logged { log, arrival });
        }
        decision
    }

    /// Removes the logs `drop` picks, keeping the heap count right.
    fn remove_where(&mut self, mut drop: impl FnMut(&KeyId, &LogState) -> bool) {
        let mut freed = 0;
        let mut entries = 0;
        self.logs.retain(|id, Logged { log, .. }| {
            let dropped = drop(id, log);
            if dropped {
                freed += log.heap_bytes();
                entries += log.len();
            }
            !dropped
        });
        self.log_heap_bytes = self.log_heap_bytes.saturating_sub(freed);
        self.entries = self.entries.saturating_sub(entries);
    }

    /// Merges entries of its logs in pairs until at most `keep` remain (or
    /// every log has one entry); each merge only makes decisions stricter.
    fn coalesce_to(&mut self, keep: usize) {
        while self.entries > keep {
            let mut merged_any = false;
            for Logged { log, .. } in self.logs.values_mut() {
                if self.entries <= keep {
                    break;
                }
                let heap_before = log.heap_bytes();
                let gone = log.coalesce();
                merged_any |= gone > 0;
                self.entries -= gone;
                self.log_heap_bytes =
                    (self.log_heap_bytes + log.heap_bytes()).saturating_sub(heap_before);
            }
            if !merged_any {
                return;
            }
        }
    }

    /// Approximate bytes of the map's own table (entries and control bytes).
    fn map_bytes(&self) -> usize {
        let capacity = self.logs.capacity();
        let buckets = match capacity {
            0 => 0,
            1..8 => (capacity + 1).next_power_of_two(),
            _ => (capacity.saturating_mul(8) / 7).next_power_of_two(),
        };
        buckets * (size_of::<(KeyId, Logged)>() + 1)
    }
}

impl LogStore {
    /// An empty store deciding with `algorithm`, sized by `config`.
    pub fn new(algorithm: SlidingLog, config: StoreConfig) -> Self {
        Self::with_hashing(algorithm, config, KeyHashing::random())
    }

    /// An empty store whose key identities are those of every store built with `hashing`.
    pub(crate) fn with_hashing(
        algorithm: SlidingLog,
        config: StoreConfig,
        hashing: KeyHashing,
    ) -> Self {
        let layout = config.layout();
        let shards = (0..layout.count)
            .map(|_| {
                CachePadded::new(Mutex::new(LogShard {
                    logs: HashMap::with_hasher(hashing.map_hashing()),
                    log_heap_bytes: 0,
                    entries: 0,
                    next_arrival: 0,
                }))
            })
            .collect();
        LogStore {
            algorithm,
            shards,
            shard_mask: layout.count - 1,
            layout,
            entry_share: (config.max_log_entries / layout.count).max(1),
            hashing,
        }
    }

    /// Decides a request costing `cost` for `key` at `now`, logging it if it passes.
    pub fn check<K: Key + ?Sized>(&self, key: &K, now: Timestamp, cost: u64) -> Decision {
        let id = self.hashing.key_id(key);
        let mut shard = self.shard(id).lock();
        let decision = shard.apply(
            id,
            |shard| self.make_room(shard, now),
            |log| self.algorithm.decide(log, now, cost),
        );
        if shard.entries > self.entry_share {
            shard.coalesce_to(self.entry_share - self.entry_share / 8);
        }
        decision
    }

    /// Gives back `amount` units that `key` logged earlier, newest first.
    pub fn refund<K: Key + ?Sized>(&self, key: &K, now: Timestamp, amount: u64) -> Decision {
        let id = self.hashing.key_id(key);
        let mut shard = self.shard(id).lock();
        shard.apply(
            id,
            |shard| self.make_room(shard, now),
            |log| self.algorithm.refund(log, now, amount),
        )
    }

    /// The total cost the key's log holds (as of its last decision), 0 when absent; for displays.
    pub fn peek<K: Key + ?Sized>(&self, key: &K) -> u64 {
        let id = self.hashing.key_id(key);
        self.shard(id)
            .lock()
            .logs
            .get(&id)
            .map_or(0, |logged| logged.log.total())
    }

    /// The units the key's log holds inside the window ending at `now`, 0 when absent; for displays.
    ///
    /// Unlike [`LogStore::peek`] it leaves out entries that have left the
    /// window since the key's last decision. It only reads: no decision changes.
    pub fn logged_at<K: Key + ?Sized>(&self, key: &K, now: Timestamp) -> u64 {
        let id = self.hashing.key_id(key);
        self.shard(id)
            .lock()
            .logs
            .get(&id)
            .map_or(0, |logged| self.algorithm.logged_at(&logged.log, now))
    }

    /// Drops every log that is fresh at `now` (all its entries expired); changes no decision.
    pub fn sweep(&self, now: Timestamp) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            shard.remove_where(|_, log| self.algorithm.fresh_at(log) <= now);
            let len = shard.logs.len();
            if len == 0 || shard.logs.capacity() > 4 * len {
                shard.logs.shrink_to(2 * len);
            }
        }
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().logs.len()).sum()
    }

    /// The entries the logs hold (one per distinct admission instant still logged).
    pub fn entries(&self) -> usize {
        self.shards.iter().map(|s| s.lock().entries).sum()
    }

    /// The most entries the store holds before it merges them: the
    /// configured `max_log_entries` (at least one per shard), or the key
    /// count when that is larger, since every log keeps one entry.
    pub fn max_entries(&self) -> usize {
        self.entry_share * self.layout.count
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the store holds: shard headers, the maps' tables (approximately) and the logs' heap.
    pub fn memory_bytes(&self) -> usize {
        let shards: usize = self
            .shards
            .iter()
            .map(|s| {
                let s = s.lock();
                s.map_bytes() + s.log_heap_bytes
            })
            .sum();
        self.shards.len() * size_of::<CachePadded<Mutex<LogShard>>>() + shards
    }

    /// The most keys the store holds at once (at most the configured `max_keys`).
    pub fn max_keys(&self) -> usize {
        self.layout.count * self.layout.share
    }

    /// The algorithm the store decides with.
    pub fn algorithm(&self) -> &SlidingLog {
        &self.algorithm
    }

    /// The seeds that name its keys.
    pub(crate) fn hashing(&self) -> KeyHashing {
        self.hashing
    }

    /// Every key it holds and its log.
    pub(crate) fn live_logs(&self) -> Vec<(KeyId, LogState)> {
        self.shards
            .iter()
            .flat_map(|shard| {
                let shard = shard.lock();
                shard
                    .logs
                    .iter()
                    .map(|(id, logged)| (*id, logged.log.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Sets the log of the key with identity `id` (under this store's
    /// seeds), unless the one it holds logs more in the window at `now`.
    pub(crate) fn put_log(&self, id: KeyId, now: Timestamp, log: LogState) {
        let mut shard = self.shard(id).lock();
        shard.apply(
            id,
            |shard| self.make_room(shard, now),
            |current| {
                if self.algorithm.logged_at(&log, now) >= self.algorithm.logged_at(current, now) {
                    *current = log;
                }
                self.algorithm.decide(current, now, 0)
            },
        );
    }

    fn shard(&self, id: KeyId) -> &Mutex<LogShard> {
        let hash = self.hashing.probe_hash(id);
        // The shard count is a power of two, so the mask keeps the index in range.
        &self.shards[(hash as usize) & self.shard_mask]
    }

    /// Makes room for one more key in a full shard: fresh logs first, then
    /// the least used (the fewest units logged in the window), the newest among equals.
    fn make_room(&self, shard: &mut LogShard, now: Timestamp) {
        if shard.logs.len() < self.layout.share {
            return;
        }
        shard.remove_where(|_, log| self.algorithm.fresh_at(log) <= now);
        if shard.logs.len() < self.layout.share {
            return;
        }
        let keep = self.layout.keep_after_eviction();
        let mut ranked: Vec<(EvictionRank, KeyId)> = shard
            .logs
            .iter()
            .map(|(id, logged)| {
                let used = self.algorithm.logged_at(&logged.log, now);
                let limit = self.algorithm.limit();
                (EvictionRank::new(used, limit, logged.arrival), *id)
            })
            .collect();
        for (_, id) in evict_least_used(&mut ranked, keep, |&(rank, _)| rank) {
            if let Some(logged) = shard.logs.remove(&id) {
                shard.log_heap_bytes = shard.log_heap_bytes.saturating_sub(logged.log.heap_bytes());
            }
        }
    }
}

impl fmt::Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore")
            .field("algorithm", &self.algorithm)
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn logs_that_empty_are_removed_and_their_memory_returned() {
        let log = SlidingLog::new(3, Duration::from_secs(1)).unwrap();
        let store = LogStore::new(log, StoreConfig::with_max_keys(100));
        let base = store.memory_bytes();
        let t = Timestamp::from_secs(10);
        store.check("a", t, 2);
        assert_eq!((store.len(), store.peek("a")), (1, 2));
        assert!(store.memory_bytes() > base);
        store.refund("a", t, 2);
        assert_eq!((store.len(), store.peek("a")), (0, 0));
        assert!(
            !store.check("a", t, 4).is_allowed(),
            "exceeds: nothing stored"
        );
        assert_eq!(store.len(), 0);
        store.sweep(t);
        assert_eq!(store.memory_bytes(), base);
    }

    #[test]
    fn logged_at_reads_the_window_at_a_later_time_and_leaves_the_log_alone() {
        let log = SlidingLog::new(3, Duration::from_secs(1)).unwrap();
        let store = LogStore::new(log, StoreConfig::with_max_keys(100));
        let t = Timestamp::from_secs(10);
        store.check("a", t, 2);
        store.check("a", Timestamp::from_millis(10_500), 1);
        let later = Timestamp::from_millis(11_200);
        assert_eq!(store.logged_at("a", later), 1, "the entry at 10 s has left");
        assert_eq!(
            store.logged_at("b", later),
            0,
            "an absent key holds nothing"
        );
        assert_eq!(store.peek("a"), 3, "peek stays as of the last decision");
        assert_eq!(store.len(), 1);
        // The next decision agrees: 1 logged, room for 2.
        assert_eq!(store.check("a", later, 2).remaining(), 0);
    }

    #[test]
    fn entries_past_the_bound_are_merged_and_never_admit_more() {
        let log = SlidingLog::new(1000, Duration::from_secs(60)).unwrap();
        let config = StoreConfig {
            max_keys: 16,
            shards: 1,
            max_log_entries: 64,
        };
        let store = LogStore::new(log, config);
        assert_eq!(store.max_entries(), 64);
        let mut admitted = 0;
        for ms in 0..1000 {
            if store
                .check("k", Timestamp::from_millis(10_000 + ms), 1)
                .is_allowed()
            {
                admitted += 1;
            }
            assert!(store.entries() <= 64, "{} entries", store.entries());
        }
        assert_eq!(admitted, 1000, "within the limit every request passes");
        assert_eq!(store.peek("k"), 1000, "merging keeps the total");
        assert!(
            !store
                .check("k", Timestamp::from_millis(11_000), 1)
                .is_allowed(),
            "at the limit: still denied"
        );
        // The exact log frees the first request's unit at 70.000 s; merged, no earlier.
        assert!(
            !store
                .check("k", Timestamp::from_millis(69_999), 1)
                .is_allowed()
        );
    }
}
