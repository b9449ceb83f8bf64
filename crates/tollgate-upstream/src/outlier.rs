//! Outlier detection: endpoints that keep failing are ejected for a while.
//!
//! Envoy's consecutive detectors, decided on every outcome:
//!
//! * a 5xx or a gateway failure adds one to the endpoint's consecutive-5xx
//!   count; a gateway failure (502, 503, 504, connect error, timeout, reset)
//!   also adds one to its consecutive-gateway-failure count, any other 5xx
//!   resets that one; a success resets both.
//! * when a count reaches its threshold (exactly, as in Envoy), the endpoint
//!   is ejected with probability `enforcing_*` percent, unless that would put
//!   more than `max_ejection_percent` of the cluster out (one endpoint is
//!   ejected regardless when `always_eject_one_host` is set and none is).
//! * an ejection lasts `base_ejection_time` × the endpoint's multiplier, at
//!   most `max(max_ejection_time, base_ejection_time)`. The multiplier grows
//!   by one per ejection while `base_ejection_time` × multiplier is under the
//!   cap, and drops by one per `interval` the endpoint spent back in service
//!   (so with 10 s and a 25 s cap: 10 s, 20 s, 25 s, 25 s, ...).
//!
//! An ejected endpoint returns at the exact instant its ejection ends (Envoy
//! returns it at the next `interval` sweep after that).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tollgate_core::Timestamp;

use crate::config::OutlierDetectionConfig;

/// What an endpoint's answer was, as the detectors see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Any answer that is not a 5xx.
    Success,
    /// A 5xx that is not a gateway failure (500, 501, 505, ...).
    ServerError,
    /// 502, 503 or 504, or no answer: connect error, timeout, reset.
    GatewayFailure,
}

impl Outcome {
    /// The outcome of an HTTP answer with `status`.
    pub fn from_status(status: u16) -> Self {
        match status {
            502..=504 => Outcome::GatewayFailure,
            500..=599 => Outcome::ServerError,
            _ => Outcome::Success,
        }
    }

    /// Whether this outcome counts as a failure (for the breaker too).
    pub fn is_failure(self) -> bool {
        self != Outcome::Success
    }
}

/// The per-endpoint counters the detectors update without a lock.
#[derive(Debug, Default)]
pub(crate) struct FailureCounts {
    pub(crate) consecutive_5xx: AtomicU32,
    pub(crate) consecutive_gateway: AtomicU32,
}

/// Which detector fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detector {
    Consecutive5xx,
    ConsecutiveGatewayFailure,
}

impl FailureCounts {
    /// Counts an outcome and returns the detectors that reached their threshold.
    pub(crate) fn count(
        &self,
        outcome: Outcome,
        config: &OutlierDetectionConfig,
    ) -> [Option<Detector>; 2] {
        match outcome {
            Outcome::Success => {
                reset(&self.consecutive_5xx);
                reset(&self.consecutive_gateway);
                [None, None]
            }
            Outcome::ServerError => {
                reset(&self.consecutive_gateway);
                let n = self.consecutive_5xx.fetch_add(1, Ordering::AcqRel) + 1;
                [
                    (n == config.consecutive_5xx).then_some(Detector::Consecutive5xx),
                    None,
                ]
            }
            Outcome::GatewayFailure => {
                let g = self.consecutive_gateway.fetch_add(1, Ordering::AcqRel) + 1;
                let n = self.consecutive_5xx.fetch_add(1, Ordering::AcqRel) + 1;
                [
                    (g == config.consecutive_gateway_failure)
                        .then_some(Detector::ConsecutiveGatewayFailure),
                    (n == config.consecutive_5xx).then_some(Detector::Consecutive5xx),
                ]
            }
        }
    }

    pub(crate) fn clear(&self) {
        reset(&self.consecutive_5xx);
        reset(&self.consecutive_gateway);
    }
}

fn reset(counter: &AtomicU32) {
    if counter.load(Ordering::Relaxed) != 0 {
        counter.store(0, Ordering::Release);
    }
}

/// One endpoint's ejection state, readable without a lock.
#[derive(Debug)]
pub(crate) struct EjectionState {
    /// Nanoseconds since the epoch when the ejection ends; 0 when not ejected.
    pub(crate) until: AtomicU64,
    pub(crate) ejected_gauge: Gauge,
    pub(crate) ejections: Counter,
}

impl EjectionState {
    pub(crate) fn new(ejected_gauge: Gauge, ejections: Counter) -> Self {
        EjectionState {
            until: AtomicU64::new(0),
            ejected_gauge,
            ejections,
        }
    }

    /// Whether the endpoint is ejected at `now`; an ejection that has run
    /// out is cleared on the way.
    pub(crate) fn is_ejected(&self, now: Timestamp) -> bool {
        let until = self.until.load(Ordering::Acquire);
        if until == 0 {
            return false;
        }
        if now.as_nanos() < until {
            return true;
        }
        if self
            .until
            .compare_exchange(until, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.ejected_gauge.set(0);
        }
        false
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct History {
    multiplier: u32,
    last_ejection_end: Option<Timestamp>,
}

/// The ejection decisions of one cluster.
pub(crate) struct OutlierDetector {
    pub(crate) config: OutlierDetectionConfig,
    history: Mutex<Vec<History>>,
    overflow: Counter,
}

impl OutlierDetector {
    pub(crate) fn new(config: OutlierDetectionConfig, endpoints: usize, overflow: Counter) -> Self {
        OutlierDetector {
            config,
            history: Mutex::new(vec![History::default(); endpoints]),
            overflow,
        }
    }

    /// The enforcement percentage of a detector.
    pub(crate) fn enforcing(&self, detector: Detector) -> u32 {
        match detector {
            Detector::Consecutive5xx => self.config.enforcing_consecutive_5xx,
            Detector::ConsecutiveGatewayFailure => {
                self.config.enforcing_consecutive_gateway_failure
            }
        }
    }

    /// Ejects endpoint `index` at `now` if the cluster may lose it; returns
    /// how long it is out.
    pub(crate) fn eject(
        &self,
        ejections: &[EjectionState],
        index: usize,
        now: Timestamp,
    ) -> Option<Duration> {
        let mut history = self.history.lock();
        if ejections[index].is_ejected(now) {
            return None;
        }
        let ejected = ejections.iter().filter(|e| e.is_ejected(now)).count();
        let total = ejections.len();
        let within_percent =
            (ejected + 1) * 100 <= self.config.max_ejection_percent as usize * total;
        let first_one_allowed = self.config.always_eject_one_host && ejected == 0;
        if !(within_percent || first_one_allowed) {
            self.overflow.inc();
            return None;
        }
        let h = &mut history[index];
        let base = self.config.base_ejection_time;
        let cap = self.config.max_ejection_time.max(base);
        let decayed = match h.last_ejection_end {
            Some(end) => {
                let back_for = now.saturating_since(end);
                let intervals = back_for.as_nanos() / self.config.interval.as_nanos().max(1);
                h.multiplier
                    .saturating_sub(u32::try_from(intervals).unwrap_or(u32::MAX))
            }
            None => 0,
        };
        let multiplier = if decayed == 0 || base.saturating_mul(decayed) < cap {
            decayed.saturating_add(1)
        } else {
            decayed
        };
        let out_for = base.saturating_mul(multiplier).min(cap);
        let until = now.saturating_add(out_for);
        h.multiplier = multiplier;
        h.last_ejection_end = Some(until);
        let state = &ejections[index];
        state
            .until
            .store(until.as_nanos().max(1), Ordering::Release);
        state.ejected_gauge.set(1);
        state.ejections.inc();
        Some(out_for)
    }
}
