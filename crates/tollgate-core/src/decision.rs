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
///
/// It is 40 bytes: a denial's retry-after and an admission's delay share one
/// field, since no decision has both.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{FixedWindow, Outcome, Timestamp, WordAlgorithm};
///
/// let limit = FixedWindow::new(1, Duration::from_secs(60)).unwrap();
/// // 40 s into a minute.
/// let now = Timestamp::from_secs(1_700_000_020);
/// let (denied, _) = limit.decide(limit.decide(0, now, 1).1.unwrap(), now, 1);
/// assert_eq!(denied.outcome(), Outcome::Denied);
/// // What a 429 carries: RateLimit-Limit, -Remaining, -Reset and Retry-After.
/// assert_eq!((denied.limit(), denied.remaining()), (1, 0));
/// assert_eq!(denied.reset_after(), Duration::from_secs(20));
/// assert_eq!(denied.retry_after(), Some(Duration::from_secs(20)));
/// // A request costing more than the limit can ever hold is never admitted.
/// assert_eq!(limit.decide(0, now, 2).0.outcome(), Outcome::Exceeds);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    limit: u64,
    remaining: u64,
    reset_after_ns: u64,
    /// Retry-after when denied, shaping delay when allowed, 0 otherwise.
    wait_ns: u64,
    outcome: Outcome,
}

impl Decision {
    pub(crate) fn allowed(limit: u64, remaining: u64, reset_after_ns: u64) -> Self {
        Decision {
            outcome: Outcome::Allowed,
            limit,
            remaining,
            reset_after_ns,
            wait_ns: 0,
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
            wait_ns: retry_after_ns,
        }
    }

    pub(crate) fn exceeds(limit: u64, remaining: u64, reset_after_ns: u64) -> Self {
        Decision {
            outcome: Outcome::Exceeds,
            limit,
            remaining,
            reset_after_ns,
            wait_ns: 0,
        }
    }

    /// This admission, held for `delay_ns` by a shaper.
    pub(crate) fn with_delay(mut self, delay_ns: u64) -> Self {
        debug_assert_eq!(self.outcome, Outcome::Allowed);
        self.wait_ns = delay_ns;
        self
    }

    /// A decision made outside this crate (by a remote store's script), from its parts.
    ///
    /// `wait_ns` is the retry-after of a denial or the delay of an
    /// admission; it is ignored for [`Outcome::Exceeds`].
    pub fn from_parts(
        outcome: Outcome,
        limit: u64,
        remaining: u64,
        reset_after_ns: u64,
        wait_ns: u64,
    ) -> Self {
        Decision {
            outcome,
            limit,
            remaining,
            reset_after_ns,
            wait_ns: if outcome == Outcome::Exceeds {
                0
            } else {
                wait_ns
            },
        }
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
        (self.outcome == Outcome::Denied).then(|| Duration::from_nanos(self.wait_ns))
    }

    /// [`Decision::retry_after`] in nanoseconds (0 unless denied).
    pub fn retry_after_nanos(&self) -> u64 {
        if self.outcome == Outcome::Denied {
            self.wait_ns
        } else {
            0
        }
    }

    /// For an allowed request through a shaper, how long to hold it before
    /// passing it on so that output leaves at the configured rate; zero otherwise.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_nanos())
    }

    /// [`Decision::delay`] in nanoseconds.
    pub fn delay_nanos(&self) -> u64 {
        if self.outcome == Outcome::Allowed {
            self.wait_ns
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_and_delay_never_leak_into_each_other() {
        let denied = Decision::denied(5, 0, 10, 7);
        assert_eq!((denied.retry_after_nanos(), denied.delay_nanos()), (7, 0));
        let delayed = Decision::allowed(5, 1, 10).with_delay(3);
        assert_eq!((delayed.retry_after(), delayed.delay_nanos()), (None, 3));
        assert_eq!(std::mem::size_of::<Decision>(), 40);
    }
}
