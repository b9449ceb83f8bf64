//! The shares authority on Redis: `tollgate_core::share::Authority` run client-side on the state a call touches, written back by compare-and-set.
//!
//! One copy of the authority's logic: a call reads, in one atomic script
//! (`shares_read.lua`), Redis `TIME`, every registration, the caller's
//! dirty keys, a sample of the graveyard and the books of the keys it
//! touches; [`Authority::from_parts`] decides on that state; a second
//! script (`shares_write.lua`) writes back every book and registration that
//! changed only if none of those read changed since (each is a small blob
//! with a version), else the call is read and decided again, at most
//! [`ATTEMPTS`] times. One clock for every instance: Redis `TIME`.
//! The simulator alone decides at a supplied time instead
//! ([`RedisAuthority::sync_at`]: its virtual clock, and a fixed real-time TTL
//! for every book it writes); `tollgate serve` never supplies one.
//!
//! Layout: every key is under the hash tag `{shares}` (one cluster slot,
//! so both scripts are atomic on a cluster too): `tg{shares}:m` (a hash:
//! holder → registration), `tg{shares}:k:<key>` (a key's book),
//! `tg{shares}:d:<holder>` (keys whose target changed for a holder),
//! `tg{shares}:h:<holder>` (keys a holder holds), `tg{shares}:g` (the
//! graveyard: keys of reclaimed holders, tidied [`GRAVE_SAMPLE`] at a time
//! by later calls), `tg{shares}:s` (the fleet's starter policy: written by
//! the first call that finds none, then every instance's authority follows
//! it whatever its own flag says, because every key's pool must keep the
//! same reserve out) and `tg{shares}:o` (starter slot → owner: each
//! assignment and release is checked against it, so two instances cannot
//! give one slot to two holders). A book nobody holds expires when its pool would be full
//! again (an absent book is a full pool), so the number of keys is bounded
//! by what the holders hold (each holder's `max_keys`) plus what refilled
//! within the last burst time.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redis::Script;
use tollgate_core::Timestamp;
use tollgate_core::share::{
    Authority, AuthorityPolicy, BookRecord, HolderId, HoldingRecord, MemberRecord, Share,
    ShareBucket, StarterPolicy, SyncCall, SyncReply,
};
use tollgate_store::StoreError;

use crate::{RedisStore, SuppliedTime};

/// A call whose state changed under it is read and decided again at most this many times.
pub const ATTEMPTS: usize = 8;

/// Graveyard keys a call tidies along with its own.
pub const GRAVE_SAMPLE: usize = 32;

static READ_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("shares_read.lua")));
static WRITE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("shares_write.lua")));

/// What a [`RedisAuthority`] did: calls, Redis round trips, conflicts.
#[derive(Debug, Default)]
pub struct SharesStats {
    /// Holder calls answered.
    pub calls: AtomicU64,
    /// Script calls sent to Redis (two per attempt).
    pub redis_calls: AtomicU64,
    /// Attempts whose state changed under them (decided again).
    pub conflicts: AtomicU64,
    /// The fleet's starter policy differs from this instance's (it follows the fleet's).
    pub starter_differs: AtomicBool,
    /// The fleet's starter slots, as the latest call read them (this
    /// instance's own setting until a call has read the fleet's).
    pub fleet_starter_slots: AtomicU64,
}

/// The shares authority kept in Redis.
#[derive(Clone, Debug)]
pub struct RedisAuthority {
    store: RedisStore,
    policy: AuthorityPolicy,
    /// `<store prefix>tg{shares}:`.
    prefix: Vec<u8>,
    stats: std::sync::Arc<SharesStats>,
}

/// What one read brought back.
struct Snapshot {
    now: Timestamp,
    /// The fleet's starter policy (`None`: none written yet).
    starter: Option<StarterPolicy>,
    /// Registrations with the version read.
    members: Vec<(HolderId, u64, MemberRecord)>,
    dirty: Vec<Vec<u8>>,
    grave: Vec<Vec<u8>>,
    /// Books read, with the version (0: absent).
    books: HashMap<Vec<u8>, (u64, Option<BookRecord>)>,
}

impl RedisAuthority {
    /// An authority on `store`'s connection (and key prefix) deciding by `policy`.
    pub fn new(store: RedisStore, policy: AuthorityPolicy) -> Self {
        let mut prefix = store.key_prefix().to_vec();
        prefix.extend_from_slice(b"tg{shares}:");
        let stats = SharesStats {
            fleet_starter_slots: AtomicU64::new(u64::from(policy.starter.slots)),
            ..SharesStats::default()
        };
        RedisAuthority {
            store,
            policy,
            prefix,
            stats: std::sync::Arc::new(stats),
        }
    }

    /// What it did so far.
    pub fn stats(&self) -> &SharesStats {
        &self.stats
    }

    /// The starter policy this instance asks for (the fleet's is the first one written).
    pub fn starter(&self) -> StarterPolicy {
        self.policy.starter
    }

    /// Takes one holder call and answers it, at Redis `TIME`.
    ///
    /// An error (Redis unreachable, or the state changed under every one
    /// of its `ATTEMPTS` attempts) leaves nothing half written: the holder
    /// treats it as a lost call.
    pub async fn sync(&self, call: &SyncCall<Vec<u8>>) -> Result<SyncReply<Vec<u8>>, StoreError> {
        self.sync_with(call, None).await
    }

    /// Answers a holder call like [`RedisAuthority::sync`], at a supplied time instead of Redis `TIME`.
    ///
    /// For simulations in virtual time (see [`SuppliedTime`]): every book
    /// the call writes lives `time.key_ttl` in real time instead of until its
    /// pool would be full (a virtual duration). Production never calls it.
    pub async fn sync_at(
        &self,
        call: &SyncCall<Vec<u8>>,
        time: SuppliedTime,
    ) -> Result<SyncReply<Vec<u8>>, StoreError> {
        self.sync_with(call, Some(time)).await
    }

    async fn sync_with(
        &self,
        call: &SyncCall<Vec<u8>>,
        time: Option<SuppliedTime>,
    ) -> Result<SyncReply<Vec<u8>>, StoreError> {
        let at = time.map(|t| t.at);
        let book_ttl = time.map(|t| {
            u64::try_from(t.key_ttl.as_millis())
                .unwrap_or(u64::MAX)
                .max(1)
        });
        for _ in 0..ATTEMPTS {
            let snapshot = self.read(call, at).await?;
            let (reply, ops) = self.decide(&snapshot, call, book_ttl);
            if self.write(&ops).await? {
                self.stats.calls.fetch_add(1, Ordering::Relaxed);
                return Ok(reply);
            }
            self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
        }
        Err(StoreError::Unavailable(format!(
            "shares: the state changed under each of {ATTEMPTS} attempts"
        )))
    }

    fn members_key(&self) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.push(b'm');
        key
    }

    /// Reads what `call` needs, at Redis `TIME` or at `at`.
    async fn read(
        &self,
        call: &SyncCall<Vec<u8>>,
        at: Option<Timestamp>,
    ) -> Result<Snapshot, StoreError> {
        let mut invocation = READ_SCRIPT.prepare_invoke();
        invocation
            .key(self.members_key())
            .arg(&self.prefix)
            .arg(call.holder)
            .arg(GRAVE_SAMPLE);
        match at {
            Some(at) => {
                let ns = at.as_nanos();
                invocation.arg(ns / 1_000_000_000).arg(ns % 1_000_000_000);
            }
            None => {
                invocation.arg("").arg("");
            }
        }
        for report in &call.reports {
            invocation.arg(&report.key);
        }
        self.stats.redis_calls.fetch_add(1, Ordering::Relaxed);
        let reply: Vec<Vec<u8>> = self.store.invoke_as(&invocation).await?;
        parse_snapshot(call, reply).ok_or_else(|| {
            StoreError::Unavailable("shares: the read script answered a malformed reply".into())
        })
    }

    /// Decides `call` on `snapshot`: the reply, and the operations of the write script.
    ///
    /// `book_ttl_ms`: a simulation's TTL for every book written (else a
    /// book nobody holds lives until its pool would be full, and a held one
    /// has none).
    fn decide(
        &self,
        snapshot: &Snapshot,
        call: &SyncCall<Vec<u8>>,
        book_ttl_ms: Option<u64>,
    ) -> (SyncReply<Vec<u8>>, Vec<[Vec<u8>; 5]>) {
        let now = snapshot.now;
        if let Some(fleet) = snapshot.starter
            && fleet != self.policy.starter
            && !self.stats.starter_differs.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                fleet_slots = fleet.slots,
                fleet_divisor = fleet.divisor,
                slots = self.policy.starter.slots,
                divisor = self.policy.starter.divisor,
                "shares: the fleet's starter policy in Redis differs from this instance's flags; \
                 following the fleet's (docs/operations.md says how to change it)"
            );
        }
        // The fleet's policy, or this instance's if none was written yet.
        let policy = AuthorityPolicy {
            starter: snapshot.starter.unwrap_or(self.policy.starter),
            ..self.policy
        };
        self.stats
            .fleet_starter_slots
            .store(u64::from(policy.starter.slots), Ordering::Relaxed);
        let members = snapshot.members.iter().map(|&(id, _, record)| {
            let dirty = if id == call.holder {
                snapshot.dirty.clone()
            } else {
                Vec::new()
            };
            (id, record, dirty)
        });
        let books = snapshot
            .books
            .iter()
            .filter_map(|(k, (_, b))| b.clone().map(|b| (k.clone(), b)));
        let mut authority = Authority::from_parts(policy, members, books);
        let reply = authority.sync(now, call);
        for key in &snapshot.grave {
            authority.tidy(key, now);
        }
        let mut ops: Vec<[Vec<u8>; 5]> = Vec::new();
        let op = |kind: &str, a: &[u8], b: Vec<u8>, c: Vec<u8>, d: Vec<u8>| {
            [kind.as_bytes().to_vec(), a.to_vec(), b, c, d]
        };
        // Held keys of the caller: a release leaves its set even when the
        // call ends the registration (first, so a registration removed
        // below moves only the keys still held to the graveyard); a key
        // held is added while it is registered.
        let caller = call.holder.to_string();
        if reply.accepted {
            let registered = authority.member_record(call.holder).is_some();
            for report in &call.reports {
                let kind = match (report.release, registered) {
                    (true, _) => "h-",
                    (false, true) => "h+",
                    (false, false) => continue,
                };
                ops.push(op(
                    kind,
                    caller.as_bytes(),
                    report.key.clone(),
                    Vec::new(),
                    Vec::new(),
                ));
            }
        }
        // Registrations: those that changed, with the version read.
        let read: HashMap<HolderId, (u64, MemberRecord)> = snapshot
            .members
            .iter()
            .map(|&(id, v, r)| (id, (v, r)))
            .collect();
        let mut ids: HashSet<HolderId> = read.keys().copied().collect();
        ids.extend(authority.member_ids());
        for id in &ids {
            let before = read.get(id);
            let after = authority.member_record(*id);
            if before.map(|(_, r)| *r) == after {
                continue;
            }
            let version = before.map_or(0, |(v, _)| *v);
            let value = after.map_or_else(Vec::new, |r| encode_member(version + 1, &r));
            ops.push(op(
                "m",
                id.to_string().as_bytes(),
                version.to_string().into_bytes(),
                value,
                b"-".to_vec(),
            ));
        }
        // The starter policy, written once (the write fails if another call wrote one first).
        if snapshot.starter.is_none() {
            let value = format!("{} {}", policy.starter.slots, policy.starter.divisor);
            ops.push(op("s", b"-", b"0".to_vec(), value.into_bytes(), Vec::new()));
        }
        // Starter slots whose owner changed, checked against the owner read.
        let mut owners: HashMap<u32, (Option<HolderId>, Option<HolderId>)> = HashMap::new();
        for (id, (_, record)) in &read {
            if let Some(slot) = record.slot {
                owners.entry(slot).or_default().0 = Some(*id);
            }
        }
        for id in authority.member_ids() {
            if let Some(slot) = authority.member_record(id).and_then(|r| r.slot) {
                owners.entry(slot).or_default().1 = Some(id);
            }
        }
        let name =
            |id: Option<HolderId>| id.map_or_else(Vec::new, |id| id.to_string().into_bytes());
        for (slot, (before, after)) in owners {
            if before != after {
                ops.push(op(
                    "o",
                    slot.to_string().as_bytes(),
                    name(before),
                    name(after),
                    Vec::new(),
                ));
            }
        }
        // Books: each one read is checked; those that changed are written.
        for (key, (version, before)) in &snapshot.books {
            let after = authority.book_record(key);
            let (value, ttl) = match &after {
                None if before.is_none() => continue,
                None => (Vec::new(), 0),
                Some(b) if before.as_ref() == Some(b) => (b"=".to_vec(), 0),
                Some(b) => match (b.idle_for(now), book_ttl_ms) {
                    (Some(d), _) if d.is_zero() => (Vec::new(), 0),
                    (_, Some(ttl)) => (encode_book(version + 1, b), ttl),
                    (Some(d), None) => (
                        encode_book(version + 1, b),
                        // Never before the pool is full: rounded up, a millisecond more.
                        u64::try_from(d.as_millis())
                            .unwrap_or(u64::MAX)
                            .saturating_add(2),
                    ),
                    (None, None) => (encode_book(version + 1, b), 0),
                },
            };
            ops.push(op(
                "b",
                key,
                version.to_string().into_bytes(),
                value,
                ttl.to_string().into_bytes(),
            ));
        }
        // Dirty keys: the caller's as the authority left them, the others' added.
        let read_dirty: HashSet<&Vec<u8>> = snapshot.dirty.iter().collect();
        for id in authority.member_ids() {
            let name = id.to_string();
            for key in authority.dirty_of(id) {
                if id != call.holder || !read_dirty.contains(&key) {
                    ops.push(op("d+", name.as_bytes(), key, Vec::new(), Vec::new()));
                }
            }
        }
        let still: HashSet<Vec<u8>> = authority.dirty_of(call.holder).into_iter().collect();
        for key in &snapshot.dirty {
            if !still.contains(key) {
                ops.push(op(
                    "d-",
                    caller.as_bytes(),
                    key.clone(),
                    Vec::new(),
                    Vec::new(),
                ));
            }
        }
        for key in &snapshot.grave {
            ops.push(op("g-", key, Vec::new(), Vec::new(), Vec::new()));
        }
        (reply, ops)
    }

    /// Runs the write script; whether it wrote (false: something read changed).
    async fn write(&self, ops: &[[Vec<u8>; 5]]) -> Result<bool, StoreError> {
        let mut invocation = WRITE_SCRIPT.prepare_invoke();
        invocation.key(self.members_key()).arg(&self.prefix);
        for op in ops {
            for part in op {
                invocation.arg(part);
            }
        }
        self.stats.redis_calls.fetch_add(1, Ordering::Relaxed);
        let written: i64 = self.store.invoke_as(&invocation).await?;
        Ok(written == 1)
    }
}

/// Splits the read script's reply.
fn parse_snapshot(call: &SyncCall<Vec<u8>>, reply: Vec<Vec<u8>>) -> Option<Snapshot> {
    let mut it = reply.into_iter();
    let number =
        |v: Option<Vec<u8>>| -> Option<u64> { std::str::from_utf8(&v?).ok()?.parse().ok() };
    let secs = number(it.next())?;
    let nanos = number(it.next())?;
    let now = Timestamp::from_nanos(secs.checked_mul(1_000_000_000)?.checked_add(nanos)?);
    let starter = it.next()?;
    let starter = if starter.is_empty() {
        None
    } else {
        let text = std::str::from_utf8(&starter).ok()?;
        let (slots, divisor) = text.split_once(' ')?;
        Some(StarterPolicy {
            slots: slots.parse().ok()?,
            divisor: divisor.parse().ok()?,
        })
    };
    let count = number(it.next())?;
    let mut members = Vec::new();
    for _ in 0..count {
        let id = number(it.next())?;
        let (version, record) = decode_member(&it.next()?)?;
        members.push((id, version, record));
    }
    let list = |it: &mut std::vec::IntoIter<Vec<u8>>| -> Option<Vec<Vec<u8>>> {
        let n: u64 = std::str::from_utf8(&it.next()?).ok()?.parse().ok()?;
        (0..n).map(|_| it.next()).collect()
    };
    let dirty = list(&mut it)?;
    let grave = list(&mut it)?;
    let mut books = HashMap::new();
    let keys = call
        .reports
        .iter()
        .map(|r| &r.key)
        .chain(&dirty)
        .chain(&grave);
    for key in keys {
        let value = it.next()?;
        let entry = if value.is_empty() {
            (0, None)
        } else {
            let (version, book) = decode_book(&value)?;
            (version, Some(book))
        };
        books.insert(key.clone(), entry);
    }
    Some(Snapshot {
        now,
        starter,
        members,
        dirty,
        grave,
        books,
    })
}

/// `version incarnation expires last_seq slot|-`.
fn encode_member(version: u64, r: &MemberRecord) -> Vec<u8> {
    let slot = r.slot.map_or_else(|| "-".to_owned(), |s| s.to_string());
    format!(
        "{version} {} {} {} {slot}",
        r.incarnation,
        r.expires.as_nanos(),
        r.last_seq
    )
    .into_bytes()
}

fn decode_member(v: &[u8]) -> Option<(u64, MemberRecord)> {
    let mut f = std::str::from_utf8(v).ok()?.split(' ');
    let mut next = || -> Option<u64> { f.next()?.parse().ok() };
    let version = next()?;
    let mut record = MemberRecord {
        incarnation: next()?,
        expires: Timestamp::from_nanos(next()?),
        last_seq: next()?,
        slot: None,
    };
    // A record without a slot field (written before starter slots) owns none.
    record.slot = match f.next() {
        None | Some("-") => None,
        Some(slot) => Some(slot.parse().ok()?),
    };
    Some((version, record))
}

/// `version limit.rate limit.burst pool.rate pool.burst level at n (holder incarnation booked.rate booked.burst target.rate target.burst demand|-)*`.
fn encode_book(version: u64, b: &BookRecord) -> Vec<u8> {
    use std::fmt::Write;
    let pool = b.pool.share();
    let mut s = format!(
        "{version} {} {} {} {} {} {} {}",
        b.limit.rate,
        b.limit.burst,
        pool.rate,
        pool.burst,
        b.pool.level(),
        b.pool.at().as_nanos(),
        b.holdings.len()
    );
    for h in &b.holdings {
        let demand = h.demand.map_or_else(|| "-".to_owned(), |d| d.to_string());
        let _ = write!(
            s,
            " {} {} {} {} {} {} {demand}",
            h.holder, h.incarnation, h.booked.rate, h.booked.burst, h.target.rate, h.target.burst
        );
    }
    s.into_bytes()
}

fn decode_book(v: &[u8]) -> Option<(u64, BookRecord)> {
    let mut f = std::str::from_utf8(v).ok()?.split(' ');
    let mut word = move || f.next();
    let num = |w: Option<&str>| -> Option<u64> { w?.parse().ok() };
    let version = num(word())?;
    let limit = Share {
        rate: num(word())?,
        burst: num(word())?,
    };
    let pool_share = Share {
        rate: num(word())?,
        burst: num(word())?,
    };
    let level: u128 = word()?.parse().ok()?;
    let at = Timestamp::from_nanos(num(word())?);
    let n = num(word())?;
    let mut holdings = Vec::new();
    for _ in 0..n {
        let holder = num(word())?;
        let incarnation = num(word())?;
        let booked = Share {
            rate: num(word())?,
            burst: num(word())?,
        };
        let target = Share {
            rate: num(word())?,
            burst: num(word())?,
        };
        let demand = match word()? {
            "-" => None,
            d => Some(d.parse().ok()?),
        };
        holdings.push(HoldingRecord {
            holder,
            incarnation,
            booked,
            target,
            demand,
        });
    }
    let book = BookRecord {
        limit,
        pool: ShareBucket::new(pool_share, level, at),
        holdings,
    };
    Some((version, book))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_book_survives_its_encoding() {
        let book = BookRecord {
            limit: Share::per_second(100, 100),
            pool: ShareBucket::new(
                Share::per_second(40, 30),
                12_345_678_901_234,
                Timestamp::from_secs(7),
            ),
            holdings: vec![
                HoldingRecord {
                    holder: 3,
                    incarnation: 2,
                    booked: Share::per_second(60, 70),
                    target: Share::per_second(50, 50),
                    demand: Some(25_000),
                },
                HoldingRecord {
                    holder: 9,
                    incarnation: 1,
                    booked: Share::ZERO,
                    target: Share::per_second(1, 1),
                    demand: None,
                },
            ],
        };
        assert_eq!(decode_book(&encode_book(5, &book)), Some((5, book)));
        let mut member = MemberRecord {
            incarnation: 4,
            expires: Timestamp::from_secs(99),
            last_seq: 17,
            slot: Some(2),
        };
        assert_eq!(decode_member(&encode_member(3, &member)), Some((3, member)));
        member.slot = None;
        assert_eq!(decode_member(&encode_member(3, &member)), Some((3, member)));
        assert_eq!(decode_member(b"3 4 99000000000 17"), Some((3, member)));
    }
}
