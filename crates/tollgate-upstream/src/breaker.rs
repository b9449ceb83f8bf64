//! The cluster's circuit breaker: the core's [`CircuitBreaker`] state machine, shared by threads, with a lock-free closed path.
//!
//! The rules (closed → open → half-open → closed, the doubling backoff, the
//! probes) are `tollgate_core::breaker`'s; this file maps the cluster's
//! `circuit_breaker` settings onto its [`BreakerPolicy`]
//! (`half_open_requests` probes at once), keeps the machine under a lock,
//! and mirrors its state in atomics so that while the breaker is closed and
//! nothing failed, admitting a request and recording its success take no
//! lock. The state gauge and the opened counter follow every transition.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tollgate_core::Timestamp;
pub use tollgate_core::breaker::BreakerState;
use tollgate_core::breaker::{Admission, BreakerPolicy, CircuitBreaker as Machine};

use crate::config::CircuitBreakerConfig;

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

fn code(state: BreakerState) -> u8 {
    match state {
        BreakerState::Closed => CLOSED,
        BreakerState::Open => OPEN,
        BreakerState::HalfOpen => HALF_OPEN,
    }
}

/// The breaker of one cluster.
pub(crate) struct CircuitBreaker {
    machine: Mutex<Machine>,
    /// The machine's state, readable without the lock.
    state: AtomicU8,
    /// Whether the machine counts consecutive failures (a success must reset them).
    failing: AtomicBool,
    state_gauge: Gauge,
    opened: Counter,
}

impl CircuitBreaker {
    pub(crate) fn new(config: CircuitBreakerConfig, state_gauge: Gauge, opened: Counter) -> Self {
        state_gauge.set(i64::from(CLOSED));
        CircuitBreaker {
            machine: Mutex::new(Machine::new(BreakerPolicy {
                failure_threshold: config.failure_threshold,
                open_duration: config.open_duration,
                max_open_duration: config.max_open_duration,
                half_open_probes: config.half_open_requests,
            })),
            state: AtomicU8::new(CLOSED),
            failing: AtomicBool::new(false),
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
    pub(crate) fn acquire(&self, now: Timestamp) -> Result<Admission, Duration> {
        if self.state.load(Ordering::Acquire) == CLOSED {
            return Ok(Admission::Closed);
        }
        self.update(|m| m.acquire(now))
    }

    /// Takes the outcome of a request admitted with `admission`.
    pub(crate) fn record(&self, admission: Admission, failed: bool, now: Timestamp) {
        if failed {
            self.update(|m| m.record_failure(admission, now));
        } else if admission != Admission::Closed || self.failing.load(Ordering::Acquire) {
            self.update(|m| m.record_success(admission));
        }
    }

    /// Frees a probe's slot when it ended without an outcome.
    pub(crate) fn release_probe(&self, period: u64) {
        self.update(|m| m.release_probe(period));
    }

    /// Runs `change` on the machine and mirrors its state, gauge and opened counter.
    fn update<T>(&self, change: impl FnOnce(&mut Machine) -> T) -> T {
        let mut machine = self.machine.lock();
        let before = machine.state();
        let result = change(&mut machine);
        let after = machine.state();
        self.failing
            .store(machine.consecutive_failures() > 0, Ordering::Release);
        if after != before {
            // Only a closed or half-open breaker trips.
            if after == BreakerState::Open {
                self.opened.inc();
            }
            self.state.store(code(after), Ordering::Release);
            self.state_gauge.set(i64::from(code(after)));
        }
        result
    }
}
