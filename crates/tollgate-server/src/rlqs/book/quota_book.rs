//! The book itself: streams open and close, reports are read and split, assignments are rendered and sent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use envoy_types::pb::envoy::r#type::v3::RateLimitStrategy;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use parking_lot::Mutex;
use tollgate_core::fair_share::{Leftover, steady_shares};
use tollgate_rules::RuleSet;
use tonic::Status;

use super::super::bucket::{Policy, Rate, descriptor, policy};
use super::super::payment::Balance;
use super::changes::{BucketKey, Changes};
use super::counter::{Inner, Reading, Reporter, Shared};
use super::envoy_bucket::{protobuf_duration, token_bucket};
use super::options::{RlqsOptions, RlqsStats};
use super::stream::{Assignment, Outbox, Stream, StreamBucket, StreamId};

/// The buckets of every connected Envoy and their shares (see the module docs).
#[derive(Debug)]
pub struct QuotaBook {
    pub(super) inner: Mutex<Inner>,
    pub(super) options: RlqsOptions,
    pub(super) stats: RlqsStats,
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
        // An Envoy with no share yet has not shown its rate: a newcomer.
        let demands: Vec<Option<u64>> = shared
            .reporters
            .values()
            .map(|r| r.share.map(|_| r.demand))
            .collect();
        let held: Vec<Option<u64>> = shared.reporters.values().map(|r| r.share).collect();
        // A share within a tenth of the one in force keeps it, up or down:
        // Envoy restarts a token bucket full whenever its settings change.
        let shares = steady_shares(shared.rate.requests, &demands, &held, Leftover::Spread);
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
    pub(super) fn action(
        &self,
        inner: &Inner,
        stream: StreamId,
        bucket: &StreamBucket,
    ) -> BucketAction {
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
    pub(super) fn send(&self, inner: &Inner, pushes: HashMap<StreamId, Vec<BucketAction>>) {
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
pub(super) fn demand(usage: &BucketQuotaUsage, rate: &Rate) -> u64 {
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
