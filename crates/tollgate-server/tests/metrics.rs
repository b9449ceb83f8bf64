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

/// An engine on `limits` (domain `m`), for a metrics object that outlives it.
fn engine_on(limits: &str) -> Arc<Engine<ManualClock>> {
    let loaded = load_sources([(Path::new("m.yaml"), limits)], LoadOptions::default());
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    let clock = ManualClock::new(Timestamp::from_secs(minute::MINUTE_START));
    Arc::new(Engine::new(
        Arc::new(loaded.rule_set),
        EngineOptions::default(),
        clock,
    ))
}

/// The hits counted under `stats_key` (upstream's dotted key).
fn total_hits(metrics: &Metrics, stats_key: &str) -> u64 {
    metrics
        .rule_stats()
        .snapshot()
        .into_iter()
        .find(|(key, _)| key.dotted() == stats_key)
        .map_or(0, |(_, values)| values[0])
}

#[test]
fn after_a_reload_a_request_counts_under_the_rule_it_matches_now() {
    // The same request matches a key-only rule before the reload and an
    // exact-value rule after it: each config's counts go to its own key,
    // whatever the metrics kept from the first config's rule.
    let before = engine_on(
        "domain: m\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
    );
    let live = Arc::new(LiveEngine::fixed(Arc::clone(&before)));
    let metrics = Metrics::new(live as Arc<dyn ConfigStats>, DEFAULT_NEAR_LIMIT_RATIO);
    send_entries(&before, &metrics, &[("user", "alice")], 3);
    let after = engine_on(
        "domain: m\ndescriptors:\n  - key: user\n    value: alice\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
    );
    drop(before);
    send_entries(&after, &metrics, &[("user", "alice")], 2);
    assert_eq!(total_hits(&metrics, "m.user"), 3);
    assert_eq!(total_hits(&metrics, "m.user_alice"), 2);
}

#[test]
fn every_rule_of_a_config_past_the_kept_rules_bound_counts_under_its_own_key() {
    // 5000 rules: past the 4096 whose counters are kept against the rule,
    // the rest are counted by their keys, one each.
    let rules = 5000;
    let mut limits = String::from("domain: m\ndescriptors:\n  - key: user\n    descriptors:\n");
    for i in 0..rules {
        limits.push_str(&format!(
            "      - key: item\n        value: i{i}\n        rate_limit: {{unit: minute, requests_per_unit: 100}}\n"
        ));
    }
    let engine = engine_on(&limits);
    let live = Arc::new(LiveEngine::fixed(Arc::clone(&engine)));
    let metrics = Metrics::new(live as Arc<dyn ConfigStats>, DEFAULT_NEAR_LIMIT_RATIO);
    for round in 1..=2 {
        for i in 0..rules {
            send_entries(
                &engine,
                &metrics,
                &[("user", "u"), ("item", &format!("i{i}"))],
                1,
            );
        }
        for i in [0, 4095, 4096, rules - 1] {
            assert_eq!(total_hits(&metrics, &format!("m.user.item_i{i}")), round);
        }
    }
    let snapshot = metrics.rule_stats().snapshot();
    assert_eq!(snapshot.len(), rules);
    assert!(snapshot.iter().all(|(_, values)| values[0] == 2));
}
