//! Unit tests of the word store: the table's slots, eviction ranks and arrival numbers.

use std::time::Duration;

use tollgate_core::TokenBucket;

use super::*;

fn bucket() -> TokenBucket {
    TokenBucket::new(3, 1, Duration::from_secs(1)).unwrap()
}

#[test]
fn probes_wrap_around_the_end_of_the_table() {
    let table = Table::with_capacity(4);
    // Every hash near u64::MAX lands in the last slot.
    let ids: Vec<KeyId> = (1..=3).map(KeyId::of_integer).collect();
    for (n, id) in ids.iter().enumerate() {
        assert!(table.insert_absent(*id, u64::MAX, n as u64 + 10, 0));
    }
    for (n, id) in ids.iter().enumerate() {
        let slot = table.find(*id, u64::MAX).unwrap();
        assert_eq!(slot.state.load(Ordering::Relaxed), n as u64 + 10);
    }
    assert!(table.find(KeyId::of_integer(9), u64::MAX).is_none());
    assert!(table.insert_absent(KeyId::of_integer(4), 0, 1, 0));
    assert!(
        !table.insert_absent(KeyId::of_integer(5), 0, 1, 0),
        "a full table refuses"
    );
    assert!(table.find(KeyId::of_integer(9), 0).is_none(), "terminates");
}

#[test]
fn tables_grow_by_a_third_and_stay_between_60_and_80_percent_full() {
    let store = WordStore::new(bucket(), StoreConfig::with_max_keys(1 << 20));
    let now = Timestamp::from_secs(100);
    let mut capacities = vec![];
    for n in 0..20_000u64 {
        store.check(&n, now, 1);
        let guard = epoch::pin();
        let cap = store
            .current_table(&store.shards[0], &guard)
            .map_or(0, |t| t.capacity());
        if capacities.last() != Some(&cap) {
            capacities.push(cap);
        }
    }
    // From the first real growth on (tiny tables round up): 4/3 each time.
    assert!(capacities.len() > 8, "{capacities:?}");
    for pair in capacities.windows(2).skip(4) {
        let ratio = pair[1] as f64 / pair[0] as f64;
        assert!((1.3..1.42).contains(&ratio), "{capacities:?}");
    }
    let guard = epoch::pin();
    for shard in store.shards.iter() {
        let t = store.current_table(shard, &guard).unwrap();
        let load = shard.len.load(Ordering::Relaxed) as f64 / t.capacity() as f64;
        assert!((0.55..=0.8).contains(&load), "load {load}");
    }
    let per_key = store.memory_bytes() as f64 / store.len() as f64;
    assert!((30.0..=44.0).contains(&per_key), "{per_key} bytes per key");
}

#[test]
fn arrival_numbers_are_renumbered_in_order_before_they_outgrow_their_bits() {
    let store = WordStore::new(bucket(), StoreConfig::with_max_keys(8));
    let now = Timestamp::from_secs(100);
    let shard = &store.shards[0];
    // Two keys arrive just below the renumbering point, then one more
    // key per rebuild until the last crosses it.
    shard.next_arrival.store(RENUMBER_AT - 2, Ordering::Relaxed);
    for n in 0..8u64 {
        store.check(&n, now, 3);
    }
    assert!(shard.next_arrival.load(Ordering::Relaxed) < 16);
    let guard = epoch::pin();
    let table = store.current_table(shard, &guard).unwrap();
    let mut arrivals: Vec<(u64, u64)> = table
        .slots
        .iter()
        .filter(|s| s.hi.load(Ordering::Relaxed) != 0)
        .map(|s| {
            let hi = s.hi.load(Ordering::Relaxed);
            (
                (hi & SPARE_HI_BITS) >> ARRIVAL_SHIFT,
                s.lo.load(Ordering::Relaxed),
            )
        })
        .collect();
    arrivals.sort_unstable();
    let keys: Vec<u64> = arrivals.iter().map(|a| a.1).collect();
    let mut in_order = keys.clone();
    in_order.sort_unstable();
    assert_eq!(keys, in_order, "renumbering kept the order of arrival");
    // The newest go first: a full store of exhausted keys keeps the oldest.
    for n in 100..120u64 {
        store.check(&n, now, 3);
    }
    assert!(!store.check(&0u64, now, 1).is_allowed(), "the oldest stays");
}

#[test]
fn an_absent_key_that_stays_fresh_takes_no_memory() {
    let store = WordStore::new(bucket(), StoreConfig::with_max_keys(100));
    let now = Timestamp::from_secs(100);
    assert!(store.check("x", now, 0).is_allowed());
    assert!(!store.check("x", now, 4).is_allowed(), "exceeds capacity");
    store.refund("x", now, 2);
    assert_eq!(store.len(), 0);
    assert_eq!(
        store.memory_bytes(),
        store.shards.len() * size_of::<CachePadded<Shard>>()
    );
}

#[test]
fn a_frozen_slot_sends_the_check_through_the_lock_to_the_new_table() {
    let store = WordStore::new(bucket(), StoreConfig::with_max_keys(100));
    let now = Timestamp::from_secs(100);
    store.check(&1u64, now, 1);
    let guard = epoch::pin();
    let id = store.hashing.key_id(&1u64);
    let hash = store.hashing.probe_hash(id);
    let shard = store.shard(hash);
    // Hold the old table as a stalled reader would, then rebuild.
    let old = store.current_table(shard, &guard).unwrap();
    {
        let _w = shard.writer.lock();
        store.rebuild(shard, now, 0, &guard);
    }
    let old_slot = old.find(id, hash).unwrap();
    assert_eq!(old_slot.state.load(Ordering::Relaxed), RESERVED_STATE);
    assert_eq!(
        state_word::update(&old_slot.state, |s| store.algorithm.decide(s, now, 1)),
        Err(state_word::Frozen)
    );
    assert_eq!(store.check(&1u64, now, 1).remaining(), 1);
    assert_eq!(store.peek(&1u64), now.as_nanos() + 2 * 1_000_000_000);
}
