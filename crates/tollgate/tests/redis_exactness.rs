//! `tollgate serve` instances sharing one real Redis (or a 3-master cluster) admit exactly the limit.

mod rls_client;
mod rls_load;

use std::time::Duration;

use tonic::transport::Channel;

use rls_client::{call, channel, request};
use rls_load::admitted;
use tollgate_testkit::limits::exact_rate_limit;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::redis_cluster::RedisCluster;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;

/// The minute of Redis `TIME` on `clock`, and the seconds into it.
fn redis_minute(clock: &RedisServer) -> (u64, u64) {
    let out = clock.cli(&["TIME"]);
    let secs: u64 = out
        .lines()
        .next()
        .and_then(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("TIME answered {out:?}"));
    (secs / 60, secs % 60)
}

/// Redis `TIME` on `clock` in microseconds.
fn redis_micros(clock: &RedisServer) -> u64 {
    let out = clock.cli(&["TIME"]);
    let mut lines = out.lines().map(|line| line.trim().parse::<u64>().ok());
    match (lines.next().flatten(), lines.next().flatten()) {
        (Some(secs), Some(micros)) => secs * 1_000_000 + micros,
        _ => panic!("TIME answered {out:?}"),
    }
}

/// Units `algorithm` (100 a minute) may refill within `span_us` of Redis
/// time: a schedule (token bucket, GCRA, leaky bucket) gives one back every
/// 600 ms, so a burst slower than that rightly admits one more per 600 ms;
/// the windows and the log give back nothing within the burst's minute.
fn refills_within(algorithm: &str, span_us: u64) -> usize {
    match algorithm {
        "token_bucket" | "gcra" | "leaky_bucket" => {
            usize::try_from(span_us / 600_000).unwrap_or(usize::MAX)
        }
        _ => 0,
    }
}

/// Waits (at most 6 s) until Redis's clock is more than 5 s before the next
/// minute, so that a burst of well under 5 s sees one fixed window. Returns the minute.
async fn clear_of_a_minute_edge(clock: &RedisServer) -> u64 {
    let (minute, second) = redis_minute(clock);
    if second < 55 {
        return minute;
    }
    tokio::time::sleep(Duration::from_secs(61 - second)).await;
    redis_minute(clock).0
}

/// 256 calls on one key of `algorithm` (100 a minute) spread over
/// `channels`, started clear of a minute's edge on Redis's clock: exactly 100
/// pass, plus what a schedule refills while the burst lasts.
async fn burst_admits_the_limit(
    channels: &[Channel],
    algorithm: &str,
    key: &str,
    clock: &RedisServer,
) {
    let minute = clear_of_a_minute_edge(clock).await;
    let start = redis_micros(clock);
    let ok = admitted(channels, &request("exact", algorithm, key), 256).await;
    let refilled = refills_within(algorithm, redis_micros(clock).saturating_sub(start));
    assert_eq!(
        redis_minute(clock).0,
        minute,
        "{algorithm}: the burst took more than 5 s and crossed a minute"
    );
    assert!(
        (100..=refilled.saturating_add(100)).contains(&ok),
        "{algorithm}: {ok} of 256 calls over {} instances passed, where 100 \
         and at most {refilled} refilled units may",
        channels.len()
    );
}

/// 256 calls per algorithm spread over the instances at `store`: exactly 100
/// pass, plus what a schedule refills while the burst lasts.
///
/// Instance `i` runs with `--redis-encoding encodings[i % len]` (the
/// default without one).
///
/// The limit is 100 per minute on Redis's clock (read from `clock`), so each
/// burst starts clear of a minute's edge and must end in the same minute:
/// a fixed window that reset in the middle would rightly admit more.
async fn exactly_100_each(store: &str, instances: usize, clock: &RedisServer, encodings: &[&str]) {
    let scratch = TempDir::new(&format!("exact-{instances}-{}", store.len()));
    let config = scratch.limits(&every_algorithm(100));
    let servers: Vec<_> = (0..instances)
        .map(|i| {
            let mut flags = vec!["--store-timeout", "2s"];
            if !encodings.is_empty() {
                flags.extend(["--redis-encoding", encodings[i % encodings.len()]]);
            }
            Server::serve(&config, store, &flags)
        })
        .collect();
    let mut channels = Vec::new();
    for server in &servers {
        channels.push(channel(&server.address()).await);
    }
    for algorithm in ALGORITHMS {
        burst_admits_the_limit(&channels, algorithm, "one-key", clock).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_on_one_redis_admit_exactly_100_for_every_algorithm() {
    let redis = RedisServer::start();
    exactly_100_each(&redis.url(), 4, &redis, &[]).await;
    let stats = redis.cli(&["INFO", "commandstats"]);
    assert!(
        stats.contains("cmdstat_fcall:"),
        "checks are calls of the Functions library (FCALL): {stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_on_a_cluster_admit_exactly_100_for_every_algorithm() {
    let cluster = RedisCluster::start();
    exactly_100_each(&cluster.url(), 4, &cluster.nodes[0], &[]).await;
}

/// The middle of a rolling change of `--redis-encoding`: two instances
/// create counters as hashes, two packed and converting the hashes they
/// find. They share each counter's one state, so exactly the limit
/// passes, and afterwards every counter is packed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_and_packed_instances_on_one_redis_admit_exactly_100_for_every_algorithm() {
    let redis = RedisServer::start();
    exactly_100_each(&redis.url(), 4, &redis, &["hash", "packed"]).await;
    // Counter keys are binary (not for redis-cli's argv): counted in Redis,
    // as packed strings and as anything else.
    let by_type = redis.cli(&[
        "--raw",
        "EVAL",
        "local s, o = 0, 0 \
         for _, k in ipairs(redis.call('KEYS', 'tg{*')) do \
           if k ~= 'tg{ready}' then \
             if redis.call('TYPE', k).ok == 'string' then s = s + 1 else o = o + 1 end \
           end \
         end \
         return {s, o}",
        "0",
    ]);
    let by_type: Vec<u64> = by_type
        .split_whitespace()
        .map(|n| n.parse().expect("a count"))
        .collect();
    // A counter whose state has run out (a fixed window once its minute
    // ended, while a later burst waited for the next minute) is gone from
    // Redis: not every algorithm's key need still be there, but none may
    // still be a hash.
    let [strings, others] = by_type[..] else {
        panic!("two counts, got {by_type:?}");
    };
    assert_eq!(others, 0, "every hash was converted ({strings} packed)");
    assert!(
        (1..=ALGORITHMS.len() as u64).contains(&strings),
        "{strings} packed counters for {} algorithms",
        ALGORITHMS.len()
    );
}

/// Two instances whose clocks are a whole minute apart still share one
/// fixed window: decisions use Redis `TIME`, not the instances' clocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_with_skewed_clocks_decide_alike() {
    let redis = RedisServer::start();
    let scratch = TempDir::new("skew");
    let config = scratch.limits(&every_algorithm(100));
    let ahead = Server::serve(
        &config,
        &redis.url(),
        &["--store-timeout", "2s", "--clock-offset", "30s"],
    );
    let behind = Server::serve(
        &config,
        &redis.url(),
        &["--store-timeout", "2s", "--clock-offset=-30s"],
    );
    let channels = [
        channel(&ahead.address()).await,
        channel(&behind.address()).await,
    ];
    for algorithm in ALGORITHMS {
        burst_admits_the_limit(&channels, algorithm, "skewed", &redis).await;
    }
    // Both report the same reset for the same window (to Redis's clock, within a second).
    let minute = clear_of_a_minute_edge(&redis).await;
    let reset = |r: &tollgate_protocol::rls::wire::RateLimitResponse| {
        r.statuses[0]
            .duration_until_reset
            .as_ref()
            .map_or(0, |d| d.seconds)
    };
    let a = call(&channels[0], request("exact", "fixed_window", "skewed")).await;
    let b = call(&channels[1], request("exact", "fixed_window", "skewed")).await;
    assert_eq!(
        redis_minute(&redis).0,
        minute,
        "the two calls crossed a minute"
    );
    assert!((reset(&a) - reset(&b)).abs() <= 1, "{a:?} {b:?}");
}

/// Once a key is denied, the instance answers OVER_LIMIT itself until the
/// retry time (a fixed window's end): no Redis call per denied request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_fixed_window_is_denied_without_calling_redis() {
    let redis = RedisServer::start();
    let scratch = TempDir::new("quick-deny");
    let config = scratch.limits(&every_algorithm(3));
    let server = Server::serve(&config, &redis.url(), &["--store-timeout", "2s"]);
    let channel = channel(&server.address()).await;
    // Every script or function call (EVAL, EVALSHA, FCALL).
    let calls = || redis.script_calls();
    let fixed = request("exact", "fixed_window", "closed");
    let minute = clear_of_a_minute_edge(&redis).await;
    let oks = admitted(std::slice::from_ref(&channel), &fixed, 4).await;
    assert_eq!(oks, 3);
    let before = calls();
    // The four checks before the first denial each went to Redis: the
    // counter sees the script path (a count of 0 would prove nothing).
    assert!(before >= 4, "{before} script calls for the first 4 checks");
    assert_eq!(
        admitted(std::slice::from_ref(&channel), &fixed, 50).await,
        0
    );
    assert_eq!(redis_minute(&redis).0, minute, "the test crossed a minute");
    assert_eq!(
        calls(),
        before,
        "denials of a closed window cost no Redis call"
    );
    let answer = call(&channel, fixed).await;
    assert!(answer.statuses[0].duration_until_reset.is_some());
    // Every algorithm's denial is repeated until its retry time (a token
    // bucket of 3 per minute: 20 s), without a Redis call.
    let bucket = request("exact", "token_bucket", "closed");
    admitted(std::slice::from_ref(&channel), &bucket, 4).await;
    let before = calls();
    assert!(
        before >= 8,
        "{before} script calls after the token bucket's first 4 checks"
    );
    assert_eq!(
        admitted(std::slice::from_ref(&channel), &bucket, 5).await,
        0
    );
    assert_eq!(
        calls(),
        before,
        "denials of a token bucket cost no Redis call"
    );
}

/// One rule per algorithm, `limit` per minute, with `on_store_error: deny`
/// (a store error could only lower the count, never hide an over-admission).
fn every_algorithm(limit: u32) -> String {
    let mut yaml = String::from("domain: exact\ndescriptors:\n");
    for algorithm in ALGORITHMS {
        yaml.push_str(&format!(
            "  - key: {algorithm}\n    on_store_error: deny\n    rate_limit: {}\n",
            exact_rate_limit(u64::from(limit), "minute", algorithm)
        ));
    }
    yaml
}

const ALGORITHMS: [&str; 6] = [
    "fixed_window",
    "token_bucket",
    "gcra",
    "sliding_window",
    "sliding_log",
    "leaky_bucket",
];
