//! The CPU cost of one pick + finish per balancer, the part of a proxied request this crate adds.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented entry point"
)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use tollgate_core::{Clock, MonotonicClock};
use tollgate_upstream::{Cluster, ClusterConfig, Outcome};

fn cluster(policy: &str, guarded: bool) -> Cluster {
    let endpoints: String = (1..=8)
        .map(|i| format!("  - {{address: \"10.0.0.{i}:80\", weight: {i}}}\n"))
        .collect();
    let guards = if guarded {
        "outlier_detection: {max_ejection_percent: 50}\ncircuit_breaker: {max_requests: 100000}\n"
    } else {
        ""
    };
    let yaml = format!("name: bench\nlb_policy: {policy}\nendpoints:\n{endpoints}{guards}");
    Cluster::builder(ClusterConfig::from_yaml(&yaml).unwrap())
        .clock(Arc::new(MonotonicClock::new()) as Arc<dyn Clock>)
        .seed(1)
        .build()
        .unwrap()
}

fn pick(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick_finish_8_endpoints");
    for policy in [
        "round_robin",
        "weighted_round_robin",
        "least_request",
        "ring_hash",
        "random",
    ] {
        for guarded in [false, true] {
            let cluster = cluster(policy, guarded);
            let name = if guarded {
                format!("{policy}+outlier+breaker")
            } else {
                policy.to_owned()
            };
            let mut n = 0u64;
            group.bench_function(name, |b| {
                b.iter(|| {
                    n = n.wrapping_add(1);
                    let key = n.to_le_bytes();
                    let picked = cluster.pick(Some(black_box(&key))).unwrap();
                    black_box(picked.address());
                    picked.finish(Outcome::Success);
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, pick);
criterion_main!(benches);
