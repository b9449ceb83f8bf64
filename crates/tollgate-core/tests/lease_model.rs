//! Property test of quota leases against a model: N instances sharing one budget never admit more than the limit.
//!
//! The shared store is modelled with the lease script's arithmetic (a fixed
//! window's count, a schedule's theoretical arrival time), the instances
//! with [`LeaseLedger`] as the service runs them: spend from a usable lease,
//! else decide exactly in the store and then ask for a lease; return the
//! lease on request. Any interleaving of requests, grants, returns, refunds
//! and time passing must produce an admitted sequence that one exact
//! instance of the algorithm (the core's own) admits in full.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::lease::{Grant, LeaseLedger, LeasePolicy, Leasing, Return, grant_units};
use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, FixedWindow, Timestamp, TokenBucket, WordAlgorithm,
};

/// The shared budget as the Redis scripts keep it.
#[derive(Debug)]
enum Store {
    Window {
        window: u64,
        limit: u64,
        index: u64,
        count: u64,
        leased: u64,
    },
    Schedule {
        interval: u64,
        capacity: u64,
        tat: u64,
        floor: u64,
    },
}

impl Store {
    fn of(algorithm: &AnyAlgorithm) -> Self {
        match Leasing::of(algorithm).expect("a leased algorithm") {
            Leasing::Window { window_ns, limit } => Store::Window {
                window: window_ns,
                limit,
                index: 0,
                count: 0,
                leased: 0,
            },
            Leasing::Schedule {
                interval_ns,
                capacity,
            } => Store::Schedule {
                interval: interval_ns,
                capacity,
                tat: 0,
                floor: 0,
            },
        }
    }

    /// Units available at `now` (and rolls the window).
    fn available(&mut self, now: u64) -> u64 {
        match self {
            Store::Window {
                window,
                limit,
                index,
                count,
                leased,
            } => {
                if now / *window != *index {
                    *index = now / *window;
                    *count = 0;
                    *leased = 0;
                }
                limit.saturating_sub(*count)
            }
            Store::Schedule {
                interval,
                capacity,
                tat,
                ..
            } => {
                let backlog = tat.saturating_sub(now);
                (*capacity * *interval - backlog.min(*capacity * *interval)) / *interval
            }
        }
    }

    /// check.lua's consume: all or nothing (a fixed window counts a denial, up to limit + 1).
    fn exact(&mut self, hits: u64, now: u64) -> bool {
        let available = self.available(now);
        let allowed = hits <= available;
        match self {
            Store::Window { limit, count, .. } => {
                *count = if allowed {
                    *count + hits
                } else {
                    (*count + hits).min(*limit + 1)
                };
            }
            Store::Schedule { interval, tat, .. } => {
                if allowed {
                    *tat = (*tat).max(now) + hits * *interval;
                }
            }
        }
        allowed
    }

    /// check.lua's give-back.
    fn give_back(&mut self, hits: u64, now: u64) {
        self.available(now);
        match self {
            Store::Window {
                limit,
                count,
                leased,
                ..
            } => {
                // Never below the units leased in this window (check.lua's floor).
                if *count <= *limit {
                    *count = count.saturating_sub(hits).max(*leased);
                }
            }
            Store::Schedule {
                interval,
                tat,
                floor,
                ..
            } => {
                // Never below the leased positions (the floor lease.lua keeps).
                let backlog = tat.saturating_sub(now).saturating_sub(hits * *interval);
                *tat = (now + backlog).max(*floor);
            }
        }
    }

    /// lease.lua's grant.
    fn grant(&mut self, want: u64, divisor: u64, now: u64) -> Grant {
        let available = self.available(now);
        let units = grant_units(want, available, divisor);
        match self {
            Store::Window {
                window,
                index,
                count,
                leased,
                ..
            } => {
                *count += units;
                *leased += units;
                Grant {
                    units,
                    lasts: Duration::from_nanos((*index + 1) * *window - now),
                    remaining: available - units,
                    token: (*index, 0),
                }
            }
            Store::Schedule {
                interval,
                tat,
                floor,
                ..
            } => {
                if units > 0 {
                    *tat = (*tat).max(now) + units * *interval;
                    *floor = *tat;
                }
                Grant {
                    units,
                    lasts: Duration::from_nanos(tat.saturating_sub(now)),
                    remaining: available - units,
                    token: (*tat / 1_000_000_000, *tat % 1_000_000_000),
                }
            }
        }
    }

    /// lease.lua's return: only into the same window, or while the TAT is still the lease's.
    fn give_lease_back(&mut self, r: Return, now: u64) {
        self.available(now);
        match self {
            Store::Window {
                index,
                count,
                limit,
                leased,
                ..
            } => {
                if r.token.0 == *index && *count <= *limit {
                    *count = count.saturating_sub(r.units);
                    *leased = leased.saturating_sub(r.units);
                }
            }
            Store::Schedule {
                interval,
                tat,
                floor,
                ..
            } => {
                if (*tat / 1_000_000_000, *tat % 1_000_000_000) == r.token {
                    let backlog = tat.saturating_sub(now).saturating_sub(r.units * *interval);
                    *tat = now + backlog;
                    *floor = *tat;
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Request { instance: usize, hits: u64 },
    Refund { instance: usize, hits: u64 },
    Return { instance: usize },
    Advance { ms: u64 },
}

fn op(instances: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..instances, 0u64..4).prop_map(|(instance, hits)| Op::Request { instance, hits }),
        1 => (0..instances, 1u64..3).prop_map(|(instance, hits)| Op::Refund { instance, hits }),
        1 => (0..instances).prop_map(|instance| Op::Return { instance }),
        2 => (0u64..400).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// Runs `ops` and returns the admitted (time, hits) in order.
fn run(algorithm: AnyAlgorithm, instances: usize, period_ms: u64, ops: &[Op]) -> Vec<(u64, u64)> {
    let start = 1_000_000_000_000u64;
    let mut now = start;
    let mut store = Store::of(&algorithm);
    let policy = LeasePolicy::for_fleet(Duration::from_millis(period_ms), instances as u64);
    let mut ledgers: Vec<LeaseLedger> = (0..instances)
        .map(|_| {
            // Small limits: lease from the second unit on, so the model leases often.
            LeaseLedger::new(algorithm, policy.period, Timestamp::from_nanos(now))
                .with_min_demand(2)
        })
        .collect();
    // Admissions per instance not yet refunded, so a refund gives back only what was taken.
    let mut taken = vec![0u64; instances];
    let mut admitted = Vec::new();
    for op in ops {
        let at = Timestamp::from_nanos(now);
        match *op {
            Op::Advance { ms } => now += ms * 1_000_000,
            Op::Request { instance, hits } => {
                let ledger = &mut ledgers[instance];
                if ledger.spend(hits, at).is_some() {
                    admitted.push((now, hits));
                    taken[instance] += hits;
                    // A lease low on units asks for its refill, as the service does.
                    let want = ledger.refill_wanted(at);
                    if want > 0 {
                        let grant = store.grant(want, policy.divisor, now);
                        if let Some(old) = ledger.install(grant, at) {
                            store.give_lease_back(old, now);
                        }
                    }
                    continue;
                }
                if !store.exact(hits, now) {
                    continue;
                }
                admitted.push((now, hits));
                taken[instance] += hits;
                ledger.observe(hits, at);
                let want = ledger.wanted(at);
                if want > 0 {
                    let grant = store.grant(want, policy.divisor, now);
                    if let Some(old) = ledger.install(grant, at) {
                        store.give_lease_back(old, now);
                    }
                }
            }
            Op::Refund { instance, hits } => {
                let hits = hits.min(taken[instance]);
                taken[instance] -= hits;
                let local = ledgers[instance].refund(hits, at);
                if hits > local {
                    store.give_back(hits - local, now);
                }
                // The reference sees a refund as a give-back at the same time.
                admitted.push((now, u64::MAX - hits));
            }
            Op::Return { instance } => {
                if let Some(r) = ledgers[instance].take_return(at) {
                    store.give_lease_back(r, now);
                }
            }
        }
    }
    admitted
}

/// Replays the admitted sequence through one exact instance of `algorithm`; the first refusal, if any.
fn first_refusal(algorithm: &AnyAlgorithm, admitted: &[(u64, u64)]) -> Option<(u64, u64)> {
    let AnyAlgorithm::Word(word) = algorithm else {
        return None;
    };
    let mut state = 0;
    for &(at, hits) in admitted {
        let now = Timestamp::from_nanos(at);
        if hits > u64::MAX / 2 {
            let (_, next) = refund(word, state, now, u64::MAX - hits);
            state = next.unwrap_or(state);
            continue;
        }
        let (decision, next) = word.decide(state, now, hits);
        if !decision.is_allowed() {
            return Some((at, hits));
        }
        state = next.unwrap_or(state);
    }
    None
}

fn refund(
    word: &AnyWordAlgorithm,
    state: u64,
    now: Timestamp,
    hits: u64,
) -> (tollgate_core::Decision, Option<u64>) {
    word.refund(state, now, hits)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn leased_fixed_windows_never_admit_past_the_limit(
        limit in 1u64..40,
        window_ms in prop::sample::select(vec![500u64, 1000, 3000]),
        instances in 1usize..5,
        period_ms in 50u64..2000,
        ops in prop::collection::vec(op(4), 1..300),
    ) {
        let algorithm: AnyAlgorithm = FixedWindow::new(limit, Duration::from_millis(window_ms)).unwrap().into();
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp(o, instances)).collect();
        let admitted = run(algorithm, instances, period_ms, &ops);
        prop_assert_eq!(first_refusal(&algorithm, &admitted), None);
    }

    #[test]
    fn leased_token_buckets_never_admit_past_the_limit(
        capacity in 1u64..40,
        interval_ms in 1u64..200,
        instances in 1usize..5,
        period_ms in 50u64..2000,
        ops in prop::collection::vec(op(4), 1..300),
    ) {
        let algorithm: AnyAlgorithm = TokenBucket::new(capacity, 1, Duration::from_millis(interval_ms)).unwrap().into();
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp(o, instances)).collect();
        let admitted = run(algorithm, instances, period_ms, &ops);
        prop_assert_eq!(first_refusal(&algorithm, &admitted), None);
    }
}

fn clamp(op: Op, instances: usize) -> Op {
    match op {
        Op::Request { instance, hits } => Op::Request {
            instance: instance % instances,
            hits,
        },
        Op::Refund { instance, hits } => Op::Refund {
            instance: instance % instances,
            hits,
        },
        Op::Return { instance } => Op::Return {
            instance: instance % instances,
        },
        other => other,
    }
}

#[test]
fn leases_do_not_starve_a_busy_fleet() {
    // 4 instances, each asking steadily: the window's limit is reached exactly.
    let algorithm: AnyAlgorithm = FixedWindow::new(100, Duration::from_secs(60))
        .unwrap()
        .into();
    let ops: Vec<Op> = (0..400)
        .map(|i| Op::Request {
            instance: i % 4,
            hits: 1,
        })
        .collect();
    let admitted = run(algorithm, 4, 1000, &ops);
    assert_eq!(admitted.iter().map(|(_, h)| h).sum::<u64>(), 100);
}
