//! [`LocalRateLimitLayer`]: wraps a route's service with a local rate limit.

use std::sync::Arc;

use tower::Layer;

use super::service::LocalRateLimitService;
use super::{LocalLimiter, SharedClock};
use crate::descriptors::DescriptorRule;

/// Applies one compiled `LocalRateLimit` (with its buckets) to a route.
#[derive(Clone, Debug)]
pub struct LocalRateLimitLayer {
    shared: Arc<LocalRateLimitShared>,
}

/// What every clone of the service shares.
pub struct LocalRateLimitShared {
    /// The buckets shared by all connections (several routes share the
    /// listener-level ones); per-connection limiting makes fresh ones per connection.
    pub limiter: Arc<LocalLimiter>,
    /// The descriptor rules the filter reads.
    pub rules: Vec<DescriptorRule>,
    /// The clock for per-connection limiters.
    pub clock: SharedClock,
}

impl std::fmt::Debug for LocalRateLimitShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRateLimitShared")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

impl LocalRateLimitLayer {
    /// A layer deciding with `limiter`; `route_rules` are the route's `rate_limits`.
    pub fn new(
        limiter: Arc<LocalLimiter>,
        route_rules: &[DescriptorRule],
        clock: SharedClock,
    ) -> Self {
        let rules = limiter
            .policy()
            .descriptor_rules(route_rules)
            .into_iter()
            .cloned()
            .collect();
        LocalRateLimitLayer {
            shared: Arc::new(LocalRateLimitShared {
                limiter,
                rules,
                clock,
            }),
        }
    }
}

impl<S> Layer<S> for LocalRateLimitLayer {
    type Service = LocalRateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LocalRateLimitService::new(inner, Arc::clone(&self.shared))
    }
}
