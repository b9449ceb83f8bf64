//! The JSON body of an OVER_LIMIT reply (`raw_body`).

use tollgate_core::duration::ceil_seconds;

use super::ietf::policy_name;
use crate::rls::model::{Descriptor, DescriptorStatus};

/// The JSON body of an OVER_LIMIT reply:
///
/// ```json
/// {"code":"OVER_LIMIT","retry_after":50,"statuses":[
///   {"code":"OVER_LIMIT","limit":3,"name":"login","remaining":0,"reset":50,"retry_after":50,"window":60},
///   {"code":"OK","limit":null,"name":null,"remaining":0,"reset":null,"retry_after":null,"window":null}]}
/// ```
///
/// (on one line, keys in this order). The top-level `retry_after` is the `Retry-After` value
/// (jitter included), `null` when the request can never pass. Each status,
/// in request order: its `code`; the policy `name` as in `RateLimit-Policy`,
/// `limit` (requests per window) and `window` (seconds), all `null` without
/// a limit; `remaining`; `reset` (seconds until the limit resets, rounded
/// up); and its own exact wait rounded up, without jitter.
pub fn raw_body(
    descriptors: &[Descriptor],
    statuses: &[DescriptorStatus],
    retry_after: Option<u64>,
) -> String {
    let statuses: Vec<serde_json::Value> = statuses
        .iter()
        .enumerate()
        .map(|(i, status)| {
            let limit = status.current_limit.as_ref();
            serde_json::json!({
                "code": status.code.name(),
                "name": limit.map(|_| policy_name(descriptors.get(i), status)),
                "limit": limit.map(|l| l.requests_per_unit),
                "window": limit.map(|l| ceil_seconds(l.window).max(1)),
                "remaining": status.limit_remaining,
                "reset": status.duration_until_reset.map(ceil_seconds),
                "retry_after": status.retry_after.map(ceil_seconds),
            })
        })
        .collect();
    serde_json::json!({
        "code": "OVER_LIMIT",
        "retry_after": retry_after,
        "statuses": statuses,
    })
    .to_string()
}
