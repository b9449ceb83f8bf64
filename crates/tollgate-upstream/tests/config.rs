//! Cluster YAML: the full form loads with its defaults, and bad input names the field.

use std::time::Duration;

use tollgate_upstream::{ClusterConfig, LbPolicy, StatusRange};

#[test]
fn full_cluster_loads() {
    let config = ClusterConfig::from_yaml(
        r#"
name: checkout
lb_policy: ring_hash
ring_hash: {virtual_nodes: 100}
endpoints:
  - address: 10.0.0.1:8080
    weight: 5
  - address: checkout-2.internal:8080
outlier_detection:
  consecutive_5xx: 7
  base_ejection_time: 0.5s
  max_ejection_percent: 50
circuit_breaker:
  failure_threshold: 10
  open_duration: 2s
  max_requests: 512
health_check:
  path: /healthz
  interval: 500ms
  expected_statuses: [200, {start: 300, end: 400}]
"#,
    )
    .unwrap();
    assert_eq!(config.lb_policy, LbPolicy::RingHash);
    assert_eq!(config.ring_hash.virtual_nodes, 100);
    assert_eq!(config.endpoints[0].weight, 5);
    assert_eq!(config.endpoints[1].weight, 1);
    let od = config.outlier_detection.unwrap();
    assert_eq!(od.consecutive_5xx, 7);
    assert_eq!(od.consecutive_gateway_failure, 5);
    assert_eq!(od.enforcing_consecutive_5xx, 100);
    assert_eq!(od.enforcing_consecutive_gateway_failure, 0);
    assert_eq!(od.base_ejection_time, Duration::from_millis(500));
    assert_eq!(od.max_ejection_time, Duration::from_secs(300));
    assert_eq!(od.interval, Duration::from_secs(10));
    let cb = config.circuit_breaker.unwrap();
    assert_eq!(cb.max_requests, Some(512));
    assert_eq!(cb.half_open_requests, 1);
    let hc = config.health_check.unwrap();
    assert_eq!(hc.timeout, Duration::from_secs(1));
    assert_eq!(
        hc.expected_statuses,
        [
            StatusRange {
                start: 200,
                end: 201
            },
            StatusRange {
                start: 300,
                end: 400
            }
        ]
    );
    assert_eq!((hc.healthy_threshold, hc.unhealthy_threshold), (2, 3));
}

#[test]
fn defaults_are_envoys() {
    let config =
        ClusterConfig::from_yaml("name: a\nendpoints: [{address: 'h:1'}]\noutlier_detection: {}\n")
            .unwrap();
    assert_eq!(config.lb_policy, LbPolicy::RoundRobin);
    assert_eq!(config.healthy_panic_threshold, 50);
    let od = config.outlier_detection.unwrap();
    assert_eq!(od.consecutive_5xx, 5);
    assert_eq!(od.base_ejection_time, Duration::from_secs(30));
    assert_eq!(od.max_ejection_percent, 10);
    assert!(!od.always_eject_one_host);
}

fn error(yaml: &str) -> String {
    ClusterConfig::from_yaml(yaml).unwrap_err().to_string()
}

#[test]
fn bad_values_name_the_field() {
    let cases = [
        (
            "name: a\nendpoints: []\n",
            "endpoints: a cluster needs at least one endpoint",
        ),
        (
            "name: a\nendpoints: [{address: 'h:1', weight: 0}]\n",
            "endpoints[0].weight: must be 1 to 1000, got 0",
        ),
        (
            "name: a\nendpoints: [{address: 'h:1'}, {address: 'nohost'}]\n",
            "endpoints[1].address: `nohost` needs a port",
        ),
        (
            "name: a\nendpoints: [{address: 'h:99999'}]\n",
            "endpoints[0].address: `h:99999` has no valid port",
        ),
        (
            "name: a\nendpoints: [{address: 'h:1'}, {address: 'h:1'}]\n",
            "endpoints[1].address: `h:1` is listed twice",
        ),
        (
            "name: a\nendpoints: [{address: 'h:1'}]\noutlier_detection: {max_ejection_percent: 101}\n",
            "outlier_detection.max_ejection_percent: is a percentage, 0 to 100, got 101",
        ),
        (
            "name: a\nendpoints: [{address: 'h:1'}]\noutlier_detection: {consecutive_5xx: 0}\n",
            "outlier_detection.consecutive_5xx: must be at least 1",
        ),
        (
            "name: a\nendpoints: [{address: 'h:1'}]\ncircuit_breaker: {open_duration: 10s, max_open_duration: 1s}\n",
            "circuit_breaker.max_open_duration: must not be shorter than open_duration",
        ),
        (
            "name: a\nendpoints: [{address: 'h:1'}]\ncircuit_breaker: {max_requests: 0}\n",
            "circuit_breaker.max_requests: must be at least 1",
        ),
        (
            "name: a\nendpoints: [{address: 'h:1'}]\nhealth_check: {path: healthz}\n",
            "health_check.path: must start with `/`",
        ),
        (
            "name: a\nendpoints: [{address: 'h:1'}]\nhealth_check: {path: /, expected_statuses: [{start: 300, end: 200}]}\n",
            "health_check.expected_statuses[0]: range [300, 200) must be non-empty",
        ),
        (
            "name: a\nlb_policy: ring_hash\nring_hash: {virtual_nodes: 100000}\nendpoints: [{address: 'h:1', weight: 1000}]\n",
            "ring_hash.virtual_nodes: the ring would hold 100000000 virtual nodes",
        ),
    ];
    for (yaml, expected) in cases {
        let message = error(yaml);
        assert!(
            message.starts_with(expected),
            "{yaml}\nexpected `{expected}`\n     got `{message}`"
        );
    }
}

#[test]
fn syntax_and_schema_errors_are_reported() {
    assert!(
        error("name: a\nendpoints: [{address: 'h:1'}]\nlb_policy: fastest\n").contains("fastest")
    );
    assert!(error("name: a\nendpoints: [{address: 'h:1'}]\nretries: 3\n").contains("retries"));
    assert!(
        error("name: a\nendpoints: [{address: 'h:1'}]\noutlier_detection: {interval: soon}\n")
            .contains("`soon` is not a duration")
    );
    assert!(!error("name: [\n").is_empty());
}
