//! Prometheus metrics: per-rule hit counters, request latency and config reloads.
//!
//! [`Metrics::observe`] counts one answered request; the gRPC and HTTP front
//! ends call it where the engine's statuses become a response, so the
//! engine's hot loop counts nothing. Per-rule counters carry the labels
//! `domain` and `descriptor`, the rule's dotted config path without the
//! domain (`path_/login`), so their number is bounded by the config; a rule
//! with `detailed_metric: true` is labelled with the request's entries
//! instead (`path_/login.user_alice`), and a `value_to_metric` level with
//! the request's value, as upstream's stats keys are
//! ([`crate::metric_key`]; at most `--max-metric-keys` such labels).
//! Descriptors that match no rule, or that nothing limits, are not counted.
//!
//! prometheus-client writes counters with the OpenMetrics `_total` suffix,
//! so the rule counters are exported as `ratelimit_total_hits_total`,
//! `ratelimit_over_limit_total`, `ratelimit_near_limit_total`,
//! `ratelimit_within_limit_total` and `ratelimit_shadow_mode_total` (hits
//! over the limit that a `shadow_mode` rule let through; they count in
//! `over_limit` too, as upstream counts them). Requests answered OK only
//! because of global shadow mode count in `ratelimit_global_shadow_mode_total`.
//!
//! The request caps are gauges of their setting
//! ([`Metrics::with_request_caps`]): `ratelimit_request_max_descriptors`,
//! `ratelimit_request_max_descriptor_entries` and
//! `ratelimit_request_max_bytes`. `tollgate_build_info` is 1, labelled
//! with the build's version, git hash, profile and features
//! ([`Metrics::with_build_info`]).

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tollgate_core::{Clock, MonotonicClock, Timestamp};
use tollgate_rules::RuleSet;

use crate::build_info::BuildInfo;
use crate::metric_key::MetricKeys;
use crate::reload::LiveEngine;
use tollgate_protocol::rls::RequestCaps;
use tollgate_protocol::rls::model::{Code, RateLimitRequest, RateLimitResponse};

/// The near-limit ratio used when none is configured (upstream's `NEAR_LIMIT_RATIO`).
pub const DEFAULT_NEAR_LIMIT_RATIO: f64 = 0.8;

/// The labels of a per-rule counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    /// The rule's domain.
    pub domain: String,
    /// The rule's dotted path without the domain, or the request's entries for detailed rules.
    pub descriptor: String,
}

/// The label of the latency histogram: which front end answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    /// `grpc` or `http`.
    pub api: String,
}

/// The label of `ratelimit_config_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HashLabels {
    hash: String,
}

/// Reload statistics read at scrape time.
pub trait ConfigStats: fmt::Debug + Send + Sync + 'static {
    /// Successful loads, the initial one included.
    fn successes(&self) -> u64;
    /// Failed reloads.
    fn failures(&self) -> u64;
    /// The hash of the config in service.
    fn config_hash(&self) -> u64;
}

impl<C: Clock + 'static> ConfigStats for LiveEngine<C> {
    /// Successful reloads, plus the initial load when the engine was loaded from a file.
    fn successes(&self) -> u64 {
        LiveEngine::successes(self) + u64::from(self.path().is_some())
    }

    fn failures(&self) -> u64 {
        LiveEngine::failures(self)
    }

    fn config_hash(&self) -> u64 {
        LiveEngine::config_hash(self)
    }
}

/// Writes the config counters and info gauge from [`ConfigStats`] on each scrape.
#[derive(Debug)]
struct ConfigCollector(Arc<dyn ConfigStats>);

impl prometheus_client::collector::Collector for ConfigCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let success = ConstCounter::new(self.0.successes());
        let metric = encoder.encode_descriptor(
            "ratelimit_config_load_success",
            "Config loads that succeeded, the first one included",
            None,
            success.metric_type(),
        )?;
        success.encode(metric)?;
        let error = ConstCounter::new(self.0.failures());
        let metric = encoder.encode_descriptor(
            "ratelimit_config_load_error",
            "Config reloads that failed (the previous config stayed in service)",
            None,
            error.metric_type(),
        )?;
        error.encode(metric)?;
        let info = ConstGauge::new(1_i64);
        let labels = HashLabels {
            hash: format!("{:016x}", self.0.config_hash()),
        };
        let mut family = encoder.encode_descriptor(
            "ratelimit_config_info",
            "Always 1; the label `hash` identifies the config in service",
            None,
            info.metric_type(),
        )?;
        let metric = family.encode_family(&labels)?;
        info.encode(metric)
    }
}

/// The service's metrics; share one behind an `Arc` between the front ends.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    total_hits: Family<RuleLabels, Counter>,
    over_limit: Family<RuleLabels, Counter>,
    near_limit: Family<RuleLabels, Counter>,
    within_limit: Family<RuleLabels, Counter>,
    shadow_mode: Family<RuleLabels, Counter>,
    global_shadow_mode: Counter,
    duration: Family<ApiLabels, Histogram>,
    near_limit_ratio: f64,
    metric_keys: MetricKeys,
    clock: MonotonicClock,
}

impl Metrics {
    /// Metrics reading reload statistics from `config`, counting near-limit hits above `near_limit_ratio` × limit.
    pub fn new(config: Arc<dyn ConfigStats>, near_limit_ratio: f64) -> Self {
        let mut registry = Registry::default();
        let total_hits = Family::<RuleLabels, Counter>::default();
        let over_limit = Family::<RuleLabels, Counter>::default();
        let near_limit = Family::<RuleLabels, Counter>::default();
        let within_limit = Family::<RuleLabels, Counter>::default();
        let shadow_mode = Family::<RuleLabels, Counter>::default();
        let global_shadow_mode = Counter::default();
        let duration = Family::<ApiLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.000_01, 4.0, 10))) as fn() -> Histogram,
        );
        registry.register(
            "ratelimit_total_hits",
            "Hits counted against a rule",
            total_hits.clone(),
        );
        registry.register(
            "ratelimit_over_limit",
            "Hits of OVER_LIMIT answers",
            over_limit.clone(),
        );
        registry.register(
            "ratelimit_near_limit",
            "Allowed hits above near_limit_ratio times the limit",
            near_limit.clone(),
        );
        registry.register(
            "ratelimit_within_limit",
            "Hits of OK answers",
            within_limit.clone(),
        );
        registry.register(
            "ratelimit_shadow_mode",
            "Hits over the limit that a shadow_mode rule let through",
            shadow_mode.clone(),
        );
        registry.register(
            "ratelimit_global_shadow_mode",
            "Requests answered OK only because of global shadow mode",
            global_shadow_mode.clone(),
        );
        registry.register(
            "ratelimit_request_duration_seconds",
            "Time to answer one rate limit request, by front end",
            duration.clone(),
        );
        registry.register_collector(Box::new(ConfigCollector(config)));
        Metrics {
            registry,
            total_hits,
            over_limit,
            near_limit,
            within_limit,
            shadow_mode,
            global_shadow_mode,
            duration,
            near_limit_ratio: if near_limit_ratio.is_finite() {
                near_limit_ratio.clamp(0.0, 1.0)
            } else {
                DEFAULT_NEAR_LIMIT_RATIO
            },
            metric_keys: MetricKeys::default(),
            clock: MonotonicClock::new(),
        }
    }

    /// These metrics, keeping at most `max` distinct statistics keys taken
    /// from request values (`detailed_metric`, `value_to_metric`); past it,
    /// hits count under the rule's configured path.
    pub fn with_max_metric_keys(self, max: usize) -> Self {
        Metrics {
            metric_keys: MetricKeys::new(max),
            ..self
        }
    }

    /// Counts one answered request: per-rule hits from the statuses, against the rules that matched.
    pub fn observe(
        &self,
        rules: &RuleSet,
        request: &RateLimitRequest,
        response: &RateLimitResponse,
    ) {
        let request_hits = u64::from(request.hits_addend.max(1));
        if response.overall == Code::Ok
            && response.statuses.iter().any(|s| s.code == Code::OverLimit)
        {
            self.global_shadow_mode.inc();
        }
        for (descriptor, status) in request.descriptors.iter().zip(&response.statuses) {
            if descriptor.is_negative_hits {
                continue;
            }
            let Some(limit) = status.current_limit.as_ref() else {
                continue;
            };
            let Some(rule) = rules.find(&request.domain, &descriptor.entries) else {
                continue;
            };
            let hits = descriptor.hits_addend.unwrap_or(request_hits);
            let descriptor_label =
                self.metric_keys
                    .label(rule, &request.domain, &descriptor.entries);
            let labels = RuleLabels {
                domain: request.domain.clone(),
                descriptor: descriptor_label,
            };
            self.total_hits.get_or_create(&labels).inc_by(hits);
            match status.code {
                Code::OverLimit => {
                    self.over_limit.get_or_create(&labels).inc_by(hits);
                }
                // Over the limit, let through: upstream counts both.
                Code::Ok if status.shadowed => {
                    self.over_limit.get_or_create(&labels).inc_by(hits);
                    self.shadow_mode.get_or_create(&labels).inc_by(hits);
                }
                Code::Ok => {
                    self.within_limit.get_or_create(&labels).inc_by(hits);
                    let near = near_hits(
                        u64::from(limit.requests_per_unit),
                        u64::from(status.limit_remaining),
                        hits,
                        self.near_limit_ratio,
                    );
                    if near > 0 {
                        self.near_limit.get_or_create(&labels).inc_by(near);
                    }
                }
            }
        }
    }

    /// These metrics with the shared store's errors, fallbacks and breaker state.
    pub fn with_store(mut self, store: Arc<crate::store::RemoteStore>) -> Self {
        self.registry
            .register_collector(Box::new(crate::store::StoreCollector(store)));
        self
    }

    /// These metrics with the gauges of every memory and connection bound (see [`crate::bounds`]).
    #[must_use]
    pub fn with_bounds(mut self, bounds: crate::bounds::BoundsCollector) -> Self {
        self.registry.register_collector(Box::new(bounds));
        self
    }

    /// These metrics with a gauge of each of `caps`' settings.
    #[must_use]
    pub fn with_request_caps(mut self, caps: &RequestCaps) -> Self {
        for (name, help, value) in [
            (
                "ratelimit_request_max_descriptors",
                "The most descriptors one request may have (setting)",
                caps.max_descriptors,
            ),
            (
                "ratelimit_request_max_descriptor_entries",
                "The most entries one descriptor may have (setting)",
                caps.max_descriptor_entries,
            ),
            (
                "ratelimit_request_max_bytes",
                "The largest gRPC message or HTTP body of one request, in bytes (setting)",
                caps.max_message_bytes,
            ),
        ] {
            let gauge = Gauge::<i64>::default();
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
            self.registry.register(name, help, gauge);
        }
        self
    }

    /// These metrics with the gauge `tollgate_build_info`, 1, labelled with `build`'s version, git hash, profile and features.
    #[must_use]
    pub fn with_build_info(mut self, build: &BuildInfo) -> Self {
        let family = Family::<Vec<(&'static str, String)>, Gauge<i64>>::default();
        let labels = build
            .labels()
            .iter()
            .map(|(name, value)| (*name, (*value).to_owned()))
            .collect();
        family.get_or_create(&labels).set(1);
        self.registry.register(
            "tollgate_build_info",
            "The build serving: always 1, labelled with version, git_hash, profile and features",
            family,
        );
        self
    }

    /// A start time for [`Metrics::observe_duration`].
    pub fn start(&self) -> Timestamp {
        self.clock.now()
    }

    /// Records the time since `start` for `api` (`grpc` or `http`).
    pub fn observe_duration(&self, api: &str, start: Timestamp) {
        let elapsed = self.clock.now().saturating_since(start);
        self.duration
            .get_or_create(&ApiLabels {
                api: api.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> Result<String, fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The hits of an allowed call that landed above `ratio` × `limit`, given what remained after it.
fn near_hits(limit: u64, remaining: u64, hits: u64, ratio: f64) -> u64 {
    // The limit fits in u32, so the product is exact enough in f64.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let threshold = (limit as f64 * ratio).floor() as u64;
    let after = limit.saturating_sub(remaining);
    let before = after.saturating_sub(hits);
    if after > threshold {
        after - threshold.max(before)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::near_hits;

    #[test]
    fn near_hits_counts_only_the_part_above_the_threshold() {
        // limit 10, threshold 8: the 9th and 10th hits are near the limit.
        assert_eq!(near_hits(10, 2, 1, 0.8), 0);
        assert_eq!(near_hits(10, 1, 1, 0.8), 1);
        assert_eq!(near_hits(10, 0, 1, 0.8), 1);
        assert_eq!(near_hits(10, 0, 5, 0.8), 2);
        assert_eq!(near_hits(0, 0, 1, 0.8), 0);
    }
}
