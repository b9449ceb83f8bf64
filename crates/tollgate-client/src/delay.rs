//! [`ExponentialBackoff`]: exponential backoff with full jitter, added on top of what the server asked for.
//!
//! Retry `n` (counting from 0) waits
//!
//! ```text
//! delay(n) = server_wait + U(0, min(max, base · 2ⁿ))
//! ```
//!
//! where `U(0, c)` is uniform on `[0, c]` (AWS's "full jitter") and
//! `server_wait` is the `Retry-After` of the answer (zero without one). So a
//! retry is **never earlier than the server said**. It is
//! [`RetryJitter::Additive`](crate::RetryJitter::Additive), and the default
//! [`RetryJitter`](crate::RetryJitter)'s fallback when the server gave no
//! wait. Added to a long wait it spreads clients over a second at most, so
//! clients told the same `Retry-After` still come back as a wave; the
//! proportional jitter spreads them over the wait itself. The jitter comes from `rand`.

use std::time::Duration;

use rand::Rng;

/// Exponential backoff with full jitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExponentialBackoff {
    /// The cap of the first retry's jitter.
    pub base: Duration,
    /// The largest jitter cap, however many retries.
    pub max: Duration,
}

impl Default for ExponentialBackoff {
    /// 100 ms doubling up to 10 s.
    fn default() -> Self {
        ExponentialBackoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }
}

impl ExponentialBackoff {
    /// Jitter up to `base` on the first retry, doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        ExponentialBackoff { base, max }
    }

    /// The jitter cap of retry `retry` (from 0): `min(max, base · 2^retry)`.
    pub fn cap(&self, retry: u32) -> Duration {
        self.base
            .saturating_mul(1u32 << retry.min(31))
            .min(self.max.max(self.base))
    }

    /// The wait before retry `retry` after a server asked for `server_wait`.
    pub fn delay(&self, retry: u32, server_wait: Duration, rng: &mut impl Rng) -> Duration {
        let cap = u64::try_from(self.cap(retry).as_nanos()).unwrap_or(u64::MAX);
        server_wait.saturating_add(Duration::from_nanos(rng.random_range(0..=cap)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn the_cap_doubles_up_to_the_max() {
        let b = ExponentialBackoff::default();
        let caps: Vec<u64> = (0..9).map(|n| b.cap(n).as_millis() as u64).collect();
        assert_eq!(caps, [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        assert_eq!(b.cap(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn a_delay_is_never_below_the_server_wait_nor_above_it_plus_the_cap() {
        let b = ExponentialBackoff::default();
        let mut rng = SmallRng::seed_from_u64(7);
        let wait = Duration::from_secs(3);
        let (mut low, mut high) = (Duration::MAX, Duration::ZERO);
        for _ in 0..2_000 {
            let d = b.delay(2, wait, &mut rng);
            assert!(d >= wait && d <= wait + b.cap(2), "{d:?}");
            low = low.min(d);
            high = high.max(d);
        }
        // Full jitter: the draws cover the whole range, not a narrow band.
        assert!(low < wait + Duration::from_millis(20), "{low:?}");
        assert!(high > wait + Duration::from_millis(380), "{high:?}");
    }
}
