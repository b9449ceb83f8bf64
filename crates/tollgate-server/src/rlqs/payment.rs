//! What the quota service's shares cost the shared budget: a balance in unit·nanoseconds, so that shares of less than a unit per tick are paid exactly, and the span a round pays for.
//!
//! RLS callers, leased instances and the quota service spend one budget: the
//! rule's counter in the engine's store (memory for one instance, Redis for
//! many). A share `s` (units per window `W`) lets an Envoy's token bucket
//! refill `s × Δ / W` units in a time `Δ`, and every change of assignment
//! starts a fresh, full bucket. The service pays for both from the counter
//! *before* the Envoys can spend them (the `book` decides what is paid when).
//!
//! Shares rarely buy whole units per tick (10 a minute is 1/6 of a unit a
//! second), so a counter keeps a balance in unit·nanoseconds: a unit paid
//! adds `W` (in ns), refills at share `s` for `Δ` cost `s × Δ`, a fresh
//! bucket of `b` tokens costs `b × W`. What is paid and not yet spent is
//! carried from one payment to the next.
//!
//! A round pays the refills of the shares in force ahead, through a tick
//! and a margin of one more tick after it ([`span`]): a round that comes
//! short (the counter spent by others, a fixed window's payment landing
//! with a growth's in one window) spends the margin, and the shares are
//! cut only when what is paid does not reach the next round and half a
//! tick more (for it to come late in). The part
//! behind is counted for at most the counter's memory
//! ([`Rate::memory`](super::bucket::Rate::memory)): spend older than that
//! has left the counter, and paying for it would only take from the
//! callers of the window in force; so a stall costs at most a window's rate
//! (or a burst) of catch-up, never a huge payment.

use std::time::Duration;

use tollgate_core::Timestamp;

/// How far ahead of a round the shares in force are paid, beyond the tick:
/// one more tick, so that one short round cuts nothing.
pub const MARGIN_TICKS: u32 = 1;

/// The span a round at `now` pays the refills for: from `covered` (the
/// instant the shares are paid through; `now` for a first round), counted
/// for at most `memory` behind `now`, to two ticks past the `last` round
/// paid — one tick on from where an on-time round leaves it, so that a
/// round up to half a tick late pays one tick as an on-time one does and a
/// window of the counter holding one round of each payer sees the same
/// units each second (a late round paying 1.3 ticks and the next 0.7 would
/// overdraw one window) — at most to a `tick` and the margin ahead of
/// `now`; and all the way there where that would not reach the next round
/// and half a tick (a first round, a round more than half a tick late).
/// Empty when it is paid that far already.
pub fn span(
    covered: Option<Timestamp>,
    last: Option<Timestamp>,
    now: Timestamp,
    tick: Duration,
    memory: Duration,
) -> (Timestamp, Timestamp) {
    let most = now.saturating_add(tick.saturating_mul(1 + MARGIN_TICKS));
    let least = now.saturating_add(tick + tick / 2);
    let oldest = Timestamp::from_nanos(now.as_nanos().saturating_sub(duration_nanos(memory)));
    let from = covered.unwrap_or(now).max(oldest).min(most);
    let on = last.map(|last| last.saturating_add(tick.saturating_mul(2 + MARGIN_TICKS)));
    let until = match on {
        Some(on) if on >= least => on.min(most),
        _ => most,
    };
    (from, until.max(from))
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A counter's units paid and not yet spent, in unit·nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Balance(u128);

impl Balance {
    /// The balance in unit·nanoseconds.
    pub fn nanos(&self) -> u128 {
        self.0
    }

    /// Credits `units` taken from the store, for a counter of `window`.
    pub fn credit(&mut self, units: u64, window: Duration) {
        self.0 = self
            .0
            .saturating_add(u128::from(units) * window.as_nanos().max(1));
    }

    /// Credits `nanos` unit·ns given back (prepaid refills a change or a close no longer needs).
    pub fn refund(&mut self, nanos: u128) {
        self.0 = self.0.saturating_add(nanos);
    }

    /// Units to take from the store so that the balance covers `cost` unit·ns; 0 when it already does.
    pub fn units_for(&self, cost: u128, window: Duration) -> u64 {
        let window = window.as_nanos().max(1);
        u64::try_from(cost.saturating_sub(self.0).div_ceil(window)).unwrap_or(u64::MAX)
    }

    /// Spends `cost` unit·ns if the balance covers it; whether it did.
    pub fn spend(&mut self, cost: u128) -> bool {
        if cost > self.0 {
            return false;
        }
        self.0 -= cost;
        true
    }

    /// Spends the refills of `share` units per window (`share` in unit·ns per ns)
    /// for as much of `span` ns as the balance covers; the ns covered.
    pub fn spend_refills(&mut self, share: u64, span: u128) -> u128 {
        if share == 0 {
            return span;
        }
        let covered = span.min(self.0 / u128::from(share));
        self.0 -= covered * u128::from(share);
        covered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_balance_carries_what_was_paid_and_not_spent() {
        let mut balance = Balance::default();
        // 20 units of a per-second counter: 20 s·unit.
        balance.credit(20, SECOND);
        assert_eq!(balance.units_for(25 * SECOND.as_nanos(), SECOND), 5);
        assert!(!balance.spend(21 * SECOND.as_nanos()));
        assert!(balance.spend(8 * SECOND.as_nanos()), "a fresh bucket of 8");
        // 12 left: refills of 10 a second for 1.2 s of a 2 s span.
        assert_eq!(
            balance.spend_refills(10, 2 * SECOND.as_nanos()),
            1_200_000_000
        );
        assert_eq!(balance, Balance(0));
        // 10 a minute: one unit of a per-minute counter buys six seconds.
        balance.credit(1, MINUTE);
        assert_eq!(
            balance.spend_refills(10, 6 * SECOND.as_nanos()),
            6 * SECOND.as_nanos()
        );
        assert_eq!(balance, Balance(0));
        balance.refund(7);
        assert_eq!(balance.nanos(), 7);
    }

    #[test]
    fn a_round_pays_from_the_instant_covered_to_a_tick_and_a_margin_ahead_at_most_a_memory_behind()
    {
        let t = Timestamp::from_secs(1_000);
        let at = |millis: u64| t.saturating_add(Duration::from_millis(millis));
        // A first round: two ticks ahead.
        assert_eq!(span(None, None, t, SECOND, MINUTE), (t, at(2_000)));
        // On time, covered through two ticks ahead of the last round: one tick more.
        assert_eq!(
            span(Some(at(2_000)), Some(at(0)), at(1_000), SECOND, MINUTE),
            (at(2_000), at(3_000))
        );
        // Covered only to 800 ms (the last round came short): from there.
        assert_eq!(
            span(Some(at(800)), Some(at(0)), at(1_000), SECOND, MINUTE),
            (at(800), at(3_000))
        );
        // Nothing when it is paid that far.
        let (from, until) = span(Some(at(9_000)), Some(at(0)), at(1_000), SECOND, MINUTE);
        assert_eq!(from, until);
        // A round 300 ms late, then the next on time: one tick each, as
        // on time (not 1.3, then 0.7).
        assert_eq!(
            span(Some(at(2_000)), Some(at(0)), at(1_300), SECOND, MINUTE),
            (at(2_000), at(3_000))
        );
        assert_eq!(
            span(Some(at(3_000)), Some(at(1_300)), at(2_000), SECOND, MINUTE),
            (at(3_000), at(4_000))
        );
        // 600 ms late: through the margin.
        assert_eq!(
            span(Some(at(2_000)), Some(at(0)), at(1_600), SECOND, MINUTE),
            (at(2_000), at(3_600))
        );
        // A stall of an hour on a per-minute counter: a minute behind.
        assert_eq!(
            span(Some(at(1_000)), Some(at(0)), at(3_601_000), SECOND, MINUTE),
            (at(3_541_000), at(3_603_000))
        );
    }
}
