//! What a scenario run reports: counts, ticks, sampled and observed decisions, the totals.

use std::fmt;
use std::io;

use serde::Serialize;
use tollgate_core::ConfigError;

use super::Placement;
use crate::DecisionRecord;

/// Counts of one tick or one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests that arrived.
    pub arrivals: u64,
    /// Requests that passed.
    pub admitted: u64,
    /// Requests denied for now.
    pub denied: u64,
    /// Requests costing more than the limit can ever hold.
    pub exceeded: u64,
    /// Admitted requests a shaper delayed.
    pub delayed: u64,
}

impl Counts {
    /// Denied plus exceeded.
    pub fn rejected(&self) -> u64 {
        self.denied + self.exceeded
    }

    pub(super) fn add(&mut self, other: &Counts) {
        self.arrivals += other.arrivals;
        self.admitted += other.admitted;
        self.denied += other.denied;
        self.exceeded += other.exceeded;
        self.delayed += other.delayed;
    }
}

/// One decision picked out of a tick, for a decision log.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SampledDecision {
    /// The request's position in the run, from 0.
    pub index: u64,
    /// When it arrived, in nanoseconds from the start.
    pub offset_ns: u64,
    /// The client (key) it belongs to.
    pub client: u64,
    /// The sidecar that decided it (0 for a global lane).
    pub sidecar: u32,
    /// `allowed`, `denied` or `exceeds`.
    pub outcome: &'static str,
    /// Units left after it.
    pub remaining: u64,
    /// For a denied request, when it could pass.
    pub retry_after_ns: Option<u64>,
    /// For a request a shaper admitted, how long it is held.
    pub delay_ns: u64,
}

/// One decision of one lane, as [`Scenario::run_with_decisions`](crate::Scenario::run_with_decisions) reports it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LaneDecision<'a> {
    /// The label of the lane that decided.
    pub lane: &'a str,
    /// The client (key) the request belongs to.
    pub client: u64,
    /// The sidecar that decided it (0 for a global lane).
    pub sidecar: u32,
    /// The decision, with the state of the client's key on that sidecar just after it.
    #[serde(flatten)]
    pub record: DecisionRecord,
}

impl LaneDecision<'_> {
    /// The CSV header of [`LaneDecision::write_csv_row`]: the lane and client, then [`DecisionRecord::CSV_HEADER`].
    pub const CSV_HEADER: &'static str = "lane,client,sidecar,index,offset_ns,at_ns,outcome,remaining,retry_after_ns,delay_ns,state_level";

    /// Writes this decision as one CSV line, ending in a line break.
    ///
    /// Lane labels never hold a comma or a quote, so no field needs quoting.
    pub fn write_csv_row(&self, out: &mut impl io::Write) -> io::Result<()> {
        write!(out, "{},{},{},", self.lane, self.client, self.sidecar)?;
        self.record.write_csv_row(out)
    }
}

/// One lane's figures for one tick.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LaneTick {
    /// This tick's counts.
    #[serde(flatten)]
    pub counts: Counts,
    /// The counts from the start up to the end of this tick.
    pub total: Counts,
    /// The state of the scenario's `state_client`'s key at the tick's end, in
    /// the algorithm's terms; in a local placement, the mean over the sidecars.
    pub state_level: f64,
    /// The longest shaper delay given in the tick, in nanoseconds.
    pub max_delay_ns: u64,
    /// A few of the tick's decisions: the first ones, and the first rejection.
    pub samples: Vec<SampledDecision>,
    /// A leased lane: calls to the shared store in the tick (exact decisions and grants).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_calls: Option<u64>,
    /// A leased lane: units held in the instances' leases at the tick's end, still spendable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leased_units: Option<u64>,
    /// Closed-loop clients: refused requests sent again in the tick (part of `arrivals`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u64>,
    /// Adaptive clients: new requests their throttle dropped in the tick (not in `arrivals`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_by_clients: Option<u64>,
    /// A quota lane: usage reports the Envoys sent in the tick (one per Envoy and key each interval).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reports: Option<u64>,
}

/// What happened during one tick of virtual time, in every lane.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tick {
    /// The tick's number, from 0.
    pub index: u64,
    /// Its start, in nanoseconds from the run's start.
    pub start_ns: u64,
    /// Its end (exclusive).
    pub end_ns: u64,
    /// The lanes' figures, in the scenario's lane order.
    pub lanes: Vec<LaneTick>,
}

/// One lane's totals at the end of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LaneReport {
    /// The lane's label.
    pub label: String,
    /// Its placement.
    pub placement: Placement,
    /// Its counts.
    #[serde(flatten)]
    pub counts: Counts,
    /// `admitted / arrivals` (0 when nothing arrived).
    pub acceptance_rate: f64,
    /// Admitted requests per second of the run.
    pub admitted_rate: f64,
    /// The window the next figure counts over (see [`Simulation::window`](crate::Simulation::window)), in nanoseconds.
    pub window_ns: u64,
    /// The most units admitted across all keys within any such window.
    pub max_admitted_in_window: u64,
    /// The algorithm's capacity per key (a bucket's size, a window's limit).
    pub limit: u64,
    /// Against the exact sliding log of the same limit and window: requests
    /// this lane admitted although that window already held its limit
    /// (window algorithms in a global placement only).
    pub over_admitted: Option<u64>,
    /// Requests this lane rejected although the exact window had room for them.
    pub under_admitted: Option<u64>,
    /// A leased lane: calls to the shared store over the run (exact decisions
    /// and grants); a global lane makes one per request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_calls: Option<u64>,
    /// Closed-loop clients: refused requests sent again (part of `arrivals`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u64>,
    /// Adaptive clients: new requests their throttle dropped (not in `arrivals`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_by_clients: Option<u64>,
    /// Closed-loop clients: requests given up after their last retry was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gave_up: Option<u64>,
    /// A quota lane: usage reports sent over the run (the only calls it makes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reports: Option<u64>,
}

/// Why a scenario run gave no report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunError {
    /// A parameter is out of range; it names the parameter.
    Config(ConfigError),
    /// A store stopped answering (Redis went away); the message says why.
    Store(String),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Config(e) => e.fmt(f),
            RunError::Store(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for RunError {}

impl From<ConfigError> for RunError {
    fn from(e: ConfigError) -> Self {
        RunError::Config(e)
    }
}

/// The totals of a scenario run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunReport {
    /// Requests in the trace.
    pub arrivals: u64,
    /// Ticks reported.
    pub ticks: u64,
    /// The lanes' totals, in the scenario's order.
    pub lanes: Vec<LaneReport>,
}
