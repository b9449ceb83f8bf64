//! The lock-free update of one key's state word, and the freeze a rebuild uses.
//!
//! This is the only place where a [`WordStore`](crate::WordStore) changes a
//! key's state without a lock, kept small so that it can be model-checked
//! with loom (`tests/loom.rs`; under `--cfg loom` the [`AtomicU64`] here is
//! loom's).
//!
//! [`update`] reads the word, asks the algorithm, and writes the new state
//! with one compare-and-swap, retrying on a lost race: so of `N` concurrent
//! requests against a limit of `L`, exactly `min(N, L)` pass, at any
//! concurrency. A denial (the algorithm returns no new state) writes
//! nothing. [`freeze`] swaps in [`RESERVED_STATE`], which no algorithm
//! produces: every update that won its swap before the freeze is in the
//! value `freeze` returns, and every update after it sees the marker and
//! gives up with [`Frozen`] (the store then retries under the shard lock,
//! against the rebuilt table).

use std::sync::atomic::Ordering;

#[cfg(loom)]
pub use loom::sync::atomic::AtomicU64;
#[cfg(not(loom))]
pub use std::sync::atomic::AtomicU64;

use tollgate_core::{Decision, RESERVED_STATE};

/// The state word was frozen by a rebuild; retry against the new table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frozen;

/// Applies `transition` to the word atomically and returns its decision.
///
/// `transition` maps the current state to a decision and, when the state
/// changes, the new state (as [`WordAlgorithm::decide`] does); it may run
/// more than once when other threads change the word meanwhile. When it
/// returns no new state (a denial, a check-only request), nothing is
/// written. A new state equal to [`RESERVED_STATE`] (which the algorithm
/// contract rules out) is not written either.
///
/// [`WordAlgorithm::decide`]: tollgate_core::WordAlgorithm::decide
#[inline(always)]
pub fn update(
    state: &AtomicU64,
    mut transition: impl FnMut(u64) -> (Decision, Option<u64>),
) -> Result<Decision, Frozen> {
    let mut current = state.load(Ordering::Acquire);
    loop {
        if current == RESERVED_STATE {
            return Err(Frozen);
        }
        let (decision, next) = transition(current);
        let Some(next) = next.filter(|&n| n != current && n != RESERVED_STATE) else {
            return Ok(decision);
        };
        match state.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(decision),
            Err(actual) => current = actual,
        }
    }
}

/// Marks the word frozen and returns the state it held, which includes every update that succeeded.
///
/// An atomic swap: it cannot lose to a concurrent [`update`], so it never
/// needs a retry.
#[inline]
pub fn freeze(state: &AtomicU64) -> u64 {
    state.swap(RESERVED_STATE, Ordering::AcqRel)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use tollgate_core::{Timestamp, TokenBucket, WordAlgorithm};

    use super::*;

    #[test]
    fn updates_until_denied_then_writes_nothing() {
        let tb = TokenBucket::new(2, 1, Duration::from_secs(1)).unwrap();
        let now = Timestamp::from_secs(10);
        let word = AtomicU64::new(0);
        assert!(
            update(&word, |s| tb.decide(s, now, 1))
                .unwrap()
                .is_allowed()
        );
        assert!(
            update(&word, |s| tb.decide(s, now, 1))
                .unwrap()
                .is_allowed()
        );
        let full = word.load(Ordering::Relaxed);
        assert!(
            !update(&word, |s| tb.decide(s, now, 1))
                .unwrap()
                .is_allowed()
        );
        assert_eq!(word.load(Ordering::Relaxed), full);
    }

    #[test]
    fn a_frozen_word_refuses_updates_and_keeps_the_marker() {
        let tb = TokenBucket::new(2, 1, Duration::from_secs(1)).unwrap();
        let now = Timestamp::from_secs(10);
        let word = AtomicU64::new(0);
        update(&word, |s| tb.decide(s, now, 1)).unwrap();
        let held = freeze(&word);
        assert_eq!(tb.tokens(held, now), 1);
        assert_eq!(update(&word, |s| tb.decide(s, now, 1)), Err(Frozen));
        assert_eq!(word.load(Ordering::Relaxed), RESERVED_STATE);
    }

    #[test]
    fn a_transition_that_returns_the_marker_writes_nothing() {
        let tb = TokenBucket::new(2, 1, Duration::from_secs(1)).unwrap();
        let now = Timestamp::from_secs(10);
        let word = AtomicU64::new(5);
        let d = update(&word, |s| (tb.decide(s, now, 1).0, Some(RESERVED_STATE))).unwrap();
        assert!(d.is_allowed());
        assert_eq!(word.load(Ordering::Relaxed), 5);
    }
}
