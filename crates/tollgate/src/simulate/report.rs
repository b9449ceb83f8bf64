//! The summary `tollgate simulate` prints: one run's totals, or a comparison of lanes, as text or JSON.

use std::time::Duration;

use serde::Serialize;
use tollgate_core::duration::format_duration;
use tollgate_lab::{Expectation, LaneReport, RedisStores, RunReport, Summary};

use tollgate_lab::AlgorithmName;

use super::args::{FlagChoice, SimulateArgs};
use super::build::Plan;
use crate::CommandError;

/// The summary as printed: what ran, and its totals.
#[derive(Serialize)]
pub(super) struct Report {
    algorithm: String,
    algorithm_description: String,
    traffic: String,
    traffic_description: String,
    duration_ns: u64,
    seed: u64,
    cost: u64,
    #[serde(flatten)]
    summary: Summary,
}

impl Report {
    /// The summary as a few lines of text.
    pub(super) fn human(&self, args: &SimulateArgs) -> String {
        let s = &self.summary;
        let mut text = String::new();
        let mut line = |label: &str, value: String| {
            text.push_str(&format!("{label:<11}{value}\n"));
        };
        line("algorithm", self.algorithm_description.clone());
        line(
            "traffic",
            format!(
                "{} for {}, seed {}, cost {}",
                self.traffic_description,
                format_duration(args.duration),
                self.seed,
                self.cost
            ),
        );
        line("arrivals", s.arrivals.to_string());
        line(
            "admitted",
            format!("{} ({:.2}%)", s.admitted, s.acceptance_rate * 100.0),
        );
        line(
            "rejected",
            format!(
                "{} ({} denied, {} costing more than the limit can hold)",
                s.rejected(),
                s.denied,
                s.exceeded
            ),
        );
        let shaper = args.algorithm == Some(AlgorithmName::LeakyBucket) && !args.nodelay;
        if shaper {
            line(
                "delayed",
                format!("{} (admitted, held by the shaper)", s.delayed),
            );
        }
        let window_note = match args.algorithm.unwrap_or(AlgorithmName::SlidingLog) {
            AlgorithmName::TokenBucket => " (the time to refill the whole bucket)",
            AlgorithmName::Gcra => " (the time to earn the whole burst back)",
            AlgorithmName::LeakyBucket => " (the time to drain the whole bucket)",
            _ => "",
        };
        line(
            "busiest",
            format!(
                "{} units admitted in one {} window{window_note}; limit {}",
                s.max_admitted_in_window,
                format_duration(s.window),
                s.limit
            ),
        );
        text
    }
}

/// The summary of a comparison: the trace, then each algorithm's totals.
#[derive(Serialize)]
pub(super) struct Comparison {
    traffic: String,
    traffic_description: String,
    duration_ns: u64,
    seed: u64,
    cost: u64,
    clients: u32,
    arrivals: u64,
    store: StoreUsed,
    lanes: Vec<ComparedLane>,
}

/// Which store decided a run, and what it cost.
#[derive(Serialize)]
pub(super) struct StoreUsed {
    /// `memory` or `redis`.
    kind: &'static str,
    /// The Redis deployment, password hidden.
    target: Option<String>,
    /// Script calls made (decisions and state reads).
    calls: Option<u64>,
    /// Wall-clock seconds a Redis run took (none for memory: a run's report stays a pure
    /// function of its parameters).
    seconds: Option<f64>,
    /// Script calls per wall-clock second.
    calls_per_second: Option<f64>,
}

/// One algorithm's line of a comparison.
#[derive(Serialize)]
pub(super) struct ComparedLane {
    algorithm_description: String,
    #[serde(flatten)]
    report: LaneReport,
    expectation: Expectation,
}

impl Comparison {
    pub(super) fn human(&self, args: &SimulateArgs) -> String {
        let mut text = format!(
            "traffic    {} for {}, seed {}, cost {}, {} client{}\narrivals   {}\n",
            self.traffic_description,
            format_duration(args.duration),
            self.seed,
            self.cost,
            self.clients,
            if self.clients == 1 { "" } else { "s" },
            self.arrivals
        );
        if let (Some(target), Some(calls)) = (&self.store.target, self.store.calls) {
            text.push_str(&format!(
                "store      redis {target}: {calls} script calls in {:.2} s ({:.0} calls/s)\n",
                self.store.seconds.unwrap_or(0.0),
                self.store.calls_per_second.unwrap_or(0.0)
            ));
        }
        for lane in &self.lanes {
            let r = &lane.report;
            text.push_str(&format!("\n{}\n", lane.algorithm_description));
            text.push_str(&format!(
                "  admitted   {} ({:.4}%), expected at most {:.0}\n",
                r.counts.admitted,
                r.acceptance_rate * 100.0,
                lane.expectation.expected_admitted
            ));
            text.push_str(&format!(
                "  rejected   {} ({} denied, {} costing more than the limit can hold)\n",
                r.counts.rejected(),
                r.counts.denied,
                r.counts.exceeded
            ));
            text.push_str(&format!(
                "  busiest    {} units admitted in one {} window; limit {} per key\n",
                r.max_admitted_in_window,
                format_duration(Duration::from_nanos(r.window_ns)),
                r.limit
            ));
            if let (
                Some(calls),
                tollgate_lab::Placement::Leased {
                    instances,
                    period_ns,
                },
            ) = (r.store_calls, r.placement)
            {
                text.push_str(&format!(
                    "  leased     {instances} instances, leases of {}: {calls} store calls ({:.4} per decision)\n",
                    format_duration(Duration::from_nanos(period_ns)),
                    if r.counts.arrivals == 0 {
                        0.0
                    } else {
                        calls as f64 / r.counts.arrivals as f64
                    }
                ));
            }
            if let (
                Some(reports),
                tollgate_lab::Placement::Quota {
                    envoys, report_ns, ..
                },
            ) = (r.reports, r.placement)
            {
                text.push_str(&format!(
                    "  rlqs       {envoys} Envoys reporting every {}: {reports} usage reports, no call per request\n",
                    format_duration(Duration::from_nanos(report_ns)),
                ));
            }
            if let (Some(over), Some(under)) = (r.over_admitted, r.under_admitted) {
                let share = |n: u64| {
                    if self.arrivals == 0 {
                        0.0
                    } else {
                        n as f64 * 100.0 / self.arrivals as f64
                    }
                };
                text.push_str(&format!(
                    "  vs exact   {over} over-admitted ({:.5}% of requests), {under} under-admitted ({:.5}%)\n",
                    share(over),
                    share(under)
                ));
            }
        }
        text
    }
}

impl Report {
    /// The summary of a single run: its one lane's totals.
    pub(super) fn of(args: &SimulateArgs, plan: &Plan, report: &RunReport) -> Self {
        Report {
            algorithm: plan.scenario.lanes[0].label.replace('_', "-"),
            algorithm_description: plan.descriptions[0].clone(),
            traffic: args.traffic.flag_value().to_owned(),
            traffic_description: plan.traffic_description.clone(),
            duration_ns: u64::try_from(args.duration.as_nanos()).unwrap_or(u64::MAX),
            seed: args.seed,
            cost: args.cost,
            summary: Summary::of(&report.lanes[0]),
        }
    }
}

impl Comparison {
    /// The summary of a comparison: every lane with its description and expectation.
    pub(super) fn of(args: &SimulateArgs, plan: Plan, report: RunReport, store: StoreUsed) -> Self {
        let expectations = plan.scenario.expectations();
        Comparison {
            traffic: args.traffic.flag_value().to_owned(),
            traffic_description: plan.traffic_description,
            duration_ns: u64::try_from(args.duration.as_nanos()).unwrap_or(u64::MAX),
            seed: args.seed,
            cost: args.cost,
            clients: args.clients,
            arrivals: report.arrivals,
            store,
            lanes: report
                .lanes
                .into_iter()
                .zip(plan.descriptions)
                .zip(expectations)
                .map(
                    |((report, algorithm_description), expectation)| ComparedLane {
                        algorithm_description,
                        report,
                        expectation,
                    },
                )
                .collect(),
        }
    }
}

/// The summary as `--json` or as text.
pub(super) fn summary_text<T: serde::Serialize>(
    args: &SimulateArgs,
    summary: &T,
    human: impl FnOnce(&T) -> String,
) -> Result<String, CommandError> {
    if !args.json {
        return Ok(human(summary));
    }
    let mut json = serde_json::to_string_pretty(summary)
        .map_err(|e| CommandError::Failed(format!("cannot format the summary as JSON: {e}")))?;
    json.push('\n');
    Ok(json)
}

impl StoreUsed {
    /// What a run on Redis cost: script calls and wall-clock time.
    pub(super) fn redis(
        redis: &RedisStores,
        report: &RunReport,
        decisions: bool,
        elapsed: Duration,
    ) -> Self {
        // One call per decision of every lane (two with --decisions, which reads the
        // key's state after each), one per state read of every store and tick; a
        // leased lane counts its own (a grant once, its check-only read not).
        let per_decision = if decisions { 2 } else { 1 };
        let calls = report
            .lanes
            .iter()
            .map(|l| match l.placement {
                // Envoys sharing by RLQS decide alone.
                tollgate_lab::Placement::Quota { .. } => 0,
                _ => l.store_calls.unwrap_or(report.arrivals) * per_decision,
            })
            .sum::<u64>()
            + report.ticks
                * report
                    .lanes
                    .iter()
                    .map(|l| u64::from(l.placement.stores()))
                    .sum::<u64>();
        StoreUsed {
            kind: "redis",
            target: Some(redis.describe()),
            calls: Some(calls),
            seconds: Some(elapsed.as_secs_f64()),
            calls_per_second: (elapsed > Duration::ZERO)
                .then(|| calls as f64 / elapsed.as_secs_f64()),
        }
    }

    /// The in-memory store: nothing to count.
    pub(super) fn memory() -> Self {
        StoreUsed {
            kind: "memory",
            target: None,
            calls: None,
            seconds: None,
            calls_per_second: None,
        }
    }
}
