//! Per-rule hit counters under envoyproxy/ratelimit's stats keys, exported with upstream's names.
//!
//! Each rule counts under its *stats key*, upstream's
//! `<domain>.<key>_<value>.<key>_<value>…` (the rule's config path; the
//! request's entries for a `detailed_metric` rule). Every part is sanitised
//! as upstream's statsd names are: `.`, `:` and `|` inside a key or value
//! become `_`, so a part never splits into two. The number of keys is bounded
//! by the config, except for detailed rules, as before; those keys are
//! bounded in number and size by [`crate::metric_key`].
//!
//! Two views read the same counters:
//! * Prometheus ([`RuleStatsCollector`]): the names and labels that
//!   upstream's default statsd_exporter mapping gives,
//!   `ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,within_limit,shadow_mode}`
//!   with `domain` and `key1` (the first level), plus `key2` (the second
//!   level) for rules two or more levels deep; deeper levels add into their
//!   first two, as they do upstream. Upstream's two stats its mapping does
//!   not name follow the same pattern:
//!   `ratelimit_service_rate_limit_over_limit_with_local_cache{domain,key1[,key2]}`
//!   and `ratelimit_service_rate_limit_domain_not_found{domain}`. Upstream's
//!   exporter writes these names without the `_total` suffix, so they are
//!   typed `counter` in the Prometheus text format ([`crate::exposition`]).
//!   Label values are written escaped, as request values may hold `"`,
//!   `\\` or a newline.
//! * statsd ([`RuleStats::snapshot`]): `ratelimit.service.rate_limit.<stats key>.<stat>`,
//!   and `ratelimit.service.rate_limit.<domain>.domain_not_found` for a
//!   domain no rule has (its key has no levels).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use tollgate_runtime::LabelValue;

/// One counter of a rule, in upstream's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleStat {
    /// Hits counted against the rule.
    TotalHits = 0,
    /// Hits of OVER_LIMIT answers (and of shadowed ones).
    OverLimit = 1,
    /// Allowed hits above the near-limit threshold.
    NearLimit = 2,
    /// Hits of OK answers.
    WithinLimit = 3,
    /// Hits over the limit that a `shadow_mode` rule let through.
    ShadowMode = 4,
    /// Hits answered OVER_LIMIT from the quick-deny cache, without a store call (upstream's local cache).
    OverLimitWithLocalCache = 5,
    /// Descriptors of a request to a domain no rule has (its stats key has the domain only).
    DomainNotFound = 6,
}

impl RuleStat {
    /// Every stat, in upstream's order.
    pub const ALL: [RuleStat; STAT_COUNT] = [
        RuleStat::TotalHits,
        RuleStat::OverLimit,
        RuleStat::NearLimit,
        RuleStat::WithinLimit,
        RuleStat::ShadowMode,
        RuleStat::OverLimitWithLocalCache,
        RuleStat::DomainNotFound,
    ];

    /// The last part of upstream's statsd name (`total_hits`, …).
    pub fn name(self) -> &'static str {
        match self {
            RuleStat::TotalHits => "total_hits",
            RuleStat::OverLimit => "over_limit",
            RuleStat::NearLimit => "near_limit",
            RuleStat::WithinLimit => "within_limit",
            RuleStat::ShadowMode => "shadow_mode",
            RuleStat::OverLimitWithLocalCache => "over_limit_with_local_cache",
            RuleStat::DomainNotFound => "domain_not_found",
        }
    }

    /// What the Prometheus series counts.
    fn help(self) -> &'static str {
        match self {
            RuleStat::TotalHits => "Hits counted against a rule",
            RuleStat::OverLimit => "Hits of OVER_LIMIT answers, shadowed ones included",
            RuleStat::NearLimit => "Allowed hits above near_limit_ratio times the limit",
            RuleStat::WithinLimit => "Hits of OK answers",
            RuleStat::ShadowMode => "Hits over the limit that a shadow_mode rule let through",
            RuleStat::OverLimitWithLocalCache => {
                "Hits answered OVER_LIMIT from the quick-deny cache, without a store call (counted in over_limit too)"
            }
            RuleStat::DomainNotFound => "Descriptors sent for a domain no rule has",
        }
    }
}

/// A rule's stats key: its domain and its sanitised levels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct StatsKey {
    /// The domain, sanitised.
    pub domain: String,
    /// `key` or `key_value` for each level, sanitised.
    pub levels: Vec<String>,
}

impl StatsKey {
    /// The key of `levels` (`(key, value)` pairs, value absent for a key-only level) in `domain`.
    pub fn new<'a>(
        domain: &str,
        levels: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Self {
        let levels = levels
            .into_iter()
            .map(|(key, value)| match value {
                Some(value) => format!("{}_{}", sanitise(key), sanitise(value)),
                None => sanitise(key),
            })
            .collect();
        StatsKey {
            domain: sanitise(domain),
            levels,
        }
    }

    /// `domain.level.level…`, upstream's stats key.
    pub fn dotted(&self) -> String {
        let mut text = self.domain.clone();
        for level in &self.levels {
            text.push('.');
            text.push_str(level);
        }
        text
    }
}

/// `part` with the characters that would split or break a statsd name replaced by `_`.
fn sanitise(part: &str) -> String {
    part.replace(['.', ':', '|'], "_")
}

/// How many counters a stats key has.
pub const STAT_COUNT: usize = 7;

/// The counters of one stats key.
#[derive(Debug, Default)]
pub(crate) struct Counters([AtomicU64; STAT_COUNT]);

impl Counters {
    /// Adds each `(stat, hits)` of `counts`.
    pub(crate) fn add_all(&self, counts: &[(RuleStat, u64)]) {
        for &(stat, hits) in counts {
            self.0[stat as usize].fetch_add(hits, Ordering::Relaxed);
        }
    }
}

/// Every rule's counters, by stats key.
#[derive(Debug, Default)]
pub struct RuleStats {
    counters: RwLock<HashMap<StatsKey, Arc<Counters>>>,
}

/// The counters of one stats key at one moment, in [`RuleStat::ALL`]'s order.
pub type StatValues = [u64; STAT_COUNT];

impl RuleStats {
    /// Adds `hits` to `stat` of `key`.
    pub fn add(&self, key: &StatsKey, stat: RuleStat, hits: u64) {
        self.add_all(key, &[(stat, hits)]);
    }

    /// Adds each `(stat, hits)` of `counts` to `key`'s counters: one
    /// lookup under the read lock, the write lock only for a key's first
    /// count.
    pub fn add_all(&self, key: &StatsKey, counts: &[(RuleStat, u64)]) {
        if let Some(counters) = self.counters.read().get(key) {
            counters.add_all(counts);
            return;
        }
        self.counters_of(key).add_all(counts);
    }

    /// The counters of `key`, made on its first use, for a caller that
    /// keeps them.
    pub(crate) fn counters_of(&self, key: &StatsKey) -> Arc<Counters> {
        if let Some(counters) = self.counters.read().get(key) {
            return Arc::clone(counters);
        }
        Arc::clone(self.counters.write().entry(key.clone()).or_default())
    }

    /// Every stats key's counters now.
    pub fn snapshot(&self) -> Vec<(StatsKey, StatValues)> {
        self.counters
            .read()
            .iter()
            .map(|(key, counters)| {
                let values = std::array::from_fn(|i| counters.0[i].load(Ordering::Relaxed));
                (key.clone(), values)
            })
            .collect()
    }
}

/// Writes [`RuleStats`] as upstream's Prometheus series on each scrape.
#[derive(Debug)]
pub struct RuleStatsCollector(pub Arc<RuleStats>);

/// The labels of one upstream series: `domain`, then `key1`, and `key2` when the
/// key has two levels or more, written escaped (they hold request values).
type UpstreamLabels = Vec<(&'static str, LabelValue)>;

impl Collector for RuleStatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut series: BTreeMap<UpstreamLabels, StatValues> = BTreeMap::new();
        for (key, values) in self.0.snapshot() {
            // A key without levels is a domain's (`domain_not_found`).
            let mut labels = vec![("domain", LabelValue::from(key.domain.as_str()))];
            for (name, level) in ["key1", "key2"].into_iter().zip(&key.levels) {
                labels.push((name, LabelValue::from(level.as_str())));
            }
            let sum = series.entry(labels).or_default();
            for (total, value) in sum.iter_mut().zip(values) {
                *total += value;
            }
        }
        for stat in RuleStat::ALL {
            let name = format!("ratelimit_service_rate_limit_{}", stat.name());
            // A counter under exactly upstream's name: a sample without `_total`.
            let mut family =
                encoder.encode_descriptor(&name, stat.help(), None, MetricType::Counter)?;
            for (labels, values) in &series {
                let value = values[stat as usize];
                if value == 0 {
                    continue;
                }
                family
                    .encode_family(labels)?
                    .encode_gauge(&i64::try_from(value).unwrap_or(i64::MAX))?;
            }
        }
        Ok(())
    }
}
