//! What the `redis_*` tests share: real Redis processes, `tollgate serve` instances on them, and a gRPC client.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate_protocol::rls::RlsClient;
use tollgate_protocol::rls::wire::{self, Entry, RateLimitDescriptor};
use tonic::transport::Channel;

#[allow(unused_imports)]
pub use crate::redis_support::{RedisCluster, RedisServer};
use crate::support::Server;

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tollgate-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Scratch(dir)
    }

    /// Writes `limits.yaml` with `yaml` and returns its path.
    pub fn limits(&self, yaml: &str) -> PathBuf {
        let path = self.0.join("limits.yaml");
        std::fs::write(&path, yaml).expect("the limits file is written");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One descriptor `key: value` in `domain`.
pub fn request(domain: &str, key: &str, value: &str) -> wire::RateLimitRequest {
    wire::RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_owned(),
                value: value.to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// `tollgate serve` on `config` with counters at `store`, plus `extra` flags.
pub fn serve(config: &Path, store: &str, extra: &[&str]) -> Server {
    let config = config.to_str().expect("a UTF-8 path");
    let mut args = vec![
        "serve",
        "--config",
        config,
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--store",
        store,
    ];
    args.extend_from_slice(extra);
    Server::spawn(&args)
}

/// A gRPC channel to `addr`, connected.
pub async fn channel(addr: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("the instance accepts connections")
}

/// Sends one call and returns the answer.
pub async fn call(channel: &Channel, request: wire::RateLimitRequest) -> wire::RateLimitResponse {
    RlsClient::new(channel.clone())
        .should_rate_limit(request)
        .await
        .expect("every call is answered")
}

/// Whether the answer is OK overall.
pub fn is_ok(response: &wire::RateLimitResponse) -> bool {
    response.overall_code == wire::CODE_OK
}

/// Sends `total` calls of `request`, all at once, spread over `channels`; how many were OK.
pub async fn admitted(
    channels: &[Channel],
    request: &wire::RateLimitRequest,
    total: usize,
) -> usize {
    let tasks: Vec<_> = (0..total)
        .map(|i| {
            let channel = channels[i % channels.len()].clone();
            let request = request.clone();
            tokio::spawn(async move { is_ok(&call(&channel, request).await) })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        ok += usize::from(task.await.expect("the task finishes"));
    }
    ok
}

/// One rule per algorithm, `limit` per minute, with `on_store_error: deny`
/// (a store error could only lower the count, never hide an over-admission).
pub fn every_algorithm(limit: u32) -> String {
    let mut yaml = String::from("domain: exact\ndescriptors:\n");
    for algorithm in ALGORITHMS {
        // A leaky bucket holds burst + 1.
        let burst = if algorithm == "leaky_bucket" {
            format!("      burst: {}\n", limit - 1)
        } else {
            String::new()
        };
        yaml.push_str(&format!(
            "  - key: {algorithm}\n    on_store_error: deny\n    rate_limit:\n      unit: minute\n      requests_per_unit: {limit}\n      algorithm: {algorithm}\n{burst}"
        ));
    }
    yaml
}

pub const ALGORITHMS: [&str; 6] = [
    "fixed_window",
    "token_bucket",
    "gcra",
    "sliding_window",
    "sliding_log",
    "leaky_bucket",
];
