//! The circuit breaker's state machine and max_requests, on a manual clock.

mod support;

use std::time::Duration;

use support::{cluster_with_metrics, endpoints, pick_finish, secs};
use tollgate_upstream::{BreakerState, Outcome, PickError, UpstreamMetrics};

fn breaker(settings: &str) -> String {
    format!(
        "name: api\nendpoints:\n{}circuit_breaker: {settings}\n",
        endpoints(&[1, 1])
    )
}

fn open_for(result: Result<tollgate_upstream::PickedEndpoint, PickError>) -> Duration {
    match result {
        Err(PickError::CircuitOpen { retry_after }) => retry_after,
        other => panic!("expected an open breaker, got {other:?}"),
    }
}

#[test]
fn closed_opens_after_threshold_then_half_open_probe_closes_it() {
    let metrics = UpstreamMetrics::new();
    let (cluster, clock) = cluster_with_metrics(
        &breaker("{failure_threshold: 3, open_duration: 5s}"),
        &metrics,
    );
    assert_eq!(cluster.breaker_state(), Some(BreakerState::Closed));
    pick_finish(&cluster, Outcome::ServerError);
    pick_finish(&cluster, Outcome::GatewayFailure);
    assert_eq!(cluster.breaker_state(), Some(BreakerState::Closed));
    pick_finish(&cluster, Outcome::ServerError);
    assert_eq!(cluster.breaker_state(), Some(BreakerState::Open));
    assert_eq!(metrics.breaker_state("api"), 1);

    assert_eq!(open_for(cluster.pick(None)), secs(5));
    clock.advance(secs(2));
    assert_eq!(
        open_for(cluster.pick(None)),
        secs(3),
        "the hint is the time left"
    );
    clock.advance(secs(3));

    let probe = cluster.pick(None).expect("one probe goes through");
    assert_eq!(cluster.breaker_state(), Some(BreakerState::HalfOpen));
    assert_eq!(metrics.breaker_state("api"), 2);
    assert!(
        matches!(cluster.pick(None), Err(PickError::CircuitOpen { .. })),
        "only one probe at a time"
    );
    probe.finish(Outcome::Success);
    assert_eq!(cluster.breaker_state(), Some(BreakerState::Closed));
    assert_eq!(metrics.breaker_state("api"), 0);
    assert!(cluster.pick(None).is_ok());
}

#[test]
fn a_failed_probe_reopens_for_twice_as_long_up_to_the_cap() {
    let (cluster, clock) = cluster_with_metrics(
        &breaker("{failure_threshold: 1, open_duration: 5s, max_open_duration: 15s}"),
        &UpstreamMetrics::new(),
    );
    pick_finish(&cluster, Outcome::ServerError);
    let mut waits = vec![open_for(cluster.pick(None))];
    for _ in 0..3 {
        clock.advance(*waits.last().unwrap());
        pick_finish(&cluster, Outcome::GatewayFailure); // the probe fails
        waits.push(open_for(cluster.pick(None)));
    }
    assert_eq!(waits, [secs(5), secs(10), secs(15), secs(15)]);
    // A successful probe closes it and resets the backoff.
    clock.advance(secs(15));
    pick_finish(&cluster, Outcome::Success);
    pick_finish(&cluster, Outcome::ServerError);
    assert_eq!(open_for(cluster.pick(None)), secs(5));
}

#[test]
fn a_dropped_probe_frees_its_slot() {
    let (cluster, clock) = cluster_with_metrics(
        &breaker("{failure_threshold: 1, open_duration: 1s}"),
        &UpstreamMetrics::new(),
    );
    pick_finish(&cluster, Outcome::ServerError);
    clock.advance(secs(1));
    let probe = cluster.pick(None).unwrap();
    assert!(cluster.pick(None).is_err());
    drop(probe);
    assert_eq!(cluster.breaker_state(), Some(BreakerState::HalfOpen));
    let probe = cluster.pick(None).expect("the slot came back");
    probe.finish(Outcome::Success);
    assert_eq!(cluster.breaker_state(), Some(BreakerState::Closed));
}

#[test]
fn half_open_requests_allows_several_probes() {
    let (cluster, clock) = cluster_with_metrics(
        &breaker("{failure_threshold: 1, open_duration: 1s, half_open_requests: 3}"),
        &UpstreamMetrics::new(),
    );
    pick_finish(&cluster, Outcome::ServerError);
    clock.advance(secs(1));
    let probes: Vec<_> = (0..3).map(|_| cluster.pick(None).unwrap()).collect();
    assert!(cluster.pick(None).is_err());
    drop(probes);
}

#[test]
fn successes_between_failures_keep_it_closed() {
    let (cluster, _) =
        cluster_with_metrics(&breaker("{failure_threshold: 3}"), &UpstreamMetrics::new());
    for _ in 0..10 {
        pick_finish(&cluster, Outcome::ServerError);
        pick_finish(&cluster, Outcome::ServerError);
        pick_finish(&cluster, Outcome::Success);
    }
    assert_eq!(cluster.breaker_state(), Some(BreakerState::Closed));
}

#[test]
fn requests_admitted_before_the_trip_do_not_close_it() {
    let (cluster, _) =
        cluster_with_metrics(&breaker("{failure_threshold: 1}"), &UpstreamMetrics::new());
    let early = cluster.pick(None).unwrap();
    pick_finish(&cluster, Outcome::ServerError);
    early.finish(Outcome::Success);
    assert_eq!(cluster.breaker_state(), Some(BreakerState::Open));
}

#[test]
fn max_requests_caps_in_flight_and_frees_slots_on_finish_and_drop() {
    let (cluster, _) = cluster_with_metrics(&breaker("{max_requests: 2}"), &UpstreamMetrics::new());
    let a = cluster.pick(None).unwrap();
    let b = cluster.pick(None).unwrap();
    assert_eq!(
        cluster.pick(None).unwrap_err(),
        PickError::Overflow { max_requests: 2 }
    );
    a.finish(Outcome::Success);
    let c = cluster.pick(None).unwrap();
    drop(b);
    let d = cluster.pick(None).unwrap();
    assert!(cluster.pick(None).is_err());
    drop((c, d));
    assert_eq!(cluster.in_flight(), 0);
}

#[test]
fn no_breaker_means_no_state_and_no_limit() {
    let (cluster, _) = support::cluster(&format!("name: x\nendpoints:\n{}", endpoints(&[1])));
    assert_eq!(cluster.breaker_state(), None);
    let held: Vec<_> = (0..5000).map(|_| cluster.pick(None).unwrap()).collect();
    for _ in 0..100 {
        pick_finish(&cluster, Outcome::ServerError);
    }
    assert!(cluster.pick(None).is_ok());
    assert_eq!(cluster.in_flight(), 5000);
    drop(held);
}
