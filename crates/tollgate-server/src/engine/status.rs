//! The status Envoy gets for one descriptor: from its counters' decisions, or without a store (allowed, or denied by `on_store_error`).

use std::time::Duration;

use tollgate_core::duration::ceil_seconds;
use tollgate_core::{Decision, Outcome, Unit};
use tollgate_protocol::rls::model::{Code, CurrentLimit, DescriptorStatus};
use tollgate_rules::{Limit, Rule, WindowLength};

use super::plan::PlannedCounter;
use super::store_call::STORE_DOWN_RETRY_AFTER;

/// The status of one rule's descriptor from its counters' decisions.
pub(super) fn rule_status(
    rule: &Rule,
    counters: &[PlannedCounter],
    decisions: &[Decision],
) -> DescriptorStatus {
    let mut reported: Option<(usize, &Decision)> = None;
    for (c, d) in counters.iter().zip(decisions) {
        let replace = match reported {
            None => true,
            Some((_, best)) => more_restrictive(d, best),
        };
        if replace {
            reported = Some((c.limit_index, d));
        }
    }
    let Some((limit_index, decision)) = reported else {
        return DescriptorStatus::no_limit();
    };
    let limit = rule.limits.get(limit_index).and_then(current_limit);
    let mut status = status_of(decision, limit);
    if rule.shadow_mode && status.code == Code::OverLimit {
        status.code = Code::Ok;
        status.retry_after = None;
        status.shadowed = true;
    }
    status
}

/// OK without a counter (`on_store_error: allow`): the limit, nothing known about remaining.
pub(super) fn allowed_without_store(limit: Option<CurrentLimit>) -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok,
        current_limit: limit,
        limit_remaining: 0,
        duration_until_reset: None,
        retry_after: None,
        shadowed: false,
    }
}

/// OVER_LIMIT without a counter (`on_store_error: deny`): retry after one second.
pub(super) fn denied_without_store(rule: &Rule, counters: &[PlannedCounter]) -> DescriptorStatus {
    let limit = counters
        .first()
        .and_then(|c| rule.limits.get(c.limit_index))
        .and_then(current_limit);
    let code = if rule.shadow_mode {
        Code::Ok
    } else {
        Code::OverLimit
    };
    DescriptorStatus {
        code,
        current_limit: limit,
        limit_remaining: 0,
        duration_until_reset: None,
        retry_after: (code == Code::OverLimit).then_some(STORE_DOWN_RETRY_AFTER),
        shadowed: rule.shadow_mode,
    }
}

/// Whether `a` is strictly more restrictive than `b`.
pub(super) fn more_restrictive(a: &Decision, b: &Decision) -> bool {
    fn rank(d: &Decision) -> u8 {
        match d.outcome() {
            Outcome::Exceeds => 2,
            Outcome::Denied => 1,
            Outcome::Allowed => 0,
        }
    }
    match rank(a).cmp(&rank(b)) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => match a.outcome() {
            Outcome::Allowed => a.remaining() < b.remaining(),
            Outcome::Denied => a.retry_after_nanos() > b.retry_after_nanos(),
            Outcome::Exceeds => false,
        },
    }
}

/// The reported form of a rule's limit; `None` for an unlimited one.
pub(super) fn current_limit(limit: &Limit) -> Option<CurrentLimit> {
    let window = limit.window?;
    let (unit, unit_multiplier) = match window {
        WindowLength::Unit { unit, multiplier } => (unit, multiplier.max(1)),
        WindowLength::Duration(d) => unit_of(d),
    };
    Some(CurrentLimit {
        name: limit.name.clone().unwrap_or_default(),
        requests_per_unit: limit.requests_per_unit,
        unit,
        unit_multiplier,
        window: window.duration(),
    })
}

/// The largest unit that divides `d` a whole number of times, and how many
/// times; a window that is not whole seconds is reported in seconds, rounded up.
pub(super) fn unit_of(d: Duration) -> (Unit, u32) {
    let secs = d.as_secs();
    if d.subsec_nanos() == 0 && secs > 0 {
        for unit in Unit::ALL.iter().rev() {
            if secs.is_multiple_of(unit.seconds())
                && let Ok(n) = u32::try_from(secs / unit.seconds())
            {
                return (*unit, n);
            }
        }
    }
    let rounded_up = ceil_seconds(d).max(1);
    (Unit::Second, u32::try_from(rounded_up).unwrap_or(u32::MAX))
}

/// The status for one decision of `limit`.
pub(super) fn status_of(decision: &Decision, limit: Option<CurrentLimit>) -> DescriptorStatus {
    let code = if decision.is_allowed() {
        Code::Ok
    } else {
        Code::OverLimit
    };
    DescriptorStatus {
        code,
        current_limit: limit,
        limit_remaining: u32::try_from(decision.remaining()).unwrap_or(u32::MAX),
        duration_until_reset: Some(decision.reset_after()),
        retry_after: decision.retry_after(),
        shadowed: false,
    }
}
