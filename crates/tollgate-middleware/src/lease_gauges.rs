//! [`LeaseBookGauges`]: a `LeasedStore`'s lease book, its size and its bound, as gauges in the app's registry (`metrics` and `redis`).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tollgate_redis::LeasedStore;

/// The bound of a [`LeasedStore`](crate::LeasedStore) you can see: on each
/// scrape, the counters its lease book tracks and the most it tracks, under
/// the names `tollgate serve` gives its own lease book.
///
/// * `ratelimit_store_lease_keys`: counters the lease book tracks now;
/// * `ratelimit_store_lease_keys_limit`: the most it tracks (`max_keys` of
///   `LeasedStore::new`); past it, the least recently used counter's lease
///   is given back.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate_core::lease::LeasePolicy;
/// use tollgate_middleware::{KeyExtractor, LeaseBookGauges, LeasedStore, Limit, Metrics, RateLimitLayer, RedisStore};
///
/// let redis = RedisStore::connect("redis://127.0.0.1:6379", Duration::from_millis(50)).await?;
/// let store = Arc::new(LeasedStore::new(redis, LeasePolicy::for_fleet(Duration::from_secs(1), 4), 10_000));
/// let mut registry = prometheus_client::registry::Registry::default();
/// let metrics = Metrics::new();
/// metrics.register(&mut registry);
/// LeaseBookGauges::new(Arc::clone(&store)).register(&mut registry);
/// let layer = RateLimitLayer::builder(KeyExtractor::client_address())
///     .limit(Limit::gcra("per-second", 10, Duration::from_secs(1), 10)?)
///     .metrics(&metrics)
///     .store(store);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaseBookGauges {
    store: Arc<LeasedStore>,
}

impl LeaseBookGauges {
    /// The gauges of `store`'s lease book.
    pub fn new(store: Arc<LeasedStore>) -> Self {
        LeaseBookGauges { store }
    }

    /// Registers the gauges in `registry` (read on each scrape).
    pub fn register(self, registry: &mut Registry) {
        registry.register_collector(Box::new(self));
    }
}

impl Collector for LeaseBookGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let book = self.store.book();
        for (name, help, value) in [
            (
                "ratelimit_store_lease_keys",
                "Counters the lease book of the middleware's LeasedStore tracks (bounded by ratelimit_store_lease_keys_limit)",
                book.len(),
            ),
            (
                "ratelimit_store_lease_keys_limit",
                "The most counters the lease book of the middleware's LeasedStore tracks (its max_keys)",
                book.max_keys(),
            ),
        ] {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}
