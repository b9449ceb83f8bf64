//! The overrides' gauges: how many are held and their bytes, beside their bounds, read at each scrape.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use tollgate_core::Clock;

use super::Overrides;

/// Writes `ratelimit_overrides`, `ratelimit_overrides_limit`
/// (`--max-overrides`), `ratelimit_override_bytes` and
/// `ratelimit_override_bytes_limit` (`--max-overrides` × `--max-override-bytes`).
pub struct OverridesCollector<C: Clock>(pub Arc<Overrides<C>>);

impl<C: Clock> fmt::Debug for OverridesCollector<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OverridesCollector").finish_non_exhaustive()
    }
}

impl<C: Clock + Clone + Send + Sync + 'static> Collector for OverridesCollector<C> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let current = self.0.current();
        let bounds = self.0.bounds();
        let series = [
            ("ratelimit_overrides", "Overrides in service", current.len()),
            (
                "ratelimit_overrides_limit",
                "The most overrides held (--max-overrides)",
                bounds.max_overrides,
            ),
            (
                "ratelimit_override_bytes",
                "Bytes of the overrides' texts in service",
                current.bytes(),
            ),
            (
                "ratelimit_override_bytes_limit",
                "The most bytes of overrides' texts (--max-overrides x --max-override-bytes)",
                bounds.max_overrides.saturating_mul(bounds.max_bytes),
            ),
        ];
        for (name, help, value) in series {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}
