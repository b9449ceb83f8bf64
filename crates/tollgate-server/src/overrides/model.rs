//! What an override is: its key (domain and descriptor path), its text as sent, the rule read from it with the limits file's diagnostics, and the bounded set of them laid over the files' rules.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tollgate_rules::{Diagnostics, LoadOptions, Rule, RuleSet, load_one_rule};

/// The default most overrides held (`--max-overrides`).
pub const DEFAULT_MAX_OVERRIDES: usize = 10_000;

/// The default most bytes of one override's text (`--max-override-bytes`).
pub const DEFAULT_MAX_OVERRIDE_BYTES: usize = 8 * 1024;

/// The name an override's text is reported under in its diagnostics, and the `source` of its rule.
pub const OVERRIDE_SOURCE: &str = "override";

/// A descriptor path: each level's key and value (`None`: the key alone).
pub type DescriptorPath = Vec<(String, Option<String>)>;

/// Where an override applies: a domain and a descriptor path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OverrideKey {
    /// The domain.
    pub domain: String,
    /// The descriptor path.
    pub path: DescriptorPath,
}

impl OverrideKey {
    /// The key of `domain` and the `key=value` pairs of a query string (a
    /// pair without a value, or with an empty one, is a key-only level).
    pub fn from_query(domain: &str, query: &str) -> Self {
        let path = form_urlencoded::parse(query.as_bytes())
            .map(|(key, value)| {
                let value = (!value.is_empty()).then(|| value.into_owned());
                (key.into_owned(), value)
            })
            .collect();
        OverrideKey {
            domain: domain.to_owned(),
            path,
        }
    }

    /// The path as a query string, `tenant=acme&plan` (key-only levels without `=`).
    pub fn query(&self) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, value) in &self.path {
            match value {
                Some(value) => query.append_pair(key, value),
                None => query.append_key_only(key),
            };
        }
        query.finish()
    }

    /// `domain?query`: the override's id in logs and in a fleet's store.
    pub fn id(&self) -> String {
        format!("{}?{}", self.domain, self.query())
    }
}

impl fmt::Display for OverrideKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id())
    }
}

/// What is kept of an override: its domain and the text it was set with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideRecord {
    /// The domain.
    pub domain: String,
    /// The descriptor, as YAML or JSON text.
    pub body: String,
}

/// One override: its text, and the rule it loaded as.
#[derive(Clone, Debug)]
pub struct Override {
    /// Where it applies.
    pub key: OverrideKey,
    /// What it was set with.
    pub record: OverrideRecord,
    /// The rule laid over the files'.
    pub rule: Rule,
}

/// How many overrides may be held, and how big one may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverrideBounds {
    /// The most overrides (`--max-overrides`).
    pub max_overrides: usize,
    /// The most bytes of one override's text (`--max-override-bytes`).
    pub max_bytes: usize,
}

impl Default for OverrideBounds {
    fn default() -> Self {
        OverrideBounds {
            max_overrides: DEFAULT_MAX_OVERRIDES,
            max_bytes: DEFAULT_MAX_OVERRIDE_BYTES,
        }
    }
}

/// Why an override's text was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvalidOverride {
    /// Over [`OverrideBounds::max_bytes`].
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// The limits file's diagnostics, reported against [`OVERRIDE_SOURCE`].
    Diagnostics(Diagnostics),
}

impl fmt::Display for InvalidOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidOverride::TooLarge { bytes, max } => write!(
                f,
                "the override is {bytes} bytes, over the bound of {max} (--max-override-bytes)"
            ),
            InvalidOverride::Diagnostics(diagnostics) => {
                let errors: Vec<String> = diagnostics.errors().map(ToString::to_string).collect();
                f.write_str(&errors.join("\n"))
            }
        }
    }
}

impl Override {
    /// Reads `record` as an override, within `bounds`, as a limits file is read with `options`.
    pub fn load(
        record: OverrideRecord,
        bounds: OverrideBounds,
        options: LoadOptions,
    ) -> Result<(Self, Diagnostics), InvalidOverride> {
        if record.body.len() > bounds.max_bytes {
            return Err(InvalidOverride::TooLarge {
                bytes: record.body.len(),
                max: bounds.max_bytes,
            });
        }
        let (rule, warnings) = load_one_rule(
            &record.domain,
            Path::new(OVERRIDE_SOURCE),
            &record.body,
            options,
        )
        .map_err(InvalidOverride::Diagnostics)?;
        let key = OverrideKey {
            domain: record.domain.clone(),
            path: rule.path.clone(),
        };
        Ok((Override { key, record, rule }, warnings))
    }
}

/// Every override held, by where it applies.
#[derive(Clone, Debug, Default)]
pub struct OverrideSet {
    overrides: BTreeMap<OverrideKey, Arc<Override>>,
}

impl OverrideSet {
    /// The set of `overrides` (a later one at the same key wins).
    pub fn of(overrides: impl IntoIterator<Item = Override>) -> Self {
        OverrideSet {
            overrides: overrides
                .into_iter()
                .map(|o| (o.key.clone(), Arc::new(o)))
                .collect(),
        }
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.overrides.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.overrides.is_empty()
    }

    /// The bytes of their texts.
    pub fn bytes(&self) -> usize {
        self.overrides.values().map(|o| o.record.body.len()).sum()
    }

    /// The override at `key`.
    pub fn get(&self, key: &OverrideKey) -> Option<&Arc<Override>> {
        self.overrides.get(key)
    }

    /// Every override, by domain and path.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Override>> {
        self.overrides.values()
    }

    /// This set with `next` put at its key (replacing the one there).
    #[must_use]
    pub fn with(&self, next: Override) -> Self {
        let mut overrides = self.overrides.clone();
        overrides.insert(next.key.clone(), Arc::new(next));
        OverrideSet { overrides }
    }

    /// This set without the override at `key`, and whether there was one.
    #[must_use]
    pub fn without(&self, key: &OverrideKey) -> (Self, bool) {
        let mut overrides = self.overrides.clone();
        let removed = overrides.remove(key).is_some();
        (OverrideSet { overrides }, removed)
    }

    /// The rules in service: `files` with every override put at its path.
    pub fn apply(&self, files: &Arc<RuleSet>) -> Arc<RuleSet> {
        if self.overrides.is_empty() {
            return Arc::clone(files);
        }
        let mut rules = RuleSet::clone(files);
        for o in self.overrides.values() {
            rules.put_rule(&o.key.domain, o.rule.clone());
        }
        Arc::new(rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(domain: &str, body: &str) -> OverrideRecord {
        OverrideRecord {
            domain: domain.to_owned(),
            body: body.to_owned(),
        }
    }

    fn load(domain: &str, body: &str) -> Result<Override, InvalidOverride> {
        Override::load(
            record(domain, body),
            OverrideBounds::default(),
            LoadOptions::default(),
        )
        .map(|(o, _)| o)
    }

    #[test]
    fn the_key_round_trips_through_a_query_string() {
        let o = load(
            "api",
            "key: tenant\nvalue: a&b c\ndescriptors:\n  - key: plan\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        )
        .expect("loads");
        assert_eq!(o.key.query(), "tenant=a%26b+c&plan");
        assert_eq!(OverrideKey::from_query("api", &o.key.query()), o.key);
        assert_eq!(
            OverrideKey::from_query("api", "tenant=a%26b+c&plan="),
            o.key
        );
        assert_eq!(o.key.id(), "api?tenant=a%26b+c&plan");
    }

    #[test]
    fn an_override_over_the_size_bound_is_refused_before_it_is_read() {
        let body = "key: tenant\nrate_limit: {unit: second, requests_per_unit: 1}\n";
        let bounds = OverrideBounds {
            max_bytes: body.len() - 1,
            ..OverrideBounds::default()
        };
        let refused = Override::load(record("api", body), bounds, LoadOptions::default())
            .expect_err("too large");
        assert_eq!(
            refused,
            InvalidOverride::TooLarge {
                bytes: body.len(),
                max: body.len() - 1
            }
        );
        assert!(refused.to_string().contains("--max-override-bytes"));
    }

    #[test]
    fn the_set_replaces_at_a_key_removes_and_lays_itself_over_the_files() {
        let files = Arc::new(
            tollgate_rules::load_sources(
                [(
                    Path::new("limits.yaml"),
                    "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
                )],
                LoadOptions::default(),
            )
            .into_result()
            .expect("loads")
            .0,
        );
        let first = load(
            "api",
            "key: tenant\nvalue: acme\nrate_limit: {unit: second, requests_per_unit: 100}\n",
        )
        .expect("loads");
        let second = load(
            "api",
            "key: tenant\nvalue: acme\nrate_limit: {unit: second, requests_per_unit: 200}\n",
        )
        .expect("loads");
        let key = first.key.clone();
        let set = OverrideSet::default().with(first).with(second);
        assert_eq!(set.len(), 1, "the same path is one override");
        let rules = set.apply(&files);
        let rate = |rules: &RuleSet, value: &str| {
            rules
                .find("api", &[("tenant", value)])
                .map(|r| r.limits[0].requests_per_unit)
        };
        assert_eq!(rate(&rules, "acme"), Some(200));
        assert_eq!(rate(&rules, "other"), Some(10));
        assert_eq!(
            rate(&files, "acme"),
            Some(10),
            "the files' rules are not changed"
        );
        let (empty, removed) = set.without(&key);
        assert!(removed && empty.is_empty());
        assert_eq!(rate(&empty.apply(&files), "acme"), Some(10));
        assert!(!empty.without(&key).1);
    }

    #[test]
    fn a_bad_override_carries_the_limits_file_diagnostic() {
        let refused = load(
            "api",
            "key: tenant\nrate_limit: {unit: second, requests_per_unit: -1}\n",
        )
        .expect_err("negative");
        let text = refused.to_string();
        assert!(text.starts_with("override:2:"), "{text}");
        assert!(text.contains("requests_per_unit"), "{text}");
    }
}
