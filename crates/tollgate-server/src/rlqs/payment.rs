//! What the shares in force cost the shared budget per tick: a balance in unit·nanoseconds, so that shares of less than a unit per tick are paid exactly.
//!
//! RLS callers, leased instances and the quota service spend one budget: the
//! rule's counter in the engine's store (memory for one instance, Redis for
//! many). A share `s` (units per window `W`) lets an Envoy's token bucket
//! refill `s × Δ / W` units in a time `Δ`. Every tick the service takes
//! that much from the counter *before* the Envoys can spend it (the
//! `book` decides what happens when the counter has less).
//!
//! Shares rarely buy whole units per tick (10 a minute is 1/6 of a unit a
//! second), so a counter keeps a balance in unit·nanoseconds: a unit paid
//! adds `W` (in ns), a tick at share `s` costs `s × Δ` (in ns). The service
//! pays `⌈(s × Δ − balance) / W⌉` units, and the share the balance covers,
//! `⌊balance / Δ⌋` capped at `s`, is debited at once, so the balance never
//! goes below zero and what is paid and not yet due is less than one unit.
//!
//! The interval `Δ` a round pays for is the time that actually passed
//! ([`interval`]): from the instant the last round paid through to a tick
//! ahead. A round that runs late (round trips to Redis, a busy runtime)
//! pays for the refills the Envoys' buckets made meanwhile, so the shares
//! in force are paid for however the rounds are spaced. The part behind is
//! counted for at most the counter's memory ([`Rate::memory`]): spend
//! older than that has left the counter, and paying for it would only
//! take from the callers of the window in force; so a stall costs at most
//! a window's rate (or a burst) of catch-up, never a huge payment.

use std::time::Duration;

use tollgate_core::Timestamp;

#[cfg(doc)]
use super::bucket::Rate;

/// The time a round at `now` pays for: from `paid` (the instant the last
/// round paid through; `now` for a first round) to a `tick` ahead of
/// `now`, the part behind `now` counted for at most `memory`. Zero when
/// the last round already paid that far.
pub fn interval(
    paid: Option<Timestamp>,
    now: Timestamp,
    tick: Duration,
    memory: Duration,
) -> Duration {
    let until = now.saturating_add(tick);
    until
        .saturating_since(paid.unwrap_or(now))
        .min(tick.saturating_add(memory))
}

/// A reporter's prepaid balance for one shared budget, in unit·nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Balance(u128);

impl Balance {
    /// Units to take from the store so that a share of `share` per `window`
    /// is covered for `interval`; 0 when the balance already covers it.
    pub fn units_due(&self, share: u64, interval: Duration, window: Duration) -> u64 {
        let cost = u128::from(share) * interval.as_nanos();
        let window = window.as_nanos().max(1);
        u64::try_from(cost.saturating_sub(self.0).div_ceil(window)).unwrap_or(u64::MAX)
    }

    /// Credits `units` taken from the store, then debits the interval at the
    /// largest share up to `share` they cover; that share.
    pub fn settle(&mut self, units: u64, share: u64, interval: Duration, window: Duration) -> u64 {
        self.0 = self
            .0
            .saturating_add(u128::from(units) * window.as_nanos().max(1));
        if interval.is_zero() {
            return share;
        }
        let interval = interval.as_nanos();
        let covered = u64::try_from(self.0 / interval).unwrap_or(u64::MAX);
        let share = share.min(covered);
        self.0 -= u128::from(share) * interval;
        share
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_share_is_paid_ahead_by_the_interval_and_fractions_carry_over() {
        let mut balance = Balance::default();
        // 20 a second for one second: 20 units, all spent ahead.
        assert_eq!(balance.units_due(20, SECOND, SECOND), 20);
        assert_eq!(balance.settle(20, 20, SECOND, SECOND), 20);
        assert_eq!(balance, Balance(0));
        // 10 a minute, reported every second: one unit buys six seconds.
        let paid: Vec<u64> = (0..12)
            .map(|_| {
                let due = balance.units_due(10, SECOND, MINUTE);
                assert_eq!(balance.settle(due, 10, SECOND, MINUTE), 10);
                due
            })
            .collect();
        assert_eq!(paid, [1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(balance, Balance(0), "12 s of 10 a minute is 2 units");
    }

    #[test]
    fn a_round_pays_from_the_instant_last_paid_to_a_tick_ahead_at_most_a_memory_behind() {
        let t = Timestamp::from_secs(1_000);
        let at = |millis: u64| t.saturating_add(Duration::from_millis(millis));
        // A first round, and one on time: one tick.
        assert_eq!(interval(None, t, SECOND, MINUTE), SECOND);
        assert_eq!(interval(Some(at(1_000)), at(1_000), SECOND, MINUTE), SECOND);
        // 250 ms late: the 250 ms the buckets refilled unpaid, and the tick ahead.
        assert_eq!(
            interval(Some(at(1_000)), at(1_250), SECOND, MINUTE),
            Duration::from_millis(1_250)
        );
        // Early: only what is not paid yet; nothing when all of it is.
        assert_eq!(
            interval(Some(at(1_000)), at(600), SECOND, MINUTE),
            Duration::from_millis(600)
        );
        assert_eq!(
            interval(Some(at(2_000)), at(1_000), SECOND, MINUTE),
            Duration::ZERO
        );
        // A stall of an hour on a per-minute counter: a minute behind, a tick ahead.
        assert_eq!(
            interval(Some(at(1_000)), at(3_601_000), SECOND, MINUTE),
            MINUTE + SECOND
        );
    }

    #[test]
    fn what_the_store_gave_decides_the_share() {
        let mut balance = Balance::default();
        // 100 a second wanted, the store had 30: the share is 30.
        assert_eq!(balance.units_due(100, SECOND, SECOND), 100);
        assert_eq!(balance.settle(30, 100, SECOND, SECOND), 30);
        // Nothing left: the share is 0 (deny all) and nothing is owed.
        assert_eq!(balance.settle(0, 100, SECOND, SECOND), 0);
        assert_eq!(balance, Balance(0));
        // A two-second interval at 5 a second costs 10.
        assert_eq!(balance.units_due(5, 2 * SECOND, SECOND), 10);
        assert_eq!(balance.settle(9, 5, 2 * SECOND, SECOND), 4);
        assert_eq!(balance, Balance(u128::from(SECOND.as_nanos() as u64)));
    }
}
