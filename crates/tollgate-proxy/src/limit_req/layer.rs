//! [`LimitReqLayer`]: wraps a route's service with its `limit_req`.

use std::sync::Arc;

use tower::Layer;

use super::policy::LimitReqPolicy;
use super::service::LimitReqService;

/// Applies one compiled `limit_req` (its buckets shared by every clone) to a route.
#[derive(Clone, Debug)]
pub struct LimitReqLayer {
    policy: Arc<LimitReqPolicy>,
}

impl LimitReqLayer {
    /// A layer deciding with `policy`.
    pub fn new(policy: Arc<LimitReqPolicy>) -> Self {
        LimitReqLayer { policy }
    }

    /// The policy, for its gauges.
    pub fn policy(&self) -> &Arc<LimitReqPolicy> {
        &self.policy
    }
}

impl<S> Layer<S> for LimitReqLayer {
    type Service = LimitReqService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LimitReqService::new(inner, Arc::clone(&self.policy))
    }
}
