//! The layer that sheds requests by priority class over a shared in-flight capacity.

use std::sync::Arc;

use tower::Layer;

use super::config::{PriorityConfig, PriorityConfigError};
use super::service::PriorityShed;
use super::slots::{SharedClock, SharedSlots};

/// Sheds requests by priority class over a shared in-flight capacity.
///
/// ```
/// use http::Request;
/// use tollgate_shed::BoxError;
/// use tollgate_shed::priority::{PriorityConfig, PriorityLayer};
/// use tower::{Layer, Service, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // 5 in flight: the last one for critical requests only, the last two
/// // closed to sheddable ones (20 % reserved for each, rounded up).
/// let layer = PriorityLayer::new(&PriorityConfig::new(5)).unwrap();
/// let mut service = layer.layer(service_fn(|_: Request<()>| async { Ok::<_, BoxError>("ok") }));
/// let class = |priority: &str| Request::builder().header("x-priority", priority).body(()).unwrap();
///
/// // Three requests called and not yet answered hold three slots.
/// let mut in_flight = Vec::new();
/// for _ in 0..3 {
///     in_flight.push(service.ready().await.unwrap().call(class("default")));
/// }
/// assert!(service.ready().await.unwrap().call(class("sheddable")).await.is_err());
/// in_flight.push(service.ready().await.unwrap().call(class("default")));
/// assert!(service.ready().await.unwrap().call(class("default")).await.is_err());
/// assert_eq!(service.ready().await.unwrap().call(class("critical")).await.unwrap(), "ok");
/// assert_eq!(layer.in_flight(), 4);
/// # }
/// ```
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
