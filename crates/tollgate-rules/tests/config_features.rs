//! Upstream's config features load with upstream's meaning: quota_mode, share_threshold, unlimited with `unit: unknown`, detailed_metric / value_to_metric keys and merged domains.

use std::path::Path;

use tollgate_rules::{LoadOptions, Loaded, load_sources};

/// One request descriptor's entries.
type Entries<'a> = &'a [(&'a str, &'a str)];

fn load(yaml: &str) -> Loaded {
    load_sources([(Path::new("a.yaml"), yaml)], LoadOptions::default())
}

fn errors(loaded: &Loaded) -> Vec<String> {
    let errors = loaded.diagnostics.errors();
    errors.map(|error| error.to_string()).collect()
}

#[test]
fn quota_mode_is_read_per_descriptor_without_a_warning() {
    let loaded = load(
        "domain: d\ndescriptors:\n  - key: q\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: r\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    );
    assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
    let quota: Vec<bool> = ["q", "r"]
        .iter()
        .map(|k| {
            loaded
                .rule_set
                .find("d", &[(*k, "x")])
                .expect("rule")
                .quota_mode
        })
        .collect();
    assert_eq!(quota, [true, false]);
}

/// Upstream's README example: `files*` with share_threshold makes every
/// matching value share one counter; without it each value counts alone.
#[test]
fn share_threshold_values_share_one_counter_named_by_the_pattern() {
    let loaded = load(
        "domain: d\ndescriptors:\n  - key: path\n    value: files*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: path\n    value: docs*\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: tenant\n    value: t-*\n    share_threshold: true\n    descriptors:\n      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 10}\n",
    );
    assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
    let key = |entries: &[(&str, &str)]| {
        let rule = loaded.rule_set.find("d", entries).expect("matched");
        rule.counter_key("d", entries, 0)
    };
    // (request A, request B, share one counter?)
    let table: [(Entries<'_>, Entries<'_>, bool); 5] = [
        (&[("path", "files/a")], &[("path", "files/b")], true),
        (&[("path", "files/a")], &[("path", "files*")], true),
        (&[("path", "docs/a")], &[("path", "docs/b")], false),
        // A shared level above the rule: the pattern stands for the value there only.
        (
            &[("tenant", "t-1"), ("user", "u")],
            &[("tenant", "t-2"), ("user", "u")],
            true,
        ),
        (
            &[("tenant", "t-1"), ("user", "u")],
            &[("tenant", "t-1"), ("user", "v")],
            false,
        ),
    ];
    for (a, b, shared) in table {
        assert_eq!(key(a) == key(b), shared, "{a:?} vs {b:?}");
    }
    // Shared keys stay apart from other rules' keys.
    assert_ne!(key(&[("path", "files/a")]), key(&[("path", "docs/a")]));
}

#[test]
fn share_threshold_without_a_wildcard_is_upstreams_error() {
    let table = [
        (
            "domain: d\ndescriptors:\n  - key: path\n    value: files\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
            "a.yaml:5:22: error: share_threshold can only be used with wildcard values (containing '*'), but found key 'path_files'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: path\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
            "a.yaml:4:22: error: share_threshold can only be used with wildcard values (containing '*'), but found key 'path'",
        ),
    ];
    for (yaml, expected) in table {
        assert_eq!(errors(&load(yaml)), [expected], "{yaml}");
    }
    // `share_threshold: false` anywhere is fine.
    let loaded = load(
        "domain: d\ndescriptors:\n  - key: path\n    share_threshold: false\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
    );
    assert!(errors(&loaded).is_empty());
}

#[test]
fn unlimited_takes_unit_unknown_and_nothing_else_does() {
    let table: [(&str, Option<&str>); 4] = [
        ("{unlimited: true, unit: unknown}", None),
        ("{unlimited: true, unit: UNKNOWN}", None),
        (
            "{unlimited: true, unit: second}",
            Some("a.yaml:4:41: error: `unit` cannot be combined with `unlimited: true`"),
        ),
        (
            "{unit: unknown, requests_per_unit: 1}",
            Some(
                "a.yaml:4:24: error: invalid rate limit unit 'unknown': `unit: unknown` is only valid beside `unlimited: true`",
            ),
        ),
    ];
    for (block, expected) in table {
        let loaded = load(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {block}\n"
        ));
        match expected {
            None => {
                assert!(
                    errors(&loaded).is_empty(),
                    "{block}: {}",
                    loaded.diagnostics
                );
                let rule = loaded.rule_set.find("d", &[("k", "v")]).expect("rule");
                assert!(rule.limits[0].is_unlimited(), "{block}");
            }
            Some(message) => assert_eq!(errors(&loaded), [message], "{block}"),
        }
    }
}

/// The stats keys of upstream's README examples for `detailed_metric` and
/// `value_to_metric` (and their mix with `share_threshold`).
#[test]
fn metric_keys_follow_detailed_metric_and_value_to_metric() {
    let loaded = load(concat!(
        "domain: d\n",
        "descriptors:\n",
        "  - key: route\n",
        "    value_to_metric: true\n",
        "    descriptors:\n",
        "      - key: http_method\n",
        "        value_to_metric: true\n",
        "        descriptors:\n",
        "          - key: subject_id\n",
        "            rate_limit: {unit: minute, requests_per_unit: 60}\n",
        "  - key: key1\n",
        "    detailed_metric: true\n",
        "    rate_limit: {unit: minute, requests_per_unit: 5}\n",
        "  - key: path\n",
        "    value: /api/*\n",
        "    value_to_metric: true\n",
        "    rate_limit: {unit: minute, requests_per_unit: 5}\n",
        "  - key: file\n",
        "    value: files*\n",
        "    share_threshold: true\n",
        "    value_to_metric: true\n",
        "    detailed_metric: true\n",
        "    rate_limit: {unit: minute, requests_per_unit: 5}\n",
        "  - key: plain\n",
        "    value: p*\n",
        "    rate_limit: {unit: minute, requests_per_unit: 5}\n",
        "  - key: exact\n",
        "    value: x\n",
        "    rate_limit: {unit: minute, requests_per_unit: 5}\n",
    ));
    assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
    let table: [(Entries<'_>, &str, bool); 7] = [
        (
            &[
                ("route", "draw"),
                ("http_method", "GET"),
                ("subject_id", "123"),
            ],
            "d.route_draw.http_method_GET.subject_id",
            true,
        ),
        (&[("key1", "value1")], "d.key1_value1", true),
        (&[("key1", "")], "d.key1_", true),
        (&[("path", "/api/users")], "d.path_/api/users", true),
        (&[("file", "files/a.txt")], "d.file_files*", false),
        (&[("plain", "pizza")], "d.plain_p*", false),
        (&[("exact", "x")], "d.exact_x", false),
    ];
    for (entries, expected, varies) in table {
        let rule = loaded.rule_set.find("d", entries).expect("matched");
        assert_eq!(rule.metric_key("d", entries), expected, "{entries:?}");
        assert_eq!(rule.metric_key_varies(), varies, "{entries:?}");
    }
}

#[test]
fn merge_domains_joins_files_of_one_domain_and_still_rejects_duplicates() {
    let a =
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    let b =
        "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n";
    let files = |second: &'static str| [(Path::new("a.yaml"), a), (Path::new("b.yaml"), second)];
    let merging = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    // (second file, merge?, errors)
    let table: [(&str, bool, &[&str]); 3] = [
        (
            b,
            false,
            &[
                "b.yaml:1:9: error: duplicate domain `d`: already defined at a.yaml:1:9; use one file per domain or merge_domains",
            ],
        ),
        (b, true, &[]),
        (
            a,
            true,
            &["b.yaml:3:5: error: duplicate descriptor `d.a`: already defined at a.yaml:3:5"],
        ),
    ];
    for (second, merge, expected) in table {
        let options = if merge {
            merging
        } else {
            LoadOptions::default()
        };
        let loaded = load_sources(files(second), options);
        assert_eq!(errors(&loaded), expected, "merge={merge}");
        if expected.is_empty() {
            assert_eq!(loaded.rule_set.rule_count(), 2);
            assert!(loaded.rule_set.find("d", &[("a", "x")]).is_some());
            assert!(loaded.rule_set.find("d", &[("b", "x")]).is_some());
        }
    }
}
