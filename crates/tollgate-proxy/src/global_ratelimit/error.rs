//! The global rate limit's errors: an OVER_LIMIT answer, or a failed call with `failure_mode_deny`.

use std::fmt;
use std::time::Duration;

use http::{HeaderMap, StatusCode};

/// One policy in the RLS answer, for the IETF fields and the problem body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyStatus {
    /// The limit's name, or the descriptor's `key=value;…`.
    pub name: String,
    /// Requests per window.
    pub limit: u64,
    /// The window.
    pub window: Duration,
    /// Requests left.
    pub remaining: u64,
    /// Until the window resets.
    pub reset: Duration,
    /// Whether this descriptor was over its limit.
    pub over_limit: bool,
}

/// The RLS said OVER_LIMIT.
#[derive(Clone, Debug)]
pub struct GlobalRateLimited {
    /// `rate_limited_status` (429 by default).
    pub status: StatusCode,
    /// The gRPC status of the reply to a gRPC request (14, or 8).
    pub grpc_status: u8,
    /// The RLS's headers, `x-envoy-ratelimited`, X-RateLimit-* and the filter's headers.
    pub headers: HeaderMap,
    /// The RLS's `raw_body`.
    pub body: Vec<u8>,
    /// The exact wait for `Retry-After`, when enabled: the longest reset among the OVER_LIMIT statuses.
    pub retry_after: Option<Duration>,
    /// The statuses that had a limit.
    pub policies: Vec<PolicyStatus>,
}

impl fmt::Display for GlobalRateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("over the global rate limit")
    }
}

impl std::error::Error for GlobalRateLimited {}

/// The RLS call failed (error or timeout) and `failure_mode_deny` is set.
#[derive(Clone, Debug)]
pub struct RateLimitServiceFailed {
    /// `status_on_error` (500 by default, Envoy's).
    pub status: StatusCode,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for RateLimitServiceFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the rate limit service failed: {}", self.reason)
    }
}

impl std::error::Error for RateLimitServiceFailed {}
