//! Four `tollgate serve` instances sharing one real Redis admit exactly the limit, for every algorithm.

#[path = "../../tollgate-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::time::Duration;

use redis_support::RedisServer;
use support::Server;
use tollgate_server::grpc::wire::{self, Entry, RateLimitDescriptor};
use tonic::transport::Channel;

const ALGORITHMS: [&str; 6] = [
    "fixed_window",
    "token_bucket",
    "gcra",
    "sliding_window",
    "sliding_log",
    "leaky_bucket",
];

/// One rule per algorithm, 100 per minute; a store error would deny (so it
/// could only lower the count, never hide an over-admission).
fn limits_file(dir: &std::path::Path) -> std::path::PathBuf {
    let mut yaml = String::from("domain: exact\ndescriptors:\n");
    for algorithm in ALGORITHMS {
        // A leaky bucket holds burst + 1: a burst of 99 admits 100 at once.
        let burst = if algorithm == "leaky_bucket" {
            "      burst: 99\n"
        } else {
            ""
        };
        yaml.push_str(&format!(
            "  - key: {algorithm}\n    on_store_error: deny\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n      algorithm: {algorithm}\n{burst}"
        ));
    }
    let path = dir.join("limits.yaml");
    std::fs::write(&path, yaml).expect("the limits file is written");
    path
}

fn request(algorithm: &str) -> wire::RateLimitRequest {
    wire::RateLimitRequest {
        domain: "exact".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: algorithm.to_owned(),
                value: "one-key".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

fn spawn_instances(config: &std::path::Path, store: &str, n: usize) -> (Vec<Server>, Vec<String>) {
    let config = config.to_str().expect("a UTF-8 path");
    let servers: Vec<Server> = (0..n)
        .map(|_| {
            Server::spawn(&[
                "serve",
                "--config",
                config,
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--store",
                store,
                "--store-timeout",
                "2s",
            ])
        })
        .collect();
    let addrs = servers.iter().map(Server::address).collect();
    (servers, addrs)
}

/// Sends `total` requests for `algorithm`, 64 in flight per instance, and counts the OKs.
async fn admitted(addrs: &[String], algorithm: &str, total: usize) -> usize {
    let mut channels = Vec::new();
    for addr in addrs {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .expect("a valid URI")
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .expect("the instance accepts connections");
        channels.push(channel);
    }
    let tasks: Vec<_> = (0..total)
        .map(|i| {
            let channel = channels[i % channels.len()].clone();
            let request = request(algorithm);
            tokio::spawn(async move {
                let response = tollgate_server::grpc::should_rate_limit(channel, request)
                    .await
                    .expect("every call is answered");
                response.overall_code == wire::CODE_OK
            })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        ok += usize::from(task.await.expect("the task finishes"));
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_on_one_redis_admit_exactly_100_for_every_algorithm() {
    let redis = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("tollgate-exact-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = limits_file(&dir);
    let (_servers, addrs) = spawn_instances(&config, &redis.url(), 4);
    for algorithm in ALGORITHMS {
        let ok = admitted(&addrs, algorithm, 256).await;
        assert_eq!(ok, 100, "{algorithm}: 256 requests over 4 instances");
    }
    let calls = redis.cli(&["INFO", "commandstats"]);
    assert!(
        calls.contains("cmdstat_evalsha"),
        "checks go through EVALSHA: {calls}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
