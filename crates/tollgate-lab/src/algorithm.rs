//! One algorithm named with its parameters, built into the core's algorithm.
//!
//! The CLI's flags (`tollgate simulate`) and the lab's query parameters both
//! fill an [`AlgorithmSpec`]; building it checks what the chosen algorithm
//! needs and what the core accepts, and describes the result in one line.

use std::time::Duration;

use tollgate_core::duration::format_duration;
use tollgate_core::{
    AnyAlgorithm, DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket,
};

use crate::SpecError;

/// The algorithms a spec can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlgorithmName {
    /// A token bucket that starts full and refills continuously.
    TokenBucket,
    /// The generic cell rate algorithm.
    Gcra,
    /// A leaky bucket, as a shaper or a policer.
    LeakyBucket,
    /// Epoch-aligned fixed windows.
    FixedWindow,
    /// The sliding window counter.
    SlidingWindow,
    /// The exact sliding log.
    SlidingLog,
}

impl AlgorithmName {
    /// Every algorithm.
    pub const ALL: [AlgorithmName; 6] = [
        AlgorithmName::TokenBucket,
        AlgorithmName::Gcra,
        AlgorithmName::LeakyBucket,
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindow,
        AlgorithmName::SlidingLog,
    ];

    /// The name with underscores: `token_bucket`.
    pub const fn name(self) -> &'static str {
        match self {
            AlgorithmName::TokenBucket => "token_bucket",
            AlgorithmName::Gcra => "gcra",
            AlgorithmName::LeakyBucket => "leaky_bucket",
            AlgorithmName::FixedWindow => "fixed_window",
            AlgorithmName::SlidingWindow => "sliding_window",
            AlgorithmName::SlidingLog => "sliding_log",
        }
    }

    /// The name with hyphens, as `tollgate simulate` spells it and descriptions use it: `token-bucket`.
    pub const fn hyphenated(self) -> &'static str {
        match self {
            AlgorithmName::TokenBucket => "token-bucket",
            AlgorithmName::Gcra => "gcra",
            AlgorithmName::LeakyBucket => "leaky-bucket",
            AlgorithmName::FixedWindow => "fixed-window",
            AlgorithmName::SlidingWindow => "sliding-window",
            AlgorithmName::SlidingLog => "sliding-log",
        }
    }

    /// The algorithm named `name` exactly (with underscores), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// An algorithm and its parameters, each as given (`None` when not).
///
/// Each algorithm reads its own: a token bucket `max_tokens`,
/// `tokens_per_fill` and `fill_interval`; GCRA `limit`, `period` and
/// `burst`; a leaky bucket `rate`, `period`, `burst` and `leaky_mode`; the
/// window algorithms `limit` and `window`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlgorithmSpec {
    /// The algorithm.
    pub name: AlgorithmName,
    /// A token bucket's capacity (it starts full).
    pub max_tokens: Option<u64>,
    /// Tokens added every `fill_interval`.
    pub tokens_per_fill: Option<u64>,
    /// The time in which `tokens_per_fill` tokens are added.
    pub fill_interval: Option<Duration>,
    /// Requests per `period` (GCRA) or per `window`.
    pub limit: Option<u64>,
    /// The time over which GCRA's `limit` or a leaky bucket's `rate` requests pass.
    pub period: Option<Duration>,
    /// GCRA's largest burst; a leaky bucket's allowance above its rate.
    pub burst: Option<u64>,
    /// Requests a leaky bucket drains per `period`.
    pub rate: Option<u64>,
    /// A leaky bucket's shaping: a shaper (the default), a policer, or delay after N.
    pub leaky_mode: DelayMode,
    /// A window algorithm's window length.
    pub window: Option<Duration>,
}

impl AlgorithmSpec {
    /// A spec of `name` with no parameter given (a leaky bucket shapes).
    pub fn new(name: AlgorithmName) -> Self {
        AlgorithmSpec {
            name,
            max_tokens: None,
            tokens_per_fill: None,
            fill_interval: None,
            limit: None,
            period: None,
            burst: None,
            rate: None,
            leaky_mode: DelayMode::Delay,
            window: None,
        }
    }

    /// Builds the algorithm, with a one-line description such as
    /// `token-bucket: 5 tokens, refilled 2 per 1s`.
    ///
    /// Fails on the first parameter the algorithm needs and was not given
    /// (in the order listed on [`AlgorithmSpec`]), or on one the core rejects.
    pub fn build(&self) -> Result<(AnyAlgorithm, String), SpecError> {
        let name = self.name.hyphenated();
        let built = match self.name {
            AlgorithmName::TokenBucket => {
                let max_tokens = need(self.max_tokens, "max_tokens")?;
                let per_fill = need(self.tokens_per_fill, "tokens_per_fill")?;
                let interval = need(self.fill_interval, "fill_interval")?;
                let bucket = TokenBucket::new(max_tokens, per_fill, interval)?;
                let description = format!(
                    "{name}: {max_tokens} tokens, refilled {per_fill} per {}",
                    format_duration(interval)
                );
                (bucket.into(), description)
            }
            AlgorithmName::Gcra => {
                let limit = need(self.limit, "limit")?;
                let period = need(self.period, "period")?;
                let burst = need(self.burst, "burst")?;
                let gcra = Gcra::new(limit, period, burst)?;
                let description = format!(
                    "{name}: {limit} per {}, bursts of up to {burst}",
                    format_duration(period)
                );
                (gcra.into(), description)
            }
            AlgorithmName::LeakyBucket => {
                let rate = need(self.rate, "rate")?;
                let period = need(self.period, "period")?;
                let burst = need(self.burst, "burst")?;
                let kind = match self.leaky_mode {
                    DelayMode::NoDelay => "policer (nodelay)".to_owned(),
                    DelayMode::DelayAfter(n) => format!("shaper (delay={n})"),
                    DelayMode::Delay => "shaper".to_owned(),
                };
                let bucket = LeakyBucket::new(rate, period, burst, self.leaky_mode)?;
                let description = format!(
                    "{name} {kind}: {rate} per {}, burst {burst}",
                    format_duration(period)
                );
                (bucket.into(), description)
            }
            AlgorithmName::FixedWindow
            | AlgorithmName::SlidingWindow
            | AlgorithmName::SlidingLog => {
                let limit = need(self.limit, "limit")?;
                let window = need(self.window, "window")?;
                let algorithm: AnyAlgorithm = match self.name {
                    AlgorithmName::FixedWindow => FixedWindow::new(limit, window)?.into(),
                    AlgorithmName::SlidingWindow => SlidingWindow::new(limit, window)?.into(),
                    _ => SlidingLog::new(limit, window)?.into(),
                };
                let description = format!("{name}: {limit} per {}", format_duration(window));
                (algorithm, description)
            }
        };
        Ok(built)
    }
}

/// The parameter's value, or the error naming it.
pub(crate) fn need<T>(value: Option<T>, parameter: &'static str) -> Result<T, SpecError> {
    value.ok_or(SpecError::Missing(parameter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_builds_its_algorithm_or_names_the_parameter() {
        let mut spec = AlgorithmSpec::new(AlgorithmName::TokenBucket);
        spec.max_tokens = Some(5);
        assert_eq!(spec.build(), Err(SpecError::Missing("tokens_per_fill")));
        spec.tokens_per_fill = Some(2);
        spec.fill_interval = Some(Duration::from_secs(1));
        let (algorithm, description) = spec.build().unwrap();
        assert_eq!(
            algorithm,
            TokenBucket::new(5, 2, Duration::from_secs(1))
                .unwrap()
                .into()
        );
        assert_eq!(description, "token-bucket: 5 tokens, refilled 2 per 1s");
        spec.max_tokens = Some(0);
        let Err(SpecError::Invalid(error)) = spec.build() else {
            panic!("a bucket of 0 is refused");
        };
        assert_eq!(error.parameter(), "max_tokens");
        assert_eq!(
            AlgorithmName::from_name("sliding_log"),
            Some(AlgorithmName::SlidingLog)
        );
        assert_eq!(AlgorithmName::from_name("sliding-log"), None);
    }
}
