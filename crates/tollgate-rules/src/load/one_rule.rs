//! Loading one rule on its own (an override): a single descriptor of a limits file, checked as a file's are.

use std::collections::HashMap;
use std::path::Path;

use super::{Context, LoadOptions, Loader};
use crate::diagnostics::Diagnostics;
use crate::model::{DomainRules, Level, Rule};
use crate::tree::{NodeValue, Position, parse_document};

/// Loads `text` as one descriptor of a limits file in `domain` (its
/// `key`, `value`, `rate_limit`, options, and at most one nested
/// descriptor per level down to the rule), with every diagnostic a file
/// would get, reported against `file`.
///
/// Fails unless it holds exactly one rule, at its deepest descriptor, with
/// no `replaces` (which names limits of the whole domain). Warnings come
/// back with the rule.
pub fn load_one_rule(
    domain: &str,
    file: &Path,
    text: &str,
    options: LoadOptions,
) -> Result<(Rule, Diagnostics), Diagnostics> {
    let mut loader = Loader {
        options,
        diagnostics: Diagnostics::new(),
        domains: HashMap::new(),
        replaces: Vec::new(),
    };
    let rule = load_on(&mut loader, domain, file, text);
    let mut diagnostics = loader.diagnostics;
    diagnostics.sort();
    match rule {
        Some(rule) if !diagnostics.has_errors() => Ok((rule, diagnostics)),
        _ => Err(diagnostics),
    }
}

/// Line 1, column 1: where a problem with the whole text is reported.
const FIRST: Position = Position { line: 1, column: 1 };

fn load_on(loader: &mut Loader, domain: &str, file: &Path, text: &str) -> Option<Rule> {
    if domain.is_empty() {
        loader
            .diagnostics
            .error(file, FIRST, "`domain` must not be empty");
        return None;
    }
    let root = match parse_document(text, loader.options.yaml) {
        Ok(document) => document.root,
        Err(error) => {
            loader
                .diagnostics
                .error(file, error.position, error.message);
            return None;
        }
    };
    if !matches!(root.value, NodeValue::Map(_)) {
        loader.diagnostics.error(
            file,
            root.position,
            format!(
                "an override is one descriptor: a mapping with `key`, `value` and `rate_limit`, found {}",
                root.value.kind_name()
            ),
        );
        return None;
    }
    let context = Context { file, domain };
    let mut rules = DomainRules::default();
    let mut level = Level::default();
    loader.load_descriptor(&context, &mut rules, &mut level, (&[], &[]), &root);
    if loader.diagnostics.has_errors() {
        return None;
    }
    let found: Vec<&Rule> = rules.nodes.iter().filter_map(|n| n.rule.as_ref()).collect();
    let [rule] = found.as_slice() else {
        loader.diagnostics.error(
            file,
            root.position,
            format!(
                "an override sets exactly one rule, and this one has {}: give the deepest descriptor a `rate_limit` (or `unlimited: true`) and no other",
                found.len()
            ),
        );
        return None;
    };
    if rules.nodes.len() != rule.path.len() {
        loader.diagnostics.error(
            file,
            root.position,
            "an override names one descriptor path: at most one descriptor under each level",
        );
        return None;
    }
    if let Some(limit) = rule.limits.iter().find(|l| !l.replaces.is_empty()) {
        loader.diagnostics.error(
            file,
            limit.position,
            "`replaces` is not taken in an override (it names limits of the whole domain); put it in the limits file",
        );
        return None;
    }
    Some((*rule).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Rule, String> {
        load_one_rule("api", Path::new("override"), text, LoadOptions::default())
            .map(|(rule, _)| rule)
            .map_err(|d| d.to_string())
    }

    #[test]
    fn a_descriptor_with_a_limit_is_one_rule_at_its_path() {
        let rule = load(
            "key: tenant\nvalue: acme\ndescriptors:\n  - key: plan\n    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket, burst: 50}\n    shadow_mode: true\n",
        )
        .expect("loads");
        assert_eq!(
            rule.path,
            [
                ("tenant".to_owned(), Some("acme".to_owned())),
                ("plan".to_owned(), None)
            ]
        );
        assert_eq!(rule.limits[0].requests_per_unit, 1000);
        assert_eq!(rule.limits[0].burst, Some(50));
        assert!(rule.shadow_mode);
        let json =
            load(r#"{"key": "tenant", "value": "acme*", "rate_limit": {"unlimited": true}}"#)
                .expect("JSON is YAML");
        assert!(json.limits[0].is_unlimited());
    }

    #[test]
    fn errors_carry_the_limits_file_wording_and_position() {
        let error = load("key: tenant\nrate_limit: {unit: fortnight, requests_per_unit: 3}\n")
            .expect_err("a bad unit");
        assert!(error.starts_with("override:2:"), "{error}");
        assert!(error.contains("fortnight"), "{error}");
        let error = load("key: tenant\nrate_limt: {unit: second, requests_per_unit: 3}\n")
            .expect_err("a typo");
        assert!(error.contains("rate_limt"), "{error}");
    }

    #[test]
    fn anything_but_one_rule_on_one_path_is_refused() {
        let none = load("key: tenant\nvalue: acme\n").expect_err("no limit");
        assert!(
            none.contains("exactly one rule, and this one has 0"),
            "{none}"
        );
        let two = load(
            "key: tenant\nrate_limit: {unit: second, requests_per_unit: 1}\ndescriptors:\n  - key: plan\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
        )
        .expect_err("two rules");
        assert!(two.contains("this one has 2"), "{two}");
        let fork = load(
            "key: tenant\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: b\n",
        )
        .expect_err("two paths");
        assert!(fork.contains("one descriptor path"), "{fork}");
        let list = load("- key: tenant\n").expect_err("a list");
        assert!(list.contains("found a list"), "{list}");
        let replaces = load(
            "key: tenant\nrate_limit: {unit: second, requests_per_unit: 2, replaces: [{name: x}]}\n",
        )
        .expect_err("replaces");
        assert!(replaces.contains("`replaces` is not taken"), "{replaces}");
    }
}
