//! The statistics key of a matched rule (upstream's `detailed_metric` / `value_to_metric`), with a bound on the number and the size of the keys taken from request values.
//!
//! [`Rule::metric_key`] names a rule's statistics the way upstream names
//! them. Without `detailed_metric` or `value_to_metric` the key is fixed by
//! the configuration; with them it holds request values, so every distinct
//! value would be a new Prometheus series. [`MetricKeys`] keeps at most a
//! configured number of such keys; past the bound, a request's hits are
//! counted under the rule's own configured path instead, so the number of
//! series stays bounded whatever callers send. Each part of such a key (a
//! label value on `/metrics`, a part of a statsd name) is at most a
//! configured number of bytes: a longer one is cut at a character boundary
//! and ends in `~` and 16 hex digits of the xxh3 hash of the whole part, so
//! two long values that share their start stay two keys
//! ([`bounded_label`]). So the keys take at most keys × parts × bytes.
//! The unknown domains that `domain_not_found` counts under are request
//! values too, and count against the same bound ([`MetricKeys::domain_key`]).
//!
//! [`MetricKeysCollector`] writes the bound as gauges:
//! `ratelimit_metric_keys` and `ratelimit_metric_keys_limit`
//! (`--max-metric-keys`), `ratelimit_metric_label_bytes_limit`
//! (`--max-metric-label-bytes`) and `ratelimit_metric_keys_truncated`, the
//! keys kept with a part cut to that size.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use tollgate_rules::Rule;

use crate::rule_stats::StatsKey;

/// How many request-valued statistics keys are kept unless configured otherwise.
pub const DEFAULT_MAX_METRIC_KEYS: usize = 10_000;

/// The most bytes of one part of a request-valued statistics key unless configured otherwise.
pub const DEFAULT_MAX_METRIC_LABEL_BYTES: usize = 128;

/// The least `--max-metric-label-bytes` may be: room for the hash suffix and a start.
pub const MIN_METRIC_LABEL_BYTES: usize = 32;

/// The domain `domain_not_found` counts under once `--max-metric-keys` keys are in use.
pub const OTHER_DOMAINS: &str = "_other_domains";

/// `~` and 16 hex digits: what ends a part that was cut.
const HASH_SUFFIX_BYTES: usize = 17;

/// `value` if it has at most `max` bytes (at least [`MIN_METRIC_LABEL_BYTES`]);
/// else its start, cut at a character boundary, then `~` and the xxh3 hash
/// of the whole value in 16 hex digits, `max` bytes or fewer in all.
pub fn bounded_label(value: &str, max: usize) -> Option<String> {
    if value.len() <= max {
        return None;
    }
    let start = value.floor_char_boundary(max.saturating_sub(HASH_SUFFIX_BYTES));
    let hash = xxhash_rust::xxh3::xxh3_64(value.as_bytes());
    Some(format!("{}~{hash:016x}", &value[..start]))
}

/// The request-valued statistics keys in use: at most `max` of them, each part at most `max_label_bytes`.
#[derive(Debug)]
pub struct MetricKeys {
    seen: Mutex<Seen>,
    max: usize,
    max_label_bytes: usize,
}

/// The keys kept, and how many of them had a part cut.
#[derive(Debug, Default)]
struct Seen {
    keys: HashSet<StatsKey>,
    truncated: usize,
}

impl Default for MetricKeys {
    /// At most [`DEFAULT_MAX_METRIC_KEYS`] keys of parts of at most [`DEFAULT_MAX_METRIC_LABEL_BYTES`].
    fn default() -> Self {
        MetricKeys::new(DEFAULT_MAX_METRIC_KEYS, DEFAULT_MAX_METRIC_LABEL_BYTES)
    }
}

impl MetricKeys {
    /// Keeps at most `max` request-valued keys (0: always the configured
    /// path), each part at most `max_label_bytes` (raised to [`MIN_METRIC_LABEL_BYTES`]).
    pub fn new(max: usize, max_label_bytes: usize) -> Self {
        MetricKeys {
            seen: Mutex::new(Seen::default()),
            max,
            max_label_bytes: max_label_bytes.max(MIN_METRIC_LABEL_BYTES),
        }
    }

    /// The most request-valued keys kept.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The most bytes of one part of a request-valued key.
    pub fn max_label_bytes(&self) -> usize {
        self.max_label_bytes
    }

    /// How many request-valued keys are in use.
    pub fn len(&self) -> usize {
        self.seen.lock().keys.len()
    }

    /// Whether no request-valued key is in use.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many of the keys in use had a part cut to [`MetricKeys::max_label_bytes`].
    pub fn truncated(&self) -> usize {
        self.seen.lock().truncated
    }

    /// The statistics key for `entries` of `domain` matched to `rule`:
    /// upstream's key, its parts bounded, while the bound allows; else the
    /// rule's configured path.
    pub fn stats_key<K: AsRef<str>, V: AsRef<str>>(
        &self,
        rule: &Rule,
        domain: &str,
        entries: &[(K, V)],
    ) -> StatsKey {
        let key = StatsKey::new(domain, rule.metric_levels(entries));
        if !rule.metric_key_varies() {
            return key;
        }
        let (key, cut) = self.bounded(key);
        let mut seen = self.seen.lock();
        if seen.keys.contains(&key) {
            return key;
        }
        if seen.keys.len() >= self.max {
            drop(seen);
            return StatsKey::new(
                domain,
                rule.path.iter().map(|(k, v)| (k.as_str(), v.as_deref())),
            );
        }
        seen.truncated += usize::from(cut);
        seen.keys.insert(key.clone());
        key
    }

    /// The statistics key of `domain`, a domain no rule has (for
    /// `domain_not_found`): the domain, bounded, while the bound allows;
    /// else [`OTHER_DOMAINS`], so callers cannot add series without end.
    pub fn domain_key(&self, domain: &str) -> StatsKey {
        let (key, cut) = self.bounded(StatsKey::new(domain, []));
        let mut seen = self.seen.lock();
        if seen.keys.contains(&key) {
            return key;
        }
        if seen.keys.len() >= self.max {
            return StatsKey::new(OTHER_DOMAINS, []);
        }
        seen.truncated += usize::from(cut);
        seen.keys.insert(key.clone());
        key
    }

    /// `key` with each part bounded, and whether one was cut.
    fn bounded(&self, mut key: StatsKey) -> (StatsKey, bool) {
        let mut cut = false;
        for part in std::iter::once(&mut key.domain).chain(&mut key.levels) {
            if let Some(bounded) = bounded_label(part.as_str(), self.max_label_bytes) {
                *part = bounded;
                cut = true;
            }
        }
        (key, cut)
    }
}

/// Writes the gauges of [`MetricKeys`] on each scrape.
#[derive(Debug)]
pub struct MetricKeysCollector(pub Arc<MetricKeys>);

impl Collector for MetricKeysCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let keys = &self.0;
        for (name, help, value) in [
            (
                "ratelimit_metric_keys",
                "Statistics keys taken from request values (detailed_metric, value_to_metric)",
                keys.len(),
            ),
            (
                "ratelimit_metric_keys_limit",
                "The most statistics keys taken from request values (--max-metric-keys)",
                keys.max(),
            ),
            (
                "ratelimit_metric_keys_truncated",
                "Statistics keys kept with a request value cut to --max-metric-label-bytes",
                keys.truncated(),
            ),
            (
                "ratelimit_metric_label_bytes_limit",
                "The most bytes of one label value taken from a request (--max-metric-label-bytes)",
                keys.max_label_bytes(),
            ),
        ] {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tollgate_rules::{LoadOptions, RuleSet, load_sources};

    use super::*;

    /// Domain `d`: `user` by value (`value_to_metric`), and `path=/x`.
    fn rules() -> RuleSet {
        load_sources(
            [(
                Path::new("a.yaml"),
                "domain: d\ndescriptors:\n  - key: user\n    value_to_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: path\n    value: /x\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
            )],
            LoadOptions::default(),
        )
        .rule_set
    }

    #[test]
    fn request_valued_labels_stop_at_the_bound_and_fixed_ones_never_count() {
        let rules = rules();
        let keys = MetricKeys::new(2, DEFAULT_MAX_METRIC_LABEL_BYTES);
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

    #[test]
    fn a_long_part_is_cut_at_a_character_boundary_and_stays_distinct() {
        let max = 40;
        assert_eq!(bounded_label(&"a".repeat(max), max), None, "fits");
        // Two values with the same first 100 KB, one of them with a
        // two-byte character across the cut.
        let long = "é".repeat(50_000);
        let other = format!("{long}x");
        let cut = bounded_label(&long, max).expect("cut");
        let cut_other = bounded_label(&other, max).expect("cut");
        assert!(
            cut.len() <= max && cut_other.len() <= max,
            "{cut} {cut_other}"
        );
        assert_ne!(cut, cut_other);
        let (start, hash) = cut.split_once('~').expect("a hash suffix");
        assert!(long.starts_with(start) && !start.is_empty(), "{start}");
        assert_eq!(hash.len(), 16);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{hash}");
    }

    #[test]
    fn keys_with_a_long_value_are_bounded_and_counted_once() {
        let rules = rules();
        let keys = MetricKeys::new(10, 64);
        let long = "u".repeat(100_000);
        let rule = rules
            .find("d", &[("user", long.as_str())])
            .expect("matched");
        for _ in 0..3 {
            let key = keys.stats_key(rule, "d", &[("user", long.as_str())]);
            assert!(key.levels[0].len() <= 64, "{}", key.levels[0]);
            assert!(key.levels[0].starts_with("user_uuu"), "{}", key.levels[0]);
        }
        let short = keys.stats_key(rule, "d", &[("user", "bob")]);
        assert_eq!(short.levels, ["user_bob"]);
        assert_eq!((keys.len(), keys.truncated()), (2, 1));
    }

    #[test]
    fn unknown_domains_share_the_bound_then_count_as_other() {
        let keys = MetricKeys::new(2, 64);
        assert_eq!(keys.domain_key("a").domain, "a");
        assert_eq!(keys.domain_key("b").domain, "b");
        assert_eq!(keys.domain_key("a").domain, "a", "a known one stays");
        assert_eq!(keys.domain_key("c").domain, OTHER_DOMAINS);
        assert_eq!(keys.len(), 2);
        let long = "d".repeat(1000);
        assert!(MetricKeys::new(10, 64).domain_key(&long).domain.len() <= 64);
    }
}
