//! [`Metrics`]: prometheus-client counters of the layer's decisions, for the app's own registry (the `metrics` feature).
//!
//! Without the feature the layer keeps a counter that counts nothing, so
//! the decision code is the same either way and the default build pulls no
//! prometheus-client.

#[cfg(feature = "metrics")]
use prometheus_client::encoding::EncodeLabelSet;
#[cfg(feature = "metrics")]
use prometheus_client::metrics::family::Family;
#[cfg(feature = "metrics")]
use prometheus_client::registry::Registry;

/// One limit's count of one outcome.
#[cfg(feature = "metrics")]
pub(crate) use prometheus_client::metrics::counter::Counter as DecisionCounter;

/// One limit's count of one outcome: without the `metrics` feature, nothing.
#[cfg(not(feature = "metrics"))]
#[derive(Clone, Debug, Default)]
pub(crate) struct DecisionCounter;

#[cfg(not(feature = "metrics"))]
impl DecisionCounter {
    /// Counts nothing (the shape of prometheus-client's `Counter::inc`).
    #[inline]
    pub(crate) fn inc(&self) -> u64 {
        0
    }
}

/// The labels of a decision: which limit, and what happened.
#[cfg(feature = "metrics")]
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
#[non_exhaustive]
pub struct DecisionLabels {
    /// The limit's name.
    pub limit: String,
    /// `allowed`, `denied`, `shadow_denied` (over the limit, let through in
    /// shadow mode) or `store_error`.
    pub outcome: &'static str,
}

/// The layer's counters; register them in the app's registry with [`Metrics::register`].
///
/// ```
/// use std::time::Duration;
/// use tollgate_middleware::{KeyExtractor, Limit, Metrics, RateLimitLayer};
/// use tollgate_store::StoreConfig;
///
/// let metrics = Metrics::new();
/// let mut registry = prometheus_client::registry::Registry::default();
/// metrics.register(&mut registry);
/// let layer = RateLimitLayer::builder(KeyExtractor::client_address())
///     .limit(Limit::fixed_window("per-second", 10, Duration::from_secs(1)).unwrap())
///     .metrics(&metrics)
///     .in_memory(StoreConfig::with_max_keys(1_000));
///
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
/// assert!(text.contains("tollgate_middleware_decisions_total{limit=\"per-second\",outcome=\"allowed\"} 0"));
/// ```
#[cfg(feature = "metrics")]
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub(crate) decisions: Family<DecisionLabels, DecisionCounter>,
}

/// Without the `metrics` feature: no counters.
#[cfg(not(feature = "metrics"))]
#[derive(Clone, Debug, Default)]
pub(crate) struct Metrics;

#[cfg(feature = "metrics")]
impl Metrics {
    /// New, unregistered counters.
    pub fn new() -> Self {
        Metrics::default()
    }

    /// Registers `tollgate_middleware_decisions_total{limit, outcome}` in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tollgate_middleware_decisions",
            "Rate limit decisions of the app middleware, by limit and outcome",
            self.decisions.clone(),
        );
    }

    /// The counter of one limit and outcome (kept by the layer, so a request allocates no label).
    pub(crate) fn counter(&self, limit: &str, outcome: &'static str) -> DecisionCounter {
        self.decisions
            .get_or_create(&DecisionLabels {
                limit: limit.to_owned(),
                outcome,
            })
            .clone()
    }
}

#[cfg(not(feature = "metrics"))]
impl Metrics {
    /// No counters.
    pub(crate) fn new() -> Self {
        Metrics
    }

    /// A counter that counts nothing.
    pub(crate) fn counter(&self, _limit: &str, _outcome: &'static str) -> DecisionCounter {
        DecisionCounter
    }
}
