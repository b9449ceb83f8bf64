//! The epoch-aligned fixed window with envoyproxy/ratelimit's counting.

use std::time::Duration;

use crate::window::window_nanos;
use crate::{ConfigError, Decision, Timestamp, WordAlgorithm};

/// At most `limit` units per window; windows are aligned to the Unix epoch.
///
/// Semantics are envoyproxy/ratelimit's: a window starts at
/// `⌊now / window⌋ · window`; every request counts, including denied ones, and
/// a request is over the limit when the count *after* it exceeds `limit`.
/// So once a request has been denied in a window, every later request in that
/// window is denied too (cost 0 included), and a request costing more than
/// `limit` (which can never pass) also closes the window. `remaining =
/// limit − count` after an allowed request, 0 after a denied one;
/// `reset_after` is the time to the window's end, which is also the
/// `retry_after` of a denied request.
///
/// Staggered windows ([`FixedWindow::stagger_phase`]) are the same algorithm
/// decided at `now + phase` for each key: every key still counts whole
/// windows of length `W`, only their edges differ from key to key.
///
/// A refund gives units back while the window is open; a window that a
/// denial has closed stays closed until it ends, and refunds change nothing
/// in it (upstream would subtract from its higher real count, which almost
/// always stays over the limit too).
///
/// The state packs the window number's low bits with the count. The count is
/// kept up to `limit + 1` (nothing beyond changes a decision), so the deny
/// path of an already-closed window writes nothing.
///
/// The budget a state has used ([`WordAlgorithm::used`]) is its count in
/// the window containing `now` (0 once that window has ended): `limit −
/// remaining` while the window is open, `limit + 1` once a denial closed it.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{FixedWindow, Timestamp, WordAlgorithm};
///
/// // 2 per minute; 30 s into a minute.
/// let window = FixedWindow::new(2, Duration::from_secs(60)).unwrap();
/// let now = Timestamp::from_secs(1_700_000_010);
/// let (first, state) = window.decide(0, now, 1);
/// let (second, state) = window.decide(state.unwrap(), now, 1);
/// assert!(first.is_allowed() && second.is_allowed());
/// let (third, _) = window.decide(state.unwrap(), now, 1);
/// assert!(!third.is_allowed());
/// // The window ends at the next whole minute since the epoch.
/// assert_eq!(third.retry_after(), Some(Duration::from_secs(30)));
/// assert_eq!(third.reset_after(), Duration::from_secs(30));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    limit: u64,
    window: u64,
    count_bits: u32,
}

impl FixedWindow {
    /// The largest limit per window.
    pub const MAX_LIMIT: u64 = (1 << 40) - 2;

    /// At most `limit` units per `window`.
    pub fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        if limit > Self::MAX_LIMIT {
            return Err(ConfigError::new(
                "limit",
                format!(
                    "{limit} is above the largest fixed-window limit {}",
                    Self::MAX_LIMIT
                ),
            ));
        }
        let window = window_nanos(window)?;
        // Counts run to `limit + 1`; one spare value keeps the state off `u64::MAX`.
        let count_bits = u64::BITS - (limit + 2).leading_zeros();
        Ok(FixedWindow {
            limit,
            window,
            count_bits,
        })
    }

    /// The most units admitted per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// The offset of a staggered key's windows, from a hash of the key: a
    /// whole number of microseconds in `[0, window)`, so a key's windows
    /// start at `k·W − phase` and keys spread their resets evenly over a
    /// window instead of all resetting on the epoch's `k·W`. The store
    /// decides such a key at `now + phase` (microseconds, the resolution of
    /// Redis `TIME`, so memory and Redis agree).
    pub fn stagger_phase(&self, key_hash: u64) -> u64 {
        let window_us = (self.window / 1_000).max(1);
        (key_hash % window_us) * 1_000
    }

    /// `state`, kept by `from` (a fixed window with another limit), as this
    /// window's state at `now`, so a count carries on when only the limit
    /// changes: the same window and count, the count capped at `limit + 1`
    /// (a closed window). `None` when the window lengths differ or nothing
    /// is counted in the window containing `now`.
    pub fn carry_state(&self, from: &FixedWindow, state: u64, now: Timestamp) -> Option<u64> {
        if from.window != self.window {
            return None;
        }
        let (index, count) = from.place(state, now.clamped_nanos());
        (count > 0).then(|| self.pack(self.tag(index), count.min(self.limit + 1)))
    }

    /// Units counted in the window containing `now`, for `state`.
    pub fn count(&self, state: u64, now: Timestamp) -> u64 {
        self.place(state, now.clamped_nanos()).1
    }

    /// The window a request at `now` counts in, and its count so far.
    ///
    /// Normally the window containing `now`; but if the state already holds
    /// a count for the *next* window (a request stamped just before a
    /// boundary, decided after one stamped just after), the request counts in
    /// that newer window rather than wiping it.
    #[inline]
    fn place(&self, state: u64, now: u64) -> (u64, u64) {
        let index = now / self.window;
        let (stored_tag, stored) = self.unpack(state);
        if stored_tag == self.tag(index) {
            (index, stored)
        } else if stored > 0 && stored_tag == self.tag(index + 1) {
            (index + 1, stored)
        } else {
            (index, 0)
        }
    }

    fn tag_mask(&self) -> u64 {
        u64::MAX >> self.count_bits
    }

    fn tag(&self, index: u64) -> u64 {
        index & self.tag_mask()
    }

    fn unpack(&self, state: u64) -> (u64, u64) {
        (
            state >> self.count_bits,
            state & ((1 << self.count_bits) - 1),
        )
    }

    fn pack(&self, tag: u64, count: u64) -> u64 {
        (tag << self.count_bits) | count
    }
}

impl WordAlgorithm for FixedWindow {
    #[inline]
    fn decide(&self, state: u64, now: Timestamp, cost: u64) -> (Decision, Option<u64>) {
        let now = now.clamped_nanos();
        let (index, count) = self.place(state, now);
        let tag = self.tag(index);
        let reset = (index + 1) * self.window - now;
        let after = count.saturating_add(cost);
        if after <= self.limit {
            let d = Decision::allowed(self.limit, self.limit - after, reset);
            return (d, (cost > 0).then(|| self.pack(tag, after)));
        }
        let kept = after.min(self.limit + 1);
        let new_state = (self.pack(tag, kept) != state).then(|| self.pack(tag, kept));
        let d = if cost > self.limit {
            Decision::exceeds(self.limit, 0, reset)
        } else {
            Decision::denied(self.limit, 0, reset, reset)
        };
        (d, new_state)
    }

    fn refund(&self, state: u64, now: Timestamp, amount: u64) -> (Decision, Option<u64>) {
        let now = now.clamped_nanos();
        let (index, count) = self.place(state, now);
        let tag = self.tag(index);
        // A window closed by a denial stays closed until it ends.
        let after = if count > self.limit {
            count
        } else {
            count.saturating_sub(amount)
        };
        let reset = (index + 1) * self.window - now;
        let d = Decision::allowed(self.limit, self.limit.saturating_sub(after), reset);
        (d, (after != count).then(|| self.pack(tag, after)))
    }

    fn fresh_at(&self, state: u64, now: Timestamp) -> Timestamp {
        let (tag, count) = self.unpack(state);
        if count == 0 {
            return Timestamp::EPOCH;
        }
        let index = now.clamped_nanos() / self.window;
        let stored_index = if tag == self.tag(index + 1) {
            index + 1
        } else {
            index.wrapping_sub(index.wrapping_sub(tag) & self.tag_mask())
        };
        Timestamp::from_nanos((stored_index + 1).saturating_mul(self.window))
    }

    fn used(&self, state: u64, now: Timestamp) -> u64 {
        self.count(state, now)
    }

    fn max_unexamined(&self) -> Option<Duration> {
        let windows = self.tag_mask();
        Some(Duration::from_nanos(windows.saturating_mul(self.window)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;

    const S: u64 = 1_000_000_000;

    #[test]
    fn counts_like_envoyproxy_ratelimit() {
        // limit 3 per minute; requests at 10 s, 20 s, ... within one window.
        let fw = FixedWindow::new(3, Duration::from_secs(60)).unwrap();
        let base = 1_700_000_080 * S; // 40 s into a minute window
        let mut state = 0;
        let mut seen = vec![];
        for i in 0..5 {
            let (d, s) = fw.decide(state, Timestamp::from_nanos(base + i * S), 1);
            state = s.unwrap_or(state);
            seen.push((d.outcome(), d.remaining(), d.reset_after().as_secs()));
        }
        use Outcome::*;
        assert_eq!(
            seen,
            vec![
                (Allowed, 2, 20),
                (Allowed, 1, 19),
                (Allowed, 0, 18),
                (Denied, 0, 17),
                (Denied, 0, 16)
            ]
        );
        let (d, _) = fw.decide(state, Timestamp::from_nanos(base + 5 * S), 1);
        assert_eq!(d.retry_after(), Some(Duration::from_secs(15)));
        // The next window starts at the minute boundary, counted from zero.
        let (d, _) = fw.decide(state, Timestamp::from_nanos(base + 20 * S), 1);
        assert_eq!(
            (d.outcome(), d.remaining(), d.reset_after().as_secs()),
            (Allowed, 2, 60)
        );
    }

    #[test]
    fn a_denied_request_counts_and_keeps_the_window_closed() {
        // Upstream: INCRBY always happens, so after a cost-5 denial at 8/10
        // even a cost-1 request is over for the rest of the window.
        let fw = FixedWindow::new(10, Duration::from_secs(1)).unwrap();
        let t = Timestamp::from_secs(50);
        let (_, s) = fw.decide(0, t, 8);
        let (d, s2) = fw.decide(s.unwrap(), t, 5);
        assert_eq!(d.outcome(), Outcome::Denied);
        let (d, s3) = fw.decide(s2.unwrap(), t, 1);
        assert_eq!(d.outcome(), Outcome::Denied);
        assert_eq!(s3, None, "a closed window writes nothing on deny");
        let (d, _) = fw.decide(s2.unwrap(), t, 0);
        assert_eq!(
            d.outcome(),
            Outcome::Denied,
            "check-only sees the closed window"
        );
    }

    #[test]
    fn check_only_at_the_limit_is_ok_with_nothing_remaining() {
        let fw = FixedWindow::new(2, Duration::from_secs(1)).unwrap();
        let t = Timestamp::from_secs(50);
        let s = fw.decide(0, t, 2).1.unwrap();
        let (d, new) = fw.decide(s, t, 0);
        assert_eq!(
            (d.outcome(), d.remaining(), new),
            (Outcome::Allowed, 0, None)
        );
    }

    #[test]
    fn edge_burst_lets_twice_the_limit_through_around_a_boundary() {
        // The fixed window's known weakness: 10/min admits 20 within 2 s.
        let fw = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
        let mut state = 0;
        let mut admitted = 0;
        for t in [19 * S, 20 * S] {
            for _ in 0..15 {
                let (d, s) = fw.decide(state, Timestamp::from_nanos(1_700_000_080 * S + t), 1);
                state = s.unwrap_or(state);
                admitted += u64::from(d.is_allowed());
            }
        }
        assert_eq!(admitted, 20);
    }

    #[test]
    fn zero_limit_denies_everything_that_costs() {
        let fw = FixedWindow::new(0, Duration::from_secs(1)).unwrap();
        let (d, _) = fw.decide(0, Timestamp::from_secs(5), 1);
        assert_eq!(d.outcome(), Outcome::Exceeds);
        assert!(fw.decide(0, Timestamp::from_secs(5), 0).0.is_allowed());
    }

    #[test]
    fn refund_gives_back_within_the_window() {
        let fw = FixedWindow::new(5, Duration::from_secs(1)).unwrap();
        let t = Timestamp::from_secs(9);
        let s = fw.decide(0, t, 4).1.unwrap();
        let (d, s) = fw.refund(s, t, 3);
        assert_eq!(d.remaining(), 4);
        assert_eq!(fw.count(s.unwrap(), t), 1);
    }

    #[test]
    fn a_late_stamped_request_counts_in_the_newer_window_instead_of_wiping_it() {
        // Two threads either side of a boundary: the one stamped 1 ms before
        // it is decided after the one stamped after it.
        let fw = FixedWindow::new(1, Duration::from_secs(60)).unwrap();
        let boundary = Timestamp::from_secs(1_700_000_040);
        let s = fw.decide(0, boundary, 1).1.unwrap();
        let late = Timestamp::from_nanos(boundary.as_nanos() - 1_000_000);
        let (d, new) = fw.decide(s, late, 1);
        assert_eq!(d.outcome(), Outcome::Denied, "the newer window is full");
        assert_eq!(
            fw.count(new.unwrap_or(s), boundary),
            2,
            "and keeps its count"
        );
        assert_eq!(d.reset_after(), Duration::from_millis(60_001));
        assert_eq!(fw.fresh_at(s, late), Timestamp::from_secs(1_700_000_100));
    }

    #[test]
    fn times_beyond_2262_are_clamped_instead_of_overflowing() {
        let fw = FixedWindow::new(5, Duration::from_secs(60)).unwrap();
        let far = Timestamp::from_nanos(u64::MAX);
        let (d, s) = fw.decide(0, far, 1);
        assert!(d.is_allowed());
        assert_ne!(s, Some(u64::MAX));
        assert!(FixedWindow::new(1, Duration::from_secs(u64::MAX)).is_err());
    }

    #[test]
    fn fresh_at_is_the_end_of_the_stored_window() {
        let fw = FixedWindow::new(5, Duration::from_secs(60)).unwrap();
        let s = fw.decide(0, Timestamp::from_secs(130), 1).1.unwrap();
        assert_eq!(
            fw.fresh_at(s, Timestamp::from_secs(130)),
            Timestamp::from_secs(180)
        );
        assert_eq!(
            fw.fresh_at(s, Timestamp::from_secs(1000)),
            Timestamp::from_secs(180)
        );
        assert_eq!(fw.fresh_at(0, Timestamp::from_secs(1000)), Timestamp::EPOCH);
    }
}
