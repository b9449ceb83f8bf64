//! The interface of algorithms whose whole state is one `u64`.

use std::time::Duration;

use crate::{
    Decision, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, Timestamp, TokenBucket,
};

/// An algorithm whose whole per-key state is one `u64`, with 0 as the fresh state.
///
/// The algorithm never stores anything: a store reads the key's state, calls
/// [`decide`](WordAlgorithm::decide), and writes the new state back only when
/// there is one (a compare-and-swap for the in-memory store). A denied
/// request returns `None` wherever the semantics allow, so the deny path of a
/// hot key writes nothing.
///
/// No algorithm ever produces the state [`RESERVED_STATE`] (`u64::MAX`); stores
/// use it as a marker of their own.
pub trait WordAlgorithm: Send + Sync {
    /// Decides a request costing `cost` units at `now` against `state`.
    ///
    /// Returns the decision and the state to store, or `None` when the state
    /// does not change. A `cost` of 0 checks without consuming.
    fn decide(&self, state: u64, now: Timestamp, cost: u64) -> (Decision, Option<u64>);

    /// Gives back `amount` units consumed earlier (never beyond the fresh state).
    fn refund(&self, state: u64, now: Timestamp, amount: u64) -> (Decision, Option<u64>);

    /// The earliest time from which `state` decides exactly like the fresh state 0.
    ///
    /// A store may drop a key whose `fresh_at` has passed without changing any
    /// decision. `now` lets window algorithms place their stored window.
    fn fresh_at(&self, state: u64, now: Timestamp) -> Timestamp;

    /// How much of its budget `state` has used at `now`, in units: how far it is from fresh.
    ///
    /// It is what dropping the state would hand back at once: with `C` the
    /// algorithm's capacity (a bucket's tokens, a window's limit) and `r`
    /// the `remaining` of a check-only request (`decide(state, now, 0)`),
    /// `used = C − r`. For the rate meters and the fixed window it is also
    /// all that dropping the state can ever hand back; for the sliding window
    /// counter the gap shrinks as its windows age. Either way it is gone by
    /// [`fresh_at`](WordAlgorithm::fresh_at). A fixed window closed by a
    /// denial (which a refund cannot reopen) reports `limit + 1`, one
    /// further from fresh than a window at exactly its limit.
    ///
    /// 0 for the fresh state and for every state whose
    /// [`fresh_at`](WordAlgorithm::fresh_at) has passed. A store that must
    /// drop live keys drops those with the least used first.
    fn used(&self, state: u64, now: Timestamp) -> u64;

    /// How long a stored state may sit unexamined before its encoding could be misread.
    ///
    /// Window algorithms keep only the low bits of the window number; a store
    /// must look at every key (and drop the fresh ones) at least this often.
    /// `None` when the encoding never wraps. Implementations keep this span
    /// far longer than the time a written state takes to become fresh (a
    /// store may rely on at most a quarter of it): for the windows it is at
    /// least 2¹⁶ windows against one or two.
    fn max_unexamined(&self) -> Option<Duration>;
}

/// A state value no algorithm produces, free for a store to use as a marker.
pub const RESERVED_STATE: u64 = u64::MAX;

/// Any algorithm with a one-word state, chosen at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnyWordAlgorithm {
    /// See [`TokenBucket`].
    TokenBucket(TokenBucket),
    /// See [`Gcra`].
    Gcra(Gcra),
    /// See [`LeakyBucket`].
    LeakyBucket(LeakyBucket),
    /// See [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// See [`SlidingWindow`].
    SlidingWindow(SlidingWindow),
}

impl AnyWordAlgorithm {
    /// `state`, kept under `from`, re-encoded for this algorithm at `now`, so
    /// a counter carries on when a reload changes only its limit; `None`
    /// when the two are different algorithms (or windows of different
    /// lengths) or nothing is left to carry.
    ///
    /// A window keeps its counts (capped, see
    /// [`FixedWindow::carry_state`] and [`SlidingWindow::carry_state`]). A
    /// rate meter (token bucket, GCRA, leaky bucket) keeps its state, the
    /// instant it would be full (or empty) again: the time to recover
    /// carries over, and what it holds is read at the new rate and capacity.
    pub fn carry_state(&self, from: &AnyWordAlgorithm, state: u64, now: Timestamp) -> Option<u64> {
        use AnyWordAlgorithm as A;
        match (self, from) {
            (A::TokenBucket(_), A::TokenBucket(_))
            | (A::Gcra(_), A::Gcra(_))
            | (A::LeakyBucket(_), A::LeakyBucket(_)) => (state != 0).then_some(state),
            (A::FixedWindow(to), A::FixedWindow(from)) => to.carry_state(from, state, now),
            (A::SlidingWindow(to), A::SlidingWindow(from)) => to.carry_state(from, state, now),
            _ => None,
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $alg:ident => $body:expr) => {
        match $self {
            AnyWordAlgorithm::TokenBucket($alg) => $body,
            AnyWordAlgorithm::Gcra($alg) => $body,
            AnyWordAlgorithm::LeakyBucket($alg) => $body,
            AnyWordAlgorithm::FixedWindow($alg) => $body,
            AnyWordAlgorithm::SlidingWindow($alg) => $body,
        }
    };
}

impl WordAlgorithm for AnyWordAlgorithm {
    #[inline]
    fn decide(&self, state: u64, now: Timestamp, cost: u64) -> (Decision, Option<u64>) {
        dispatch!(self, a => a.decide(state, now, cost))
    }

    fn refund(&self, state: u64, now: Timestamp, amount: u64) -> (Decision, Option<u64>) {
        dispatch!(self, a => a.refund(state, now, amount))
    }

    fn fresh_at(&self, state: u64, now: Timestamp) -> Timestamp {
        dispatch!(self, a => a.fresh_at(state, now))
    }

    fn used(&self, state: u64, now: Timestamp) -> u64 {
        dispatch!(self, a => a.used(state, now))
    }

    fn max_unexamined(&self) -> Option<Duration> {
        dispatch!(self, a => a.max_unexamined())
    }
}

impl<A: WordAlgorithm + ?Sized> WordAlgorithm for &A {
    #[inline]
    fn decide(&self, state: u64, now: Timestamp, cost: u64) -> (Decision, Option<u64>) {
        (**self).decide(state, now, cost)
    }

    fn refund(&self, state: u64, now: Timestamp, amount: u64) -> (Decision, Option<u64>) {
        (**self).refund(state, now, amount)
    }

    fn fresh_at(&self, state: u64, now: Timestamp) -> Timestamp {
        (**self).fresh_at(state, now)
    }

    fn used(&self, state: u64, now: Timestamp) -> u64 {
        (**self).used(state, now)
    }

    fn max_unexamined(&self) -> Option<Duration> {
        (**self).max_unexamined()
    }
}

/// Any of Tollgate's algorithms, chosen at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnyAlgorithm {
    /// An algorithm whose state is one word.
    Word(AnyWordAlgorithm),
    /// The sliding log, whose state is a list of timestamps.
    SlidingLog(SlidingLog),
}

impl AnyAlgorithm {
    /// The most units a request can cost and still pass (a bucket's capacity,
    /// a window's limit).
    pub fn capacity(&self) -> u64 {
        match self {
            AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(a)) => a.max_tokens(),
            AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(a)) => a.burst(),
            AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(a)) => a.burst() + 1,
            AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(a)) => a.limit(),
            AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(a)) => a.limit(),
            AnyAlgorithm::SlidingLog(a) => a.limit(),
        }
    }
}

impl AnyAlgorithm {
    /// The span of time one full limit covers.
    ///
    /// For the window algorithms it is their window; for the rate-based ones
    /// (token bucket, GCRA, leaky bucket) the time to refill (or drain) the
    /// whole capacity.
    pub fn window(&self) -> Duration {
        match self {
            AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(a)) => a.refill_time(),
            AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(a)) => a.refill_time(),
            AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(a)) => a.drain_time(),
            AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(a)) => a.window(),
            AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(a)) => a.window(),
            AnyAlgorithm::SlidingLog(a) => a.window(),
        }
    }
}

macro_rules! into_any {
    ($($ty:ident),*) => {$(
        impl From<$ty> for AnyWordAlgorithm {
            fn from(a: $ty) -> Self {
                AnyWordAlgorithm::$ty(a)
            }
        }
        impl From<$ty> for AnyAlgorithm {
            fn from(a: $ty) -> Self {
                AnyAlgorithm::Word(AnyWordAlgorithm::$ty(a))
            }
        }
    )*};
}

into_any!(TokenBucket, Gcra, LeakyBucket, FixedWindow, SlidingWindow);

impl From<AnyWordAlgorithm> for AnyAlgorithm {
    fn from(a: AnyWordAlgorithm) -> Self {
        AnyAlgorithm::Word(a)
    }
}

impl From<SlidingLog> for AnyAlgorithm {
    fn from(a: SlidingLog) -> Self {
        AnyAlgorithm::SlidingLog(a)
    }
}
