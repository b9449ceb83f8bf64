//! A backward step of the time the check script decides at never reopens a used-up limit, for every algorithm.
//!
//! Redis `TIME` is the Redis host's wall clock, which can be stepped back
//! (NTP after a boot, `date -s`, a VM resumed from a snapshot). The script's
//! supplied time stands in for `TIME` here: a key is used up at `T`, then
//! decided at earlier times, down to several windows back, and must stay
//! denied; a forward step then moves its window at once.

use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, FixedWindow, Gcra, LeakyBucket, Outcome, SlidingLog, SlidingWindow, Timestamp,
    TokenBucket,
};
use tollgate_redis::{RedisStore, SuppliedTime};
use tollgate_store::Counter;
use tollgate_testkit::redis::RedisServer;

const LIMIT: u64 = 3;
const WINDOW: Duration = Duration::from_secs(60);

fn algorithms() -> Vec<(&'static str, AnyAlgorithm)> {
    vec![
        (
            "fixed_window",
            FixedWindow::new(LIMIT, WINDOW).unwrap().into(),
        ),
        (
            "sliding_window",
            SlidingWindow::new(LIMIT, WINDOW).unwrap().into(),
        ),
        (
            "sliding_log",
            SlidingLog::new(LIMIT, WINDOW).unwrap().into(),
        ),
        (
            "token_bucket",
            TokenBucket::new(LIMIT, LIMIT, WINDOW).unwrap().into(),
        ),
        ("gcra", Gcra::new(LIMIT, WINDOW, LIMIT).unwrap().into()),
        (
            "leaky_bucket",
            LeakyBucket::policer(LIMIT, WINDOW, LIMIT - 1)
                .unwrap()
                .into(),
        ),
    ]
}

async fn decide(store: &RedisStore, algorithm: AnyAlgorithm, when: Timestamp) -> Outcome {
    let counter = Counter {
        group: 0,
        key: b"user",
        tag: 11,
        algorithm,
        hits: 1,
        give_back: false,
        phase_ns: 0,
    };
    let time = SuppliedTime {
        at: when,
        // Longer than any step below, so the key's TTL plays no part.
        key_ttl: Duration::from_secs(3600),
    };
    let mut out = Vec::new();
    store
        .check_batch_at(&[counter], time, &mut out)
        .await
        .expect("redis answers");
    out[0].outcome()
}

#[tokio::test]
async fn a_backward_step_of_redis_time_never_reopens_a_used_up_limit() {
    let server = RedisServer::start();
    let redis = RedisStore::connect(&server.url(), Duration::from_secs(2))
        .await
        .expect("connects");
    // Mid-window (1 800 000 000 is a whole minute), so steps of whole windows land mid-window too.
    let t = Timestamp::from_secs(1_800_000_030);
    let back = |d: Duration| Timestamp::from_nanos(t.as_nanos() - d.as_nanos() as u64);
    let steps = [
        Duration::from_secs(1),
        Duration::from_secs(31),
        WINDOW,
        2 * WINDOW,
        3 * WINDOW + Duration::from_secs(7),
        10 * WINDOW,
        Duration::from_secs(86_400),
    ];
    for (name, algorithm) in algorithms() {
        let store = redis.with_key_prefix(format!("hold:{name}:").as_bytes());
        let mut admitted = 0;
        while decide(&store, algorithm, t).await == Outcome::Allowed {
            admitted += 1;
            assert!(admitted <= LIMIT, "{name}: admitted past the limit at T");
        }
        assert!(admitted >= 1, "{name}: the key was never admitted");
        for step in steps {
            for _ in 0..LIMIT + 1 {
                assert_ne!(
                    decide(&store, algorithm, back(step)).await,
                    Outcome::Allowed,
                    "{name}: admitted again {step:?} before the time it was used up"
                );
            }
        }
        assert_ne!(
            decide(&store, algorithm, t).await,
            Outcome::Allowed,
            "{name}: still used up at T after the backward steps"
        );
        // A forward step moves the window (or refills) at once.
        let later = t.saturating_add(3 * WINDOW);
        assert_eq!(
            decide(&store, algorithm, later).await,
            Outcome::Allowed,
            "{name}: a forward step of three windows must free the key"
        );
    }
}
