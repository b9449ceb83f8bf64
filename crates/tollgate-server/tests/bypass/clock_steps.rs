//! Clock steps: a key used up, then the clock stepped back (a second to a month) and forward within the window; nothing is admitted until the window truly moves.
//!
//! In memory the engine's coarse clock follows a hand-stepped wall; on Redis
//! the check script decides at a supplied time, standing in for a stepped
//! Redis `TIME`.

use std::time::Duration;

use tollgate_core::{Outcome, Timestamp};
use tollgate_redis::SuppliedTime;
use tollgate_rules::Limit;
use tollgate_store::Counter;

use crate::target::{DOMAIN, LIMIT, StoreKind, Target, algorithm_keys, assert_within};

const DAY: Duration = Duration::from_secs(86_400);

/// The steps back tried, each followed by a step forward of the same size.
const BACK: [Duration; 4] = [
    Duration::from_secs(1),
    Duration::from_secs(3600),
    DAY,
    Duration::from_secs(30 * 86_400),
];

#[tokio::test]
async fn in_memory_no_step_of_the_wall_admits_past_a_limit() {
    let target = Target::new("clock-steps", StoreKind::Memory, "").await;
    for key in algorithm_keys() {
        assert_eq!(
            target.admitted(key, "victim", LIMIT + 2).await,
            LIMIT,
            "{key}"
        );
    }
    for step in BACK {
        target.step_back(step);
        for key in algorithm_keys() {
            assert_eq!(
                target.admitted(key, "victim", 2).await,
                0,
                "{key} {step:?} back"
            );
        }
        target.step_forward(step);
        for key in algorithm_keys() {
            assert_eq!(
                target.admitted(key, "victim", 2).await,
                0,
                "{key} back again"
            );
        }
    }
    // An hour on is still the same day: five per day refills nothing yet.
    target.step_forward(Duration::from_secs(3600));
    for key in algorithm_keys() {
        assert_eq!(
            target.admitted(key, "victim", 2).await,
            0,
            "{key} an hour on"
        );
    }
    // Two days on, every window has moved (a sliding window still weighs
    // the day before for a day): the limit is there again, no more.
    target.step_forward(DAY + DAY);
    for key in algorithm_keys() {
        let again = target.admitted(key, "victim", LIMIT + 2).await;
        assert_eq!(again, LIMIT, "{key} two days on");
        assert_within(&target, LIMIT + again, "clock steps", key);
    }
}

/// One check of `limit` for the key named after its algorithm at `at` on Redis.
async fn redis_decide(target: &Target, limit: &Limit, at: Timestamp) -> Outcome {
    let engine = target.live.engine();
    let redis = engine
        .remote()
        .expect("a Redis store")
        .redis()
        .expect("connected at start");
    let counter = Counter {
        group: 0,
        key: limit.algorithm_kind.name().as_bytes(),
        tag: 17,
        algorithm: limit.algorithm.expect("a limited rule"),
        hits: 1,
        give_back: false,
        phase_ns: 0,
    };
    let time = SuppliedTime {
        at,
        key_ttl: Duration::from_secs(3600),
    };
    let mut out = Vec::new();
    redis
        .check_batch_at(&[counter], time, &mut out)
        .await
        .expect("redis answers");
    out[0].outcome()
}

/// Redis `TIME` stepped back cannot be made by a test, so the script decides
/// at supplied times: used up at `t`, then asked earlier and a little later.
#[tokio::test]
async fn on_redis_no_step_of_the_time_admits_past_a_limit() {
    let target = Target::new("clock-steps", StoreKind::Redis, "").await;
    let engine = target.live.engine();
    let t = Timestamp::from_secs(1_800_000_000 + 3600);
    let at = |back: Duration, forward: Duration| {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).expect("a short step");
        Timestamp::from_nanos(t.as_nanos() - nanos(back) + nanos(forward))
    };
    for rule in engine.rules().rules(DOMAIN) {
        let limit = &rule.limits[0];
        let name = limit.algorithm_kind.name();
        let mut admitted = 0;
        for _ in 0..LIMIT + 2 {
            admitted += usize::from(redis_decide(&target, limit, t).await == Outcome::Allowed);
        }
        assert_eq!(admitted, LIMIT, "{name}");
        for step in BACK {
            for when in [
                at(step, Duration::ZERO),
                t,
                at(Duration::ZERO, Duration::from_secs(3600)),
            ] {
                let outcome = redis_decide(&target, limit, when).await;
                assert_ne!(
                    outcome,
                    Outcome::Allowed,
                    "{name}: admitted at {when:?} after a step of {step:?} back (lead: the Redis clock hold)"
                );
            }
        }
        let next_day = redis_decide(&target, limit, at(Duration::ZERO, DAY + DAY)).await;
        assert_eq!(next_day, Outcome::Allowed, "{name}: two days on");
    }
}
