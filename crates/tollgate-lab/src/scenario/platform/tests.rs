//! Tests of the platform scenario: each mode's figures on a small fleet, and the checker seeing over-admission where it happens.

use std::time::Duration;

use tollgate_core::Timestamp;
use tollgate_core::share::{AuthorityPolicy, HolderPolicy, Share, StarterPolicy};

use super::*;

fn scenario(distribution: KeyDistribution, scale: Vec<(Duration, u32)>) -> PlatformScenario {
    PlatformScenario {
        start: Timestamp::from_secs(1_700_000_000),
        duration: Duration::from_secs(10),
        rate: 20_000.0,
        poisson: true,
        seed: 7,
        keys: 1_000,
        distribution,
        instances: 4,
        scale,
        key_limit: Share::per_second(100, 100),
        platform_limit: Some(Share::per_second(15_000, 15_000)),
        modes: PlatformMode::ALL.to_vec(),
        store_rtt: Duration::from_micros(500),
        lease_period: Duration::from_secs(1),
        holder: HolderPolicy::default(),
        authority: AuthorityPolicy::default(),
    }
}

fn lane(report: &PlatformReport, mode: PlatformMode) -> &PlatformLaneReport {
    report
        .lanes
        .iter()
        .find(|l| l.mode == mode)
        .expect("lane ran")
}

#[test]
fn shares_admit_nothing_past_either_limit_with_few_calls_through_a_scale_out_and_in() {
    for distribution in [KeyDistribution::Zipf(1.0), KeyDistribution::Uniform] {
        let run = scenario(
            distribution,
            vec![(Duration::from_secs(4), 6), (Duration::from_secs(7), 2)],
        );
        let report = run.run().expect("valid");
        let exact = lane(&report, PlatformMode::Exact);
        assert_eq!(exact.decisions, report.arrivals);
        assert_eq!((exact.over_admitted, exact.calls_per_decision), (0, 1.0));
        let shares = lane(&report, PlatformMode::Shares);
        assert_eq!(
            shares.decisions, report.arrivals,
            "{distribution:?}: every request decided once"
        );
        assert_eq!(shares.over_admitted, 0, "{distribution:?}");
        assert!(
            shares.calls_per_decision <= 0.05,
            "{distribution:?}: {shares:?}"
        );
        assert!(
            shares.under_admission_pct <= 3.0,
            "{distribution:?}: {shares:?}"
        );
        assert_eq!(
            lane(&report, PlatformMode::Leased).over_admitted,
            0,
            "{distribution:?}"
        );
    }
}

#[test]
fn local_limits_drift_past_the_limit_and_the_checker_counts_it() {
    let report = scenario(KeyDistribution::Zipf(1.0), Vec::new())
        .run()
        .expect("valid");
    let local = lane(&report, PlatformMode::Local);
    assert!(
        local.over_admitted > 0 && local.worst_over_second > 0,
        "{local:?}"
    );
    assert!(
        local.under_admission_pct < 0.0,
        "it admits more than the exact limiter"
    );
    assert_eq!(local.store_calls, 0);
}

#[test]
fn bad_parameters_are_refused_with_their_name() {
    let mut run = scenario(KeyDistribution::Zipf(0.0), Vec::new());
    assert!(run.run().unwrap_err().to_string().contains("zipf_s"));
    run.distribution = KeyDistribution::Uniform;
    run.scale = vec![(Duration::from_secs(1), 0)];
    assert!(run.run().unwrap_err().to_string().contains("instances"));
}

#[test]
fn starter_slots_decide_first_uses_without_a_call_and_admit_nothing_past_a_limit() {
    // Sparse keys: each of the 4 instances sees most of the 20 000 keys two or three times.
    let mut run = scenario(KeyDistribution::Uniform, Vec::new());
    run.keys = 20_000;
    run.modes = vec![PlatformMode::Shares];
    let without = run.run().expect("valid");
    // 4 slots of 100/s ÷ 16: 6 tokens at 6.25/s on every key for each instance.
    run.authority.starter = StarterPolicy {
        slots: 4,
        divisor: 4,
    };
    let with = run.run().expect("valid");
    let (before, after) = (
        lane(&without, PlatformMode::Shares),
        lane(&with, PlatformMode::Shares),
    );
    assert_eq!(with.arrivals, without.arrivals, "the same trace");
    assert_eq!((before.over_admitted, after.over_admitted), (0, 0));
    assert_eq!(after.decisions, with.arrivals);
    // Without slots every first use of a key on an instance waits for a call.
    assert!(before.waited > with.arrivals / 4, "{before:?}");
    // With them only the first moments do, while the parts fill.
    assert!(after.waited * 20 < before.waited, "{after:?} vs {before:?}");
    assert!(
        after.calls_per_decision * 5.0 < before.calls_per_decision,
        "{after:?} vs {before:?}"
    );
    // The reserve's price: with D = 4 a quarter of each limit sits in the parts.
    assert!(after.under_admission_pct <= 5.0, "{after:?} vs {before:?}");
}

#[test]
fn a_lane_reports_the_same_alone_or_beside_others() {
    // Lanes decide the trace on threads of their own: none may see another's work.
    let mut run = scenario(
        KeyDistribution::Zipf(1.0),
        vec![(Duration::from_secs(3), 6)],
    );
    run.duration = Duration::from_secs(4);
    let all = run.run().expect("valid");
    for mode in [
        PlatformMode::Leased,
        PlatformMode::Shares,
        PlatformMode::Local,
    ] {
        run.modes = vec![mode];
        let alone = run.run().expect("valid");
        assert_eq!(alone.arrivals, all.arrivals);
        assert_eq!(lane(&alone, mode), lane(&all, mode), "{mode:?}");
        assert_eq!(
            lane(&alone, PlatformMode::Exact),
            lane(&all, PlatformMode::Exact)
        );
    }
}

#[test]
fn every_lane_counts_what_it_admitted_in_each_second() {
    let report = scenario(
        KeyDistribution::Zipf(1.0),
        vec![(Duration::from_secs(4), 6)],
    )
    .run()
    .expect("valid");
    for lane in &report.lanes {
        assert_eq!(
            lane.admitted_per_second.len(),
            10,
            "{:?}: one count per second of the run",
            lane.mode
        );
        assert_eq!(
            lane.admitted_per_second.iter().sum::<u64>(),
            lane.admitted,
            "{:?}",
            lane.mode
        );
    }
    // The exact limiter's seconds: the platform's 15 000/s plus at most its burst of 15 000.
    let exact = lane(&report, PlatformMode::Exact);
    assert!(
        exact
            .admitted_per_second
            .iter()
            .all(|&n| n > 10_000 && n <= 30_000),
        "{:?}",
        exact.admitted_per_second
    );
}
