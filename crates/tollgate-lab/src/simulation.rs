//! One simulated run: arrivals through a real in-memory store holding one key, at virtual time.
//!
//! A [`Simulation`] is a one-lane, one-client [`Scenario`] reported per
//! decision and summed up in a [`Summary`].

use std::time::Duration;

use serde::{Serialize, Serializer};
use tollgate_core::{AnyAlgorithm, ConfigError, Timestamp};

use crate::{
    DecisionRecord, Lane, LaneReport, MemoryStores, RunError, Scenario, Traffic, traffic::Arrivals,
};

/// A simulated run: `traffic` for `duration` against one key limited by `algorithm`.
///
/// Every request costs `cost` units and arrives at `start` plus the
/// profile's offset; `seed` drives the profile's randomness. Build one with
/// [`Simulation::new`] and adjust it with the `with_*` methods or the public
/// fields.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Simulation {
    /// The limit every request is checked against.
    pub algorithm: AnyAlgorithm,
    /// How requests arrive.
    pub traffic: Traffic,
    /// How long the run lasts: arrivals fall in `[start, start + duration)`.
    pub duration: Duration,
    /// The seed for the traffic's random numbers.
    pub seed: u64,
    /// Units each request costs (at least 1).
    pub cost: u64,
    /// The virtual time of the run's first instant.
    pub start: Timestamp,
}

impl Simulation {
    /// The default start: [`Scenario::DEFAULT_START`].
    pub const DEFAULT_START: Timestamp = Scenario::DEFAULT_START;

    /// A run of `traffic` for `duration` against `algorithm`, with seed 1, cost 1 and the default start.
    pub fn new(algorithm: impl Into<AnyAlgorithm>, traffic: Traffic, duration: Duration) -> Self {
        Simulation {
            algorithm: algorithm.into(),
            traffic,
            duration,
            seed: 1,
            cost: 1,
            start: Self::DEFAULT_START,
        }
    }

    /// This run with another seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// This run with every request costing `cost` units.
    pub fn with_cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }

    /// This run starting at another virtual time.
    pub fn with_start(mut self, start: Timestamp) -> Self {
        self.start = start;
        self
    }

    /// This run as a scenario: one global lane, one client, one tick spanning
    /// the whole run, no sampled decisions, no judgement against the exact log.
    pub fn scenario(&self) -> Scenario {
        let lane = Lane::global("simulation", self.algorithm).unjudged();
        let mut scenario = Scenario::new(self.traffic, self.duration, vec![lane]);
        scenario.seed = self.seed;
        scenario.cost = self.cost;
        scenario.start = self.start;
        scenario.tick = self.duration.max(Duration::from_nanos(1));
        scenario.samples_per_tick = 0;
        scenario
    }

    /// Checks the run's parameters, naming the first one that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.scenario().validate()
    }

    /// The window over which [`Summary::max_admitted_in_window`] counts.
    ///
    /// For the window algorithms (fixed window, sliding window, sliding log)
    /// it is their window. The rate-based ones (token bucket, GCRA, leaky
    /// bucket) have no window; for them it is the time to refill (or drain)
    /// the whole capacity, `capacity × interval`. Note what that means for
    /// the figure: a full bucket plus what refills during the window, so a
    /// rate-based limit can admit up to about twice its capacity in such a
    /// window, as can a fixed window around its boundary. Only the sliding
    /// log never exceeds its limit.
    pub fn window(&self) -> Duration {
        self.algorithm.window()
    }

    /// The arrival times of this run, in nanoseconds from [`Simulation::start`], lazily.
    pub fn arrivals(&self) -> Arrivals {
        self.traffic.arrivals(self.duration, self.seed)
    }

    /// Runs the simulation, calling `on_decision` for every arrival in time order.
    ///
    /// Every request goes through a fresh [`tollgate_store::MemoryStore`]
    /// holding the one simulated key, exactly as a server's would.
    pub fn run(
        &self,
        mut on_decision: impl FnMut(&DecisionRecord),
    ) -> Result<Summary, ConfigError> {
        let report = self
            .scenario()
            .run_with_decisions(&MemoryStores, |_| {}, |d| on_decision(&d.record))
            .map_err(|e| match e {
                RunError::Config(e) => e,
                // The in-memory store always answers; keep the message should it not.
                RunError::Store(message) => ConfigError::new("store", message),
            })?;
        Ok(Summary::of(&report.lanes[0]))
    }
}

fn serialize_duration_nanos<S: Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX))
}

/// The totals of a run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Requests that arrived.
    pub arrivals: u64,
    /// Requests that passed.
    pub admitted: u64,
    /// Requests denied for now (they could pass later).
    pub denied: u64,
    /// Requests that cost more than the limit can ever hold.
    pub exceeded: u64,
    /// Admitted requests a shaper asked to delay.
    pub delayed: u64,
    /// `admitted / arrivals`, in `[0, 1]` (0 when nothing arrived).
    pub acceptance_rate: f64,
    /// The window [`Summary::max_admitted_in_window`] counts over (see [`Simulation::window`]).
    #[serde(rename = "window_ns", serialize_with = "serialize_duration_nanos")]
    pub window: Duration,
    /// The most units admitted within any `window` (sliding over the admitted requests' times).
    pub max_admitted_in_window: u64,
    /// The algorithm's capacity: a bucket's size or a window's limit.
    pub limit: u64,
}

impl Summary {
    /// The totals of a one-lane scenario's lane.
    pub fn of(lane: &LaneReport) -> Self {
        let counts = lane.counts;
        Summary {
            arrivals: counts.arrivals,
            admitted: counts.admitted,
            denied: counts.denied,
            exceeded: counts.exceeded,
            delayed: counts.delayed,
            acceptance_rate: lane.acceptance_rate,
            window: Duration::from_nanos(lane.window_ns),
            max_admitted_in_window: lane.max_admitted_in_window,
            limit: lane.limit,
        }
    }

    /// Requests that did not pass: denied plus exceeded.
    pub fn rejected(&self) -> u64 {
        self.denied + self.exceeded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::NANOS_PER_SEC;
    use tollgate_core::{
        DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket,
    };

    const S: u64 = NANOS_PER_SEC;
    const MS: u64 = 1_000_000;

    /// An epoch-aligned minute boundary (1 700 000 040 s = 28 333 334 minutes).
    const MINUTE_BOUNDARY: Timestamp = Timestamp::from_secs(1_700_000_040);

    fn run_collecting(simulation: &Simulation) -> (Summary, Vec<DecisionRecord>) {
        let mut records = vec![];
        let summary = simulation.run(|r| records.push(*r)).unwrap();
        (summary, records)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn token_bucket_admits_its_capacity_plus_what_refills() {
        // 5 tokens, 2 per second (one every 500 ms); 10 req/s for 10 s arrive
        // at 0, 0.1, …, 9.9 s. The bucket starts full: 5 tokens, plus one
        // refilled every 500 ms up to the last arrival at 9.9 s: ⌊9.9/0.5⌋ = 19.
        // 5 + 2·10 would be 25, but the token refilled at 10.0 s comes after the run.
        let bucket = TokenBucket::new(5, 2, secs(1)).unwrap();
        let sim = Simulation::new(bucket, Traffic::steady(10.0).unwrap(), secs(10));
        let (summary, records) = run_collecting(&sim);
        assert_eq!(summary.arrivals, 100);
        assert_eq!(summary.admitted, 5 + 19);
        assert_eq!(summary.denied, 76);
        assert_eq!(summary.exceeded, 0);
        assert_eq!(summary.delayed, 0);
        assert_eq!(summary.limit, 5);
        assert!((summary.acceptance_rate - 0.24).abs() < 1e-12);
        // The window is the time to refill all 5 tokens: 2.5 s. The most in any
        // 2.5 s window is (0, 2.5]: 0.1–0.5 s (5) and 1.0, 1.5, 2.0, 2.5 s.
        assert_eq!(summary.window, Duration::from_millis(2_500));
        assert_eq!(summary.max_admitted_in_window, 9);
        // Admitted: 0 to 0.5 s (the sixth rides the token refilled at 0.5 s), then every 500 ms.
        let admitted: Vec<u64> = records
            .iter()
            .filter(|r| r.is_allowed())
            .map(|r| r.offset_ns / MS)
            .collect();
        let mut expected: Vec<u64> = (0..=5).map(|k| k * 100).collect();
        expected.extend((2..=19).map(|k| k * 500));
        assert_eq!(admitted, expected);
        // State after each decision: the tokens left.
        let levels: Vec<f64> = records[..7].iter().map(|r| r.state_level).collect();
        assert_eq!(levels, vec![4.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0]);
        // The denied request at 0.6 s can retry when the next token lands at 1.0 s.
        assert_eq!(records[6].retry_after_ns, Some(400 * MS));
        assert_eq!(records[5].retry_after_ns, None);
    }

    #[test]
    fn gcra_admits_its_burst_then_one_per_emission_interval() {
        // 10/s with a burst of 3; 20 req/s for 1 s (every 50 ms): 3 + ⌊950/100⌋ = 12.
        let gcra = Gcra::new(10, secs(1), 3).unwrap();
        let sim = Simulation::new(gcra, Traffic::steady(20.0).unwrap(), secs(1));
        let (summary, records) = run_collecting(&sim);
        assert_eq!((summary.arrivals, summary.admitted), (20, 12));
        assert_eq!(summary.window, Duration::from_millis(300));
        let admitted: Vec<u64> = records
            .iter()
            .filter(|r| r.is_allowed())
            .map(|r| r.offset_ns / MS)
            .collect();
        assert_eq!(
            admitted,
            vec![0, 50, 100, 150, 200, 300, 400, 500, 600, 700, 800, 900]
        );
    }

    #[test]
    fn leaky_bucket_shaper_delays_what_the_policer_passes_at_once() {
        // rate 10/s, burst 5; 20 req/s for 1 s. Both admit the same 15
        // (0–500 ms, then 600, 700, 800, 900 ms); the shaper delays all but the
        // first, by (excess − 1) × 100 ms: up to 500 ms at 500 ms.
        let shaper = LeakyBucket::new(10, secs(1), 5, DelayMode::Delay).unwrap();
        let policer = LeakyBucket::policer(10, secs(1), 5).unwrap();
        let traffic = Traffic::steady(20.0).unwrap();
        let (shaped, shaped_records) = run_collecting(&Simulation::new(shaper, traffic, secs(1)));
        let (policed, policed_records) =
            run_collecting(&Simulation::new(policer, traffic, secs(1)));
        assert_eq!(
            (shaped.admitted, shaped.denied, shaped.delayed),
            (15, 5, 14)
        );
        assert_eq!(
            (policed.admitted, policed.denied, policed.delayed),
            (15, 5, 0)
        );
        let outcomes = |rs: &[DecisionRecord]| rs.iter().map(|r| r.outcome).collect::<Vec<_>>();
        assert_eq!(outcomes(&shaped_records), outcomes(&policed_records));
        let max_delay = shaped_records.iter().map(|r| r.delay_ns).max();
        assert_eq!(max_delay, Some(500 * MS));
        assert_eq!(shaped_records[10].offset_ns, 500 * MS);
        assert_eq!(shaped_records[10].delay_ns, 500 * MS);
        // Queue depth after the 11th request at 500 ms: 6 units, the whole burst + 1.
        assert_eq!(shaped_records[10].state_level, 6.0);
        // The window is the time to drain the whole capacity: 6 × 100 ms.
        assert_eq!(shaped.window, Duration::from_millis(600));
        assert_eq!(shaped.limit, 6);
    }

    #[test]
    fn fixed_window_steady_traffic_never_exceeds_the_limit_in_any_window() {
        // 10 per minute; 10 req/s from a minute boundary. Each minute admits
        // its first 10 requests (its first second); any 60 s window holds the
        // tail of one minute's ten and the head of the next: always 10.
        let fixed = FixedWindow::new(10, secs(60)).unwrap();
        let sim = Simulation::new(fixed, Traffic::steady(10.0).unwrap(), secs(300))
            .with_start(MINUTE_BOUNDARY);
        let (summary, records) = run_collecting(&sim);
        assert_eq!(summary.arrivals, 3_000);
        assert_eq!(summary.admitted, 50);
        assert_eq!(summary.max_admitted_in_window, 10);
        // The fixed window counts denied requests: the state reads 11 once closed.
        assert_eq!(records[9].state_level, 10.0);
        assert_eq!(records[10].state_level, 11.0);
        assert_eq!(records[10].retry_after_ns, Some(59 * S));
    }

    #[test]
    fn fixed_window_admits_twice_its_limit_to_a_burst_across_the_boundary() {
        // A burst of 10 req/s from 10 s before a minute boundary to 10 s after
        // (a square wave: 20 s high out of every 60 s, nothing otherwise).
        // The minute ending at the boundary admits 10, the next minute 10 more
        // within 11 s: 20 in one 60 s window, twice the limit.
        let traffic = Traffic::square_with_duty(10.0, 0.0, secs(60), 1.0 / 3.0).unwrap();
        let start = Timestamp::from_secs(1_700_000_030);
        let fixed = FixedWindow::new(10, secs(60)).unwrap();
        let (summary, _) =
            run_collecting(&Simulation::new(fixed, traffic, secs(120)).with_start(start));
        assert_eq!(summary.arrivals, 400);
        assert_eq!(summary.admitted, 30);
        assert_eq!(summary.max_admitted_in_window, 20);
        // The exact sliding log never lets more than its limit through.
        let log = SlidingLog::new(10, secs(60)).unwrap();
        let (summary, _) =
            run_collecting(&Simulation::new(log, traffic, secs(120)).with_start(start));
        assert_eq!(summary.max_admitted_in_window, 10);
        assert_eq!(summary.admitted, 20);
    }

    #[test]
    fn sliding_window_level_is_the_weighted_estimate() {
        // 10 per minute, 1 req/s from a minute boundary. Minute 0 admits
        // 0–9 s. At 60 + e s the estimate is 10 · (60 − e)/60 + cur; the
        // first request fits when 10 · (60 − e)/60 + 1 ≤ 10, at e = 6.
        let sliding = SlidingWindow::new(10, secs(60)).unwrap();
        let sim = Simulation::new(sliding, Traffic::steady(1.0).unwrap(), secs(70))
            .with_start(MINUTE_BOUNDARY);
        let (_, records) = run_collecting(&sim);
        let admitted: Vec<u64> = records
            .iter()
            .filter(|r| r.is_allowed())
            .map(|r| r.offset_ns / S)
            .collect();
        assert_eq!(admitted, vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 66]);
        assert_eq!(records[60].state_level, 10.0);
        assert!((records[61].state_level - 10.0 * 59.0 / 60.0).abs() < 1e-9);
        assert!((records[66].state_level - (10.0 * 54.0 / 60.0 + 1.0)).abs() < 1e-9);
        // Denied at 65 s: 10 · 55/60 + 1 > 10 until 66 s.
        assert_eq!(records[65].retry_after_ns, Some(S));
    }

    #[test]
    fn sliding_log_level_is_the_logged_total() {
        let log = SlidingLog::new(3, secs(10)).unwrap();
        let sim = Simulation::new(log, Traffic::steady(1.0).unwrap(), secs(12)).with_cost(1);
        let (summary, records) = run_collecting(&sim);
        let levels: Vec<f64> = records.iter().map(|r| r.state_level).collect();
        // 0, 1, 2 s pass; 3–9 s are denied; at 10 s the entry from 0 s has left.
        assert_eq!(
            levels,
            vec![1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
        );
        assert_eq!(summary.admitted, 5);
        assert_eq!(summary.max_admitted_in_window, 3);
    }

    #[test]
    fn a_cost_above_capacity_is_exceeded_not_denied() {
        let bucket = TokenBucket::new(5, 1, secs(1)).unwrap();
        let sim = Simulation::new(bucket, Traffic::steady(2.0).unwrap(), secs(5)).with_cost(6);
        let (summary, records) = run_collecting(&sim);
        assert_eq!(
            (summary.admitted, summary.denied, summary.exceeded),
            (0, 0, 10)
        );
        assert_eq!(summary.rejected(), 10);
        assert!(records.iter().all(|r| r.retry_after_ns.is_none()));
        // Cost-weighted: a cost of 2 takes two tokens, so 5 tokens pass 2 of the
        // 3 requests at 0, 10 and 20 ms (the third finds 1 token).
        let sim = Simulation::new(
            bucket,
            Traffic::steady(100.0).unwrap(),
            Duration::from_millis(30),
        )
        .with_cost(2);
        let (summary, _) = run_collecting(&sim);
        assert_eq!(
            (
                summary.arrivals,
                summary.admitted,
                summary.max_admitted_in_window
            ),
            (3, 2, 4)
        );
    }

    fn every_algorithm() -> Vec<AnyAlgorithm> {
        vec![
            TokenBucket::new(20, 10, secs(1)).unwrap().into(),
            Gcra::new(10, secs(1), 20).unwrap().into(),
            LeakyBucket::new(10, secs(1), 20, DelayMode::Delay)
                .unwrap()
                .into(),
            LeakyBucket::new(10, secs(1), 20, DelayMode::DelayAfter(5))
                .unwrap()
                .into(),
            LeakyBucket::policer(10, secs(1), 20).unwrap().into(),
            FixedWindow::new(100, secs(10)).unwrap().into(),
            SlidingWindow::new(100, secs(10)).unwrap().into(),
            SlidingLog::new(100, secs(10)).unwrap().into(),
        ]
    }

    fn every_profile() -> Vec<Traffic> {
        vec![
            Traffic::steady(25.0).unwrap(),
            Traffic::poisson(25.0).unwrap(),
            Traffic::square(60.0, 2.0, secs(7)).unwrap(),
        ]
    }

    #[test]
    fn every_request_is_admitted_denied_or_exceeded() {
        for algorithm in every_algorithm() {
            for traffic in every_profile() {
                let sim = Simulation::new(algorithm, traffic, secs(30)).with_cost(2);
                let (summary, records) = run_collecting(&sim);
                let label = format!("{algorithm:?} / {traffic:?}");
                assert!(summary.arrivals > 0, "{label}");
                assert_eq!(
                    summary.admitted + summary.denied + summary.exceeded,
                    summary.arrivals,
                    "{label}"
                );
                assert_eq!(records.len() as u64, summary.arrivals, "{label}");
                assert!(
                    summary.admitted > 0 && summary.denied > 0,
                    "{label}: {summary:?}"
                );
                assert!(
                    records
                        .windows(2)
                        .all(|w| w[0].at <= w[1].at && w[0].index + 1 == w[1].index),
                    "{label}"
                );
                assert!(
                    records.iter().all(|r| r.offset_ns < 30 * S
                        && r.at.as_nanos() == sim.start.as_nanos() + r.offset_ns),
                    "{label}"
                );
                // Nothing ever admits more than twice its capacity in its window.
                assert!(
                    summary.max_admitted_in_window <= 2 * summary.limit,
                    "{label}: {summary:?}"
                );
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_records() {
        for algorithm in every_algorithm() {
            let sim =
                Simulation::new(algorithm, Traffic::poisson(40.0).unwrap(), secs(20)).with_seed(42);
            let (first_summary, first) = run_collecting(&sim);
            let (second_summary, second) = run_collecting(&sim);
            assert_eq!(first, second);
            assert_eq!(first_summary, second_summary);
            let (_, other) = run_collecting(&sim.with_seed(43));
            assert_ne!(first, other, "{algorithm:?}: another seed, another trace");
        }
    }

    #[test]
    fn arrivals_average_the_profiles_rate() {
        // Steady: exactly ⌈rate · duration⌉. Square: exactly peak·high + base·low
        // per whole period. Poisson: N has mean and variance rate · duration =
        // 6 000, so σ ≈ 77.5; 5σ ≈ 387 (a correct generator misses once in ~1.7M runs).
        let bucket = TokenBucket::new(10, 1, secs(1)).unwrap();
        let run = |traffic| {
            run_collecting(&Simulation::new(bucket, traffic, secs(60)))
                .0
                .arrivals
        };
        assert_eq!(run(Traffic::steady(100.0).unwrap()), 6_000);
        assert_eq!(run(Traffic::square(150.0, 50.0, secs(10)).unwrap()), 6_000);
        for seed in 1..=5 {
            let n = run_collecting(
                &Simulation::new(bucket, Traffic::poisson(100.0).unwrap(), secs(60))
                    .with_seed(seed),
            )
            .0
            .arrivals;
            assert!(n.abs_diff(6_000) <= 387, "seed {seed}: {n}");
        }
    }

    #[test]
    fn bad_runs_are_rejected_with_the_parameter_named() {
        let bucket = TokenBucket::new(10, 1, secs(1)).unwrap();
        let steady = Traffic::steady(10.0).unwrap();
        let sim = Simulation::new(bucket, steady, secs(10));
        let fails = |sim: Simulation| sim.run(|_| {}).unwrap_err().parameter();
        assert_eq!(fails(sim.with_cost(0)), "cost");
        assert_eq!(
            fails(Simulation {
                duration: Duration::ZERO,
                ..sim
            }),
            "duration"
        );
        assert_eq!(
            fails(Simulation {
                duration: secs(u64::MAX),
                ..sim
            }),
            "duration"
        );
        assert_eq!(
            fails(Simulation {
                traffic: Traffic::steady(1e6).unwrap(),
                duration: secs(1_000),
                ..sim
            }),
            "duration",
            "a billion arrivals is over the cap"
        );
        assert_eq!(
            fails(Simulation {
                traffic: Traffic::Poisson { rate: 0.0 },
                ..sim
            }),
            "rate"
        );
        let e = sim.with_cost(0).run(|_| {}).unwrap_err();
        assert!(e.to_string().starts_with("cost: must be at least 1"), "{e}");
    }

    #[test]
    fn a_run_with_no_arrivals_reports_zeroes() {
        // Poisson at 0.001 req/s for 1 s: with seed 9 the first gap falls after the end.
        let bucket = TokenBucket::new(10, 1, secs(1)).unwrap();
        let sim = Simulation::new(bucket, Traffic::poisson(0.001).unwrap(), secs(1)).with_seed(9);
        let summary = sim.run(|_| {}).unwrap();
        assert_eq!(summary.arrivals, 0, "{summary:?}");
        assert_eq!(summary.acceptance_rate, 0.0);
        assert_eq!(summary.max_admitted_in_window, 0);
    }

    #[test]
    fn records_write_as_csv_rows_matching_the_header() {
        let bucket = TokenBucket::new(1, 1, secs(1)).unwrap();
        let sim = Simulation::new(bucket, Traffic::steady(2.0).unwrap(), secs(1));
        let (_, records) = run_collecting(&sim);
        let mut csv = Vec::new();
        for r in &records {
            r.write_csv_row(&mut csv).unwrap();
        }
        let csv = String::from_utf8(csv).unwrap();
        assert_eq!(
            csv,
            "0,0,1700000000000000000,allowed,0,,0,0\n\
             1,500000000,1700000000500000000,denied,0,500000000,0,0\n"
        );
        let columns = DecisionRecord::CSV_HEADER.split(',').count();
        assert!(csv.lines().all(|line| line.split(',').count() == columns));
    }

    #[test]
    fn a_start_past_the_end_of_virtual_time_is_rejected() {
        let bucket = TokenBucket::new(1, 1, secs(1)).unwrap();
        let sim = Simulation::new(bucket, Traffic::steady(2.0).unwrap(), secs(1))
            .with_start(Timestamp::from_secs(u64::MAX));
        assert_eq!(sim.run(|_| {}).unwrap_err().parameter(), "start");
    }
}
