//! The labels every per-route series carries, and a count written as a gauge: shared by the proxy's metrics and each layer's own series.

use prometheus_client::encoding::EncodeLabelSet;
use tollgate_runtime::LabelValue;

/// Labels of per-route counters (configured names, written escaped).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route.
    pub route: LabelValue,
    /// The cluster.
    pub cluster: LabelValue,
}

/// A count as a gauge's value (saturating).
pub(crate) fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
