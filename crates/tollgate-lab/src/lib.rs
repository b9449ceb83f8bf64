//! The Tollgate simulator: algorithms, traffic profiles, virtual time.
//!
//! Must not know (the README's layout table): the proxy, the command line, the system clock.
//!
//! A [`Scenario`] sends one arrival trace (a [`Traffic`] profile or a
//! [`Replay`] of recorded timestamps) through one or more [`Lane`]s at once —
//! algorithms side by side, or a fleet of sidecars with local limits against
//! one global limit — over several clients' keys, and reports per-tick
//! aggregates, sampled decisions and an [`Expectation`] computed from the
//! parameters alone. Decisions go through a [`StoreFactory`]'s stores: the
//! real in-memory store ([`MemoryStores`]) by default, or (feature `redis`)
//! the production Lua script on a real Redis (`RedisStores`), driven by the
//! same virtual time.
//!
//! A [`Simulation`] is the one-lane, one-key scenario: the arrivals of a
//! [`Traffic`] profile through a real [`tollgate_store::MemoryStore`] at
//! virtual timestamps (nanoseconds from a fixed start, no clock is read),
//! reporting every [`DecisionRecord`] to a callback and a [`Summary`] at
//! the end. A run is a pure function of its parameters and seed: the same
//! simulation always produces the same records.
//!
//! An [`AlgorithmSpec`] and a [`TrafficSpec`] name an algorithm and a
//! profile with their parameters, as `tollgate simulate`'s flags and the web
//! lab's query give them, and build them with one set of checks.
//!
//! ```
//! use std::time::Duration;
//! use tollgate_core::TokenBucket;
//! use tollgate_lab::{Simulation, Traffic};
//!
//! let bucket = TokenBucket::new(5, 2, Duration::from_secs(1)).unwrap();
//! let simulation = Simulation::new(bucket, Traffic::steady(10.0).unwrap(), Duration::from_secs(10));
//! let summary = simulation.run(|_record| {}).unwrap();
//! assert_eq!((summary.arrivals, summary.admitted), (100, 24));
//! ```

#![forbid(unsafe_code)]

mod admitted_window;
mod algorithm;
mod record;
#[cfg(feature = "redis")]
mod redis_shares;
#[cfg(feature = "redis")]
mod redis_store;
mod scenario;
mod simulation;
mod spec_error;
mod store;
mod traffic;
#[cfg(feature = "web")]
pub mod web;

pub use algorithm::{AlgorithmName, AlgorithmSpec};
pub use record::{DecisionRecord, state_level_meaning};
#[cfg(feature = "redis")]
pub use redis_store::{LAB_CALL_TIMEOUT, LAB_KEY_TTL, RedisStores};
pub use scenario::{
    ClientBehavior, Counts, Expectation, IN_MEMORY, KeyDistribution, Lane, LaneDecision,
    LaneReport, LaneTick, MAX_ARRIVALS, MAX_CLIENTS, MAX_LANES, MAX_PLATFORM_INSTANCES,
    MAX_PLATFORM_KEYS, MAX_RETRIES, MAX_SAMPLES_PER_TICK, MAX_SIDECARS, MAX_TICKS, Placement,
    PlatformLaneReport, PlatformMode, PlatformReport, PlatformScenario, PlatformSummary, RunError,
    RunReport, Runner, SampledDecision, Scenario, SharesAuthority, Tick, parse_scale_step,
    storm_lanes,
};
pub use simulation::{Simulation, Summary};
pub use spec_error::SpecError;
pub use store::{MemoryStores, SimulatedStore, StoreFactory};
pub use traffic::{ArrivalSource, Arrivals, MAX_RATE, Replay, Traffic, TrafficName, TrafficSpec};
