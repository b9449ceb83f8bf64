//! [`MemoryStore`]: a word store or a log store, chosen at run time from the algorithm.

use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm, Decision, Timestamp};

use crate::config::StoreConfig;
use crate::hashing::KeyHashing;
use crate::key::Key;
use crate::log_store::LogStore;
use crate::word_store::WordStore;

/// Either store, chosen at run time from an [`AnyAlgorithm`].
///
/// One-word algorithms get a lock-free [`WordStore`]; the sliding log gets a
/// [`LogStore`]. Every method forwards to the store inside.
#[derive(Debug)]
pub enum MemoryStore {
    /// For token bucket, GCRA, leaky bucket, fixed window and sliding window counter.
    Word(WordStore<AnyWordAlgorithm>),
    /// For the sliding log.
    Log(LogStore),
}

impl MemoryStore {
    /// An empty store for `algorithm`, sized by `config`.
    pub fn new(algorithm: impl Into<AnyAlgorithm>, config: StoreConfig) -> Self {
        match algorithm.into() {
            AnyAlgorithm::Word(a) => MemoryStore::Word(WordStore::new(a, config)),
            AnyAlgorithm::SlidingLog(a) => MemoryStore::Log(LogStore::new(a, config)),
        }
    }

    /// An empty store for `algorithm` whose key identities are those of every store built with `hashing`.
    pub(crate) fn with_hashing(
        algorithm: impl Into<AnyAlgorithm>,
        config: StoreConfig,
        hashing: KeyHashing,
    ) -> Self {
        match algorithm.into() {
            AnyAlgorithm::Word(a) => MemoryStore::Word(WordStore::with_hashing(a, config, hashing)),
            AnyAlgorithm::SlidingLog(a) => {
                MemoryStore::Log(LogStore::with_hashing(a, config, hashing))
            }
        }
    }

    /// Copies into this store every counter of `from` (a store of another
    /// limit of the same algorithm, built with the same seeds), re-encoded
    /// for this store's algorithm at `now` ([`AnyWordAlgorithm::carry_state`];
    /// a sliding log is copied as it is when the windows match). Returns
    /// how many counters were carried; none when the algorithms differ.
    pub fn carry_from(&self, from: &MemoryStore, now: Timestamp) -> usize {
        match (self, from) {
            (MemoryStore::Word(to), MemoryStore::Word(source))
                if to.hashing() == source.hashing() =>
            {
                let (to_algorithm, from_algorithm) = (*to.algorithm(), *source.algorithm());
                let mut carried = 0;
                for (id, state) in source.live_states() {
                    if let Some(next) = to_algorithm.carry_state(&from_algorithm, state, now) {
                        to.put_state(id, now, next);
                        carried += 1;
                    }
                }
                carried
            }
            (MemoryStore::Log(to), MemoryStore::Log(source))
                if to.hashing() == source.hashing()
                    && to.algorithm().window() == source.algorithm().window() =>
            {
                let logs = source.live_logs();
                let carried = logs.len();
                for (id, log) in logs {
                    to.put_log(id, now, log);
                }
                carried
            }
            _ => 0,
        }
    }

    /// Decides a request costing `cost` for `key` at `now`, consuming if it passes.
    #[inline]
    pub fn check<K: Key + ?Sized>(&self, key: &K, now: Timestamp, cost: u64) -> Decision {
        match self {
            MemoryStore::Word(s) => s.check(key, now, cost),
            MemoryStore::Log(s) => s.check(key, now, cost),
        }
    }

    /// Gives back `amount` units that `key` consumed earlier.
    pub fn refund<K: Key + ?Sized>(&self, key: &K, now: Timestamp, amount: u64) -> Decision {
        match self {
            MemoryStore::Word(s) => s.refund(key, now, amount),
            MemoryStore::Log(s) => s.refund(key, now, amount),
        }
    }

    /// The key's state for displays: the state word, or a log's total (0 when absent).
    pub fn peek<K: Key + ?Sized>(&self, key: &K) -> u64 {
        match self {
            MemoryStore::Word(s) => s.peek(key),
            MemoryStore::Log(s) => s.peek(key),
        }
    }

    /// The key's state for displays at `now`: the state word, or the units a
    /// log holds inside the window ending at `now` (0 when absent). Only reads.
    pub fn peek_at<K: Key + ?Sized>(&self, key: &K, now: Timestamp) -> u64 {
        match self {
            MemoryStore::Word(s) => s.peek(key),
            MemoryStore::Log(s) => s.logged_at(key, now),
        }
    }

    /// Drops every key whose state is fresh at `now`; changes no decision.
    pub fn sweep(&self, now: Timestamp) {
        match self {
            MemoryStore::Word(s) => s.sweep(now),
            MemoryStore::Log(s) => s.sweep(now),
        }
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        match self {
            MemoryStore::Word(s) => s.len(),
            MemoryStore::Log(s) => s.len(),
        }
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the store holds.
    pub fn memory_bytes(&self) -> usize {
        match self {
            MemoryStore::Word(s) => s.memory_bytes(),
            MemoryStore::Log(s) => s.memory_bytes(),
        }
    }

    /// The sliding-log entries the store holds (0 for a word store).
    pub fn log_entries(&self) -> usize {
        match self {
            MemoryStore::Word(_) => 0,
            MemoryStore::Log(s) => s.entries(),
        }
    }

    /// The most keys the store holds at once.
    pub fn max_keys(&self) -> usize {
        match self {
            MemoryStore::Word(s) => s.max_keys(),
            MemoryStore::Log(s) => s.max_keys(),
        }
    }

    /// The algorithm the store decides with.
    pub fn algorithm(&self) -> AnyAlgorithm {
        match self {
            MemoryStore::Word(s) => AnyAlgorithm::Word(*s.algorithm()),
            MemoryStore::Log(s) => AnyAlgorithm::SlidingLog(*s.algorithm()),
        }
    }
}
