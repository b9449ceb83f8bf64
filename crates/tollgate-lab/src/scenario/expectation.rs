//! What a lane should do over a run, computed from the scenario's parameters alone.

use serde::Serialize;
use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm};

use super::{Lane, Scenario};

/// What a lane should do over a run, computed from the parameters alone.
///
/// Every rate-based limit admits at most its initial allowance (a full
/// bucket, a burst) plus its sustained rate times the run; a fixed window
/// admits at most its limit in every window the run touches; the sliding
/// ones at most their limit per window length. Each key gets that ceiling
/// (each sidecar too, in a local placement), and cannot be admitted more
/// than it sends.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expectation {
    /// The lane's label.
    pub label: String,
    /// Requests expected in the run (the mean for Poisson traffic).
    pub expected_arrivals: f64,
    /// The configured cap per key, in requests per second (the sustained rate, or limit ÷ window).
    pub configured_rate: f64,
    /// The cap the lane enforces for all its traffic, per key: the configured
    /// rate times the sidecars for a local placement.
    pub effective_rate: f64,
    /// What a key may take at once from idle (a full bucket, a burst, a window's limit).
    pub initial_allowance: u64,
    /// The most the lane can admit in the run, over all keys and sidecars.
    pub ceiling: f64,
    /// `min(expected arrivals, ceiling)`.
    pub expected_admitted: f64,
    /// `expected_admitted / expected_arrivals` (1 when nothing arrives).
    pub acceptance_rate: f64,
    /// The long-run acceptance once any initial allowance is spent: `min(1, effective × keys / arrival rate)`.
    pub steady_acceptance_rate: f64,
    /// One plain sentence on what to expect.
    pub explanation: String,
}

impl Expectation {
    pub(super) fn of(scenario: &Scenario, lane: &Lane) -> Self {
        let seconds = scenario.duration.as_secs_f64();
        let arrivals = scenario.source.expected_arrivals(scenario.duration);
        let keys = f64::from(scenario.clients);
        let stores = f64::from(lane.placement.stores());
        let algorithm = lane.algorithm;
        let window = algorithm.window().as_secs_f64();
        let limit = algorithm.capacity();
        let (rate, allowance, per_key_ceiling) = match algorithm {
            AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(a)) => {
                let rate = 1.0 / a.token_interval().as_secs_f64();
                (rate, limit, limit as f64 + (rate * seconds).floor())
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(a)) => {
                let rate = 1.0 / a.emission_interval().as_secs_f64();
                (rate, limit, limit as f64 + (rate * seconds).floor())
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(a)) => {
                let rate = 1.0 / a.drain_interval().as_secs_f64();
                (rate, limit, limit as f64 + (rate * seconds).floor())
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(a)) => {
                let w = u64::try_from(a.window().as_nanos())
                    .unwrap_or(u64::MAX)
                    .max(1);
                let first = scenario.start.as_nanos() / w;
                let end = scenario.start.as_nanos()
                    + u64::try_from(scenario.duration.as_nanos()).unwrap_or(u64::MAX);
                let last = (end - 1) / w;
                let windows = (last - first + 1) as f64;
                (limit as f64 / window, limit, limit as f64 * windows)
            }
            _ => {
                // Sliding window counter and log: at most the limit in any window length.
                let windows = (seconds / window).ceil().max(1.0);
                (limit as f64 / window, limit, limit as f64 * windows)
            }
        };
        // Round-robin spreads each key's requests evenly over the sidecars.
        let per_store_arrivals = arrivals / keys / stores;
        let cost = scenario.cost as f64;
        let admitted_per_store = (per_key_ceiling / cost).floor().min(per_store_arrivals);
        let ceiling = (per_key_ceiling / cost).floor() * keys * stores;
        let expected_admitted = admitted_per_store * keys * stores;
        let acceptance = if arrivals > 0.0 {
            expected_admitted / arrivals
        } else {
            1.0
        };
        let effective_rate = rate * stores;
        let arrival_rate = if seconds > 0.0 {
            arrivals / seconds
        } else {
            0.0
        };
        let steady = if arrival_rate * cost > 0.0 {
            (effective_rate * keys / (arrival_rate * cost)).min(1.0)
        } else {
            1.0
        };
        let explanation = explain(lane, rate, allowance, steady, stores);
        Expectation {
            label: lane.label.clone(),
            expected_arrivals: arrivals,
            configured_rate: rate,
            effective_rate,
            initial_allowance: allowance,
            ceiling,
            expected_admitted,
            acceptance_rate: acceptance,
            steady_acceptance_rate: steady,
            explanation,
        }
    }
}

/// The one-line explanation of an expectation.
fn explain(lane: &Lane, rate: f64, allowance: u64, steady: f64, stores: f64) -> String {
    let over = steady < 1.0;
    let rate = format_rate(rate);
    let settles = if over {
        format!(
            "in the long run about {:.0}% of requests pass",
            steady * 100.0
        )
    } else {
        "and arrivals stay under it, so everything passes".to_owned()
    };
    let core = match lane.algorithm {
        AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(_)) => format!(
            "The bucket starts full ({allowance} tokens), then settles at the refill rate of {rate}/s; {settles}."
        ),
        AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(_)) => format!(
            "A burst of {allowance} passes at once, then one request every {}; {settles}.",
            format_interval(rate_value(lane))
        ),
        AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(a)) => {
            let kind = match a.mode() {
                tollgate_core::DelayMode::NoDelay => "passes a burst of",
                _ => "queues (delays) a burst of",
            };
            format!("The leaky bucket {kind} {allowance} and drains at {rate}/s; {settles}.")
        }
        AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(_)) => format!(
            "Each epoch-aligned window admits its first {allowance}; a burst straddling a boundary can pass twice that in one window length; {settles}."
        ),
        AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(_)) => format!(
            "The weighted estimate keeps any window near {allowance} (a tiny over- or under-admission against the exact log); {settles}."
        ),
        AnyAlgorithm::SlidingLog(_) => {
            format!("Exactly {allowance} in any window, never more; {settles}.")
        }
    };
    let core = match lane.clients {
        super::ClientBehavior::Once => core,
        super::ClientBehavior::RetryAtOnce { max_retries, .. } => format!(
            "{core} Its clients send a refused request again at once, up to {max_retries} times: the limiter sees more requests than are offered, and admits no more."
        ),
        super::ClientBehavior::HonourRetryAfter { max_retries } => format!(
            "{core} Its clients wait the Retry-After T spread over [T, 2T], and no faster than the limit admits once it ran out, before each of up to {max_retries} retries, so refusals come back spread out once there is room."
        ),
        super::ClientBehavior::RetryAfterPlusAdditiveJitter { max_retries } => format!(
            "{core} Its clients wait the Retry-After plus a jitter of a fraction of a second before each of up to {max_retries} retries, so refusals come back together when the window reopens."
        ),
        super::ClientBehavior::Adaptive { max_retries, k } => format!(
            "{core} Its clients throttle themselves (SRE adaptive throttling, K = {k}): once refusals pile up they drop new requests before sending them, and retry the rest as the Retry-After clients do (up to {max_retries} times)."
        ),
    };
    if let super::Placement::Quota {
        envoys, report_ns, ..
    } = lane.placement
    {
        let every = std::time::Duration::from_nanos(report_ns).as_secs_f64();
        return format!(
            "{core} {envoys} Envoys enforce their shares locally (no call per request) and report usage every {} s; the shares follow demand at the next reports, and each new assignment starts full, so the fleet can pass the cap by what reassignments hand out.",
            format_rate(every)
        );
    }
    if let super::Placement::Leased {
        instances,
        period_ns,
    } = lane.placement
    {
        let period = std::time::Duration::from_nanos(period_ns).as_secs_f64();
        return format!(
            "{core} {instances} instances share one store and take leases of about their rate × {} s from it: never more than the global cap, a little less while units sit in other instances' leases, and far fewer store calls.",
            format_rate(period)
        );
    }
    if stores > 1.0 {
        format!(
            "{core} Each of {stores:.0} sidecars applies it locally, so the fleet admits up to {stores:.0}× the configured cap."
        )
    } else {
        core
    }
}

/// A rate-based algorithm's sustained rate in requests per second (0 for windows).
fn rate_value(lane: &Lane) -> f64 {
    match lane.algorithm {
        AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(a)) => 1.0 / a.emission_interval().as_secs_f64(),
        _ => 0.0,
    }
}

/// A rate with at most two decimals: `10`, `0.17`.
fn format_rate(rate: f64) -> String {
    let text = format!("{rate:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The spacing of a rate as a readable interval: `100 ms`, `2.5 s`.
fn format_interval(rate: f64) -> String {
    if rate <= 0.0 {
        return "never".to_owned();
    }
    let seconds = 1.0 / rate;
    if seconds < 1.0 {
        format!("{} ms", format_rate(seconds * 1_000.0))
    } else {
        format!("{} s", format_rate(seconds))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Traffic;
    use tollgate_core::{
        DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket,
    };

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn collect(scenario: &Scenario) -> (crate::RunReport, Vec<crate::Tick>) {
        let mut ticks = vec![];
        let report = scenario
            .run(&crate::MemoryStores, |t| ticks.push(t.clone()))
            .unwrap();
        (report, ticks)
    }

    #[test]
    fn expectation_math_per_algorithm() {
        let steady = |rate| Traffic::steady(rate).unwrap();
        let expect = |algorithm: AnyAlgorithm, traffic: Traffic, duration: u64| {
            Scenario::new(traffic, secs(duration), vec![Lane::global("x", algorithm)])
                .expectations()
                .remove(0)
        };
        // Token bucket 5 tokens, 2/s; 10 req/s for 10 s: ceiling 5 + 20, 25 % accepted, steady 20 %.
        let e = expect(
            TokenBucket::new(5, 2, secs(1)).unwrap().into(),
            steady(10.0),
            10,
        );
        assert_eq!(
            (e.expected_arrivals, e.ceiling, e.expected_admitted),
            (100.0, 25.0, 25.0)
        );
        assert_eq!(e.initial_allowance, 5);
        assert!((e.configured_rate - 2.0).abs() < 1e-9);
        assert!((e.acceptance_rate - 0.25).abs() < 1e-9);
        assert!((e.steady_acceptance_rate - 0.2).abs() < 1e-9);
        assert!(
            e.explanation.starts_with(
                "The bucket starts full (5 tokens), then settles at the refill rate of 2/s"
            ),
            "{}",
            e.explanation
        );
        assert!(e.explanation.contains("about 20% of requests pass"));
        // GCRA 10/s, burst 3; 5 req/s: under the rate, all pass.
        let e = expect(Gcra::new(10, secs(1), 3).unwrap().into(), steady(5.0), 10);
        assert_eq!(
            (e.ceiling, e.expected_admitted, e.acceptance_rate),
            (103.0, 50.0, 1.0)
        );
        assert!(
            e.explanation.contains("one request every 100 ms"),
            "{}",
            e.explanation
        );
        assert!(e.explanation.contains("everything passes"));
        // Leaky bucket 10/s, burst 5 (6 at once): 20 req/s for 1 s → 6 + 10.
        let e = expect(
            LeakyBucket::new(10, secs(1), 5, DelayMode::Delay)
                .unwrap()
                .into(),
            steady(20.0),
            1,
        );
        assert_eq!((e.initial_allowance, e.ceiling), (6, 16.0));
        assert!(
            e.explanation.contains("queues (delays) a burst of 6"),
            "{}",
            e.explanation
        );
        // Fixed window 100/min from 20 s into a minute for 120 s touches 3 windows.
        let e = expect(
            FixedWindow::new(100, secs(60)).unwrap().into(),
            steady(10.0),
            120,
        );
        assert_eq!(
            (e.expected_arrivals, e.ceiling, e.expected_admitted),
            (1_200.0, 300.0, 300.0)
        );
        assert!((e.configured_rate - 100.0 / 60.0).abs() < 1e-9);
        // Sliding log and counter 100/min for 120 s: two window lengths.
        let e = expect(
            SlidingLog::new(100, secs(60)).unwrap().into(),
            steady(10.0),
            120,
        );
        assert_eq!(e.ceiling, 200.0);
        assert!(e.explanation.starts_with("Exactly 100 in any window"));
        let e = expect(
            SlidingWindow::new(100, secs(60)).unwrap().into(),
            steady(1.0),
            120,
        );
        assert_eq!(
            (e.ceiling, e.expected_admitted, e.steady_acceptance_rate),
            (200.0, 120.0, 1.0)
        );
        // A local fleet multiplies the cap and says so.
        let mut s = Scenario::new(
            steady(100.0),
            secs(10),
            vec![Lane::local(
                "l",
                TokenBucket::new(10, 10, secs(1)).unwrap(),
                4,
            )],
        );
        s.clients = 1;
        let e = s.expectations().remove(0);
        assert_eq!(
            (e.configured_rate, e.effective_rate, e.ceiling),
            (10.0, 40.0, 4.0 * 110.0)
        );
        assert!(
            e.explanation.contains("up to 4× the configured cap"),
            "{}",
            e.explanation
        );
    }

    #[test]
    fn the_actual_run_stays_within_the_expectation() {
        let algorithms: Vec<AnyAlgorithm> = vec![
            TokenBucket::new(20, 10, secs(1)).unwrap().into(),
            Gcra::new(10, secs(1), 20).unwrap().into(),
            LeakyBucket::policer(10, secs(1), 20).unwrap().into(),
            FixedWindow::new(100, secs(10)).unwrap().into(),
            SlidingWindow::new(100, secs(10)).unwrap().into(),
            SlidingLog::new(100, secs(10)).unwrap().into(),
        ];
        for algorithm in algorithms {
            let scenario = Scenario::new(
                Traffic::steady(25.0).unwrap(),
                secs(60),
                vec![Lane::global("x", algorithm)],
            );
            let e = scenario.expectations().remove(0);
            let (report, _) = collect(&scenario);
            let admitted = report.lanes[0].counts.admitted as f64;
            assert_eq!(report.arrivals as f64, e.expected_arrivals);
            // Steady overload: the limit admits close to its ceiling and never more
            // (the sliding counter may pass a hair over, as it estimates).
            assert!(
                admitted <= e.ceiling * 1.01,
                "{algorithm:?}: {admitted} > {}",
                e.ceiling
            );
            assert!(
                admitted >= e.expected_admitted * 0.9,
                "{algorithm:?}: {admitted} vs {}",
                e.expected_admitted
            );
        }
    }
}
