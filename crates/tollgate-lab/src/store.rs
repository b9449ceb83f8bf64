//! The stores a scenario decides through: the in-memory store by default, Redis (feature `redis`) behind the same trait.

use std::fmt;

use tollgate_core::share::{Authority, AuthorityPolicy};
use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm, Decision, Timestamp};
use tollgate_store::{MemoryStore, StoreConfig};

use crate::SharesAuthority;

/// One store of keyed state as the simulator sees it: decide a request, read a key's gauge.
///
/// A scenario makes one per lane (or one per sidecar in a fleet) through a
/// [`StoreFactory`]. Keys are the simulated clients' numbers.
pub trait SimulatedStore: Send {
    /// Decides a request costing `cost` for `key` at virtual time `at`, consuming if it passes.
    fn check(&mut self, key: u64, at: Timestamp, cost: u64) -> Decision;

    /// The key's state at `at` in the algorithm's own terms (see [`crate::state_level_meaning`]).
    fn state_level(&mut self, key: u64, at: Timestamp) -> f64;

    /// Decides `requests` (key, time, cost) in order, as many [`SimulatedStore::check`]
    /// calls would, into `decisions` (cleared first).
    ///
    /// A remote store pipelines them (few round trips instead of one each).
    fn check_many(&mut self, requests: &[(u64, Timestamp, u64)], decisions: &mut Vec<Decision>) {
        decisions.clear();
        for &(key, at, cost) in requests {
            decisions.push(self.check(key, at, cost));
        }
    }

    /// Why the store stopped answering, once it has (a remote store's error).
    ///
    /// A scenario stops at the end of the tick in which a store failed and
    /// reports this message; decisions after a failure mean nothing.
    fn failure(&self) -> Option<&str> {
        None
    }
}

/// Makes the stores of a scenario, one per lane or sidecar.
///
/// [`MemoryStores`] is the default; `RedisStores` (feature `redis`) runs the
/// production Lua script on a real Redis.
pub trait StoreFactory: Send + Sync + fmt::Debug {
    /// A fresh, empty store deciding with `algorithm`, for up to `keys` keys.
    fn store(&self, algorithm: AnyAlgorithm, keys: usize) -> Box<dyn SimulatedStore>;

    /// Whether decisions go over the network and block the calling thread (a
    /// Redis store): the runner hands each store a tick at once
    /// ([`SimulatedStore::check_many`]), async callers run the scenario on a
    /// blocking thread, and the lab caps how many calls a run may make.
    fn is_remote(&self) -> bool {
        false
    }

    /// The shares authority of a platform run ([`crate::PlatformScenario::run_on`]),
    /// deciding by `policy`: the core's, in memory, unless the store is remote.
    fn shares_authority(&self, policy: AuthorityPolicy) -> Box<dyn SharesAuthority> {
        Box::new(Authority::<u32>::new(policy))
    }
}

/// Makes real [`MemoryStore`]s: the production in-memory store.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryStores;

impl StoreFactory for MemoryStores {
    fn store(&self, algorithm: AnyAlgorithm, keys: usize) -> Box<dyn SimulatedStore> {
        Box::new(SimulatedMemoryStore {
            store: MemoryStore::new(algorithm, StoreConfig::with_max_keys(keys.max(16))),
            algorithm,
        })
    }
}

/// A [`MemoryStore`] and the algorithm it decides with, for decoding its state.
struct SimulatedMemoryStore {
    store: MemoryStore,
    algorithm: AnyAlgorithm,
}

impl SimulatedStore for SimulatedMemoryStore {
    fn check(&mut self, key: u64, at: Timestamp, cost: u64) -> Decision {
        self.store.check(&key, at, cost)
    }

    fn state_level(&mut self, key: u64, at: Timestamp) -> f64 {
        state_level(&self.algorithm, self.store.peek_at(&key, at), at)
    }
}

/// Decodes a store's state word for a key at `now` into the algorithm's own gauge.
pub(crate) fn state_level(algorithm: &AnyAlgorithm, word: u64, now: Timestamp) -> f64 {
    match algorithm {
        AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(a)) => a.tokens(word, now) as f64,
        AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(a)) => a.available(word, now) as f64,
        AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(a)) => a.queued(word, now) as f64,
        AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(a)) => a.count(word, now) as f64,
        AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(a)) => a.estimate(word, now),
        // A log's word is already the units logged at the time asked.
        AnyAlgorithm::SlidingLog(_) => word as f64,
    }
}
