//! The shared counter store behind the engine: Redis, its circuit breaker and the local fallback.
//!
//! [`RemoteStore`] wraps a [`RedisStore`] with
//!
//! * a [`Breaker`] (`tollgate_core::breaker`'s state machine): after
//!   `threshold` consecutive failed calls it opens and the store is not
//!   called at all (each request goes straight to its rule's
//!   `on_store_error`); after a backoff one request probes the store
//!   (half-open); success closes the breaker, failure opens it again with
//!   the backoff doubled (up to a cap). Calls that started before it opened
//!   and end while it is open change nothing;
//! * the in-process counters used by `on_store_error: local` rules, each
//!   limit divided by the expected number of instances, decided at the
//!   engine's clock (in `serve`, the coarse clock that follows the wall
//!   clock and never goes back, as in-memory counters do);
//! * counts of store errors and fallbacks by policy, for `/metrics`, each
//!   logged at warn at most once per 10 s (with the count left unlogged), so
//!   a limiter answering `on_store_error: allow` is seen running open;
//! * whether the store took its latest call or write probe
//!   (`ratelimit_store_up`): a store out of memory that refuses writes is
//!   down, as a dead one is, for the gauge and `/healthz/store`, and each
//!   change seen by a write probe is logged at warn; `/readyz` and gRPC
//!   health follow it only with [`RemoteOptions::ready_requires_store`]
//!   (otherwise the replica is ready while its rules answer by `on_store_error`);
//! * the lease book and the quick-deny cache ([`QuickDeny`], in
//!   `crate::quick_deny`), which answer without a store call.
//!
//! A store may start unconnected ([`RemoteStore::unconnected`]: Redis was not
//! up when `serve` started): until [`RemoteStore::connected`] hands it the
//! connection, every batch is answered by its rules' `on_store_error`, no
//! lease is taken and the store counts as down. A later
//! [`RemoteStore::connected`] replaces the connection (a master
//! re-resolved through Sentinel after a failover); calls already under way
//! finish on the one they started with.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwapOption;
use std::time::Duration;

use parking_lot::Mutex;

use crate::failure_log::{ANSWERED_WITHOUT_STORE, FAILURE_LOG_INTERVAL, FailureLog, STORE_FAILED};
pub use crate::quick_deny::QuickDeny;
use crate::shares::{SharesBook, SharesOptions};
use tollgate_core::breaker::{BreakerPolicy, BreakerState as CoreBreakerState, CircuitBreaker};
use tollgate_core::lease::LeasePolicy;
use tollgate_core::{Clock, Decision, Timestamp};
use tollgate_redis::{LeaseBook, RedisStore};
use tollgate_rules::StoreErrorPolicy;
use tollgate_store::{Counter, CounterStore, MemoryCounters, StoreConfig, StoreError};

/// Where the store's breaker stands, with its failure count or backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go to the store; `failures` consecutive ones have failed.
    Closed {
        /// Consecutive failures so far.
        failures: u32,
    },
    /// No calls until `until`; the next wait after a failed probe is `2 × backoff`.
    Open {
        /// When a probe may go out.
        until: Timestamp,
        /// The wait that led to `until`.
        backoff: Duration,
    },
    /// One probe is out; everyone else still falls back.
    HalfOpen {
        /// The wait before this probe.
        backoff: Duration,
    },
}

/// Where a batch's decisions came from (see [`RemoteStore::check_batch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecidedBy {
    /// Redis, this instance's leases or its shares: the counters were counted.
    Counted,
    /// The quick-deny cache: every counter was a known denial, nothing was counted (upstream's local cache).
    QuickDeny,
}

/// The store's circuit breaker: the core's [`CircuitBreaker`] state machine with one probe at a time, under a mutex.
///
/// Calls record their outcome without keeping their admission: an outcome
/// counts for the breaker's current state (a failure while closed, the
/// probe's result while half-open) and is ignored while the breaker is
/// open, since no call was let through then.
#[derive(Debug)]
pub struct Breaker {
    machine: Mutex<CircuitBreaker>,
}

impl Breaker {
    /// Opens after `threshold` consecutive failures, first for
    /// `first_backoff`, doubling per failed probe up to `max_backoff`.
    pub fn new(threshold: u32, first_backoff: Duration, max_backoff: Duration) -> Self {
        Breaker {
            machine: Mutex::new(CircuitBreaker::new(BreakerPolicy {
                failure_threshold: threshold,
                open_duration: first_backoff,
                max_open_duration: max_backoff,
                half_open_probes: 1,
            })),
        }
    }

    /// Whether a call may go to the store at `now` (a probe when half-opening).
    pub fn admit(&self, now: Timestamp) -> bool {
        self.machine.lock().acquire(now).is_ok()
    }

    /// Records a call that succeeded: a closed breaker forgets its failures, a half-open one closes.
    pub fn on_success(&self) {
        let mut machine = self.machine.lock();
        if let Some(admission) = machine.current_admission() {
            machine.record_success(admission);
        }
    }

    /// Records a call that failed at `now`.
    pub fn on_failure(&self, now: Timestamp) {
        let mut machine = self.machine.lock();
        if let Some(admission) = machine.current_admission() {
            machine.record_failure(admission, now);
        }
    }

    /// Where the breaker stands now.
    pub fn state(&self) -> BreakerState {
        let machine = self.machine.lock();
        match machine.state() {
            CoreBreakerState::Closed => BreakerState::Closed {
                failures: machine.consecutive_failures(),
            },
            CoreBreakerState::Open => BreakerState::Open {
                until: machine.open_until(),
                backoff: machine.open_for(),
            },
            CoreBreakerState::HalfOpen => BreakerState::HalfOpen {
                backoff: machine.open_for(),
            },
        }
    }

    /// 0 closed, 1 open, 2 half-open (the `/metrics` gauge).
    pub fn state_code(&self) -> i64 {
        match self.state() {
            BreakerState::Closed { .. } => 0,
            BreakerState::Open { .. } => 1,
            BreakerState::HalfOpen { .. } => 2,
        }
    }
}

/// The default bound of the lease book (`--lease-max-keys`).
pub const DEFAULT_LEASE_MAX_KEYS: usize = 65_536;

/// How the shared store is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteOptions {
    /// Instances sharing the store; `local` fallbacks allow limit ÷ this.
    pub expected_instances: u64,
    /// Consecutive failures that open the breaker.
    pub breaker_threshold: u32,
    /// The first open period; doubles per failed probe.
    pub breaker_backoff: Duration,
    /// The longest open period.
    pub breaker_max_backoff: Duration,
    /// Size of the fallback counters.
    pub fallback_config: StoreConfig,
    /// Keys the quick-deny cache may hold (0 turns it off).
    pub quick_deny_keys: usize,
    /// The lease period of rules without their own `lease` (zero: exact, one call per request).
    pub lease_period: Duration,
    /// Counters the lease book may track (each about 200 bytes).
    pub lease_max_keys: usize,
    /// Whether this replica is ready only while the store takes writes
    /// (`--ready-requires-store`); by default it is ready while its rules
    /// answer by `on_store_error`.
    pub ready_requires_store: bool,
    /// How `shares: true` rules run (their holder's key bound among them).
    pub shares: SharesOptions,
    /// Fixed-window rules count in envoyproxy/ratelimit's own Redis keys,
    /// with its arithmetic (`--redis-key-format upstream`), where a rule can
    /// ([`tollgate_redis::upstream_key`]).
    pub upstream_keys: bool,
    /// The most seconds added at random to an upstream key's TTL
    /// (upstream's `EXPIRATION_JITTER_MAX_SECONDS`), applied by whoever
    /// connects the [`RedisStore`] ([`RedisStore::with_expiration_jitter`]).
    pub expiration_jitter_max_s: u64,
}

impl Default for RemoteOptions {
    /// One instance; open after 3 failures for 100 ms, doubling up to 1 s; no leases.
    fn default() -> Self {
        RemoteOptions {
            expected_instances: 1,
            breaker_threshold: 3,
            breaker_backoff: Duration::from_millis(100),
            breaker_max_backoff: Duration::from_secs(1),
            fallback_config: StoreConfig::with_max_keys(100_000),
            quick_deny_keys: 65_536,
            lease_period: Duration::ZERO,
            lease_max_keys: DEFAULT_LEASE_MAX_KEYS,
            ready_requires_store: false,
            shares: SharesOptions::default(),
            upstream_keys: false,
            expiration_jitter_max_s: tollgate_redis::DEFAULT_EXPIRATION_JITTER_MAX_S,
        }
    }
}

/// Counts for `/metrics`.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Batches the store failed (timeouts, connection errors, script errors).
    pub errors: AtomicU64,
    /// Batches not sent because the breaker was open.
    pub short_circuited: AtomicU64,
    /// Descriptors answered by `on_store_error: allow`.
    pub fallback_allow: AtomicU64,
    /// Descriptors answered by `on_store_error: deny`.
    pub fallback_deny: AtomicU64,
    /// Descriptors answered by `on_store_error: local`.
    pub fallback_local: AtomicU64,
    /// Batches answered by the quick-deny cache, without a store call.
    pub quick_denied: AtomicU64,
    /// Batches answered from leases held by this instance, without a store call.
    pub leased: AtomicU64,
    /// Batches decided by the store's check script (one call each, or one per slot on a cluster).
    pub exact: AtomicU64,
    /// Batches answered by their rules' `on_store_error` (the store failed or the breaker was open).
    pub fallback: AtomicU64,
    /// Connections handed over ([`RemoteStore::connected`]): the first and each new one replacing it.
    pub connections: AtomicU64,
    /// Connections workers opened of their own on the connections replaced so far.
    pub replaced_worker_connections: AtomicU64,
}

/// A random holder id for this process (a new one each start: a restarted
/// instance registers afresh while its old registration runs out).
fn random_holder_id() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::process::id())
}

/// Redis behind a breaker, with the local fallback counters.
#[derive(Debug)]
pub struct RemoteStore {
    /// Empty until the first connection (see [`RemoteStore::unconnected`]).
    redis: ArcSwapOption<RedisStore>,
    /// How long a lease grant may be waited for (the store's call timeout).
    timeout: Duration,
    breaker: Breaker,
    fallback: MemoryCounters,
    quick_deny: QuickDeny,
    leases: LeaseBook,
    /// This instance's shares, made with each connection (a new connection,
    /// after a failover, starts a new holder: the old one's shares lapse at
    /// the authority after their TTL, never used twice).
    shares: ArcSwapOption<SharesBook>,
    /// The time of the latest decision (nanoseconds), for the lease gauge.
    last_decision: AtomicU64,
    options: RemoteOptions,
    stats: StoreStats,
    /// Store failures logged at warn, rate-limited.
    failures: FailureLog,
    /// Descriptors answered by `on_store_error`, logged at warn, rate-limited.
    fallbacks: FailureLog,
    /// Whether the latest store call or write probe succeeded.
    up: AtomicBool,
    /// Whether the latest write probe succeeded (its changes are logged).
    probed_up: AtomicBool,
}

impl RemoteStore {
    /// Wraps a connected Redis store.
    pub fn new(redis: RedisStore, options: RemoteOptions) -> Arc<Self> {
        let store = Self::unconnected(redis.timeout(), options);
        store.connected(redis);
        store
    }

    /// A store whose Redis is not connected yet (calls limited to
    /// `timeout` once it is): down, every batch answered by `on_store_error`
    /// until [`RemoteStore::connected`].
    pub fn unconnected(timeout: Duration, options: RemoteOptions) -> Arc<Self> {
        Arc::new(RemoteStore {
            redis: ArcSwapOption::empty(),
            timeout,
            breaker: Breaker::new(
                options.breaker_threshold,
                options.breaker_backoff,
                options.breaker_max_backoff,
            ),
            fallback: MemoryCounters::new(
                [],
                options.fallback_config,
                options.fallback_config,
                4096,
            ),
            quick_deny: QuickDeny::new(options.quick_deny_keys),
            leases: LeaseBook::new(
                LeasePolicy::for_fleet(options.lease_period, options.expected_instances).divisor,
                options.lease_max_keys,
            ),
            shares: ArcSwapOption::empty(),
            last_decision: AtomicU64::new(0),
            options,
            stats: StoreStats::default(),
            failures: FailureLog::new(FAILURE_LOG_INTERVAL, STORE_FAILED),
            fallbacks: FailureLog::new(FAILURE_LOG_INTERVAL, ANSWERED_WITHOUT_STORE),
            up: AtomicBool::new(false),
            probed_up: AtomicBool::new(true),
        })
    }

    /// Hands over a connection, the first or a new one replacing the
    /// current: from now on batches go to it.
    pub fn connected(&self, redis: RedisStore) {
        self.shares.store(Some(SharesBook::new(
            redis.clone(),
            random_holder_id(),
            self.options.shares,
        )));
        if let Some(replaced) = self.redis.swap(Some(Arc::new(redis))) {
            self.stats.replaced_worker_connections.fetch_add(
                u64::try_from(replaced.worker_connections()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
        self.up.store(true, Ordering::Relaxed);
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Upstream's Redis pool statistics as far as they map: the
    /// connections in use now (while connected and up: the instance's
    /// multiplexed connection or cluster client, plus the connections its
    /// workers opened of their own; else 0) and the connections made since
    /// start (each handed over, and each a worker opened).
    pub fn pool(&self) -> (u64, u64) {
        let redis = self.redis.load();
        let workers = redis.as_deref().map_or(0, |r| {
            u64::try_from(r.worker_connections()).unwrap_or(u64::MAX)
        });
        let active = if redis.is_some() && self.is_up() {
            1 + workers
        } else {
            0
        };
        let made = self
            .stats
            .connections
            .load(Ordering::Relaxed)
            .saturating_add(
                self.stats
                    .replaced_worker_connections
                    .load(Ordering::Relaxed),
            );
        (active, made.saturating_add(workers))
    }

    /// Decides a batch planned under rule `generation` (see
    /// [`RemoteStore::lease_generation`]): from this instance's leases when
    /// they cover every counter, else from the quick-deny cache, else in
    /// Redis unless the breaker is open (then taking leases for
    /// `periods[i]`, counter `i`'s lease period, zero for none). A batch of
    /// an earlier generation neither spends nor takes a lease.
    ///
    /// Counters marked in `shared` (of `shares: true` rules) are decided
    /// from this instance's shares instead ([`SharesBook`]); a batch with
    /// both kinds fails as a whole if either part fails.
    pub async fn check_batch<C: Clock>(
        &self,
        clock: &C,
        counters: &[Counter<'_>],
        periods: &[Duration],
        shared: &[bool],
        generation: u64,
        decisions: &mut Vec<Decision>,
    ) -> Result<DecidedBy, StoreError> {
        if !shared.iter().any(|&s| s) {
            return self
                .check_counters(clock, counters, periods, generation, decisions)
                .await;
        }
        let decided_by_shares = |decided: Result<(), StoreError>| {
            if let Err(e) = &decided {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                self.stats.fallback.fetch_add(1, Ordering::Relaxed);
                self.up.store(false, Ordering::Relaxed);
                self.failures.record(clock.now(), e);
            }
            decided
        };
        let shares = self.shares.load_full();
        if shared.len() == counters.len() && shared.iter().all(|&s| s) {
            // Every counter in the shares mode (the usual case): no split.
            return decided_by_shares(match shares {
                Some(shares) => shares.decide(counters, decisions).await,
                None => Err(StoreError::Unavailable(NOT_CONNECTED.to_owned())),
            })
            .map(|()| DecidedBy::Counted);
        }
        let (mut by_shares, mut by_store) = (Vec::new(), Vec::new());
        let mut store_periods = Vec::new();
        for (i, c) in counters.iter().enumerate() {
            if shared.get(i).copied().unwrap_or(false) {
                by_shares.push(*c);
            } else {
                by_store.push(*c);
                store_periods.push(periods.get(i).copied().unwrap_or(Duration::ZERO));
            }
        }
        let mut from_shares = Vec::with_capacity(by_shares.len());
        decided_by_shares(match shares {
            Some(shares) => shares.decide(&by_shares, &mut from_shares).await,
            None => Err(StoreError::Unavailable(NOT_CONNECTED.to_owned())),
        })?;
        let mut from_store = Vec::with_capacity(by_store.len());
        if !by_store.is_empty() {
            self.check_counters(
                clock,
                &by_store,
                &store_periods,
                generation,
                &mut from_store,
            )
            .await?;
        }
        decisions.clear();
        let (mut s, mut r) = (from_shares.into_iter(), from_store.into_iter());
        for i in 0..counters.len() {
            let next = if shared.get(i).copied().unwrap_or(false) {
                s.next()
            } else {
                r.next()
            };
            let Some(decision) = next else {
                return Err(StoreError::Unavailable(
                    "a decision is missing from a mixed batch".into(),
                ));
            };
            decisions.push(decision);
        }
        Ok(DecidedBy::Counted)
    }

    /// [`check_batch`](Self::check_batch) for counters not in the shares mode.
    async fn check_counters<C: Clock>(
        &self,
        clock: &C,
        counters: &[Counter<'_>],
        periods: &[Duration],
        generation: u64,
        decisions: &mut Vec<Decision>,
    ) -> Result<DecidedBy, StoreError> {
        let sent = clock.now();
        self.last_decision
            .fetch_max(sent.as_nanos(), Ordering::Relaxed);
        let Some(redis) = self.redis.load_full() else {
            // Not connected yet: no lease, no cache, no call; the rules' `on_store_error` answers.
            self.stats.fallback.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::Unavailable(NOT_CONNECTED.to_owned()));
        };
        let mut refills = Vec::new();
        // A book holding no lease (no `--lease-period`, or none granted yet)
        // decides nothing here and has no grant in flight to wait for.
        let local = !self.leases.is_empty()
            && (self
                .leases
                .try_local(counters, generation, sent, decisions, &mut refills)
                || (self.leases.wait_for_grant(counters, self.timeout).await
                    && self.leases.try_local(
                        counters,
                        generation,
                        clock.now(),
                        decisions,
                        &mut refills,
                    )));
        if local {
            self.stats.leased.fetch_add(1, Ordering::Relaxed);
            if !refills.is_empty() {
                if self.breaker.admit(sent) {
                    // This request waits for the next grant; the others keep
                    // spending what is left of the lease meanwhile.
                    self.leases.refill(&redis, refills, clock.now()).await;
                } else {
                    self.leases.cancel(refills);
                }
            }
            return Ok(DecidedBy::Counted);
        }
        if self.answer_from_cache(counters, sent, decisions) {
            self.stats.quick_denied.fetch_add(1, Ordering::Relaxed);
            return Ok(DecidedBy::QuickDeny);
        }
        if !self.breaker.admit(sent) {
            self.stats.short_circuited.fetch_add(1, Ordering::Relaxed);
            self.stats.fallback.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::CircuitOpen);
        }
        self.stats.exact.fetch_add(1, Ordering::Relaxed);
        match redis.check_batch(counters, clock.now(), decisions).await {
            Ok(()) => {
                self.breaker.on_success();
                self.up.store(true, Ordering::Relaxed);
                self.quick_deny.remember(counters, decisions, sent);
                let asks = self
                    .leases
                    .after_exact(counters, periods, decisions, generation, sent);
                if !asks.is_empty() {
                    self.leases.refill(&redis, asks, clock.now()).await;
                }
                Ok(DecidedBy::Counted)
            }
            Err(e @ StoreError::Unsupported(_)) => {
                // A limit the store cannot keep says nothing about the store's health.
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                self.stats.fallback.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "a limit cannot be kept in the store");
                Err(e)
            }
            Err(e) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                self.stats.fallback.fetch_add(1, Ordering::Relaxed);
                self.breaker.on_failure(clock.now());
                self.up.store(false, Ordering::Relaxed);
                self.failures.record(clock.now(), &e);
                Err(e)
            }
        }
    }

    /// Gives every outstanding lease back to Redis (graceful shutdown); the units it took back.
    pub async fn return_leases(&self, now: Timestamp) -> u64 {
        match self.redis.load_full() {
            Some(redis) => self.leases.return_all(&redis, now).await,
            None => 0,
        }
    }

    /// At a graceful shutdown: this instance leaves the shares fleet,
    /// giving back every share and its starter slot in one call, waiting at
    /// most the holder's call timeout; the keys given back (an error: the
    /// registration lapses after `--shares-ttl` instead).
    pub async fn leave_shares(&self) -> Result<usize, StoreError> {
        match self.shares.load_full() {
            Some(shares) => shares.leave(self.options.shares.holder.call_timeout).await,
            None => Ok(0),
        }
    }

    /// After a reload: forgets the quick-deny entries, ends every lease at
    /// once and starts the next rule generation, which it returns (the new
    /// engine's); on a Tokio runtime, gives the leases' unused units back in
    /// the background. From the moment it returns, no lease taken before is
    /// spent, whatever engine a request was planned by, and no grant asked
    /// before is installed.
    pub fn after_reload(self: &Arc<Self>, now: Timestamp) -> u64 {
        self.quick_deny.clear();
        let retired = self.leases.retire(now);
        let generation = retired.generation;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = Arc::clone(self);
            runtime.spawn(async move {
                let Some(redis) = store.redis.load_full() else {
                    return;
                };
                let units = store.leases.give_back_retired(&redis, retired).await;
                tracing::debug!(units, "leases returned after a reload");
            });
        }
        generation
    }

    /// The rule generation this instance's leases are in: an engine built
    /// now plans its requests in it.
    pub fn lease_generation(&self) -> u64 {
        self.leases.generation()
    }

    /// The time of the latest decision: the gauges' "now" (the store keeps no clock).
    fn now_for_gauges(&self) -> Timestamp {
        Timestamp::from_nanos(self.last_decision.load(Ordering::Relaxed))
    }

    /// This instance's shares (`shares: true` rules), once connected.
    pub fn shares(&self) -> Option<Arc<SharesBook>> {
        self.shares.load_full()
    }

    /// The leases this instance holds.
    pub fn leases(&self) -> &LeaseBook {
        &self.leases
    }

    /// The lease period of rules without their own `lease`.
    pub fn lease_period(&self) -> Duration {
        self.options.lease_period
    }

    /// Whether fixed-window rules count in envoyproxy/ratelimit's keys ([`RemoteOptions::upstream_keys`]).
    pub fn upstream_keys(&self) -> bool {
        self.options.upstream_keys
    }

    /// Fills `decisions` from the quick-deny cache when it knows every counter is closed.
    fn answer_from_cache(
        &self,
        counters: &[Counter<'_>],
        now: Timestamp,
        decisions: &mut Vec<Decision>,
    ) -> bool {
        decisions.clear();
        for c in counters {
            if c.give_back {
                return false;
            }
            match self.quick_deny.lookup(c.key, &c.algorithm, c.hits, now) {
                Some(d) => decisions.push(d),
                None => return false,
            }
        }
        !decisions.is_empty()
    }

    /// The quick-deny cache: keys cached now, and the most it may hold (`quick_deny_keys`).
    pub fn quick_deny_usage(&self) -> (usize, usize) {
        (self.quick_deny.len(), self.options.quick_deny_keys)
    }

    /// The in-process counters for `on_store_error: local`.
    pub fn fallback(&self) -> &MemoryCounters {
        &self.fallback
    }

    /// Instances sharing the store.
    pub fn expected_instances(&self) -> u64 {
        self.options.expected_instances.max(1)
    }

    /// The breaker.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Error and fallback counts.
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// The Redis store in use, once connected.
    pub fn redis(&self) -> Option<Arc<RedisStore>> {
        self.redis.load_full()
    }

    /// Whether the store takes a write now (`/healthz/store`): down when it
    /// is unreachable, too slow or refuses writes (out of memory). A change
    /// since the previous probe is logged at warn.
    pub async fn check_store(&self) -> Result<(), StoreError> {
        let probe = match self.redis.load_full() {
            Some(redis) => redis.probe_write().await,
            None => Err(StoreError::Unavailable(NOT_CONNECTED.to_owned())),
        };
        self.up.store(probe.is_ok(), Ordering::Relaxed);
        let was_up = self.probed_up.swap(probe.is_ok(), Ordering::Relaxed);
        match &probe {
            Err(error) if was_up => tracing::warn!(
                %error,
                ready = !self.options.ready_requires_store,
                "the store is down: every rule answers by its on_store_error"
            ),
            Ok(()) if !was_up => tracing::warn!("the store is up again: counters in the store"),
            _ => {}
        }
        probe
    }

    /// Whether this replica is ready to answer (`/readyz`, gRPC health):
    /// always, since every rule answers by its `on_store_error` while the
    /// store is down, unless [`RemoteOptions::ready_requires_store`], then
    /// as [`RemoteStore::check_store`]. Probes the store either way.
    pub async fn check_ready(&self) -> Result<(), StoreError> {
        let store = self.check_store().await;
        if self.options.ready_requires_store {
            store
        } else {
            Ok(())
        }
    }

    /// Whether the latest store call or write probe succeeded (`ratelimit_store_up`).
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Counts a descriptor answered by `policy` instead of the store at
    /// `now`, and logs it at warn (at most once per 10 s, with the count left unlogged).
    pub fn record_fallback(&self, policy: StoreErrorPolicy, now: Timestamp) {
        let counter = match policy {
            StoreErrorPolicy::Allow => &self.stats.fallback_allow,
            StoreErrorPolicy::Deny => &self.stats.fallback_deny,
            StoreErrorPolicy::Local => &self.stats.fallback_local,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.fallbacks.record(now, &FallbackAnswer(policy));
    }
}

/// Why a batch or probe found no store: Redis was not up at start and has not been reached since.
const NOT_CONNECTED: &str =
    "Redis is not connected yet (it was not up at start; reconnecting in the background)";

/// What a fallback warning says about the policy that answered.
struct FallbackAnswer(StoreErrorPolicy);

impl std::fmt::Display for FallbackAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            StoreErrorPolicy::Allow => f.write_str(
                "on_store_error: allow admitted it without counting: the limit is open while the store fails",
            ),
            StoreErrorPolicy::Deny => f.write_str("on_store_error: deny refused it"),
            StoreErrorPolicy::Local => {
                f.write_str("on_store_error: local decided it with this instance's share")
            }
        }
    }
}

mod collector;
mod pool;
pub use collector::StoreCollector;
pub use pool::PoolCollector;

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_breaker_opens_probes_with_backoff_and_closes_on_success() {
        let b = Breaker::new(3, 100 * MS, 400 * MS);
        let t0 = Timestamp::from_secs(1_000);
        let at = |ms: u64| t0.saturating_add(Duration::from_millis(ms));
        assert!(b.admit(t0));
        b.on_failure(t0);
        b.on_failure(t0);
        assert_eq!(b.state(), BreakerState::Closed { failures: 2 });
        b.on_success();
        b.on_failure(t0);
        b.on_failure(t0);
        assert!(b.admit(t0), "a success reset the count");
        b.on_failure(t0);
        assert_eq!(b.state_code(), 1, "open after 3 consecutive failures");
        assert!(!b.admit(at(99)));
        assert!(b.admit(at(100)), "one probe after the backoff");
        assert!(!b.admit(at(100)), "only one probe at a time");
        b.on_failure(at(100));
        assert!(!b.admit(at(299)), "the backoff doubled");
        assert!(b.admit(at(300)));
        b.on_failure(at(300));
        assert!(b.admit(at(700)));
        b.on_failure(at(700));
        assert!(!b.admit(at(1099)), "capped at 400 ms");
        assert!(b.admit(at(1100)));
        b.on_success();
        assert_eq!(b.state(), BreakerState::Closed { failures: 0 });
        assert!(b.admit(at(1100)));
    }

    #[test]
    fn calls_started_before_the_breaker_opened_do_not_move_it() {
        let b = Breaker::new(2, 100 * MS, 400 * MS);
        let t0 = Timestamp::from_secs(1_000);
        b.on_failure(t0);
        b.on_failure(t0);
        assert_eq!(b.state_code(), 1);
        // A slow call from before the trip answers now: still open, same backoff.
        b.on_success();
        b.on_failure(t0.saturating_add(50 * MS));
        assert_eq!(
            b.state(),
            BreakerState::Open {
                until: t0.saturating_add(100 * MS),
                backoff: 100 * MS
            }
        );
    }
}
