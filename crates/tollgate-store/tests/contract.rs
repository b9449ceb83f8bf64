//! A store decides every key exactly as the algorithm does on a local state.
//!
//! Random sequences of checks, refunds and sweeps on a handful of keys (some
//! integers, some strings whose bytes look like those integers) are run
//! through the stores and, key by key, through the algorithm directly; every
//! decision must be equal.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::{
    AnyAlgorithm, DelayMode, FixedWindow, Gcra, LeakyBucket, LogState, ManualClock, SlidingLog,
    SlidingWindow, Timestamp, TokenBucket, WordAlgorithm,
};
use tollgate_store::{Key, Limiter, LogStore, MemoryStore, StoreConfig, WordStore};

/// Keys that must never interfere, including look-alikes.
fn keys() -> Vec<Box<dyn Key>> {
    vec![
        Box::new(7u64),
        Box::new("7"),
        Box::new(u64::from_le_bytes(*b"01234567")),
        Box::new("01234567"),
        Box::new(0u64),
        Box::new(""),
        Box::new(vec![0u8; 8]),
        Box::new(u64::MAX),
    ]
}

/// Far from the epoch, like real time, and on a window boundary.
const START: u64 = 1_700_000_000_000_000_000;

#[derive(Clone, Copy, Debug)]
enum Op {
    Check { key: usize, cost: u64 },
    Refund { key: usize, amount: u64 },
    Sweep,
}

/// A step: time moves forward by `advance_ns` (often 0), then `op` runs.
fn steps(max_cost: u64, max_advance_ns: u64) -> impl Strategy<Value = Vec<(u64, Op)>> {
    let key = 0..keys().len();
    let op = prop_oneof![
        8 => (key.clone(), 0..=max_cost).prop_map(|(key, cost)| Op::Check { key, cost }),
        1 => (key, 0..=max_cost).prop_map(|(key, amount)| Op::Refund { key, amount }),
        1 => Just(Op::Sweep),
    ];
    let advance = prop_oneof![3 => Just(0), 2 => 0..max_advance_ns];
    proptest::collection::vec((advance, op), 1..120)
}

/// Runs the steps through a `WordStore`, a `MemoryStore` and a `Limiter`,
/// comparing each decision with the algorithm on a local state.
fn word_stores_agree_with_the_algorithm<A>(alg: A, steps: &[(u64, Op)]) -> Result<(), TestCaseError>
where
    A: WordAlgorithm + Copy + Into<AnyAlgorithm>,
{
    let keys = keys();
    let config = StoreConfig::with_max_keys(4096);
    let word = WordStore::new(alg, config);
    let memory = MemoryStore::new(alg, config);
    let clock = ManualClock::new(Timestamp::from_nanos(START));
    let limiter = Limiter::new(alg, config, clock.clone());
    let mut model: HashMap<usize, u64> = HashMap::new();
    let mut now = START;
    for (i, &(advance, op)) in steps.iter().enumerate() {
        now += advance;
        let t = Timestamp::from_nanos(now);
        clock.set(t);
        match op {
            Op::Check { key, cost } => {
                let state = model.entry(key).or_default();
                let (expected, next) = alg.decide(*state, t, cost);
                *state = next.unwrap_or(*state);
                let k = &*keys[key];
                prop_assert_eq!(word.check(k, t, cost), expected, "step {} WordStore", i);
                prop_assert_eq!(memory.check(k, t, cost), expected, "step {} MemoryStore", i);
                prop_assert_eq!(limiter.check(k, cost), expected, "step {} Limiter", i);
                // A key whose state is fresh may have been dropped (peek 0).
                let peeked = word.peek(k);
                let dropped_fresh = peeked == 0 && alg.fresh_at(*state, t) <= t;
                prop_assert!(
                    peeked == *state || dropped_fresh,
                    "step {} peek {}",
                    i,
                    peeked
                );
            }
            Op::Refund { key, amount } => {
                let state = model.entry(key).or_default();
                let (expected, next) = alg.refund(*state, t, amount);
                *state = next.unwrap_or(*state);
                let k = &*keys[key];
                prop_assert_eq!(word.refund(k, t, amount), expected, "step {} WordStore", i);
                prop_assert_eq!(
                    memory.refund(k, t, amount),
                    expected,
                    "step {} MemoryStore",
                    i
                );
                prop_assert_eq!(limiter.refund(k, amount), expected, "step {} Limiter", i);
            }
            Op::Sweep => {
                word.sweep(t);
                memory.sweep(t);
                limiter.sweep();
                // Only fresh keys go, and each holds no more keys than were touched.
                let live = model
                    .values()
                    .filter(|&&s| s != 0 && alg.fresh_at(s, t) > t)
                    .count();
                prop_assert_eq!(word.len(), live, "step {} keys after a sweep", i);
            }
        }
        prop_assert!(word.len() <= keys.len());
    }
    Ok(())
}

fn log_store_agrees_with_the_algorithm(
    alg: SlidingLog,
    steps: &[(u64, Op)],
) -> Result<(), TestCaseError> {
    let keys = keys();
    let config = StoreConfig::with_max_keys(4096);
    let log = LogStore::new(alg, config);
    let memory = MemoryStore::new(alg, config);
    let mut model: HashMap<usize, LogState> = HashMap::new();
    let mut now = START;
    for (i, &(advance, op)) in steps.iter().enumerate() {
        now += advance;
        let t = Timestamp::from_nanos(now);
        match op {
            Op::Check { key, cost } => {
                let expected = alg.decide(model.entry(key).or_default(), t, cost);
                let k = &*keys[key];
                prop_assert_eq!(log.check(k, t, cost), expected, "step {} LogStore", i);
                prop_assert_eq!(memory.check(k, t, cost), expected, "step {} MemoryStore", i);
                prop_assert_eq!(log.peek(k), model[&key].total(), "step {} peek", i);
            }
            Op::Refund { key, amount } => {
                let expected = alg.refund(model.entry(key).or_default(), t, amount);
                let k = &*keys[key];
                prop_assert_eq!(log.refund(k, t, amount), expected, "step {} LogStore", i);
                prop_assert_eq!(
                    memory.refund(k, t, amount),
                    expected,
                    "step {} MemoryStore",
                    i
                );
            }
            Op::Sweep => {
                log.sweep(t);
                memory.sweep(t);
                let live = model.values().filter(|s| alg.fresh_at(s) > t).count();
                prop_assert_eq!(log.len(), live, "step {} keys after a sweep", i);
            }
        }
    }
    Ok(())
}

const MS: u64 = 1_000_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn token_bucket(steps in steps(4, 30 * MS)) {
        let alg = TokenBucket::new(3, 1, Duration::from_millis(10)).unwrap();
        word_stores_agree_with_the_algorithm(alg, &steps)?;
    }

    #[test]
    fn gcra(steps in steps(3, 300 * MS)) {
        let alg = Gcra::new(5, Duration::from_millis(500), 2).unwrap();
        word_stores_agree_with_the_algorithm(alg, &steps)?;
    }

    #[test]
    fn leaky_bucket_shaper(steps in steps(3, 300 * MS)) {
        let alg = LeakyBucket::new(10, Duration::from_secs(1), 2, DelayMode::DelayAfter(1)).unwrap();
        word_stores_agree_with_the_algorithm(alg, &steps)?;
    }

    #[test]
    fn fixed_window(steps in steps(5, 40 * MS)) {
        let alg = FixedWindow::new(4, Duration::from_millis(50)).unwrap();
        word_stores_agree_with_the_algorithm(alg, &steps)?;
    }

    #[test]
    fn sliding_window(steps in steps(5, 40 * MS)) {
        let alg = SlidingWindow::new(4, Duration::from_millis(50)).unwrap();
        word_stores_agree_with_the_algorithm(alg, &steps)?;
    }

    #[test]
    fn sliding_log(steps in steps(4, 40 * MS)) {
        let alg = SlidingLog::new(3, Duration::from_millis(50)).unwrap();
        log_store_agrees_with_the_algorithm(alg, &steps)?;
    }
}

#[test]
fn an_integer_key_and_a_string_with_the_same_bytes_are_different_keys() {
    let tb = TokenBucket::new(2, 1, Duration::from_secs(60)).unwrap();
    let t = Timestamp::from_nanos(START);
    let number = u64::from_le_bytes(*b"01234567");
    for store in [
        MemoryStore::new(tb, StoreConfig::default()),
        MemoryStore::new(
            SlidingLog::new(2, Duration::from_secs(60)).unwrap(),
            StoreConfig::default(),
        ),
    ] {
        assert!(store.check(&number, t, 2).is_allowed());
        assert!(!store.check(&number, t, 1).is_allowed());
        assert!(
            store.check("01234567", t, 2).is_allowed(),
            "the string is untouched"
        );
        assert!(
            store.check(b"01234567".as_slice(), t, 0).remaining() == 0,
            "bytes = string"
        );
        assert_eq!(
            store.check(&(number as u32), t, 1).remaining(),
            1,
            "u32 is another integer"
        );
        assert_eq!(store.len(), 3);
    }
}

#[test]
fn the_limiter_reads_its_clock_once_per_call() {
    let tb = TokenBucket::new(1, 1, Duration::from_secs(1)).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(100));
    let limiter = Limiter::new(tb, StoreConfig::with_max_keys(10), clock.clone());
    assert!(limiter.check("k", 1).is_allowed());
    assert!(!limiter.check("k", 1).is_allowed());
    clock.advance(Duration::from_secs(1));
    assert!(limiter.check("k", 1).is_allowed());
    assert_eq!(limiter.store().len(), 1);
    assert_eq!(limiter.store().algorithm(), AnyAlgorithm::from(tb));
}
