//! [`BucketSpec`]: one `token_bucket` of an Envoy `LocalRateLimit` config, compiled into a core token bucket.

use std::time::Duration;

use tollgate_core::TokenBucket;

use crate::config::envoy::TokenBucketConfig;
use crate::config::{ConfigPath, FieldError};

/// Envoy's shortest accepted `fill_interval` for the local filter.
pub const MIN_FILL_INTERVAL: Duration = Duration::from_millis(50);

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
    pub(crate) fn from_config(
        config: &TokenBucketConfig,
        at: &ConfigPath,
    ) -> Result<Self, FieldError> {
        let fill = config.fill_interval;
        if fill < MIN_FILL_INTERVAL {
            return Err(at.key("fill_interval").error(format!(
                "local rate limit token bucket fill timer must be >= 50ms (got {fill:?})"
            )));
        }
        if config.max_tokens == 0 {
            return Err(at.key("max_tokens").error("must be greater than 0"));
        }
        let per_fill = config.tokens_per_fill.unwrap_or(1);
        if per_fill == 0 {
            return Err(at.key("tokens_per_fill").error("must be greater than 0"));
        }
        let bucket = TokenBucket::new(u64::from(config.max_tokens), u64::from(per_fill), fill)
            .map_err(|e| at.error(e.to_string()))?;
        Ok(BucketSpec {
            bucket,
            rate: f64::from(per_fill) / fill.as_secs_f64(),
            fill_interval: fill,
            tokens_per_fill: per_fill,
        })
    }
}
