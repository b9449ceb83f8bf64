//! Clusters from YAML on a manual clock, for the cluster tests, and their endpoint lists.

use std::sync::Arc;

use tollgate_core::{Clock, ManualClock, Timestamp};
use tollgate_upstream::{Cluster, ClusterConfig, UpstreamMetrics};

/// A cluster built from `yaml` counting into `metrics`, on a manual clock starting at t = 1000 s, seeded.
pub fn cluster_with_metrics(yaml: &str, metrics: &UpstreamMetrics) -> (Cluster, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1000)));
    let config = ClusterConfig::from_yaml(yaml).expect("test config is valid");
    let cluster = Cluster::builder(config)
        .clock(Arc::clone(&clock) as Arc<dyn Clock>)
        .metrics(metrics)
        .seed(7)
        .build()
        .expect("test cluster builds");
    (cluster, clock)
}

/// `n` endpoints 10.0.0.1:80 ... as YAML list items, with the given weights (1 when empty).
pub fn endpoints(weights: &[u32]) -> String {
    weights
        .iter()
        .enumerate()
        .map(|(i, w)| format!("  - {{address: \"10.0.0.{}:80\", weight: {w}}}\n", i + 1))
        .collect()
}
