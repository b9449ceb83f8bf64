//! [`AdaptiveThrottle`]: client-side adaptive throttling as Google's SRE book defines it, over an injected clock.
//!
//! *Site Reliability Engineering*, chapter 21 ("Handling Overload"), has
//! each client keep two counts over a recent window:
//!
//! * **requests**: the requests the application tried to send, including
//!   the ones this throttle rejected locally;
//! * **accepts**: the requests the backend accepted (here: any answer but
//!   429 and 503, and no transport error).
//!
//! A request is the application's: the [`Backoff`](crate::Backoff) layer
//! draws it against the throttle once, before its first try, and counts it
//! accepted when any of its tries is. Its retries are not drawn again (the
//! retry budget bounds them), so one 429 answered by a successful retry
//! leaves `requests = accepts` and nothing is rejected.
//!
//! and reject a new request locally, before it is sent, with probability
//!
//! ```text
//! p = max(0, (requests − K · accepts) / (requests + 1))
//! ```
//!
//! `K` (the book's default 2, [`AdaptiveThrottle::DEFAULT_K`]) sets how far
//! requests may run ahead of accepts: nothing is rejected while
//! `requests ≤ K · accepts`, that is while the backend accepts at least one
//! request in `K`. Smaller `K` throttles sooner and harder; larger `K` lets
//! more doomed requests through (which the backend then spends work
//! rejecting), in exchange for finding out sooner that it recovered.
//!
//! # The window: exponential decay
//!
//! The book keeps "two minutes of history". Here both counts decay
//! exponentially with a time constant `τ` ([`AdaptiveThrottle::DEFAULT_WINDOW`],
//! two minutes): between two events `Δt` apart each count is multiplied by
//! `e^(−Δt/τ)`, then the event adds 1. A count is thus a sum over past
//! events weighted by `e^(−age/τ)`; events older than a few `τ` no longer
//! matter, and no per-request log is kept (two `f64`s and a timestamp).
//! Under steady rates `R` requests/s and `A` accepts/s the counts tend to
//! `R·τ` and `A·τ`, so
//!
//! ```text
//! p → (R − K·A) / (R + 1/τ) ≈ 1 − K·A/R,
//! ```
//!
//! and the rate that still reaches the backend, `R·(1 − p)`, tends to `K·A`:
//! a client sends about `K` times what is being accepted. Decay applies to
//! both counts alike, so it never changes their ratio by itself, only how
//! fast old events stop counting.
//!
//! The machine reads no clock and draws no random number: the caller passes
//! `now` and a uniform draw `u ∈ [0, 1)`, and the request is rejected when
//! `u < p`.

use std::time::Duration;

use tollgate_core::Timestamp;

/// The adaptive throttle's two decayed counts.
#[derive(Clone, Debug)]
pub struct AdaptiveThrottle {
    k: f64,
    window: Duration,
    requests: f64,
    accepts: f64,
    last: Option<Timestamp>,
}

impl Default for AdaptiveThrottle {
    fn default() -> Self {
        AdaptiveThrottle::new(Self::DEFAULT_K, Self::DEFAULT_WINDOW)
    }
}

impl AdaptiveThrottle {
    /// The SRE book's multiplier.
    pub const DEFAULT_K: f64 = 2.0;
    /// The SRE book's two minutes of history, as the decay time constant.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(120);

    /// A throttle with multiplier `k` (below 1 is taken as 1: a client may
    /// always send what is accepted) and decay time constant `window` (at least 1 ms).
    pub fn new(k: f64, window: Duration) -> Self {
        AdaptiveThrottle {
            k: if k.is_finite() {
                k.max(1.0)
            } else {
                Self::DEFAULT_K
            },
            window: window.max(Duration::from_millis(1)),
            requests: 0.0,
            accepts: 0.0,
            last: None,
        }
    }

    /// `K`.
    pub fn k(&self) -> f64 {
        self.k
    }

    /// The decayed `(requests, accepts)` at `now`.
    pub fn counts(&mut self, now: Timestamp) -> (f64, f64) {
        self.decay(now);
        (self.requests, self.accepts)
    }

    /// The probability of a local rejection at `now`: `max(0, (requests − K·accepts) / (requests + 1))`.
    pub fn rejection_probability(&mut self, now: Timestamp) -> f64 {
        self.decay(now);
        ((self.requests - self.k * self.accepts) / (self.requests + 1.0)).max(0.0)
    }

    /// Counts a request the application tries at `now`, and says whether to
    /// send it (`true`) or reject it locally (`false`), given a uniform draw `u ∈ [0, 1)`.
    pub fn try_request(&mut self, now: Timestamp, u: f64) -> bool {
        let p = self.rejection_probability(now);
        self.requests += 1.0;
        u >= p
    }

    /// Counts that the backend accepted a request at `now`.
    pub fn record_accept(&mut self, now: Timestamp) {
        self.decay(now);
        self.accepts += 1.0;
    }

    fn decay(&mut self, now: Timestamp) {
        if let Some(last) = self.last {
            let elapsed = now.saturating_since(last);
            if elapsed.is_zero() {
                return;
            }
            let factor = (-elapsed.as_secs_f64() / self.window.as_secs_f64()).exp();
            self.requests *= factor;
            self.accepts *= factor;
        }
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_secs(1_000);

    fn at(ms: u64) -> Timestamp {
        T0.saturating_add(Duration::from_millis(ms))
    }

    #[test]
    fn nothing_is_rejected_while_the_backend_accepts_one_in_k() {
        let mut t = AdaptiveThrottle::default();
        for i in 0..1_000 {
            // Decay weighs the newest request a little above the older
            // accept, so p hovers just above 0 (about Δt/τ), never more.
            assert!(t.rejection_probability(at(i)) < 1e-4, "request {i}");
            assert!(t.try_request(at(i), 1e-4), "request {i}");
            if i % 2 == 0 {
                t.record_accept(at(i));
            }
        }
        assert!(t.rejection_probability(at(1_000)) < 1e-4);
    }

    #[test]
    fn the_probability_is_the_books_formula() {
        // No time passes, so no decay: 10 requests, 3 accepts, K = 2.
        let mut t = AdaptiveThrottle::new(2.0, Duration::from_secs(120));
        for i in 0..10 {
            t.try_request(T0, 0.99);
            if i < 3 {
                t.record_accept(T0);
            }
        }
        assert_eq!(t.counts(T0), (10.0, 3.0));
        let p = t.rejection_probability(T0);
        assert!((p - (10.0 - 2.0 * 3.0) / 11.0).abs() < 1e-12, "{p}");
        // K = 3 admits 3 · 3 = 9 ≤ 10 − … : p = (10 − 9) / 11.
        let mut k3 = AdaptiveThrottle::new(3.0, Duration::from_secs(120));
        for i in 0..10 {
            k3.try_request(T0, 0.99);
            if i < 3 {
                k3.record_accept(T0);
            }
        }
        assert!((k3.rejection_probability(T0) - 1.0 / 11.0).abs() < 1e-12);
        // A draw below p rejects, one at or above it sends.
        let p = t.rejection_probability(T0);
        let mut copy = t.clone();
        assert!(!copy.try_request(T0, p / 2.0));
        assert!(t.try_request(T0, p));
    }

    #[test]
    fn counts_decay_with_the_time_constant() {
        let mut t = AdaptiveThrottle::new(2.0, Duration::from_secs(10));
        for _ in 0..100 {
            t.try_request(T0, 0.99);
        }
        let (requests, _) = t.counts(T0.saturating_add(Duration::from_secs(10)));
        assert!((requests - 100.0 / std::f64::consts::E).abs() < 1e-9);
        assert!(t.rejection_probability(T0.saturating_add(Duration::from_secs(200))) < 1e-6);
        // A clock read out of order does not undo decay or panic.
        assert!(t.counts(T0).0 < 1e-6);
    }
}
