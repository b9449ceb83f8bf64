//! Property test of quota leases against a model: N instances sharing one budget never admit more than the limit.
//!
//! The shared store is modelled with the lease script's arithmetic (a fixed
//! window's count, a schedule's theoretical arrival time), the instances
//! with [`LeaseLedger`] as the service runs them: spend from a usable lease,
//! else decide exactly in the store and then ask for a lease; return the
//! lease on request. Any interleaving of requests, grants, returns, refunds
//! and time passing must produce an admitted sequence that one exact
//! instance of the algorithm (the core's own) admits in full.
//!
//! With reloads ([`run_reloads`]), each instance has its own limit (a
//! fleet reloads one instance at a time) and every store call carries its
//! caller's, as the scripts' arguments do; grants are in flight between the
//! ask, the store's grant and the install, and a reload can fall anywhere
//! in between. A reload ends the instance's leases at once and starts its
//! next rule generation, as the service's lease book does: a grant asked
//! in an earlier generation is given back when it lands, and a request
//! planned before the reload (still in flight) neither spends a lease nor
//! asks for one. Every admission decided under a limit `L` must leave the
//! window's admitted total at most `L`, and no unit is spent from a lease
//! of an earlier generation.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::lease::{Grant, LeaseLedger, LeasePolicy, Leasing, Return, grant_units};
use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, FixedWindow, Gcra, LeakyBucket, Timestamp, TokenBucket,
    WordAlgorithm,
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

    /// The same state decided with `algorithm`'s parameters: each call
    /// carries its caller's limit, as the scripts' arguments do.
    fn with_params_of(&mut self, algorithm: &AnyAlgorithm) -> &mut Self {
        match (&mut *self, Store::of(algorithm)) {
            (
                Store::Window { window, limit, .. },
                Store::Window {
                    window: w,
                    limit: l,
                    ..
                },
            ) => (*window, *limit) = (w, l),
            (
                Store::Schedule {
                    interval, capacity, ..
                },
                Store::Schedule {
                    interval: i,
                    capacity: c,
                    ..
                },
            ) => (*interval, *capacity) = (i, c),
            _ => panic!("a reload keeps the algorithm's kind"),
        }
        self
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

    /// check.lua's consume: all or nothing (a fixed window counts a
    /// denial, up to limit + 1, and never lowers its count).
    fn exact(&mut self, hits: u64, now: u64) -> bool {
        let available = self.available(now);
        let allowed = hits <= available;
        match self {
            Store::Window { limit, count, .. } => {
                *count = if allowed {
                    *count + hits
                } else {
                    (*count + hits).min(*limit + 1).max(*count)
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

    /// lease.lua's return: only into the same window, or while the TAT is
    /// still the lease's; the units taken back.
    fn give_lease_back(&mut self, r: Return, now: u64) -> u64 {
        self.available(now);
        match self {
            Store::Window {
                index,
                count,
                limit,
                leased,
                ..
            } => {
                if r.token.0 != *index || *count > *limit {
                    return 0;
                }
                let back = r.units.min(*count).min(*leased);
                *count -= back;
                *leased -= back;
                back
            }
            Store::Schedule {
                interval,
                tat,
                floor,
                ..
            } => {
                if (*tat / 1_000_000_000, *tat % 1_000_000_000) != r.token {
                    return 0;
                }
                let backlog = tat.saturating_sub(now).saturating_sub(r.units * *interval);
                *tat = now + backlog;
                *floor = *tat;
                r.units
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

#[derive(Clone, Debug)]
enum ReloadOp {
    /// A request planned by the instance's engine in service.
    Request {
        instance: usize,
        hits: u64,
    },
    /// A request planned before the instance's latest reload, still in flight.
    Stale {
        instance: usize,
        hits: u64,
    },
    /// The store runs the instance's grant in flight, if any.
    Grant {
        instance: usize,
    },
    /// The grant's answer reaches the instance and is installed (or given back).
    Land {
        instance: usize,
    },
    /// The instance reloads to limit number `limit`.
    Reload {
        instance: usize,
        limit: usize,
    },
    /// The instance's retired leases reach the store.
    Return {
        instance: usize,
    },
    Advance {
        ms: u64,
    },
}

fn reload_op(instances: usize, limits: usize) -> impl Strategy<Value = ReloadOp> {
    prop_oneof![
        8 => (0..instances, 1u64..4).prop_map(|(instance, hits)| ReloadOp::Request { instance, hits }),
        1 => (0..instances, 1u64..4).prop_map(|(instance, hits)| ReloadOp::Stale { instance, hits }),
        3 => (0..instances).prop_map(|instance| ReloadOp::Grant { instance }),
        3 => (0..instances).prop_map(|instance| ReloadOp::Land { instance }),
        1 => (0..instances, 0..limits).prop_map(|(instance, limit)| ReloadOp::Reload { instance, limit }),
        1 => (0..instances).prop_map(|instance| ReloadOp::Return { instance }),
        1 => (0u64..300).prop_map(|ms| ReloadOp::Advance { ms }),
    ]
}

/// A grant on its way: asked for under `algorithm` in `generation`, answered by the store or not yet.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    algorithm: AnyAlgorithm,
    generation: u64,
    want: u64,
    sent: u64,
    answer: Option<Grant>,
}

/// One instance as the service runs it on a shared store, with reloads.
#[derive(Debug)]
struct Instance {
    /// The limit of the engine in service, and the one before it.
    algorithm: AnyAlgorithm,
    previous: AnyAlgorithm,
    generation: u64,
    ledger: LeaseLedger,
    /// Which generation the ledger's lease was installed in.
    lease_generation: u64,
    in_flight: Option<InFlight>,
    /// Leases a reload ended, on their way back to the store (with their algorithm).
    retired: Vec<(AnyAlgorithm, Return)>,
}

/// A grant the instance wants at `now`, put in flight.
fn ask(instance: &mut Instance, want: u64, now: u64) {
    if want > 0 && instance.in_flight.is_none() {
        instance.in_flight = Some(InFlight {
            algorithm: instance.algorithm,
            generation: instance.generation,
            want,
            sent: now,
            answer: None,
        });
    }
}

/// Runs `ops` over fixed windows of `limits` (every instance starts on the
/// first); the first violation, if any.
///
/// The window's *taken* units are every unit that left its budget: exact
/// admissions and grants, less the returns the store took back (each
/// leased unit is counted when granted, which is when the store counted
/// it). Every exact admission and every grant, decided under a limit `L`,
/// must leave them at most `L`; a leased unit is spent only in the
/// generation it was granted in. Spends never pass grants (the ledger's
/// own property test), so the units admitted after any reload are at most
/// the new limit less what was taken before it.
fn run_reloads(
    limits: &[AnyAlgorithm],
    instances: usize,
    period_ms: u64,
    ops: &[ReloadOp],
) -> Result<(), String> {
    let mut now = 1_000_000_000_000u64;
    let mut store = Store::of(&limits[0]);
    let policy = LeasePolicy::for_fleet(Duration::from_millis(period_ms), instances as u64);
    let ledger = |algorithm: AnyAlgorithm, now: u64| {
        LeaseLedger::new(algorithm, policy.period, Timestamp::from_nanos(now)).with_min_demand(2)
    };
    let mut fleet: Vec<Instance> = (0..instances)
        .map(|_| Instance {
            algorithm: limits[0],
            previous: limits[0],
            generation: 0,
            ledger: ledger(limits[0], now),
            lease_generation: 0,
            in_flight: None,
            retired: Vec::new(),
        })
        .collect();
    // Units taken from the current window's budget (every instance's).
    let (mut window, mut taken) = (None, 0u64);
    let mut take = |algorithm: &AnyAlgorithm, units: i64, now: u64, how: &str| {
        let Some(Leasing::Window { window_ns, limit }) = Leasing::of(algorithm) else {
            unreachable!("windows only");
        };
        if window != Some(now / window_ns) {
            (window, taken) = (Some(now / window_ns), 0);
        }
        taken = taken.saturating_add_signed(units);
        if units > 0 && taken > limit {
            return Err(format!(
                "{how}: {taken} taken in the window under a limit of {limit}"
            ));
        }
        Ok(())
    };
    let units = |u: u64| i64::try_from(u).expect("small");
    for op in ops {
        let at = Timestamp::from_nanos(now);
        match *op {
            ReloadOp::Advance { ms } => now += ms * 1_000_000,
            ReloadOp::Request { instance, hits } => {
                let i = &mut fleet[instance];
                // The book spends only a lease of the request's generation and limit.
                if i.ledger.algorithm() == &i.algorithm && i.ledger.spend(hits, at).is_some() {
                    if i.lease_generation != i.generation {
                        return Err("a lease of an earlier generation was spent".to_owned());
                    }
                    let want = i.ledger.refill_wanted(at);
                    ask(i, want, now);
                    continue;
                }
                if !store.with_params_of(&i.algorithm).exact(hits, now) {
                    continue;
                }
                take(&i.algorithm, units(hits), now, "exact")?;
                if i.ledger.algorithm() != &i.algorithm {
                    i.ledger = ledger(i.algorithm, now);
                }
                i.ledger.observe(hits, at);
                let want = i.ledger.wanted(at);
                if i.ledger.usable(at) < hits {
                    ask(i, want, now);
                }
            }
            ReloadOp::Stale { instance, hits } => {
                // Planned under the previous limit: exact, no lease either way.
                let i = &fleet[instance];
                if store.with_params_of(&i.previous).exact(hits, now) {
                    take(
                        &i.previous,
                        units(hits),
                        now,
                        "a request in flight at the reload",
                    )?;
                }
            }
            ReloadOp::Grant { instance } => {
                if let Some(flight) = fleet[instance].in_flight.as_mut()
                    && flight.answer.is_none()
                {
                    let grant = store.with_params_of(&flight.algorithm).grant(
                        flight.want,
                        policy.divisor,
                        now,
                    );
                    take(&flight.algorithm, units(grant.units), now, "a grant")?;
                    flight.answer = Some(grant);
                }
            }
            ReloadOp::Land { instance } => {
                let i = &mut fleet[instance];
                let Some(InFlight {
                    algorithm,
                    generation,
                    sent,
                    answer: Some(grant),
                    ..
                }) = i.in_flight
                else {
                    continue;
                };
                i.in_flight = None;
                if generation == i.generation && i.ledger.algorithm() == &algorithm {
                    i.lease_generation = generation;
                    if let Some(old) = i.ledger.install(grant, Timestamp::from_nanos(sent)) {
                        let back = store.with_params_of(&algorithm).give_lease_back(old, now);
                        take(&algorithm, -units(back), now, "a return")?;
                    }
                } else if grant.units > 0 {
                    let back = Return {
                        units: grant.units,
                        token: grant.token,
                    };
                    let back = store.with_params_of(&algorithm).give_lease_back(back, now);
                    take(&algorithm, -units(back), now, "a return")?;
                }
            }
            ReloadOp::Reload { instance, limit } => {
                let i = &mut fleet[instance];
                if let Some(r) = i.ledger.take_return(at) {
                    i.retired.push((*i.ledger.algorithm(), r));
                }
                i.generation += 1;
                // A grant still being asked for is the old generation's: it lands and goes back.
                i.previous = i.algorithm;
                i.algorithm = limits[limit];
            }
            ReloadOp::Return { instance } => {
                for (algorithm, r) in fleet[instance].retired.drain(..) {
                    let back = store.with_params_of(&algorithm).give_lease_back(r, now);
                    take(&algorithm, -units(back), now, "a return")?;
                }
            }
        }
    }
    Ok(())
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

    /// GCRA and the leaky-bucket policer: the other two schedules.
    #[test]
    fn leased_gcra_and_policers_never_admit_past_the_limit(
        policer in any::<bool>(),
        rate in 1u64..40,
        period_ms in prop::sample::select(vec![500u64, 1000, 4000]),
        burst in 1u64..20,
        instances in 1usize..5,
        lease_ms in 50u64..2000,
        ops in prop::collection::vec(op(4), 1..300),
    ) {
        let period = Duration::from_millis(period_ms);
        let algorithm: AnyAlgorithm = if policer {
            LeakyBucket::policer(rate, period, burst - 1).unwrap().into()
        } else {
            Gcra::new(rate, period, burst).unwrap().into()
        };
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp(o, instances)).collect();
        let admitted = run(algorithm, instances, lease_ms, &ops);
        prop_assert_eq!(first_refusal(&algorithm, &admitted), None);
    }

    /// Reloads that change a fixed window's limit (up and down), at any
    /// moment relative to grants in flight, spends and returns, one
    /// instance at a time: no admission passes the limit it was decided under.
    #[test]
    fn reloads_changing_a_window_limit_never_admit_past_the_limit_in_force(
        limits in prop::collection::vec(2u64..60, 2..4),
        instances in 1usize..4,
        period_ms in 50u64..2000,
        ops in prop::collection::vec(reload_op(3, 3), 1..400),
    ) {
        let window = Duration::from_secs(60);
        let limits: Vec<AnyAlgorithm> = limits
            .iter()
            .map(|&l| FixedWindow::new(l, window).unwrap().into())
            .collect();
        let ops: Vec<ReloadOp> = ops.into_iter().map(|o| clamp_reload(o, instances, limits.len())).collect();
        prop_assert_eq!(run_reloads(&limits, instances, period_ms, &ops), Ok(()));
    }
}

fn clamp_reload(op: ReloadOp, instances: usize, limits: usize) -> ReloadOp {
    match op {
        ReloadOp::Request { instance, hits } => ReloadOp::Request {
            instance: instance % instances,
            hits,
        },
        ReloadOp::Stale { instance, hits } => ReloadOp::Stale {
            instance: instance % instances,
            hits,
        },
        ReloadOp::Grant { instance } => ReloadOp::Grant {
            instance: instance % instances,
        },
        ReloadOp::Land { instance } => ReloadOp::Land {
            instance: instance % instances,
        },
        ReloadOp::Reload { instance, limit } => ReloadOp::Reload {
            instance: instance % instances,
            limit: limit % limits,
        },
        ReloadOp::Return { instance } => ReloadOp::Return {
            instance: instance % instances,
        },
        other => other,
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
