//! Table-driven tests of every algorithm through a `Limiter` on the manual clock.
//!
//! Each table is a worked example computed by hand: the clock moves by the
//! given step, a request of the given cost arrives on one key, and the
//! decision must match exactly (outcome, remaining, retry-after, delay).

use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, Clock, DelayMode, FixedWindow, Gcra, LeakyBucket, ManualClock, Outcome,
    SlidingLog, SlidingWindow, Timestamp, TokenBucket,
};
use tollgate_store::{Limiter, StoreConfig};

/// One row: move the clock by `advance_ms`, send `cost`, expect the rest.
struct Step {
    advance_ms: u64,
    cost: u64,
    outcome: Outcome,
    remaining: u64,
    /// Retry-after (denied) or delay (allowed), in nanoseconds.
    wait_ns: u64,
}

/// Nanoseconds in a millisecond, for the wait column.
const MS: u64 = 1_000_000;

const fn step(advance_ms: u64, cost: u64, outcome: Outcome, remaining: u64, wait_ns: u64) -> Step {
    Step {
        advance_ms,
        cost,
        outcome,
        remaining,
        wait_ns,
    }
}

use Outcome::{Allowed as A, Denied as D, Exceeds as X};

/// Runs `steps` against `algorithm` on key "client", starting at `start`.
fn run(name: &str, algorithm: impl Into<AnyAlgorithm>, start: Timestamp, steps: &[Step]) {
    let clock = ManualClock::new(start);
    let limiter = Limiter::new(algorithm, StoreConfig::with_max_keys(16), clock.clone());
    for (i, s) in steps.iter().enumerate() {
        clock.advance(Duration::from_millis(s.advance_ms));
        let d = limiter.check("client", s.cost);
        let wait = match d.outcome() {
            Outcome::Denied => d.retry_after_nanos(),
            _ => d.delay_nanos(),
        };
        assert_eq!(
            (d.outcome(), d.remaining(), wait),
            (s.outcome, s.remaining, s.wait_ns),
            "{name}, row {i} at {:?} after start",
            clock.now().saturating_since(start)
        );
    }
}

/// A minute boundary, so epoch-aligned windows start exactly here.
const MINUTE: Timestamp = Timestamp::from_secs(1_700_000_040);

#[test]
fn token_bucket_of_5_filling_at_2_per_second() {
    let bucket = TokenBucket::new(5, 2, Duration::from_secs(1)).unwrap();
    run(
        "token bucket",
        bucket,
        MINUTE,
        &[
            step(0, 1, A, 4, 0),
            step(0, 4, A, 0, 0),
            step(0, 1, D, 0, 500 * MS),
            step(499, 1, D, 0, MS),
            step(1, 1, A, 0, 0),
            step(500, 2, D, 1, 500 * MS),
            step(500, 2, A, 0, 0),
            step(0, 6, X, 0, 0),
            step(10_000, 0, A, 5, 0),
        ],
    );
}

#[test]
fn gcra_10_per_second_burst_3() {
    let gcra = Gcra::new(10, Duration::from_secs(1), 3).unwrap();
    run(
        "gcra",
        gcra,
        MINUTE,
        &[
            step(0, 1, A, 2, 0),
            step(0, 1, A, 1, 0),
            step(0, 1, A, 0, 0),
            step(0, 1, D, 0, 100 * MS),
            step(60, 1, D, 0, 40 * MS),
            step(40, 1, A, 0, 0),
            step(300, 3, A, 0, 0),
        ],
    );
}

#[test]
fn leaky_bucket_shaper_like_nginx_rate_10_burst_5() {
    let shaper = LeakyBucket::new(10, Duration::from_secs(1), 5, DelayMode::Delay).unwrap();
    run(
        "leaky shaper",
        shaper,
        MINUTE,
        &[
            step(0, 1, A, 5, 0),
            step(0, 1, A, 4, 100 * MS),
            step(0, 1, A, 3, 200 * MS),
            step(0, 1, A, 2, 300 * MS),
            step(0, 1, A, 1, 400 * MS),
            step(0, 1, A, 0, 500 * MS),
            step(0, 1, D, 0, 100 * MS),
            step(100, 1, A, 0, 500 * MS),
        ],
    );
    let policer = LeakyBucket::policer(10, Duration::from_secs(1), 0).unwrap();
    run(
        "leaky policer",
        policer,
        MINUTE,
        &[
            step(0, 1, A, 0, 0),
            step(50, 1, D, 0, 50 * MS),
            step(50, 1, A, 0, 0),
        ],
    );
}

#[test]
fn fixed_window_3_per_minute_counts_denials() {
    let window = FixedWindow::new(3, Duration::from_secs(60)).unwrap();
    run(
        "fixed window",
        window,
        MINUTE.saturating_add(Duration::from_secs(40)),
        &[
            step(0, 1, A, 2, 0),
            step(1_000, 1, A, 1, 0),
            step(1_000, 1, A, 0, 0),
            step(1_000, 1, D, 0, 17_000 * MS),
            step(1_000, 0, D, 0, 16_000 * MS),
            // The next minute starts from zero.
            step(16_000, 1, A, 2, 0),
        ],
    );
}

#[test]
fn sliding_window_counter_weights_the_previous_minute() {
    let window = SlidingWindow::new(100, Duration::from_secs(60)).unwrap();
    run(
        "sliding window",
        window,
        MINUTE.saturating_add(Duration::from_secs(30)),
        &[
            step(0, 84, A, 16, 0),
            // 44.5 s into the next minute: 84 × 45.5/60 + 36 = 99.7.
            step(44_500, 36, A, 0, 0),
            // 15 s in: 84 × 45/60 + 36 = 99, room for exactly one more.
            step(500, 1, A, 0, 0),
            // Room again once 84 × (60 − e)/60 ≤ 62: e ≥ 15.714285715 s.
            step(0, 1, D, 0, 714_285_715),
        ],
    );
}

#[test]
fn sliding_log_3_per_10_seconds() {
    let log = SlidingLog::new(3, Duration::from_secs(10)).unwrap();
    run(
        "sliding log",
        log,
        MINUTE,
        &[
            step(0, 1, A, 2, 0),
            step(1_000, 1, A, 1, 0),
            step(1_000, 1, A, 0, 0),
            step(1_000, 1, D, 0, 7_000 * MS),
            step(6_999, 1, D, 0, MS),
            step(1, 1, A, 0, 0),
            step(0, 4, X, 0, 0),
        ],
    );
}
