//! Quota leases: an instance's grant of units taken from a shared budget ahead of use, spent locally.
//!
//! A fleet sharing one budget in a store (Redis) can decide every request
//! there (exact, one call per request) or each instance can take a *lease*:
//! `g` units taken from the budget in one atomic store call, then spent
//! locally, without a call, with this module's [`LeaseLedger`]. Units leave
//! the budget before they are spent, so a lease never over-admits; its cost
//! is under-admission while units sit unused in an instance's lease.
//!
//! # Which algorithms lease ([`Leasing::of`])
//!
//! * **Fixed window** (count `c`, limit `L`, window `W`): a grant adds `g` to
//!   the current window's count; the lease ends with the window. Counting is
//!   linear, so a return of `u` unspent units (`c − u`, within the same
//!   window) leaves the window exactly as if they had never been leased.
//! * **Token bucket, GCRA, leaky-bucket policer** (a schedule: interval `I`,
//!   capacity `C`, span `S = C·I`, backlog `B = TAT − now`): a grant adds
//!   `g·I` to the backlog. Those units sit at the last `g` positions of the
//!   schedule before `TAT_grant`; time uses positions up from the front, so
//!   the lease's unspent units are worth at most `⌊(TAT_grant − now)/I⌋`
//!   (they *decay* at the bucket's rate once its backlog runs out, and a
//!   decayed unit is gone for good). With
//!   that cap the bucket's tokens plus every lease's usable units never
//!   exceed `C` (bucket level `(S − B)/I`, plus usable `≤ B/I`), so the
//!   admitted sequence is one a single exact bucket would admit. A return
//!   subtracts `u·I` only while the key's TAT is still `TAT_grant` (nothing
//!   was taken or given back after it); otherwise the store ignores it and
//!   the units decay, because moving a later holder's positions earlier
//!   could let a burst above `C` through. The leaky-bucket *shaper* (delay
//!   modes) stays on the exact path: its delays depend on the backlog at
//!   each arrival.
//! * **Refunds.** A refund of units spent from a live lease goes back into
//!   the lease ([`LeaseLedger::refund`]; for a schedule, no more than its
//!   positions still ahead hold). Every other refund goes to the store,
//!   which never lets it eat into leased units: a window's count stays at
//!   least the units leased in it, a schedule's TAT at least the end of the
//!   last lease granted (a *floor* the store keeps beside the counter).
//! * **Sliding window counter, sliding log: not leased.** A unit leased at
//!   `t₁` and spent at `t₂ > t₁` is recorded in the store at `t₁`, so it
//!   leaves the window at `t₁ + W` while the request it admitted happened at
//!   `t₂`; in `[t₁ + W, t₂ + W)` the window would admit up to the
//!   outstanding leased units too many. They stay exact (and quick-denied).
//!
//! # Lease size ([`LeaseLedger::wanted`], [`grant_units`])
//!
//! The instance asks for `want = max(p, 2·c, c·P/max(e, P/16))` units,
//! where `p` is what it spent on the key in the previous lease period, `c`
//! what it spent so far in this one, `e` the time since this one began and
//! `P` the lease period: the instance's observed rate × the lease period,
//! the rate measured over at least a sixteenth of the period (a key that
//! just became busy grows its lease up to sixteenfold per grant). It asks for
//! nothing until the key was asked for `m` units in one period (`m` =
//! [`DEFAULT_MIN_DEMAND`]): a key seen once or twice stays on the exact
//! path, one call per request, instead of an exact call *and* a grant.
//!
//! A lease is refilled *before* it runs out ([`LeaseLedger::refill_wanted`]):
//! once its usable units fall to `1/8` of what was granted, the next local
//! decision asks for the next grant, so the requests in flight meanwhile are
//! still answered from the lease rather than all going to the store. A
//! window's next grant in the same window joins the lease (counting is
//! linear). A schedule's next grant replaces it: the old lease's last
//! positions lie before the new `TAT_grant`, and the store would refuse
//! their return (the key's TAT moved on), so they are left to decay — at
//! most `1/8` of a grant per refill, counted as under-admission below. The store grants
//! `g = min(want, ⌊A/d⌋)` of the `A` units available, `d` the share divisor
//! (by default twice the expected number of instances). So a grant is at
//! most a share of what remains, and it is zero once `A < d`: the last
//! `d − 1` units of a window or bucket always go through the exact
//! per-request path.
//!
//! # Bounds
//!
//! * Over-admission: 0 (units leave the budget before they are spent; a
//!   schedule's lease decays with its positions).
//! * Under-admission: units held unused in leases, at most
//!   `Σᵢ min(rᵢ·P·2, A/d)` for instances `i` with observed rate `rᵢ` and
//!   lease period `P`; for a window none when every holder keeps spending,
//!   for a schedule the `1/8` of each grant left to decay at a refill.
//! * A crashed instance strands at most its outstanding leases until they
//!   end (the window's end; for a schedule, `TAT_grant`).
//!
//! Everything here is a pure function of its inputs and the injected time.

use std::time::Duration;

use crate::{AnyAlgorithm, AnyWordAlgorithm, Decision, DelayMode, Outcome, Timestamp};

/// How an algorithm's budget is leased, or why it is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leasing {
    /// Token bucket, GCRA and leaky-bucket policer: tokens of a schedule.
    Schedule {
        /// Nanoseconds one unit occupies in the schedule.
        interval_ns: u64,
        /// Units the schedule holds when full.
        capacity: u64,
    },
    /// Fixed window: counts inside the current window.
    Window {
        /// The window's length in nanoseconds.
        window_ns: u64,
        /// Units per window.
        limit: u64,
    },
}

impl Leasing {
    /// How `algorithm` leases; `None` for those that stay on the exact path
    /// (sliding window counter, sliding log, leaky-bucket shaper).
    pub fn of(algorithm: &AnyAlgorithm) -> Option<Self> {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let schedule = |interval: Duration, capacity: u64| Leasing::Schedule {
            interval_ns: nanos(interval).max(1),
            capacity,
        };
        match algorithm {
            AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(a)) => {
                Some(schedule(a.token_interval(), a.max_tokens()))
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(a)) => {
                Some(schedule(a.emission_interval(), a.burst()))
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(a)) => (a.mode()
                == DelayMode::NoDelay)
                .then(|| schedule(a.drain_interval(), a.burst() + 1)),
            AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(a)) => Some(Leasing::Window {
                window_ns: nanos(a.window()).max(1),
                limit: a.limit(),
            }),
            AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(_))
            | AnyAlgorithm::SlidingLog(_) => None,
        }
    }
}

/// Units the store grants: `min(want, ⌊available / divisor⌋)`, so zero near exhaustion.
///
/// The Redis lease script computes the same figure; this is its statement.
pub fn grant_units(want: u64, available: u64, divisor: u64) -> u64 {
    want.min(available / divisor.max(1))
}

/// Units a key must be asked for in one lease period before it is leased.
pub const DEFAULT_MIN_DEMAND: u64 = 8;

/// The observed rate is measured over at least `1/RATE_FLOOR` of the lease period.
const RATE_FLOOR: u128 = 16;

/// A lease is refilled once its usable units fall to `1/REFILL_DIVISOR` of the grant.
pub const REFILL_DIVISOR: u64 = 8;

/// How a lease is sized and how long a quiet lease is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeasePolicy {
    /// The lease period: the observed rate is measured over it, a lease is
    /// sized to last about this long, and a lease ends after it (or sooner,
    /// at its window's end or when its schedule positions run out). Each
    /// [`LeaseLedger`] carries its key's own period (a rule may set one).
    pub period: Duration,
    /// The share divisor `d`: a grant is at most `1/d` of what remains.
    pub divisor: u64,
}

impl LeasePolicy {
    /// A policy for `period` in a fleet of `instances`: divisor `2 × instances`.
    pub fn for_fleet(period: Duration, instances: u64) -> Self {
        LeasePolicy {
            period,
            divisor: instances.max(1).saturating_mul(2),
        }
    }
}

/// What the store answered to a grant request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Units granted (0: none; the key goes on the exact path).
    pub units: u64,
    /// How long after the call was *sent* the units may be spent: the time
    /// to the window's end, or for a schedule the backlog after the grant
    /// (`TAT_grant − now`), both measured by the store's clock.
    pub lasts: Duration,
    /// What the store had left after the grant.
    pub remaining: u64,
    /// What identifies the lease when it is returned (the window number,
    /// or `TAT_grant` as seconds and nanoseconds).
    pub token: (u64, u64),
}

/// Unused units to give back to the store, and the lease they came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Return {
    /// Units unspent and still usable.
    pub units: u64,
    /// The lease's [`Grant::token`].
    pub token: (u64, u64),
}

/// A lease being spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Active {
    unspent: u64,
    /// Units of the latest grant (the refill mark is a share of it).
    granted: u64,
    /// Units spent from it (what a refund may put back).
    spent: u64,
    /// Local time from which nothing of it may be spent (the lease period
    /// or the store's `lasts`, whichever is sooner).
    ends: Timestamp,
    /// Local time at which its last position passes (a schedule's
    /// `TAT_grant`; for a window, its end).
    positions_end: Timestamp,
    remaining_at_grant: u64,
    token: (u64, u64),
}

/// Rolling count of units an instance spent on a key, per lease period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Demand {
    period_start: Timestamp,
    previous: u64,
    current: u64,
}

/// One key's lease on one instance: its algorithm, its lease (if any) and its observed demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseLedger {
    algorithm: AnyAlgorithm,
    period: Duration,
    leasing: Option<Leasing>,
    lease: Option<Active>,
    demand: Demand,
    min_demand: u64,
}

impl LeaseLedger {
    /// A ledger for a key decided by `algorithm`, leased for `period` (zero: never), with no lease yet.
    pub fn new(algorithm: AnyAlgorithm, period: Duration, now: Timestamp) -> Self {
        LeaseLedger {
            algorithm,
            period,
            leasing: Leasing::of(&algorithm),
            lease: None,
            demand: Demand {
                period_start: now,
                previous: 0,
                current: 0,
            },
            min_demand: DEFAULT_MIN_DEMAND,
        }
    }

    /// The same ledger leasing once a key was asked for `units` in one period (at least 2).
    pub fn with_min_demand(mut self, units: u64) -> Self {
        self.min_demand = units.max(2);
        self
    }

    /// The algorithm the ledger's lease was taken under.
    pub fn algorithm(&self) -> &AnyAlgorithm {
        &self.algorithm
    }

    /// Whether a lease is held (it may have run out).
    pub fn holds_lease(&self) -> bool {
        self.lease.is_some()
    }

    /// Units of the lease that may be spent at `now`.
    pub fn usable(&self, now: Timestamp) -> u64 {
        let Some(lease) = self.lease else { return 0 };
        if now >= lease.ends {
            return 0;
        }
        match self.leasing {
            Some(Leasing::Schedule { interval_ns, .. }) => {
                let left = nanos_between(now, lease.positions_end) / interval_ns;
                lease.unspent.min(left)
            }
            Some(Leasing::Window { .. }) => lease.unspent,
            None => 0,
        }
    }

    /// Spends `hits` of the lease at `now` (0 checks), or `None` when the lease cannot cover them.
    ///
    /// A check-only request (0 hits) is answered when a lease is usable: a
    /// unit could pass here now. Otherwise the caller goes to the store.
    pub fn spend(&mut self, hits: u64, now: Timestamp) -> Option<Decision> {
        let usable = self.settle(now);
        if usable == 0 || usable < hits {
            return None;
        }
        let lease = self.lease.as_mut()?;
        lease.unspent -= hits;
        lease.spent += hits;
        let lease = *lease;
        self.observe(hits, now);
        Some(Decision::from_parts(
            Outcome::Allowed,
            self.algorithm.capacity(),
            lease.remaining_at_grant.saturating_add(lease.unspent),
            nanos_between(now, lease.ends),
            0,
        ))
    }

    /// Drops the units that decayed by `now` for good (a schedule's passed
    /// positions); returns the usable units.
    fn settle(&mut self, now: Timestamp) -> u64 {
        let usable = self.usable(now);
        if let Some(lease) = self.lease.as_mut() {
            lease.unspent = usable;
        }
        usable
    }

    /// Puts back up to `hits` units spent from the lease; returns how many it took (the rest go to the store).
    ///
    /// A schedule's lease takes back no more than its positions still ahead
    /// can hold.
    pub fn refund(&mut self, hits: u64, now: Timestamp) -> u64 {
        let usable = self.settle(now);
        let room = match (self.leasing, self.lease) {
            (Some(Leasing::Schedule { interval_ns, .. }), Some(lease)) => {
                (nanos_between(now, lease.positions_end) / interval_ns).saturating_sub(usable)
            }
            _ => u64::MAX,
        };
        let Some(lease) = self.lease.as_mut() else {
            return 0;
        };
        if now >= lease.ends {
            return 0;
        }
        let taken = hits.min(lease.spent).min(room);
        lease.spent -= taken;
        lease.unspent += taken;
        taken
    }

    /// Records `hits` the store admitted for this key on the exact path (demand for sizing).
    pub fn observe(&mut self, hits: u64, now: Timestamp) {
        self.roll(now);
        self.demand.current = self.demand.current.saturating_add(hits);
    }

    /// Starts a new demand period when the current one is over.
    fn roll(&mut self, now: Timestamp) {
        let period = self.period;
        let elapsed = now.saturating_since(self.demand.period_start);
        if elapsed >= period.saturating_mul(2) {
            self.demand = Demand {
                period_start: now,
                previous: 0,
                current: 0,
            };
        } else if elapsed >= period {
            self.demand = Demand {
                period_start: now,
                previous: self.demand.current,
                current: 0,
            };
        }
    }

    /// Units to ask the store for at `now` (0: none), by the module's sizing rule.
    pub fn wanted(&mut self, now: Timestamp) -> u64 {
        if self.leasing.is_none() || self.period.is_zero() {
            return 0;
        }
        self.roll(now);
        let Demand {
            period_start,
            previous,
            current,
        } = self.demand;
        if previous.max(current) < self.min_demand {
            return 0;
        }
        // The rate so far this period, measured over at least 1/RATE_FLOOR of it.
        let period = self.period.as_nanos();
        let elapsed = u128::from(nanos_between(period_start, now)).max(period / RATE_FLOOR);
        let projected =
            u64::try_from(u128::from(current) * period / elapsed.max(1)).unwrap_or(u64::MAX);
        previous.max(current.saturating_mul(2)).max(projected)
    }

    /// Units to ask for at `now` while a lease is still usable: the
    /// [`wanted`](Self::wanted) units once the usable ones fell to
    /// `1/REFILL_DIVISOR` of the grant, else 0.
    pub fn refill_wanted(&mut self, now: Timestamp) -> u64 {
        let Some(lease) = self.lease else { return 0 };
        let usable = self.usable(now);
        if usable == 0 || usable.saturating_mul(REFILL_DIVISOR) > lease.granted {
            return 0;
        }
        self.wanted(now)
    }

    /// Takes a granted lease, asked for at `sent` and valid for at most the
    /// lease period; returns the lease it replaces, if it still had usable units.
    ///
    /// A window's grant in the window of the lease held joins it; a
    /// schedule's grant replaces the lease held without a return (the store
    /// would refuse it, the key's TAT having moved past its `TAT_grant`).
    pub fn install(&mut self, grant: Grant, sent: Timestamp) -> Option<Return> {
        let period = self.period;
        if grant.units > 0 {
            let ends = sent.saturating_add(grant.lasts.min(period));
            match (self.leasing, self.lease.as_mut()) {
                (Some(Leasing::Window { .. }), Some(lease))
                    if lease.token == grant.token && sent < lease.ends =>
                {
                    lease.unspent = lease.unspent.saturating_add(grant.units);
                    lease.granted = grant.units;
                    lease.ends = lease.ends.max(ends);
                    lease.remaining_at_grant = grant.remaining;
                    return None;
                }
                (Some(Leasing::Schedule { .. }), Some(_)) => self.lease = None,
                _ => {}
            }
        }
        let old = self.take_return(sent);
        if grant.units > 0 {
            self.lease = Some(Active {
                unspent: grant.units,
                granted: grant.units,
                spent: 0,
                ends: sent.saturating_add(grant.lasts.min(period)),
                positions_end: sent.saturating_add(grant.lasts),
                remaining_at_grant: grant.remaining,
                token: grant.token,
            });
        }
        old
    }

    /// Ends the lease at `now`: its usable units to give back, if any.
    pub fn take_return(&mut self, now: Timestamp) -> Option<Return> {
        let usable = self.usable(now);
        let lease = self.lease.take()?;
        (usable > 0).then_some(Return {
            units: usable,
            token: lease.token,
        })
    }

    /// Whether the lease has ended (or there is none) at `now`.
    pub fn lease_ended(&self, now: Timestamp) -> bool {
        self.lease.is_none_or(|lease| now >= lease.ends)
    }

    /// Units of this ledger's lease unspent at `now` (for the outstanding-units gauge).
    pub fn outstanding(&self, now: Timestamp) -> u64 {
        self.usable(now)
    }
}

fn nanos_between(from: Timestamp, to: Timestamp) -> u64 {
    u64::try_from(to.saturating_since(from).as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FixedWindow, SlidingWindow, TokenBucket};

    const SEC: Duration = Duration::from_secs(1);

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_millis(1_000_000 + ms)
    }

    #[test]
    fn only_schedules_and_fixed_windows_lease() {
        let fw: AnyAlgorithm = FixedWindow::new(10, SEC).unwrap().into();
        let sw: AnyAlgorithm = SlidingWindow::new(10, SEC).unwrap().into();
        let tb: AnyAlgorithm = TokenBucket::new(10, 10, SEC).unwrap().into();
        assert!(matches!(
            Leasing::of(&fw),
            Some(Leasing::Window { limit: 10, .. })
        ));
        assert_eq!(Leasing::of(&sw), None);
        assert_eq!(
            Leasing::of(&tb),
            Some(Leasing::Schedule {
                interval_ns: 100_000_000,
                capacity: 10
            })
        );
    }

    #[test]
    fn grants_shrink_to_zero_near_exhaustion() {
        assert_eq!(grant_units(50, 100, 4), 25);
        assert_eq!(grant_units(10, 100, 4), 10);
        assert_eq!(grant_units(10, 3, 4), 0);
    }

    #[test]
    fn a_window_lease_spends_refunds_and_returns_what_is_left() {
        let fw: AnyAlgorithm = FixedWindow::new(100, 10 * SEC).unwrap().into();
        let mut ledger = LeaseLedger::new(fw, SEC, t(0)).with_min_demand(2);
        assert_eq!(ledger.wanted(t(0)), 0, "no demand seen yet");
        ledger.observe(3, t(0));
        assert_eq!(
            ledger.wanted(t(1)),
            48,
            "3 units in a 16th of the period: 48 a period"
        );
        ledger.observe(1, t(1500));
        assert_eq!(
            ledger.wanted(t(1500)),
            16,
            "1 unit in a 16th of the new period"
        );
        ledger.observe(1, t(1800));
        assert_eq!(
            ledger.wanted(t(1800)),
            6,
            "2 units in 0.3 s: 6.67 a period, over the last period's 3"
        );
        let grant = Grant {
            units: 6,
            lasts: 4 * SEC,
            remaining: 50,
            token: (7, 0),
        };
        assert_eq!(ledger.install(grant, t(1)), None);
        let d = ledger.spend(4, t(2)).expect("covered");
        assert_eq!((d.remaining(), d.limit()), (52, 100));
        assert!(ledger.spend(3, t(3)).is_none(), "only 2 left");
        assert_eq!(ledger.refund(5, t(3)), 4, "at most what was spent");
        assert!(ledger.spend(0, t(3)).unwrap().is_allowed(), "check only");
        assert!(ledger.spend(1, t(1001)).is_none(), "ended with the period");
        assert_eq!(
            ledger.take_return(t(1001)),
            None,
            "nothing usable to return"
        );
    }

    #[test]
    fn a_schedule_lease_decays_with_its_positions() {
        let tb: AnyAlgorithm = TokenBucket::new(10, 10, SEC).unwrap().into();
        let mut ledger = LeaseLedger::new(tb, 10 * SEC, t(0));
        // 5 units granted from a full bucket: TAT_grant is 500 ms ahead.
        let grant = Grant {
            units: 5,
            lasts: Duration::from_millis(500),
            remaining: 5,
            token: (1, 2),
        };
        ledger.install(grant, t(0));
        assert_eq!(ledger.usable(t(0)), 5);
        assert_eq!(ledger.usable(t(250)), 2, "2.5 positions left, rounded down");
        assert_eq!(
            ledger.take_return(t(250)),
            Some(Return {
                units: 2,
                token: (1, 2)
            })
        );
        // A lease period shorter than the positions ends the lease, not its positions.
        let mut ledger = LeaseLedger::new(tb, Duration::from_millis(100), t(0));
        let grant = Grant {
            units: 5,
            lasts: 10 * SEC,
            remaining: 0,
            token: (1, 3),
        };
        ledger.install(grant, t(0));
        assert_eq!(ledger.usable(t(99)), 5, "all 5 until the period ends");
        assert_eq!(ledger.usable(t(100)), 0);
    }

    #[test]
    fn a_key_seen_a_few_times_stays_exact() {
        let fw: AnyAlgorithm = FixedWindow::new(1000, 10 * SEC).unwrap().into();
        let mut ledger = LeaseLedger::new(fw, SEC, t(0));
        ledger.observe(DEFAULT_MIN_DEMAND - 1, t(0));
        assert_eq!(
            ledger.wanted(t(1)),
            0,
            "below the demand that pays for a grant"
        );
        ledger.observe(1, t(2));
        assert_eq!(
            ledger.wanted(t(2)),
            16 * DEFAULT_MIN_DEMAND,
            "the rate over a 16th of the period"
        );
        assert_eq!(
            ledger.wanted(t(500)),
            2 * DEFAULT_MIN_DEMAND,
            "8 in half a period: doubled"
        );
    }

    fn window_grant(units: u64, index: u64) -> Grant {
        Grant {
            units,
            lasts: 10 * SEC,
            remaining: 500,
            token: (index, 0),
        }
    }

    #[test]
    fn a_lease_asks_for_its_refill_at_an_eighth_and_a_window_refill_joins_it() {
        let fw: AnyAlgorithm = FixedWindow::new(1000, 10 * SEC).unwrap().into();
        let mut ledger = LeaseLedger::new(fw, SEC, t(0));
        ledger.observe(40, t(0));
        assert_eq!(ledger.refill_wanted(t(0)), 0, "no lease to refill");
        assert_eq!(ledger.install(window_grant(80, 7), t(0)), None);
        ledger.spend(69, t(1)).expect("covered");
        assert_eq!(
            ledger.refill_wanted(t(1)),
            0,
            "11 of 80 left: above an eighth"
        );
        ledger.spend(1, t(1)).expect("covered");
        assert_eq!(ledger.refill_wanted(t(1)), 16 * 110, "10 of 80 left");
        // The next grant in the same window joins the 10 units still held.
        assert_eq!(ledger.install(window_grant(100, 7), t(2)), None);
        assert_eq!(ledger.usable(t(2)), 110);
        // A grant of a later window replaces it, returning what is left.
        assert_eq!(
            ledger.install(window_grant(50, 8), t(3)),
            Some(Return {
                units: 110,
                token: (7, 0)
            })
        );
        assert_eq!(ledger.usable(t(3)), 50);
    }

    #[test]
    fn a_schedule_refill_replaces_the_lease_and_leaves_its_tail_to_decay() {
        let tb: AnyAlgorithm = TokenBucket::new(100, 100, SEC).unwrap().into();
        let mut ledger = LeaseLedger::new(tb, 10 * SEC, t(0));
        let grant = |units, token| Grant {
            units,
            lasts: Duration::from_millis(units * 10),
            remaining: 0,
            token: (1, token),
        };
        ledger.install(grant(40, 1), t(0));
        ledger.spend(35, t(1)).expect("covered");
        assert_eq!(
            ledger.install(grant(40, 2), t(2)),
            None,
            "no return the store would refuse"
        );
        assert_eq!(ledger.usable(t(2)), 40);
    }
}
