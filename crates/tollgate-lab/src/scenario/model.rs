//! A scenario's parameters: the arrivals, the lanes they go through, the run's length and ticks.

use std::time::Duration;

use serde::Serialize;
use tollgate_core::{AnyAlgorithm, ConfigError, NANOS_PER_SEC, Timestamp};

use super::{Expectation, LaneDecision, RunError, RunReport, Runner, Tick};
use crate::store::StoreFactory;
use crate::traffic::ArrivalSource;

/// The most clients (keys) a scenario spreads its arrivals over.
pub const MAX_CLIENTS: u32 = 1_000;

/// The most sidecars a fleet lane may have.
pub const MAX_SIDECARS: u32 = 15;

/// The most times a lane's clients retry one request.
pub const MAX_RETRIES: u32 = 20;

/// The most lanes one scenario runs side by side.
pub const MAX_LANES: usize = 8;

/// The most ticks one scenario reports.
pub const MAX_TICKS: u64 = 100_000;

/// The most decisions a tick samples per lane.
pub const MAX_SAMPLES_PER_TICK: usize = 64;

/// The most arrivals one run may be asked to simulate (about 10–20 s of work in release).
pub const MAX_ARRIVALS: u64 = 100_000_000;

/// Virtual time never runs past this (2^63 ns after the epoch, in the year 2262),
/// which keeps every algorithm's timestamp arithmetic far from overflow.
const LAST_INSTANT_NS: u64 = 1 << 63;

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
    /// `instances` instances behind a round-robin balancer sharing one
    /// store, each taking quota leases from it for `period_ns` and spending
    /// them locally (`tollgate serve --lease-period`), as the server
    /// decides (one lease ledger per key, the quick-deny cache, the exact path).
    Leased {
        /// How many instances (1 to [`MAX_SIDECARS`]).
        instances: u32,
        /// The lease period, in nanoseconds (above 0).
        period_ns: u64,
    },
    /// `envoys` Envoys with the rate limit quota filter: each enforces its
    /// share of the limit locally and reports usage every `report_ns`,
    /// after which the shares are split again by demand.
    Quota {
        /// How many Envoys (1 to [`MAX_SIDECARS`]).
        envoys: u32,
        /// The report interval, in nanoseconds (above 0).
        report_ns: u64,
        /// Requests per thousand that go to the first Envoy; the rest round robin over all.
        hot_permille: u32,
    },
}

impl Placement {
    /// How many stores the placement holds.
    pub fn stores(&self) -> u32 {
        match self {
            Placement::Global => 1,
            Placement::Local { sidecars } => *sidecars,
            Placement::Leased { .. } => 1,
            // The Envoys decide alone; the store is kept for the state line only.
            Placement::Quota { .. } => 1,
        }
    }
}

/// What a lane's clients do with a refused request (429): the other side of the limit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ClientBehavior {
    /// Each request is sent once, whatever the answer (the default).
    Once,
    /// A refused request is sent again after `delay_ns` (about a round
    /// trip), ignoring `Retry-After`, up to `max_retries` times.
    RetryAtOnce {
        /// Retries of one request, at most.
        max_retries: u32,
        /// The wait before each retry, in nanoseconds.
        delay_ns: u64,
    },
    /// A refused request waits as `tollgate-client` does by default: its
    /// `Retry-After` `T` spread over `[T, 2T]`, and, once the limit says
    /// nothing remains, no faster than the limit admits until a window after
    /// the reset (the client's pacer); then it is sent again, up to
    /// `max_retries` times.
    HonourRetryAfter {
        /// Retries of one request, at most.
        max_retries: u32,
    },
    /// A refused request waits its `Retry-After` plus the additive jitter
    /// `U(0, 100 ms · 2ⁿ)` (`tollgate-client`'s `RetryJitter::Additive`) and
    /// reads no other header: clients told the same wait come back together.
    RetryAfterPlusAdditiveJitter {
        /// Retries of one request, at most.
        max_retries: u32,
    },
    /// As [`ClientBehavior::HonourRetryAfter`], behind Google SRE's
    /// adaptive throttling (`tollgate-client`'s `AdaptiveThrottle`, two
    /// minutes of history): a new request is dropped by the client, before it
    /// reaches the limit, with probability `max(0, (requests − K·accepts) / (requests + 1))`.
    Adaptive {
        /// Retries of one request, at most.
        max_retries: u32,
        /// The throttle's `K` (2 in the book).
        k: f64,
    },
}

impl ClientBehavior {
    /// Whether refused requests come back (or clients throttle themselves).
    pub fn is_closed_loop(&self) -> bool {
        !matches!(self, ClientBehavior::Once)
    }
}

/// The retry-storm lanes (docs/lab.md, scenario 6): one limit, `algorithm`,
/// behind three kinds of clients, each retrying a refused request up to
/// `max_retries` times: at once (after `retry_delay`), after its
/// `Retry-After` with `tollgate-client`'s jitter, and the same behind adaptive
/// throttling (K = 2).
pub fn storm_lanes(algorithm: AnyAlgorithm, max_retries: u32, retry_delay: Duration) -> Vec<Lane> {
    let delay_ns = u64::try_from(retry_delay.as_nanos()).unwrap_or(u64::MAX);
    [
        (
            "retry at once",
            ClientBehavior::RetryAtOnce {
                max_retries,
                delay_ns,
            },
        ),
        (
            "Retry-After + jitter",
            ClientBehavior::HonourRetryAfter { max_retries },
        ),
        (
            "adaptive (K = 2)",
            ClientBehavior::Adaptive {
                max_retries,
                k: 2.0,
            },
        ),
    ]
    .into_iter()
    .map(|(label, clients)| Lane::global(label, algorithm).with_clients(clients))
    .collect()
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
    /// Whether a window algorithm in a global placement is judged against
    /// the exact sliding log ([`crate::LaneReport::over_admitted`]); it keeps
    /// every key's window of admissions, so a run that does not report the
    /// judgement leaves it off.
    pub judged_against_exact: bool,
    /// What the lane's clients do with a refusal.
    pub clients: ClientBehavior,
    /// A fixed window staggered per key (`stagger: true` in a limits file):
    /// each client's windows start at its own offset.
    pub stagger: bool,
}

impl Lane {
    /// A lane keeping `algorithm` in one global store.
    pub fn global(label: impl Into<String>, algorithm: impl Into<AnyAlgorithm>) -> Self {
        Lane {
            label: label.into(),
            algorithm: algorithm.into(),
            placement: Placement::Global,
            judged_against_exact: true,
            clients: ClientBehavior::Once,
            stagger: false,
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
            judged_against_exact: true,
            clients: ClientBehavior::Once,
            stagger: false,
        }
    }

    /// A lane whose `instances` lease `algorithm`'s budget from one shared store for `period`.
    pub fn leased(
        label: impl Into<String>,
        algorithm: impl Into<AnyAlgorithm>,
        instances: u32,
        period: Duration,
    ) -> Self {
        Lane {
            label: label.into(),
            algorithm: algorithm.into(),
            placement: Placement::Leased {
                instances,
                period_ns: u64::try_from(period.as_nanos()).unwrap_or(u64::MAX),
            },
            judged_against_exact: true,
            clients: ClientBehavior::Once,
            stagger: false,
        }
    }

    /// This lane with clients that treat a refusal as `clients` says.
    pub fn with_clients(mut self, clients: ClientBehavior) -> Self {
        self.clients = clients;
        self
    }

    /// A lane of `envoys` Envoys sharing `algorithm`'s limit by the rate limit quota protocol.
    pub fn quota(
        label: impl Into<String>,
        algorithm: impl Into<AnyAlgorithm>,
        envoys: u32,
        report: Duration,
        hot_permille: u32,
    ) -> Self {
        Lane {
            placement: Placement::Quota {
                envoys,
                report_ns: u64::try_from(report.as_nanos()).unwrap_or(u64::MAX),
                hot_permille,
            },
            ..Lane::global(label, algorithm)
        }
    }

    /// This lane's fixed windows staggered per key, as `stagger: true` does in a limits file.
    pub fn staggered(mut self) -> Self {
        self.stagger = true;
        self
    }

    /// This lane without the judgement against the exact log.
    pub fn unjudged(mut self) -> Self {
        self.judged_against_exact = false;
        self
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

    /// The default start: 1 700 000 000 s after the Unix epoch (14 Nov 2023, 22:13:20 UTC).
    ///
    /// It is 20 s into an epoch-aligned minute, so fixed and sliding windows
    /// start part-way through a window, as they do in production.
    pub const DEFAULT_START: Timestamp = Timestamp::from_secs(1_700_000_000);

    /// A scenario of `source` for `duration` through `lanes`: seed 1, cost 1,
    /// one client, 100 ms ticks, 4 samples per tick, the default start.
    pub fn new(source: impl Into<ArrivalSource>, duration: Duration, lanes: Vec<Lane>) -> Self {
        Scenario {
            source: source.into(),
            duration,
            seed: 1,
            cost: 1,
            start: Self::DEFAULT_START,
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
            if lane.stagger
                && !matches!(
                    lane.algorithm,
                    AnyAlgorithm::Word(tollgate_core::AnyWordAlgorithm::FixedWindow(_))
                )
            {
                return Err(ConfigError::new(
                    "stagger",
                    "staggers fixed windows only; choose the fixed window",
                ));
            }
            match lane.clients {
                ClientBehavior::Once => {}
                ClientBehavior::RetryAtOnce { max_retries, .. }
                | ClientBehavior::HonourRetryAfter { max_retries }
                | ClientBehavior::RetryAfterPlusAdditiveJitter { max_retries }
                | ClientBehavior::Adaptive { max_retries, .. }
                    if max_retries > MAX_RETRIES =>
                {
                    return Err(ConfigError::new(
                        "max_retries",
                        format!(
                            "{max_retries} is more than the {MAX_RETRIES} retries a client makes"
                        ),
                    ));
                }
                ClientBehavior::Adaptive { k, .. } if !(k.is_finite() && k > 0.0) => {
                    return Err(ConfigError::new(
                        "k",
                        format!("{k} is not a number above 0"),
                    ));
                }
                _ => {}
            }
            if let Placement::Quota {
                envoys,
                report_ns,
                hot_permille,
            } = lane.placement
            {
                if !(1..=MAX_SIDECARS).contains(&envoys) {
                    return Err(ConfigError::new(
                        "envoys",
                        format!("{envoys} is not between 1 and {MAX_SIDECARS}"),
                    ));
                }
                if report_ns == 0 {
                    return Err(ConfigError::new("report_interval", "must be above 0"));
                }
                if hot_permille > 1000 {
                    return Err(ConfigError::new(
                        "hot_share",
                        format!("{hot_permille}‰ is more than all of the requests"),
                    ));
                }
            }
            if let Placement::Leased {
                instances,
                period_ns,
            } = lane.placement
            {
                if !(1..=MAX_SIDECARS).contains(&instances) {
                    return Err(ConfigError::new(
                        "instances",
                        format!("{instances} is not between 1 and {MAX_SIDECARS}"),
                    ));
                }
                if period_ns == 0 {
                    return Err(ConfigError::new("lease_period", "must be above 0"));
                }
            }
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
        self.validate_time()?;
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

    /// Checks the cost, the start and the duration against the end of virtual time.
    fn validate_time(&self) -> Result<(), ConfigError> {
        if self.cost == 0 {
            return Err(ConfigError::new(
                "cost",
                "must be at least 1; a cost of 0 only checks and never consumes",
            ));
        }
        if self.start.as_nanos() >= LAST_INSTANT_NS {
            return Err(ConfigError::new(
                "start",
                format!(
                    "{} s after the epoch is past the year 2262, the end of virtual time",
                    self.start.as_nanos() / NANOS_PER_SEC
                ),
            ));
        }
        if self.duration.is_zero() {
            return Err(ConfigError::new("duration", "must be longer than zero"));
        }
        let end = u64::try_from(self.duration.as_nanos())
            .ok()
            .and_then(|d| self.start.as_nanos().checked_add(d));
        if end.is_none_or(|end| end > LAST_INSTANT_NS) {
            return Err(ConfigError::new(
                "duration",
                format!(
                    "{:?} from a start {} s after the epoch runs past the year 2262",
                    self.duration,
                    self.start.as_nanos() / NANOS_PER_SEC
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
        Ok(Runner::new(self, stores))
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
