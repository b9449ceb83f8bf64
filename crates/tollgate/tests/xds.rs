//! `tollgate serve --config-xds`: limits from an xDS management server (the test kit's), as Envoy Gateway drives envoyproxy/ratelimit.
//!
//! The server serves a first set, an update, a bad update (NACKed, the
//! running limits kept), a withdrawal and a restart; every step is checked
//! by the decisions `serve` answers over gRPC. Limits are per day, so no
//! window ends during a test.

mod rls_client;
mod rls_load;

use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use rls_client::{channel, request};
use tollgate_testkit::budget::{BUDGET, poll_until_async};
use tollgate_testkit::http;
use tollgate_testkit::pki::TestCa;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, Server};
use tollgate_testkit::window::{self, DAY, DAY_MARGIN};
use tollgate_testkit::xds::AdsServer;
use tonic::transport::Channel;

/// A config named `name` for `domain`: `key` limited to `per_day` a day.
fn config(name: &str, domain: &str, key: &str, per_day: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: name.to_owned(),
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            key: key.to_owned(),
            rate_limit: Some(RateLimitPolicy {
                unit: RateLimitUnit::Day as i32,
                requests_per_unit: per_day,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        }],
    }
}

/// A config whose limit has no unit: refused by the loader.
fn bad_config() -> RateLimitConfig {
    let mut bad = config("bad", "broken", "k", 1);
    if let Some(policy) = bad.descriptors[0].rate_limit.as_mut() {
        policy.unit = RateLimitUnit::Unknown as i32;
    }
    bad
}

/// `serve --config-xds URL` in memory on ephemeral ports with a quick reconnection, plus `extra`.
fn spawn_serve(url: &str, extra: &[&str]) -> Server {
    let mut args = vec![
        "serve",
        "--config-xds",
        url,
        "--config-xds-node-id",
        "tollgate-test",
        "--config-xds-backoff-initial",
        "20ms",
        "--config-xds-backoff-max",
        "100ms",
        "--store",
        "memory",
    ];
    args.extend_from_slice(&EPHEMERAL_ADDRS);
    args.extend_from_slice(extra);
    Server::spawn(&args)
}

/// How many of `n` calls on `domain`'s `key` are admitted.
async fn admitted(channel: &Channel, domain: &str, key: &str, n: usize) -> usize {
    rls_load::admitted(std::slice::from_ref(channel), &request(domain, key, "x"), n).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_follows_the_xds_server_through_update_nack_withdrawal_and_restart() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let ads = AdsServer::start().await;
    let serve = spawn_serve(&ads.url(), &[]);

    // It subscribes, and listens only once a first config has arrived.
    let subscription = ads.next_request().await;
    assert_eq!(
        subscription.type_url,
        "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
    );
    assert_eq!(
        subscription.node.as_ref().map(|n| n.id.as_str()),
        Some("tollgate-test")
    );
    assert!(
        serve.stdout_lines.try_recv().is_err(),
        "serve announced an address before any config arrived"
    );
    ads.serve("v1", &[config("tenants", "gateway", "tenant", 3)]);
    let ack = ads.reply_to("v1").await;
    assert_eq!(ack.version_info, "v1");
    assert!(ack.error_detail.is_none(), "{ack:?}");
    let addr = serve.address();
    let http_addr = serve.http_address();
    let rpc = channel(&addr).await;
    assert_eq!(admitted(&rpc, "gateway", "tenant", 2).await, 2);

    // An update: a higher limit (the 2 hits already counted stay counted) and a second domain.
    ads.serve(
        "v2",
        &[
            config("tenants", "gateway", "tenant", 4),
            config("other", "other", "k", 1),
        ],
    );
    let ack = ads.reply_to("v2").await;
    assert!(ack.error_detail.is_none(), "{ack:?}");
    assert_eq!(ack.version_info, "v2");
    assert_eq!(
        admitted(&rpc, "gateway", "tenant", 3).await,
        2,
        "4 a day, 2 spent before"
    );
    assert_eq!(admitted(&rpc, "other", "k", 2).await, 1);

    // A bad update: NACKed with the loader's diagnostic, the running limits kept.
    ads.serve(
        "v3",
        &[config("tenants", "gateway", "tenant", 100), bad_config()],
    );
    let nack = ads.reply_to("v3").await;
    assert_eq!(
        nack.version_info, "v2",
        "a NACK names the version in service"
    );
    let detail = nack.error_detail.expect("a NACK carries the diagnostics");
    assert!(detail.message.contains("xds:bad:"), "{}", detail.message);
    assert_eq!(
        admitted(&rpc, "gateway", "tenant", 1).await,
        0,
        "still 4 a day"
    );
    let rlconfig = http::get(http_addr, "/rlconfig", &[]).body;
    assert!(rlconfig.contains("gateway.tenant: "), "{rlconfig}");
    assert!(rlconfig.contains("source=xds"), "{rlconfig}");
    let metrics = http::get(http_addr, "/metrics", &[]).body;
    assert!(
        metrics.contains("ratelimit_service_config_load_error_total 1")
            || metrics.contains("ratelimit_service_config_load_error 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"ratelimit_xds_updates_total{outcome="refused"} 1"#),
        "{metrics}"
    );

    // Withdrawing a config: its domain is gone (no limit), the other stays.
    ads.serve("v4", &[config("tenants", "gateway", "tenant", 4)]);
    assert!(ads.reply_to("v4").await.error_detail.is_none());
    assert_eq!(
        admitted(&rpc, "other", "k", 3).await,
        3,
        "domain `other` withdrawn"
    );
    assert_eq!(admitted(&rpc, "gateway", "tenant", 1).await, 0);

    // A restart on the same port: serve reconnects, says what it has, and takes the new set.
    let addr_of_ads = ads.addr();
    ads.stop().await;
    let ads = AdsServer::start_on(addr_of_ads).await;
    ads.serve(
        "v5",
        &[
            config("tenants", "gateway", "tenant", 4),
            config("fresh", "fresh", "k", 2),
        ],
    );
    let resubscription = ads.next_request().await;
    assert_eq!(resubscription.version_info, "v4", "{resubscription:?}");
    assert!(ads.reply_to("v5").await.error_detail.is_none());
    assert_eq!(admitted(&rpc, "fresh", "k", 3).await, 2, "v5 is in service");
    assert_eq!(
        admitted(&rpc, "gateway", "tenant", 1).await,
        0,
        "the count survived the reconnection"
    );
}

/// An update over --config-xds-max-update-bytes is refused and counted;
/// the running limits stay, and a later update that fits is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_update_is_refused_and_the_running_config_kept() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let ads = AdsServer::start().await;
    ads.serve("v1", &[config("small", "d", "k", 2)]);
    let serve = spawn_serve(&ads.url(), &["--config-xds-max-update-bytes", "1000"]);
    assert!(ads.reply_to("v1").await.error_detail.is_none());
    let addr = serve.address();
    let http_addr = serve.http_address();
    let rpc = channel(&addr).await;
    assert_eq!(admitted(&rpc, "d", "k", 1).await, 1);

    let big: Vec<RateLimitConfig> = (0..40)
        .map(|i| config(&format!("big-{i}"), &format!("domain-{i}"), "k", 0))
        .collect();
    ads.serve("v2", &big);
    let refused = poll_until_async(BUDGET, || async {
        let metrics = http::get(http_addr, "/metrics", &[]).body;
        metrics
            .contains(r#"ratelimit_xds_updates_total{outcome="refused"}"#)
            .then_some(metrics)
            .filter(|m| !m.contains(r#"ratelimit_xds_updates_total{outcome="refused"} 0"#))
    })
    .await
    .expect("the oversized update is counted as refused");
    assert!(
        refused.contains("ratelimit_xds_update_bytes_limit 1000"),
        "{refused}"
    );
    assert_eq!(admitted(&rpc, "d", "k", 2).await, 1, "still 2 a day");
    // Had it been applied, domain-1 would deny everything (0 a day).
    assert_eq!(admitted(&rpc, "domain-1", "k", 1).await, 1);

    ads.serve(
        "v3",
        &[
            config("small", "d", "k", 2),
            config("later", "later", "k", 1),
        ],
    );
    assert!(ads.reply_to("v3").await.error_detail.is_none());
    assert_eq!(admitted(&rpc, "later", "k", 2).await, 1, "v3 is in service");
}

/// Over mutual TLS, as Envoy Gateway's xDS server requires: `serve` checks
/// the server's certificate against `--config-xds-tls-ca` and the name
/// `--config-xds-tls-server-name`, and presents its own certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_serve_checks_the_server_and_presents_its_certificate() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let scratch = TempDir::new("xds-tls");
    let ca = TestCa::new(&scratch.0, "xds");
    let server = ca.issue("server", &["envoy-gateway"]);
    let client = ca.issue("client", &["envoy-ratelimit"]);
    let ads = AdsServer::start_tls(&server.cert, &server.key, ca.ca()).await;
    ads.serve("v1", &[config("tls", "tls", "k", 1)]);
    let url = format!("https://{}", ads.addr());
    let path = |p: &std::path::Path| p.to_str().expect("a UTF-8 path").to_owned();
    let (ca_path, cert, key) = (path(ca.ca()), path(&client.cert), path(&client.key));
    let serve = spawn_serve(
        &url,
        &[
            "--config-xds-tls-ca",
            &ca_path,
            "--config-xds-tls-cert",
            &cert,
            "--config-xds-tls-key",
            &key,
            "--config-xds-tls-server-name",
            "envoy-gateway",
        ],
    );
    assert!(ads.reply_to("v1").await.error_detail.is_none());
    let rpc = channel(&serve.address()).await;
    assert_eq!(admitted(&rpc, "tls", "k", 2).await, 1, "1 a day, over TLS");
}
