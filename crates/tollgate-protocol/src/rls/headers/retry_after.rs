//! `Retry-After`: never earlier than the exact wait, with an upward jitter.

use std::time::Duration;

use tollgate_core::duration::ceil_seconds;

use crate::rls::model::{Code, DescriptorStatus};

/// How long the whole request must wait before it could pass: the longest
/// `retry_after` among the OVER_LIMIT statuses. `None` when none is over, or
/// when one of them can never pass (a cost larger than its limit).
pub fn overall_retry_after(statuses: &[DescriptorStatus]) -> Option<Duration> {
    let mut longest: Option<Duration> = None;
    for status in statuses.iter().filter(|s| s.code == Code::OverLimit) {
        let wait = status.retry_after?;
        longest = Some(longest.map_or(wait, |l| l.max(wait)));
    }
    longest
}

/// The `Retry-After` seconds for an exact wait and a jitter: `wait + jitter`
/// rounded up, so never earlier than `wait` and less than `wait + jitter + 1 s`.
pub fn retry_after_seconds(wait: Duration, jitter: Duration) -> u64 {
    ceil_seconds(wait.saturating_add(jitter))
}
