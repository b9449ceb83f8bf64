//! The leases one instance holds, by counter: requests answered from them without a Redis call, refilled after exact decisions.
//!
//! [`LeaseBook`] is what a service (or a proxy) keeps beside its
//! [`RedisStore`]. A request goes like this:
//!
//! 1. [`LeaseBook::try_local`]: when every counter of the request has a
//!    usable lease covering its hits (a give-back: a lease that spent at
//!    least as much), the whole request is decided from the leases, under
//!    one lock, all or nothing. No Redis call; this keeps working while
//!    Redis is down.
//! 2. Otherwise the whole request goes to Redis exactly (`check.lua`), and
//!    [`LeaseBook::after_exact`] records the demand of what it admitted and
//!    says which counters are worth a lease now ([`GrantAsk`]).
//! 3. [`LeaseBook::refill`] asks Redis for those leases (one `lease.lua`
//!    call per counter, at most one in flight per counter) and installs them.
//!    A lease that fell to an eighth of its grant is refilled the same way
//!    from step 1, before it runs out, so the requests in flight while the
//!    grant is on its way are still answered locally.
//!
//! [`LeaseBook::return_all`] gives every lease back (reload, shutdown).
//! The book holds at most `max_keys` counters; the least recently used one
//! is dropped when it is full, and its lease returned.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use lru::LruCache;
use parking_lot::Mutex;
use tollgate_core::lease::{LeaseLedger, Leasing, Return};
use tollgate_core::{AnyAlgorithm, Decision, Timestamp};
use tollgate_store::Counter;

use crate::RedisStore;

/// Lease calls (grants and returns) run at most this many at a time.
const CONCURRENT_LEASE_CALLS: usize = 32;

/// One counter's ledger and what is needed to call Redis about it.
#[derive(Debug)]
struct Entry {
    ledger: LeaseLedger,
    tag: u64,
    /// A grant is in flight; no second one is asked for.
    granting: bool,
}

/// A lease to ask Redis for: the counter, its algorithm and the units wanted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantAsk {
    key: Vec<u8>,
    tag: u64,
    algorithm: AnyAlgorithm,
    want: u64,
}

/// A lease to give back to Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PendingReturn {
    key: Vec<u8>,
    tag: u64,
    algorithm: AnyAlgorithm,
    lease: Return,
}

/// Counts for `/metrics`.
#[derive(Debug, Default)]
pub struct LeaseStats {
    /// Counters decided from a lease, without a Redis call.
    pub leased_decisions: AtomicU64,
    /// Grant calls made (each one Redis call).
    pub grant_calls: AtomicU64,
    /// Units granted.
    pub granted_units: AtomicU64,
    /// Return calls made (each one Redis call).
    pub return_calls: AtomicU64,
    /// Units Redis took back.
    pub returned_units: AtomicU64,
    /// Lease calls that failed (the counter stays on the exact path).
    pub failed_calls: AtomicU64,
}

/// The leases one instance holds, by counter key (bounded).
#[derive(Debug)]
pub struct LeaseBook {
    entries: Mutex<LruCache<Vec<u8>, Entry>>,
    /// Wakes the requests waiting for a grant in flight.
    grants_done: tokio::sync::Notify,
    divisor: u64,
    stats: LeaseStats,
}

impl LeaseBook {
    /// A book of at most `max_keys` counters (at least 1) whose grants are at most `1/divisor` of what remains.
    pub fn new(divisor: u64, max_keys: usize) -> Self {
        LeaseBook {
            entries: Mutex::new(LruCache::new(
                NonZeroUsize::new(max_keys).unwrap_or(NonZeroUsize::MIN),
            )),
            grants_done: tokio::sync::Notify::new(),
            divisor: divisor.max(1),
            stats: LeaseStats::default(),
        }
    }

    /// Grant and return counts.
    pub fn stats(&self) -> &LeaseStats {
        &self.stats
    }

    /// Counters the book tracks now.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether the book tracks no counter.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Units held in usable leases at `now` (for the outstanding-units gauge).
    pub fn outstanding(&self, now: Timestamp) -> u64 {
        self.entries
            .lock()
            .iter()
            .map(|(_, e)| e.ledger.usable(now))
            .fold(0, u64::saturating_add)
    }

    /// Decides every counter from its lease at `now`, all or nothing; `false` (and nothing changed) when one lease cannot.
    ///
    /// Leases that fell low (an eighth of their grant) are put in `refills`,
    /// one ask per counter at a time, for [`LeaseBook::refill`].
    pub fn try_local(
        &self,
        counters: &[Counter<'_>],
        now: Timestamp,
        decisions: &mut Vec<Decision>,
        refills: &mut Vec<GrantAsk>,
    ) -> bool {
        decisions.clear();
        refills.clear();
        if counters.is_empty() {
            return false;
        }
        let mut entries = self.entries.lock();
        let mut trial: Vec<LeaseLedger> = Vec::with_capacity(counters.len());
        for c in counters {
            // Several counters of one request on one key (rare) share a ledger.
            let earlier = counters
                .iter()
                .zip(&trial)
                .rfind(|(other, _)| other.key == c.key)
                .map(|(_, ledger)| *ledger);
            let ledger = match earlier {
                Some(ledger) => ledger,
                None => match entries.peek(c.key) {
                    Some(entry) if entry.ledger.algorithm() == &c.algorithm => entry.ledger,
                    _ => return false,
                },
            };
            let mut ledger = ledger;
            let decision = if c.give_back {
                if ledger.refund(c.hits, now) != c.hits {
                    return false;
                }
                // The answer to a give-back: the lease as it stands after it.
                match ledger.spend(0, now) {
                    Some(d) => d,
                    None => return false,
                }
            } else {
                match ledger.spend(c.hits, now) {
                    Some(d) => d,
                    None => return false,
                }
            };
            trial.push(ledger);
            decisions.push(decision);
        }
        for (c, ledger) in counters.iter().zip(trial) {
            if let Some(entry) = entries.get_mut(c.key) {
                entry.ledger = ledger;
                if !entry.granting && !c.give_back {
                    let want = entry.ledger.refill_wanted(now);
                    if want > 0 {
                        entry.granting = true;
                        refills.push(GrantAsk {
                            key: c.key.to_vec(),
                            tag: c.tag,
                            algorithm: c.algorithm,
                            want,
                        });
                    }
                }
            }
        }
        self.stats
            .leased_decisions
            .fetch_add(counters.len() as u64, Ordering::Relaxed);
        true
    }

    /// Records what Redis admitted exactly at `now` and returns the leases
    /// worth asking for; `periods[i]` is counter `i`'s lease period (zero:
    /// not leased).
    pub fn after_exact(
        &self,
        counters: &[Counter<'_>],
        periods: &[Duration],
        decisions: &[Decision],
        now: Timestamp,
    ) -> Vec<GrantAsk> {
        let mut asks = Vec::new();
        let mut entries = self.entries.lock();
        for ((c, period), d) in counters.iter().zip(periods).zip(decisions) {
            if period.is_zero()
                || c.give_back
                || c.hits == 0
                || !d.is_allowed()
                || Leasing::of(&c.algorithm).is_none()
            {
                continue;
            }
            let entry = entries.get_or_insert_mut(c.key.to_vec(), || Entry {
                ledger: LeaseLedger::new(c.algorithm, *period, now),
                tag: c.tag,
                granting: false,
            });
            if entry.ledger.algorithm() != &c.algorithm {
                // A reload changed the limit: the old lease is not spent under the new one.
                entry.ledger = LeaseLedger::new(c.algorithm, *period, now);
                entry.granting = false;
            }
            entry.ledger.observe(c.hits, now);
            let want = entry.ledger.wanted(now);
            // Fewer than `divisor` units left: the grant would be 0 units
            // (see `grant_units`), so asking would only cost a call.
            if want > 0
                && !entry.granting
                && d.remaining() >= self.divisor
                && entry.ledger.usable(now) < c.hits.max(1)
            {
                entry.granting = true;
                asks.push(GrantAsk {
                    key: c.key.to_vec(),
                    tag: c.tag,
                    algorithm: c.algorithm,
                    want,
                });
            }
        }
        asks
    }

    /// Drops `asks` unasked (Redis is known to be down): their counters may ask again later.
    pub fn cancel(&self, asks: Vec<GrantAsk>) {
        {
            let mut entries = self.entries.lock();
            for ask in asks {
                if let Some(entry) = entries.get_mut(&ask.key) {
                    entry.granting = false;
                }
            }
        }
        self.grants_done.notify_waiters();
    }

    /// Waits, at most `limit`, for the grants in flight to land when one
    /// of them is for a counter of `counters`; `false` (at once) when none is.
    ///
    /// The requests that find a busy key's lease spent while its next grant
    /// is on the way wait for it instead of each going to Redis.
    pub async fn wait_for_grant(&self, counters: &[Counter<'_>], limit: Duration) -> bool {
        let landed = self.grants_done.notified();
        tokio::pin!(landed);
        // Registered before looking, so a grant landing in between is not missed.
        landed.as_mut().enable();
        let pending = {
            let entries = self.entries.lock();
            counters
                .iter()
                .any(|c| !c.give_back && entries.peek(c.key).is_some_and(|e| e.granting))
        };
        if pending {
            let _ = tokio::time::timeout(limit, landed).await;
        }
        pending
    }

    /// Asks Redis for the leases in `asks` (sent at `sent`) and installs them.
    pub async fn refill(&self, store: &RedisStore, asks: Vec<GrantAsk>, sent: Timestamp) {
        let divisor = self.divisor;
        let answers: Vec<_> = futures_util::stream::iter(asks)
            .map(|ask| async move {
                let counter = counter_of(&ask.key, ask.tag, ask.algorithm);
                let grant = store.grant_lease(&counter, ask.want, divisor).await;
                (ask, grant)
            })
            .buffer_unordered(CONCURRENT_LEASE_CALLS)
            .collect()
            .await;
        let mut returns = Vec::new();
        {
            let mut entries = self.entries.lock();
            for (ask, grant) in answers {
                self.stats.grant_calls.fetch_add(1, Ordering::Relaxed);
                let Some(entry) = entries.get_mut(&ask.key) else {
                    // Evicted meanwhile: whatever was granted goes back.
                    if let Ok(grant) = grant
                        && grant.units > 0
                    {
                        returns.push(PendingReturn {
                            key: ask.key,
                            tag: ask.tag,
                            algorithm: ask.algorithm,
                            lease: Return {
                                units: grant.units,
                                token: grant.token,
                            },
                        });
                    }
                    continue;
                };
                entry.granting = false;
                let grant = match grant {
                    Ok(grant) => grant,
                    Err(e) => {
                        self.stats.failed_calls.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(error = %e, "a lease grant failed");
                        continue;
                    }
                };
                self.stats
                    .granted_units
                    .fetch_add(grant.units, Ordering::Relaxed);
                if entry.ledger.algorithm() != &ask.algorithm {
                    continue;
                }
                if let Some(old) = entry.ledger.install(grant, sent) {
                    returns.push(PendingReturn {
                        key: ask.key,
                        tag: entry.tag,
                        algorithm: ask.algorithm,
                        lease: old,
                    });
                }
            }
        }
        self.grants_done.notify_waiters();
        self.give_back(store, returns).await;
    }

    /// Ends every lease at `now` and gives the unused units back to Redis;
    /// returns how many units Redis took back.
    ///
    /// For a reload (limits may change) and a graceful shutdown. Counters
    /// keep their observed demand.
    pub async fn return_all(&self, store: &RedisStore, now: Timestamp) -> u64 {
        let returns: Vec<PendingReturn> = {
            let mut entries = self.entries.lock();
            entries
                .iter_mut()
                .filter_map(|(key, entry)| {
                    let lease = entry.ledger.take_return(now)?;
                    Some(PendingReturn {
                        key: key.clone(),
                        tag: entry.tag,
                        algorithm: *entry.ledger.algorithm(),
                        lease,
                    })
                })
                .collect()
        };
        self.give_back(store, returns).await
    }

    /// Sends `returns` to Redis; the units it took back.
    async fn give_back(&self, store: &RedisStore, returns: Vec<PendingReturn>) -> u64 {
        let taken: Vec<u64> = futures_util::stream::iter(returns)
            .map(|r| async move {
                let counter = counter_of(&r.key, r.tag, r.algorithm);
                store.return_lease(&counter, r.lease).await
            })
            .buffer_unordered(CONCURRENT_LEASE_CALLS)
            .map(|answer| {
                self.stats.return_calls.fetch_add(1, Ordering::Relaxed);
                answer.unwrap_or_else(|e| {
                    self.stats.failed_calls.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "a lease return failed; its units run out with time");
                    0
                })
            })
            .collect()
            .await;
        let units = taken.into_iter().fold(0, u64::saturating_add);
        self.stats
            .returned_units
            .fetch_add(units, Ordering::Relaxed);
        units
    }
}

/// The counter a lease call is about (its hits are not used).
fn counter_of(key: &[u8], tag: u64, algorithm: AnyAlgorithm) -> Counter<'_> {
    Counter {
        group: 0,
        key,
        tag,
        algorithm,
        hits: 0,
        give_back: false,
        phase_ns: 0,
    }
}
