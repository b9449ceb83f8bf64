//! Clocks that decisions take their time from.
//!
//! Every clock reports a [`Timestamp`]: nanoseconds since the Unix epoch, so
//! that epoch-aligned windows (a fixed window per minute starts at :00) work
//! with any of them. They differ in cost and guarantees:
//!
//! | clock | reads | never goes back | cost |
//! |---|---|---|---|
//! | [`MonotonicClock`] | the CPU's invariant TSC via `quanta` (or the OS monotonic clock where there is none), anchored to the wall clock once | yes | ~9 ns here |
//! | [`CoarseClock`] | a value a ticker thread refreshes every millisecond | yes | one atomic load |
//! | [`WallClock`] | `SystemTime` | no (NTP may step it) | one `clock_gettime`, ~18 ns here |
//! | [`ManualClock`] | whatever a test sets | as the test wants | one atomic load |
//!
//! The algorithms tolerate a clock that steps backwards (elapsed time is
//! taken as zero), but only the monotonic clocks give exact limits.

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
#[allow(clippy::disallowed_methods)]
fn system_now() -> Timestamp {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    Timestamp(duration_nanos(since))
}

/// A precise clock that never goes backwards.
///
/// It reads the wall clock once, when created, and from then on adds the
/// monotonic time elapsed (from `quanta`: the CPU's invariant TSC where
/// available, the OS monotonic clock otherwise), so it keeps epoch alignment
/// to within the drift between the two clocks since it was created.
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

/// A cheap clock with about one millisecond of resolution.
///
/// A background thread refreshes a shared timestamp every millisecond from a
/// [`MonotonicClock`]; reading it is one atomic load. The thread stops when
/// the last handle is dropped. Time read from it never goes backwards, and
/// lags the precise clock by at most the refresh period plus scheduling delay,
/// so a decision may see time up to a few milliseconds late (it then admits
/// slightly less, never more).
#[derive(Clone, Debug)]
pub struct CoarseClock {
    shared: Arc<CoarseShared>,
}

#[derive(Debug)]
struct CoarseShared {
    now: AtomicU64,
    /// Stops the ticker thread when the last handle goes.
    _ticker: Ticker,
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

    /// A coarse clock with its own ticker thread.
    pub fn new() -> Self {
        Self::shifted(0)
    }

    /// A coarse clock `offset_nanos` nanoseconds ahead of the system's
    /// (negative: behind), for debugging instances whose clocks disagree.
    pub fn shifted(offset_nanos: i64) -> Self {
        let source = MonotonicClock::new().shifted(offset_nanos);
        let start = source.now();
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
                            Some(shared) => shared
                                .now
                                .fetch_max(source.now().as_nanos(), Ordering::Relaxed),
                            None => break,
                        };
                    }
                })
                .expect("spawning the coarse clock thread");
            CoarseShared {
                now: AtomicU64::new(start.as_nanos()),
                _ticker: Ticker {
                    stop,
                    thread: Some(thread),
                },
            }
        });
        CoarseClock { shared }
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp(self.shared.now.load(Ordering::Relaxed))
    }
}

/// The system wall clock, which NTP may step backwards.
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
        assert!(last.as_nanos().abs_diff(wall.as_nanos()) < 60 * crate::NANOS_PER_SEC);
        for _ in 0..10_000 {
            let t = clock.now();
            assert!(t >= last);
            last = t;
        }
    }

    #[test]
    fn coarse_clock_starts_at_the_current_time_and_never_goes_back() {
        let precise = MonotonicClock::new();
        let before = precise.now();
        let coarse = CoarseClock::new();
        let first = coarse.now();
        assert!(first >= before);
        let mut last = first;
        for _ in 0..10_000 {
            let t = coarse.now();
            assert!(t >= last);
            last = t;
        }
        // Never ahead of the precise clock it samples.
        assert!(coarse.now() <= precise.now().saturating_add(Duration::from_millis(1)));
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
}
