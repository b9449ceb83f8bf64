//! A descriptor's `shares: true`: read per rule, refused with an error at its position beside an algorithm the mode cannot split (only token buckets and GCRA), without a limit, or with a lease.

use std::path::Path;

use tollgate_rules::{LoadOptions, Loaded, load_sources};

fn load(yaml: &str) -> Loaded {
    load_sources([(Path::new("a.yaml"), yaml)], LoadOptions::default())
}

#[test]
fn shares_are_read_per_descriptor_for_token_buckets_and_gcra() {
    let loaded = load(
        "domain: d\ndescriptors:\n  - key: a\n    shares: true\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}\n  - key: g\n    shares: true\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 10}\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}\n",
    );
    assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
    let shares = |key: &str| {
        loaded
            .rule_set
            .find("d", &[(key, "x")])
            .expect("rule")
            .shares
    };
    assert!(shares("a"));
    assert!(shares("g"));
    assert!(!shares("c"));
}

#[test]
fn shares_the_mode_cannot_keep_are_errors_naming_what_it_supports() {
    for (descriptor, wanted) in [
        (
            "shares: true\n    rate_limit: {unit: minute, requests_per_unit: 100}",
            "`shares` splits token buckets and GCRA only, and this descriptor's limit on line 5 uses fixed_window",
        ),
        (
            "shares: true\n    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window}",
            "uses sliding_window; remove `shares` or use `algorithm: token_bucket` or `algorithm: gcra`",
        ),
        (
            "shares: true\n    lease: 1s\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}",
            "`shares` and `lease` both share a limit",
        ),
        (
            "shares: true\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket}",
            "`shares` needs a `rate_limit` on the same descriptor",
        ),
    ] {
        let loaded = load(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    {descriptor}\n"
        ));
        let errors: Vec<String> = loaded.diagnostics.errors().map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 1, "{descriptor}: {errors:?}");
        assert!(errors[0].contains("a.yaml:4:13"), "{}", errors[0]);
        assert!(errors[0].contains(wanted), "{}", errors[0]);
    }
}
