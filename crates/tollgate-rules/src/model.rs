//! The loaded rules: domains, descriptor trees, and the limits on each descriptor.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use smallvec::SmallVec;
use tollgate_core::{AnyAlgorithm, Unit};

use crate::algorithm::AlgorithmKind;
use crate::tree::Position;

/// The descriptor tree's maps: built from the config, then only read. Request
/// values are looked up, never inserted, so a seeded fast hash serves (no
/// chain a caller can grow), where SipHash cost a request more than its
/// counter check.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// What a rule answers when the store of its counters fails (`on_store_error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum StoreErrorPolicy {
    /// Let the request through (Envoy's and envoyproxy/ratelimit's behaviour).
    #[default]
    Allow,
    /// Answer OVER_LIMIT.
    Deny,
    /// Decide with an in-process limit of this instance's share of the limit.
    Local,
}

impl StoreErrorPolicy {
    /// The name used in limits files and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            StoreErrorPolicy::Allow => "allow",
            StoreErrorPolicy::Deny => "deny",
            StoreErrorPolicy::Local => "local",
        }
    }
}

impl FromStr for StoreErrorPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            StoreErrorPolicy::Allow,
            StoreErrorPolicy::Deny,
            StoreErrorPolicy::Local,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("unknown on_store_error `{s}`; expected one of allow, deny, local"))
    }
}

/// How long one window (or refill period) of a limit lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WindowLength {
    /// A named unit times a multiplier (`unit: minute`, `unit_multiplier: 5`).
    Unit {
        /// The named unit.
        unit: Unit,
        /// How many units one window spans (at least 1).
        multiplier: u32,
    },
    /// A duration (`window: 90s`).
    Duration(Duration),
}

impl WindowLength {
    /// The window's length.
    pub fn duration(&self) -> Duration {
        match *self {
            WindowLength::Unit { unit, multiplier } => unit.duration() * multiplier,
            WindowLength::Duration(d) => d,
        }
    }
}

/// One limit on a descriptor: a `rate_limit` block (or one entry of `rate_limits`).
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    /// `name`, reported as the limit's name and the target of `replaces`.
    pub name: Option<String>,
    /// The names this limit's rule replaces when it matches.
    pub replaces: Vec<String>,
    /// `requests_per_unit` (0 when missing: every request is over, as upstream).
    pub requests_per_unit: u32,
    /// The window, or `None` when `unlimited: true`.
    pub window: Option<WindowLength>,
    /// The algorithm named in the file (fixed window when it names none).
    pub algorithm_kind: AlgorithmKind,
    /// `burst`, when the file sets it.
    pub burst: Option<u64>,
    /// `delay`, when the file sets it: a leaky bucket that shapes (delays
    /// admitted requests above the rate) instead of policing.
    pub delay: Option<u64>,
    /// The algorithm, built at load time, or `None` when `unlimited: true`.
    pub algorithm: Option<AnyAlgorithm>,
    /// Where the block starts.
    pub position: Position,
}

impl Limit {
    /// This limit's algorithm for one of `instances` instances: the rate and
    /// burst divided by `instances` (rounded up, at least 1); `None` when
    /// unlimited or when the share cannot be built.
    pub fn share(&self, instances: u64) -> Option<AnyAlgorithm> {
        let algorithm = self.algorithm?;
        let instances = instances.max(1);
        if instances == 1 {
            return Some(algorithm);
        }
        let window = self.window?.duration();
        let requests = u64::from(self.requests_per_unit).div_ceil(instances).max(1);
        let burst = self.burst.map(|b| b.div_ceil(instances).max(1));
        let delay = self.delay.map(|d| d.div_ceil(instances));
        self.algorithm_kind
            .build(requests, window, burst, delay)
            .ok()
    }

    /// Whether this limit is `unlimited: true` (never counted, always OK).
    pub fn is_unlimited(&self) -> bool {
        self.algorithm.is_none()
    }
}

/// What one level of a rule's path says about its request value, besides matching it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LevelOptions {
    /// `value_to_metric`: the request's value at this level names the rule's statistics.
    pub value_to_metric: bool,
    /// `share_threshold` (only on a wildcard value): every value the wildcard
    /// matches shares one counter, keyed by the pattern.
    pub share_threshold: bool,
}

/// A descriptor in the file that carries at least one limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// The `(key, value)` pairs from the domain down to this descriptor; `None` for key-only.
    pub path: Vec<(String, Option<String>)>,
    /// The limits that all apply (one for upstream files; several with `rate_limits`).
    pub limits: Vec<Limit>,
    /// `shadow_mode`: counted, but an over-limit result is reported as OK.
    pub shadow_mode: bool,
    /// What to answer when the counter store cannot (`on_store_error`; default allow).
    pub on_store_error: StoreErrorPolicy,
    /// `lease`: the quota lease period of this rule's counters in a shared
    /// store (zero: exact, one store call per request); `None` takes the
    /// service's default (`--lease-period`).
    pub lease: Option<std::time::Duration>,
    /// `shares: true`: in a shared store, each instance holds a share of
    /// each key's rate and burst and decides within it, rebalanced by
    /// demand in batched calls (`tollgate_core::share`); token buckets and
    /// GCRA only. With the in-memory store the rule is decided exactly.
    pub shares: bool,
    /// `stagger`: each key's fixed windows start at an offset from a hash of
    /// the key, so keys do not all reset at the same instant (fixed windows only).
    pub stagger: bool,
    /// `detailed_metric`: statistics name the request's values.
    pub detailed_metric: bool,
    /// `quota_mode`: an over-limit status of this rule makes the request
    /// over the limit only when every quota descriptor of the request is over.
    pub quota_mode: bool,
    /// The options of each level of `path`, in the same order.
    pub levels: Vec<LevelOptions>,
    /// The file the rule is in.
    pub file: PathBuf,
    /// Where its descriptor starts.
    pub position: Position,
}

impl Rule {
    /// The dotted path as upstream prints it: `domain.key_value.key2`.
    pub fn dotted_path(&self, domain: &str) -> String {
        dotted_path(domain, &self.path)
    }

    /// The storage key of one limit of this rule for one request, which no other
    /// domain, request, limit length or algorithm can share.
    ///
    /// Every part is length-prefixed, so `("a_b", "c")` and `("a", "b_c")` differ,
    /// and the algorithm and window length (in nanoseconds) are part of the key, so a
    /// per-minute and a per-hour limit never share a counter. The window start
    /// is not in the key: the algorithm keeps it in its state. Neither is
    /// the rate (`requests_per_unit`, `burst`), so a counter carries on when
    /// only the rate changes, as upstream's does. At a level with
    /// `share_threshold`, the wildcard pattern stands for the request's
    /// value, so every value it matches shares the counter (as upstream).
    pub fn counter_key<K: AsRef<str>, V: AsRef<str>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
        limit_index: usize,
    ) -> Vec<u8> {
        let limit = self.limits.get(limit_index);
        let algorithm = limit.map_or("none", |l| l.algorithm_kind.name());
        // Sized once: the prefix, each part with its 8-byte length, the
        // entry count, the window and the limit index.
        let parts: usize = entries
            .iter()
            .enumerate()
            .map(|(level, (k, v))| {
                16 + k.as_ref().len() + self.counter_value(level, v.as_ref()).len()
            })
            .sum();
        let mut key =
            Vec::with_capacity(3 + 8 + domain.len() + 8 + parts + 8 + algorithm.len() + 16);
        key.extend_from_slice(b"tg1");
        push_part(&mut key, domain.as_bytes());
        key.extend_from_slice(&(entries.len() as u64).to_be_bytes());
        for (level, (k, v)) in entries.iter().enumerate() {
            push_part(&mut key, k.as_ref().as_bytes());
            push_part(&mut key, self.counter_value(level, v.as_ref()).as_bytes());
        }
        push_part(&mut key, algorithm.as_bytes());
        let window = limit.and_then(|l| l.window).map_or(0, |w| {
            w.duration().as_nanos().min(u128::from(u64::MAX)) as u64
        });
        key.extend_from_slice(&window.to_be_bytes());
        key.extend_from_slice(&(limit_index as u64).to_be_bytes());
        key
    }
}

impl Rule {
    /// The value that names the counter at `level` for a request value
    /// `value`: the wildcard pattern at a `share_threshold` level, else `value`.
    pub fn counter_value<'a>(&'a self, level: usize, value: &'a str) -> &'a str {
        self.shared_value(level).unwrap_or(value)
    }

    /// The wildcard pattern that stands for the request's value at `level`
    /// when that level has `share_threshold`.
    fn shared_value(&self, level: usize) -> Option<&str> {
        if !self.levels.get(level)?.share_threshold {
            return None;
        }
        self.path.get(level)?.1.as_deref()
    }

    /// Upstream's statistics key for one request matched to this rule:
    /// `domain.key_value.key2` with the values upstream puts in it.
    ///
    /// Without `detailed_metric`, each level shows the value written in the
    /// file (a wildcard pattern stays a pattern, a key-only level shows only
    /// its key), except that a level with `value_to_metric` shows the
    /// request's value (a `share_threshold` level keeps its pattern). With
    /// `detailed_metric`, every level shows `key_value` with the request's
    /// value, patterns again kept at `share_threshold` levels. Only
    /// `value_to_metric` and `detailed_metric` make the key depend on
    /// request values ([`Rule::metric_key_varies`]).
    pub fn metric_key<K: AsRef<str>, V: AsRef<str>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
    ) -> String {
        let mut text = domain.to_owned();
        for (key, value) in self.metric_levels(entries) {
            text.push('.');
            text.push_str(key);
            if let Some(value) = value {
                text.push('_');
                text.push_str(value);
            }
        }
        text
    }

    /// The levels of [`Rule::metric_key`] after the domain: each level's key,
    /// and the value written after it as `key_value` (`None`: the key alone).
    pub fn metric_levels<'a, K: AsRef<str>, V: AsRef<str>>(
        &'a self,
        entries: &'a [(K, V)],
    ) -> Vec<(&'a str, Option<&'a str>)> {
        let any_shared = (0..entries.len()).any(|i| self.shared_value(i).is_some());
        entries
            .iter()
            .enumerate()
            .map(|(i, (key, value))| {
                let (key, value) = (key.as_ref(), value.as_ref());
                let written = self.path.get(i).and_then(|(_, v)| v.as_deref());
                let options = self.levels.get(i).copied().unwrap_or_default();
                let shown = if let Some(pattern) = self.shared_value(i) {
                    Some(pattern)
                } else if self.detailed_metric {
                    // Upstream writes `key_` + value even for an empty value, unless
                    // a share_threshold level made it build the key entry by entry.
                    (any_shared && value.is_empty())
                        .then_some("")
                        .or(Some(value))
                } else if written.is_none_or(|w| !w.contains('*')) {
                    // An exact value is the request's; key-only shows it only with value_to_metric.
                    if written.is_some() || options.value_to_metric {
                        Some(value)
                    } else {
                        None
                    }
                } else if options.value_to_metric {
                    Some(value)
                } else {
                    written
                };
                let shown =
                    shown.filter(|v| !v.is_empty() || (self.detailed_metric && !any_shared));
                (key, shown)
            })
            .collect()
    }

    /// Whether [`Rule::metric_key`] can differ between requests matched to
    /// this rule (so a metrics label built from it needs a bound).
    pub fn metric_key_varies(&self) -> bool {
        (self.detailed_metric && (0..self.path.len()).any(|i| self.shared_value(i).is_none()))
            || self
                .path
                .iter()
                .zip(&self.levels)
                .enumerate()
                .any(|(i, (step, options))| {
                    options.value_to_metric
                        && self.shared_value(i).is_none()
                        && step.1.as_deref().is_none_or(|v| v.contains('*'))
                })
    }
}

/// The dotted path of a descriptor as upstream prints it: `domain.key_value.key2`.
pub(crate) fn dotted_path(domain: &str, path: &[(String, Option<String>)]) -> String {
    let mut text = domain.to_owned();
    for (key, value) in path {
        text.push('.');
        text.push_str(key);
        if let Some(value) = value {
            text.push('_');
            text.push_str(value);
        }
    }
    text
}

/// Appends one length-prefixed part to a counter key.
fn push_part(key: &mut Vec<u8>, part: &[u8]) {
    key.extend_from_slice(&(part.len() as u64).to_be_bytes());
    key.extend_from_slice(part);
}

/// A descriptor value with `*` wildcards, split at each `*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WildcardPattern {
    pieces: Vec<String>,
}

impl WildcardPattern {
    /// The pattern for `value`, which contains at least one `*`.
    pub(crate) fn new(value: &str) -> Self {
        WildcardPattern {
            pieces: value.split('*').map(str::to_owned).collect(),
        }
    }

    /// Whether `text` matches: each `*` stands for any run of characters, including none.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let Some((first, rest)) = self.pieces.split_first() else {
            return text.is_empty();
        };
        let Some(mut remaining) = text.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return remaining.is_empty();
        };
        for piece in middle {
            match remaining.find(piece.as_str()) {
                Some(at) => remaining = &remaining[at + piece.len()..],
                None => return false,
            }
        }
        remaining.len() >= last.len() && remaining.ends_with(last.as_str())
    }
}

/// The index of a descriptor node inside its domain.
pub(crate) type NodeId = usize;

/// The descriptors under one key at one level.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct KeyEntry {
    /// Descriptors with a value (wildcards included, looked up literally), by value.
    pub(crate) exact: HashMap<String, NodeId>,
    /// Descriptors whose value has a `*`, in file order.
    pub(crate) wildcards: Vec<(WildcardPattern, NodeId)>,
    /// The descriptor without a value.
    pub(crate) key_only: Option<NodeId>,
}

/// The descriptors at one level of the tree, by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Level {
    pub(crate) keys: HashMap<String, KeyEntry>,
}

/// One descriptor: its rule if it has limits, and the level below it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DescriptorNode {
    pub(crate) rule: Option<Rule>,
    pub(crate) children: Level,
    /// The file the descriptor is in.
    pub(crate) file: PathBuf,
    /// Where it starts.
    pub(crate) position: Position,
}

/// One domain's descriptor tree.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DomainRules {
    pub(crate) root: Level,
    pub(crate) nodes: Vec<DescriptorNode>,
}

impl DomainRules {
    /// The rule for one request descriptor in this domain (see [`RuleSet::find`]).
    fn find<K: AsRef<str>, V: AsRef<str>>(&self, entries: &[(K, V)]) -> Option<&Rule> {
        let mut level = &self.root;
        let mut found = None;
        for (key, value) in entries {
            let entry = level.keys.get(key.as_ref())?;
            let value = value.as_ref();
            let id = if value.is_empty() {
                entry.key_only
            } else {
                entry
                    .exact
                    .get(value)
                    .copied()
                    .or_else(|| {
                        entry
                            .wildcards
                            .iter()
                            .find(|(pattern, _)| pattern.matches(value))
                            .map(|(_, id)| *id)
                    })
                    .or(entry.key_only)
            }?;
            let node = self.nodes.get(id)?;
            found = Some(node);
            level = &node.children;
        }
        found?.rule.as_ref()
    }

    /// How many descriptors of this domain carry limits.
    fn rule_count(&self) -> usize {
        self.nodes.iter().filter(|n| n.rule.is_some()).count()
    }
}

/// Every loaded domain with its descriptor tree: what a limits directory says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuleSet {
    pub(crate) domains: HashMap<String, DomainRules>,
}

/// What applies to one descriptor of a request once `replaces` and `unlimited` are resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum Applied<'a> {
    /// No rule matched, or every limit of the matched rule was replaced: OK, no limit.
    NoLimit,
    /// The rule is `unlimited: true`: OK, nothing counted.
    Unlimited(&'a Rule),
    /// These limits of the rule are counted (indices into `rule.limits`).
    Limited {
        /// The matched rule.
        rule: &'a Rule,
        /// The indices of the limits that apply, in file order.
        limit_indices: Vec<usize>,
    },
}

impl RuleSet {
    /// The rule for one request descriptor, with upstream's precedence.
    ///
    /// At each level: the exact value, else the first wildcard value that
    /// matches (file order), else the key-only descriptor; an empty request
    /// value matches only the key-only one. The rule applies only when found
    /// at the request's last entry. Unknown domains and empty requests get `None`.
    pub fn find<K: AsRef<str>, V: AsRef<str>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
    ) -> Option<&Rule> {
        self.domains.get(domain)?.find(entries)
    }

    /// What applies to each descriptor of one request, in request order.
    ///
    /// Every name in a `replaces` of a matched rule (unlimited ones included)
    /// drops every matched limit of that name; unlimited rules count nothing.
    pub fn resolve<K: AsRef<str>, V: AsRef<str>>(
        &self,
        domain: &str,
        descriptors: &[&[(K, V)]],
    ) -> Vec<Applied<'_>> {
        let rules: SmallVec<[Option<&Rule>; 4]> = descriptors
            .iter()
            .map(|entries| self.find(domain, entries))
            .collect();
        let replaced: SmallVec<[&str; 4]> = rules
            .iter()
            .flatten()
            .flat_map(|rule| rule.limits.iter())
            .flat_map(|limit| limit.replaces.iter().map(String::as_str))
            .collect();
        let is_replaced = |limit: &Limit| {
            limit
                .name
                .as_deref()
                .is_some_and(|name| replaced.contains(&name))
        };
        rules
            .into_iter()
            .map(|rule| {
                let Some(rule) = rule else {
                    return Applied::NoLimit;
                };
                let mut kept = rule.limits.iter().filter(|limit| !is_replaced(limit));
                if kept.clone().next().is_none() {
                    Applied::NoLimit
                } else if kept.all(Limit::is_unlimited) {
                    Applied::Unlimited(rule)
                } else {
                    Applied::Limited {
                        rule,
                        limit_indices: (0..rule.limits.len())
                            .filter(|&i| {
                                let limit = &rule.limits[i];
                                !is_replaced(limit) && !limit.is_unlimited()
                            })
                            .collect(),
                    }
                }
            })
            .collect()
    }

    /// The domain names, in no particular order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// Whether the config has `domain` (a `domain:` of some file).
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// How many domains there are.
    pub fn domain_count(&self) -> usize {
        self.domains.len()
    }

    /// How many descriptors carry limits, across all domains.
    pub fn rule_count(&self) -> usize {
        self.domains.values().map(DomainRules::rule_count).sum()
    }

    /// Every rule of `domain`, in the order they were loaded.
    pub fn rules(&self, domain: &str) -> impl Iterator<Item = &Rule> {
        self.domains
            .get(domain)
            .into_iter()
            .flat_map(|d| d.nodes.iter().filter_map(|n| n.rule.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_any_run_including_empty() {
        let p = |s: &str| WildcardPattern::new(s);
        assert!(p("foo*").matches("foo"));
        assert!(p("foo*").matches("foobar"));
        assert!(!p("foo*").matches("fo"));
        assert!(p("*.example.com").matches("a.example.com"));
        assert!(!p("*.example.com").matches("example.com"));
        assert!(p("/api/*/action").matches("/api/v1/x/action"));
        assert!(p("a*b*c").matches("abc"));
        assert!(p("a*b*c").matches("aXbYbZc"));
        assert!(!p("a*b*c").matches("acb"));
        assert!(p("*").matches(""));
        assert!(!p("ab*ba").matches("aba"));
        assert!(p("ab*ba").matches("abba"));
    }
}
