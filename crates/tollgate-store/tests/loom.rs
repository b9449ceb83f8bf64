//! Model-checks the lock-free state update with loom: every interleaving of
//! concurrent checks (and a rebuild's freeze) admits exactly the limit.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p tollgate-store --profile loom --test loom`
#![cfg(loom)]

use std::time::Duration;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use tollgate_core::{RESERVED_STATE, Timestamp, TokenBucket, WordAlgorithm};
use tollgate_store::state_word::{Frozen, freeze, update};

const NOW: Timestamp = Timestamp::from_secs(1_000);

/// A bucket of 2 that cannot refill while the model runs (all at `NOW`).
fn bucket() -> TokenBucket {
    TokenBucket::new(2, 1, Duration::from_secs(3600)).unwrap()
}

/// One request through the store's atomic step: Ok(true) when admitted.
fn take_one(state: &AtomicU64) -> Result<bool, Frozen> {
    let tb = bucket();
    update(state, |s| tb.decide(s, NOW, 1)).map(|d| d.is_allowed())
}

#[test]
fn three_concurrent_checks_on_a_bucket_of_two_admit_exactly_two() {
    loom::model(|| {
        let state = Arc::new(AtomicU64::new(0));
        let checkers: Vec<_> = (0..3)
            .map(|_| {
                let state = Arc::clone(&state);
                thread::spawn(move || take_one(&state))
            })
            .collect();
        let admitted = checkers
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|r| *r == Ok(true))
            .count();
        assert_eq!(admitted, 2);
        assert_eq!(bucket().tokens(state.load(Ordering::Relaxed), NOW), 0);
    });
}

#[test]
fn a_concurrent_freeze_carries_every_admitted_request() {
    loom::model(|| {
        let state = Arc::new(AtomicU64::new(0));
        let checkers: Vec<_> = (0..2)
            .map(|_| {
                let state = Arc::clone(&state);
                thread::spawn(move || take_one(&state))
            })
            .collect();
        let frozen = freeze(&state);
        let results: Vec<_> = checkers.into_iter().map(|h| h.join().unwrap()).collect();
        let admitted = results.iter().filter(|r| **r == Ok(true)).count() as u64;
        // Every request admitted before the freeze is in the frozen value;
        // every later one saw the marker and admitted nothing.
        assert_eq!(2 - bucket().tokens(frozen, NOW), admitted);
        assert!(
            results.iter().all(|r| *r != Ok(false)),
            "nothing denied: 2 tokens"
        );
        assert_eq!(state.load(Ordering::Relaxed), RESERVED_STATE);
    });
}

#[test]
fn a_rebuild_that_carries_the_frozen_state_over_keeps_the_limit_exact() {
    // The rebuild's whole hand-over, as the store does it: under the shard
    // mutex, freeze the old word and copy its state to the new table's word;
    // a check that finds the old word frozen takes the mutex (so waits for
    // the rebuild) and retries on the new word. Three preemptions cover every
    // hand-over order and keep the run to seconds.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let shard_mutex = Arc::new(Mutex::new(()));
        let old = Arc::new(AtomicU64::new(0));
        let new = Arc::new(AtomicU64::new(0));
        // Three requests (two from one thread, one from another) on a bucket of two.
        let checkers: Vec<_> = [2, 1]
            .into_iter()
            .map(|requests| {
                let (shard_mutex, old, new) =
                    (Arc::clone(&shard_mutex), Arc::clone(&old), Arc::clone(&new));
                thread::spawn(move || {
                    let mut admitted = 0;
                    for _ in 0..requests {
                        let outcome = match take_one(&old) {
                            Ok(admitted) => admitted,
                            Err(Frozen) => {
                                let _writer = shard_mutex.lock().unwrap();
                                take_one(&new).expect("the new word is never frozen")
                            }
                        };
                        admitted += u64::from(outcome);
                    }
                    admitted
                })
            })
            .collect();
        {
            let _writer = shard_mutex.lock().unwrap();
            let carried = freeze(&old);
            new.store(carried, Ordering::Relaxed);
        }
        let admitted: u64 = checkers.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(admitted, 2);
        let used = 2 - bucket().tokens(new.load(Ordering::Relaxed), NOW);
        assert_eq!(used, 2, "the new word holds every admission");
    });
}
