//! Each balancer picks the way its policy promises: order, smoothness, spread and stickiness.

mod cluster_fixture;
mod seconds;
mod unmetered_cluster;

use std::collections::HashMap;
use std::sync::Arc;

use cluster_fixture::endpoints;
use proptest::prelude::*;
use tollgate_core::{Clock, ManualClock, Timestamp};
use tollgate_upstream::{Cluster, ClusterConfig, EndpointConfig, LbPolicy, Outcome};
use unmetered_cluster::cluster;

fn yaml(policy: &str, weights: &[u32]) -> String {
    format!(
        "name: web\nlb_policy: {policy}\nendpoints:\n{}",
        endpoints(weights)
    )
}

fn letters(cluster: &Cluster, n: usize) -> String {
    (0..n)
        .map(|_| {
            let picked = cluster.pick(None).unwrap();
            let letter = (b'A' + picked.index() as u8) as char;
            picked.finish(Outcome::Success);
            letter
        })
        .collect()
}

#[test]
fn round_robin_takes_each_endpoint_in_turn_ignoring_weights() {
    let (cluster, _) = cluster(&yaml("round_robin", &[5, 1, 1]));
    assert_eq!(letters(&cluster, 9), "ABCABCABC");
}

#[test]
fn weighted_round_robin_is_nginx_smooth_sequence() {
    let (cluster, _) = cluster(&yaml("weighted_round_robin", &[5, 1, 1]));
    assert_eq!(letters(&cluster, 7), "AABACAA");
    assert_eq!(letters(&cluster, 7), "AABACAA");
}

#[test]
fn weighted_round_robin_gives_exact_shares_per_cycle() {
    let (cluster, _) = cluster(&yaml("weighted_round_robin", &[3, 2, 1]));
    let picks = letters(&cluster, 600);
    assert_eq!(picks.matches('A').count(), 300);
    assert_eq!(picks.matches('B').count(), 200);
    assert_eq!(picks.matches('C').count(), 100);
    // Smooth: the heaviest endpoint never gets more than two in a row.
    assert!(!picks.contains("AAA"), "{picks}");
}

#[test]
fn random_follows_weights() {
    let (cluster, _) = cluster(&yaml("random", &[3, 1]));
    let picks = letters(&cluster, 20_000);
    let a = picks.matches('A').count() as f64 / 20_000.0;
    assert!((0.72..0.78).contains(&a), "share of A {a}");
}

#[test]
fn least_request_spreads_evenly_when_requests_finish() {
    let (cluster, _) = cluster(&yaml("least_request", &[1, 1, 1, 1]));
    let picks = letters(&cluster, 8_000);
    for letter in ['A', 'B', 'C', 'D'] {
        let share = picks.matches(letter).count() as f64 / 8_000.0;
        assert!((0.22..0.28).contains(&share), "{letter}: {share}");
    }
}

#[test]
fn least_request_never_picks_the_single_most_loaded_endpoint() {
    let (cluster, _) = cluster(&yaml("least_request", &[1, 1, 1, 1, 1]));
    let mut held = Vec::new();
    for _ in 0..200 {
        let loads: Vec<i64> = cluster.endpoints().iter().map(|e| e.in_flight).collect();
        let max = *loads.iter().max().unwrap();
        let picked = cluster.pick(None).unwrap();
        if loads.iter().filter(|&&l| l == max).count() == 1 {
            assert_ne!(loads[picked.index()], max, "loads {loads:?}");
        }
        held.push(picked);
    }
    let loads: Vec<i64> = cluster.endpoints().iter().map(|e| e.in_flight).collect();
    let spread = loads.iter().max().unwrap() - loads.iter().min().unwrap();
    assert!(
        spread <= 3,
        "power of two choices keeps loads close: {loads:?}"
    );
    drop(held);
    assert_eq!(cluster.in_flight(), 0);
}

#[test]
fn least_request_with_two_endpoints_always_takes_the_idler_one() {
    let (cluster, _) = cluster(&yaml("least_request", &[1, 1]));
    let busy: Vec<_> = (0..4)
        .map(|_| {
            let p = cluster.pick(None).unwrap();
            let e = cluster.endpoints();
            assert!(e[0].in_flight.abs_diff(e[1].in_flight) <= 1, "{e:?}");
            p
        })
        .collect();
    assert_eq!(cluster.endpoints()[0].in_flight, 2);
    assert_eq!(cluster.endpoints()[1].in_flight, 2);
    // Free endpoint 0's requests: the next picks all go there until it catches up.
    let (zero, one): (Vec<_>, Vec<_>) = busy.into_iter().partition(|p| p.index() == 0);
    drop(zero);
    let next: Vec<_> = (0..2).map(|_| cluster.pick(None).unwrap()).collect();
    assert!(next.iter().all(|p| p.index() == 0));
    drop((one, next));
}

fn ring_cluster(addresses: &[&str], weights: &[u32]) -> Cluster {
    let config = ClusterConfig {
        name: "ring".into(),
        endpoints: addresses
            .iter()
            .zip(weights)
            .map(|(a, &w)| EndpointConfig {
                address: (*a).to_owned(),
                weight: w,
            })
            .collect(),
        lb_policy: LbPolicy::RingHash,
        ring_hash: Default::default(),
        healthy_panic_threshold: 50,
        outlier_detection: None,
        circuit_breaker: None,
        health_check: None,
    };
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
    Cluster::builder(config)
        .clock(clock as Arc<dyn Clock>)
        .seed(1)
        .build()
        .unwrap()
}

fn owner(cluster: &Cluster, key: &str) -> String {
    cluster
        .pick(Some(key.as_bytes()))
        .unwrap()
        .address()
        .to_owned()
}

#[test]
fn ring_hash_is_sticky_and_spreads_keys() {
    let addresses = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"];
    let cluster = ring_cluster(&addresses, &[1, 1, 1, 1]);
    let mut counts: HashMap<String, usize> = HashMap::new();
    for k in 0..10_000 {
        let key = format!("user-{k}");
        let first = owner(&cluster, &key);
        assert_eq!(owner(&cluster, &key), first, "same key, same endpoint");
        *counts.entry(first).or_default() += 1;
    }
    for address in addresses {
        let share = counts[address] as f64 / 10_000.0;
        assert!((0.18..0.32).contains(&share), "{address}: {share}");
    }
}

#[test]
fn ring_hash_moves_about_one_in_n_keys_when_an_endpoint_joins() {
    let four = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"];
    let five = [four.as_slice(), &["10.0.0.5:80"]].concat();
    let before = ring_cluster(&four, &[1; 4]);
    let after = ring_cluster(&five, &[1; 5]);
    let mut moved = 0;
    for k in 0..10_000 {
        let key = format!("session-{k}");
        let (old, new) = (owner(&before, &key), owner(&after, &key));
        if old != new {
            moved += 1;
            assert_eq!(new, "10.0.0.5:80", "a key only moves to the new endpoint");
        }
    }
    let fraction = f64::from(moved) / 10_000.0;
    assert!(
        (0.13..0.27).contains(&fraction),
        "about 1/5 of the keys move, got {fraction}"
    );
}

#[test]
fn ring_hash_gives_heavier_endpoints_more_keys() {
    let cluster = ring_cluster(&["10.0.0.1:80", "10.0.0.2:80"], &[3, 1]);
    let heavy = (0..10_000)
        .filter(|k| owner(&cluster, &format!("k{k}")) == "10.0.0.1:80")
        .count() as f64
        / 10_000.0;
    assert!((0.68..0.82).contains(&heavy), "weight 3 of 4 got {heavy}");
}

#[test]
fn ring_hash_without_a_key_picks_at_random() {
    let cluster = ring_cluster(&["10.0.0.1:80", "10.0.0.2:80"], &[1, 1]);
    let first = (0..1000)
        .filter(|_| cluster.pick(None).unwrap().index() == 0)
        .count();
    assert!((350..650).contains(&first), "{first}");
}

#[test]
fn ring_hash_skips_an_ejected_endpoint_and_returns_to_it() {
    let (cluster, clock) = cluster(
        "name: ring\nlb_policy: ring_hash\nendpoints:\n  - address: a:80\n  - address: b:80\n  - address: c:80\n\
         outlier_detection: {consecutive_5xx: 1, max_ejection_percent: 50}\n",
    );
    let key = b"tenant-42";
    let home = cluster.pick(Some(key)).unwrap();
    let home_index = home.index();
    home.finish(Outcome::ServerError);
    let away = cluster.pick(Some(key)).unwrap();
    assert_ne!(away.index(), home_index, "ejected endpoint is skipped");
    drop(away);
    clock.advance(seconds::secs(30));
    assert_eq!(cluster.pick(Some(key)).unwrap().index(), home_index);
}

proptest! {
    #[test]
    fn smooth_weighted_round_robin_gives_each_endpoint_its_weight_per_cycle(
        weights in proptest::collection::vec(1u32..20, 1..6),
    ) {
        let (cluster, _) = cluster(&yaml("weighted_round_robin", &weights));
        let total: u32 = weights.iter().sum();
        let mut counts = vec![0u32; weights.len()];
        for _ in 0..total {
            let picked = cluster.pick(None).unwrap();
            counts[picked.index()] += 1;
        }
        prop_assert_eq!(counts, weights);
    }

    #[test]
    fn every_policy_only_picks_configured_endpoints_and_releases_slots(
        policy in prop_oneof![
            Just("round_robin"), Just("weighted_round_robin"), Just("least_request"),
            Just("ring_hash"), Just("random"),
        ],
        weights in proptest::collection::vec(1u32..10, 1..8),
        picks in 1usize..50,
    ) {
        let (cluster, _) = cluster(&yaml(policy, &weights));
        let held: Vec<_> = (0..picks).map(|_| cluster.pick(Some(b"k")).unwrap()).collect();
        prop_assert!(held.iter().all(|p| p.index() < weights.len()));
        prop_assert_eq!(cluster.in_flight(), picks as i64);
        drop(held);
        prop_assert_eq!(cluster.in_flight(), 0);
    }
}
