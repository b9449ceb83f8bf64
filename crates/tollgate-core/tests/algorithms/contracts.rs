//! Properties every algorithm promises through its interface: exact retry-after, fresh states, dispatch.

use crate::common::*;
use proptest::prelude::*;
use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, LogState, Outcome, RESERVED_STATE, SlidingLog, Timestamp,
    WordAlgorithm,
};

/// One word algorithm with the scales and capacity its traffic is generated for.
#[derive(Clone, Copy, Debug)]
struct Case {
    alg: AnyWordAlgorithm,
    scales: Scales,
    capacity: u64,
}

/// Any of the five word algorithms with random small parameters.
fn case() -> impl Strategy<Value = Case> {
    prop_oneof![
        meter_params().prop_map(|(cap, count, period)| Case {
            alg: token_bucket(cap, count, period).into(),
            scales: Scales::meter(cap, count, period),
            capacity: cap,
        }),
        meter_params().prop_map(|(burst, limit, period)| Case {
            alg: gcra(burst, limit, period).into(),
            scales: Scales::meter(burst, limit, period),
            capacity: burst,
        }),
        leaky_params().prop_map(|(rate, period, burst, mode)| Case {
            alg: leaky_bucket(rate, period, burst, mode).into(),
            scales: Scales::meter(burst + 1, rate, period),
            capacity: burst + 1,
        }),
        window_params(0).prop_map(|(limit, window)| Case {
            alg: fixed_window(limit, window).into(),
            scales: Scales::window(window),
            capacity: limit,
        }),
        window_params(1).prop_map(|(limit, window)| Case {
            alg: sliding_window(limit, window).into(),
            scales: Scales::window(window),
            capacity: limit,
        }),
    ]
}

/// A sliding log with random small parameters, its scales and its limit.
fn log_case() -> impl Strategy<Value = (SlidingLog, Scales, u64)> {
    window_params(1)
        .prop_map(|(limit, window)| (sliding_log(limit, window), Scales::window(window), limit))
}

fn at(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// Checks that a denial's retry-after is exact: one ns earlier is still denied, then it passes.
fn check_retry_exact(
    retry: Option<u64>,
    now: u64,
    decide_at: impl Fn(u64) -> Outcome,
) -> Result<(), TestCaseError> {
    let retry = retry.expect("a denial carries a retry-after");
    prop_assert!(retry >= 1, "denied now but retry-after 0 at {}", now);
    prop_assert_eq!(
        decide_at(now + retry - 1),
        Outcome::Denied,
        "still denied 1 ns before retry-after {} (now {})",
        retry,
        now
    );
    prop_assert_eq!(
        decide_at(now + retry),
        Outcome::Allowed,
        "allowed at retry-after {} (now {})",
        retry,
        now
    );
    Ok(())
}

/// Instants from `now` on at which to probe a state, around `fresh` and beyond.
fn probe_times(now: u64, fresh: u64, scales: Scales) -> Vec<u64> {
    let base = now.max(fresh);
    vec![
        base,
        base + 1,
        base + scales.short / 3,
        base + scales.long + 7,
        now + scales.short,
        now + 3 * scales.long,
    ]
}

/// Costs to probe a state with.
fn probe_costs(capacity: u64) -> [u64; 5] {
    [0, 1, capacity / 2 + 1, capacity, capacity + 1]
}

/// Checks that `state` decides like the fresh state at every probe time past its `fresh_at`, and differs just before.
fn check_fresh_at(case: &Case, state: u64, now: u64) -> Result<(), TestCaseError> {
    let Case {
        alg,
        scales,
        capacity,
    } = *case;
    let fresh = alg.fresh_at(state, at(now)).as_nanos();
    for t in probe_times(now, fresh, scales) {
        if t < alg.fresh_at(state, at(t)).as_nanos() {
            continue;
        }
        for cost in probe_costs(capacity) {
            prop_assert_eq!(
                alg.decide(state, at(t), cost),
                alg.decide(0, at(t), cost),
                "state {:#x} (fresh at {}) at {}, cost {}",
                state,
                fresh,
                t,
                cost
            );
        }
    }
    if fresh > now {
        prop_assert_ne!(
            alg.decide(state, at(fresh - 1), 0),
            alg.decide(0, at(fresh - 1), 0),
            "state {:#x} already fresh 1 ns before its fresh_at {}",
            state,
            fresh
        );
    }
    Ok(())
}

/// Runs `ops` on one key of `case`'s algorithm and `check`s its state after every one.
fn after_every_operation(
    case: &Case,
    start: u64,
    ops: &[Op],
    check: fn(&Case, u64, u64) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut key = Keyed::new(case.alg);
    drive(start, case.scales, case.capacity, ops, |_, event| {
        let seen = apply(&mut key, event);
        check(case, key.state, event.now())?;
        Ok(seen)
    })
}

/// Checks that `used` is the budget a fresh state would hand back: `capacity − remaining`
/// of a check-only request (`capacity + 1` for a window a denial closed), and 0 once fresh.
fn check_used(case: &Case, state: u64, now: u64) -> Result<(), TestCaseError> {
    let (alg, capacity) = (case.alg, case.capacity);
    let fresh = alg.fresh_at(state, at(now)).as_nanos();
    let mut times = probe_times(now, fresh, case.scales);
    times.extend([now, now + 1, fresh.saturating_sub(1).max(now)]);
    for t in times {
        let used = alg.used(state, at(t));
        let check = alg.decide(state, at(t), 0).0;
        let expected = if check.is_allowed() {
            capacity - check.remaining()
        } else {
            capacity + 1
        };
        prop_assert_eq!(used, expected, "state {:#x} at {}: {:?}", state, t, check);
        if t >= alg.fresh_at(state, at(t)).as_nanos() {
            prop_assert_eq!(used, 0, "state {:#x} is fresh at {}", state, t);
        }
        prop_assert_eq!(alg.used(0, at(t)), 0);
    }
    Ok(())
}

/// Runs `ops` through `alg` and `any` side by side, asserting identical answers from every method.
fn check_dispatch<A: WordAlgorithm>(
    alg: &A,
    any: &AnyWordAlgorithm,
    start: u64,
    case: &Case,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(alg.max_unexamined(), any.max_unexamined());
    let mut state = 0;
    drive(start, case.scales, case.capacity, ops, |_, event| {
        let (got, want) = match event {
            Event::Decide { now, cost } => (
                any.decide(state, at(now), cost),
                alg.decide(state, at(now), cost),
            ),
            Event::Refund { now, amount } => (
                any.refund(state, at(now), amount),
                alg.refund(state, at(now), amount),
            ),
        };
        prop_assert_eq!(got, want, "{:?}", event);
        prop_assert_eq!(
            any.fresh_at(state, at(event.now())),
            alg.fresh_at(state, at(event.now()))
        );
        prop_assert_eq!(
            any.used(state, at(event.now())),
            alg.used(state, at(event.now()))
        );
        if let Some(s) = want.1 {
            state = s;
        }
        Ok(Seen::of(&want.0))
    })
}

/// Window algorithms with windows of 1 or 2 ns, whose window numbers can reach `2^62 − 1` at sane times.
fn tiny_window_case() -> impl Strategy<Value = Case> {
    (0u64..=20, 1u64..=2, any::<bool>()).prop_map(|(limit, window, sliding)| {
        if sliding {
            Case {
                alg: sliding_window(limit.max(1), window).into(),
                scales: Scales::window(window),
                capacity: limit.max(1),
            }
        } else {
            Case {
                alg: fixed_window(limit, window).into(),
                scales: Scales::window(window),
                capacity: limit,
            }
        }
    })
}

/// The last instant before the window numbered `2^m − 1` with the largest `m` that keeps time below `2^63` ns.
///
/// That window number has all its low bits set, whatever number of them a
/// state keeps, so a packed window tag is all ones there.
fn all_ones_window_start(window: u64) -> u64 {
    let mut index = (1u64 << 62) - 1;
    while index.checked_mul(window).is_none_or(|t| t >= 1 << 63) {
        index >>= 1;
    }
    index * window - 1
}

proptest! {
    #![proptest_config(config(256))]

    /// For every denial of a word algorithm, the same request 1 ns before retry-after is denied and at retry-after passes.
    #[test]
    fn word_retry_after_is_exact(case in case(), start in start(), ops in ops(true)) {
        let mut key = Keyed::new(case.alg);
        drive(start, case.scales, case.capacity, &ops, |_, event| {
            let seen = apply(&mut key, event);
            if let Event::Decide { now, cost } = event && seen.outcome == Outcome::Denied {
                let state = key.state;
                check_retry_exact(seen.retry_after, now, |t| case.alg.decide(state, at(t), cost).0.outcome())?;
            }
            Ok(seen)
        })?;
    }

    /// For every denial of the sliding log, the same request 1 ns before retry-after is denied and at retry-after passes.
    #[test]
    fn log_retry_after_is_exact((log, scales, limit) in log_case(), start in start(), ops in ops(true)) {
        let mut key = Logged::new(log);
        drive(start, scales, limit, &ops, |_, event| {
            let seen = apply(&mut key, event);
            if let Event::Decide { now, cost } = event && seen.outcome == Outcome::Denied {
                check_retry_exact(seen.retry_after, now, |t| log.decide(&mut key.state.clone(), at(t), cost).outcome())?;
            }
            Ok(seen)
        })?;
    }

    /// No word algorithm ever hands a store `RESERVED_STATE`, from decide or refund, even where window tags are all ones.
    #[test]
    fn no_state_is_reserved(
        case in prop_oneof![case(), tiny_window_case()],
        edge in any::<bool>(),
        start in start(),
        ops in ops(true),
    ) {
        let start = if edge { all_ones_window_start(case.scales.short) } else { start };
        let mut key = Keyed::new(case.alg);
        drive(start, case.scales, case.capacity, &ops, |_, event| {
            let (d, new) = match event {
                Event::Decide { now, cost } => case.alg.decide(key.state, at(now), cost),
                Event::Refund { now, amount } => case.alg.refund(key.state, at(now), amount),
            };
            prop_assert_ne!(new, Some(RESERVED_STATE), "{:?} on state {:#x}", event, key.state);
            if let Some(s) = new {
                key.state = s;
            }
            Ok(Seen::of(&d))
        })?;
    }

    /// After every operation, the state decides exactly like the fresh state 0 from its `fresh_at` on, and not before.
    #[test]
    fn word_fresh_at_means_fresh(case in case(), start in start(), ops in ops(true)) {
        after_every_operation(&case, start, &ops, check_fresh_at)?;
    }

    /// After every operation, `used` is what dropping the state would hand back, and 0 once it is fresh.
    #[test]
    fn word_used_is_the_budget_a_fresh_state_would_hand_back(case in case(), start in start(), ops in ops(true)) {
        after_every_operation(&case, start, &ops, check_used)?;
    }

    /// After every operation, the log decides exactly like an empty log from its `fresh_at` on, and not before.
    #[test]
    fn log_fresh_at_means_fresh((log, scales, limit) in log_case(), start in start(), ops in ops(true)) {
        let mut key = Logged::new(log);
        drive(start, scales, limit, &ops, |_, event| {
            let seen = apply(&mut key, event);
            let now = event.now();
            let fresh = log.fresh_at(&key.state).as_nanos();
            let decide = |state: &LogState, t: u64, cost: u64| {
                let mut state = state.clone();
                let d = log.decide(&mut state, at(t), cost);
                (d, state)
            };
            for t in probe_times(now, fresh, scales) {
                for cost in probe_costs(limit) {
                    prop_assert_eq!(
                        decide(&key.state, t, cost),
                        decide(&LogState::default(), t, cost),
                        "log {:?} (fresh at {}) at {}, cost {}", key.state, fresh, t, cost
                    );
                }
            }
            if fresh > now {
                prop_assert_ne!(
                    decide(&key.state, fresh - 1, 0).0,
                    decide(&LogState::default(), fresh - 1, 0).0,
                    "log {:?} already fresh before its fresh_at {}", key.state, fresh
                );
            }
            Ok(seen)
        })?;
    }

    /// `AnyWordAlgorithm` answers exactly like the algorithm it wraps.
    #[test]
    fn dispatch_agrees_with_the_concrete_type(case in case(), start in start(), ops in ops(true)) {
        match &case.alg {
            AnyWordAlgorithm::TokenBucket(a) => check_dispatch(a, &case.alg, start, &case, &ops)?,
            AnyWordAlgorithm::Gcra(a) => check_dispatch(a, &case.alg, start, &case, &ops)?,
            AnyWordAlgorithm::LeakyBucket(a) => check_dispatch(a, &case.alg, start, &case, &ops)?,
            AnyWordAlgorithm::FixedWindow(a) => check_dispatch(a, &case.alg, start, &case, &ops)?,
            AnyWordAlgorithm::SlidingWindow(a) => check_dispatch(a, &case.alg, start, &case, &ops)?,
        }
    }

    /// `AnyAlgorithm::capacity` is the largest cost a fresh key admits; one more can never pass.
    #[test]
    fn capacity_is_the_largest_passing_cost(case in case(), (log, _, _) in log_case(), start in start()) {
        let any = AnyAlgorithm::from(case.alg);
        let cap = any.capacity();
        prop_assert_eq!(cap, case.capacity);
        prop_assert_eq!(case.alg.decide(0, at(start), cap).0.outcome(), Outcome::Allowed);
        prop_assert_eq!(case.alg.decide(0, at(start), cap + 1).0.outcome(), Outcome::Exceeds);
        let cap = AnyAlgorithm::from(log).capacity();
        prop_assert_eq!(log.decide(&mut LogState::default(), at(start), cap).outcome(), Outcome::Allowed);
        prop_assert_eq!(log.decide(&mut LogState::default(), at(start), cap + 1).outcome(), Outcome::Exceeds);
    }
}
