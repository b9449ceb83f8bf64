//! Outlier ejection on a manual clock: who is ejected, for how long, and how many at once.

mod cluster_fixture;
mod seconds;
mod targeted_outcome;
mod unmetered_cluster;

use std::time::Duration;

use cluster_fixture::{cluster_with_metrics, endpoints};
use seconds::secs;
use targeted_outcome::hit;
use tollgate_upstream::{Outcome, PickError, UpstreamMetrics};

fn rr(n: usize, outlier: &str) -> String {
    format!(
        "name: web\nlb_policy: round_robin\nendpoints:\n{}outlier_detection: {outlier}\n",
        endpoints(&vec![1; n])
    )
}

fn ejected(cluster: &tollgate_upstream::Cluster) -> Vec<bool> {
    cluster.endpoints().iter().map(|e| e.ejected).collect()
}

#[test]
fn consecutive_5xx_ejects_for_base_time_then_returns_exactly() {
    let metrics = UpstreamMetrics::new();
    let (cluster, clock) = cluster_with_metrics(
        &rr(2, "{consecutive_5xx: 3, max_ejection_percent: 50}"),
        &metrics,
    );
    hit(&cluster, 0, Outcome::ServerError);
    hit(&cluster, 0, Outcome::ServerError);
    assert_eq!(ejected(&cluster), [false, false]);
    hit(&cluster, 0, Outcome::ServerError);
    assert_eq!(ejected(&cluster), [true, false]);
    assert_eq!(metrics.endpoint_ejections("web", "10.0.0.1:80"), 1);
    for _ in 0..5 {
        assert_eq!(
            cluster.pick(None).unwrap().index(),
            1,
            "ejected endpoint gets nothing"
        );
    }
    clock.advance(secs(30) - Duration::from_nanos(1));
    assert_eq!(ejected(&cluster), [true, false]);
    clock.advance(Duration::from_nanos(1));
    assert_eq!(
        ejected(&cluster),
        [false, false],
        "back after exactly base_ejection_time"
    );
    let picks: Vec<usize> = (0..4)
        .map(|_| cluster.pick(None).unwrap().index())
        .collect();
    assert!(picks.contains(&0));
}

#[test]
fn a_success_resets_the_count() {
    let (cluster, _) =
        unmetered_cluster::cluster(&rr(2, "{consecutive_5xx: 3, max_ejection_percent: 50}"));
    for _ in 0..5 {
        hit(&cluster, 0, Outcome::ServerError);
        hit(&cluster, 0, Outcome::ServerError);
        hit(&cluster, 0, Outcome::Success);
    }
    assert_eq!(ejected(&cluster), [false, false]);
}

#[test]
fn ejection_time_grows_with_each_ejection_and_is_capped() {
    let (cluster, clock) = unmetered_cluster::cluster(&rr(
        2,
        "{consecutive_5xx: 1, max_ejection_percent: 50, base_ejection_time: 10s, max_ejection_time: 25s, interval: 1h}",
    ));
    let mut lengths = Vec::new();
    for _ in 0..4 {
        hit(&cluster, 0, Outcome::ServerError);
        let mut out_for = Duration::ZERO;
        while ejected(&cluster)[0] {
            clock.advance(secs(1));
            out_for += secs(1);
        }
        lengths.push(out_for.as_secs());
    }
    // 10 s × 1, × 2, × 3 capped at 25 s, and the multiplier stops growing.
    assert_eq!(lengths, [10, 20, 25, 25]);
}

#[test]
fn time_back_in_service_lowers_the_multiplier() {
    let (cluster, clock) = unmetered_cluster::cluster(&rr(
        2,
        "{consecutive_5xx: 1, max_ejection_percent: 50, base_ejection_time: 10s, interval: 60s}",
    ));
    hit(&cluster, 0, Outcome::ServerError); // × 1: 10 s
    clock.advance(secs(10));
    hit(&cluster, 0, Outcome::ServerError); // × 2: 20 s
    clock.advance(secs(20));
    hit(&cluster, 0, Outcome::ServerError); // × 3: 30 s
    clock.advance(secs(30));
    // Two full intervals back in service: 3 - 2 = 1, so the next one is × 2.
    clock.advance(secs(120));
    hit(&cluster, 0, Outcome::ServerError);
    clock.advance(secs(20) - Duration::from_nanos(1));
    assert!(ejected(&cluster)[0]);
    clock.advance(Duration::from_nanos(1));
    assert!(!ejected(&cluster)[0]);
}

#[test]
fn gateway_failures_count_as_5xx_and_eject_on_their_own_only_when_enforced() {
    // Envoy's default: enforcing_consecutive_gateway_failure 0.
    let (cluster, _) = unmetered_cluster::cluster(&rr(
        2,
        "{consecutive_5xx: 4, consecutive_gateway_failure: 2, max_ejection_percent: 50}",
    ));
    for _ in 0..3 {
        hit(&cluster, 0, Outcome::GatewayFailure);
    }
    assert_eq!(
        ejected(&cluster),
        [false, false],
        "gateway detector not enforced"
    );
    hit(&cluster, 0, Outcome::GatewayFailure);
    assert_eq!(
        ejected(&cluster),
        [true, false],
        "the 5xx detector counts them"
    );

    let (cluster, _) = unmetered_cluster::cluster(&rr(
        2,
        "{consecutive_5xx: 4, consecutive_gateway_failure: 2, enforcing_consecutive_gateway_failure: 100, max_ejection_percent: 50}",
    ));
    hit(&cluster, 0, Outcome::GatewayFailure);
    hit(&cluster, 0, Outcome::GatewayFailure);
    assert_eq!(ejected(&cluster), [true, false]);
}

#[test]
fn a_plain_5xx_breaks_a_gateway_failure_streak() {
    let (cluster, _) = unmetered_cluster::cluster(&rr(
        2,
        "{consecutive_5xx: 100, consecutive_gateway_failure: 2, enforcing_consecutive_gateway_failure: 100, max_ejection_percent: 50}",
    ));
    for _ in 0..4 {
        hit(&cluster, 0, Outcome::GatewayFailure);
        hit(&cluster, 0, Outcome::ServerError);
    }
    assert_eq!(ejected(&cluster), [false, false]);
}

#[test]
fn outcome_from_status_classifies_like_envoy() {
    assert_eq!(Outcome::from_status(200), Outcome::Success);
    assert_eq!(Outcome::from_status(404), Outcome::Success);
    assert_eq!(Outcome::from_status(429), Outcome::Success);
    assert_eq!(Outcome::from_status(500), Outcome::ServerError);
    assert_eq!(Outcome::from_status(501), Outcome::ServerError);
    for status in [502, 503, 504] {
        assert_eq!(Outcome::from_status(status), Outcome::GatewayFailure);
    }
}

#[test]
fn never_more_than_max_ejection_percent_is_ejected() {
    let metrics = UpstreamMetrics::new();
    let (cluster, _) = cluster_with_metrics(
        &rr(4, "{consecutive_5xx: 1, max_ejection_percent: 50}"),
        &metrics,
    );
    for target in 0..4 {
        hit(&cluster, target, Outcome::ServerError);
    }
    assert_eq!(ejected(&cluster), [true, true, false, false]);
    assert_eq!(metrics.endpoint_ejections("web", "10.0.0.3:80"), 0);
}

#[test]
fn default_ten_percent_ejects_nothing_in_a_small_cluster_unless_one_is_allowed() {
    let (cluster, _) = unmetered_cluster::cluster(&rr(3, "{consecutive_5xx: 1}"));
    hit(&cluster, 0, Outcome::ServerError);
    assert_eq!(ejected(&cluster), [false, false, false]);

    let (cluster, _) =
        unmetered_cluster::cluster(&rr(3, "{consecutive_5xx: 1, always_eject_one_host: true}"));
    hit(&cluster, 0, Outcome::ServerError);
    hit(&cluster, 1, Outcome::ServerError);
    assert_eq!(ejected(&cluster), [true, false, false]);
}

#[test]
fn with_most_endpoints_out_the_cluster_panics_and_uses_all() {
    let yaml = |panic: u32| {
        format!(
            "name: web\nhealthy_panic_threshold: {panic}\nendpoints:\n{}outlier_detection: {{consecutive_5xx: 1, max_ejection_percent: 100}}\n",
            endpoints(&[1, 1])
        )
    };
    let (cluster, _) = unmetered_cluster::cluster(&yaml(50));
    hit(&cluster, 0, Outcome::ServerError);
    // 1 of 2 available = 50 %, not below the threshold: no panic.
    assert!((0..4).all(|_| cluster.pick(None).unwrap().index() == 1));
    hit(&cluster, 1, Outcome::ServerError);
    assert_eq!(ejected(&cluster), [true, true]);
    let picks: Vec<usize> = (0..4)
        .map(|_| cluster.pick(None).unwrap().index())
        .collect();
    assert!(
        picks.contains(&0) && picks.contains(&1),
        "panic mode uses every endpoint"
    );

    let (cluster, _) = unmetered_cluster::cluster(&yaml(0));
    hit(&cluster, 0, Outcome::ServerError);
    hit(&cluster, 1, Outcome::ServerError);
    assert_eq!(
        cluster.pick(None).unwrap_err(),
        PickError::NoHealthyEndpoint
    );
}

#[test]
fn a_dropped_request_teaches_nothing() {
    let (cluster, _) =
        unmetered_cluster::cluster(&rr(2, "{consecutive_5xx: 1, max_ejection_percent: 50}"));
    for _ in 0..10 {
        drop(cluster.pick(None).unwrap());
    }
    assert_eq!(ejected(&cluster), [false, false]);
    assert_eq!(cluster.in_flight(), 0);
}

mod random_traffic {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Answer(u8, Outcome),
        Advance(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u8..8, prop_oneof![
                Just(Outcome::Success),
                Just(Outcome::ServerError),
                Just(Outcome::GatewayFailure),
            ]).prop_map(|(i, o)| Step::Answer(i, o)),
            1 => (0u64..40_000).prop_map(Step::Advance),
        ]
    }

    proptest! {
        #[test]
        fn ejected_endpoints_never_exceed_max_ejection_percent(
            n in 1usize..8,
            percent in 0u32..=100,
            one in any::<bool>(),
            steps in proptest::collection::vec(step(), 1..200),
        ) {
            let (cluster, clock) = unmetered_cluster::cluster(&format!(
                "name: p\nhealthy_panic_threshold: 0\nendpoints:\n{}outlier_detection: {{consecutive_5xx: 2, consecutive_gateway_failure: 1, enforcing_consecutive_gateway_failure: 100, max_ejection_percent: {percent}, always_eject_one_host: {one}}}\n",
                endpoints(&vec![1; n])
            ));
            let allowed = (percent as usize * n / 100).max(usize::from(one));
            for step in steps {
                match step {
                    Step::Answer(i, outcome) => {
                        // Answer on behalf of endpoint i if the balancer offers it.
                        let target = usize::from(i) % n;
                        if let Ok(picked) = cluster.pick(None) {
                            if picked.index() == target {
                                picked.finish(outcome);
                            } else {
                                picked.finish(Outcome::Success);
                            }
                        } else {
                            prop_assert!(ejected(&cluster).iter().all(|&e| e));
                        }
                    }
                    Step::Advance(ms) => clock.advance(Duration::from_millis(ms)),
                }
                let out = ejected(&cluster).iter().filter(|&&e| e).count();
                prop_assert!(out <= allowed, "{out} ejected, {allowed} allowed");
                prop_assert_eq!(cluster.in_flight(), 0);
            }
        }
    }
}
