//! The "leased global" lane: instances that take quota leases from one shared store and spend them locally, in virtual time.
//!
//! Each instance keeps a [`LeaseLedger`] per key (the core's lease state
//! machine, the one `tollgate serve --lease-period` runs) and decides a
//! request as the server does:
//!
//! 1. from its lease when the lease covers the cost (no store call); when
//!    an eighth of the grant is left it asks for the next grant at once;
//! 2. from its quick-deny entry when the store denied the key before and
//!    the retry time has not come (no store call);
//! 3. otherwise on the shared store (one call, the exact path), and then,
//!    when that admitted the request and the key is busy enough
//!    ([`LeaseLedger::wanted`]), it asks for a grant.
//!
//! A grant is `g = min(want, ⌊available / d⌋)` units
//! ([`grant_units`], `d = 2 × instances`), taken from the shared store as
//! one request of cost `g`, which cannot fail since `g` never exceeds what
//! is available: the units leave the budget before anything spends them,
//! so the lane never admits more than the global lane would. A grant counts
//! as one store call, as the server's lease script is one call (the
//! simulation reads what is available with a check-only request first,
//! which the script does inside its one call).
//!
//! What is not simulated: a lease's unspent units are never given back
//! (the server returns them at reload and shutdown); they are left to end
//! with the window or decay with the schedule, and reported as units in
//! leases while they can still be spent.

use std::collections::HashMap;
use std::time::Duration;

use tollgate_core::lease::{Grant, LeaseLedger, LeasePolicy, Leasing, grant_units};
use tollgate_core::{AnyAlgorithm, Decision, Outcome, Timestamp};

use crate::store::SimulatedStore;

/// One key on one instance: its lease, and the denial it remembers.
#[derive(Debug)]
struct KeyState {
    ledger: LeaseLedger,
    /// Denied by the store until then (for `closed_hits` units, or any for a fixed window).
    closed_until: Timestamp,
    closed_hits: u64,
}

/// The instances of one leased lane and what they cost the store.
#[derive(Debug)]
pub(super) struct LeasedFleet {
    algorithm: AnyAlgorithm,
    policy: LeasePolicy,
    /// Per instance, per key.
    ledgers: Vec<HashMap<u64, KeyState>>,
    /// Store calls made in the current tick (exact decisions and grants).
    pub(super) tick_calls: u64,
    /// Store calls made since the start.
    pub(super) calls: u64,
}

impl LeasedFleet {
    /// `instances` instances leasing `algorithm` for `period`.
    pub(super) fn new(algorithm: AnyAlgorithm, instances: u32, period: Duration) -> Self {
        LeasedFleet {
            algorithm,
            policy: LeasePolicy::for_fleet(period, u64::from(instances)),
            ledgers: (0..instances).map(|_| HashMap::new()).collect(),
            tick_calls: 0,
            calls: 0,
        }
    }

    /// How many instances share the store.
    pub(super) fn instances(&self) -> usize {
        self.ledgers.len()
    }

    /// Decides a request for `key` costing `cost` at `at` on `instance`.
    pub(super) fn decide(
        &mut self,
        store: &mut dyn SimulatedStore,
        instance: usize,
        key: u64,
        at: Timestamp,
        cost: u64,
    ) -> Decision {
        let (algorithm, period) = (self.algorithm, self.policy.period);
        let mut state = self.ledgers[instance]
            .remove(&key)
            .unwrap_or_else(|| KeyState {
                ledger: LeaseLedger::new(algorithm, period, at),
                closed_until: Timestamp::from_nanos(0),
                closed_hits: 0,
            });
        let decision = self.decide_key(store, &mut state, key, at, cost);
        self.ledgers[instance].insert(key, state);
        decision
    }

    fn decide_key(
        &mut self,
        store: &mut dyn SimulatedStore,
        state: &mut KeyState,
        key: u64,
        at: Timestamp,
        cost: u64,
    ) -> Decision {
        if let Some(decision) = state.ledger.spend(cost, at) {
            let want = state.ledger.refill_wanted(at);
            if want > 0 {
                self.grant(store, &mut state.ledger, key, at, want);
            }
            return decision;
        }
        let window = matches!(Leasing::of(&self.algorithm), Some(Leasing::Window { .. }));
        if at < state.closed_until && (state.closed_hits == cost || window) {
            let wait = u64::try_from(state.closed_until.saturating_since(at).as_nanos())
                .unwrap_or(u64::MAX);
            return Decision::from_parts(Outcome::Denied, self.algorithm.capacity(), 0, wait, wait);
        }
        self.count_call();
        let decision = store.check(key, at, cost);
        if let Some(retry) = decision.retry_after() {
            state.closed_until = at.saturating_add(retry);
            state.closed_hits = cost;
        }
        if decision.is_allowed() && cost > 0 {
            state.ledger.observe(cost, at);
            let want = state.ledger.wanted(at);
            // Fewer than `divisor` left: a grant would be 0 units; as the server, do not ask.
            if want > 0
                && decision.remaining() >= self.policy.divisor
                && state.ledger.usable(at) < cost
            {
                self.grant(store, &mut state.ledger, key, at, want);
            }
        }
        decision
    }

    /// Takes a grant of up to `want` units of `key` at `at` into `ledger`.
    fn grant(
        &mut self,
        store: &mut dyn SimulatedStore,
        ledger: &mut LeaseLedger,
        key: u64,
        at: Timestamp,
        want: u64,
    ) {
        self.count_call();
        let available = store.check(key, at, 0).remaining();
        let units = grant_units(want, available, self.policy.divisor);
        if units == 0 {
            return;
        }
        let taken = store.check(key, at, units);
        if !taken.is_allowed() {
            // Nothing was taken (a window a denial closed): no lease.
            return;
        }
        let token = match Leasing::of(&self.algorithm) {
            Some(Leasing::Window { window_ns, .. }) => (at.as_nanos() / window_ns, 0),
            _ => (at.as_nanos(), 0),
        };
        // A grant that replaces a lease leaves its unspent units to end with it.
        let _ = ledger.install(
            Grant {
                units,
                lasts: taken.reset_after(),
                remaining: taken.remaining(),
                token,
            },
            at,
        );
    }

    fn count_call(&mut self) {
        self.tick_calls += 1;
        self.calls += 1;
    }

    /// Units held in leases that could still be spent at `at`, over every instance and key.
    pub(super) fn outstanding(&self, at: Timestamp) -> u64 {
        self.ledgers
            .iter()
            .flat_map(|keys| keys.values())
            .map(|state| state.ledger.outstanding(at))
            .sum()
    }
}
