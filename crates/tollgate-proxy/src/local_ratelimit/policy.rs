//! [`LocalRateLimitPolicy`]: an Envoy `LocalRateLimit` config compiled into bucket specs, fractions and headers, each problem naming its field.

use http::StatusCode;

use super::bucket_spec::BucketSpec;
use super::headers::HeaderToAdd;
use crate::config::envoy::{self, LocalRateLimitConfig, RuntimeFractionalPercent};
use crate::config::{ConfigPath, FieldError};
use crate::descriptors::{self, Descriptor, DescriptorRule};

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

    fn from_config(
        config: Option<&RuntimeFractionalPercent>,
        at: &ConfigPath,
    ) -> Result<Self, FieldError> {
        let Some(config) = config else {
            return Ok(Fraction::NONE);
        };
        let denominator = match config.default_value.denominator.as_deref() {
            None | Some("HUNDRED") => 100,
            Some("TEN_THOUSAND") => 10_000,
            Some("MILLION") => 1_000_000,
            Some(other) => {
                return Err(at
                    .key("default_value")
                    .key("denominator")
                    .error(format!("`{other}` is not HUNDRED, TEN_THOUSAND or MILLION")));
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
    /// Whether some entry has no value: each value seen gets its own bucket.
    pub fn is_wildcard(&self) -> bool {
        self.entries.iter().any(|(_, v)| v.is_none())
    }

    /// Whether a request's descriptor is this one (same keys in order; values equal or wildcard).
    pub fn matches(&self, descriptor: &Descriptor) -> bool {
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
    /// Compiles a `LocalRateLimit` found at `at`; `per_route` demands a token bucket, as Envoy does for `typed_per_filter_config`.
    pub fn compile(
        config: &LocalRateLimitConfig,
        per_route: bool,
        at: &ConfigPath,
    ) -> Result<Self, FieldError> {
        if config.local_cluster_rate_limit.is_some() {
            return Err(at
                .key("local_cluster_rate_limit")
                .error("not supported (the proxy has no local cluster membership)"));
        }
        if per_route && config.token_bucket.is_none() {
            return Err(at
                .key("token_bucket")
                .error("a per-route local rate limit needs a token bucket"));
        }
        let default_bucket = config
            .token_bucket
            .as_ref()
            .map(|b| BucketSpec::from_config(b, &at.key("token_bucket")))
            .transpose()?;
        let status = envoy::limited_status(config.status.as_ref(), &at.key("status"))?;
        let mut descriptors = Vec::with_capacity(config.descriptors.len());
        for (i, d) in config.descriptors.iter().enumerate() {
            let dat = at.key("descriptors").index(i);
            if d.entries.is_empty() {
                return Err(dat.key("entries").error("at least one entry is needed"));
            }
            let Some(tb) = &d.token_bucket else {
                return Err(dat.key("token_bucket").error("required"));
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
                bucket: BucketSpec::from_config(tb, &dat.key("token_bucket"))?,
                shadow_mode: d.shadow_mode,
            };
            if spec.is_wildcard() && config.local_rate_limit_per_downstream_connection {
                return Err(dat.error(
                    "wildcard descriptors are not supported with local_rate_limit_per_downstream_connection",
                ));
            }
            descriptors.push(spec);
        }
        let x_ratelimit_headers = envoy::x_ratelimit_headers(
            config.enable_x_ratelimit_headers.as_deref(),
            &at.key("enable_x_ratelimit_headers"),
        )?;
        match config.vh_rate_limits.as_deref() {
            None | Some("OVERRIDE") | Some("INCLUDE") | Some("IGNORE") => {}
            Some(other) => {
                return Err(at
                    .key("vh_rate_limits")
                    .error(format!("`{other}` is not OVERRIDE, INCLUDE or IGNORE")));
            }
        }
        let stage = envoy::stage(config.stage, &at.key("stage"))?;
        let max_dynamic = config
            .max_dynamic_descriptors
            .unwrap_or(DEFAULT_MAX_DYNAMIC_DESCRIPTORS);
        if max_dynamic == 0 {
            return Err(at
                .key("max_dynamic_descriptors")
                .error("must be at least 1"));
        }
        let rate_limits =
            descriptors::compile_filter_rules(&config.rate_limits, at.key("rate_limits"))?;
        Ok(LocalRateLimitPolicy {
            status,
            default_bucket,
            enabled: Fraction::from_config(
                config.filter_enabled.as_ref(),
                &at.key("filter_enabled"),
            )?,
            enforced: Fraction::from_config(
                config.filter_enforced.as_ref(),
                &at.key("filter_enforced"),
            )?,
            response_headers_to_add: HeaderToAdd::compile(
                &config.response_headers_to_add,
                at.key("response_headers_to_add"),
            )?,
            request_headers_when_not_enforced: HeaderToAdd::compile(
                &config.request_headers_to_add_when_not_enforced,
                at.key("request_headers_to_add_when_not_enforced"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configs_name_the_field() {
        let bad = |yaml: &str| {
            let config: LocalRateLimitConfig = serde_saphyr::from_str(yaml).unwrap();
            LocalRateLimitPolicy::compile(&config, false, &"f".into())
                .unwrap_err()
                .to_string()
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
