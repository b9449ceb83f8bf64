//! Huge costs (`u32::MAX`, `u64::MAX`, sums that would wrap a counter) never admit past the
//! limit, and a cost of 0 only checks.

use tollgate_core::Clock;
use tollgate_rules::AlgorithmKind;
use tollgate_server::EngineOptions;

use super::{Backend, LIMIT, Subject, admissions, admitted, descriptor, request, status};

/// Costs a client may send per descriptor, from harmless to wrapping.
const HUGE: [u64; 5] = [
    LIMIT + 1,
    u32::MAX as u64,
    u32::MAX as u64 + 1,
    u64::MAX / 2 + 1,
    u64::MAX,
];

#[tokio::test]
async fn huge_costs_admit_nothing_and_leave_the_limit_in_force() {
    for backend in Backend::all() {
        let subject = Subject::start(&backend, EngineOptions::default()).await;
        let engine = &subject.engine;
        for kind in AlgorithmKind::ALL {
            let at = format!("{kind} on {}", backend.name());
            for cost in HUGE {
                let who = format!("huge-{cost}");
                // Twice, so a counter that wrapped on the first would admit on the second.
                for round in 0..2 {
                    let s = status(engine, descriptor(kind, &who, Some(cost), false)).await;
                    assert!(
                        !admitted(s.as_ref()),
                        "{at}: cost {cost} admitted (round {round})"
                    );
                }
                let after = admissions(engine, kind, &who, 2 * LIMIT).await;
                assert!(after <= LIMIT, "{at}: {after} admitted after cost {cost}");
            }
        }
    }
}

#[tokio::test]
async fn a_request_wide_u32_max_cost_is_denied_for_every_descriptor() {
    for backend in Backend::all() {
        let subject = Subject::start(&backend, EngineOptions::default()).await;
        let mut req = request(
            AlgorithmKind::ALL
                .into_iter()
                .map(|kind| descriptor(kind, "wide", None, false))
                .collect(),
        );
        req.hits_addend = u32::MAX;
        if let Ok(response) = subject.engine.decide(&req).await {
            for (kind, s) in AlgorithmKind::ALL.into_iter().zip(&response.statuses) {
                assert!(!admitted(Some(s)), "{kind} on {}", backend.name());
            }
        }
        for kind in AlgorithmKind::ALL {
            let after = admissions(&subject.engine, kind, "wide", 2 * LIMIT).await;
            assert!(after <= LIMIT, "{kind} on {}: {after}", backend.name());
        }
    }
}

/// Adds up to `limit` in many steps: the sum of admitted costs is at most the limit.
#[tokio::test]
async fn admitted_costs_add_up_to_the_limit_at_most() {
    for backend in Backend::all() {
        let subject = Subject::start(&backend, EngineOptions::default()).await;
        for kind in AlgorithmKind::ALL {
            let mut units = 0;
            for cost in [2, 3, 1, 4, 1, 1, 2, 1] {
                let s = status(&subject.engine, descriptor(kind, "sum", Some(cost), false)).await;
                units += if admitted(s.as_ref()) { cost } else { 0 };
            }
            assert!(
                units <= LIMIT,
                "{kind} on {}: {units} units",
                backend.name()
            );
        }
    }
}

/// A cost of 0 checks and consumes nothing: after a hundred checks the
/// client still has exactly its limit, and no more.
#[tokio::test]
async fn cost_zero_only_checks() {
    for backend in Backend::all() {
        let subject = Subject::start(&backend, EngineOptions::default()).await;
        let before = subject.clock.now();
        for kind in AlgorithmKind::ALL {
            for _ in 0..100 {
                status(&subject.engine, descriptor(kind, "checker", Some(0), false)).await;
            }
            let ok = admissions(&subject.engine, kind, "checker", 3 * LIMIT).await;
            assert_eq!(ok, LIMIT, "{kind} on {}", backend.name());
        }
        assert_eq!(subject.clock.now(), before, "the clock did not move");
    }
}
