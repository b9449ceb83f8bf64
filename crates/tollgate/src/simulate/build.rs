//! From `tollgate simulate`'s flags to the lab's specs and one scenario, with every mistake named by its flag.

use std::time::Duration;

use tollgate_core::{ConfigError, DelayMode, Timestamp};
use tollgate_lab::{AlgorithmSpec, ArrivalSource, Lane, Replay, Scenario, SpecError, TrafficSpec};

use tollgate_lab::{AlgorithmName, TrafficName};

use super::args::{FlagChoice, SimulateArgs};
use crate::CommandError;

/// What one `tollgate simulate` runs: the scenario and how to present it.
pub(super) struct Plan {
    /// The lanes (one per algorithm) over the arrivals.
    pub(super) scenario: Scenario,
    /// A line per lane describing its algorithm.
    pub(super) descriptions: Vec<String>,
    /// A line describing the arrivals.
    pub(super) traffic_description: String,
    /// One algorithm, one client, generated traffic, in memory: reported as a
    /// single run (its [`tollgate_lab::Summary`], its decisions without lane columns).
    pub(super) single: bool,
}

impl Plan {
    /// The scenario the flags describe, built and checked.
    pub(super) fn from_args(args: &SimulateArgs) -> Result<Self, CommandError> {
        let single = args.algorithm.is_some()
            && args.clients == 1
            && args.traffic != TrafficName::Replay
            && args.redis.is_none()
            && args.lease_period.is_none()
            && args.rlqs.is_none();
        let chosen: Vec<AlgorithmName> = match args.algorithm {
            Some(one) => vec![one],
            None => args.compare.clone(),
        };
        if !single {
            check_compared(args, &chosen)?;
        }
        let mut lanes = Vec::new();
        let mut descriptions = Vec::new();
        for &name in &chosen {
            let (algorithm, description) = build_algorithm(args, name, args.algorithm.is_some())?;
            let lane = match (args.lease_period, args.rlqs) {
                (Some(period), _) => Lane::leased(
                    format!("{} leased ×{}", name.name(), args.instances),
                    algorithm,
                    args.instances,
                    period,
                ),
                (None, Some(envoys)) => Lane::quota(
                    format!("{} RLQS ×{envoys}", name.name()),
                    algorithm,
                    envoys,
                    args.report_interval,
                    args.hot_share * 10,
                ),
                (None, None) => Lane::global(name.name(), algorithm),
            };
            // A single run's summary has no comparison with the exact log.
            lanes.push(if single { lane.unjudged() } else { lane });
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
        scenario.validate().map_err(lab_error)?;
        Ok(Plan {
            scenario,
            descriptions,
            traffic_description,
            single,
        })
    }
}

/// Checks the algorithms of a comparison: at least one, none twice, and
/// every algorithm flag given used by at least one of them.
fn check_compared(args: &SimulateArgs, chosen: &[AlgorithmName]) -> Result<(), CommandError> {
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
    for (flag, set) in algorithm_flags_given(args) {
        if set && !chosen.iter().any(|c| c.flags().contains(&flag)) {
            let names: Vec<&str> = chosen.iter().map(|c| c.flag_value()).collect();
            return Err(CommandError::Usage(format!(
                "{flag} does not apply to any of {}",
                names.join(", ")
            )));
        }
    }
    Ok(())
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

/// The traffic flags given on the command line.
fn traffic_flags_given(args: &SimulateArgs) -> [(&'static str, bool); 11] {
    [
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
    ]
}

/// Builds the `chosen` algorithm from its flags, with a one-line description;
/// `only_chosen` rejects flags that belong to other algorithms.
fn build_algorithm(
    args: &SimulateArgs,
    chosen: AlgorithmName,
    only_chosen: bool,
) -> Result<(tollgate_core::AnyAlgorithm, String), CommandError> {
    if only_chosen {
        chosen.reject_foreign(&algorithm_flags_given(args))?;
    }
    let spec = AlgorithmSpec {
        max_tokens: args.max_tokens,
        tokens_per_fill: args.tokens_per_fill,
        fill_interval: args.fill_interval,
        limit: args.limit,
        period: args.period,
        burst: args.burst,
        rate: args.rate,
        leaky_mode: match (args.nodelay, args.delay) {
            (true, _) => DelayMode::NoDelay,
            (false, Some(n)) => DelayMode::DelayAfter(n),
            (false, None) => DelayMode::Delay,
        },
        window: args.window,
        ..AlgorithmSpec::new(chosen)
    };
    spec.build().map_err(|e| match e {
        SpecError::Missing(parameter) => chosen.missing(&flag_of(parameter)),
        SpecError::Invalid(e) => core_error(e),
    })
}

/// Builds the arrivals from the traffic flags, with a one-line description.
fn build_traffic(args: &SimulateArgs) -> Result<(ArrivalSource, String), CommandError> {
    let chosen = args.traffic;
    chosen.reject_foreign(&traffic_flags_given(args))?;
    let replay = match &args.replay {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CommandError::Failed(format!("cannot read --replay {}: {e}", path.display()))
            })?;
            let replay = Replay::from_csv(&text).map_err(|e| {
                CommandError::Usage(format!("--replay {}: {}", path.display(), e.reason()))
            })?;
            Some(replay)
        }
        None => None,
    };
    let spec = TrafficSpec {
        arrival_rate: args.arrival_rate,
        peak_rate: args.peak_rate,
        base_rate: args.base_rate,
        wave_period: args.wave_period,
        duty: args.duty,
        from_rate: args.from_rate,
        to_rate: args.to_rate,
        ramp_over: args.ramp_over,
        spike_at: args.spike_at,
        spike_length: args.spike_length,
        replay,
        ..TrafficSpec::new(chosen)
    };
    let (source, description) = spec.build(args.duration).map_err(|e| match e {
        SpecError::Missing(parameter) => chosen.missing(&flag_of(parameter)),
        SpecError::Invalid(e) => lab_error(e),
    })?;
    let description = match (&source, &args.replay) {
        (ArrivalSource::Replay(_), Some(path)) => format!("{description} from {}", path.display()),
        _ => description,
    };
    Ok((source, description))
}

/// The flag of a spec's parameter: `max_tokens` is `--max-tokens`.
fn flag_of(parameter: &str) -> String {
    format!("--{}", parameter.replace('_', "-"))
}

/// A parameter the core rejected, with the flag that set it.
fn core_error(error: ConfigError) -> CommandError {
    let flag = flag_of(error.parameter());
    CommandError::Usage(format!("{error} ({flag})"))
}

/// A parameter the simulator rejected, with the flag that set it.
pub(super) fn lab_error(error: ConfigError) -> CommandError {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_the_spec_parameters_with_dashes() {
        assert_eq!(flag_of("max_tokens"), "--max-tokens");
        assert_eq!(flag_of("window"), "--window");
    }
}
