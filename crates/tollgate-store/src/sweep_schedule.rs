//! When stored window states must be looked at again, so that their window numbers are never misread.
//!
//! Window algorithms keep only the low bits of the window number; with `D`
//! their [`max_unexamined`](WordAlgorithm::max_unexamined), a state read
//! more than about `D` after it was written could be taken for a state of a
//! later window. A store keeps, per shard, `swept_at`: the latest time it
//! examined every key (a rebuild or sweep). From that, three rules:
//!
//! * **due**: a check finding `now − swept_at > D/4` rebuilds first. So
//!   every state is written at some `w ≤ swept_at + D/4`, and every key a
//!   check reads was written (or carried over) within about `D/4` of it.
//! * **reference**: a rebuild asks [`fresh_at`](WordAlgorithm::fresh_at)
//!   with `max(now, swept_at) + D/4`, not with its own `now`. That is never
//!   earlier than any write, so a state written by another thread in a later
//!   window than this rebuild's (lagging) `now` is placed right, not taken for
//!   one a whole tag period old; and it is less than `D` after every write
//!   still held.
//! * **all fresh**: a rebuild finding `now − swept_at > D/2` drops every key:
//!   each was written at least `D/4` ago, and a window algorithm's state is
//!   fresh one or two windows after its last write, against a `D/4` of at
//!   least 16 000 windows (fixed window: 2 million).
//!
//! The rules assume that a state becomes fresh, and that callers' clocks
//! agree, to well within `D/4`. For algorithms whose encoding never wraps
//! (`max_unexamined` is `None`) nothing is ever due, and `fresh_at` gets `now`.

use tollgate_core::{Timestamp, WordAlgorithm};

/// The sweep thresholds of one algorithm, in nanoseconds (`u64::MAX`: never).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SweepSchedule {
    /// `D/4`: how long a shard may go unswept, and how far ahead of the last sweep writes can be.
    due_after_ns: u64,
    /// `D/2`: a shard unswept for longer holds only fresh states.
    all_fresh_after_ns: u64,
}

impl SweepSchedule {
    /// The schedule that keeps `algorithm`'s states from being misread.
    pub(crate) fn for_algorithm<A: WordAlgorithm + ?Sized>(algorithm: &A) -> Self {
        match algorithm.max_unexamined() {
            Some(d) => {
                let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                SweepSchedule {
                    due_after_ns: d / 4,
                    all_fresh_after_ns: d / 2,
                }
            }
            None => SweepSchedule {
                due_after_ns: u64::MAX,
                all_fresh_after_ns: u64::MAX,
            },
        }
    }

    /// Whether a check at `now` must sweep first (one comparison; `swept_at` in nanoseconds).
    #[inline]
    pub(crate) fn is_due(&self, swept_at: u64, now: Timestamp) -> bool {
        now.as_nanos().saturating_sub(swept_at) > self.due_after_ns
    }

    /// Whether every state last swept at `swept_at` is fresh by `now`.
    pub(crate) fn all_fresh(&self, swept_at: u64, now: Timestamp) -> bool {
        now.as_nanos().saturating_sub(swept_at) > self.all_fresh_after_ns
    }

    /// The time to place stored windows by when a sweep at `now` asks `fresh_at`.
    pub(crate) fn reference(&self, swept_at: u64, now: Timestamp) -> Timestamp {
        if self.due_after_ns == u64::MAX {
            return now;
        }
        Timestamp::from_nanos(
            now.as_nanos()
                .max(swept_at)
                .saturating_add(self.due_after_ns),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate_core::{FixedWindow, TokenBucket};

    use super::*;

    #[test]
    fn rate_algorithms_are_never_due() {
        let tb = TokenBucket::new(1, 1, Duration::from_secs(1)).unwrap();
        let schedule = SweepSchedule::for_algorithm(&tb);
        let late = Timestamp::from_nanos(u64::MAX);
        assert!(!schedule.is_due(0, late));
        assert!(!schedule.all_fresh(0, late));
        assert_eq!(schedule.reference(5, Timestamp::EPOCH), Timestamp::EPOCH);
    }

    #[test]
    fn windows_are_due_at_a_quarter_and_fresh_at_half_of_max_unexamined() {
        let fw = FixedWindow::new(FixedWindow::MAX_LIMIT, Duration::from_micros(1)).unwrap();
        let d = u64::try_from(fw.max_unexamined().unwrap().as_nanos()).unwrap();
        let schedule = SweepSchedule::for_algorithm(&fw);
        let swept = 1_000_000_000;
        let at = |ns: u64| Timestamp::from_nanos(swept + ns);
        assert!(!schedule.is_due(swept, at(d / 4)));
        assert!(schedule.is_due(swept, at(d / 4 + 1)));
        assert!(!schedule.all_fresh(swept, at(d / 2)));
        assert!(schedule.all_fresh(swept, at(d / 2 + 1)));
        assert!(
            !schedule.is_due(swept, Timestamp::EPOCH),
            "a clock behind is not due"
        );
        assert_eq!(schedule.reference(swept, Timestamp::EPOCH), at(d / 4));
        assert_eq!(schedule.reference(swept, at(7)), at(7 + d / 4));
    }
}
