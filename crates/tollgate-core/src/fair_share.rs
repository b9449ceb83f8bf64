//! Fair shares of one rate among the clients that ask for it: a floor each, the rest in proportion to demand, never more than the rate in all.
//!
//! The rate quota service hands each connected proxy a share of a rule's
//! rate `R` (units per window) for one bucket, from the demand each one
//! reported (`dᵢ`, units per window: allowed plus denied, so a proxy held
//! back by its share still shows what it wants). For `n` clients:
//!
//! * **Floor.** Every client is counted as wanting at least `f = ⌊R / 4n⌋`
//!   (`wᵢ = max(dᵢ, f)`), so a quiet client can start and the floors take
//!   at most a quarter of the rate.
//! * **Room for all.** When `Σ wᵢ ≤ R`, each gets `wᵢ` plus an equal part of
//!   what is left, `⌊(R − Σ wᵢ) / n⌋`: demand can grow before the next report.
//! * **Contention.** Otherwise each gets its floor plus its part of the
//!   rest in proportion to its demand: `sᵢ = f + ⌊(R − n·f) × dᵢ / Σ dⱼ⌋`.
//!   Admissions then follow arrivals as one limiter for the whole fleet
//!   would: a client with 90 % of the demand gets about 90 % of the rate.
//!
//! In every case `Σ sᵢ ≤ R` (the sums are floored) and `sᵢ ≥ f`; under
//! contention `sᵢ ≤ dᵢ + f`. The shares are a function of the latest demands only,
//! so a shift of demand moves them at the next report that shows it.
//!
//! [`steady_shares`] puts them in force with hysteresis: a share within a
//! tenth of the one in force keeps it (a client's token bucket restarts full
//! on every change), still never summing past `R`.

/// Each client's share of `rate` for its reported `demands` (same order), by the module's rule.
pub fn fair_shares(rate: u64, demands: &[u64]) -> Vec<u64> {
    let n = demands.len() as u64;
    if n == 0 {
        return Vec::new();
    }
    let floor = rate / n.saturating_mul(4);
    let wants: Vec<u64> = demands.iter().map(|&d| d.max(floor)).collect();
    let total = wants.iter().fold(0u64, |sum, &w| sum.saturating_add(w));
    if total <= rate {
        let spare = (rate - total) / n;
        return wants.into_iter().map(|w| w + spare).collect();
    }
    let demand = demands.iter().fold(0u128, |sum, &d| sum + u128::from(d));
    let rest = u128::from(rate - floor * n);
    demands
        .iter()
        .map(|&d| floor + u64::try_from(rest * u128::from(d) / demand).unwrap_or(0))
        .collect()
}

/// The shares to put in force: [`fair_shares`], except that a share within
/// a tenth of the one in force (`held[i]`, `None` for a new client) keeps
/// it, whether it would grow or fall, and the sum stays at most `rate`.
///
/// A client enforces its share as a token bucket that restarts full
/// whenever the share changes, so a share that moves by a token or two at
/// every report would hand out a fresh bucket each time. Holding a small
/// fall back can make the shares sum past `rate`; the excess is then taken
/// first from the growth of the shares that grow (down to what they hold),
/// then by letting the held falls happen after all. So the sum never passes
/// `rate`, and a share changes only when it moves by more than a tenth or
/// the others need its room.
pub fn steady_shares(rate: u64, demands: &[u64], held: &[Option<u64>]) -> Vec<u64> {
    let fair = fair_shares(rate, demands);
    let within_a_tenth = |old: u64, new: u64| old.abs_diff(new).saturating_mul(10) <= old;
    let mut kept: Vec<u64> = fair
        .iter()
        .zip(held)
        .map(|(&new, &old)| match old {
            Some(old) if within_a_tenth(old, new) => old,
            _ => new,
        })
        .collect();
    let mut excess = kept
        .iter()
        .fold(0u64, |sum, &k| sum.saturating_add(k))
        .saturating_sub(rate);
    // First from the growth of the shares that grow.
    for (k, old) in kept.iter_mut().zip(held) {
        if excess == 0 {
            break;
        }
        let floor = old.unwrap_or(0);
        if *k > floor {
            let take = (*k - floor).min(excess);
            *k -= take;
            excess -= take;
        }
    }
    // Then the falls held back happen after all.
    for (k, &new) in kept.iter_mut().zip(&fair) {
        if excess == 0 {
            break;
        }
        if *k > new {
            let take = (*k - new).min(excess);
            *k -= take;
            excess -= take;
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_move_keeps_the_share_in_force_and_a_large_one_does_not() {
        // Fair: [83, 8, 8]. 80 → 83 is within a tenth: kept; 5 → 8 is not.
        assert_eq!(
            steady_shares(100, &[900, 5, 5], &[Some(80), Some(5), Some(8)]),
            vec![80, 8, 8]
        );
        // A fall of 85 → 83 is held back too, as the sum allows.
        assert_eq!(
            steady_shares(100, &[900, 5, 5], &[Some(85), Some(8), Some(7)]),
            vec![85, 8, 7],
            "held at 85 the sum would be 101: the growth of 7 → 8 pays for it"
        );
        // When no growth can pay, the fall happens after all.
        assert_eq!(
            steady_shares(100, &[900, 5, 5], &[Some(85), Some(8), Some(8)]),
            vec![84, 8, 8]
        );
        // A new client takes its fair share; the others make room.
        assert_eq!(
            steady_shares(100, &[300, 300], &[Some(100), None]),
            vec![50, 50]
        );
    }

    #[test]
    fn room_for_all_shares_the_spare_evenly() {
        assert_eq!(fair_shares(100, &[10, 20]), vec![46, 54], "the floor is 12");
        assert_eq!(fair_shares(100, &[0, 0, 0, 0]), vec![25, 25, 25, 25]);
        assert_eq!(fair_shares(100, &[]), Vec::<u64>::new());
    }

    #[test]
    fn contention_follows_demand_above_a_floor() {
        assert_eq!(fair_shares(100, &[900, 5, 5]), vec![83, 8, 8]);
        assert_eq!(
            fair_shares(20, &[450, 50]),
            vec![16, 3],
            "90 % of the demand, 80 % of the rate"
        );
        assert_eq!(fair_shares(100, &[300, 300]), vec![50, 50]);
        // A client asking for nothing still gets the floor, 100 / (4 × 2).
        assert_eq!(fair_shares(100, &[1000, 0]), vec![88, 12]);
    }

    proptest::proptest! {
        #[test]
        fn shares_never_sum_past_the_rate_and_keep_the_floor(
            rate in 0u64..1_000_000,
            demands in proptest::collection::vec(0u64..2_000_000, 0..50),
        ) {
            let shares = fair_shares(rate, &demands);
            // Whatever is in force, the steady shares never sum past the rate either.
            let held: Vec<Option<u64>> = demands
                .iter()
                .enumerate()
                .map(|(i, &d)| (i % 3 != 0).then_some(d % (rate + 1)))
                .collect();
            let steady = steady_shares(rate, &demands, &held);
            proptest::prop_assert!(steady.iter().sum::<u64>() <= rate);
            proptest::prop_assert_eq!(shares.len(), demands.len());
            proptest::prop_assert!(shares.iter().sum::<u64>() <= rate);
            let floor = rate / (demands.len() as u64 * 4).max(1);
            for (&share, &demand) in shares.iter().zip(&demands) {
                proptest::prop_assert!(share >= floor.min(rate));
                // Under contention nobody gets more than it asked for plus the floor.
                if demands.iter().map(|d| d.max(&floor)).sum::<u64>() > rate {
                    proptest::prop_assert!(share <= demand + floor);
                }
            }
        }
    }
}
