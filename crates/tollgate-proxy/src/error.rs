//! [`ProxyError`]: every way a request can end before (or instead of) an upstream response.
//!
//! Each policy layer has its own error type in its folder; this enum
//! gathers them, and `crate::reply` turns each into the response the
//! client gets, in one place.

use std::fmt;

use crate::forward::error::UpstreamError;
use crate::global_ratelimit::error::{GlobalRateLimited, RateLimitServiceFailed};
use crate::local_ratelimit::error::LocalRateLimited;

/// Why the proxy answered a request itself.
#[derive(Debug)]
pub enum ProxyError {
    /// The local rate limit denied the request.
    LocalRateLimited(LocalRateLimited),
    /// The global rate limit service said OVER_LIMIT.
    GlobalRateLimited(GlobalRateLimited),
    /// The global rate limit service failed and `failure_mode_deny` is set.
    RateLimitServiceFailed(RateLimitServiceFailed),
    /// The upstream could not answer.
    Upstream(UpstreamError),
    /// No route matches the request's host and path.
    NoRoute,
    /// A bug: something the proxy should never see.
    Internal(String),
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::LocalRateLimited(e) => e.fmt(f),
            ProxyError::GlobalRateLimited(e) => e.fmt(f),
            ProxyError::RateLimitServiceFailed(e) => e.fmt(f),
            ProxyError::Upstream(e) => e.fmt(f),
            ProxyError::NoRoute => f.write_str("no route matches the request"),
            ProxyError::Internal(m) => write!(f, "internal error: {m}"),
        }
    }
}

impl std::error::Error for ProxyError {}

impl From<UpstreamError> for ProxyError {
    fn from(e: UpstreamError) -> Self {
        ProxyError::Upstream(e)
    }
}
