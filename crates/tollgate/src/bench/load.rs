//! The load loop: workers sending requests over a measured window, back to
//! back (closed loop) or on a fixed schedule (open loop, `--rate`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;

use super::report::Report;
use super::tally::{Counts, Tally};
use crate::CommandError;

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
    pub(super) fn checked_rate(&self) -> Result<Option<f64>, CommandError> {
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
    pub(super) fn describe(&self) -> String {
        match self.rate {
            Some(rate) => format!(
                "open loop at {rate} req/s, at most {} in flight",
                self.concurrency
            ),
            None => format!("closed loop, {} in flight", self.concurrency),
        }
    }
}

/// The wall clock, the one place `tollgate bench` reads it.
#[expect(
    clippy::disallowed_methods,
    reason = "a load generator measures real elapsed time"
)]
fn now() -> Instant {
    Instant::now()
}

/// One worker's way of sending a request and awaiting its answer.
pub(super) trait Sender: Send + 'static {
    /// How the answers are counted.
    type Counts: Counts;
    /// Sends the next request and awaits its answer (or error).
    fn send(&mut self) -> impl Future<Output = <Self::Counts as Counts>::Answer> + Send;
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

/// Runs one worker per sender over `load`'s window and adds up their tallies.
pub(super) async fn drive<S: Sender>(
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
pub(super) fn runtime() -> Result<tokio::runtime::Runtime, CommandError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))
}
