//! A reporter's demand from one usage report: the rate after a fall the report shows, and whether the share held it back (hungry).
//!
//! Envoy 1.40 reports a bucket every 5 s: the requests allowed and denied
//! over the whole interval. After a change of demand at an instant in the
//! interval, the report's average mixes the old rate and the new one, and
//! the service cannot tell from it when the change came. Two more facts
//! of the report narrow it down:
//!
//! * **A fall.** While an Envoy is held back by its share it refuses its
//!   requests at a steady rate `δ₀` (its previous report's refusals over
//!   its interval), on a demand `d₀`. If its demand then falls below its
//!   share, it refuses nothing more: the refusals `n` of the report say it
//!   was held back for `p = n / δ₀`, and the rest of the interval, `q =
//!   E − p`, carried the new rate `(a − d₀ p) / q` (`a` the requests of
//!   the report, `E` its length). Where the demand did not fall, `p` is
//!   the whole interval (or more: a rise) and the average stands; so does
//!   it where `q` is under a second (too few requests to read a rate
//!   from), or the estimate is above the average.
//! * **Hunger.** An Envoy that refused a fifth of its requests or more
//!   (and shows no fall) wants more than its share, by an amount the average may understate
//!   by up to the interval's whole length (a rise just before the report):
//!   it claims the whole rate, and max-min gives it what the others'
//!   claims leave.
//!
//! Neither touches what is paid or how shares sum: they change claims
//! only, and every share is still paid before it is sent and the split
//! never passes the rate. A wrong reading costs fairness for one report
//! interval, until the next report.

use std::time::Duration;

use super::super::bucket::Rate;

/// What one report says of its reporter, per window of the counter's rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Estimate {
    /// Its demand: the report's average, or the rate after a fall.
    pub(super) demand: u64,
    /// Its refusals over the report's interval.
    pub(super) refused: u64,
    /// Whether its share held it back (a fifth of its requests refused or more).
    pub(super) hungry: bool,
}

/// The reporter's [`Estimate`] from `arrived` requests, `denied` of them
/// refused, over `elapsed` (at least a second), with its previous
/// report's demand and refusals `before` (none for a bucket's first
/// report that showed a rate).
pub(super) fn estimate(
    arrived: u64,
    denied: u64,
    elapsed: Duration,
    before: Option<(u64, u64)>,
    rate: &Rate,
) -> Estimate {
    let window = rate.window.as_nanos().max(1);
    let elapsed = elapsed.max(Duration::from_secs(1)).as_nanos();
    let per_window =
        |count: u128| -> u64 { u64::try_from(count * window / elapsed).unwrap_or(u64::MAX) };
    let (arrived, denied_n) = (u128::from(arrived), u128::from(denied.min(arrived)));
    let average = per_window(arrived);
    let fallen = before
        .and_then(|(demand, refused)| {
            after_a_fall(arrived, denied_n, elapsed, demand, refused, window)
        })
        .filter(|&fallen| fallen < average);
    Estimate {
        demand: fallen.unwrap_or(average),
        refused: per_window(denied_n),
        // (Refusals before a fall say nothing of the demand after it.)
        hungry: fallen.is_none() && denied_n > 0 && denied_n * 5 >= arrived,
    }
}

/// The rate per window after a fall within a report of `arrived` requests,
/// `denied` refused, over `elapsed` ns, from a `demand` refused at
/// `refused` per window (see the module docs); none where the report
/// shows no fall to read.
fn after_a_fall(
    arrived: u128,
    denied: u128,
    elapsed: u128,
    demand: u64,
    refused: u64,
    window: u128,
) -> Option<u64> {
    if refused == 0 {
        return None;
    }
    // Held back for `p` ns: its refusals at the previous rate of refusal.
    let held = denied * window / u128::from(refused);
    let after = elapsed.checked_sub(held)?;
    if after < Duration::from_secs(1).as_nanos() {
        return None;
    }
    // The requests of the held-back part at the previous demand, per window.
    let before = u128::from(demand) * held;
    let rest = (arrived * window).saturating_sub(before);
    u64::try_from(rest / after).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate() -> Rate {
        Rate {
            counter: b"c".to_vec(),
            requests: 40,
            window: Duration::from_secs(1),
            burst: 40,
        }
    }

    const FIVE: Duration = Duration::from_secs(5);

    #[test]
    fn a_fall_within_the_interval_reads_as_the_rate_after_it() {
        // 100 a second held to 28 (72 refused a second), falling to 10 a
        // second 2.5 s before the report: 250 + 25 requests, 180 refused.
        // The average says 55; the refusals say it fell 2.5 s ago, to 10.
        let e = estimate(275, 180, FIVE, Some((100, 72)), &rate());
        assert_eq!(e.demand, 10);
        assert!(!e.hungry, "180 of 275 refused, all before the fall");
        // A second before the report: still read (4 s held back).
        let e = estimate(400 + 10, 288, FIVE, Some((100, 72)), &rate());
        assert_eq!(e.demand, 10);
        // Half a second before it: too few requests after it to read; the average stands.
        let e = estimate(450 + 5, 324, FIVE, Some((100, 72)), &rate());
        assert_eq!(e.demand, 91);
    }

    #[test]
    fn a_steady_or_rising_demand_reads_as_its_average() {
        // Held back all along, with the refusals wobbling: the same rate.
        for denied in [330, 360, 380] {
            let e = estimate(500, denied, FIVE, Some((100, 72)), &rate());
            assert_eq!(e.demand, 100, "{denied} refused");
        }
        // Never held back: nothing to read but the average.
        let e = estimate(50, 0, FIVE, Some((10, 0)), &rate());
        assert_eq!(
            e,
            Estimate {
                demand: 10,
                refused: 0,
                hungry: false
            }
        );
        // A rise: more refused than before, the average (and hungry).
        let e = estimate(550, 410, FIVE, Some((100, 72)), &rate());
        assert_eq!((e.demand, e.hungry), (110, true));
    }

    #[test]
    fn hungry_is_a_fifth_of_the_requests_refused_or_more() {
        // 10 a second at a share of 11, then 100 a second 0.5 s before the
        // report: 45 + 50 requests, 33 refused (its bucket held 11 tokens).
        assert!(estimate(95, 33, FIVE, Some((10, 0)), &rate()).hungry);
        // A client stalled for 2 s then caught up: 9 of 50 refused.
        assert!(!estimate(50, 9, FIVE, Some((10, 0)), &rate()).hungry);
        assert!(!estimate(0, 0, FIVE, None, &rate()).hungry);
    }
}
