//! `tollgate serve` behind Sentinel follows a failover without a restart: after the master is SIGKILLed and its replica promoted, decisions are exact again, in the new master.

mod rls_client;

use std::process::Command;
use std::time::Duration;

use rls_client::{call, channel, is_ok, request};
use tollgate_testkit::budget::{Stopwatch, poll_until, poll_until_async};
use tollgate_testkit::ports::free_port;
use tollgate_testkit::redis::{RedisServer, redis_cli_bin};
use tollgate_testkit::redis_sentinel::Sentinel;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tollgate_testkit::window::{self, DAY, DAY_MARGIN};
use tonic::transport::Channel;

const LIMITS: &str = "domain: failover
descriptors:
  - key: closed
    on_store_error: deny
    rate_limit:
      unit: day
      requests_per_unit: 1
";

/// How long the whole failover may take to be followed: the sentinel's
/// 500 ms to call the master down, its election and promotion, then
/// `serve`'s re-resolution (every 500 ms while the store is down).
const FOLLOWED_WITHIN: Duration = Duration::from_secs(10);

/// `redis-cli -p port ARGS`' output.
fn sentinel_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new(redis_cli_bin())
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// OKs out of `n` sequential calls of `closed` with value `value`.
async fn oks(channel: &Channel, value: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(is_ok(
            &call(channel, request("failover", "closed", value)).await,
        ));
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_follows_a_sentinel_failover_back_to_exact_decisions() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let mut master = RedisServer::start();
    let master_port = master.port.to_string();
    let replica = RedisServer::start_on(free_port, &["--replicaof", "127.0.0.1", &master_port]);
    let linked = poll_until(Duration::from_secs(10), || {
        replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
            .then_some(())
    });
    assert!(linked.is_some(), "the replica did not sync");
    let sentinel = Sentinel::start(&master);
    for (name, value) in [
        ("down-after-milliseconds", "500"),
        ("failover-timeout", "2000"),
    ] {
        let set = sentinel_cli(sentinel.port, &["SENTINEL", "SET", "mymaster", name, value]);
        assert_eq!(set.trim(), "OK", "{name}: {set}");
    }
    let replica_port = replica.port.to_string();
    let known = poll_until(Duration::from_secs(15), || {
        sentinel_cli(sentinel.port, &["SENTINEL", "REPLICAS", "mymaster"])
            .contains(&replica_port)
            .then_some(())
    });
    assert!(known.is_some(), "the sentinel did not find the replica");

    let scratch = TempDir::new("failover");
    let config = scratch.limits(LIMITS);
    let url = format!("redis-sentinel://mymaster@127.0.0.1:{}", sentinel.port);
    let mut server = Server::serve(&config, &url, &["--store-timeout", "200ms"]);
    let channel = channel(&server.address()).await;
    assert_eq!(
        oks(&channel, "before", 3).await,
        1,
        "exact in the first master"
    );

    // The master dies; deny answers until the replica is promoted and found.
    master.kill();
    let start = Stopwatch::start();
    // Bounded by FOLLOWED_WITHIN; the first OK is Redis' (deny refuses everything else).
    let followed = poll_until_async(FOLLOWED_WITHIN, || async {
        is_ok(&call(&channel, request("failover", "closed", "after")).await)
            .then(|| start.elapsed())
    })
    .await;
    let followed = followed.unwrap_or_else(|| {
        panic!("still not counting in Redis {FOLLOWED_WITHIN:?} after the kill")
    });
    eprintln!("failover followed {followed:?} after the master was killed");
    assert!(
        replica.cli(&["ROLE"]).starts_with("master"),
        "the replica was promoted"
    );
    assert_eq!(
        oks(&channel, "after", 3).await,
        0,
        "the day's one was spent"
    );
    assert_eq!(
        oks(&channel, "fresh", 3).await,
        1,
        "exact in the new master"
    );
    let keys: u64 = replica.cli(&["DBSIZE"]).trim().parse().unwrap_or(0);
    assert!(keys >= 2, "the counters live in the new master: {keys}");
    server.terminate();
    let (code, _, stderr) = server.finish();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("connected to the master Sentinel names now"),
        "{stderr}"
    );
}
