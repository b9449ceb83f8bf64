//! The layer that sheds requests by priority class over a shared in-flight capacity.

use std::sync::Arc;

use tower::Layer;

use super::config::{PriorityConfig, PriorityConfigError};
use super::service::PriorityShed;
use super::slots::{SharedClock, SharedSlots};

/// Sheds requests by priority class over a shared in-flight capacity.
#[derive(Clone, Debug)]
pub struct PriorityLayer {
    slots: Arc<SharedSlots>,
}

impl PriorityLayer {
    /// A layer with the given settings, or the first one that is wrong; the line (if any) reads a monotonic clock.
    pub fn new(config: &PriorityConfig) -> Result<Self, PriorityConfigError> {
        Self::with_clock(config, Arc::new(tollgate_core::MonotonicClock::new()))
    }

    /// A layer whose waiting line reads `clock` for ages and deadlines.
    pub fn with_clock(
        config: &PriorityConfig,
        clock: SharedClock,
    ) -> Result<Self, PriorityConfigError> {
        Ok(PriorityLayer {
            slots: Arc::new(SharedSlots::new(config, clock)?),
        })
    }

    /// Requests waiting in line now (bounded by `queue.max_queued`).
    pub fn queued(&self) -> usize {
        self.slots.queued()
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
