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
//! * counts of store errors and fallbacks by policy, for `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::HashMap;

use tollgate_core::breaker::{BreakerPolicy, BreakerState as CoreBreakerState, CircuitBreaker};
use tollgate_core::{AnyAlgorithm, Clock, Decision, Outcome, Timestamp};
use tollgate_redis::RedisStore;
use tollgate_store::{
    Counter, CounterStore, MemoryCounters, StoreConfig, StoreError, counts_denied,
};

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

/// Fixed-window counters known to be over their limit, answered without a store call.
///
/// A fixed window that denies stays closed until the window ends, for any
/// cost (it keeps counting denied requests, and a give-back cannot reopen
/// it), so its denial can be repeated locally until then. The end is taken
/// as the time the call was sent plus the reported retry-after: never later
/// than the true end, so the cache never denies a request Redis would let
/// through. Other algorithms are not cached: a cheaper request, a refill or
/// a give-back can let a request through before their retry-after.
///
/// Bounded: at most `capacity` keys in 16 shards; a full shard first drops
/// the expired entries and otherwise does not cache.
#[derive(Debug)]
pub struct QuickDeny {
    shards: Vec<Mutex<HashMap<u64, Closed>>>,
    per_shard: usize,
}

/// A closed window: until when, the limit to report, and the algorithm
/// that closed it (a reload that changes the limit must not be answered
/// from a denial under the old one).
#[derive(Clone, Copy, Debug)]
struct Closed {
    until: Timestamp,
    limit: u64,
    algorithm: AnyAlgorithm,
}

impl QuickDeny {
    const SHARDS: usize = 16;

    /// A cache of at most `capacity` keys (0 turns it off), in up to 16 shards of an equal share.
    pub fn new(capacity: usize) -> Self {
        let shards = capacity.clamp(1, Self::SHARDS);
        QuickDeny {
            shards: (0..shards).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity / shards,
        }
    }

    /// The keys cached now (expired ones included until a full shard drops them).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len()).sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, hash: u64) -> &Mutex<HashMap<u64, Closed>> {
        &self.shards[(hash >> 60) as usize % self.shards.len()]
    }

    /// The denial for `key` under `algorithm` at `now`, if its window is known to be closed.
    pub fn lookup(&self, key: &[u8], algorithm: &AnyAlgorithm, now: Timestamp) -> Option<Decision> {
        if self.per_shard == 0 {
            return None;
        }
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        let closed = *self.shard(hash).lock().get(&hash)?;
        if closed.until <= now || closed.algorithm != *algorithm {
            return None;
        }
        let wait = closed.until.saturating_since(now).as_nanos();
        let wait = u64::try_from(wait).unwrap_or(u64::MAX);
        Some(Decision::from_parts(
            Outcome::Denied,
            closed.limit,
            0,
            wait,
            wait,
        ))
    }

    /// Remembers the fixed-window denials of a batch sent at `sent`.
    pub fn remember(&self, counters: &[Counter<'_>], decisions: &[Decision], sent: Timestamp) {
        if self.per_shard == 0 {
            return;
        }
        for (c, d) in counters.iter().zip(decisions) {
            if d.outcome() != Outcome::Denied || !counts_denied(&c.algorithm) {
                continue;
            }
            let Some(retry) = d.retry_after() else {
                continue;
            };
            let hash = xxhash_rust::xxh3::xxh3_64(c.key);
            let mut shard = self.shard(hash).lock();
            if shard.len() >= self.per_shard {
                shard.retain(|_, closed| closed.until > sent);
                if shard.len() >= self.per_shard {
                    continue;
                }
            }
            shard.insert(
                hash,
                Closed {
                    until: sent.saturating_add(retry),
                    limit: d.limit(),
                    algorithm: c.algorithm,
                },
            );
        }
    }
}

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
}

impl Default for RemoteOptions {
    /// One instance; open after 3 failures for 100 ms, doubling up to 1 s.
    fn default() -> Self {
        RemoteOptions {
            expected_instances: 1,
            breaker_threshold: 3,
            breaker_backoff: Duration::from_millis(100),
            breaker_max_backoff: Duration::from_secs(1),
            fallback_config: StoreConfig::with_max_keys(100_000),
            quick_deny_keys: 65_536,
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
}

/// Redis behind a breaker, with the local fallback counters.
#[derive(Debug)]
pub struct RemoteStore {
    redis: RedisStore,
    breaker: Breaker,
    fallback: MemoryCounters,
    quick_deny: QuickDeny,
    options: RemoteOptions,
    stats: StoreStats,
}

impl RemoteStore {
    /// Wraps a connected Redis store.
    pub fn new(redis: RedisStore, options: RemoteOptions) -> Arc<Self> {
        Arc::new(RemoteStore {
            redis,
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
            options,
            stats: StoreStats::default(),
        })
    }

    /// Decides a batch in Redis unless the breaker is open.
    pub async fn check_batch<C: Clock>(
        &self,
        clock: &C,
        counters: &[Counter<'_>],
        decisions: &mut Vec<Decision>,
    ) -> Result<(), StoreError> {
        let sent = clock.now();
        if self.answer_from_cache(counters, sent, decisions) {
            self.stats.quick_denied.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if !self.breaker.admit(sent) {
            self.stats.short_circuited.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::CircuitOpen);
        }
        match self
            .redis
            .check_batch(counters, clock.now(), decisions)
            .await
        {
            Ok(()) => {
                self.breaker.on_success();
                self.quick_deny.remember(counters, decisions, sent);
                Ok(())
            }
            Err(e @ StoreError::Unsupported(_)) => {
                // A limit the store cannot keep says nothing about the store's health.
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "a limit cannot be kept in the store");
                Err(e)
            }
            Err(e) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                self.breaker.on_failure(clock.now());
                tracing::debug!(error = %e, "counter store call failed");
                Err(e)
            }
        }
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
            if c.give_back || !counts_denied(&c.algorithm) {
                return false;
            }
            match self.quick_deny.lookup(c.key, &c.algorithm, now) {
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

    /// The Redis store.
    pub fn redis(&self) -> &RedisStore {
        &self.redis
    }

    /// Whether the store answers a PING now (for `/readyz` and gRPC health).
    pub async fn is_ready(&self) -> bool {
        self.redis.ping().await.is_ok()
    }
}

/// The label of the fallback counter: which `on_store_error` answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: &'static str,
}

/// Writes the store's error and fallback counters and the breaker state on each scrape.
#[derive(Debug)]
pub struct StoreCollector(pub Arc<RemoteStore>);

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.0.stats();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let errors = ConstCounter::new(load(&stats.errors));
        let metric = encoder.encode_descriptor(
            "ratelimit_store_errors",
            "Store calls that failed (timeout, connection, script)",
            None,
            errors.metric_type(),
        )?;
        errors.encode(metric)?;
        let skipped = ConstCounter::new(load(&stats.short_circuited));
        let metric = encoder.encode_descriptor(
            "ratelimit_store_short_circuited",
            "Store calls not made because the circuit breaker was open",
            None,
            skipped.metric_type(),
        )?;
        skipped.encode(metric)?;
        let quick = ConstCounter::new(load(&stats.quick_denied));
        let metric = encoder.encode_descriptor(
            "ratelimit_store_quick_denied",
            "Calls answered OVER_LIMIT by the quick-deny cache, without a store call",
            None,
            quick.metric_type(),
        )?;
        quick.encode(metric)?;
        let mut family = encoder.encode_descriptor(
            "ratelimit_store_fallbacks",
            "Descriptors answered by their rule's on_store_error, by policy",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (policy, counter) in [
            ("allow", &stats.fallback_allow),
            ("deny", &stats.fallback_deny),
            ("local", &stats.fallback_local),
        ] {
            let labels = PolicyLabels { policy };
            let metric = family.encode_family(&labels)?;
            ConstCounter::new(load(counter)).encode(metric)?;
        }
        let state = ConstGauge::new(self.0.breaker().state_code());
        let metric = encoder.encode_descriptor(
            "ratelimit_store_breaker_state",
            "The store's circuit breaker: 0 closed, 1 open, 2 half-open",
            None,
            state.metric_type(),
        )?;
        state.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_closed_fixed_window_is_denied_locally_until_its_end_and_nothing_else_is_cached() {
        use tollgate_core::{AnyAlgorithm, FixedWindow, TokenBucket};
        let cache = QuickDeny::new(64);
        let fw: AnyAlgorithm = FixedWindow::new(5, Duration::from_secs(60)).unwrap().into();
        let tb: AnyAlgorithm = TokenBucket::new(5, 5, Duration::from_secs(60))
            .unwrap()
            .into();
        let counter = |key: &'static [u8], algorithm| Counter {
            group: 0,
            key,
            tag: 0,
            algorithm,
            hits: 1,
            give_back: false,
        };
        let sent = Timestamp::from_secs(1_000);
        let denied = Decision::from_parts(Outcome::Denied, 5, 0, 20_000_000_000, 20_000_000_000);
        cache.remember(
            &[counter(b"fw", fw), counter(b"tb", tb)],
            &[denied, denied],
            sent,
        );
        let later = sent.saturating_add(Duration::from_secs(5));
        let d = cache
            .lookup(b"fw", &fw, later)
            .expect("the window is closed");
        assert_eq!(d.retry_after(), Some(Duration::from_secs(15)));
        assert_eq!((d.limit(), d.remaining()), (5, 0));
        assert!(
            cache.lookup(b"tb", &tb, later).is_none(),
            "a token bucket is not cached"
        );
        let end = sent.saturating_add(Duration::from_secs(20));
        assert!(
            cache.lookup(b"fw", &fw, end).is_none(),
            "open again at the window's end"
        );
        let raised: AnyAlgorithm = FixedWindow::new(10, Duration::from_secs(60))
            .unwrap()
            .into();
        assert!(
            cache.lookup(b"fw", &raised, later).is_none(),
            "a reload that raised the limit is asked of the store"
        );
        let off = QuickDeny::new(0);
        off.remember(&[counter(b"fw", fw)], &[denied], sent);
        assert!(off.lookup(b"fw", &fw, later).is_none());
    }

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
