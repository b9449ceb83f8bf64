//! The RLS answer as the client sees it: Envoy's X-RateLimit headers, the RLS's own headers, and the denial.
//!
//! * X-RateLimit (Envoy's DRAFT_VERSION_03, its section 2.4) come from the
//!   wire statuses exactly as Envoy renders them;
//! * an OVER_LIMIT answer becomes a [`GlobalRateLimited`] holding the
//!   answer in the protocol crate's model, so the reply's IETF fields and
//!   `Retry-After` come from the same renderer as the service's
//!   ([`tollgate_protocol::rls::headers`]): both wait for the longest reset
//!   among the OVER_LIMIT statuses, Envoy's `Retry-After` rule.

use std::fmt::Write as _;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate_protocol::rls::convert::{model_response, std_duration, window};
use tollgate_protocol::rls::headers::overall_retry_after;
use tollgate_protocol::rls::wire;

use super::error::GlobalRateLimited;
use super::policy::{GlobalRateLimit, rls_descriptors};
use crate::descriptors::Descriptor;

/// The RLS's `HeaderValue`s as HTTP headers, skipping any that are not valid HTTP.
pub fn header_pairs(values: &[wire::HeaderValue]) -> Vec<(HeaderName, HeaderValue)> {
    values
        .iter()
        .filter_map(|h| {
            let name = HeaderName::from_bytes(h.key.to_ascii_lowercase().as_bytes()).ok()?;
            let value = HeaderValue::from_str(&h.value).ok()?;
            Some((name, value))
        })
        .collect()
}

/// Envoy's X-RateLimit headers from the statuses (its section 2.4); empty when no status has a limit.
pub fn x_ratelimit_headers(statuses: &[wire::DescriptorStatus]) -> Vec<(HeaderName, HeaderValue)> {
    let Some(min) = statuses
        .iter()
        .filter(|s| s.current_limit.is_some())
        .min_by_key(|s| s.limit_remaining)
    else {
        return Vec::new();
    };
    let Some(limit) = &min.current_limit else {
        return Vec::new();
    };
    let mut value = limit.requests_per_unit.to_string();
    for status in statuses {
        let Some(l) = &status.current_limit else {
            continue;
        };
        let Some(w) = window(l) else { continue };
        let _ = write!(value, ", {};w={}", l.requests_per_unit, w.as_secs());
        if !l.name.is_empty() {
            let _ = write!(value, ";name=\"{}\"", l.name.replace('"', "\\\""));
        }
    }
    let reset = min
        .duration_until_reset
        .as_ref()
        .map_or(Duration::ZERO, std_duration);
    let mut out = vec![(
        HeaderName::from_static("x-ratelimit-limit"),
        HeaderValue::from_str(&value).unwrap_or(HeaderValue::from(limit.requests_per_unit)),
    )];
    out.push((
        HeaderName::from_static("x-ratelimit-remaining"),
        HeaderValue::from(min.limit_remaining),
    ));
    out.push((
        HeaderName::from_static("x-ratelimit-reset"),
        HeaderValue::from(reset.as_secs()),
    ));
    out
}

/// The denial for an OVER_LIMIT `answer` to `descriptors`: the RLS's
/// headers, `x-envoy-ratelimited`, X-RateLimit (`rate_headers`) and the
/// filter's headers, in that order; `Retry-After` when enabled and the RLS
/// sent none.
pub fn denial(
    filter: &GlobalRateLimit,
    descriptors: &[Descriptor],
    answer: wire::RateLimitResponse,
    rate_headers: Vec<(HeaderName, HeaderValue)>,
) -> GlobalRateLimited {
    let mut headers = HeaderMap::new();
    for (name, value) in header_pairs(&answer.response_headers_to_add) {
        headers.append(name, value);
    }
    if filter.x_envoy_ratelimited {
        headers.insert("x-envoy-ratelimited", HeaderValue::from_static("true"));
    }
    for (name, value) in rate_headers {
        headers.insert(name, value);
    }
    for header in &filter.response_headers_to_add {
        header.apply(&mut headers);
    }
    let retry_after = (filter.retry_after && !headers.contains_key(http::header::RETRY_AFTER))
        .then(|| retry_after(&answer.statuses));
    let statuses = model_response(&answer).statuses;
    GlobalRateLimited {
        status: filter.rate_limited_status,
        grpc_status: filter.grpc_status,
        headers,
        body: answer.raw_body,
        retry_after,
        descriptors: rls_descriptors(descriptors),
        statuses,
    }
}

/// Envoy's `Retry-After` wait: the longest reset among OVER_LIMIT statuses, at least one second.
pub fn retry_after(statuses: &[wire::DescriptorStatus]) -> Duration {
    let answer = model_response(&wire::RateLimitResponse {
        statuses: statuses.to_vec(),
        ..wire::RateLimitResponse::default()
    });
    overall_retry_after(&answer.statuses)
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};

    fn st(
        code: i32,
        name: &str,
        per: u32,
        unit: i32,
        mult: u32,
        remaining: u32,
        reset: i64,
    ) -> wire::DescriptorStatus {
        wire::DescriptorStatus {
            code,
            current_limit: Some(wire::RateLimit {
                name: name.into(),
                requests_per_unit: per,
                unit,
                unit_multiplier: (mult > 0).then_some(UInt32Value { value: mult }),
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(PbDuration {
                seconds: reset,
                nanos: 0,
            }),
        }
    }

    #[test]
    fn x_ratelimit_headers_follow_envoys_rendering() {
        let statuses = [
            st(
                wire::CODE_OVER_LIMIT,
                "every-nth",
                2,
                wire::UNIT_MINUTE,
                0,
                0,
                32,
            ),
            st(wire::CODE_OK, "hourly-1", 100, wire::UNIT_HOUR, 0, 97, 3000),
            st(wire::CODE_OK, "", 5, wire::UNIT_MINUTE, 5, 4, 200),
        ];
        let h = x_ratelimit_headers(&statuses);
        let get = |n: &str| {
            h.iter()
                .find(|(k, _)| k == n)
                .unwrap()
                .1
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            get("x-ratelimit-limit"),
            "2, 2;w=60;name=\"every-nth\", 100;w=3600;name=\"hourly-1\", 5;w=300"
        );
        assert_eq!(get("x-ratelimit-remaining"), "0");
        assert_eq!(get("x-ratelimit-reset"), "32");
        assert_eq!(retry_after(&statuses), Duration::from_secs(32));
        assert!(x_ratelimit_headers(&[wire::DescriptorStatus::default()]).is_empty());
    }

    #[test]
    fn the_ratelimit_field_never_points_later_than_retry_after() {
        // The first status is used up but allowed (its window resets in a
        // minute); the second is over and passes again in 7 s.
        let statuses = vec![
            st(wire::CODE_OK, "minute", 5, wire::UNIT_MINUTE, 0, 0, 60),
            st(
                wire::CODE_OVER_LIMIT,
                "burst",
                2,
                wire::UNIT_SECOND,
                10,
                0,
                7,
            ),
        ];
        let answer = wire::RateLimitResponse {
            overall_code: wire::CODE_OVER_LIMIT,
            statuses: statuses.clone(),
            ..wire::RateLimitResponse::default()
        };
        let denied = GlobalRateLimited {
            status: http::StatusCode::TOO_MANY_REQUESTS,
            grpc_status: 14,
            headers: HeaderMap::new(),
            body: Vec::new(),
            retry_after: Some(retry_after(&statuses)),
            descriptors: rls_descriptors(&[
                Descriptor::new([("k", "a")]),
                Descriptor::new([("k", "b")]),
            ]),
            statuses: model_response(&answer).statuses,
        };
        let fields: Vec<(String, String)> = denied
            .ietf_fields()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            fields,
            [
                (
                    "ratelimit-policy".to_owned(),
                    "\"minute\";q=5;w=60, \"burst\";q=2;w=10".to_owned()
                ),
                ("ratelimit".to_owned(), "\"burst\";r=0;t=7".to_owned()),
            ]
        );
        assert_eq!(denied.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(denied.violated_policies(), ["burst"]);

        // The RLS's own fields, which know the exact wait, are kept.
        let mut from_rls = denied;
        from_rls
            .headers
            .insert("ratelimit", HeaderValue::from_static("\"burst\";r=0;t=6"));
        assert!(from_rls.ietf_fields().is_empty());
    }
}
