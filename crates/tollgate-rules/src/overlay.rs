//! Rules laid over a loaded [`RuleSet`]: one rule put at its descriptor path, replacing the rule there or adding one.

use crate::model::{DescriptorNode, NodeId, Rule, RuleSet, WildcardPattern};

impl RuleSet {
    /// Puts `rule` at its path in `domain`: the rule a descriptor at that
    /// path had is replaced (its children stay), and the descriptors on the
    /// way that do not exist yet are added without a rule, as is the domain.
    ///
    /// A value with `*` that is new at its level is matched after the
    /// wildcards already there (a limits file's are in file order), and an
    /// exact value before any wildcard, as in a file.
    pub fn put_rule(&mut self, domain: &str, rule: Rule) {
        let rules = self.domains.entry(domain.to_owned()).or_default();
        let mut parent: Option<NodeId> = None;
        for (key, value) in &rule.path {
            let next = rules.nodes.len();
            let level = match parent {
                None => &mut rules.root,
                Some(id) => &mut rules.nodes[id].children,
            };
            let entry = level.keys.entry(key.clone()).or_default();
            let existing = match value {
                Some(v) => entry.exact.get(v).copied(),
                None => entry.key_only,
            };
            let id = match existing {
                Some(id) => id,
                None => {
                    let id = next;
                    match value {
                        Some(v) => {
                            if v.contains('*') {
                                entry.wildcards.push((WildcardPattern::new(v), id));
                            }
                            entry.exact.insert(v.clone(), id);
                        }
                        None => entry.key_only = Some(id),
                    }
                    rules.nodes.push(DescriptorNode {
                        rule: None,
                        children: Default::default(),
                        file: rule.file.clone(),
                        position: rule.position,
                    });
                    id
                }
            };
            parent = Some(id);
        }
        if let Some(id) = parent {
            rules.nodes[id].rule = Some(rule);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::{Applied, LoadOptions, RuleSet, load_one_rule, load_sources};

    const FILE: &str = "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 10}\n    descriptors:\n      - key: plan\n        value: pro\n        rate_limit: {unit: minute, requests_per_unit: 100}\n  - key: tenant\n    value: acme\n    rate_limit: {unit: minute, requests_per_unit: 20}\n";

    fn file_rules() -> RuleSet {
        let loaded = load_sources([(Path::new("limits.yaml"), FILE)], LoadOptions::default());
        loaded.into_result().expect("the file loads").0
    }

    fn with(rules: &mut RuleSet, text: &str) {
        let (rule, _) = load_one_rule("api", Path::new("override"), text, LoadOptions::default())
            .expect("the override loads");
        rules.put_rule("api", rule);
    }

    /// The requests-per-unit of the rule for `entries`, `None` without one.
    fn rate(rules: &RuleSet, entries: &[(&str, &str)]) -> Option<u32> {
        rules
            .find("api", entries)
            .map(|rule| rule.limits[0].requests_per_unit)
    }

    #[test]
    fn an_override_replaces_the_rule_at_its_path_and_keeps_the_rest() {
        let mut rules = file_rules();
        with(
            &mut rules,
            "key: tenant\nvalue: acme\nrate_limit: {unit: minute, requests_per_unit: 1000}\n",
        );
        assert_eq!(rate(&rules, &[("tenant", "acme")]), Some(1000));
        assert_eq!(
            rules
                .find("api", &[("tenant", "acme")])
                .expect("a rule")
                .file,
            Path::new("override")
        );
        assert_eq!(rate(&rules, &[("tenant", "other")]), Some(10));
        assert_eq!(rate(&rules, &[("tenant", "x"), ("plan", "pro")]), Some(100));
        assert_eq!(rules.rule_count(), 3, "replaced, not added");
    }

    #[test]
    fn an_override_adds_a_rule_below_a_file_descriptor_and_a_new_domain() {
        let mut rules = file_rules();
        with(
            &mut rules,
            "key: tenant\ndescriptors:\n  - key: plan\n    value: free\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
        );
        assert_eq!(rate(&rules, &[("tenant", "x"), ("plan", "free")]), Some(5));
        assert_eq!(rate(&rules, &[("tenant", "x"), ("plan", "pro")]), Some(100));
        assert_eq!(
            rate(&rules, &[("tenant", "x")]),
            Some(10),
            "the parent's rule stays"
        );
        assert_eq!(rules.rule_count(), 4);
        let (rule, _) = load_one_rule(
            "new",
            Path::new("override"),
            "key: k\nrate_limit: {unit: second, requests_per_unit: 1}\n",
            LoadOptions::default(),
        )
        .expect("loads");
        rules.put_rule("new", rule);
        assert_eq!(rules.domain_count(), 2);
        assert!(rules.find("new", &[("k", "v")]).is_some());
    }

    #[test]
    fn a_prefix_override_matches_after_exact_values() {
        let mut rules = file_rules();
        with(
            &mut rules,
            "key: tenant\nvalue: ac*\nrate_limit: {unit: minute, requests_per_unit: 7}\n",
        );
        assert_eq!(rate(&rules, &[("tenant", "acorn")]), Some(7));
        assert_eq!(
            rate(&rules, &[("tenant", "acme")]),
            Some(20),
            "the exact value wins"
        );
        assert_eq!(rate(&rules, &[("tenant", "zed")]), Some(10));
    }

    #[test]
    fn an_unlimited_override_lifts_the_limit() {
        let mut rules = file_rules();
        with(
            &mut rules,
            "key: tenant\nvalue: acme\nrate_limit: {unlimited: true}\n",
        );
        let applied = rules.resolve("api", &[&[("tenant", "acme")][..]]);
        assert!(matches!(applied[0], Applied::Unlimited(_)), "{applied:?}");
    }
}
