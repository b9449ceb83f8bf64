//! Why the forwarder could not answer: the upstream failed, or the request's body broke on the way.

use std::fmt;
use std::time::Duration;

use tollgate_upstream::PickError;

/// An upstream failure, answered by the proxy (503 or 504, never 500).
#[derive(Debug)]
pub enum UpstreamError {
    /// No connection could be made (503).
    Connect(String),
    /// The connection failed before the response headers (503).
    Reset(String),
    /// The response headers did not come within the route's timeout (504).
    Timeout(Duration),
    /// The cluster has no endpoint (503).
    NoEndpoint,
    /// The balancer gave no endpoint: breaker open, overflow, none healthy (503, Retry-After when known).
    Unavailable(PickError),
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamError::Connect(e) => write!(
                f,
                "upstream connect error or disconnect/reset before headers. reset reason: connection failure ({e})"
            ),
            UpstreamError::Reset(e) => write!(
                f,
                "upstream connect error or disconnect/reset before headers. reset reason: {e}"
            ),
            UpstreamError::Timeout(_) => f.write_str("upstream request timeout"),
            UpstreamError::NoEndpoint => f.write_str("no healthy upstream"),
            UpstreamError::Unavailable(pick) => pick.fmt(f),
        }
    }
}

impl std::error::Error for UpstreamError {}

/// Why [`super::Forward`] gave no response.
#[derive(Debug)]
pub enum ForwardError {
    /// The upstream failed (503 or 504).
    Upstream(UpstreamError),
    /// The request's body broke (a malformed chunk): the client's request was bad (400); hyper's reason.
    BrokenBody(String),
    /// The upstream URI could not be built from the endpoint's address: a bug (500).
    Uri(String),
}

impl fmt::Display for ForwardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForwardError::Upstream(e) => e.fmt(f),
            ForwardError::BrokenBody(m) => f.write_str(m),
            ForwardError::Uri(m) => write!(f, "upstream URI: {m}"),
        }
    }
}

impl std::error::Error for ForwardError {}

impl From<UpstreamError> for ForwardError {
    fn from(e: UpstreamError) -> Self {
        ForwardError::Upstream(e)
    }
}

impl From<PickError> for ForwardError {
    fn from(pick: PickError) -> Self {
        ForwardError::Upstream(UpstreamError::Unavailable(pick))
    }
}
