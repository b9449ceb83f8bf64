//! Redis killed, hung and restarted under a running `tollgate serve`: every call is answered by its rule's policy.

mod rls_client;
mod rls_load;

use std::time::Duration;

use rls_client::{call, channel, is_ok, request};
use rls_load::admitted;
use tollgate_testkit::budget::Stopwatch;
use tollgate_testkit::ports::free_port;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tollgate_testkit::window::{self, DAY, DAY_MARGIN};
use tonic::transport::Channel;

const LIMITS: &str = "domain: faults
descriptors:
  - key: open
    rate_limit:
      unit: day
      requests_per_unit: 1
  - key: closed
    on_store_error: deny
    rate_limit:
      unit: day
      requests_per_unit: 1000
  - key: local
    on_store_error: local
    rate_limit:
      unit: day
      requests_per_unit: 10
";

/// `GET path`: the status code and body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let response = tollgate_testkit::http::exchange(addr, "GET", path, &[], "");
    (response.status, response.body)
}

/// OKs out of `n` sequential calls of `key`.
async fn oks(channel: &Channel, key: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(is_ok(&call(channel, request("faults", key, "x")).await));
    }
    ok
}

/// Calls `key` every 20 ms until the answer is `want_ok`; how long that took (at most `budget`).
async fn until(channel: &Channel, key: &str, want_ok: bool, budget: Duration) -> Duration {
    let start = Stopwatch::start();
    // Bounded: at most budget / 20 ms attempts.
    for _ in 0..budget.as_millis() / 20 {
        if is_ok(&call(channel, request("faults", key, "x")).await) == want_ok {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "`{key}` did not turn {} within {budget:?}",
        if want_ok { "OK" } else { "OVER_LIMIT" }
    );
}

/// Threads and resident memory (kB) of a process, from /proc.
fn threads_and_rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("Threads:"), field("VmRSS:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_answers_while_redis_is_down_and_the_store_comes_back() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let mut redis = RedisServer::start();
    let scratch = TempDir::new("faults");
    let config = scratch.limits(LIMITS);
    let mut server = Server::serve(
        &config,
        &redis.url(),
        &["--store-timeout", "50ms", "--expected-instances", "2"],
    );
    let addr = server.address();
    let http = server.line_after("http listening on ");
    let channel = channel(&addr).await;

    // Up: counters are in Redis.
    assert_eq!(
        oks(&channel, "open", 3).await,
        1,
        "1 per day while Redis counts"
    );
    assert_eq!(oks(&channel, "closed", 3).await, 3);
    assert_eq!(http_get(&http, "/readyz").0, 200);
    let (threads_before, rss_before) = threads_and_rss(server.child.id());

    // Killed: each rule answers by its policy.
    redis.kill();
    // The window of `open` is known to be closed (quick-deny cache): still denied.
    assert_eq!(
        oks(&channel, "open", 5).await,
        0,
        "a closed window stays closed"
    );
    assert_eq!(
        oks(&channel, "closed", 20).await,
        0,
        "deny rejects everything"
    );
    assert_eq!(
        oks(&channel, "local", 20).await,
        5,
        "local allows 10 / 2 instances"
    );
    // Under load: 256 calls at once of a key Redis never saw, every one
    // answered by its policy (allow).
    let burst = request("faults", "open", "burst");
    assert_eq!(
        admitted(std::slice::from_ref(&channel), &burst, 256).await,
        256
    );
    // Still ready (each rule answers by its policy); the store's own endpoint says it is down.
    assert_eq!(http_get(&http, "/readyz"), (200, "ready".to_owned()));
    let (status, body) = http_get(&http, "/healthz/store");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("store unavailable"), "{body}");
    let (_, metrics) = http_get(&http, "/metrics");
    for needle in [
        "ratelimit_store_fallbacks_total{policy=\"deny\"}",
        "ratelimit_store_errors_total",
        "ratelimit_store_breaker_state",
    ] {
        assert!(metrics.contains(needle), "{needle} in\n{metrics}");
    }

    // Restarted (empty): used again within two seconds.
    redis.restart();
    let back = until(&channel, "closed", true, Duration::from_secs(5)).await;
    assert!(back <= Duration::from_secs(2), "back after {back:?}");
    let mut counted = 0;
    for _ in 0..3 {
        counted += usize::from(is_ok(&call(&channel, burst.clone()).await));
    }
    assert_eq!(counted, 1, "counting in Redis again (1 per day)");
    assert_eq!(http_get(&http, "/readyz").0, 200);
    assert_eq!(
        http_get(&http, "/healthz/store"),
        (200, "store up".to_owned())
    );

    // Flat: no thread or memory growth from the outage.
    let (threads_after, rss_after) = threads_and_rss(server.child.id());
    assert!(
        threads_after <= threads_before + 2,
        "{threads_before} -> {threads_after} threads"
    );
    assert!(
        rss_after <= rss_before + 32 * 1024,
        "{rss_before} -> {rss_after} kB"
    );
    let _ = server.child.kill();
    let _ = server.finish();
}

/// A hung Redis (SIGSTOP) would cost every call the full timeout; the
/// breaker stops paying it after three failures, at the default timeout too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_cuts_a_hung_redis_after_three_timeouts_at_the_default_timeout() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let redis = RedisServer::start();
    let scratch = TempDir::new("hang");
    let config = scratch.limits(LIMITS);
    // No --store-timeout: the default.
    let server = Server::serve(&config, &redis.url(), &[]);
    let channel = channel(&server.address()).await;
    let http = server.line_after("http listening on ");
    assert_eq!(oks(&channel, "closed", 3).await, 3);
    let errors_before = metric(&http, "ratelimit_store_errors_total");

    redis.signal("STOP");
    let start = Stopwatch::start();
    let calls = 60;
    assert_eq!(oks(&channel, "closed", calls).await, 0, "deny while hung");
    let spent = start.elapsed();
    let timeout = tollgate_redis::DEFAULT_TIMEOUT;
    // Three calls wait the timeout and open the breaker; then one probe per
    // backoff (100 ms, doubling) waits it while the rest are answered at once.
    let waited = metric(&http, "ratelimit_store_errors_total") - errors_before;
    let skipped = metric(&http, "ratelimit_store_short_circuited_total");
    assert!(
        (3..=5).contains(&waited),
        "{waited} calls waited the timeout"
    );
    assert_eq!(waited + skipped, calls as u64, "every other call skipped");
    // Without the breaker: 60 × the timeout at least.
    assert!(
        spent < timeout * 15,
        "{calls} calls took {spent:?} at a {timeout:?} timeout"
    );

    redis.signal("CONT");
    let back = until(&channel, "closed", true, Duration::from_secs(5)).await;
    assert!(back <= Duration::from_secs(2), "back after {back:?}");
}

/// One counter's value on `/metrics` (0 when absent).
fn metric(http: &str, name: &str) -> u64 {
    let (_, text) = http_get(http, "/metrics");
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Redis out of memory under `noeviction` answers PING but refuses every
/// write: a store failure like a dead Redis, seen on `/healthz/store`, the
/// gauge and the log, and on `/readyz` with `--ready-requires-store`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_out_of_memory_is_a_failing_store_not_a_ready_one() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let redis = RedisServer::start_on(
        free_port,
        &["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"],
    );
    let scratch = TempDir::new("oom");
    let config = scratch.limits(LIMITS);
    let mut server = Server::serve(&config, &redis.url(), &["--ready-requires-store"]);
    let channel = channel(&server.address()).await;
    let http = server.line_after("http listening on ");
    assert_eq!(oks(&channel, "closed", 3).await, 3);
    assert_eq!(http_get(&http, "/readyz").0, 200);
    assert_eq!(metric(&http, "ratelimit_store_up"), 1);

    // Filled past maxmemory in one script (a script checks memory only
    // before its first write): 8 MB of 1 kB values.
    let filled = redis.cli(&[
        "EVAL",
        "for i = 1, 8192 do redis.call('SET', 'fill:' .. i, string.rep('x', 1024)) end return 8192",
        "0",
    ]);
    assert_eq!(filled.trim(), "8192", "{filled}");
    let refused = redis.cli(&["SET", "one-more", "x"]);
    assert!(refused.contains("OOM"), "Redis refuses writes: {refused}");
    assert_eq!(redis.cli(&["PING"]).trim(), "PONG", "but answers PING");

    // Every check that would count fails, and is answered by its policy.
    for i in 0..20 {
        let answer = call(&channel, request("faults", "open", &format!("oom-{i}"))).await;
        assert!(is_ok(&answer), "on_store_error: allow");
        let answer = call(&channel, request("faults", "closed", &format!("oom-{i}"))).await;
        assert!(!is_ok(&answer), "on_store_error: deny");
    }
    let (status, body) = http_get(&http, "/readyz");
    assert_eq!(status, 503, "unready with --ready-requires-store: {body}");
    assert!(body.contains("OOM"), "{body}");
    let (status, body) = http_get(&http, "/healthz/store");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("OOM"), "{body}");
    assert_eq!(metric(&http, "ratelimit_store_up"), 0);
    assert!(metric(&http, "ratelimit_store_errors_total") >= 3);
    assert!(metric(&http, "ratelimit_store_fallbacks_total{policy=\"allow\"}") >= 20);

    // Room again: ready, and counting in Redis.
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(http_get(&http, "/readyz").0, 200);
    assert_eq!(metric(&http, "ratelimit_store_up"), 1);
    let back = until(&channel, "closed", true, Duration::from_secs(5)).await;
    assert!(back <= Duration::from_secs(2), "back after {back:?}");

    // The fallbacks were logged, once per 10 s with the count left out.
    let _ = server.child.kill();
    let (_, _, stderr) = server.finish();
    let lines = stderr
        .lines()
        .filter(|l| l.contains("answered by its rule's on_store_error"))
        .collect::<Vec<_>>();
    assert!(!lines.is_empty(), "{stderr}");
    assert!(lines.len() <= 2, "rate-limited: {lines:?}");
    assert!(
        stderr.contains("on_store_error: allow admitted it without counting"),
        "{stderr}"
    );
    assert!(stderr.contains("the store is down"), "{stderr}");
    assert!(stderr.contains("the store is up again"), "{stderr}");
}

/// A store URL that cannot work stops `serve` before it listens, saying why
/// (one merely not up yet does not: see `redis_startup.rs`).
#[test]
fn a_bad_store_url_is_a_clear_startup_error() {
    let scratch = TempDir::new("bad-store");
    let config = scratch.limits(LIMITS);
    for (store, expected) in [
        ("memcached://127.0.0.1:11211", "must start with redis://"),
        ("redis-cluster://", "names no cluster node"),
    ] {
        let mut server = Server::serve(&config, store, &[]);
        let (code, lines, stderr) = server.finish();
        assert_eq!(code, Some(1), "{store}: {stderr}");
        assert!(lines.is_empty(), "{store}: nothing listens: {lines:?}");
        assert!(stderr.contains(expected), "{store}: {stderr}");
    }
}
