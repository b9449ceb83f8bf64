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
//! [`LeaseBook::return_all`] gives every lease back (shutdown);
//! [`LeaseBook::retire`] ends every lease at once for a reload.
//!
//! # Generations (reload)
//!
//! The book counts rule generations. A reload calls [`LeaseBook::retire`],
//! which, under the book's lock, takes every lease out (their unused units
//! go back to Redis afterwards) and starts the next generation. Every call
//! names the generation its rules belong to (an engine keeps the one it was
//! built in): a request of an earlier generation is never answered from a
//! lease and asks for none, and a grant asked for in an earlier generation
//! is given straight back when it lands, never installed. So a lease
//! granted under a limit is spent only by requests planned under the rules
//! it was granted under, and none after the reload that replaced them.
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

/// A lease to ask Redis for: the counter, its algorithm, the units wanted and the generation asking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantAsk {
    key: Vec<u8>,
    tag: u64,
    algorithm: AnyAlgorithm,
    want: u64,
    generation: u64,
}

/// The leases a reload took out of the book, still to be given back to Redis ([`LeaseBook::give_back_retired`]).
#[derive(Debug, Default)]
#[must_use = "retired leases hold units until they are given back"]
pub struct Retired {
    returns: Vec<PendingReturn>,
    /// The generation the book is in now.
    pub generation: u64,
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
    /// Units a schedule's lease still held when its next grant replaced it:
    /// left to decay, never spent (the under-admission of a refill).
    pub stranded_units: AtomicU64,
}

/// The leases one instance holds, by counter key (bounded).
#[derive(Debug)]
pub struct LeaseBook {
    entries: Mutex<LruCache<Vec<u8>, Entry>>,
    /// The rule generation leases are taken and spent in; changed only
    /// under the `entries` lock, by [`LeaseBook::retire`].
    generation: AtomicU64,
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
            generation: AtomicU64::new(0),
            grants_done: tokio::sync::Notify::new(),
            divisor: divisor.max(1),
            stats: LeaseStats::default(),
        }
    }

    /// Grant and return counts.
    pub fn stats(&self) -> &LeaseStats {
        &self.stats
    }

    /// The rule generation the book is in (see the module's "Generations").
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Counters the book tracks now.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// The most counters the book tracks (`max_keys` of [`LeaseBook::new`], at least 1).
    pub fn max_keys(&self) -> usize {
        self.entries.lock().cap().get()
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

    /// Decides every counter of a request of rule `generation` from its
    /// lease at `now`, all or nothing; `false` (and nothing changed) when
    /// one lease cannot, or `generation` is not the book's.
    ///
    /// Leases that fell low (an eighth of their grant) are put in `refills`,
    /// one ask per counter at a time, for [`LeaseBook::refill`].
    pub fn try_local(
        &self,
        counters: &[Counter<'_>],
        generation: u64,
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
        if generation != self.generation() {
            return false;
        }
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
                            generation,
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

    /// Records what Redis admitted exactly at `now` for a request of rule
    /// `generation` and returns the leases worth asking for; `periods[i]` is
    /// counter `i`'s lease period (zero: not leased). Nothing when
    /// `generation` is not the book's.
    pub fn after_exact(
        &self,
        counters: &[Counter<'_>],
        periods: &[Duration],
        decisions: &[Decision],
        generation: u64,
        now: Timestamp,
    ) -> Vec<GrantAsk> {
        let mut asks = Vec::new();
        if periods.iter().all(Duration::is_zero) {
            // No counter of the request is leased: nothing to ask, no lock taken.
            return asks;
        }
        let mut entries = self.entries.lock();
        if generation != self.generation() {
            return asks;
        }
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
                    generation,
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
            let generation = self.generation();
            for (ask, grant) in answers {
                self.stats.grant_calls.fetch_add(1, Ordering::Relaxed);
                let current = ask.generation == generation;
                if current && let Some(entry) = entries.get_mut(&ask.key) {
                    entry.granting = false;
                }
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
                let entry = entries
                    .get_mut(&ask.key)
                    .filter(|e| current && e.ledger.algorithm() == &ask.algorithm);
                let Some(entry) = entry else {
                    // Evicted meanwhile, asked before a reload, or under a
                    // limit since changed: never installed, the units go back.
                    if grant.units > 0 {
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
                // A schedule's next grant replaces its lease (see
                // `tollgate_core::lease`): what the old one still held is
                // left to decay.
                if grant.units > 0
                    && matches!(
                        Leasing::of(entry.ledger.algorithm()),
                        Some(Leasing::Schedule { .. })
                    )
                {
                    self.stats
                        .stranded_units
                        .fetch_add(entry.ledger.usable(sent), Ordering::Relaxed);
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
    /// For a graceful shutdown (a reload uses [`LeaseBook::retire`]).
    /// Counters keep their observed demand.
    pub async fn return_all(&self, store: &RedisStore, now: Timestamp) -> u64 {
        let returns = self.take_leases(now);
        self.give_back(store, returns).await
    }

    /// For a reload: ends every lease at `now` and starts the next rule
    /// generation, at once and under one lock, so from here on no lease
    /// taken before is spent and no grant asked before is installed (see
    /// the module's "Generations"). The unused units are for
    /// [`LeaseBook::give_back_retired`]. Counters keep their observed demand.
    pub fn retire(&self, now: Timestamp) -> Retired {
        let mut entries = self.entries.lock();
        let returns = take_leases_of(&mut entries, now);
        for (_, entry) in entries.iter_mut() {
            entry.granting = false;
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        drop(entries);
        // Requests waiting for a grant of the old generation stop waiting.
        self.grants_done.notify_waiters();
        Retired {
            returns,
            generation,
        }
    }

    /// Gives the leases a [`LeaseBook::retire`] took out back to Redis; the units it took back.
    pub async fn give_back_retired(&self, store: &RedisStore, retired: Retired) -> u64 {
        self.give_back(store, retired.returns).await
    }

    /// Takes every lease out at `now`: the unused units to give back.
    fn take_leases(&self, now: Timestamp) -> Vec<PendingReturn> {
        take_leases_of(&mut self.entries.lock(), now)
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

/// Takes every lease of `entries` out at `now`: the unused units to give back.
fn take_leases_of(entries: &mut LruCache<Vec<u8>, Entry>, now: Timestamp) -> Vec<PendingReturn> {
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
