//! A descriptor's `lease` period: read as a duration, 0 keeps the rule exact, absent takes the service default, bad values are errors at their position.

use std::path::Path;
use std::time::Duration;

use tollgate_rules::{LoadOptions, Loaded, load_sources};

fn load(yaml: &str) -> Loaded {
    load_sources([(Path::new("a.yaml"), yaml)], LoadOptions::default())
}

fn lease_of(loaded: &Loaded, key: &str) -> Option<Duration> {
    loaded
        .rule_set
        .find("d", &[(key, "x")])
        .expect("rule")
        .lease
}

#[test]
fn lease_periods_are_read_per_descriptor() {
    let loaded = load(
        "domain: d\ndescriptors:\n  - key: a\n    lease: 500ms\n    rate_limit: {unit: minute, requests_per_unit: 100}\n  - key: b\n    lease: 0\n    rate_limit: {unit: minute, requests_per_unit: 100}\n  - key: c\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
    );
    assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
    assert_eq!(lease_of(&loaded, "a"), Some(Duration::from_millis(500)));
    assert_eq!(lease_of(&loaded, "b"), Some(Duration::ZERO));
    assert_eq!(lease_of(&loaded, "c"), None);
}

#[test]
fn a_bad_lease_is_an_error_at_its_position() {
    for (value, wanted) in [
        ("soon", "`lease`"),
        ("[1s]", "`lease` must be a duration"),
        ("-1s", "`lease`"),
    ] {
        let loaded = load(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    lease: {value}\n    rate_limit: {{unit: minute, requests_per_unit: 100}}\n"
        ));
        let errors: Vec<String> = loaded.diagnostics.errors().map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 1, "{value}: {errors:?}");
        assert!(errors[0].contains("a.yaml:4:12"), "{}", errors[0]);
        assert!(errors[0].contains(wanted), "{}", errors[0]);
    }
}
