//! A scenario: one arrival trace through one or more lanes (algorithms, fleets), tick by tick.
//!
//! A [`Scenario`] sends the same arrivals through several [`Lane`]s at once —
//! to compare algorithms on one trace, or a fleet of sidecars with local
//! buckets against one global bucket, against instances leasing from one
//! global store (`leased`) and against Envoys sharing it by the rate limit
//! quota protocol (`quota`) — spreads them over several clients
//! (each its own key), and reports aggregates per tick of virtual time as it
//! goes. A [`crate::Simulation`] is the one-lane, one-key case.
//!
//! The parameters live in `model`, the tick-by-tick run in `runner`, what a
//! run reports in `report`, and the figures computed from the parameters
//! alone in `expectation`.

mod clients;
mod expectation;
mod hash;
mod leased;
mod model;
mod platform;
mod quota;
mod report;
mod runner;
#[cfg(test)]
mod tests;

pub use expectation::Expectation;
pub use model::{
    ClientBehavior, Lane, MAX_ARRIVALS, MAX_CLIENTS, MAX_LANES, MAX_RETRIES, MAX_SAMPLES_PER_TICK,
    MAX_SIDECARS, MAX_TICKS, Placement, Scenario, storm_lanes,
};
pub use platform::{
    IN_MEMORY, KeyDistribution, MAX_PLATFORM_INSTANCES, MAX_PLATFORM_KEYS, PlatformLaneReport,
    PlatformMode, PlatformReport, PlatformScenario, PlatformSummary, SharesAuthority,
    parse_scale_step,
};
pub use report::{
    Counts, LaneDecision, LaneReport, LaneTick, RunError, RunReport, SampledDecision, Tick,
};
pub use runner::Runner;
