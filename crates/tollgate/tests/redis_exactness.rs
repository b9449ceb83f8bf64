//! `tollgate serve` instances sharing one real Redis (or a 3-master cluster) admit exactly the limit.

mod redis_common;
#[path = "../../tollgate-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use redis_common::{
    ALGORITHMS, RedisCluster, RedisServer, Scratch, admitted, call, channel, every_algorithm,
    request, serve,
};

/// 256 calls per algorithm spread over the instances at `store`: exactly 100 pass.
async fn exactly_100_each(store: &str, instances: usize) {
    let scratch = Scratch::new(&format!("exact-{instances}-{}", store.len()));
    let config = scratch.limits(&every_algorithm(100));
    let servers: Vec<_> = (0..instances)
        .map(|_| serve(&config, store, &["--store-timeout", "2s"]))
        .collect();
    let mut channels = Vec::new();
    for server in &servers {
        channels.push(channel(&server.address()).await);
    }
    for algorithm in ALGORITHMS {
        let ok = admitted(&channels, &request("exact", algorithm, "one-key"), 256).await;
        assert_eq!(ok, 100, "{algorithm}: 256 calls over {instances} instances");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_on_one_redis_admit_exactly_100_for_every_algorithm() {
    let redis = RedisServer::start();
    exactly_100_each(&redis.url(), 4).await;
    let stats = redis.cli(&["INFO", "commandstats"]);
    assert!(
        stats.contains("cmdstat_evalsha"),
        "checks go through EVALSHA: {stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_on_a_cluster_admit_exactly_100_for_every_algorithm() {
    let cluster = RedisCluster::start();
    exactly_100_each(&cluster.url(), 4).await;
}

/// Two instances whose clocks are a whole minute apart still share one
/// fixed window: decisions use Redis `TIME`, not the instances' clocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_with_skewed_clocks_decide_alike() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("skew");
    let config = scratch.limits(&every_algorithm(100));
    let ahead = serve(
        &config,
        &redis.url(),
        &["--store-timeout", "2s", "--clock-offset", "30s"],
    );
    let behind = serve(
        &config,
        &redis.url(),
        &["--store-timeout", "2s", "--clock-offset=-30s"],
    );
    let channels = [
        channel(&ahead.address()).await,
        channel(&behind.address()).await,
    ];
    for algorithm in ALGORITHMS {
        let ok = admitted(&channels, &request("exact", algorithm, "skewed"), 256).await;
        assert_eq!(ok, 100, "{algorithm}: one budget for both instances");
    }
    // Both report the same reset for the same window (to Redis's clock, within a second).
    let reset = |r: &tollgate_server::grpc::wire::RateLimitResponse| {
        r.statuses[0]
            .duration_until_reset
            .as_ref()
            .map_or(0, |d| d.seconds)
    };
    let a = call(&channels[0], request("exact", "fixed_window", "skewed")).await;
    let b = call(&channels[1], request("exact", "fixed_window", "skewed")).await;
    assert!((reset(&a) - reset(&b)).abs() <= 1, "{a:?} {b:?}");
}
