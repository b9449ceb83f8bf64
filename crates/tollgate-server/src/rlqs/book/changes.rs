//! Paying for shares before Envoys can spend them: a changed assignment's fresh bucket when it is sent, and the shares in force at every tick.
//!
//! Envoy starts every new assignment with a full token bucket of
//! `⌊burst × s / R⌋` tokens, then adds `s × F / W` tokens every `F`
//! seconds. Both are paid from the rule's counter in the shared store
//! (see [`super::super::payment`]) before Envoy can spend them:
//!
//! * a report that gives an Envoy a new or larger share returns
//!   [`Changes`] with what its fresh bucket costs, per counter: all its
//!   tokens for a first assignment, the difference from the old bucket for
//!   a larger one (the old bucket's refills were paid at the ticks). The
//!   service takes the units, and [`QuotaBook::apply`] sends the
//!   assignments, a growth cut to what was paid (a first assignment to
//!   deny-all if nothing was); a growth that could not be paid waits for
//!   the next tick. A share that falls is sent at once, unpaid. Envoy
//!   restarts a bucket full on every change, so a change can hand back up
//!   to the old bucket's tokens if they were spent: the bound in
//!   `docs/quota.md` counts them;
//! * every tick, [`QuotaBook::dues`] says what the shares in force cost
//!   from the instant the last round paid through to a tick ahead (more
//!   than a tick when the round runs late: [`super::super::payment::interval`])
//!   and [`QuotaBook::settle`] credits what the service took;
//!   where it falls short, the shares that fit it stay (largest first) and
//!   the others go to deny-all, so no cut hands out a fresh bucket nobody
//!   paid for; then the growths still waiting try again.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;

use tollgate_core::Timestamp;

use super::super::bucket::Rate;
use super::super::payment;
use super::counter::{Inner, Shared};
use super::envoy_bucket::fresh_tokens;
use super::quota_book::QuotaBook;
use super::stream::StreamId;

/// Units of one rule's budget to take: a tick of the shares in force, or the fresh buckets of changed assignments.
#[derive(Clone, Debug)]
pub struct Payment {
    /// The rule counter.
    counter: Vec<u8>,
    /// Alive while the counter is in the book (see [`Payment::is_owed`]).
    owed: Weak<()>,
    /// The domain of the bucket to check.
    pub domain: String,
    /// A bucket on that counter, as a descriptor.
    pub entries: Vec<(String, String)>,
    /// For a tick, the shares in force, summed.
    share: u64,
    /// The units to take; 0 when nothing is owed.
    pub units: u64,
    /// For a tick, the time the shares are paid for (zero for fresh buckets).
    interval: Duration,
}

impl Payment {
    fn new(counter: &[u8], shared: &Shared, share: u64, units: u64) -> Self {
        Payment {
            counter: counter.to_vec(),
            owed: Arc::downgrade(&shared.owed),
            domain: shared.domain.clone(),
            entries: shared.entries.clone(),
            share,
            units,
            interval: Duration::ZERO,
        }
    }

    /// For a tick, the time it pays the shares in force for.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Whether its counter is still in the book: once the last stream
    /// sharing it closed, nothing more is owed and nothing is taken.
    pub fn is_owed(&self) -> bool {
        self.owed.strong_count() > 0
    }
}

/// One round's payments for the shares in force ([`QuotaBook::dues`]).
#[derive(Debug)]
pub struct Dues {
    /// One per shared counter with shares in force.
    pub payments: Vec<Payment>,
    /// The instant they pay through: a tick ahead of the round.
    through: Timestamp,
}

/// A bucket of a stream, by its entries sorted by key.
pub(super) type BucketKey = Vec<(String, String)>;

/// The reporter to answer and the buckets its report named.
pub(super) type Answer = (StreamId, Vec<BucketKey>);

/// Assignments that changed, held until their fresh buckets are paid for.
#[derive(Debug, Default)]
#[must_use = "changed assignments are sent by QuotaBook::apply"]
pub struct Changes {
    /// The reporter to answer and its buckets, by their sorted entries.
    answer: Option<Answer>,
    /// The streams whose share of a counter changed.
    changed: Vec<(Vec<u8>, StreamId)>,
    /// Those of them whose share is new or larger: their fresh buckets are paid for.
    grown: Vec<(Vec<u8>, StreamId)>,
    /// What the fresh buckets cost, one payment per counter.
    pub payments: Vec<Payment>,
}

impl QuotaBook {
    /// The [`Changes`] for `changed` shares, of which `grown` are new or
    /// larger (and the answer to `answer`'s report, if any): what the
    /// grown ones' fresh buckets cost, per counter.
    pub(super) fn changes(
        &self,
        inner: &Inner,
        answer: Option<Answer>,
        mut changed: Vec<(Vec<u8>, StreamId)>,
        mut grown: Vec<(Vec<u8>, StreamId)>,
    ) -> Changes {
        changed.sort_unstable();
        changed.dedup();
        grown.sort_unstable();
        grown.dedup();
        let mut payments: Vec<Payment> = Vec::new();
        let mut by_counter: HashMap<&[u8], usize> = HashMap::new();
        for (counter, stream) in &grown {
            let Some(shared) = inner.shared.get(counter) else {
                continue;
            };
            let in_force = shared.reporters.get(stream).and_then(|r| r.share);
            let tokens = growth_cost(&shared.rate, in_force, growth_target(shared, *stream))
                .saturating_mul(buckets_on(inner, *stream, counter));
            match by_counter.get(counter.as_slice()) {
                Some(&i) => payments[i].units = payments[i].units.saturating_add(tokens),
                None => {
                    by_counter.insert(counter, payments.len());
                    payments.push(Payment::new(counter, shared, 0, tokens));
                }
            }
        }
        Changes {
            answer,
            changed,
            grown,
            payments,
        }
    }

    /// Sends `changes` once `taken[i]` units were taken for
    /// `changes.payments[i]`: where they fall short, the grown shares of
    /// that counter are scaled down to fit, or else set to 0 (deny all).
    pub fn apply(&self, changes: Changes, taken: &[u64]) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let mut changed = changes.changed;
        let mut grown: HashMap<&[u8], Vec<StreamId>> = HashMap::new();
        for (counter, stream) in &changes.grown {
            grown.entry(counter).or_default().push(*stream);
        }
        for (payment, &units) in changes.payments.iter().zip(taken) {
            self.stats.units_taken.fetch_add(units, Ordering::Relaxed);
            // The units taken, spent on the grown shares in turn.
            let mut pool = units;
            let counter = &payment.counter;
            for stream in grown.get(counter.as_slice()).into_iter().flatten() {
                let buckets = buckets_on(inner, *stream, counter).max(1);
                let Some(shared) = inner.shared.get_mut(counter) else {
                    continue;
                };
                let target = growth_target(shared, *stream);
                let Some(reporter) = shared.reporters.get_mut(stream) else {
                    continue;
                };
                let in_force = reporter.share;
                let old_tokens = in_force.map_or(0, |old| fresh_tokens(&shared.rate, old));
                let affordable = target.min(shares_for(&shared.rate, pool / buckets + old_tokens));
                let grows = in_force.is_none_or(|old| affordable > old);
                if grows {
                    pool -= growth_cost(&shared.rate, in_force, affordable) * buckets;
                    reporter.share = Some(affordable);
                    changed.push((counter.clone(), *stream));
                    if affordable < target {
                        self.stats.shares_cut.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        let mut buckets: HashMap<StreamId, HashSet<BucketKey>> = HashMap::new();
        if let Some((stream, keys)) = changes.answer {
            buckets.entry(stream).or_default().extend(keys);
        }
        for (counter, stream) in &changed {
            if let Some(keys) = inner
                .streams
                .get(stream)
                .and_then(|s| s.on_counter(counter))
            {
                buckets
                    .entry(*stream)
                    .or_default()
                    .extend(keys.iter().cloned());
            }
        }
        let pushes: HashMap<StreamId, Vec<BucketAction>> = buckets
            .into_iter()
            .filter_map(|(stream, keys)| {
                let s = inner.streams.get(&stream)?;
                let actions = keys
                    .iter()
                    .filter_map(|k| s.buckets.get(k))
                    .map(|b| self.action(inner, stream, b))
                    .collect();
                Some((stream, actions))
            })
            .collect();
        self.send(inner, pushes);
    }

    /// What the shares in force cost, per shared counter, for a round at
    /// `now`: from the instant the last round paid through to a `tick`
    /// ahead ([`payment::interval`]); the service takes the units and passes
    /// what it got to [`QuotaBook::settle`].
    pub fn dues(&self, now: Timestamp, tick: Duration) -> Dues {
        let inner = self.inner.lock();
        let payments = inner
            .shared
            .iter()
            .filter_map(|(counter, shared)| {
                let share = in_force(&inner, counter, shared);
                let interval =
                    payment::interval(inner.paid_through, now, tick, shared.rate.memory());
                (share > 0 && !interval.is_zero()).then(|| {
                    let units = shared
                        .balance
                        .units_due(share, interval, shared.rate.window);
                    Payment {
                        interval,
                        ..Payment::new(counter, shared, share, units)
                    }
                })
            })
            .collect();
        Dues {
            payments,
            through: now.saturating_add(tick),
        }
    }

    /// Credits `taken[i]` units to `dues.payments[i]`'s counter and debits
    /// its interval of the shares; where the units fall short, the shares
    /// are cut to a split of what they cover (by demand): the [`Changes`]
    /// to pay for and apply. The shares in force are paid through the
    /// round's instant from then on (a share that was cut refills nothing).
    pub fn settle(&self, dues: Dues, taken: &[u64]) -> Changes {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        inner.paid_through = inner.paid_through.max(Some(dues.through));
        let payments = dues.payments;
        let mut changed = Vec::new();
        let mut short: HashSet<&[u8]> = HashSet::new();
        for (payment, &units) in payments.iter().zip(taken) {
            self.stats.units_taken.fetch_add(units, Ordering::Relaxed);
            let Some(shared) = inner.shared.get(&payment.counter) else {
                continue;
            };
            // Shares that fell since the dues were read cost less, never more.
            let share = in_force(inner, &payment.counter, shared).min(payment.share);
            // Each reporter's shares, once per bucket, largest first.
            let mut by_size: Vec<(StreamId, u64)> = shared
                .reporters
                .iter()
                .filter_map(|(&stream, r)| {
                    Some((
                        stream,
                        r.share? * buckets_on(inner, stream, &payment.counter),
                    ))
                })
                .filter(|(_, share)| *share > 0)
                .collect();
            by_size.sort_by_key(|&(stream, share)| (std::cmp::Reverse(share), stream));
            let Some(shared) = inner.shared.get_mut(&payment.counter) else {
                continue;
            };
            let covered = shared
                .balance
                .settle(units, share, payment.interval, shared.rate.window);
            if covered >= share {
                continue;
            }
            short.insert(&payment.counter);
            // The shares that fit what was paid stay as they are; the others
            // go to 0 (deny all). A smaller share would be a fresh bucket
            // with nothing paid for its tokens.
            let mut room = covered;
            for (stream, share) in by_size {
                if share <= room {
                    room -= share;
                    continue;
                }
                if let Some(reporter) = shared.reporters.get_mut(&stream) {
                    reporter.share = Some(0);
                    self.stats.shares_cut.fetch_add(1, Ordering::Relaxed);
                    changed.push((payment.counter.clone(), stream));
                }
            }
        }
        // Growths still waiting for their fresh buckets try again, where
        // this tick's payment did not just come short.
        let grown: Vec<(Vec<u8>, StreamId)> = inner
            .shared
            .iter()
            .filter(|(counter, _)| !short.contains(counter.as_slice()))
            .flat_map(|(counter, shared)| {
                shared
                    .reporters
                    .iter()
                    .filter(|(_, r)| r.share.is_none_or(|s| r.wanted > s))
                    .map(|(stream, _)| (counter.clone(), *stream))
            })
            .collect();
        self.changes(inner, None, changed, grown)
    }
}

/// What `stream`'s share can grow to now: what it wants, within the rate
/// less the shares in force at the others (so the shares never sum past it).
fn growth_target(shared: &Shared, stream: StreamId) -> u64 {
    let others = shared
        .reporters
        .iter()
        .filter(|(s, _)| **s != stream)
        .filter_map(|(_, r)| r.share)
        .fold(0u64, u64::saturating_add);
    let wanted = shared.reporters.get(&stream).map_or(0, |r| r.wanted);
    wanted.min(shared.rate.requests.saturating_sub(others))
}

/// What growing a share from `in_force` to `target` costs: the new
/// bucket's tokens, less the old bucket's (its refills were paid for at the
/// ticks); all of them for a first assignment.
fn growth_cost(rate: &Rate, in_force: Option<u64>, target: u64) -> u64 {
    let old = in_force.map_or(0, |share| fresh_tokens(rate, share));
    fresh_tokens(rate, target).saturating_sub(old)
}

/// The largest share whose fresh bucket costs at most `tokens` (the inverse of [`fresh_tokens`]).
fn shares_for(rate: &Rate, tokens: u64) -> u64 {
    if tokens == 0 {
        return 0;
    }
    let share = u128::from(tokens) * u128::from(rate.requests) / u128::from(rate.burst.max(1));
    u64::try_from(share).unwrap_or(u64::MAX)
}

/// The shares in force on `counter`, each once per bucket its Envoy enforces it in.
fn in_force(inner: &Inner, counter: &[u8], shared: &Shared) -> u64 {
    shared
        .reporters
        .iter()
        .filter_map(|(&stream, r)| {
            Some(r.share?.saturating_mul(buckets_on(inner, stream, counter)))
        })
        .fold(0u64, u64::saturating_add)
}

/// How many of `stream`'s buckets share `counter` (each gets the share's token bucket).
fn buckets_on(inner: &Inner, stream: StreamId, counter: &[u8]) -> u64 {
    inner
        .streams
        .get(&stream)
        .and_then(|s| s.on_counter(counter))
        .map_or(0, |keys| keys.len() as u64)
}
