//! Clock steps forward and backward never admit past the limit: a step back
//! holds time, and a second instance whose clock is behind shares the same count.

use tollgate_rules::AlgorithmKind;
use tollgate_server::EngineOptions;

use super::{Backend, LIMIT, Subject, admissions, rules_with};

/// Steps of the wall, in seconds, none reaching a new minute from the start.
const STEPS: [i64; 6] = [-1, -30, -3600, 3600, -3600, -86_400];

#[tokio::test]
async fn wall_steps_back_and_forth_admit_nothing_after_the_limit_is_spent() {
    for backend in Backend::all() {
        let subject = Subject::start(&backend, EngineOptions::default()).await;
        for kind in AlgorithmKind::ALL {
            let spent = admissions(&subject.engine, kind, "stepper", 2 * LIMIT).await;
            assert_eq!(spent, LIMIT, "{kind} on {}", backend.name());
        }
        // Back, forward to where it was, back again: the coarse clock holds,
        // so nothing sees time move and no key is admitted.
        for step in STEPS {
            subject.step(step);
            for kind in AlgorithmKind::ALL {
                let ok = admissions(&subject.engine, kind, "stepper", LIMIT).await;
                assert_eq!(
                    ok,
                    0,
                    "{kind} on {} after a step of {step} s",
                    backend.name()
                );
            }
        }
        // Two minutes past the held time (so a sliding window's previous
        // minute is empty too), each key has its limit again, and no more.
        // (On Redis, decisions follow Redis `TIME`, not this clock: there a
        // step of the instance's clock must change nothing at all.)
        subject.step(-STEPS.iter().sum::<i64>() + 120);
        let expected = match backend {
            Backend::Memory => LIMIT,
            Backend::Redis(_) => 0,
        };
        for kind in AlgorithmKind::ALL {
            let ok = admissions(&subject.engine, kind, "stepper", 3 * LIMIT).await;
            assert_eq!(ok, expected, "{kind} on {} two minutes on", backend.name());
        }
    }
}

/// Two instances share one Redis; the second's clock is half an hour behind
/// (a host never synced). Whatever order they decide in, together they admit
/// the limit at most.
#[tokio::test]
async fn an_instance_with_a_clock_behind_shares_the_count_on_redis() {
    let backend = Backend::all().into_iter().nth(1).expect("redis");
    let ahead = Subject::start(&backend, EngineOptions::default()).await;
    let behind = Subject::start_with(
        &backend,
        EngineOptions::default(),
        rules_with(&backend, ""),
        super::START - 1800,
    )
    .await;
    for kind in AlgorithmKind::ALL {
        let mut ok = admissions(&ahead.engine, kind, "skewed", 3).await;
        ok += admissions(&behind.engine, kind, "skewed", 2 * LIMIT).await;
        ok += admissions(&ahead.engine, kind, "skewed", 2 * LIMIT).await;
        assert!(ok <= LIMIT, "{kind}: {ok} admitted across skewed instances");
    }
}
