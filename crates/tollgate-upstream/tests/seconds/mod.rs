//! Short durations for the tests' manual clocks.

use std::time::Duration;

/// `s` seconds.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
