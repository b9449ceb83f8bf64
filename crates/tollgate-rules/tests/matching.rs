//! The matcher answers like envoyproxy/ratelimit for the shapes its README documents.

use std::path::Path;

use tollgate_core::Unit;
use tollgate_rules::{
    AlgorithmKind, Applied, LoadOptions, Rule, RuleSet, WindowLength, load_sources,
};

fn rules(yaml: &str) -> RuleSet {
    let loaded = load_sources([(Path::new("test.yaml"), yaml)], LoadOptions::default());
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    loaded.rule_set
}

fn per_unit(rule: Option<&Rule>) -> Option<(u32, Unit)> {
    let limit = rule?.limits.first()?;
    match limit.window? {
        WindowLength::Unit { unit, .. } => Some((limit.requests_per_unit, unit)),
        WindowLength::Duration(_) => None,
    }
}

const DATABASES: &str = "
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 50
";

#[test]
fn exact_values_pick_their_own_rule_and_unknown_values_get_none() {
    let set = rules(DATABASES);
    assert_eq!(
        per_unit(set.find("mongo_cps", &[("database", "users")])),
        Some((500, Unit::Second))
    );
    assert_eq!(
        per_unit(set.find("mongo_cps", &[("database", "default")])),
        Some((50, Unit::Second))
    );
    assert!(set.find("mongo_cps", &[("database", "other")]).is_none());
    assert!(set.find("elsewhere", &[("database", "users")]).is_none());
    assert!(set.find::<&str, &str>("mongo_cps", &[]).is_none());
}

const MESSAGING: &str = "
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: DAY
      requests_per_unit: 100
";

#[test]
fn nested_descriptors_and_key_only_defaults() {
    let set = rules(MESSAGING);
    let marketing = [("message_type", "marketing"), ("to_number", "2061111111")];
    assert_eq!(
        per_unit(set.find("messaging", &marketing)),
        Some((5, Unit::Day))
    );
    assert_eq!(
        per_unit(set.find("messaging", &[("to_number", "2061111111")])),
        Some((100, Unit::Day))
    );
    // The first level has no limit of its own.
    assert!(
        set.find("messaging", &[("message_type", "marketing")])
            .is_none()
    );
    // Another message type has no nested rule.
    assert!(
        set.find(
            "messaging",
            &[("message_type", "transactional"), ("to_number", "1")]
        )
        .is_none()
    );
}

const PER_IP: &str = "
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 100
";

#[test]
fn an_exact_value_beats_the_key_only_rule_and_an_empty_value_takes_the_key_only_rule() {
    let set = rules(PER_IP);
    assert_eq!(
        per_unit(set.find("edge_proxy_per_ip", &[("remote_address", "50.0.0.5")])),
        Some((100, Unit::Second))
    );
    assert_eq!(
        per_unit(set.find("edge_proxy_per_ip", &[("remote_address", "10.0.0.1")])),
        Some((10, Unit::Second))
    );
    assert_eq!(
        per_unit(set.find("edge_proxy_per_ip", &[("remote_address", "")])),
        Some((10, Unit::Second))
    );
}

const DEPTH: &str = "
domain: depth
descriptors:
  - key: key
    value: value
    rate_limit:
      unit: second
      requests_per_unit: 300
    descriptors:
      - key: subkey
        value: subvalue
        rate_limit:
          unit: minute
          requests_per_unit: 20
";

#[test]
fn a_rule_applies_only_at_the_requests_last_entry() {
    let set = rules(DEPTH);
    assert_eq!(
        per_unit(set.find("depth", &[("key", "value")])),
        Some((300, Unit::Second))
    );
    assert_eq!(
        per_unit(set.find("depth", &[("key", "value"), ("subkey", "subvalue")])),
        Some((20, Unit::Minute))
    );
    // A deeper level that does not match does not fall back to the parent's rule.
    assert!(
        set.find("depth", &[("key", "value"), ("subkey", "other")])
            .is_none()
    );
    // A request longer than the tree gets nothing.
    assert!(
        set.find(
            "depth",
            &[("key", "value"), ("subkey", "subvalue"), ("x", "y")]
        )
        .is_none()
    );
}

const WILDCARDS: &str = "
domain: wildcards
descriptors:
  - key: path
    value: /api/*/orders
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/v1/orders
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: host
    value: '*.example.com'
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: code
    value: 404
    rate_limit: {unit: second, requests_per_unit: 6}
";

#[test]
fn wildcards_rank_between_exact_and_key_only_in_file_order() {
    let set = rules(WILDCARDS);
    let find = |key, value| per_unit(set.find("wildcards", &[(key, value)])).map(|(n, _)| n);
    assert_eq!(find("path", "/api/v1/orders"), Some(3), "exact wins");
    assert_eq!(
        find("path", "/api/v2/orders"),
        Some(1),
        "first wildcard in file order"
    );
    assert_eq!(find("path", "/api/v2/users"), Some(2));
    assert_eq!(
        find("path", "/api/"),
        Some(2),
        "`*` matches the empty string"
    );
    assert_eq!(find("path", "/other"), Some(4), "key-only last");
    assert_eq!(find("path", ""), Some(4));
    assert_eq!(find("host", "a.example.com"), Some(5));
    assert_eq!(find("host", "example.com"), None);
    assert_eq!(
        find("code", "404"),
        Some(6),
        "non-string values load as text"
    );
}

const REPLACES: &str = "
domain: replaces
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: minute
      requests_per_unit: 10
  - key: premium
    value: 'yes'
    rate_limit:
      unit: minute
      requests_per_unit: 1000
      replaces:
        - name: per_user
  - key: internal
    rate_limit:
      unlimited: true
      replaces:
        - name: per_user
  - key: free
    rate_limit:
      unlimited: true
";

#[test]
fn replaces_drops_named_limits_across_the_request_and_unlimited_counts_nothing() {
    let set = rules(REPLACES);
    let user: &[(&str, &str)] = &[("user", "alice")];
    let premium: &[(&str, &str)] = &[("premium", "yes")];
    let internal: &[(&str, &str)] = &[("internal", "x")];
    let free: &[(&str, &str)] = &[("free", "x")];

    let alone = set.resolve("replaces", &[user]);
    assert!(matches!(&alone[0], Applied::Limited { limit_indices, .. } if limit_indices == &[0]));

    let with_premium = set.resolve("replaces", &[user, premium]);
    assert_eq!(with_premium[0], Applied::NoLimit);
    assert!(
        matches!(&with_premium[1], Applied::Limited { rule, .. } if rule.limits[0].requests_per_unit == 1000)
    );

    // An unlimited rule's `replaces` still counts.
    let with_internal = set.resolve("replaces", &[user, internal]);
    assert_eq!(with_internal[0], Applied::NoLimit);
    assert!(matches!(with_internal[1], Applied::Unlimited(_)));

    let unmatched: &[(&str, &str)] = &[("nothing", "x")];
    let mixed = set.resolve("replaces", &[free, unmatched]);
    assert!(matches!(mixed[0], Applied::Unlimited(_)));
    assert_eq!(mixed[1], Applied::NoLimit);
}

#[test]
fn shadow_mode_and_detailed_metric_are_kept_on_the_rule() {
    let set = rules(
        "
domain: shadow
descriptors:
  - key: k
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 3}
",
    );
    let rule = set.find("shadow", &[("k", "v")]).unwrap();
    assert!(rule.shadow_mode && rule.detailed_metric);
    let plain = set.find("shadow", &[("plain", "v")]).unwrap();
    assert!(!plain.shadow_mode && !plain.detailed_metric);
}

#[test]
fn missing_requests_per_unit_means_zero() {
    let set = rules("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n");
    assert_eq!(
        per_unit(set.find("d", &[("k", "v")])),
        Some((0, Unit::Second))
    );
}

#[test]
fn extensions_build_their_algorithms() {
    let set = rules(
        "
domain: ext
descriptors:
  - key: api
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}
      - {window: 5m, requests_per_unit: 1000, algorithm: sliding_window}
      - {unit: minute, unit_multiplier: 15, requests_per_unit: 100}
      - {unit: second, requests_per_unit: 5, algorithm: GCRA}
      - {unit: second, requests_per_unit: 5, algorithm: leaky_bucket}
      - {unit: second, requests_per_unit: 5, algorithm: sliding_log}
",
    );
    let rule = set.find("ext", &[("api", "x")]).unwrap();
    let kinds: Vec<AlgorithmKind> = rule.limits.iter().map(|l| l.algorithm_kind).collect();
    assert_eq!(
        kinds,
        [
            AlgorithmKind::TokenBucket,
            AlgorithmKind::SlidingWindow,
            AlgorithmKind::FixedWindow,
            AlgorithmKind::Gcra,
            AlgorithmKind::LeakyBucket,
            AlgorithmKind::SlidingLog
        ]
    );
    let algorithms: Vec<_> = rule.limits.iter().map(|l| l.algorithm.unwrap()).collect();
    assert_eq!(algorithms[0].capacity(), 20);
    assert_eq!(algorithms[1].window().as_secs(), 300);
    assert_eq!(algorithms[2].window().as_secs(), 900);
    assert_eq!(algorithms[2].capacity(), 100);
    assert_eq!(
        algorithms[3].capacity(),
        5,
        "gcra burst defaults to requests_per_unit"
    );
    assert_eq!(
        algorithms[4].capacity(),
        1,
        "leaky bucket burst defaults to 0"
    );
    let Applied::Limited { limit_indices, .. } = &set.resolve("ext", &[&[("api", "x")]])[0] else {
        panic!("expected limits")
    };
    assert_eq!(limit_indices, &[0, 1, 2, 3, 4, 5]);
}

/// envoyproxy/ratelimit's key: parts joined with `_`, the unit left out.
fn upstream_key(domain: &str, entries: &[(&str, &str)]) -> String {
    let mut key = format!("{domain}_");
    for (k, v) in entries {
        key.push_str(&format!("{k}_{v}_"));
    }
    key
}

#[test]
fn counter_keys_do_not_collide_where_upstreams_do() {
    let set = rules(
        "
domain: d
descriptors:
  - key: a_b
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: c
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: c
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: per
    rate_limits:
      - {unit: minute, requests_per_unit: 1}
      - {unit: hour, requests_per_unit: 1}
",
    );
    let key = |entries: &[(&str, &str)], limit| {
        set.find("d", entries)
            .unwrap()
            .counter_key("d", entries, limit)
    };

    // (a_b, c) vs (a, b_c): one text upstream, two keys here.
    let left: &[(&str, &str)] = &[("a_b", "c")];
    let right: &[(&str, &str)] = &[("a", "b_c")];
    assert_eq!(upstream_key("d", left), upstream_key("d", right));
    assert_ne!(key(left, 0), key(right, 0));

    // The same across two levels.
    let left: &[(&str, &str)] = &[("a_b", "x"), ("c", "y")];
    let right: &[(&str, &str)] = &[("a", "b_x"), ("c", "y")];
    assert_eq!(upstream_key("d", left), upstream_key("d", right));
    assert_ne!(key(left, 0), key(right, 0));

    // A per-minute and a per-hour limit on one descriptor: one key upstream (at
    // a window start both share), two here.
    let per: &[(&str, &str)] = &[("per", "x")];
    assert_ne!(key(per, 0), key(per, 1));

    // Domain boundaries too: (x_y, (k, v)) vs (x, (y_k, v)).
    let rule = set.find("d", per).unwrap();
    assert_eq!(
        upstream_key("x_y", &[("k", "v")]),
        upstream_key("x", &[("y_k", "v")])
    );
    assert_ne!(
        rule.counter_key("x_y", &[("k", "v")], 0),
        rule.counter_key("x", &[("y_k", "v")], 0)
    );

    // The same inputs give the same key.
    assert_eq!(key(per, 0), key(per, 0));
}

#[test]
fn merge_domains_joins_files_of_one_domain() {
    let a = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let b = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
    let merged = load_sources(
        [(Path::new("a.yaml"), a), (Path::new("b.yaml"), b)],
        LoadOptions {
            merge_domains: true,
            ..LoadOptions::default()
        },
    );
    assert!(!merged.diagnostics.has_errors(), "{}", merged.diagnostics);
    assert!(merged.rule_set.find("d", &[("a", "1")]).is_some());
    assert!(merged.rule_set.find("d", &[("b", "1")]).is_some());
    assert_eq!(merged.rule_set.rule_count(), 2);

    let rejected = load_sources(
        [(Path::new("a.yaml"), a), (Path::new("b.yaml"), b)],
        LoadOptions::default(),
    );
    let text = rejected.diagnostics.to_string();
    assert!(
        text.contains("b.yaml:1:9: error: duplicate domain `d`"),
        "{text}"
    );
}

#[test]
fn lookups_do_not_scan_the_rules() {
    // Ten thousand exact values at one level; the last one is found like the first.
    let mut yaml = String::from("domain: big\ndescriptors:\n");
    for i in 0..10_000 {
        yaml.push_str(&format!("  - key: user\n    value: u{i}\n    rate_limit: {{unit: second, requests_per_unit: {i}}}\n"));
    }
    let set = rules(&yaml);
    assert_eq!(set.rule_count(), 10_000);
    assert_eq!(
        per_unit(set.find("big", &[("user", "u9999")])),
        Some((9999, Unit::Second))
    );
    assert_eq!(
        per_unit(set.find("big", &[("user", "u0")])),
        Some((0, Unit::Second))
    );
}

#[test]
fn anchors_and_merge_keys_load() {
    let set = rules(
        "
domain: anchors
descriptors:
  - key: k
    rate_limit: &per_second {unit: second, requests_per_unit: 3}
  - key: j
    rate_limit: *per_second
  - key: m
    rate_limit:
      <<: *per_second
      requests_per_unit: 9
",
    );
    assert_eq!(
        per_unit(set.find("anchors", &[("j", "v")])),
        Some((3, Unit::Second))
    );
    assert_eq!(
        per_unit(set.find("anchors", &[("m", "v")])),
        Some((9, Unit::Second))
    );
}
