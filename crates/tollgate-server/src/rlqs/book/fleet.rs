//! The fair split between several `tollgate serve` instances on one shared store: each Envoy's share of a rule's rate is its max-min fair share among every Envoy of the fleet reporting on the rule, whichever instance it reports to.
//!
//! Every round each instance publishes, per shared counter, each of its
//! Envoys' claims (their demand and a twentieth more, or an equal part before
//! their rate shows) on the claims board in the store, and hears the other
//! instances' Envoys' claims ([`QuotaBook::claims`], [`QuotaBook::hear`];
//! the board is `tollgate_redis`'s `exchange_claims`). With
//! `C = R − ⌊R / 40⌋` and the claims `c₁ … cₙ` of all `n` Envoys of the
//! fleet on the counter, each Envoy's share is its part of
//! [`fair_shares`]`(C, c, Unassigned)` ([`fleet_split`]; to the unit: the
//! units an equal split leaves over go to the other instances' Envoys
//! first), and an instance's part is the sum of its Envoys' shares. So:
//!
//! * an Envoy that claims less than an equal part of what is left gets all
//!   of its claim; the others split the rest the same way, however the
//!   Envoys are spread over the instances (three Envoys of 100 a second on
//!   one instance and one on another get a quarter of `C` each).
//! * Each instance publishes one claim per Envoy reporting on the counter:
//!   at most its `--rlqs-max-streams` per counter and its
//!   `--rlqs-max-buckets` in all, so the board and what an instance hears
//!   are bounded by the instances' own bounds (no aggregation is needed).
//!   An instance of the earlier release publishes only its Envoys' total
//!   and is heard as one claimant of it (and hears each newer instance as
//!   one), so a split holds through a rolling upgrade.
//! * The shares are put in force with [`steady_shares`]'s hysteresis
//!   within what the other instances' Envoys' shares leave of `C`, so each
//!   differs from its fair share by at most its band.
//! * `Σ shares ≤ C`, from claims at most a round old: the shares in force
//!   can briefly sum past `C` while a share that grew is paid before the
//!   one that shrank is heard, but every unit an Envoy can spend is still
//!   taken from the rule's one counter first, so the fleet stays within the
//!   bound docs/quota.md states; the board decides fairness, never the limit.
//!
//! [`steady_shares`]: tollgate_core::fair_share::steady_shares
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
use super::quota_book::{QuotaBook, claims};

/// How long a published claim lasts without being published again: three payment rounds.
pub const CLAIM_TTL: Duration = Duration::from_secs(3);

/// The max-min fair share of `capacity` of each of this instance's
/// Envoys, which claim `own`, among every Envoy of the fleet ([`fair_shares`]
/// over the other instances' Envoys' claims `others` and `own`, leftover
/// unassigned), in `own`'s order; and `capacity` less the others' shares
/// (the room this instance's shares fit in).
///
/// `own` goes after `others`: the units an equal split leaves over go to
/// the earlier of equal claims, so each instance lets the others' Envoys
/// have them first. Every instance hearing the same claims, no unit is
/// given twice and the shares over the fleet sum to at most `capacity`
/// (own first, two instances of one Envoy each claiming more than half of
/// 99 would each take the odd unit: 50 + 50).
pub fn fleet_split(capacity: u64, own: &[u64], others: &[u64]) -> (Vec<u64>, u64) {
    let all: Vec<Option<u64>> = others.iter().chain(own).map(|&c| Some(c)).collect();
    let mut shares = fair_shares(capacity, &all, Leftover::Unassigned);
    let mine = shares.split_off(others.len());
    let room = capacity.saturating_sub(shares.iter().sum());
    (mine, room)
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

    /// What each of this instance's Envoys claims of each shared counter,
    /// to publish: one claim per Envoy reporting on it (at most
    /// `--rlqs-max-streams` per counter, `--rlqs-max-buckets` in all).
    pub fn claims(&self) -> Vec<(Vec<u8>, Vec<u64>)> {
        let inner = self.inner.lock();
        inner
            .shared
            .iter()
            .map(|(counter, shared)| (counter.clone(), claims(shared)))
            .collect()
    }

    /// Takes what the other instances' Envoys claim of each counter (`heard`, as
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
