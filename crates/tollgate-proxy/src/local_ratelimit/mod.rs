//! Envoy's `local_ratelimit` filter: token buckets in this process, with Envoy 1.40's semantics.
//!
//! [`LocalRateLimitPolicy`] is the compiled `LocalRateLimit` config;
//! [`LocalLimiter`] holds its buckets: one default bucket and one per
//! configured descriptor (a wildcard descriptor keeps an LRU of
//! `max_dynamic_descriptors` buckets, one per value seen). Every bucket is a
//! [`DirectLimiter`] over the core's [`TokenBucket`] (continuous refill,
//! starts full, whole tokens), shared by all worker threads; with
//! `local_rate_limit_per_downstream_connection` each connection gets its own
//! limiter instead.
//!
//! [`LocalLimiter::check`] follows Envoy's order: the matched descriptor
//! buckets, strictest fill rate first, one token each; the first empty one
//! that is not in shadow mode denies and stops; then the default bucket
//! unless a descriptor matched and `always_consume_default_token_bucket` is
//! false. The layer in [`layer`] / [`service`] applies it to requests.

pub mod error;
pub mod future;
pub mod layer;
pub mod service;

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue, StatusCode};
use parking_lot::Mutex;
use tollgate_core::{Clock, Decision, TokenBucket};
use tollgate_store::DirectLimiter;

use crate::config::envoy::{
    HeaderValueOptionConfig, LocalRateLimitConfig, RuntimeFractionalPercent, TokenBucketConfig,
};
use crate::descriptors::{self, Descriptor, DescriptorRule};

pub use layer::LocalRateLimitLayer;
pub use service::LocalRateLimitService;

/// The clock every bucket reads.
pub type SharedClock = Arc<dyn Clock>;

/// The body of Envoy's local rate-limited reply.
pub const LOCAL_RATE_LIMITED_BODY: &str = "local_rate_limited";

/// Envoy's shortest accepted `fill_interval` for the local filter.
pub const MIN_FILL_INTERVAL: Duration = Duration::from_millis(50);

/// Envoy's default `max_dynamic_descriptors`.
pub const DEFAULT_MAX_DYNAMIC_DESCRIPTORS: u32 = 20;

/// A fraction of requests (`filter_enabled`, `filter_enforced`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fraction {
    numerator: u64,
    denominator: u64,
}

impl Fraction {
    /// No request.
    pub const NONE: Fraction = Fraction {
        numerator: 0,
        denominator: 100,
    };
    /// Every request.
    pub const ALL: Fraction = Fraction {
        numerator: 100,
        denominator: 100,
    };

    fn from_config(config: Option<&RuntimeFractionalPercent>, at: &str) -> Result<Self, String> {
        let Some(config) = config else {
            return Ok(Fraction::NONE);
        };
        let denominator = match config.default_value.denominator.as_deref() {
            None | Some("HUNDRED") => 100,
            Some("TEN_THOUSAND") => 10_000,
            Some("MILLION") => 1_000_000,
            Some(other) => {
                return Err(format!(
                    "{at}.default_value.denominator: `{other}` is not HUNDRED, TEN_THOUSAND or MILLION"
                ));
            }
        };
        Ok(Fraction {
            numerator: u64::from(config.default_value.numerator).min(denominator),
            denominator,
        })
    }

    /// Whether this request falls in the fraction (exact at 0 % and 100 %).
    pub fn sample(&self) -> bool {
        if self.numerator == 0 {
            false
        } else if self.numerator >= self.denominator {
            true
        } else {
            rand::random_range(0..self.denominator) < self.numerator
        }
    }
}

/// A header to add, with Envoy's append semantics.
#[derive(Clone, Debug)]
pub struct HeaderToAdd {
    /// The name.
    pub name: HeaderName,
    /// The value.
    pub value: HeaderValue,
    /// Append beside existing values (true) or replace them (false).
    pub append: bool,
    /// Only add when absent.
    pub if_absent: bool,
}

impl HeaderToAdd {
    /// Compiles `HeaderValueOption`s.
    pub fn compile(options: &[HeaderValueOptionConfig], at: &str) -> Result<Vec<Self>, String> {
        if options.len() > 10 {
            return Err(format!("{at}: at most 10 headers"));
        }
        options
            .iter()
            .enumerate()
            .filter(|(_, o)| o.keep_empty_value || !o.header.value.is_empty())
            .map(|(i, o)| {
                let name = HeaderName::from_bytes(o.header.key.to_ascii_lowercase().as_bytes())
                    .map_err(|_| {
                        format!(
                            "{at}[{i}].header.key: `{}` is not a header name",
                            o.header.key
                        )
                    })?;
                let value = HeaderValue::from_str(&o.header.value)
                    .map_err(|_| format!("{at}[{i}].header.value: not a valid header value"))?;
                let (append, if_absent) = match o.append_action.as_deref() {
                    None => (o.append.unwrap_or(true), false),
                    Some("APPEND_IF_EXISTS_OR_ADD") => (true, false),
                    Some("ADD_IF_ABSENT") => (false, true),
                    Some("OVERWRITE_IF_EXISTS_OR_ADD") | Some("OVERWRITE_IF_EXISTS") => {
                        (false, false)
                    }
                    Some(other) => {
                        return Err(format!(
                            "{at}[{i}].append_action: `{other}` is not a known action"
                        ));
                    }
                };
                Ok(HeaderToAdd {
                    name,
                    value,
                    append,
                    if_absent,
                })
            })
            .collect()
    }

    /// Adds this header to `headers`.
    pub fn apply(&self, headers: &mut http::HeaderMap) {
        if self.if_absent && headers.contains_key(&self.name) {
            return;
        }
        if self.append {
            headers.append(self.name.clone(), self.value.clone());
        } else {
            headers.insert(self.name.clone(), self.value.clone());
        }
    }
}

/// A bucket's configuration.
#[derive(Clone, Copy, Debug)]
pub struct BucketSpec {
    /// The core algorithm.
    pub bucket: TokenBucket,
    /// Tokens per second (for the strictest-first order).
    pub rate: f64,
    /// The refill period, for `RateLimit-Policy`'s window.
    pub fill_interval: Duration,
    /// Tokens per fill.
    pub tokens_per_fill: u32,
}

impl BucketSpec {
    fn from_config(config: &TokenBucketConfig, at: &str) -> Result<Self, String> {
        let fill = config.fill_interval.0;
        if fill < MIN_FILL_INTERVAL {
            return Err(format!(
                "{at}.fill_interval: local rate limit token bucket fill timer must be >= 50ms (got {fill:?})"
            ));
        }
        if config.max_tokens == 0 {
            return Err(format!("{at}.max_tokens: must be greater than 0"));
        }
        let per_fill = config.tokens_per_fill.unwrap_or(1);
        if per_fill == 0 {
            return Err(format!("{at}.tokens_per_fill: must be greater than 0"));
        }
        let bucket = TokenBucket::new(u64::from(config.max_tokens), u64::from(per_fill), fill)
            .map_err(|e| format!("{at}: {e}"))?;
        Ok(BucketSpec {
            bucket,
            rate: f64::from(per_fill) / fill.as_secs_f64(),
            fill_interval: fill,
            tokens_per_fill: per_fill,
        })
    }
}

/// A configured descriptor: entries (a `None` value is a wildcard) and its bucket.
#[derive(Clone, Debug)]
pub struct DescriptorSpec {
    /// `(key, Some(value))` or `(key, None)` for a wildcard.
    pub entries: Vec<(String, Option<String>)>,
    /// The bucket.
    pub bucket: BucketSpec,
    /// Consume but never deny.
    pub shadow_mode: bool,
}

impl DescriptorSpec {
    fn is_wildcard(&self) -> bool {
        self.entries.iter().any(|(_, v)| v.is_none())
    }

    fn matches(&self, descriptor: &Descriptor) -> bool {
        self.entries.len() == descriptor.entries.len()
            && self
                .entries
                .iter()
                .zip(&descriptor.entries)
                .all(|((k, v), (rk, rv))| k == rk && v.as_ref().is_none_or(|v| v == rv))
    }

    /// The policy name used in headers and problem bodies: `key=value;…`.
    pub fn name(&self, descriptor: &Descriptor) -> String {
        descriptor
            .entries
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// A compiled `LocalRateLimit`.
#[derive(Clone, Debug)]
pub struct LocalRateLimitPolicy {
    /// The limited reply's status.
    pub status: StatusCode,
    /// The default bucket (absent: nothing is limited by it).
    pub default_bucket: Option<BucketSpec>,
    /// `filter_enabled`.
    pub enabled: Fraction,
    /// `filter_enforced`.
    pub enforced: Fraction,
    /// Headers on the limited reply.
    pub response_headers_to_add: Vec<HeaderToAdd>,
    /// Headers on the upstream request when limited but not enforced.
    pub request_headers_when_not_enforced: Vec<HeaderToAdd>,
    /// Descriptor buckets, in config order.
    pub descriptors: Vec<DescriptorSpec>,
    /// One limiter per downstream connection.
    pub per_connection: bool,
    /// X-RateLimit-* (draft 03).
    pub x_ratelimit_headers: bool,
    /// Charge the default bucket when a descriptor matched.
    pub always_consume_default: bool,
    /// gRPC status of the limited reply (14, or 8).
    pub grpc_status: u8,
    /// Filter-level descriptor actions (else the route's of the same stage).
    pub rate_limits: Option<Vec<DescriptorRule>>,
    /// The stage.
    pub stage: u32,
    /// LRU size per wildcard descriptor.
    pub max_dynamic_descriptors: usize,
    /// `Retry-After` on the enforced reply.
    pub retry_after: bool,
}

impl LocalRateLimitPolicy {
    /// Compiles a `LocalRateLimit`; `per_route` demands a token bucket, as Envoy does for `typed_per_filter_config`.
    pub fn compile(
        config: &LocalRateLimitConfig,
        per_route: bool,
        at: &str,
    ) -> Result<Self, String> {
        if config.local_cluster_rate_limit.is_some() {
            return Err(format!(
                "{at}.local_cluster_rate_limit: not supported (the proxy has no local cluster membership)"
            ));
        }
        if per_route && config.token_bucket.is_none() {
            return Err(format!(
                "{at}.token_bucket: a per-route local rate limit needs a token bucket"
            ));
        }
        let default_bucket = config
            .token_bucket
            .as_ref()
            .map(|b| BucketSpec::from_config(b, &format!("{at}.token_bucket")))
            .transpose()?;
        let status = match config.status.as_ref().map(|s| s.code) {
            None => StatusCode::TOO_MANY_REQUESTS,
            Some(code) if code < 400 => StatusCode::TOO_MANY_REQUESTS,
            Some(code) => StatusCode::from_u16(code)
                .map_err(|_| format!("{at}.status.code: {code} is not an HTTP status"))?,
        };
        let mut descriptors = Vec::with_capacity(config.descriptors.len());
        for (i, d) in config.descriptors.iter().enumerate() {
            let dat = format!("{at}.descriptors[{i}]");
            if d.entries.is_empty() {
                return Err(format!("{dat}.entries: at least one entry is needed"));
            }
            let Some(tb) = &d.token_bucket else {
                return Err(format!("{dat}.token_bucket: required"));
            };
            let spec = DescriptorSpec {
                entries: d
                    .entries
                    .iter()
                    .map(|e| {
                        (
                            e.key.clone(),
                            (!e.value.is_empty()).then(|| e.value.clone()),
                        )
                    })
                    .collect(),
                bucket: BucketSpec::from_config(tb, &format!("{dat}.token_bucket"))?,
                shadow_mode: d.shadow_mode,
            };
            if spec.is_wildcard() && config.local_rate_limit_per_downstream_connection {
                return Err(format!(
                    "{dat}: wildcard descriptors are not supported with local_rate_limit_per_downstream_connection"
                ));
            }
            descriptors.push(spec);
        }
        let x_ratelimit_headers = match config.enable_x_ratelimit_headers.as_deref() {
            None | Some("OFF") => false,
            Some("DRAFT_VERSION_03") => true,
            Some(other) => {
                return Err(format!(
                    "{at}.enable_x_ratelimit_headers: `{other}` is not OFF or DRAFT_VERSION_03"
                ));
            }
        };
        match config.vh_rate_limits.as_deref() {
            None | Some("OVERRIDE") | Some("INCLUDE") | Some("IGNORE") => {}
            Some(other) => {
                return Err(format!(
                    "{at}.vh_rate_limits: `{other}` is not OVERRIDE, INCLUDE or IGNORE"
                ));
            }
        }
        let stage = config.stage.unwrap_or(0);
        if stage > 10 {
            return Err(format!("{at}.stage: {stage} is above 10"));
        }
        let max_dynamic = config
            .max_dynamic_descriptors
            .unwrap_or(DEFAULT_MAX_DYNAMIC_DESCRIPTORS);
        if max_dynamic == 0 {
            return Err(format!("{at}.max_dynamic_descriptors: must be at least 1"));
        }
        let rate_limits = if config.rate_limits.is_empty() {
            None
        } else {
            Some(descriptors::compile(
                &config.rate_limits,
                &format!("{at}.rate_limits"),
            )?)
        };
        Ok(LocalRateLimitPolicy {
            status,
            default_bucket,
            enabled: Fraction::from_config(
                config.filter_enabled.as_ref(),
                &format!("{at}.filter_enabled"),
            )?,
            enforced: Fraction::from_config(
                config.filter_enforced.as_ref(),
                &format!("{at}.filter_enforced"),
            )?,
            response_headers_to_add: HeaderToAdd::compile(
                &config.response_headers_to_add,
                &format!("{at}.response_headers_to_add"),
            )?,
            request_headers_when_not_enforced: HeaderToAdd::compile(
                &config.request_headers_to_add_when_not_enforced,
                &format!("{at}.request_headers_to_add_when_not_enforced"),
            )?,
            descriptors,
            per_connection: config.local_rate_limit_per_downstream_connection,
            x_ratelimit_headers,
            always_consume_default: config.always_consume_default_token_bucket.unwrap_or(true),
            grpc_status: if config.rate_limited_as_resource_exhausted {
                8
            } else {
                14
            },
            rate_limits,
            stage,
            max_dynamic_descriptors: max_dynamic as usize,
            retry_after: config.enable_retry_after_header,
        })
    }

    /// The descriptor rules this filter reads: its own, else the route's of its stage without a `disable_key`.
    pub fn descriptor_rules<'a>(
        &'a self,
        route_rules: &'a [DescriptorRule],
    ) -> Vec<&'a DescriptorRule> {
        match &self.rate_limits {
            Some(own) => own.iter().collect(),
            None => route_rules
                .iter()
                .filter(|r| r.stage == self.stage && !r.has_disable_key)
                .collect(),
        }
    }
}

/// One bucket's state.
struct Bucket {
    spec: BucketSpec,
    limiter: DirectLimiter<TokenBucket, SharedClock>,
}

impl Bucket {
    fn new(spec: BucketSpec, clock: &SharedClock) -> Self {
        Bucket {
            spec,
            limiter: DirectLimiter::new(spec.bucket, Arc::clone(clock)),
        }
    }
}

/// The buckets of a wildcard descriptor, most recently used first.
struct DynamicBuckets {
    capacity: usize,
    entries: Vec<(Vec<String>, Arc<Bucket>)>,
}

impl DynamicBuckets {
    fn get(&mut self, values: Vec<String>, spec: BucketSpec, clock: &SharedClock) -> Arc<Bucket> {
        if let Some(at) = self.entries.iter().position(|(v, _)| *v == values) {
            let entry = self.entries.remove(at);
            let bucket = Arc::clone(&entry.1);
            self.entries.insert(0, entry);
            return bucket;
        }
        let bucket = Arc::new(Bucket::new(spec, clock));
        self.entries.insert(0, (values, Arc::clone(&bucket)));
        self.entries.truncate(self.capacity);
        bucket
    }
}

enum DescriptorBuckets {
    Fixed(Arc<Bucket>),
    Dynamic(Mutex<DynamicBuckets>),
}

/// What one bucket said about a request, for the headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketReport {
    /// The policy name: `default` or the descriptor's `key=value;…`.
    pub name: String,
    /// `max_tokens`.
    pub limit: u64,
    /// Whole tokens left after this request.
    pub remaining: u64,
    /// Time until the next whole token when none is left (zero otherwise).
    pub next_token: Duration,
    /// The time an empty bucket takes to fill (the IETF policy window).
    pub window: Duration,
}

impl BucketReport {
    fn new(name: String, spec: &BucketSpec, decision: &Decision) -> Self {
        let next_token = if decision.remaining() > 0 {
            Duration::ZERO
        } else if decision.is_allowed() {
            let interval = spec.bucket.token_interval();
            let refill = spec.bucket.refill_time();
            decision
                .reset_after()
                .saturating_sub(refill.saturating_sub(interval))
        } else {
            decision.retry_after().unwrap_or(Duration::ZERO)
        };
        BucketReport {
            name,
            limit: spec.bucket.max_tokens(),
            remaining: decision.remaining(),
            next_token,
            window: spec.bucket.refill_time(),
        }
    }

    /// The `x-ratelimit-reset` value: 0 while a token remains, else whole seconds to the next one, rounded up.
    pub fn reset_seconds(&self) -> u64 {
        tollgate_core::duration::ceil_seconds(self.next_token)
    }
}

/// The answer for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalVerdict {
    /// Whether every non-shadow bucket had a token.
    pub allowed: bool,
    /// The bucket the headers describe (None when no bucket applied).
    pub report: Option<BucketReport>,
    /// Shadow-mode buckets that ran dry.
    pub shadow_denials: u32,
}

/// The buckets of one [`LocalRateLimitPolicy`].
pub struct LocalLimiter {
    policy: Arc<LocalRateLimitPolicy>,
    clock: SharedClock,
    default: Option<Bucket>,
    descriptors: Vec<DescriptorBuckets>,
}

impl std::fmt::Debug for LocalLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLimiter")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl LocalLimiter {
    /// Full buckets for `policy`, timed by `clock`.
    pub fn new(policy: Arc<LocalRateLimitPolicy>, clock: SharedClock) -> Self {
        let default = policy.default_bucket.map(|spec| Bucket::new(spec, &clock));
        let descriptors = policy
            .descriptors
            .iter()
            .map(|d| {
                if d.is_wildcard() {
                    DescriptorBuckets::Dynamic(Mutex::new(DynamicBuckets {
                        capacity: policy.max_dynamic_descriptors,
                        entries: Vec::new(),
                    }))
                } else {
                    DescriptorBuckets::Fixed(Arc::new(Bucket::new(d.bucket, &clock)))
                }
            })
            .collect();
        LocalLimiter {
            policy,
            clock,
            default,
            descriptors,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &Arc<LocalRateLimitPolicy> {
        &self.policy
    }

    /// Decides a request with these descriptors, consuming tokens as Envoy does.
    pub fn check(&self, request: &[Descriptor]) -> LocalVerdict {
        // The matched buckets: (spec, bucket, name).
        let mut matched: Vec<(&DescriptorSpec, Arc<Bucket>, String)> = Vec::new();
        for descriptor in request {
            for (spec, buckets) in self.policy.descriptors.iter().zip(&self.descriptors) {
                if !spec.matches(descriptor) {
                    continue;
                }
                let bucket = match buckets {
                    DescriptorBuckets::Fixed(b) => Arc::clone(b),
                    DescriptorBuckets::Dynamic(lru) => {
                        let values = descriptor.entries.iter().map(|(_, v)| v.clone()).collect();
                        lru.lock().get(values, spec.bucket, &self.clock)
                    }
                };
                matched.push((spec, bucket, spec.name(descriptor)));
                break;
            }
        }
        matched.sort_by(|a, b| a.0.bucket.rate.total_cmp(&b.0.bucket.rate));

        let mut report = None;
        let mut shadow_denials = 0;
        for (spec, bucket, name) in &matched {
            let decision = bucket.limiter.check(1);
            if decision.is_allowed() {
                if report.is_none() {
                    report = Some(BucketReport::new(name.clone(), &bucket.spec, &decision));
                }
                continue;
            }
            if spec.shadow_mode {
                shadow_denials += 1;
                if report.is_none() {
                    report = Some(BucketReport::new(name.clone(), &bucket.spec, &decision));
                }
                continue;
            }
            return LocalVerdict {
                allowed: false,
                report: Some(BucketReport::new(name.clone(), &bucket.spec, &decision)),
                shadow_denials,
            };
        }
        if let Some(default) = &self.default
            && (matched.is_empty() || self.policy.always_consume_default)
        {
            let decision = default.limiter.check(1);
            let default_report = BucketReport::new("default".to_owned(), &default.spec, &decision);
            if !decision.is_allowed() {
                return LocalVerdict {
                    allowed: false,
                    report: Some(default_report),
                    shadow_denials,
                };
            }
            if report.is_none() {
                report = Some(default_report);
            }
        }
        LocalVerdict {
            allowed: true,
            report,
            shadow_denials,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{ManualClock, Timestamp};

    fn policy(yaml: &str) -> Arc<LocalRateLimitPolicy> {
        let config: LocalRateLimitConfig = serde_saphyr::from_str(yaml).unwrap();
        Arc::new(LocalRateLimitPolicy::compile(&config, false, "t").unwrap())
    }

    fn limiter(yaml: &str) -> (LocalLimiter, ManualClock) {
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let shared: SharedClock = Arc::new(clock.clone());
        (LocalLimiter::new(policy(yaml), shared), clock)
    }

    fn codes(l: &LocalLimiter, seq: &[Option<&str>]) -> Vec<u16> {
        seq.iter()
            .map(|user| {
                let d: Vec<Descriptor> = user
                    .map(|u| vec![Descriptor::new([("user", u)])])
                    .unwrap_or_default();
                if l.check(&d).allowed { 200 } else { 429 }
            })
            .collect()
    }

    const HOURLY: &str = "stat_prefix: t\ntoken_bucket: {max_tokens: 100, tokens_per_fill: 100, fill_interval: 3600s}\ndescriptors:\n  - entries: [{key: user, value: alice}]\n    token_bucket: {max_tokens: 2, tokens_per_fill: 2, fill_interval: 3600s}\n  - entries: [{key: user}]\n    token_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}\n";

    #[test]
    fn descriptors_and_wildcards_match_envoys_observed_sequence() {
        let (l, _) = limiter(HOURLY);
        let seq = [
            Some("alice"),
            Some("alice"),
            Some("alice"),
            Some("bob"),
            Some("bob"),
            Some("carol"),
            Some("carol"),
            None,
            None,
        ];
        assert_eq!(
            codes(&l, &seq),
            [200, 200, 429, 200, 429, 200, 429, 200, 200]
        );
        // 6 successful requests so far charged the default bucket.
        let v = l.check(&[]);
        assert_eq!(v.report.unwrap().remaining, 93);
    }

    #[test]
    fn an_evicted_wildcard_value_starts_with_a_full_bucket() {
        let (l, _) = limiter(
            "stat_prefix: t\ndescriptors:\n  - entries: [{key: user}]\n    token_bucket: {max_tokens: 1, fill_interval: 3600s}\nmax_dynamic_descriptors: 2\n",
        );
        let seq = ["a", "a", "b", "b", "c", "c", "a", "a"].map(Some);
        assert_eq!(codes(&l, &seq), [200, 429, 200, 429, 200, 429, 200, 429]);
    }

    #[test]
    fn always_consume_false_keeps_descriptor_requests_off_the_default_bucket() {
        let base = "stat_prefix: t\ntoken_bucket: {max_tokens: 3, fill_interval: 3600s}\ndescriptors:\n  - entries: [{key: user}]\n    token_bucket: {max_tokens: 10, fill_interval: 3600s}\n";
        let (on, _) = limiter(base);
        assert_eq!(
            codes(
                &on,
                &[
                    Some("alice"),
                    Some("alice"),
                    Some("bob"),
                    None,
                    Some("carol")
                ]
            ),
            [200, 200, 200, 429, 429]
        );
        let (off, _) = limiter(&format!(
            "{base}always_consume_default_token_bucket: false\n"
        ));
        assert_eq!(
            codes(
                &off,
                &[
                    Some("alice"),
                    Some("alice"),
                    Some("bob"),
                    None,
                    None,
                    None,
                    None
                ]
            ),
            [200, 200, 200, 200, 200, 200, 429]
        );
    }

    #[test]
    fn a_shadow_bucket_is_consumed_but_never_denies() {
        let (l, _) = limiter(
            "stat_prefix: t\ndescriptors:\n  - entries: [{key: user, value: alice}]\n    token_bucket: {max_tokens: 1, fill_interval: 3600s}\n    shadow_mode: true\n",
        );
        let d = [Descriptor::new([("user", "alice")])];
        assert!(l.check(&d).allowed);
        let second = l.check(&d);
        assert!(second.allowed);
        assert_eq!(second.shadow_denials, 1);
    }

    #[test]
    fn headers_report_remaining_and_seconds_to_the_next_token() {
        // Envoy observed: max 2, 1 token per 4 s: 2/1/0, 2/0/4, 429 2/0/4, 2 s later 2/0/2, 4.2 s 200 2/0/4.
        let (l, clock) = limiter(
            "stat_prefix: t\ntoken_bucket: {max_tokens: 2, tokens_per_fill: 1, fill_interval: 4s}\n",
        );
        let r = |v: LocalVerdict| {
            let r = v.report.unwrap();
            (v.allowed, r.limit, r.remaining, r.reset_seconds())
        };
        assert_eq!(r(l.check(&[])), (true, 2, 1, 0));
        assert_eq!(r(l.check(&[])), (true, 2, 0, 4));
        assert_eq!(r(l.check(&[])), (false, 2, 0, 4));
        clock.advance(Duration::from_secs(2));
        assert_eq!(r(l.check(&[])), (false, 2, 0, 2));
        clock.advance(Duration::from_millis(2200));
        assert_eq!(r(l.check(&[])), (true, 2, 0, 4));
    }

    #[test]
    fn bad_configs_name_the_field() {
        let bad = |yaml: &str| {
            let config: LocalRateLimitConfig = serde_saphyr::from_str(yaml).unwrap();
            LocalRateLimitPolicy::compile(&config, false, "f").unwrap_err()
        };
        assert!(bad("token_bucket: {max_tokens: 1, fill_interval: 0.01s}\n").contains("f.token_bucket.fill_interval: local rate limit token bucket fill timer must be >= 50ms"));
        assert!(bad("token_bucket: {max_tokens: 0, fill_interval: 1s}\n").contains("max_tokens"));
        assert!(
            bad("descriptors: [{entries: [{key: a}]}]\n").contains("f.descriptors[0].token_bucket")
        );
        assert!(bad("local_rate_limit_per_downstream_connection: true\ndescriptors: [{entries: [{key: a}], token_bucket: {max_tokens: 1, fill_interval: 1s}}]\n").contains("wildcard"));
        assert!(bad("enable_x_ratelimit_headers: DRAFT_VERSION_04\n").contains("DRAFT_VERSION_03"));
    }
}
