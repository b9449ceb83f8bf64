//! Upstream's three headers: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.

use tollgate_core::duration::ceil_seconds;

use super::render::LimitHeaderNames;
use crate::rls::model::DescriptorStatus;

/// The trio for `status`: limit, remaining, and whole seconds to the reset (rounded up).
pub fn limit_headers(names: &LimitHeaderNames, status: &DescriptorStatus) -> Vec<(String, String)> {
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = status.duration_until_reset.map_or(0, ceil_seconds);
    vec![
        (names.limit.clone(), limit.to_string()),
        (names.remaining.clone(), status.limit_remaining.to_string()),
        (names.reset.clone(), reset.to_string()),
    ]
}
