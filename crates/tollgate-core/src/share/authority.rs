//! The authority's side of the share protocol: per key a pool and the holders' bookings, the membership, the targets.
//!
//! The authority is the store's state (in memory here; the Redis scripts
//! keep the same fields). Per key it keeps the limit, the *pool* (the
//! unallocated part: a [`ShareBucket`] of `limit − Σ booked`) and each
//! holder's booking, target and last reported demand. Per holder it keeps
//! the membership: incarnation, registration expiry, last call answered,
//! the keys it holds and the keys whose target changed since it last heard.
//!
//! Every change keeps `pool.share + Σ booked = limit` (component-wise;
//! `≤` while a reload has lowered the limit below what is booked, until the
//! holders shrink to their new targets), and the pool's share never goes
//! below zero: a grant is at most what the pool
//! has, so bookings never sum past the limit whatever the targets say.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use super::message::{HolderId, KeyAnswer, KeyReport, Leaving, SyncCall, SyncReply};
use super::{PICO_PER_TOKEN, Share, ShareBucket, StarterPolicy};
use crate::Timestamp;
use crate::fair_share::{Leftover, fair_shares};

/// How the authority splits a key and how long a registration lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthorityPolicy {
    /// A holder's registration lasts this long after each call the authority takes.
    pub ttl: Duration,
    /// A holder is counted as wanting `headroom ×` its reported demand.
    pub headroom: u64,
    /// A holder wants at least `rate / (members × floor_divisor)`; 2 keeps
    /// half of a sparse key's limit in the pool for newcomers and grants.
    pub floor_divisor: u64,
    /// Starter slots every key keeps for the first registered holders (off by default).
    pub starter: StarterPolicy,
}

impl Default for AuthorityPolicy {
    fn default() -> Self {
        AuthorityPolicy {
            ttl: Duration::from_secs(10),
            headroom: 2,
            floor_divisor: 2,
            starter: StarterPolicy::OFF,
        }
    }
}

/// A registration as a store keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberRecord {
    /// The holder's incarnation.
    pub incarnation: u64,
    /// When the registration lapses.
    pub expires: Timestamp,
    /// The last call answered.
    pub last_seq: u64,
    /// The starter slot it owns, if any.
    pub slot: Option<u32>,
}

/// One holder's part of a key, as a store keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldingRecord {
    /// The holder.
    pub holder: HolderId,
    /// Its incarnation when it took the key.
    pub incarnation: u64,
    /// What is booked to it.
    pub booked: Share,
    /// What it should hold.
    pub target: Share,
    /// Its last reported demand (milli-tokens per second).
    pub demand: Option<u64>,
}

/// A key's limit, pool and holdings, as a store keeps them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BookRecord {
    /// The key's whole limit.
    pub limit: Share,
    /// The unallocated part.
    pub pool: ShareBucket,
    /// Each holder's part.
    pub holdings: Vec<HoldingRecord>,
}

impl BookRecord {
    /// How long until nobody needs this book at `now`: `None` while anyone
    /// holds a part or the pool never refills, else the time until the pool
    /// is full again (zero: forget it now; an absent book is a full pool).
    pub fn idle_for(&self, now: Timestamp) -> Option<Duration> {
        if !self.holdings.is_empty() {
            return None;
        }
        let mut pool = self.pool;
        pool.advance(now);
        let missing = pool.share().capacity().saturating_sub(pool.level());
        if missing == 0 {
            return Some(Duration::ZERO);
        }
        let rate = u128::from(pool.share().rate);
        if rate == 0 {
            return None;
        }
        let nanos = missing.div_ceil(rate);
        Some(Duration::from_nanos(
            u64::try_from(nanos).unwrap_or(u64::MAX),
        ))
    }
}

/// One holder's part of a key.
#[derive(Clone, Copy, Debug)]
struct Holding {
    holder: HolderId,
    /// The holder's incarnation when it took the key: an older one than the member's is reclaimed.
    incarnation: u64,
    booked: Share,
    target: Share,
    demand: Option<u64>,
}

/// A key's limit, pool and holdings.
#[derive(Clone, Debug)]
struct KeyBook {
    limit: Share,
    pool: ShareBucket,
    holdings: Vec<Holding>,
    /// The authority's count of ended registrations when every holding was
    /// last found live (`None`: not since loaded): until a registration
    /// ends, there is nothing to prune.
    pruned_at: Option<u64>,
}

/// One registered holder.
#[derive(Clone, Debug)]
struct Member<K> {
    incarnation: u64,
    expires: Timestamp,
    last_seq: u64,
    /// The starter slot it owns for the life of this registration.
    slot: Option<u32>,
    keys: HashSet<K>,
    /// Keys whose target differs from the booking, to answer at the next call.
    dirty: HashSet<K>,
}

/// The authority: pools, bookings and membership for every key.
#[derive(Clone, Debug)]
pub struct Authority<K> {
    policy: AuthorityPolicy,
    books: HashMap<K, KeyBook>,
    members: HashMap<HolderId, Member<K>>,
    /// Registrations ended so far (a holding can only become stale when one does).
    ended: u64,
}

impl<K: Clone + Eq + Hash> Authority<K> {
    /// An authority with no keys and no members.
    pub fn new(policy: AuthorityPolicy) -> Self {
        Authority {
            policy,
            books: HashMap::new(),
            members: HashMap::new(),
            ended: 0,
        }
    }

    /// Registered holders.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Keys with a book (held, or with a pool still refilling).
    pub fn keys(&self) -> usize {
        self.books.len()
    }

    /// What the pool of `key` has unallocated, and the sum of its bookings (`None`: no book).
    pub fn split(&self, key: &K) -> Option<(Share, Share)> {
        let book = self.books.get(key)?;
        let booked = book.holdings.iter().fold(Share::ZERO, |sum, h| Share {
            rate: sum.rate + h.booked.rate,
            burst: sum.burst + h.booked.burst,
        });
        Some((book.pool.share(), booked))
    }

    /// The pool of `key` (`None`: no book).
    pub fn pool(&self, key: &K) -> Option<ShareBucket> {
        self.books.get(key).map(|b| b.pool)
    }

    /// What `key` books to `holder` (zero if nothing).
    pub fn booked(&self, key: &K, holder: HolderId) -> Share {
        self.books
            .get(key)
            .and_then(|b| b.holdings.iter().find(|h| h.holder == holder))
            .map_or(Share::ZERO, |h| h.booked)
    }

    /// Takes one call at `now` and answers it.
    pub fn sync(&mut self, now: Timestamp, call: &SyncCall<K>) -> SyncReply<K> {
        self.expire(now);
        let mut reply = SyncReply {
            holder: call.holder,
            incarnation: call.incarnation,
            seq: call.seq,
            accepted: false,
            lapsed: false,
            starter: None,
            answers: Vec::new(),
        };
        match self.members.get(&call.holder) {
            Some(m) if call.incarnation < m.incarnation => return reply,
            Some(m) if call.incarnation == m.incarnation && call.seq <= m.last_seq => return reply,
            Some(m) if call.incarnation > m.incarnation => self.reclaim(call.holder, now),
            Some(_) => {}
            None if !call.registering || call.leaving == Leaving::Part => {
                // Its registration lapsed (and its shares came back): it
                // must not go on using them as if it had been renewed. A
                // part of a leave never registers: nothing is booked to a
                // holder the authority does not know.
                reply.lapsed = true;
                return reply;
            }
            None => {}
        }
        let ttl = self.policy.ttl;
        let member = self.members.entry(call.holder).or_insert_with(|| Member {
            incarnation: call.incarnation,
            expires: now,
            last_seq: 0,
            slot: None,
            keys: HashSet::new(),
            dirty: HashSet::new(),
        });
        member.expires = now.saturating_add(ttl);
        member.last_seq = call.seq;
        reply.accepted = true;
        if call.leaving == Leaving::No {
            self.assign_slot(call.holder);
            reply.starter = self
                .members
                .get(&call.holder)
                .and_then(|m| m.slot)
                .map(|_| self.policy.starter);
        }
        let mut answered = HashSet::new();
        for report in &call.reports {
            if let Some(answer) = self.apply(call.holder, report, now) {
                answered.insert(answer.key.clone());
                reply.answers.push(answer);
            }
        }
        if call.leaving != Leaving::No {
            if call.leaving == Leaving::Last {
                self.reclaim(call.holder, now);
            }
            reply.answers.clear();
            return reply;
        }
        let dirty: Vec<K> = self
            .members
            .get_mut(&call.holder)
            .map(|m| m.dirty.drain().collect())
            .unwrap_or_default();
        for key in dirty {
            if answered.contains(&key) {
                continue;
            }
            self.tidy(&key, now);
            if let Some(answer) = self.answer(call.holder, &key, now) {
                reply.answers.push(answer);
            }
        }
        reply
    }

    /// Gives `holder` the lowest free starter slot if it owns none and one is free.
    ///
    /// A slot is free once its last owner's registration ended (reclaimed,
    /// left, or replaced by a newer incarnation), which is after that
    /// owner's last possible use of it; the new owner starts its part of
    /// every key empty when it hears of the slot.
    fn assign_slot(&mut self, holder: HolderId) {
        let slots = self.policy.starter.slots;
        if !self.policy.starter.is_on()
            || self.members.get(&holder).is_none_or(|m| m.slot.is_some())
        {
            return;
        }
        let taken: HashSet<u32> = self.members.values().filter_map(|m| m.slot).collect();
        let free = (0..slots).find(|slot| !taken.contains(slot));
        if let Some(member) = self.members.get_mut(&holder) {
            member.slot = free;
        }
    }

    /// Reclaims every holder whose registration has lapsed by `now`: its
    /// bookings return to the pools with no tokens.
    pub fn expire(&mut self, now: Timestamp) {
        let lapsed: Vec<HolderId> = self
            .members
            .iter()
            .filter(|(_, m)| m.expires <= now)
            .map(|(&id, _)| id)
            .collect();
        for holder in lapsed {
            self.reclaim(holder, now);
        }
    }

    /// Reclaims from `key`'s book the holdings of holders no longer
    /// registered (or registered again under a newer incarnation), with no
    /// tokens, and retargets the rest.
    ///
    /// In one process [`expire`](Self::expire) and a new incarnation
    /// reclaim eagerly and this finds nothing; an authority loaded from a
    /// store with only the keys a call touches ([`from_parts`](Self::from_parts))
    /// reclaims this way, key by key, as it reads them.
    pub fn tidy(&mut self, key: &K, now: Timestamp) {
        let Some(book) = self.books.get_mut(key) else {
            return;
        };
        if prune(book, &self.members, self.ended, now, self.policy.starter) {
            let changed = retarget(book, &self.members, &self.policy);
            mark_dirty(&mut self.members, key, changed);
        }
    }

    /// An authority over part of the state: every member (with the keys
    /// marked dirty for it that were read), and the books of the keys a
    /// call touches, as a store read them.
    ///
    /// Members' key lists start empty (a lapsed member's books are
    /// reclaimed by [`tidy`](Self::tidy) when read), so after a call the
    /// store writes back what [`member_record`](Self::member_record),
    /// [`dirty_of`](Self::dirty_of) and [`book_record`](Self::book_record)
    /// say.
    pub fn from_parts(
        policy: AuthorityPolicy,
        members: impl IntoIterator<Item = (HolderId, MemberRecord, Vec<K>)>,
        books: impl IntoIterator<Item = (K, BookRecord)>,
    ) -> Self {
        let members = members
            .into_iter()
            .map(|(id, record, dirty)| {
                let member = Member {
                    incarnation: record.incarnation,
                    expires: record.expires,
                    last_seq: record.last_seq,
                    slot: record.slot,
                    keys: HashSet::new(),
                    dirty: dirty.into_iter().collect(),
                };
                (id, member)
            })
            .collect();
        let books = books
            .into_iter()
            .map(|(key, record)| {
                let holdings = record
                    .holdings
                    .iter()
                    .map(|h| Holding {
                        holder: h.holder,
                        incarnation: h.incarnation,
                        booked: h.booked,
                        target: h.target,
                        demand: h.demand,
                    })
                    .collect();
                let book = KeyBook {
                    limit: record.limit,
                    pool: record.pool,
                    holdings,
                    pruned_at: None,
                };
                (key, book)
            })
            .collect();
        Authority {
            policy,
            books,
            members,
            ended: 0,
        }
    }

    /// The registered holders' ids.
    pub fn member_ids(&self) -> Vec<HolderId> {
        self.members.keys().copied().collect()
    }

    /// `holder`'s registration (`None`: not registered).
    pub fn member_record(&self, holder: HolderId) -> Option<MemberRecord> {
        self.members.get(&holder).map(|m| MemberRecord {
            incarnation: m.incarnation,
            expires: m.expires,
            last_seq: m.last_seq,
            slot: m.slot,
        })
    }

    /// The keys whose target for `holder` changed since it last heard.
    pub fn dirty_of(&self, holder: HolderId) -> Vec<K> {
        self.members
            .get(&holder)
            .map(|m| m.dirty.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// `key`'s book (`None`: no book, which is a full pool and no holder).
    pub fn book_record(&self, key: &K) -> Option<BookRecord> {
        self.books.get(key).map(|book| BookRecord {
            limit: book.limit,
            pool: book.pool,
            holdings: book
                .holdings
                .iter()
                .map(|h| HoldingRecord {
                    holder: h.holder,
                    incarnation: h.incarnation,
                    booked: h.booked,
                    target: h.target,
                    demand: h.demand,
                })
                .collect(),
        })
    }

    /// Forgets keys nobody holds whose pool is full again at `now` (an
    /// absent key starts with a full pool, so nothing changes).
    pub fn forget_idle(&mut self, now: Timestamp) {
        self.books.retain(|_, book| {
            book.pool.advance(now);
            !(book.holdings.is_empty() && book.pool.level() >= book.pool.share().capacity())
        });
    }

    /// Removes `holder` and returns all it booked to the pools, with no tokens.
    fn reclaim(&mut self, holder: HolderId, now: Timestamp) {
        let Some(member) = self.members.remove(&holder) else {
            return;
        };
        self.ended += 1;
        for key in member.keys {
            let Some(book) = self.books.get_mut(&key) else {
                continue;
            };
            if let Some(i) = book.holdings.iter().position(|h| h.holder == holder) {
                let gone = book.holdings.swap_remove(i);
                give_back(book, gone.booked, 0, now, self.policy.starter);
                let changed = retarget(book, &self.members, &self.policy);
                mark_dirty(&mut self.members, &key, changed);
            }
        }
    }

    /// Applies one report; the answer for it (none for a release).
    fn apply(
        &mut self,
        holder: HolderId,
        report: &KeyReport<K>,
        now: Timestamp,
    ) -> Option<KeyAnswer<K>> {
        let book = self
            .books
            .entry(report.key.clone())
            .or_insert_with(|| KeyBook {
                limit: report.limit,
                pool: ShareBucket::full(
                    minus(report.limit, self.policy.starter.reserve(report.limit)),
                    now,
                ),
                holdings: Vec::new(),
                pruned_at: Some(self.ended),
            });
        if book.limit != report.limit {
            // A reload changed the limit: the pool keeps only what the new
            // limit leaves beside the bookings (none while they exceed it,
            // until their holders shrink to the new targets).
            book.limit = report.limit;
            give_back(book, Share::ZERO, 0, now, self.policy.starter);
        }
        prune(book, &self.members, self.ended, now, self.policy.starter);
        let incarnation = match self.members.get(&holder) {
            Some(m) => m.incarnation,
            None => {
                // Not registered: its holding is stale from the start.
                book.pruned_at = None;
                0
            }
        };
        let index = match book.holdings.iter().position(|h| h.holder == holder) {
            Some(i) => i,
            None => {
                book.holdings.push(Holding {
                    holder,
                    incarnation,
                    booked: Share::ZERO,
                    target: Share::ZERO,
                    demand: None,
                });
                book.holdings.len() - 1
            }
        };
        // What the holder has in force is the truth about what it can use:
        // anything booked above it (a grant whose reply was lost) returns.
        let held = book.holdings[index].booked;
        let kept = held.min(report.in_force);
        book.holdings[index].booked = kept;
        give_back(
            book,
            Share {
                rate: held.rate - kept.rate,
                burst: held.burst - kept.burst,
            },
            report.returned,
            now,
            self.policy.starter,
        );
        book.holdings[index].demand = report.demand;
        let member = self.members.get_mut(&holder)?;
        if report.release {
            book.holdings.swap_remove(index);
            member.keys.remove(&report.key);
            member.dirty.remove(&report.key);
            let changed = retarget(book, &self.members, &self.policy);
            mark_dirty(&mut self.members, &report.key, changed);
            return None;
        }
        member.keys.insert(report.key.clone());
        let changed = retarget(book, &self.members, &self.policy);
        let changed: Vec<HolderId> = changed.into_iter().filter(|&h| h != holder).collect();
        mark_dirty(&mut self.members, &report.key, changed);
        self.answer(holder, &report.key, now)
    }

    /// Grants what the pool allows toward `holder`'s target of `key` and says where it stands.
    fn answer(&mut self, holder: HolderId, key: &K, now: Timestamp) -> Option<KeyAnswer<K>> {
        let book = self.books.get_mut(key)?;
        let index = book.holdings.iter().position(|h| h.holder == holder)?;
        let pool = book.pool.share();
        let Holding { booked, target, .. } = book.holdings[index];
        let grow = |booked: u64, target: u64, pool: u64| {
            if target > booked {
                booked + (target - booked).min(pool)
            } else {
                booked
            }
        };
        let granted = Share {
            rate: grow(booked.rate, target.rate, pool.rate),
            burst: grow(booked.burst, target.burst, pool.burst),
        };
        let delta = Share {
            rate: granted.rate - booked.rate,
            burst: granted.burst - booked.burst,
        };
        // Book first: the pool gives up the rate and capacity (tokens above
        // its new capacity vanish) and at most the granted burst in tokens.
        let tokens = book
            .pool
            .take_up_to(now, u128::from(delta.burst) * PICO_PER_TOKEN);
        book.pool.set_share(
            now,
            Share {
                rate: pool.rate - delta.rate,
                burst: pool.burst - delta.burst,
            },
        );
        book.holdings[index].booked = granted;
        Some(KeyAnswer {
            key: key.clone(),
            booked: granted,
            target,
            tokens,
            spare: book.pool.share().rate.saturating_mul(16) >= book.limit.rate,
        })
    }
}

/// Removes from `book` the holdings of holders not registered, or
/// registered under a newer incarnation, returning their bookings with no
/// tokens; whether it removed any. Only an ended registration makes a
/// holding stale, so a book pruned since the last one ended is skipped.
fn prune<K>(
    book: &mut KeyBook,
    members: &HashMap<HolderId, Member<K>>,
    ended: u64,
    now: Timestamp,
    starter: StarterPolicy,
) -> bool {
    if book.pruned_at == Some(ended) {
        return false;
    }
    book.pruned_at = Some(ended);
    let mut pruned = false;
    let mut i = 0;
    while i < book.holdings.len() {
        let h = book.holdings[i];
        let live = members
            .get(&h.holder)
            .is_some_and(|m| m.incarnation <= h.incarnation);
        if live {
            i += 1;
        } else {
            book.holdings.swap_remove(i);
            give_back(book, h.booked, 0, now, starter);
            pruned = true;
        }
    }
    pruned
}

/// Returns `share` (and `tokens` pico-tokens) from a holding to the pool of `book`.
///
/// The pool never holds more than the limit leaves beside the bookings and
/// the starter reserve (it always does unless a reload lowered the limit
/// below what is booked).
fn give_back(
    book: &mut KeyBook,
    share: Share,
    tokens: u128,
    now: Timestamp,
    starter: StarterPolicy,
) {
    let pool = book.pool.share();
    let reserve = starter.reserve(book.limit);
    let booked = book.holdings.iter().fold(reserve, |sum, h| Share {
        rate: sum.rate.saturating_add(h.booked.rate),
        burst: sum.burst.saturating_add(h.booked.burst),
    });
    book.pool.set_share(
        now,
        Share {
            rate: pool
                .rate
                .saturating_add(share.rate)
                .min(book.limit.rate.saturating_sub(booked.rate)),
            burst: pool
                .burst
                .saturating_add(share.burst)
                .min(book.limit.burst.saturating_sub(booked.burst)),
        },
    );
    book.pool.add(now, tokens);
}

/// Recomputes every holding's target of `book`; the holders whose target now differs from their booking.
///
/// A holder wants `max(headroom × demand, floor)` with `floor = rate /
/// (members × floor_divisor)` (a newcomer, with no demand yet, the floor);
/// the rates are split max-min fair with the leftover unassigned (each at
/// most what it wants) by [`steady_shares`], which keeps a booking while
/// the fair share is within a tenth of it and never lets the targets sum
/// past the rate; so what nobody wants stays in the pool and the holders
/// above the fair level get equal parts, however their demands differ.
/// Bursts follow the rates in proportion (at least one token for a holder
/// with any rate; a kept rate keeps its burst).
///
/// A holder that owns a starter slot has its slot's part of the key beside
/// its booking, so the fair split is of what the holdings have in all (the
/// bookings and the owners' parts), and an owner is booked its fair share
/// less its part: an instance without a slot then gets as much of a busy
/// key as one with a slot (not the part less). If that would book past
/// the rate (an owner wanting less than its part), the split is of the
/// bookings alone, as without slots.
fn retarget<K>(
    book: &mut KeyBook,
    members: &HashMap<HolderId, Member<K>>,
    policy: &AuthorityPolicy,
) -> Vec<HolderId> {
    // What the holdings split: the limit less the starter reserve.
    let limit = minus(book.limit, policy.starter.reserve(book.limit));
    let n = book.holdings.len().max(members.len()).max(1) as u64;
    let floor = limit.rate / n.saturating_mul(policy.floor_divisor.max(1));
    let wants: Vec<u64> = book
        .holdings
        .iter()
        .map(|h| {
            h.demand
                .map_or(floor, |d| d.saturating_mul(policy.headroom).max(floor))
        })
        .collect();
    let claims: Vec<Option<u64>> = wants.iter().map(|&w| Some(w)).collect();
    let held: Vec<Option<u64>> = book
        .holdings
        .iter()
        .map(|h| (h.booked.rate > 0).then_some(h.booked.rate))
        .collect();
    // Max-min fair over the bookings and the owners' parts, each owner booked its share less its part.
    let part = policy.starter.part(book.limit).rate;
    let owns: Vec<bool> = book
        .holdings
        .iter()
        .map(|h| part > 0 && members.get(&h.holder).is_some_and(|m| m.slot.is_some()))
        .collect();
    let parts = part.saturating_mul(owns.iter().filter(|&&o| o).count() as u64);
    let whole = fair_shares(
        limit.rate.saturating_add(parts),
        &claims,
        Leftover::Unassigned,
    );
    let less_parts: Vec<u64> = whole
        .iter()
        .zip(&owns)
        .map(|(&share, &owns)| {
            if owns {
                share.saturating_sub(part)
            } else {
                share
            }
        })
        .collect();
    let booked_in_all = less_parts
        .iter()
        .fold(0u64, |sum, &f| sum.saturating_add(f));
    let fair = if booked_in_all <= limit.rate {
        less_parts
    } else {
        fair_shares(limit.rate, &claims, Leftover::Unassigned)
    };
    // A booking within a tenth of its fair share is kept, unless the kept
    // ones would then sum past the rate: then every share falls to its
    // fair one, so a holder below its fair share can grow.
    let within = |old: u64, new: u64| old.abs_diff(new).saturating_mul(10) <= old;
    let kept: Vec<u64> = fair
        .iter()
        .zip(&held)
        .map(|(&new, &old)| match old {
            Some(old) if within(old, new) => old,
            _ => new,
        })
        .collect();
    let total = kept.iter().fold(0u64, |sum, &k| sum.saturating_add(k));
    let rates = if total <= limit.rate { kept } else { fair };
    let mut changed = Vec::new();
    for (holding, &rate) in book.holdings.iter_mut().zip(&rates) {
        let burst = if rate == holding.booked.rate {
            holding.booked.burst
        } else if limit.rate == 0 {
            0
        } else {
            let part = u128::from(limit.burst) * u128::from(rate) / u128::from(limit.rate);
            u64::try_from(part)
                .unwrap_or(limit.burst)
                .max(u64::from(rate > 0))
                .min(limit.burst)
        };
        holding.target = Share { rate, burst };
        if holding.target != holding.booked {
            changed.push(holding.holder);
        }
    }
    changed
}

/// Marks `key` dirty for each of `holders` still registered.
fn mark_dirty<K: Clone + Eq + Hash>(
    members: &mut HashMap<HolderId, Member<K>>,
    key: &K,
    holders: Vec<HolderId>,
) {
    for holder in holders {
        if let Some(member) = members.get_mut(&holder) {
            member.dirty.insert(key.clone());
        }
    }
}

/// `a − b`, component-wise, at least zero.
fn minus(a: Share, b: Share) -> Share {
    Share {
        rate: a.rate.saturating_sub(b.rate),
        burst: a.burst.saturating_sub(b.burst),
    }
}
