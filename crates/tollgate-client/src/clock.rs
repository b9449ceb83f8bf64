//! [`TokioClock`]: the client's clock is tokio's, the one its sleeps run on.
//!
//! The client decides (pacing, breaker, adaptive throttling) on timestamps
//! and then sleeps with `tokio::time::sleep`. Both must read the same clock,
//! or a test on paused time (`#[tokio::test(start_paused = true)]`) would
//! see sleeps jump ahead while decisions stand still. Any other
//! [`Clock`] can be injected instead.

use tokio::time::Instant;
use tollgate_core::{Clock, Timestamp};

/// Tokio's clock as a [`Clock`]: the time since it was created, counted from the Unix epoch.
///
/// Only differences of its readings mean anything; it follows tokio's
/// paused or auto-advanced time in tests. Create it inside a runtime.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    anchor: Instant,
}

impl TokioClock {
    /// A clock reading zero (the Unix epoch) now.
    #[expect(
        clippy::disallowed_methods,
        reason = "the client's sleeps are tokio's; its decisions must read the same clock"
    )]
    pub fn new() -> Self {
        TokioClock {
            anchor: Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = self.anchor.elapsed();
        Timestamp::from_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
    }
}
