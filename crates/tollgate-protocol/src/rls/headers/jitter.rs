//! [`Jitter`]: the random upward jitter of `Retry-After`, seedable for tests.

use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// The source of `Retry-After` jitter: a small fast generator behind a lock, shared by all calls.
#[derive(Debug)]
pub struct Jitter {
    rng: Mutex<SmallRng>,
}

impl Jitter {
    /// A sequence starting from `seed`: the same seed gives the same jitters in the same order.
    pub fn seeded(seed: u64) -> Self {
        Jitter {
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
        }
    }

    /// A sequence seeded from the operating system.
    pub fn random() -> Self {
        Jitter {
            rng: Mutex::new(SmallRng::from_os_rng()),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        self.rng.lock().next_u64()
    }

    /// A jitter uniform (to the nanosecond) in `[0, max]`.
    pub fn sample(&self, max: Duration) -> Duration {
        let max_ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if max_ns == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.rng.lock().random_range(0..=max_ns))
    }
}
