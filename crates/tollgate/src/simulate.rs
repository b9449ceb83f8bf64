//! `tollgate simulate`: run an algorithm against a traffic profile in virtual time.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;
use tollgate_core::{
    AnyAlgorithm, Clock, ConfigError, DelayMode, FixedWindow, Gcra, LeakyBucket, MonotonicClock,
    SlidingLog, SlidingWindow, Timestamp, TokenBucket,
};
use tollgate_lab::{
    ArrivalSource, DecisionRecord, Expectation, Lane, LaneDecision, LaneReport, MemoryStores,
    RedisStores, Replay, RunError, Scenario, Simulation, StoreFactory, Summary, Traffic,
};

use crate::CommandError;
use tollgate_core::duration::{format_duration, parse_duration};

/// The flags of `tollgate simulate`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tollgate simulate --algorithm token-bucket --max-tokens 5 --tokens-per-fill 2 --fill-interval 1s --arrival-rate 10 --duration 10s\n  \
    tollgate simulate --algorithm fixed-window --limit 100 --window minute --traffic square --peak-rate 50 --wave-period 1m --start 1700000020 --duration 10m\n  \
    tollgate simulate --algorithm leaky-bucket --rate 10 --period 1s --burst 5 --traffic poisson --arrival-rate 15 --decisions out.csv\n  \
    tollgate simulate --compare sliding_window,sliding_log --limit 100 --window 1s --traffic poisson --arrival-rate 110 --duration 1h\n  \
    tollgate simulate --algorithm token-bucket --max-tokens 5 --tokens-per-fill 2 --fill-interval 1s --arrival-rate 10 --duration 10s --redis redis://127.0.0.1:6379")]
pub struct SimulateArgs {
    /// The algorithm to simulate.
    #[arg(
        long,
        value_enum,
        required_unless_present = "compare",
        conflicts_with = "compare",
        help_heading = "Algorithm"
    )]
    algorithm: Option<AlgorithmName>,

    /// Run several algorithms on the same arrivals and compare them (comma-separated, e.g.
    /// sliding_window,sliding_log); each takes its own flags. Window algorithms are also judged
    /// against the exact sliding log: requests over- or under-admitted.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "ALGORITHMS",
        help_heading = "Algorithm"
    )]
    compare: Vec<AlgorithmName>,

    /// token-bucket: the bucket's capacity (it starts full).
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    max_tokens: Option<u64>,

    /// token-bucket: tokens added every --fill-interval (continuously, as Envoy does).
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    tokens_per_fill: Option<u64>,

    /// token-bucket: the time in which --tokens-per-fill tokens are added.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Algorithm")]
    fill_interval: Option<Duration>,

    /// gcra, fixed-window, sliding-window, sliding-log: requests per --period or per --window.
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    limit: Option<u64>,

    /// gcra, leaky-bucket: the time over which --limit or --rate requests pass.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Algorithm")]
    period: Option<Duration>,

    /// gcra: the largest burst at once; leaky-bucket: the allowance above the rate (nginx burst).
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    burst: Option<u64>,

    /// leaky-bucket: requests drained per --period.
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    rate: Option<u64>,

    /// leaky-bucket: a policer (nginx nodelay): pass everything within the burst at once.
    /// Without --nodelay or --delay the leaky bucket is a shaper that delays requests above the rate.
    #[arg(long, conflicts_with = "delay", help_heading = "Algorithm")]
    nodelay: bool,

    /// leaky-bucket: pass the first N requests above the rate at once, delay the rest (nginx delay=N).
    #[arg(long, value_name = "N", help_heading = "Algorithm")]
    delay: Option<u64>,

    /// fixed-window, sliding-window, sliding-log: the window length (e.g. 1s, 500ms, 1m, minute, month).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Algorithm")]
    window: Option<Duration>,

    /// How requests arrive: evenly spaced, as a Poisson process, in a square wave, a ramp,
    /// a spike, or replayed from --replay.
    #[arg(long, value_enum, default_value_t = TrafficName::Steady, help_heading = "Traffic")]
    traffic: TrafficName,

    /// steady, poisson: requests per second.
    #[arg(long, value_name = "R", value_parser = parse_positive_rate, help_heading = "Traffic")]
    arrival_rate: Option<f64>,

    /// square: requests per second during the high part of each wave.
    #[arg(long, value_name = "R", value_parser = parse_positive_rate, help_heading = "Traffic")]
    peak_rate: Option<f64>,

    /// square: requests per second during the rest of each wave [default: 0].
    #[arg(long, value_name = "R", value_parser = parse_non_negative_rate, help_heading = "Traffic")]
    base_rate: Option<f64>,

    /// square: the length of one wave (its high part plus its low part).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Traffic")]
    wave_period: Option<Duration>,

    /// square: the fraction of each wave spent at --peak-rate, in (0, 1] [default: 0.5].
    #[arg(long, value_name = "F", value_parser = parse_duty, help_heading = "Traffic")]
    duty: Option<f64>,

    /// ramp: requests per second at the start [default: 0].
    #[arg(long, value_name = "R", value_parser = parse_non_negative_rate, help_heading = "Traffic")]
    from_rate: Option<f64>,

    /// ramp: requests per second at the top of the ramp and after it.
    #[arg(long, value_name = "R", value_parser = parse_non_negative_rate, help_heading = "Traffic")]
    to_rate: Option<f64>,

    /// ramp: how long the climb from --from-rate to --to-rate takes [default: the whole run].
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Traffic")]
    ramp_over: Option<Duration>,

    /// spike: when the spike to --peak-rate begins (--base-rate before and after it).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Traffic")]
    spike_at: Option<Duration>,

    /// spike: how long the spike lasts.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = "Traffic")]
    spike_length: Option<Duration>,

    /// replay: a CSV whose first column holds request timestamps in seconds (any origin; a
    /// header line is skipped).
    #[arg(long, value_name = "FILE", help_heading = "Traffic")]
    replay: Option<PathBuf>,

    /// Spread the arrivals at random over this many clients, each with its own key.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Traffic")]
    clients: u32,

    /// How long the simulated run lasts.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration, help_heading = "Run")]
    duration: Duration,

    /// The seed for random arrivals (only --traffic poisson draws any).
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Run")]
    seed: u64,

    /// Units every request costs.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Run")]
    cost: u64,

    /// The virtual start time in seconds since the Unix epoch (windows are epoch-aligned).
    #[arg(
        long,
        value_name = "UNIX_SECONDS",
        default_value_t = 1_700_000_000,
        help_heading = "Run"
    )]
    start: u64,

    /// Decide on this Redis (any URL `tollgate serve --store` takes) with the production Lua
    /// script at the virtual time, instead of the in-memory store. Each decision is one round
    /// trip; the run's keys live under their own prefix and are deleted at the end.
    #[arg(long, value_name = "URL", help_heading = "Run")]
    redis: Option<String>,

    /// Print the summary as JSON instead of text.
    #[arg(long, help_heading = "Output")]
    json: bool,

    /// Write every decision to FILE (.csv, .json for an array, .jsonl for JSON lines; - for stdout,
    /// which moves the summary to stderr). With --compare, --clients above 1 or a replay, each
    /// decision also names its lane (algorithm), client and sidecar.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    decisions: Option<PathBuf>,

    /// The format of --decisions, overriding its extension (needed for -).
    #[arg(long, value_enum, requires = "decisions", help_heading = "Output")]
    decisions_format: Option<DecisionsFormat>,
}

/// The algorithms `--algorithm` and `--compare` name (with `_` or `-`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AlgorithmName {
    #[value(alias = "token_bucket")]
    TokenBucket,
    Gcra,
    #[value(alias = "leaky_bucket")]
    LeakyBucket,
    #[value(alias = "fixed_window")]
    FixedWindow,
    #[value(alias = "sliding_window")]
    SlidingWindow,
    #[value(alias = "sliding_log")]
    SlidingLog,
}

/// A value of a choosing flag (`--algorithm`, `--traffic`) that takes flags of its own.
trait FlagChoice: ValueEnum + Copy {
    /// The flag that chooses, e.g. `--algorithm`.
    const OPTION: &'static str;

    /// The flags this choice takes.
    fn flags(self) -> &'static [&'static str];

    /// The value as typed on the command line, e.g. `token-bucket`.
    fn flag_value(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }

    /// Rejects a flag that was `given` but belongs to other choices, naming them.
    fn reject_foreign(self, given: &[(&'static str, bool)]) -> Result<(), CommandError> {
        for &(flag, set) in given {
            if set && !self.flags().contains(&flag) {
                let users: Vec<String> = Self::value_variants()
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

/// The traffic profiles `--traffic` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TrafficName {
    Steady,
    Poisson,
    Square,
    Ramp,
    Spike,
    Replay,
}

impl FlagChoice for TrafficName {
    const OPTION: &'static str = "--traffic";

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
enum DecisionsFormat {
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON array of decision objects.
    Json,
    /// One JSON object per line.
    Jsonl,
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

/// Runs `tollgate simulate`.
pub fn run(args: &SimulateArgs) -> Result<(), CommandError> {
    let chosen = match args.algorithm {
        Some(chosen)
            if args.clients == 1 && args.traffic != TrafficName::Replay && args.redis.is_none() =>
        {
            chosen
        }
        _ => return run_scenario(args),
    };
    let (algorithm, algorithm_description) = build_algorithm(args, chosen, true)?;
    let (source, traffic_description) = build_traffic(args)?;
    let ArrivalSource::Profile(traffic) = source else {
        return run_scenario(args);
    };
    let simulation = Simulation {
        algorithm,
        traffic,
        duration: args.duration,
        seed: args.seed,
        cost: args.cost,
        start: Timestamp::from_secs(args.start),
    };
    simulation.validate().map_err(lab_error)?;

    let mut sink = match &args.decisions {
        Some(path) => Some(DecisionSink::open(path, args.decisions_format, false)?),
        None => None,
    };
    let summary = simulation
        .run(|record| {
            if let Some(sink) = sink.as_mut() {
                sink.write(record);
            }
        })
        .map_err(lab_error)?;
    let decisions_on_stdout = sink.as_ref().is_some_and(|s| s.is_stdout());
    if let Some(sink) = sink {
        sink.finish()?;
    }

    let report = Report {
        algorithm: chosen.flag_value(),
        algorithm_description,
        traffic: args.traffic.flag_value(),
        traffic_description,
        duration_ns: u64::try_from(args.duration.as_nanos()).unwrap_or(u64::MAX),
        seed: args.seed,
        cost: args.cost,
        summary,
    };
    let text = if args.json {
        let mut json = serde_json::to_string_pretty(&report)
            .map_err(|e| CommandError::Failed(format!("cannot format the summary as JSON: {e}")))?;
        json.push('\n');
        json
    } else {
        report.human(args)
    };
    // With the decisions on stdout, the summary goes to stderr so stdout stays one format.
    let written = if decisions_on_stdout {
        io::stderr().lock().write_all(text.as_bytes())
    } else {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    };
    written.map_err(|e| CommandError::Failed(format!("cannot write the summary: {e}")))
}

/// The algorithm flags given on the command line.
fn algorithm_flags_given(args: &SimulateArgs) -> [(&'static str, bool); 10] {
    [
        ("--max-tokens", args.max_tokens.is_some()),
        ("--tokens-per-fill", args.tokens_per_fill.is_some()),
        ("--fill-interval", args.fill_interval.is_some()),
        ("--limit", args.limit.is_some()),
        ("--period", args.period.is_some()),
        ("--burst", args.burst.is_some()),
        ("--rate", args.rate.is_some()),
        ("--nodelay", args.nodelay),
        ("--delay", args.delay.is_some()),
        ("--window", args.window.is_some()),
    ]
}

/// Builds the `chosen` algorithm from its flags, with a one-line description;
/// `only_chosen` rejects flags that belong to other algorithms.
fn build_algorithm(
    args: &SimulateArgs,
    chosen: AlgorithmName,
    only_chosen: bool,
) -> Result<(AnyAlgorithm, String), CommandError> {
    if only_chosen {
        chosen.reject_foreign(&algorithm_flags_given(args))?;
    }
    let need = |flag: &str| chosen.missing(flag);
    let name = chosen.flag_value();
    let built = match chosen {
        AlgorithmName::TokenBucket => {
            let max_tokens = args.max_tokens.ok_or_else(|| need("--max-tokens"))?;
            let per_fill = args
                .tokens_per_fill
                .ok_or_else(|| need("--tokens-per-fill"))?;
            let interval = args.fill_interval.ok_or_else(|| need("--fill-interval"))?;
            let bucket = TokenBucket::new(max_tokens, per_fill, interval).map_err(core_error)?;
            let description = format!(
                "{name}: {max_tokens} tokens, refilled {per_fill} per {}",
                format_duration(interval)
            );
            (bucket.into(), description)
        }
        AlgorithmName::Gcra => {
            let limit = args.limit.ok_or_else(|| need("--limit"))?;
            let period = args.period.ok_or_else(|| need("--period"))?;
            let burst = args.burst.ok_or_else(|| need("--burst"))?;
            let gcra = Gcra::new(limit, period, burst).map_err(core_error)?;
            let description = format!(
                "{name}: {limit} per {}, bursts of up to {burst}",
                format_duration(period)
            );
            (gcra.into(), description)
        }
        AlgorithmName::LeakyBucket => {
            let rate = args.rate.ok_or_else(|| need("--rate"))?;
            let period = args.period.ok_or_else(|| need("--period"))?;
            let burst = args.burst.ok_or_else(|| need("--burst"))?;
            let (mode, kind) = match (args.nodelay, args.delay) {
                (true, _) => (DelayMode::NoDelay, "policer (nodelay)".to_owned()),
                (false, Some(n)) => (DelayMode::DelayAfter(n), format!("shaper (delay={n})")),
                (false, None) => (DelayMode::Delay, "shaper".to_owned()),
            };
            let bucket = LeakyBucket::new(rate, period, burst, mode).map_err(core_error)?;
            let description = format!(
                "{name} {kind}: {rate} per {}, burst {burst}",
                format_duration(period)
            );
            (bucket.into(), description)
        }
        AlgorithmName::FixedWindow | AlgorithmName::SlidingWindow | AlgorithmName::SlidingLog => {
            let limit = args.limit.ok_or_else(|| need("--limit"))?;
            let window = args.window.ok_or_else(|| need("--window"))?;
            let algorithm: AnyAlgorithm = match chosen {
                AlgorithmName::FixedWindow => {
                    FixedWindow::new(limit, window).map_err(core_error)?.into()
                }
                AlgorithmName::SlidingWindow => SlidingWindow::new(limit, window)
                    .map_err(core_error)?
                    .into(),
                _ => SlidingLog::new(limit, window).map_err(core_error)?.into(),
            };
            let description = format!("{name}: {limit} per {}", format_duration(window));
            (algorithm, description)
        }
    };
    Ok(built)
}

/// Builds the arrivals from the traffic flags, with a one-line description.
fn build_traffic(args: &SimulateArgs) -> Result<(ArrivalSource, String), CommandError> {
    let chosen = args.traffic;
    let given: [(&str, bool); 11] = [
        ("--arrival-rate", args.arrival_rate.is_some()),
        ("--peak-rate", args.peak_rate.is_some()),
        ("--base-rate", args.base_rate.is_some()),
        ("--wave-period", args.wave_period.is_some()),
        ("--duty", args.duty.is_some()),
        ("--from-rate", args.from_rate.is_some()),
        ("--to-rate", args.to_rate.is_some()),
        ("--ramp-over", args.ramp_over.is_some()),
        ("--spike-at", args.spike_at.is_some()),
        ("--spike-length", args.spike_length.is_some()),
        ("--replay", args.replay.is_some()),
    ];
    chosen.reject_foreign(&given)?;
    let need = |flag: &str| chosen.missing(flag);
    let built = match chosen {
        TrafficName::Steady => {
            let rate = args.arrival_rate.ok_or_else(|| need("--arrival-rate"))?;
            (
                Traffic::steady(rate).map_err(lab_error)?,
                format!("steady, {rate} req/s evenly spaced"),
            )
        }
        TrafficName::Poisson => {
            let rate = args.arrival_rate.ok_or_else(|| need("--arrival-rate"))?;
            (
                Traffic::poisson(rate).map_err(lab_error)?,
                format!("poisson, {rate} req/s on average"),
            )
        }
        TrafficName::Square => {
            let peak = args.peak_rate.ok_or_else(|| need("--peak-rate"))?;
            let period = args.wave_period.ok_or_else(|| need("--wave-period"))?;
            let base = args.base_rate.unwrap_or(0.0);
            let duty = args.duty.unwrap_or(Traffic::DEFAULT_DUTY);
            (
                Traffic::square_with_duty(peak, base, period, duty).map_err(lab_error)?,
                format!(
                    "square, {peak} req/s for {}% of every {}, {base} req/s otherwise",
                    format_percent(duty),
                    format_duration(period)
                ),
            )
        }
        TrafficName::Ramp => {
            let from = args.from_rate.unwrap_or(0.0);
            let to = args.to_rate.ok_or_else(|| need("--to-rate"))?;
            let over = args.ramp_over.unwrap_or(args.duration);
            (
                Traffic::ramp(from, to, over).map_err(lab_error)?,
                format!("ramp, {from} to {to} req/s over {}", format_duration(over)),
            )
        }
        TrafficName::Spike => {
            let peak = args.peak_rate.ok_or_else(|| need("--peak-rate"))?;
            let at = args.spike_at.ok_or_else(|| need("--spike-at"))?;
            let length = args.spike_length.ok_or_else(|| need("--spike-length"))?;
            let base = args.base_rate.unwrap_or(0.0);
            (
                Traffic::spike(base, peak, at, length).map_err(lab_error)?,
                format!(
                    "spike, {base} req/s with {peak} req/s from {} for {}",
                    format_duration(at),
                    format_duration(length)
                ),
            )
        }
        TrafficName::Replay => {
            let path = args.replay.as_ref().ok_or_else(|| need("--replay"))?;
            let text = std::fs::read_to_string(path).map_err(|e| {
                CommandError::Failed(format!("cannot read --replay {}: {e}", path.display()))
            })?;
            let replay = Replay::from_csv(&text).map_err(|e| {
                CommandError::Usage(format!("--replay {}: {}", path.display(), e.reason()))
            })?;
            let description = format!(
                "replay of {} timestamps over {} from {}",
                replay.len(),
                format_duration(replay.span()),
                path.display()
            );
            return Ok((ArrivalSource::Replay(replay), description));
        }
    };
    Ok((ArrivalSource::Profile(built.0), built.1))
}

/// Formats a fraction as a percentage with at most two decimals: `50`, `33.33`.
fn format_percent(fraction: f64) -> String {
    let text = format!("{:.2}", fraction * 100.0);
    match text.split_once('.') {
        Some((whole, decimals)) if decimals.trim_end_matches('0').is_empty() => whole.to_owned(),
        Some((whole, decimals)) => format!("{whole}.{}", decimals.trim_end_matches('0')),
        None => text,
    }
}

/// A parameter the core rejected, with the flag that set it.
fn core_error(error: ConfigError) -> CommandError {
    let flag = format!("--{}", error.parameter().replace('_', "-"));
    CommandError::Usage(format!("{error} ({flag})"))
}

/// A parameter the simulator rejected, with the flag that set it.
fn lab_error(error: ConfigError) -> CommandError {
    let flag = match error.parameter() {
        "rate" => "--arrival-rate",
        "peak" => "--peak-rate",
        "base" => "--base-rate",
        "period" => "--wave-period",
        "duty" => "--duty",
        "from" => "--from-rate",
        "to" => "--to-rate",
        "over" => "--ramp-over",
        "length" => "--spike-length",
        "clients" => "--clients",
        "cost" => "--cost",
        "start" => "--start",
        _ => "--duration",
    };
    CommandError::Usage(format!("{error} ({flag})"))
}

/// Where `--decisions` go, remembering the first write error.
struct DecisionSink {
    path: PathBuf,
    format: DecisionsFormat,
    out: BufWriter<Box<dyn Write>>,
    written: u64,
    error: Option<io::Error>,
}

impl DecisionSink {
    /// Opens `path`; with `lanes`, CSV rows start with the lane, client and sidecar.
    fn open(
        path: &Path,
        format: Option<DecisionsFormat>,
        lanes: bool,
    ) -> Result<Self, CommandError> {
        let to_stdout = path == Path::new("-");
        let format = match format {
            Some(format) => format,
            None if to_stdout => {
                return Err(CommandError::Usage(
                    "--decisions - writes to stdout and needs --decisions-format csv, json or jsonl"
                        .to_owned(),
                ));
            }
            None => match path.extension().and_then(|e| e.to_str()) {
                Some(e) if e.eq_ignore_ascii_case("csv") => DecisionsFormat::Csv,
                Some(e) if e.eq_ignore_ascii_case("json") => DecisionsFormat::Json,
                Some(e) if e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("ndjson") => {
                    DecisionsFormat::Jsonl
                }
                _ => {
                    return Err(CommandError::Usage(format!(
                        "cannot tell the format of --decisions {} from its extension; \
                         name it .csv, .json or .jsonl, or pass --decisions-format",
                        path.display()
                    )));
                }
            },
        };
        let out: Box<dyn Write> = if to_stdout {
            Box::new(io::stdout())
        } else {
            let file = File::create(path).map_err(|e| {
                CommandError::Failed(format!("cannot write decisions to {}: {e}", path.display()))
            })?;
            Box::new(file)
        };
        let mut sink = DecisionSink {
            path: path.to_owned(),
            format,
            out: BufWriter::with_capacity(1 << 16, out),
            written: 0,
            error: None,
        };
        let opening = match format {
            DecisionsFormat::Csv if lanes => writeln!(sink.out, "{}", LaneDecision::CSV_HEADER),
            DecisionsFormat::Csv => writeln!(sink.out, "{}", DecisionRecord::CSV_HEADER),
            DecisionsFormat::Json => sink.out.write_all(b"["),
            DecisionsFormat::Jsonl => Ok(()),
        };
        sink.keep_error(opening);
        Ok(sink)
    }

    fn is_stdout(&self) -> bool {
        self.path == Path::new("-")
    }

    fn keep_error(&mut self, result: io::Result<()>) {
        if let (Err(e), None) = (result, &self.error) {
            self.error = Some(e);
        }
    }

    fn write(&mut self, record: &DecisionRecord) {
        self.write_with(record, |record, out| record.write_csv_row(out));
    }

    /// Writes one decision of a scenario's lane (a lane column, then the record).
    fn write_lane(&mut self, decision: &LaneDecision<'_>) {
        self.write_with(decision, |decision, out| decision.write_csv_row(out));
    }

    fn write_with<T: Serialize>(
        &mut self,
        record: &T,
        csv: impl FnOnce(&T, &mut BufWriter<Box<dyn Write>>) -> io::Result<()>,
    ) {
        if self.error.is_some() {
            return;
        }
        let result = match self.format {
            DecisionsFormat::Csv => csv(record, &mut self.out),
            DecisionsFormat::Json => {
                let separator: &[u8] = if self.written == 0 { b"\n" } else { b",\n" };
                self.out.write_all(separator).and_then(|()| {
                    serde_json::to_writer(&mut self.out, record).map_err(io::Error::from)
                })
            }
            DecisionsFormat::Jsonl => serde_json::to_writer(&mut self.out, record)
                .map_err(io::Error::from)
                .and_then(|()| self.out.write_all(b"\n")),
        };
        self.written += 1;
        self.keep_error(result);
    }

    fn finish(mut self) -> Result<(), CommandError> {
        if self.format == DecisionsFormat::Json {
            let closing = self.out.write_all(b"\n]\n");
            self.keep_error(closing);
        }
        let flushed = self.out.flush();
        self.keep_error(flushed);
        let destination = if self.is_stdout() {
            "stdout".to_owned()
        } else {
            self.path.display().to_string()
        };
        match self.error {
            None => Ok(()),
            Some(e) => Err(CommandError::Failed(format!(
                "cannot write decisions to {destination}: {e}"
            ))),
        }
    }
}

/// The summary as printed: what ran, and its totals.
#[derive(Serialize)]
struct Report {
    algorithm: String,
    algorithm_description: String,
    traffic: String,
    traffic_description: String,
    duration_ns: u64,
    seed: u64,
    cost: u64,
    #[serde(flatten)]
    summary: Summary,
}

impl Report {
    /// The summary as a few lines of text.
    fn human(&self, args: &SimulateArgs) -> String {
        let s = &self.summary;
        let mut text = String::new();
        let mut line = |label: &str, value: String| {
            text.push_str(&format!("{label:<11}{value}\n"));
        };
        line("algorithm", self.algorithm_description.clone());
        line(
            "traffic",
            format!(
                "{} for {}, seed {}, cost {}",
                self.traffic_description,
                format_duration(args.duration),
                self.seed,
                self.cost
            ),
        );
        line("arrivals", s.arrivals.to_string());
        line(
            "admitted",
            format!("{} ({:.2}%)", s.admitted, s.acceptance_rate * 100.0),
        );
        line(
            "rejected",
            format!(
                "{} ({} denied, {} costing more than the limit can hold)",
                s.rejected(),
                s.denied,
                s.exceeded
            ),
        );
        let shaper = args.algorithm == Some(AlgorithmName::LeakyBucket) && !args.nodelay;
        if shaper {
            line(
                "delayed",
                format!("{} (admitted, held by the shaper)", s.delayed),
            );
        }
        let window_note = match args.algorithm.unwrap_or(AlgorithmName::SlidingLog) {
            AlgorithmName::TokenBucket => " (the time to refill the whole bucket)",
            AlgorithmName::Gcra => " (the time to earn the whole burst back)",
            AlgorithmName::LeakyBucket => " (the time to drain the whole bucket)",
            _ => "",
        };
        line(
            "busiest",
            format!(
                "{} units admitted in one {} window{window_note}; limit {}",
                s.max_admitted_in_window,
                format_duration(s.window),
                s.limit
            ),
        );
        text
    }
}

/// Runs the algorithms of `--compare` (or the one `--algorithm` over several
/// clients or a replay) as lanes of one scenario on the same arrivals.
fn run_scenario(args: &SimulateArgs) -> Result<(), CommandError> {
    let chosen: Vec<AlgorithmName> = match args.algorithm {
        Some(one) => vec![one],
        None => args.compare.clone(),
    };
    if chosen.is_empty() {
        return Err(CommandError::Usage(
            "--compare needs at least one algorithm".to_owned(),
        ));
    }
    for (i, name) in chosen.iter().enumerate() {
        if chosen[..i].contains(name) {
            return Err(CommandError::Usage(format!(
                "--compare names {} twice",
                name.flag_value()
            )));
        }
    }
    // A flag must belong to at least one of the algorithms compared.
    for (flag, set) in algorithm_flags_given(args) {
        if set && !chosen.iter().any(|c| c.flags().contains(&flag)) {
            let names: Vec<String> = chosen.iter().map(|c| c.flag_value()).collect();
            return Err(CommandError::Usage(format!(
                "{flag} does not apply to any of {}",
                names.join(", ")
            )));
        }
    }
    let mut lanes = Vec::new();
    let mut descriptions = Vec::new();
    for &name in &chosen {
        let (algorithm, description) = build_algorithm(args, name, args.algorithm.is_some())?;
        lanes.push(Lane::global(name.flag_value().replace('-', "_"), algorithm));
        descriptions.push(description);
    }
    let (source, traffic_description) = build_traffic(args)?;
    let scenario = Scenario {
        source,
        duration: args.duration,
        seed: args.seed,
        cost: args.cost,
        start: Timestamp::from_secs(args.start),
        clients: args.clients,
        state_client: 0,
        tick: args.duration.max(Duration::from_nanos(1)),
        samples_per_tick: 0,
        lanes,
    };
    let expectations = scenario.expectations();
    scenario.validate().map_err(lab_error)?;
    let redis = match &args.redis {
        Some(url) => Some(RedisStores::connect_blocking(url).map_err(CommandError::Failed)?),
        None => None,
    };
    let stores: &dyn StoreFactory = match &redis {
        Some(redis) => redis,
        None => &MemoryStores,
    };
    let clock = MonotonicClock::new();
    let began = clock.now();
    let mut sink = match &args.decisions {
        Some(path) => Some(DecisionSink::open(path, args.decisions_format, true)?),
        None => None,
    };
    let report = match sink.as_mut() {
        Some(sink) => scenario.run_with_decisions(
            stores,
            |_| {},
            |decision| {
                sink.write_lane(decision);
            },
        ),
        None => scenario.run(stores, |_| {}),
    }
    .map_err(|e| match e {
        RunError::Config(e) => lab_error(e),
        RunError::Store(message) => CommandError::Failed(message),
    })?;
    let elapsed = clock.now().saturating_since(began);
    let store = match &redis {
        Some(redis) => {
            // One call per decision of every lane (two with --decisions, which reads the
            // key's state after each), one per state read of every store and tick.
            let per_decision = if args.decisions.is_some() { 2 } else { 1 };
            let calls = report.arrivals * report.lanes.len() as u64 * per_decision
                + report.ticks
                    * report
                        .lanes
                        .iter()
                        .map(|l| u64::from(l.placement.stores()))
                        .sum::<u64>();
            StoreUsed {
                kind: "redis",
                target: Some(redis.describe()),
                calls: Some(calls),
                seconds: Some(elapsed.as_secs_f64()),
                calls_per_second: (elapsed > Duration::ZERO)
                    .then(|| calls as f64 / elapsed.as_secs_f64()),
            }
        }
        None => StoreUsed {
            kind: "memory",
            target: None,
            calls: None,
            seconds: None,
            calls_per_second: None,
        },
    };
    drop(redis);
    let decisions_on_stdout = sink.as_ref().is_some_and(|s| s.is_stdout());
    if let Some(sink) = sink {
        sink.finish()?;
    }
    let compared = Comparison {
        traffic: args.traffic.flag_value(),
        traffic_description,
        duration_ns: u64::try_from(args.duration.as_nanos()).unwrap_or(u64::MAX),
        seed: args.seed,
        cost: args.cost,
        clients: args.clients,
        arrivals: report.arrivals,
        store,
        lanes: report
            .lanes
            .into_iter()
            .zip(descriptions)
            .zip(expectations)
            .map(
                |((report, algorithm_description), expectation)| ComparedLane {
                    algorithm_description,
                    report,
                    expectation,
                },
            )
            .collect(),
    };
    let text = if args.json {
        let mut json = serde_json::to_string_pretty(&compared)
            .map_err(|e| CommandError::Failed(format!("cannot format the summary as JSON: {e}")))?;
        json.push('\n');
        json
    } else {
        compared.human(args)
    };
    // With the decisions on stdout, the summary goes to stderr so stdout stays one format.
    let written = if decisions_on_stdout {
        io::stderr().lock().write_all(text.as_bytes())
    } else {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    };
    written.map_err(|e| CommandError::Failed(format!("cannot write the summary: {e}")))
}

/// The summary of a comparison: the trace, then each algorithm's totals.
#[derive(Serialize)]
struct Comparison {
    traffic: String,
    traffic_description: String,
    duration_ns: u64,
    seed: u64,
    cost: u64,
    clients: u32,
    arrivals: u64,
    store: StoreUsed,
    lanes: Vec<ComparedLane>,
}

/// Which store decided a run, and what it cost.
#[derive(Serialize)]
struct StoreUsed {
    /// `memory` or `redis`.
    kind: &'static str,
    /// The Redis deployment, password hidden.
    target: Option<String>,
    /// Script calls made (decisions and state reads).
    calls: Option<u64>,
    /// Wall-clock seconds a Redis run took (none for memory: a run's report stays a pure
    /// function of its parameters).
    seconds: Option<f64>,
    /// Script calls per wall-clock second.
    calls_per_second: Option<f64>,
}

/// One algorithm's line of a comparison.
#[derive(Serialize)]
struct ComparedLane {
    algorithm_description: String,
    #[serde(flatten)]
    report: LaneReport,
    expectation: Expectation,
}

impl Comparison {
    fn human(&self, args: &SimulateArgs) -> String {
        let mut text = format!(
            "traffic    {} for {}, seed {}, cost {}, {} client{}\narrivals   {}\n",
            self.traffic_description,
            format_duration(args.duration),
            self.seed,
            self.cost,
            self.clients,
            if self.clients == 1 { "" } else { "s" },
            self.arrivals
        );
        if let (Some(target), Some(calls)) = (&self.store.target, self.store.calls) {
            text.push_str(&format!(
                "store      redis {target}: {calls} script calls in {:.2} s ({:.0} calls/s)\n",
                self.store.seconds.unwrap_or(0.0),
                self.store.calls_per_second.unwrap_or(0.0)
            ));
        }
        for lane in &self.lanes {
            let r = &lane.report;
            text.push_str(&format!("\n{}\n", lane.algorithm_description));
            text.push_str(&format!(
                "  admitted   {} ({:.4}%), expected at most {:.0}\n",
                r.counts.admitted,
                r.acceptance_rate * 100.0,
                lane.expectation.expected_admitted
            ));
            text.push_str(&format!(
                "  rejected   {} ({} denied, {} costing more than the limit can hold)\n",
                r.counts.rejected(),
                r.counts.denied,
                r.counts.exceeded
            ));
            text.push_str(&format!(
                "  busiest    {} units admitted in one {} window; limit {} per key\n",
                r.max_admitted_in_window,
                format_duration(Duration::from_nanos(r.window_ns)),
                r.limit
            ));
            if let (Some(over), Some(under)) = (r.over_admitted, r.under_admitted) {
                let share = |n: u64| {
                    if self.arrivals == 0 {
                        0.0
                    } else {
                        n as f64 * 100.0 / self.arrivals as f64
                    }
                };
                text.push_str(&format!(
                    "  vs exact   {over} over-admitted ({:.5}% of requests), {under} under-admitted ({:.5}%)\n",
                    share(over),
                    share(under)
                ));
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_keep_at_most_two_decimals() {
        assert_eq!(format_percent(1.0), "100");
        assert_eq!(format_percent(0.5), "50");
        assert_eq!(format_percent(0.25), "25");
        assert_eq!(format_percent(0.105), "10.5");
        assert_eq!(format_percent(1.0 / 3.0), "33.33");
    }
}
