//! Which status the single-status headers (the trio, `RateLimit`) describe.

use crate::rls::model::{Code, DescriptorStatus};

/// The status the trio and `RateLimit` describe, upstream's rule: among the
/// statuses with a limit, the last OVER_LIMIT one in request order; if none
/// is over, the one with the least remaining, the first on ties. `None` when
/// no status has a limit.
pub fn pick_status(statuses: &[DescriptorStatus]) -> Option<usize> {
    pick_among(statuses.iter().map(|status| {
        status
            .current_limit
            .as_ref()
            .map(|_| (status.code == Code::OverLimit, status.limit_remaining))
    }))
}

/// [`pick_status`]'s rule over `(over the limit, remaining)` per status in
/// request order, `None` for a status without a limit: for a caller that
/// holds its decisions in another shape (the app middleware).
pub fn pick_among(statuses: impl IntoIterator<Item = Option<(bool, u32)>>) -> Option<usize> {
    let mut over = None;
    let mut least: Option<(usize, u32)> = None;
    for (i, status) in statuses.into_iter().enumerate() {
        let Some((is_over, remaining)) = status else {
            continue;
        };
        if is_over {
            over = Some(i);
        }
        if least.is_none_or(|(_, least_remaining)| remaining < least_remaining) {
            least = Some((i, remaining));
        }
    }
    over.or(least.map(|(i, _)| i))
}
