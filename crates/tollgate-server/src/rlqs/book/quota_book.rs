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
use std::time::Duration;
use tollgate_core::Timestamp;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use parking_lot::Mutex;
use tollgate_core::fair_share::{Leftover, steady_shares};
use tollgate_rules::RuleSet;
use tonic::Status;

use super::super::bucket::{Policy, descriptor, policy};
use super::super::budget::PAY_TICK;
use super::super::payment::Balance;
use super::changes::{BucketKey, Changes};
use super::counter::{Departed, Inner, Reading, Reporter, Shared};
use super::demand::estimate;
use super::envoy_bucket::{protobuf_duration, token_bucket};
use super::fleet::fleet_split;
use super::options::{RlqsOptions, RlqsStats};
use super::stream::{Assignment, Outbox, Stream, StreamBucket, StreamId};

/// The buckets of every connected Envoy and their shares (see the module docs).
#[derive(Debug)]
pub struct QuotaBook {
    pub(super) inner: Mutex<Inner>,
    pub(super) options: RlqsOptions,
    pub(super) stats: RlqsStats,
    /// This instance's id on the claims board ([`super::fleet`]).
    pub(super) instance: u64,
}

impl QuotaBook {
    /// An empty book with these bounds.
    pub fn new(options: RlqsOptions) -> Self {
        QuotaBook {
            inner: Mutex::new(Inner::default()),
            options,
            stats: RlqsStats::default(),
            instance: Self::random_instance(),
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

    /// Takes one usage report of stream `id`, read at `now` (the clock the
    /// payment rounds run on), and splits the shares again; the answer to
    /// the report and every share that moves wait in the [`Changes`] until
    /// their fresh buckets are paid for ([`QuotaBook::apply`]). An error
    /// ends the stream (its status names the problem).
    pub fn report(
        &self,
        id: StreamId,
        report: RateLimitQuotaUsageReports,
        rules: &RuleSet,
        now: Timestamp,
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
        let mut pending: Vec<(Vec<u8>, StreamId)> = Vec::new();
        for reading in readings {
            let previous = stream.buckets.get(&reading.key).and_then(|b| b.reported);
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
                        covered: None,
                        last_round: None,
                        owed: Arc::new(()),
                        domain: String::new(),
                        entries: Vec::new(),
                        fleet: Vec::new(),
                        spare: 0,
                    });
                    // The bucket's first report says nothing of its rate yet.
                    // The time since the last report as read here, but never
                    // less than the report says it covers: a report read late
                    // (the service busy) leaves the next one a short gap here,
                    // and its demand would read high and take the others' share.
                    let known = shared.reporters.get(&id);
                    let before = known.and_then(|r| Some((r.demand?, r.refused)));
                    let estimate = previous.map(|at| {
                        let elapsed = now.saturating_since(at).max(reading.elapsed);
                        // Refusals while it had no share, or a share that
                        // moved, say nothing of what the split held back.
                        let held = known
                            .and_then(|r| r.held_since)
                            .is_some_and(|since| since <= at);
                        let denied = if held { reading.denied } else { 0 };
                        estimate(reading.arrived, denied, elapsed, before, &rate)
                    });
                    shared.rate = rate;
                    shared.domain.clone_from(&report.domain);
                    shared.entries.clone_from(&reading.key);
                    let reporter = shared.reporters.entry(id).or_insert(Reporter {
                        demand: None,
                        refused: 0,
                        hungry: false,
                        held_since: None,
                        share: None,
                        tokens: 0,
                        wanted: 0,
                        departed: None,
                    });
                    if let Some(e) = estimate {
                        reporter.demand = Some(e.demand);
                        reporter.refused = e.refused;
                        reporter.hungry = e.hungry;
                    }
                    touched.insert(counter.clone());
                    (Assignment::Share(0), Some(counter))
                }
            };
            if new {
                // A new bucket starts with a full token bucket: paid for like a change.
                if let Some(counter) = &counter {
                    pending.push((counter.clone(), id));
                }
                *buckets += 1;
            }
            stream.put(
                reading.key.clone(),
                StreamBucket {
                    id: reading.id,
                    counter,
                    policy: assignment,
                    reported: Some(now),
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
            self.rebalance(&mut inner, &counter, &mut pending);
        }
        Ok(self.changes(
            &inner,
            Some((id, answered)),
            Vec::new(),
            pending,
            now,
            false,
        ))
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
                Ok(Reading {
                    id,
                    key,
                    policy,
                    arrived: usage
                        .num_requests_allowed
                        .saturating_add(usage.num_requests_denied),
                    denied: usage.num_requests_denied,
                    elapsed: usage.time_elapsed.map_or(Duration::ZERO, |d| {
                        Duration::new(
                            u64::try_from(d.seconds).unwrap_or(0),
                            u32::try_from(d.nanos).unwrap_or(0).min(999_999_999),
                        )
                    }),
                })
            })
            .collect()
    }

    /// Forgets stream `id` at `now`. Its Envoy may live on with the
    /// assignments last sent to it until their time to live runs out (a
    /// stream ends alike when its Envoy dies and when the connection
    /// breaks): each share in force stays reserved — paid every round, held
    /// out of the split, its buckets counted against `--rlqs-max-buckets` —
    /// until then; a share of nothing, or one already lapsed,
    /// goes at once. Then the refills it prepaid come back to the counter's
    /// balance and its share goes to the others sharing its buckets as soon
    /// as they are paid (the [`Changes`]).
    pub fn close(&self, id: StreamId, now: Timestamp) -> Changes {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let Some(stream) = inner.streams.remove(&id) else {
            return Changes::default();
        };
        // The last assignment sent lapses a time to live after it was sent
        // (and a round later, for the time the payment took before it went).
        let lapses = stream.sent.map(|sent| {
            sent.saturating_add(self.options.assignment_ttl)
                .saturating_add(PAY_TICK)
        });
        let mut kept = 0;
        let mut pending = Vec::new();
        for (counter, keys) in stream.by_counter {
            if let Some(shared) = inner.shared.get_mut(&counter) {
                let buckets = keys.len() as u64;
                match (shared.reporters.get_mut(&id), lapses) {
                    (Some(reporter), Some(until))
                        if until > now && reporter.share.unwrap_or(0) > 0 =>
                    {
                        reporter.departed = Some(Departed { until, buckets });
                        reporter.wanted = reporter.share.unwrap_or(0);
                        kept += keys.len();
                        continue;
                    }
                    _ => leave(shared, id, buckets, now),
                }
                if shared.reporters.is_empty() {
                    inner.shared.remove(&counter);
                    continue;
                }
            }
            self.rebalance(inner, &counter, &mut pending);
        }
        inner.buckets = inner
            .buckets
            .saturating_sub(stream.buckets.len().saturating_sub(kept));
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
        self.changes(inner, None, Vec::new(), pending, now, false)
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
    pub fn fail(&self, id: StreamId, status: Status, now: Timestamp) -> Changes {
        if let Some(stream) = self.inner.lock().streams.get(&id) {
            let _ = stream.outbox.try_send(Err(status));
        }
        self.close(id, now)
    }

    /// Splits `counter`'s rate again: every reporter whose share in force
    /// differs from what the split now wants goes into `pending`, to move
    /// once paid for (falls and growths alike, the reporter's or another's).
    ///
    /// Each claims its demand and a twentieth more (room for its demand to
    /// wobble before its next report, five seconds away with Envoy 1.40),
    /// at least `⌊R' / 20n⌋` and one so a quiet Envoy can start, or an equal part
    /// before its rate shows (`n` Envoys on the counter over the fleet);
    /// the split is max-min fair ([`tollgate_core::fair_share`]) among
    /// every Envoy of the fleet on the counter ([`super::fleet`]) over
    /// `R' = R − ⌊R / 40⌋`: the
    /// fortieth left in the counter absorbs the jitter of the payment
    /// rounds against a refilling counter, and the rate no claim needs is
    /// left to the RLS callers and other instances on the same budget.
    pub(super) fn rebalance(
        &self,
        inner: &mut Inner,
        counter: &[u8],
        pending: &mut Vec<(Vec<u8>, StreamId)>,
    ) {
        let Some(shared) = inner.shared.get_mut(counter) else {
            return;
        };
        // A departed Envoy's share is out of the split: it can no longer be told.
        let reserved = shared
            .reporters
            .values()
            .filter(|r| r.departed.is_some())
            .filter_map(|r| r.share)
            .fold(0u64, u64::saturating_add);
        let live: Vec<u64> = claims(shared)
            .into_iter()
            .zip(shared.reporters.values())
            .filter(|(_, r)| r.departed.is_none())
            .map(|(claim, _)| claim)
            .collect();
        // Each reporter's max-min fair share over every Envoy of the fleet
        // sharing the counter, and the rate the other instances' Envoys leave.
        let (fair, room) = fleet_split(
            shared_capacity(shared.rate.requests).saturating_sub(reserved),
            &live,
            &shared.fleet,
        );
        let held: Vec<Option<u64>> = shared
            .reporters
            .values()
            .filter(|r| r.departed.is_none())
            // (`fair` is in the order of `live`: the same reporters.)
            .zip(&fair)
            // A growth under way holds what it grows to while the split
            // still wants the share in force or more: one that went out
            // short of it (within a tenth, as far as a round paid) goes on
            // to it, and is not kept short by the tenth below.
            .map(|(r, &fair)| {
                r.share.map(|share| {
                    if r.wanted > share && fair >= share {
                        r.wanted
                    } else {
                        share
                    }
                })
            })
            .collect();
        let fair: Vec<Option<u64>> = fair.into_iter().map(Some).collect();
        // A share within a tenth of the one in force keeps it, up or down:
        // Envoy restarts a token bucket full whenever its settings change.
        // (The fair shares fit in `room`, so its max-min split of them is
        // each its own.)
        let shares = steady_shares(room, &fair, &held, Leftover::Unassigned);
        let live = shared
            .reporters
            .iter_mut()
            .filter(|(_, r)| r.departed.is_none());
        for ((&stream, reporter), kept) in live.zip(shares) {
            reporter.wanted = kept;
            if reporter.share != Some(kept) {
                pending.push((counter.to_vec(), stream));
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
                let (share, tokens) = shared
                    .and_then(|s| s.reporters.get(&stream))
                    .map_or((0, 0), |r| (r.share.unwrap_or(0), r.tokens));
                match shared {
                    Some(shared) if share > 0 => {
                        Strategy::TokenBucket(token_bucket(&shared.rate, share, tokens))
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

/// What each reporter of `shared` claims: its demand and a twentieth more, at
/// least `⌊R' / 20n⌋` and one, or an equal part `⌊R' / n⌋` before its rate shows,
/// `n` the Envoys of the fleet on the counter as last heard (see
/// [`QuotaBook::rebalance`]).
pub(super) fn claims(shared: &Shared) -> Vec<u64> {
    let capacity = shared_capacity(shared.rate.requests);
    let envoys = (shared.reporters.len() + shared.fleet.len()).max(1) as u64;
    let (floor, equal) = ((capacity / (20 * envoys)).max(1), capacity / envoys);
    shared
        .reporters
        .values()
        .map(|r| match (r.departed, r.share) {
            // A departed Envoy holds what it was last sent.
            (Some(_), share) => share.unwrap_or(0),
            // Held back by its share: what it wants beyond it is unknown.
            (None, _) if r.hungry => capacity,
            (None, _) => r
                .demand
                .map_or(equal, |d| d.saturating_add(d.div_ceil(20)).max(floor)),
        })
        .collect()
}

/// Takes reporter `id`, whose `buckets` on `shared` enforced its share, out
/// of `shared` at `now`: the refills its share prepaid beyond now come back
/// to the balance.
pub(super) fn leave(shared: &mut Shared, id: StreamId, buckets: u64, now: Timestamp) {
    if let Some(gone) = shared.reporters.remove(&id) {
        let ahead = shared
            .covered
            .map_or(0, |covered| covered.saturating_since(now).as_nanos());
        let share = u128::from(gone.share.unwrap_or(0));
        shared.balance.refund(share * u128::from(buckets) * ahead);
    }
}

/// What the split shares of a rule's rate `requests`: all but a fortieth (see [`QuotaBook::rebalance`]).
pub(super) fn shared_capacity(requests: u64) -> u64 {
    requests - requests / 40
}
