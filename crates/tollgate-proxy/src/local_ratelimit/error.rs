//! The local rate limit's errors: [`LocalRateLimitError`], an enforced denial ([`LocalRateLimited`]) or a request it could not decide.
//!
//! The layer works over any inner service whose error converts from
//! [`LocalRateLimitError`]; the proxy's own error gathers it, and its
//! reply module renders the denial.

use std::fmt;

use http::{HeaderMap, StatusCode};

use super::headers::BucketReport;
use crate::context::MissingContext;
use crate::hits_addend::InvalidHitsAddend;

/// The body of Envoy's local rate-limited reply.
pub const LOCAL_RATE_LIMITED_BODY: &str = "local_rate_limited";

/// Why the local rate limit answered a request itself.
#[derive(Debug)]
pub enum LocalRateLimitError {
    /// The buckets denied the request (enabled and enforced).
    Limited(LocalRateLimited),
    /// The request's cost header holds no cost (a bad request).
    InvalidCost(InvalidHitsAddend),
    /// The request has no context (a bug).
    MissingContext(MissingContext),
    /// The response future was polled after it completed (a bug).
    PolledAfterCompletion,
}

impl fmt::Display for LocalRateLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalRateLimitError::Limited(e) => e.fmt(f),
            LocalRateLimitError::InvalidCost(e) => e.fmt(f),
            LocalRateLimitError::MissingContext(e) => e.fmt(f),
            LocalRateLimitError::PolledAfterCompletion => f.write_str("polled after completion"),
        }
    }
}

impl std::error::Error for LocalRateLimitError {}

impl From<MissingContext> for LocalRateLimitError {
    fn from(e: MissingContext) -> Self {
        LocalRateLimitError::MissingContext(e)
    }
}

/// A request the local rate limit denied (enabled and enforced).
#[derive(Clone, Debug)]
pub struct LocalRateLimited {
    /// The reply's status (`status`, 429 by default).
    pub status: StatusCode,
    /// The gRPC status of the reply to a gRPC request (14, or 8).
    pub grpc_status: u8,
    /// `response_headers_to_add` and, when enabled, the X-RateLimit headers.
    pub headers: HeaderMap,
    /// The bucket that denied.
    pub report: Option<BucketReport>,
    /// Whether to send `Retry-After` (`enable_retry_after_header`, 429 only).
    pub retry_after: bool,
}

impl fmt::Display for LocalRateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("local_rate_limited")
    }
}

impl std::error::Error for LocalRateLimited {}
