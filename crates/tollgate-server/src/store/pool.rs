//! Upstream's Redis pool statistics on `/metrics`, as far as they map onto Tollgate's multiplexed connections.
//!
//! envoyproxy/ratelimit counts its pool under `ratelimit.redis_pool`:
//! `cx_active` (a gauge), `cx_total` and `cx_local_close` (counters); its
//! Prometheus exporter has no mapping for them, so they come out as
//! `ratelimit_redis_pool_cx_active` and `ratelimit_redis_pool_cx_total`.
//! Tollgate writes the two that map under those names
//! ([`RemoteStore::pool`]); `cx_local_close` does not map (Tollgate never
//! closes a Redis connection while serving; the client reconnects by itself).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use super::RemoteStore;

/// Writes `ratelimit_redis_pool_cx_active` and `ratelimit_redis_pool_cx_total` on each scrape.
#[derive(Debug)]
pub struct PoolCollector(pub Arc<RemoteStore>);

impl Collector for PoolCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (active, total) = self.0.pool();
        let gauge = ConstGauge::new(i64::try_from(active).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "ratelimit_redis_pool_cx_active",
            "Redis connections in use while connected and up (the instance's multiplexed connection or cluster client, plus one per worker that opened its own), else 0",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)?;
        // Upstream's name already ends in `_total`: written as it is, typed counter.
        encoder
            .encode_descriptor(
                "ratelimit_redis_pool_cx_total",
                "Redis connections made since start (the first, each one replacing it, and each a worker opened)",
                None,
                MetricType::Counter,
            )?
            .encode_gauge(&i64::try_from(total).unwrap_or(i64::MAX))
    }
}
