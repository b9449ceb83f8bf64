//! [`Metrics`]: prometheus-client counters of the layer's decisions, for the app's own registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The labels of a decision: which limit, and what happened.
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
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub(crate) decisions: Family<DecisionLabels, Counter>,
}

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
    pub(crate) fn counter(&self, limit: &str, outcome: &'static str) -> Counter {
        self.decisions
            .get_or_create(&DecisionLabels {
                limit: limit.to_owned(),
                outcome,
            })
            .clone()
    }
}
