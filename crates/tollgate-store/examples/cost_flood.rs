//! Counts how often a used-up key is admitted again while a flood of distinct keys, each of a caller-chosen cost, runs through the default store.
//!
//! A victim at 5 per hour spends its budget; then 1.5 million new keys
//! arrive, each with one request of the given cost, and the victim is
//! probed once every 1000 keys. Every admission of the victim is one that
//! eviction handed back. Run with
//! `cargo run --release -p tollgate-store --example cost_flood`
//! (docs/security.md, "Key floods", quotes the figures).

use std::time::Duration;

use tollgate_core::{AnyAlgorithm, FixedWindow, Timestamp, TokenBucket};
use tollgate_store::{MemoryStore, StoreConfig};

/// Distinct flood keys: half again the default store's bound.
const KEYS: u64 = 1_500_000;

/// Flood keys between two probes of the victim.
const PROBE_EVERY: u64 = 1000;

/// The victim's admissions during a flood of [`KEYS`] keys of `cost` each, and the first flood keys after which it passed.
fn victim_admissions(algorithm: AnyAlgorithm, cost: u64) -> (usize, Vec<u64>) {
    let store = MemoryStore::new(algorithm, StoreConfig::default());
    // One minute into an hour.
    let t0 = Timestamp::from_secs(1_699_920_060);
    for _ in 0..algorithm.capacity() {
        assert!(store.check("victim", t0, 1).is_allowed());
    }
    let mut admitted = Vec::new();
    for n in 0..KEYS {
        // A microsecond apart: the flood takes 1.5 s of the hour.
        let t = Timestamp::from_nanos(t0.as_nanos() + n * 1_000);
        store.check(&n, t, cost);
        if n % PROBE_EVERY == 0 && store.check("victim", t, 1).is_allowed() {
            admitted.push(n);
        }
    }
    let count = admitted.len();
    admitted.truncate(5);
    (count, admitted)
}

fn main() {
    let hour = Duration::from_secs(3600);
    let runs: [(&str, AnyAlgorithm, u64); 3] = [
        (
            "fixed window 5/h",
            FixedWindow::new(5, hour).unwrap().into(),
            6,
        ),
        (
            "fixed window 5/h",
            FixedWindow::new(5, hour).unwrap().into(),
            5,
        ),
        (
            "token bucket 5/h",
            TokenBucket::new(5, 5, hour).unwrap().into(),
            5,
        ),
    ];
    for (name, algorithm, cost) in runs {
        // Three runs each: the stores' hash seeds differ from run to run.
        for _ in 0..3 {
            let (count, first) = victim_admissions(algorithm, cost);
            println!(
                "{name}, {KEYS} flood keys of cost {cost}: victim admitted {count} times (after flood keys {first:?})"
            );
        }
    }
}
