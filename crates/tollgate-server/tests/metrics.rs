//! The Prometheus counters for shadow mode, per rule and global.

mod common;

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
";

/// Sends `calls` requests for `key=v` through `engine`, counting each in `metrics`.
fn send(engine: &Engine<ManualClock>, metrics: &Metrics, key: &str, calls: usize) {
    let request = RateLimitRequest {
        domain: "m".to_owned(),
        descriptors: vec![Descriptor::new([(key, "v")])],
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
    let clock = ManualClock::new(Timestamp::from_secs(common::MINUTE_START));
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
            r#"ratelimit_total_hits_total{domain="m",descriptor="shadowed"} 5"#,
            r#"ratelimit_within_limit_total{domain="m",descriptor="shadowed"} 2"#,
            r#"ratelimit_over_limit_total{domain="m",descriptor="shadowed"} 3"#,
            r#"ratelimit_shadow_mode_total{domain="m",descriptor="shadowed"} 3"#,
            r#"ratelimit_over_limit_total{domain="m",descriptor="enforced"} 1"#,
            "ratelimit_global_shadow_mode_total 0",
        ],
    );
    assert!(
        !text.contains(r#"ratelimit_shadow_mode_total{domain="m",descriptor="enforced"}"#),
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
            r#"ratelimit_over_limit_total{domain="m",descriptor="enforced"} 3"#,
            "ratelimit_global_shadow_mode_total 3",
        ],
    );
}
