//! What an algorithm answers for one request.

use std::time::Duration;

/// Whether a request passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The request passed (a shaper may still ask to delay it, see [`Decision::delay`]).
    Allowed,
    /// The request is over the limit now; the same request can pass after [`Decision::retry_after`].
    Denied,
    /// The request costs more than the limit can ever hold; it will never pass.
    Exceeds,
}

/// The answer to one request: whether it passed, and what the caller is told.
///
/// `limit`, `remaining` and the times describe the limit after this request
/// (a denied request consumes nothing, except where an algorithm's documented
/// semantics say otherwise: the fixed window counts denied requests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    outcome: Outcome,
    limit: u64,
    remaining: u64,
    reset_after_ns: u64,
    retry_after_ns: u64,
    delay_ns: u64,
}

impl Decision {
    pub(crate) fn allowed(limit: u64, remaining: u64, reset_after_ns: u64) -> Self {
        Decision {
            outcome: Outcome::Allowed,
            limit,
            remaining,
            reset_after_ns,
            retry_after_ns: 0,
            delay_ns: 0,
        }
    }

    pub(crate) fn denied(
        limit: u64,
        remaining: u64,
        reset_after_ns: u64,
        retry_after_ns: u64,
    ) -> Self {
        Decision {
            outcome: Outcome::Denied,
            limit,
            remaining,
            reset_after_ns,
            retry_after_ns,
            delay_ns: 0,
        }
    }

    pub(crate) fn exceeds(limit: u64, remaining: u64, reset_after_ns: u64) -> Self {
        Decision {
            outcome: Outcome::Exceeds,
            limit,
            remaining,
            reset_after_ns,
            retry_after_ns: 0,
            delay_ns: 0,
        }
    }

    pub(crate) fn with_delay(mut self, delay_ns: u64) -> Self {
        self.delay_ns = delay_ns;
        self
    }

    /// Whether the request passed, was denied for now, or can never pass.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Whether the request passed.
    pub fn is_allowed(&self) -> bool {
        self.outcome == Outcome::Allowed
    }

    /// The limit that applied: a bucket's capacity or a window's request count.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Units still available right after this request.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Time until the limit is back to its full, fresh state.
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_ns)
    }

    /// [`Decision::reset_after`] in nanoseconds.
    pub fn reset_after_nanos(&self) -> u64 {
        self.reset_after_ns
    }

    /// For a denied request, the earliest time from now at which the same
    /// request (same cost) can pass if nothing else arrives. Exact: a retry
    /// any earlier is denied, a retry then passes.
    ///
    /// `None` for an allowed request and for one that can never pass.
    pub fn retry_after(&self) -> Option<Duration> {
        (self.outcome == Outcome::Denied).then(|| Duration::from_nanos(self.retry_after_ns))
    }

    /// [`Decision::retry_after`] in nanoseconds (0 unless denied).
    pub fn retry_after_nanos(&self) -> u64 {
        self.retry_after_ns
    }

    /// For an allowed request through a shaper, how long to hold it before
    /// passing it on so that output leaves at the configured rate; zero otherwise.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns)
    }

    /// [`Decision::delay`] in nanoseconds.
    pub fn delay_nanos(&self) -> u64 {
        self.delay_ns
    }
}
