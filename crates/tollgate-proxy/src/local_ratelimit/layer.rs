//! [`LocalRateLimitLayer`]: wraps a route's service with a local rate limit.

use std::sync::Arc;

use tower::Layer;

use super::limiter::{LocalLimiter, SharedClock};
use super::service::{LocalRateLimitService, LocalRateLimitShared};
use crate::descriptors::DescriptorRule;

/// Applies one compiled `LocalRateLimit` (with its buckets) to a route.
#[derive(Clone, Debug)]
pub struct LocalRateLimitLayer {
    shared: Arc<LocalRateLimitShared>,
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
