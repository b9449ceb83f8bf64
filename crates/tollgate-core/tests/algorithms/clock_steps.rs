//! Every algorithm on a coarse clock over a stepped wall: a forward step moves windows at once, a backward step admits nothing past a limit.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, Clock, CoarseClock, DelayMode, FixedWindow, Gcra, LeakyBucket,
    LogState, ManualClock, Outcome, SlidingLog, SlidingWindow, Timestamp, TokenBucket,
    WordAlgorithm,
};

use crate::common::{START, config};

const SEC: u64 = 1_000_000_000;
const MINUTE: Duration = Duration::from_secs(60);

/// Every algorithm, each admitting 5 per minute from a fresh key.
fn five_per_minute() -> Vec<AnyAlgorithm> {
    vec![
        FixedWindow::new(5, MINUTE).unwrap().into(),
        SlidingWindow::new(5, MINUTE).unwrap().into(),
        TokenBucket::new(5, 5, MINUTE).unwrap().into(),
        Gcra::new(5, MINUTE, 5).unwrap().into(),
        LeakyBucket::new(5, MINUTE, 4, DelayMode::NoDelay)
            .unwrap()
            .into(),
        SlidingLog::new(5, MINUTE).unwrap().into(),
    ]
}

/// One key's state under any algorithm.
struct Key {
    algorithm: AnyAlgorithm,
    word: u64,
    log: LogState,
    /// The latest `now` any decision on this key saw.
    last_now: Timestamp,
}

impl Key {
    fn new(algorithm: AnyAlgorithm) -> Self {
        Key {
            algorithm,
            word: 0,
            log: LogState::default(),
            last_now: Timestamp::EPOCH,
        }
    }

    /// Decides one unit at `clock.now()`; whether it passed. Panics if time went back for this key.
    fn admit(&mut self, clock: &impl Clock) -> bool {
        let now = clock.now();
        assert!(
            now >= self.last_now,
            "{:?} saw time go back from {:?} to {now:?}",
            self.algorithm,
            self.last_now
        );
        self.last_now = now;
        let decision = match self.algorithm {
            AnyAlgorithm::Word(a) => {
                let (d, state) = AnyWordAlgorithm::decide(&a, self.word, now, 1);
                self.word = state.unwrap_or(self.word);
                d
            }
            AnyAlgorithm::SlidingLog(a) => a.decide(&mut self.log, now, 1),
        };
        decision.outcome() == Outcome::Allowed
    }

    /// Units admitted out of `n` requests at the same instant.
    fn admit_many(&mut self, clock: &impl Clock, n: u64) -> u64 {
        (0..n).map(|_| u64::from(self.admit(clock))).sum()
    }
}

/// A coarse clock ticked by hand over a fake wall reading `start`.
fn stepped_clock(start: Timestamp) -> (CoarseClock, ManualClock) {
    let wall = ManualClock::new(start);
    (CoarseClock::ticked_by_hand(wall.clone()), wall)
}

/// The case: an hourly window read 331 s into the hour, then the wall
/// stepped 30 minutes ahead. The reset is 1469 s away, not the 3269 s a clock
/// anchored at start keeps reporting.
#[test]
fn a_forward_step_moves_an_hourly_windows_reset_to_the_wall() {
    let hour_start = (START / SEC / 3600 + 1) * 3600;
    let (clock, wall) = stepped_clock(Timestamp::from_secs(hour_start + 331));
    let hourly = FixedWindow::new(100, Duration::from_secs(3600)).unwrap();
    let (before, state) = hourly.decide(0, clock.now(), 1);
    assert_eq!(before.reset_after(), Duration::from_secs(3269));

    wall.advance(Duration::from_secs(1800));
    clock.tick();
    let (after, _) = hourly.decide(state.unwrap(), clock.now(), 1);
    assert_eq!(after.reset_after(), Duration::from_secs(1469));
    assert_eq!(after.remaining(), 98, "the same window goes on counting");
}

/// A forward step of 30 minutes counts as 30 minutes passing: a spent key has
/// its whole limit again, and not a unit more.
#[test]
fn a_forward_step_counts_as_time_passing_and_no_more() {
    for algorithm in five_per_minute() {
        let (clock, wall) = stepped_clock(Timestamp::from_nanos(START));
        let mut key = Key::new(algorithm);
        assert_eq!(key.admit_many(&clock, 10), 5, "{algorithm:?}");
        wall.advance(Duration::from_secs(1800));
        clock.tick();
        assert_eq!(key.admit_many(&clock, 10), 5, "{algorithm:?}");
    }
}

/// After the wall is stepped back by any amount (less than a window, one
/// window, many windows, a day), a spent key admits nothing while the wall
/// catches up, and no decision sees time go back.
#[test]
fn a_backward_step_admits_nothing_past_a_spent_limit() {
    for back_secs in [1, 59, 61, 1800, 86_400] {
        for algorithm in five_per_minute() {
            let (clock, wall) = stepped_clock(Timestamp::from_nanos(START));
            let mut key = Key::new(algorithm);
            assert_eq!(key.admit_many(&clock, 10), 5, "{algorithm:?}");
            let held = clock.now();
            wall.set(Timestamp::from_nanos(START - back_secs * SEC));
            // The wall comes back in 250 ms steps, a request after each tick.
            for _ in 0..back_secs * 4 {
                assert_eq!(clock.tick(), held);
                assert!(
                    !key.admit(&clock),
                    "{algorithm:?} admitted while the wall was {back_secs} s back"
                );
                wall.advance(Duration::from_millis(250));
            }
            // Caught up: time runs on from where it stood.
            wall.advance(Duration::from_secs(120));
            assert_eq!(clock.tick(), held.saturating_add(Duration::from_secs(120)));
            assert_eq!(
                key.admit_many(&clock, 10),
                5,
                "{algorithm:?} two minutes on"
            );
        }
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// Under any sequence of wall steps, forward or back, no decision sees
    /// time go back and no key admits more than its limit allows over the
    /// span of decision time — which exceeds the real time elapsed by at most
    /// the furthest the wall was ever set ahead.
    #[test]
    fn no_sequence_of_wall_steps_admits_past_a_limit(
        which in 0..6usize,
        steps in proptest::collection::vec((0..20_000u64, -7_200i64..7_200i64, 0..4u64), 1..120),
    ) {
        let algorithm = five_per_minute()[which];
        let (clock, wall) = stepped_clock(Timestamp::from_nanos(START));
        let mut key = Key::new(algorithm);
        let (mut real, mut error, mut furthest) = (START, 0i64, 0i64);
        let mut admitted = 0;
        for (elapsed_ms, step_secs, requests) in steps {
            real += elapsed_ms * 1_000_000;
            if step_secs.unsigned_abs() > 3_600 {
                // Half the draws step the wall; the rest only let time pass.
                error += step_secs.signum() * (step_secs.unsigned_abs() as i64 - 3_600) * SEC as i64;
            }
            furthest = furthest.max(error);
            wall.set(Timestamp::from_nanos(real.saturating_add_signed(error)));
            clock.tick();
            admitted += key.admit_many(&clock, requests);
        }
        let span = clock.now().as_nanos() - START;
        prop_assert!(span <= (real - START) + furthest.max(0) as u64);
        // Every one of these admits at most 5 per minute of decision time, plus
        // one window's worth at the edges: 5 · (⌊span / minute⌋ + 2).
        let bound = 5 * (span / (60 * SEC) + 2);
        prop_assert!(admitted <= bound, "{:?}: {} admitted over {} s of decision time", algorithm, admitted, span / SEC);
    }
}
