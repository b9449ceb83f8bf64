//! `tollgate serve` configured by envoyproxy/ratelimit's variables: Redis auth, types, statsd, refusals.

mod rls_client;
mod rls_load;

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::time::Duration;

use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use rls_client::{channel, request};
use rls_load::admitted;
use tollgate_testkit::budget::{BUDGET, Stopwatch};
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::redis_cluster::RedisCluster;
use tollgate_testkit::redis_sentinel::Sentinel;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, Server};
use tollgate_testkit::window::{self, DAY, DAY_MARGIN};
use tollgate_testkit::xds::AdsServer;

/// 2 per day for `k`; a store error denies, so only a working store admits anything.
const LIMITS: &str = "domain: u
descriptors:
  - key: k
    on_store_error: deny
    rate_limit: {unit: day, requests_per_unit: 2}
";

/// `serve --config CONFIG` on ephemeral loopback ports with a generous store timeout, plus `extra`.
fn serve_args<'a>(config: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["serve", "--config", config];
    args.extend_from_slice(&EPHEMERAL_ADDRS);
    args.extend_from_slice(&["--store-timeout", "2s"]);
    args.extend_from_slice(extra);
    args
}

/// A redis-server that requires the password `s3cret`.
fn password_protected_redis() -> RedisServer {
    let redis = RedisServer::start();
    assert_eq!(
        redis
            .cli(&["CONFIG", "SET", "requirepass", "s3cret"])
            .trim(),
        "OK"
    );
    redis
}

/// Starting against a Redis that refuses the (missing) password used to
/// succeed and then answer every request with the rule's `on_store_error`;
/// now it stops start-up (an unreachable Redis does not: it is waited for).
#[test]
fn a_store_that_cannot_authenticate_stops_start_up() {
    let redis = password_protected_redis();
    let scratch = TempDir::new("noauth");
    let config = scratch.limits(LIMITS);
    let url = redis.url();
    let mut server = Server::spawn(&serve_args(config.to_str().unwrap(), &["--store", &url]));
    let (code, lines, stderr) = server.finish();
    assert_eq!(code, Some(1), "stdout {lines:?}, stderr {stderr}");
    assert!(stderr.contains("NOAUTH"), "{stderr}");
    assert!(lines.is_empty(), "it announced listening: {lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_auth_wrong_stops_start_up_and_right_counts_in_redis() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let redis = password_protected_redis();
    let scratch = TempDir::new("auth");
    let config = scratch.limits(LIMITS);
    let url = format!("127.0.0.1:{}", redis.port);
    let args = serve_args(config.to_str().unwrap(), &[]);
    let env = |auth: &'static str| {
        vec![
            ("REDIS_URL", url.as_str()),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_AUTH", auth),
        ]
    };
    let wrong = env("wrong");
    let mut refused = Server::spawn_with_env(&args, &wrong);
    let (code, _, stderr) = refused.finish();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("authentication failed"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("s3cret") && !stderr.contains(":wrong@"),
        "{stderr}"
    );

    let right = env("s3cret");
    let server = Server::spawn_with_env(&args, &right);
    let channel = channel(&server.address()).await;
    assert_eq!(admitted(&[channel], &request("u", "k", "v"), 5).await, 2);
    let keys = redis.cli(&["-a", "s3cret", "--no-auth-warning", "DBSIZE"]);
    assert_eq!(keys.trim(), "1", "the counter is in the protected Redis");
}

/// Serves [`LIMITS`] with the store `env` describes and checks that it admits exactly 2 of 5.
async fn admits_two_of_five(name: &str, env: &[(&str, &str)]) {
    let scratch = TempDir::new(name);
    let config = scratch.limits(LIMITS);
    let server = Server::spawn_with_env(&serve_args(config.to_str().unwrap(), &[]), env);
    let channel = channel(&server.address()).await;
    assert_eq!(admitted(&[channel], &request("u", "k", "v"), 5).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_type_cluster_reads_a_list_of_nodes() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let cluster = RedisCluster::start();
    let url = cluster.url();
    let nodes = url.trim_start_matches("redis-cluster://");
    let env = [
        ("REDIS_URL", nodes),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "cluster"),
    ];
    admits_two_of_five("cluster-env", &env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_type_sentinel_reads_the_master_name_then_sentinels() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let master = RedisServer::start();
    let sentinel = Sentinel::start(&master);
    let url = format!("mymaster,127.0.0.1:{}", sentinel.port);
    let env = [
        ("REDIS_URL", url.as_str()),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "sentinel"),
    ];
    admits_two_of_five("sentinel-env", &env).await;
    assert_eq!(
        master.cli(&["DBSIZE"]).trim(),
        "1",
        "the counter is in the master"
    );
}

/// Sums statsd counter lines by name, and counts timer lines, from `socket` until `done` or the budget.
fn read_statsd(
    socket: &UdpSocket,
    done: impl Fn(&BTreeMap<String, u64>, usize) -> bool,
) -> (BTreeMap<String, u64>, usize) {
    let mut counters = BTreeMap::new();
    let mut timers = 0;
    let watch = Stopwatch::start();
    let mut buffer = [0_u8; 2048];
    while !done(&counters, timers) && !watch.exceeded(BUDGET) {
        let Ok(n) = socket.recv(&mut buffer) else {
            continue;
        };
        for line in String::from_utf8_lossy(&buffer[..n]).lines() {
            let (name, rest) = line.split_once(':').expect("name:value|type");
            if let Some(value) = rest.strip_suffix("|c") {
                *counters.entry(name.to_owned()).or_default() +=
                    value.parse::<u64>().expect("a whole count");
            } else if rest.ends_with("|ms")
                && name == "ratelimit_server.ShouldRateLimit.response_time"
            {
                timers += 1;
            }
        }
    }
    (counters, timers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_statsd_sends_upstreams_stat_names_over_udp() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a read timeout");
    let port = socket.local_addr().expect("bound").port().to_string();
    let scratch = TempDir::new("statsd");
    let config = scratch.limits(LIMITS);
    let env = [
        ("USE_STATSD", "true"),
        ("STATSD_PROTOCOL", "udp"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", port.as_str()),
        ("STATS_FLUSH_INTERVAL", "50ms"),
    ];
    let server = Server::spawn_with_env(
        &serve_args(config.to_str().unwrap(), &["--store", "memory"]),
        &env,
    );
    let channel = channel(&server.address()).await;
    assert_eq!(admitted(&[channel], &request("u", "k", "v"), 3).await, 2);
    let (counters, timers) = tokio::task::spawn_blocking(move || {
        read_statsd(&socket, |c, timers| {
            c.get("ratelimit_server.ShouldRateLimit.total_requests") == Some(&3) && timers == 3
        })
    })
    .await
    .expect("the reader ends");
    for (name, value) in [
        ("ratelimit.service.rate_limit.u.k.total_hits", 3),
        ("ratelimit.service.rate_limit.u.k.within_limit", 2),
        ("ratelimit.service.rate_limit.u.k.over_limit", 1),
        ("ratelimit_server.ShouldRateLimit.total_requests", 3),
        ("ratelimit.service.config_load_success", 1),
    ] {
        assert_eq!(counters.get(name), Some(&value), "{name} in {counters:?}");
    }
    assert_eq!(timers, 3, "one response_time per call");
}

/// A variable that asks for what Tollgate does not do stops it at start, naming the variable.
#[test]
fn a_refused_variable_stops_start_up_naming_it() {
    let scratch = TempDir::new("refused");
    let config = scratch.limits(LIMITS);
    for (name, value) in [
        ("BACKEND_TYPE", "memcache"),
        ("CONFIG_TYPE", "GRPC_XDS_DELTA"),
        ("REDIS_PERSECOND", "true"),
    ] {
        let mut server = Server::spawn_with_env(
            &serve_args(config.to_str().unwrap(), &["--store", "memory"]),
            &[(name, value)],
        );
        let (code, lines, stderr) = server.finish();
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(stderr.contains(name), "{name}: {stderr}");
        assert!(lines.is_empty(), "{name}: it listened: {lines:?}");
    }
}

/// Configured as Envoy Gateway configures envoyproxy/ratelimit
/// (`CONFIG_TYPE=GRPC_XDS_SOTW`, the xDS server's URL, a node id and
/// metadata, `FORCE_START_WITHOUT_INITIAL_CONFIG=true`), `serve` listens at
/// once (unlimited until a config arrives, as forced) and then takes its
/// limits from the xDS server; it used to refuse `CONFIG_TYPE=GRPC_XDS_SOTW`
/// at start. With `--config` too it refuses to guess which source is meant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_type_grpc_xds_sotw_takes_the_limits_from_the_xds_server() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let ads = AdsServer::start().await;
    let url = ads.addr().to_string();
    let xds_env = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", url.as_str()),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-gateway"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "cluster=eg,zone=a"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
    ];
    let mut args = vec!["serve", "--store", "memory"];
    args.extend_from_slice(&EPHEMERAL_ADDRS);
    let server = Server::spawn_with_env(&args, &xds_env);
    let channel = channel(&server.address()).await;
    let one = request("u", "k", "x");
    assert_eq!(
        admitted(std::slice::from_ref(&channel), &one, 3).await,
        3,
        "forced to start: unlimited until the first config"
    );
    let subscription = ads.next_request().await;
    let node = subscription.node.expect("the node is named");
    assert_eq!(node.id, "envoy-gateway");
    let metadata = node.metadata.expect("node metadata").fields;
    assert_eq!(
        metadata.get("cluster").and_then(|v| v.kind.clone()),
        Some(Kind::StringValue("eg".to_owned()))
    );
    ads.serve(
        "1",
        &[RateLimitConfig {
            name: "u".to_owned(),
            domain: "u".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                key: "k".to_owned(),
                rate_limit: Some(RateLimitPolicy {
                    unit: RateLimitUnit::Day as i32,
                    requests_per_unit: 2,
                    ..RateLimitPolicy::default()
                }),
                ..RateLimitDescriptor::default()
            }],
        }],
    );
    assert!(ads.reply_to("1").await.error_detail.is_none());
    assert_eq!(
        admitted(&[channel], &one, 3).await,
        2,
        "2 a day, from the xDS server (counting starts with the config)"
    );

    let scratch = TempDir::new("xds-and-config");
    let config = scratch.limits(LIMITS);
    let mut both = Server::spawn_with_env(
        &serve_args(config.to_str().unwrap(), &["--store", "memory"]),
        &xds_env,
    );
    let (code, lines, stderr) = both.finish();
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--config"), "{stderr}");
    assert!(lines.is_empty(), "it listened: {lines:?}");
}

/// `TOLLGATE_REDIS_KEY_FORMAT=upstream` in upstream's environment: a count an
/// envoyproxy/ratelimit pod left in its key (`CACHE_KEY_PREFIX` + `u_k_v_` +
/// the day's start, INCRBY + EXPIRE) is the count `serve` goes on with, in
/// the same key, with upstream's TTL; a rule upstream could not write keeps
/// Tollgate's key and is named at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_key_format_counts_on_in_the_key_an_upstream_pod_wrote() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let redis = RedisServer::start();
    let scratch = TempDir::new("upstream-keys");
    let config = scratch.limits(&format!(
        "{LIMITS}  - key: b\n    rate_limit: {{unit: day, requests_per_unit: 2, algorithm: token_bucket}}\n"
    ));
    let time = redis.cli(&["TIME"]);
    let now_s: u64 = time
        .lines()
        .next()
        .expect("TIME")
        .trim()
        .parse()
        .expect("seconds");
    let key = format!("app_u_k_v_{}", now_s / 86_400 * 86_400);
    // The upstream pod's one request, as its Redis cache makes it.
    redis.cli(&["INCRBY", &key, "1"]);
    redis.cli(&["EXPIRE", &key, "86400"]);

    let url = format!("127.0.0.1:{}", redis.port);
    let env = [
        ("REDIS_URL", url.as_str()),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("CACHE_KEY_PREFIX", "app_"),
        ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
        ("TOLLGATE_REDIS_KEY_FORMAT", "upstream"),
    ];
    let mut server = Server::spawn_with_env(&serve_args(config.to_str().unwrap(), &[]), &env);
    let channel = channel(&server.address()).await;
    assert_eq!(
        admitted(&[channel], &request("u", "k", "v"), 5).await,
        1,
        "the upstream pod spent one of the two"
    );
    // Each request that reached Redis counted, denied or not (the
    // quick-deny cache may answer the last ones without a call).
    let count: u64 = redis
        .cli(&["GET", &key])
        .trim()
        .parse()
        .expect("an integer");
    assert!((3..=6).contains(&count), "{count}");
    assert_eq!(redis.cli(&["TTL", &key]).trim(), "86400");
    assert_eq!(
        redis.cli(&["DBSIZE"]).trim(),
        "1",
        "no key of Tollgate's own"
    );

    server.terminate();
    let (_, _, stderr) = server.finish();
    assert!(
        stderr.contains("keep Tollgate's keys") && stderr.contains("not a fixed window"),
        "{stderr}"
    );
}

/// `--redis-key-format upstream` without a Redis store says at start that it changes nothing.
#[test]
fn upstream_key_format_in_memory_is_named_as_changing_nothing() {
    let scratch = TempDir::new("upstream-keys-memory");
    let config = scratch.limits(LIMITS);
    let args = serve_args(
        config.to_str().unwrap(),
        &["--store", "memory", "--redis-key-format", "upstream"],
    );
    let mut server = Server::spawn(&args);
    let _ = server.address();
    server.terminate();
    let (_, _, stderr) = server.finish();
    assert!(
        stderr.contains("--redis-key-format upstream changes nothing"),
        "{stderr}"
    );
}
