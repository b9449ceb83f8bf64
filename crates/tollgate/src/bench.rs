//! `tollgate bench rls`: a load generator for a rate limit service (RLS v3 over gRPC).
//!
//! It sends `ShouldRateLimit` calls for a bounded time and reports how many
//! were answered OK, OVER_LIMIT or failed (by gRPC code), the request rate
//! and the latency distribution (an HDR histogram, microseconds).
//!
//! * **Keys.** `{k}` in a descriptor value is replaced, per request, by a
//!   key index drawn uniformly from `0..keys` by a seeded pseudo-random
//!   generator (one per worker, seeded from `--seed` and the worker's
//!   number), so a run is reproducible in which keys it asks for; `--keys 1`
//!   is one hot key.
//! * **Closed loop** (default): `-c` workers spread round-robin over
//!   `--connections` HTTP/2 connections, each sending its next call as soon
//!   as the previous one returns. Latency is from send to answer.
//! * **Open loop** (`--rate R`): call `i` is scheduled at `start + i / R`;
//!   at most `-c` calls are in flight, and a call sent late because all were
//!   busy still has its latency measured from its *scheduled* time, so a
//!   slow server cannot hide behind a slowed-down client (no coordinated
//!   omission). The schedule's resolution is the runtime's timer (about 1 ms),
//!   and that lateness counts in the latency, so prefer the closed loop for
//!   sub-millisecond percentiles.
//! * **Window.** Calls that start (closed loop) or are scheduled (open loop)
//!   during the warm-up are not counted; calls that start in the measured
//!   window are all awaited and counted, and the rate is divided by the
//!   time from the window's start until the last of them returned.
//! * **Latency** is recorded for answered calls (OK and OVER_LIMIT), not
//!   for errors, whose fast failures would flatter the percentiles.
//!
//! Errors never stop a run; failing to connect at the start does (exit 1).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate_server::grpc::should_rate_limit;
use tollgate_server::grpc::wire::{self, Entry, RateLimitDescriptor, RateLimitRequest};
use tonic::transport::{Channel, Endpoint};

use crate::CommandError;

/// The arguments of `tollgate bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// What to load.
    #[command(subcommand)]
    pub target: BenchTarget,
}

/// The services `tollgate bench` can load.
#[derive(Subcommand, Debug)]
pub enum BenchTarget {
    /// Load a rate limit service (RLS v3, gRPC) with ShouldRateLimit calls.
    Rls(RlsArgs),
}

/// The arguments of `tollgate bench rls`.
#[derive(Args, Debug)]
#[command(
    after_help = "`{k}` in a descriptor value becomes a key index in 0..KEYS, drawn uniformly \
                  per request by a seeded generator.\n\
                  Exit status: 0 done (whatever the calls answered), 1 cannot connect, 2 usage."
)]
pub struct RlsArgs {
    /// The service's address.
    #[arg(long, default_value = "http://127.0.0.1:8081", value_name = "URL")]
    pub addr: String,
    /// The rate limit domain.
    #[arg(long)]
    pub domain: String,
    /// A descriptor as `key=value[,key=value…]`; `{k}` in a value is replaced by the key index.
    #[arg(long = "descriptor", value_name = "DESCRIPTOR", required = true)]
    pub descriptors: Vec<String>,
    /// How many distinct values `{k}` takes (1 = one hot key).
    #[arg(long, default_value_t = 1)]
    pub keys: u64,
    /// Calls in flight at once.
    #[arg(
        short = 'c',
        long = "concurrency",
        default_value_t = 64,
        value_name = "IN_FLIGHT"
    )]
    pub concurrency: usize,
    /// HTTP/2 connections the calls are spread over.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// How long to measure, after the warm-up.
    #[arg(short = 'd', long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// How long to send calls before measuring (not counted).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Open loop: schedule this many calls per second (still at most -c in flight).
    #[arg(long, value_name = "PER_SECOND")]
    pub rate: Option<f64>,
    /// Hits each call counts (the request's `hits_addend`; 0 means 1).
    #[arg(long, default_value_t = 0)]
    pub hits: u32,
    /// The seed of the key generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How long to wait for the connections, and for each answer.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs `tollgate bench`.
pub fn run(args: &BenchArgs) -> Result<(), CommandError> {
    match &args.target {
        BenchTarget::Rls(args) => run_rls(args),
    }
}

/// The wall clock, the one place this module reads it.
#[allow(clippy::disallowed_methods)] // A load generator measures real elapsed time.
fn now() -> Instant {
    Instant::now()
}

/// One piece of a descriptor value: literal text or the key index.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Key,
}

/// A descriptor whose values may hold `{k}`.
#[derive(Clone, Debug)]
struct Template {
    entries: Vec<(String, Vec<Piece>)>,
}

/// Parses `key=value[,key=value…]`, splitting each value at `{k}`.
fn parse_template(text: &str) -> Result<Template, CommandError> {
    let mut entries = Vec::new();
    for part in text.split(',') {
        let Some((key, value)) = part.split_once('=') else {
            return Err(CommandError::Usage(format!(
                "--descriptor {text:?}: `{part}` is not key=value"
            )));
        };
        if key.is_empty() {
            return Err(CommandError::Usage(format!(
                "--descriptor {text:?}: a key is empty"
            )));
        }
        let mut pieces = Vec::new();
        let mut rest = value;
        while let Some(at) = rest.find("{k}") {
            if at > 0 {
                pieces.push(Piece::Text(rest[..at].to_owned()));
            }
            pieces.push(Piece::Key);
            rest = &rest[at + 3..];
        }
        if !rest.is_empty() || pieces.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        entries.push((key.to_owned(), pieces));
    }
    Ok(Template { entries })
}

impl Template {
    fn render(&self, key: u64) -> RateLimitDescriptor {
        let entries = self
            .entries
            .iter()
            .map(|(name, pieces)| {
                let mut value = String::new();
                for piece in pieces {
                    match piece {
                        Piece::Text(text) => value.push_str(text),
                        Piece::Key => {
                            let _ = write!(value, "{key}");
                        }
                    }
                }
                Entry {
                    key: name.clone(),
                    value,
                }
            })
            .collect();
        RateLimitDescriptor {
            entries,
            ..RateLimitDescriptor::default()
        }
    }
}

/// What one worker (and then the whole run) counted.
struct Tally {
    latency_us: Histogram<u64>,
    ok: u64,
    over_limit: u64,
    errors: BTreeMap<String, u64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            // 1 µs to 1 hour, 3 significant digits.
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid histogram bounds"),
            ok: 0,
            over_limit: 0,
            errors: BTreeMap::new(),
        }
    }

    fn record(
        &mut self,
        result: Result<wire::RateLimitResponse, tonic::Status>,
        latency: Duration,
    ) {
        let answered = match result {
            Ok(response) if response.overall_code == wire::CODE_OK => {
                self.ok += 1;
                true
            }
            Ok(response) if response.overall_code == wire::CODE_OVER_LIMIT => {
                self.over_limit += 1;
                true
            }
            Ok(response) => {
                *self
                    .errors
                    .entry(format!("overall_code {}", response.overall_code))
                    .or_default() += 1;
                false
            }
            Err(status) => {
                *self
                    .errors
                    .entry(format!("{:?}", status.code()))
                    .or_default() += 1;
                false
            }
        };
        if answered {
            let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
            self.latency_us.saturating_record(micros.max(1));
        }
    }

    fn merge(&mut self, other: Tally) {
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms with the same bounds add up");
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        for (code, count) in other.errors {
            *self.errors.entry(code).or_default() += count;
        }
    }

    fn errors(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// What every worker shares.
struct Plan {
    domain: String,
    templates: Vec<Template>,
    keys: u64,
    hits: u32,
    /// When counting starts (the end of the warm-up).
    measure_from: Instant,
    /// When no more calls start.
    until: Instant,
    /// Open loop: the start of the schedule and the time between calls.
    schedule: Option<(Instant, Duration)>,
    /// Open loop: the next call number to send.
    next_call: AtomicU64,
}

impl Plan {
    fn request(&self, rng: &mut SmallRng) -> RateLimitRequest {
        let key = if self.keys <= 1 {
            0
        } else {
            rng.random_range(0..self.keys)
        };
        RateLimitRequest {
            domain: self.domain.clone(),
            descriptors: self.templates.iter().map(|t| t.render(key)).collect(),
            hits_addend: self.hits,
        }
    }
}

/// One worker: sends calls one after another until the plan's end.
async fn worker(plan: Arc<Plan>, channel: Channel, seed: u64) -> Tally {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut tally = Tally::new();
    loop {
        let request = plan.request(&mut rng);
        let start = match plan.schedule {
            None => {
                let start = now();
                if start >= plan.until {
                    break;
                }
                start
            }
            Some((origin, period)) => {
                let call = plan.next_call.fetch_add(1, Ordering::Relaxed);
                let offset = period.mul_f64(call as f64);
                let scheduled = origin + offset;
                if scheduled >= plan.until {
                    break;
                }
                let current = now();
                if scheduled > current {
                    tokio::time::sleep(scheduled - current).await;
                }
                scheduled
            }
        };
        let result = should_rate_limit(channel.clone(), request).await;
        let latency = now().saturating_duration_since(start);
        if start >= plan.measure_from {
            tally.record(result, latency);
        }
    }
    tally
}

/// The run's result, as printed.
struct Report {
    mode: &'static str,
    elapsed: Duration,
    tally: Tally,
}

fn run_rls(args: &RlsArgs) -> Result<(), CommandError> {
    let templates = args
        .descriptors
        .iter()
        .map(|text| parse_template(text))
        .collect::<Result<Vec<_>, _>>()?;
    if args.keys == 0 {
        return Err(CommandError::Usage("--keys must be at least 1".to_owned()));
    }
    if args.concurrency == 0 {
        return Err(CommandError::Usage("-c must be at least 1".to_owned()));
    }
    if args.connections == 0 {
        return Err(CommandError::Usage(
            "--connections must be at least 1".to_owned(),
        ));
    }
    if args.duration.is_zero() {
        return Err(CommandError::Usage("-d must be longer than 0s".to_owned()));
    }
    let period = match args.rate {
        None => None,
        Some(rate) if rate.is_finite() && rate > 0.0 => Some(Duration::from_secs_f64(1.0 / rate)),
        Some(rate) => {
            return Err(CommandError::Usage(format!(
                "--rate must be a positive number of calls per second, not {rate}"
            )));
        }
    };
    let endpoint = Endpoint::from_shared(args.addr.clone())
        .map_err(|error| CommandError::Usage(format!("bad --addr {:?}: {error}", args.addr)))?
        .connect_timeout(args.timeout)
        .timeout(args.timeout);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))?;
    let report = runtime.block_on(async {
        let mut channels = Vec::with_capacity(args.connections);
        for _ in 0..args.connections {
            let channel = endpoint.connect().await.map_err(|error| {
                CommandError::Failed(format!(
                    "cannot connect to {}: {}",
                    args.addr,
                    error_chain(&error)
                ))
            })?;
            channels.push(channel);
        }
        let start = now();
        let measure_from = start + args.warmup;
        let plan = Arc::new(Plan {
            domain: args.domain.clone(),
            templates,
            keys: args.keys,
            hits: args.hits,
            measure_from,
            until: measure_from + args.duration,
            schedule: period.map(|period| (start, period)),
            next_call: AtomicU64::new(0),
        });
        let workers: Vec<_> = (0..args.concurrency)
            .map(|i| {
                let channel = channels[i % channels.len()].clone();
                let seed = args.seed.wrapping_add(i as u64);
                tokio::spawn(worker(Arc::clone(&plan), channel, seed))
            })
            .collect();
        let mut tally = Tally::new();
        for handle in workers {
            let worker_tally = handle
                .await
                .map_err(|error| CommandError::Failed(format!("a worker failed: {error}")))?;
            tally.merge(worker_tally);
        }
        let elapsed = now().saturating_duration_since(measure_from);
        Ok::<_, CommandError>(Report {
            mode: if period.is_some() { "open" } else { "closed" },
            elapsed,
            tally,
        })
    })?;
    if args.json {
        println!("{}", json_report(args, &report));
    } else {
        print!("{}", text_report(args, &report));
    }
    Ok(())
}

/// An error and its sources, like `transport error: connection refused`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

fn requests(report: &Report) -> u64 {
    report.tally.ok + report.tally.over_limit + report.tally.errors()
}

fn per_second(report: &Report) -> f64 {
    let seconds = report.elapsed.as_secs_f64();
    if seconds > 0.0 {
        requests(report) as f64 / seconds
    } else {
        0.0
    }
}

/// The reported percentiles: name and quantile.
const PERCENTILES: [(&str, f64); 4] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99_9", 0.999),
];

fn json_report(args: &RlsArgs, report: &Report) -> serde_json::Value {
    let histogram = &report.tally.latency_us;
    let mut latency = serde_json::Map::new();
    latency.insert("count".to_owned(), histogram.len().into());
    latency.insert("min".to_owned(), histogram.min().into());
    latency.insert("mean".to_owned(), histogram.mean().into());
    for (name, quantile) in PERCENTILES {
        latency.insert(
            name.to_owned(),
            histogram.value_at_quantile(quantile).into(),
        );
    }
    latency.insert("max".to_owned(), histogram.max().into());
    serde_json::json!({
        "mode": report.mode,
        "addr": args.addr,
        "domain": args.domain,
        "descriptors": args.descriptors,
        "keys": args.keys,
        "in_flight": args.concurrency,
        "connections": args.connections,
        "rate": args.rate,
        "duration_s": args.duration.as_secs_f64(),
        "warmup_s": args.warmup.as_secs_f64(),
        "elapsed_s": report.elapsed.as_secs_f64(),
        "requests": requests(report),
        "req_per_s": per_second(report),
        "ok": report.tally.ok,
        "over_limit": report.tally.over_limit,
        "errors": report.tally.errors(),
        "errors_by_code": report.tally.errors,
        "latency_us": latency,
    })
}

fn text_report(args: &RlsArgs, report: &Report) -> String {
    let histogram = &report.tally.latency_us;
    let mut text = String::new();
    let loop_text = match args.rate {
        Some(rate) => format!(
            "open loop at {rate} req/s, at most {} in flight",
            args.concurrency
        ),
        None => format!("closed loop, {} in flight", args.concurrency),
    };
    let _ = writeln!(
        text,
        "{} domain {}, {} key{}; {loop_text} on {} connection{}; {} (+{} warm-up)",
        args.addr,
        args.domain,
        args.keys,
        if args.keys == 1 { "" } else { "s" },
        args.connections,
        if args.connections == 1 { "" } else { "s" },
        humantime::format_duration(args.duration),
        humantime::format_duration(args.warmup),
    );
    let _ = writeln!(
        text,
        "requests    {} in {:.2}s ({:.0} req/s)",
        requests(report),
        report.elapsed.as_secs_f64(),
        per_second(report)
    );
    let _ = writeln!(text, "ok          {}", report.tally.ok);
    let _ = writeln!(text, "over_limit  {}", report.tally.over_limit);
    let _ = writeln!(text, "errors      {}", report.tally.errors());
    for (code, count) in &report.tally.errors {
        let _ = writeln!(text, "  {code}: {count}");
    }
    let mut latency = String::from("latency µs ");
    for (name, quantile) in PERCENTILES {
        let _ = write!(
            latency,
            " {}={}",
            name.replace('_', "."),
            histogram.value_at_quantile(quantile)
        );
    }
    let _ = write!(latency, " max={}", histogram.max());
    let _ = writeln!(text, "{latency}");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_replaces_every_k_in_values() {
        let template = parse_template("user={k},path=/a/{k}/b{k}x,plain=v").unwrap();
        let descriptor = template.render(42);
        let text: Vec<_> = descriptor
            .entries
            .iter()
            .map(|e| format!("{}={}", e.key, e.value))
            .collect();
        assert_eq!(text, ["user=42", "path=/a/42/b42x", "plain=v"]);
    }

    #[test]
    fn an_empty_value_is_allowed_but_not_an_empty_key_or_a_missing_equals() {
        let descriptor = parse_template("k=").unwrap().render(0);
        assert_eq!(descriptor.entries[0].value, "");
        assert!(matches!(
            parse_template("=v"),
            Err(CommandError::Usage(message)) if message.contains("a key is empty")
        ));
        assert!(matches!(
            parse_template("user"),
            Err(CommandError::Usage(message)) if message.contains("is not key=value")
        ));
    }
}
