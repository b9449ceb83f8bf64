//! The metric families a proxy registers: names, labels and values after real picks.

mod cluster_fixture;
mod targeted_outcome;

use cluster_fixture::{cluster_with_metrics, endpoints};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use targeted_outcome::hit;
use tollgate_upstream::{Outcome, UpstreamMetrics};

#[test]
fn registered_families_report_in_flight_ejections_and_breaker_state() {
    let metrics = UpstreamMetrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let (cluster, _) = cluster_with_metrics(
        &format!(
            "name: pay\nendpoints:\n{}outlier_detection: {{consecutive_5xx: 1, max_ejection_percent: 50}}\ncircuit_breaker: {{failure_threshold: 2, max_requests: 1}}\n",
            endpoints(&[1, 1])
        ),
        &metrics,
    );
    let held = cluster.pick(None).unwrap();
    assert!(cluster.pick(None).is_err(), "max_requests 1");
    let address = held.address().to_owned();
    assert_eq!(metrics.endpoint_in_flight("pay", &address), 1);
    drop(held);
    hit(&cluster, 0, Outcome::ServerError);
    hit(&cluster, 1, Outcome::GatewayFailure);
    assert_eq!(metrics.breaker_state("pay"), 1);

    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    for line in [
        r#"upstream_endpoint_in_flight{cluster="pay",endpoint="10.0.0.1:80"} 0"#,
        r#"upstream_endpoint_ejections_total{cluster="pay",endpoint="10.0.0.1:80"} 1"#,
        r#"upstream_endpoint_ejected{cluster="pay",endpoint="10.0.0.1:80"} 1"#,
        r#"upstream_ejections_overflow_total{cluster="pay"} 1"#,
        r#"upstream_endpoint_healthy{cluster="pay",endpoint="10.0.0.2:80"} 1"#,
        r#"upstream_breaker_state{cluster="pay"} 1"#,
        r#"upstream_breaker_opened_total{cluster="pay"} 1"#,
        r#"upstream_rejected_max_requests_total{cluster="pay"} 1"#,
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
}
