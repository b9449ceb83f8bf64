//! Engines sharing one real Redis with quota leases: exactly the limit under demand (never over it), serving through an outage, and a reload that changes a limit.
//!
//! Each engine is one instance with its own lease book (its own
//! `RemoteStore`), all on one `redis-server`. Limits are per hour so
//! nothing refills during a test; the engines' clocks are manual (a lease's
//! end is measured on them), Redis keeps its own `TIME`; each test starts
//! clear of an hour's edge on Redis's clock, so it sees one fixed window.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate_core::{Clock, ManualClock, Timestamp};
use tollgate_protocol::rls::{Code, Descriptor, RateLimitRequest};
use tollgate_redis::RedisStore;
use tollgate_rules::{LoadOptions, RuleSet, load_sources};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions};
use tollgate_testkit::limits::exact_rate_limit;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::redis_cluster::RedisCluster;

/// The leased algorithms.
const LEASED: [&str; 4] = ["fixed_window", "token_bucket", "gcra", "leaky_bucket"];

/// One rule per leased algorithm, `limit` per hour, leased for `lease`, `on_store_error: deny`.
fn rules(limit: u64, lease: &str) -> Arc<RuleSet> {
    let mut yaml = String::from("domain: lease\ndescriptors:\n");
    for algorithm in LEASED {
        yaml.push_str(&format!(
            "  - key: {algorithm}\n    on_store_error: deny\n    lease: {lease}\n    rate_limit: {}\n",
            exact_rate_limit(limit, "hour", algorithm)
        ));
    }
    let loaded = load_sources(
        [(Path::new("lease.yaml"), yaml.as_str())],
        LoadOptions::default(),
    );
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    Arc::new(loaded.rule_set)
}

fn request(key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "lease".to_owned(),
        descriptors: vec![Descriptor::new([(key, value)])],
        hits_addend: 0,
    }
}

/// `instances` engines on `url`, each its own instance, on `clock`.
async fn fleet(
    url: &str,
    instances: u64,
    rules: &Arc<RuleSet>,
    clock: &ManualClock,
) -> Vec<Arc<Engine<ManualClock>>> {
    let mut engines = Vec::new();
    for _ in 0..instances {
        let redis = RedisStore::connect(url, Duration::from_secs(2))
            .await
            .expect("Redis answers");
        let remote = RemoteStore::new(
            redis,
            RemoteOptions {
                expected_instances: instances,
                ..RemoteOptions::default()
            },
        );
        engines.push(Arc::new(Engine::with_remote(
            Arc::clone(rules),
            EngineOptions::default(),
            clock.clone(),
            remote,
        )));
    }
    engines
}

/// Waits (at most 61 s) until Redis's clock is more than 60 s before the next hour.
async fn clear_of_an_hour_edge(redis: &RedisServer) {
    let hour = Duration::from_secs(3600);
    tokio::time::sleep(redis.wait_clear_of_window_end(hour, Duration::from_secs(60))).await;
}

/// The engines' clock, which never moves in these tests.
const START: u64 = 1_700_000_000;

/// Whether `engine` holds leased units not spent yet.
fn holds_units(engine: &Engine<ManualClock>) -> bool {
    engine
        .remote()
        .is_some_and(|remote| remote.leases().outstanding(Timestamp::from_secs(START)) > 0)
}

async fn is_ok(engine: &Engine<ManualClock>, request: &RateLimitRequest) -> bool {
    engine.decide(request).await.expect("valid").overall == Code::Ok
}

/// Units the engines' schedule leases left unspent when a next grant replaced them.
fn stranded(engines: &[Arc<Engine<ManualClock>>]) -> u64 {
    engines
        .iter()
        .map(|e| {
            e.remote()
                .expect("Redis")
                .leases()
                .stats()
                .stranded_units
                .load(Ordering::Relaxed)
        })
        .sum()
}

/// Demand above the limit on every instance: 64 callers per engine (256 in
/// flight for 4), each calling until its engine has seen 16 denials and
/// holds no leased units, or has made 2000 calls. Returns how many were
/// admitted. (A caller denied while another caller's lease grant, the
/// pool's last units, is on its way counts a denial before the units
/// arrive: stopping on denials alone left up to a lease unspent.)
async fn saturate(engines: &[Arc<Engine<ManualClock>>], request: &RateLimitRequest) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for engine in engines {
        let denials = Arc::new(AtomicU64::new(0));
        let calls = Arc::new(AtomicU64::new(0));
        for _ in 0..64 {
            let (engine, request) = (Arc::clone(engine), request.clone());
            let (admitted, denials, calls) = (
                Arc::clone(&admitted),
                Arc::clone(&denials),
                Arc::clone(&calls),
            );
            tasks.push(tokio::spawn(async move {
                while (denials.load(Ordering::Relaxed) < 16 || holds_units(&engine))
                    && calls.fetch_add(1, Ordering::Relaxed) < 2000
                {
                    if is_ok(&engine, &request).await {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    } else {
                        denials.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("the caller finishes");
    }
    admitted.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_leased_instances_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    clear_of_an_hour_edge(&redis).await;
    four_instances_on(&redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_leased_instances_on_a_cluster_admit_exactly_the_limit() {
    let cluster = RedisCluster::start();
    clear_of_an_hour_edge(&cluster.nodes[0]).await;
    four_instances_on(&cluster.url()).await;
}

/// 4 instances at `url`, 256 in flight, every leased algorithm with 2000 per hour.
async fn four_instances_on(url: &str) {
    let clock = ManualClock::new(Timestamp::from_secs(START));
    let limit = 2000;
    let rules = rules(limit, "10s");
    let engines = fleet(url, 4, &rules, &clock).await;
    for algorithm in LEASED {
        let stranded_before = stranded(&engines);
        let admitted = saturate(&engines, &request(algorithm, "hot")).await;
        let stranded = stranded(&engines) - stranded_before;
        eprintln!("{algorithm}: {admitted} of {limit} admitted, {stranded} stranded at refills");
        // Every instance calls until it sees denials itself, so none stops
        // with units in its lease, and nothing refills within the hour:
        // the limit passes, less only what a schedule's refill left in the
        // lease it replaced (docs/operations.md), and never more.
        assert!(
            admitted <= limit,
            "{algorithm}: {admitted} admitted for a limit of {limit}"
        );
        assert_eq!(
            admitted + stranded,
            limit,
            "{algorithm}: {admitted} admitted and {stranded} stranded for a limit of {limit}"
        );
        if algorithm == "fixed_window" {
            assert_eq!(stranded, 0, "a window's next grant joins its lease");
        }
    }
    let leased: u64 = engines
        .iter()
        .map(|e| {
            e.remote()
                .expect("Redis")
                .stats()
                .leased
                .load(Ordering::Relaxed)
        })
        .sum();
    assert!(leased > 0, "some requests were answered from leases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_keep_serving_through_a_redis_outage_then_on_store_error_answers() {
    let mut redis = RedisServer::start();
    clear_of_an_hour_edge(&redis).await;
    let clock = ManualClock::new(Timestamp::from_secs(START));
    let rules = rules(1000, "1h");
    let engines = fleet(&redis.url(), 1, &rules, &clock).await;
    let engine = &engines[0];
    let remote = engine.remote().expect("Redis");
    let hot = request("fixed_window", "outage");
    // Sequential demand grows the lease (slow start).
    for _ in 0..40 {
        assert!(is_ok(engine, &hot).await);
    }
    let held = remote.leases().outstanding(clock.now());
    assert!(held > 0, "a lease is held");
    redis.kill();
    let mut served = 0;
    for _ in 0..held + 5 {
        if is_ok(engine, &hot).await {
            served += 1;
        }
    }
    assert_eq!(
        served, held,
        "exactly the leased units are served while Redis is down"
    );
    assert!(
        remote.stats().fallback.load(Ordering::Relaxed) > 0,
        "then on_store_error (deny) answers"
    );
    redis.restart();
    // The breaker probes again after its backoff (100 ms on the engine's clock).
    clock.advance(Duration::from_secs(2));
    let mut back = false;
    for _ in 0..10 {
        if is_ok(engine, &hot).await {
            back = true;
            break;
        }
        clock.advance(Duration::from_secs(2));
    }
    assert!(back, "exact decisions resume once Redis is back");
}

/// A reload that changes the limit while leases are outstanding: the old
/// leases go back and are never spent under the new limit, and the window
/// carries on with one count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changing_the_limit_returns_the_leases_and_keeps_one_count() {
    let redis = RedisServer::start();
    clear_of_an_hour_edge(&redis).await;
    let clock = ManualClock::new(Timestamp::from_secs(START));
    let engines = fleet(&redis.url(), 1, &rules(100, "1h"), &clock).await;
    let hot = request("fixed_window", "reload");
    for _ in 0..20 {
        assert!(is_ok(&engines[0], &hot).await);
    }
    let remote = Arc::clone(engines[0].remote().expect("Redis"));
    assert!(
        remote.leases().outstanding(clock.now()) > 0,
        "a lease is held"
    );
    let raised = Arc::new(engines[0].with_rules(rules(30, "1h")));
    // The return runs in the background: wait (bounded) until nothing is outstanding.
    for _ in 0..200 {
        if remote.leases().stats().return_calls.load(Ordering::Relaxed) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        remote
            .leases()
            .stats()
            .returned_units
            .load(Ordering::Relaxed)
            > 0
    );
    let after = saturate(std::slice::from_ref(&raised), &hot).await;
    assert!(20 + after <= 30, "{after} admitted after the reload");
    // Units stranded in a grant that was in flight when the callers stopped
    // go back at the next return; one caller then takes exactly the rest.
    remote.return_leases(clock.now()).await;
    let mut rest = 0;
    for _ in 0..40 {
        rest += u64::from(is_ok(&raised, &hot).await);
    }
    assert_eq!(
        20 + after + rest,
        30,
        "one count across the reload, under the new limit"
    );
    let lowered = Arc::new(raised.with_rules(rules(10, "1h")));
    assert_eq!(saturate(std::slice::from_ref(&lowered), &hot).await, 0);
}

/// Waits until `counter` reaches `target`, polling every millisecond, at most 2 s.
async fn reach(counter: &AtomicU64, target: u64) {
    for _ in 0..2000 {
        if counter.load(Ordering::Relaxed) >= target {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One instance's engine in service, replaced by a reload while callers use it.
struct Instance {
    live: arc_swap::ArcSwap<Engine<ManualClock>>,
    /// Whether the engine in service is the reloaded one.
    reloaded: std::sync::atomic::AtomicBool,
}

/// Three instances on one Redis, a fixed window of 1000 lowered to 300
/// after about 618 were admitted, reloaded one at a time while 16 callers
/// per instance keep calling (each engine in service at its call), 8 rounds
/// on fresh keys: no engine admits past the limit it decides under, and the
/// reloaded ones admit no more than 300 less what was admitted before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_lowering_a_window_while_other_instances_lease_admits_nothing_past_it() {
    let redis = RedisServer::start();
    clear_of_an_hour_edge(&redis).await;
    let clock = ManualClock::new(Timestamp::from_secs(START));
    let (high, low) = (1000u64, 300u64);
    for round in 0..8 {
        let engines = fleet(&redis.url(), 3, &rules(high, "1s"), &clock).await;
        let fleet: Arc<Vec<Instance>> = Arc::new(
            engines
                .into_iter()
                .map(|e| Instance {
                    live: arc_swap::ArcSwap::new(e),
                    reloaded: false.into(),
                })
                .collect(),
        );
        let hot = request("fixed_window", &format!("round-{round}"));
        let admitted = Arc::new(AtomicU64::new(0));
        let after_reload = Arc::new(AtomicU64::new(0));
        let calls = Arc::new(AtomicU64::new(0));
        // About 618 admitted on the three instances, which hold leases.
        let warm: Vec<_> = (0..48)
            .map(|n| {
                let (fleet, hot, admitted) =
                    (Arc::clone(&fleet), hot.clone(), Arc::clone(&admitted));
                tokio::spawn(async move {
                    let engine = fleet[n % 3].live.load_full();
                    for _ in 0..100 {
                        if admitted.load(Ordering::Relaxed) >= 618 {
                            break;
                        }
                        if is_ok(&engine, &hot).await {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for caller in warm {
            caller.await.expect("the caller finishes");
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let callers: Vec<_> = (0..48)
            .map(|n| {
                let (fleet, hot) = (Arc::clone(&fleet), hot.clone());
                let (admitted, after_reload, calls, stop) = (
                    Arc::clone(&admitted),
                    Arc::clone(&after_reload),
                    Arc::clone(&calls),
                    Arc::clone(&stop),
                );
                tokio::spawn(async move {
                    let instance = &fleet[n % 3];
                    // Bounded: at most 20 000 calls in all.
                    while !stop.load(Ordering::Relaxed)
                        && calls.fetch_add(1, Ordering::Relaxed) < 20_000
                    {
                        let reloaded = instance.reloaded.load(Ordering::Acquire);
                        let engine = instance.live.load_full();
                        if is_ok(&engine, &hot).await {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            if reloaded {
                                after_reload.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        let before = admitted.load(Ordering::Relaxed);
        for instance in fleet.iter() {
            let next = Arc::new(instance.live.load().with_rules(rules(low, "1s")));
            instance.live.store(next);
            instance.reloaded.store(true, Ordering::Release);
            // Every instance calls on (600 calls) before the next reload.
            reach(&calls, calls.load(Ordering::Relaxed) + 600).await;
        }
        reach(&calls, calls.load(Ordering::Relaxed) + 600).await;
        stop.store(true, Ordering::Relaxed);
        for caller in callers {
            caller.await.expect("the caller finishes");
        }
        let (total, after) = (
            admitted.load(Ordering::Relaxed),
            after_reload.load(Ordering::Relaxed),
        );
        eprintln!(
            "round {round}: {before} admitted before the reloads, {total} in all, {after} by reloaded engines"
        );
        assert!(
            before >= 618,
            "round {round}: only {before} admitted before the reloads"
        );
        assert!(
            total <= high,
            "round {round}: {total} admitted under a limit of {high}"
        );
        assert!(
            after <= low.saturating_sub(before),
            "round {round}: {after} admitted after the reloads to {low}, {before} before"
        );
    }
}

/// `tasks` callers each checking `request` `each` times on `engine`; how many were admitted.
async fn hammer(
    engine: &Arc<Engine<ManualClock>>,
    request: &RateLimitRequest,
    tasks: u64,
    each: u64,
) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..tasks)
        .map(|_| {
            let (engine, request, admitted) =
                (Arc::clone(engine), request.clone(), Arc::clone(&admitted));
            tokio::spawn(async move {
                for _ in 0..each {
                    if is_ok(&engine, &request).await {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("the caller finishes");
    }
    admitted.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_costs_a_few_redis_calls_and_a_cold_key_no_more_than_the_exact_path() {
    let redis = RedisServer::start();
    clear_of_an_hour_edge(&redis).await;
    let clock = ManualClock::new(Timestamp::from_secs(1_000_000));
    let engine = fleet(&redis.url(), 1, &rules(1_000_000, "1h"), &clock)
        .await
        .remove(0);

    // A hot key, 64 callers in flight: leases refilled before they run out,
    // so the callers in flight meanwhile are not sent to Redis, and the
    // callers that find the lease spent wait for the grant on its way.
    let hot = request("fixed_window", "hot");
    assert_eq!(hammer(&engine, &hot, 64, 50).await, 64 * 50, "warm-up");
    let before = redis.script_calls();
    let checks = 64 * 200;
    let admitted = hammer(&engine, &hot, 64, 200).await;
    assert_eq!(
        admitted, checks,
        "far under the limit, every check is admitted"
    );
    let calls = redis.script_calls() - before;
    assert!(
        calls * 200 <= checks,
        "{calls} Redis calls for {checks} checks of one warm hot key: more than 1 in 200"
    );

    // Keys asked for once each: one exact call per check, no grant beside it.
    let before = redis.script_calls();
    for i in 0..500 {
        assert!(is_ok(&engine, &request("fixed_window", &format!("cold-{i}"))).await);
    }
    assert_eq!(
        redis.script_calls() - before,
        500,
        "one call per cold check"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_fewer_units_left_than_a_share_never_asks_for_a_grant() {
    // 10 per hour among 8 instances: a grant is at most 1/16 of what is
    // left, so it is always 0 units and asking would only cost a call.
    let redis = RedisServer::start();
    clear_of_an_hour_edge(&redis).await;
    let clock = ManualClock::new(Timestamp::from_secs(1_000_000));
    let engine = fleet(&redis.url(), 8, &rules(10, "1h"), &clock)
        .await
        .remove(0);
    // A first call on the fresh key.
    assert!(is_ok(&engine, &request("fixed_window", "warm-up")).await);
    for algorithm in LEASED {
        let request = request(algorithm, "few");
        let before = redis.script_calls();
        let mut admitted = 0;
        for _ in 0..12 {
            admitted += u64::from(is_ok(&engine, &request).await);
        }
        let calls = redis.script_calls() - before;
        assert_eq!(admitted, 10, "{algorithm}");
        // One exact call per admitted check, one for the first denial; the
        // last denial is answered by the quick-deny cache.
        assert!(
            calls <= 11,
            "{algorithm}: {calls} Redis calls for 12 checks of a key too small to lease"
        );
    }
}
