//! [`CircuitBreaker`]: closed → open → half-open → closed, as a pure state machine over the caller's clock.
//!
//! * **Closed**: every call is admitted ([`Admission::Closed`]);
//!   `failure_threshold` consecutive failures open the breaker.
//! * **Open**: every call is refused with the time left as its retry hint,
//!   for `open_duration` × 2^(opens in a row − 1), capped by
//!   `max_open_duration`.
//! * **Half-open**: once that time has passed, up to `half_open_probes`
//!   probes are admitted at once ([`Admission::Probe`]); a probe that
//!   succeeds closes the breaker (and resets the backoff), a probe that fails
//!   opens it again for twice as long. A probe given back without an outcome
//!   ([`CircuitBreaker::release_probe`]) frees its slot.
//!
//! An outcome belongs to the admission it was given: a call admitted while
//! closed that finishes after the breaker opened does not change its state,
//! nor does a probe of an earlier half-open period.
//!
//! The machine reads no clock and takes no lock: callers pass `now` and keep
//! it where they like. The upstream clusters of `tollgate-upstream` (several
//! probes, a lock-free closed path) and the Redis store of `tollgate-server`
//! (one probe, a mutex) both run this one; their thresholds and backoffs are
//! its [`BreakerPolicy`].

use std::time::Duration;

use crate::Timestamp;

/// When a breaker opens and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Consecutive failures that open a closed breaker (at least 1).
    pub failure_threshold: u32,
    /// How long the first opening lasts; each failed probe doubles it.
    pub open_duration: Duration,
    /// The longest an opening lasts (at least `open_duration`).
    pub max_open_duration: Duration,
    /// Probes admitted at once while half-open.
    pub half_open_probes: u32,
}

/// Where a breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls flow; failures are counted.
    Closed,
    /// Calls are refused until the backoff has passed.
    Open,
    /// A few probes decide whether to close again.
    HalfOpen,
}

/// How a call was admitted; its outcome is recorded against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Admitted while closed.
    Closed,
    /// One of the probes of the given half-open period.
    Probe(u64),
}

/// A circuit breaker's state, changed only by the calls below.
#[derive(Clone, Debug)]
pub struct CircuitBreaker {
    policy: BreakerPolicy,
    state: BreakerState,
    consecutive_failures: u32,
    opens_in_a_row: u32,
    open_until: Timestamp,
    open_for: Duration,
    probes_in_flight: u32,
    half_open_period: u64,
}

impl CircuitBreaker {
    /// A closed breaker with `policy` (a zero threshold counts as 1, a cap below `open_duration` as `open_duration`).
    pub fn new(mut policy: BreakerPolicy) -> Self {
        policy.failure_threshold = policy.failure_threshold.max(1);
        policy.max_open_duration = policy.max_open_duration.max(policy.open_duration);
        CircuitBreaker {
            policy,
            state: BreakerState::Closed,
            consecutive_failures: 0,
            opens_in_a_row: 0,
            open_until: Timestamp::EPOCH,
            open_for: Duration::ZERO,
            probes_in_flight: 0,
            half_open_period: 0,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &BreakerPolicy {
        &self.policy
    }

    /// The state as of the last call (an open breaker whose time has passed
    /// turns half-open at the next [`acquire`](Self::acquire)).
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Consecutive failures counted while closed.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// When the current (or last) opening ends.
    pub fn open_until(&self) -> Timestamp {
        self.open_until
    }

    /// How long the current (or last) opening lasts.
    pub fn open_for(&self) -> Duration {
        self.open_for
    }

    /// Admits a call at `now`, or says how long until the breaker may admit one.
    pub fn acquire(&mut self, now: Timestamp) -> Result<Admission, Duration> {
        match self.state {
            BreakerState::Closed => return Ok(Admission::Closed),
            BreakerState::Open if now < self.open_until => {
                return Err(self.open_until.saturating_since(now));
            }
            BreakerState::Open => {
                self.state = BreakerState::HalfOpen;
                self.probes_in_flight = 0;
                self.half_open_period += 1;
            }
            BreakerState::HalfOpen => {}
        }
        if self.probes_in_flight < self.policy.half_open_probes {
            self.probes_in_flight += 1;
            Ok(Admission::Probe(self.half_open_period))
        } else {
            Err(self.policy.open_duration)
        }
    }

    /// The admission a call made now would get, without taking a probe slot
    /// (`None` while open): for callers that let one call out at a time and
    /// record outcomes without keeping admissions.
    pub fn current_admission(&self) -> Option<Admission> {
        match self.state {
            BreakerState::Closed => Some(Admission::Closed),
            BreakerState::Open => None,
            BreakerState::HalfOpen => Some(Admission::Probe(self.half_open_period)),
        }
    }

    /// Records that the call admitted with `admission` succeeded.
    pub fn record_success(&mut self, admission: Admission) {
        match admission {
            Admission::Closed => self.consecutive_failures = 0,
            Admission::Probe(period) => {
                if self.is_current_probe(period) {
                    self.probes_in_flight = self.probes_in_flight.saturating_sub(1);
                    self.opens_in_a_row = 0;
                    self.consecutive_failures = 0;
                    self.state = BreakerState::Closed;
                }
            }
        }
    }

    /// Records that the call admitted with `admission` failed at `now`.
    pub fn record_failure(&mut self, admission: Admission, now: Timestamp) {
        match admission {
            Admission::Closed => {
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                if self.consecutive_failures >= self.policy.failure_threshold
                    && self.state == BreakerState::Closed
                {
                    self.trip(now);
                }
            }
            Admission::Probe(period) => {
                if self.is_current_probe(period) {
                    self.probes_in_flight = self.probes_in_flight.saturating_sub(1);
                    self.trip(now);
                }
            }
        }
    }

    /// Frees the slot of a probe of `period` that ended without an outcome.
    pub fn release_probe(&mut self, period: u64) {
        if self.half_open_period == period {
            self.probes_in_flight = self.probes_in_flight.saturating_sub(1);
        }
    }

    fn is_current_probe(&self, period: u64) -> bool {
        self.half_open_period == period && self.state == BreakerState::HalfOpen
    }

    fn trip(&mut self, now: Timestamp) {
        self.opens_in_a_row = self.opens_in_a_row.saturating_add(1);
        let doublings = self.opens_in_a_row.saturating_sub(1).min(31);
        self.open_for = self
            .policy
            .open_duration
            .saturating_mul(1u32 << doublings)
            .min(self.policy.max_open_duration);
        self.open_until = now.saturating_add(self.open_for);
        self.probes_in_flight = 0;
        self.consecutive_failures = 0;
        self.state = BreakerState::Open;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn breaker(probes: u32) -> CircuitBreaker {
        CircuitBreaker::new(BreakerPolicy {
            failure_threshold: 2,
            open_duration: 100 * MS,
            max_open_duration: 300 * MS,
            half_open_probes: probes,
        })
    }

    #[test]
    fn opens_probes_doubles_up_to_the_cap_and_closes() {
        let t0 = Timestamp::from_secs(10);
        let at = |ms: u64| t0.saturating_add(Duration::from_millis(ms));
        let mut b = breaker(1);
        b.record_failure(Admission::Closed, t0);
        b.record_success(Admission::Closed);
        b.record_failure(Admission::Closed, t0);
        assert_eq!(b.state(), BreakerState::Closed);
        b.record_failure(Admission::Closed, t0);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.acquire(at(40)), Err(60 * MS));
        let probe = b.acquire(at(100)).unwrap();
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.acquire(at(100)), Err(100 * MS), "one probe at a time");
        b.record_failure(probe, at(100));
        assert_eq!(b.open_for(), 200 * MS);
        let probe = b.acquire(at(300)).unwrap();
        b.record_failure(probe, at(300));
        assert_eq!(b.open_for(), 300 * MS, "capped");
        let probe = b.acquire(at(600)).unwrap();
        b.record_success(probe);
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.acquire(at(600)), Ok(Admission::Closed));
    }

    #[test]
    fn outcomes_of_earlier_admissions_do_not_move_it() {
        let t0 = Timestamp::from_secs(10);
        let mut b = breaker(2);
        b.record_failure(Admission::Closed, t0);
        b.record_failure(Admission::Closed, t0);
        assert_eq!(b.current_admission(), None);
        b.record_success(Admission::Closed);
        assert_eq!(b.state(), BreakerState::Open, "admitted before the trip");
        let later = t0.saturating_add(100 * MS);
        let first = b.acquire(later).unwrap();
        let second = b.acquire(later).unwrap();
        assert!(b.acquire(later).is_err());
        b.release_probe(1);
        assert!(
            b.acquire(later).is_ok(),
            "a given-back probe frees its slot"
        );
        b.record_failure(first, later);
        b.record_success(second);
        assert_eq!(b.state(), BreakerState::Open, "a probe of a past period");
    }
}
