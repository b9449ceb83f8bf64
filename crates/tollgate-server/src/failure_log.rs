//! Counter store failures and fallback answers as warnings, rate-limited: at most one line per interval, carrying how many went unlogged since the last one.
//!
//! A Redis outage fails every request; logging each would flood the log
//! and cost more than the requests. [`FailureLog`] lets one warning through
//! per [`FAILURE_LOG_INTERVAL`] (a token bucket of one token, the core's own)
//! and counts the others into the next line's `suppressed` field. The store
//! keeps two: one for failed calls, one for descriptors answered by their
//! rule's `on_store_error` (so an operator sees a limiter running open).

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tollgate_core::{Timestamp, TokenBucket, WordAlgorithm};

/// At most one store-failure warning this often.
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The message of store-failure warnings.
pub const STORE_FAILED: &str = "counter store call failed";

/// The message of fallback warnings.
pub const ANSWERED_WITHOUT_STORE: &str =
    "a descriptor was answered by its rule's on_store_error, not by the store";

/// The rate limit on one kind of warning (see the module docs).
#[derive(Debug)]
pub struct FailureLog {
    bucket: TokenBucket,
    state: Mutex<u64>,
    suppressed: AtomicU64,
    message: &'static str,
}

impl FailureLog {
    /// One warning per `interval` (at least a nanosecond), saying `message`.
    pub fn new(interval: Duration, message: &'static str) -> Self {
        FailureLog {
            bucket: TokenBucket::new(1, 1, interval.max(Duration::from_nanos(1)))
                .expect("one token per interval is a valid bucket"),
            state: Mutex::new(0),
            suppressed: AtomicU64::new(0),
            message,
        }
    }

    /// Records a failure at `now`: logs it at warn with the count of failures
    /// not logged since the last line, or counts it. Returns that count when it logged.
    pub fn record(&self, now: Timestamp, error: &dyn Display) -> Option<u64> {
        let mut state = self.state.lock();
        let (decision, next) = self.bucket.decide(*state, now, 1);
        if !decision.is_allowed() {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if let Some(next) = next {
            *state = next;
        }
        let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
        tracing::warn!(error = %error, suppressed, "{}", self.message);
        Some(suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_carries_the_count_of_the_others() {
        let log = FailureLog::new(Duration::from_secs(10), STORE_FAILED);
        let t = |s: u64| Timestamp::from_secs(1_000 + s);
        assert_eq!(log.record(t(0), &"refused"), Some(0), "the first is logged");
        for s in 1..10 {
            assert_eq!(log.record(t(s), &"refused"), None, "second {s} is counted");
        }
        assert_eq!(
            log.record(t(10), &"refused"),
            Some(9),
            "the next line says 9 went unlogged"
        );
        assert_eq!(log.record(t(11), &"refused"), None);
        assert_eq!(
            log.record(t(100), &"refused"),
            Some(1),
            "a quiet spell logs at once"
        );
    }
}
