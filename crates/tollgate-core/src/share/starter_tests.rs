//! Tests of starter slots: a slot owner decides a key's first use with no call, its part starts empty, the pool keeps the reserve out, a freed slot passes on empty.

use std::time::Duration;

use super::*;
use crate::Timestamp;

const T0: Timestamp = Timestamp::from_secs(1_700_000_000);
const LIMIT: Share = Share::per_second(100, 100);
/// Two slots of 100 / 8: 12.5 tokens per second, a burst of 12 each; a reserve of 25/s and 24.
const STARTER: StarterPolicy = StarterPolicy {
    slots: 2,
    divisor: 4,
};
const PART: Share = Share {
    rate: 12_500,
    burst: 12,
};

fn ms(t: u64) -> Timestamp {
    Timestamp::from_nanos(T0.as_nanos() + t * 1_000_000)
}

fn holder(id: HolderId) -> Holder<u32> {
    Holder::new(
        id,
        HolderPolicy {
            ttl: Duration::from_secs(10),
            ttl_margin: Duration::ZERO,
            idle_after: Duration::from_secs(4),
            ..HolderPolicy::default()
        },
        T0,
    )
}

fn authority(starter: StarterPolicy) -> Authority<u32> {
    Authority::new(AuthorityPolicy {
        starter,
        ..AuthorityPolicy::default()
    })
}

/// Sends `h`'s due call at `now` and takes the reply; the call sent, if any.
fn round_trip(
    h: &mut Holder<u32>,
    a: &mut Authority<u32>,
    now: Timestamp,
) -> Option<SyncCall<u32>> {
    let call = h.poll(now)?;
    let reply = a.sync(now, &call);
    h.on_reply(now, reply);
    Some(call)
}

/// `h` registers by asking for key 0 at `now`.
fn register(h: &mut Holder<u32>, a: &mut Authority<u32>, now: Timestamp) {
    assert_eq!(h.check(&0, LIMIT, now, 1), Verdict::Wait);
    round_trip(h, a, now).expect("the first call");
}

/// Admissions of `count` requests of key `key` at `now`.
fn admit(h: &mut Holder<u32>, key: u32, now: Timestamp, count: u32) -> u32 {
    let mut admitted = 0;
    for _ in 0..count {
        if h.check(&key, LIMIT, now, 1) == Verdict::Admit && h.take(&key, now, 1) {
            admitted += 1;
        }
    }
    admitted
}

#[test]
fn a_slot_owner_decides_a_keys_first_use_with_no_call() {
    let mut a = authority(STARTER);
    let mut h = holder(1);
    register(&mut h, &mut a, T0);
    assert_eq!(h.starter(), Some(STARTER), "the first member owns a slot");
    // A second later its part of any key is full: 12 first uses of key 7 at once.
    assert_eq!(admit(&mut h, 7, ms(1_000), 12), 12);
    assert_eq!(h.local(&7), (PART, 0));
    assert_eq!(h.in_force(&7), Share::ZERO, "nothing booked for it");
    // The heartbeat does not mention key 7: it fit in the part.
    let call = round_trip(&mut h, &mut a, ms(1_000)).expect("a heartbeat");
    assert!(call.reports.iter().all(|r| r.key != 7), "{call:?}");
    assert_eq!(a.split(&7), None, "the authority never heard of key 7");
    // The part is dry: the 13th waits, and the key goes out urgently.
    assert_eq!(h.check(&7, LIMIT, ms(1_000), 1), Verdict::Wait);
    let call = round_trip(&mut h, &mut a, ms(1_001)).expect("an urgent call");
    assert!(call.reports.iter().any(|r| r.key == 7));
    assert!(h.in_force(&7).rate > 0, "a share booked beside the part");
    assert_eq!(h.check(&7, LIMIT, ms(1_001), 1), Verdict::Admit);
}

#[test]
fn without_a_slot_a_first_use_waits_for_a_call() {
    let mut a = authority(StarterPolicy::OFF);
    let mut h = holder(1);
    register(&mut h, &mut a, T0);
    assert_eq!(h.starter(), None);
    assert_eq!(h.check(&7, LIMIT, ms(1_000), 1), Verdict::Wait);
}

#[test]
fn a_slots_part_starts_empty_when_the_holder_hears_of_it() {
    let mut a = authority(STARTER);
    let mut h = holder(1);
    register(&mut h, &mut a, T0);
    // 12.5 tokens a second from T0: 1 token after 80 ms, none before.
    assert_eq!(h.check(&7, LIMIT, ms(79), 1), Verdict::Wait);
    assert_eq!(admit(&mut h, 8, ms(80), 5), 1);
}

#[test]
fn every_pool_keeps_the_reserve_out_and_bookings_split_the_rest() {
    let mut a = authority(STARTER);
    let mut h = holder(1);
    register(&mut h, &mut a, T0);
    let (pool, booked) = a.split(&0).expect("key 0 was reported");
    let reserve = STARTER.reserve(LIMIT);
    assert_eq!(reserve, Share::per_second(25, 24));
    assert_eq!(
        Share {
            rate: pool.rate + booked.rate + reserve.rate,
            burst: pool.burst + booked.burst + reserve.burst,
        },
        LIMIT
    );
    // One member, floor divisor 2: half of the 75/s the holdings split, less its slot's 12.5/s.
    assert_eq!(booked.rate, 25_000);
}

/// `holder`'s call at `now` reporting key 0 with `in_force` and a demand of 1000/s.
fn busy_call(holder: HolderId, seq: u64, in_force: Share) -> SyncCall<u32> {
    SyncCall {
        holder,
        incarnation: 1,
        seq,
        registering: seq == 1,
        leaving: Leaving::No,
        reports: vec![KeyReport {
            key: 0,
            limit: LIMIT,
            in_force,
            returned: 0,
            demand: Some(1_000_000),
            release: false,
        }],
    }
}

#[test]
fn an_instance_without_a_slot_gets_as_much_of_a_busy_key_as_one_with_a_slot() {
    let mut a = authority(STARTER);
    // Holders 1 and 2 own the 2 slots, holder 3 none; all three want far more than the limit.
    let mut in_force = [Share::ZERO; 3];
    let mut owns = [false; 3];
    for seq in 1..=4 {
        for (i, id) in [1u64, 2, 3].into_iter().enumerate() {
            let reply = a.sync(ms(seq * 100), &busy_call(id, seq, in_force[i]));
            assert!(reply.accepted);
            owns[i] = reply.starter.is_some();
            if let Some(answer) = reply.answers.iter().find(|a| a.key == 0) {
                // As a holder does: shrink to the target, else put the booking in force.
                in_force[i] = answer.booked.min(answer.target);
            }
        }
    }
    assert_eq!(owns, [true, true, false]);
    // What each has of the key's 100/s in all: its booking, and its slot's part if it owns one.
    let whole: Vec<u64> = (0..3)
        .map(|i| in_force[i].rate + if owns[i] { PART.rate } else { 0 })
        .collect();
    // A third each (the slotless one had 25/s, a third of the 75/s the bookings split).
    for (i, &w) in whole.iter().enumerate() {
        assert!(
            (33_000..=33_400).contains(&w),
            "holder {}: {whole:?}",
            i + 1
        );
    }
    let (pool, booked) = a.split(&0).expect("a book");
    assert!(booked.rate <= LIMIT.rate - STARTER.reserve(LIMIT).rate);
    assert_eq!(pool.rate + booked.rate, 75_000);
}

#[test]
fn only_as_many_holders_as_slots_own_one_and_a_freed_slot_passes_on_empty() {
    let mut a = authority(StarterPolicy {
        slots: 1,
        divisor: 4,
    });
    let mut first = holder(1);
    let mut second = holder(2);
    register(&mut first, &mut a, T0);
    register(&mut second, &mut a, T0);
    assert!(first.starter().is_some());
    assert_eq!(second.starter(), None, "one slot, already owned");
    // The first holder is SIGKILLed; the second keeps calling.
    let mut t = 100;
    while t <= 10_000 {
        second.check(&0, LIMIT, ms(t), 1);
        round_trip(&mut second, &mut a, ms(t));
        t += 100;
    }
    assert_eq!(a.members(), 1, "the first registration ran out");
    assert!(
        second.starter().is_some(),
        "the freed slot went to the survivor"
    );
    // Heard at 10 s: its part of a new key is empty then.
    assert_eq!(second.check(&9, LIMIT, ms(10_000), 1), Verdict::Wait);
}

#[test]
fn a_key_on_its_starter_part_is_forgotten_only_when_the_part_is_full_again() {
    let mut a = authority(STARTER);
    let mut h = holder(1);
    register(&mut h, &mut a, T0);
    assert_eq!(admit(&mut h, 7, ms(1_000), 12), 12);
    let keys = h.keys();
    // Idle 4 s, refilled by 12.5/s: full again after 0.96 s; the sweep
    // (every half idle time, with a call) forgets it with no report.
    let mut t = 1_100;
    while t <= 8_000 {
        if let Some(call) = round_trip(&mut h, &mut a, ms(t)) {
            assert!(call.reports.iter().all(|r| r.key != 7));
        }
        // Key 0 stays busy so the holder keeps its keys and calls.
        h.check(&0, LIMIT, ms(t), 1);
        t += 100;
    }
    assert_eq!(h.keys(), keys - 1, "key 7 forgotten");
    // Met again: its part is as full as it was when forgotten, no fuller.
    assert_eq!(admit(&mut h, 7, ms(8_000), 13), 12);
}

#[test]
fn a_key_on_a_slow_part_is_kept_until_the_part_is_full() {
    // 1 token a minute per slot: an idle key's part is not full after 4 s.
    let limit = Share::per_second(1, 1_000);
    let slow = StarterPolicy {
        slots: 2,
        divisor: 4,
    };
    assert_eq!(
        slow.part(limit),
        Share {
            rate: 125,
            burst: 125
        }
    );
    let mut a = authority(slow);
    let mut h = holder(1);
    register(&mut h, &mut a, T0);
    // 8 s of refill: 1 token.
    assert_eq!(h.check(&7, limit, ms(8_000), 1), Verdict::Admit);
    assert!(h.take(&7, ms(8_000), 1));
    let keys = h.keys();
    let mut t = 8_100;
    while t <= 20_000 {
        round_trip(&mut h, &mut a, ms(t));
        h.check(&0, LIMIT, ms(t), 1);
        t += 100;
    }
    assert_eq!(h.keys(), keys, "key 7 kept: its part is not full");
    // 12 s of refill at 0.125/s since the last take: 1.5 tokens, not 125.
    let admitted = (0..5)
        .filter(|_| {
            h.check(&7, limit, ms(20_000), 1) == Verdict::Admit && h.take(&7, ms(20_000), 1)
        })
        .count();
    assert_eq!(admitted, 1);
}

#[test]
fn a_slot_passed_on_after_a_leave_admits_nothing_an_exact_bucket_refuses() {
    let mut a = authority(StarterPolicy {
        slots: 1,
        divisor: 4,
    });
    let mut checker = ConformanceChecker::new(LIMIT, T0);
    let mut feed = |admitted: u32, at: Timestamp| {
        for _ in 0..admitted {
            assert!(checker.admit(at, 1), "admitted past the limit at {at:?}");
        }
    };
    let mut first = holder(1);
    register(&mut first, &mut a, T0);
    // At 1 s its part of key 7 is full (25): all of it, then a grant from the pool.
    let t = ms(1_000);
    feed(admit(&mut first, 7, t, 100), t);
    round_trip(&mut first, &mut a, ms(1_001)).expect("key 7 waits");
    feed(admit(&mut first, 7, ms(1_001), 100), ms(1_001));
    // It leaves: its booking returns with the tokens it had, its slot is free.
    for leave in first.leave(ms(1_002), LEAVE_KEYS_PER_CALL) {
        a.sync(ms(1_002), &leave);
    }
    let mut second = holder(2);
    assert_eq!(second.check(&8, LIMIT, ms(1_002), 1), Verdict::Wait);
    round_trip(&mut second, &mut a, ms(1_002)).expect("registers");
    assert!(second.starter().is_some(), "the slot passed on");
    // Its part of key 7 starts empty: only what the pool still has.
    for t in [ms(1_002), ms(1_003), ms(1_004)] {
        feed(admit(&mut second, 7, t, 100), t);
        round_trip(&mut second, &mut a, t);
    }
}
