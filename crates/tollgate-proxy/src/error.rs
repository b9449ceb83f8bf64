//! [`ProxyError`]: every way a request can end before (or instead of) an upstream response.
//!
//! A route's stack errs with this one type at its edge. Each layer has its
//! own error and works over any inner service whose error converts from it
//! (tower's shape: `S::Error: From<LocalRateLimitError>`, like
//! `tollgate-shed`'s `From<Shed>` and `tollgate-upstream`'s
//! `From<PickError>`); the `From` impls here gather them, one way: the
//! layers know nothing of this type. `crate::reply` turns each variant into
//! the response the client gets, in one place, and `crate::metrics` counts
//! each under its own series.

use std::fmt;

use tollgate_shed::Shed;
use tollgate_upstream::PickError;

use crate::context::MissingContext;
use crate::forward::error::{ForwardError, UpstreamError};
use crate::global_ratelimit::error::{
    GlobalRateLimitError, GlobalRateLimited, RateLimitServiceFailed,
};
use crate::hits_addend::InvalidHitsAddend;
use crate::limit_req::error::{LimitReqError, LimitReqRejected};
use crate::local_ratelimit::error::{LocalRateLimitError, LocalRateLimited};

/// Why the proxy answered a request itself.
#[derive(Debug)]
pub enum ProxyError {
    /// The local rate limit denied the request.
    LocalRateLimited(LocalRateLimited),
    /// The global rate limit service said OVER_LIMIT.
    GlobalRateLimited(GlobalRateLimited),
    /// The route's `limit_req` rejected the request.
    LimitReqRejected(LimitReqRejected),
    /// The global rate limit service failed and `failure_mode_deny` is set.
    RateLimitServiceFailed(RateLimitServiceFailed),
    /// The upstream could not answer.
    Upstream(UpstreamError),
    /// A load-shedding layer refused the request (503 + Retry-After).
    Shed(Shed),
    /// No route matches the request's host and path.
    NoRoute,
    /// The request's head (request line and headers) is longer than its listener's `max_request_headers_kb`: 431.
    HeadersTooLarge {
        /// The head's size in bytes.
        size: usize,
        /// The listener's limit in bytes.
        limit: usize,
    },
    /// The request itself is malformed: 400, and no complete request went upstream.
    BadRequest(BadRequestReason),
    /// A bug: something the proxy should never see.
    Internal(String),
}

/// What is wrong with a bad request.
#[derive(Debug)]
pub enum BadRequestReason {
    /// A cost header (`hits_addend`) that holds no cost: nothing was charged.
    InvalidCost(InvalidHitsAddend),
    /// The body broke (a malformed chunk): hyper's reason.
    BrokenBody(String),
}

impl fmt::Display for BadRequestReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRequestReason::InvalidCost(e) => e.fmt(f),
            BadRequestReason::BrokenBody(m) => f.write_str(m),
        }
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::LocalRateLimited(e) => e.fmt(f),
            ProxyError::GlobalRateLimited(e) => e.fmt(f),
            ProxyError::LimitReqRejected(e) => e.fmt(f),
            ProxyError::RateLimitServiceFailed(e) => e.fmt(f),
            ProxyError::Upstream(e) => e.fmt(f),
            ProxyError::Shed(shed) => write!(f, "overloaded: {shed}"),
            ProxyError::NoRoute => f.write_str("no route matches the request"),
            ProxyError::HeadersTooLarge { size, limit } => write!(
                f,
                "request header fields too large: {size} bytes, over the limit of {limit}"
            ),
            ProxyError::BadRequest(m) => write!(f, "bad request: {m}"),
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

impl From<ForwardError> for ProxyError {
    fn from(e: ForwardError) -> Self {
        match e {
            ForwardError::Upstream(e) => ProxyError::Upstream(e),
            ForwardError::BrokenBody(m) => ProxyError::BadRequest(BadRequestReason::BrokenBody(m)),
            e @ ForwardError::Uri(_) => ProxyError::Internal(e.to_string()),
        }
    }
}

impl From<Shed> for ProxyError {
    fn from(shed: Shed) -> Self {
        ProxyError::Shed(shed)
    }
}

impl From<PickError> for ProxyError {
    fn from(pick: PickError) -> Self {
        ProxyError::Upstream(UpstreamError::Unavailable(pick))
    }
}

impl From<MissingContext> for ProxyError {
    fn from(missing: MissingContext) -> Self {
        ProxyError::Internal(missing.to_string())
    }
}

impl From<LocalRateLimitError> for ProxyError {
    fn from(e: LocalRateLimitError) -> Self {
        match e {
            LocalRateLimitError::Limited(denial) => ProxyError::LocalRateLimited(denial),
            LocalRateLimitError::InvalidCost(e) => {
                ProxyError::BadRequest(BadRequestReason::InvalidCost(e))
            }
            LocalRateLimitError::MissingContext(missing) => missing.into(),
            e @ LocalRateLimitError::PolledAfterCompletion => ProxyError::Internal(e.to_string()),
        }
    }
}

impl From<GlobalRateLimitError> for ProxyError {
    fn from(e: GlobalRateLimitError) -> Self {
        match e {
            GlobalRateLimitError::Limited(denial) => ProxyError::GlobalRateLimited(denial),
            GlobalRateLimitError::ServiceFailed(failure) => {
                ProxyError::RateLimitServiceFailed(failure)
            }
            GlobalRateLimitError::InvalidCost(e) => {
                ProxyError::BadRequest(BadRequestReason::InvalidCost(e))
            }
            GlobalRateLimitError::MissingContext(missing) => missing.into(),
        }
    }
}

impl From<LimitReqError> for ProxyError {
    fn from(e: LimitReqError) -> Self {
        match e {
            LimitReqError::Rejected(rejected) => ProxyError::LimitReqRejected(rejected),
            LimitReqError::MissingContext(missing) => missing.into(),
        }
    }
}
