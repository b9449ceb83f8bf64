//! The exact sliding window log.

use std::collections::VecDeque;
use std::time::Duration;

use crate::window::{check_limit, window_nanos};
use crate::{ConfigError, Decision, Timestamp};

/// At most `limit` units in any window of length `window`, exactly.
///
/// The log remembers the time and cost of every admitted request still inside
/// the window `(now − window, now]`; a request of `n` passes iff the costs in
/// the log plus `n` stay within `limit`. Denied requests store nothing, so
/// the log holds at most `limit` entries. `remaining = limit − logged` after
/// the request, `reset_after` is the time until the newest entry leaves the
/// window, and `retry_after` the time until enough old entries have left for
/// the same request to fit.
///
/// Choose it for strict, low-volume limits (logins, password resets): it is
/// exact but its memory grows with the limit.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{LogState, SlidingLog, Timestamp};
///
/// // 2 password resets in any 10 minutes.
/// let log = SlidingLog::new(2, Duration::from_secs(600)).unwrap();
/// let mut state = LogState::default();
/// let t = |secs: u64| Timestamp::from_secs(1_700_000_000 + secs);
/// assert!(log.decide(&mut state, t(0), 1).is_allowed());
/// assert!(log.decide(&mut state, t(100), 1).is_allowed());
/// let third = log.decide(&mut state, t(200), 1);
/// assert!(!third.is_allowed());
/// // It fits once the first has left the window, 400 s later.
/// assert_eq!(third.retry_after(), Some(Duration::from_secs(400)));
/// assert!(log.decide(&mut state, t(600), 1).is_allowed());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlidingLog {
    limit: u64,
    window: u64,
}

/// The admitted requests of one key still inside the window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogState {
    /// `(time ns, cost)` of admitted requests, oldest first.
    entries: VecDeque<(u64, u64)>,
    /// The sum of the costs in `entries`.
    total: u64,
}

impl LogState {
    /// Whether the log holds nothing (the key is fresh).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The number of entries kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes of heap this log holds.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<(u64, u64)>()
    }

    /// The sum of the costs still logged (as of the last decision).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Halves the entries by merging each pair, oldest first, into one at
    /// the later pair's time; returns how many entries went.
    ///
    /// A merged entry leaves the window when the later of the pair does,
    /// so the log never holds less than before at any time: every decision
    /// after a merge is as strict or stricter (never admits more), only
    /// less exact. The total is unchanged. Stores use it to bound memory.
    pub fn coalesce(&mut self) -> usize {
        let before = self.entries.len();
        if before < 2 {
            return 0;
        }
        let mut merged = VecDeque::with_capacity(before.div_ceil(2));
        let mut pending: Option<u64> = None;
        for &(t, c) in &self.entries {
            match pending.take() {
                None => pending = Some(c),
                Some(earlier) => merged.push_back((t, earlier + c)),
            }
        }
        if let (Some(c), Some(&(t, _))) = (pending, self.entries.back()) {
            merged.push_back((t, c));
        }
        self.entries = merged;
        before - self.entries.len()
    }
}

impl SlidingLog {
    /// The largest limit per window.
    pub const MAX_LIMIT: u64 = u32::MAX as u64;

    /// At most `limit` units in any `window`.
    pub fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        check_limit(limit, Self::MAX_LIMIT, "sliding log")?;
        let window = window_nanos(window)?;
        Ok(SlidingLog { limit, window })
    }

    /// The most units admitted in any window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    fn expire(&self, state: &mut LogState, now: u64) {
        while let Some(&(t, cost)) = state.entries.front() {
            if t.saturating_add(self.window) > now {
                break;
            }
            state.entries.pop_front();
            state.total -= cost;
        }
        if state.entries.is_empty() && state.entries.capacity() > 0 {
            state.entries = VecDeque::new();
        }
    }

    fn reset_after(&self, state: &LogState, now: u64) -> u64 {
        state
            .entries
            .back()
            .map_or(0, |&(t, _)| (t + self.window).saturating_sub(now))
    }

    /// Decides a request costing `cost` at `now`, updating `state` if it passes.
    pub fn decide(&self, state: &mut LogState, now: Timestamp, cost: u64) -> Decision {
        let now = now.clamped_nanos();
        self.expire(state, now);
        if cost > self.limit {
            return Decision::exceeds(
                self.limit,
                self.limit.saturating_sub(state.total),
                self.reset_after(state, now),
            );
        }
        if state.total + cost <= self.limit {
            if cost > 0 {
                // Keep entries in time order even if the clock stepped back.
                let t = state.entries.back().map_or(now, |&(last, _)| last.max(now));
                match state.entries.back_mut() {
                    Some((last, c)) if *last == t => *c += cost,
                    _ => state.entries.push_back((t, cost)),
                }
                state.total += cost;
            }
            return Decision::allowed(
                self.limit,
                self.limit.saturating_sub(state.total),
                self.reset_after(state, now),
            );
        }
        let mut to_free = state.total + cost - self.limit;
        let mut pass_at = now;
        for &(t, c) in &state.entries {
            pass_at = t + self.window;
            if c >= to_free {
                break;
            }
            to_free -= c;
        }
        Decision::denied(
            self.limit,
            self.limit.saturating_sub(state.total),
            self.reset_after(state, now),
            pass_at - now,
        )
    }

    /// Gives back `amount` units, taken from the newest entries.
    pub fn refund(&self, state: &mut LogState, now: Timestamp, amount: u64) -> Decision {
        let now = now.clamped_nanos();
        self.expire(state, now);
        let mut left = amount;
        while left > 0 {
            let Some((_, c)) = state.entries.back_mut() else {
                break;
            };
            let take = left.min(*c);
            *c -= take;
            state.total -= take;
            left -= take;
            if *c == 0 {
                state.entries.pop_back();
            }
        }
        Decision::allowed(
            self.limit,
            self.limit.saturating_sub(state.total),
            self.reset_after(state, now),
        )
    }

    /// The units `state` still holds inside the window ending at `now`, without changing it.
    ///
    /// [`LogState::total`] is as of the last decision; this is what the next
    /// decision at `now` would count, for displays that read between decisions.
    pub fn logged_at(&self, state: &LogState, now: Timestamp) -> u64 {
        let now = now.clamped_nanos();
        let expired: u64 = state
            .entries
            .iter()
            .take_while(|&&(t, _)| t.saturating_add(self.window) <= now)
            .map(|&(_, cost)| cost)
            .sum();
        state.total - expired
    }

    /// The earliest time from which `state` decides like an empty log.
    pub fn fresh_at(&self, state: &LogState) -> Timestamp {
        Timestamp::from_nanos(state.entries.back().map_or(0, |&(t, _)| t + self.window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing_halves_the_log_and_never_admits_more() {
        let log = SlidingLog::new(100, Duration::from_secs(10)).unwrap();
        let mut exact = LogState::default();
        for second in 0..7 {
            log.decide(&mut exact, Timestamp::from_secs(second), 1 + second);
        }
        let mut merged = exact.clone();
        assert_eq!(
            (merged.coalesce(), merged.len(), merged.total()),
            (3, 4, exact.total())
        );
        for ms in (0..20_000).step_by(250) {
            let now = Timestamp::from_millis(ms);
            assert!(
                log.logged_at(&merged, now) >= log.logged_at(&exact, now),
                "{ms} ms"
            );
        }
        let mut one = LogState::default();
        log.decide(&mut one, Timestamp::from_secs(1), 1);
        assert_eq!(one.coalesce(), 0);
    }
    use crate::Outcome;

    const S: u64 = 1_000_000_000;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(1_000 * S + ms * 1_000_000)
    }

    #[test]
    fn admits_at_most_the_limit_in_any_window() {
        // 3 per 10 s: requests at 0, 1, 2 s pass; 3..9.999 s fail; at 10 s the
        // first has left the window.
        let log = SlidingLog::new(3, Duration::from_secs(10)).unwrap();
        let mut s = LogState::default();
        for ms in [0, 1_000, 2_000] {
            assert!(log.decide(&mut s, at(ms), 1).is_allowed());
        }
        let d = log.decide(&mut s, at(3_000), 1);
        assert_eq!(d.outcome(), Outcome::Denied);
        assert_eq!(d.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(d.reset_after(), Duration::from_secs(9));
        assert_eq!(s.len(), 3, "denied requests store nothing");
        assert_eq!(log.decide(&mut s, at(9_999), 1).outcome(), Outcome::Denied);
        assert!(log.decide(&mut s, at(10_000), 1).is_allowed());
        assert_eq!(log.decide(&mut s, at(10_000), 1).outcome(), Outcome::Denied);
    }

    #[test]
    fn logged_at_counts_the_window_ending_then_without_changing_the_log() {
        let log = SlidingLog::new(10, Duration::from_secs(10)).unwrap();
        let mut s = LogState::default();
        log.decide(&mut s, at(0), 3);
        log.decide(&mut s, at(1_000), 2);
        log.decide(&mut s, at(2_000), 4);
        let before = s.clone();
        assert_eq!(log.logged_at(&s, at(2_000)), 9);
        assert_eq!(log.logged_at(&s, at(9_999)), 9);
        // The entry at 0 s leaves at 10 s, the one at 1 s at 11 s.
        assert_eq!(log.logged_at(&s, at(10_000)), 6);
        assert_eq!(log.logged_at(&s, at(11_500)), 4);
        assert_eq!(log.logged_at(&s, at(12_000)), 0);
        assert_eq!(s, before, "reading changes nothing");
        assert_eq!(s.total(), 9, "the total stays as of the last decision");
        // The next decision counts what logged_at said: 4 logged + 6 fits exactly.
        assert!(log.decide(&mut s, at(11_500), 6).is_allowed());
        assert_eq!(log.decide(&mut s, at(11_500), 1).remaining(), 0);
    }

    #[test]
    fn weighted_requests_wait_for_enough_to_expire() {
        let log = SlidingLog::new(10, Duration::from_secs(10)).unwrap();
        let mut s = LogState::default();
        log.decide(&mut s, at(0), 3);
        log.decide(&mut s, at(1_000), 3);
        log.decide(&mut s, at(2_000), 4);
        // A cost of 5 needs 5 freed: the entries at 0 s (3) and 1 s (3).
        let d = log.decide(&mut s, at(5_000), 5);
        assert_eq!(d.retry_after(), Some(Duration::from_secs(6)));
        assert_eq!(
            log.decide(&mut s, at(11_000), 5).outcome(),
            Outcome::Allowed
        );
        assert_eq!(
            log.decide(&mut s, at(11_000), 11).outcome(),
            Outcome::Exceeds
        );
    }

    #[test]
    fn times_beyond_2262_are_clamped_instead_of_overflowing() {
        let log = SlidingLog::new(1, Duration::from_secs(1)).unwrap();
        let mut s = LogState::default();
        assert!(
            log.decide(&mut s, Timestamp::from_nanos(u64::MAX), 1)
                .is_allowed()
        );
        let d = log.decide(&mut s, Timestamp::from_nanos(u64::MAX), 1);
        assert_eq!(d.retry_after(), Some(Duration::from_secs(1)));
    }

    #[test]
    fn refund_removes_the_newest_and_memory_is_released() {
        let log = SlidingLog::new(5, Duration::from_secs(1)).unwrap();
        let mut s = LogState::default();
        log.decide(&mut s, at(0), 2);
        log.decide(&mut s, at(100), 2);
        let d = log.refund(&mut s, at(200), 3);
        assert_eq!(d.remaining(), 4);
        assert_eq!(s.len(), 1);
        assert_eq!(log.fresh_at(&s), at(1_000));
        assert!(log.decide(&mut s, at(5_000), 0).is_allowed());
        assert!(s.is_empty());
        assert_eq!(s.heap_bytes(), 0);
    }
}
