//! [`Limit`]: one named limit a key is held to, by any of tollgate-core's six algorithms; a layer holds each key to several.

use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, ConfigError, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow,
    TokenBucket,
};

/// A named limit: its algorithm, and the quota and window the headers announce.
///
/// Every algorithm of `tollgate-core` (docs/algorithms.md compares them):
///
/// ```
/// use std::time::Duration;
/// use tollgate_middleware::Limit;
///
/// let minute = Duration::from_secs(60);
/// let limits = [
///     Limit::fixed_window("fixed", 100, minute),
///     Limit::sliding_window("sliding", 100, minute),
///     Limit::sliding_log("exact", 100, minute),
///     Limit::gcra("gcra", 100, minute, 10),
///     Limit::token_bucket("bucket", 20, 5, Duration::from_secs(1)),
///     Limit::leaky_bucket("leaky", 10, Duration::from_secs(1), 5),
/// ];
/// assert!(limits.iter().all(Result::is_ok));
/// // A bad parameter is an error that names it.
/// let error = Limit::token_bucket("bucket", 0, 5, Duration::from_secs(1)).unwrap_err();
/// assert!(error.to_string().contains("max_tokens"), "{error}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    pub(crate) name: String,
    pub(crate) quota: u64,
    pub(crate) window: Duration,
    pub(crate) algorithm: AnyAlgorithm,
}

impl Limit {
    /// `quota` per epoch-aligned `window` (envoyproxy/ratelimit's fixed window).
    pub fn fixed_window(
        name: impl Into<String>,
        quota: u64,
        window: Duration,
    ) -> Result<Self, ConfigError> {
        Self::windowed(name, quota, window, FixedWindow::new)
    }

    /// `quota` per sliding `window` (the sliding window counter).
    pub fn sliding_window(
        name: impl Into<String>,
        quota: u64,
        window: Duration,
    ) -> Result<Self, ConfigError> {
        Self::windowed(name, quota, window, SlidingWindow::new)
    }

    /// `quota` per `window` spread evenly, with bursts of up to `burst` (GCRA).
    pub fn gcra(
        name: impl Into<String>,
        quota: u64,
        window: Duration,
        burst: u64,
    ) -> Result<Self, ConfigError> {
        Ok(Self::with(
            name,
            quota,
            window,
            Gcra::new(quota, window, burst)?,
        ))
    }

    /// Exactly `quota` in any sliding `window`: a log of timestamps per key
    /// (the most memory of all; the store's `max_keys` bounds it).
    pub fn sliding_log(
        name: impl Into<String>,
        quota: u64,
        window: Duration,
    ) -> Result<Self, ConfigError> {
        Self::windowed(name, quota, window, SlidingLog::new)
    }

    /// A bucket of `max_tokens`, refilled with `tokens_per_fill` every
    /// `fill_interval`. The headers announce `max_tokens` per the time an
    /// empty bucket takes to fill.
    pub fn token_bucket(
        name: impl Into<String>,
        max_tokens: u64,
        tokens_per_fill: u64,
        fill_interval: Duration,
    ) -> Result<Self, ConfigError> {
        let bucket = TokenBucket::new(max_tokens, tokens_per_fill, fill_interval)?;
        Ok(Self::with(name, max_tokens, bucket.refill_time(), bucket))
    }

    /// A leaky bucket (nginx `limit_req ... nodelay`): `rate` requests per
    /// `period` with `burst` more at once. It polices: a request over the
    /// burst is refused, none is held back to shape the rate. The headers
    /// announce `burst + 1` per the time a full bucket takes to drain.
    pub fn leaky_bucket(
        name: impl Into<String>,
        rate: u64,
        period: Duration,
        burst: u64,
    ) -> Result<Self, ConfigError> {
        let bucket = LeakyBucket::policer(rate, period, burst)?;
        Ok(Self::with(
            name,
            burst.saturating_add(1),
            bucket.drain_time(),
            bucket,
        ))
    }

    fn windowed<A: Into<AnyAlgorithm>>(
        name: impl Into<String>,
        quota: u64,
        window: Duration,
        build: fn(u64, Duration) -> Result<A, ConfigError>,
    ) -> Result<Self, ConfigError> {
        Ok(Self::with(name, quota, window, build(quota, window)?))
    }

    fn with(
        name: impl Into<String>,
        quota: u64,
        window: Duration,
        algorithm: impl Into<AnyAlgorithm>,
    ) -> Self {
        Limit {
            name: name.into(),
            quota,
            window,
            algorithm: algorithm.into(),
        }
    }

    /// The name, used in `RateLimit-Policy`, `RateLimit` and metrics.
    pub fn name(&self) -> &str {
        &self.name
    }
}
