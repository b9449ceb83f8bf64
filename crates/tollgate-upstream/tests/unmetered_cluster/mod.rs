//! A cluster from YAML whose metrics nobody reads.

use std::sync::Arc;

use tollgate_core::ManualClock;
use tollgate_upstream::{Cluster, UpstreamMetrics};

use crate::cluster_fixture::cluster_with_metrics;

/// A cluster built from `yaml`, on a manual clock starting at t = 1000 s, seeded.
pub fn cluster(yaml: &str) -> (Cluster, Arc<ManualClock>) {
    cluster_with_metrics(yaml, &UpstreamMetrics::new())
}
