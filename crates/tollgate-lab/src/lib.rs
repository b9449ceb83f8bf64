//! The Tollgate simulator: one key, one algorithm, a traffic profile, virtual time.
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

mod simulation;
mod traffic;

pub use simulation::{DecisionRecord, MAX_ARRIVALS, Simulation, Summary, state_level_meaning};
pub use traffic::{Arrivals, MAX_RATE, Traffic};
