//! The Prometheus series: upstream's names and labels per rule, shadow mode per rule and global.

mod minute;

use std::path::Path;
use std::sync::Arc;

use tollgate_core::{ManualClock, Timestamp};
use tollgate_protocol::rls::{Descriptor, RateLimitRequest};
use tollgate_rules::{LoadOptions, load_sources};
use tollgate_server::metrics::{ConfigStats, DEFAULT_NEAR_LIMIT_RATIO, Metrics};
use tollgate_server::reload::LiveEngine;
use tollgate_server::{Engine, EngineOptions};

const LIMITS: &str = "
domain: m
descriptors:
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: enforced
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: path
        value: /a.b
        rate_limit: {unit: minute, requests_per_unit: 100}
        descriptors:
          - key: ip
            rate_limit: {unit: minute, requests_per_unit: 100}
";

/// Sends `calls` requests for `key=v` through `engine`, counting each in `metrics`.
fn send(engine: &Engine<ManualClock>, metrics: &Metrics, key: &str, calls: usize) {
    send_entries(engine, metrics, &[(key, "v")], calls);
}

/// Sends `calls` requests of one descriptor with `entries`, counting each in `metrics`.
fn send_entries(
    engine: &Engine<ManualClock>,
    metrics: &Metrics,
    entries: &[(&str, &str)],
    calls: usize,
) {
    let request = RateLimitRequest {
        domain: "m".to_owned(),
        descriptors: vec![Descriptor::new(entries.iter().copied())],
        hits_addend: 0,
    };
    for _ in 0..calls {
        let response = engine.should_rate_limit(&request).expect("valid request");
        metrics.observe(engine.rules(), &request, &response);
    }
}

/// An engine on [`LIMITS`] with `options`, and metrics over it.
fn engine_and_metrics(options: EngineOptions) -> (Arc<Engine<ManualClock>>, Metrics) {
    let loaded = load_sources([(Path::new("m.yaml"), LIMITS)], LoadOptions::default());
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    let clock = ManualClock::new(Timestamp::from_secs(minute::MINUTE_START));
    let engine = Arc::new(Engine::new(Arc::new(loaded.rule_set), options, clock));
    let live = Arc::new(LiveEngine::fixed(Arc::clone(&engine)));
    let metrics = Metrics::new(live as Arc<dyn ConfigStats>, DEFAULT_NEAR_LIMIT_RATIO);
    (engine, metrics)
}

fn assert_lines(text: &str, expected: &[&str]) {
    let lines: Vec<&str> = text.lines().collect();
    for line in expected {
        assert!(lines.contains(line), "no `{line}` in:\n{text}");
    }
}

#[test]
fn a_shadow_rule_counts_what_it_let_through_as_over_limit_and_shadow_mode() {
    let (engine, metrics) = engine_and_metrics(EngineOptions::default());
    send(&engine, &metrics, "shadowed", 5);
    send(&engine, &metrics, "enforced", 3);
    let text = metrics.render().expect("render");
    assert_lines(
        &text,
        &[
            r#"ratelimit_service_rate_limit_total_hits{domain="m",key1="shadowed"} 5"#,
            r#"ratelimit_service_rate_limit_within_limit{domain="m",key1="shadowed"} 2"#,
            r#"ratelimit_service_rate_limit_over_limit{domain="m",key1="shadowed"} 3"#,
            r#"ratelimit_service_rate_limit_shadow_mode{domain="m",key1="shadowed"} 3"#,
            r#"ratelimit_service_rate_limit_over_limit{domain="m",key1="enforced"} 1"#,
            "ratelimit_global_shadow_mode_total 0",
        ],
    );
    assert!(
        !text.contains(r#"ratelimit_service_rate_limit_shadow_mode{domain="m",key1="enforced"}"#),
        "{text}"
    );
}

#[test]
fn global_shadow_mode_counts_each_request_it_turned_to_ok() {
    let options = EngineOptions {
        global_shadow_mode: true,
        ..EngineOptions::default()
    };
    let (engine, metrics) = engine_and_metrics(options);
    send(&engine, &metrics, "enforced", 5);
    let text = metrics.render().expect("render");
    assert_lines(
        &text,
        &[
            r#"ratelimit_service_rate_limit_over_limit{domain="m",key1="enforced"} 3"#,
            "ratelimit_global_shadow_mode_total 3",
        ],
    );
}

#[test]
fn rules_two_levels_deep_get_key2_and_deeper_levels_add_into_it() {
    let (engine, metrics) = engine_and_metrics(EngineOptions::default());
    send_entries(&engine, &metrics, &[("tenant", "t"), ("path", "/a.b")], 2);
    let three = [("tenant", "t"), ("path", "/a.b"), ("ip", "10.0.0.1")];
    send_entries(&engine, &metrics, &three, 3);
    send(&engine, &metrics, "enforced", 1);
    let text = metrics.render().expect("render");
    assert_lines(
        &text,
        &[
            // upstream's mapping: a dot in a value is sanitised, the third level adds into key2.
            r#"ratelimit_service_rate_limit_total_hits{domain="m",key1="tenant",key2="path_/a_b"} 5"#,
            r#"ratelimit_service_rate_limit_within_limit{domain="m",key1="tenant",key2="path_/a_b"} 5"#,
            r#"ratelimit_service_rate_limit_total_hits{domain="m",key1="enforced"} 1"#,
            "# TYPE ratelimit_service_rate_limit_total_hits counter",
            "ratelimit_service_config_load_success 0",
            "ratelimit_service_config_load_error 0",
            r#"ratelimit_service_should_rate_limit_error{err_type="service_error"} 0"#,
            r#"ratelimit_service_should_rate_limit_error{err_type="redis_error"} 0"#,
            r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 0"#,
        ],
    );
    assert!(!text.contains("ratelimit_total_hits"), "{text}");
}
