//! A scenario: one arrival trace through one or more lanes (algorithms, fleets), tick by tick.
//!
//! Where a [`crate::Simulation`] is one key and one algorithm, a [`Scenario`]
//! sends the same arrivals through several [`Lane`]s at once — to compare
//! algorithms on one trace, or a fleet of sidecars with local buckets against
//! one global bucket — spreads them over several clients (each its own key),
//! and reports aggregates per tick of virtual time as it goes.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, ConfigError, Decision, NANOS_PER_SEC, Outcome, Timestamp,
};

use crate::simulation::AdmittedWindow;
use crate::store::{SimulatedStore, StoreFactory};
use crate::{Arrivals, DecisionRecord, MAX_ARRIVALS, Simulation, Traffic};

/// The most clients (keys) a scenario spreads its arrivals over.
pub const MAX_CLIENTS: u32 = 1_000;

/// The most sidecars a fleet lane may have.
pub const MAX_SIDECARS: u32 = 15;

/// The most lanes one scenario runs side by side.
pub const MAX_LANES: usize = 8;

/// The most ticks one scenario reports.
pub const MAX_TICKS: u64 = 100_000;

/// The most decisions a tick samples per lane.
pub const MAX_SAMPLES_PER_TICK: usize = 64;

/// Timestamps of recorded traffic to replay, as offsets from the first one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    offsets: Arc<[u64]>,
}

impl Replay {
    /// The most timestamps a replay may hold.
    pub const MAX_LEN: usize = 10_000_000;

    /// Reads a CSV of timestamps: the first column of every line, in seconds (decimals allowed).
    ///
    /// Any origin will do (Unix time, seconds since the capture began): the
    /// trace starts at its earliest timestamp. Lines need not be in order.
    /// A first line that is not a number is taken as a header; blank lines
    /// and lines starting with `#` are skipped.
    pub fn from_csv(text: &str) -> Result<Self, ConfigError> {
        let mut seconds: Vec<f64> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let field = line.split(',').next().unwrap_or("").trim();
            match field.parse::<f64>() {
                Ok(value) if value.is_finite() && value >= 0.0 => seconds.push(value),
                Ok(value) => {
                    return Err(ConfigError::new(
                        "replay",
                        format!(
                            "line {}: {value} is not a time of at least 0 seconds",
                            number + 1
                        ),
                    ));
                }
                Err(_) if seconds.is_empty() && number == 0 => {}
                Err(_) => {
                    return Err(ConfigError::new(
                        "replay",
                        format!("line {}: {field:?} is not a number of seconds", number + 1),
                    ));
                }
            }
            if seconds.len() > Self::MAX_LEN {
                return Err(ConfigError::new(
                    "replay",
                    format!("holds more than {} timestamps", Self::MAX_LEN),
                ));
            }
        }
        if seconds.is_empty() {
            return Err(ConfigError::new("replay", "holds no timestamps"));
        }
        seconds.sort_by(f64::total_cmp);
        let first = seconds[0];
        let offsets = seconds
            .iter()
            .map(|s| ((s - first) * NANOS_PER_SEC as f64).round() as u64)
            .collect();
        Ok(Replay { offsets })
    }

    /// A replay of these offsets in nanoseconds (sorted here).
    pub fn from_offsets(mut offsets: Vec<u64>) -> Self {
        offsets.sort_unstable();
        Replay {
            offsets: offsets.into(),
        }
    }

    /// The number of timestamps.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether the replay holds no timestamp.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// The time from the first timestamp to just after the last.
    pub fn span(&self) -> Duration {
        Duration::from_nanos(self.offsets.last().map_or(0, |last| last + 1))
    }
}

/// Where a scenario's arrivals come from: a generated profile or a recorded trace.
#[derive(Clone, Debug, PartialEq)]
pub enum ArrivalSource {
    /// A traffic profile, generated from the seed.
    Profile(Traffic),
    /// Recorded timestamps, replayed as they are.
    Replay(Replay),
}

impl ArrivalSource {
    /// The source's name: a profile's name or `replay`.
    pub fn name(&self) -> &'static str {
        match self {
            ArrivalSource::Profile(traffic) => traffic.name(),
            ArrivalSource::Replay(_) => "replay",
        }
    }

    /// The expected number of arrivals in `duration`.
    pub fn expected_arrivals(&self, duration: Duration) -> f64 {
        match self {
            ArrivalSource::Profile(traffic) => traffic.expected_arrivals(duration),
            ArrivalSource::Replay(replay) => {
                let end = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
                replay.offsets.partition_point(|&t| t < end) as f64
            }
        }
    }

    fn arrivals(&self, duration: Duration, seed: u64) -> SourceArrivals {
        match self {
            ArrivalSource::Profile(traffic) => {
                SourceArrivals::Profile(traffic.arrivals(duration, seed))
            }
            ArrivalSource::Replay(replay) => SourceArrivals::Replay {
                offsets: Arc::clone(&replay.offsets),
                next: 0,
                end: u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX),
            },
        }
    }
}

impl From<Traffic> for ArrivalSource {
    fn from(traffic: Traffic) -> Self {
        ArrivalSource::Profile(traffic)
    }
}

enum SourceArrivals {
    Profile(Arrivals),
    Replay {
        offsets: Arc<[u64]>,
        next: usize,
        end: u64,
    },
}

impl Iterator for SourceArrivals {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match self {
            SourceArrivals::Profile(arrivals) => arrivals.next(),
            SourceArrivals::Replay { offsets, next, end } => {
                let at = *offsets.get(*next)?;
                if at >= *end {
                    return None;
                }
                *next += 1;
                Some(at)
            }
        }
    }
}

/// How a lane's requests reach its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Placement {
    /// One store every request goes to: a global limit (or a single instance).
    Global,
    /// `sidecars` instances behind a round-robin balancer, each with its own
    /// store applying the full limit locally.
    Local {
        /// How many instances (1 to [`MAX_SIDECARS`]).
        sidecars: u32,
    },
}

impl Placement {
    /// How many stores the placement holds.
    pub fn stores(&self) -> u32 {
        match self {
            Placement::Global => 1,
            Placement::Local { sidecars } => *sidecars,
        }
    }
}

/// One algorithm applied to the scenario's arrivals, in one placement.
#[derive(Clone, Debug, PartialEq)]
pub struct Lane {
    /// A short name for displays, e.g. `token_bucket` or `local ×4`.
    pub label: String,
    /// The limit.
    pub algorithm: AnyAlgorithm,
    /// Where the limit is kept.
    pub placement: Placement,
}

impl Lane {
    /// A lane keeping `algorithm` in one global store.
    pub fn global(label: impl Into<String>, algorithm: impl Into<AnyAlgorithm>) -> Self {
        Lane {
            label: label.into(),
            algorithm: algorithm.into(),
            placement: Placement::Global,
        }
    }

    /// A lane applying `algorithm` locally on each of `sidecars` instances.
    pub fn local(
        label: impl Into<String>,
        algorithm: impl Into<AnyAlgorithm>,
        sidecars: u32,
    ) -> Self {
        Lane {
            label: label.into(),
            algorithm: algorithm.into(),
            placement: Placement::Local { sidecars },
        }
    }
}

/// Arrivals through lanes, in virtual time, reported per tick.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Where arrivals come from.
    pub source: ArrivalSource,
    /// How long the run lasts.
    pub duration: Duration,
    /// The seed for random arrivals and for assigning arrivals to clients.
    pub seed: u64,
    /// Units each request costs.
    pub cost: u64,
    /// The virtual time of the first instant.
    pub start: Timestamp,
    /// How many clients (keys) share the arrivals; each request goes to one at random.
    pub clients: u32,
    /// The client whose key the per-tick state level reads (from 0, below `clients`).
    pub state_client: u32,
    /// The length of one reporting tick.
    pub tick: Duration,
    /// Decisions sampled per lane per tick.
    pub samples_per_tick: usize,
    /// The limits the arrivals go through, side by side.
    pub lanes: Vec<Lane>,
}

impl Scenario {
    /// The default tick: 100 ms of virtual time.
    pub const DEFAULT_TICK: Duration = Duration::from_millis(100);

    /// A scenario of `source` for `duration` through `lanes`: seed 1, cost 1,
    /// one client, 100 ms ticks, 4 samples per tick, the default start.
    pub fn new(source: impl Into<ArrivalSource>, duration: Duration, lanes: Vec<Lane>) -> Self {
        Scenario {
            source: source.into(),
            duration,
            seed: 1,
            cost: 1,
            start: Simulation::DEFAULT_START,
            clients: 1,
            state_client: 0,
            tick: Self::DEFAULT_TICK,
            samples_per_tick: 4,
            lanes,
        }
    }

    /// Checks every parameter, naming the first one that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let ArrivalSource::Profile(traffic) = &self.source {
            traffic.validate()?;
        }
        if self.lanes.is_empty() {
            return Err(ConfigError::new(
                "algorithms",
                "name at least one algorithm",
            ));
        }
        if self.lanes.len() > MAX_LANES {
            return Err(ConfigError::new(
                "algorithms",
                format!(
                    "{} lanes is more than the {MAX_LANES} a run compares",
                    self.lanes.len()
                ),
            ));
        }
        for lane in &self.lanes {
            if let Placement::Local { sidecars } = lane.placement
                && !(1..=MAX_SIDECARS).contains(&sidecars)
            {
                return Err(ConfigError::new(
                    "sidecars",
                    format!("{sidecars} is not between 1 and {MAX_SIDECARS}"),
                ));
            }
        }
        if !(1..=MAX_CLIENTS).contains(&self.clients) {
            return Err(ConfigError::new(
                "clients",
                format!("{} is not between 1 and {MAX_CLIENTS}", self.clients),
            ));
        }
        if self.state_client >= self.clients {
            return Err(ConfigError::new(
                "state_client",
                format!(
                    "client {} does not exist: clients are numbered 0 to {}",
                    self.state_client,
                    self.clients - 1
                ),
            ));
        }
        if self.samples_per_tick > MAX_SAMPLES_PER_TICK {
            return Err(ConfigError::new(
                "samples",
                format!(
                    "{} decisions per tick is more than {MAX_SAMPLES_PER_TICK}",
                    self.samples_per_tick
                ),
            ));
        }
        if self.tick.is_zero() {
            return Err(ConfigError::new("tick", "must be longer than zero"));
        }
        let ticks = self
            .duration
            .as_nanos()
            .div_ceil(self.tick.as_nanos().max(1));
        if ticks > u128::from(MAX_TICKS) {
            return Err(ConfigError::new(
                "tick",
                format!(
                    "{:?} ticks over {:?} make {ticks}; a run reports at most {MAX_TICKS}",
                    self.tick, self.duration
                ),
            ));
        }
        // Cost, start and duration as for one simulation (the probe's traffic is
        // too slow to meet the arrival cap, which is checked next for the real source).
        let probe = Simulation {
            algorithm: self.lanes[0].algorithm,
            traffic: Traffic::Steady { rate: 1e-9 },
            duration: self.duration,
            seed: self.seed,
            cost: self.cost,
            start: self.start,
        };
        probe.validate()?;
        let expected = self.source.expected_arrivals(self.duration);
        if expected > MAX_ARRIVALS as f64 {
            return Err(ConfigError::new(
                "duration",
                format!(
                    "{:?} of {} traffic averages {expected:.0} arrivals; a run may have at most {MAX_ARRIVALS}",
                    self.duration,
                    self.source.name()
                ),
            ));
        }
        Ok(())
    }

    /// The number of ticks the run reports.
    pub fn ticks(&self) -> u64 {
        let ticks = self
            .duration
            .as_nanos()
            .div_ceil(self.tick.as_nanos().max(1));
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// What each lane should do, computed from the parameters alone (no run).
    pub fn expectations(&self) -> Vec<Expectation> {
        self.lanes
            .iter()
            .map(|lane| Expectation::of(self, lane))
            .collect()
    }

    /// Starts the run: a [`Runner`] that steps it one tick at a time.
    pub fn runner(&self, stores: &dyn StoreFactory) -> Result<Runner, ConfigError> {
        self.validate()?;
        let keys = self.clients as usize;
        let lanes = self
            .lanes
            .iter()
            .map(|lane| LaneState::new(lane, self, stores, keys))
            .collect();
        Ok(Runner {
            arrivals: self.source.arrivals(self.duration, self.seed),
            pending: None,
            lanes,
            start: self.start,
            cost: self.cost,
            seed: self.seed,
            clients: u64::from(self.clients),
            state_client: u64::from(self.state_client),
            tick_ns: u64::try_from(self.tick.as_nanos()).unwrap_or(u64::MAX),
            duration_ns: u64::try_from(self.duration.as_nanos()).unwrap_or(u64::MAX),
            ticks: self.ticks(),
            next_tick: 0,
            next_index: 0,
            samples_per_tick: self.samples_per_tick,
            failure: None,
            batched: stores.is_remote(),
        })
    }

    /// Runs to the end, calling `on_tick` for every tick, and returns the totals.
    pub fn run(
        &self,
        stores: &dyn StoreFactory,
        mut on_tick: impl FnMut(&Tick),
    ) -> Result<RunReport, RunError> {
        let mut runner = self.runner(stores)?;
        while let Some(tick) = runner.next_tick() {
            on_tick(&tick);
        }
        runner.finish_checked()
    }

    /// Runs to the end like [`Scenario::run`], also calling `on_decision` for
    /// every decision of every lane, in arrival order (lanes in order for each arrival).
    pub fn run_with_decisions(
        &self,
        stores: &dyn StoreFactory,
        mut on_tick: impl FnMut(&Tick),
        mut on_decision: impl FnMut(&LaneDecision<'_>),
    ) -> Result<RunReport, RunError> {
        let mut runner = self.runner(stores)?;
        while let Some(tick) = runner.next_tick_with(Some(&mut on_decision)) {
            on_tick(&tick);
        }
        runner.finish_checked()
    }
}

/// The client an arrival belongs to: a seeded hash of its index, so clients
/// and round-robin sidecars are independent of each other.
fn client_of(index: u64, seed: u64, clients: u64) -> u64 {
    if clients == 1 {
        return 0;
    }
    // SplitMix64's finalizer.
    let mut z = index
        .wrapping_add(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % clients
}

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

    fn add(&mut self, other: &Counts) {
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

/// One decision of one lane, as [`Scenario::run_with_decisions`] reports it.
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
    /// The window the next figure counts over (see [`Simulation::window`]), in nanoseconds.
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

/// A scenario being run, one tick at a time.
pub struct Runner {
    arrivals: SourceArrivals,
    pending: Option<u64>,
    lanes: Vec<LaneState>,
    start: Timestamp,
    cost: u64,
    seed: u64,
    clients: u64,
    state_client: u64,
    tick_ns: u64,
    duration_ns: u64,
    ticks: u64,
    next_tick: u64,
    next_index: u64,
    samples_per_tick: usize,
    /// Why a store stopped answering; the run ends there.
    failure: Option<String>,
    /// Decide each tick store by store in batches (remote stores).
    batched: bool,
}

impl fmt::Debug for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("next_tick", &self.next_tick)
            .field("ticks", &self.ticks)
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// The number of ticks the run reports in all.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Decides every arrival of the next tick in every lane; `None` once the run is over.
    pub fn next_tick(&mut self) -> Option<Tick> {
        self.next_tick_with(None)
    }

    /// Like [`Runner::next_tick`], also calling `on_decision` for every decision when given.
    pub fn next_tick_with(
        &mut self,
        mut on_decision: Option<&mut dyn FnMut(&LaneDecision<'_>)>,
    ) -> Option<Tick> {
        if self.next_tick >= self.ticks || self.failure.is_some() {
            return None;
        }
        let index = self.next_tick;
        self.next_tick += 1;
        let start_ns = index.saturating_mul(self.tick_ns);
        let end_ns = start_ns.saturating_add(self.tick_ns).min(self.duration_ns);
        for lane in &mut self.lanes {
            lane.begin_tick();
        }
        // Without a per-decision observer, a remote store decides a tick's
        // arrivals at once, pipelined (the same order, so the same answers).
        let batched = self.batched && on_decision.is_none();
        let mut requests = Vec::new();
        while let Some(offset) = self.pending.take().or_else(|| self.arrivals.next()) {
            if offset >= end_ns {
                self.pending = Some(offset);
                break;
            }
            let arrival = self.next_index;
            self.next_index += 1;
            let request = Request {
                arrival,
                offset_ns: offset,
                at: Timestamp::from_nanos(self.start.as_nanos() + offset),
                client: client_of(arrival, self.seed, self.clients),
                cost: self.cost,
            };
            if batched {
                requests.push(request);
                continue;
            }
            for lane in &mut self.lanes {
                lane.decide(
                    &request,
                    self.samples_per_tick,
                    on_decision
                        .as_mut()
                        .map(|f| &mut **f as &mut dyn FnMut(&LaneDecision<'_>)),
                );
            }
        }
        if batched {
            for lane in &mut self.lanes {
                lane.decide_tick(&requests, self.samples_per_tick);
            }
        }
        let tick_end = Timestamp::from_nanos(self.start.as_nanos() + end_ns);
        let lanes = self
            .lanes
            .iter_mut()
            .map(|lane| lane.end_tick(self.state_client, tick_end))
            .collect();
        let failed = self
            .lanes
            .iter()
            .flat_map(|lane| &lane.stores)
            .find_map(|store| store.failure());
        if let Some(failure) = failed {
            // This tick's decisions went partly unanswered: report none of it.
            self.failure = Some(failure.to_owned());
            return None;
        }
        Some(Tick {
            index,
            start_ns,
            end_ns,
            lanes,
        })
    }

    /// Why a store stopped answering, which ended the run early.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The totals of a run that ended, or the store failure that ended it early.
    pub fn finish_checked(self) -> Result<RunReport, RunError> {
        match self.failure.clone() {
            Some(failure) => Err(RunError::Store(failure)),
            None => Ok(self.finish()),
        }
    }

    /// The totals so far (the whole run's once [`Runner::next_tick`] has returned `None`).
    pub fn finish(self) -> RunReport {
        let seconds = self.duration_ns as f64 / NANOS_PER_SEC as f64;
        RunReport {
            arrivals: self.next_index,
            ticks: self.next_tick,
            lanes: self
                .lanes
                .into_iter()
                .map(|lane| lane.report(seconds))
                .collect(),
        }
    }
}

/// One arriving request, as every lane decides it.
struct Request {
    /// Its position in the run, from 0.
    arrival: u64,
    /// When it arrives, in nanoseconds from the start.
    offset_ns: u64,
    /// When it arrives, in virtual time.
    at: Timestamp,
    /// The client (key) it belongs to.
    client: u64,
    /// The units it costs.
    cost: u64,
}

/// A lane's stores and running figures.
struct LaneState {
    label: String,
    algorithm: AnyAlgorithm,
    placement: Placement,
    stores: Vec<Box<dyn SimulatedStore>>,
    total: Counts,
    tick: Counts,
    max_delay_ns: u64,
    samples: Vec<SampledDecision>,
    sampled_rejection: bool,
    admitted_in_window: AdmittedWindow,
    /// For window algorithms in a global placement: each key's exact window of admitted units.
    exact: Option<ExactWindows>,
}

/// Each key's admitted units over the last window, to judge decisions against the exact log.
struct ExactWindows {
    window: Duration,
    limit: u64,
    keys: HashMap<u64, AdmittedWindow>,
    over: u64,
    under: u64,
}

impl LaneState {
    fn new(lane: &Lane, scenario: &Scenario, stores: &dyn StoreFactory, keys: usize) -> Self {
        let algorithm = lane.algorithm;
        let is_window = matches!(
            algorithm,
            AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(_))
                | AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(_))
                | AnyAlgorithm::SlidingLog(_)
        );
        let exact = (is_window && lane.placement == Placement::Global).then(|| ExactWindows {
            window: algorithm.window(),
            limit: algorithm.capacity(),
            keys: HashMap::new(),
            over: 0,
            under: 0,
        });
        LaneState {
            label: lane.label.clone(),
            algorithm,
            placement: lane.placement,
            stores: (0..lane.placement.stores())
                .map(|_| stores.store(algorithm, keys))
                .collect(),
            total: Counts::default(),
            tick: Counts::default(),
            max_delay_ns: 0,
            samples: Vec::with_capacity(scenario.samples_per_tick + 1),
            sampled_rejection: false,
            admitted_in_window: AdmittedWindow::new(algorithm.window()),
            exact,
        }
    }

    fn begin_tick(&mut self) {
        self.tick = Counts::default();
        self.max_delay_ns = 0;
        self.samples.clear();
        self.sampled_rejection = false;
    }

    fn decide(
        &mut self,
        request: &Request,
        samples_per_tick: usize,
        on_decision: Option<&mut dyn FnMut(&LaneDecision<'_>)>,
    ) {
        let Request {
            arrival,
            at,
            client,
            cost,
            ..
        } = *request;
        // A round-robin balancer: arrival k goes to sidecar k mod N.
        let sidecar = (arrival % self.stores.len() as u64) as usize;
        let decision = self.stores[sidecar].check(client, at, cost);
        self.record(request, sidecar, decision, samples_per_tick, on_decision);
    }

    /// Decides a tick's `requests` store by store, each store's in one
    /// [`SimulatedStore::check_many`] (pipelined on Redis), then counts
    /// them in arrival order as [`LaneState::decide`] would.
    fn decide_tick(&mut self, requests: &[Request], samples_per_tick: usize) {
        let sidecars = self.stores.len();
        let mut decisions = vec![None; requests.len()];
        let mut batch = Vec::new();
        let mut answers = Vec::new();
        for (sidecar, store) in self.stores.iter_mut().enumerate() {
            let mine: Vec<usize> = (0..requests.len())
                .filter(|&i| (requests[i].arrival % sidecars as u64) as usize == sidecar)
                .collect();
            if mine.is_empty() {
                continue;
            }
            batch.clear();
            batch.extend(mine.iter().map(|&i| {
                let r = &requests[i];
                (r.client, r.at, r.cost)
            }));
            store.check_many(&batch, &mut answers);
            for (&i, &d) in mine.iter().zip(&answers) {
                decisions[i] = Some((sidecar, d));
            }
        }
        for (request, decided) in requests.iter().zip(decisions) {
            if let Some((sidecar, decision)) = decided {
                self.record(request, sidecar, decision, samples_per_tick, None);
            }
        }
    }

    /// Counts one decision: the tick's figures, the exact-window judgement, samples.
    fn record(
        &mut self,
        request: &Request,
        sidecar: usize,
        decision: Decision,
        samples_per_tick: usize,
        on_decision: Option<&mut dyn FnMut(&LaneDecision<'_>)>,
    ) {
        let Request {
            arrival,
            offset_ns,
            at,
            client,
            cost,
        } = *request;
        let outcome = decision.outcome();
        self.tick.arrivals += 1;
        match outcome {
            Outcome::Allowed => {
                self.tick.admitted += 1;
                let delay = decision.delay_nanos();
                self.tick.delayed += u64::from(delay > 0);
                self.max_delay_ns = self.max_delay_ns.max(delay);
                self.admitted_in_window.admit(offset_ns, cost);
            }
            Outcome::Denied => self.tick.denied += 1,
            Outcome::Exceeds => self.tick.exceeded += 1,
        }
        if let Some(exact) = &mut self.exact {
            let window = exact.window;
            let keyed = exact
                .keys
                .entry(client)
                .or_insert_with(|| AdmittedWindow::new(window));
            let room = keyed.units_before(offset_ns) + cost <= exact.limit;
            match (outcome == Outcome::Allowed, room) {
                (true, false) => exact.over += 1,
                (false, true) => exact.under += 1,
                _ => {}
            }
            if outcome == Outcome::Allowed {
                keyed.admit(offset_ns, cost);
            }
        }
        if let Some(on_decision) = on_decision {
            let level = self.stores[sidecar].state_level(client, at);
            on_decision(&LaneDecision {
                lane: &self.label,
                client,
                sidecar: sidecar as u32,
                record: DecisionRecord::new(arrival, offset_ns, at, &decision, level),
            });
        }
        let rejected = outcome != Outcome::Allowed;
        let take = self.samples.len() < samples_per_tick
            || (rejected && !self.sampled_rejection && samples_per_tick > 0);
        if take {
            self.sampled_rejection |= rejected;
            self.samples.push(SampledDecision {
                index: arrival,
                offset_ns,
                client,
                sidecar: sidecar as u32,
                outcome: match outcome {
                    Outcome::Allowed => "allowed",
                    Outcome::Denied => "denied",
                    Outcome::Exceeds => "exceeds",
                },
                remaining: decision.remaining(),
                retry_after_ns: (outcome == Outcome::Denied).then(|| decision.retry_after_nanos()),
                delay_ns: decision.delay_nanos(),
            });
        }
    }

    fn end_tick(&mut self, state_client: u64, tick_end: Timestamp) -> LaneTick {
        self.total.add(&self.tick);
        // One read per sidecar (at most 15), however many clients there are.
        let levels: f64 = self
            .stores
            .iter_mut()
            .map(|store| store.state_level(state_client, tick_end))
            .sum();
        LaneTick {
            counts: self.tick,
            total: self.total,
            state_level: levels / self.stores.len() as f64,
            max_delay_ns: self.max_delay_ns,
            samples: self.samples.clone(),
        }
    }

    fn report(self, seconds: f64) -> LaneReport {
        let counts = self.total;
        LaneReport {
            label: self.label,
            placement: self.placement,
            counts,
            acceptance_rate: if counts.arrivals > 0 {
                counts.admitted as f64 / counts.arrivals as f64
            } else {
                0.0
            },
            admitted_rate: if seconds > 0.0 {
                counts.admitted as f64 / seconds
            } else {
                0.0
            },
            window_ns: u64::try_from(self.algorithm.window().as_nanos()).unwrap_or(u64::MAX),
            max_admitted_in_window: self.admitted_in_window.max,
            limit: self.algorithm.capacity(),
            over_admitted: self.exact.as_ref().map(|e| e.over),
            under_admitted: self.exact.as_ref().map(|e| e.under),
        }
    }
}

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
    fn of(scenario: &Scenario, lane: &Lane) -> Self {
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
    use super::*;
    use crate::MemoryStores;
    use tollgate_core::{
        DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket,
    };

    const S: u64 = NANOS_PER_SEC;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn collect(scenario: &Scenario) -> (RunReport, Vec<Tick>) {
        let mut ticks = vec![];
        let report = scenario
            .run(&MemoryStores, |t| ticks.push(t.clone()))
            .unwrap();
        (report, ticks)
    }

    #[test]
    fn ticks_add_up_to_the_run_and_agree_with_the_simulation() {
        // The one-key simulation and a one-lane scenario decide the same trace alike.
        let bucket = TokenBucket::new(5, 2, secs(1)).unwrap();
        let traffic = Traffic::poisson(30.0).unwrap();
        let sim = Simulation::new(bucket, traffic, secs(10)).with_seed(7);
        let summary = sim.run(|_| {}).unwrap();
        let mut scenario = Scenario::new(traffic, secs(10), vec![Lane::global("tb", bucket)]);
        scenario.seed = 7;
        let (report, ticks) = collect(&scenario);
        assert_eq!(ticks.len(), 100);
        assert_eq!(report.ticks, 100);
        let lane = &report.lanes[0];
        assert_eq!(
            (
                lane.counts.arrivals,
                lane.counts.admitted,
                lane.counts.denied
            ),
            (summary.arrivals, summary.admitted, summary.denied)
        );
        assert_eq!(lane.max_admitted_in_window, summary.max_admitted_in_window);
        let mut sum = Counts::default();
        for (i, tick) in ticks.iter().enumerate() {
            assert_eq!(tick.index, i as u64);
            assert_eq!(tick.start_ns, i as u64 * 100_000_000);
            sum.add(&tick.lanes[0].counts);
            assert_eq!(tick.lanes[0].total, sum, "running totals at tick {i}");
            assert!(tick.lanes[0].samples.len() <= 5);
            assert!(
                tick.lanes[0]
                    .samples
                    .iter()
                    .all(|d| (tick.start_ns..tick.end_ns).contains(&d.offset_ns))
            );
        }
        assert_eq!(sum, lane.counts);
        assert_eq!(report.arrivals, summary.arrivals);
        // The bucket starts full (5 tokens): the first tick's state is what is left.
        assert!(ticks[0].lanes[0].state_level <= 5.0);
        // A denied sample carries its Retry-After.
        let denied: Vec<&SampledDecision> = ticks
            .iter()
            .flat_map(|t| &t.lanes[0].samples)
            .filter(|d| d.outcome == "denied")
            .collect();
        assert!(!denied.is_empty());
        assert!(
            denied
                .iter()
                .all(|d| d.retry_after_ns.is_some_and(|r| r > 0 && r <= 500_000_000))
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_ticks() {
        let lanes = vec![
            Lane::global("sw", SlidingWindow::new(50, secs(10)).unwrap()),
            Lane::local("local", TokenBucket::new(10, 5, secs(1)).unwrap(), 3),
        ];
        let mut scenario = Scenario::new(Traffic::poisson(40.0).unwrap(), secs(20), lanes);
        scenario.clients = 5;
        scenario.seed = 42;
        let (first_report, first) = collect(&scenario);
        let (second_report, second) = collect(&scenario);
        assert_eq!(first, second);
        assert_eq!(first_report, second_report);
        scenario.seed = 43;
        let (_, other) = collect(&scenario);
        assert_ne!(first, other, "another seed, another trace");
    }

    #[test]
    fn compare_runs_every_algorithm_on_the_same_trace() {
        // The fixed window's edge burst: 10 req/s from 10 s before a minute
        // boundary to 10 s after. Fixed admits 20 within one minute, the log 10.
        let traffic = Traffic::square_with_duty(10.0, 0.0, secs(60), 1.0 / 3.0).unwrap();
        let lanes = vec![
            Lane::global("fixed_window", FixedWindow::new(10, secs(60)).unwrap()),
            Lane::global("sliding_window", SlidingWindow::new(10, secs(60)).unwrap()),
            Lane::global("sliding_log", SlidingLog::new(10, secs(60)).unwrap()),
        ];
        let mut scenario = Scenario::new(traffic, secs(120), lanes);
        scenario.start = Timestamp::from_secs(1_700_000_030);
        let (report, _) = collect(&scenario);
        let by = |i: usize| &report.lanes[i];
        assert!(report.lanes.iter().all(|l| l.counts.arrivals == 400));
        assert_eq!(by(0).max_admitted_in_window, 20);
        assert_eq!(by(2).max_admitted_in_window, 10);
        assert!(by(1).max_admitted_in_window < 20);
        // Judged against the exact log, the log is never wrong; the fixed window over-admits.
        assert_eq!(
            (by(2).over_admitted, by(2).under_admitted),
            (Some(0), Some(0))
        );
        assert!(by(0).over_admitted.unwrap() >= 10, "{:?}", by(0));
    }

    #[test]
    fn a_local_fleet_admits_sidecars_times_the_cap_and_a_global_limit_holds() {
        // 10/s per bucket, 200 req/s offered for 30 s.
        let bucket = TokenBucket::new(10, 10, secs(1)).unwrap();
        for sidecars in [1, 4, 15] {
            let lanes = vec![
                Lane::local("local", bucket, sidecars),
                Lane::global("global", bucket),
            ];
            let scenario = Scenario::new(Traffic::steady(200.0).unwrap(), secs(30), lanes);
            let expect = scenario.expectations();
            let (report, _) = collect(&scenario);
            let local = &report.lanes[0];
            let global = &report.lanes[1];
            let n = f64::from(sidecars);
            assert!((expect[0].effective_rate - 10.0 * n).abs() < 1e-9);
            assert!((expect[1].effective_rate - 10.0).abs() < 1e-9);
            // Global: 10 tokens + 10/s × 30 s.
            assert!(
                global.counts.admitted <= 310 && global.counts.admitted >= 300,
                "{global:?}"
            );
            // Local: each sidecar sees 200/N req/s; it admits min(that, 10/s) plus its full bucket.
            let per_sidecar = (200.0 / n).min(10.0) * 30.0 + 10.0;
            let expected = (per_sidecar * n).min(6_000.0);
            assert!(
                (local.counts.admitted as f64 - expected).abs() <= 2.0 * n,
                "{sidecars} sidecars: {} vs {expected}",
                local.counts.admitted
            );
            assert!(local.counts.admitted as f64 <= expect[0].ceiling);
        }
    }

    #[test]
    fn clients_have_their_own_keys() {
        // Four clients share 40 req/s; each has its own 1/s bucket of 5.
        let bucket = TokenBucket::new(5, 1, secs(1)).unwrap();
        let mut scenario = Scenario::new(
            Traffic::steady(40.0).unwrap(),
            secs(20),
            vec![Lane::global("tb", bucket)],
        );
        scenario.clients = 4;
        let (report, ticks) = collect(&scenario);
        // Each key: 5 + ~20 admitted; four keys.
        let admitted = report.lanes[0].counts.admitted;
        assert!((96..=100).contains(&admitted), "{admitted}");
        let clients: std::collections::BTreeSet<u64> = ticks
            .iter()
            .flat_map(|t| &t.lanes[0].samples)
            .map(|d| d.client)
            .collect();
        assert_eq!(clients.into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        let expect = &scenario.expectations()[0];
        assert_eq!(expect.ceiling, 4.0 * 25.0);
    }

    #[test]
    fn a_sliding_logs_level_falls_at_tick_ends_as_entries_leave_the_window() {
        // 10 per second; three requests at 0, 0.2 and 0.6 s, then nothing.
        // The level at each 0.5 s tick end counts the window ending there,
        // not the log as of its last decision (which would stay at 3).
        let log = SlidingLog::new(10, secs(1)).unwrap();
        let replay = Replay::from_offsets(vec![0, S / 5, 3 * S / 5]);
        let mut scenario = Scenario::new(
            ArrivalSource::Replay(replay),
            secs(3),
            vec![Lane::global("log", log)],
        );
        scenario.tick = Duration::from_millis(500);
        let (report, ticks) = collect(&scenario);
        let levels: Vec<f64> = ticks.iter().map(|t| t.lanes[0].state_level).collect();
        assert_eq!(levels, vec![2.0, 2.0, 1.0, 0.0, 0.0, 0.0]);
        // Reading the level changed no decision: all three passed.
        assert_eq!(report.lanes[0].counts.admitted, 3);
    }

    /// The in-memory stores, announced as remote so the runner batches each tick.
    #[derive(Debug)]
    struct BatchedMemory;

    impl StoreFactory for BatchedMemory {
        fn store(&self, algorithm: AnyAlgorithm, keys: usize) -> Box<dyn SimulatedStore> {
            MemoryStores.store(algorithm, keys)
        }

        fn is_remote(&self) -> bool {
            true
        }
    }

    #[test]
    fn deciding_a_tick_store_by_store_gives_the_same_ticks_and_samples() {
        let bucket = TokenBucket::new(5, 2, secs(1)).unwrap();
        let mut scenario = Scenario::new(
            Traffic::poisson(60.0).unwrap(),
            secs(20),
            vec![
                Lane::global("bucket", bucket),
                Lane::local("fleet", bucket, 3),
                Lane::global("log", SlidingLog::new(4, secs(1)).unwrap()),
                Lane::global(
                    "shaper",
                    LeakyBucket::new(3, secs(1), 4, DelayMode::Delay).unwrap(),
                ),
            ],
        );
        scenario.clients = 4;
        scenario.samples_per_tick = 3;
        let mut one_by_one = vec![];
        let expected = scenario
            .run(&MemoryStores, |t| one_by_one.push(t.clone()))
            .unwrap();
        let mut batched = vec![];
        let report = scenario
            .run(&BatchedMemory, |t| batched.push(t.clone()))
            .unwrap();
        assert_eq!(batched, one_by_one);
        assert_eq!(report, expected);
        assert!(expected.lanes.iter().all(|l| l.counts.rejected() > 0));
    }

    #[test]
    fn the_state_level_reads_the_chosen_client_averaged_over_sidecars() {
        // A bucket of 10 that refills once an hour; three requests at 0 s.
        // Round robin: sidecar 0 gets requests 0 and 2, sidecar 1 request 1.
        let bucket = TokenBucket::new(10, 1, secs(3_600)).unwrap();
        let replay = Replay::from_offsets(vec![0, 0, 0]);
        let scenario = Scenario::new(
            ArrivalSource::Replay(replay),
            secs(1),
            vec![
                Lane::local("local ×2", bucket, 2),
                Lane::global("global", bucket),
            ],
        );
        let (_, ticks) = collect(&scenario);
        let last = ticks.last().unwrap();
        // Sidecars hold 8 and 9 tokens: the mean is 8.5. The global bucket holds 7.
        assert_eq!(last.lanes[0].state_level, 8.5);
        assert_eq!(last.lanes[1].state_level, 7.0);

        // Forty requests over three clients, each with a bucket of 100: the level
        // of the chosen client's key is 100 minus that client's requests.
        let bucket = TokenBucket::new(100, 1, secs(3_600)).unwrap();
        let replay = Replay::from_offsets(vec![0; 40]);
        let mut scenario = Scenario::new(
            ArrivalSource::Replay(replay),
            secs(1),
            vec![Lane::global("tb", bucket)],
        );
        scenario.clients = 3;
        let mut per_client = [0u64; 3];
        scenario
            .run_with_decisions(
                &MemoryStores,
                |_| {},
                |d| {
                    per_client[d.client as usize] += 1;
                },
            )
            .unwrap();
        assert!(per_client.iter().all(|&n| n > 0), "{per_client:?}");
        assert_ne!(
            per_client[0], per_client[1],
            "the clients differ, so the test tells them apart"
        );
        for client in 0..3 {
            scenario.state_client = client;
            let (_, ticks) = collect(&scenario);
            let expected = 100.0 - per_client[client as usize] as f64;
            assert_eq!(ticks[0].lanes[0].state_level, expected, "client {client}");
        }
    }

    #[test]
    fn every_decision_of_every_lane_can_be_observed() {
        let lanes = vec![
            Lane::global("fixed_window", FixedWindow::new(10, secs(1)).unwrap()),
            Lane::global("sliding_log", SlidingLog::new(10, secs(1)).unwrap()),
        ];
        let mut scenario = Scenario::new(Traffic::poisson(40.0).unwrap(), secs(5), lanes);
        scenario.clients = 3;
        let mut seen: Vec<(String, u64, u64, Outcome, f64)> = vec![];
        let report = scenario
            .run_with_decisions(
                &MemoryStores,
                |_| {},
                |d| {
                    seen.push((
                        d.lane.to_owned(),
                        d.client,
                        d.record.index,
                        d.record.outcome,
                        d.record.state_level,
                    ));
                },
            )
            .unwrap();
        assert_eq!(seen.len() as u64, 2 * report.arrivals);
        for (i, lane) in report.lanes.iter().enumerate() {
            let mine: Vec<_> = seen.iter().filter(|d| d.0 == lane.label).collect();
            assert_eq!(mine.len() as u64, report.arrivals);
            assert!(
                mine.iter().enumerate().all(|(k, d)| d.2 == k as u64),
                "{i}: in order"
            );
            let admitted = mine.iter().filter(|d| d.3 == Outcome::Allowed).count() as u64;
            assert_eq!(admitted, lane.counts.admitted, "{}", lane.label);
            // A key's level never goes above the limit but for the fixed window,
            // which counts its denials too.
            if lane.label == "sliding_log" {
                assert!(mine.iter().all(|d| d.4 <= 10.0));
            }
        }
        // Observing changes nothing: the same run without it gives the same report.
        assert_eq!(collect(&scenario).0, report);
        // A CSV row per decision: the lane, client and sidecar, then the record's row.
        let replay = Replay::from_offsets(vec![7]);
        let log = SlidingLog::new(10, secs(1)).unwrap();
        let one = Scenario::new(
            ArrivalSource::Replay(replay),
            secs(1),
            vec![Lane::global("sliding_log", log)],
        );
        let mut row = Vec::new();
        one.run_with_decisions(
            &MemoryStores,
            |_| {},
            |d| {
                d.write_csv_row(&mut row).unwrap();
            },
        )
        .unwrap();
        let row = String::from_utf8(row).unwrap();
        let at = one.start.as_nanos() + 7;
        assert_eq!(row, format!("sliding_log,0,0,0,7,{at},allowed,9,,0,1\n"));
        assert_eq!(
            row.trim_end().split(',').count(),
            LaneDecision::CSV_HEADER.split(',').count()
        );
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

    #[test]
    fn replay_reads_a_csv_of_timestamps() {
        let csv = "timestamp,client\n1700000001.5,a\n1700000000,b\n\n# note\n1700000000.25,c\n";
        let replay = Replay::from_csv(csv).unwrap();
        assert_eq!(replay.len(), 3);
        assert_eq!(replay.span(), Duration::from_nanos(1_500_000_001));
        let bucket = TokenBucket::new(2, 1, secs(10)).unwrap();
        let scenario = Scenario::new(
            ArrivalSource::Replay(replay),
            secs(2),
            vec![Lane::global("tb", bucket)],
        );
        let (report, ticks) = collect(&scenario);
        assert_eq!((report.arrivals, report.lanes[0].counts.admitted), (3, 2));
        let offsets: Vec<u64> = ticks
            .iter()
            .flat_map(|t| &t.lanes[0].samples)
            .map(|d| d.offset_ns)
            .collect();
        assert_eq!(offsets, vec![0, S / 4, 3 * S / 2]);
        // A shorter run replays only what falls inside it.
        let mut short = scenario.clone();
        short.duration = secs(1);
        assert_eq!(collect(&short).0.arrivals, 2);
        let bad = Replay::from_csv("1\n2\nsoon\n").unwrap_err();
        assert_eq!(
            bad.to_string(),
            "replay: line 3: \"soon\" is not a number of seconds"
        );
        assert!(
            Replay::from_csv("t\n")
                .unwrap_err()
                .to_string()
                .contains("no timestamps")
        );
        assert!(
            Replay::from_csv("-1\n")
                .unwrap_err()
                .to_string()
                .contains("line 1")
        );
    }

    #[test]
    fn bad_scenarios_are_rejected_with_the_parameter_named() {
        let bucket = TokenBucket::new(5, 1, secs(1)).unwrap();
        let base = Scenario::new(
            Traffic::steady(10.0).unwrap(),
            secs(10),
            vec![Lane::global("tb", bucket)],
        );
        let fails = |s: Scenario| s.runner(&MemoryStores).unwrap_err().parameter();
        assert_eq!(
            fails(Scenario {
                lanes: vec![],
                ..base.clone()
            }),
            "algorithms"
        );
        assert_eq!(
            fails(Scenario {
                lanes: vec![Lane::local("l", bucket, 16)],
                ..base.clone()
            }),
            "sidecars"
        );
        assert_eq!(
            fails(Scenario {
                lanes: vec![Lane::local("l", bucket, 0)],
                ..base.clone()
            }),
            "sidecars"
        );
        assert_eq!(
            fails(Scenario {
                clients: 3,
                state_client: 3,
                ..base.clone()
            }),
            "state_client"
        );
        assert_eq!(
            fails(Scenario {
                clients: 0,
                ..base.clone()
            }),
            "clients"
        );
        assert_eq!(
            fails(Scenario {
                tick: Duration::ZERO,
                ..base.clone()
            }),
            "tick"
        );
        assert_eq!(
            fails(Scenario {
                tick: Duration::from_nanos(1),
                ..base.clone()
            }),
            "tick"
        );
        assert_eq!(
            fails(Scenario {
                cost: 0,
                ..base.clone()
            }),
            "cost"
        );
        assert_eq!(
            fails(Scenario {
                duration: Duration::ZERO,
                ..base.clone()
            }),
            "duration"
        );
        assert_eq!(
            fails(Scenario {
                source: Traffic::steady(1e6).unwrap().into(),
                duration: secs(1_000),
                ..base.clone()
            }),
            "duration"
        );
    }
}
