//! A flood of distinct keys far past the key bound, of any cost, neither
//! resets an exhausted key nor takes the store past its key and memory
//! bounds, for every algorithm.
//!
//! The exhausted key is decided in a twin store that sees no flood: at
//! every probe, during the flood and after it, both must answer alike, so
//! the key stays denied exactly until its true reset.

use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, Timestamp,
    TokenBucket,
};
use tollgate_store::{MemoryStore, StoreConfig};

const S: u64 = 1_000_000_000;

/// One second into a minute (`1_700_000_040` is a multiple of 60).
const T0: u64 = 1_700_000_041 * S;

/// Every algorithm of the store at 10 per minute.
fn algorithms() -> Vec<AnyAlgorithm> {
    let minute = Duration::from_secs(60);
    vec![
        TokenBucket::new(10, 10, minute).unwrap().into(),
        Gcra::new(10, minute, 10).unwrap().into(),
        LeakyBucket::policer(10, minute, 9).unwrap().into(),
        LeakyBucket::new(10, minute, 9, DelayMode::Delay)
            .unwrap()
            .into(),
        FixedWindow::new(10, minute).unwrap().into(),
        SlidingWindow::new(10, minute).unwrap().into(),
        SlidingLog::new(10, minute).unwrap().into(),
    ]
}

/// The most bytes `store` may hold: the word store's own ceiling, or for
/// the sliding log the documented cost of a full store (a map entry and up
/// to twice `limit` 16-byte log entries per key, the map at most half full).
fn memory_ceiling(store: &MemoryStore) -> usize {
    match store {
        MemoryStore::Word(s) => s.max_memory_bytes(),
        MemoryStore::Log(s) => {
            let limit = s.algorithm().limit() as usize;
            s.max_keys() * (2 * 64 + 2 * 16 * limit) + 64 * 1024
        }
    }
}

/// Keys exhausted before the flood, in both stores: 64 of them, so that
/// they sit in different shards and at every part of their tables.
fn victims() -> Vec<String> {
    (0..64).map(|n| format!("victim-{n}")).collect()
}

/// Exhausts every victim at `T0` in both stores and returns when they pass again.
fn exhaust(stores: [&MemoryStore; 2]) -> Timestamp {
    let t0 = Timestamp::from_nanos(T0);
    let capacity = stores[0].algorithm().capacity();
    let mut resets = victims().into_iter().map(|victim| {
        for store in stores {
            for _ in 0..capacity {
                assert!(store.check(&victim, t0, 1).is_allowed());
            }
        }
        let denied = stores[0].check(&victim, t0, 1);
        assert_eq!(stores[1].check(&victim, t0, 1), denied);
        denied.retry_after().expect("exhausted")
    });
    let retry = resets.next().expect("a victim");
    assert!(resets.all(|r| r == retry));
    assert!(retry > Duration::from_secs(2), "{retry:?}");
    Timestamp::from_nanos(T0 + retry.as_nanos() as u64)
}

/// Floods `flooded` with `keys` distinct keys of `cost` each over the first
/// half of the victims' wait, probing the victims against `alone`
/// throughout and checking the bounds; then checks that every victim is
/// denied until `reset` and passes from then on.
fn flood_and_probe(
    flooded: &MemoryStore,
    alone: &MemoryStore,
    reset: Timestamp,
    keys: u64,
    cost: u64,
) {
    let alg = flooded.algorithm();
    let span = (reset.as_nanos() - T0) / 2;
    let ceiling = memory_ceiling(flooded);
    let victims = victims();
    for n in 0..keys {
        let t = Timestamp::from_nanos(T0 + span * n / keys);
        flooded.check(&n, t, cost);
        if n % 997 == 0 {
            for victim in &victims {
                let got = flooded.check(victim.as_str(), t, 1);
                assert!(
                    !got.is_allowed(),
                    "{alg:?}: {victim} admitted during the flood at key {n}"
                );
                assert_eq!(
                    got,
                    alone.check(victim.as_str(), t, 1),
                    "{alg:?}: {victim} at key {n}"
                );
            }
            assert!(
                flooded.len() <= flooded.max_keys(),
                "{alg:?}: {} keys",
                flooded.len()
            );
            let bytes = flooded.memory_bytes();
            assert!(bytes <= ceiling, "{alg:?}: {bytes} > {ceiling} bytes");
        }
    }
    assert!(flooded.len() <= flooded.max_keys());
    let just_before = Timestamp::from_nanos(reset.as_nanos() - 1);
    for victim in &victims {
        for t in [just_before, reset] {
            let got = flooded.check(victim.as_str(), t, 1);
            assert_eq!(
                got,
                alone.check(victim.as_str(), t, 1),
                "{alg:?}: {victim} at {t:?}"
            );
            assert_eq!(
                got.is_allowed(),
                t == reset,
                "{alg:?}: {victim} at {t:?}: {got:?}"
            );
        }
    }
}

/// For every algorithm: exhausts the victims, then floods `keys` keys, each
/// costing what `cost` makes of the algorithm's capacity.
fn exhaust_then_flood(keys: u64, cost: fn(u64) -> u64) {
    for alg in algorithms() {
        let config = StoreConfig::with_max_keys(1024);
        let flooded = MemoryStore::new(alg, config);
        let alone = MemoryStore::new(alg, config);
        let reset = exhaust([&flooded, &alone]);
        flood_and_probe(&flooded, &alone, reset, keys, cost(alg.capacity()));
    }
}

#[test]
fn an_exhausted_key_stays_denied_through_a_flood_of_new_keys() {
    // A hundred times the bound, one request per key.
    exhaust_then_flood(100_000, |_| 1);
}

#[test]
fn a_flood_of_keys_each_using_all_but_one_unit_leaves_an_exhausted_key_alone() {
    exhaust_then_flood(50_000, |capacity| capacity - 1);
}

#[test]
fn a_flood_of_keys_of_any_cost_leaves_an_exhausted_key_alone() {
    // A caller who picks costs brings each flood key to the victims' used
    // budget in one request: the whole capacity, or more (denied, which
    // closes a fixed window as the victims' own denial closed theirs). The
    // victims arrived first, so each eviction takes flood keys.
    exhaust_then_flood(20_000, |capacity| capacity);
    exhaust_then_flood(20_000, |capacity| capacity + 1);
    exhaust_then_flood(20_000, |_| u64::MAX);
}

#[test]
fn a_fixed_window_at_exactly_its_limit_outlives_a_flood_of_closed_windows() {
    // No denial has closed the victims' windows (they count 10, not 11),
    // while every flood key's cost of 11 closes its own.
    let fw = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
    let store = MemoryStore::new(fw, StoreConfig::with_max_keys(1024));
    let t0 = Timestamp::from_nanos(T0);
    let reset = Timestamp::from_secs(1_700_000_100);
    let victims = victims();
    for victim in &victims {
        for _ in 0..10 {
            assert!(store.check(victim.as_str(), t0, 1).is_allowed());
        }
    }
    let keys = 20_000;
    let span = (reset.as_nanos() - T0) / 2;
    for n in 0..keys {
        let t = Timestamp::from_nanos(T0 + span * n / keys);
        assert!(!store.check(&n, t, 11).is_allowed());
        if n % 997 == 0 {
            for victim in &victims {
                // A check of cost 0 writes nothing: the window stays at 10.
                let got = store.check(victim.as_str(), t, 0);
                assert_eq!(got.remaining(), 0, "{victim} fresh again at key {n}");
            }
        }
    }
    let just_before = Timestamp::from_nanos(reset.as_nanos() - 1);
    for victim in &victims {
        assert!(!store.check(victim.as_str(), just_before, 1).is_allowed());
        assert!(store.check(victim.as_str(), reset, 1).is_allowed());
    }
}

#[test]
fn a_flood_of_keys_as_exhausted_as_the_victim_keeps_the_bounds() {
    // Nothing distinguishes the victim here, so it may be evicted (what that
    // costs an attacker is in the store's docs); the bounds hold regardless.
    for alg in algorithms() {
        let store = MemoryStore::new(alg, StoreConfig::with_max_keys(1024));
        let ceiling = memory_ceiling(&store);
        let capacity = alg.capacity();
        for n in 0..20_000u64 {
            let t = Timestamp::from_nanos(T0 + n * 1_000);
            store.check(&n, t, capacity);
            store.check(&n, t, 1);
            if n % 97 == 0 {
                assert!(store.len() <= store.max_keys(), "{alg:?}");
                assert!(store.memory_bytes() <= ceiling, "{alg:?}");
            }
        }
        assert!(store.len() > 900, "{alg:?}: still full, not emptied");
    }
}
