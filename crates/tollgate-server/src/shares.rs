//! The shares mode in `serve`: one [`Holder`] per process deciding `shares: true` rules locally, and the task that syncs it with the Redis authority.
//!
//! Requests on a shares rule are decided from this instance's share of each
//! key ([`tollgate_core::share`]), with no Redis call. One background task
//! (started with the first such request) sends the holder's batched call:
//! at most one in flight, one every sync interval, sooner (the batch
//! interval) when a request waits for a key's first share. A request that
//! waits is decided again when the reply comes; if the call failed, or no
//! reply came within the wait, it is a store error and its rule's
//! `on_store_error` answers. So while Redis is down the instance keeps
//! deciding within the shares it holds until their deadline (`ttl − margin`
//! after its last successful call), then every request goes to
//! `on_store_error`.
//!
//! At a graceful shutdown [`SharesBook::leave`] gives back every share
//! and the starter slot and ends the registration, in calls of at most
//! [`LEAVE_KEYS_PER_CALL`] keys one after the other, so the other instances' shares grow at their next call
//! instead of after the TTL; if Redis cannot be reached in time the
//! registration simply lapses after its TTL, as after a SIGKILL.
//!
//! With starter slots (`--shares-starter-slots`), an instance that owns a
//! slot decides a key's first use from its slot's part of the key at once;
//! only a key whose demand outgrows that part goes out in a call.
//!
//! The holder's clock is a monotonic clock of this process; the
//! authority's is Redis `TIME` (the protocol needs only that both advance
//! at the same rate, within the TTL's margin).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tollgate_core::clock::{Clock, MonotonicClock};
use tollgate_core::share::{
    AuthorityPolicy, Holder, HolderId, HolderPolicy, LEAVE_KEYS_PER_CALL, MILLI_PER_TOKEN,
    PICO_PER_TOKEN, Share, StarterPolicy, Verdict,
};
use tollgate_core::{Decision, Outcome};
use tollgate_redis::{RedisAuthority, RedisStore, SharesStats};
use tollgate_store::{Counter, StoreError};

/// The default bound of the keys one instance holds shares of (`--shares-max-keys`).
pub const DEFAULT_SHARES_MAX_KEYS: usize = 1_000_000;

/// How the shares mode runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharesOptions {
    /// The holder's side: sync and batch intervals, TTL and margin, idle release, key bound.
    pub holder: HolderPolicy,
    /// The authority's side: TTL, headroom, floor.
    pub authority: AuthorityPolicy,
}

impl Default for SharesOptions {
    fn default() -> Self {
        let holder = HolderPolicy {
            max_keys: DEFAULT_SHARES_MAX_KEYS,
            ..HolderPolicy::default()
        };
        SharesOptions {
            holder,
            authority: AuthorityPolicy {
                ttl: holder.ttl,
                ..AuthorityPolicy::default()
            },
        }
    }
}

/// What the last sync did, for requests waiting on it.
#[derive(Clone, Copy, Debug, Default)]
struct Synced {
    ok: bool,
}

/// Counts for `/metrics`.
#[derive(Debug, Default)]
pub struct SharesCounts {
    /// Batches decided from the holder's shares.
    pub decided: AtomicU64,
    /// Batches that waited for a key's first share.
    pub waited: AtomicU64,
    /// Holder calls that failed (Redis unreachable, or conflicts every attempt).
    pub failed_calls: AtomicU64,
}

/// This instance's holder and its link to the authority.
#[derive(Debug)]
pub struct SharesBook {
    holder: Mutex<Holder<Vec<u8>>>,
    authority: RedisAuthority,
    clock: MonotonicClock,
    policy: HolderPolicy,
    synced: watch::Sender<Synced>,
    started: AtomicBool,
    /// The runtime the book was made on (the one that connects to Redis):
    /// its sync task runs there, whichever runtime's call first needs it.
    runtime: Option<tokio::runtime::Handle>,
    /// Held across each call: the leave waits for the call in flight.
    calling: tokio::sync::Mutex<()>,
    /// The instance left (shutdown): no call goes out any more.
    left: AtomicBool,
    counts: SharesCounts,
}

impl SharesBook {
    /// A book for the instance `id` on `redis`'s connection.
    pub fn new(redis: RedisStore, id: HolderId, options: SharesOptions) -> Arc<Self> {
        let clock = MonotonicClock::new();
        Arc::new(SharesBook {
            holder: Mutex::new(Holder::new(id, options.holder, clock.now())),
            authority: RedisAuthority::new(redis, options.authority),
            clock,
            policy: options.holder,
            synced: watch::Sender::new(Synced::default()),
            started: AtomicBool::new(false),
            runtime: tokio::runtime::Handle::try_current().ok(),
            calling: tokio::sync::Mutex::new(()),
            left: AtomicBool::new(false),
            counts: SharesCounts::default(),
        })
    }

    /// Keys the holder holds (bounded by `max_keys`).
    pub fn keys(&self) -> usize {
        self.holder.lock().keys()
    }

    /// The share of `key` (a counter key) in force in this instance.
    pub fn in_force(&self, key: &[u8]) -> Share {
        self.holder.lock().in_force(key)
    }

    /// The starter slot's policy while this instance owns a slot (its
    /// first uses of a key are then decided here, with no call).
    pub fn starter(&self) -> Option<StarterPolicy> {
        self.holder.lock().starter()
    }

    /// Its counts.
    pub fn counts(&self) -> &SharesCounts {
        &self.counts
    }

    /// The authority's counts (calls, Redis script calls, conflicts).
    pub fn authority_stats(&self) -> &SharesStats {
        self.authority.stats()
    }

    /// Decides `counters` (all of `shares: true` rules) from the holder,
    /// pushing one decision each; a descriptor is admitted only if each of
    /// its counters is. A store error when a key has no share yet and the
    /// authority could not be reached.
    pub async fn decide(
        self: &Arc<Self>,
        counters: &[Counter<'_>],
        decisions: &mut Vec<Decision>,
    ) -> Result<(), StoreError> {
        self.start();
        // At most two waits: the reply to a call already in flight (which
        // did not carry the key), then the reply to the call that does; one
        // more decision after each.
        // The common case, every key already held, takes no receiver: a
        // receiver's drop wakes the sender's waiters under a lock.
        if self.try_decide(counters, decisions) {
            self.counts.decided.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        for attempt in 0..3 {
            // Subscribed before deciding again, so a reply landing between
            // the two is not missed.
            let mut replies = self.synced.subscribe();
            if self.try_decide(counters, decisions) {
                self.counts.decided.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            if attempt == 2 {
                break;
            }
            self.counts.waited.fetch_add(1, Ordering::Relaxed);
            let wait = self.policy.call_timeout + self.policy.batch_interval;
            match tokio::time::timeout(wait, replies.changed()).await {
                Ok(Ok(())) if replies.borrow().ok => {}
                Ok(_) => {
                    return Err(StoreError::Unavailable(
                        "shares: the call for a key's first share failed".into(),
                    ));
                }
                Err(_) => return Err(StoreError::Timeout(wait)),
            }
        }
        Err(StoreError::Unavailable(
            "shares: no share for the key after two calls".into(),
        ))
    }

    /// Decides from the shares in force; false when a key waits for its first share.
    ///
    /// One lock, and per counter a lookup to judge, one to take and one to
    /// read what is left, on the borrowed key (no copy of it once held).
    fn try_decide(&self, counters: &[Counter<'_>], decisions: &mut Vec<Decision>) -> bool {
        let share = |c: &Counter<'_>| Share::of_algorithm(&c.algorithm).unwrap_or(Share::ZERO);
        let mut holder = self.holder.lock();
        let now = self.clock.now();
        let mut verdicts = [Verdict::Admit; 4];
        let mut more = Vec::new();
        for (i, c) in counters.iter().enumerate() {
            // A give-back returns nothing to a share: the strict side.
            let verdict = if c.give_back {
                Verdict::Admit
            } else {
                holder.check(c.key, share(c), now, c.hits)
            };
            if verdict == Verdict::Wait {
                return false;
            }
            match verdicts.get_mut(i) {
                Some(slot) => *slot = verdict,
                None => more.push(verdict),
            }
        }
        let verdict = |i: usize| {
            verdicts
                .get(i)
                .copied()
                .unwrap_or_else(|| more[i - verdicts.len()])
        };
        decisions.clear();
        let group_admitted = |group: u32| {
            counters
                .iter()
                .enumerate()
                .all(|(i, c)| c.group != group || verdict(i) == Verdict::Admit)
        };
        for c in counters {
            let admitted =
                group_admitted(c.group) && (c.give_back || holder.take(c.key, now, c.hits));
            let (in_force, tokens) = holder.local(c.key);
            let per_token = |missing: u64| {
                if in_force.rate == 0 {
                    Duration::from_secs(1).as_nanos() as u64
                } else {
                    let pico = u128::from(missing) * PICO_PER_TOKEN;
                    u64::try_from(pico / u128::from(in_force.rate)).unwrap_or(u64::MAX)
                }
            };
            let reset = per_token(in_force.burst.saturating_sub(tokens));
            let limit = share(c).rate / MILLI_PER_TOKEN;
            decisions.push(if admitted {
                Decision::from_parts(Outcome::Allowed, limit, tokens, reset, 0)
            } else {
                let retry = per_token(c.hits.saturating_sub(tokens).max(1));
                Decision::from_parts(Outcome::Denied, limit, tokens, reset, retry)
            });
        }
        true
    }

    /// Starts the sync task once, on the runtime the book was made on (else the current one).
    fn start(self: &Arc<Self>) {
        if !self.started.load(Ordering::Acquire) && !self.started.swap(true, Ordering::AcqRel) {
            let sync = sync_loop(Arc::downgrade(self));
            match &self.runtime {
                Some(runtime) => drop(runtime.spawn(sync)),
                None => drop(tokio::spawn(sync)),
            }
        }
    }

    /// At a graceful shutdown: gives back every share and the starter slot
    /// and ends this instance's registration, within `within` in all; the
    /// keys given back. The keys go [`LEAVE_KEYS_PER_CALL`] a call, one call
    /// after the other (a Redis script is atomic: one call of every key
    /// would hold every other client of that Redis up while it runs). After
    /// it no call goes out, so a request for a key gets its rule's
    /// `on_store_error`.
    ///
    /// Waits for the call in flight first (its reply must not be taken, nor
    /// a registering call land, after the leave). A failure or a timeout
    /// changes nothing at the authority: the registration lapses after its
    /// TTL, as a SIGKILLed instance's does; keys given back before it stay
    /// given back, the rest return when the registration lapses.
    pub async fn leave(&self, within: Duration) -> Result<usize, StoreError> {
        self.left.store(true, Ordering::Release);
        if !self.started.load(Ordering::Acquire) {
            // Never called: nothing registered, nothing to give back.
            return Ok(0);
        }
        let leave = async {
            let _calling = self.calling.lock().await;
            let calls = self
                .holder
                .lock()
                .leave(self.clock.now(), LEAVE_KEYS_PER_CALL);
            let mut given_back = 0;
            for call in &calls {
                if !self.authority.sync(call).await?.accepted {
                    // Its registration had lapsed: its shares are back already.
                    break;
                }
                given_back += call.reports.len();
            }
            Ok(given_back)
        };
        tokio::time::timeout(within, leave)
            .await
            .unwrap_or(Err(StoreError::Timeout(within)))
    }

    /// Sends the holder's call if one is due and takes its reply; whether one was sent.
    async fn sync_once(&self) -> bool {
        let _calling = self.calling.lock().await;
        if self.left.load(Ordering::Acquire) {
            return false;
        }
        let call = self.holder.lock().poll(self.clock.now());
        let Some(call) = call else {
            return false;
        };
        let ok = match self.authority.sync(&call).await {
            Ok(reply) => {
                self.holder.lock().on_reply(self.clock.now(), reply);
                true
            }
            Err(error) => {
                self.holder.lock().on_failure();
                self.counts.failed_calls.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%error, "shares: the holder's call failed");
                false
            }
        };
        self.synced.send_replace(Synced { ok });
        true
    }
}

/// Polls the holder every batch interval while the book lives.
async fn sync_loop(book: Weak<SharesBook>) {
    let tick = match book.upgrade() {
        Some(book) => book.policy.batch_interval.max(Duration::from_millis(1)),
        None => return,
    };
    let mut ticks = tokio::time::interval(tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(book) = book.upgrade() else {
            return;
        };
        book.sync_once().await;
    }
}
