//! The global rate limit's errors: [`GlobalRateLimitError`], an OVER_LIMIT answer, a failed call with `failure_mode_deny`, or a request it could not ask about.
//!
//! The layer works over any inner service whose error converts from
//! [`GlobalRateLimitError`]; the proxy's own error gathers it, and its
//! reply module renders the denial.

use std::fmt;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use tollgate_protocol::rls::headers::{ietf_fields, policy_name};
use tollgate_protocol::rls::model::{Code, Descriptor, DescriptorStatus};

use crate::context::MissingContext;
use crate::hits_addend::InvalidHitsAddend;

/// Why the global rate limit answered a request itself.
#[derive(Debug)]
pub enum GlobalRateLimitError {
    /// The RLS said OVER_LIMIT.
    Limited(GlobalRateLimited),
    /// The RLS call failed and `failure_mode_deny` is set.
    ServiceFailed(RateLimitServiceFailed),
    /// The request's cost header holds no cost (a bad request).
    InvalidCost(InvalidHitsAddend),
    /// The request has no context (a bug).
    MissingContext(MissingContext),
}

impl fmt::Display for GlobalRateLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GlobalRateLimitError::Limited(e) => e.fmt(f),
            GlobalRateLimitError::ServiceFailed(e) => e.fmt(f),
            GlobalRateLimitError::InvalidCost(e) => e.fmt(f),
            GlobalRateLimitError::MissingContext(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for GlobalRateLimitError {}

impl From<MissingContext> for GlobalRateLimitError {
    fn from(e: MissingContext) -> Self {
        GlobalRateLimitError::MissingContext(e)
    }
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
    /// The descriptors asked about.
    pub descriptors: Vec<Descriptor>,
    /// The RLS's statuses, one per descriptor, read back into the model.
    pub statuses: Vec<DescriptorStatus>,
}

impl GlobalRateLimited {
    /// The IETF `RateLimit-Policy` and `RateLimit` fields, rendered like the
    /// service renders them; none when the RLS sent its own, which know the
    /// exact waits (Envoy passes those on unchanged).
    pub fn ietf_fields(&self) -> Vec<(HeaderName, HeaderValue)> {
        let sent = ["ratelimit", "ratelimit-policy"]
            .iter()
            .any(|name| self.headers.contains_key(*name));
        if sent {
            return Vec::new();
        }
        let Some(fields) = ietf_fields(&self.descriptors, &self.statuses) else {
            return Vec::new();
        };
        [
            ("ratelimit-policy", fields.policy),
            ("ratelimit", fields.limit),
        ]
        .into_iter()
        .filter_map(|(n, v)| Some((HeaderName::from_static(n), HeaderValue::from_str(&v).ok()?)))
        .collect()
    }

    /// The policy names of the OVER_LIMIT statuses, for a problem body.
    pub fn violated_policies(&self) -> Vec<String> {
        self.statuses
            .iter()
            .enumerate()
            .filter(|(_, s)| s.code == Code::OverLimit && s.current_limit.is_some())
            .map(|(i, s)| policy_name(self.descriptors.get(i), s))
            .collect()
    }
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
