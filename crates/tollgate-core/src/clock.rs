//! Clocks that decisions take their time from, and what they do when the wall clock is stepped.
//!
//! Every clock reports a [`Timestamp`]: nanoseconds since the Unix epoch, so
//! that epoch-aligned windows (a fixed window per minute starts at :00) work
//! with any of them. They differ in what they follow and what they cost:
//!
//! | clock | reads | wall clock stepped forward | stepped backward | cost |
//! |---|---|---|---|---|
//! | [`CoarseClock`] | the wall clock, republished every millisecond by a ticker thread | follows at the next tick | holds still until the wall catches up | one atomic load |
//! | [`WallClock`] | `SystemTime` (the one place that reads it) | follows | follows: time goes back | one `clock_gettime`, ~18 ns here |
//! | [`MonotonicClock`] | the CPU's invariant TSC via `quanta` (or the OS monotonic clock), anchored to the wall clock once | ignores | ignores | ~9 ns here |
//! | [`ManualClock`] | whatever a test sets | as the test wants | as the test wants | one atomic load |
//!
//! Decisions use a [`CoarseClock`]: `tollgate serve` builds one over
//! [`WallClock`] (plus `--clock-offset`), and both its in-memory counters and
//! the `on_store_error: local` fallback of its Redis store read it.
//! [`MonotonicClock`] measures how long something took; it drifts from the
//! wall clock with uptime (the TSC is not disciplined by NTP) and never sees
//! a step, so it is not for epoch-aligned decisions.
//!
//! # How the coarse clock meets a stepped wall clock
//!
//! Let `W(t)` be the wall clock read at real time `t` (`SystemTime::now`,
//! plus the configured offset) and `C(t)` what the coarse clock reports. Its
//! ticker runs at instants `t₀ < t₁ < …`, about [`CoarseClock::RESOLUTION`]
//! apart, and publishes
//!
//! ```text
//! C(t₀) = W(t₀),   C(tₖ) = max(C(tₖ₋₁), W(tₖ)),   so   C(t) = max { W(tⱼ) : tⱼ ≤ t }
//! ```
//!
//! the latest wall time seen so far. Hence:
//!
//! * **It never goes back.** `C` is non-decreasing, and every time in a
//!   key's state came from `C`, so no decision sees a `now` earlier than a
//!   time the clock has already reported. (Two decisions on one key may
//!   still reach it out of order, one read `now` a moment before the other
//!   but decided after it; the algorithms place such a request in the newer
//!   window or behind the later arrival time, as they always have.) Each
//!   request reads `now` once, for all its keys.
//! * **A forward step moves windows at once.** If the wall jumps ahead by
//!   `D`, the next tick publishes it: epoch-aligned windows,
//!   `reset_after` (envoyproxy/ratelimit's `duration_until_reset`) and
//!   refills follow the wall within one tick. Example: an hourly fixed window
//!   read 331 s into the hour, then the wall is stepped 30 minutes ahead: the
//!   reset is 3600 − 331 − 1800 = 1469 s away, and that is what is reported
//!   (a clock anchored once kept reporting ~3269 s until restarted).
//! * **A backward step holds time still.** If the wall jumps back by `D`
//!   from `M`, then `C` stays at `M` while `W < M`, that is for `D` of real
//!   time, and follows the wall again once it passes `M`:
//!   `C(t) = max(M, W(t))`. While held, every decision sees the same `now`:
//!   no window ends, no bucket refills, no log entry expires, so each key
//!   admits at most what it had left at `M`. Afterwards time runs on from
//!   `M` as if the step had not happened.
//! * **It lags by at most a tick.** Between ticks `C ≤ W`, behind by at most
//!   one tick interval plus scheduling delay: a decision sees time slightly
//!   late, so it admits slightly less, never more.
//!
//! Why hold rather than follow the wall back: with a key's state written at
//! time `s` and a `now = s − D`,
//!
//! * token bucket, GCRA and leaky bucket compute `TAT' = max(TAT, now) + n·T`
//!   and pass iff `TAT' − now ≤ C·T`; an earlier `now` only makes
//!   `TAT − now` larger, so they would turn stricter (the key waits `D`
//!   longer), never looser;
//! * the sliding log expires entries with `t + window ≤ now`; an earlier
//!   `now` expires fewer, so it also turns stricter;
//! * the fixed window counts in window `⌊now / w⌋`; when `now` falls in the
//!   state's window or the one before it, the request counts in the state's
//!   window, but once `D` crosses two or more window boundaries the state's
//!   window is neither, and the count starts from zero: a spent window would
//!   grant its whole limit again. The sliding window counter likewise
//!   forgets both its counts.
//!
//! Following the wall back would therefore let a client past a fixed or
//! sliding window's limit once per step; holding gives nothing past any
//! limit. The price is on the other side: for `D` after a backward step,
//! decisions are frozen at `M`, so a client that has used its limit waits
//! up to `D` longer. After a large step back (a wall set hours or days ahead
//! and then corrected), restart the server to re-read the wall at once.
//!
//! # What stepping the clock gains
//!
//! Write `W(t) = t + e(t)`, where `e` is the wall's error, changed by every
//! step. Over any stretch of real time `[a, b]`,
//!
//! ```text
//! C(b) − C(a) ≤ (b + max_{s ≤ b} e(s)) − (a + e(a)) = (b − a) + (max_{s ≤ b} e(s) − e(a))
//! ```
//!
//! (plus, on the right, the at most one tick by which `C(a)` may lag the
//! wall), so decision time runs ahead of real time by no more than the
//! furthest the wall has ever been set ahead. Every algorithm admits, over
//! a span of decision time, at most what it admits over that much real
//! time; so someone who can step the wall clock (an operator's mistake, a rogue time
//! source) gains, in all, what waiting `max e` would have given: a forward
//! step of `D` counts as `D` passing (for a fixed window, at most one early
//! window end), repeating forward-and-back steps of `D` gains that `D` once,
//! not once per step, and backward steps gain nothing. No key is admitted
//! past its limit for the time the wall clock shows.
//!
//! # Testing with a stepped wall
//!
//! The wall is injected: [`CoarseClock::following`] takes any [`Clock`] as
//! its wall, and [`CoarseClock::ticked_by_hand`] makes a coarse clock with no
//! ticker thread, whose time moves only on [`CoarseClock::tick`]. A test sets
//! a [`ManualClock`] as the wall, steps it and ticks, with no sleeps.
//!
//! Times after April 2262 are treated as that instant.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A point in time, in nanoseconds since the Unix epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// The timestamp `nanos` nanoseconds after the Unix epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// The timestamp `secs` seconds after the Unix epoch.
    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(crate::NANOS_PER_SEC))
    }

    /// The timestamp `millis` milliseconds after the Unix epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the Unix epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// This timestamp moved `d` later, saturating at the far future.
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_nanos(d)))
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// The latest instant the algorithms distinguish: 2⁶³ ns after the epoch
/// (April 2262). A later `now` is treated as this instant, so no arithmetic
/// on times can overflow.
pub(crate) const LATEST_NANOS: u64 = 1 << 63;

/// The longest window or refill span an algorithm accepts: 2⁶¹ ns (about 73
/// years), so that `now` plus two of them still fits in a `u64`.
pub(crate) const LONGEST_SPAN_NANOS: u64 = 1 << 61;

impl Timestamp {
    /// Nanoseconds since the epoch, capped at the latest supported instant.
    #[inline]
    pub(crate) fn clamped_nanos(self) -> u64 {
        self.0.min(LATEST_NANOS)
    }
}

/// Converts a duration to whole nanoseconds, saturating at `u64::MAX`.
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of time for rate-limit decisions.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// Reads the wall clock; the one place that does.
#[expect(
    clippy::disallowed_methods,
    reason = "the wall clock source every other clock is built on"
)]
fn system_now() -> Timestamp {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    Timestamp(duration_nanos(since))
}

/// A precise clock that never goes backwards, for measuring how long things take.
///
/// It reads the wall clock once, when created, and from then on adds the
/// monotonic time elapsed (from `quanta`: the CPU's invariant TSC where
/// available, the OS monotonic clock otherwise). So it keeps epoch alignment
/// only to within the drift between the two clocks since it was created, and
/// never sees the wall clock stepped: decisions on epoch-aligned windows use
/// a [`CoarseClock`] instead (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    anchor_wall: u64,
    source: quanta::Clock,
    anchor_raw: u64,
}

impl MonotonicClock {
    /// A monotonic clock anchored to the wall clock now.
    pub fn new() -> Self {
        let source = quanta::Clock::new();
        let anchor_raw = source.raw();
        MonotonicClock {
            anchor_wall: system_now().as_nanos(),
            source,
            anchor_raw,
        }
    }
}

impl MonotonicClock {
    /// This clock moved `offset_nanos` nanoseconds ahead (negative: behind).
    ///
    /// For debugging and tests of instances whose clocks disagree.
    pub fn shifted(mut self, offset_nanos: i64) -> Self {
        self.anchor_wall = self.anchor_wall.saturating_add_signed(offset_nanos);
        self
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Timestamp {
        let elapsed = self
            .source
            .delta_as_nanos(self.anchor_raw, self.source.raw());
        Timestamp(self.anchor_wall.saturating_add(elapsed))
    }
}

/// A cheap clock that follows the wall clock, about one millisecond behind, and never goes backwards.
///
/// A ticker thread reads the wall clock every millisecond and publishes
/// `max(previous, wall)`; reading the clock is one atomic load. A forward
/// step of the wall shows at the next tick; after a backward step the clock
/// holds still until the wall catches up (the [module docs](self) give the
/// arithmetic and why). It lags the wall by at most the refresh period plus
/// scheduling delay, so a decision may see time a few milliseconds late (it
/// then admits slightly less, never more). The thread stops when the last
/// handle is dropped.
#[derive(Clone)]
pub struct CoarseClock {
    shared: Arc<CoarseShared>,
}

/// The published time, and where it comes from.
struct CoarseShared {
    now: AtomicU64,
    wall: Box<dyn Clock>,
    offset_nanos: i64,
    /// Stops the ticker thread when the last handle goes (`None`: ticked by hand).
    ticker: Option<Ticker>,
}

impl CoarseShared {
    /// Reads the wall and publishes `max(published, wall + offset)`; returns the time now published.
    fn tick(&self) -> Timestamp {
        let wall = self
            .wall
            .now()
            .as_nanos()
            .saturating_add_signed(self.offset_nanos);
        let previous = self.now.fetch_max(wall, Ordering::Relaxed);
        Timestamp(previous.max(wall))
    }
}

#[derive(Debug)]
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            // The ticker briefly holds a strong reference while it stores the
            // time; if that was the last one, this runs on the ticker itself,
            // which then exits on its own.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

impl CoarseClock {
    /// How often the ticker refreshes the time.
    pub const RESOLUTION: Duration = Duration::from_millis(1);

    /// A coarse clock following the system wall clock, with its own ticker thread.
    pub fn new() -> Self {
        Self::shifted(0)
    }

    /// A coarse clock following the system wall clock `offset_nanos`
    /// nanoseconds ahead (negative: behind), for debugging instances whose
    /// clocks disagree.
    pub fn shifted(offset_nanos: i64) -> Self {
        Self::following(WallClock, offset_nanos)
    }

    /// A coarse clock following `wall` (read `offset_nanos` ahead), refreshed
    /// by its own ticker thread every [`RESOLUTION`](Self::RESOLUTION).
    pub fn following(wall: impl Clock + 'static, offset_nanos: i64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new_cyclic(|weak: &std::sync::Weak<CoarseShared>| {
            let weak = weak.clone();
            let stop_flag = Arc::clone(&stop);
            let thread = std::thread::Builder::new()
                .name("tollgate-coarse-clock".into())
                .spawn(move || {
                    while !stop_flag.load(Ordering::Relaxed) {
                        std::thread::park_timeout(Self::RESOLUTION);
                        match weak.upgrade() {
                            Some(shared) => shared.tick(),
                            None => break,
                        };
                    }
                })
                .expect("spawning the coarse clock thread");
            CoarseShared::starting(
                Box::new(wall),
                offset_nanos,
                Some(Ticker {
                    stop,
                    thread: Some(thread),
                }),
            )
        });
        CoarseClock { shared }
    }

    /// A coarse clock following `wall` with no ticker thread: its time moves
    /// only when [`tick`](Self::tick) is called. For tests that step a fake
    /// wall and tick by hand, without sleeping.
    pub fn ticked_by_hand(wall: impl Clock + 'static) -> Self {
        CoarseClock {
            shared: Arc::new(CoarseShared::starting(Box::new(wall), 0, None)),
        }
    }

    /// Reads the wall now and publishes `max(published, wall)`, as the
    /// ticker does every millisecond; returns the time now published.
    pub fn tick(&self) -> Timestamp {
        self.shared.tick()
    }
}

impl CoarseShared {
    /// Shared state publishing `wall`'s time now.
    fn starting(wall: Box<dyn Clock>, offset_nanos: i64, ticker: Option<Ticker>) -> Self {
        let start = wall.now().as_nanos().saturating_add_signed(offset_nanos);
        CoarseShared {
            now: AtomicU64::new(start),
            wall,
            offset_nanos,
            ticker,
        }
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoarseClock")
            .field("now", &self.now())
            .field("offset_nanos", &self.shared.offset_nanos)
            .field("ticker", &self.shared.ticker.is_some())
            .finish()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp(self.shared.now.load(Ordering::Relaxed))
    }
}

/// The system wall clock (`SystemTime`), which NTP or an operator may step either way.
///
/// Decisions do not read it directly: a [`CoarseClock`] follows it and
/// never goes back.
#[derive(Clone, Copy, Debug, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now(&self) -> Timestamp {
        system_now()
    }
}

/// A clock that moves only when told to; for tests and simulations.
///
/// Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock reading `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(start.as_nanos())),
        }
    }

    /// Sets the time to `t` (which may be earlier than now).
    pub fn set(&self, t: Timestamp) {
        self.now.store(t.as_nanos(), Ordering::Relaxed);
    }

    /// Moves the time forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(duration_nanos(d), Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEC: u64 = crate::NANOS_PER_SEC;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_time() {
        let clock = ManualClock::new(Timestamp::from_secs(100));
        let other = clock.clone();
        assert_eq!(clock.now(), Timestamp::from_secs(100));
        other.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), Timestamp::from_millis(101_500));
        clock.set(Timestamp::from_secs(7));
        assert_eq!(other.now(), Timestamp::from_secs(7));
    }

    #[test]
    fn monotonic_clock_is_anchored_to_the_wall_clock_and_never_goes_back() {
        let wall = WallClock.now();
        let clock = MonotonicClock::new();
        let mut last = clock.now();
        // Within a minute of the wall clock (generous: this is an anchor check).
        assert!(last.as_nanos().abs_diff(wall.as_nanos()) < 60 * SEC);
        for _ in 0..10_000 {
            let t = clock.now();
            assert!(t >= last);
            last = t;
        }
    }

    #[test]
    fn coarse_clock_starts_at_the_current_time_and_never_goes_back() {
        let before = WallClock.now();
        let coarse = CoarseClock::new();
        let first = coarse.now();
        assert!(first >= before);
        let mut last = first;
        for _ in 0..10_000 {
            let t = coarse.now();
            assert!(t >= last);
            last = t;
        }
        // Never ahead of the wall clock it samples.
        assert!(coarse.now() <= WallClock.now());
    }

    #[test]
    fn a_forward_step_of_the_wall_shows_at_the_next_tick() {
        let wall = ManualClock::new(Timestamp::from_secs(1_000));
        let clock = CoarseClock::ticked_by_hand(wall.clone());
        assert_eq!(clock.now(), Timestamp::from_secs(1_000));
        wall.advance(Duration::from_secs(1_800));
        assert_eq!(
            clock.now(),
            Timestamp::from_secs(1_000),
            "published only by a tick"
        );
        assert_eq!(clock.tick(), Timestamp::from_secs(2_800));
        assert_eq!(clock.now(), Timestamp::from_secs(2_800));
    }

    #[test]
    fn a_backward_step_holds_time_still_until_the_wall_catches_up() {
        let wall = ManualClock::new(Timestamp::from_secs(5_000));
        let clock = CoarseClock::ticked_by_hand(wall.clone());
        wall.set(Timestamp::from_secs(5_000 - 1_800));
        // For the 1800 s the wall takes to come back, time stands at 5000 s.
        for _ in 0..1_800 {
            assert_eq!(clock.tick(), Timestamp::from_secs(5_000));
            wall.advance(Duration::from_secs(1));
        }
        assert_eq!(clock.tick(), Timestamp::from_secs(5_000));
        wall.advance(Duration::from_millis(1));
        assert_eq!(clock.tick(), Timestamp::from_millis(5_000_001));
    }

    #[test]
    fn the_offset_moves_every_reading_of_the_wall() {
        let wall = ManualClock::new(Timestamp::from_secs(1_000));
        let ahead = CoarseClock::following(wall.clone(), 30 * SEC as i64);
        let behind = CoarseClock::following(wall.clone(), -30 * SEC as i64);
        assert_eq!(ahead.now(), Timestamp::from_secs(1_030));
        assert_eq!(behind.now(), Timestamp::from_secs(970));
        wall.advance(Duration::from_secs(60));
        assert_eq!(ahead.tick(), Timestamp::from_secs(1_090));
        assert_eq!(behind.tick(), Timestamp::from_secs(1_030));
    }

    #[test]
    fn the_ticker_thread_follows_a_stepped_wall() {
        let wall = ManualClock::new(Timestamp::from_secs(1_000));
        let clock = CoarseClock::following(wall.clone(), 0);
        wall.set(Timestamp::from_secs(2_800));
        // Bounded: the ticker publishes within a millisecond or so; give it 10 s of 1 ms naps.
        for _ in 0..10_000 {
            if clock.now() == Timestamp::from_secs(2_800) {
                break;
            }
            std::thread::sleep(CoarseClock::RESOLUTION);
        }
        assert_eq!(clock.now(), Timestamp::from_secs(2_800));
        wall.set(Timestamp::from_secs(100));
        for _ in 0..20 {
            std::thread::sleep(CoarseClock::RESOLUTION);
            assert_eq!(
                clock.now(),
                Timestamp::from_secs(2_800),
                "held after a step back"
            );
        }
    }

    #[test]
    fn dropping_the_last_coarse_handle_stops_its_thread() {
        let clock = CoarseClock::new();
        let weak = Arc::downgrade(&clock.shared);
        let copy = clock.clone();
        drop(clock);
        assert!(weak.upgrade().is_some(), "a clone keeps the clock alive");
        drop(copy);
        assert!(weak.upgrade().is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// The published time is the running maximum of the wall readings, so
        /// it never goes back, and it runs ahead of real time by no more than
        /// the furthest the wall has been set ahead (the module docs' bound).
        #[test]
        fn coarse_time_is_the_running_maximum_of_the_wall(
            steps in proptest::collection::vec((0..5_000u64, -3_600i64..3_600i64), 1..200),
        ) {
            let start = 1_700_000_000 * SEC;
            let wall = ManualClock::new(Timestamp::from_nanos(start));
            let clock = CoarseClock::ticked_by_hand(wall.clone());
            let (mut real, mut error, mut furthest) = (start, 0i64, 0i64);
            let mut running_max = start;
            for (elapsed_ms, step_secs) in steps {
                real += elapsed_ms * 1_000_000;
                error += step_secs * SEC as i64;
                furthest = furthest.max(error);
                let w = real.saturating_add_signed(error);
                wall.set(Timestamp::from_nanos(w));
                running_max = running_max.max(w);
                let published = clock.tick().as_nanos();
                prop_assert_eq!(published, running_max);
                prop_assert_eq!(clock.now().as_nanos(), published);
                // C(t) − C(start) ≤ (t − start) + max e − e(start), with e(start) = 0.
                prop_assert!(published - start <= (real - start) + furthest.max(0) as u64);
            }
        }
    }
}
