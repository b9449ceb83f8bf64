//! The flags of `tollgate simulate`, the algorithm and profile they choose, and their value parsers.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use tollgate_core::duration::parse_duration;

use tollgate_lab::{AlgorithmName, TrafficName};

use crate::CommandError;

/// The flags of `tollgate simulate`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tollgate simulate --algorithm token-bucket --max-tokens 5 --tokens-per-fill 2 --fill-interval 1s --arrival-rate 10 --duration 10s\n  \
    tollgate simulate --algorithm fixed-window --limit 100 --window minute --traffic square --peak-rate 50 --wave-period 1m --start 1700000020 --duration 10m\n  \
    tollgate simulate --algorithm leaky-bucket --rate 10 --period 1s --burst 5 --traffic poisson --arrival-rate 15 --decisions out.csv\n  \
    tollgate simulate --compare sliding_window,sliding_log --limit 100 --window 1s --traffic poisson --arrival-rate 110 --duration 1h\n  \
    tollgate simulate --algorithm token-bucket --max-tokens 5 --tokens-per-fill 2 --fill-interval 1s --arrival-rate 10 --duration 10s --redis redis://127.0.0.1:6379")]
pub struct SimulateArgs {
    /// How log lines, warnings and errors are written.
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
    /// The algorithm to simulate.
    #[arg(
        long,
        value_parser = algorithm_name(),
        required_unless_present = "compare",
        conflicts_with = "compare",
        help_heading = "Algorithm"
    )]
    pub(super) algorithm: Option<AlgorithmName>,

    /// Run several algorithms on the same arrivals and compare them (comma-separated, e.g.
    /// sliding_window,sliding_log); each takes its own flags. Window algorithms are also judged
    /// against the exact sliding log: requests over- or under-admitted.
    #[arg(
        long,
        value_parser = algorithm_name(),
        value_delimiter = ',',
        value_name = "ALGORITHMS",
        help_heading = "Algorithm"
    )]
    pub(super) compare: Vec<AlgorithmName>,

    /// token-bucket: the bucket's capacity (it starts full).
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    pub(super) max_tokens: Option<u64>,

    /// token-bucket: tokens added every --fill-interval (continuously, as Envoy does).
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    pub(super) tokens_per_fill: Option<u64>,

    /// token-bucket: the time in which --tokens-per-fill tokens are added.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Algorithm")]
    pub(super) fill_interval: Option<Duration>,

    /// gcra, fixed-window, sliding-window, sliding-log: requests per --period or per --window.
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    pub(super) limit: Option<u64>,

    /// gcra, leaky-bucket: the time over which --limit or --rate requests pass.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Algorithm")]
    pub(super) period: Option<Duration>,

    /// gcra: the largest burst at once; leaky-bucket: the allowance above the rate (nginx burst).
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    pub(super) burst: Option<u64>,

    /// leaky-bucket: requests drained per --period.
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    pub(super) rate: Option<u64>,

    /// leaky-bucket: a policer (nginx nodelay): pass everything within the burst at once.
    /// Without --nodelay or --delay the leaky bucket is a shaper that delays requests above the rate.
    #[arg(long, conflicts_with = "delay", help_heading = "Algorithm")]
    pub(super) nodelay: bool,

    /// leaky-bucket: pass the first N requests above the rate at once, delay the rest (nginx delay=N).
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    pub(super) delay: Option<u64>,

    /// fixed-window, sliding-window, sliding-log: the window length (e.g. 1s, 500ms, 1m, minute, month).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Algorithm")]
    pub(super) window: Option<Duration>,

    /// How requests arrive: evenly spaced, as a Poisson process, in a square wave, a ramp,
    /// a spike, or replayed from --replay.
    #[arg(long, value_parser = traffic_name(), default_value = "steady", help_heading = "Traffic")]
    pub(super) traffic: TrafficName,

    /// steady, poisson: requests per second.
    #[arg(long, value_name = "R", value_parser = parse_positive_rate, help_heading = "Traffic")]
    pub(super) arrival_rate: Option<f64>,

    /// square: requests per second during the high part of each wave.
    #[arg(long, value_name = "R", value_parser = parse_positive_rate, help_heading = "Traffic")]
    pub(super) peak_rate: Option<f64>,

    /// square: requests per second during the rest of each wave [default: 0].
    #[arg(long, value_name = "R", value_parser = parse_non_negative_rate, help_heading = "Traffic")]
    pub(super) base_rate: Option<f64>,

    /// square: the length of one wave (its high part plus its low part).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Traffic")]
    pub(super) wave_period: Option<Duration>,

    /// square: the fraction of each wave spent at --peak-rate, in (0, 1] [default: 0.5].
    #[arg(long, value_name = "F", value_parser = parse_duty, help_heading = "Traffic")]
    pub(super) duty: Option<f64>,

    /// ramp: requests per second at the start [default: 0].
    #[arg(long, value_name = "R", value_parser = parse_non_negative_rate, help_heading = "Traffic")]
    pub(super) from_rate: Option<f64>,

    /// ramp: requests per second at the top of the ramp and after it.
    #[arg(long, value_name = "R", value_parser = parse_non_negative_rate, help_heading = "Traffic")]
    pub(super) to_rate: Option<f64>,

    /// ramp: how long the climb from --from-rate to --to-rate takes [default: the whole run].
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Traffic")]
    pub(super) ramp_over: Option<Duration>,

    /// spike: when the spike to --peak-rate begins (--base-rate before and after it).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Traffic")]
    pub(super) spike_at: Option<Duration>,

    /// spike: how long the spike lasts.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Traffic")]
    pub(super) spike_length: Option<Duration>,

    /// replay: a CSV whose first column holds request timestamps in seconds (any origin; a
    /// header line is skipped).
    #[arg(long, value_name = "FILE", help_heading = "Traffic")]
    pub(super) replay: Option<PathBuf>,

    /// Spread the arrivals at random over this many clients, each with its own key (at most
    /// 1000, or 10 000 000 with --modes).
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Traffic")]
    pub(super) clients: u32,

    /// How long the simulated run lasts.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration, help_heading = "Run")]
    pub(super) duration: Duration,

    /// The seed for random arrivals (only --traffic poisson draws any).
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Run")]
    pub(super) seed: u64,

    /// Units every request costs.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Run")]
    pub(super) cost: u64,

    /// The virtual start time in seconds since the Unix epoch (windows are epoch-aligned).
    #[arg(
        long,
        value_name = "UNIX_SECONDS",
        default_value_t = 1_700_000_000,
        help_heading = "Run"
    )]
    pub(super) start: u64,

    /// Decide on this Redis (any URL `tollgate serve --store` takes) with the production Lua
    /// script at the virtual time, instead of the in-memory store. Each decision is one round
    /// trip; the run's keys live under their own prefix and are deleted at the end. With
    /// --modes: the leased lane's grants and the shares lane's authority run on it (the exact
    /// lane stays the in-memory reference).
    #[arg(long, value_name = "URL", help_heading = "Run")]
    pub(super) redis: Option<String>,

    /// Run each algorithm as a fleet of `--instances` instances that take
    /// quota leases of this period from one shared store (the in-memory store,
    /// or `--redis`), as `tollgate serve --lease-period` does, instead of one
    /// instance deciding every request on the store. The summary adds the
    /// store calls per decision.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Run")]
    pub(super) lease_period: Option<Duration>,

    /// With --lease-period: how many instances share the store (round robin, at most 15);
    /// with --modes: how many instances the requests are spread over at random (at most 1000).
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000), help_heading = "Run")]
    pub(super) instances: u32,

    /// Run each algorithm as this many Envoys sharing it by the rate limit
    /// quota protocol (RLQS): each enforces its share locally and reports
    /// usage every `--report-interval`, and the shares are split again by
    /// demand, as `tollgate serve` does. The summary adds the reports sent.
    #[arg(long, value_name = "N", conflicts_with = "lease_period", value_parser = clap::value_parser!(u32).range(1..=15), help_heading = "Run")]
    pub(super) rlqs: Option<u32>,

    /// With --rlqs: how often each Envoy reports its usage.
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_duration, requires = "rlqs", help_heading = "Run")]
    pub(super) report_interval: Duration,

    /// With --rlqs: the percentage of requests that go to the first Envoy (the rest round robin over all).
    #[arg(long, value_name = "PCT", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100), requires = "rlqs", help_heading = "Run")]
    pub(super) hot_share: u32,

    /// Print the summary as JSON instead of text.
    #[arg(long, help_heading = "Output")]
    pub(super) json: bool,

    /// Write every decision to FILE (.csv, .json for an array, .jsonl for JSON lines; - for stdout,
    /// which moves the summary to stderr). With --compare, --clients above 1 or a replay, each
    /// decision also names its lane (algorithm), client and sidecar.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub(super) decisions: Option<PathBuf>,

    /// The format of --decisions, overriding its extension (needed for -).
    #[arg(long, value_enum, requires = "decisions", help_heading = "Output")]
    pub(super) decisions_format: Option<DecisionsFormat>,

    /// The platform scenario (--modes and its flags).
    #[command(flatten)]
    pub(super) platform: super::platform::PlatformArgs,
}

/// A value of a choosing flag (`--algorithm`, `--traffic`) that takes flags of its own.
pub(super) trait FlagChoice: Copy + 'static {
    /// The flag that chooses, e.g. `--algorithm`.
    const OPTION: &'static str;

    /// Every choice, in the order help lists them.
    const ALL: &'static [Self];

    /// The flags this choice takes.
    fn flags(self) -> &'static [&'static str];

    /// The value as typed on the command line, e.g. `token-bucket`.
    fn flag_value(self) -> &'static str;

    /// Rejects a flag that was `given` but belongs to other choices, naming them.
    fn reject_foreign(self, given: &[(&'static str, bool)]) -> Result<(), CommandError> {
        for &(flag, set) in given {
            if set && !self.flags().contains(&flag) {
                let users: Vec<&str> = Self::ALL
                    .iter()
                    .filter(|c| c.flags().contains(&flag))
                    .map(|c| c.flag_value())
                    .collect();
                return Err(CommandError::Usage(format!(
                    "{flag} does not apply to {} {} (it is for {} {})",
                    Self::OPTION,
                    self.flag_value(),
                    Self::OPTION,
                    users.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The error for a missing `flag` this choice requires.
    fn missing(self, flag: &str) -> CommandError {
        CommandError::Usage(format!(
            "{flag} is required for {} {}",
            Self::OPTION,
            self.flag_value()
        ))
    }
}

impl FlagChoice for AlgorithmName {
    const OPTION: &'static str = "--algorithm";
    const ALL: &'static [Self] = &AlgorithmName::ALL;

    fn flag_value(self) -> &'static str {
        self.hyphenated()
    }

    fn flags(self) -> &'static [&'static str] {
        match self {
            AlgorithmName::TokenBucket => &["--max-tokens", "--tokens-per-fill", "--fill-interval"],
            AlgorithmName::Gcra => &["--limit", "--period", "--burst"],
            AlgorithmName::LeakyBucket => {
                &["--rate", "--period", "--burst", "--nodelay", "--delay"]
            }
            AlgorithmName::FixedWindow
            | AlgorithmName::SlidingWindow
            | AlgorithmName::SlidingLog => &["--limit", "--window"],
        }
    }
}

impl FlagChoice for TrafficName {
    const OPTION: &'static str = "--traffic";
    const ALL: &'static [Self] = &TrafficName::ALL;

    fn flag_value(self) -> &'static str {
        self.name()
    }

    fn flags(self) -> &'static [&'static str] {
        match self {
            TrafficName::Steady | TrafficName::Poisson => &["--arrival-rate"],
            TrafficName::Square => &["--peak-rate", "--base-rate", "--wave-period", "--duty"],
            TrafficName::Ramp => &["--from-rate", "--to-rate", "--ramp-over"],
            TrafficName::Spike => &["--base-rate", "--peak-rate", "--spike-at", "--spike-length"],
            TrafficName::Replay => &["--replay"],
        }
    }
}

/// How `--decisions` are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum DecisionsFormat {
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON array of decision objects.
    Json,
    /// One JSON object per line.
    Jsonl,
}

/// Parses `--algorithm` and `--compare` values: the lab's algorithm names, with `-` or `_`.
fn algorithm_name() -> impl TypedValueParser<Value = AlgorithmName> {
    let values = AlgorithmName::ALL.map(|a| PossibleValue::new(a.hyphenated()).alias(a.name()));
    PossibleValuesParser::new(values).try_map(|text: String| {
        AlgorithmName::ALL
            .into_iter()
            .find(|a| a.hyphenated() == text || a.name() == text)
            .ok_or_else(|| format!("{text:?} is not an algorithm"))
    })
}

/// Parses `--traffic`: the lab's profile names.
fn traffic_name() -> impl TypedValueParser<Value = TrafficName> {
    PossibleValuesParser::new(TrafficName::ALL.map(TrafficName::name)).try_map(|text: String| {
        TrafficName::from_name(&text).ok_or_else(|| format!("{text:?} is not a profile"))
    })
}

/// Parses a rate that must be above zero.
fn parse_positive_rate(text: &str) -> Result<f64, String> {
    let rate = parse_finite(text)?;
    if rate <= 0.0 {
        return Err(format!("{rate} requests per second must be above 0"));
    }
    Ok(rate)
}

/// Parses a rate that may be zero.
fn parse_non_negative_rate(text: &str) -> Result<f64, String> {
    let rate = parse_finite(text)?;
    if rate < 0.0 {
        return Err(format!("{rate} requests per second must be at least 0"));
    }
    Ok(rate)
}

/// Parses a duty cycle in (0, 1].
fn parse_duty(text: &str) -> Result<f64, String> {
    let duty = parse_finite(text)?;
    if !(duty > 0.0 && duty <= 1.0) {
        return Err(format!("{duty} is not a fraction in (0, 1]"));
    }
    Ok(duty)
}

fn parse_finite(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !value.is_finite() {
        return Err(format!("{text:?} is not a finite number"));
    }
    Ok(value)
}
