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
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{Gcra, ManualClock, Timestamp};
/// use tollgate_store::{Limiter, StoreConfig};
///
/// // 5 logins per minute per user, at most 100 000 users remembered.
/// let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
/// let logins = Limiter::new(
///     Gcra::new(5, Duration::from_secs(60), 5).unwrap(),
///     StoreConfig::with_max_keys(100_000),
///     clock.clone(),
/// );
/// for _ in 0..5 {
///     assert!(logins.check("alice", 1).is_allowed());
/// }
/// let sixth = logins.check("alice", 1);
/// assert!(!sixth.is_allowed());
/// assert_eq!(sixth.retry_after(), Some(Duration::from_secs(12)));
/// assert!(logins.check("bob", 1).is_allowed());
/// // Twelve seconds on, one more of alice's fits.
/// clock.advance(Duration::from_secs(12));
/// assert!(logins.check("alice", 1).is_allowed());
/// ```
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
