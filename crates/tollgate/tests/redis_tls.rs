//! `rediss://`: counters in a Redis that only speaks TLS, trusted through `SSL_CERT_FILE`,
//! and upstream's `REDIS_TLS` with client certificates (`REDIS_TLS_CLIENT_CERT/_KEY/_CACERT`)
//! to a single node, to every node of a cluster, and to a Sentinel and the master it names.

mod rls_client;
mod rls_load;

use rls_client::{channel, request};
use rls_load::admitted;
use tollgate_testkit::budget::{BUDGET, poll_until};
use tollgate_testkit::http::try_get;
use tollgate_testkit::ports::free_port;
use tollgate_testkit::redis_tls::RedisTls;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tollgate_testkit::window::{self, DAY, DAY_MARGIN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_live_in_a_tls_only_redis() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let scratch = TempDir::new("tls");
    let tls = RedisTls::new(&scratch.0);
    let redis = tls.node(free_port(), &["tls-auth-clients no".to_owned()]);
    let store = format!("rediss://127.0.0.1:{}", redis.port);
    let server = serve_with(
        &scratch,
        &["--store", &store],
        &[("SSL_CERT_FILE", tls.ca.to_str().unwrap())],
    );
    let channel = channel(&server.address()).await;
    // 2 per hour in Redis; a store error would allow all 5 (on_store_error: allow).
    assert_eq!(admitted(&[channel], &request("t", "k", "v"), 5).await, 2);
}

/// Upstream's variables for a TLS Redis that requires client certificates:
/// with REDIS_TLS_CLIENT_CERT/_KEY the counters live there; without them
/// the server refuses the handshake and `serve` does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_redis_tls_variables_present_the_client_certificate() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let scratch = TempDir::new("mtls");
    let tls = RedisTls::new(&scratch.0);
    let redis = tls.node(free_port(), &[]);
    let (ca, _, _) = files(&tls);
    let url = format!("127.0.0.1:{}", redis.port);
    let node = [("REDIS_URL", url.as_str()), ("REDIS_SOCKET_TYPE", "tcp")];
    let mut refused = serve_with(
        &scratch,
        &[],
        &[
            node[0],
            node[1],
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", &ca),
        ],
    );
    let (code, _, stderr) = refused.finish();
    assert_eq!(code, Some(1), "without a client certificate: {stderr}");
    assert!(stderr.contains("cannot connect to Redis"), "{stderr}");
    two_of_five_per_value(&scratch, &tls, &node, &["v".to_owned()]).await;
}

/// The CA, client certificate and key paths, as `REDIS_TLS_*` name them.
fn files(tls: &RedisTls) -> (String, String, String) {
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    (path(&tls.ca), path(&tls.leaf.cert), path(&tls.leaf.key))
}

/// `serve FLAGS…` with the variables `env` and one limit of 2 a day per value of `k`.
fn serve_with(scratch: &TempDir, flags: &[&str], env: &[(&str, &str)]) -> Server {
    let config = scratch.limits(
        "domain: t\ndescriptors:\n  - key: k\n    on_store_error: allow\n    rate_limit:\n      unit: day\n      requests_per_unit: 2\n",
    );
    let mut args = vec![
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--store-timeout",
        "2s",
    ];
    args.extend(flags);
    Server::spawn_with_env(&args, env)
}

/// [`serve_with`] `env`, TLS on with the CA and the client certificate: for
/// each of `values`, 2 of 5 calls are admitted.
async fn two_of_five_per_value(
    scratch: &TempDir,
    tls: &RedisTls,
    env: &[(&str, &str)],
    values: &[String],
) {
    let (ca, cert, key) = files(tls);
    let mut env = env.to_vec();
    env.extend([
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", ca.as_str()),
        ("REDIS_TLS_CLIENT_CERT", cert.as_str()),
        ("REDIS_TLS_CLIENT_KEY", key.as_str()),
    ]);
    let server = serve_with(scratch, &[], &env);
    let address = server.address();
    let http = server.http_address();
    // serve starts before its store is reachable: until it counts in Redis
    // the calls are answered by `on_store_error: allow`.
    let up = tokio::task::spawn_blocking(move || {
        poll_until(BUDGET, || {
            (try_get(http, "/healthz/store", &[]).ok()?.status == 200).then_some(())
        })
    })
    .await
    .expect("the poll ends");
    assert!(
        up.is_some(),
        "the TLS store never came up within {BUDGET:?}"
    );
    let channel = channel(&address).await;
    for value in values {
        // 2 per day in Redis; a store error would allow all 5 (on_store_error: allow).
        assert_eq!(
            admitted(std::slice::from_ref(&channel), &request("t", "k", value), 5).await,
            2,
            "value {value}"
        );
    }
}

/// Upstream's `REDIS_TLS=true` with `REDIS_TYPE=cluster` (it was refused):
/// the counters live in a TLS-only cluster that requires client
/// certificates, on every master, so the certificates reach the nodes the
/// cluster names as well as the seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_redis_tls_reaches_every_node_of_a_tls_cluster() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let scratch = TempDir::new("tls-cluster");
    let tls = RedisTls::new(&scratch.0);
    let nodes = tls.cluster();
    // The first node only: the others are found through the cluster.
    let seed = format!("127.0.0.1:{}", nodes[0].port);
    let values: Vec<String> = (0..12).map(|i| format!("v{i}")).collect();
    two_of_five_per_value(
        &scratch,
        &tls,
        &[("REDIS_TYPE", "cluster"), ("REDIS_URL", &seed)],
        &values,
    )
    .await;
    let holding = nodes
        .iter()
        .filter(|n| tls.cli(n.port, &["DBSIZE"]).trim() != "0")
        .count();
    assert_eq!(holding, 3, "12 counters spread over the 3 masters");
}

/// Upstream's `REDIS_TLS=true` with `REDIS_TYPE=sentinel` (it was refused):
/// the Sentinel and the master it names both speak TLS only and require
/// client certificates; the counters live in that master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_redis_tls_follows_a_tls_sentinel_to_its_master() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let scratch = TempDir::new("tls-sentinel");
    let tls = RedisTls::new(&scratch.0);
    let (master, sentinel) = tls.sentinel();
    let url = format!("mymaster,127.0.0.1:{}", sentinel.port);
    two_of_five_per_value(
        &scratch,
        &tls,
        &[("REDIS_TYPE", "sentinel"), ("REDIS_URL", &url)],
        &["v".to_owned()],
    )
    .await;
    assert_ne!(tls.cli(master.port, &["DBSIZE"]).trim(), "0");
}
