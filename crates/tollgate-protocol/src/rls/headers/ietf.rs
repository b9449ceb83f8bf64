//! The IETF draft-10 fields `RateLimit-Policy` and `RateLimit`, as RFC 9651 structured-field lists.

use std::fmt::Write as _;
use std::time::Duration;

use tollgate_core::duration::ceil_seconds;

use super::pick::pick_status;
use crate::rls::model::{Code, Descriptor, DescriptorStatus};

/// The values of the two IETF fields for one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IetfFields {
    /// `RateLimit-Policy`: every status with a limit.
    pub policy: String,
    /// `RateLimit`: the picked status.
    pub limit: String,
}

/// Both IETF fields for an answer to `descriptors`, or `None` when no status has a limit.
pub fn ietf_fields(
    descriptors: &[Descriptor],
    statuses: &[DescriptorStatus],
) -> Option<IetfFields> {
    let i = pick_status(statuses)?;
    let status = statuses.get(i)?;
    Some(IetfFields {
        policy: ratelimit_policy(descriptors, statuses),
        limit: ratelimit_item(&policy_name(descriptors.get(i), status), status),
    })
}

/// The `RateLimit-Policy` value: one `"name";q=N;w=S` item per status with a limit, in request order.
pub fn ratelimit_policy(descriptors: &[Descriptor], statuses: &[DescriptorStatus]) -> String {
    let mut out = String::new();
    for (i, status) in statuses.iter().enumerate() {
        let Some(limit) = &status.current_limit else {
            continue;
        };
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&policy_item(
            &policy_name(descriptors.get(i), status),
            u64::from(limit.requests_per_unit),
            limit.window,
        ));
    }
    out
}

/// One policy item: `"name";q=<quota>;w=<window seconds, rounded up, at least 1>`.
pub fn policy_item(name: &str, quota: u64, window: Duration) -> String {
    format!(
        "{};q={quota};w={}",
        sf_string(name),
        ceil_seconds(window).max(1)
    )
}

/// The `RateLimit` item for `status`: `"name";r=<remaining>;t=<seconds>`.
///
/// `t` is the whole seconds (rounded up) until the limit resets; for an
/// OVER_LIMIT status with a known wait, the seconds until the request could
/// pass instead, so a `Retry-After` never points earlier than `t`.
pub fn ratelimit_item(name: &str, status: &DescriptorStatus) -> String {
    let t = match (status.code, status.retry_after) {
        (Code::OverLimit, Some(wait)) => ceil_seconds(wait),
        _ => status.duration_until_reset.map_or(0, ceil_seconds),
    };
    limit_item(name, u64::from(status.limit_remaining), t)
}

/// One `RateLimit` item: `"name";r=<remaining>;t=<seconds>`.
pub fn limit_item(name: &str, remaining: u64, t: u64) -> String {
    let mut out = String::new();
    write_limit_item(&mut out, &sf_string(name), remaining, t);
    out
}

/// Appends one `RateLimit` item to `out`, its name already an RFC 9651
/// String ([`sf_string`]): for a caller that quotes each name once, not per answer.
pub fn write_limit_item(out: &mut String, quoted_name: &str, remaining: u64, t: u64) {
    let mut digits = itoa::Buffer::new();
    out.push_str(quoted_name);
    out.push_str(";r=");
    out.push_str(digits.format(remaining));
    out.push_str(";t=");
    out.push_str(digits.format(t));
}

/// The policy name of a status: the limit's `name` when it has one, else
/// the descriptor's entries as `key=value`, joined by `;`
/// (`remote_address=10.0.0.1;path=/login`).
pub fn policy_name(descriptor: Option<&Descriptor>, status: &DescriptorStatus) -> String {
    if let Some(limit) = &status.current_limit
        && !limit.name.is_empty()
    {
        return limit.name.clone();
    }
    let mut name = String::new();
    for (k, v) in descriptor.map(|d| d.entries.as_slice()).unwrap_or_default() {
        if !name.is_empty() {
            name.push(';');
        }
        name.push_str(k);
        name.push('=');
        name.push_str(v);
    }
    name
}

/// `text` as an RFC 9651 String: quoted, with `"` and `\` escaped. Its
/// characters must be printable ASCII, so anything else (and `%`) is
/// percent-encoded byte by byte (`é` → `%C3%A9`).
pub fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for byte in text.bytes() {
        match byte {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(byte));
            }
            b'%' => out.push_str("%25"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out.push('"');
    out
}
