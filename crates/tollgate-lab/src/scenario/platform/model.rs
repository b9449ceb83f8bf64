//! The platform scenario's parameters, its validation and its run: one trace, every mode a lane, one report.

use std::time::Duration;

use serde::Serialize;
use tollgate_core::share::{AuthorityPolicy, HolderPolicy, Share};
use tollgate_core::{ConfigError, Timestamp};

use super::super::report::RunError;
use super::exact::{ExactLane, LocalLane};
use super::lane::PlatformLane;
use super::leased::LeasedLane;
use super::report::{LaneStats, PlatformLaneReport};
use super::shares::SharesLane;
use super::trace::{Arrival, Trace};
use crate::store::{MemoryStores, StoreFactory};

/// The most keys a platform run spreads its arrivals over.
pub const MAX_PLATFORM_KEYS: u32 = 10_000_000;

/// The most instances a platform run may have live at once.
pub const MAX_PLATFORM_INSTANCES: u32 = 1_000;

/// Steps of the trace each lane thread takes at once.
const CHUNK: usize = 1 << 16;

/// One step of the trace: a scale change or an arrival.
#[derive(Clone, Copy)]
enum Step {
    /// From this many nanoseconds after the start, this many instances are live.
    Scale(u64, u32),
    /// A request.
    Arrive(Arrival),
}

/// Draws up to [`CHUNK`] steps into `steps`, counting the arrivals; whether the trace ended.
fn fill(trace: &mut Trace, steps: &mut Vec<Step>, arrivals: &mut u64) -> bool {
    while steps.len() < CHUNK {
        let Some(arrival) = trace.next() else {
            return true;
        };
        steps.extend(trace.take_scaled().map(|(at, n)| Step::Scale(at, n)));
        steps.push(Step::Arrive(arrival));
        *arrivals += 1;
    }
    false
}

/// One lane's mode, counts and script calls to a remote store (`None`: none made).
type LaneRun = (PlatformMode, LaneStats, Option<u64>);

/// How a lane keeps the fleet inside the limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlatformMode {
    /// One store call per decision.
    Exact,
    /// Quota leases.
    Leased,
    /// Shares of each key's bucket, rebalanced by demand in batched calls.
    Shares,
    /// Each instance on its own.
    Local,
}

impl PlatformMode {
    /// Every mode, in the order reports list them.
    pub const ALL: [PlatformMode; 4] = [
        PlatformMode::Exact,
        PlatformMode::Leased,
        PlatformMode::Shares,
        PlatformMode::Local,
    ];

    /// The mode's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PlatformMode::Exact => "exact",
            PlatformMode::Leased => "leased",
            PlatformMode::Shares => "shares",
            PlatformMode::Local => "local",
        }
    }
}

/// How popular each key is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KeyDistribution {
    /// Every key alike.
    Uniform,
    /// Key `k` (from 1) drawn with weight `1 / kˢ`.
    Zipf(f64),
}

/// A platform run's parameters.
#[derive(Clone, Debug)]
pub struct PlatformScenario {
    /// Virtual time at the start.
    pub start: Timestamp,
    /// How long the run lasts.
    pub duration: Duration,
    /// Requests per second offered.
    pub rate: f64,
    /// Poisson arrivals (else evenly spaced).
    pub poisson: bool,
    /// The seed of every random draw.
    pub seed: u64,
    /// Keys the requests are spread over.
    pub keys: u32,
    /// How they are spread.
    pub distribution: KeyDistribution,
    /// Instances live at the start.
    pub instances: u32,
    /// (time since the start, instances live from then on), in any order.
    pub scale: Vec<(Duration, u32)>,
    /// Each key's token bucket.
    pub key_limit: Share,
    /// The platform's token bucket, if any.
    pub platform_limit: Option<Share>,
    /// The lanes to run (exact always runs: it is the reference).
    pub modes: Vec<PlatformMode>,
    /// One store round trip.
    pub store_rtt: Duration,
    /// The leased lane's lease period.
    pub lease_period: Duration,
    /// The shares lane's holders.
    pub holder: HolderPolicy,
    /// The shares lane's authority.
    pub authority: AuthorityPolicy,
}

/// What a platform run reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlatformReport {
    /// Requests offered (every lane decides each of them once).
    pub arrivals: u64,
    /// Requests the exact limiter admitted.
    pub exact_admitted: u64,
    /// Simulated seconds.
    pub seconds: f64,
    /// One report per lane, exact first.
    pub lanes: Vec<PlatformLaneReport>,
}

impl PlatformScenario {
    /// Checks the parameters; the error names the one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.keys == 0 || self.keys > MAX_PLATFORM_KEYS {
            return Err(ConfigError::new(
                "clients",
                format!("must be 1 to {MAX_PLATFORM_KEYS}, not {}", self.keys),
            ));
        }
        let mut steps = self.scale.iter().map(|s| s.1).chain([self.instances]);
        if steps.any(|n| n == 0 || n > MAX_PLATFORM_INSTANCES) {
            return Err(ConfigError::new(
                "instances",
                format!("must be 1 to {MAX_PLATFORM_INSTANCES} at every step"),
            ));
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(ConfigError::new(
                "arrival_rate",
                format!("must be above 0, not {}", self.rate),
            ));
        }
        if let KeyDistribution::Zipf(s) = self.distribution
            && !(s.is_finite() && s > 0.0)
        {
            return Err(ConfigError::new(
                "zipf_s",
                format!("must be above 0, not {s}"),
            ));
        }
        if self.key_limit.burst == 0 || self.platform_limit.is_some_and(|p| p.burst == 0) {
            return Err(ConfigError::new("burst", "must be at least 1"));
        }
        Ok(())
    }

    /// Runs every lane over the trace, in memory.
    pub fn run(&self) -> Result<PlatformReport, RunError> {
        self.run_on(&MemoryStores)
    }

    /// Runs every lane over the trace, the leased and shares lanes on `stores`' store.
    ///
    /// On Redis ([`crate::RedisStores`]) the shares lane's authority is the
    /// production one (`tollgate-redis`'s shares scripts) and the leased
    /// lane's grants the production lease script, both at the virtual time
    /// supplied; the exact lane stays in memory: it is the reference every
    /// lane is judged against and would be one script call per decision
    /// (its calls are counted, not sent). The local lane makes no calls.
    pub fn run_on(&self, stores: &dyn StoreFactory) -> Result<PlatformReport, RunError> {
        let (arrivals, lanes) = self.run_lanes(stores)?;
        let exact_admitted = lanes[0].1.admitted;
        let seconds = self.duration.as_secs_f64();
        Ok(PlatformReport {
            arrivals,
            exact_admitted,
            seconds,
            lanes: lanes
                .into_iter()
                .map(|(mode, stats, script_calls)| {
                    let mut report = stats.report(mode, exact_admitted, seconds);
                    report.script_calls = script_calls;
                    report
                })
                .collect(),
        })
    }

    /// Runs every lane over the trace: the arrivals, and each lane's counts and script calls to a remote store (exact first).
    fn run_lanes(&self, stores: &dyn StoreFactory) -> Result<(u64, Vec<LaneRun>), RunError> {
        self.validate().map_err(RunError::Config)?;
        let rtt_ns = u64::try_from(self.store_rtt.as_nanos()).unwrap_or(u64::MAX);
        let most = self
            .scale
            .iter()
            .map(|s| s.1)
            .chain([self.instances])
            .max()
            .unwrap_or(1);
        let (limit, platform, start) = (self.key_limit, self.platform_limit, self.start);
        let mut lanes: Vec<(PlatformMode, Box<dyn PlatformLane + Send>, LaneStats)> = Vec::new();
        let stats = || LaneStats::new(self.keys, limit, platform, start);
        lanes.push((
            PlatformMode::Exact,
            Box::new(ExactLane::new(self.keys, limit, platform, start, rtt_ns)),
            stats(),
        ));
        for &mode in &self.modes {
            let lane: Box<dyn PlatformLane + Send> = match mode {
                PlatformMode::Exact => continue,
                PlatformMode::Leased => Box::new(
                    LeasedLane::new(
                        most,
                        self.keys,
                        limit,
                        platform,
                        self.lease_period,
                        rtt_ns,
                        stores,
                    )
                    .map_err(RunError::Config)?,
                ),
                PlatformMode::Shares => Box::new(SharesLane::new(
                    self.instances,
                    limit,
                    platform,
                    start,
                    rtt_ns,
                    self.holder,
                    stores.shares_authority(self.authority),
                )),
                PlatformMode::Local => Box::new(LocalLane::new(limit, platform, start)),
            };
            if lanes.iter().all(|l| l.0 != mode) {
                lanes.push((mode, lane, stats()));
            }
        }
        let mut trace = Trace::new(self);
        let mut arrivals = 0u64;
        let start_ns = start.as_nanos();
        // The trace in chunks: each lane decides a chunk on a thread of its
        // own while the next chunk is drawn (each lane sees every step in
        // order, so the report is the same as one lane after another).
        let mut chunk = Vec::with_capacity(CHUNK);
        let mut next = Vec::with_capacity(CHUNK);
        let mut ended = fill(&mut trace, &mut chunk, &mut arrivals);
        while !chunk.is_empty() {
            let steps = &chunk;
            std::thread::scope(|scope| {
                for (_, lane, stats) in &mut lanes {
                    scope.spawn(move || {
                        for &step in steps {
                            match step {
                                Step::Scale(at, n) => {
                                    lane.scale(Timestamp::from_nanos(start_ns + at), n, stats)
                                }
                                Step::Arrive(arrival) => lane.decide(
                                    arrival,
                                    Timestamp::from_nanos(start_ns + arrival.at_ns),
                                    stats,
                                ),
                            }
                        }
                    });
                }
                next.clear();
                if !ended {
                    ended = fill(&mut trace, &mut next, &mut arrivals);
                }
            });
            std::mem::swap(&mut chunk, &mut next);
        }
        let end = start.saturating_add(self.duration);
        for (_, lane, stats) in &mut lanes {
            lane.finish(end, stats);
        }
        if let Some(failure) = lanes.iter().find_map(|(_, lane, _)| lane.failure()) {
            return Err(RunError::Store(failure));
        }
        let remote = stores.is_remote();
        Ok((
            arrivals,
            lanes
                .into_iter()
                .map(|(mode, lane, stats)| {
                    let script_calls =
                        (remote && mode != PlatformMode::Exact && mode != PlatformMode::Local)
                            .then(|| lane.store_calls());
                    (mode, stats, script_calls)
                })
                .collect(),
        ))
    }
}
