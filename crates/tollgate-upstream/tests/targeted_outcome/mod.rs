//! One outcome sent to one chosen endpoint of a cluster.

use tollgate_upstream::{Cluster, Outcome};

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
