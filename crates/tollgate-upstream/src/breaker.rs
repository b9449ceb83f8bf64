//! The cluster's circuit breaker: closed → open → half-open → closed.
//!
//! * **Closed**: every request goes through; `failure_threshold`
//!   consecutive failures (5xx or gateway failure) open the breaker.
//! * **Open**: every request is refused with the time left as its retry
//!   hint, for `open_duration` × 2^(opens in a row − 1), capped by
//!   `max_open_duration`.
//! * **Half-open**: once that time has passed, up to `half_open_requests`
//!   probes go through at once; the first probe that succeeds closes the
//!   breaker (and resets the backoff), a probe that fails opens it again for
//!   twice as long. A probe dropped without an outcome frees its slot.
//!
//! Requests admitted while closed that finish after the breaker opened do
//! not change its state.

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tollgate_core::Timestamp;

use crate::config::CircuitBreakerConfig;

/// Where the breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests flow; failures are counted.
    Closed,
    /// Requests are refused until the backoff has passed.
    Open,
    /// A few probes decide whether to close again.
    HalfOpen,
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// What kind of admission a request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Admitted while closed.
    Normal,
    /// One of the half-open probes of the given half-open period.
    Probe(u64),
}

struct Transitions {
    open_until: Timestamp,
    opens_in_a_row: u32,
    probes_in_flight: u32,
    half_open_period: u64,
}

/// The breaker of one cluster.
pub(crate) struct CircuitBreaker {
    config: CircuitBreakerConfig,
    state: AtomicU8,
    consecutive_failures: AtomicU32,
    transitions: Mutex<Transitions>,
    state_gauge: Gauge,
    opened: Counter,
}

impl CircuitBreaker {
    pub(crate) fn new(config: CircuitBreakerConfig, state_gauge: Gauge, opened: Counter) -> Self {
        state_gauge.set(i64::from(CLOSED));
        CircuitBreaker {
            config,
            state: AtomicU8::new(CLOSED),
            consecutive_failures: AtomicU32::new(0),
            transitions: Mutex::new(Transitions {
                open_until: Timestamp::EPOCH,
                opens_in_a_row: 0,
                probes_in_flight: 0,
                half_open_period: 0,
            }),
            state_gauge,
            opened,
        }
    }

    /// The state as of the last transition (an open breaker whose time has
    /// passed turns half-open at the next request).
    pub(crate) fn state(&self) -> BreakerState {
        match self.state.load(Ordering::Acquire) {
            CLOSED => BreakerState::Closed,
            OPEN => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    /// Admits a request, or says how long until the breaker may let one through.
    pub(crate) fn acquire(&self, now: Timestamp) -> Result<Permit, Duration> {
        if self.state.load(Ordering::Acquire) == CLOSED {
            return Ok(Permit::Normal);
        }
        let mut t = self.transitions.lock();
        match self.state.load(Ordering::Acquire) {
            CLOSED => Ok(Permit::Normal),
            OPEN if now < t.open_until => Err(t.open_until.saturating_since(now)),
            _ => {
                if self.state.load(Ordering::Acquire) == OPEN {
                    self.set_state(HALF_OPEN);
                    t.probes_in_flight = 0;
                    t.half_open_period += 1;
                }
                if t.probes_in_flight < self.config.half_open_requests {
                    t.probes_in_flight += 1;
                    Ok(Permit::Probe(t.half_open_period))
                } else {
                    Err(self.config.open_duration)
                }
            }
        }
    }

    /// Takes the outcome of a request admitted with `permit`.
    pub(crate) fn record(&self, permit: Permit, failed: bool, now: Timestamp) {
        match permit {
            Permit::Normal => {
                if failed {
                    let failures = self.consecutive_failures.fetch_add(1, Ordering::AcqRel) + 1;
                    if failures >= self.config.failure_threshold
                        && self.state.load(Ordering::Acquire) == CLOSED
                    {
                        let mut t = self.transitions.lock();
                        if self.state.load(Ordering::Acquire) == CLOSED {
                            self.trip(&mut t, now);
                        }
                    }
                } else if self.consecutive_failures.load(Ordering::Relaxed) != 0 {
                    self.consecutive_failures.store(0, Ordering::Release);
                }
            }
            Permit::Probe(period) => {
                let mut t = self.transitions.lock();
                if t.half_open_period != period || self.state.load(Ordering::Acquire) != HALF_OPEN {
                    return;
                }
                t.probes_in_flight = t.probes_in_flight.saturating_sub(1);
                if failed {
                    self.trip(&mut t, now);
                } else {
                    t.opens_in_a_row = 0;
                    self.consecutive_failures.store(0, Ordering::Release);
                    self.set_state(CLOSED);
                }
            }
        }
    }

    /// Frees a probe's slot when it ended without an outcome.
    pub(crate) fn release_probe(&self, period: u64) {
        let mut t = self.transitions.lock();
        if t.half_open_period == period {
            t.probes_in_flight = t.probes_in_flight.saturating_sub(1);
        }
    }

    fn trip(&self, t: &mut Transitions, now: Timestamp) {
        t.opens_in_a_row = t.opens_in_a_row.saturating_add(1);
        let doublings = t.opens_in_a_row.saturating_sub(1).min(31);
        let open_for = self
            .config
            .open_duration
            .saturating_mul(1u32 << doublings)
            .min(self.config.max_open_duration);
        t.open_until = now.saturating_add(open_for);
        t.probes_in_flight = 0;
        self.consecutive_failures.store(0, Ordering::Release);
        self.set_state(OPEN);
        self.opened.inc();
    }

    fn set_state(&self, state: u8) {
        self.state.store(state, Ordering::Release);
        self.state_gauge.set(i64::from(state));
    }
}
