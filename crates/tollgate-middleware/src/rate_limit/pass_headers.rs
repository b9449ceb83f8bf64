//! [`PassHeaders`]: the headers of an admitted request, with what is the same for every request rendered once per layer.
//!
//! An admitted request carries the trio, `RateLimit-Policy` and `RateLimit`,
//! byte for byte what `tollgate_protocol`'s [`ResponseHeaders`] renders from
//! the same decisions (the test below holds them equal). `RateLimit-Policy`
//! and each limit's `RateLimit-Limit` and quoted name depend only on the
//! limits, so they are rendered when the layer is built; a request renders
//! its `RateLimit` item into one buffer of exactly its length, and its
//! remaining and reset are slices of that item (two allocations for the three
//! values: the buffer and the count the slices share).
//!
//! [`ResponseHeaders`]: tollgate_protocol::rls::headers::ResponseHeaders

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate_core::Decision;
use tollgate_core::duration::ceil_seconds;
use tollgate_protocol::rls::headers::{pick_among, policy_item, sf_string, write_limit_item};

use crate::limit::Limit;

static LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
static REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
static RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
static POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// What one limit's headers share across requests.
struct LimitParts {
    /// `RateLimit-Limit`: the quota as the renderers announce it (clamped to `u32`).
    quota: HeaderValue,
    /// The limit's name as an RFC 9651 String, for its `RateLimit` item.
    quoted_name: String,
}

/// The admitted request's headers of one layer.
pub(super) struct PassHeaders {
    policy: HeaderValue,
    limits: Vec<LimitParts>,
}

/// A quota or remaining count as the renderers' statuses carry it.
pub(super) fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl PassHeaders {
    /// The pre-rendered parts for `limits`, or `None` when one has an empty
    /// name (its policy name is then `=<key>`, different for each request:
    /// such a layer renders every answer with the shared renderer).
    pub(super) fn new<'a>(limits: impl IntoIterator<Item = &'a Limit>) -> Option<Self> {
        let mut policy = String::new();
        let mut parts = Vec::new();
        for limit in limits {
            if limit.name.is_empty() {
                return None;
            }
            if !policy.is_empty() {
                policy.push_str(", ");
            }
            let quota = clamp(limit.quota);
            policy.push_str(&policy_item(&limit.name, u64::from(quota), limit.window));
            parts.push(LimitParts {
                quota: HeaderValue::from(quota),
                quoted_name: sf_string(&limit.name),
            });
        }
        if parts.is_empty() {
            return None;
        }
        Some(PassHeaders {
            policy: HeaderValue::from_maybe_shared(Bytes::from(policy)).ok()?,
            limits: parts,
        })
    }

    /// The header values of a request admitted by `decisions` (one per
    /// limit, in order), rendered when it is decided; `None` without decisions.
    pub(super) fn values(&self, decisions: &[Decision]) -> Option<PassValues> {
        let picked = pick_among(
            decisions
                .iter()
                .map(|d| Some((!d.is_allowed(), clamp(d.remaining())))),
        )?;
        let (parts, decision) = (self.limits.get(picked)?, decisions.get(picked)?);
        let remaining = u64::from(clamp(decision.remaining()));
        let reset = ceil_seconds(decision.reset_after());
        // The item, `"name";r=<remaining>;t=<reset>`, holds both numbers:
        // one buffer of exactly its length is all three values.
        let start = parts.quoted_name.len() + ";r=".len();
        let end = start + digits(remaining);
        let length = end + ";t=".len() + digits(reset);
        let mut item = String::with_capacity(length);
        write_limit_item(&mut item, &parts.quoted_name, remaining, reset);
        let item = Bytes::from(item);
        let laid_out = item.len() == length
            && item.get(start - 3..start) == Some(b";r=")
            && item.get(end..end + 3) == Some(b";t=");
        let number = |range: std::ops::Range<usize>, n: u64| {
            laid_out
                .then(|| HeaderValue::from_maybe_shared(item.slice(range)).ok())
                .flatten()
                .unwrap_or_else(|| HeaderValue::from(n))
        };
        Some(PassValues {
            limit: parts.quota.clone(),
            remaining: number(start..end, remaining),
            reset: number(end + 3..length, reset),
            policy: self.policy.clone(),
            item: HeaderValue::from_maybe_shared(item).ok(),
        })
    }
}

/// How many decimal digits `n` is written with.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// An admitted request's header values, kept until the app answers.
pub(super) struct PassValues {
    limit: HeaderValue,
    remaining: HeaderValue,
    reset: HeaderValue,
    policy: HeaderValue,
    item: Option<HeaderValue>,
}

impl PassValues {
    /// Appends the values to the app's answer's `map`.
    ///
    /// Room is made for one header more than the five: axum adds
    /// `content-length` after the layer, and an answer of one header (axum's
    /// `content-type`) with the five fills the map's first allocation, so it
    /// would grow at that insert, rehashing six entries; grown here it
    /// rehashes the one.
    pub(super) fn append(self, map: &mut HeaderMap) {
        map.reserve(6);
        map.append(LIMIT.clone(), self.limit);
        map.append(REMAINING.clone(), self.remaining);
        map.append(RESET.clone(), self.reset);
        map.append(POLICY.clone(), self.policy);
        if let Some(item) = self.item {
            map.append(RATELIMIT.clone(), item);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::HeaderMap;
    use tollgate_core::{Decision, Outcome};
    use tollgate_protocol::rls::headers::{HeaderOptions, Jitter, ResponseHeaders};

    use super::PassHeaders;
    use crate::limit::Limit;
    use crate::rate_limit::error::header_map;
    use crate::rate_limit::policy::render_shared;

    fn pairs(map: &HeaderMap) -> Vec<(String, Vec<u8>)> {
        map.iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn admitted_headers_are_the_shared_renderers_bytes() {
        let shared = ResponseHeaders::new(
            HeaderOptions {
                limit_headers: true,
                ietf_headers: true,
                retry_after: true,
                ..HeaderOptions::default()
            },
            Jitter::seeded(1),
        );
        let limits = [
            Limit::fixed_window("per-second", 10, Duration::from_secs(1)).expect("valid"),
            Limit::sliding_window("per \"minute\" é%", 1_000, Duration::from_millis(60_500))
                .expect("valid"),
            Limit::gcra("burst", 5_000_000_000, Duration::from_millis(10_300), 3).expect("valid"),
        ];
        let pass = PassHeaders::new(&limits).expect("every limit is named");
        let counts = [0, 1, 2, 9, 10, 999, u64::from(u32::MAX), u64::MAX];
        let resets = [
            0,
            1,
            999_999_999,
            1_000_000_000,
            1_000_000_001,
            59_500_000_000,
        ];
        let mut checked = 0;
        for (i, &a) in counts.iter().enumerate() {
            for &b in &counts[i..] {
                for &reset in &resets {
                    let decisions = [
                        Decision::from_parts(Outcome::Allowed, 10, a, reset, 0),
                        Decision::from_parts(Outcome::Allowed, 1_000, b, reset / 2 + 7, 0),
                        Decision::from_parts(Outcome::Allowed, 5, a.min(b), reset + 1, 0),
                    ];
                    let expected = header_map(
                        render_shared(&shared, limits.iter(), "10.0.0.1", &decisions).headers,
                    );
                    let mut fast = HeaderMap::new();
                    let values = pass.values(&decisions).expect("one decision per limit");
                    values.append(&mut fast);
                    assert_eq!(pairs(&fast), pairs(&expected), "{decisions:?}");
                    assert_eq!(fast.len(), 5);
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 36 * 6);
    }

    #[test]
    fn a_layer_with_an_unnamed_limit_renders_with_the_shared_renderer() {
        let unnamed = Limit::fixed_window("", 10, Duration::from_secs(1)).expect("valid");
        assert!(PassHeaders::new([&unnamed]).is_none());
        assert!(PassHeaders::new([]).is_none());
    }
}
