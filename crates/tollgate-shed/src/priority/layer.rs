//! The layer that sheds requests by priority class over a shared in-flight capacity.

use std::sync::Arc;

use tower::Layer;

use super::config::{PriorityConfig, PriorityConfigError};
use super::service::{PriorityShed, SharedSlots};

/// Sheds requests by priority class over a shared in-flight capacity.
#[derive(Clone, Debug)]
pub struct PriorityLayer {
    slots: Arc<SharedSlots>,
}

impl PriorityLayer {
    /// A layer with the given settings, or the first one that is wrong.
    pub fn new(config: &PriorityConfig) -> Result<Self, PriorityConfigError> {
        Ok(PriorityLayer {
            slots: Arc::new(SharedSlots::new(config)?),
        })
    }

    /// Requests of all classes in flight now, across every service of this layer.
    pub fn in_flight(&self) -> usize {
        self.slots.in_flight()
    }
}

impl<S> Layer<S> for PriorityLayer {
    type Service = PriorityShed<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PriorityShed::new(inner, Arc::clone(&self.slots))
    }
}
