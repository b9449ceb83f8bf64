//! [`CounterStore`]: the one interface every store of counters answers, local or remote.
//!
//! A caller (the RLS engine) hands a store every counter one request touches
//! in one batch. Counters carry a *group* (one descriptor of the request):
//! within a group the decision is all-or-nothing, so a request denied by one
//! limit consumes nothing of the group's other limits. Fixed windows are the
//! exception, as in envoyproxy/ratelimit: they count denied requests, so they
//! keep their hits whatever the group decides.
//!
//! [`MemoryCounters`] is the in-process implementation, one [`MemoryStore`]
//! per algorithm; its batch is synchronous ([`MemoryCounters::check_now`]) and
//! the trait's future is a ready value, so the in-memory path allocates
//! nothing beyond the decisions. A Redis store (crate `tollgate-redis`)
//! implements the same trait with one script call per batch.

use std::collections::HashMap;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use foldhash::fast::FixedState;
use parking_lot::{Mutex, RwLock};
use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm, Decision, Outcome, Timestamp};

use crate::config::StoreConfig;
use crate::hashing::KeyHashing;
use crate::memory_store::MemoryStore;
use crate::retired_stores::RetiredStores;

/// One counter of a batch: which key, under which algorithm, and what to do to it.
#[derive(Clone, Copy, Debug)]
pub struct Counter<'a> {
    /// The all-or-nothing group (one descriptor of the request).
    pub group: u32,
    /// The counter key (the engine's length-prefixed, collision-free bytes).
    pub key: &'a [u8],
    /// A 64-bit hash of the part of the key that a request's counters share
    /// (the descriptor); a clustered store keeps counters with the same tag
    /// on one node.
    pub tag: u64,
    /// The algorithm that decides for this counter.
    pub algorithm: AnyAlgorithm,
    /// Units to consume (0 checks without consuming) or to give back.
    pub hits: u64,
    /// Give `hits` back instead of consuming them.
    pub give_back: bool,
    /// How far ahead of the store's clock this counter decides, in
    /// nanoseconds: a staggered fixed window's offset (0 for all others), so
    /// its windows start at `k·W − phase` instead of on the epoch's `k·W`.
    pub phase_ns: u64,
}

impl Counter<'_> {
    /// The time this counter decides at when the store's clock reads `now`.
    #[inline]
    pub fn at(&self, now: Timestamp) -> Timestamp {
        if self.phase_ns == 0 {
            now
        } else {
            now.saturating_add(std::time::Duration::from_nanos(self.phase_ns))
        }
    }
}

/// Anything that can be read as a [`Counter`], so a caller can hand a store
/// its own records without building a slice of counters first.
pub trait AsCounter {
    /// This record as a counter.
    fn as_counter(&self) -> Counter<'_>;
}

impl AsCounter for Counter<'_> {
    #[inline]
    fn as_counter(&self) -> Counter<'_> {
        *self
    }
}

/// Why a store could not answer a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The store did not answer within the per-call timeout.
    Timeout(Duration),
    /// The store is unreachable or refused the call (connection refused,
    /// cluster down, script error); the message says what happened.
    Unavailable(String),
    /// The store is not called at all while its circuit breaker is open.
    CircuitOpen,
    /// The counter cannot be kept by this store; the message says why.
    Unsupported(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout(t) => write!(f, "store call timed out after {t:?}"),
            StoreError::Unavailable(m) => write!(f, "store unavailable: {m}"),
            StoreError::CircuitOpen => f.write_str("store circuit breaker is open"),
            StoreError::Unsupported(m) => write!(f, "counter not supported by the store: {m}"),
        }
    }
}

impl Error for StoreError {}

/// A keeper of counters that decides a whole batch at once.
///
/// `decisions` is cleared and filled with one decision per counter, in
/// order. `now` is the caller's clock; a store with its own clock (Redis
/// `TIME`) ignores it, so that instances with skewed clocks agree.
pub trait CounterStore: Send + Sync {
    /// Decides every counter of `counters`, all-or-nothing within each group.
    fn check_batch(
        &self,
        counters: &[Counter<'_>],
        now: Timestamp,
        decisions: &mut Vec<Decision>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Decides every counter as [`check_batch`](Self::check_batch) does,
    /// without waiting, when this store can (it keeps its counters in
    /// memory); `None`, and nothing counted, when deciding takes a call to
    /// another process (Redis): use `check_batch` then. A caller that can
    /// skip a future for an answer already known (the app middleware) asks
    /// this first. Its counters may carry no tag (0): such a store keeps
    /// every counter in this process and picks no node by it.
    fn check_batch_now(
        &self,
        counters: &[Counter<'_>],
        now: Timestamp,
        decisions: &mut Vec<Decision>,
    ) -> Option<Result<(), StoreError>> {
        let _ = (counters, now, decisions);
        None
    }
}

/// Whether `algorithm` is the fixed window, which counts denied requests.
pub fn counts_denied(algorithm: &AnyAlgorithm) -> bool {
    matches!(
        algorithm,
        AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(_))
    )
}

/// Stores created on first use, by algorithm.
type LazyStores = RwLock<HashMap<AnyAlgorithm, LazyStore>>;

/// A store created on first use, and when a request last used it.
#[derive(Debug)]
struct LazyStore {
    store: Arc<MemoryStore>,
    /// The `now` of the latest request that used it, in nanoseconds.
    last_used: AtomicU64,
}

/// Counters in this process: one [`MemoryStore`] per algorithm.
///
/// The stores of the algorithms named at construction are built up front
/// and read without a lock; any other algorithm (a descriptor's own `limit`)
/// gets a store on first use, under a read-mostly lock, bounded in number.
/// When one more is needed and the bound is reached, the store used
/// longest ago is dropped if every key in it is fresh (idle for two of its
/// windows, then swept empty), so dropping it changes no decision;
/// otherwise the new algorithm's requests are *refused*: denied, counted in
/// [`CountersUsage::lazy_refused`], until a store frees up. A flood of
/// distinct limits can thus never reset a counter in use.
///
/// Across reloads ([`with_algorithms`](Self::with_algorithms)) the store
/// of an algorithm no rule uses any more is *retired*, not dropped (see
/// [`RetiredStores`]), and taken back if the algorithm returns, so a rule
/// that drops out of a half-written file and comes back keeps its counts.
#[derive(Debug)]
pub struct MemoryCounters {
    /// The stores of the configured algorithms, found for every counter
    /// (with foldhash: the keys are the configuration's, no caller chooses them).
    stores: HashMap<AnyAlgorithm, Arc<MemoryStore>, FixedState>,
    lazy_stores: Arc<LazyStores>,
    lazy_config: StoreConfig,
    max_lazy_stores: usize,
    lazy_refused: Arc<AtomicU64>,
    retired: Arc<Mutex<RetiredStores>>,
    /// The seeds of every rule store, so a counter can move between them.
    hashing: KeyHashing,
}

/// What a group of stores holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoresUsage {
    /// How many stores.
    pub stores: usize,
    /// The keys they hold.
    pub keys: usize,
    /// The bytes they hold ([`MemoryStore::memory_bytes`]).
    pub bytes: usize,
    /// How many of them are sliding-log stores.
    pub log_stores: usize,
    /// The sliding-log entries they hold.
    pub log_entries: usize,
}

impl StoresUsage {
    fn add(&mut self, store: &MemoryStore) {
        self.stores += 1;
        self.keys += store.len();
        self.bytes += store.memory_bytes();
        self.log_stores += usize::from(matches!(store, MemoryStore::Log(_)));
        self.log_entries += store.log_entries();
    }
}

/// What [`MemoryCounters`] holds now, for gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountersUsage {
    /// The stores built up front (one per algorithm of the rules).
    pub stores: StoresUsage,
    /// The stores created on demand (descriptor `limit` overrides).
    pub lazy: StoresUsage,
    /// The stores kept after a reload dropped their algorithm.
    pub retired: StoresUsage,
    /// Requests denied because the bound on stores created on demand was reached.
    pub lazy_refused: u64,
}

impl MemoryCounters {
    /// Stores for `algorithms` sized by `config`; others created on demand
    /// sized by `lazy_config`, at most `max_lazy_stores` of them (when one
    /// more is needed, the one used longest ago is dropped and starts again).
    pub fn new(
        algorithms: impl IntoIterator<Item = AnyAlgorithm>,
        config: StoreConfig,
        lazy_config: StoreConfig,
        max_lazy_stores: usize,
    ) -> Self {
        let hashing = KeyHashing::random();
        let stores = algorithms
            .into_iter()
            .map(|a| (a, Arc::new(MemoryStore::with_hashing(a, config, hashing))))
            .collect();
        MemoryCounters {
            stores,
            lazy_stores: Arc::new(RwLock::new(HashMap::new())),
            lazy_config,
            max_lazy_stores,
            lazy_refused: Arc::new(AtomicU64::new(0)),
            retired: Arc::new(Mutex::new(RetiredStores::new(0))),
            hashing,
        }
    }

    /// These counters, keeping up to `max_retired_stores` stores that a
    /// reload left without a rule (0, the default of [`new`](Self::new),
    /// keeps none).
    pub fn with_max_retired_stores(self, max_retired_stores: usize) -> Self {
        MemoryCounters {
            retired: Arc::new(Mutex::new(RetiredStores::new(max_retired_stores))),
            ..self
        }
    }

    /// Counters for `algorithms` that keep this one's stores for every
    /// algorithm both name (and its lazy stores), so unchanged limits keep counting.
    ///
    /// A store of this one that `algorithms` does not name is retired; an
    /// algorithm without a store here takes its retired store back if one
    /// is kept, else gets an empty one. Retired stores whose keys are all
    /// fresh at `now` are dropped, and the oldest beyond the bound.
    pub fn with_algorithms(
        &self,
        algorithms: impl IntoIterator<Item = AnyAlgorithm>,
        config: StoreConfig,
        now: Timestamp,
    ) -> Self {
        self.with_algorithms_carrying(algorithms, &[], config, now)
    }

    /// [`with_algorithms`](Self::with_algorithms), also carrying counts
    /// across limit changes: for each `(from, to)` in `carries` (a limit that
    /// was `from` and is now `to`, same algorithm and window), every counter
    /// of the store for `from` (in service or retired) is copied into the
    /// store for `to`, re-encoded for `to` ([`MemoryStore::carry_from`]), so
    /// a client that used 300 of a limit lowered to 100 is over it at once.
    /// A copy never lowers a count, so several `from` of one `to` leave each
    /// counter at the most any of them used.
    ///
    /// Counters of other rules that share the `from` store are copied too;
    /// they are never read under `to` and are dropped once fresh. A request
    /// decided by the running counters while they are copied may be missed.
    pub fn with_algorithms_carrying(
        &self,
        algorithms: impl IntoIterator<Item = AnyAlgorithm>,
        carries: &[(AnyAlgorithm, AnyAlgorithm)],
        config: StoreConfig,
        now: Timestamp,
    ) -> Self {
        let mut retired = self.retired.lock();
        let stores: HashMap<AnyAlgorithm, Arc<MemoryStore>, FixedState> = algorithms
            .into_iter()
            .map(|a| {
                let store = self
                    .stores
                    .get(&a)
                    .cloned()
                    .or_else(|| retired.take(&a))
                    .unwrap_or_else(|| {
                        Arc::new(MemoryStore::with_hashing(a, config, self.hashing))
                    });
                (a, store)
            })
            .collect();
        for (from, to) in carries {
            let source = self
                .stores
                .get(from)
                .or_else(|| stores.get(from))
                .cloned()
                .or_else(|| retired.get(from));
            if let (Some(source), Some(target)) = (source, stores.get(to))
                && from != to
            {
                target.carry_from(&source, now);
            }
        }
        for (algorithm, store) in &self.stores {
            if !stores.contains_key(algorithm) {
                retired.retire(*algorithm, Arc::clone(store));
            }
        }
        retired.tidy(now);
        drop(retired);
        MemoryCounters {
            stores,
            lazy_stores: Arc::clone(&self.lazy_stores),
            lazy_config: self.lazy_config,
            max_lazy_stores: self.max_lazy_stores,
            lazy_refused: Arc::clone(&self.lazy_refused),
            retired: Arc::clone(&self.retired),
            hashing: self.hashing,
        }
    }

    /// What the stores hold now: stores, keys, bytes and log entries of
    /// each kind, and the requests refused for want of a store. Reads every
    /// store's counts (a scrape's work, not a request's).
    pub fn usage(&self) -> CountersUsage {
        let mut usage = CountersUsage {
            lazy_refused: self.lazy_refused.load(Ordering::Relaxed),
            ..CountersUsage::default()
        };
        for store in self.stores.values() {
            usage.stores.add(store);
        }
        for lazy in self.lazy_stores.read().values() {
            usage.lazy.add(&lazy.store);
        }
        for store in self.retired.lock().stores() {
            usage.retired.add(store);
        }
        usage
    }

    /// Whether a store for `algorithm` is in service or retired: a count a reload can still carry.
    pub fn holds_store(&self, algorithm: &AnyAlgorithm) -> bool {
        self.stores.contains_key(algorithm) || self.retired.lock().get(algorithm).is_some()
    }

    /// How many stores a reload left without a rule are kept in case it comes back.
    pub fn retired_store_count(&self) -> usize {
        self.retired.lock().len()
    }

    /// How many stores were built up front (one per distinct algorithm).
    pub fn store_count(&self) -> usize {
        self.stores.len()
    }

    /// How many stores were created on demand.
    pub fn lazy_store_count(&self) -> usize {
        self.lazy_stores.read().len()
    }

    /// Decides a batch now, synchronously: the in-memory fast path.
    ///
    /// Each counter is checked in order; when one of a group denies, what
    /// the others of the group consumed is given back (except fixed
    /// windows). Between the check and the give-back another caller may see
    /// the hits as consumed: it errs on the strict side.
    pub fn check_now<T: AsCounter>(
        &self,
        counters: &[T],
        now: Timestamp,
        decisions: &mut Vec<Decision>,
    ) {
        decisions.clear();
        let mut any_denied = false;
        for c in counters {
            let c = c.as_counter();
            let at = c.at(now);
            let decision = self
                .with_store(c.algorithm, now, |store| {
                    if c.give_back {
                        store.refund(c.key, at, c.hits)
                    } else {
                        store.check(c.key, at, c.hits)
                    }
                })
                .unwrap_or_else(|| refused(&c));
            any_denied |= !decision.is_allowed();
            decisions.push(decision);
        }
        if !any_denied {
            return;
        }
        for (i, c) in counters.iter().enumerate() {
            let c = c.as_counter();
            let group_denied = counters
                .iter()
                .zip(decisions.iter())
                .any(|(o, d)| o.as_counter().group == c.group && !d.is_allowed());
            if group_denied
                && decisions[i].is_allowed()
                && !c.give_back
                && c.hits > 0
                && !counts_denied(&c.algorithm)
            {
                let _ = self.with_store(c.algorithm, now, |store| {
                    store.refund(c.key, c.at(now), c.hits)
                });
            }
        }
    }

    /// Runs `f` on the store for `algorithm`, creating one if there is
    /// none; `None` when none can be created (the bound on stores created on
    /// demand is reached and none of them is all fresh).
    #[inline]
    fn with_store<R>(
        &self,
        algorithm: AnyAlgorithm,
        now: Timestamp,
        f: impl FnOnce(&MemoryStore) -> R,
    ) -> Option<R> {
        match self.stores.get(&algorithm) {
            Some(store) => Some(f(store)),
            None => self.lazy_store(algorithm, now).map(|store| f(&store)),
        }
    }

    /// The store created on demand for `algorithm`, marked used at `now`;
    /// `None` (counted as refused) when the bound is reached and the store
    /// used longest ago still holds a key that is not fresh.
    fn lazy_store(&self, algorithm: AnyAlgorithm, now: Timestamp) -> Option<Arc<MemoryStore>> {
        if let Some(lazy) = self.lazy_stores.read().get(&algorithm) {
            lazy.last_used.fetch_max(now.as_nanos(), Ordering::Relaxed);
            return Some(Arc::clone(&lazy.store));
        }
        let mut stores = self.lazy_stores.write();
        if let Some(lazy) = stores.get(&algorithm) {
            lazy.last_used.fetch_max(now.as_nanos(), Ordering::Relaxed);
            return Some(Arc::clone(&lazy.store));
        }
        if stores.len() >= self.max_lazy_stores.max(1) {
            let least_recent = stores
                .iter()
                .min_by_key(|(_, lazy)| lazy.last_used.load(Ordering::Relaxed))
                .map(|(algorithm, lazy)| (*algorithm, lazy));
            // Idle for two of its windows, every key of any algorithm is fresh;
            // the sweep confirms it before the store goes.
            let all_fresh = least_recent.is_some_and(|(algorithm, lazy)| {
                let idle = now.saturating_since(Timestamp::from_nanos(
                    lazy.last_used.load(Ordering::Relaxed),
                ));
                idle >= algorithm.window().saturating_mul(2) && {
                    lazy.store.sweep(now);
                    lazy.store.is_empty()
                }
            });
            match least_recent {
                Some((algorithm, _)) if all_fresh => {
                    stores.remove(&algorithm);
                }
                _ => {
                    self.lazy_refused.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
        }
        let store = Arc::new(MemoryStore::new(algorithm, self.lazy_config));
        stores.insert(
            algorithm,
            LazyStore {
                store: Arc::clone(&store),
                last_used: AtomicU64::new(now.as_nanos()),
            },
        );
        Some(store)
    }
}

/// The decision for a counter that no store can keep now: a give-back
/// changes nothing, anything else is denied, since admitting it would count
/// it nowhere. The retry-after is one of the algorithm's windows: a hint,
/// since a store frees up only once one in use has gone idle.
fn refused(c: &Counter<'_>) -> Decision {
    let capacity = c.algorithm.capacity();
    if c.give_back {
        return Decision::from_parts(Outcome::Allowed, capacity, capacity, 0, 0);
    }
    let wait = u64::try_from(c.algorithm.window().as_nanos()).unwrap_or(u64::MAX);
    Decision::from_parts(Outcome::Denied, capacity, 0, wait, wait)
}

impl CounterStore for MemoryCounters {
    fn check_batch(
        &self,
        counters: &[Counter<'_>],
        now: Timestamp,
        decisions: &mut Vec<Decision>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.check_now(counters, now, decisions);
        std::future::ready(Ok(()))
    }

    fn check_batch_now(
        &self,
        counters: &[Counter<'_>],
        now: Timestamp,
        decisions: &mut Vec<Decision>,
    ) -> Option<Result<(), StoreError>> {
        self.check_now(counters, now, decisions);
        Some(Ok(()))
    }
}
