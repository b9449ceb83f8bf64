//! The fair split between several `tollgate serve` instances on one shared store: each instance's part of a rule's rate is its max-min fair share among the instances by what their Envoys claim, and its Envoys split that part max-min among themselves.
//!
//! Every round each instance publishes, per shared counter, the sum of its
//! Envoys' claims (their demand and a tenth more, or an equal part before
//! their rate shows) on the claims board in the store, and hears the other
//! instances' ([`QuotaBook::claims`], [`QuotaBook::hear`]; the board is
//! `tollgate_redis`'s `exchange_claims`). With `C = R − ⌊R / 40⌋` and the
//! instances' claims `c₁ … cₘ`, instance `i` splits `pᵢ`, its part of
//! [`fair_shares`]`(C, c, Unassigned)`, among its Envoys as one instance
//! alone splits `C` ([`QuotaBook::rebalance`]). So:
//!
//! * an instance whose Envoys together claim less than an equal part of
//!   what is left gets all of it, and each of its Envoys its claim; the
//!   others split the rest the same way (max-min between instances by
//!   their Envoys' total claim, then max-min inside each instance). With
//!   one Envoy per instance this is max-min fair across the fleet's Envoys;
//!   with several, an instance with many Envoys counts as one claimant of
//!   their total.
//! * `Σ pᵢ ≤ C`, from claims at most a round old: the parts in force can
//!   briefly sum past `C` while a part that grew is paid before the one
//!   that shrank is heard, but every unit an Envoy can spend is still taken
//!   from the rule's one counter first, so the fleet stays within the
//!   bound docs/quota.md states; the board decides fairness, never the limit.
//!
//! The fleet shares protocol (`tollgate_core::share`'s holders and
//! authority) does not carry this: its holders decide requests against
//! sub-buckets of a token bucket the authority keeps in Redis, a second
//! budget beside the rule's counter that the quota service and the RLS
//! callers spend. Here the counter stays the one budget; the board carries
//! only the claims, split by the same [`fair_shares`].
//!
//! A claim lapses [`CLAIM_TTL`] after it was last published (an instance
//! that stops, or loses the store, drops out of the split within it);
//! while the board cannot be reached an instance keeps the claims it last
//! heard.

use std::collections::HashSet;
use std::time::Duration;

use tollgate_core::Timestamp;
use tollgate_core::fair_share::{Leftover, fair_shares};

use super::changes::Changes;
use super::quota_book::{QuotaBook, claims, shared_capacity};

/// How long a published claim lasts without being published again: three payment rounds.
pub const CLAIM_TTL: Duration = Duration::from_secs(3);

/// This instance's part of `capacity` when its reporters claim `claims`
/// (`None`: an equal part of `capacity` among them, before their rate
/// shows) and the other instances claim `others`: its max-min fair share
/// ([`fair_shares`], leftover unassigned); all of `capacity` with no other
/// instance.
pub fn fleet_part(capacity: u64, claims: &[Option<u64>], others: &[u64]) -> u64 {
    if others.is_empty() {
        return capacity;
    }
    let mut demands = Vec::with_capacity(others.len() + 1);
    demands.push(Some(instance_claim(capacity, claims)));
    demands.extend(others.iter().map(|&c| Some(c)));
    fair_shares(capacity, &demands, Leftover::Unassigned)[0]
}

/// What an instance whose reporters claim `claims` claims of `capacity`
/// in all (a reporter whose rate has not shown claims an equal part).
pub fn instance_claim(capacity: u64, claims: &[Option<u64>]) -> u64 {
    let equal = capacity / (claims.len() as u64).max(1);
    claims
        .iter()
        .map(|c| c.unwrap_or(equal))
        .fold(0u64, u64::saturating_add)
}

impl QuotaBook {
    /// A random id of this book on the claims board (a new one each start:
    /// a restarted instance's old claims lapse).
    pub(super) fn random_instance() -> u64 {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(std::process::id())
    }

    /// This instance's id on the claims board.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// What this instance claims of each shared counter, to publish.
    pub fn claims(&self) -> Vec<(Vec<u8>, u64)> {
        let inner = self.inner.lock();
        inner
            .shared
            .iter()
            .map(|(counter, shared)| {
                let capacity = shared_capacity(shared.rate.requests);
                (counter.clone(), instance_claim(capacity, &claims(shared)))
            })
            .collect()
    }

    /// Takes what the other instances claim of each counter (`heard`, as
    /// the board answered at `now`) and splits again where it changed:
    /// the falls to pay for and send at once; the growths wait for the
    /// round that pays them ([`QuotaBook::settle`]).
    pub fn hear(&self, heard: Vec<(Vec<u8>, Vec<u64>)>, now: Timestamp) -> Changes {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let mut moved: HashSet<Vec<u8>> = HashSet::new();
        for (counter, mut others) in heard {
            let Some(shared) = inner.shared.get_mut(&counter) else {
                continue;
            };
            others.sort_unstable();
            if shared.fleet != others {
                shared.fleet = others;
                moved.insert(counter);
            }
        }
        let mut pending = Vec::new();
        for counter in moved {
            self.rebalance(inner, &counter, &mut pending);
        }
        self.changes(inner, None, Vec::new(), pending, now, false)
    }
}
