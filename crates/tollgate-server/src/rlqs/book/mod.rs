//! The quota book: every bucket the connected Envoys report, each shared bucket's rate split among its reporters, and the assignments to send when the split changes.
//!
//! A stream reports usage per bucket; the book reads each bucket id against
//! the rules ([`super::bucket`]) and, for a shared bucket (same rule
//! counter, any number of Envoys), records the reporter's demand per window
//! `d = (allowed + denied) × W / max(elapsed, 1 s)` and splits the rate with
//! [`tollgate_core::fair_share`]. An Envoy's share is at most twice its
//! demand (or the floor; its fair share at its first report, which says
//! nothing of its rate yet): the budget is shared with RLS callers and
//! other instances, so the spare rate is left to them. Each Envoy gets a
//! token bucket of its share `s`: `max_tokens = ⌊burst × s / R⌋` (at least
//! 1), `tokens_per_fill = ⌊s × F / W⌋` every `F = ⌈W⌉` whole seconds
//! (Envoy 1.40 reads the fill interval in whole seconds), so its rate is at
//! most `s` per window.
//!
//! A share that falls is sent at once to its stream; one that grows is
//! decided at that Envoy's own report and sent once its fresh bucket is
//! paid for from the shared budget ([`changes`]), and one that moves by less
//! than a tenth, up or down, keeps the assignment in force
//! ([`steady_shares`]; Envoy keeps a token bucket's state only while its
//! settings stay the same, and restarts it full on a change). So the rates in
//! force never sum past the rule's, but for the moment a decrease pushed
//! to one Envoy and the increase it pays for are both on the wire, and an
//! Envoy whose outbox is full (a client not reading) catches up at its next
//! report. Every report is answered with the reporter's assignments, which
//! renews their time to live. A stream that ends gives its shares back.
//!
//! Every operation costs in proportion to what it changes, never to a
//! stream's buckets times its changes: a report reads its buckets against
//! the rules before the book is locked, and each stream indexes its
//! buckets by counter ([`Stream::on_counter`]), so how many of its buckets
//! share a counter, and which, is one lookup.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tollgate_core::Timestamp;
use tollgate_core::fair_share::steady_shares;
use tollgate_rules::RuleSet;
use tonic::Status;

use super::bucket::{Policy, Rate, descriptor, policy};
use super::payment::Balance;

mod changes;

use changes::BucketKey;
pub use changes::{Changes, Dues, Payment};

/// A stream's number in the book.
pub type StreamId = u64;

/// Where a stream's responses go.
pub type Outbox = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

/// The default `--rlqs-max-buckets`: paying one tick for this many
/// buckets, each on its own counter, takes about a tenth of one core (about
/// 10 µs a bucket in memory; `benches/rlqs_tick.rs`, docs/quota.md).
pub const DEFAULT_MAX_BUCKETS: usize = 8192;

/// The default `--rlqs-max-stream-buckets`: half the total, so that one
/// Envoy cannot take every bucket from the others.
pub const DEFAULT_MAX_STREAM_BUCKETS: usize = 4096;

/// The bounds and settings of the quota service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RlqsOptions {
    /// Streams open at once (`--rlqs-max-streams`); past it a stream is refused with RESOURCE_EXHAUSTED.
    pub max_streams: usize,
    /// Buckets tracked over all streams (`--rlqs-max-buckets`); a report past it ends its stream with RESOURCE_EXHAUSTED.
    pub max_buckets: usize,
    /// Buckets tracked for one stream (`--rlqs-max-stream-buckets`); a report past it ends its stream with RESOURCE_EXHAUSTED.
    pub max_stream_buckets: usize,
    /// Entries in one bucket id (the RLS `--max-descriptor-entries`).
    pub max_entries: usize,
    /// How long an assignment holds without a renewal (`--rlqs-assignment-ttl`).
    pub assignment_ttl: Duration,
}

impl Default for RlqsOptions {
    fn default() -> Self {
        RlqsOptions {
            max_streams: 1024,
            max_buckets: DEFAULT_MAX_BUCKETS,
            max_stream_buckets: DEFAULT_MAX_STREAM_BUCKETS,
            max_entries: tollgate_protocol::rls::RequestCaps::default().max_descriptor_entries,
            assignment_ttl: Duration::from_secs(30),
        }
    }
}

/// Counts for `/metrics`.
#[derive(Debug, Default)]
pub struct RlqsStats {
    /// Streams open now.
    pub streams: AtomicU64,
    /// Buckets tracked now.
    pub buckets: AtomicU64,
    /// The most buckets one stream tracks now.
    pub stream_buckets: AtomicU64,
    /// Shared rule counters in the book now: each is paid for every tick.
    pub counters: AtomicU64,
    /// Assignments sent (answers to reports and pushes).
    pub assignments: AtomicU64,
    /// Requests the Envoys reported allowed.
    pub reported_allowed: AtomicU64,
    /// Requests the Envoys reported denied.
    pub reported_denied: AtomicU64,
    /// Units taken from the shared budget to pay for the shares in force.
    pub units_taken: AtomicU64,
    /// Shares cut because the shared budget had less than they cost.
    pub shares_cut: AtomicU64,
}

/// What the book tells one Envoy about one bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Assignment {
    Allow,
    Deny,
    /// A share of the bucket's rate, per window.
    Share(u64),
}

/// One bucket of one stream.
#[derive(Debug)]
struct StreamBucket {
    id: BucketId,
    /// The shared bucket's counter, when the bucket is shared.
    counter: Option<Vec<u8>>,
    policy: Assignment,
}

/// One Envoy's stream.
#[derive(Debug)]
struct Stream {
    domain: Option<String>,
    outbox: Outbox,
    /// By the bucket id's sorted entries.
    buckets: HashMap<BucketKey, StreamBucket>,
    /// The keys of the buckets on each shared counter, kept with `buckets`.
    by_counter: HashMap<Vec<u8>, HashSet<BucketKey>>,
}

impl Stream {
    fn new(outbox: Outbox) -> Self {
        Stream {
            domain: None,
            outbox,
            buckets: HashMap::new(),
            by_counter: HashMap::new(),
        }
    }

    /// Sets the bucket `key` (indexed by its counter); whether it is new.
    fn put(&mut self, key: BucketKey, bucket: StreamBucket) -> bool {
        let counter = bucket.counter.clone();
        let old = self.buckets.insert(key.clone(), bucket);
        let old_counter = old.as_ref().and_then(|b| b.counter.as_ref());
        if old_counter != counter.as_ref() {
            if let Some(old_counter) = old_counter
                && let Some(keys) = self.by_counter.get_mut(old_counter)
            {
                keys.remove(&key);
                if keys.is_empty() {
                    self.by_counter.remove(old_counter);
                }
            }
            if let Some(counter) = counter {
                self.by_counter.entry(counter).or_default().insert(key);
            }
        }
        old.is_none()
    }

    /// The keys of the buckets on `counter`.
    fn on_counter(&self, counter: &[u8]) -> Option<&HashSet<BucketKey>> {
        self.by_counter.get(counter)
    }
}

/// A reported bucket read against the rules (before the book is locked).
struct Reading {
    id: BucketId,
    key: BucketKey,
    policy: Policy,
    /// The reporter's demand per window, for a shared bucket.
    demand: u64,
}

/// A reporter of a shared bucket.
#[derive(Clone, Copy, Debug)]
struct Reporter {
    demand: u64,
    /// The share in force at that Envoy (last sent).
    share: Option<u64>,
    /// The share the split gives it; above `share`, a growth waiting for
    /// its fresh bucket to be paid for (at a report or a tick).
    wanted: u64,
}

/// A rule counter's budget and the Envoys sharing it.
#[derive(Debug)]
struct Shared {
    rate: Rate,
    reporters: BTreeMap<StreamId, Reporter>,
    /// What the shares in force prepaid from the shared budget ([`super::payment`]).
    balance: Balance,
    /// Held while the counter is in the book: a payment for it is owed only then.
    owed: Arc<()>,
    /// The domain and a bucket (as a descriptor) of the latest report on
    /// this counter: what the service checks to take units of its budget.
    domain: String,
    entries: Vec<(String, String)>,
}

#[derive(Debug, Default)]
struct Inner {
    streams: HashMap<StreamId, Stream>,
    shared: HashMap<Vec<u8>, Shared>,
    buckets: usize,
    next: StreamId,
    /// The instant the last round paid the shares in force through (none before the first).
    paid_through: Option<Timestamp>,
}

/// The buckets of every connected Envoy and their shares (see the module docs).
#[derive(Debug)]
pub struct QuotaBook {
    inner: Mutex<Inner>,
    options: RlqsOptions,
    stats: RlqsStats,
}

impl QuotaBook {
    /// An empty book with these bounds.
    pub fn new(options: RlqsOptions) -> Self {
        QuotaBook {
            inner: Mutex::new(Inner::default()),
            options,
            stats: RlqsStats::default(),
        }
    }

    /// The counts for `/metrics`.
    pub fn stats(&self) -> &RlqsStats {
        &self.stats
    }

    /// The settings it was built with.
    pub fn options(&self) -> &RlqsOptions {
        &self.options
    }

    /// Registers a new stream whose responses go to `outbox`.
    pub fn open(&self, outbox: Outbox) -> Result<StreamId, Status> {
        let mut inner = self.inner.lock();
        if inner.streams.len() >= self.options.max_streams {
            return Err(Status::resource_exhausted(format!(
                "rate limit quota streams: {} open, the most --rlqs-max-streams allows",
                inner.streams.len()
            )));
        }
        inner.next += 1;
        let id = inner.next;
        inner.streams.insert(id, Stream::new(outbox));
        self.stats
            .streams
            .store(inner.streams.len() as u64, Ordering::Relaxed);
        Ok(id)
    }

    /// Takes one usage report of stream `id` and splits the shares again;
    /// the answer to the report and the pushes of shares that fell wait in
    /// the [`Changes`] until their fresh buckets are paid for
    /// ([`QuotaBook::apply`]). An error ends the stream (its status names the problem).
    pub fn report(
        &self,
        id: StreamId,
        report: RateLimitQuotaUsageReports,
        rules: &RuleSet,
    ) -> Result<Changes, Status> {
        if report.domain.is_empty() {
            return Err(Status::invalid_argument(
                "a usage report has an empty domain",
            ));
        }
        let readings = self.read(&report.domain, report.bucket_quota_usages, rules)?;
        let mut inner = self.inner.lock();
        let Inner {
            streams,
            shared,
            buckets,
            ..
        } = &mut *inner;
        let stream = streams
            .get_mut(&id)
            .ok_or_else(|| Status::cancelled("the stream was closed"))?;
        match &stream.domain {
            None => stream.domain = Some(report.domain.clone()),
            Some(domain) if *domain != report.domain => {
                return Err(Status::invalid_argument(format!(
                    "a usage report names domain `{}` on a stream of domain `{domain}`",
                    report.domain
                )));
            }
            Some(_) => {}
        }
        let mut answered: Vec<BucketKey> = Vec::with_capacity(readings.len());
        let mut touched: HashSet<Vec<u8>> = HashSet::new();
        let mut changed: Vec<(Vec<u8>, StreamId)> = Vec::new();
        let mut grown: Vec<(Vec<u8>, StreamId)> = Vec::new();
        for reading in readings {
            let new = !stream.buckets.contains_key(&reading.key);
            if new {
                if *buckets >= self.options.max_buckets {
                    return Err(Status::resource_exhausted(format!(
                        "rate limit quota buckets: {buckets} tracked, the most --rlqs-max-buckets allows"
                    )));
                }
                if stream.buckets.len() >= self.options.max_stream_buckets {
                    return Err(Status::resource_exhausted(format!(
                        "rate limit quota buckets: {} tracked for this stream, the most --rlqs-max-stream-buckets allows",
                        stream.buckets.len()
                    )));
                }
            }
            let (assignment, counter) = match reading.policy {
                Policy::AllowAll => (Assignment::Allow, None),
                Policy::DenyAll => (Assignment::Deny, None),
                Policy::Share(rate) => {
                    let counter = rate.counter.clone();
                    let shared = shared.entry(counter.clone()).or_insert_with(|| Shared {
                        rate: rate.clone(),
                        reporters: BTreeMap::new(),
                        balance: Balance::default(),
                        owed: Arc::new(()),
                        domain: String::new(),
                        entries: Vec::new(),
                    });
                    shared.rate = rate;
                    shared.domain.clone_from(&report.domain);
                    shared.entries.clone_from(&reading.key);
                    shared
                        .reporters
                        .entry(id)
                        .and_modify(|r| r.demand = reading.demand)
                        .or_insert(Reporter {
                            demand: reading.demand,
                            share: None,
                            wanted: 0,
                        });
                    touched.insert(counter.clone());
                    (Assignment::Share(0), Some(counter))
                }
            };
            if new {
                // A new bucket starts with a full token bucket: paid for like a change.
                if let Some(counter) = &counter {
                    grown.push((counter.clone(), id));
                }
                *buckets += 1;
            }
            stream.put(
                reading.key.clone(),
                StreamBucket {
                    id: reading.id,
                    counter,
                    policy: assignment,
                },
            );
            answered.push(reading.key);
        }
        let largest = stream.buckets.len() as u64;
        self.stats.buckets.store(*buckets as u64, Ordering::Relaxed);
        self.stats
            .stream_buckets
            .fetch_max(largest, Ordering::Relaxed);
        self.stats
            .counters
            .store(shared.len() as u64, Ordering::Relaxed);
        for counter in touched {
            self.rebalance(&mut inner, &counter, id, &mut changed, &mut grown);
        }
        Ok(self.changes(&inner, Some((id, answered)), changed, grown))
    }

    /// Reads each usage of a report of `domain` against `rules` (no lock
    /// held): its bucket's key, what applies and the reporter's demand.
    fn read(
        &self,
        domain: &str,
        usages: Vec<BucketQuotaUsage>,
        rules: &RuleSet,
    ) -> Result<Vec<Reading>, Status> {
        usages
            .into_iter()
            .map(|mut usage| {
                self.stats
                    .reported_allowed
                    .fetch_add(usage.num_requests_allowed, Ordering::Relaxed);
                self.stats
                    .reported_denied
                    .fetch_add(usage.num_requests_denied, Ordering::Relaxed);
                let id = usage.bucket_id.take().unwrap_or_default();
                let entries = descriptor(&id.bucket, self.options.max_entries)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                let policy = policy(rules, domain, &entries);
                let key: BucketKey = entries
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect();
                let demand = match &policy {
                    Policy::Share(rate) => demand(&usage, rate),
                    _ => 0,
                };
                Ok(Reading {
                    id,
                    key,
                    policy,
                    demand,
                })
            })
            .collect()
    }

    /// Forgets stream `id`: its shares go back to the others sharing its
    /// buckets (a share that falls meanwhile waits in the [`Changes`]).
    pub fn close(&self, id: StreamId) -> Changes {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let Some(stream) = inner.streams.remove(&id) else {
            return Changes::default();
        };
        inner.buckets = inner.buckets.saturating_sub(stream.buckets.len());
        let mut changed = Vec::new();
        for counter in stream.by_counter.into_keys() {
            if let Some(shared) = inner.shared.get_mut(&counter) {
                shared.reporters.remove(&id);
                if shared.reporters.is_empty() {
                    inner.shared.remove(&counter);
                    continue;
                }
            }
            self.rebalance(inner, &counter, id, &mut changed, &mut Vec::new());
        }
        let largest = inner.streams.values().map(|s| s.buckets.len()).max();
        self.stats
            .streams
            .store(inner.streams.len() as u64, Ordering::Relaxed);
        self.stats
            .buckets
            .store(inner.buckets as u64, Ordering::Relaxed);
        self.stats
            .stream_buckets
            .store(largest.unwrap_or(0) as u64, Ordering::Relaxed);
        self.stats
            .counters
            .store(inner.shared.len() as u64, Ordering::Relaxed);
        self.changes(inner, None, changed, Vec::new())
    }

    /// Ends every stream (shutdown): their response streams finish.
    pub fn close_all(&self) {
        let mut inner = self.inner.lock();
        *inner = Inner {
            next: inner.next,
            ..Inner::default()
        };
        self.stats.streams.store(0, Ordering::Relaxed);
        self.stats.buckets.store(0, Ordering::Relaxed);
        self.stats.stream_buckets.store(0, Ordering::Relaxed);
        self.stats.counters.store(0, Ordering::Relaxed);
    }

    /// Ends stream `id` with `status` (then as [`QuotaBook::close`]).
    pub fn fail(&self, id: StreamId, status: Status) -> Changes {
        if let Some(stream) = self.inner.lock().streams.get(&id) {
            let _ = stream.outbox.try_send(Err(status));
        }
        self.close(id)
    }

    /// Splits `counter`'s rate again: `reporting`'s share falls at once
    /// (into `changed`) or, new or larger, waits in `grown` for its fresh
    /// bucket to be paid; every other reporter whose share fell goes into `changed`.
    fn rebalance(
        &self,
        inner: &mut Inner,
        counter: &[u8],
        reporting: StreamId,
        changed: &mut Vec<(Vec<u8>, StreamId)>,
        grown: &mut Vec<(Vec<u8>, StreamId)>,
    ) {
        let Some(shared) = inner.shared.get_mut(counter) else {
            return;
        };
        let demands: Vec<u64> = shared.reporters.values().map(|r| r.demand).collect();
        let held: Vec<Option<u64>> = shared.reporters.values().map(|r| r.share).collect();
        // A share within a tenth of the one in force keeps it, up or down:
        // Envoy restarts a token bucket full whenever its settings change.
        let shares = steady_shares(shared.rate.requests, &demands, &held);
        // Room to double, not the spare rate: the budget is shared with RLS
        // callers and other instances, and the shares in force are paid for.
        // A first report says nothing of the rate yet: its fair share.
        let floor = shared.rate.requests / (4 * shared.reporters.len() as u64).max(1);
        for ((&stream, reporter), kept) in shared.reporters.iter_mut().zip(shares) {
            let kept = match reporter.share {
                Some(_) if stream == reporting => {
                    kept.min(reporter.demand.saturating_mul(2).max(floor))
                }
                _ => kept,
            };
            if stream == reporting {
                reporter.wanted = kept;
                match reporter.share {
                    Some(old) if kept == old => {}
                    Some(old) if kept < old => {
                        reporter.share = Some(kept);
                        changed.push((counter.to_vec(), stream));
                    }
                    _ => grown.push((counter.to_vec(), stream)),
                }
            } else if reporter.share.is_some_and(|old| kept < old) {
                // Another Envoy's share grows only at its own report (its
                // answer); one that falls is pushed now.
                reporter.share = Some(kept);
                reporter.wanted = reporter.wanted.min(kept);
                changed.push((counter.to_vec(), stream));
            }
        }
    }

    /// The assignment of `bucket` at stream `stream`, as sent.
    fn action(&self, inner: &Inner, stream: StreamId, bucket: &StreamBucket) -> BucketAction {
        let strategy = match (bucket.policy, &bucket.counter) {
            (Assignment::Allow, _) => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
            (Assignment::Deny, _) => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
            (Assignment::Share(_), Some(counter)) => {
                let shared = inner.shared.get(counter);
                let share = shared
                    .and_then(|s| s.reporters.get(&stream))
                    .and_then(|r| r.share)
                    .unwrap_or(0);
                match shared {
                    Some(shared) if share > 0 => {
                        Strategy::TokenBucket(token_bucket(&shared.rate, share))
                    }
                    _ => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
                }
            }
            (Assignment::Share(_), None) => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        };
        BucketAction {
            bucket_id: Some(bucket.id.clone()),
            bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
                assignment_time_to_live: Some(protobuf_duration(self.options.assignment_ttl)),
                rate_limit_strategy: Some(RateLimitStrategy {
                    strategy: Some(strategy),
                }),
            })),
        }
    }

    /// Sends each stream its actions, one response per stream; a full outbox drops it (the stream catches up at its next report).
    fn send(&self, inner: &Inner, pushes: HashMap<StreamId, Vec<BucketAction>>) {
        for (stream, actions) in pushes {
            if actions.is_empty() {
                continue;
            }
            let Some(s) = inner.streams.get(&stream) else {
                continue;
            };
            let count = actions.len() as u64;
            if s.outbox
                .try_send(Ok(RateLimitQuotaResponse {
                    bucket_action: actions,
                }))
                .is_ok()
            {
                self.stats.assignments.fetch_add(count, Ordering::Relaxed);
            }
        }
    }
}

/// A reporter's demand per window of `rate`: what arrived in the report's
/// interval (at least a second), scaled to the window.
fn demand(usage: &BucketQuotaUsage, rate: &Rate) -> u64 {
    let elapsed = usage
        .time_elapsed
        .map_or(0, |d| u64::try_from(d.seconds).unwrap_or(0))
        .max(1);
    let arrived = usage
        .num_requests_allowed
        .saturating_add(usage.num_requests_denied);
    u64::try_from(
        u128::from(arrived) * rate.window.as_nanos() / (u128::from(elapsed) * 1_000_000_000),
    )
    .unwrap_or(u64::MAX)
}

/// The tokens Envoy starts a token bucket of `share` with (it starts full):
/// `⌊burst × share / R⌋`, at least 1; none for a share of 0 (deny all).
fn fresh_tokens(rate: &Rate, share: u64) -> u64 {
    if share == 0 {
        return 0;
    }
    let tokens = u128::from(rate.burst) * u128::from(share) / u128::from(rate.requests.max(1));
    u64::try_from(tokens.max(1)).unwrap_or(u64::MAX)
}

/// Envoy's token bucket for a share of `share` requests per window of `rate`.
fn token_bucket(rate: &Rate, share: u64) -> TokenBucket {
    let window = rate.window.as_nanos().max(1);
    let fill_seconds = rate.window.as_nanos().div_ceil(1_000_000_000).max(1);
    let per_fill = u128::from(share) * fill_seconds * 1_000_000_000 / window;
    TokenBucket {
        max_tokens: u32::try_from(fresh_tokens(rate, share)).unwrap_or(u32::MAX),
        tokens_per_fill: Some(envoy_types::pb::google::protobuf::UInt32Value {
            value: u32::try_from(per_fill.max(1)).unwrap_or(u32::MAX),
        }),
        fill_interval: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: i64::try_from(fill_seconds).unwrap_or(i64::MAX),
            nanos: 0,
        }),
    }
}

fn protobuf_duration(d: Duration) -> envoy_types::pb::google::protobuf::Duration {
    envoy_types::pb::google::protobuf::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests;
