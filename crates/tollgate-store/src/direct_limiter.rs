//! [`DirectLimiter`]: one limit with no key, a single state word and a clock.

use std::fmt;
use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use tollgate_core::{Clock, Decision, RESERVED_STATE, Timestamp, WordAlgorithm};

use crate::state_word::{self, AtomicU64};
use crate::sweep_schedule::SweepSchedule;
use crate::word_store::Request;

/// The state word and when it was last swept, on one cache line.
struct SweptWord {
    state: AtomicU64,
    /// Nanoseconds since the epoch of the last sweep.
    swept_at: StdAtomicU64,
}

/// One limit with no key (a whole service, one client): a single state word and a clock.
///
/// The same lock-free step as a [`WordStore`](crate::WordStore) key: one
/// compare-and-swap per admitted request, nothing written on a denial, and
/// exactly `L` admitted of a limit `L` at any concurrency. Window algorithms
/// are swept like a store's shard (see `sweep_schedule`): a check that finds
/// the word unswept for more than a quarter of
/// [`WordAlgorithm::max_unexamined`] first takes a mutex, freezes the word,
/// and resets it if its state has become fresh, so a window number that
/// wrapped is never misread.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{ManualClock, Timestamp, TokenBucket};
/// use tollgate_store::DirectLimiter;
///
/// // A whole service's outgoing calls: 10 per second, bursts of 10.
/// let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
/// let calls = DirectLimiter::new(TokenBucket::new(10, 10, Duration::from_secs(1)).unwrap(), clock.clone());
/// assert!(calls.check(10).is_allowed());
/// assert!(!calls.check(1).is_allowed());
/// clock.advance(Duration::from_millis(100));
/// assert_eq!(calls.check(1).remaining(), 0);
/// ```
pub struct DirectLimiter<A: WordAlgorithm, C: Clock> {
    word: CachePadded<SweptWord>,
    sweeper: Mutex<()>,
    algorithm: A,
    clock: C,
    /// When the word must be swept so that a window number is never misread.
    sweeps: SweepSchedule,
}

impl<A: WordAlgorithm, C: Clock> DirectLimiter<A, C> {
    /// A limiter applying `algorithm`, timed by `clock`, starting fresh.
    pub fn new(algorithm: A, clock: C) -> Self {
        let sweeps = SweepSchedule::for_algorithm(&algorithm);
        DirectLimiter {
            word: CachePadded::new(SweptWord {
                state: AtomicU64::new(0),
                swept_at: StdAtomicU64::new(0),
            }),
            sweeper: Mutex::new(()),
            algorithm,
            clock,
            sweeps,
        }
    }

    /// Decides a request costing `cost` now, consuming if it passes.
    #[inline]
    pub fn check(&self, cost: u64) -> Decision {
        let now = self.clock.now();
        if !self.sweep_due(now) {
            let decide = |state| self.algorithm.decide(state, now, cost);
            if let Ok(decision) = state_word::update(&self.word.state, decide) {
                return decision;
            }
        }
        self.apply_swept(now, Request::Take(cost))
    }

    /// Gives back `amount` units consumed earlier.
    pub fn refund(&self, amount: u64) -> Decision {
        self.apply(self.clock.now(), Request::GiveBack(amount))
    }

    /// The current state word (0 when fresh); for displays.
    pub fn peek(&self) -> u64 {
        let state = self.word.state.load(Ordering::Acquire);
        if state != RESERVED_STATE {
            return state;
        }
        let _sweeper = self.sweeper.lock();
        self.word.state.load(Ordering::Acquire)
    }

    /// The algorithm the limiter decides with.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock the limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[inline]
    fn sweep_due(&self, now: Timestamp) -> bool {
        self.sweeps
            .is_due(self.word.swept_at.load(Ordering::Relaxed), now)
    }

    /// Runs `request` on the word: lock-free unless a sweep is due or running.
    ///
    /// The fast path calls the algorithm at a site of its own so that it is
    /// inlined (see `WordStore::apply`).
    #[inline]
    fn apply(&self, now: Timestamp, request: Request) -> Decision {
        if !self.sweep_due(now) {
            let transition = |state| request.on(&self.algorithm, state, now);
            if let Ok(decision) = state_word::update(&self.word.state, transition) {
                return decision;
            }
        }
        self.apply_swept(now, request)
    }

    #[inline(never)]
    fn apply_swept(&self, now: Timestamp, request: Request) -> Decision {
        let mut transition = |state| request.on(&self.algorithm, state, now);
        let _sweeper = self.sweeper.lock();
        if self.sweep_due(now) {
            self.sweep(now);
        }
        match state_word::update(&self.word.state, &mut transition) {
            Ok(decision) => decision,
            Err(state_word::Frozen) => {
                // Unreachable: only `sweep` freezes, under the mutex held here.
                debug_assert!(false, "a frozen word outside a sweep");
                transition(0).0
            }
        }
    }

    /// Resets the word if its state is fresh at `now`; with the mutex held.
    fn sweep(&self, now: Timestamp) {
        let swept_at = self.word.swept_at.load(Ordering::Relaxed);
        let reference = self.sweeps.reference(swept_at, now);
        let state = state_word::freeze(&self.word.state);
        let live = !self.sweeps.all_fresh(swept_at, now)
            && state != RESERVED_STATE
            && self.algorithm.fresh_at(state, reference) > now;
        self.word
            .state
            .store(if live { state } else { 0 }, Ordering::Release);
        self.word
            .swept_at
            .store(swept_at.max(now.as_nanos()), Ordering::Relaxed);
    }
}

impl<A: WordAlgorithm + fmt::Debug, C: Clock + fmt::Debug> fmt::Debug for DirectLimiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectLimiter")
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .field("state", &self.peek())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tollgate_core::{FixedWindow, ManualClock, TokenBucket};

    use super::*;

    #[test]
    fn four_threads_on_one_bucket_admit_exactly_its_capacity() {
        let tb = TokenBucket::new(1000, 1, Duration::from_secs(3600)).unwrap();
        let limiter = Arc::new(DirectLimiter::new(
            tb,
            ManualClock::new(Timestamp::from_secs(50)),
        ));
        let admitted: usize = (0..4)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                std::thread::spawn(move || {
                    (0..5_000).filter(|_| limiter.check(1).is_allowed()).count()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(admitted, 1000);
        assert_eq!(tb.tokens(limiter.peek(), Timestamp::from_secs(50)), 0);
        assert_eq!(limiter.refund(3).remaining(), 3);
    }

    #[test]
    fn a_window_number_that_wrapped_is_not_misread() {
        // 1 µs windows and the largest limit leave 23 bits of window number:
        // the tag repeats every 2²³ µs (about 8.4 s).
        let fw = FixedWindow::new(FixedWindow::MAX_LIMIT, Duration::from_micros(1)).unwrap();
        let period = Duration::from_micros(1 << 23);
        let start = Timestamp::from_secs(1_000);
        let clock = ManualClock::new(start);
        let limiter = DirectLimiter::new(fw, clock.clone());
        assert!(limiter.check(FixedWindow::MAX_LIMIT).is_allowed());
        let closed = limiter.peek();
        assert!(!limiter.check(1).is_allowed());
        // Alone, the algorithm misreads the old count in the aliased window.
        let aliased = start.saturating_add(period);
        assert!(!fw.decide(closed, aliased, 1).0.is_allowed());
        clock.set(aliased);
        assert!(limiter.check(1).is_allowed(), "a new window is fresh");
        assert_eq!(fw.count(limiter.peek(), aliased), 1);
    }
}
