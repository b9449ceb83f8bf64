//! A supplied time: the check script decides at the caller's instant and TTL instead of Redis `TIME` (simulations).

use std::time::Duration;

use tollgate_core::{AnyAlgorithm, FixedWindow, Outcome, Timestamp, TokenBucket};
use tollgate_redis::{RedisStore, SuppliedTime};
use tollgate_store::{Counter, CounterStore};
use tollgate_testkit::redis::RedisServer;

const HOUR: Duration = Duration::from_secs(3600);

fn counter(key: &[u8], algorithm: AnyAlgorithm, hits: u64) -> Counter<'_> {
    Counter {
        group: 0,
        key,
        tag: 7,
        algorithm,
        hits,
        give_back: false,
        phase_ns: 0,
    }
}

async fn at(store: &RedisStore, c: Counter<'_>, when: Timestamp, ttl: Duration) -> Outcome {
    let mut out = Vec::new();
    let time = SuppliedTime {
        at: when,
        key_ttl: ttl,
    };
    store
        .check_batch_at(&[c], time, &mut out)
        .await
        .expect("answers");
    out[0].outcome()
}

#[tokio::test]
async fn a_supplied_time_replaces_redis_time_and_ttl() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), Duration::from_secs(2))
        .await
        .unwrap()
        .with_key_prefix(b"sim:1:");
    // 5 per hour: one token every 12 minutes, decided in 2001 without waiting.
    let tb: AnyAlgorithm = TokenBucket::new(5, 5, HOUR).unwrap().into();
    let t0 = Timestamp::from_secs(1_000_000_000).saturating_add(Duration::from_nanos(123));
    let ttl = Duration::from_secs(90);
    for _ in 0..5 {
        assert_eq!(
            at(&store, counter(b"k", tb, 1), t0, ttl).await,
            Outcome::Allowed
        );
    }
    assert_eq!(
        at(&store, counter(b"k", tb, 1), t0, ttl).await,
        Outcome::Denied
    );
    // One nanosecond short of a token, then exactly one.
    let almost = t0.saturating_add(HOUR / 5 - Duration::from_nanos(1));
    assert_eq!(
        at(&store, counter(b"k", tb, 1), almost, ttl).await,
        Outcome::Denied
    );
    let refilled = t0.saturating_add(HOUR / 5);
    assert_eq!(
        at(&store, counter(b"k", tb, 1), refilled, ttl).await,
        Outcome::Allowed
    );
    // A fixed window of an hour: a new window at the supplied hour's edge.
    let fw: AnyAlgorithm = FixedWindow::new(1, HOUR).unwrap().into();
    let edge = Timestamp::from_secs(3600 * 400_000);
    let before = Timestamp::from_nanos(edge.as_nanos() - 1_000);
    assert_eq!(
        at(&store, counter(b"w", fw, 1), before, ttl).await,
        Outcome::Allowed
    );
    assert_eq!(
        at(&store, counter(b"w", fw, 1), before, ttl).await,
        Outcome::Denied
    );
    assert_eq!(
        at(&store, counter(b"w", fw, 1), edge, ttl).await,
        Outcome::Allowed
    );
    // Keys live under the prefix with the supplied TTL, not their freshness (an hour).
    let keys = server.cli(&["--raw", "KEYS", "*"]);
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for key in &keys {
        // (New counters are hashes under `tg{…}`, the default encoding.)
        assert!(key.starts_with("sim:1:tg{0000000000000007}"), "{key}");
        let ttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
        assert!(ttl > 80_000 && ttl <= 90_000, "{key}: {ttl}");
    }
    // Without a supplied time the same script reads Redis TIME: today's bucket is full.
    let mut out = Vec::new();
    store
        .check_batch(&[counter(b"k", tb, 1)], Timestamp::from_secs(0), &mut out)
        .await
        .unwrap();
    assert!(out[0].is_allowed());
    assert_eq!(out[0].remaining(), 4);
    // Deleting the prefix removes exactly those keys; an unprefixed store refuses.
    server.cli(&["SET", "tg{0000000000000007}prod", "1"]);
    assert_eq!(store.delete_prefixed().await.unwrap(), 2);
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "1");
    assert!(store.with_key_prefix(b"").delete_prefixed().await.is_err());
}

#[tokio::test]
async fn pipelined_calls_decide_in_order_and_reload_a_flushed_script() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), Duration::from_secs(2))
        .await
        .unwrap()
        .with_key_prefix(b"sim:2:");
    // A flushed Redis (as after a restart) lacks the library: the first
    // pipeline loads it and retries.
    server.cli(&["FUNCTION", "FLUSH"]);
    let tb: AnyAlgorithm = TokenBucket::new(3, 3, HOUR).unwrap().into();
    let t0 = Timestamp::from_secs(1_000_000_000);
    let time = |at| SuppliedTime {
        at,
        key_ttl: Duration::from_secs(60),
    };
    // Four at t0 on one key, then one 20 minutes later (a token back), then another key.
    let calls = [
        (counter(b"a", tb, 1), time(t0)),
        (counter(b"a", tb, 1), time(t0)),
        (counter(b"a", tb, 1), time(t0)),
        (counter(b"a", tb, 1), time(t0)),
        (counter(b"a", tb, 1), time(t0.saturating_add(HOUR / 3))),
        (counter(b"b", tb, 1), time(t0)),
    ];
    let mut out = Vec::new();
    store
        .check_each_at(&calls, &mut out)
        .await
        .expect("answers");
    let allowed: Vec<bool> = out.iter().map(|d| d.is_allowed()).collect();
    assert_eq!(allowed, [true, true, true, false, true, true]);
    assert_eq!(out[2].remaining(), 0);
    assert_eq!(out[5].remaining(), 2);
}
