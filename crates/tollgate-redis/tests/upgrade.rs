//! A rolling upgrade from the release that kept counters as hashes under `tg{…}`: at every step of it, the instances share one state per counter, so no limit admits more than it allows.
//!
//! The "old instance" is the previous release's own check and lease scripts
//! (`tests/previous_release/`, exactly as it shipped them), called with
//! `EVAL` on `tg{…}` keys as it called them. The new instances are
//! [`RedisStore`]s in either [`Encoding`]. The steps are the documented
//! rollout: old + new(hash), all new(hash), new(hash) + new(packed), all
//! packed.

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow,
    Timestamp, TokenBucket,
};
use tollgate_redis::{Encoding, RedisStore, redis_key};
use tollgate_store::{Counter, CounterStore};
use tollgate_testkit::redis::RedisServer;

mod one_counter;
use one_counter::counter;

const HOUR: Duration = Duration::from_secs(3600);

/// The previous release's check script, as it loaded it (prelude, then body).
const OLD_CHECK: &str = concat!(
    include_str!("previous_release/prelude.lua"),
    include_str!("previous_release/check.lua")
);

/// The previous release's lease script.
const OLD_LEASE: &str = concat!(
    include_str!("previous_release/prelude.lua"),
    include_str!("previous_release/lease.lua")
);

/// Every algorithm with a capacity of `n` per hour.
fn per_hour(n: u64) -> Vec<AnyAlgorithm> {
    vec![
        TokenBucket::new(n, n, HOUR).unwrap().into(),
        Gcra::new(n, HOUR, n).unwrap().into(),
        LeakyBucket::policer(n, HOUR, n - 1).unwrap().into(),
        FixedWindow::new(n, HOUR).unwrap().into(),
        SlidingWindow::new(n, HOUR).unwrap().into(),
        SlidingLog::new(n, HOUR).unwrap().into(),
    ]
}

/// The kind and parameters the previous release passed for `algorithm`.
fn old_params(algorithm: &AnyAlgorithm) -> (&'static str, u64, u64) {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap();
    match algorithm {
        AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(a)) => {
            ("s", ns(a.token_interval()), a.max_tokens())
        }
        AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(a)) => {
            ("s", ns(a.emission_interval()), a.burst())
        }
        AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(a)) => {
            ("s", ns(a.drain_interval()), a.burst() + 1)
        }
        AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(a)) => {
            ("f", ns(a.window()) / 1_000, a.limit())
        }
        AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(a)) => {
            ("w", ns(a.window()) / 1_000, a.limit())
        }
        AnyAlgorithm::SlidingLog(a) => ("l", ns(a.window()) / 1_000, a.limit()),
    }
}

/// The key the previous release kept `c` under: `tg{…}`, this release's
/// key of the same counter in either encoding.
fn old_key(c: &Counter<'_>) -> Vec<u8> {
    let key = redis_key(c.tag, c.key);
    assert!(key.starts_with(b"tg{"));
    key
}

/// The previous release's check of one unit of `c`, as it called it.
async fn old_check(
    connection: &redis::aio::MultiplexedConnection,
    c: &Counter<'_>,
) -> redis::RedisResult<Vec<i64>> {
    let (kind, p1, p2) = old_params(&c.algorithm);
    redis::Script::new(OLD_CHECK)
        .key(old_key(c))
        .arg(c.group)
        .arg("c")
        .arg(kind)
        .arg(c.hits)
        .arg(p1)
        .arg(p2)
        .arg(c.phase_ns / 1_000)
        .invoke_async(&mut connection.clone())
        .await
}

/// One instance of the fleet during the rollout.
#[derive(Clone)]
enum Instance {
    /// The previous release (its script on `tg{…}` keys).
    Old(redis::aio::MultiplexedConnection),
    /// This release in one encoding.
    New(RedisStore),
}

impl Instance {
    /// Whether the instance admits one unit of `c`.
    async fn admits(&self, c: &Counter<'_>) -> bool {
        match self {
            Instance::Old(connection) => {
                let reply = old_check(connection, c)
                    .await
                    .expect("the previous release's script runs");
                reply[0] == 0
            }
            Instance::New(store) => {
                let mut out = Vec::new();
                store
                    .check_batch(std::slice::from_ref(c), Timestamp::from_secs(0), &mut out)
                    .await
                    .expect("Redis answers");
                out[0].is_allowed()
            }
        }
    }
}

/// The fleet at each step of the documented rollout, by name.
fn rollout(
    old: &redis::aio::MultiplexedConnection,
    store: &RedisStore,
) -> Vec<(&'static str, Vec<Instance>)> {
    let hash = || Instance::New(store.with_encoding(Encoding::Hash));
    let packed = || Instance::New(store.with_encoding(Encoding::Packed));
    vec![
        ("old + new(hash)", vec![Instance::Old(old.clone()), hash()]),
        ("all new(hash)", vec![hash(), hash()]),
        ("new(hash) + new(packed)", vec![hash(), packed()]),
        ("all packed", vec![packed(), packed()]),
    ]
}

async fn connect(server: &RedisServer) -> (redis::aio::MultiplexedConnection, RedisStore) {
    tokio::time::sleep(server.wait_clear_of_window_end(HOUR, Duration::from_secs(60))).await;
    let client = redis::Client::open(server.url()).unwrap();
    let old = client.get_multiplexed_async_connection().await.unwrap();
    let store = RedisStore::connect(&server.url(), Duration::from_secs(2))
        .await
        .expect("connects to the test redis-server");
    (old, store)
}

/// At each step, a counter its instances take turns on admits exactly its
/// limit; one counter carried through all four steps admits exactly its
/// limit in all, for every algorithm.
#[tokio::test]
async fn every_rollout_step_admits_exactly_the_limit() {
    let server = RedisServer::start();
    let (old, store) = connect(&server).await;
    let steps = rollout(&old, &store);
    for algorithm in per_hour(5) {
        for (step, fleet) in &steps {
            // Each instance in turn, both ways round (who creates the key first).
            for first in 0..fleet.len() {
                let key = format!("fresh {step} {first}");
                let c = counter(key.as_bytes(), algorithm);
                let mut admitted = 0;
                for i in 0..12 {
                    if fleet[(first + i) % fleet.len()].admits(&c).await {
                        admitted += 1;
                    }
                }
                assert_eq!(admitted, 5, "{step}, {algorithm:?}, instance {first} first");
            }
        }
        // One counter through the whole rollout: 3 attempts per step and
        // instance, 24 in all, of which 10 may pass.
        let carried: AnyAlgorithm = match algorithm {
            AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(_)) => {
                TokenBucket::new(10, 10, HOUR).unwrap().into()
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(_)) => {
                Gcra::new(10, HOUR, 10).unwrap().into()
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(_)) => {
                LeakyBucket::policer(10, HOUR, 9).unwrap().into()
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(_)) => {
                FixedWindow::new(10, HOUR).unwrap().into()
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(_)) => {
                SlidingWindow::new(10, HOUR).unwrap().into()
            }
            AnyAlgorithm::SlidingLog(_) => SlidingLog::new(10, HOUR).unwrap().into(),
        };
        let c = counter(b"carried", carried);
        let mut by_step = Vec::new();
        for (_, fleet) in &steps {
            let mut admitted = 0;
            for _ in 0..3 {
                for instance in fleet {
                    if instance.admits(&c).await {
                        admitted += 1;
                    }
                }
            }
            by_step.push(admitted);
        }
        assert_eq!(by_step, [6, 4, 0, 0], "{algorithm:?}");
        // After the packed steps the one key holds a packed string.
        let old_key = String::from_utf8(old_key(&c)).unwrap();
        assert_eq!(server.cli(&["TYPE", &old_key]).trim(), "string");
        server.cli(&["FLUSHALL"]);
    }
}

/// Packed instances converting a counter the old release filled part of,
/// while hash instances use it at the same time, keep its count: exactly
/// what was left is admitted, by token bucket and fixed window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_under_load_keeps_the_count() {
    let server = RedisServer::start();
    let (old, store) = connect(&server).await;
    let algorithms: [AnyAlgorithm; 2] = [
        TokenBucket::new(50, 50, HOUR).unwrap().into(),
        FixedWindow::new(50, HOUR).unwrap().into(),
    ];
    for (name, algorithm) in ["tb", "fw"].into_iter().zip(algorithms) {
        let key = format!("converted {name}");
        let c = counter(key.as_bytes(), algorithm);
        let previous = Instance::Old(old.clone());
        for _ in 0..7 {
            assert!(previous.admits(&c).await);
        }
        let old_key = String::from_utf8(old_key(&c)).unwrap();
        assert_eq!(server.cli(&["TYPE", &old_key]).trim(), "hash");
        let mut tasks = Vec::new();
        for task in 0..6 {
            let encoding = if task % 2 == 0 {
                Encoding::Packed
            } else {
                Encoding::Hash
            };
            let instance = Arc::new(Instance::New(store.with_encoding(encoding)));
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                let c = counter(key.as_bytes(), algorithm);
                let mut admitted = 0u64;
                for _ in 0..15 {
                    if instance.admits(&c).await {
                        admitted += 1;
                    }
                }
                admitted
            }));
        }
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.unwrap();
        }
        assert_eq!(admitted, 43, "{algorithm:?}: 50 less the old release's 7");
        assert_eq!(server.cli(&["TYPE", &old_key]).trim(), "string");
        let ttl: i64 = server.cli(&["PTTL", &old_key]).trim().parse().unwrap();
        assert!(ttl > 0 && ttl <= 3_600_001, "{ttl}");
    }
}

/// Leases of new instances in either encoding and the old release's
/// leases and checks share one budget: a grant never hands out what an
/// old instance took, and what the grant took is gone for the instances
/// it runs beside (the old release beside hash, hash beside packed).
#[tokio::test]
async fn leases_share_the_budget_with_the_previous_release() {
    let server = RedisServer::start();
    let (old, store) = connect(&server).await;
    let algorithms: [AnyAlgorithm; 2] = [
        TokenBucket::new(20, 20, HOUR).unwrap().into(),
        FixedWindow::new(20, HOUR).unwrap().into(),
    ];
    for encoding in [Encoding::Hash, Encoding::Packed] {
        for algorithm in algorithms {
            let key = format!("leased {encoding:?}");
            let c = counter(key.as_bytes(), algorithm);
            let previous = Instance::Old(old.clone());
            for _ in 0..5 {
                assert!(previous.admits(&c).await);
            }
            // The old release's own lease: 4 more.
            let (kind, p1, p2) = old_params(&algorithm);
            let granted: Vec<i64> = redis::Script::new(OLD_LEASE)
                .key(old_key(&c))
                .arg("g")
                .arg(kind)
                .arg(p1)
                .arg(p2)
                .arg(4)
                .arg(1)
                .arg(0)
                .invoke_async(&mut old.clone())
                .await
                .unwrap();
            assert_eq!(granted[0], 4);
            let store = store.with_encoding(encoding);
            let lease = store.grant_lease(&c, 100, 1).await.unwrap();
            assert_eq!(lease.units, 11, "{encoding:?}, {algorithm:?}");
            let beside = match encoding {
                Encoding::Hash => previous,
                Encoding::Packed => Instance::New(store.with_encoding(Encoding::Hash)),
            };
            assert!(!beside.admits(&c).await, "{encoding:?}, {algorithm:?}");
            server.cli(&["FLUSHALL"]);
        }
    }
}

/// The documented unsafe order, `packed` while an instance of the previous
/// release still runs: the old instance meets a packed string under the
/// counter's key and its call fails (WRONGTYPE, so its `on_store_error`
/// rule answers); it never starts the counter afresh.
#[tokio::test]
async fn the_previous_release_meeting_a_packed_counter_gets_an_error() {
    let server = RedisServer::start();
    let (old, store) = connect(&server).await;
    let c = counter(b"packed first", FixedWindow::new(5, HOUR).unwrap().into());
    assert!(
        Instance::New(store.with_encoding(Encoding::Packed))
            .admits(&c)
            .await
    );
    let err = old_check(&old, &c)
        .await
        .expect_err("the old script cannot read a packed string");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let key = String::from_utf8(old_key(&c)).unwrap();
    assert_eq!(server.cli(&["TYPE", &key]).trim(), "string");
}
