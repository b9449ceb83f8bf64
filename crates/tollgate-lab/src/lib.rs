//! The Tollgate simulator: algorithms, traffic profiles, virtual time.
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
//! A [`Simulation`] sends the arrivals of a [`Traffic`] profile through a
//! real [`tollgate_store::MemoryStore`] holding one key, at virtual
//! timestamps (nanoseconds from a fixed start, no clock is read), and
//! reports every [`DecisionRecord`] to a callback and a [`Summary`] at the
//! end. A run is a pure function of its parameters and seed: the same
//! simulation always produces the same records.
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

#[cfg(feature = "redis")]
mod redis_store;
mod scenario;
mod simulation;
mod store;
mod traffic;
#[cfg(feature = "web")]
pub mod web;

#[cfg(feature = "redis")]
pub use redis_store::{LAB_CALL_TIMEOUT, LAB_KEY_TTL, RedisStores};
pub use scenario::{
    ArrivalSource, Counts, Expectation, Lane, LaneDecision, LaneReport, LaneTick, MAX_CLIENTS,
    MAX_LANES, MAX_SAMPLES_PER_TICK, MAX_SIDECARS, MAX_TICKS, Placement, Replay, RunError,
    RunReport, Runner, SampledDecision, Scenario, Tick,
};
pub use simulation::{DecisionRecord, MAX_ARRIVALS, Simulation, Summary, state_level_meaning};
pub use store::{MemoryStores, SimulatedStore, StoreFactory};
pub use traffic::{Arrivals, MAX_RATE, Traffic};
