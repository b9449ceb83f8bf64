//! [`ProxyError`]: every way a request can end before (or instead of) an upstream response.
//!
//! Every layer of a route's stack errs with this one type: the proxy's own
//! filters return it, and the layers from `tollgate-shed` and
//! `tollgate-upstream` convert their [`Shed`] and [`PickError`] into it
//! through the `From` impls here (those crates know nothing of the proxy).
//! `crate::reply` turns each variant into the response the client gets, in
//! one place, and `crate::metrics` counts each under its own series.

use std::fmt;

use tollgate_shed::Shed;
use tollgate_upstream::PickError;

use crate::forward::error::UpstreamError;
use crate::global_ratelimit::error::{GlobalRateLimited, RateLimitServiceFailed};
use crate::limit_req::LimitReqRejected;
use crate::local_ratelimit::error::LocalRateLimited;

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
    /// The request itself is malformed (a broken chunked body): 400, and no complete request went upstream.
    BadRequest(String),
    /// A bug: something the proxy should never see.
    Internal(String),
}

impl ProxyError {
    /// A request reached a layer without the [`RequestContext`](crate::context::RequestContext) the server attaches (a bug).
    pub fn no_context() -> ProxyError {
        ProxyError::Internal("the request has no context".into())
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
