//! `tollgate simulate --modes …`: the platform scenario (many keys, many instances, a per-key and a platform limit) with every mode as a lane.

use std::fmt::Write as _;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tollgate_core::duration::parse_duration;
use tollgate_core::share::{AuthorityPolicy, HolderPolicy, MILLI_PER_TOKEN, Share, StarterPolicy};
use tollgate_core::{MonotonicClock, Timestamp};
use tollgate_lab::{
    AlgorithmName, IN_MEMORY, KeyDistribution, PlatformMode, PlatformScenario, PlatformSummary,
    RedisStores, RunError, TrafficName, parse_scale_step,
};

use super::args::SimulateArgs;
use super::report::summary_text;
use crate::CommandError;

/// The flags of the platform run.
#[derive(Args, Debug)]
pub struct PlatformArgs {
    /// Run the platform scenario with these modes as lanes, comma-separated: exact, leased,
    /// shares, local (exact always runs: it is the reference). The per-key limit comes from
    /// --algorithm token-bucket or gcra; requests are spread over --clients keys and
    /// --instances instances.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "MODES",
        help_heading = "Platform"
    )]
    pub(super) modes: Vec<ModeArg>,

    /// How popular the --clients keys are: all alike, or Zipf (key k drawn with weight 1/k^s).
    #[arg(long, value_enum, default_value = "uniform", help_heading = "Platform")]
    pub(super) key_distribution: DistributionArg,

    /// With --key-distribution zipf: the exponent s.
    #[arg(
        long,
        value_name = "S",
        default_value_t = 1.0,
        help_heading = "Platform"
    )]
    pub(super) zipf_s: f64,

    /// A platform-wide token bucket every request must also pass: tokens per second.
    #[arg(long, value_name = "N", help_heading = "Platform")]
    pub(super) platform_rate: Option<u64>,

    /// The platform bucket's capacity [default: --platform-rate].
    #[arg(
        long,
        value_name = "N",
        requires = "platform_rate",
        help_heading = "Platform"
    )]
    pub(super) platform_burst: Option<u64>,

    /// Change the number of live instances during the run: TIME=N pairs, comma-separated
    /// (e.g. 20s=15,40s=5: 15 instances from 20 s, 5 from 40 s). New instances start with
    /// nothing; leaving ones release what they hold.
    #[arg(long, value_name = "SCHEDULE", value_delimiter = ',', value_parser = parse_scale_step, help_heading = "Platform")]
    pub(super) scale: Vec<(Duration, u32)>,

    /// One store round trip: what a decision waits when it waits on the store.
    #[arg(long, value_name = "DUR", default_value = "500us", value_parser = parse_duration, help_heading = "Platform")]
    pub(super) store_rtt: Duration,

    /// shares: each instance calls the store at least this often (a heartbeat with its
    /// demand reports, releases and shrinks).
    #[arg(long, value_name = "DUR", default_value = "100ms", value_parser = parse_duration, help_heading = "Platform")]
    pub(super) sync_interval: Duration,

    /// shares: a call this soon after the last one when a request waits for a key's first share.
    #[arg(long, value_name = "DUR", default_value = "1ms", value_parser = parse_duration, help_heading = "Platform")]
    pub(super) batch_interval: Duration,

    /// shares: an instance's registration lasts this long after each call (its shares return
    /// to the pool when it lapses).
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration, help_heading = "Platform")]
    pub(super) share_ttl: Duration,

    /// shares: a key not seen for this long is released.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration, help_heading = "Platform")]
    pub(super) idle_after: Duration,

    /// shares: an instance is counted as wanting this many times its measured demand.
    #[arg(long, value_name = "N", default_value_t = 2, help_heading = "Platform")]
    pub(super) headroom: u64,

    /// shares: an instance wants at least rate / (instances × this); the rest stays in the
    /// pool for newcomers.
    #[arg(long, value_name = "N", default_value_t = 2, help_heading = "Platform")]
    pub(super) floor_divisor: u64,

    /// shares: starter slots, as `tollgate serve --shares-starter-slots` (0: off): every key
    /// keeps N small parts of its limit out of the pool, and each of the first N instances
    /// decides a key's first use from its part with no store call.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1024), help_heading = "Platform")]
    pub(super) shares_starter_slots: u32,

    /// shares: with starter slots, the slots hold together about 1/D of each key's limit (a
    /// limit under N × D tokens keeps none).
    #[arg(long, value_name = "D", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1_000_000), help_heading = "Platform")]
    pub(super) shares_starter_divisor: u64,
}

/// `--modes` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum ModeArg {
    /// One store call per decision.
    Exact,
    /// Quota leases (--lease-period, default 1s).
    Leased,
    /// Shares of each key's bucket, rebalanced by demand in batched calls.
    Shares,
    /// Each instance applies the limits on its own.
    Local,
}

/// `--key-distribution` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum DistributionArg {
    /// Every key alike.
    Uniform,
    /// Zipf with exponent --zipf-s.
    Zipf,
}

/// The per-key limit of `--algorithm token-bucket` or `gcra`, as a share.
fn key_limit(args: &SimulateArgs) -> Result<Share, CommandError> {
    let per_second = |units: u64, over: Duration| -> Result<u64, CommandError> {
        let nanos = over.as_nanos();
        if nanos == 0 {
            return Err(CommandError::Usage(
                "the refill interval must be above 0".into(),
            ));
        }
        let milli = u128::from(units) * u128::from(MILLI_PER_TOKEN) * 1_000_000_000 / nanos;
        u64::try_from(milli).map_err(|_| CommandError::Usage("the rate is too large".into()))
    };
    let missing = |flag: &str| CommandError::Usage(format!("{flag} is required with --modes"));
    match args.algorithm {
        Some(AlgorithmName::TokenBucket) => Ok(Share {
            rate: per_second(
                args.tokens_per_fill
                    .ok_or_else(|| missing("--tokens-per-fill"))?,
                args.fill_interval
                    .ok_or_else(|| missing("--fill-interval"))?,
            )?,
            burst: args.max_tokens.ok_or_else(|| missing("--max-tokens"))?,
        }),
        Some(AlgorithmName::Gcra) => Ok(Share {
            rate: per_second(
                args.limit.ok_or_else(|| missing("--limit"))?,
                args.period.ok_or_else(|| missing("--period"))?,
            )?,
            burst: args.burst.ok_or_else(|| missing("--burst"))?,
        }),
        _ => Err(CommandError::Usage(
            "--modes runs a per-key token bucket: --algorithm token-bucket or gcra".into(),
        )),
    }
}

/// The scenario the flags describe.
fn scenario(args: &SimulateArgs) -> Result<PlatformScenario, CommandError> {
    let p = &args.platform;
    if !args.compare.is_empty() || args.rlqs.is_some() || args.decisions.is_some() {
        return Err(CommandError::Usage(
            "--modes does not combine with --compare, --rlqs or --decisions".into(),
        ));
    }
    let poisson = match args.traffic {
        TrafficName::Steady => false,
        TrafficName::Poisson => true,
        other => {
            return Err(CommandError::Usage(format!(
                "--modes takes --traffic steady or poisson, not {}",
                other.name()
            )));
        }
    };
    let rate = args
        .arrival_rate
        .ok_or_else(|| CommandError::Usage("--arrival-rate is required with --modes".into()))?;
    let mut modes: Vec<PlatformMode> = p
        .modes
        .iter()
        .map(|m| match m {
            ModeArg::Exact => PlatformMode::Exact,
            ModeArg::Leased => PlatformMode::Leased,
            ModeArg::Shares => PlatformMode::Shares,
            ModeArg::Local => PlatformMode::Local,
        })
        .collect();
    modes.dedup();
    let ttl = p.share_ttl;
    let scenario = PlatformScenario {
        start: Timestamp::from_secs(args.start),
        duration: args.duration,
        rate,
        poisson,
        seed: args.seed,
        keys: args.clients,
        distribution: match p.key_distribution {
            DistributionArg::Uniform => KeyDistribution::Uniform,
            DistributionArg::Zipf => KeyDistribution::Zipf(p.zipf_s),
        },
        instances: args.instances,
        scale: p.scale.clone(),
        key_limit: key_limit(args)?,
        platform_limit: p
            .platform_rate
            .map(|r| Share::per_second(r, p.platform_burst.unwrap_or(r))),
        modes,
        store_rtt: p.store_rtt,
        lease_period: args.lease_period.unwrap_or(Duration::from_secs(1)),
        holder: HolderPolicy {
            sync_interval: p.sync_interval,
            batch_interval: p.batch_interval,
            ttl,
            ttl_margin: ttl / 10,
            idle_after: p.idle_after,
            ..HolderPolicy::default()
        },
        authority: AuthorityPolicy {
            ttl,
            headroom: p.headroom.max(1),
            floor_divisor: p.floor_divisor.max(1),
            starter: StarterPolicy {
                slots: p.shares_starter_slots,
                divisor: p.shares_starter_divisor,
            },
        },
    };
    scenario
        .validate()
        .map_err(|e| CommandError::Usage(format!("--modes: {e}")))?;
    Ok(scenario)
}

/// What `store` says with `--redis`.
const ON_REDIS: &str = "the leased and shares lanes on Redis (the production lease and shares \
                        scripts at virtual time); the exact lane is the in-memory reference, its \
                        calls counted, not sent";

/// Runs the platform scenario and prints its summary.
pub(super) fn run(args: &SimulateArgs) -> Result<(), CommandError> {
    let scenario = scenario(args)?;
    let clock = MonotonicClock::new();
    let summary = match &args.redis {
        Some(url) => {
            let redis = RedisStores::connect_blocking(url).map_err(CommandError::Failed)?;
            let store = format!("redis {}: {ON_REDIS}", redis.describe());
            scenario.run_timed_on(&redis, store, &clock)
        }
        None => scenario.run_timed(&clock),
    }
    .map_err(|e| match e {
        RunError::Config(e) => CommandError::Usage(format!("--modes: {e}")),
        RunError::Store(message) => CommandError::Failed(message),
    })?;
    let text = summary_text(args, &summary, human)?;
    print!("{text}");
    Ok(())
}

/// The summary as a table, one line per mode.
fn human(s: &PlatformSummary) -> String {
    let r = &s.report;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{} requests in {:.0} s simulated ({:.0}/s offered); the exact limiter admitted {}",
        r.arrivals,
        r.seconds,
        r.arrivals as f64 / r.seconds.max(f64::MIN_POSITIVE),
        r.exact_admitted
    );
    if s.store != IN_MEMORY {
        let _ = writeln!(text, "store: {}", s.store);
    }
    let _ = writeln!(
        text,
        "{:<7} {:>11} {:>11} {:>9} {:>8} {:>8} {:>11} {:>12} {:>9} {:>9}",
        "mode",
        "admitted",
        "over",
        "worst/s",
        "under%",
        "calls/dec",
        "calls/s",
        "keys/call",
        "waited",
        "p99 wait"
    );
    for l in &r.lanes {
        let _ = writeln!(
            text,
            "{:<7} {:>11} {:>11} {:>9} {:>8.3} {:>8.4} {:>11.0} {:>12.1} {:>9} {:>7.0}µs",
            l.mode.name(),
            l.admitted,
            l.over_admitted,
            l.worst_over_second,
            l.under_admission_pct,
            l.calls_per_decision,
            l.calls_per_second,
            l.keys_per_call,
            l.waited,
            l.p99_wait_us
        );
    }
    for l in r.lanes.iter().filter(|l| l.script_calls.is_some()) {
        let _ = writeln!(
            text,
            "{}: {} script calls to Redis ({:.4} per decision)",
            l.mode.name(),
            l.script_calls.unwrap_or(0),
            l.script_calls.unwrap_or(0) as f64 / l.decisions.max(1) as f64
        );
    }
    let _ = writeln!(
        text,
        "{:.1} s of wall time, {:.0} decisions per second simulated over all lanes",
        s.wall_seconds, s.decisions_per_second_simulated
    );
    text
}
