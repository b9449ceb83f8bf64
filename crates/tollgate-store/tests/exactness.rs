//! Under concurrency a limit of `L` admits exactly `L`, also while rebuilds run.
//!
//! Every check runs at one fixed timestamp, so nothing refills or rolls over
//! during a test: the only way to admit more or fewer than the limit is a
//! lost or doubled update.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, Timestamp,
    TokenBucket,
};
use tollgate_store::{MemoryStore, StoreConfig};

const THREADS: usize = 4;
const NOW: Timestamp = Timestamp::from_secs(1_700_000_000);
const HOUR: Duration = Duration::from_secs(3600);

/// Every algorithm with a limit of `limit` per hour (nothing refills within a test).
fn algorithms(limit: u64) -> Vec<AnyAlgorithm> {
    vec![
        TokenBucket::new(limit, 1, HOUR).unwrap().into(),
        Gcra::new(1, HOUR, limit).unwrap().into(),
        LeakyBucket::new(1, HOUR, limit - 1, DelayMode::NoDelay)
            .unwrap()
            .into(),
        FixedWindow::new(limit, HOUR).unwrap().into(),
        SlidingWindow::new(limit, HOUR).unwrap().into(),
        SlidingLog::new(limit, HOUR).unwrap().into(),
    ]
}

/// `THREADS` threads each run `checks` checks over `keys` (each thread in its
/// own order), while `sweeper` (if set) sweeps; returns admissions per key.
fn hammer(store: &MemoryStore, keys: u64, checks: u64, sweeper: bool) -> Vec<u64> {
    let admitted: Vec<AtomicU64> = (0..keys).map(|_| AtomicU64::new(0)).collect();
    let done = AtomicBool::new(false);
    let sweeps = AtomicU64::new(0);
    std::thread::scope(|s| {
        if sweeper {
            s.spawn(|| {
                // Bounded in count; stops as soon as the checkers are done.
                for _ in 0..1_000_000 {
                    if done.load(Ordering::Relaxed) {
                        break;
                    }
                    store.sweep(NOW);
                    sweeps.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let checkers: Vec<_> = (0..THREADS as u64)
            .map(|thread| {
                let admitted = &admitted;
                let sweeps = &sweeps;
                s.spawn(move || {
                    // With a sweeper, start once it has swept: on a loaded
                    // machine it might otherwise be scheduled only after the
                    // checkers are done, and no rebuild would race them.
                    // Bounded in count, like the sweeper.
                    for _ in 0..10_000_000 {
                        if !sweeper || sweeps.load(Ordering::Relaxed) > 0 {
                            break;
                        }
                        std::thread::yield_now();
                    }
                    for i in 0..checks {
                        // Threads walk the keys with different strides.
                        let key = (i * (2 * thread + 1) + thread * 7) % keys;
                        if store.check(&key, NOW, 1).is_allowed() {
                            admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for c in checkers {
            c.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    if sweeper {
        assert!(sweeps.load(Ordering::Relaxed) > 0, "the sweeper ran");
    }
    admitted.into_iter().map(AtomicU64::into_inner).collect()
}

#[test]
fn four_threads_on_one_hot_key_admit_exactly_the_limit() {
    for alg in algorithms(1000) {
        let store = MemoryStore::new(alg, StoreConfig::default());
        let admitted = hammer(&store, 1, 10_000, false);
        assert_eq!(admitted, vec![1000], "{alg:?}");
        assert_eq!(store.check(&0u64, NOW, 1).remaining(), 0, "{alg:?}");
    }
}

#[test]
fn four_threads_over_a_thousand_keys_admit_exactly_the_limit_on_each() {
    for alg in algorithms(7) {
        let store = MemoryStore::new(alg, StoreConfig::default());
        let admitted = hammer(&store, 1000, 10_000, false);
        assert!(admitted.iter().all(|&n| n == 7), "{alg:?}: {admitted:?}");
        assert_eq!(store.len(), 1000);
    }
}

#[test]
fn rebuilds_running_throughout_lose_and_double_nothing() {
    // A fifth thread sweeps (rebuilding every shard) as fast as it can; the
    // keys are live, so each rebuild must carry every one over, including
    // the admissions that race with its freeze.
    for alg in algorithms(7) {
        let store = MemoryStore::new(alg, StoreConfig::default());
        let admitted = hammer(&store, 1000, 10_000, true);
        assert!(admitted.iter().all(|&n| n == 7), "{alg:?}: {admitted:?}");
        assert_eq!(store.len(), 1000, "{alg:?}");
    }
    for alg in algorithms(1000) {
        let store = MemoryStore::new(alg, StoreConfig::default());
        assert_eq!(hammer(&store, 1, 10_000, true), vec![1000], "{alg:?}");
    }
}

#[test]
fn growth_under_contention_loses_nothing() {
    // Few shards, so tables grow many times while all four threads insert.
    let alg = TokenBucket::new(3, 1, HOUR).unwrap();
    let config = StoreConfig {
        max_keys: 100_000,
        shards: 2,
        ..StoreConfig::default()
    };
    let store = MemoryStore::new(alg, config);
    let admitted = hammer(&store, 5000, 10_000, false);
    assert!(admitted.iter().all(|&n| n == 3), "{admitted:?}");
    assert_eq!(store.len(), 5000);
}
