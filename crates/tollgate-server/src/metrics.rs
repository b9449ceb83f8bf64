//! Prometheus metrics: upstream's per-rule and service series, request latency and config reloads.
//!
//! [`Metrics::observe`] counts one answered request; the gRPC and HTTP front
//! ends call it where the engine's statuses become a response, so the
//! engine's hot loop counts nothing. Per-rule counters live in
//! [`RuleStats`] under envoyproxy/ratelimit's stats keys and are exported
//! with upstream's names and labels
//! (`ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,within_limit,shadow_mode}{domain,key1,key2}`,
//! see [`crate::rule_stats`]); their number is bounded by the config, except
//! for rules with `detailed_metric: true` or a `value_to_metric` level, which
//! count under the request's values as upstream's stats do, at most
//! `--max-metric-keys` such keys of label values of at most
//! `--max-metric-label-bytes` each ([`crate::metric_key`]). Every label
//! value is written escaped ([`tollgate_runtime::LabelValue`]), so no value
//! can end a label or a line. Descriptors that
//! match no rule, or that nothing limits, are not counted, except those of
//! a domain no rule has: each counts in `domain_not_found` under its domain
//! (the domains so counted share the `--max-metric-keys` bound). A shadowed
//! hit counts in `over_limit` and `shadow_mode`, and a hit the quick-deny
//! cache denied in `over_limit` and `over_limit_with_local_cache`, as
//! upstream counts them.
//!
//! Upstream's service series, under upstream's names (counters written
//! without the `_total` suffix, as upstream's exporter writes them, in the
//! Prometheus text format: see [`crate::exposition`]):
//! `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}` (gRPC
//! calls), `ratelimit_service_response_time_seconds{grpc_method}` (a
//! histogram with the statsd_exporter's default buckets),
//! `ratelimit_service_should_rate_limit_error{err_type}` (`service_error`:
//! calls refused as invalid; `redis_error`: failed store calls) and
//! `ratelimit_service_config_load_{success,error}`.
//!
//! Tollgate's own series keep their names: `ratelimit_global_shadow_mode_total`
//! (requests answered OK only because of global shadow mode),
//! `ratelimit_request_duration_seconds{api}` (microsecond buckets, gRPC and
//! HTTP), `ratelimit_config_info{hash}`, and the request caps as gauges of
//! their setting ([`Metrics::with_request_caps`]):
//! `ratelimit_request_max_descriptors`,
//! `ratelimit_request_max_descriptor_entries` and
//! `ratelimit_request_max_bytes`. `tollgate_build_info` is 1, labelled
//! with the build's version, git hash, profile and features
//! ([`Metrics::with_build_info`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use smallvec::{SmallVec, smallvec};
use tollgate_core::{Clock, MonotonicClock, Timestamp};
use tollgate_rules::RuleSet;

use crate::build_info::BuildInfo;
use crate::exposition::{ExtraTags, prometheus_text};
use crate::metric_key::{MetricKeys, MetricKeysCollector};
use crate::reload::LiveEngine;
use crate::rule_counters::RuleCounters;
use crate::rule_stats::{RuleStat, RuleStats, RuleStatsCollector};
use crate::sharded_histogram::ShardedHistogram;
use tollgate_protocol::rls::RequestCaps;
use tollgate_protocol::rls::model::{Code, RateLimitRequest, RateLimitResponse};

/// The near-limit ratio used when none is configured (upstream's `NEAR_LIMIT_RATIO`).
pub const DEFAULT_NEAR_LIMIT_RATIO: f64 = 0.8;

/// The gRPC method upstream's service series are labelled with.
pub const GRPC_METHOD: &str = "ShouldRateLimit";

/// The statsd_exporter's default histogram buckets (seconds), which upstream's response time uses.
const UPSTREAM_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The most response times kept between two statsd flushes; more are not sent.
pub const MAX_PENDING_TIMINGS: usize = 4096;

/// The label of the latency histogram: which front end answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    /// `grpc` or `http`.
    pub api: String,
}

/// The front end that answered a call (the `api` label of `ratelimit_request_duration_seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// The RLS gRPC service: also upstream's `total_requests` and `response_time`.
    Grpc,
    /// The HTTP API (`/json`, `/v1/check`).
    Http,
}

impl Api {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Api::Grpc => "grpc",
            Api::Http => "http",
        }
    }
}

/// The label of upstream's service series: the gRPC method.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    grpc_method: &'static str,
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

/// The service-wide counters, read at scrape time and by the statsd flusher.
#[derive(Debug, Default)]
struct ServiceCounters {
    total_requests: AtomicU64,
    service_errors: AtomicU64,
    global_shadow_mode: AtomicU64,
}

/// The service-wide counters at one moment (see [`Metrics::service_snapshot`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceSnapshot {
    /// gRPC `ShouldRateLimit` calls.
    pub total_requests: u64,
    /// Calls refused as invalid.
    pub service_errors: u64,
    /// Store calls that failed.
    pub redis_errors: u64,
    /// Requests answered OK only because of global shadow mode.
    pub global_shadow_mode: u64,
    /// Config loads that succeeded.
    pub config_load_success: u64,
    /// Config reloads that failed.
    pub config_load_error: u64,
}

/// The store whose failed calls count as `redis_error`, set once when there is one.
type SharedStore = Arc<OnceLock<Arc<crate::store::RemoteStore>>>;

/// Writes the config and service counters under upstream's names on each scrape.
#[derive(Debug)]
struct ServiceCollector {
    config: Arc<dyn ConfigStats>,
    service: Arc<ServiceCounters>,
    store: SharedStore,
}

impl ServiceCollector {
    fn snapshot(&self) -> ServiceSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ServiceSnapshot {
            total_requests: load(&self.service.total_requests),
            service_errors: load(&self.service.service_errors),
            redis_errors: self
                .store
                .get()
                .map_or(0, |store| load(&store.stats().errors)),
            global_shadow_mode: load(&self.service.global_shadow_mode),
            config_load_success: self.config.successes(),
            config_load_error: self.config.failures(),
        }
    }
}

/// Encodes one unlabelled counter named exactly `name`, as upstream's exporter does (no `_total` suffix).
fn encode_plain(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_gauge(&i64::try_from(value).unwrap_or(i64::MAX))
}

impl prometheus_client::collector::Collector for ServiceCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let now = self.snapshot();
        encode_plain(
            &mut encoder,
            "ratelimit_service_config_load_success",
            "Config loads that succeeded, the first one included",
            now.config_load_success,
        )?;
        encode_plain(
            &mut encoder,
            "ratelimit_service_config_load_error",
            "Config reloads that failed (the previous config stayed in service)",
            now.config_load_error,
        )?;
        let mut requests = encoder.encode_descriptor(
            "ratelimit_service_total_requests",
            "gRPC rate limit calls",
            None,
            MetricType::Counter,
        )?;
        requests
            .encode_family(&MethodLabels {
                grpc_method: GRPC_METHOD,
            })?
            .encode_gauge(&i64::try_from(now.total_requests).unwrap_or(i64::MAX))?;
        let mut errors = encoder.encode_descriptor(
            "ratelimit_service_should_rate_limit_error",
            "Calls that failed: service_error (invalid request), redis_error (failed store call)",
            None,
            MetricType::Counter,
        )?;
        for (err_type, value) in [
            ("redis_error", now.redis_errors),
            ("service_error", now.service_errors),
        ] {
            errors
                .encode_family(&[("err_type", err_type)])?
                .encode_gauge(&i64::try_from(value).unwrap_or(i64::MAX))?;
        }
        let shadow = ConstCounter::new(now.global_shadow_mode);
        let metric = encoder.encode_descriptor(
            "ratelimit_global_shadow_mode",
            "Requests answered OK only because of global shadow mode",
            None,
            shadow.metric_type(),
        )?;
        shadow.encode(metric)?;
        let info = ConstGauge::new(1_i64);
        let labels = HashLabels {
            hash: format!("{:016x}", self.config.config_hash()),
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
    rules: Arc<RuleStats>,
    service: Arc<ServiceCounters>,
    config: Arc<dyn ConfigStats>,
    store: SharedStore,
    duration: Family<ApiLabels, ShardedHistogram>,
    response_time: Family<MethodLabels, ShardedHistogram>,
    /// The series of `duration` and `response_time` each call observes,
    /// made on the first call (so a front end nobody used has none) and
    /// kept, so a call neither builds a label nor looks one up.
    grpc_duration: OnceLock<ShardedHistogram>,
    http_duration: OnceLock<ShardedHistogram>,
    grpc_response_time: OnceLock<ShardedHistogram>,
    /// How long shaped answers were held (a leaky bucket with `delay`).
    shaped: Histogram,
    /// Response times (seconds) not yet sent to statsd, when statsd is on.
    pending_timings: Option<Mutex<Vec<f64>>>,
    near_limit_ratio: f64,
    metric_keys: Arc<MetricKeys>,
    /// The counters of the rules whose stats key names no request value.
    rule_counters: RuleCounters,
    extra_tags: ExtraTags,
    statsd: Arc<crate::statsd::StatsdStats>,
    clock: MonotonicClock,
}

impl Metrics {
    /// Metrics reading reload statistics from `config`, counting near-limit hits above `near_limit_ratio` × limit.
    pub fn new(config: Arc<dyn ConfigStats>, near_limit_ratio: f64) -> Self {
        let mut registry = Registry::default();
        let rules = Arc::new(RuleStats::default());
        let service = Arc::new(ServiceCounters::default());
        let duration = Family::<ApiLabels, ShardedHistogram>::new_with_constructor(
            (|| ShardedHistogram::new(exponential_buckets(0.000_01, 4.0, 10)))
                as fn() -> ShardedHistogram,
        );
        let response_time = Family::<MethodLabels, ShardedHistogram>::new_with_constructor(
            (|| ShardedHistogram::new(UPSTREAM_BUCKETS)) as fn() -> ShardedHistogram,
        );
        registry.register_collector(Box::new(RuleStatsCollector(Arc::clone(&rules))));
        let shaped = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "ratelimit_shaped_delay_seconds",
            "How long the service held OK answers a leaky-bucket shaper (`delay`) delayed; its count is the delayed requests",
            shaped.clone(),
        );
        registry.register(
            "ratelimit_service_response_time_seconds",
            "Time to answer one gRPC rate limit call",
            response_time.clone(),
        );
        registry.register(
            "ratelimit_request_duration_seconds",
            "Time to answer one rate limit request, by front end",
            duration.clone(),
        );
        let mut metrics = Metrics {
            registry,
            rules,
            service,
            config,
            store: SharedStore::default(),
            duration,
            response_time,
            grpc_duration: OnceLock::new(),
            http_duration: OnceLock::new(),
            grpc_response_time: OnceLock::new(),
            shaped,
            pending_timings: None,
            near_limit_ratio: if near_limit_ratio.is_finite() {
                near_limit_ratio.clamp(0.0, 1.0)
            } else {
                DEFAULT_NEAR_LIMIT_RATIO
            },
            metric_keys: Arc::default(),
            rule_counters: RuleCounters::default(),
            extra_tags: ExtraTags::default(),
            statsd: Arc::default(),
            clock: MonotonicClock::new(),
        };
        metrics.register_service();
        metrics
    }

    /// Registers the service collector over the current store.
    fn register_service(&mut self) {
        self.registry.register_collector(Box::new(ServiceCollector {
            config: Arc::clone(&self.config),
            service: Arc::clone(&self.service),
            store: Arc::clone(&self.store),
        }));
    }

    /// These metrics, also keeping response times for a statsd flusher
    /// ([`Metrics::take_timings`]) and writing what it keeps and drops
    /// ([`crate::statsd::StatsdCollector`]).
    #[must_use]
    pub fn with_statsd_timings(mut self) -> Self {
        self.pending_timings = Some(Mutex::new(Vec::new()));
        self.registry
            .register_collector(Box::new(crate::statsd::StatsdCollector(Arc::clone(
                &self.statsd,
            ))));
        self
    }

    /// What the statsd flusher kept and dropped.
    pub fn statsd_stats(&self) -> Arc<crate::statsd::StatsdStats> {
        Arc::clone(&self.statsd)
    }

    /// These metrics, keeping the statistics keys taken from request values
    /// (`detailed_metric`, `value_to_metric`) within `keys`' bounds (past the
    /// number, hits count under the rule's configured path), with their
    /// gauges ([`crate::metric_key::MetricKeysCollector`]). Call it once.
    #[must_use]
    pub fn with_metric_keys(mut self, keys: MetricKeys) -> Self {
        let keys = Arc::new(keys);
        self.registry
            .register_collector(Box::new(MetricKeysCollector(Arc::clone(&keys))));
        self.metric_keys = keys;
        self
    }

    /// These metrics with `tags` as labels on every series and tags on every statsd line (upstream's `EXTRA_TAGS`).
    #[must_use]
    pub fn with_extra_tags(mut self, tags: ExtraTags) -> Self {
        self.extra_tags = tags;
        self
    }

    /// The labels and tags every series and statsd line carries.
    pub fn extra_tags(&self) -> &ExtraTags {
        &self.extra_tags
    }

    /// Counts one answered request: per-rule hits from the statuses, against the rules that matched.
    pub fn observe(
        &self,
        rules: &Arc<RuleSet>,
        request: &RateLimitRequest,
        response: &RateLimitResponse,
    ) {
        let request_hits = u64::from(request.hits_addend.max(1));
        if !rules.has_domain(&request.domain) {
            if request.descriptors.is_empty() {
                return;
            }
            let key = self.metric_keys.domain_key(&request.domain);
            let descriptors = request.descriptors.len() as u64;
            self.rules.add(&key, RuleStat::DomainNotFound, descriptors);
            return;
        }
        if response.overall == Code::Ok
            && response.statuses.iter().any(|s| s.code == Code::OverLimit)
        {
            self.service
                .global_shadow_mode
                .fetch_add(1, Ordering::Relaxed);
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
            let mut counts: SmallVec<[(RuleStat, u64); 4]> = smallvec![(RuleStat::TotalHits, hits)];
            match status.code {
                Code::OverLimit => {
                    counts.push((RuleStat::OverLimit, hits));
                    if response.from_local_cache {
                        counts.push((RuleStat::OverLimitWithLocalCache, hits));
                    }
                }
                // Over the limit, let through: upstream counts both.
                Code::Ok if status.shadowed => {
                    counts.push((RuleStat::OverLimit, hits));
                    counts.push((RuleStat::ShadowMode, hits));
                }
                Code::Ok => {
                    counts.push((RuleStat::WithinLimit, hits));
                    let near = near_hits(
                        u64::from(limit.requests_per_unit),
                        u64::from(status.limit_remaining),
                        hits,
                        self.near_limit_ratio,
                    );
                    if near > 0 {
                        counts.push((RuleStat::NearLimit, near));
                    }
                }
            }
            if rule.metric_key_varies() {
                let key = self
                    .metric_keys
                    .stats_key(rule, &request.domain, &descriptor.entries);
                self.rules.add_all(&key, &counts);
            } else if !self
                .rule_counters
                .count(rules, rule, |counters| counters.add_all(&counts))
            {
                let key = self
                    .metric_keys
                    .stats_key(rule, &request.domain, &descriptor.entries);
                let counters = self.rules.counters_of(&key);
                counters.add_all(&counts);
                self.rule_counters.keep(rules, rule, counters);
            }
        }
    }

    /// Counts one OK answer held `held` for a leaky-bucket shaper.
    pub fn observe_shaped(&self, held: std::time::Duration) {
        self.shaped.observe(held.as_secs_f64());
    }

    /// Counts one call refused as invalid (upstream's `service_error`).
    pub fn observe_service_error(&self) {
        self.service.service_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The per-rule counters, by upstream stats key.
    pub fn rule_stats(&self) -> &RuleStats {
        &self.rules
    }

    /// Upstream's Redis pool statistics (`cx_active`, `cx_total`; see
    /// [`crate::store::RemoteStore::pool`]), when there is a shared store.
    pub fn redis_pool(&self) -> Option<(u64, u64)> {
        self.store.get().map(|store| store.pool())
    }

    /// The service-wide counters now.
    pub fn service_snapshot(&self) -> ServiceSnapshot {
        ServiceCollector {
            config: Arc::clone(&self.config),
            service: Arc::clone(&self.service),
            store: Arc::clone(&self.store),
        }
        .snapshot()
    }

    /// The response times (seconds) recorded since the last call, when statsd is on.
    pub fn take_timings(&self) -> Vec<f64> {
        self.pending_timings
            .as_ref()
            .map(|pending| std::mem::take(&mut *pending.lock()))
            .unwrap_or_default()
    }

    /// These metrics with the shared store's errors, fallbacks and breaker state.
    pub fn with_store(mut self, store: Arc<crate::store::RemoteStore>) -> Self {
        self.registry
            .register_collector(Box::new(crate::store::StoreCollector(Arc::clone(&store))));
        self.registry
            .register_collector(Box::new(crate::store::PoolCollector(Arc::clone(&store))));
        // The service collector reads the same cell, for `redis_error`.
        let _ = self.store.set(store);
        self
    }

    /// These metrics with the gauges of every memory and connection bound (see [`crate::bounds`]).
    #[must_use]
    pub fn with_bounds(mut self, bounds: crate::bounds::BoundsCollector) -> Self {
        self.registry.register_collector(Box::new(bounds));
        self
    }

    /// These metrics with what `collector` writes on each scrape (the overrides' gauges, say).
    #[must_use]
    pub fn with_collector(
        mut self,
        collector: Box<dyn prometheus_client::collector::Collector>,
    ) -> Self {
        self.registry.register_collector(collector);
        self
    }

    /// These metrics with the rate limit quota service's (`ratelimit_rlqs_*`).
    #[must_use]
    pub fn with_quota(mut self, quota: crate::rlqs::RlqsCollector) -> Self {
        self.registry.register_collector(Box::new(quota));
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

    /// Records the time since `start` for `api`; a gRPC call also counts
    /// in upstream's `total_requests` and `response_time`.
    pub fn observe_duration(&self, api: Api, start: Timestamp) {
        let seconds = self.clock.now().saturating_since(start).as_secs_f64();
        let series = match api {
            Api::Grpc => &self.grpc_duration,
            Api::Http => &self.http_duration,
        };
        series
            .get_or_init(|| {
                self.duration
                    .get_or_create(&ApiLabels {
                        api: api.label().to_owned(),
                    })
                    .clone()
            })
            .observe(seconds);
        if api == Api::Grpc {
            self.service.total_requests.fetch_add(1, Ordering::Relaxed);
            self.grpc_response_time
                .get_or_init(|| {
                    self.response_time
                        .get_or_create(&MethodLabels {
                            grpc_method: GRPC_METHOD,
                        })
                        .clone()
                })
                .observe(seconds);
            if let Some(pending) = &self.pending_timings {
                let mut pending = pending.lock();
                if pending.len() < MAX_PENDING_TIMINGS {
                    pending.push(seconds);
                }
            }
        }
    }

    /// The metrics in the Prometheus text format (0.0.4, as upstream's
    /// exporter serves them; [`crate::exposition::CONTENT_TYPE`]), every
    /// series with the extra tags as labels.
    pub fn render(&self) -> Result<String, fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(prometheus_text(&out, &self.extra_tags))
    }
}

/// The hits of an allowed call that landed above `ratio` × `limit`, given what remained after it.
fn near_hits(limit: u64, remaining: u64, hits: u64, ratio: f64) -> u64 {
    // The limit fits in u32, so the product is exact enough in f64.
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
