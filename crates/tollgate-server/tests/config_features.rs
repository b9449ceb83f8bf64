//! Upstream's config features answer as upstream does, with counters in memory and on a real redis-server: quota_mode and QUOTA_MODE, share_threshold, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, unlimited with `unit: unknown`, and counts kept when a reload changes only a limit's rate.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{ManualClock, Timestamp};
use tollgate_protocol::rls::{Code, Descriptor, RateLimitRequest};
use tollgate_redis::RedisStore;
use tollgate_rules::{LoadOptions, RuleSet, load_sources};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions};
use tollgate_testkit::redis::RedisServer;

/// An hour boundary, so hourly windows cannot end during a test in memory.
const HOUR_START: u64 = 1_699_999_200;

fn rules(yaml: &str) -> Arc<RuleSet> {
    let loaded = load_sources([(Path::new("t.yaml"), yaml)], LoadOptions::default());
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    Arc::new(loaded.rule_set)
}

/// Where the counters live.
enum Backend {
    Memory,
    Redis(RedisServer),
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis(_) => "redis",
        }
    }
}

/// Both backends: in memory, and a fresh redis-server.
fn backends() -> [Backend; 2] {
    [Backend::Memory, Backend::Redis(RedisServer::start())]
}

async fn engine(backend: &Backend, yaml: &str, options: EngineOptions) -> Engine<ManualClock> {
    let clock = ManualClock::new(Timestamp::from_secs(HOUR_START + 10));
    match backend {
        Backend::Memory => Engine::new(rules(yaml), options, clock),
        Backend::Redis(redis) => {
            // Redis counts on its own clock: hour windows, clear of one's end.
            tokio::time::sleep(
                redis.wait_clear_of_window_end(Duration::from_secs(3600), Duration::from_secs(60)),
            )
            .await;
            let store = RedisStore::connect(&redis.url(), Duration::from_secs(2))
                .await
                .expect("redis answers");
            let remote = RemoteStore::new(store, RemoteOptions::default());
            Engine::with_remote(rules(yaml), options, clock, remote)
        }
    }
}

fn request(descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".to_owned(),
        descriptors: descriptors
            .iter()
            .map(|entries| Descriptor::new(entries.iter().copied()))
            .collect(),
        hits_addend: 0,
    }
}

/// The overall code and each status's code of one call.
async fn codes(engine: &Engine<ManualClock>, descriptors: &[&[(&str, &str)]]) -> (Code, Vec<Code>) {
    let response = engine
        .decide(&request(descriptors))
        .await
        .expect("answered");
    assert!(
        engine
            .remote()
            .is_none_or(|r| r.stats().errors.load(std::sync::atomic::Ordering::Relaxed) == 0),
        "the store answered"
    );
    (
        response.overall,
        response.statuses.iter().map(|s| s.code).collect(),
    )
}

use Code::{Ok as OK, OverLimit as OVER};

/// One request descriptor's entries.
type Entries<'a> = &'a [(&'a str, &'a str)];

const QUOTAS: &str = "domain: d\ndescriptors:\n  - key: q1\n    quota_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: q2\n    quota_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: r\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: u\n    rate_limit: {unlimited: true, unit: unknown}\n";

/// Upstream's quota example: over-limit quota descriptors reject only when
/// all of the request's quota descriptors are over; ordinary ones always.
#[tokio::test]
async fn quota_mode_rejects_only_when_every_quota_descriptor_is_over() {
    let q1: &[(&str, &str)] = &[("q1", "a")];
    let q2: &[(&str, &str)] = &[("q2", "a")];
    let r: &[(&str, &str)] = &[("r", "a")];
    let u: &[(&str, &str)] = &[("u", "a")];
    for backend in backends() {
        let engine = engine(&backend, QUOTAS, EngineOptions::default()).await;
        let table: [(&[Entries<'_>], Code, Vec<Code>); 5] = [
            (&[q1, q2], OK, vec![OK, OK]),
            (&[q1, q2], OK, vec![OVER, OK]),
            (&[q1, q2, u], OVER, vec![OVER, OVER, OK]),
            (&[r], OK, vec![OK]),
            (&[r, q1], OVER, vec![OVER, OVER]),
        ];
        for (i, (descriptors, overall, statuses)) in table.into_iter().enumerate() {
            assert_eq!(
                codes(&engine, descriptors).await,
                (overall, statuses),
                "{} call {i}",
                backend.name()
            );
        }
    }
}

/// `QUOTA_MODE`: every descriptor is a quota descriptor (a descriptor
/// without a limit passes, so the request passes); unlimited ones do not count.
#[tokio::test]
async fn global_quota_mode_treats_every_descriptor_as_quota() {
    let r: &[(&str, &str)] = &[("r", "a")];
    let none: &[(&str, &str)] = &[("nothing", "a")];
    let u: &[(&str, &str)] = &[("u", "a")];
    let options = EngineOptions {
        global_quota_mode: true,
        ..EngineOptions::default()
    };
    for backend in backends() {
        let engine = engine(&backend, QUOTAS, options).await;
        let table: [(&[Entries<'_>], Code); 4] =
            [(&[r], OK), (&[r, none], OK), (&[r, u], OVER), (&[r], OVER)];
        for (i, (descriptors, overall)) in table.into_iter().enumerate() {
            assert_eq!(
                codes(&engine, descriptors).await.0,
                overall,
                "{} call {i}",
                backend.name()
            );
        }
    }
}

/// Upstream's README example: every value matching `files*` spends one
/// shared budget; without share_threshold each value has its own.
#[tokio::test]
async fn share_threshold_values_spend_one_budget() {
    let yaml = "domain: d\ndescriptors:\n  - key: path\n    value: files*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: path\n    value: docs*\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    for backend in backends() {
        let engine = engine(&backend, yaml, EngineOptions::default()).await;
        let table: [(&str, Code); 5] = [
            ("files/a", OK),
            ("files/b", OK),
            ("files/c", OVER),
            ("docs/a", OK),
            ("docs/b", OK),
        ];
        for (value, expected) in table {
            assert_eq!(
                codes(&engine, &[&[("path", value)]]).await.0,
                expected,
                "{} {value}",
                backend.name()
            );
        }
    }
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: a request rejected by one
/// descriptor spends nothing of the others; by default it spends them all.
#[tokio::test]
async fn stop_increment_keeps_rejected_requests_from_spending_other_limits() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";
    let a: &[(&str, &str)] = &[("a", "x")];
    let b: &[(&str, &str)] = &[("b", "x")];
    // (stop incrementing?, what `b` alone answers after three calls of [a, b])
    let table = [(true, [OK, OK, OVER]), (false, [OVER, OVER, OVER])];
    for (stop, then_b) in table {
        for backend in backends() {
            let options = EngineOptions {
                stop_increment_when_over_limit: stop,
                ..EngineOptions::default()
            };
            let engine = engine(&backend, yaml, options).await;
            for expected in [[OK, OK], [OVER, OK], [OVER, OK]] {
                assert_eq!(
                    codes(&engine, &[a, b]).await.1,
                    expected,
                    "{}",
                    backend.name()
                );
            }
            let response = engine.decide(&request(&[b])).await.expect("answered");
            if stop {
                assert_eq!(
                    response.statuses[0].limit_remaining,
                    1,
                    "{}",
                    backend.name()
                );
            }
            let mut alone = vec![response.statuses[0].code];
            for _ in 1..3 {
                alone.push(codes(&engine, &[b]).await.0);
            }
            assert_eq!(alone, then_b, "stop={stop} {}", backend.name());
        }
    }
}

/// `unlimited: true` with `unit: unknown` (as upstream's examples write it):
/// OK with remaining u32::MAX and no limit, never counted.
#[tokio::test]
async fn unlimited_with_unit_unknown_is_never_counted() {
    for backend in backends() {
        let engine = engine(&backend, QUOTAS, EngineOptions::default()).await;
        for _ in 0..3 {
            let response = engine
                .decide(&request(&[&[("u", "a")]]))
                .await
                .expect("answered");
            let status = &response.statuses[0];
            assert_eq!((status.code, status.limit_remaining), (OK, u32::MAX));
            assert!(status.current_limit.is_none());
        }
    }
}

/// Lowering 5/hour to 2/hour keeps the count (upstream's key ignores the
/// limit): a client that used 3 is over at once, and raising it back to 5
/// leaves it what it had left. Windows keep their counts (a sliding window
/// in memory caps them at the lowered limit, but the raise carries from the
/// 5/hour store too, so all 3 come back); token buckets and GCRA keep the
/// time until they are full again (3 of 5 used is 2160 s to full, more than
/// 2/hour holds, and 3 used again at 5/hour).
#[tokio::test]
async fn a_reload_that_only_changes_the_rate_keeps_the_count() {
    let at = |n: u32, algorithm: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: hour, requests_per_unit: {n}, algorithm: {algorithm}}}\n"
        )
    };
    // (algorithm, remaining after the raise in memory, on Redis)
    let table = [
        ("fixed_window", 1, 1),
        ("sliding_window", 1, 1),
        ("sliding_log", 1, 1),
        ("token_bucket", 1, 1),
        ("gcra", 1, 1),
    ];
    for (algorithm, in_memory, on_redis) in table {
        for backend in backends() {
            let engine = engine(&backend, &at(5, algorithm), EngineOptions::default()).await;
            for _ in 0..3 {
                assert_eq!(codes(&engine, &[&[("k", "v")]]).await.0, OK);
            }
            let lowered = engine.with_rules(rules(&at(2, algorithm)));
            assert_eq!(
                codes(&lowered, &[&[("k", "v")]]).await.0,
                OVER,
                "{algorithm} {}: the count of 3 carried over to a limit of 2",
                backend.name()
            );
            let raised = lowered.with_rules(rules(&at(5, algorithm)));
            let response = raised
                .decide(&request(&[&[("k", "v")]]))
                .await
                .expect("answered");
            let remaining = match backend {
                Backend::Memory => in_memory,
                Backend::Redis(_) => on_redis,
            };
            assert_eq!(
                (
                    response.statuses[0].code,
                    response.statuses[0].limit_remaining
                ),
                (OK, remaining),
                "{algorithm} {}: the count carried back to a limit of 5",
                backend.name()
            );
        }
    }
}
