//! `tollgate bench`: load generators for a rate limit service (`rls`, RLS v3
//! over gRPC) and for an HTTP server or proxy (`http`, HTTP/1.1 keep-alive).
//!
//! Both send requests for a bounded time and report the answers by kind, the
//! request rate and the latency distribution (an HDR histogram,
//! microseconds). They share the load loop, the histogram and the report.
//!
//! * **Closed loop** (default): `-c` workers spread round-robin over
//!   `--connections` connections, each sending its next request as soon as
//!   the previous one returns. Latency is from send to answer.
//! * **Open loop** (`--rate R`): request `i` is scheduled at `start + i / R`;
//!   at most `-c` requests are in flight, and a request sent late because all
//!   were busy still has its latency measured from its *scheduled* time, so a
//!   slow server cannot hide behind a slowed-down client (no coordinated
//!   omission). The schedule's resolution is the runtime's timer (about 1 ms),
//!   and that lateness counts in the latency, so prefer the closed loop for
//!   sub-millisecond percentiles.
//! * **Window.** Requests that start (closed loop) or are scheduled (open
//!   loop) during the warm-up are not counted; requests that start in the
//!   measured window are all awaited (each for at most `--timeout`) and
//!   counted, and the rate is divided by the time from the window's start
//!   until the last of them returned.
//! * **Latency** is recorded for answered requests, not for errors, whose
//!   fast failures would flatter the percentiles.
//! * **`rls` keys.** `{k}` in a descriptor value is replaced, per request, by
//!   a key index drawn uniformly from `0..keys` by a seeded pseudo-random
//!   generator (one per worker, seeded from `--seed` and the worker's
//!   number), so a run is reproducible in which keys it asks for; `--keys 1`
//!   is one hot key.
//!
//! Errors never stop a run; failing to connect at the start does (exit 1).

mod http;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate_protocol::rls::RlsClient;
use tollgate_protocol::rls::wire::{self, Entry, RateLimitDescriptor, RateLimitRequest};
use tonic::transport::{Channel, Endpoint};

use crate::CommandError;

/// The arguments of `tollgate bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// How log lines, warnings and errors are written.
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
    /// What to load.
    #[command(subcommand)]
    pub target: BenchTarget,
}

/// The services `tollgate bench` can load.
#[derive(Subcommand, Debug)]
pub enum BenchTarget {
    /// Load a rate limit service (RLS v3, gRPC) with ShouldRateLimit calls.
    Rls(RlsArgs),
    /// Load an HTTP server or proxy with GET requests over HTTP/1.1 keep-alive connections.
    Http(http::HttpArgs),
}

/// The load's shape, shared by every `tollgate bench` target.
#[derive(Args, Debug)]
pub struct LoadArgs {
    /// Requests in flight at once.
    #[arg(
        short = 'c',
        long = "concurrency",
        default_value_t = 64,
        value_name = "IN_FLIGHT"
    )]
    pub concurrency: usize,
    /// How long to measure, after the warm-up.
    #[arg(short = 'd', long, default_value = "10s", value_parser = tollgate_core::duration::parse_duration)]
    pub duration: Duration,
    /// How long to send requests before measuring (not counted).
    #[arg(long, default_value = "1s", value_parser = tollgate_core::duration::parse_duration)]
    pub warmup: Duration,
    /// Open loop: schedule this many requests per second (still at most -c in flight).
    #[arg(long, value_name = "PER_SECOND")]
    pub rate: Option<f64>,
    /// How long to wait for each connection, and for each answer.
    #[arg(long, default_value = "5s", value_parser = tollgate_core::duration::parse_duration)]
    pub timeout: Duration,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

impl LoadArgs {
    /// Checks the shape; the open loop's requests per second, if any.
    fn checked_rate(&self) -> Result<Option<f64>, CommandError> {
        if self.concurrency == 0 {
            return Err(CommandError::Usage("-c must be at least 1".to_owned()));
        }
        if self.duration.is_zero() {
            return Err(CommandError::Usage("-d must be longer than 0s".to_owned()));
        }
        if self.timeout.is_zero() {
            return Err(CommandError::Usage(
                "--timeout must be longer than 0s".to_owned(),
            ));
        }
        match self.rate {
            None => Ok(None),
            Some(rate) if rate.is_finite() && rate > 0.0 => Ok(Some(rate)),
            Some(rate) => Err(CommandError::Usage(format!(
                "--rate must be a positive number of requests per second, not {rate}"
            ))),
        }
    }

    /// How the loop runs, in words.
    fn describe(&self) -> String {
        match self.rate {
            Some(rate) => format!(
                "open loop at {rate} req/s, at most {} in flight",
                self.concurrency
            ),
            None => format!("closed loop, {} in flight", self.concurrency),
        }
    }
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
    /// HTTP/2 connections the calls are spread over.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Hits each call counts (the request's `hits_addend`; 0 means 1).
    #[arg(long, default_value_t = 0)]
    pub hits: u32,
    /// The seed of the key generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The load's shape.
    #[command(flatten)]
    pub load: LoadArgs,
}

/// Runs `tollgate bench`.
pub fn run(args: &BenchArgs) -> Result<(), CommandError> {
    match &args.target {
        BenchTarget::Rls(args) => run_rls(args),
        BenchTarget::Http(args) => http::run(args),
    }
}

/// The wall clock, the one place this module reads it.
#[expect(
    clippy::disallowed_methods,
    reason = "a load generator measures real elapsed time"
)]
fn now() -> Instant {
    Instant::now()
}

/// The answers of one kind of request, counted by outcome.
trait Counts: Default + Send + 'static {
    /// What one request comes back with.
    type Answer;
    /// Counts one answer; true when it was answered (its latency is recorded).
    fn count(&mut self, answer: Self::Answer) -> bool;
    /// Adds another worker's counts.
    fn merge(&mut self, other: Self);
    /// How many answers were counted, errors included.
    fn total(&self) -> u64;
}

/// One worker's way of sending a request and awaiting its answer.
trait Sender: Send + 'static {
    /// How the answers are counted.
    type Counts: Counts;
    /// Sends the next request and awaits its answer (or error).
    fn send(&mut self) -> impl Future<Output = <Self::Counts as Counts>::Answer> + Send;
}

/// What one worker (and then the whole run) counted.
struct Tally<C> {
    latency_us: Histogram<u64>,
    counts: C,
}

impl<C: Counts> Tally<C> {
    fn new() -> Tally<C> {
        Tally {
            // 1 µs to 1 hour, 3 significant digits.
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid histogram bounds"),
            counts: C::default(),
        }
    }

    fn record(&mut self, answer: C::Answer, latency: Duration) {
        if self.counts.count(answer) {
            let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
            self.latency_us.saturating_record(micros.max(1));
        }
    }

    fn merge(&mut self, other: Tally<C>) {
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms with the same bounds add up");
        self.counts.merge(other.counts);
    }
}

/// When requests are sent and counted; shared by every worker.
struct Window {
    /// When counting starts (the end of the warm-up).
    measure_from: Instant,
    /// When no more requests start.
    until: Instant,
    /// Open loop: the start of the schedule and the requests per second.
    schedule: Option<(Instant, f64)>,
    /// Open loop: the next request number to send.
    next_call: AtomicU64,
}

/// One worker: sends requests one after another until the window's end.
async fn worker<S: Sender>(window: Arc<Window>, mut sender: S) -> Tally<S::Counts> {
    let mut tally = Tally::new();
    loop {
        let start = match window.schedule {
            None => {
                let start = now();
                if start >= window.until {
                    break;
                }
                start
            }
            Some((origin, rate)) => {
                let call = window.next_call.fetch_add(1, Ordering::Relaxed);
                // `call / rate`, not `call * (1 / rate)`: the window then holds exactly
                // `rate × duration` requests, with no rounding error piling up.
                let offset = Duration::from_secs_f64(call as f64 / rate);
                let scheduled = origin + offset;
                if scheduled >= window.until {
                    break;
                }
                let current = now();
                if scheduled > current {
                    tokio::time::sleep(scheduled - current).await;
                }
                scheduled
            }
        };
        let answer = sender.send().await;
        let latency = now().saturating_duration_since(start);
        if start >= window.measure_from {
            tally.record(answer, latency);
        }
    }
    tally
}

/// A run's result, as printed.
struct Report<C> {
    mode: &'static str,
    elapsed: Duration,
    tally: Tally<C>,
}

impl<C: Counts> Report<C> {
    fn requests(&self) -> u64 {
        self.tally.counts.total()
    }

    fn per_second(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.requests() as f64 / seconds
        } else {
            0.0
        }
    }

    /// The latency distribution as a JSON object of microseconds.
    fn latency_json(&self) -> serde_json::Value {
        let histogram = &self.tally.latency_us;
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
        serde_json::Value::Object(latency)
    }

    /// The `requests` and `latency` lines of the text report.
    fn text_lines(&self) -> (String, String) {
        let requests = format!(
            "requests    {} in {:.2}s ({:.0} req/s)",
            self.requests(),
            self.elapsed.as_secs_f64(),
            self.per_second()
        );
        let histogram = &self.tally.latency_us;
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
        (requests, latency)
    }
}

/// Runs one worker per sender over `load`'s window and adds up their tallies.
async fn drive<S: Sender>(
    load: &LoadArgs,
    rate: Option<f64>,
    senders: Vec<S>,
) -> Result<Report<S::Counts>, CommandError> {
    let start = now();
    let measure_from = start + load.warmup;
    let window = Arc::new(Window {
        measure_from,
        until: measure_from + load.duration,
        schedule: rate.map(|rate| (start, rate)),
        next_call: AtomicU64::new(0),
    });
    let workers: Vec<_> = senders
        .into_iter()
        .map(|sender| tokio::spawn(worker(Arc::clone(&window), sender)))
        .collect();
    let mut tally = Tally::new();
    for handle in workers {
        let worker_tally = handle
            .await
            .map_err(|error| CommandError::Failed(format!("a worker failed: {error}")))?;
        tally.merge(worker_tally);
    }
    let elapsed = now().saturating_duration_since(measure_from);
    Ok(Report {
        mode: if rate.is_some() { "open" } else { "closed" },
        elapsed,
        tally,
    })
}

/// A multi-threaded runtime for a run.
fn runtime() -> Result<tokio::runtime::Runtime, CommandError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))
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

/// The answers of `bench rls`: OK, OVER_LIMIT, or an error by code.
#[derive(Default)]
struct RlsCounts {
    ok: u64,
    over_limit: u64,
    errors: BTreeMap<String, u64>,
}

impl RlsCounts {
    fn errors(&self) -> u64 {
        self.errors.values().sum()
    }
}

impl Counts for RlsCounts {
    type Answer = Result<wire::RateLimitResponse, tonic::Status>;

    fn count(&mut self, answer: Self::Answer) -> bool {
        match answer {
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
        }
    }

    fn merge(&mut self, other: RlsCounts) {
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        for (code, count) in other.errors {
            *self.errors.entry(code).or_default() += count;
        }
    }

    fn total(&self) -> u64 {
        self.ok + self.over_limit + self.errors()
    }
}

/// What every `bench rls` worker asks for.
struct RlsPlan {
    domain: String,
    templates: Vec<Template>,
    keys: u64,
    hits: u32,
}

/// One `bench rls` worker's channel and key generator.
struct RlsSender {
    plan: Arc<RlsPlan>,
    channel: Channel,
    rng: SmallRng,
}

impl Sender for RlsSender {
    type Counts = RlsCounts;

    fn send(
        &mut self,
    ) -> impl Future<Output = Result<wire::RateLimitResponse, tonic::Status>> + Send {
        let plan = &self.plan;
        let key = if plan.keys <= 1 {
            0
        } else {
            self.rng.random_range(0..plan.keys)
        };
        let request = RateLimitRequest {
            domain: plan.domain.clone(),
            descriptors: plan.templates.iter().map(|t| t.render(key)).collect(),
            hits_addend: plan.hits,
        };
        let client = RlsClient::new(self.channel.clone());
        async move { client.should_rate_limit(request).await }
    }
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
    if args.connections == 0 {
        return Err(CommandError::Usage(
            "--connections must be at least 1".to_owned(),
        ));
    }
    let rate = args.load.checked_rate()?;
    let endpoint = Endpoint::from_shared(args.addr.clone())
        .map_err(|error| CommandError::Usage(format!("bad --addr {:?}: {error}", args.addr)))?
        .connect_timeout(args.load.timeout)
        .timeout(args.load.timeout);
    let report = runtime()?.block_on(async {
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
        let plan = Arc::new(RlsPlan {
            domain: args.domain.clone(),
            templates,
            keys: args.keys,
            hits: args.hits,
        });
        let senders = (0..args.load.concurrency)
            .map(|i| RlsSender {
                plan: Arc::clone(&plan),
                channel: channels[i % channels.len()].clone(),
                rng: SmallRng::seed_from_u64(args.seed.wrapping_add(i as u64)),
            })
            .collect();
        drive(&args.load, rate, senders).await
    })?;
    if args.load.json {
        println!("{}", rls_json_report(args, &report));
    } else {
        print!("{}", rls_text_report(args, &report));
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

/// The reported percentiles: name and quantile.
const PERCENTILES: [(&str, f64); 4] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99_9", 0.999),
];

fn rls_json_report(args: &RlsArgs, report: &Report<RlsCounts>) -> serde_json::Value {
    let counts = &report.tally.counts;
    serde_json::json!({
        "mode": report.mode,
        "addr": args.addr,
        "domain": args.domain,
        "descriptors": args.descriptors,
        "keys": args.keys,
        "in_flight": args.load.concurrency,
        "connections": args.connections,
        "rate": args.load.rate,
        "duration_s": args.load.duration.as_secs_f64(),
        "warmup_s": args.load.warmup.as_secs_f64(),
        "elapsed_s": report.elapsed.as_secs_f64(),
        "requests": report.requests(),
        "req_per_s": report.per_second(),
        "ok": counts.ok,
        "over_limit": counts.over_limit,
        "errors": counts.errors(),
        "errors_by_code": counts.errors,
        "latency_us": report.latency_json(),
    })
}

fn rls_text_report(args: &RlsArgs, report: &Report<RlsCounts>) -> String {
    let counts = &report.tally.counts;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{} domain {}, {} key{}; {} on {} connection{}; {} (+{} warm-up)",
        args.addr,
        args.domain,
        args.keys,
        if args.keys == 1 { "" } else { "s" },
        args.load.describe(),
        args.connections,
        if args.connections == 1 { "" } else { "s" },
        humantime::format_duration(args.load.duration),
        humantime::format_duration(args.load.warmup),
    );
    let (requests, latency) = report.text_lines();
    let _ = writeln!(text, "{requests}");
    let _ = writeln!(text, "ok          {}", counts.ok);
    let _ = writeln!(text, "over_limit  {}", counts.over_limit);
    let _ = writeln!(text, "errors      {}", counts.errors());
    for (code, count) in &counts.errors {
        let _ = writeln!(text, "  {code}: {count}");
    }
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
