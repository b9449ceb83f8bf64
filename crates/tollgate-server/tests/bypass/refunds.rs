//! Refunds (`is_negative_hits`) of more than was taken never raise a budget above its limit.

use tollgate_rules::AlgorithmKind;
use tollgate_server::EngineOptions;

use super::{Backend, LIMIT, Subject, admissions, descriptor, status};

/// Refunds larger than anything taken, up to ones that would wrap a counter.
const OVER_REFUNDS: [u64; 4] = [LIMIT + 1, 1000, u32::MAX as u64, u64::MAX];

#[tokio::test]
async fn over_refunds_never_raise_the_budget_above_the_limit() {
    for backend in Backend::all() {
        let subject = Subject::start(&backend, EngineOptions::default()).await;
        let engine = &subject.engine;
        for kind in AlgorithmKind::ALL {
            let at = format!("{kind} on {}", backend.name());
            for refund in OVER_REFUNDS {
                let who = format!("refund-{refund}");
                // Take two, give back far more, then spend: at most the limit.
                assert_eq!(admissions(engine, kind, &who, 2).await, 2, "{at}");
                status(engine, descriptor(kind, &who, Some(refund), true)).await;
                let after = admissions(engine, kind, &who, 3 * LIMIT).await;
                assert!(
                    after <= LIMIT,
                    "{at}: {after} admitted after refunding {refund}"
                );
                // Refunding before ever taking raises nothing either.
                let fresh = format!("fresh-{refund}");
                status(engine, descriptor(kind, &fresh, Some(refund), true)).await;
                let fresh_ok = admissions(engine, kind, &fresh, 3 * LIMIT).await;
                assert!(
                    fresh_ok <= LIMIT,
                    "{at}: {fresh_ok} after a refund of nothing"
                );
            }
        }
    }
}

/// Refund-then-spend cycles: whatever is given back, the admissions
/// since the start minus the hits actually refunded never exceed the limit.
#[tokio::test]
async fn repeated_refunds_of_one_hit_each_give_back_only_what_was_taken() {
    for backend in Backend::all() {
        let subject = Subject::start(&backend, EngineOptions::default()).await;
        for kind in AlgorithmKind::ALL {
            let mut admitted = admissions(&subject.engine, kind, "cycle", LIMIT).await;
            for _ in 0..3 * LIMIT {
                status(&subject.engine, descriptor(kind, "cycle", Some(1), true)).await;
            }
            admitted += admissions(&subject.engine, kind, "cycle", 3 * LIMIT).await;
            // Five taken, at most five given back: at most ten admissions in all.
            assert!(
                admitted <= 2 * LIMIT,
                "{kind} on {}: {admitted}",
                backend.name()
            );
        }
    }
}
