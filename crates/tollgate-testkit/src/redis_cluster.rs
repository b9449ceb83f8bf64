//! A real three-master Redis cluster for tests, joined with `redis-cli --cluster create`.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::budget::poll_until;
use crate::ports::free_cluster_port;
use crate::redis::{RedisServer, redis_cli_bin};

/// How long the joined cluster may take to report `cluster_state:ok` on every node.
const JOIN_BUDGET: Duration = Duration::from_secs(15);

/// Three masters in cluster mode, all 16384 slots assigned, killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    /// The masters.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes and joins them with `redis-cli --cluster create`.
    #[must_use]
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_on(
                    free_cluster_port,
                    &["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
                )
            })
            .collect();
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        join(Command::new(redis_cli_bin()), &ports, |i| {
            nodes[i].cli(&["CLUSTER", "INFO"])
        });
        RedisCluster { nodes }
    }

    /// `redis-cluster://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c`.
    #[must_use]
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }
}

/// Joins the masters on `ports` with `cli` (`redis-cli` and any TLS flags)
/// `--cluster create`, then waits until `cluster_info(i)` (`CLUSTER INFO`
/// of the `i`th) says `cluster_state:ok` for every one.
pub(crate) fn join(mut cli: Command, ports: &[u16], cluster_info: impl Fn(usize) -> String) {
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let status = cli
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("redis-cli runs");
    assert!(status.success(), "redis-cli --cluster create failed");
    let ok = poll_until(JOIN_BUDGET, || {
        (0..ports.len())
            .all(|i| cluster_info(i).contains("cluster_state:ok"))
            .then_some(())
    });
    assert!(
        ok.is_some(),
        "the cluster did not reach cluster_state:ok within {JOIN_BUDGET:?}"
    );
}
