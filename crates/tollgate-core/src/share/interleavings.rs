//! The property test of the share protocol: any interleaving of demand, calls, delays, losses, joins, leaves and crashes admits nothing an exact bucket would refuse.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::Timestamp;

const T0: Timestamp = Timestamp::from_secs(1_700_000_000);
const KEYS: u8 = 2;

/// One step of the world.
#[derive(Clone, Debug)]
enum Step {
    /// Time passes; messages due by then are delivered in order of due time.
    Advance(u16),
    /// `count` requests on `key` at holder `holder` (modulo the holders alive).
    Requests { holder: u8, key: u8, count: u8 },
    /// Holder `holder` sends its due call, if any: it takes `there` ms to
    /// arrive (or is lost: a store error), the reply `back` ms (or is lost).
    Call {
        holder: u8,
        there: Option<u16>,
        back: Option<u16>,
    },
    /// Holder `holder` stops without a word (SIGKILL).
    Crash(u8),
    /// Holder `holder` leaves: its calls release everything, `per_call`
    /// keys each (1: split into parts), sent one a millisecond apart (all
    /// may be lost).
    Leave {
        holder: u8,
        there: Option<u16>,
        per_call: u8,
    },
    /// A new holder joins.
    Join,
    /// The authority reclaims lapsed registrations.
    Expire,
}

fn delay() -> impl Strategy<Value = Option<u16>> {
    prop_oneof![4 => (0u16..400).prop_map(Some), 1 => Just(None)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u16..300).prop_map(Step::Advance),
        6 => (any::<u8>(), 0..KEYS, 1u8..80).prop_map(|(holder, key, count)| Step::Requests { holder, key, count }),
        5 => (any::<u8>(), delay(), delay()).prop_map(|(holder, there, back)| Step::Call { holder, there, back }),
        1 => any::<u8>().prop_map(Step::Crash),
        1 => (any::<u8>(), delay(), 1..=KEYS).prop_map(|(holder, there, per_call)| Step::Leave { holder, there, per_call }),
        1 => Just(Step::Join),
        1 => Just(Step::Expire),
    ]
}

/// A message on its way.
enum Message {
    Call {
        call: SyncCall<u8>,
        back: Option<u16>,
    },
    Reply(SyncReply<u8>),
}

struct World {
    now: Timestamp,
    authority: Authority<u8>,
    holders: Vec<Holder<u8>>,
    next_id: HolderId,
    in_flight: Vec<(Timestamp, u64, Message)>,
    order: u64,
    limits: [Share; KEYS as usize],
    checkers: Vec<ConformanceChecker>,
    policy: HolderPolicy,
    starter: StarterPolicy,
}

impl World {
    fn holder(&mut self, index: u8) -> Option<&mut Holder<u8>> {
        let n = self.holders.len();
        (n > 0).then(|| &mut self.holders[usize::from(index) % n])
    }

    fn send(&mut self, after: u16, message: Message) {
        self.order += 1;
        let due = self
            .now
            .saturating_add(Duration::from_millis(u64::from(after)));
        self.in_flight.push((due, self.order, message));
    }

    fn deliver_due(&mut self) {
        loop {
            let now = self.now;
            let next = self
                .in_flight
                .iter()
                .enumerate()
                .filter(|(_, (due, _, _))| *due <= now)
                .min_by_key(|(_, (due, order, _))| (*due, *order))
                .map(|(i, _)| i);
            let Some(i) = next else { return };
            let (_, _, message) = self.in_flight.swap_remove(i);
            match message {
                Message::Call { call, back } => {
                    let reply = self.authority.sync(now, &call);
                    if let Some(back) = back {
                        self.send(back, Message::Reply(reply));
                    }
                }
                Message::Reply(reply) => {
                    if let Some(h) = self.holders.iter_mut().find(|h| h.id() == reply.holder) {
                        h.on_reply(now, reply);
                    }
                }
            }
        }
    }

    fn run(&mut self, step: Step) -> Result<(), TestCaseError> {
        match step {
            Step::Advance(ms) => {
                self.now = self
                    .now
                    .saturating_add(Duration::from_millis(u64::from(ms)));
                self.deliver_due();
            }
            Step::Requests { holder, key, count } => {
                let (now, limit) = (self.now, self.limits[usize::from(key)]);
                let Some(h) = self.holder(holder) else {
                    return Ok(());
                };
                let mut admitted = 0;
                for _ in 0..count {
                    if h.check(&key, limit, now, 1) == Verdict::Admit && h.take(&key, now, 1) {
                        admitted += 1;
                    }
                }
                for _ in 0..admitted {
                    prop_assert!(
                        self.checkers[usize::from(key)].admit(now, 1),
                        "admitted past the limit of key {key} at {now:?}"
                    );
                }
            }
            Step::Call {
                holder,
                there,
                back,
            } => {
                let now = self.now;
                let Some(h) = self.holder(holder) else {
                    return Ok(());
                };
                if let Some(call) = h.poll(now)
                    && let Some(there) = there
                {
                    self.send(there, Message::Call { call, back });
                }
            }
            Step::Crash(holder) => {
                if !self.holders.is_empty() {
                    let i = usize::from(holder) % self.holders.len();
                    self.holders.swap_remove(i);
                }
            }
            Step::Leave {
                holder,
                there,
                per_call,
            } => {
                if !self.holders.is_empty() {
                    let i = usize::from(holder) % self.holders.len();
                    let mut h = self.holders.swap_remove(i);
                    let calls = h.leave(self.now, usize::from(per_call));
                    if let Some(there) = there {
                        for (part, call) in (0u16..).zip(calls) {
                            let after = there.saturating_add(part);
                            self.send(after, Message::Call { call, back: None });
                        }
                    }
                }
            }
            Step::Join => {
                self.next_id += 1;
                self.holders
                    .push(Holder::new(self.next_id, self.policy, self.now));
            }
            Step::Expire => self.authority.expire(self.now),
        }
        self.check_bookings()
    }

    /// Pool + bookings + the starter reserve = the limit, a holder that may
    /// use its shares has no more in force than is booked to it, and no
    /// more holders that may use them own a slot than there are slots.
    fn check_bookings(&self) -> Result<(), TestCaseError> {
        let owners = self
            .holders
            .iter()
            .filter(|h| h.valid_at(self.now) && h.starter().is_some())
            .count();
        prop_assert!(
            owners <= self.starter.slots as usize,
            "{owners} slot owners"
        );
        for key in 0..KEYS {
            let limit = self.limits[usize::from(key)];
            let reserve = self.starter.reserve(limit);
            if let Some((pool, booked)) = self.authority.split(&key) {
                prop_assert_eq!(
                    Share {
                        rate: pool.rate + booked.rate + reserve.rate,
                        burst: pool.burst + booked.burst + reserve.burst
                    },
                    limit
                );
            }
            for h in &self.holders {
                if h.valid_at(self.now) {
                    let in_force = h.in_force(&key);
                    let booked = self.authority.booked(&key, h.id());
                    prop_assert!(
                        !in_force.exceeds(booked),
                        "holder {} has {in_force:?} of key {key} in force, {booked:?} booked",
                        h.id()
                    );
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_interleaving_admits_past_the_limit(
        rates in proptest::array::uniform2(1u64..60),
        bursts in proptest::array::uniform2(1u64..200),
        holders in 1u8..5,
        ttl_s in 1u64..4,
        slots in 0u32..4,
        divisor in 1u64..4,
        steps in proptest::collection::vec(step(), 1..300),
    ) {
        let limits = [Share::per_second(rates[0], bursts[0]), Share::per_second(rates[1], bursts[1])];
        let policy = HolderPolicy {
            sync_interval: Duration::from_millis(100),
            batch_interval: Duration::from_millis(1),
            call_timeout: Duration::from_millis(300),
            ttl: Duration::from_secs(ttl_s),
            ttl_margin: Duration::ZERO,
            idle_after: Duration::from_secs(2),
            demand_period: Duration::from_millis(500),
            max_keys: 16,
        };
        let starter = StarterPolicy { slots, divisor };
        let mut world = World {
            now: T0,
            authority: Authority::new(AuthorityPolicy { ttl: Duration::from_secs(ttl_s), starter, ..AuthorityPolicy::default() }),
            holders: (1..=u64::from(holders)).map(|id| Holder::new(id, policy, T0)).collect(),
            next_id: u64::from(holders),
            in_flight: Vec::new(),
            order: 0,
            limits,
            checkers: limits.iter().map(|&l| ConformanceChecker::new(l, T0)).collect(),
            policy,
            starter,
        };
        for step in steps {
            world.run(step)?;
        }
    }
}
