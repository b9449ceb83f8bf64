//! [`ShardedHistogram`]: a histogram of seconds that concurrent threads observe without sharing a lock or a cache line, summed when it is scraped.
//!
//! prometheus-client's `Histogram` takes a write lock for every
//! observation, so every answered call on every worker thread meets on one
//! lock and one cache line. Here each thread writes to one of [`SHARDS`]
//! shards (given to it on its first observation, round robin), each shard
//! on cache lines of its own: threads on different shards share nothing.
//! A scrape adds the shards up. It reads each counter once, without
//! stopping the writers, so a scrape taken while calls are answered may
//! pair a count and a sum a few observations apart — as Prometheus's own
//! lock-free histograms do; over successive scrapes every observation is
//! counted once.
//!
//! The sum is kept in whole nanoseconds (an integer that can be added
//! atomically); observations are durations, so nothing below a nanosecond
//! is lost that a latency histogram shows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// How many shards a histogram has: more than the worker threads of the
/// machines `serve` runs on, so threads seldom share one.
pub const SHARDS: usize = 16;

/// The shard the current thread writes to.
fn shard_of_this_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

/// One shard's counters, on cache lines no other shard uses.
#[derive(Debug)]
#[repr(align(128))]
struct Shard {
    count: AtomicU64,
    sum_nanos: AtomicU64,
    /// Per bucket, not cumulative; the last is `+Inf`.
    buckets: Box<[AtomicU64]>,
}

/// A histogram of seconds with fixed bucket bounds; cheap to clone (clones share the counts).
#[derive(Clone, Debug)]
pub struct ShardedHistogram {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The upper bounds, increasing, ending with `f64::MAX` for `+Inf`.
    bounds: Box<[f64]>,
    shards: Box<[Shard]>,
}

impl ShardedHistogram {
    /// A histogram with these upper bounds (increasing) and `+Inf`.
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Box<[f64]> = bounds
            .into_iter()
            .chain(std::iter::once(f64::MAX))
            .collect();
        let shards = (0..SHARDS)
            .map(|_| Shard {
                count: AtomicU64::new(0),
                sum_nanos: AtomicU64::new(0),
                buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            })
            .collect();
        ShardedHistogram {
            inner: Arc::new(Inner { bounds, shards }),
        }
    }

    /// Counts one observation of `seconds` (a negative or NaN value counts as 0).
    pub fn observe(&self, seconds: f64) {
        let seconds = if seconds.is_nan() {
            0.0
        } else {
            seconds.max(0.0)
        };
        let bucket = self.inner.bounds.partition_point(|&bound| bound < seconds);
        let shard = &self.inner.shards[shard_of_this_thread()];
        shard.count.fetch_add(1, Ordering::Relaxed);
        // Saturating float-to-integer conversion: a huge value adds u64::MAX ns at most.
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a non-negative float converted with saturation"
        )]
        let nanos = (seconds * 1e9).round() as u64;
        shard.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        if let Some(count) = shard.buckets.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The sum (seconds), the count and each bucket's `(upper bound, count)`, not cumulative, over all shards.
    pub fn totals(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut count = 0u64;
        let mut sum_nanos = 0u128;
        let mut buckets: Vec<(f64, u64)> = self.inner.bounds.iter().map(|&b| (b, 0)).collect();
        for shard in &*self.inner.shards {
            count = count.wrapping_add(shard.count.load(Ordering::Relaxed));
            sum_nanos += u128::from(shard.sum_nanos.load(Ordering::Relaxed));
            for (total, counted) in buckets.iter_mut().zip(&*shard.buckets) {
                total.1 = total.1.wrapping_add(counted.load(Ordering::Relaxed));
            }
        }
        #[expect(
            clippy::cast_precision_loss,
            reason = "a sum of nanoseconds shown as seconds"
        )]
        let sum = sum_nanos as f64 / 1e9;
        (sum, count, buckets)
    }
}

impl TypedMetric for ShardedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ShardedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.totals();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    /// The text prometheus-client writes for `histogram` registered as `name`.
    fn text(name: &str, histogram: impl prometheus_client::registry::Metric) -> String {
        let mut registry = Registry::default();
        registry.register(name, "h", histogram);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        out
    }

    #[test]
    fn it_writes_what_prometheus_clients_histogram_writes_for_the_same_observations() {
        let bounds = [0.002, 0.01, 0.5, 1.0];
        let sharded = ShardedHistogram::new(bounds);
        let plain = Histogram::new(bounds);
        // Binary fractions of whole nanoseconds, so both sums are exact;
        // 0.5 and 1.0 fall on a bound (`le` includes it).
        let values = [
            0.0,
            0.001_953_125,
            0.003_906_25,
            0.015_625,
            0.5,
            1.0,
            3.0,
            256.0,
        ];
        std::thread::scope(|scope| {
            for chunk in values.chunks(2) {
                let sharded = sharded.clone();
                scope.spawn(move || chunk.iter().for_each(|&v| sharded.observe(v)));
            }
        });
        values.iter().for_each(|&v| plain.observe(v));
        assert_eq!(text("latency", sharded), text("latency", plain));
    }

    #[test]
    fn every_observation_of_every_thread_is_counted_once() {
        let histogram = ShardedHistogram::new([0.5]);
        std::thread::scope(|scope| {
            for _ in 0..(SHARDS + 3) {
                let histogram = histogram.clone();
                scope.spawn(move || (0..1000).for_each(|_| histogram.observe(0.25)));
            }
        });
        let (sum, count, buckets) = histogram.totals();
        let expected = 1000 * (SHARDS as u64 + 3);
        assert_eq!(count, expected);
        assert_eq!(buckets, vec![(0.5, expected), (f64::MAX, 0)]);
        assert!((sum - 0.25 * expected as f64).abs() < 1e-6, "{sum}");
    }

    #[test]
    fn a_negative_or_nan_observation_counts_as_zero() {
        let histogram = ShardedHistogram::new([0.5]);
        histogram.observe(-1.0);
        histogram.observe(f64::NAN);
        assert_eq!(histogram.totals(), (0.0, 2, vec![(0.5, 2), (f64::MAX, 0)]));
    }
}
