//! The shaper's errors: [`LimitReqError`], a rejection ([`LimitReqRejected`]: a request beyond the burst, or one that would wait while `max_waiting` are waiting) or a request it could not decide.
//!
//! The layer works over any inner service whose error converts from
//! [`LimitReqError`]; the proxy's own error gathers it, and its reply
//! module renders the rejection.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

use crate::context::MissingContext;

/// Why `limit_req` answered a request itself.
#[derive(Debug)]
pub enum LimitReqError {
    /// The request was rejected.
    Rejected(LimitReqRejected),
    /// The request has no context (a bug).
    MissingContext(MissingContext),
}

impl fmt::Display for LimitReqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitReqError::Rejected(e) => e.fmt(f),
            LimitReqError::MissingContext(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LimitReqError {}

impl From<MissingContext> for LimitReqError {
    fn from(e: MissingContext) -> Self {
        LimitReqError::MissingContext(e)
    }
}

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
