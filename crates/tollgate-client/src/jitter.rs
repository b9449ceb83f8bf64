//! [`RetryJitter`]: how long a retry waits after the server asked for `T`, so that clients told the same wait do not come back together.
//!
//! A server that refuses a herd tells each client when its window reopens,
//! so the waits `T` of one herd all end at the same instant. Adding a few
//! hundred milliseconds to a 10 s wait moves the herd, it does not spread
//! it: they all return in the first second of the next window and most are
//! refused again, a bigger wave each time. Spreading a wait **in proportion
//! to it** spreads the herd over as long as it was told to wait:
//!
//! ```text
//! Proportional (the default):  delay(n) = T · U(1, 1 + spread)     spread = 1: [T, 2T]
//! Additive:                    delay(n) = T + U(0, min(max, base · 2ⁿ))
//! ```
//!
//! `U(a, b)` is a uniform draw from `rand`. Either way a retry is **never
//! earlier than `T`**. Without a server wait (`T = 0`, a 503 without
//! `Retry-After`) the proportional jitter has nothing to scale and falls back
//! to its exponential backoff with full jitter, `U(0, min(max, base · 2ⁿ))`.
//!
//! The spread was chosen by measuring the lab's retry storm (docs/lab.md,
//! `cargo run -p tollgate-lab --example retry_storm`).

use std::time::Duration;

use rand::Rng;

use crate::delay::ExponentialBackoff;

/// How a retry's wait is drawn from the server's wait (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum RetryJitter {
    /// `T · U(1, 1 + spread)`; without a server wait, `fallback`'s full jitter.
    Proportional {
        /// The largest extra wait as a fraction of the server's (1.0: up to `2T`).
        spread: f64,
        /// The backoff when the server gave no wait.
        fallback: ExponentialBackoff,
    },
    /// `T + U(0, min(max, base · 2ⁿ))`: exponential backoff with full jitter on top of the server's wait.
    Additive(ExponentialBackoff),
}

impl Default for RetryJitter {
    /// Proportional with spread 1: a wait of `T` returns over `[T, 2T]`.
    fn default() -> Self {
        RetryJitter::proportional(RetryJitter::DEFAULT_SPREAD)
    }
}

impl RetryJitter {
    /// The default proportional spread: a wait of `T` returns over `[T, 2T]`.
    pub const DEFAULT_SPREAD: f64 = 1.0;
    /// The largest spread [`RetryJitter::proportional`] takes.
    pub const MAX_SPREAD: f64 = 10.0;

    /// `T · U(1, 1 + spread)`, with the default exponential backoff when
    /// there is no server wait. A spread that is not a number is taken as
    /// the default; it is clamped to `0..=MAX_SPREAD`.
    pub fn proportional(spread: f64) -> Self {
        let spread = if spread.is_nan() {
            Self::DEFAULT_SPREAD
        } else {
            spread.clamp(0.0, Self::MAX_SPREAD)
        };
        RetryJitter::Proportional {
            spread,
            fallback: ExponentialBackoff::default(),
        }
    }

    /// `T + U(0, min(max, base · 2ⁿ))`: the additive full jitter.
    pub fn additive(backoff: ExponentialBackoff) -> Self {
        RetryJitter::Additive(backoff)
    }

    /// The wait before retry `retry` (from 0) after a server asked for `server_wait`.
    pub fn delay(&self, retry: u32, server_wait: Duration, rng: &mut impl Rng) -> Duration {
        match *self {
            RetryJitter::Additive(backoff) => backoff.delay(retry, server_wait, rng),
            RetryJitter::Proportional { fallback, .. } if server_wait.is_zero() => {
                fallback.delay(retry, Duration::ZERO, rng)
            }
            RetryJitter::Proportional { spread, .. } => {
                let factor = rng.random_range(1.0..=1.0 + spread);
                Duration::try_from_secs_f64(server_wait.as_secs_f64() * factor)
                    .unwrap_or(Duration::MAX)
                    .max(server_wait)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn a_proportional_wait_covers_t_to_2t_and_never_returns_early() {
        let jitter = RetryJitter::default();
        let mut rng = SmallRng::seed_from_u64(3);
        let wait = Duration::from_secs(10);
        let draws: Vec<Duration> = (0..2_000)
            .map(|n| jitter.delay(n % 6, wait, &mut rng))
            .collect();
        assert!(draws.iter().all(|d| *d >= wait && *d <= 2 * wait));
        // Spread over the whole range, not bunched at T: each tenth of it gets a share.
        for tenth in 0..10 {
            let low = wait + wait * tenth / 10;
            let high = low + wait / 10;
            let n = draws.iter().filter(|d| **d >= low && **d < high).count();
            assert!(n > 120, "{n} draws in [{low:?}, {high:?})");
        }
    }

    #[test]
    fn without_a_server_wait_the_proportional_jitter_backs_off_exponentially() {
        let jitter = RetryJitter::default();
        let mut rng = SmallRng::seed_from_u64(4);
        let backoff = ExponentialBackoff::default();
        for retry in 0..8 {
            let d = jitter.delay(retry, Duration::ZERO, &mut rng);
            assert!(d <= backoff.cap(retry), "retry {retry}: {d:?}");
        }
        assert!((0..50).any(|_| !jitter.delay(3, Duration::ZERO, &mut rng).is_zero()));
    }

    #[test]
    fn the_additive_option_keeps_the_old_formula_and_spreads_are_clamped() {
        let backoff = ExponentialBackoff::default();
        let jitter = RetryJitter::additive(backoff);
        let mut rng = SmallRng::seed_from_u64(5);
        let wait = Duration::from_secs(10);
        for _ in 0..500 {
            let d = jitter.delay(0, wait, &mut rng);
            assert!(d >= wait && d <= wait + backoff.cap(0), "{d:?}");
        }
        let huge = RetryJitter::proportional(f64::INFINITY);
        assert!(
            matches!(huge, RetryJitter::Proportional { spread, .. } if spread == RetryJitter::MAX_SPREAD)
        );
        let none = RetryJitter::proportional(-1.0);
        assert_eq!(none.delay(0, wait, &mut rng), wait);
        assert_eq!(RetryJitter::proportional(f64::NAN), RetryJitter::default());
        // A huge wait saturates instead of panicking.
        assert_eq!(
            RetryJitter::default().delay(0, Duration::MAX, &mut rng),
            Duration::MAX
        );
    }
}
