//! Which status the single-status headers (the trio, `RateLimit`) describe.

use crate::rls::model::{Code, DescriptorStatus};

/// The status the trio and `RateLimit` describe, upstream's rule: among the
/// statuses with a limit, the last OVER_LIMIT one in request order; if none
/// is over, the one with the least remaining, the first on ties. `None` when
/// no status has a limit.
pub fn pick_status(statuses: &[DescriptorStatus]) -> Option<usize> {
    let mut over = None;
    let mut least: Option<(usize, u32)> = None;
    for (i, status) in statuses.iter().enumerate() {
        if status.current_limit.is_none() {
            continue;
        }
        if status.code == Code::OverLimit {
            over = Some(i);
        }
        if least.is_none_or(|(_, remaining)| status.limit_remaining < remaining) {
            least = Some((i, status.limit_remaining));
        }
    }
    over.or(least.map(|(i, _)| i))
}
