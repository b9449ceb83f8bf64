//! `tollgate serve --lease-period` instances on one real Redis: an instance killed with SIGKILL loses at most its outstanding leases; one stopped with SIGTERM gives them back.

mod rls_client;

use std::process::Command;

use rls_client::{call, channel, is_ok, request};
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tonic::transport::Channel;

/// A fixed window of 100 per day (nothing resets during the test unless it
/// runs across midnight on Redis's clock, which the test checks).
const LIMITS: &str = "domain: leases
descriptors:
  - key: fleet
    on_store_error: deny
    rate_limit:
      unit: day
      requests_per_unit: 100
";

/// OKs out of `n` sequential calls.
async fn oks(channel: &Channel, value: &str, n: usize) -> u64 {
    let mut ok = 0;
    for _ in 0..n {
        ok += u64::from(is_ok(
            &call(channel, request("leases", "fleet", value)).await,
        ));
    }
    ok
}

/// An instance with leases of 1 hour, and its gRPC channel and HTTP address.
async fn leased(config: &std::path::Path, redis: &RedisServer) -> (Server, Channel, String) {
    let server = Server::serve(
        config,
        &redis.url(),
        &[
            "--store-timeout",
            "2s",
            "--lease-period",
            "1h",
            "--expected-instances",
            "2",
        ],
    );
    let channel = channel(&server.address()).await;
    let http = server.line_after("http listening on ");
    (server, channel, http)
}

/// The outstanding leased units an instance reports on `/metrics`.
fn outstanding(http: &str) -> u64 {
    let response = tollgate_testkit::http::exchange(http, "GET", "/metrics", &[], "");
    response
        .body
        .lines()
        .find_map(|l| l.strip_prefix("ratelimit_store_lease_outstanding_units "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no outstanding-units gauge in {}", response.body))
}

/// The day of Redis `TIME`.
fn redis_day(redis: &RedisServer) -> u64 {
    let out = redis.cli(&["TIME"]);
    out.lines()
        .next()
        .and_then(|l| l.trim().parse::<u64>().ok())
        .map(|secs| secs / 86_400)
        .unwrap_or_else(|| panic!("TIME answered {out:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_loses_at_most_its_leases_and_a_stopped_one_returns_them() {
    let redis = RedisServer::start();
    let day = redis_day(&redis);
    let scratch = TempDir::new("leases-kill");
    let config = scratch.limits(LIMITS);

    // SIGKILL: the units in its lease are lost (until the window ends), nothing more.
    let (mut a, a_channel, a_http) = leased(&config, &redis).await;
    assert_eq!(oks(&a_channel, "kill", 30).await, 30);
    let held = outstanding(&a_http);
    assert!(held > 0, "the instance holds a lease");
    a.child.kill().expect("SIGKILL");
    a.child.wait().expect("reaped");
    let (_b, b_channel, _) = leased(&config, &redis).await;
    let rest = oks(&b_channel, "kill", 150).await;
    assert_eq!(
        30 + rest + held,
        100,
        "lost exactly the killed instance's {held} leased units"
    );

    // SIGTERM: a graceful stop gives the lease back, so nothing is lost.
    let (c, c_channel, c_http) = leased(&config, &redis).await;
    assert_eq!(oks(&c_channel, "term", 30).await, 30);
    assert!(outstanding(&c_http) > 0, "the instance holds a lease");
    let pid = c.child.id().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let mut c = c;
    let (code, _, stderr) = c.finish();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("outstanding leases returned"), "{stderr}");
    let (_d, d_channel, _) = leased(&config, &redis).await;
    assert_eq!(
        30 + oks(&d_channel, "term", 150).await,
        100,
        "the returned units are admitted"
    );
    assert_eq!(
        redis_day(&redis),
        day,
        "the test ran across midnight on Redis's clock"
    );
}
