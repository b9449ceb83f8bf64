//! The response to a planned request: each descriptor's status from its counters' decisions, and the overall code (quota mode and global shadow mode), with a shaper's wait.

use std::time::Duration;

use tollgate_core::{Clock, Decision};
use tollgate_protocol::rls::model::{Code, DescriptorStatus, RateLimitResponse};

use super::plan::{Plan, Work};
use super::setup::Engine;
use super::status::{rule_status, status_of};

impl<C: Clock> Engine<C> {
    /// The response from the decisions of every planned counter.
    pub(super) fn finish(&self, plan: Plan<'_>, decisions: &[Decision]) -> RateLimitResponse {
        let quota = self.quota_classes(&plan);
        let statuses: Vec<DescriptorStatus> = plan
            .work
            .into_iter()
            .map(|work| match work {
                Work::Done(status) => status,
                Work::Override { limit, first } => match decisions.get(first) {
                    Some(d) => status_of(d, Some(limit)),
                    None => DescriptorStatus::no_limit(),
                },
                Work::Rule { rule, first, count } => {
                    let counters = &plan.counters[first..first + count];
                    let decided = decisions.get(first..first + count).unwrap_or(&[]);
                    rule_status(rule, counters, decided)
                }
            })
            .collect();
        let mut response = self.respond(statuses, &quota);
        if response.overall == Code::Ok {
            // A shaper admitted it with a wait: the longest one holds the request.
            response.delay = decisions
                .iter()
                .filter(|d| d.is_allowed())
                .map(Decision::delay)
                .max()
                .unwrap_or_default();
        }
        response
    }

    /// How each descriptor counts towards the overall code (upstream's quota mode).
    pub(super) fn quota_classes(&self, plan: &Plan<'_>) -> Vec<QuotaClass> {
        let global = self.options.global_quota_mode;
        plan.work
            .iter()
            .map(|work| match work {
                Work::Done(status) if *status == DescriptorStatus::unlimited() => {
                    QuotaClass::Uncounted
                }
                Work::Rule { rule, .. } if rule.quota_mode => QuotaClass::Quota,
                _ if global => QuotaClass::Quota,
                _ => QuotaClass::Limit,
            })
            .collect()
    }

    /// The overall code from the statuses: OVER_LIMIT when an ordinary
    /// descriptor is, or when there are quota descriptors and all of them are.
    pub(super) fn respond(
        &self,
        statuses: Vec<DescriptorStatus>,
        quota: &[QuotaClass],
    ) -> RateLimitResponse {
        let class = |i: usize| quota.get(i).copied().unwrap_or(QuotaClass::Limit);
        let over_of = |wanted: QuotaClass| {
            statuses
                .iter()
                .enumerate()
                .filter(move |(i, _)| class(*i) == wanted)
                .map(|(_, s)| s.code == Code::OverLimit)
        };
        let quotas = over_of(QuotaClass::Quota).count();
        let over = over_of(QuotaClass::Limit).any(|over| over)
            || (quotas > 0 && over_of(QuotaClass::Quota).all(|over| over));
        let overall = if over && !self.options.global_shadow_mode {
            Code::OverLimit
        } else {
            Code::Ok
        };
        RateLimitResponse {
            overall,
            statuses,
            delay: Duration::ZERO,
            from_local_cache: false,
        }
    }
}

/// How a descriptor's status counts towards the overall code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QuotaClass {
    /// Over the limit makes the request over the limit.
    Limit,
    /// Over the limit counts only when every quota descriptor is over.
    Quota,
    /// `unlimited`: never over, and not a quota descriptor either.
    Uncounted,
}
