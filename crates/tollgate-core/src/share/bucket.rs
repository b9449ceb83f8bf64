//! The token bucket every part of the share protocol keeps: a holder's sub-bucket, the authority's pool, the conformance checker.
//!
//! Units are chosen so that refill is exact integer arithmetic: a rate is in
//! milli-tokens per second ([`Share::rate`]), a level in pico-tokens
//! ([`PICO_PER_TOKEN`]); `rate × elapsed nanoseconds` is then pico-tokens
//! with no rounding. A level never exceeds the capacity (`burst` tokens) and
//! never moves back in time (an earlier `now` than the last update is read
//! as the last update).

use crate::{AnyAlgorithm, AnyWordAlgorithm, Timestamp};

/// Pico-tokens in one token: a level's unit.
pub const PICO_PER_TOKEN: u128 = 1_000_000_000_000;

/// Milli-tokens per second in one token per second: a rate's unit.
pub const MILLI_PER_TOKEN: u64 = 1_000;

/// A part of a limit: a refill rate and a capacity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Share {
    /// Milli-tokens added per second.
    pub rate: u64,
    /// Tokens the bucket holds when full.
    pub burst: u64,
}

impl Share {
    /// Nothing: no rate, no capacity.
    pub const ZERO: Share = Share { rate: 0, burst: 0 };

    /// `tokens` tokens per second with a capacity of `burst` tokens.
    pub const fn per_second(tokens: u64, burst: u64) -> Self {
        Share {
            rate: tokens.saturating_mul(MILLI_PER_TOKEN),
            burst,
        }
    }

    /// The whole share of a token bucket or GCRA limit: its rate (rounded
    /// down to a milli-token per second) and its burst; `None` for the
    /// algorithms the share protocol does not split.
    pub fn of_algorithm(algorithm: &AnyAlgorithm) -> Option<Share> {
        let (interval, burst) = match algorithm {
            AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(b)) => {
                (b.token_interval(), b.max_tokens())
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(g)) => (g.emission_interval(), g.burst()),
            _ => return None,
        };
        let nanos = interval.as_nanos().max(1);
        let rate = u128::from(MILLI_PER_TOKEN) * 1_000_000_000 / nanos;
        Some(Share {
            rate: u64::try_from(rate).unwrap_or(u64::MAX),
            burst,
        })
    }

    /// The component-wise minimum of two shares.
    pub fn min(self, other: Share) -> Share {
        Share {
            rate: self.rate.min(other.rate),
            burst: self.burst.min(other.burst),
        }
    }

    /// Whether either component of `self` exceeds `other`'s.
    pub fn exceeds(self, other: Share) -> bool {
        self.rate > other.rate || self.burst > other.burst
    }

    /// The capacity in pico-tokens.
    pub fn capacity(self) -> u128 {
        u128::from(self.burst) * PICO_PER_TOKEN
    }
}

/// A token bucket of a [`Share`], refilled lazily.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareBucket {
    share: Share,
    /// Pico-tokens available, at most `share.capacity()`.
    level: u128,
    /// When `level` was last brought up to date.
    at: Timestamp,
}

impl ShareBucket {
    /// A bucket of `share` holding `level` pico-tokens (capped at its capacity) at `at`.
    pub fn new(share: Share, level: u128, at: Timestamp) -> Self {
        ShareBucket {
            share,
            level: level.min(share.capacity()),
            at,
        }
    }

    /// A full bucket of `share` at `at`.
    pub fn full(share: Share, at: Timestamp) -> Self {
        Self::new(share, share.capacity(), at)
    }

    /// The share in force.
    pub fn share(&self) -> Share {
        self.share
    }

    /// When the level was last brought up to date.
    pub fn at(&self) -> Timestamp {
        self.at
    }

    /// The level in pico-tokens at the last update.
    pub fn level(&self) -> u128 {
        self.level
    }

    /// Brings the level up to `now` at the current rate.
    pub fn advance(&mut self, now: Timestamp) {
        if now > self.at {
            let elapsed = u128::from(now.as_nanos() - self.at.as_nanos());
            let gained = u128::from(self.share.rate).saturating_mul(elapsed);
            self.level = self.level.saturating_add(gained).min(self.share.capacity());
            self.at = now;
        }
    }

    /// Whether `cost` tokens are available at `now` (nothing is taken).
    pub fn has(&mut self, now: Timestamp, cost: u64) -> bool {
        self.advance(now);
        self.level >= u128::from(cost) * PICO_PER_TOKEN
    }

    /// Whether the bucket is full at `now`.
    pub fn has_full(&mut self, now: Timestamp) -> bool {
        self.advance(now);
        self.level >= self.share.capacity()
    }

    /// Takes `cost` tokens at `now` if they are available; whether it did.
    pub fn try_take(&mut self, now: Timestamp, cost: u64) -> bool {
        if self.has(now, cost) {
            self.level -= u128::from(cost) * PICO_PER_TOKEN;
            true
        } else {
            false
        }
    }

    /// Takes up to `pico` pico-tokens at `now`; returns what it took.
    pub fn take_up_to(&mut self, now: Timestamp, pico: u128) -> u128 {
        self.advance(now);
        let taken = pico.min(self.level);
        self.level -= taken;
        taken
    }

    /// Adds `pico` pico-tokens (capped at the capacity) at `now`.
    pub fn add(&mut self, now: Timestamp, pico: u128) {
        self.advance(now);
        self.level = self.level.saturating_add(pico).min(self.share.capacity());
    }

    /// Puts `share` in force from `now`: the level is first brought up to
    /// `now` at the old rate, then capped at the new capacity. Returns the
    /// pico-tokens above the new capacity, which leave the bucket.
    pub fn set_share(&mut self, now: Timestamp, share: Share) -> u128 {
        self.advance(now);
        self.share = share;
        let capacity = share.capacity();
        let excess = self.level.saturating_sub(capacity);
        self.level -= excess;
        excess
    }
}

/// An exact token bucket fed only the admitted requests: every admission it
/// would have refused is counted as over-admission.
///
/// It starts full, as every limit in Tollgate does; a refused admission is
/// counted and not taken, so the count is the number of admitted requests
/// that no single exact bucket of the limit would have admitted in that
/// place.
#[derive(Clone, Debug)]
pub struct ConformanceChecker {
    bucket: ShareBucket,
    admitted: u64,
    refused: u64,
}

impl ConformanceChecker {
    /// A checker of `limit`, full at `start`.
    pub fn new(limit: Share, start: Timestamp) -> Self {
        ConformanceChecker {
            bucket: ShareBucket::full(limit, start),
            admitted: 0,
            refused: 0,
        }
    }

    /// Feeds one admitted request of `cost` decided at `at`; whether the exact bucket admits it too.
    pub fn admit(&mut self, at: Timestamp, cost: u64) -> bool {
        self.admitted += 1;
        let conforms = self.bucket.try_take(at, cost);
        if !conforms {
            self.refused += 1;
        }
        conforms
    }

    /// Admitted requests fed so far.
    pub fn admitted(&self) -> u64 {
        self.admitted
    }

    /// Admitted requests the exact bucket refused: over-admission.
    pub fn over_admitted(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_secs(1_000);

    fn at_ms(ms: u64) -> Timestamp {
        Timestamp::from_nanos(T0.as_nanos() + ms * 1_000_000)
    }

    #[test]
    fn refill_is_exact_and_capped() {
        // 3 tokens per second, capacity 2, empty at T0.
        let mut bucket = ShareBucket::new(Share::per_second(3, 2), 0, T0);
        assert!(!bucket.has(at_ms(333), 1), "0.999 tokens after 333 ms");
        assert!(bucket.try_take(at_ms(334), 1), "1.002 tokens after 334 ms");
        bucket.advance(at_ms(10_000));
        assert_eq!(bucket.level(), 2 * PICO_PER_TOKEN, "capped at the burst");
        // A time before the last update changes nothing.
        assert!(bucket.try_take(at_ms(5), 2));
        assert!(!bucket.has(at_ms(5), 1));
    }

    #[test]
    fn a_smaller_share_hands_back_the_tokens_above_its_capacity() {
        let mut bucket = ShareBucket::full(Share::per_second(10, 10), T0);
        let excess = bucket.set_share(T0, Share::per_second(4, 4));
        assert_eq!(excess, 6 * PICO_PER_TOKEN);
        assert_eq!(bucket.level(), 4 * PICO_PER_TOKEN);
    }

    #[test]
    fn token_buckets_and_gcra_have_a_share_and_windows_none() {
        let bucket =
            crate::TokenBucket::new(100, 100, std::time::Duration::from_secs(1)).expect("a bucket");
        let gcra =
            crate::Gcra::new(100, std::time::Duration::from_secs(1), 10).expect("a GCRA limit");
        let window =
            crate::FixedWindow::new(100, std::time::Duration::from_secs(1)).expect("a window");
        assert_eq!(
            Share::of_algorithm(&bucket.into()),
            Some(Share::per_second(100, 100))
        );
        assert_eq!(
            Share::of_algorithm(&gcra.into()),
            Some(Share::per_second(100, 10))
        );
        assert_eq!(Share::of_algorithm(&window.into()), None);
    }

    #[test]
    fn the_checker_counts_what_an_exact_bucket_refuses() {
        let mut checker = ConformanceChecker::new(Share::per_second(1, 2), T0);
        assert!(checker.admit(T0, 1));
        assert!(checker.admit(T0, 1));
        assert!(!checker.admit(at_ms(999), 1), "the third within a second");
        assert!(checker.admit(at_ms(1_000), 1));
        assert_eq!((checker.admitted(), checker.over_admitted()), (4, 1));
    }
}
