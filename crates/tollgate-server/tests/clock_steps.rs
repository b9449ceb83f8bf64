//! The engine on a coarse clock over a stepped wall, in memory and in the Redis store's `on_store_error: local` fallback: windows follow a forward step at once, and a backward step lets no key past its limit.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tollgate_core::{Clock, CoarseClock, ManualClock, NANOS_PER_SEC, Timestamp};
use tollgate_protocol::rls::{Code, Descriptor, DescriptorStatus, RateLimitRequest};
use tollgate_redis::RedisStore;
use tollgate_rules::{AlgorithmKind, LoadOptions, RuleSet, load_sources};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions};
use tollgate_testkit::redis::RedisServer;

/// An hour boundary: `1_699_999_200` is a whole number of hours since the epoch.
const HOUR_START: u64 = 1_699_999_200;

/// 100 per hour in fixed windows (`hourly`), and five per minute under every
/// algorithm, keyed by its name. All `local`, so that on Redis the fallback
/// decides in this process.
fn rules() -> Arc<RuleSet> {
    let mut yaml = String::from(
        "domain: steps
descriptors:
  - key: hourly
    on_store_error: local
    rate_limit: {unit: hour, requests_per_unit: 100}
",
    );
    for kind in AlgorithmKind::ALL {
        // A leaky bucket admits `burst + 1` at once.
        let burst = if kind == AlgorithmKind::LeakyBucket {
            ", burst: 4"
        } else {
            ""
        };
        yaml.push_str(&format!(
            "  - key: {kind}
    on_store_error: local
    rate_limit: {{unit: minute, requests_per_unit: 5, algorithm: {kind}{burst}}}
"
        ));
    }
    let loaded = load_sources(
        [(Path::new("steps.yaml"), yaml.as_str())],
        LoadOptions::default(),
    );
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    Arc::new(loaded.rule_set)
}

/// The keys limited to five per minute, one per algorithm.
fn five_per_minute() -> impl Iterator<Item = &'static str> {
    AlgorithmKind::ALL.into_iter().map(AlgorithmKind::name)
}

fn request(key: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "steps".to_owned(),
        descriptors: vec![Descriptor::new([(key, "client")])],
        hits_addend: 0,
    }
}

/// A coarse clock ticked by hand over a fake wall reading `start` seconds.
fn stepped_clock(start: u64) -> (CoarseClock, ManualClock) {
    let wall = ManualClock::new(Timestamp::from_secs(start));
    (CoarseClock::ticked_by_hand(wall.clone()), wall)
}

/// Decides one request for `key`, in memory or through the (failed) store.
async fn decide(engine: &Engine<CoarseClock>, key: &str) -> DescriptorStatus {
    let response = engine.decide(&request(key)).await.expect("a valid request");
    response.statuses.into_iter().next().expect("one status")
}

/// OKs out of `n` requests for `key` at the clock's current time.
async fn oks(engine: &Engine<CoarseClock>, key: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(decide(engine, key).await.code == Code::Ok);
    }
    ok
}

/// The case: 331 s into the hour, then the wall is stepped 30
/// minutes ahead; the hourly window's reset must be the true 1469 s, not the
/// 3269 s a clock anchored at start keeps reporting.
async fn forward_step_moves_the_hourly_reset(
    engine: &Engine<CoarseClock>,
    clock: &CoarseClock,
    wall: &ManualClock,
) {
    let before = decide(engine, "hourly").await;
    assert_eq!(before.duration_until_reset, Some(Duration::from_secs(3269)));
    wall.advance(Duration::from_secs(1800));
    clock.tick();
    let after = decide(engine, "hourly").await;
    assert_eq!(after.code, Code::Ok);
    assert_eq!(after.duration_until_reset, Some(Duration::from_secs(1469)));
    assert_eq!(after.limit_remaining, 98);
}

/// Spends every five-per-minute key, steps the wall back 30 minutes and lets
/// it come back a second at a time: no key admits anything until it has, and
/// time never goes back; then a minute later each has its limit again.
async fn backward_step_admits_nothing(
    engine: &Engine<CoarseClock>,
    clock: &CoarseClock,
    wall: &ManualClock,
) {
    for key in five_per_minute() {
        assert_eq!(oks(engine, key, 10).await, 5, "{key}");
    }
    let held = clock.now();
    wall.set(Timestamp::from_nanos(
        held.as_nanos() - 1800 * NANOS_PER_SEC,
    ));
    for _ in 0..1800 {
        assert_eq!(clock.tick(), held, "time holds while the wall is behind");
        for key in five_per_minute() {
            assert_eq!(
                oks(engine, key, 1).await,
                0,
                "{key} admitted after a step back"
            );
        }
        wall.advance(Duration::from_secs(1));
    }
    wall.advance(Duration::from_secs(120));
    assert_eq!(clock.tick(), held.saturating_add(Duration::from_secs(120)));
    for key in five_per_minute() {
        assert_eq!(oks(engine, key, 10).await, 5, "{key} two minutes on");
    }
}

#[tokio::test]
async fn in_memory_windows_follow_a_forward_step_of_the_wall() {
    let (clock, wall) = stepped_clock(HOUR_START + 331);
    let engine = Engine::new(rules(), EngineOptions::default(), clock.clone());
    forward_step_moves_the_hourly_reset(&engine, &clock, &wall).await;
}

#[tokio::test]
async fn in_memory_a_backward_step_of_the_wall_admits_nothing_past_a_limit() {
    let (clock, wall) = stepped_clock(HOUR_START + 20);
    let engine = Engine::new(rules(), EngineOptions::default(), clock.clone());
    backward_step_admits_nothing(&engine, &clock, &wall).await;
}

/// An engine on Redis whose server is then killed, so every `local` rule is
/// decided by the store's in-process fallback, on the engine's clock.
async fn engine_on_a_dead_redis(clock: &CoarseClock) -> (Engine<CoarseClock>, RedisServer) {
    let mut redis = RedisServer::start();
    let store = RedisStore::connect(&redis.url(), Duration::from_millis(50))
        .await
        .expect("redis answers");
    redis.kill();
    let remote = RemoteStore::new(store, RemoteOptions::default());
    let engine = Engine::with_remote(rules(), EngineOptions::default(), clock.clone(), remote);
    (engine, redis)
}

#[tokio::test]
async fn the_redis_fallback_follows_a_forward_step_of_the_wall() {
    let (clock, wall) = stepped_clock(HOUR_START + 331);
    let (engine, _redis) = engine_on_a_dead_redis(&clock).await;
    forward_step_moves_the_hourly_reset(&engine, &clock, &wall).await;
    let remote = engine.remote().expect("a remote store");
    let local = remote.stats().fallback_local.load(Ordering::Relaxed);
    assert_eq!(local, 2, "both calls were decided by the local fallback");
}

#[tokio::test]
async fn the_redis_fallback_admits_nothing_past_a_limit_after_a_backward_step() {
    let (clock, wall) = stepped_clock(HOUR_START + 20);
    let (engine, _redis) = engine_on_a_dead_redis(&clock).await;
    backward_step_admits_nothing(&engine, &clock, &wall).await;
}
