//! The statistics key of a matched rule (upstream's `detailed_metric` / `value_to_metric`), with a bound on the keys taken from request values.
//!
//! [`Rule::metric_key`] names a rule's statistics the way upstream names
//! them. Without `detailed_metric` or `value_to_metric` the key is fixed by
//! the configuration; with them it holds request values, so every distinct
//! value would be a new Prometheus series. [`MetricKeys`] keeps at most a
//! configured number of such keys; past the bound, a request's hits are
//! counted under the rule's own configured path instead, so the number of
//! series stays bounded whatever callers send.

use std::collections::HashSet;

use parking_lot::Mutex;
use tollgate_rules::Rule;

use crate::rule_stats::StatsKey;

/// How many request-valued statistics keys are kept unless configured otherwise.
pub const DEFAULT_MAX_METRIC_KEYS: usize = 10_000;

/// The request-valued statistics keys in use, at most `max` of them.
#[derive(Debug)]
pub struct MetricKeys {
    seen: Mutex<HashSet<String>>,
    max: usize,
}

impl Default for MetricKeys {
    /// At most [`DEFAULT_MAX_METRIC_KEYS`] keys.
    fn default() -> Self {
        MetricKeys::new(DEFAULT_MAX_METRIC_KEYS)
    }
}

impl MetricKeys {
    /// Keeps at most `max` request-valued keys (0: always the configured path).
    pub fn new(max: usize) -> Self {
        MetricKeys {
            seen: Mutex::new(HashSet::new()),
            max,
        }
    }

    /// The most request-valued keys kept.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many request-valued keys are in use.
    pub fn len(&self) -> usize {
        self.seen.lock().len()
    }

    /// Whether no request-valued key is in use.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The statistics key for `entries` of `domain` matched to `rule`:
    /// upstream's key while the bound allows, else the rule's configured path.
    pub fn stats_key<K: AsRef<str>, V: AsRef<str>>(
        &self,
        rule: &Rule,
        domain: &str,
        entries: &[(K, V)],
    ) -> StatsKey {
        if rule.metric_key_varies() {
            let key = rule.metric_key(domain, entries);
            let mut seen = self.seen.lock();
            if !seen.contains(&key) && seen.len() >= self.max {
                drop(seen);
                return StatsKey::new(
                    domain,
                    rule.path.iter().map(|(k, v)| (k.as_str(), v.as_deref())),
                );
            }
            seen.insert(key);
        }
        StatsKey::new(domain, rule.metric_levels(entries))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tollgate_rules::{LoadOptions, load_sources};

    use super::*;

    #[test]
    fn request_valued_labels_stop_at_the_bound_and_fixed_ones_never_count() {
        let loaded = load_sources(
            [(
                Path::new("a.yaml"),
                "domain: d\ndescriptors:\n  - key: user\n    value_to_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: path\n    value: /x\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
            )],
            LoadOptions::default(),
        );
        let rules = loaded.rule_set;
        let keys = MetricKeys::new(2);
        let label = |k: &str, v: &str| {
            let rule = rules.find("d", &[(k, v)]).expect("matched");
            keys.stats_key(rule, "d", &[(k, v)]).levels.join(".")
        };
        // (entry, label): two users get their own label, the third the rule's path.
        let table = [
            (("user", "alice"), "user_alice"),
            (("user", "bob"), "user_bob"),
            (("user", "alice"), "user_alice"),
            (("user", "carol"), "user"),
            (("path", "/x"), "path_/x"),
        ];
        for ((k, v), expected) in table {
            assert_eq!(label(k, v), expected, "{k}={v}");
        }
        assert_eq!(keys.len(), 2, "the fixed label takes no room");
    }
}
