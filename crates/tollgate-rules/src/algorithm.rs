//! Which algorithm a limit counts with, and building it from the limit's figures.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, ConfigError, DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingLog,
    SlidingWindow, TokenBucket,
};

/// Which algorithm a limit counts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum AlgorithmKind {
    /// Epoch-aligned fixed windows, as envoyproxy/ratelimit counts (the default).
    #[default]
    FixedWindow,
    /// A token bucket that starts full and refills continuously.
    TokenBucket,
    /// The generic cell rate algorithm.
    Gcra,
    /// The sliding window counter.
    SlidingWindow,
    /// The exact sliding log.
    SlidingLog,
    /// A leaky bucket: a policer (nginx `limit_req … nodelay`), or with
    /// `delay` a shaper (nginx's default, or `delay=N`).
    LeakyBucket,
}

impl AlgorithmKind {
    /// Every algorithm, in the order the docs list them.
    pub const ALL: [AlgorithmKind; 6] = [
        AlgorithmKind::FixedWindow,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::SlidingWindow,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::LeakyBucket,
    ];

    /// The name used in limits files.
    pub const fn name(self) -> &'static str {
        match self {
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::TokenBucket => "token_bucket",
            AlgorithmKind::Gcra => "gcra",
            AlgorithmKind::SlidingWindow => "sliding_window",
            AlgorithmKind::SlidingLog => "sliding_log",
            AlgorithmKind::LeakyBucket => "leaky_bucket",
        }
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AlgorithmKind {
    type Err = String;

    /// Parses an algorithm name, case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AlgorithmKind::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown algorithm `{s}`; expected one of fixed_window, token_bucket, gcra, \
                     sliding_window, sliding_log, leaky_bucket"
                )
            })
    }
}

/// Why a limit's algorithm cannot be built: the limits file's field at fault, and the whole message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BuildError {
    /// `requests_per_unit`, `burst`, `delay` or `window`.
    pub(crate) field: &'static str,
    /// What is wrong, naming the algorithm and the field.
    pub(crate) message: String,
}

impl AlgorithmKind {
    /// Builds this algorithm for `requests` per `window` (and `burst`, for
    /// those that read it), so a figure it cannot work with is a config
    /// error naming the file's field.
    pub(crate) fn build(
        self,
        requests: u64,
        window: Duration,
        burst: Option<u64>,
        delay: Option<u64>,
    ) -> Result<AnyAlgorithm, BuildError> {
        if delay.is_some() && self != AlgorithmKind::LeakyBucket {
            return Err(BuildError {
                field: "delay",
                message: format!(
                    "`delay` shapes a `leaky_bucket` only, and this limit is a `{self}`; remove `delay` or use `algorithm: leaky_bucket`"
                ),
            });
        }
        let built: Result<AnyAlgorithm, ConfigError> = match self {
            AlgorithmKind::FixedWindow => FixedWindow::new(requests, window).map(Into::into),
            AlgorithmKind::TokenBucket => {
                TokenBucket::new(burst.unwrap_or(requests), requests, window).map(Into::into)
            }
            AlgorithmKind::Gcra => {
                Gcra::new(requests, window, burst.unwrap_or(requests)).map(Into::into)
            }
            AlgorithmKind::SlidingWindow => SlidingWindow::new(requests, window).map(Into::into),
            AlgorithmKind::SlidingLog => SlidingLog::new(requests, window).map(Into::into),
            AlgorithmKind::LeakyBucket => {
                // Without `delay` a policer (nginx `nodelay`); `delay: 0`
                // delays every request above the rate (nginx's default),
                // `delay: N` lets N pass at once first (nginx `delay=N`).
                let mode = match delay {
                    None => DelayMode::NoDelay,
                    Some(0) => DelayMode::Delay,
                    Some(n) => DelayMode::DelayAfter(n),
                };
                LeakyBucket::new(requests, window, burst.unwrap_or(0), mode).map(Into::into)
            }
        };
        built.map_err(|e| {
            let field = match e.parameter() {
                "limit" | "rate" | "tokens_per_fill" => "requests_per_unit",
                "max_tokens" | "burst" => "burst",
                "delay" => "delay",
                _ => "window",
            };
            let message = format!(
                "this `{self}` limit cannot be built: `{field}` {}",
                e.reason()
            );
            BuildError { field, message }
        })
    }

    /// Whether the algorithm ignores `burst` (the window algorithms).
    pub(crate) fn ignores_burst(self) -> bool {
        matches!(
            self,
            AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow | AlgorithmKind::SlidingLog
        )
    }
}
