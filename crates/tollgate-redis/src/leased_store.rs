//! [`LeasedStore`]: a [`RedisStore`] with a [`LeaseBook`] in front, as one [`CounterStore`] an app's middleware can use.
//!
//! The leased mode of `tollgate serve` for any `CounterStore` user: a
//! request every counter of which is covered by a lease this process holds
//! is decided locally, without a Redis call; any other goes to Redis
//! exactly, and a counter that keeps being admitted asks for a lease of
//! its budget (at most `1/divisor` of what remains, the divisor being
//! `2 × instances` for [`LeasePolicy::for_fleet`]). Units come out of the
//! counter's Redis budget when granted, so a fleet of processes, each with
//! its own `LeasedStore` on one Redis, never admits more than the limit
//! together; what a process does not spend stays unusable by the others
//! until its lease ends or is given back ([`LeasedStore::return_leases`],
//! at shutdown).
//!
//! `tollgate serve` adds a circuit breaker and the quick-deny cache around
//! the same [`LeaseBook`] calls; this store has neither: a failed Redis
//! call is the batch's error, for the caller's own store-error policy.

use std::time::Duration;

use tollgate_core::lease::LeasePolicy;
use tollgate_core::{Decision, Timestamp};
use tollgate_store::{Counter, CounterStore, StoreError};

use crate::{LeaseBook, RedisStore};

/// The rule generation of every call: a `LeasedStore` is never reloaded.
const GENERATION: u64 = 0;

/// A [`RedisStore`] whose counters are spent from leases when it can (see the module's description).
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tollgate_core::lease::LeasePolicy;
/// use tollgate_redis::{LeasedStore, RedisStore};
///
/// let redis = RedisStore::connect("redis://127.0.0.1:6379", Duration::from_millis(50)).await?;
/// // Four replicas of the app; a lease lasts about one second of its counter's traffic.
/// let store = LeasedStore::new(redis, LeasePolicy::for_fleet(Duration::from_secs(1), 4), 10_000);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeasedStore {
    redis: RedisStore,
    book: LeaseBook,
    period: Duration,
}

impl LeasedStore {
    /// Leases of `policy`'s period and divisor over `redis`, for at most
    /// `max_keys` counters at once (the least recently used one's lease is
    /// given back when one more is needed).
    pub fn new(redis: RedisStore, policy: LeasePolicy, max_keys: usize) -> Self {
        LeasedStore {
            book: LeaseBook::new(policy.divisor, max_keys),
            period: policy.period,
            redis,
        }
    }

    /// The leases held now, with their grant and return counts.
    pub fn book(&self) -> &LeaseBook {
        &self.book
    }

    /// Gives every lease back to Redis (a graceful shutdown); the units Redis took back.
    pub async fn return_leases(&self, now: Timestamp) -> u64 {
        self.book.return_all(&self.redis, now).await
    }
}

impl CounterStore for LeasedStore {
    /// Decides the batch from this process's leases when they cover every
    /// counter, else in Redis (then asking for leases of the counters it
    /// admitted). `now` is this process's clock, which leases are spent
    /// by; Redis decides at its own `TIME`.
    ///
    /// # Errors
    ///
    /// The Redis call's error when the batch is not covered by leases and
    /// Redis fails (a failed grant only leaves its counter on the exact path).
    async fn check_batch(
        &self,
        counters: &[Counter<'_>],
        now: Timestamp,
        decisions: &mut Vec<Decision>,
    ) -> Result<(), StoreError> {
        let mut refills = Vec::new();
        // Unlike `tollgate serve`, a request finding its lease spent while the
        // next grant is on the way does not wait for it: it goes to Redis.
        let local = self
            .book
            .try_local(counters, GENERATION, now, decisions, &mut refills);
        if local {
            if !refills.is_empty() {
                self.book.refill(&self.redis, refills, now).await;
            }
            return Ok(());
        }
        self.redis.check_batch(counters, now, decisions).await?;
        let periods = vec![self.period; counters.len()];
        let asks = self
            .book
            .after_exact(counters, &periods, decisions, GENERATION, now);
        if !asks.is_empty() {
            self.book.refill(&self.redis, asks, now).await;
        }
        Ok(())
    }
}
