//! The local rate limit's error: an enforced denial, turned into the reply by `crate::reply`.

use std::fmt;

use http::{HeaderMap, StatusCode};

use super::BucketReport;

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
