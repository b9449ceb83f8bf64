//! [`StoreCall`]: a request whose counters are in the shared store (Redis), planned and waiting to be sent; awaited, it gives a [`StoreAnswer`] that says whether the store counted it or failed and each rule's `on_store_error` answered.

use std::fmt;
use std::time::Duration;

use smallvec::SmallVec;
use tollgate_core::{Clock, Timestamp};
use tollgate_protocol::rls::model::{DescriptorStatus, RateLimitResponse};
use tollgate_rules::{Rule, StoreErrorPolicy};
use tollgate_runtime::trace_context;
use tollgate_store::{AsCounter, Counter};
use tracing::Instrument;

use super::check::apply_refunds;
use super::plan::{Plan, PlannedCounter, Work};
use super::setup::Engine;
use super::status::{allowed_without_store, current_limit, denied_without_store, rule_status};
use crate::store::RemoteStore;

/// The retry-after of a request denied because the store is down.
pub const STORE_DOWN_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A planned request waiting for the shared store: await [`StoreCall::call`].
#[must_use = "the request is not counted until the call is awaited"]
pub struct StoreCall<'e, C: Clock> {
    engine: &'e Engine<C>,
    remote: &'e RemoteStore,
    plan: Plan<'e>,
}

impl<C: Clock> fmt::Debug for StoreCall<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreCall")
            .field("descriptors", &self.plan.work.len())
            .field("counters", &self.plan.counters.len())
            .finish_non_exhaustive()
    }
}

/// What the shared store made of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreAnswer {
    /// The store counted the request (or this instance's leases covered it): the answer.
    Counted(RateLimitResponse),
    /// The store failed: the answer each rule's `on_store_error` gave instead.
    StoreFailed {
        /// The statuses `allow`, `deny` and `local` gave.
        on_store_error: RateLimitResponse,
    },
}

impl StoreAnswer {
    /// The answer, counted or not.
    pub fn response(self) -> RateLimitResponse {
        match self {
            StoreAnswer::Counted(response) => response,
            StoreAnswer::StoreFailed { on_store_error } => on_store_error,
        }
    }

    /// The answer if the store counted the request; `None` if it failed.
    pub fn counted(self) -> Option<RateLimitResponse> {
        match self {
            StoreAnswer::Counted(response) => Some(response),
            StoreAnswer::StoreFailed { .. } => None,
        }
    }
}

impl<'e, C: Clock> StoreCall<'e, C> {
    /// The call for `plan` on `engine`'s shared store `remote`.
    pub(super) fn new(engine: &'e Engine<C>, remote: &'e RemoteStore, plan: Plan<'e>) -> Self {
        StoreCall {
            engine,
            remote,
            plan,
        }
    }

    /// Sends the request's counters in one script call (or answers from the
    /// leases), and gives back what a denied request consumed when
    /// [`EngineOptions::stop_increment_when_over_limit`](super::EngineOptions::stop_increment_when_over_limit)
    /// says so; where the store fails, each rule's `on_store_error` answers.
    pub async fn call(self) -> StoreAnswer {
        let StoreCall {
            engine,
            remote,
            plan,
        } = self;
        // On the stack for the usual few counters: no allocation per call.
        let counters: SmallVec<[Counter<'_>; 4]> = plan
            .counters
            .iter()
            .map(PlannedCounter::as_counter)
            .collect();
        let periods: SmallVec<[Duration; 4]> = plan.counters.iter().map(|c| c.lease).collect();
        let shared: SmallVec<[bool; 4]> = plan.counters.iter().map(|c| c.shares).collect();
        let mut decisions = Vec::with_capacity(counters.len());
        // With tracing on, the store call is a child span of the check; a
        // fallback shows as the `on_store_error` event inside it.
        let store_span = if trace_context::enabled() {
            tracing::info_span!(
                target: trace_context::TARGET,
                "store",
                store = "redis",
                counters = counters.len()
            )
        } else {
            tracing::Span::none()
        };
        let checked = remote
            .check_batch(
                &engine.clock,
                &counters,
                &periods,
                &shared,
                engine.lease_generation,
                &mut decisions,
            )
            .instrument(store_span.clone())
            .await;
        if let Err(error) = &checked {
            store_span.in_scope(|| {
                tracing::info!(target: trace_context::TARGET, %error, "on_store_error");
            });
            drop(counters);
            return StoreAnswer::StoreFailed {
                on_store_error: StoreCall {
                    engine,
                    remote,
                    plan,
                }
                .without_store(),
            };
        }
        let mut refunds = engine.stopped_increments(&plan, &decisions);
        // A share gives nothing back (the strict side); refunds go to Redis only.
        refunds.retain(|c| !c.shares);
        if !refunds.is_empty() {
            let refund_counters: Vec<Counter<'_>> =
                refunds.iter().map(PlannedCounter::as_counter).collect();
            let mut refunded = Vec::with_capacity(refunds.len());
            // A failed give-back leaves the hits spent: the strict side.
            let no_leases = vec![Duration::ZERO; refund_counters.len()];
            if remote
                .check_batch(
                    &engine.clock,
                    &refund_counters,
                    &no_leases,
                    &[],
                    engine.lease_generation,
                    &mut refunded,
                )
                .await
                .is_ok()
            {
                apply_refunds(&plan, &mut decisions, &refunds, &refunded);
            }
        }
        drop(counters);
        let mut response = engine.finish(plan, &decisions);
        response.from_local_cache = checked == Ok(crate::store::DecidedBy::QuickDeny);
        StoreAnswer::Counted(response)
    }

    /// The answer without calling the store, as when it fails: each rule's
    /// `on_store_error` (each counted in the store's fallback statistics).
    pub fn without_store(self) -> RateLimitResponse {
        let StoreCall {
            engine,
            remote,
            plan,
        } = self;
        let now = engine.clock.now();
        let quota = engine.quota_classes(&plan);
        let mut statuses = Vec::with_capacity(plan.work.len());
        for work in plan.work {
            let status = match work {
                Work::Done(status) => status,
                Work::Override { limit, .. } => {
                    remote.record_fallback(StoreErrorPolicy::Allow, now);
                    allowed_without_store(Some(limit))
                }
                Work::Rule { rule, first, count } => {
                    let counters = &plan.counters[first..first + count];
                    remote.record_fallback(rule.on_store_error, now);
                    match rule.on_store_error {
                        StoreErrorPolicy::Allow => allowed_without_store(
                            counters
                                .first()
                                .and_then(|c| rule.limits.get(c.limit_index))
                                .and_then(current_limit),
                        ),
                        StoreErrorPolicy::Deny => denied_without_store(rule, counters),
                        StoreErrorPolicy::Local => decide_locally(remote, rule, counters, now),
                    }
                }
            };
            statuses.push(status);
        }
        engine.respond(statuses, &quota)
    }
}

/// Decides a rule's counters in this process with this instance's share of each limit.
fn decide_locally(
    remote: &RemoteStore,
    rule: &Rule,
    counters: &[PlannedCounter],
    now: Timestamp,
) -> DescriptorStatus {
    let instances = remote.expected_instances();
    let shares: Vec<PlannedCounter> = counters
        .iter()
        .filter_map(|c| {
            let share = rule.limits.get(c.limit_index)?.share(instances)?;
            Some(PlannedCounter {
                algorithm: share,
                key: c.key.clone(),
                ..*c
            })
        })
        .collect();
    let mut decisions = Vec::with_capacity(shares.len());
    remote.fallback().check_now(&shares, now, &mut decisions);
    rule_status(rule, &shares, &decisions)
}
