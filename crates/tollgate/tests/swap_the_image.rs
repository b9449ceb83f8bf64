//! "Swap the image": `tollgate serve` with exactly the environment of Istio's sample
//! rate limit Deployment and no flags, behind a real Envoy with Istio's sample global
//! rate limit filter, answers, listens and reports the way envoyproxy/ratelimit does.
//!
//! Istio's Deployment sets `LOG_LEVEL`, `REDIS_SOCKET_TYPE`, `REDIS_URL`, `USE_STATSD`,
//! `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`, `RUNTIME_WATCH_ROOT`, `RUNTIME_IGNOREDOTFILES`,
//! `HOST` and `GRPC_HOST` (`::`), and mounts its ConfigMap at
//! `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config`. Here the ConfigMap is a scratch directory
//! with the kubelet's `..data` links, Redis runs on loopback, and the ports, which the
//! Deployment leaves at upstream's defaults, come from the free-port helper. Every
//! connection goes to 127.0.0.1.

use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::symlink;
use std::path::Path;

use tollgate_testkit::envoy::{Envoy, envoy_binary};
use tollgate_testkit::http::{get, try_get};
use tollgate_testkit::ports::free_port;
use tollgate_testkit::process::log_tail;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tollgate_testkit::upstream::Upstream;

/// The ConfigMap of Istio's global rate limit task.
const CONFIG_YAML: &str = "\
domain: ratelimit
descriptors:
  - key: PATH
    value: \"/productpage\"
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: PATH
    rate_limit:
      unit: minute
      requests_per_unit: 100
";

/// Lays `dir` out as the kubelet mounts a ConfigMap with the key `config.yaml`.
fn mount_configmap(dir: &Path) {
    let version = "..2026_01_01_00_00_00.000000001";
    fs::create_dir_all(dir.join(version)).expect("the version directory");
    fs::write(dir.join(version).join("config.yaml"), CONFIG_YAML).expect("the config");
    symlink(version, dir.join("..data")).expect("the ..data link");
    symlink("..data/config.yaml", dir.join("config.yaml")).expect("the key's link");
}

/// Envoy with Istio's sample global rate limit filter (domain `ratelimit`,
/// `failure_mode_deny: true`, a `:path` → `PATH` descriptor on the route) in
/// front of `upstream`, asking the rate limit service on `rls`.
fn bootstrap(admin: u16, listener: u16, upstream: SocketAddr, rls: u16) -> String {
    format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
static_resources:
  listeners:
  - name: ingress
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {listener} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - request_headers: {{ header_name: ":path", descriptor_key: "PATH" }}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: ratelimit
              failure_mode_deny: true
              timeout: 10s
              rate_limit_service:
                grpc_service:
                  envoy_grpc: {{ cluster_name: ratelimit }}
                transport_api_version: V3
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {upstream_port} }} }} }}
  - name: ratelimit
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: ratelimit
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {rls} }} }} }}
"#,
        upstream_port = upstream.port()
    )
}

#[test]
fn istios_sample_deployment_runs_tollgate_with_the_image_swapped() {
    let scratch = TempDir::new("swap-the-image");
    let data = scratch.0.join("data");
    mount_configmap(&data.join("ratelimit").join("config"));
    let redis = RedisServer::start();
    let redis_url = format!("127.0.0.1:{}", redis.port);
    let (grpc_port, http_port, debug_port) = (free_port(), free_port(), free_port());
    let (grpc, http, debug) = (
        grpc_port.to_string(),
        http_port.to_string(),
        debug_port.to_string(),
    );
    let root = data.to_str().expect("a UTF-8 path");
    let env = [
        ("LOG_LEVEL", "debug"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", redis_url.as_str()),
        ("USE_STATSD", "false"),
        ("RUNTIME_ROOT", root),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("HOST", "::"),
        ("GRPC_HOST", "::"),
        ("GRPC_PORT", grpc.as_str()),
        ("PORT", http.as_str()),
        ("DEBUG_PORT", debug.as_str()),
    ];
    let server = Server::spawn_with_env(&["serve"], &env);
    // Where upstream listens: every interface, on the configured ports (the
    // Deployment sets no DEBUG_HOST, so upstream's 0.0.0.0).
    assert_eq!(server.address(), format!("[::]:{grpc_port}"));
    assert_eq!(
        server.line_after("http listening on "),
        format!("[::]:{http_port}")
    );
    assert_eq!(
        server.line_after("debug listening on "),
        format!("0.0.0.0:{debug_port}")
    );
    let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let health = get(loopback(http_port), "/healthcheck", &[]);
    assert_eq!(health.status, 200, "{health:#?}");
    let rlconfig = get(loopback(debug_port), "/rlconfig", &[]);
    assert_eq!(rlconfig.status, 200, "{rlconfig:#?}");
    assert!(rlconfig.body.contains("productpage"), "{rlconfig:#?}");

    let upstream = Upstream::spawn();
    let (admin, listener) = (free_port(), free_port());
    let envoy = Envoy::start(
        &envoy_binary(),
        &scratch.0,
        &bootstrap(admin, listener, upstream.addr, grpc_port),
        admin,
    );
    let through_envoy = |path: &str| {
        try_get(loopback(listener), path, &[]).unwrap_or_else(|error| {
            panic!("GET {path}: {error}; envoy log:\n{}", log_tail(&envoy.log))
        })
    };
    // 1 per minute on /productpage: the first passes; of the next two, at
    // least one is in the same minute and is Envoy's 429.
    let first = through_envoy("/productpage");
    assert_eq!(first.status, 200, "{first:#?}");
    let statuses: Vec<u16> = (0..2)
        .map(|_| through_envoy("/productpage").status)
        .collect();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert!(limited >= 1, "{statuses:?}");
    assert!(
        statuses.iter().all(|s| [200, 429].contains(s)),
        "{statuses:?}"
    );
    // Any other path falls to the key-only rule, 100 per minute.
    let other = through_envoy("/reviews");
    assert_eq!(other.status, 200, "{other:#?}");
    assert_eq!(other.body, "upstream ok", "{other:#?}");

    // Upstream's metric names on the Prometheus endpoint.
    let metrics = get(loopback(http_port), "/metrics", &[]).body;
    for line in [
        r#"ratelimit_service_rate_limit_total_hits{domain="ratelimit",key1="PATH_/productpage"} 3"#
            .to_owned(),
        format!(
            r#"ratelimit_service_rate_limit_over_limit{{domain="ratelimit",key1="PATH_/productpage"}} {limited}"#
        ),
        r#"ratelimit_service_rate_limit_within_limit{domain="ratelimit",key1="PATH"} 1"#.to_owned(),
        r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 4"#.to_owned(),
        "ratelimit_service_config_load_success 1".to_owned(),
        "ratelimit_service_config_load_error 0".to_owned(),
        r#"ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 4"#
            .to_owned(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no `{line}` in:\n{metrics}"
        );
    }
    // Typed as upstream's exporter types them, and listed on the debug port's /stats.
    assert!(
        metrics
            .lines()
            .any(|l| l == "# TYPE ratelimit_service_total_requests counter"),
        "{metrics}"
    );
    let stats = get(loopback(debug_port), "/stats", &[]);
    assert_eq!(stats.status, 200, "{stats:#?}");
    let hits = "ratelimit.service.rate_limit.ratelimit.PATH_/productpage.total_hits: 3";
    assert!(
        stats.body.lines().any(|l| l == hits),
        "no `{hits}` in:\n{}",
        stats.body
    );
    // The counters are in the Redis of REDIS_URL.
    assert_ne!(redis.cli(&["DBSIZE"]).trim(), "0");
}
