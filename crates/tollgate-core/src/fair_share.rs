//! Max-min fair shares of one capacity among the holders that ask for it: a holder asking less than its fair share gets all it asks, the rest is split the same way among the others, never more than the capacity in all.
//!
//! The rate quota service splits a rule's rate `C` (units per window)
//! between the Envoys reporting one bucket, and the fleet splits a key's
//! rate between the instances sharing it; both call [`fair_shares`]. Each
//! holder `i` has a demand `dᵢ` (units per window) or, before its first
//! report, none:
//!
//! * **Newcomer.** A holder with no demand yet claims the floor
//!   `⌊C / n⌋` (`n` holders): an equal part, so it can start.
//! * **Max-min.** The claims are served in increasing order: while the
//!   smallest claim fits in an equal part of what is left, it is served in
//!   full; the holders left then split what remains equally (the units the
//!   floor division leaves go one each to the largest claims). So a holder
//!   whose claim is below its fair share gets all of it, and no holder can
//!   gain without one with a smaller or equal share (to the unit) losing.
//! * **Leftover.** When every claim is served, capacity may be left: the
//!   [`Leftover`] option says where it goes. [`Leftover::Unassigned`]
//!   keeps it out of the shares (the quota service: it stays in the
//!   shared budget for RLS callers and other instances);
//!   [`Leftover::Spread`] adds it to the shares in equal parts, as
//!   headroom for demand to grow before the next report (the fleet).
//!
//! In every case `Σ sᵢ ≤ C`; with [`Leftover::Unassigned`] also `sᵢ ≤`
//! the holder's claim. The shares are a function of the latest demands
//! only, so a shift of demand moves them at the next report that shows it.
//!
//! [`steady_shares`] puts them in force with hysteresis: a share in force
//! is kept while the fair share is within a tenth of it, or of an equal
//! part for a small share (Envoy's token bucket restarts full on every
//! change), still never summing past `C`.

/// Where the capacity left once every holder's claim is served goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leftover {
    /// Nobody gets it: each share is at most its holder's claim.
    Unassigned,
    /// Split in equal parts among all holders, as headroom (the units the
    /// floor division leaves stay unassigned).
    Spread,
}

/// What each holder claims: its demand, or the floor `⌊capacity / n⌋` for
/// a newcomer (`None`).
fn claims(capacity: u64, demands: &[Option<u64>]) -> Vec<u64> {
    let floor = capacity / (demands.len() as u64).max(1);
    demands.iter().map(|d| d.unwrap_or(floor)).collect()
}

/// Each holder's max-min fair share of `capacity` for its `demands` (same
/// order; `None` for a holder that has not reported yet), the leftover
/// handled by `leftover` (see the module docs).
pub fn fair_shares(capacity: u64, demands: &[Option<u64>], leftover: Leftover) -> Vec<u64> {
    let claims = claims(capacity, demands);
    let mut order: Vec<usize> = (0..claims.len()).collect();
    // Smallest claim first; among equal claims, the later index first, so
    // the remainder units below go to the largest claims, earlier first.
    order.sort_by_key(|&i| (claims[i], std::cmp::Reverse(i)));
    let mut shares = vec![0u64; claims.len()];
    let mut left = capacity;
    for (served, &i) in order.iter().enumerate() {
        let waiting = (order.len() - served) as u64;
        let part = left / waiting;
        if claims[i] <= part {
            shares[i] = claims[i];
            left -= claims[i];
            continue;
        }
        // Every claim from here on is above an equal part: split it all.
        let extra = left % waiting;
        for (k, &j) in order[served..].iter().enumerate() {
            // The last `extra` (the largest claims) get one unit more.
            shares[j] = part + u64::from((k as u64) >= waiting - extra);
        }
        return shares;
    }
    if leftover == Leftover::Spread && !shares.is_empty() {
        let part = left / shares.len() as u64;
        for share in &mut shares {
            *share += part;
        }
    }
    shares
}

/// The shares to put in force: [`fair_shares`], except that a share in
/// force (`held[i]`, `None` for a new holder) is kept while the fair share
/// is within a tenth of it, or of an equal part `⌊capacity / n⌋` if that is
/// larger, whether it would grow or fall; and the sum stays at most `capacity`.
///
/// A holder enforcing its share as a token bucket that restarts full
/// whenever the share changes (Envoy's) would get a fresh bucket at every
/// report if a share moving with the noise of its demand were sent; the
/// equal part keeps a small share from following every wobble of a small
/// demand. Holding a fall back can make the shares sum past `capacity`;
/// the excess is then taken first from the growth of the shares that grow
/// (down to what they hold), then by letting the held falls happen after
/// all. So the sum never passes `capacity`, and a share changes only when
/// it moves by more than its band or the others need its room.
pub fn steady_shares(
    capacity: u64,
    demands: &[Option<u64>],
    held: &[Option<u64>],
    leftover: Leftover,
) -> Vec<u64> {
    let fair = fair_shares(capacity, demands, leftover);
    // A tenth of the share, or of an equal part for a small share.
    let equal = capacity / (demands.len() as u64).max(1);
    let within_band = |old: u64, new: u64| old.abs_diff(new).saturating_mul(10) <= old.max(equal);
    let mut kept: Vec<u64> = fair
        .iter()
        .zip(held)
        .map(|(&new, &old)| match old {
            Some(old) if within_band(old, new) => old,
            _ => new,
        })
        .collect();
    let mut excess = kept
        .iter()
        .fold(0u64, |sum, &k| sum.saturating_add(k))
        .saturating_sub(capacity);
    // First from the growth of the shares that grow (down to what they hold).
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
    use Leftover::{Spread, Unassigned};

    fn reported(demands: &[u64]) -> Vec<Option<u64>> {
        demands.iter().copied().map(Some).collect()
    }

    #[test]
    fn a_holder_below_its_fair_share_gets_its_demand_and_the_rest_is_split_again() {
        // 40 among 100 and 10: the small one gets its 10, the large one the rest.
        assert_eq!(fair_shares(40, &reported(&[100, 10]), Unassigned), [30, 10]);
        // 100 among 5, 30, 200, 200: 5 served, then 95 / 3 = 31 > 30 serves
        // 30, then 65 / 2 between the two large ones, the odd unit to the earlier.
        assert_eq!(
            fair_shares(100, &reported(&[5, 30, 200, 200]), Unassigned),
            [5, 30, 33, 32]
        );
        // Nobody below an equal part: equal parts, the odd unit to the largest claim.
        assert_eq!(
            fair_shares(10, &reported(&[50, 60, 70]), Unassigned),
            [3, 3, 4]
        );
        assert_eq!(fair_shares(100, &[], Unassigned), Vec::<u64>::new());
    }

    #[test]
    fn a_newcomer_claims_an_equal_part_until_it_reports() {
        assert_eq!(fair_shares(40, &[Some(100), None], Unassigned), [20, 20]);
        assert_eq!(fair_shares(40, &[Some(5), None], Unassigned), [5, 20]);
        assert_eq!(
            fair_shares(40, &[None, None, None], Unassigned),
            [13, 13, 13]
        );
    }

    #[test]
    fn the_leftover_stays_unassigned_or_is_spread_as_headroom_as_asked() {
        assert_eq!(fair_shares(100, &reported(&[10, 20]), Unassigned), [10, 20]);
        assert_eq!(fair_shares(100, &reported(&[10, 20]), Spread), [45, 55]);
        assert_eq!(
            fair_shares(100, &reported(&[0, 0, 0]), Spread),
            [33, 33, 33]
        );
        // Under contention there is no leftover: both options agree.
        assert_eq!(
            fair_shares(40, &reported(&[100, 10]), Spread),
            fair_shares(40, &reported(&[100, 10]), Unassigned)
        );
    }

    #[test]
    fn a_share_moves_when_it_leaves_its_band_or_the_others_need_its_room() {
        let demands = reported(&[900, 8, 8]);
        // Fair: [84, 8, 8]; the bands: a tenth of 80, of an equal part (33)
        // for the small ones. 80 → 84 is within it: kept; 4 → 8 is not.
        assert_eq!(
            steady_shares(100, &demands, &[Some(80), Some(4), Some(8)], Unassigned),
            [80, 8, 8]
        );
        // A fall within the band is held back while the sum allows it…
        assert_eq!(
            steady_shares(100, &reported(&[50, 10]), &[Some(54), Some(10)], Unassigned),
            [54, 10]
        );
        // …and happens when no growth can make the room.
        assert_eq!(
            steady_shares(100, &demands, &[Some(86), Some(8), Some(8)], Unassigned),
            [84, 8, 8]
        );
        // A noisy small demand (8, 12, 9 against 10 in force) keeps its share.
        assert_eq!(
            steady_shares(
                100,
                &reported(&[370, 8, 12, 9]),
                &[Some(70), Some(10), Some(10), Some(10)],
                Unassigned
            ),
            [70, 10, 10, 10]
        );
        // A new holder takes its part; the others make room.
        assert_eq!(
            steady_shares(100, &[Some(300), None], &[Some(100), None], Unassigned),
            [50, 50]
        );
    }

    /// Whether `shares` is max-min fair for `claims` within `capacity`, to
    /// the unit: nothing left while a claim is unserved, and a holder short
    /// of its claim has at least every other share less one unit (so none
    /// can gain except from a holder whose share is no larger).
    fn max_min_fair(capacity: u64, claims: &[u64], shares: &[u64]) -> Result<(), String> {
        let sum: u64 = shares.iter().sum();
        let wanted = claims.iter().fold(0u64, |s, &c| s.saturating_add(c));
        if sum != capacity.min(wanted) {
            return Err(format!(
                "{sum} handed out of {capacity} for claims {wanted}"
            ));
        }
        for (i, (&share, &claim)) in shares.iter().zip(claims).enumerate() {
            if share > claim {
                return Err(format!(
                    "holder {i} got {share}, more than its claim {claim}"
                ));
            }
            if share < claim
                && let Some(j) = shares.iter().position(|&other| other > share + 1)
            {
                return Err(format!(
                    "holder {i} is short at {share} while holder {j} has {}",
                    shares[j]
                ));
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn shares_are_max_min_fair_and_never_sum_past_the_capacity(
            capacity in 0u64..1_000_000,
            demands in proptest::collection::vec(proptest::option::weighted(0.9, 0u64..2_000_000), 0..50),
        ) {
            let claims = claims(capacity, &demands);
            let shares = fair_shares(capacity, &demands, Unassigned);
            proptest::prop_assert_eq!(shares.len(), demands.len());
            if let Err(unfair) = max_min_fair(capacity, &claims, &shares) {
                proptest::prop_assert!(false, "{unfair}: {claims:?} → {shares:?}");
            }
            // A holder asking less than an equal part gets all it asks.
            let equal = capacity / (demands.len() as u64).max(1);
            for (&share, &claim) in shares.iter().zip(&claims) {
                if claim <= equal {
                    proptest::prop_assert_eq!(share, claim);
                }
            }
            // Spread: the same shares plus an equal part of the leftover.
            let spread = fair_shares(capacity, &demands, Spread);
            proptest::prop_assert!(spread.iter().sum::<u64>() <= capacity);
            let left = capacity - shares.iter().sum::<u64>();
            let part = left / (demands.len() as u64).max(1);
            for (&s, &u) in spread.iter().zip(&shares) {
                proptest::prop_assert_eq!(s, u + part);
            }
            // Whatever is in force, the steady shares never sum past the capacity.
            let held: Vec<Option<u64>> = claims
                .iter()
                .enumerate()
                .map(|(i, &d)| (i % 3 != 0).then_some(d % (capacity + 1)))
                .collect();
            let steady = steady_shares(capacity, &demands, &held, Unassigned);
            proptest::prop_assert!(steady.iter().sum::<u64>() <= capacity);
        }

        #[test]
        fn no_holder_gains_without_a_smaller_share_losing(
            capacity in 0u64..40,
            demands in proptest::collection::vec(0u64..9, 1..5),
        ) {
            // Against every other allocation of the capacity within the
            // claims (small cases, exhaustively): one that gives a holder
            // more takes from a holder whose fair share is no larger (but
            // for the unit the floor division hands to one of two equals).
            let shares = fair_shares(capacity, &reported(&demands), Unassigned);
            let mut other = vec![0u64; demands.len()];
            loop {
                if other.iter().sum::<u64>() <= capacity {
                    for i in 0..demands.len() {
                        if other[i] > shares[i] {
                            let lost = (0..demands.len())
                                .any(|j| other[j] < shares[j] && shares[j] <= shares[i] + 1);
                            proptest::prop_assert!(lost, "{other:?} beats {shares:?} at {i} for {demands:?}");
                        }
                    }
                }
                // The next allocation, odometer style, each below its claim.
                let mut k = 0;
                while k < other.len() && other[k] >= demands[k].min(capacity) {
                    other[k] = 0;
                    k += 1;
                }
                if k == other.len() {
                    break;
                }
                other[k] += 1;
            }
        }
    }
}
