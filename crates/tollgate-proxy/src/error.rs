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
    /// A load-shedding layer refused the request (503 + Retry-After).
    Shed {
        /// Why.
        reason: String,
        /// When to come back.
        retry_after: std::time::Duration,
    },
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
            ProxyError::Shed { reason, .. } => write!(f, "overloaded: {reason}"),
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

impl ProxyError {
    /// Recovers the typed error from a boxed one (tower layers box their errors).
    pub fn from_boxed(error: crate::BoxError) -> Self {
        let error = match error.downcast::<ProxyError>() {
            Ok(proxy) => return *proxy,
            Err(other) => other,
        };
        if let Some(shed) = tollgate_shed::Shed::find(&*error) {
            return ProxyError::Shed {
                reason: shed.to_string(),
                retry_after: shed.retry_after(),
            };
        }
        if let Some(pick) = error.downcast_ref::<tollgate_upstream::PickError>() {
            return ProxyError::Upstream(UpstreamError::Unavailable {
                message: pick.to_string(),
                retry_after: pick.retry_after(),
            });
        }
        ProxyError::Internal(error.to_string())
    }
}
