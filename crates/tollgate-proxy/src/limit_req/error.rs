//! The shaper's rejection: a request beyond the burst, or one that would wait while `max_waiting` are waiting.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

/// A request `limit_req` rejected.
#[derive(Clone, Debug)]
pub struct LimitReqRejected {
    /// The reply's status (`status`, 429 by default).
    pub status: StatusCode,
    /// When one more request of this key would be admitted.
    pub retry_after: Duration,
    /// Why: over the burst, or too many waiting.
    pub reason: RejectReason,
}

/// Why `limit_req` rejected a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// The key's excess would pass `burst`.
    OverBurst,
    /// `max_waiting` requests were already waiting on the route.
    QueueFull,
}

impl fmt::Display for LimitReqRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            RejectReason::OverBurst => f.write_str("rate limited: over the burst"),
            RejectReason::QueueFull => f.write_str("rate limited: too many requests waiting"),
        }
    }
}

impl std::error::Error for LimitReqRejected {}
