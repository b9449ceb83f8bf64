//! Paying for shares before Envoys can spend them: every changed assignment's fresh bucket when it is sent, the refills of the shares in force a tick and a margin ahead, and cuts that never hand out a bucket nobody paid for.
//!
//! Envoy starts every new assignment with a full token bucket of
//! `⌊burst × s / R⌋` tokens, whatever the bucket it replaces held, then
//! adds `s × F / W` tokens every `F` seconds. Everything Envoy could spend
//! is paid from the rule's counter in the shared store (see
//! [`super::super::payment`]) before it can spend it, from one balance per
//! counter that carries what was paid and not yet spent:
//!
//! * **A change** (a first assignment, a larger or a smaller share) costs
//!   its fresh bucket, all of it, plus the new share's refills from now to
//!   the instant the shares are paid through; the old share's refills
//!   prepaid for that time come back. The book returns the [`Changes`] with
//!   what the balance lacks, per counter; the service takes those units and
//!   [`QuotaBook::apply`] makes the changes, falls before growths, each to
//!   the largest share the balance pays for: a growth (only at a round) to
//!   its whole new rate at once, or where the balance pays less to the
//!   largest rate paid within a tenth of it (the rest at a later round),
//!   in the largest fresh bucket paid (at least two tokens, at most its
//!   full `⌊burst × s / R⌋`; none while not even that and the extra
//!   refills are paid; Envoy refills a bucket continuously up to
//!   `max_tokens`, so a smaller bucket holds bursts, not the rate), then a
//!   later round raises the bucket to its full one once that is paid in
//!   full and no other share on the counter waits for its rate (the
//!   balance carries what each round took for it); a first assignment,
//!   or one left at deny-all (retried at every report and round, before
//!   the growths), as far as it is paid (deny-all if nothing was), in its
//!   full bucket; a fall to at most its target, in its full bucket or
//!   the smaller one it held, or in two tokens while another share on the
//!   counter waits for its rate (rates before bursts: its refunded refills
//!   then pay the other's share rather than its own fresh bucket; raised
//!   later like a growth's). A fall pays for itself when the share at
//!   least halves (its refunded refills buy the smaller bucket); otherwise
//!   the margin below pays.
//! * **Every tick**, [`QuotaBook::dues`] says what the refills of the shares
//!   in force cost from the instant they are paid through to a tick and a
//!   margin of one more tick ahead ([`super::super::payment::span`]), and
//!   [`QuotaBook::settle`] credits what the service took. A short round
//!   spends the margin and cuts nothing while what is paid reaches the
//!   next round and half a tick more (time for that round to come late
//!   in). Only below that are the shares cut: to the largest total whose changed buckets and
//!   refills through the next round and the margin the balance (and the
//!   refills prepaid beyond now) pays for, split max-min among the shares in force,
//!   so the smaller shares stay as they are and only the larger ones get
//!   new (paid) buckets. Then the growths still waiting try again.
//! * **With other instances on the counter** (the claims board), an
//!   instance takes at most, per window, what the other instances' Envoys'
//!   fair shares leave of `R'` (carried from round to round up to a
//!   window's worth): the refills of its shares in force first, its
//!   growths only the rest. The other instances pay their Envoys' refills from the same
//!   counter, maybe later in the same window: a growth that took all that
//!   was left would leave their rounds short and cut shares their Envoys
//!   are using, though the counter could pay every share in force.
//!
//! So at every instant the tokens an Envoy could have been given — fresh
//! buckets and refills — were taken from the counter before: the Envoys
//! of a rule admit at most what its counter gave them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;

use tollgate_core::Timestamp;
use tollgate_core::fair_share::{Leftover, fair_shares};

use super::super::budget::PAY_TICK;
use super::super::payment;
use super::counter::{Inner, Shared};
use super::dues::{Dues, Payment};
use super::envoy_bucket::fresh_tokens;
use super::fleet::fleet_split;
use super::quota_book::{QuotaBook, claims, leave, shared_capacity};
use super::stream::StreamId;

/// A bucket of a stream, by its entries sorted by key.
pub(super) type BucketKey = Vec<(String, String)>;

/// The reporter to answer and the buckets its report named.
pub(super) type Answer = (StreamId, Vec<BucketKey>);

/// Assignments to change once paid for, and the answer to a report.
#[derive(Debug, Default)]
#[must_use = "changed assignments are sent by QuotaBook::apply"]
pub struct Changes {
    /// The reporter to answer and its buckets, by their sorted entries.
    answer: Option<Answer>,
    /// Assignments that changed already (a cut at a tick): sent as they are.
    changed: Vec<(Vec<u8>, StreamId)>,
    /// The reporters whose share is to move to what the split wants, once paid.
    pending: Vec<(Vec<u8>, StreamId)>,
    /// What the balances lack for them, one payment per counter.
    pub payments: Vec<Payment>,
    /// The instant they were priced at.
    now: Timestamp,
    /// Streams whose assignments are sent again as they are, before they
    /// lapse (at a round; [`super::renewal`]).
    pub(super) renew: Vec<StreamId>,
}

/// What moving one reporter's share from `old` to `new`, in fresh token
/// buckets of `tokens`, costs and gives back, in unit·ns: the fresh
/// buckets and the new share's refills to the instant the counter is paid
/// through; the old share's refills for that time. On a counter with no
/// share in force, the refills are paid through the next round ([`cover`]).
fn price(
    shared: &Shared,
    old: Option<u64>,
    (new, tokens): (u64, u64),
    buckets: u64,
    now: Timestamp,
) -> (u128, u128) {
    let window = shared.rate.window.as_nanos().max(1);
    let ahead = cover(shared, now).saturating_since(now).as_nanos();
    let buckets = u128::from(buckets);
    let cost = (u128::from(tokens) * window + u128::from(new) * ahead) * buckets;
    let refund = u128::from(old.unwrap_or(0)) * ahead * buckets;
    (cost, refund)
}

/// Whether a reporter's move to `wanted` from `share` is a fall (or a first assignment of nothing).
fn falls(share: Option<u64>, wanted: u64) -> bool {
    share.is_some_and(|old| wanted < old)
}

/// The smallest bucket a growth or a fall is sent in (or its full one, if
/// smaller). Envoy refills continuously up to `max_tokens`; with one
/// token, a hungry Envoy's bucket reaches its cap between requests and the
/// refill past it is lost (measured with Envoy 1.40: 23 to 25 of a share
/// of 28 admitted a second at 100 requests a second); with two, a request
/// finds a token before the cap.
const LEAST_TOKENS: u64 = 2;

/// [`LEAST_TOKENS`], or `full` if smaller.
fn least_tokens(full: u64) -> u64 {
    full.min(LEAST_TOKENS)
}

/// Whether a reporter holds no token bucket: no assignment yet, or a share
/// of 0 (deny all). Its next share is a first one at Envoy, and it moves
/// as one: between rounds too, as far as paid.
fn unassigned(share: Option<u64>) -> bool {
    share.unwrap_or(0) == 0
}

impl QuotaBook {
    /// The [`Changes`] for the `pending` reporters (and the answer to
    /// `answer`'s report, if any), priced at `now`: what each counter's
    /// balance lacks to move them all to their targets. Growths only at a
    /// `round`: between rounds only falls and first assignments move (a
    /// growth paid between two rounds would take the units of a fixed
    /// window the next round's refills need; it waits a tick at most).
    pub(super) fn changes(
        &self,
        inner: &Inner,
        answer: Option<Answer>,
        changed: Vec<(Vec<u8>, StreamId)>,
        mut pending: Vec<(Vec<u8>, StreamId)>,
        now: Timestamp,
        round: bool,
    ) -> Changes {
        pending.sort_unstable();
        pending.dedup();
        pending.retain(|(counter, stream)| {
            round
                || inner
                    .shared
                    .get(counter)
                    .and_then(|s| s.reporters.get(stream))
                    .is_some_and(|r| unassigned(r.share) || falls(r.share, r.wanted))
        });
        // Per counter: the cost, the refund, and whether a share moves (not only a bucket raised).
        let mut costs: HashMap<&[u8], (u128, u128, bool)> = HashMap::new();
        for (counter, stream) in &pending {
            let Some(shared) = inner.shared.get(counter) else {
                continue;
            };
            let Some(reporter) = shared.reporters.get(stream) else {
                continue;
            };
            let target = target(shared, *stream, true);
            let full = fresh_tokens(&shared.rate, target);
            if reporter.share == Some(target) && reporter.tokens >= full {
                continue;
            }
            // Priced (and taken for) in full buckets: what a growth or a
            // raise does not spend now the balance carries to the next round.
            let buckets = buckets_on(inner, *stream, counter);
            let (cost, refund) = price(shared, reporter.share, (target, full), buckets, now);
            let sum = costs.entry(counter.as_slice()).or_default();
            let moves = reporter.share != Some(target);
            *sum = (sum.0 + cost, sum.1 + refund, sum.2 || moves);
        }
        let payments = costs
            .into_iter()
            .filter_map(|(counter, (cost, refund, moves))| {
                let shared = inner.shared.get(counter)?;
                let mut balance = shared.balance;
                balance.refund(refund);
                let mut units = balance.units_for(cost, shared.rate.window);
                if !moves && !shared.fleet.is_empty() {
                    // Only buckets to raise, on a counter other instances
                    // pay from: a raise takes nothing of its own there (it
                    // would take what is left of each window for as long
                    // as it waits, tens of seconds, where the other
                    // instances' rounds and this one's top-ups pay); it
                    // goes once the balance pays it.
                    units = 0;
                }
                if round && !shared.fleet.is_empty() {
                    // Other instances pay their Envoys' refills from the
                    // same counter, maybe later in this window: a growth
                    // takes only what the fleet's shares leave.
                    let window = shared.rate.window.as_nanos().max(1);
                    units = units.min(u64::try_from(shared.spare / window).unwrap_or(u64::MAX));
                }
                Some(Payment::new(counter, shared, units))
            })
            .collect();
        Changes {
            answer,
            changed,
            pending,
            payments,
            now,
            renew: Vec::new(),
        }
    }

    /// Credits `taken[i]` units to `changes.payments[i]`'s counter, makes
    /// the pending changes the balances pay for (falls first, then growths;
    /// see the module docs) and sends every assignment that changed.
    pub fn apply(&self, changes: Changes, taken: &[u64]) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let now = changes.now;
        for (payment, &units) in changes.payments.iter().zip(taken) {
            self.stats.units_taken.fetch_add(units, Ordering::Relaxed);
            if let Some(shared) = inner.shared.get_mut(&payment.counter) {
                shared.balance.credit(units, shared.rate.window);
                spend_spare(shared, units);
            }
        }
        let mut changed = changes.changed;
        let mut pending = changes.pending;
        // Falls first: they give back the refills the growths then spend;
        // then the Envoys holding no token bucket (a first assignment, or
        // one left at deny-all), then the growths.
        pending.sort_by_key(|(counter, stream)| {
            let reporter = inner
                .shared
                .get(counter)
                .and_then(|s| s.reporters.get(stream));
            let fall = reporter.is_some_and(|r| falls(r.share, r.wanted));
            let first = reporter.is_some_and(|r| unassigned(r.share));
            (!fall, !first, counter.clone(), *stream)
        });
        for (counter, stream) in pending {
            if self.move_share(inner, &counter, stream, now) {
                changed.push((counter, stream));
            }
        }
        let mut told: Vec<StreamId> = changed.iter().map(|(_, stream)| *stream).collect();
        told.extend(changes.answer.as_ref().map(|(stream, _)| *stream));
        told.extend(&changes.renew);
        self.send_changed(inner, changes.answer, &changed, &changes.renew);
        // Each assignment sent renews its time to live at the Envoy.
        for stream in told {
            if let Some(s) = inner.streams.get_mut(&stream) {
                s.sent = Some(s.sent.map_or(now, |sent| sent.max(now)));
            }
        }
    }

    /// Moves `stream`'s share of `counter` toward its target as far as the
    /// balance pays; whether its assignment changed.
    fn move_share(
        &self,
        inner: &mut Inner,
        counter: &[u8],
        stream: StreamId,
        now: Timestamp,
    ) -> bool {
        let buckets = buckets_on(inner, stream, counter);
        let Some(shared) = inner.shared.get_mut(counter) else {
            return false;
        };
        let Some(reporter) = shared.reporters.get(&stream).copied() else {
            return false;
        };
        let target = target(shared, stream, false);
        let full = |s: u64| fresh_tokens(&shared.rate, s);
        let old = reporter.share;
        if old == Some(target) && (reporter.tokens >= full(target) || reporter.departed.is_some()) {
            return false;
        }
        let affordable = |s: u64, tokens: u64| {
            let (cost, refund) = price(shared, old, (s, tokens), buckets, now);
            cost <= shared.balance.nanos() + refund
        };
        if old == Some(target) && growing(shared, stream) {
            // Only its bucket to raise (bursts), while another share on
            // the counter waits for its rate: the rates go first.
            return false;
        }
        let (chosen, tokens) = if unassigned(old) {
            // A first assignment (or one left at deny-all: Envoy holds no
            // token bucket, and retries at each report and round) as far
            // as paid, in its full bucket; a share of 0 (deny all) costs
            // nothing.
            let s = largest(0, target, |s| affordable(s, full(s)));
            (s, full(s))
        } else if falls(old, target) {
            // Down to the target, or below if the balance cannot pay for
            // its bucket: its full one, or the smaller one it held (a
            // growth not raised yet), raised later once paid; two tokens
            // while another share waits for its rate (a newcomer's, or a
            // growth), which the refunded refills then pay instead (on a
            // token-bucket counter the fresh buckets otherwise take the
            // units the next round needs, and it cuts both shares).
            let held = if growing(shared, stream) {
                LEAST_TOKENS
            } else {
                reporter.tokens.max(LEAST_TOKENS)
            };
            let bucket = |s: u64| full(s).min(held);
            let s = largest(0, target, |s| affordable(s, bucket(s)));
            (s, bucket(s))
        } else {
            // A growth goes to its rate at once, in the largest bucket paid
            // for up to its full one (Envoy refills a bucket continuously
            // up to its `max_tokens`: under steady demand it admits the
            // rate whatever the bucket holds, so the fresh bucket is the
            // growth's only up-front cost; at least two tokens,
            // [`LEAST_TOKENS`]). Where the balance pays less
            // than its whole rate, it goes to the largest rate paid within
            // a tenth of it (the hysteresis of steady shares), the rest at
            // a later round; none while not even that and a two-token
            // bucket are paid. A smaller bucket is raised to the full one
            // at a later round, once that is paid in full (a share in
            // force is never re-sent smaller).
            if old == Some(target) {
                let tokens = largest(least_tokens(full(target)), full(target), |m| {
                    affordable(target, m)
                });
                if tokens < full(target) {
                    return false;
                }
                (target, tokens)
            } else {
                let least = target - target / 10;
                let s = largest(least.max(old.unwrap_or(0) + 1), target, |s| {
                    affordable(s, least_tokens(full(s)))
                });
                if s == 0 {
                    return false;
                }
                (
                    s,
                    largest(least_tokens(full(s)), full(s), |m| affordable(s, m)),
                )
            }
        };
        let (cost, refund) = price(shared, old, (chosen, tokens), buckets, now);
        shared.balance.refund(refund);
        let spent = shared.balance.spend(cost);
        debug_assert!(spent, "a move is made only when it is paid for");
        shared.covered = Some(cover(shared, now));
        // (A growth short of its rate is not a cut: it rises further later.)
        let grew = old.is_some_and(|old| old > 0 && chosen > old);
        if chosen < target && !grew {
            self.stats.shares_cut.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(r) = shared.reporters.get_mut(&stream) {
            r.set_share(chosen, tokens, now);
        }
        true
    }

    /// Sends the answer to a report, every changed assignment and every
    /// assignment of the streams to `renew`, one response per stream.
    fn send_changed(
        &self,
        inner: &Inner,
        answer: Option<Answer>,
        changed: &[(Vec<u8>, StreamId)],
        renew: &[StreamId],
    ) {
        let mut buckets: HashMap<StreamId, HashSet<BucketKey>> = HashMap::new();
        if let Some((stream, keys)) = answer {
            buckets.entry(stream).or_default().extend(keys);
        }
        for stream in renew {
            if let Some(s) = inner.streams.get(stream) {
                buckets
                    .entry(*stream)
                    .or_default()
                    .extend(s.buckets.keys().cloned());
            }
        }
        for (counter, stream) in changed {
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

    /// What the refills of the shares in force cost, per shared counter,
    /// for a round at `now`: from the instant they are paid through to a
    /// `tick` and a margin ahead ([`payment::span`]), less the balance; the
    /// service takes the units and passes what it got to [`QuotaBook::settle`].
    pub fn dues(&self, now: Timestamp, tick: Duration) -> Dues {
        let inner = self.inner.lock();
        let payments = inner
            .shared
            .iter()
            .filter_map(|(counter, shared)| {
                let share = in_force(&inner, counter, shared);
                let span = payment::span(
                    shared.covered,
                    shared.last_round,
                    now,
                    tick,
                    shared.rate.memory(),
                );
                let length = span.1.saturating_since(span.0).as_nanos();
                (share > 0 && length > 0).then(|| {
                    let units = shared
                        .balance
                        .units_for(u128::from(share) * length, shared.rate.window);
                    Payment {
                        span,
                        ..Payment::new(counter, shared, units)
                    }
                })
            })
            .collect();
        Dues {
            payments,
            now,
            tick,
        }
    }

    /// Credits `taken[i]` units to `dues.payments[i]`'s counter and pays
    /// the refills of its span as far as the balance reaches; where that is
    /// short of the next round, cuts the shares (see the module docs). The
    /// [`Changes`] to pay for and apply: the cuts, and the growths waiting.
    pub fn settle(&self, dues: Dues, taken: &[u64]) -> Changes {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let (now, tick) = (dues.now, dues.tick);
        self.expire_departed(inner, now);
        let counters: Vec<Vec<u8>> = inner.shared.keys().cloned().collect();
        for counter in &counters {
            accrue_spare(inner, counter, tick);
        }
        // The next round, and half a tick for it to come late in.
        let next_round = now.saturating_add(tick + tick / 2);
        let mut changed = Vec::new();
        let mut short: HashSet<Vec<u8>> = HashSet::new();
        for (payment, &units) in dues.payments.iter().zip(taken) {
            self.stats.units_taken.fetch_add(units, Ordering::Relaxed);
            let Some(share) = inner
                .shared
                .get(&payment.counter)
                .map(|shared| in_force(inner, &payment.counter, shared))
            else {
                continue;
            };
            let Some(shared) = inner.shared.get_mut(&payment.counter) else {
                continue;
            };
            shared.balance.credit(units, shared.rate.window);
            spend_spare(shared, units);
            let (from, until) = payment::span(
                shared.covered,
                shared.last_round,
                now,
                tick,
                shared.rate.memory(),
            );
            let length = until.saturating_since(from).as_nanos();
            let covered = shared.balance.spend_refills(share, length);
            let reached = from.saturating_add(Duration::from_nanos(
                u64::try_from(covered).unwrap_or(u64::MAX),
            ));
            shared.covered = Some(shared.covered.map_or(reached, |c| c.max(reached)));
            shared.last_round = Some(now);
            if shared.covered.is_some_and(|c| c >= next_round) {
                continue;
            }
            short.insert(payment.counter.clone());
            changed.extend(self.cut(inner, &payment.counter, now, tick));
        }
        // Growths still waiting try again, where this round did not just come short.
        let pending: Vec<(Vec<u8>, StreamId)> = inner
            .shared
            .iter()
            .filter(|(counter, _)| !short.contains(*counter))
            .flat_map(|(counter, shared)| {
                shared
                    .reporters
                    .iter()
                    .filter(|(_, r)| {
                        r.share != Some(r.wanted)
                            || (r.departed.is_none()
                                && r.tokens < fresh_tokens(&shared.rate, r.wanted))
                    })
                    .map(|(stream, _)| (counter.clone(), *stream))
            })
            .collect();
        let mut changes = self.changes(inner, None, changed, pending, now, true);
        changes.renew = self.renewals(inner, now, tick);
        changes
    }

    /// Takes out of the split, at `now`, every departed Envoy whose last
    /// assignment has lapsed (its prepaid refills come back, its buckets
    /// leave the bound); the others' shares grow at this round.
    fn expire_departed(&self, inner: &mut Inner, now: Timestamp) {
        let mut lapsed: Vec<(Vec<u8>, StreamId, u64)> = Vec::new();
        for (counter, shared) in &inner.shared {
            for (&stream, r) in &shared.reporters {
                if let Some(d) = r.departed.filter(|d| d.until <= now) {
                    lapsed.push((counter.clone(), stream, d.buckets));
                }
            }
        }
        if lapsed.is_empty() {
            return;
        }
        let mut ignored = Vec::new();
        for (counter, stream, buckets) in lapsed {
            inner.buckets = inner.buckets.saturating_sub(buckets as usize);
            let Some(shared) = inner.shared.get_mut(&counter) else {
                continue;
            };
            leave(shared, stream, buckets, now);
            if shared.reporters.is_empty() {
                inner.shared.remove(&counter);
            } else {
                // (The growths go at this round's end, with the others waiting.)
                self.rebalance(inner, &counter, &mut ignored);
            }
        }
        self.stats
            .buckets
            .store(inner.buckets as u64, Ordering::Relaxed);
        self.stats
            .counters
            .store(inner.shared.len() as u64, Ordering::Relaxed);
    }

    /// Cuts `counter`'s shares to what its balance pays for through the
    /// next round (the module docs' rule); the reporters whose share changed.
    fn cut(
        &self,
        inner: &mut Inner,
        counter: &[u8],
        now: Timestamp,
        tick: Duration,
    ) -> Vec<(Vec<u8>, StreamId)> {
        // A departed Envoy's share cannot be cut (it can no longer be
        // told): its refills come first, the others are cut to the rest.
        let (held, departed): (Vec<(StreamId, u64, u64)>, u128) = match inner.shared.get(counter) {
            Some(shared) => {
                let held = shared
                    .reporters
                    .iter()
                    .filter(|(_, r)| r.departed.is_none())
                    .filter_map(|(&stream, r)| {
                        Some((stream, r.share?, buckets_on(inner, stream, counter)))
                    })
                    .collect();
                let departed = shared
                    .reporters
                    .values()
                    .filter_map(|r| Some(u128::from(r.share?) * u128::from(r.departed?.buckets)))
                    .sum();
                (held, departed)
            }
            None => return Vec::new(),
        };
        let Some(shared) = inner.shared.get_mut(counter) else {
            return Vec::new();
        };
        // The refills prepaid beyond now come back: the cut restarts from now.
        let ahead = shared
            .covered
            .map_or(0, |covered| covered.saturating_since(now).as_nanos());
        let in_force: u128 = held
            .iter()
            .map(|&(_, s, k)| u128::from(s) * u128::from(k))
            .sum();
        shared.balance.refund((in_force + departed) * ahead);
        let window = shared.rate.window.as_nanos().max(1);
        // Paid again through the next round and the margin.
        let until = payment::span(None, None, now, tick, Duration::ZERO).1;
        let tick_ns = until.saturating_since(now).as_nanos();
        // (What the balance lacks for them is the part the cut cannot bound.)
        let _ = shared.balance.spend(departed * tick_ns)
            || shared.balance.spend(shared.balance.nanos());
        let demands: Vec<Option<u64>> = held.iter().map(|&(_, s, _)| Some(s)).collect();
        let split = |total: u64| fair_shares(total, &demands, Leftover::Unassigned);
        let cost = |shares: &[u64]| -> u128 {
            held.iter()
                .zip(shares)
                .map(|(&(_, old, k), &new)| {
                    let fresh = if new == old {
                        0
                    } else {
                        u128::from(fresh_tokens(&shared.rate, new)) * window
                    };
                    (fresh + u128::from(new) * tick_ns) * u128::from(k)
                })
                .sum()
        };
        let total: u64 = held.iter().map(|&(_, s, _)| s).sum();
        let balance = shared.balance.nanos();
        let mut best = largest(0, total, |t| cost(&split(t)) <= balance);
        if cost(&split(best)) > balance {
            best = 0;
        }
        let shares = split(best);
        let spent = shared.balance.spend(cost(&shares));
        debug_assert!(spent, "a cut is paid for");
        shared.covered = Some(until);
        let mut changed = Vec::new();
        for (&(stream, old, _), &new) in held.iter().zip(&shares) {
            if new == old {
                continue;
            }
            if let Some(r) = shared.reporters.get_mut(&stream) {
                r.set_share(new, fresh_tokens(&shared.rate, new), now);
            }
            self.stats.shares_cut.fetch_add(1, Ordering::Relaxed);
            changed.push((counter.to_vec(), stream));
        }
        changed
    }
}

/// Adds a round of `tick` to what this instance may take of `counter`
/// while other instances' Envoys share it: the room their fair shares leave
/// of `R'`, per window, for a tick (at most a window's worth is carried);
/// the refills of its shares in force and then its growths spend it
/// ([`spend_spare`]). Another instance's round may come after this one in
/// the same window of the counter, so a growth that took all that was left
/// would leave that instance's Envoys' refills unpaid and cut shares in
/// use; within this bound the fleet's refills and growths fit in the rate
/// together, whatever order the rounds land in.
fn accrue_spare(inner: &mut Inner, counter: &[u8], tick: Duration) {
    let Some(shared) = inner.shared.get_mut(counter) else {
        return;
    };
    if shared.fleet.is_empty() {
        return;
    }
    let (_, room) = fleet_split(
        shared_capacity(shared.rate.requests),
        &claims(shared),
        &shared.fleet,
    );
    let room = u128::from(room);
    let window = shared.rate.window.as_nanos().max(1);
    shared.spare = shared
        .spare
        .saturating_add(room * tick.as_nanos())
        .min(room * window.max(tick.as_nanos()));
}

/// Spends `units` taken from the counter from what this instance may take ([`accrue_spare`]).
pub(super) fn spend_spare(shared: &mut Shared, units: u64) {
    let window = shared.rate.window.as_nanos().max(1);
    shared.spare = shared.spare.saturating_sub(u128::from(units) * window);
}

/// The instant `shared`'s shares are paid through, for a change at `now`:
/// with no share in force (none yet, or all deny), the rounds paid nothing
/// and a first share is paid a round's span ahead, the margin included
/// (a round in the same fixed window then cuts nothing).
fn cover(shared: &Shared, now: Timestamp) -> Timestamp {
    let in_force = shared.reporters.values().any(|r| r.share.unwrap_or(0) > 0);
    match shared.covered {
        Some(covered) if in_force => covered,
        _ => payment::span(None, None, now, PAY_TICK, Duration::ZERO).1,
    }
}

/// The largest `s` in `lo..=hi` for which `fits` holds (it holds up to
/// some point, then not); `lo` when none does but `lo` is 0, else 0.
fn largest(lo: u64, hi: u64, fits: impl Fn(u64) -> bool) -> u64 {
    if lo > hi || !fits(lo) {
        return 0;
    }
    let (mut yes, mut no) = (lo, hi.saturating_add(1));
    while no - yes > 1 {
        let mid = yes + (no - yes) / 2;
        if fits(mid) {
            yes = mid;
        } else {
            no = mid;
        }
    }
    yes
}

/// What `stream`'s share moves to: what the split wants, a growth within
/// the rate less the shares in force at the others (so the shares never
/// sum past it); when `priced`, less the shares they are falling to (the
/// falls go first when the changes are applied).
fn target(shared: &Shared, stream: StreamId, priced: bool) -> u64 {
    let Some(reporter) = shared.reporters.get(&stream) else {
        return 0;
    };
    if falls(reporter.share, reporter.wanted) {
        return reporter.wanted;
    }
    let others = shared
        .reporters
        .iter()
        .filter(|(s, _)| **s != stream)
        .filter_map(|(_, r)| match r.share {
            Some(share) if priced => Some(share.min(r.wanted)),
            share => share,
        })
        .fold(0u64, u64::saturating_add);
    reporter
        .wanted
        .min(shared.rate.requests.saturating_sub(others))
}

/// Whether a live reporter of `shared` other than `stream` waits for a
/// larger rate than it holds (a growth, or a first assignment).
fn growing(shared: &Shared, stream: StreamId) -> bool {
    shared.reporters.iter().any(|(&other, r)| {
        other != stream
            && r.departed.is_none()
            && r.share.unwrap_or(0) < target(shared, other, false)
    })
}

/// The shares in force on `counter`, each once per bucket its Envoy enforces it in.
pub(super) fn in_force(inner: &Inner, counter: &[u8], shared: &Shared) -> u64 {
    shared
        .reporters
        .iter()
        .filter_map(|(&stream, r)| {
            Some(r.share?.saturating_mul(buckets_on(inner, stream, counter)))
        })
        .fold(0u64, u64::saturating_add)
}

/// How many of `stream`'s buckets share `counter` (each gets the share's token bucket).
pub(super) fn buckets_on(inner: &Inner, stream: StreamId, counter: &[u8]) -> u64 {
    match inner.streams.get(&stream) {
        Some(s) => s.on_counter(counter).map_or(0, |keys| keys.len() as u64),
        // A departed Envoy's buckets, until its last assignment lapses.
        None => inner
            .shared
            .get(counter)
            .and_then(|shared| shared.reporters.get(&stream))
            .and_then(|r| r.departed)
            .map_or(0, |d| d.buckets),
    }
}
