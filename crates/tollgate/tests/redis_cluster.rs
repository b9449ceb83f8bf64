//! A Redis Cluster changing under a running `tollgate serve`: a slot migrated, a master restarted.

mod rls_client;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use rls_client::{call, channel, is_ok, request};
use tollgate_testkit::redis::{RedisServer, redis_cli_bin};
use tollgate_testkit::redis_cluster::RedisCluster;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tollgate_testkit::window::{self, DAY, DAY_MARGIN};
use tonic::transport::Channel;

const LIMITS: &str = "domain: c
descriptors:
  - key: user
    on_store_error: deny
    rate_limit:
      unit: day
      requests_per_unit: 1000
";

/// The node ID of a cluster node (`CLUSTER MYID`).
fn node_id(node: &RedisServer) -> String {
    node.cli(&["CLUSTER", "MYID"]).trim().to_owned()
}

/// The hash tag (`{…}`) of the one Tollgate key on `node`, if it holds one.
fn tag_on(node: &RedisServer) -> Option<String> {
    let keys = node.cli(&["--raw", "KEYS", "tg{*"]);
    let start = keys.find('{')?;
    let end = keys[start..].find('}')? + start;
    Some(keys[start..=end].to_owned())
}

/// The raw bytes of the one key in `slot` on `node`.
fn raw_key_in_slot(node: &RedisServer, slot: &str) -> Vec<u8> {
    let out = Command::new(redis_cli_bin())
        .args(["-p", &node.port.to_string(), "--raw"])
        .args(["CLUSTER", "GETKEYSINSLOT", slot, "10"])
        .output()
        .expect("redis-cli runs");
    let mut key = out.stdout;
    assert_eq!(key.pop(), Some(b'\n'), "one key in the slot");
    assert!(
        key.starts_with(b"tg{"),
        "{:?}",
        String::from_utf8_lossy(&key)
    );
    key
}

/// `redis-cli -x` on the node on `port`: `args`, then one binary `key` (on stdin); its output.
fn cli_with_key(port: u16, args: &[&str], key: &[u8]) -> String {
    let mut child = Command::new(redis_cli_bin())
        .args(["-p", &port.to_string(), "-x"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(key)
        .expect("the key is sent");
    let out = child.wait_with_output().expect("redis-cli exits");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `MIGRATE` of one binary key from `src` to the node on `port`.
fn migrate(src: &RedisServer, port: u16, key: &[u8]) {
    let port = port.to_string();
    let args = ["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    assert_eq!(cli_with_key(src.port, &args, key), "OK", "MIGRATE");
}

/// The Redis type of one binary key on `node`.
fn key_type_of(node: &RedisServer, key: &[u8]) -> String {
    cli_with_key(node.port, &["TYPE"], key)
}

/// Calls `n` times, each answered; how many were OK and the last remaining.
async fn run(channel: &Channel, n: usize) -> (usize, u32) {
    let mut ok = 0;
    let mut remaining = 0;
    for _ in 0..n {
        let response = call(channel, request("c", "user", "alice")).await;
        if is_ok(&response) {
            ok += 1;
            remaining = response.statuses[0].limit_remaining;
        }
    }
    (ok, remaining)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrated_slot_keeps_its_counts_and_every_call_is_answered() {
    migrated_slot_keeps_counts("hash", "hash").await;
}

/// The same with the packed encoding: a counter is still one key (a string
/// instead of a hash), so the migration behaves alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrated_slot_keeps_packed_counts_and_every_call_is_answered() {
    migrated_slot_keeps_counts("packed", "string").await;
}

/// 10 calls, the counter's slot moved while 5 more are made, 5 after:
/// every call answered OK and the count carried, with `--redis-encoding
/// encoding` (whose counters are keys of Redis type `key_type`).
async fn migrated_slot_keeps_counts(encoding: &str, key_type: &str) {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let cluster = RedisCluster::start();
    let scratch = TempDir::new(&format!("cluster-migrate-{encoding}"));
    let config = scratch.limits(LIMITS);
    let flags = ["--store-timeout", "2s", "--redis-encoding", encoding];
    let server = Server::serve(&config, &cluster.url(), &flags);
    let channel = channel(&server.address()).await;
    let (ok, remaining) = run(&channel, 10).await;
    assert_eq!((ok, remaining), (10, 990));

    // Move the counter's slot to another master, keys and all.
    let from = cluster
        .nodes
        .iter()
        .position(|n| tag_on(n).is_some())
        .expect("one node holds the counter");
    let to = (from + 1) % 3;
    let tag = tag_on(&cluster.nodes[from]).unwrap();
    let slot = cluster.nodes[from]
        .cli(&["CLUSTER", "KEYSLOT", &tag])
        .trim()
        .to_owned();
    let (src, dst) = (&cluster.nodes[from], &cluster.nodes[to]);
    let (src_id, dst_id) = (node_id(src), node_id(dst));
    dst.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id]);
    src.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id]);
    // Calls while the slot is migrating are answered (ASK redirections).
    let (during, _) = run(&channel, 5).await;
    let key = raw_key_in_slot(src, &slot);
    migrate(src, dst.port, &key);
    for node in &cluster.nodes {
        node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]);
    }
    let (after, remaining) = run(&channel, 5).await;
    assert_eq!(during + after, 10, "every call answered OK across the move");
    assert_eq!(
        remaining, 980,
        "the count moved with the slot: 20 hits of 1000"
    );
    assert_eq!(key_type_of(dst, &key), key_type);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_master_is_used_again() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let mut cluster = RedisCluster::start();
    let scratch = TempDir::new("cluster-restart");
    let config = scratch.limits(LIMITS);
    let server = Server::serve(&config, &cluster.url(), &["--store-timeout", "200ms"]);
    let channel = channel(&server.address()).await;
    assert_eq!(run(&channel, 3).await.0, 3);
    let holder = cluster
        .nodes
        .iter()
        .position(|n| tag_on(n).is_some())
        .expect("one node holds the counter");

    cluster.nodes[holder].kill();
    // Down: answered by the rule's policy (deny), never an error.
    let (ok, _) = run(&channel, 10).await;
    assert_eq!(ok, 0);

    cluster.nodes[holder].restart();
    // Back within a bounded time (cluster state converges, the client reconnects).
    let mut back = false;
    for _ in 0..250 {
        if run(&channel, 1).await.0 == 1 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert!(back, "the restarted master answers again within 10 s");
}
