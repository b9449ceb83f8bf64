//! The sliding window counter: the current and previous window, weighted by overlap.

use std::time::Duration;

use crate::window::{check_limit, window_nanos};
use crate::{ConfigError, Decision, Timestamp, WordAlgorithm};

/// At most `limit` units in a window sliding over time, estimated from two
/// epoch-aligned windows.
///
/// With `prev` and `cur` the units admitted in the previous and current
/// aligned window and `e` the time elapsed in the current one, the estimate
/// of the last `window` is `prev · (window − e) / window + cur`. A request of
/// `n` passes iff `estimate + n ≤ limit` (computed exactly in integers);
/// denied requests count nothing. `remaining = ⌊limit − estimate⌋` after the
/// request; `reset_after` is the time until both windows have expired
/// (the key is fresh again); `retry_after` is the exact first instant the
/// estimate leaves room for the same request.
///
/// It assumes the previous window's requests were spread evenly, so against
/// the exact [`SlidingLog`](crate::SlidingLog) it may admit slightly more or
/// less; in exchange its state is one word.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{SlidingWindow, Timestamp, WordAlgorithm};
///
/// // 4 per minute. Four at the end of one aligned minute...
/// let limit = SlidingWindow::new(4, Duration::from_secs(60)).unwrap();
/// let mut state = 0;
/// for _ in 0..4 {
///     let (decision, next) = limit.decide(state, Timestamp::from_secs(1_700_000_035), 1);
///     assert!(decision.is_allowed());
///     state = next.unwrap();
/// }
/// // ...still weigh 3 of 4 a quarter into the next: one more fits, not two.
/// let quarter_in = Timestamp::from_secs(1_700_000_055);
/// let (fifth, next) = limit.decide(state, quarter_in, 1);
/// assert!(fifth.is_allowed());
/// assert!(!limit.decide(next.unwrap(), quarter_in, 1).0.is_allowed());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    limit: u64,
    window: u64,
    count_bits: u32,
}

/// The counts a state holds for the window containing some `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counts {
    index: u64,
    elapsed: u64,
    prev: u64,
    cur: u64,
}

impl SlidingWindow {
    /// The largest limit per window.
    pub const MAX_LIMIT: u64 = (1 << 24) - 2;

    /// At most `limit` units in any sliding `window`.
    pub fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        check_limit(limit, Self::MAX_LIMIT, "sliding window counter")?;
        let window = window_nanos(window)?;
        Ok(SlidingWindow {
            limit,
            window,
            // One spare count value keeps the state off `u64::MAX`.
            count_bits: u64::BITS - (limit + 1).leading_zeros(),
        })
    }

    /// The most units admitted in any sliding window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// The units in the previous and current aligned windows at `now`.
    pub fn counts(&self, state: u64, now: Timestamp) -> (u64, u64) {
        let c = self.counts_at(state, now.clamped_nanos());
        (c.prev, c.cur)
    }

    /// The estimate the algorithm decides on at `now`: `prev · (window − e)/window + cur`.
    pub fn estimate(&self, state: u64, now: Timestamp) -> f64 {
        let c = self.counts_at(state, now.clamped_nanos());
        self.used_scaled(&c) as f64 / self.window as f64
    }

    fn tag_mask(&self) -> u64 {
        u64::MAX >> (2 * self.count_bits)
    }

    fn count_mask(&self) -> u64 {
        (1 << self.count_bits) - 1
    }

    fn pack(&self, index: u64, prev: u64, cur: u64) -> u64 {
        ((index & self.tag_mask()) << (2 * self.count_bits)) | (prev << self.count_bits) | cur
    }

    /// `state`, kept by `from` (a sliding window with another limit), as this
    /// counter's state at `now`, so the counts carry on when only the limit
    /// changes: the same windows, each count capped at this `limit`. `None`
    /// when the window lengths differ or both counts are 0.
    pub fn carry_state(&self, from: &SlidingWindow, state: u64, now: Timestamp) -> Option<u64> {
        if from.window != self.window {
            return None;
        }
        let counts = from.counts_at(state, now.clamped_nanos());
        (counts.prev | counts.cur != 0).then(|| {
            self.pack(
                counts.index,
                counts.prev.min(self.limit),
                counts.cur.min(self.limit),
            )
        })
    }

    /// The counts a request at `now` sees.
    ///
    /// If the state already holds counts for the *next* window (a request
    /// stamped just before a boundary, decided after one stamped just after),
    /// the request is placed at the start of that newer window rather than
    /// wiping it.
    fn counts_at(&self, state: u64, now: u64) -> Counts {
        let index = now / self.window;
        let elapsed = now - index * self.window;
        let tag = state >> (2 * self.count_bits);
        let stored_prev = (state >> self.count_bits) & self.count_mask();
        let stored_cur = state & self.count_mask();
        let (index, elapsed, prev, cur) = if tag == index & self.tag_mask() {
            (index, elapsed, stored_prev, stored_cur)
        } else if stored_prev | stored_cur != 0 && tag == (index + 1) & self.tag_mask() {
            (index + 1, 0, stored_prev, stored_cur)
        } else if tag == index.wrapping_sub(1) & self.tag_mask() {
            (index, elapsed, stored_cur, 0)
        } else {
            (index, elapsed, 0, 0)
        };
        Counts {
            index,
            elapsed,
            prev,
            cur,
        }
    }

    /// `window ×` the estimate, exactly.
    fn used_scaled(&self, c: &Counts) -> u128 {
        u128::from(c.prev) * u128::from(self.window - c.elapsed)
            + u128::from(c.cur) * u128::from(self.window)
    }

    fn remaining(&self, c: &Counts) -> u64 {
        let capacity = u128::from(self.limit) * u128::from(self.window);
        let free = capacity.saturating_sub(self.used_scaled(c));
        (free / u128::from(self.window)) as u64
    }

    fn reset_after(&self, c: &Counts, now: u64) -> u64 {
        let windows = if c.cur > 0 {
            2
        } else if c.prev > 0 {
            1
        } else {
            return 0;
        };
        (c.index + windows) * self.window - now
    }

    /// The first instant at or after the current one when `cost` fits.
    fn pass_time(&self, c: &Counts, cost: u64) -> u64 {
        let w = u128::from(self.window);
        let start = c.index * self.window;
        // Later in this window, while prev's weight shrinks.
        if let Some(room) = self.limit.checked_sub(c.cur + cost)
            && c.prev > 0
        {
            let slack = (u128::from(room) * w / u128::from(c.prev)).min(w) as u64;
            let at = (self.window - slack).max(c.elapsed);
            if at < self.window {
                return start + at;
            }
        }
        // In the next window, where today's count becomes the previous one.
        let next = start + self.window;
        if c.cur == 0 {
            return next;
        }
        let room = u128::from(self.limit - cost);
        let slack = (room * w / u128::from(c.cur)).min(w) as u64;
        if slack > 0 {
            next + (self.window - slack)
        } else {
            next + self.window
        }
    }
}

impl WordAlgorithm for SlidingWindow {
    #[inline]
    fn decide(&self, state: u64, now: Timestamp, cost: u64) -> (Decision, Option<u64>) {
        let now = now.clamped_nanos();
        let mut c = self.counts_at(state, now);
        if cost > self.limit {
            let d = Decision::exceeds(self.limit, self.remaining(&c), self.reset_after(&c, now));
            return (d, None);
        }
        let capacity = u128::from(self.limit) * u128::from(self.window);
        if self.used_scaled(&c) + u128::from(cost) * u128::from(self.window) <= capacity {
            c.cur += cost;
            let d = Decision::allowed(self.limit, self.remaining(&c), self.reset_after(&c, now));
            (d, (cost > 0).then(|| self.pack(c.index, c.prev, c.cur)))
        } else {
            let retry = self.pass_time(&c, cost) - now;
            let d = Decision::denied(
                self.limit,
                self.remaining(&c),
                self.reset_after(&c, now),
                retry,
            );
            (d, None)
        }
    }

    fn refund(&self, state: u64, now: Timestamp, amount: u64) -> (Decision, Option<u64>) {
        let now = now.clamped_nanos();
        let mut c = self.counts_at(state, now);
        let before = c.cur;
        c.cur = c.cur.saturating_sub(amount);
        let d = Decision::allowed(self.limit, self.remaining(&c), self.reset_after(&c, now));
        (
            d,
            (c.cur != before).then(|| self.pack(c.index, c.prev, c.cur)),
        )
    }

    fn fresh_at(&self, state: u64, now: Timestamp) -> Timestamp {
        let index = now.clamped_nanos() / self.window;
        let tag = state >> (2 * self.count_bits);
        let stored_index = if tag == (index + 1) & self.tag_mask() {
            index + 1
        } else {
            index.wrapping_sub(index.wrapping_sub(tag) & self.tag_mask())
        };
        let prev = (state >> self.count_bits) & self.count_mask();
        let cur = state & self.count_mask();
        let windows = if cur > 0 {
            2
        } else if prev > 0 {
            1
        } else {
            return Timestamp::EPOCH;
        };
        Timestamp::from_nanos(
            stored_index
                .saturating_add(windows)
                .saturating_mul(self.window),
        )
    }

    fn used(&self, state: u64, now: Timestamp) -> u64 {
        let c = self.counts_at(state, now.clamped_nanos());
        self.limit - self.remaining(&c)
    }

    fn max_unexamined(&self) -> Option<Duration> {
        let windows = self.tag_mask().saturating_sub(1);
        Some(Duration::from_nanos(windows.saturating_mul(self.window)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;

    const S: u64 = 1_000_000_000;

    fn at(secs_into: f64) -> Timestamp {
        // Windows of 60 s aligned at 1_700_000_040 s.
        Timestamp::from_nanos(1_700_000_040 * S + (secs_into * S as f64) as u64)
    }

    #[test]
    fn weighted_estimate_of_the_classic_example() {
        // Limit 100/min; 84 in the previous minute, 36 so far, 15 s into this
        // minute: estimate = 84 × 45/60 + 36 = 99, so one more passes.
        let sw = SlidingWindow::new(100, Duration::from_secs(60)).unwrap();
        let mut state = 0;
        state = sw.decide(state, at(30.0), 84).1.unwrap();
        state = sw.decide(state, at(74.5), 36).1.unwrap();
        assert_eq!(sw.counts(state, at(75.0)), (84, 36));
        let (d, s) = sw.decide(state, at(75.0), 1);
        assert_eq!((d.outcome(), d.remaining()), (Outcome::Allowed, 0));
        let (d, _) = sw.decide(s.unwrap(), at(75.0), 1);
        assert_eq!(d.outcome(), Outcome::Denied);
        // Room for one more when 84 × (60 − e)/60 ≤ 100 − 37 − 1 = 62,
        // i.e. e ≥ 15.714… s: 0.714285715 s from now (rounded up to the ns).
        assert_eq!(d.retry_after_nanos(), 714_285_715);
    }

    #[test]
    fn retry_after_is_exact_across_the_boundary() {
        let sw = SlidingWindow::new(10, Duration::from_secs(10)).unwrap();
        let t0 = 1_700_000_000 * S;
        let s = sw
            .decide(0, Timestamp::from_nanos(t0 + 5 * S), 10)
            .1
            .unwrap();
        let (d, _) = sw.decide(s, Timestamp::from_nanos(t0 + 6 * S), 4);
        // Next window: 10 × (10 − e)/10 + 4 ≤ 10 ⟺ e ≥ 4 s; from t0+6 s that is 8 s.
        assert_eq!(d.retry_after(), Some(Duration::from_secs(8)));
        let later = |ns: u64| {
            sw.decide(s, Timestamp::from_nanos(t0 + 6 * S + ns), 4)
                .0
                .outcome()
        };
        assert_eq!(later(8 * S - 1), Outcome::Denied);
        assert_eq!(later(8 * S), Outcome::Allowed);
    }

    #[test]
    fn smooths_the_fixed_windows_edge_burst() {
        let sw = SlidingWindow::new(10, Duration::from_secs(60)).unwrap();
        let mut state = 0;
        let mut admitted = 0;
        for t in [59.0, 60.0] {
            for _ in 0..15 {
                let (d, s) = sw.decide(state, at(t), 1);
                state = s.unwrap_or(state);
                admitted += u64::from(d.is_allowed());
            }
        }
        assert_eq!(admitted, 10);
    }

    #[test]
    fn fresh_after_both_windows() {
        let sw = SlidingWindow::new(10, Duration::from_secs(60)).unwrap();
        let s = sw.decide(0, at(10.0), 1).1.unwrap();
        assert_eq!(sw.fresh_at(s, at(10.0)), at(120.0));
        assert_eq!(sw.decide(s, at(119.0), 0).0.remaining(), 9);
        assert_eq!(sw.decide(s, at(120.0), 0).0.remaining(), 10);
        assert_eq!(sw.decide(s, at(120.0), 0).0.reset_after(), Duration::ZERO);
    }

    #[test]
    fn a_late_stamped_request_counts_in_the_newer_window_instead_of_wiping_it() {
        let sw = SlidingWindow::new(2, Duration::from_secs(60)).unwrap();
        let s = sw.decide(0, at(60.0), 2).1.unwrap();
        let (d, new) = sw.decide(s, at(59.999), 1);
        assert_eq!(d.outcome(), Outcome::Denied);
        assert_eq!(new, None);
        // Room for one comes when the full window [60 s, 120 s) weighs at
        // most 1: at 150 s, 90.001 s after the late request.
        assert_eq!(d.retry_after(), Some(Duration::from_millis(90_001)));
        assert_eq!(sw.counts(s, at(60.0)), (0, 2));
        assert_eq!(sw.fresh_at(s, at(59.999)), at(180.0));
    }

    #[test]
    fn times_beyond_2262_are_clamped_instead_of_overflowing() {
        let sw = SlidingWindow::new(5, Duration::from_secs(60)).unwrap();
        let (d, s) = sw.decide(0, Timestamp::from_nanos(u64::MAX), 1);
        assert!(d.is_allowed());
        assert_ne!(s, Some(u64::MAX));
        assert!(SlidingWindow::new(1, Duration::from_secs(u64::MAX)).is_err());
    }

    #[test]
    fn limits_out_of_range_are_rejected() {
        assert_eq!(
            SlidingWindow::new(0, Duration::from_secs(1))
                .unwrap_err()
                .parameter(),
            "limit"
        );
        assert!(SlidingWindow::new((1 << 24) - 1, Duration::from_secs(1)).is_err());
        assert!(SlidingWindow::new(1, Duration::ZERO).is_err());
    }
}
