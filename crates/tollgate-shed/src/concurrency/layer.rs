//! The layer that wraps a service in a per-key concurrency limit.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use tower::Layer;

use super::config::ConcurrencyConfig;
use super::service::ConcurrencyLimit;
use super::slots::KeyedSlots;
use crate::error::ConfigError;

/// Applies a per-key concurrency limit to a service.
///
/// ```
/// use std::time::Duration;
/// use tollgate_shed::concurrency::ConcurrencyLimitLayer;
/// use tollgate_shed::{BoxError, Shed, ShedReason};
/// use tower::{Layer, Service, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // One request in flight per tenant; here a request is just its tenant's name.
/// let layer = ConcurrencyLimitLayer::new(1, |tenant: &&str| tenant.to_string());
/// let mut service = layer.layer(service_fn(|tenant: &'static str| async move {
///     Ok::<_, BoxError>(tenant)
/// }));
///
/// // Called, not yet answered: acme's one slot is taken.
/// let in_flight = service.ready().await.unwrap().call("acme");
/// let error = service.ready().await.unwrap().call("acme").await.unwrap_err();
/// let shed = Shed::find(&*error).expect("a shed request");
/// assert_eq!(shed.reason(), &ShedReason::ConcurrencyLimit { limit: 1 });
/// assert_eq!(shed.retry_after(), Duration::from_secs(1));
/// // Another tenant is not held up.
/// assert_eq!(service.ready().await.unwrap().call("globex").await.unwrap(), "globex");
/// // Once the first request is answered, its slot is free again.
/// assert_eq!(in_flight.await.unwrap(), "acme");
/// assert_eq!(service.ready().await.unwrap().call("acme").await.unwrap(), "acme");
/// # }
/// ```
pub struct ConcurrencyLimitLayer<K, F> {
    key_fn: Arc<F>,
    slots: Arc<KeyedSlots<K>>,
    retry_after: Duration,
    _key: PhantomData<fn() -> K>,
}

impl<K, F> ConcurrencyLimitLayer<K, F> {
    /// At most `max_in_flight` requests in flight per key that `key_fn` extracts.
    ///
    /// # Panics
    ///
    /// When `max_in_flight` is zero (a configuration error to reject before).
    pub fn new<Request>(max_in_flight: usize, key_fn: F) -> Self
    where
        F: Fn(&Request) -> K,
    {
        assert!(max_in_flight > 0, "max_in_flight must be at least 1");
        ConcurrencyLimitLayer {
            key_fn: Arc::new(key_fn),
            slots: Arc::new(KeyedSlots::new(max_in_flight)),
            retry_after: Duration::from_secs(1),
            _key: PhantomData,
        }
    }

    /// A layer from checked settings, or the first one that is wrong.
    pub fn from_config<Request>(config: &ConcurrencyConfig, key_fn: F) -> Result<Self, ConfigError>
    where
        F: Fn(&Request) -> K,
    {
        config.validate()?;
        Ok(Self::new(config.max_in_flight, key_fn).retry_after(config.retry_after))
    }

    /// The retry-after hint a shed request carries (default 1 s).
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = retry_after;
        self
    }
}

impl<K, F> Clone for ConcurrencyLimitLayer<K, F> {
    fn clone(&self) -> Self {
        ConcurrencyLimitLayer {
            key_fn: Arc::clone(&self.key_fn),
            slots: Arc::clone(&self.slots),
            retry_after: self.retry_after,
            _key: PhantomData,
        }
    }
}

impl<K, F> std::fmt::Debug for ConcurrencyLimitLayer<K, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyLimitLayer")
            .field("max_in_flight", &self.slots.max_in_flight)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

impl<S, K, F> Layer<S> for ConcurrencyLimitLayer<K, F> {
    type Service = ConcurrencyLimit<S, K, F>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit::new(
            inner,
            Arc::clone(&self.key_fn),
            Arc::clone(&self.slots),
            self.retry_after,
        )
    }
}
