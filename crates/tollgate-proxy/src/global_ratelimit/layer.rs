//! [`GlobalRateLimitLayer`]: wraps a route's service with the global rate limit.

use std::sync::Arc;

use tower::Layer;

use super::policy::GlobalRateLimit;
use super::service::GlobalRateLimitService;
use crate::descriptors::DescriptorRule;

/// Applies the global rate limit filter to a route.
#[derive(Clone, Debug)]
pub struct GlobalRateLimitLayer {
    filter: Arc<GlobalRateLimit>,
    rules: Arc<Vec<DescriptorRule>>,
}

impl GlobalRateLimitLayer {
    /// A layer asking `filter`'s RLS with the filter's rules, else the route's of the filter's stage.
    pub fn new(filter: Arc<GlobalRateLimit>, route_rules: &[DescriptorRule]) -> Self {
        let rules = match &filter.rate_limits {
            Some(own) => own.clone(),
            None => route_rules
                .iter()
                .filter(|r| r.stage == filter.stage)
                .cloned()
                .collect(),
        };
        GlobalRateLimitLayer {
            filter,
            rules: Arc::new(rules),
        }
    }
}

impl<S> Layer<S> for GlobalRateLimitLayer {
    type Service = GlobalRateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GlobalRateLimitService::new(inner, Arc::clone(&self.filter), Arc::clone(&self.rules))
    }
}
