//! Helpers shared by the cluster tests: clusters from YAML on a manual clock.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Clock, ManualClock, Timestamp};
use tollgate_upstream::{Cluster, ClusterConfig, Outcome, UpstreamMetrics};

/// A cluster built from `yaml`, on a manual clock starting at t = 1000 s, seeded.
pub fn cluster(yaml: &str) -> (Cluster, Arc<ManualClock>) {
    cluster_with_metrics(yaml, &UpstreamMetrics::new())
}

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

/// Picks once and finishes with `outcome`; returns the endpoint's index.
pub fn pick_finish(cluster: &Cluster, outcome: Outcome) -> usize {
    let picked = cluster.pick(None).expect("pick succeeds");
    let index = picked.index();
    picked.finish(outcome);
    index
}

/// Sends `outcome` to endpoint `target` only (picking until it comes up; others succeed).
pub fn hit(cluster: &Cluster, target: usize, outcome: Outcome) {
    for _ in 0..1000 {
        let picked = cluster.pick(None).expect("pick succeeds");
        if picked.index() == target {
            picked.finish(outcome);
            return;
        }
        drop(picked);
    }
    panic!("endpoint {target} never came up");
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
