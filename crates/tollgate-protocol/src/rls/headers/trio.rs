//! Upstream's three headers: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.

use tollgate_core::duration::ceil_seconds;

use crate::rls::model::DescriptorStatus;

/// The names of the three upstream-compatible headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitHeaderNames {
    /// The limit's `requests_per_unit` (upstream's `LIMIT_LIMIT_HEADER`).
    pub limit: String,
    /// The units left (upstream's `LIMIT_REMAINING_HEADER`).
    pub remaining: String,
    /// Whole seconds until the window resets (upstream's `LIMIT_RESET_HEADER`).
    pub reset: String,
}

impl Default for LimitHeaderNames {
    /// Upstream's defaults: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
    fn default() -> Self {
        LimitHeaderNames {
            limit: "RateLimit-Limit".to_owned(),
            remaining: "RateLimit-Remaining".to_owned(),
            reset: "RateLimit-Reset".to_owned(),
        }
    }
}

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
