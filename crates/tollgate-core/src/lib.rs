//! Tollgate's rate-limiting algorithms as pure state machines over an injected clock.
//!
//! Must not know (the README's layout table): storage, sockets, config files, the system clock (clippy bans reading it outside `clock.rs`).
//!
//! Every algorithm here is a function of `(state, now, cost)` to
//! `(Decision, new state)`. None of them reads a clock, touches a lock or
//! knows where its state is kept: the caller (an in-memory store, a Redis
//! script, the simulator) hands in the current state and the time from a
//! [`Clock`], and stores the new state if there is one. That keeps the
//! semantics in one place and lets every store decide exactly alike.
//!
//! * [`TokenBucket`] — Envoy `local_ratelimit` semantics: starts full,
//!   continuous refill, whole tokens.
//! * [`Gcra`] — the generic cell rate algorithm: a rate and a burst.
//! * [`LeakyBucket`] — nginx `limit_req`: a policer that rejects over the
//!   burst, or a shaper that delays (`nodelay`, `delay=N`).
//! * [`FixedWindow`] — epoch-aligned windows with envoyproxy/ratelimit's
//!   counting.
//! * [`SlidingWindow`] — the sliding window counter (current + previous
//!   window, weighted by overlap).
//! * [`SlidingLog`] — the exact sliding log.
//!
//! [`lease`] holds the allocator of quota leases (units a fleet instance
//! takes from a shared budget ahead of use and spends locally); [`share`]
//! the share protocol (a key's bucket split between instances by demand,
//! decided locally, rebalanced in batched calls).
//!
//! Beside the algorithms, [`breaker::CircuitBreaker`] is the one circuit
//! breaker state machine (closed, open with doubling backoff, half-open
//! probes) that the upstream clusters and the Redis store both run.
//!
//! The first five keep their whole state in one `u64` ([`WordAlgorithm`]), so
//! a store can update it with a single compare-and-swap; the log keeps up to
//! `limit` timestamps per key.

#![forbid(unsafe_code)]

pub mod breaker;
pub mod clock;
mod decision;
pub mod duration;
mod error;
pub mod fair_share;
mod fixed_window;
pub mod lease;
mod rate;
pub mod share;
mod sliding_log;
mod sliding_window;
mod unit;
mod window;
mod word;

pub use clock::{Clock, CoarseClock, ManualClock, MonotonicClock, Timestamp, WallClock};
pub use decision::{Decision, Outcome};
pub use error::ConfigError;
pub use fixed_window::FixedWindow;
pub use rate::{DelayMode, Gcra, LeakyBucket, TokenBucket};
pub use sliding_log::{LogState, SlidingLog};
pub use sliding_window::SlidingWindow;
pub use unit::Unit;
pub use word::{AnyAlgorithm, AnyWordAlgorithm, RESERVED_STATE, WordAlgorithm};

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;
