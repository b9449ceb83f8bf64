//! [`BackoffLayer`]: wraps a client service in [`Backoff`].

use std::sync::Arc;

use tower::Layer;

use super::policy::{ClientPolicy, Shared};
use super::service::Backoff;

/// Wraps services in [`Backoff`]; all of them share one pace, breaker, throttle and budget.
#[derive(Clone)]
pub struct BackoffLayer {
    shared: Arc<Shared>,
}

impl BackoffLayer {
    /// A layer with `policy`.
    pub fn new(policy: ClientPolicy) -> Self {
        BackoffLayer {
            shared: Arc::new(Shared::new(policy)),
        }
    }
}

impl Default for BackoffLayer {
    /// [`ClientPolicy::default`].
    fn default() -> Self {
        BackoffLayer::new(ClientPolicy::default())
    }
}

impl<S> Layer<S> for BackoffLayer {
    type Service = Backoff<S>;

    fn layer(&self, inner: S) -> Backoff<S> {
        Backoff::new(inner, Arc::clone(&self.shared))
    }
}
