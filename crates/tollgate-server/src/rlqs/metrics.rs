//! The quota service's gauges and counters, read from its [`QuotaBook`] at each scrape.
//!
//! * `ratelimit_rlqs_streams` and `ratelimit_rlqs_streams_limit` (`--rlqs-max-streams`);
//! * `ratelimit_rlqs_buckets` and `ratelimit_rlqs_buckets_limit` (`--rlqs-max-buckets`);
//! * `ratelimit_rlqs_stream_buckets` (the most one stream tracks) and
//!   `ratelimit_rlqs_stream_buckets_limit` (`--rlqs-max-stream-buckets`);
//! * `ratelimit_rlqs_counters`: the rule counters the shares are paid from, each every tick;
//! * `ratelimit_rlqs_assignments_total`: bucket assignments sent;
//! * `ratelimit_rlqs_reported_requests_total{decision="allowed|denied"}`:
//!   what the Envoys reported deciding with their assignments;
//! * `ratelimit_rlqs_budget_units_taken_total`: units taken from the
//!   shared budget to pay for shares, and `ratelimit_rlqs_shares_cut_total`: shares cut to
//!   what the budget had.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::book::QuotaBook;

/// The `decision` label of the reported requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    decision: &'static str,
}

/// Writes the quota service's metrics on each scrape.
#[derive(Debug)]
pub struct RlqsCollector {
    book: Arc<QuotaBook>,
}

impl RlqsCollector {
    /// Metrics of `book`.
    pub fn new(book: Arc<QuotaBook>) -> Self {
        RlqsCollector { book }
    }
}

impl Collector for RlqsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let stats = self.book.stats();
        let options = self.book.options();
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for (name, help, value) in [
            (
                "ratelimit_rlqs_streams",
                "Rate limit quota streams open",
                stats.streams.load(Ordering::Relaxed) as i64,
            ),
            (
                "ratelimit_rlqs_streams_limit",
                "The most rate limit quota streams open at once (rlqs-max-streams)",
                count(options.max_streams),
            ),
            (
                "ratelimit_rlqs_buckets",
                "Rate limit quota buckets tracked over all streams",
                stats.buckets.load(Ordering::Relaxed) as i64,
            ),
            (
                "ratelimit_rlqs_buckets_limit",
                "The most rate limit quota buckets tracked (rlqs-max-buckets)",
                count(options.max_buckets),
            ),
            (
                "ratelimit_rlqs_stream_buckets",
                "The most rate limit quota buckets one stream tracks",
                stats.stream_buckets.load(Ordering::Relaxed) as i64,
            ),
            (
                "ratelimit_rlqs_stream_buckets_limit",
                "The most rate limit quota buckets tracked for one stream (rlqs-max-stream-buckets)",
                count(options.max_stream_buckets),
            ),
            (
                "ratelimit_rlqs_counters",
                "Rule counters the quota shares are paid from, each every tick",
                stats.counters.load(Ordering::Relaxed) as i64,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        let assignments = ConstCounter::new(stats.assignments.load(Ordering::Relaxed));
        assignments.encode(encoder.encode_descriptor(
            "ratelimit_rlqs_assignments",
            "Bucket assignments sent to Envoys (answers to reports and pushes)",
            None,
            MetricType::Counter,
        )?)?;
        for (name, help, value) in [
            (
                "ratelimit_rlqs_budget_units_taken",
                "Units taken from the shared budget (the rules' counters) to pay for shares before Envoys spend them",
                &stats.units_taken,
            ),
            (
                "ratelimit_rlqs_shares_cut",
                "Shares cut because the shared budget had less than they cost",
                &stats.shares_cut,
            ),
        ] {
            ConstCounter::new(value.load(Ordering::Relaxed)).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        let mut family = encoder.encode_descriptor(
            "ratelimit_rlqs_reported_requests",
            "Requests the Envoys reported deciding with their assignments",
            None,
            MetricType::Counter,
        )?;
        for (decision, value) in [
            ("allowed", stats.reported_allowed.load(Ordering::Relaxed)),
            ("denied", stats.reported_denied.load(Ordering::Relaxed)),
        ] {
            ConstCounter::new(value).encode(family.encode_family(&DecisionLabels { decision })?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;
    use tokio::sync::mpsc;

    use super::*;
    use crate::rlqs::RlqsOptions;

    #[test]
    fn the_gauges_and_counters_follow_the_book() {
        let book = Arc::new(QuotaBook::new(RlqsOptions {
            max_streams: 7,
            max_buckets: 9,
            max_stream_buckets: 5,
            ..RlqsOptions::default()
        }));
        let (tx, _rx) = mpsc::channel(4);
        book.open(tx).expect("a stream");
        let mut registry = Registry::default();
        registry.register_collector(Box::new(RlqsCollector::new(Arc::clone(&book))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for line in [
            "ratelimit_rlqs_streams 1",
            "ratelimit_rlqs_streams_limit 7",
            "ratelimit_rlqs_buckets 0",
            "ratelimit_rlqs_buckets_limit 9",
            "ratelimit_rlqs_stream_buckets 0",
            "ratelimit_rlqs_stream_buckets_limit 5",
            "ratelimit_rlqs_counters 0",
            "ratelimit_rlqs_assignments_total 0",
            "ratelimit_rlqs_reported_requests_total{decision=\"allowed\"} 0",
            "ratelimit_rlqs_reported_requests_total{decision=\"denied\"} 0",
            "ratelimit_rlqs_budget_units_taken_total 0",
            "ratelimit_rlqs_shares_cut_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
    }
}
