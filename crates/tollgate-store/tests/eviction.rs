//! A full store evicts the keys whose eviction changes the fewest decisions:
//! never a key that has used more of its budget while keeping one that has used less.
//!
//! One shard of 16 keys is filled with random histories under every
//! algorithm, then new keys arrive and force evictions. Before each, the
//! budget every held key has used is read (`WordAlgorithm::used` for the
//! one-word algorithms, the units still logged for the sliding log, up to
//! the capacity: every exhausted key counts alike, a fixed window closed by
//! a denial as one at its limit); after it, every evicted key must have
//! used at most what every kept key has.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::{
    AnyAlgorithm, DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, Timestamp,
    TokenBucket, WordAlgorithm,
};
use tollgate_store::{MemoryStore, StoreConfig};

/// Far from the epoch, like real time.
const T0: u64 = 1_700_000_000_000_000_000;

/// The keys a shard holds before new ones arrive: its whole share.
const SHARE: u64 = 16;

/// Any algorithm of the store, with a limit of 1 to 12 per 1 to 120 s.
fn algorithm() -> impl Strategy<Value = AnyAlgorithm> {
    let params = || (1u64..=12, 1u64..=120).prop_map(|(l, s)| (l, Duration::from_secs(s)));
    prop_oneof![
        params().prop_map(|(l, p)| TokenBucket::new(l, l, p).unwrap().into()),
        params().prop_map(|(l, p)| Gcra::new(l, p, l).unwrap().into()),
        params().prop_map(|(l, p)| LeakyBucket::policer(l, p, l - 1).unwrap().into()),
        params().prop_map(|(l, p)| LeakyBucket::new(l, p, l - 1, DelayMode::Delay)
            .unwrap()
            .into()),
        params().prop_map(|(l, p)| FixedWindow::new(l, p).unwrap().into()),
        params().prop_map(|(l, p)| SlidingWindow::new(l, p).unwrap().into()),
        params().prop_map(|(l, p)| SlidingLog::new(l, p).unwrap().into()),
    ]
}

/// A request: when (in thousandths of a quarter window after `T0`) and how
/// much (in thousandths of the capacity, at least 1 unit).
type Request = (u64, u64);

/// Up to four requests for each of the shard's keys.
fn histories() -> impl Strategy<Value = Vec<Vec<Request>>> {
    let request = (0u64..=1000, 0u64..=1000);
    proptest::collection::vec(proptest::collection::vec(request, 1..=4), SHARE as usize)
}

/// How much of its budget `key` has used at `now`, at most the capacity (0 when the store does not hold it).
fn used(store: &MemoryStore, key: u64, now: Timestamp) -> u64 {
    let used = match store.algorithm() {
        AnyAlgorithm::Word(a) => a.used(store.peek(&key), now),
        AnyAlgorithm::SlidingLog(_) => store.peek_at(&key, now),
    };
    used.min(store.algorithm().capacity())
}

/// Whether the store holds `key` (a held state is never the fresh 0, a held log never empty).
fn holds(store: &MemoryStore, key: u64) -> bool {
    store.peek(&key) != 0
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn eviction_never_keeps_a_less_used_key_over_a_more_used_one(
        alg in algorithm(),
        histories in histories(),
        newcomers in proptest::collection::vec(0u64..=1000, 1..=4),
    ) {
        let store = MemoryStore::new(alg, StoreConfig { max_keys: SHARE as usize, shards: 1, ..StoreConfig::default() });
        let capacity = alg.capacity();
        let quarter = alg.window().as_nanos() as u64 / 4;
        let at = |thousandths: u64| Timestamp::from_nanos(T0 + quarter / 1000 * thousandths);
        let cost = |thousandths: u64| (capacity * thousandths / 1000).max(1);
        let mut requests: Vec<(u64, u64, u64)> = histories
            .iter()
            .zip(0u64..)
            .flat_map(|(h, key)| h.iter().map(move |&(t, c)| (t, key, c)))
            .collect();
        requests.sort_unstable();
        for &(t, key, c) in &requests {
            store.check(&key, at(t), cost(c));
        }
        // New keys arrive at the end of the span, each once the shard is full.
        let now = at(1000);
        for (newcomer, c) in (SHARE..).zip(newcomers) {
            let before: Vec<(u64, u64)> = (0..newcomer)
                .filter(|&k| holds(&store, k))
                .map(|k| (k, used(&store, k, now)))
                .collect();
            store.check(&newcomer, now, cost(c));
            prop_assert!(store.len() <= SHARE as usize);
            let (kept, evicted): (Vec<_>, Vec<_>) =
                before.iter().partition(|&&(k, _)| holds(&store, k));
            let most_evicted = evicted.iter().map(|&&(_, u)| u).max();
            let least_kept = kept.iter().map(|&&(_, u)| u).min();
            if let (Some(e), Some(k)) = (most_evicted, least_kept) {
                prop_assert!(
                    e <= k,
                    "{:?}: evicted a key that used {} while keeping one that used {}\n\
                     evicted {:?}\nkept {:?}",
                    alg, e, k, evicted, kept
                );
            }
        }
    }
}
