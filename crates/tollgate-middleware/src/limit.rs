//! [`Limit`]: one named limit a key is held to; a layer holds each key to several.

use std::time::Duration;

use tollgate_core::{AnyAlgorithm, ConfigError, FixedWindow, Gcra, SlidingWindow};

/// A named limit: its algorithm, and the quota and window the headers announce.
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
