//! Rate-based meters: token bucket, GCRA and leaky bucket.
//!
//! All three are the same meter described three ways, and share one
//! implementation ([`Schedule`]): a capacity of `C` units that drains
//! (or refills) continuously at one unit per interval `T`. The whole state is
//! one timestamp, the *theoretical arrival time* (TAT): the instant at which
//! the meter would be back to full (for a bucket) or empty (for a leaky
//! bucket). A fresh key has TAT 0, which every `now` is past.
//!
//! For a request of `n` units at `now`:
//!
//! * `TAT' = max(TAT, now) + n·T`;
//! * it passes iff `TAT' − now ≤ C·T` (for a token bucket: the bucket holds
//!   at least `n` tokens); a denied request leaves the state unchanged;
//! * `remaining = ⌊(C·T − (TAT' − now)) / T⌋` (whole units left);
//! * `reset_after = TAT' − now` (until full again);
//! * `retry_after = TAT − (C − n)·T − now` (the first instant the same
//!   request passes);
//! * `n > C` can never pass.
//!
//! The budget a state has used ([`WordAlgorithm::used`]) is the units still
//! to refill, `C − remaining = ⌈(TAT − now) / T⌉` (0 once `TAT ≤ now`):
//! forgetting the state would hand back exactly that many whole units.
//!
//! `T` is a whole number of nanoseconds, rounded up when the configured rate
//! does not divide evenly, so a meter never admits faster than configured.

use std::time::Duration;

use crate::clock::{LONGEST_SPAN_NANOS, Timestamp, duration_nanos};
use crate::{ConfigError, Decision, WordAlgorithm};

/// The shared virtual-scheduling meter: `capacity` units, one unit per `interval` ns.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schedule {
    interval: u64,
    capacity: u64,
    /// `capacity · interval`: how far ahead of now the TAT may run.
    span: u64,
    /// `⌈2⁶⁴ / interval⌉` (0 when the interval is 1 ns): counting whole units
    /// is then a multiply instead of a (slow) 64-bit division.
    reciprocal: u64,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        (self.interval, self.capacity) == (other.interval, other.capacity)
    }
}

impl Eq for Schedule {}

impl std::hash::Hash for Schedule {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.interval, self.capacity).hash(state);
    }
}

impl Schedule {
    /// A meter of `capacity` units refilling `count` units per `period`.
    fn new(
        capacity: u64,
        capacity_name: &'static str,
        count: u64,
        count_name: &'static str,
        period: Duration,
        period_name: &'static str,
    ) -> Result<Self, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::new(capacity_name, "must be at least 1"));
        }
        if count == 0 {
            return Err(ConfigError::new(count_name, "must be at least 1"));
        }
        let period_ns = duration_nanos(period);
        if period_ns == 0 {
            return Err(ConfigError::new(period_name, "must be longer than zero"));
        }
        if count > period_ns {
            return Err(ConfigError::new(
                count_name,
                format!("{count} per {period:?} is faster than one per nanosecond"),
            ));
        }
        let interval = period_ns.div_ceil(count);
        let span = capacity
            .checked_mul(interval)
            .filter(|&s| s <= LONGEST_SPAN_NANOS)
            .ok_or_else(|| {
                ConfigError::new(
                    capacity_name,
                    format!("{capacity} units at one per {interval} ns take longer than 73 years to refill"),
                )
            })?;
        Ok(Schedule {
            interval,
            capacity,
            span,
            reciprocal: if interval == 1 {
                0
            } else {
                u64::MAX / interval + 1
            },
        })
    }

    /// The time to refill (or drain) the whole capacity: `capacity × interval`.
    fn full_span(&self) -> Duration {
        Duration::from_nanos(self.span)
    }

    /// Whole units available at `now` for a meter whose TAT is `tat`.
    #[inline(always)]
    fn available(&self, tat: u64, now: u64) -> u64 {
        self.whole_units(self.span - tat.saturating_sub(now).min(self.span))
    }

    /// `⌊free / interval⌋`, exactly, without dividing.
    ///
    /// With `m = ⌈2⁶⁴/interval⌉`, `⌊free·m / 2⁶⁴⌋` is the quotient or one
    /// more (`m` exceeds `2⁶⁴/interval` by less than 1, and `free < 2⁶⁴`);
    /// one multiply tells which.
    #[inline(always)]
    fn whole_units(&self, free: u64) -> u64 {
        if self.reciprocal == 0 {
            return free;
        }
        let q = ((u128::from(free) * u128::from(self.reciprocal)) >> 64) as u64;
        if q * self.interval > free { q - 1 } else { q }
    }

    #[inline(always)]
    fn decide(&self, tat: u64, now: Timestamp, cost: u64) -> (Decision, Option<u64>) {
        let now = now.clamped_nanos();
        let backlog = tat.saturating_sub(now);
        if cost > self.capacity {
            let d = Decision::exceeds(self.capacity, self.available(tat, now), backlog);
            return (d, None);
        }
        let new_tat = tat.max(now) + cost * self.interval;
        let backlog_after = new_tat - now;
        if backlog_after <= self.span {
            let remaining = self.whole_units(self.span - backlog_after);
            let d = Decision::allowed(self.capacity, remaining, backlog_after);
            (d, (cost > 0).then_some(new_tat))
        } else {
            let d = Decision::denied(
                self.capacity,
                self.available(tat, now),
                backlog,
                backlog_after - self.span,
            );
            (d, None)
        }
    }

    #[inline]
    fn refund(&self, tat: u64, now: Timestamp, amount: u64) -> (Decision, Option<u64>) {
        let now = now.clamped_nanos();
        let new_tat = tat.saturating_sub(amount.saturating_mul(self.interval));
        let new_tat = if new_tat <= now { 0 } else { new_tat };
        let d = Decision::allowed(
            self.capacity,
            self.available(new_tat, now),
            new_tat.saturating_sub(now),
        );
        (d, (new_tat != tat && tat > now).then_some(new_tat))
    }

    fn fresh_at(&self, tat: u64) -> Timestamp {
        Timestamp::from_nanos(tat)
    }

    /// `C − available = ⌈(TAT − now) / T⌉`: the units still to refill (or drain).
    fn used(&self, tat: u64, now: Timestamp) -> u64 {
        self.capacity - self.available(tat, now.clamped_nanos())
    }
}

/// A token bucket with Envoy `local_ratelimit` semantics.
///
/// The bucket holds at most `max_tokens`, starts full, and refills
/// continuously at `tokens_per_fill / fill_interval` tokens per second (no
/// discrete fill timer: `10 per 10s` behaves exactly like `1 per 1s`). A
/// request of `n` takes `n` whole tokens or is denied and takes none.
/// `reset_after` is the time until the bucket is full again.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{Timestamp, TokenBucket, WordAlgorithm};
///
/// // 2 tokens, one more every second. State 0 is a full bucket.
/// let bucket = TokenBucket::new(2, 1, Duration::from_secs(1)).unwrap();
/// let now = Timestamp::from_secs(1_700_000_000);
/// let (first, state) = bucket.decide(0, now, 1);
/// assert!(first.is_allowed());
/// assert_eq!(first.remaining(), 1);
/// let (second, state) = bucket.decide(state.unwrap(), now, 1);
/// assert_eq!(second.remaining(), 0);
/// let state = state.unwrap();
/// // Empty: the third is denied, consumes nothing, and may retry in one second.
/// let (third, unchanged) = bucket.decide(state, now, 1);
/// assert!(!third.is_allowed());
/// assert_eq!(unchanged, None);
/// assert_eq!(third.retry_after(), Some(Duration::from_secs(1)));
/// // A second later one token is back.
/// let later = now.saturating_add(Duration::from_secs(1));
/// assert!(bucket.decide(state, later, 1).0.is_allowed());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    schedule: Schedule,
}

impl TokenBucket {
    /// A bucket of `max_tokens` refilled with `tokens_per_fill` tokens every `fill_interval`.
    pub fn new(
        max_tokens: u64,
        tokens_per_fill: u64,
        fill_interval: Duration,
    ) -> Result<Self, ConfigError> {
        let schedule = Schedule::new(
            max_tokens,
            "max_tokens",
            tokens_per_fill,
            "tokens_per_fill",
            fill_interval,
            "fill_interval",
        )?;
        Ok(TokenBucket { schedule })
    }

    /// The bucket's capacity.
    pub fn max_tokens(&self) -> u64 {
        self.schedule.capacity
    }

    /// The time to refill one token (rounded up to a whole nanosecond).
    pub fn token_interval(&self) -> Duration {
        Duration::from_nanos(self.schedule.interval)
    }

    /// The time an empty bucket takes to fill up.
    pub fn refill_time(&self) -> Duration {
        self.schedule.full_span()
    }

    /// Whole tokens in the bucket at `now` for `state`.
    pub fn tokens(&self, state: u64, now: Timestamp) -> u64 {
        self.schedule.available(state, now.clamped_nanos())
    }
}

/// The generic cell rate algorithm: `limit` requests per `period`, bursts of up to `burst`.
///
/// A steady client is admitted one request per `period / limit`; an idle
/// client may send `burst` requests at once. The state is a single
/// timestamp. It decides exactly like a [`TokenBucket`] of `burst` tokens
/// refilled at `limit / period`.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{Gcra, Timestamp, WordAlgorithm};
///
/// // 60 per minute (one a second), bursts of 3.
/// let gcra = Gcra::new(60, Duration::from_secs(60), 3).unwrap();
/// let now = Timestamp::from_secs(1_700_000_000);
/// let mut state = 0;
/// for _ in 0..3 {
///     let (decision, next) = gcra.decide(state, now, 1);
///     assert!(decision.is_allowed());
///     state = next.unwrap();
/// }
/// let (fourth, _) = gcra.decide(state, now, 1);
/// assert!(!fourth.is_allowed());
/// assert_eq!(fourth.retry_after(), Some(Duration::from_secs(1)));
/// assert_eq!(gcra.emission_interval(), Duration::from_secs(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gcra {
    schedule: Schedule,
}

impl Gcra {
    /// `limit` requests per `period`, with bursts of up to `burst` requests.
    pub fn new(limit: u64, period: Duration, burst: u64) -> Result<Self, ConfigError> {
        let schedule = Schedule::new(burst, "burst", limit, "limit", period, "period")?;
        Ok(Gcra { schedule })
    }

    /// The largest burst admitted at once.
    pub fn burst(&self) -> u64 {
        self.schedule.capacity
    }

    /// The emission interval: the steady spacing between admitted requests.
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.schedule.interval)
    }

    /// The time an exhausted burst takes to come back whole.
    pub fn refill_time(&self) -> Duration {
        self.schedule.full_span()
    }

    /// Requests that could pass at once at `now` for `state`.
    pub fn available(&self, state: u64, now: Timestamp) -> u64 {
        self.schedule.available(state, now.clamped_nanos())
    }
}

/// How a leaky bucket treats admitted requests beyond the steady rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DelayMode {
    /// A policer (nginx `nodelay`): everything within the burst passes at once.
    NoDelay,
    /// A shaper (nginx's default): every request above the rate is delayed so
    /// that requests leave at the configured rate.
    Delay,
    /// A two-stage shaper (nginx `delay=N`): the first `N` requests above the
    /// rate pass at once, later ones within the burst are delayed.
    DelayAfter(u64),
}

/// A leaky bucket in the manner of nginx `limit_req`: a meter that drains at a
/// rate, with a `burst` allowance above it.
///
/// A request adds one unit of "excess" (its cost, in general); excess drains
/// at `rate` per `period`. A request that would take the excess above `burst`
/// is rejected and changes nothing. So `rate=10r/s` without burst admits one
/// request per 100 ms, and `burst=5` admits 6 at once from idle. As a
/// shaper, admitted requests above the rate carry a [`Decision::delay`]:
/// `delay = (excess − N) / rate` for `delay=N` (N = 0 by default).
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{DelayMode, LeakyBucket, Timestamp, WordAlgorithm};
///
/// let now = Timestamp::from_secs(1_700_000_000);
/// // nginx `rate=10r/s burst=2 nodelay`: three at once, the fourth refused.
/// let policer = LeakyBucket::policer(10, Duration::from_secs(1), 2).unwrap();
/// let mut state = 0;
/// for _ in 0..3 {
///     let (decision, next) = policer.decide(state, now, 1);
///     assert!(decision.is_allowed() && decision.delay().is_zero());
///     state = next.unwrap();
/// }
/// assert!(!policer.decide(state, now, 1).0.is_allowed());
///
/// // `rate=10r/s burst=2` (a shaper): the second and third pass, delayed to the rate.
/// let shaper = LeakyBucket::new(10, Duration::from_secs(1), 2, DelayMode::Delay).unwrap();
/// let (first, state) = shaper.decide(0, now, 1);
/// assert!(first.delay().is_zero());
/// let (second, _) = shaper.decide(state.unwrap(), now, 1);
/// assert!(second.is_allowed());
/// assert_eq!(second.delay(), Duration::from_millis(100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeakyBucket {
    schedule: Schedule,
    /// Backlog (ns) up to which admitted requests are not delayed.
    undelayed_span: u64,
    mode: DelayMode,
}

impl LeakyBucket {
    /// A leaky bucket draining `rate` requests per `period`, with `burst`
    /// requests of allowance, treating admitted excess as `mode` says.
    pub fn new(
        rate: u64,
        period: Duration,
        burst: u64,
        mode: DelayMode,
    ) -> Result<Self, ConfigError> {
        let capacity = burst
            .checked_add(1)
            .ok_or_else(|| ConfigError::new("burst", "is too large"))?;
        let schedule = Schedule::new(capacity, "burst", rate, "rate", period, "period")?;
        let free_units = match mode {
            DelayMode::NoDelay => capacity,
            DelayMode::Delay => 1,
            DelayMode::DelayAfter(n) => {
                if n > burst {
                    return Err(ConfigError::new(
                        "delay",
                        format!("delay={n} is larger than burst={burst}"),
                    ));
                }
                n + 1
            }
        };
        Ok(LeakyBucket {
            schedule,
            undelayed_span: free_units * schedule.interval,
            mode,
        })
    }

    /// A policer: rejects above the burst, never delays (nginx `nodelay`).
    pub fn policer(rate: u64, period: Duration, burst: u64) -> Result<Self, ConfigError> {
        Self::new(rate, period, burst, DelayMode::NoDelay)
    }

    /// How admitted requests above the rate are treated.
    pub fn mode(&self) -> DelayMode {
        self.mode
    }

    /// The burst allowance above the steady rate.
    pub fn burst(&self) -> u64 {
        self.schedule.capacity - 1
    }

    /// The time one unit of excess takes to drain (one over the rate).
    pub fn drain_interval(&self) -> Duration {
        Duration::from_nanos(self.schedule.interval)
    }

    /// The time a full bucket (burst + 1 units) takes to drain.
    pub fn drain_time(&self) -> Duration {
        self.schedule.full_span()
    }

    /// Units still draining at `now` for `state` (the queue depth of a shaper).
    pub fn queued(&self, state: u64, now: Timestamp) -> u64 {
        state
            .saturating_sub(now.clamped_nanos())
            .div_ceil(self.schedule.interval)
    }
}

/// A rate algorithm as a meter on one [`Schedule`], and what it makes of the meter's decisions.
trait Metered {
    /// The meter the algorithm decides on.
    fn schedule(&self) -> &Schedule;

    /// The decision a request gets from the meter's `decision`: the same one
    /// for a token bucket and GCRA; a leaky bucket adds a shaper's delay.
    #[inline(always)]
    fn shape(&self, decision: Decision) -> Decision {
        decision
    }
}

impl Metered for TokenBucket {
    fn schedule(&self) -> &Schedule {
        &self.schedule
    }
}

impl Metered for Gcra {
    fn schedule(&self) -> &Schedule {
        &self.schedule
    }
}

impl Metered for LeakyBucket {
    fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// An admitted request waits out its backlog beyond the undelayed span.
    #[inline(always)]
    fn shape(&self, decision: Decision) -> Decision {
        if decision.is_allowed() {
            let delay = decision
                .reset_after_nanos()
                .saturating_sub(self.undelayed_span);
            decision.with_delay(delay)
        } else {
            decision
        }
    }
}

/// Writes the one [`WordAlgorithm`] impl of the [`Metered`] algorithms.
///
/// A blanket `impl<M: Metered> WordAlgorithm for M` would clash with
/// `impl WordAlgorithm for &A` (a downstream crate could implement
/// `Metered` for a reference), so the one body is stamped for each type.
macro_rules! word_algorithm_on_schedule {
    ($($meter:ty),+) => {$(
        impl WordAlgorithm for $meter {
            #[inline(always)]
            fn decide(&self, state: u64, now: Timestamp, cost: u64) -> (Decision, Option<u64>) {
                let (decision, new_state) = self.schedule().decide(state, now, cost);
                (self.shape(decision), new_state)
            }

            fn refund(&self, state: u64, now: Timestamp, amount: u64) -> (Decision, Option<u64>) {
                self.schedule().refund(state, now, amount)
            }

            fn fresh_at(&self, state: u64, _now: Timestamp) -> Timestamp {
                self.schedule().fresh_at(state)
            }

            fn used(&self, state: u64, now: Timestamp) -> u64 {
                self.schedule().used(state, now)
            }

            fn max_unexamined(&self) -> Option<Duration> {
                None
            }
        }
    )+};
}

word_algorithm_on_schedule!(TokenBucket, Gcra, LeakyBucket);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn at(ns: u64) -> Timestamp {
        Timestamp::from_nanos(1_000 * S + ns)
    }

    /// Runs `(time ns, cost, expected outcome, expected remaining)` steps.
    fn run(alg: &impl WordAlgorithm, steps: &[(u64, u64, Outcome, u64)]) -> u64 {
        let mut state = 0;
        for (i, &(t, cost, outcome, remaining)) in steps.iter().enumerate() {
            let (d, new) = alg.decide(state, at(t), cost);
            assert_eq!(d.outcome(), outcome, "step {i} at {t} ns");
            assert_eq!(d.remaining(), remaining, "remaining at step {i}");
            if let Some(s) = new {
                state = s;
            }
        }
        state
    }

    #[test]
    fn bucket_of_5_filling_at_2_per_second() {
        // The classic example: 5 tokens, 2 tokens/s (one every 500 ms).
        let tb = TokenBucket::new(5, 2, Duration::from_secs(1)).unwrap();
        use Outcome::*;
        let state = run(
            &tb,
            &[
                (0, 1, Allowed, 4),
                (0, 1, Allowed, 3),
                (0, 1, Allowed, 2),
                (0, 1, Allowed, 1),
                (0, 1, Allowed, 0),
                (0, 1, Denied, 0),
                (499 * MS, 1, Denied, 0),
                (500 * MS, 1, Allowed, 0),
                (1_000 * MS, 2, Denied, 1),
                (1_500 * MS, 2, Allowed, 0),
                (4_000 * MS, 5, Allowed, 0),
                (100 * S, 0, Allowed, 5),
            ],
        );
        assert_eq!(
            tb.tokens(state, at(100 * S)),
            5,
            "idle for long: full, never more"
        );
    }

    #[test]
    fn bucket_reports_retry_after_and_reset_exactly() {
        let tb = TokenBucket::new(5, 2, Duration::from_secs(1)).unwrap();
        let mut state = 0;
        for _ in 0..5 {
            state = tb.decide(state, at(0), 1).1.unwrap();
        }
        let (d, new) = tb.decide(state, at(100 * MS), 3);
        assert_eq!(d.outcome(), Outcome::Denied);
        assert!(new.is_none(), "a denial changes nothing");
        // 3 tokens need 1.5 s from empty at t=0: 1.4 s from t=100 ms.
        assert_eq!(d.retry_after(), Some(Duration::from_millis(1400)));
        assert_eq!(d.reset_after(), Duration::from_millis(2400));
        assert_eq!(
            tb.decide(state, at(1_499_999_999), 3).0.outcome(),
            Outcome::Denied
        );
        assert_eq!(
            tb.decide(state, at(1_500 * MS), 3).0.outcome(),
            Outcome::Allowed
        );
    }

    #[test]
    fn cost_above_capacity_can_never_pass() {
        let tb = TokenBucket::new(5, 2, Duration::from_secs(1)).unwrap();
        let (d, new) = tb.decide(0, at(0), 6);
        assert_eq!(d.outcome(), Outcome::Exceeds);
        assert_eq!(d.retry_after(), None);
        assert_eq!(d.remaining(), 5);
        assert!(new.is_none());
    }

    #[test]
    fn envoy_continuous_refill_10_per_10s_is_1_per_second() {
        // Envoy 1.40 observed: max 10, 10 per 10 s; drained, one passes after ~1 s.
        let tb = TokenBucket::new(10, 10, Duration::from_secs(10)).unwrap();
        let mut state = 0;
        for _ in 0..10 {
            state = tb.decide(state, at(0), 1).1.unwrap();
        }
        assert_eq!(
            tb.decide(state, at(999 * MS), 1).0.outcome(),
            Outcome::Denied
        );
        let (d, s) = tb.decide(state, at(1_300 * MS), 1);
        assert!(d.is_allowed());
        assert_eq!(
            tb.decide(s.unwrap(), at(1_300 * MS), 1).0.outcome(),
            Outcome::Denied
        );
    }

    #[test]
    fn refund_returns_tokens_up_to_capacity() {
        let tb = TokenBucket::new(5, 1, Duration::from_secs(1)).unwrap();
        let mut state = 0;
        for _ in 0..3 {
            state = tb.decide(state, at(0), 1).1.unwrap();
        }
        let (d, s) = tb.refund(state, at(0), 2);
        assert_eq!(d.remaining(), 4);
        let (d, s2) = tb.refund(s.unwrap(), at(0), 10);
        assert_eq!(d.remaining(), 5, "never above capacity");
        assert_eq!(s2, Some(0), "fully refunded is fresh");
        assert_eq!(
            tb.refund(0, at(0), 1).1,
            None,
            "a full bucket does not change"
        );
    }

    #[test]
    fn check_only_consumes_nothing() {
        let tb = TokenBucket::new(2, 1, Duration::from_secs(1)).unwrap();
        let (d, s) = tb.decide(0, at(0), 0);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 2);
        assert_eq!(s, None);
    }

    #[test]
    fn gcra_spaces_requests_after_the_burst() {
        // 10 per second, burst 3: three at once, then one per 100 ms.
        let g = Gcra::new(10, Duration::from_secs(1), 3).unwrap();
        use Outcome::*;
        run(
            &g,
            &[
                (0, 1, Allowed, 2),
                (0, 1, Allowed, 1),
                (0, 1, Allowed, 0),
                (0, 1, Denied, 0),
                (99 * MS, 1, Denied, 0),
                (100 * MS, 1, Allowed, 0),
                (150 * MS, 1, Denied, 0),
                (200 * MS, 1, Allowed, 0),
            ],
        );
    }

    #[test]
    fn gcra_rounds_the_interval_up_never_admitting_faster() {
        let g = Gcra::new(3, Duration::from_secs(1), 1).unwrap();
        assert_eq!(g.emission_interval(), Duration::from_nanos(333_333_334));
    }

    #[test]
    fn nginx_limit_req_10rps_burst_5_eight_parallel() {
        // Observed nginx 1.22: 8 parallel requests, rate=10r/s burst=5.
        let cases = [
            // (mode, delays of admitted requests in ms)
            (DelayMode::Delay, vec![0, 100, 200, 300, 400, 500]),
            (DelayMode::NoDelay, vec![0, 0, 0, 0, 0, 0]),
            (DelayMode::DelayAfter(2), vec![0, 0, 0, 100, 200, 300]),
        ];
        for (mode, delays) in cases {
            let lb = LeakyBucket::new(10, Duration::from_secs(1), 5, mode).unwrap();
            let mut state = 0;
            let mut admitted = vec![];
            let mut rejected = 0;
            for _ in 0..8 {
                let (d, s) = lb.decide(state, at(0), 1);
                if d.is_allowed() {
                    admitted.push(d.delay_nanos() / MS);
                    state = s.unwrap();
                } else {
                    rejected += 1;
                }
            }
            assert_eq!(admitted, delays, "{mode:?}");
            assert_eq!(rejected, 2, "{mode:?}");
        }
    }

    #[test]
    fn nginx_without_burst_admits_one_per_interval() {
        let lb = LeakyBucket::policer(10, Duration::from_secs(1), 0).unwrap();
        use Outcome::*;
        run(
            &lb,
            &[
                (0, 1, Allowed, 0),
                (50 * MS, 1, Denied, 0),
                (100 * MS, 1, Allowed, 0),
            ],
        );
        assert_eq!(lb.queued(0, at(0)), 0);
    }

    #[test]
    fn whole_units_matches_integer_division() {
        let schedules = [
            Schedule::new(5, "c", 2, "n", Duration::from_secs(1), "p").unwrap(),
            Schedule::new(1_000_000_000, "c", 3, "n", Duration::from_secs(1), "p").unwrap(),
            Schedule::new(1 << 49, "c", 1, "n", Duration::from_nanos(7), "p").unwrap(),
            Schedule::new(1 << 60, "c", 1, "n", Duration::from_nanos(2), "p").unwrap(),
            Schedule::new(1 << 60, "c", 1, "n", Duration::from_nanos(1), "p").unwrap(),
            Schedule::new(3, "c", 1, "n", Duration::from_nanos(1 << 59), "p").unwrap(),
        ];
        for sch in schedules {
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for _ in 0..100_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let free = x % (sch.span + 1);
                assert_eq!(
                    sch.whole_units(free),
                    free / sch.interval,
                    "{free} / {}",
                    sch.interval
                );
            }
            for k in [0, 1, sch.capacity - 1, sch.capacity] {
                for d in [0, 1] {
                    let free = (k * sch.interval).saturating_sub(d).min(sch.span);
                    assert_eq!(sch.whole_units(free), free / sch.interval);
                }
            }
        }
    }

    #[test]
    fn bad_parameters_are_named() {
        let e = TokenBucket::new(0, 1, Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.parameter(), "max_tokens");
        let e = TokenBucket::new(1, 1, Duration::ZERO).unwrap_err();
        assert_eq!(e.parameter(), "fill_interval");
        let e = Gcra::new(2_000_000_000, Duration::from_secs(1), 1).unwrap_err();
        assert_eq!(e.parameter(), "limit");
        let e =
            LeakyBucket::new(1, Duration::from_secs(1), 2, DelayMode::DelayAfter(3)).unwrap_err();
        assert_eq!(e.parameter(), "delay");
        let e = TokenBucket::new(u64::MAX, 1, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().starts_with("max_tokens: "), "{e}");
    }
}
