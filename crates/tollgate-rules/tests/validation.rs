//! Every class of mistake in a limits file is reported with its file, line, column and a clear message.

use std::path::Path;

use proptest::prelude::*;
use tollgate_rules::{LoadOptions, Severity, load_sources};

fn diagnose(yaml: &str) -> String {
    load_sources([(Path::new("a.yaml"), yaml)], LoadOptions::default())
        .diagnostics
        .to_string()
}

fn assert_reports(yaml: &str, expected: &[&str]) {
    let text = diagnose(yaml);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines, expected, "\n{text}");
}

#[test]
fn unknown_keys_name_the_nearest_valid_key() {
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_units: 5\n",
        &[
            "a.yaml:6:7: error: unknown key `requests_per_units` in `rate_limit`; did you mean `requests_per_unit`?",
        ],
    );
    assert_reports(
        "domain: d\ndescriptor:\n  - key: k\n",
        &[
            "a.yaml:2:1: error: unknown key `descriptor` in the top level of a file; did you mean `descriptors`?",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    zzz: 1\n",
        &[
            "a.yaml:4:5: error: unknown key `zzz` in a descriptor; expected one of `key`, `value`, `descriptors`, \
             `rate_limit`, `rate_limits`, `shadow_mode`, `on_store_error`, `lease`, `shares`, `stagger`, `detailed_metric`, `quota_mode`, `value_to_metric`, \
             `share_threshold`, `metadata`",
        ],
    );
}

#[test]
fn keys_upstream_ignores_in_the_wrong_place_are_warnings() {
    let loaded = load_sources(
        [(
            Path::new("a.yaml"),
            "domain: d\ndescriptors:\n  - key: k\n    unit: second\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n",
        )],
        LoadOptions::default(),
    );
    assert!(!loaded.diagnostics.has_errors());
    assert_eq!(
        loaded.diagnostics.to_string().trim_end(),
        "a.yaml:4:5: warning: `unit` has no effect in a descriptor and is ignored (upstream ignores it too); \
         it belongs in `rate_limit`"
    );
    assert_eq!(loaded.rule_set.rule_count(), 1);
    // A Tollgate key in the wrong place is an error: upstream would reject it too.
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    algorithm: gcra\n",
        &[
            "a.yaml:4:5: error: `algorithm` is not valid in a descriptor; it belongs in `rate_limit`",
        ],
    );
}

#[test]
fn wrong_types_name_what_was_found() {
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n    descriptors: 3\n",
        &[
            "a.yaml:4:18: error: `shadow_mode` must be true or false, found a string",
            "a.yaml:5:18: error: `descriptors` must be a list, found an integer",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: [a]\n  - 5\n",
        &[
            "a.yaml:3:10: error: `key` must be a string, found a list",
            "a.yaml:4:5: error: a descriptor must be a mapping with `key`, found an integer",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: abc\n",
        &["a.yaml:6:26: error: `requests_per_unit` must be an integer, found a string"],
    );
    assert_reports(
        "- a\n",
        &[
            "a.yaml:1:1: error: a limits file must be a mapping with `domain` and `descriptors`, found a list",
        ],
    );
}

#[test]
fn yaml_1_1_booleans_load_as_upstream_reads_them_with_a_warning() {
    let loaded = load_sources(
        [(
            Path::new("a.yaml"),
            "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        )],
        LoadOptions::default(),
    );
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    assert_eq!(loaded.diagnostics.warnings().count(), 1);
    assert!(
        loaded
            .rule_set
            .find("d", &[("k", "v")])
            .unwrap()
            .shadow_mode
    );
}

#[test]
fn a_missing_requests_per_unit_loads_as_zero_with_a_warning() {
    let loaded = load_sources(
        [(
            Path::new("a.yaml"),
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n",
        )],
        LoadOptions::default(),
    );
    assert_eq!(
        loaded.diagnostics.to_string().trim_end(),
        "a.yaml:5:7: warning: `requests_per_unit` is missing, so it is 0 and every request is over the limit \
         (as upstream); write `requests_per_unit: 0` if that is meant"
    );
    assert_eq!(
        loaded.rule_set.find("d", &[("k", "v")]).unwrap().limits[0].requests_per_unit,
        0
    );
}

#[test]
fn missing_or_empty_domains_are_errors() {
    assert_reports(
        "descriptors:\n  - key: k\n",
        &["a.yaml:1:1: error: missing `domain`: every limits file names its domain"],
    );
    assert_reports(
        "",
        &["a.yaml:1:1: error: missing `domain`: every limits file names its domain"],
    );
    assert_reports(
        "domain: ''\n",
        &["a.yaml:1:9: error: `domain` must not be empty"],
    );
    assert_reports(
        "domain:\n",
        &["a.yaml:1:7: error: `domain` must not be empty"],
    );
}

#[test]
fn duplicate_domains_across_files_name_both_places() {
    let loaded = load_sources(
        [
            (Path::new("a.yaml"), "domain: d\n"),
            (
                Path::new("b.yaml"),
                "\ndomain: d\ndescriptors:\n  - zzz: 1\n",
            ),
        ],
        LoadOptions::default(),
    );
    assert_eq!(
        loaded.diagnostics.to_string().lines().collect::<Vec<_>>(),
        [
            "b.yaml:2:9: error: duplicate domain `d`: already defined at a.yaml:1:9; use one file per domain or merge_domains",
            // The second file is still checked.
            "b.yaml:4:5: error: unknown key `zzz` in a descriptor; expected one of `key`, `value`, `descriptors`, \
             `rate_limit`, `rate_limits`, `shadow_mode`, `on_store_error`, `lease`, `shares`, `stagger`, `detailed_metric`, `quota_mode`, `value_to_metric`, \
             `share_threshold`, `metadata`",
            "b.yaml:4:5: error: descriptor has an empty or missing `key`",
        ]
    );
    assert_eq!(loaded.file_count, 2);
}

#[test]
fn duplicate_descriptors_show_the_dotted_path() {
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
        &["a.yaml:5:5: error: duplicate descriptor `d.k_v`: already defined at a.yaml:3:5"],
    );
    // `1` and `'1'` are the same value.
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: x\n        value: 1\n      - key: x\n        value: '1'\n",
        &["a.yaml:7:9: error: duplicate descriptor `d.k.x_1`: already defined at a.yaml:5:9"],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
        &["a.yaml:4:5: error: duplicate descriptor `d.k`: already defined at a.yaml:3:5"],
    );
}

#[test]
fn unit_and_unlimited_together_are_rejected() {
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      unlimited: true\n",
        &["a.yaml:5:13: error: `unit` cannot be combined with `unlimited: true`"],
    );
}

#[test]
fn replaces_must_name_an_existing_other_rule() {
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      name: a\n      replaces:\n        - name: nope\n        - name: a\n        - name: ''\n",
        &[
            "a.yaml:8:11: error: `replaces` names `nope`, but no rate limit in domain `d` has that name",
            "a.yaml:9:11: error: rate limit `a` replaces itself",
            "a.yaml:10:11: error: a `replaces` entry has an empty or missing `name`",
        ],
    );
}

#[test]
fn numbers_must_be_non_negative_integers_in_range() {
    let rate = |value: &str| {
        diagnose(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: {value}\n"
        ))
    };
    assert_eq!(
        rate("1.5").trim_end(),
        "a.yaml:6:26: error: `requests_per_unit` must be an integer, found the float 1.5"
    );
    assert_eq!(
        rate("-1").trim_end(),
        "a.yaml:6:26: error: `requests_per_unit` must not be negative, found -1"
    );
    assert_eq!(
        rate("4294967296").trim_end(),
        "a.yaml:6:26: error: `requests_per_unit` must be at most 4294967295, found 4294967296"
    );
    assert_eq!(rate("4294967295"), "");
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n",
        &[
            "a.yaml:4:12: error: `value` is a float; upstream rejects floats, so quote it if it is meant as text",
        ],
    );
}

#[test]
fn units_windows_and_algorithms_are_checked() {
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n",
        &[
            "a.yaml:5:13: error: `unit`: unknown unit `fortnight`; expected one of second, minute, hour, day, week, month, year",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n",
        &[
            "a.yaml:5:7: error: `rate_limit` needs a `unit` (second, minute, hour, day, week, month, year), a `window`, or `unlimited: true`",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, window: 5m}\n",
        &["a.yaml:4:24: error: `unit` and `window` cannot both be set; use one"],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: soon}\n",
        &[
            "a.yaml:4:26: error: `window` `soon` is not a duration (expected number at 0); write e.g. `30s`, `5m`, `1h`",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unit_multiplier: 0}\n",
        &["a.yaml:4:49: error: `unit_multiplier` must be at least 1, found 0"],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, algorithm: magic}\n",
        &[
            "a.yaml:4:43: error: unknown algorithm `magic`; expected one of fixed_window, token_bucket, gcra, sliding_window, sliding_log, leaky_bucket",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, algorithm: token_bucket}\n",
        &[
            "a.yaml:4:17: error: `token_bucket` needs `requests_per_unit` of at least 1 (only `fixed_window` reads 0 as \"always over\")",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra, burst: 0}\n",
        &["a.yaml:4:78: error: this `gcra` limit cannot be built: `burst` must be at least 1"],
    );
}

#[test]
fn yaml_syntax_errors_have_a_location() {
    assert_reports(
        "domain: d\ndescriptors: [\n",
        &["a.yaml:2:14: error: invalid YAML: unclosed bracket '['"],
    );
}

#[test]
fn an_empty_rate_limit_is_an_error_at_its_key() {
    // Upstream loads `rate_limit:` with nothing under it as no limit at all.
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n  - key: j\n    rate_limits:\n",
        &[
            "a.yaml:4:15: error: `rate_limit` is empty, so this descriptor would have no limit; \
             give it `unit` and `requests_per_unit` (or `unlimited: true`), or remove the key",
            "a.yaml:6:16: error: `rate_limits` is empty, so this descriptor would have no limit; \
             give it `unit` and `requests_per_unit` (or `unlimited: true`), or remove the key",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: ~\n",
        &[
            "a.yaml:4:17: error: `rate_limit` is empty, so this descriptor would have no limit; \
             give it `unit` and `requests_per_unit` (or `unlimited: true`), or remove the key",
        ],
    );
}

#[test]
fn all_errors_are_reported_not_just_the_first() {
    let text = diagnose(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: parsec}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: -2}\n  - value: x\n",
    );
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.lines().all(|l| l.contains(": error: ")), "{text}");
}

#[test]
fn severity_counts_match_the_lines() {
    let loaded = load_sources(
        [(
            Path::new("a.yaml"),
            "domain: d\ndescriptors:\n  - key: k\n    name: x\n    value: 1.5\n",
        )],
        LoadOptions::default(),
    );
    assert_eq!(loaded.diagnostics.error_count(), 1);
    assert_eq!(loaded.diagnostics.warning_count(), 1);
    assert_eq!(loaded.diagnostics.all()[0].severity, Severity::Warning);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = load_sources([(Path::new("a.yaml"), &*text)], LoadOptions::default());
    }

    #[test]
    fn yaml_like_text_never_panics(parts in proptest::collection::vec(
        prop_oneof![
            Just("domain: d\n"), Just("descriptors:\n"), Just("  - key: k\n"), Just("    value: "),
            Just("*"), Just("&a "), Just("*a"), Just("[") , Just("]"), Just("{"), Just("}"), Just(", "),
            Just("rate_limit:\n"), Just("      unit: second\n"), Just("      requests_per_unit: "),
            Just("-1"), Just("1.5"), Just("99999999999999999999999"), Just("true"), Just("\n"),
            Just("  "), Just("replaces:\n  - name: a\n"), Just("name: a\n"), Just("unlimited: true\n"),
            Just("rate_limits:\n"), Just("algorithm: gcra\n"), Just("window: 0s\n"), Just("burst: 0\n"),
            Just(": "), Just("- "), Just("'"), Just("\""), Just("#"), Just("!!binary "), Just("<<: *a\n"),
        ],
        0..40,
    )) {
        let text: String = parts.concat();
        let loaded = load_sources([(Path::new("a.yaml"), text.as_str())], LoadOptions::default());
        for diagnostic in loaded.diagnostics.all() {
            prop_assert!(diagnostic.position.line >= 1 && diagnostic.position.column >= 1);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any numbers in a rate limit either load with a built algorithm or give errors; never a panic.
    #[test]
    fn any_limit_parameters_load_or_are_reported(
        requests in prop_oneof![Just(0i128), Just(1), -5i128..5, any::<u32>().prop_map(i128::from), any::<i64>().prop_map(i128::from)],
        burst in proptest::option::of(prop_oneof![Just(0i128), any::<i64>().prop_map(i128::from)]),
        multiplier in proptest::option::of(any::<i64>()),
        algorithm in prop_oneof![Just("fixed_window"), Just("token_bucket"), Just("gcra"), Just("sliding_window"), Just("sliding_log"), Just("leaky_bucket")],
        window in prop_oneof![Just("unit: year"), Just("unit: second"), Just("window: 1ns"), Just("window: 100000000y"), Just("window: 3m")],
    ) {
        let mut yaml = format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      {window}\n      requests_per_unit: {requests}\n      algorithm: {algorithm}\n"
        );
        if let Some(burst) = burst {
            yaml.push_str(&format!("      burst: {burst}\n"));
        }
        if let Some(multiplier) = multiplier {
            yaml.push_str(&format!("      unit_multiplier: {multiplier}\n"));
        }
        let loaded = load_sources([(Path::new("a.yaml"), yaml.as_str())], LoadOptions::default());
        match loaded.rule_set.find("d", &[("k", "v")]) {
            Some(rule) => {
                prop_assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
                prop_assert!(rule.limits[0].algorithm.is_some());
            }
            None => prop_assert!(loaded.diagnostics.has_errors(), "no rule and no error for\n{yaml}"),
        }
    }
}

#[test]
fn on_store_error_takes_allow_deny_or_local() {
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    on_store_error: fail_open\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n",
        &[
            "a.yaml:4:21: error: unknown on_store_error `fail_open`; expected one of allow, deny, local",
        ],
    );
    assert_reports(
        "domain: d\ndescriptors:\n  - key: k\n    on_store_error: [deny]\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n",
        &["a.yaml:4:21: error: `on_store_error` must be one of allow, deny, local, found a list"],
    );
    for (text, policy) in [
        ("", tollgate_rules::StoreErrorPolicy::Allow),
        (
            "    on_store_error: deny\n",
            tollgate_rules::StoreErrorPolicy::Deny,
        ),
        (
            "    on_store_error: LOCAL\n",
            tollgate_rules::StoreErrorPolicy::Local,
        ),
    ] {
        let yaml = format!(
            "domain: d\ndescriptors:\n  - key: k\n{text}    rate_limit:\n      unit: second\n      requests_per_unit: 5\n"
        );
        let loaded = load_sources(
            [(Path::new("a.yaml"), yaml.as_str())],
            LoadOptions::default(),
        );
        let (rules, _) = loaded.into_result().expect("valid");
        let rule = rules.rules("d").next().expect("one rule");
        assert_eq!(rule.on_store_error, policy, "{text}");
    }
}
