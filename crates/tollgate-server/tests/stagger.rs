//! `stagger: true`: each key's fixed windows start at its own offset, so keys do not all reset at once — in memory and on a real Redis.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{ManualClock, Timestamp};
use tollgate_protocol::rls::{Code, Descriptor, RateLimitRequest, RateLimitResponse};
use tollgate_redis::RedisStore;
use tollgate_rules::{LoadOptions, RuleSet, load_sources};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions};
use tollgate_testkit::redis::RedisServer;

const MINUTE: Duration = Duration::from_secs(60);

/// Two per minute on `user`, staggered or not.
fn rules(stagger: bool) -> Arc<RuleSet> {
    let yaml = format!(
        "domain: stagger\ndescriptors:\n  - key: user\n    stagger: {stagger}\n    rate_limit: {{unit: minute, requests_per_unit: 2}}\n"
    );
    let loaded = load_sources(
        [(Path::new("stagger.yaml"), yaml.as_str())],
        LoadOptions::default(),
    );
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    Arc::new(loaded.rule_set)
}

fn request(user: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "stagger".to_owned(),
        descriptors: vec![Descriptor::new([("user", user)])],
        hits_addend: 0,
    }
}

fn reset(response: &RateLimitResponse) -> Duration {
    response.statuses[0]
        .duration_until_reset
        .expect("a limited status says when it resets")
}

/// Time (from the clock's start, a whole minute) until each of 32 users'
/// window resets, read from its first answer.
async fn resets(engine: &Engine<ManualClock>) -> Vec<Duration> {
    let mut out = Vec::new();
    for i in 0..32 {
        let answer = engine
            .decide(&request(&format!("u{i}")))
            .await
            .expect("valid");
        out.push(reset(&answer));
    }
    out
}

/// The start: a whole minute on the engine's clock.
const START: Timestamp = Timestamp::from_secs(1_700_000_040);

#[tokio::test]
async fn staggered_keys_reset_at_their_own_instants_each_after_a_whole_window() {
    let clock = ManualClock::new(START);
    let aligned = Engine::new(rules(false), EngineOptions::default(), clock.clone());
    let aligned_resets = resets(&aligned).await;
    assert!(
        aligned_resets.iter().all(|r| *r == MINUTE),
        "without stagger every window ends on the minute: {aligned_resets:?}"
    );

    let staggered = Engine::new(rules(true), EngineOptions::default(), clock.clone());
    let staggered_resets = resets(&staggered).await;
    let mut distinct = staggered_resets.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() >= 24,
        "32 keys spread their resets over the minute: {staggered_resets:?}"
    );
    assert!(
        staggered_resets
            .iter()
            .all(|r| *r <= MINUTE && !r.is_zero())
    );

    // Each key still gets exactly 2 per window of its own: used up now,
    // still closed a millisecond before its reset, open again at it.
    let user = "u7";
    let until = staggered_resets[7];
    let second = staggered.decide(&request(user)).await.expect("valid");
    assert_eq!(second.overall, Code::Ok);
    let third = staggered.decide(&request(user)).await.expect("valid");
    assert_eq!(third.overall, Code::OverLimit);
    clock.advance(until - Duration::from_millis(1));
    let early = staggered.decide(&request(user)).await.expect("valid");
    assert_eq!(early.overall, Code::OverLimit, "closed until its own reset");
    clock.advance(Duration::from_millis(1));
    let open = staggered.decide(&request(user)).await.expect("valid");
    assert_eq!(open.overall, Code::Ok, "open at its own reset");
    assert_eq!(reset(&open), MINUTE, "a whole window from its own edge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_staggers_the_same_keys_by_the_same_offsets() {
    let redis = RedisServer::start();
    let clock = ManualClock::new(START);
    let memory = Engine::new(rules(true), EngineOptions::default(), clock.clone());
    let store = RedisStore::connect(&redis.url(), Duration::from_secs(2))
        .await
        .expect("Redis answers");
    let remote = RemoteStore::new(store, RemoteOptions::default());
    let shared = Engine::with_remote(rules(true), EngineOptions::default(), clock, remote);
    let in_memory = resets(&memory).await;
    let in_redis = resets(&shared).await;
    // Redis decides at its own TIME, not at START: the windows are the same
    // per key when the offsets are, so the differences between keys agree.
    let shift = |r: &[Duration]| -> Vec<i128> {
        r.iter()
            .map(|d| {
                let ns = d.as_nanos() as i128 - r[0].as_nanos() as i128;
                ns.rem_euclid(MINUTE.as_nanos() as i128)
            })
            .collect()
    };
    let (m, r) = (shift(&in_memory), shift(&in_redis));
    for (i, (a, b)) in m.iter().zip(&r).enumerate() {
        // The wire rounds nothing here; Redis works in microseconds and two
        // calls see TIME a little apart, so allow 50 ms.
        let gap = (a - b).rem_euclid(MINUTE.as_nanos() as i128);
        let gap = gap.min(MINUTE.as_nanos() as i128 - gap);
        assert!(
            gap <= 50_000_000,
            "user u{i}: offset {a} ns in memory, {b} ns on Redis"
        );
    }
}

#[test]
fn stagger_on_a_bucket_or_without_a_limit_is_an_error_naming_the_line() {
    for (yaml, wanted) in [
        (
            "domain: d\ndescriptors:\n  - key: k\n    stagger: true\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket}\n",
            "`stagger` shifts fixed windows only",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    stagger: true\n    descriptors:\n      - key: j\n        rate_limit: {unit: minute, requests_per_unit: 2}\n",
            "`stagger` needs a `rate_limit`",
        ),
    ] {
        let loaded = load_sources([(Path::new("s.yaml"), yaml)], LoadOptions::default());
        let text = loaded.diagnostics.to_string();
        assert!(
            loaded.diagnostics.has_errors() && text.contains(wanted) && text.contains("s.yaml:4"),
            "{text}"
        );
    }
}
