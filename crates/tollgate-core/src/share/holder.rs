//! The holder's side of the share protocol: per key a sub-bucket decided locally, demand measured, one batched call at a time.
//!
//! A holder (one instance) decides a request on a key from its own
//! [`ShareBucket`] of the share the authority booked to it, with no call.
//! What it must tell the authority (a key used for the first time, a share
//! shrunk, a key idle long enough to release, a demand that left its band)
//! waits in a dirty list for the next call: at most one call is in flight;
//! a call goes out every [`HolderPolicy::sync_interval`] (a heartbeat even
//! with nothing to say), or after [`HolderPolicy::batch_interval`] when a
//! request waits for a key's first share or a shrink waits to be booked.
//!
//! A holder that owns a starter slot (`starter.rs`) adds one slot's part
//! of every key to its own share of it: a key's first use is decided from
//! that part at once, and the key is reported only when its demand
//! outgrows the part or the part runs dry (then the request waits, as it
//! does without a slot). A key decided on its starter part alone is
//! forgotten when idle only once that part is full again, so a key seen
//! again never starts with more than the part would have had.
//!
//! The holder uses its shares only until `t_send + ttl − ttl_margin`, where
//! `t_send` is when it sent the last call the authority took: the
//! authority's registration runs to at least `t_receipt + ttl` on the same
//! or a slower clock. Past that deadline it drops every share (a lapse:
//! nothing in force, a new incarnation) and asks again.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use super::message::{HolderId, KeyReport, Leaving, SyncCall, SyncReply};
use super::{MILLI_PER_TOKEN, Share, ShareBucket, StarterPolicy};
use crate::Timestamp;

/// Keys one call of a leave gives back at most ([`Holder::leave`]): a
/// leave of more keys is split into calls of this many, one after the other.
pub const LEAVE_KEYS_PER_CALL: usize = 256;

/// When a holder calls, how long it trusts its registration, what it forgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderPolicy {
    /// A call (a heartbeat with whatever is dirty) at least this often.
    pub sync_interval: Duration,
    /// A call this soon after the last one when a request waits on it.
    pub batch_interval: Duration,
    /// A call with no reply after this long is given up (its reply, if it comes, is ignored).
    pub call_timeout: Duration,
    /// The authority's registration TTL.
    pub ttl: Duration,
    /// Subtracted from the TTL on the holder's side: clock drift and skew.
    pub ttl_margin: Duration,
    /// A key not seen for this long is released and forgotten.
    pub idle_after: Duration,
    /// Demand is measured over periods of this length (smoothed over about four).
    pub demand_period: Duration,
    /// At most this many keys held at once; a request for another is denied.
    pub max_keys: usize,
}

impl Default for HolderPolicy {
    fn default() -> Self {
        HolderPolicy {
            sync_interval: Duration::from_millis(100),
            batch_interval: Duration::from_millis(1),
            call_timeout: Duration::from_millis(500),
            ttl: Duration::from_secs(10),
            ttl_margin: Duration::from_secs(1),
            idle_after: Duration::from_secs(30),
            demand_period: Duration::from_secs(1),
            max_keys: 1_000_000,
        }
    }
}

/// What a holder says about one request on one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The local share has the tokens: take them with [`Holder::take`].
    Admit,
    /// The local share has not (or the holder holds its most keys).
    Deny,
    /// The key has no answer from the authority yet: decide again after the next reply.
    Wait,
}

/// Smoothed arrivals on one key, in milli-tokens per second.
#[derive(Clone, Copy, Debug)]
struct Demand {
    period_start: Timestamp,
    count: u64,
    rate: Option<u64>,
}

impl Demand {
    fn record(&mut self, now: Timestamp, cost: u64, period: Duration) {
        let period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1);
        let elapsed = now.as_nanos().saturating_sub(self.period_start.as_nanos());
        if elapsed >= period_ns {
            let sample = u64::try_from(
                u128::from(self.count) * u128::from(MILLI_PER_TOKEN) * 1_000_000_000
                    / u128::from(period_ns),
            )
            .unwrap_or(u64::MAX);
            let mut rate = match self.rate {
                None => sample,
                Some(old) => old - old / 4 + sample / 4,
            };
            // Periods with no arrival at all decay it by a quarter each.
            for _ in 1..(elapsed / period_ns).min(64) {
                rate -= rate / 4;
            }
            self.rate = Some(rate);
            self.count = 0;
            self.period_start = Timestamp::from_nanos(now.as_nanos() - elapsed % period_ns);
        }
        self.count = self.count.saturating_add(cost);
    }

    /// What to report at `now`: the smoothed rate, or the current period's
    /// if it is higher (or the only one) and an eighth of a period has passed.
    fn estimate(&self, now: Timestamp, period: Duration) -> Option<u64> {
        let period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1);
        let elapsed = now.as_nanos().saturating_sub(self.period_start.as_nanos());
        let current = (elapsed >= period_ns / 8 && elapsed > 0).then(|| {
            u64::try_from(
                u128::from(self.count) * u128::from(MILLI_PER_TOKEN) * 1_000_000_000
                    / u128::from(elapsed),
            )
            .unwrap_or(u64::MAX)
        });
        match (self.rate, current) {
            (Some(rate), Some(current)) => Some(rate.max(current)),
            (rate, current) => rate.or(current),
        }
    }
}

/// One key as a holder keeps it.
#[derive(Clone, Debug)]
struct HeldKey {
    limit: Share,
    /// The booked share plus `starter`, with its tokens.
    bucket: ShareBucket,
    /// The starter slot's part of the key within `bucket` (zero without a slot).
    starter: Share,
    /// Pico-tokens shrunk out of the bucket, to hand back with the next report.
    returned: u128,
    demand: Demand,
    reported_demand: Option<u64>,
    last_seen: Timestamp,
    /// In the dirty list.
    dirty: bool,
    /// The authority has answered for this key at least once.
    answered: bool,
    /// The key went out in a call since it was last forgotten or released.
    reported: bool,
    /// Released: reported with nothing in force, forgotten once the authority takes it.
    released: bool,
    /// The last answer said the pool has rate to spare: a denial here is reported.
    spare: bool,
}

/// A call in flight.
#[derive(Clone, Debug)]
struct InFlight<K> {
    seq: u64,
    sent: Timestamp,
    keys: Vec<K>,
}

/// One holder: its keys, its dirty list, its call in flight.
#[derive(Clone, Debug)]
pub struct Holder<K> {
    id: HolderId,
    policy: HolderPolicy,
    incarnation: u64,
    seq: u64,
    keys: HashMap<K, HeldKey>,
    dirty: Vec<K>,
    /// A request waits on the next call, or a shrink waits to be booked.
    urgent: bool,
    in_flight: Option<InFlight<K>>,
    last_call: Option<Timestamp>,
    /// Shares may be used until then (`None`: never registered, or lapsed).
    valid_until: Option<Timestamp>,
    /// The starter slot's policy and when this holder heard it owns a slot.
    starter: Option<(StarterPolicy, Timestamp)>,
    last_sweep: Timestamp,
    lapses: u64,
}

impl HeldKey {
    /// The share booked by the authority: what is in force less the starter part.
    fn booked(&self) -> Share {
        let share = self.bucket.share();
        Share {
            rate: share.rate.saturating_sub(self.starter.rate),
            burst: share.burst.saturating_sub(self.starter.burst),
        }
    }
}

/// `a + b`, component-wise.
fn plus(a: Share, b: Share) -> Share {
    Share {
        rate: a.rate.saturating_add(b.rate),
        burst: a.burst.saturating_add(b.burst),
    }
}

/// Demand `d` left the band around `reported`: above `2·r + 1/s`, or below `(r − 1/s)/2`.
fn outside_band(reported: Option<u64>, d: u64) -> bool {
    match reported {
        None => true,
        Some(r) => {
            d > r.saturating_mul(2) + MILLI_PER_TOKEN || d.saturating_mul(2) + MILLI_PER_TOKEN < r
        }
    }
}

impl<K: Clone + Eq + Hash> Holder<K> {
    /// Holder `id`, holding nothing, at `now`.
    pub fn new(id: HolderId, policy: HolderPolicy, now: Timestamp) -> Self {
        Holder {
            id,
            policy,
            incarnation: 1,
            seq: 0,
            keys: HashMap::new(),
            dirty: Vec::new(),
            urgent: false,
            in_flight: None,
            last_call: None,
            valid_until: None,
            starter: None,
            last_sweep: now,
            lapses: 0,
        }
    }

    /// The holder's id.
    pub fn id(&self) -> HolderId {
        self.id
    }

    /// Keys held (including ones being released).
    pub fn keys(&self) -> usize {
        self.keys.len()
    }

    /// Times the holder dropped every share because its registration ran out.
    pub fn lapses(&self) -> u64 {
        self.lapses
    }

    /// The share of `key` booked and in force (zero if none), not counting a starter part.
    pub fn in_force<Q>(&self, key: &Q) -> Share
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.keys.get(key).map_or(Share::ZERO, HeldKey::booked)
    }

    /// What `key`'s sub-bucket has in force (booked share and starter part)
    /// and its whole tokens at the last update (zero if none).
    pub fn local<Q>(&self, key: &Q) -> (Share, u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.keys.get(key).map_or((Share::ZERO, 0), |k| {
            let tokens =
                u64::try_from(k.bucket.level() / super::PICO_PER_TOKEN).unwrap_or(u64::MAX);
            (k.bucket.share(), tokens)
        })
    }

    /// Whole tokens of `key`'s sub-bucket at its last update (zero if none).
    pub fn tokens<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.local(key).1
    }

    /// The starter slot's policy, while this holder owns one.
    pub fn starter(&self) -> Option<StarterPolicy> {
        self.starter.map(|(policy, _)| policy)
    }

    /// Whether the holder may use its shares at `now` (registered, deadline not passed).
    pub fn valid_at(&self, now: Timestamp) -> bool {
        self.valid_until.is_some_and(|v| now < v)
    }

    /// Whether a call is in flight.
    pub fn calling(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Judges a request of `cost` on `key` (whose whole limit is `limit`) at `now`; takes nothing.
    pub fn check<Q>(&mut self, key: &Q, limit: Share, now: Timestamp, cost: u64) -> Verdict
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.lapse_if_due(now);
        let period = self.policy.demand_period;
        let starter = self.starter;
        let valid = self.valid_until.is_some_and(|v| now < v);
        let held = match self.keys.get_mut(key) {
            Some(held) => held,
            None => {
                if self.keys.len() >= self.policy.max_keys {
                    return Verdict::Deny;
                }
                // A starter part starts empty when the slot was heard of
                // and refills from then: never more than it could hold.
                let (part, since) = starter.map_or((Share::ZERO, now), |(policy, since)| {
                    (policy.part(limit), since)
                });
                self.keys.entry(key.to_owned()).or_insert(HeldKey {
                    limit,
                    bucket: ShareBucket::new(part, 0, since),
                    starter: part,
                    returned: 0,
                    demand: Demand {
                        period_start: now,
                        count: 0,
                        rate: None,
                    },
                    reported_demand: None,
                    last_seen: now,
                    dirty: false,
                    answered: false,
                    reported: false,
                    released: false,
                    spare: false,
                })
            }
        };
        held.last_seen = now;
        held.demand.record(now, cost, period);
        let relimited = held.limit != limit;
        if relimited {
            // A reload changed the limit: shrink to it at once (shrinking
            // needs nobody's leave) and tell the authority at the next call.
            held.limit = limit;
            let before = held.booked();
            let booked = before.min(limit);
            held.starter = starter.map_or(Share::ZERO, |(policy, _)| {
                policy.part(limit).min(held.starter)
            });
            let excess = held.bucket.set_share(now, plus(booked, held.starter));
            // Hand back at most the booked capacity given up; a starter
            // part's tokens are nobody's and leave with it.
            let given_up = u128::from(before.burst - booked.burst) * super::PICO_PER_TOKEN;
            held.returned += excess.min(given_up);
        }
        if held.released {
            held.released = false;
            held.answered = false;
        }
        let verdict = if !held.answered && held.starter == Share::ZERO {
            Verdict::Wait
        } else if valid && held.bucket.has(now, cost) {
            Verdict::Admit
        } else if !held.answered {
            Verdict::Wait
        } else {
            Verdict::Deny
        };
        let mut report = if !held.answered && held.starter != Share::ZERO {
            // On the starter part alone: a call only when it is not enough.
            verdict == Verdict::Wait
                || held
                    .demand
                    .rate
                    .is_some_and(|d| d.saturating_mul(2) > held.starter.rate)
        } else {
            relimited
                || !held.answered
                || held
                    .demand
                    .rate
                    .is_some_and(|d| outside_band(held.reported_demand, d))
        };
        if verdict == Verdict::Deny && held.spare {
            // Out of tokens while the pool has some to give: ask at the next call.
            held.spare = false;
            report = true;
        }
        report &= !held.dirty;
        if report {
            held.dirty = true;
            self.dirty.push(key.to_owned());
        }
        if verdict == Verdict::Wait {
            self.urgent = true;
        }
        verdict
    }

    /// Takes `cost` tokens of `key` at `now` after [`check`](Self::check) said [`Verdict::Admit`]; whether it could.
    pub fn take<Q>(&mut self, key: &Q, now: Timestamp, cost: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.valid_until.is_some_and(|v| now < v)
            && self
                .keys
                .get_mut(key)
                .is_some_and(|k| k.bucket.try_take(now, cost))
    }

    /// The call to send at `now`, if one is due.
    pub fn poll(&mut self, now: Timestamp) -> Option<SyncCall<K>> {
        self.lapse_if_due(now);
        if let Some(flight) = &self.in_flight {
            if now < flight.sent.saturating_add(self.policy.call_timeout) {
                return None;
            }
            self.give_up();
        }
        let due = match self.last_call {
            None => self.urgent,
            Some(last) => {
                now >= last.saturating_add(self.policy.sync_interval)
                    || (self.urgent && now >= last.saturating_add(self.policy.batch_interval))
            }
        };
        if !due || (self.keys.is_empty() && self.dirty.is_empty()) {
            return None;
        }
        self.release_idle(now);
        let period = self.policy.demand_period;
        self.seq += 1;
        let mut reports = Vec::with_capacity(self.dirty.len());
        let mut keys = Vec::with_capacity(self.dirty.len());
        for key in std::mem::take(&mut self.dirty) {
            let Some(held) = self.keys.get_mut(&key) else {
                continue;
            };
            held.dirty = false;
            held.reported = true;
            held.reported_demand = held.demand.rate;
            reports.push(KeyReport {
                key: key.clone(),
                limit: held.limit,
                in_force: held.booked(),
                returned: std::mem::take(&mut held.returned),
                demand: held.demand.estimate(now, period),
                release: held.released,
            });
            keys.push(key);
        }
        self.urgent = false;
        self.last_call = Some(now);
        self.in_flight = Some(InFlight {
            seq: self.seq,
            sent: now,
            keys,
        });
        Some(SyncCall {
            holder: self.id,
            incarnation: self.incarnation,
            seq: self.seq,
            registering: self.valid_until.is_none(),
            leaving: Leaving::No,
            reports,
        })
    }

    /// The calls of a holder shutting down, to send in order, each after
    /// the last one's reply: every share is released (shrunk to nothing
    /// first), at most `keys_per_call` keys a call (at least one), the last
    /// call ending the registration.
    ///
    /// Splitting keeps each call small: on Redis a call is atomic, so one
    /// call carrying every key of a busy instance would hold every other
    /// client of that Redis up while it runs.
    pub fn leave(&mut self, now: Timestamp, keys_per_call: usize) -> Vec<SyncCall<K>> {
        let mut reports: Vec<KeyReport<K>> = self
            .keys
            .drain()
            .map(|(key, mut held)| {
                // The booked part's tokens go back; the starter part's leave with the slot.
                let returned = held.bucket.set_share(now, held.starter) + held.returned;
                KeyReport {
                    key,
                    limit: held.limit,
                    in_force: Share::ZERO,
                    returned,
                    demand: None,
                    release: true,
                }
            })
            .collect();
        self.dirty.clear();
        self.in_flight = None;
        self.starter = None;
        let registering = self.valid_until.take().is_none();
        let per_call = keys_per_call.max(1);
        let mut calls = Vec::with_capacity(reports.len().div_ceil(per_call).max(1));
        loop {
            let rest = reports.split_off(reports.len().min(per_call));
            let last = rest.is_empty();
            self.seq += 1;
            calls.push(SyncCall {
                holder: self.id,
                incarnation: self.incarnation,
                seq: self.seq,
                registering: registering && last,
                leaving: if last { Leaving::Last } else { Leaving::Part },
                reports: std::mem::replace(&mut reports, rest),
            });
            if last {
                return calls;
            }
        }
    }

    /// Takes the authority's reply at `now`; whether it was the reply to the call in flight.
    pub fn on_reply(&mut self, now: Timestamp, reply: SyncReply<K>) -> bool {
        let Some(flight) = &self.in_flight else {
            return false;
        };
        if reply.holder != self.id
            || reply.incarnation != self.incarnation
            || reply.seq != flight.seq
        {
            return false;
        }
        if reply.lapsed {
            self.lapse();
            return false;
        }
        if !reply.accepted {
            self.give_up();
            return false;
        }
        let Some(flight) = self.in_flight.take() else {
            return false;
        };
        let deadline = flight
            .sent
            .saturating_add(self.policy.ttl.saturating_sub(self.policy.ttl_margin));
        self.valid_until = Some(deadline);
        self.hear_starter(now, reply.starter);
        for key in &flight.keys {
            let Some(held) = self.keys.get_mut(key) else {
                continue;
            };
            if held.released {
                if held.bucket.has_full(now) || held.starter == Share::ZERO {
                    self.keys.remove(key);
                } else {
                    // Its starter part is not full yet: kept until it is.
                    held.released = false;
                    held.answered = false;
                    held.reported = false;
                }
            }
        }
        for answer in reply.answers {
            let Some(held) = self.keys.get_mut(&answer.key) else {
                continue;
            };
            if held.released {
                continue;
            }
            // The booking is at least what is in force (nothing grew since
            // the call went out): put it in force, then the tokens it brought.
            held.returned += held
                .bucket
                .set_share(now, plus(answer.booked, held.starter));
            held.bucket.add(now, answer.tokens);
            held.answered = true;
            held.spare = answer.spare;
            if answer.booked.exceeds(answer.target) {
                // Shrink before the authority books the release.
                held.returned += held
                    .bucket
                    .set_share(now, plus(answer.booked.min(answer.target), held.starter));
                self.urgent = true;
                if !held.dirty {
                    held.dirty = true;
                    self.dirty.push(answer.key);
                }
            }
        }
        true
    }

    /// The call in flight failed (no reply will come): gives it up now
    /// rather than at its timeout, so the next call can go out. Safe
    /// whether or not the authority took it: its keys are reported again.
    pub fn on_failure(&mut self) {
        self.give_up();
    }

    /// Gives up the call in flight: its keys are reported again with the next one.
    fn give_up(&mut self) {
        if let Some(flight) = self.in_flight.take() {
            for key in flight.keys {
                if let Some(held) = self.keys.get_mut(&key)
                    && !held.dirty
                {
                    held.dirty = true;
                    if !held.answered || held.released {
                        self.urgent = true;
                    }
                    self.dirty.push(key);
                }
            }
        }
    }

    /// Takes the reply's word on this holder's starter slot, heard at `now`.
    ///
    /// A new slot's part of every key starts empty now; a slot lost (only
    /// possible if the store lost its state) leaves every key at once.
    fn hear_starter(&mut self, now: Timestamp, starter: Option<StarterPolicy>) {
        if self.starter.map(|(policy, _)| policy) == starter {
            return;
        }
        if self.starter.is_some() {
            for held in self.keys.values_mut() {
                let booked = held.booked();
                // The starter part's tokens leave with it (they are nobody's).
                held.bucket.set_share(now, booked);
                held.starter = Share::ZERO;
            }
        }
        self.starter = starter.map(|policy| (policy, now));
    }

    /// Past the registration's deadline: drop every share, start a new incarnation.
    fn lapse_if_due(&mut self, now: Timestamp) {
        if self.valid_until.is_some_and(|v| now >= v) {
            self.lapse();
        }
    }

    /// Drops every share and starts a new incarnation (the authority reclaims the old one).
    fn lapse(&mut self) {
        self.keys.clear();
        self.dirty.clear();
        self.urgent = false;
        self.in_flight = None;
        self.valid_until = None;
        self.starter = None;
        self.incarnation += 1;
        self.lapses += 1;
    }

    /// Marks keys not seen for `idle_after` released (shrunk to nothing), at most once per half of it.
    fn release_idle(&mut self, now: Timestamp) {
        let half = self.policy.idle_after / 2;
        if now < self.last_sweep.saturating_add(half) {
            return;
        }
        self.last_sweep = now;
        let idle_after = self.policy.idle_after;
        // A key never reported, on its starter part alone, is forgotten
        // with no call once that part is full again.
        self.keys.retain(|_, held| {
            let idle = now >= held.last_seen.saturating_add(idle_after);
            let forget = idle && !held.reported && !held.dirty && held.bucket.has_full(now);
            !forget
        });
        for (key, held) in &mut self.keys {
            if held.answered && !held.released && now >= held.last_seen.saturating_add(idle_after) {
                held.returned += held.bucket.set_share(now, held.starter);
                held.released = true;
                if !held.dirty {
                    held.dirty = true;
                    self.dirty.push(key.clone());
                }
            }
        }
    }
}
