//! [`ClientPolicy`]: the client's settings, and the state its calls share.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate_core::breaker::{Admission, BreakerPolicy, CircuitBreaker};
use tollgate_core::{Clock, Timestamp, WallClock};
use tower::retry::budget::{Budget, TpsBudget};

use crate::adaptive::AdaptiveThrottle;
use crate::clock::TokioClock;
use crate::hints::ServerHints;
use crate::jitter::RetryJitter;
use crate::pacer::Pacer;

/// How a [`Backoff`](super::Backoff) client paces, retries, breaks and throttles.
///
/// Start from [`ClientPolicy::default`] and change what you need:
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::{ClientPolicy, ExponentialBackoff, RetryJitter};
///
/// let policy = ClientPolicy::default()
///     .with_max_retries(5)
///     .with_jitter(RetryJitter::proportional(0.5))
///     .with_adaptive(None)
///     .with_seed(7);
/// assert_eq!(policy.max_retries, 5);
/// // The former additive jitter, as an option.
/// let additive = ClientPolicy::default()
///     .with_jitter(RetryJitter::additive(ExponentialBackoff::new(Duration::from_millis(50), Duration::from_secs(5))));
/// # let _ = additive;
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ClientPolicy {
    /// Retries of one request after a 429 or 503 (default 3).
    pub max_retries: u32,
    /// How each retry's wait is drawn from the server's (default
    /// [`RetryJitter::default`]: a wait of `T` returns over `[T, 2T]`).
    pub jitter: RetryJitter,
    /// Space requests out once `remaining` is at most this (default 5).
    pub slow_down_below: u64,
    /// Adaptive throttling's `K` and decay window; `None` turns it off
    /// (default `K` = 2 over two minutes).
    pub adaptive: Option<(f64, Duration)>,
    /// The retry budget shared by all requests (default tower's
    /// `TpsBudget::default()`: 10 retries/s plus 20 % of requests, over 10 s).
    pub budget: Arc<dyn Budget + Send + Sync>,
    /// The circuit breaker that consecutive 503s open (default: 5 in a row
    /// open it for 1 s, doubling to 30 s, one probe at a time).
    pub breaker: BreakerPolicy,
    /// The clock decisions read; it must be the one the sleeps run on (default [`TokioClock`]).
    pub clock: Arc<dyn Clock>,
    /// The wall clock, for an HTTP-date `Retry-After` without a `Date` header (default [`WallClock`]).
    pub wall: Arc<dyn Clock>,
    /// Seeds the jitter and throttle draws (`None`: from the OS).
    pub seed: Option<u64>,
}

impl Default for ClientPolicy {
    fn default() -> Self {
        ClientPolicy {
            max_retries: 3,
            jitter: RetryJitter::default(),
            slow_down_below: Pacer::DEFAULT_SLOW_DOWN_BELOW,
            adaptive: Some((
                AdaptiveThrottle::DEFAULT_K,
                AdaptiveThrottle::DEFAULT_WINDOW,
            )),
            budget: Arc::new(TpsBudget::default()),
            breaker: BreakerPolicy {
                failure_threshold: 5,
                open_duration: Duration::from_secs(1),
                max_open_duration: Duration::from_secs(30),
                half_open_probes: 1,
            },
            clock: Arc::new(TokioClock::new()),
            wall: Arc::new(WallClock),
            seed: None,
        }
    }
}

impl ClientPolicy {
    /// Retries of one request after a 429 or 503.
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// How each retry's wait is drawn from the server's.
    pub fn with_jitter(mut self, jitter: RetryJitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Space requests out once `remaining` is at most this.
    pub fn with_slow_down_below(mut self, slow_down_below: u64) -> Self {
        self.slow_down_below = slow_down_below;
        self
    }

    /// Adaptive throttling's `K` and decay window; `None` turns it off.
    pub fn with_adaptive(mut self, adaptive: Option<(f64, Duration)>) -> Self {
        self.adaptive = adaptive;
        self
    }

    /// The retry budget shared by all requests.
    pub fn with_budget(mut self, budget: Arc<dyn Budget + Send + Sync>) -> Self {
        self.budget = budget;
        self
    }

    /// The circuit breaker that consecutive 503s open.
    pub fn with_breaker(mut self, breaker: BreakerPolicy) -> Self {
        self.breaker = breaker;
        self
    }

    /// The clock decisions read; it must be the one the sleeps run on.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The wall clock, for an HTTP-date `Retry-After` without a `Date` header.
    pub fn with_wall_clock(mut self, wall: Arc<dyn Clock>) -> Self {
        self.wall = wall;
        self
    }

    /// Seeds the jitter and throttle draws (repeatable runs and tests).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
}

impl fmt::Debug for ClientPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientPolicy")
            .field("max_retries", &self.max_retries)
            .field("jitter", &self.jitter)
            .field("slow_down_below", &self.slow_down_below)
            .field("adaptive", &self.adaptive)
            .field("breaker", &self.breaker)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

/// How an answer counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Accepted: return it.
    Accepted,
    /// 429 or 503: retry after this wait, when allowed.
    Retry(Duration),
    /// 429 or 503 with no retry left: return it.
    GiveUp,
}

/// The state every clone of one client shares.
pub(crate) struct Shared {
    policy: ClientPolicy,
    pacer: Mutex<Pacer>,
    breaker: Mutex<CircuitBreaker>,
    throttle: Option<Mutex<AdaptiveThrottle>>,
    rng: Mutex<SmallRng>,
}

impl Shared {
    pub(crate) fn new(policy: ClientPolicy) -> Self {
        let rng = policy
            .seed
            .map_or_else(SmallRng::from_os_rng, SmallRng::seed_from_u64);
        Shared {
            pacer: Mutex::new(Pacer::new(policy.slow_down_below)),
            breaker: Mutex::new(CircuitBreaker::new(policy.breaker)),
            throttle: policy
                .adaptive
                .map(|(k, window)| Mutex::new(AdaptiveThrottle::new(k, window))),
            rng: Mutex::new(rng),
            policy,
        }
    }

    pub(super) fn now(&self) -> Timestamp {
        self.policy.clock.now()
    }

    /// A first try: counts towards the retry budget.
    pub(crate) fn deposit(&self) {
        self.policy.budget.deposit();
    }

    /// How long to sleep before this attempt may start.
    pub(crate) fn reserve_start(&self) -> Duration {
        let now = self.now();
        self.pacer.lock().reserve(now).saturating_since(now)
    }

    /// The breaker's admission for an attempt, or how long it stays open.
    pub(super) fn admit(&self) -> Result<Admission, Duration> {
        self.breaker.lock().acquire(self.now())
    }

    /// The adaptive throttle's draw: `Err(p)` rejects the attempt locally.
    pub(super) fn throttle(&self) -> Result<(), f64> {
        let Some(throttle) = &self.throttle else {
            return Ok(());
        };
        let u: f64 = self.rng.lock().random();
        let now = self.now();
        let mut throttle = throttle.lock();
        let p = throttle.rejection_probability(now);
        if throttle.try_request(now, u) {
            Ok(())
        } else {
            Err(p)
        }
    }

    /// Gives back a breaker probe that was never sent.
    pub(super) fn unsent(&self, admission: Admission) {
        if let Admission::Probe(period) = admission {
            self.breaker.lock().release_probe(period);
        }
    }

    /// Records a transport failure.
    pub(super) fn failed(&self, admission: Admission) {
        let now = self.now();
        self.breaker.lock().record_failure(admission, now);
    }

    /// Takes in an answer to retry `retry` (0: the first try) sent with the
    /// breaker's `admission`, and says what to do with it.
    pub(super) fn answered(
        &self,
        admission: Admission,
        status: http::StatusCode,
        headers: &http::HeaderMap,
        retry: u32,
    ) -> Verdict {
        let now = self.now();
        if status == http::StatusCode::SERVICE_UNAVAILABLE {
            self.breaker.lock().record_failure(admission, now);
        } else {
            self.breaker.lock().record_success(admission);
        }
        self.judge(status, headers, retry)
    }

    /// What the breaker does not see of an answer: the pacer takes in its
    /// hints, the throttle its accept, and a 429 or 503 gets its retry's
    /// wait when a retry and the budget allow one.
    pub(crate) fn judge(
        &self,
        status: http::StatusCode,
        headers: &http::HeaderMap,
        retry: u32,
    ) -> Verdict {
        let now = self.now();
        let wall = UNIX_EPOCH + Duration::from_nanos(self.policy.wall.now().as_nanos());
        let hints = ServerHints::from_headers(headers, wall);
        self.pacer.lock().observe(now, &hints);
        let overloaded = status == http::StatusCode::SERVICE_UNAVAILABLE;
        if !(overloaded || status == http::StatusCode::TOO_MANY_REQUESTS) {
            if let Some(throttle) = &self.throttle {
                throttle.lock().record_accept(now);
            }
            return Verdict::Accepted;
        }
        if retry >= self.policy.max_retries || !self.policy.budget.withdraw() {
            return Verdict::GiveUp;
        }
        let server_wait = hints.retry_after.unwrap_or(Duration::ZERO);
        let delay = self
            .policy
            .jitter
            .delay(retry, server_wait, &mut *self.rng.lock());
        self.pacer.lock().hold_until(now.saturating_add(delay));
        Verdict::Retry(delay)
    }

    pub(super) fn rejection_probability(&self) -> f64 {
        self.throttle
            .as_ref()
            .map_or(0.0, |t| t.lock().rejection_probability(self.now()))
    }
}
