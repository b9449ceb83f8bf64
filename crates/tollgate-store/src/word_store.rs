//! [`WordStore`]: keys to one-word states, lock-free for the keys it already holds.
//!
//! # Layout
//!
//! The store is split into a power-of-two number of shards, chosen by the
//! low bits of a seeded hash of the key's [`KeyId`]. A shard header (padded
//! to its own cache line) holds:
//!
//! * `table`: an epoch-managed pointer to the shard's current table;
//! * `swept_at`: when the shard was last rebuilt (nanoseconds);
//! * `len`: the number of keys in the table;
//! * a mutex, taken only by writers that insert a key or rebuild the table.
//!
//! A table is one boxed slice of 24-byte slots, `{ hi, lo, state }`, all
//! atomics, with open addressing and linear probing. The home slot of a key
//! is `(hash × capacity) >> 64` (a multiply-shift, so the capacity need not
//! be a power of two and a table grows by about 1.33× rather than doubling).
//! `hi == 0` marks an empty slot; a [`KeyId`]'s `hi` is never 0.
//!
//! # A check
//!
//! *Fast path, no lock.* Pin the epoch, load the table, probe: an empty slot
//! means the key is absent; a slot whose `hi` and `lo` match is the key's.
//! For a present key, [`state_word::update`] runs the algorithm on the state
//! and writes the new state with one compare-and-swap, retrying if another
//! thread won the race. A denial returns no new state and writes nothing:
//! the deny path of a hot key only loads (the shard header, the slot), so
//! any number of threads can be denied on one key without sharing a written
//! cache line. For an absent key, the algorithm is asked about the fresh
//! state 0; if that gives nothing to store (a denial, a check-only request,
//! a refund), the decision is returned without a lock, since a key that
//! stays fresh needs no memory.
//!
//! *Slow path, under the shard mutex.* Taken when the key must be inserted,
//! when the key's slot is frozen by a rebuild, or when the shard is due a
//! sweep (below). The table is reloaded (no slot of the current table is
//! frozen while the mutex is held, since only rebuilds freeze and they hold
//! it), the key probed again, and either updated as above or inserted: the
//! slot's `state` and `lo` are written, then `hi` with release ordering, so
//! a lock-free reader that sees `hi` sees the rest. Slots are never reused
//! or cleared in place (a stalled reader's compare-and-swap could otherwise
//! land on another key's state); only rebuilds reclaim them.
//!
//! # Rebuilds
//!
//! A rebuild (under the shard mutex) runs when an insert would take the
//! table above 80% occupancy or the shard above its share of `max_keys`, and
//! on every [`sweep`](WordStore::sweep). It:
//!
//! 1. freezes every occupied slot by swapping its state for
//!    [`RESERVED_STATE`]; a concurrent fast-path update either landed before
//!    (and is in the value copied) or fails, sees the marker, and retries
//!    through the slow path, which waits for the mutex and then finds the
//!    key in the new table;
//! 2. keeps the keys whose state is not yet fresh (`fresh_at > now`):
//!    dropping a fresh key changes no decision;
//! 3. if more keys remain than the shard's share, *evicts* the ones that
//!    have used the least of their budget, the newest among equals (a
//!    slot's `hi` carries its key's arrival number in bits no identity
//!    uses), down to 7/8 of the share (so eviction is paid once per many
//!    inserts); see [`eviction`](crate::eviction) for the order and what
//!    it guarantees;
//! 4. sizes a new table to hold the survivors at 60% occupancy (capped at
//!    the shard's maximum, which holds the whole share at 80%), fills it,
//!    publishes it, and hands the old one to the epoch collector, which frees
//!    it once no reader can still hold it.
//!
//! # Window wrap-around
//!
//! Window algorithms keep only the low bits of the window number
//! ([`WordAlgorithm::max_unexamined`] `= D`): a state left unexamined for
//! longer than `D` could be misread. So every shard records when it was
//! last rebuilt (`swept_at`), and a check that finds the shard unrebuilt
//! for more than `D/4` (fast path: one load of the shard header, which the
//! check reads anyway) rebuilds it first, dropping every key that has become
//! fresh. A rebuild places stored windows relative to `max(now, swept_at) +
//! D/4`, later than any write, so a rebuild run with a lagging timestamp
//! never takes a key written in a later window for a stale one; and a
//! rebuild that comes more than `D/2` after the previous one (after a quiet
//! spell) drops every key of the shard, all of them being fresh by then.
//! The result: decisions stay exact however long a key sits idle. The
//! reasoning is in `sweep_schedule.rs`; `D/4` is at least 16 000 windows
//! (2 million for a fixed window), so for one-second windows a busy shard is
//! rebuilt for this reason at most every few hours.
//!
//! # Memory
//!
//! A key costs one 24-byte slot. Tables are kept between 60% occupancy
//! (right after a rebuild) and 80% (when one is due), so a key costs 30 to
//! 40 bytes ([`memory_bytes`](WordStore::memory_bytes) divided by
//! [`len`](WordStore::len); 32.9 measured with one million integer keys). The store as a whole never
//! holds more than `max_keys` keys, and its tables never more than
//! [`max_memory_bytes`](WordStore::max_memory_bytes): the shard headers plus
//! `max_keys × 30` bytes, give or take one slot per shard. On top of that, a
//! shard being rebuilt briefly holds its old table and a list of its live
//! keys (48 bytes each), and retired tables wait for the epoch collector.
//! Every rebuild hands its old table to the collector at once (rather than
//! leaving it in the thread's bag of garbage, which holds 64 items before
//! it is passed on), so few tables wait. Measured: a flood of 1.5 million
//! keys against the default store (a million keys, 30.0 MB of tables) peaks
//! at 37 MB resident for the whole test process; leaving retired tables in
//! the bag took it to 62 MB.

use std::fmt;
use std::sync::atomic::{AtomicU64 as StdAtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use tollgate_core::{Decision, RESERVED_STATE, Timestamp, WordAlgorithm};

use crate::config::{ShardLayout, StoreConfig};
use crate::eviction::{EvictionRank, evict_least_used};
use crate::hashing::KeyHashing;
use crate::key::{Key, KeyId, SPARE_HI_BITS};
use crate::state_word::{self, AtomicU64};
use crate::sweep_schedule::SweepSchedule;

/// The smallest table a rebuild allocates (unless the shard's share is smaller still).
const MIN_CAPACITY: usize = 8;

/// Where a slot's `hi` keeps the key's arrival number (in [`SPARE_HI_BITS`]).
const ARRIVAL_SHIFT: u32 = SPARE_HI_BITS.trailing_zeros();

/// A shard whose arrival numbers reach this renumbers its keys at the next
/// rebuild (keeping their order), so that numbers always fit their 32 bits.
const RENUMBER_AT: u64 = 1 << 31;

/// Bytes a shard costs besides its slots, as counted by `memory_bytes`,
/// plus one slot of rounding in the table's capacity.
pub(crate) const FIXED_BYTES_PER_SHARD: usize =
    size_of::<CachePadded<Shard>>() + size_of::<Table>() + size_of::<Slot>();

/// One key's place in a table.
///
/// `hi == 0` means empty. `hi` and `lo` are written once, when the key is
/// inserted (under the shard mutex), and never change; `state` changes by
/// compare-and-swap and is frozen to [`RESERVED_STATE`] by a rebuild. `hi`
/// holds the key's identity and, in the bits no identity uses
/// ([`SPARE_HI_BITS`]), the key's arrival number in its shard, which the
/// order of eviction reads.
struct Slot {
    hi: StdAtomicU64,
    lo: StdAtomicU64,
    state: AtomicU64,
}

#[cfg(not(loom))]
const _: () = assert!(size_of::<Slot>() == 24);

impl Slot {
    fn empty() -> Self {
        Slot {
            hi: StdAtomicU64::new(0),
            lo: StdAtomicU64::new(0),
            state: AtomicU64::new(0),
        }
    }
}

/// A shard's open-addressing table.
struct Table {
    slots: Box<[Slot]>,
}

impl Table {
    fn with_capacity(capacity: usize) -> Self {
        Table {
            slots: (0..capacity).map(|_| Slot::empty()).collect(),
        }
    }

    fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The slot a probe for `hash` starts at.
    #[inline]
    fn home(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    /// The slot holding `id`, if the table has one.
    #[inline(always)]
    fn find(&self, id: KeyId, hash: u64) -> Option<&Slot> {
        let capacity = self.slots.len();
        let mut i = self.home(hash);
        for _ in 0..capacity {
            let slot = self.slots.get(i)?;
            let hi = slot.hi.load(Ordering::Acquire);
            if hi == 0 {
                return None;
            }
            if hi & !SPARE_HI_BITS == id.hi() && slot.lo.load(Ordering::Relaxed) == id.lo() {
                return Some(slot);
            }
            i += 1;
            if i == capacity {
                i = 0;
            }
        }
        None
    }

    /// Puts `id` with `state`, the shard's `arrival`-th key (below 2³²), in
    /// the first empty slot of its probe chain.
    ///
    /// Only under the shard mutex (or before the table is published), for a
    /// key not in the table. Returns false if the table has no empty slot,
    /// which the occupancy limit rules out.
    fn insert_absent(&self, id: KeyId, hash: u64, state: u64, arrival: u64) -> bool {
        let capacity = self.slots.len();
        let mut i = self.home(hash);
        for _ in 0..capacity {
            let Some(slot) = self.slots.get(i) else {
                return false;
            };
            if slot.hi.load(Ordering::Relaxed) == 0 {
                slot.state.store(state, Ordering::Relaxed);
                slot.lo.store(id.lo(), Ordering::Relaxed);
                let arrival = (arrival << ARRIVAL_SHIFT) & SPARE_HI_BITS;
                slot.hi.store(id.hi() | arrival, Ordering::Release);
                return true;
            }
            i += 1;
            if i == capacity {
                i = 0;
            }
        }
        false
    }
}

/// One shard's header.
struct Shard {
    /// The current table; null while the shard holds no key.
    table: Atomic<Table>,
    /// When the shard was last rebuilt, in nanoseconds since the epoch.
    swept_at: StdAtomicU64,
    /// Keys in the current table.
    len: AtomicUsize,
    /// The arrival number of the next key inserted (changed under `writer` only).
    next_arrival: StdAtomicU64,
    /// Taken by inserts and rebuilds, never by the fast path.
    writer: Mutex<()>,
}

/// A key a rebuild carries over.
struct LiveKey {
    id: KeyId,
    /// The key's probe hash.
    hash: u64,
    state: u64,
    /// The key's arrival number in its shard.
    arrival: u64,
}

/// Keys to one-word states, for every [`WordAlgorithm`].
///
/// Checks of keys the store holds take no lock; the deny path of a hot key
/// writes nothing shared. Check-and-consume is atomic: with any number of
/// threads, a limit of `L` admits exactly `L`. The store holds at most
/// `max_keys` keys, dropping keys that have become fresh (which changes no
/// decision) and, when full, evicting the keys that have used the least of
/// their budget, the newest among equals (so an exhausted key outlives a
/// flood of new ones of any cost). It
/// never reads a clock: every call takes the time as a
/// [`Timestamp`]. See the [module docs](crate::word_store) for the design
/// and memory figures.
pub struct WordStore<A: WordAlgorithm> {
    algorithm: A,
    shards: Box<[CachePadded<Shard>]>,
    /// `shards.len() - 1`.
    shard_mask: usize,
    layout: ShardLayout,
    /// The largest table a shard may have: its share at 80% occupancy.
    max_capacity: usize,
    /// When a shard must be rebuilt so that window numbers are never misread.
    sweeps: SweepSchedule,
    hashing: KeyHashing,
    /// The algorithm's capacity: the `used` of an exhausted key.
    capacity: u64,
}

/// What a call asks of a key's state.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Request {
    /// Decide a request of this cost, consuming if it passes.
    Take(u64),
    /// Give back this many units.
    GiveBack(u64),
    /// Take this state (a count carried over from another store) unless the
    /// one held has used more: carrying never lowers a count.
    Put(u64),
}

impl Request {
    /// The algorithm's answer to this request on `state` at `now`.
    #[inline(always)]
    pub(crate) fn on<A: WordAlgorithm>(
        self,
        algorithm: &A,
        state: u64,
        now: Timestamp,
    ) -> (Decision, Option<u64>) {
        match self {
            Request::Take(cost) => algorithm.decide(state, now, cost),
            Request::GiveBack(amount) => algorithm.refund(state, now, amount),
            Request::Put(next) => {
                let kept = if algorithm.used(next, now) >= algorithm.used(state, now) {
                    next
                } else {
                    state
                };
                (algorithm.decide(kept, now, 0).0, Some(kept))
            }
        }
    }
}

/// Keeps a state only if it is worth storing: not the fresh state, not the marker.
#[inline]
fn state_to_store(next: Option<u64>) -> Option<u64> {
    next.filter(|&n| n != 0 && n != RESERVED_STATE)
}

impl<A: WordAlgorithm> WordStore<A> {
    /// An empty store deciding with `algorithm`, sized by `config`.
    pub fn new(algorithm: A, config: StoreConfig) -> Self {
        Self::with_hashing(algorithm, config, KeyHashing::random())
    }

    /// An empty store whose key identities are those of every store built with `hashing`.
    pub(crate) fn with_hashing(algorithm: A, config: StoreConfig, hashing: KeyHashing) -> Self {
        let layout = config.layout();
        let sweeps = SweepSchedule::for_algorithm(&algorithm);
        let shards = (0..layout.count)
            .map(|_| {
                CachePadded::new(Shard {
                    table: Atomic::null(),
                    swept_at: StdAtomicU64::new(0),
                    len: AtomicUsize::new(0),
                    next_arrival: StdAtomicU64::new(0),
                    writer: Mutex::new(()),
                })
            })
            .collect();
        WordStore {
            shards,
            shard_mask: layout.count - 1,
            layout,
            max_capacity: layout.share.saturating_mul(5).div_ceil(4).max(2),
            sweeps,
            hashing,
            capacity: algorithm.decide(0, Timestamp::EPOCH, 0).0.remaining(),
            algorithm,
        }
    }

    /// The seeds that name its keys.
    pub(crate) fn hashing(&self) -> KeyHashing {
        self.hashing
    }

    /// Every key it holds with a state other than the fresh one, and that state.
    ///
    /// Each shard is read under its writer lock, so no rebuild moves keys
    /// while it is read; a lock-free update racing with the read is seen or not.
    pub(crate) fn live_states(&self) -> Vec<(KeyId, u64)> {
        let mut live = Vec::new();
        for shard in self.shards.iter() {
            let _writer = shard.writer.lock();
            let guard = epoch::pin();
            let Some(table) = self.current_table(shard, &guard) else {
                continue;
            };
            for slot in table.slots.iter() {
                let state = slot.state.load(Ordering::Acquire);
                let id = KeyId::new(
                    slot.hi.load(Ordering::Acquire) & !SPARE_HI_BITS,
                    slot.lo.load(Ordering::Relaxed),
                );
                if let Some(id) = id.filter(|_| state != 0 && state != RESERVED_STATE) {
                    live.push((id, state));
                }
            }
        }
        live
    }

    /// Sets the state of the key with identity `id` (under this store's seeds) at `now`, unless the one it holds has used more.
    pub(crate) fn put_state(&self, id: KeyId, now: Timestamp, state: u64) {
        self.apply(id, now, Request::Put(state));
    }

    /// Decides a request costing `cost` for `key` at `now`, consuming if it passes.
    ///
    /// A `cost` of 0 checks without consuming.
    #[inline]
    pub fn check<K: Key + ?Sized>(&self, key: &K, now: Timestamp, cost: u64) -> Decision {
        let id = self.hashing.key_id(key);
        self.apply(id, now, Request::Take(cost))
    }

    /// Gives back `amount` units that `key` consumed earlier.
    pub fn refund<K: Key + ?Sized>(&self, key: &K, now: Timestamp, amount: u64) -> Decision {
        let id = self.hashing.key_id(key);
        self.apply(id, now, Request::GiveBack(amount))
    }

    /// The key's current state word, 0 when it is fresh or absent; for displays.
    ///
    /// Interpret it with the algorithm (e.g. `TokenBucket::tokens`).
    pub fn peek<K: Key + ?Sized>(&self, key: &K) -> u64 {
        let id = self.hashing.key_id(key);
        let hash = self.hashing.probe_hash(id);
        let shard = self.shard(hash);
        let guard = epoch::pin();
        match self
            .current_table(shard, &guard)
            .and_then(|t| t.find(id, hash))
        {
            None => return 0,
            Some(slot) => {
                let state = slot.state.load(Ordering::Acquire);
                if state != RESERVED_STATE {
                    return state;
                }
            }
        }
        // The slot is frozen by a rebuild: wait for it and read the new table.
        let _writer = shard.writer.lock();
        self.current_table(shard, &guard)
            .and_then(|t| t.find(id, hash))
            .map_or(0, |slot| slot.state.load(Ordering::Acquire))
    }

    /// Drops every key whose state is fresh at `now`, returning memory; changes no decision.
    ///
    /// Rebuilds every shard. Not needed for correctness or for the memory
    /// bound (inserts and checks sweep as needed), but it gives back the
    /// memory of keys that went quiet.
    pub fn sweep(&self, now: Timestamp) {
        let guard = epoch::pin();
        for shard in self.shards.iter() {
            let _writer = shard.writer.lock();
            self.rebuild(shard, now, 0, &guard);
        }
    }

    /// The number of keys held (including any that have become fresh since the last sweep).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.len.load(Ordering::Relaxed))
            .sum()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the store holds: its tables and shard headers.
    pub fn memory_bytes(&self) -> usize {
        let guard = epoch::pin();
        let tables: usize = self
            .shards
            .iter()
            .filter_map(|shard| self.current_table(shard, &guard))
            .map(|t| size_of::<Table>() + t.capacity() * size_of::<Slot>())
            .sum();
        self.shards.len() * size_of::<CachePadded<Shard>>() + tables
    }

    /// The most bytes [`memory_bytes`](Self::memory_bytes) can ever report for this store.
    pub fn max_memory_bytes(&self) -> usize {
        let per_shard = size_of::<CachePadded<Shard>>()
            + size_of::<Table>()
            + self.max_capacity.saturating_mul(size_of::<Slot>());
        self.shards.len().saturating_mul(per_shard)
    }

    /// The most keys the store holds at once (at most the configured `max_keys`).
    pub fn max_keys(&self) -> usize {
        self.layout.count * self.layout.share
    }

    /// The algorithm the store decides with.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard {
        // The shard count is a power of two, so the mask keeps the index in range.
        &self.shards[(hash as usize) & self.shard_mask]
    }

    #[inline]
    fn current_table<'g>(&self, shard: &Shard, guard: &'g Guard) -> Option<&'g Table> {
        let table = shard.table.load(Ordering::Acquire, guard);
        // SAFETY: tables are only ever freed through `defer_destroy` after
        // being unlinked (or in `drop`, which has `&mut self`), so a table
        // loaded under a pinned guard stays alive for the guard's lifetime.
        unsafe { table.as_ref() }
    }

    /// Whether the shard has gone unrebuilt for long enough that its window states could wrap.
    #[inline]
    fn sweep_due(&self, shard: &Shard, now: Timestamp) -> bool {
        self.sweeps
            .is_due(shard.swept_at.load(Ordering::Relaxed), now)
    }

    /// Runs `request` on the key's state: lock-free when possible, else under the shard mutex.
    ///
    /// Each path calls the algorithm at its own site, so that the compiler
    /// inlines it into the lock-free step: a closure shared between the
    /// paths is compiled out of line, and returning its 64-byte answer
    /// through memory costs more than the rest of a hot-key check (30 ns
    /// against 11 ns, measured).
    #[inline]
    fn apply(&self, id: KeyId, now: Timestamp, request: Request) -> Decision {
        let hash = self.hashing.probe_hash(id);
        let shard = self.shard(hash);
        let guard = epoch::pin();
        if !self.sweep_due(shard, now) {
            match self
                .current_table(shard, &guard)
                .and_then(|t| t.find(id, hash))
            {
                Some(slot) => {
                    let transition = |state| request.on(&self.algorithm, state, now);
                    if let Ok(decision) = state_word::update(&slot.state, transition) {
                        return decision;
                    }
                }
                None => {
                    let (decision, next) = request.on(&self.algorithm, 0, now);
                    if state_to_store(next).is_none() {
                        return decision;
                    }
                }
            }
        }
        self.apply_locked(shard, id, hash, now, request, &guard)
    }

    #[inline(never)]
    fn apply_locked(
        &self,
        shard: &Shard,
        id: KeyId,
        hash: u64,
        now: Timestamp,
        request: Request,
        guard: &Guard,
    ) -> Decision {
        let mut transition = |state| request.on(&self.algorithm, state, now);
        let _writer = shard.writer.lock();
        if self.sweep_due(shard, now) {
            self.rebuild(shard, now, 0, guard);
        }
        let table = self.current_table(shard, guard);
        if let Some(slot) = table.and_then(|t| t.find(id, hash)) {
            return match state_word::update(&slot.state, &mut transition) {
                Ok(decision) => decision,
                Err(state_word::Frozen) => {
                    // Unreachable: only rebuilds freeze slots, and they
                    // publish the new table before releasing the mutex held here.
                    debug_assert!(false, "a frozen slot in the current table");
                    transition(0).0
                }
            };
        }
        let (decision, next) = transition(0);
        let Some(state) = state_to_store(next) else {
            return decision;
        };
        let len = shard.len.load(Ordering::Relaxed);
        let table = match table {
            Some(t)
                if len < self.layout.share
                    && (len + 1).saturating_mul(5) <= t.capacity().saturating_mul(4) =>
            {
                Some(t)
            }
            _ => self.rebuild(shard, now, 1, guard),
        };
        let arrival = shard.next_arrival.fetch_add(1, Ordering::Relaxed);
        if let Some(table) = table
            && table.insert_absent(id, hash, state, arrival)
        {
            shard.len.fetch_add(1, Ordering::Relaxed);
        } else {
            // Unreachable: a rebuild for one incoming key leaves room for it.
            debug_assert!(false, "no room for an insert after a rebuild");
        }
        decision
    }

    /// Replaces the shard's table with one holding its live keys and room for
    /// `incoming` more; returns the new table (None when empty).
    ///
    /// Must be called with the shard mutex held.
    fn rebuild<'g>(
        &self,
        shard: &Shard,
        now: Timestamp,
        incoming: usize,
        guard: &'g Guard,
    ) -> Option<&'g Table> {
        let swept_at = shard.swept_at.load(Ordering::Relaxed);
        let all_fresh = self.sweeps.all_fresh(swept_at, now);
        let reference = self.sweeps.reference(swept_at, now);
        let old = shard.table.load(Ordering::Acquire, guard);
        let mut live = Vec::new();
        // SAFETY: as in `current_table`.
        if let Some(old_table) = unsafe { old.as_ref() } {
            live.reserve(shard.len.load(Ordering::Relaxed));
            for slot in old_table.slots.iter() {
                let hi = slot.hi.load(Ordering::Relaxed);
                if hi == 0 {
                    continue;
                }
                let state = state_word::freeze(&slot.state);
                if all_fresh || state == RESERVED_STATE {
                    continue;
                }
                let fresh_at = self.algorithm.fresh_at(state, reference);
                if fresh_at <= now {
                    continue;
                }
                let lo = slot.lo.load(Ordering::Relaxed);
                if let Some(id) = KeyId::new(hi & !SPARE_HI_BITS, lo) {
                    live.push(LiveKey {
                        id,
                        hash: self.hashing.probe_hash(id),
                        state,
                        arrival: (hi & SPARE_HI_BITS) >> ARRIVAL_SHIFT,
                    });
                }
            }
        }
        if live.len() + incoming > self.layout.share {
            let keep = self.layout.keep_after_eviction();
            let rank = |k: &LiveKey| {
                let used = self.algorithm.used(k.state, now);
                EvictionRank::new(used, self.capacity, k.arrival)
            };
            drop(evict_least_used(&mut live, keep, rank));
        }
        if shard.next_arrival.load(Ordering::Relaxed) >= RENUMBER_AT {
            renumber_arrivals(&mut live);
            shard
                .next_arrival
                .store(live.len() as u64, Ordering::Relaxed);
        }
        let needed = live.len() + incoming;
        let new = if needed == 0 {
            Shared::null()
        } else {
            let table = Table::with_capacity(self.capacity_for(needed));
            for key in &live {
                let placed = table.insert_absent(key.id, key.hash, key.state, key.arrival);
                debug_assert!(placed, "a rebuilt table has room for every live key");
            }
            Owned::new(table).into_shared(guard)
        };
        let old = shard.table.swap(new, Ordering::AcqRel, guard);
        if !old.is_null() {
            // SAFETY: the old table is unlinked; readers that still hold it
            // are pinned, and the collector frees it only after they unpin.
            unsafe { guard.defer_destroy(old) };
            // Hand the old table to the collector now rather than when this
            // thread's bag of garbage fills: the bag holds 64 items, and 64
            // retired tables would double the memory of a full store.
            guard.flush();
        }
        shard.len.store(live.len(), Ordering::Relaxed);
        shard
            .swept_at
            .store(swept_at.max(now.as_nanos()), Ordering::Relaxed);
        // SAFETY: just published under this guard.
        unsafe { new.as_ref() }
    }

    /// The table capacity for `keys` keys: 60% occupancy, within the shard's bounds.
    fn capacity_for(&self, keys: usize) -> usize {
        keys.saturating_mul(5)
            .div_ceil(3)
            .max(MIN_CAPACITY)
            .min(self.max_capacity)
    }
}

/// Numbers `live` 0, 1, 2, … in the order the keys arrived.
fn renumber_arrivals(live: &mut [LiveKey]) {
    live.sort_unstable_by_key(|k| k.arrival);
    for (n, key) in live.iter_mut().enumerate() {
        key.arrival = n as u64;
    }
}

impl<A: WordAlgorithm> Drop for WordStore<A> {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no other thread can hold these tables;
        // tables retired earlier belong to the epoch collector.
        let guard = unsafe { epoch::unprotected() };
        for shard in self.shards.iter() {
            let table = shard.table.swap(Shared::null(), Ordering::Relaxed, guard);
            if !table.is_null() {
                // SAFETY: unlinked above and unreachable by anyone else.
                drop(unsafe { table.into_owned() });
            }
        }
    }
}

impl<A: WordAlgorithm + fmt::Debug> fmt::Debug for WordStore<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WordStore")
            .field("algorithm", &self.algorithm)
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
