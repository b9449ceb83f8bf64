//! `tollgate serve` started before Redis: it answers by each rule's `on_store_error` until Redis is up, then counts in Redis.
//!
//! A Redis that refuses the password still stops start-up: see `upstream_env.rs`.

mod rls_client;

use std::time::Duration;

use rls_client::{call, channel, is_ok, request};
use tollgate_testkit::budget::{Stopwatch, poll_until_async};
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tollgate_testkit::window::{self, DAY, DAY_MARGIN};
use tonic::transport::Channel;

const LIMITS: &str = "domain: startup
descriptors:
  - key: open
    rate_limit:
      unit: day
      requests_per_unit: 1
  - key: closed
    on_store_error: deny
    rate_limit:
      unit: day
      requests_per_unit: 1
";

/// OKs out of `n` sequential calls of `key` with value `value`.
async fn oks(channel: &Channel, key: &str, value: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(is_ok(&call(channel, request("startup", key, value)).await));
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_without_redis_answers_by_policy_and_counts_in_redis_once_it_is_up() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    // A free port with nothing listening on it yet.
    let mut redis = RedisServer::start();
    redis.kill();
    let scratch = TempDir::new("startup");
    let config = scratch.limits(LIMITS);
    let mut server = Server::serve(&config, &redis.url(), &["--store-timeout", "100ms"]);
    let channel = channel(&server.address()).await;

    // Not up: `allow` admits past the limit uncounted, `deny` refuses.
    assert_eq!(
        oks(&channel, "open", "before", 3).await,
        3,
        "on_store_error: allow (the default) admits while Redis is not up"
    );
    assert_eq!(
        oks(&channel, "closed", "before", 3).await,
        0,
        "on_store_error: deny refuses while Redis is not up"
    );

    // Up: within a bounded poll, `closed` is decided by Redis (1 per day).
    redis.restart();
    let start = Stopwatch::start();
    let budget = Duration::from_secs(15);
    // Bounded by `budget`; the first OK is Redis' (deny refuses everything).
    let in_redis = poll_until_async(budget, || async {
        is_ok(&call(&channel, request("startup", "closed", "after")).await).then_some(())
    })
    .await
    .is_some();
    assert!(in_redis, "not counting in Redis within {budget:?}");
    assert!(
        start.elapsed() <= Duration::from_secs(10),
        "after {:?}",
        start.elapsed()
    );
    assert_eq!(
        oks(&channel, "closed", "after", 3).await,
        0,
        "the one request of the day was spent in Redis"
    );
    assert_eq!(
        oks(&channel, "open", "after", 3).await,
        1,
        "exactly 1 per day, counted in Redis"
    );
    assert_eq!(
        redis.cli(&["DBSIZE"]).trim(),
        "2",
        "both counters live in Redis"
    );
    server.terminate();
    let (code, _, stderr) = server.finish();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("Redis is not up"), "{stderr}");
    assert!(stderr.contains("Redis is up"), "{stderr}");
}
