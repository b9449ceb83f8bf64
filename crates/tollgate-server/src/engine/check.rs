//! The engine's one verb, [`Engine::check`]: a request is planned, then either answered at once ([`Decided::Ready`]: in memory, or nothing to count) or handed back as the shared store's call to await ([`Decided::NeedsStore`]).

use tollgate_core::{Clock, Decision};
use tollgate_protocol::rls::model::{RateLimitRequest, RateLimitResponse};
use tollgate_runtime::trace_context;

use super::error::EngineError;
use super::plan::{Plan, PlannedCounter};
use super::setup::Engine;
use super::store_call::{StoreAnswer, StoreCall};

/// What [`Engine::check`] made of a request.
#[derive(Debug)]
#[must_use = "a request that needs the store is not counted until its call is awaited"]
pub enum Decided<'e, C: Clock> {
    /// Answered without a store call: the counters are in memory, or the
    /// request touches none.
    Ready(RateLimitResponse),
    /// The counters are in the shared store: the answer comes from
    /// awaiting [`StoreCall::call`].
    NeedsStore(StoreCall<'e, C>),
}

impl<C: Clock> Decided<'_, C> {
    /// The answer, awaiting the store call if there is one (where it
    /// fails, each rule's `on_store_error` answers).
    pub async fn answer(self) -> RateLimitResponse {
        match self {
            Decided::Ready(response) => response,
            Decided::NeedsStore(call) => call.call().await.response(),
        }
    }

    /// The answer and whether the counters counted it (in memory, or in
    /// the shared store) or the store failed and each rule's
    /// `on_store_error` gave it, for a caller that must know (the quota
    /// service paying for shares).
    pub async fn store_answer(self) -> StoreAnswer {
        match self {
            Decided::Ready(response) => StoreAnswer::Counted(response),
            Decided::NeedsStore(call) => call.call().await,
        }
    }
}

impl<C: Clock> Engine<C> {
    /// Checks one request against the counters: the engine's verb.
    ///
    /// In memory (and on a shared store, for a request that touches no
    /// counter), the answer is [`Decided::Ready`], decided in this call
    /// with nothing to await. On a shared store it is
    /// [`Decided::NeedsStore`]: all the request's counters go in one call
    /// when it is awaited, answered from this instance's leases when they
    /// cover the whole request.
    pub fn check(&self, request: &RateLimitRequest) -> Result<Decided<'_, C>, EngineError> {
        let plan = self.plan(request)?;
        trace_matched(&plan);
        if let Some(remote) = &self.remote {
            if plan.counters.is_empty() {
                return Ok(Decided::Ready(self.finish(plan, &[])));
            }
            return Ok(Decided::NeedsStore(StoreCall::new(self, remote, plan)));
        }
        let now = self.clock.now();
        let mut decisions = Vec::with_capacity(plan.counters.len());
        self.memory.check_now(&plan.counters, now, &mut decisions);
        let refunds = self.stopped_increments(&plan, &decisions);
        if !refunds.is_empty() {
            let mut refunded = Vec::with_capacity(refunds.len());
            self.memory.check_now(&refunds, now, &mut refunded);
            apply_refunds(&plan, &mut decisions, &refunds, &refunded);
        }
        Ok(Decided::Ready(self.finish(plan, &decisions)))
    }

    /// [`Engine::check`] with the store call awaited: one status per
    /// descriptor, and the overall code; where the shared store fails, each
    /// rule's `on_store_error` answers (see [`crate::store`]).
    pub async fn decide(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, EngineError> {
        Ok(self.check(request)?.answer().await)
    }

    /// [`Engine::check`] answered without awaiting anything, for an engine
    /// whose counters are in memory.
    ///
    /// A request that needs the shared store is not sent to it: each rule's
    /// `on_store_error` answers, as if the store had failed
    /// ([`StoreCall::without_store`]). Callers that may run on a shared
    /// store use [`Engine::check`] or [`Engine::decide`].
    pub fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, EngineError> {
        Ok(match self.check(request)? {
            Decided::Ready(response) => response,
            Decided::NeedsStore(call) => call.without_store(),
        })
    }

    /// With [`EngineOptions::stop_increment_when_over_limit`](super::EngineOptions::stop_increment_when_over_limit),
    /// the give-backs of what the descriptors that passed consumed, when
    /// another descriptor of the request is over its limit (their group
    /// index says which counter each undoes); empty otherwise.
    pub(super) fn stopped_increments(
        &self,
        plan: &Plan<'_>,
        decisions: &[Decision],
    ) -> Vec<PlannedCounter> {
        if !self.options.stop_increment_when_over_limit {
            return Vec::new();
        }
        let denied_groups: Vec<u32> = plan
            .counters
            .iter()
            .zip(decisions)
            .filter(|(c, d)| !c.give_back && !d.is_allowed())
            .map(|(c, _)| c.group)
            .collect();
        if denied_groups.is_empty() {
            return Vec::new();
        }
        plan.counters
            .iter()
            .zip(decisions)
            .enumerate()
            .filter(|(_, (c, d))| {
                d.is_allowed() && !c.give_back && c.hits > 0 && !denied_groups.contains(&c.group)
            })
            .map(|(i, (c, _))| PlannedCounter {
                group: u32::try_from(i).unwrap_or(u32::MAX),
                give_back: true,
                key: c.key.clone(),
                ..*c
            })
            .collect()
    }
}

/// With tracing on, the rule match as an event of the check's span: how
/// many counters the matched rules put to the store (no descriptor values).
fn trace_matched(plan: &Plan<'_>) {
    if trace_context::enabled() {
        tracing::info!(
            target: trace_context::TARGET,
            descriptors = plan.work.len(),
            counters = plan.counters.len(),
            "rules matched"
        );
    }
}

/// Replaces the decision of each counter a give-back undid with the
/// give-back's own (the count as it stands without this request).
pub(super) fn apply_refunds(
    plan: &Plan<'_>,
    decisions: &mut [Decision],
    refunds: &[PlannedCounter],
    refunded: &[Decision],
) {
    for (refund, decision) in refunds.iter().zip(refunded) {
        let index = refund.group as usize;
        if index < plan.counters.len()
            && let Some(slot) = decisions.get_mut(index)
        {
            *slot = *decision;
        }
    }
}
