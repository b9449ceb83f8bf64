//! Tests of the share protocol: each rule on its own, and a property test of any interleaving against the exact bucket.

use std::time::Duration;

use super::*;
use crate::Timestamp;

const T0: Timestamp = Timestamp::from_secs(1_700_000_000);
const LIMIT: Share = Share::per_second(100, 100);

fn ms(t: u64) -> Timestamp {
    Timestamp::from_nanos(T0.as_nanos() + t * 1_000_000)
}

fn policy() -> HolderPolicy {
    HolderPolicy {
        ttl: Duration::from_secs(10),
        ttl_margin: Duration::ZERO,
        ..HolderPolicy::default()
    }
}

/// Sends `holder`'s due call at `now` straight to `authority` and its reply straight back.
fn round_trip(holder: &mut Holder<u32>, authority: &mut Authority<u32>, now: Timestamp) -> bool {
    match holder.poll(now) {
        Some(call) => {
            let reply = authority.sync(now, &call);
            holder.on_reply(now, reply)
        }
        None => false,
    }
}

#[test]
fn a_newcomer_waits_for_its_first_share_then_gets_the_floor_from_the_pool() {
    let mut authority = Authority::new(AuthorityPolicy::default());
    let mut a = Holder::new(1, policy(), T0);
    assert_eq!(
        a.check(&7, LIMIT, T0, 1),
        Verdict::Wait,
        "no share before the authority answers"
    );
    assert!(round_trip(&mut a, &mut authority, T0));
    // One member, floor divisor 2: it wants 100 / 2 = 50/s, and the pool keeps the rest.
    assert_eq!(a.in_force(&7), Share::per_second(50, 50));
    assert_eq!(
        authority.split(&7),
        Some((Share::per_second(50, 50), Share::per_second(50, 50)))
    );
    assert_eq!(
        a.check(&7, LIMIT, T0, 1),
        Verdict::Admit,
        "the grant brought its tokens"
    );
    // A second member's newcomer is granted at once from what the pool kept.
    let mut b = Holder::new(2, policy(), T0);
    assert_eq!(b.check(&7, LIMIT, ms(1), 1), Verdict::Wait);
    assert!(round_trip(&mut b, &mut authority, ms(1)));
    assert_eq!(
        b.in_force(&7),
        Share::per_second(25, 25),
        "floor 100 / (2 members × 2)"
    );
    assert_eq!(b.check(&7, LIMIT, ms(1), 1), Verdict::Admit);
}

#[test]
fn a_grant_is_booked_before_the_holder_can_use_it_and_a_lost_reply_returns_it_later() {
    let mut authority = Authority::new(AuthorityPolicy::default());
    let mut a = Holder::new(1, policy(), T0);
    a.check(&7, LIMIT, T0, 1);
    let call = a.poll(T0).expect("a key waits");
    let reply = authority.sync(T0, &call);
    // Booked, not yet in force: the holder still waits.
    assert_eq!(authority.booked(&7, 1), Share::per_second(50, 50));
    assert_eq!(a.in_force(&7), Share::ZERO);
    assert_eq!(a.check(&7, LIMIT, T0, 1), Verdict::Wait);
    drop(reply); // lost
    // The holder gives up after the timeout; its next call says it has nothing in force,
    // so the booking is taken back before a new grant.
    let later = ms(600);
    let call = a.poll(later).expect("given up and asked again");
    assert_eq!(call.reports[0].in_force, Share::ZERO);
    assert!(a.on_reply(later, authority.sync(later, &call)));
    assert_eq!(authority.booked(&7, 1), a.in_force(&7));
}

#[test]
fn a_shrink_takes_effect_at_the_holder_before_the_authority_books_the_release() {
    let mut authority = Authority::new(AuthorityPolicy::default());
    let mut a = Holder::new(1, policy(), T0);
    a.check(&7, LIMIT, T0, 1);
    assert!(round_trip(&mut a, &mut authority, T0));
    assert_eq!(a.in_force(&7), Share::per_second(50, 50));
    // Holder 2 joins with a big demand: 1 (floor 25) now wants less than it holds.
    let mut b = Holder::new(2, policy(), T0);
    for _ in 0..400 {
        b.check(&7, LIMIT, ms(10), 1);
    }
    assert!(round_trip(&mut b, &mut authority, ms(10)));
    for t in [1_100, 1_200] {
        for _ in 0..90 {
            b.check(&7, LIMIT, ms(t), 1);
        }
        round_trip(&mut b, &mut authority, ms(t));
    }
    // Holder 1 hears its lower target at its next call and shrinks at once, before reporting.
    let call = a.poll(ms(1_300)).expect("heartbeat");
    let reply = authority.sync(ms(1_300), &call);
    let target = reply
        .answers
        .iter()
        .find(|x| x.key == 7)
        .expect("key 7 is dirty for holder 1")
        .target;
    assert!(target.rate < 50_000);
    assert!(a.on_reply(ms(1_300), reply));
    assert_eq!(a.in_force(&7), target, "in force shrank at once");
    assert_eq!(
        authority.booked(&7, 1),
        Share::per_second(50, 50),
        "not yet released"
    );
    let call = a.poll(ms(1_301)).expect("an urgent call books the release");
    assert!(
        call.reports[0].returned > 0,
        "the tokens above the new capacity go back"
    );
    assert!(a.on_reply(ms(1_301), authority.sync(ms(1_301), &call)));
    assert_eq!(authority.booked(&7, 1), target);
}

#[test]
fn an_idle_key_is_released_and_forgotten() {
    let mut authority = Authority::new(AuthorityPolicy::default());
    let mut a = Holder::new(1, policy(), T0);
    a.check(&7, LIMIT, T0, 1);
    a.check(&8, LIMIT, T0, 1);
    assert!(round_trip(&mut a, &mut authority, T0));
    // Key 8 stays busy, key 7 is idle for 30 s: heartbeats keep the registration alive.
    for s in 1..=46 {
        a.check(&8, LIMIT, ms(s * 1_000), 1);
        round_trip(&mut a, &mut authority, ms(s * 1_000));
    }
    assert_eq!(a.keys(), 1, "key 7 forgotten by the holder");
    assert_eq!(authority.booked(&7, 1), Share::ZERO);
    assert_eq!(
        authority.split(&7).map(|(pool, _)| pool),
        Some(LIMIT),
        "all back in the pool"
    );
    authority.forget_idle(ms(50_000));
    assert_eq!(
        authority.split(&7),
        None,
        "a full pool nobody holds is forgotten"
    );
    assert!(authority.split(&8).is_some());
}

#[test]
fn a_crashed_holder_lapses_and_its_capacity_returns_with_no_tokens() {
    let mut authority = Authority::new(AuthorityPolicy::default());
    let mut a = Holder::new(1, policy(), T0);
    a.check(&7, LIMIT, T0, 1);
    assert!(round_trip(&mut a, &mut authority, T0));
    // Holder 1 is SIGKILLed: it never calls again. Before its TTL nothing returns.
    authority.expire(ms(9_999));
    assert_eq!(authority.booked(&7, 1), Share::per_second(50, 50));
    let pool = authority.pool(&7).expect("held");
    assert_eq!(
        pool.level(),
        50 * PICO_PER_TOKEN,
        "the pool's own half, full"
    );
    authority.expire(ms(10_000));
    assert_eq!(authority.booked(&7, 1), Share::ZERO);
    assert_eq!(authority.members(), 0);
    let pool = authority.pool(&7).expect("book kept");
    assert_eq!(pool.share(), LIMIT, "the capacity is back");
    assert_eq!(
        pool.level(),
        50 * PICO_PER_TOKEN,
        "without the lapsed holder's tokens: it may have spent them"
    );
}

#[test]
fn a_leave_split_into_parts_gives_back_every_key_and_ends_the_registration_last() {
    let mut authority = Authority::new(AuthorityPolicy::default());
    let mut a = Holder::new(1, policy(), T0);
    for key in 0..5 {
        a.check(&key, LIMIT, T0, 1);
    }
    assert!(round_trip(&mut a, &mut authority, T0));
    let calls = a.leave(ms(1), 2);
    let parts: Vec<(usize, Leaving)> = calls.iter().map(|c| (c.reports.len(), c.leaving)).collect();
    assert_eq!(
        parts,
        [(2, Leaving::Part), (2, Leaving::Part), (1, Leaving::Last)],
        "at most 2 keys a call, the last one ends the registration"
    );
    for call in &calls[..2] {
        let reply = authority.sync(ms(1), call);
        assert!(reply.accepted && reply.answers.is_empty(), "{reply:?}");
        assert_eq!(authority.members(), 1, "a part leaves the registration");
    }
    assert!(authority.sync(ms(1), &calls[2]).accepted);
    assert_eq!(authority.members(), 0);
    for key in 0..5 {
        let pool = authority.pool(&key).expect("a book");
        assert_eq!(pool.share(), LIMIT, "key {key}: its capacity is back");
        assert_eq!(
            pool.level(),
            LIMIT.capacity(),
            "key {key}: with the tokens the holder had"
        );
    }
    // A part that arrives from a holder the authority does not know registers nothing.
    let mut b = Holder::new(2, policy(), T0);
    b.check(&8, LIMIT, T0, 1);
    b.check(&9, LIMIT, T0, 1);
    let calls = b.leave(ms(2), 1);
    assert_eq!(calls.len(), 2);
    assert!(authority.sync(ms(2), &calls[0]).lapsed);
    assert_eq!(authority.members(), 0);
}

#[test]
fn a_holder_past_its_deadline_stops_using_its_shares() {
    let mut authority = Authority::new(AuthorityPolicy::default());
    let mut a = Holder::new(
        1,
        HolderPolicy {
            ttl_margin: Duration::from_secs(1),
            ..policy()
        },
        T0,
    );
    a.check(&7, LIMIT, T0, 1);
    assert!(round_trip(&mut a, &mut authority, T0));
    assert_eq!(a.check(&7, LIMIT, ms(8_999), 1), Verdict::Admit);
    // The store is unreachable from here on: at ttl − margin the shares are dropped.
    assert_ne!(a.check(&7, LIMIT, ms(9_000), 1), Verdict::Admit);
    assert_eq!(a.lapses(), 1);
    assert_eq!(a.in_force(&7), Share::ZERO);
}

#[test]
fn a_late_reply_to_a_given_up_call_changes_nothing() {
    let mut authority = Authority::new(AuthorityPolicy::default());
    let mut a = Holder::new(1, policy(), T0);
    a.check(&7, LIMIT, T0, 1);
    let first = a.poll(T0).expect("waits");
    let late = authority.sync(T0, &first);
    let second = a.poll(ms(600)).expect("timed out, asks again");
    assert!(
        !a.on_reply(ms(700), late),
        "not the reply to the call in flight"
    );
    assert_eq!(a.in_force(&7), Share::ZERO);
    assert!(a.on_reply(ms(700), authority.sync(ms(700), &second)));
    assert_eq!(a.in_force(&7), authority.booked(&7, 1));
}

/// Both holders ask every 5 ms on key 7 (200/s each, past any limit here)
/// from `from` ms to `to` ms, with `limit` as each one's configuration says;
/// every admission goes to `checker` when there is one.
fn busy(
    holders: &mut [(&mut Holder<u32>, Share)],
    authority: &mut Authority<u32>,
    from: u64,
    to: u64,
    mut checker: Option<&mut ConformanceChecker>,
) {
    for t in (from..to).step_by(5) {
        for (holder, limit) in holders.iter_mut() {
            if holder.check(&7, *limit, ms(t), 1) == Verdict::Admit
                && holder.take(&7, ms(t), 1)
                && let Some(c) = checker.as_deref_mut()
            {
                c.admit(ms(t), 1);
            }
            round_trip(holder, authority, ms(t));
        }
    }
}

#[test]
fn a_lowered_limit_stops_grants_above_it_and_reaches_every_holder_at_its_next_call() {
    let mut authority = Authority::new(AuthorityPolicy::default());
    let (mut a, mut b) = (Holder::new(1, policy(), T0), Holder::new(2, policy(), T0));
    let low = Share::per_second(40, 40);
    busy(
        &mut [(&mut a, LIMIT), (&mut b, LIMIT)],
        &mut authority,
        0,
        2_000,
        None,
    );
    let before = a.in_force(&7).rate + b.in_force(&7).rate;
    assert!(
        before > low.rate,
        "both hold more than the new limit: {before}"
    );
    // Only `a` has the new limit (its instance reloaded first).
    busy(
        &mut [(&mut a, low), (&mut b, LIMIT)],
        &mut authority,
        2_000,
        2_010,
        None,
    );
    let (pool, booked) = authority.split(&7).expect("a book");
    assert!(a.in_force(&7).rate <= low.rate, "a shrank at once");
    assert!(
        booked.rate > low.rate && pool == Share::ZERO,
        "no grant while the bookings exceed the new limit: pool {pool:?}, booked {booked:?}"
    );
    // Then `b` too: at its next calls both hold no more than the new limit together.
    busy(
        &mut [(&mut a, low), (&mut b, low)],
        &mut authority,
        2_010,
        3_000,
        None,
    );
    let (a_now, b_now) = (a.in_force(&7), b.in_force(&7));
    assert!(
        a_now.rate + b_now.rate <= low.rate && a_now.burst + b_now.burst <= low.burst,
        "{a_now:?} + {b_now:?} within {low:?}"
    );
    // From there on the admitted stream conforms to the new limit.
    let mut checker = ConformanceChecker::new(low, ms(3_000));
    busy(
        &mut [(&mut a, low), (&mut b, low)],
        &mut authority,
        3_000,
        8_000,
        Some(&mut checker),
    );
    assert_eq!(checker.over_admitted(), 0);
    assert!(
        checker.admitted() >= 40 * 4,
        "the new limit is used: {}",
        checker.admitted()
    );
}
