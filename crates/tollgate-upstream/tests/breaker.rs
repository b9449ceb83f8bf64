//! The circuit breaker's state machine and max_requests, on a manual clock.

mod cluster_fixture;
mod seconds;
mod unmetered_cluster;

use std::time::Duration;

use cluster_fixture::{cluster_with_metrics, endpoints};
use seconds::secs;
use tollgate_upstream::{BreakerState, Cluster, Outcome, PickError, UpstreamMetrics};

fn breaker(settings: &str) -> String {
    format!(
        "name: api\nendpoints:\n{}circuit_breaker: {settings}\n",
        endpoints(&[1, 1])
    )
}

/// Picks once and finishes with `outcome`; returns the endpoint's index.
fn pick_finish(cluster: &Cluster, outcome: Outcome) -> usize {
    let picked = cluster.pick(None).expect("pick succeeds");
    let index = picked.index();
    picked.finish(outcome);
    index
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
    let (cluster, _) =
        unmetered_cluster::cluster(&format!("name: x\nendpoints:\n{}", endpoints(&[1])));
    assert_eq!(cluster.breaker_state(), None);
    let held: Vec<_> = (0..5000).map(|_| cluster.pick(None).unwrap()).collect();
    for _ in 0..100 {
        pick_finish(&cluster, Outcome::ServerError);
    }
    assert!(cluster.pick(None).is_ok());
    assert_eq!(cluster.in_flight(), 5000);
    drop(held);
}

/// The breaker against a model written from its documented rules, on random traffic and time.
mod model {
    use super::*;
    use proptest::prelude::*;
    use tollgate_upstream::PickedEndpoint;

    const THRESHOLD: u32 = 3;
    const PROBES: usize = 2;
    const OPEN_MS: u64 = 1000;
    const MAX_OPEN_MS: u64 = 5000;

    #[derive(Debug, Clone, PartialEq)]
    enum State {
        Closed,
        Open { until: u64 },
        HalfOpen,
    }

    #[derive(Debug)]
    struct Model {
        state: State,
        failures: u32,
        opens: u32,
        period: u64,
        probes: Vec<usize>,
    }

    impl Model {
        /// Whether a pick at `now` is admitted, and as a probe of which period.
        fn pick(&mut self, id: usize, now: u64) -> Option<Option<u64>> {
            if let State::Open { until } = self.state {
                if now < until {
                    return None;
                }
                self.state = State::HalfOpen;
                self.period += 1;
                self.probes.clear();
            }
            match self.state {
                State::Closed => Some(None),
                State::HalfOpen if self.probes.len() < PROBES => {
                    self.probes.push(id);
                    Some(Some(self.period))
                }
                _ => None,
            }
        }

        fn trip(&mut self, now: u64) {
            self.opens += 1;
            let open_for = (OPEN_MS << (self.opens - 1).min(20)).min(MAX_OPEN_MS);
            self.state = State::Open {
                until: now + open_for,
            };
            self.failures = 0;
            self.probes.clear();
        }

        fn finish(&mut self, id: usize, probe: Option<u64>, failed: bool, now: u64) {
            match probe {
                None if failed => {
                    self.failures += 1;
                    if self.failures >= THRESHOLD && self.state == State::Closed {
                        self.trip(now);
                    }
                }
                None => self.failures = 0,
                Some(period) => {
                    if period != self.period || self.state != State::HalfOpen {
                        return;
                    }
                    self.probes.retain(|&p| p != id);
                    if failed {
                        self.trip(now);
                    } else {
                        self.state = State::Closed;
                        self.opens = 0;
                        self.failures = 0;
                    }
                }
            }
        }

        fn drop_probe(&mut self, id: usize, probe: Option<u64>) {
            if probe == Some(self.period) {
                self.probes.retain(|&p| p != id);
            }
        }

        fn breaker_state(&self) -> BreakerState {
            match self.state {
                State::Closed => BreakerState::Closed,
                State::Open { .. } => BreakerState::Open,
                State::HalfOpen => BreakerState::HalfOpen,
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Pick,
        Finish(usize, bool),
        Drop(usize),
        Advance(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::Pick),
            3 => (any::<usize>(), any::<bool>()).prop_map(|(i, f)| Step::Finish(i, f)),
            1 => any::<usize>().prop_map(Step::Drop),
            2 => (0u64..3000).prop_map(Step::Advance),
        ]
    }

    proptest! {
        #[test]
        fn breaker_follows_its_rules(steps in proptest::collection::vec(step(), 1..150)) {
            let (cluster, clock) = cluster_with_metrics(
                &breaker(&format!(
                    "{{failure_threshold: {THRESHOLD}, open_duration: {OPEN_MS}ms, max_open_duration: {MAX_OPEN_MS}ms, half_open_requests: {PROBES}}}"
                )),
                &UpstreamMetrics::new(),
            );
            let mut model = Model { state: State::Closed, failures: 0, opens: 0, period: 0, probes: Vec::new() };
            let mut now = 0u64;
            let mut live: Vec<(usize, Option<u64>, PickedEndpoint)> = Vec::new();
            for (id, step) in steps.into_iter().enumerate() {
                match step {
                    Step::Pick => {
                        let real = cluster.pick(None);
                        let expected = model.pick(id, now);
                        prop_assert_eq!(real.is_ok(), expected.is_some(), "pick at {} ms, model {:?}", now, model);
                        if let (Ok(picked), Some(probe)) = (real, expected) {
                            live.push((id, probe, picked));
                        }
                    }
                    Step::Finish(i, failed) if !live.is_empty() => {
                        let (id, probe, picked) = live.remove(i % live.len());
                        picked.finish(if failed { Outcome::ServerError } else { Outcome::Success });
                        model.finish(id, probe, failed, now);
                    }
                    Step::Drop(i) if !live.is_empty() => {
                        let (id, probe, picked) = live.remove(i % live.len());
                        drop(picked);
                        model.drop_probe(id, probe);
                    }
                    Step::Advance(ms) => {
                        now += ms;
                        clock.advance(Duration::from_millis(ms));
                    }
                    _ => {}
                }
                prop_assert_eq!(cluster.breaker_state(), Some(model.breaker_state()));
            }
        }
    }
}
