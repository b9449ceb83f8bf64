//! [`Limiter`]: a store and the clock it takes time from.

use tollgate_core::{AnyAlgorithm, Clock, Decision};

use crate::config::StoreConfig;
use crate::key::Key;
use crate::memory_store::MemoryStore;

/// A store plus a clock: what an application uses.
///
/// Each call reads the clock once and hands the time to the store, so the
/// store itself never reads a clock and tests can drive it with a
/// [`ManualClock`](tollgate_core::ManualClock).
#[derive(Debug)]
pub struct Limiter<C: Clock> {
    store: MemoryStore,
    clock: C,
}

impl<C: Clock> Limiter<C> {
    /// A limiter applying `algorithm` per key, sized by `config`, timed by `clock`.
    pub fn new(algorithm: impl Into<AnyAlgorithm>, config: StoreConfig, clock: C) -> Self {
        Limiter {
            store: MemoryStore::new(algorithm, config),
            clock,
        }
    }

    /// Decides a request costing `cost` for `key` now, consuming if it passes.
    #[inline]
    pub fn check<K: Key + ?Sized>(&self, key: &K, cost: u64) -> Decision {
        self.store.check(key, self.clock.now(), cost)
    }

    /// Gives back `amount` units that `key` consumed earlier.
    pub fn refund<K: Key + ?Sized>(&self, key: &K, amount: u64) -> Decision {
        self.store.refund(key, self.clock.now(), amount)
    }

    /// Drops every key that is fresh now, returning its memory; changes no decision.
    pub fn sweep(&self) {
        self.store.sweep(self.clock.now());
    }

    /// The store inside.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The clock the limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}
