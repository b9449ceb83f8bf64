//! One contract, two stores: every test runs against the in-memory counters and a real Redis.
//!
//! Limits are per hour, so nothing refills between the calls of a test:
//! the in-memory store is given one fixed instant, Redis reads its own
//! `TIME`, and both must answer the same.

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, Decision, DelayMode, FixedWindow, Gcra, LeakyBucket, Outcome,
    SlidingLog, SlidingWindow, Timestamp, TokenBucket,
};
use tollgate_redis::RedisStore;
use tollgate_store::{Counter, CounterStore, MemoryCounters, StoreConfig};
use tollgate_testkit::redis::RedisServer;

const HOUR: Duration = Duration::from_secs(3600);
const NOW: Timestamp = Timestamp::from_secs(1_700_000_000);

/// Every algorithm with a capacity of 5 per hour.
fn five_per_hour() -> Vec<AnyAlgorithm> {
    vec![
        TokenBucket::new(5, 5, HOUR).unwrap().into(),
        Gcra::new(5, HOUR, 5).unwrap().into(),
        LeakyBucket::policer(5, HOUR, 4).unwrap().into(),
        FixedWindow::new(5, HOUR).unwrap().into(),
        SlidingWindow::new(5, HOUR).unwrap().into(),
        SlidingLog::new(5, HOUR).unwrap().into(),
    ]
}

fn counter(key: &[u8], algorithm: AnyAlgorithm, hits: u64) -> Counter<'_> {
    Counter {
        group: 0,
        key,
        tag: xxhash_rust::xxh3::xxh3_64(key),
        algorithm,
        hits,
        give_back: false,
        phase_ns: 0,
    }
}

async fn check<S: CounterStore>(store: &S, counters: &[Counter<'_>]) -> Vec<Decision> {
    let mut out = Vec::new();
    store
        .check_batch(counters, NOW, &mut out)
        .await
        .expect("the store answers");
    assert_eq!(out.len(), counters.len());
    out
}

async fn one<S: CounterStore>(store: &S, c: Counter<'_>) -> Decision {
    check(store, &[c]).await[0]
}

async fn admits_exactly_the_limit_then_denies<S: CounterStore>(store: &S) {
    for (i, algorithm) in five_per_hour().into_iter().enumerate() {
        let key = format!("exact-{i}");
        for left in (0..5).rev() {
            let d = one(store, counter(key.as_bytes(), algorithm, 1)).await;
            assert!(d.is_allowed(), "{algorithm:?}");
            assert_eq!(d.remaining(), left, "{algorithm:?}");
            assert_eq!(d.limit(), 5);
        }
        let d = one(store, counter(key.as_bytes(), algorithm, 1)).await;
        assert_eq!(d.outcome(), Outcome::Denied, "{algorithm:?}");
        assert_eq!(d.remaining(), 0);
        let retry = d.retry_after().expect("a denial says when to retry");
        // Five in the current window keep the sliding counter's estimate
        // over 4 until a fifth of the next window has passed: up to
        // HOUR + HOUR / 5 when the five came early in a window (on Redis the
        // window is the real hour of TIME). Every other algorithm frees a
        // unit within the hour.
        let longest = match algorithm {
            AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(_)) => HOUR + HOUR / 5,
            _ => HOUR,
        };
        assert!(
            retry > Duration::ZERO && retry <= longest,
            "{algorithm:?}: {retry:?}"
        );
        assert!(d.reset_after() > Duration::ZERO && d.reset_after() <= 2 * HOUR);
    }
}

async fn retry_after_is_the_algorithms<S: CounterStore>(store: &S) {
    // A bucket of 5 per hour frees one token every 12 minutes.
    let tb: AnyAlgorithm = TokenBucket::new(5, 5, HOUR).unwrap().into();
    let log: AnyAlgorithm = SlidingLog::new(5, HOUR).unwrap().into();
    for (algorithm, expected) in [(tb, HOUR / 5), (log, HOUR)] {
        let key = format!("retry-{expected:?}");
        for _ in 0..5 {
            one(store, counter(key.as_bytes(), algorithm, 1)).await;
        }
        let retry = one(store, counter(key.as_bytes(), algorithm, 1))
            .await
            .retry_after()
            .unwrap();
        // Redis's clock moves on between the calls: allow 2 s.
        assert!(
            retry <= expected && retry + Duration::from_secs(2) >= expected,
            "{retry:?}"
        );
    }
}

async fn check_only_consumes_nothing<S: CounterStore>(store: &S) {
    for (i, algorithm) in five_per_hour().into_iter().enumerate() {
        let key = format!("peek-{i}");
        one(store, counter(key.as_bytes(), algorithm, 2)).await;
        for _ in 0..3 {
            let d = one(store, counter(key.as_bytes(), algorithm, 0)).await;
            assert!(d.is_allowed());
            assert_eq!(d.remaining(), 3, "{algorithm:?}");
        }
    }
}

async fn a_cost_above_capacity_never_passes<S: CounterStore>(store: &S) {
    for (i, algorithm) in five_per_hour().into_iter().enumerate() {
        let key = format!("huge-{i}");
        let d = one(store, counter(key.as_bytes(), algorithm, 6)).await;
        assert_eq!(d.outcome(), Outcome::Exceeds, "{algorithm:?}");
        assert_eq!(d.retry_after(), None);
        let d = one(store, counter(key.as_bytes(), algorithm, 5)).await;
        // A fixed window counts every request, even one that can never pass.
        let counted = tollgate_store::counts_denied(&algorithm);
        assert_eq!(d.is_allowed(), !counted, "{algorithm:?}");
    }
}

async fn a_denied_group_consumes_nothing_of_its_other_limits<S: CounterStore>(store: &S) {
    let wide: AnyAlgorithm = TokenBucket::new(10, 10, HOUR).unwrap().into();
    for (i, narrow) in five_per_hour().into_iter().enumerate() {
        if tollgate_store::counts_denied(&narrow) {
            continue;
        }
        let (a, b) = (format!("group-wide-{i}"), format!("group-narrow-{i}"));
        for _ in 0..5 {
            let ds = check(
                store,
                &[
                    counter(a.as_bytes(), wide, 1),
                    counter(b.as_bytes(), narrow, 1),
                ],
            )
            .await;
            assert!(ds.iter().all(Decision::is_allowed));
        }
        let ds = check(
            store,
            &[
                counter(a.as_bytes(), wide, 1),
                counter(b.as_bytes(), narrow, 1),
            ],
        )
        .await;
        assert!(ds[0].is_allowed() && !ds[1].is_allowed(), "{narrow:?}");
        let d = one(store, counter(a.as_bytes(), wide, 0)).await;
        assert_eq!(
            d.remaining(),
            5,
            "{narrow:?}: the denied request cost the wide limit nothing"
        );
    }
}

async fn fixed_windows_count_denied_requests<S: CounterStore>(store: &S) {
    let fw: AnyAlgorithm = FixedWindow::new(10, HOUR).unwrap().into();
    let tb: AnyAlgorithm = TokenBucket::new(1, 1, HOUR).unwrap().into();
    let batch = [counter(b"fw-a", fw, 1), counter(b"fw-b", tb, 1)];
    assert!(check(store, &batch).await.iter().all(Decision::is_allowed));
    let ds = check(store, &batch).await;
    assert!(ds[0].is_allowed() && !ds[1].is_allowed());
    assert_eq!(one(store, counter(b"fw-a", fw, 0)).await.remaining(), 8);
    // A fixed window that denies keeps counting (up to limit + 1).
    let small: AnyAlgorithm = FixedWindow::new(1, HOUR).unwrap().into();
    assert!(one(store, counter(b"fw-c", small, 1)).await.is_allowed());
    let d = one(store, counter(b"fw-c", small, 1)).await;
    assert_eq!(d.outcome(), Outcome::Denied);
    assert_eq!(d.retry_after(), Some(d.reset_after()));
}

async fn groups_are_independent<S: CounterStore>(store: &S) {
    let tb: AnyAlgorithm = TokenBucket::new(1, 1, HOUR).unwrap().into();
    assert!(one(store, counter(b"indep-a", tb, 1)).await.is_allowed());
    let mut second = counter(b"indep-b", tb, 1);
    second.group = 1;
    let ds = check(store, &[counter(b"indep-a", tb, 1), second]).await;
    assert!(!ds[0].is_allowed() && ds[1].is_allowed());
    assert_eq!(
        one(store, counter(b"indep-b", tb, 0)).await.remaining(),
        0,
        "group 1 consumed"
    );
}

async fn give_back_returns_units<S: CounterStore>(store: &S) {
    for (i, algorithm) in five_per_hour().into_iter().enumerate() {
        let key = format!("refund-{i}");
        one(store, counter(key.as_bytes(), algorithm, 3)).await;
        let mut back = counter(key.as_bytes(), algorithm, 2);
        back.give_back = true;
        let d = one(store, back).await;
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 4, "{algorithm:?}");
        assert_eq!(
            one(store, counter(key.as_bytes(), algorithm, 0))
                .await
                .remaining(),
            4
        );
    }
}

async fn a_shaper_reports_its_delay<S: CounterStore>(store: &S) {
    // One per second, a queue of 3, every request after the first delayed.
    let shaper: AnyAlgorithm = LeakyBucket::new(1, Duration::from_secs(1), 3, DelayMode::Delay)
        .unwrap()
        .into();
    assert_eq!(
        one(store, counter(b"shape", shaper, 1)).await.delay(),
        Duration::ZERO
    );
    let d = one(store, counter(b"shape", shaper, 1)).await;
    assert!(d.is_allowed());
    let delay = d.delay();
    assert!(
        delay <= Duration::from_secs(1) && delay >= Duration::from_millis(900),
        "{delay:?}"
    );
}

async fn keys_do_not_share_counters<S: CounterStore>(store: &S) {
    let tb: AnyAlgorithm = TokenBucket::new(1, 1, HOUR).unwrap().into();
    assert!(one(store, counter(b"iso", tb, 1)).await.is_allowed());
    assert!(one(store, counter(b"iso2", tb, 1)).await.is_allowed());
    assert!(!one(store, counter(b"iso", tb, 1)).await.is_allowed());
    assert!(!one(store, counter(b"iso2", tb, 1)).await.is_allowed());
}

async fn concurrent_callers_get_exactly_the_limit<S: CounterStore + 'static>(store: Arc<S>) {
    for (i, algorithm) in five_per_hour().into_iter().enumerate() {
        let key = Arc::new(format!("race-{i}"));
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let store = Arc::clone(&store);
                let key = Arc::clone(&key);
                tokio::spawn(async move {
                    let c = counter(key.as_bytes(), algorithm, 1);
                    let mut out = Vec::new();
                    store.check_batch(&[c], NOW, &mut out).await.unwrap();
                    out[0].is_allowed()
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            admitted += usize::from(t.await.unwrap());
        }
        assert_eq!(admitted, 5, "{algorithm:?}");
    }
}

async fn a_phase_moves_a_fixed_windows_edges_by_exactly_that_much<S: CounterStore>(store: &S) {
    let window = FixedWindow::new(5, HOUR).unwrap().into();
    let phase = Duration::from_secs(20 * 60) + Duration::from_micros(7);
    let aligned = counter(b"phase-aligned", window, 1);
    let shifted = Counter {
        group: 1,
        phase_ns: u64::try_from(phase.as_nanos()).unwrap(),
        ..counter(b"phase-shifted", window, 1)
    };
    // One batch: both decided at the same instant of the store's clock.
    let d = check(store, &[aligned, shifted]).await;
    assert!(d[0].is_allowed() && d[1].is_allowed());
    let hour = HOUR.as_nanos() as i128;
    let difference = (d[0].reset_after().as_nanos() as i128
        - d[1].reset_after().as_nanos() as i128)
        .rem_euclid(hour);
    assert_eq!(
        difference,
        phase.as_nanos() as i128,
        "the shifted window ends {phase:?} before the aligned one (modulo the window)"
    );
}

fn memory() -> MemoryCounters {
    MemoryCounters::new(
        five_per_hour(),
        StoreConfig::with_max_keys(10_000),
        StoreConfig::with_max_keys(10_000),
        16,
    )
}

/// A store on `server`, once Redis's clock is clear of an hour's end: the
/// limits are per hour, and a fixed window on Redis is the real hour of `TIME`.
async fn redis(server: &RedisServer) -> RedisStore {
    tokio::time::sleep(server.wait_clear_of_window_end(HOUR, Duration::from_secs(60))).await;
    RedisStore::connect(&server.url(), Duration::from_secs(2))
        .await
        .expect("connects to the test redis-server")
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod memory_store {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(&super::memory()).await;
                }
            )*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_callers_get_exactly_the_limit() {
                super::concurrent_callers_get_exactly_the_limit(std::sync::Arc::new(super::memory())).await;
            }
        }
        mod redis_store {
            $(
                #[tokio::test]
                async fn $name() {
                    let server = tollgate_testkit::redis::RedisServer::start();
                    super::$name(&super::redis(&server).await).await;
                }
            )*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_callers_get_exactly_the_limit() {
                let server = tollgate_testkit::redis::RedisServer::start();
                let store = std::sync::Arc::new(super::redis(&server).await);
                super::concurrent_callers_get_exactly_the_limit(store).await;
            }
        }
        /// The same contract with new counters in the packed encoding.
        mod redis_store_packed {
            use tollgate_redis::Encoding;
            $(
                #[tokio::test]
                async fn $name() {
                    let server = tollgate_testkit::redis::RedisServer::start();
                    super::$name(&super::redis(&server).await.with_encoding(Encoding::Packed)).await;
                }
            )*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_callers_get_exactly_the_limit() {
                let server = tollgate_testkit::redis::RedisServer::start();
                let store = super::redis(&server).await.with_encoding(Encoding::Packed);
                super::concurrent_callers_get_exactly_the_limit(std::sync::Arc::new(store)).await;
            }
        }
    };
}

contract!(
    admits_exactly_the_limit_then_denies,
    retry_after_is_the_algorithms,
    check_only_consumes_nothing,
    a_cost_above_capacity_never_passes,
    a_denied_group_consumes_nothing_of_its_other_limits,
    fixed_windows_count_denied_requests,
    groups_are_independent,
    give_back_returns_units,
    a_shaper_reports_its_delay,
    keys_do_not_share_counters,
    a_phase_moves_a_fixed_windows_edges_by_exactly_that_much,
);

/// Redis only: every counter key expires by itself once its state is fresh
/// again, in either encoding (new counters under `tg{…}` as hashes, a
/// sliding log as a list, or all as packed strings).
#[tokio::test]
async fn idle_keys_expire_when_their_state_is_fresh() {
    use tollgate_redis::Encoding;
    let server = RedisServer::start();
    for (encoding, types) in [
        (Encoding::Hash, &["hash", "list"][..]),
        (Encoding::Packed, &["string"][..]),
    ] {
        server.cli(&["FLUSHALL"]);
        let store = redis(&server).await.with_encoding(encoding);
        for (i, algorithm) in five_per_hour().into_iter().enumerate() {
            let key = format!("ttl-{i}");
            one(&store, counter(key.as_bytes(), algorithm, 1)).await;
        }
        assert_eq!(server.cli(&["DBSIZE"]).trim(), "6", "{encoding:?}");
        let keys = server.cli(&["--raw", "KEYS", "tg{*"]);
        let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(keys.len(), 6, "{encoding:?}: {keys:?}");
        for key in keys {
            let kind = server.cli(&["TYPE", key]);
            assert!(
                types.contains(&kind.trim()),
                "{encoding:?}: {key} is {kind}"
            );
            let ttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
            // One unit of 5 per hour is fresh again within 12 minutes (the
            // bucket), the hour (the log) or two windows (the window counters).
            assert!(ttl > 0 && ttl <= 2 * 3_600_000 + 1, "{key}: {ttl}");
        }
    }
}

/// Redis only: across a window boundary the script's sliding window counter
/// agrees with the core's, bounded by the core's answers at Redis `TIME`
/// read just before and just after the call (remaining only grows with time).
#[tokio::test]
async fn the_sliding_window_script_agrees_with_the_core_across_windows() {
    use tollgate_core::WordAlgorithm;
    let server = RedisServer::start();
    let store = redis(&server).await;
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let redis_now = |conn: &mut ::redis::Connection| {
        let (s, us): (u64, u64) = ::redis::cmd("TIME").query(conn).unwrap();
        Timestamp::from_nanos(s * 1_000_000_000 + us * 1_000)
    };
    let window = Duration::from_secs(10);
    let sw = SlidingWindow::new(100, window).unwrap();
    for (round, prev) in [40_u64, 75, 100].into_iter().enumerate() {
        let key = format!("sw-cross-{round}");
        let t0 = redis_now(&mut conn);
        let index = t0.as_nanos() / 10_000_000_000;
        // The previous window held `prev` hits: the core's state and the script's.
        let earlier = Timestamp::from_nanos((index - 1) * 10_000_000_000 + 1);
        let state = sw.decide(0, earlier, prev).1.unwrap();
        let redis_key =
            tollgate_redis::redis_key(xxhash_rust::xxh3::xxh3_64(key.as_bytes()), key.as_bytes());
        // The script's state: window number, previous and current counts,
        // little-endian doubles (prelude.lua).
        let value: Vec<u8> = [(index - 1) as f64, 0.0, prev as f64]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let _: () = ::redis::cmd("SET")
            .arg(&redis_key)
            .arg(value)
            .query(&mut conn)
            .unwrap();
        for _ in 0..3 {
            let before = redis_now(&mut conn);
            let d = one(&store, counter(key.as_bytes(), sw.into(), 0)).await;
            let after = redis_now(&mut conn);
            let low = sw.decide(state, before, 0).0.remaining();
            let high = sw.decide(state, after, 0).0.remaining();
            assert!(
                low <= d.remaining() && d.remaining() <= high,
                "prev {prev}: {low} <= {} <= {high}",
                d.remaining()
            );
        }
    }
}
