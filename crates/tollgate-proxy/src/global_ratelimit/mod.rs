//! Envoy's `ratelimit` filter: one `ShouldRateLimit` call to an RLS v3 service per request.
//!
//! [`GlobalRateLimit`] is the compiled filter config and its gRPC channel.
//! Envoy's behaviour, which the service in [`service`] follows:
//!
//! * no descriptors → no call, the request continues untouched;
//! * the call's deadline is `timeout` (20 ms by default); an error or a
//!   timeout allows the request unless `failure_mode_deny`, which answers
//!   `status_on_error` (500 by default: Envoy's field, and the one place a
//!   5xx other than 503 can come from the proxy's configuration);
//! * OVER_LIMIT → `rate_limited_status` (429) with the RLS's `raw_body`,
//!   its `response_headers_to_add`, `x-envoy-ratelimited: true` and the
//!   X-RateLimit headers; anything else (OK, UNKNOWN) → allowed, the RLS's
//!   `request_headers_to_add` go upstream and its `response_headers_to_add`
//!   and the X-RateLimit headers come back on the upstream response.

pub mod error;
pub mod future;
pub mod layer;
pub mod service;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderName, HeaderValue, StatusCode};
use tollgate_server::grpc::wire;
use tonic::transport::{Channel, Endpoint};

use self::error::PolicyStatus;
use crate::config::GlobalRateLimitConfig;
use crate::descriptors::{self, Descriptor, DescriptorRule};
use crate::local_ratelimit::HeaderToAdd;

pub use layer::GlobalRateLimitLayer;
pub use service::GlobalRateLimitService;

/// Envoy's default RLS deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(20);

/// The RLS response as this client reads it: the server crate's fields plus `request_headers_to_add`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RateLimitAnswer {
    /// OK, OVER_LIMIT (or UNKNOWN, read as OK).
    #[prost(int32, tag = "1")]
    pub overall_code: i32,
    /// One status per descriptor.
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<wire::DescriptorStatus>,
    /// Headers for the client's response.
    #[prost(message, repeated, tag = "3")]
    pub response_headers_to_add: Vec<wire::HeaderValue>,
    /// Headers for the upstream request.
    #[prost(message, repeated, tag = "4")]
    pub request_headers_to_add: Vec<wire::HeaderValue>,
    /// The limited reply's body.
    #[prost(bytes = "vec", tag = "5")]
    pub raw_body: Vec<u8>,
}

/// A compiled global rate limit filter and its channel.
#[derive(Debug)]
pub struct GlobalRateLimit {
    /// The RLS domain.
    pub domain: String,
    /// The RLS address.
    pub address: SocketAddr,
    channel: Channel,
    /// The call's deadline (None: no deadline).
    pub timeout: Option<Duration>,
    /// Deny when the call fails.
    pub failure_mode_deny: bool,
    /// The status then.
    pub status_on_error: StatusCode,
    /// The limited reply's status.
    pub rate_limited_status: StatusCode,
    /// gRPC status of the limited reply.
    pub grpc_status: u8,
    /// X-RateLimit headers from the statuses.
    pub x_ratelimit_headers: bool,
    /// `x-envoy-ratelimited: true` on the limited reply.
    pub x_envoy_ratelimited: bool,
    /// The filter's headers on the limited reply.
    pub response_headers_to_add: Vec<HeaderToAdd>,
    /// `Retry-After` on the limited reply.
    pub retry_after: bool,
    /// Filter-level rules.
    pub rate_limits: Option<Vec<DescriptorRule>>,
    /// The stage.
    pub stage: u32,
}

impl GlobalRateLimit {
    /// Compiles the filter config; the channel connects lazily (needs a Tokio runtime).
    pub fn compile(config: &GlobalRateLimitConfig, at: &str) -> Result<Self, String> {
        if config.domain.is_empty() {
            return Err(format!("{at}.domain: must not be empty"));
        }
        let endpoint =
            Endpoint::from_shared(format!("http://{}", config.rate_limit_service.address))
                .map_err(|e| format!("{at}.rate_limit_service.address: {e}"))?
                .tcp_nodelay(true);
        let channel = endpoint.connect_lazy();
        let timeout = match config.timeout {
            None => Some(DEFAULT_TIMEOUT),
            Some(d) if d.0.is_zero() => None,
            Some(d) => Some(d.0),
        };
        let x_ratelimit_headers = match config.enable_x_ratelimit_headers.as_deref() {
            None | Some("OFF") => false,
            Some("DRAFT_VERSION_03") => true,
            Some(other) => {
                return Err(format!(
                    "{at}.enable_x_ratelimit_headers: `{other}` is not OFF or DRAFT_VERSION_03"
                ));
            }
        };
        let stage = config.stage.unwrap_or(0);
        if stage > 10 {
            return Err(format!("{at}.stage: {stage} is above 10"));
        }
        Ok(GlobalRateLimit {
            domain: config.domain.clone(),
            address: config.rate_limit_service.address,
            channel,
            timeout,
            failure_mode_deny: config.failure_mode_deny,
            status_on_error: match config.status_on_error.as_ref().map(|s| s.code) {
                None => StatusCode::INTERNAL_SERVER_ERROR,
                Some(c) => StatusCode::from_u16(c)
                    .ok()
                    .filter(|s| s.as_u16() >= 200)
                    .ok_or_else(|| {
                        format!("{at}.status_on_error.code: {c} is not an HTTP status")
                    })?,
            },
            rate_limited_status: match config.rate_limited_status.as_ref().map(|s| s.code) {
                None => StatusCode::TOO_MANY_REQUESTS,
                Some(c) if c < 400 => StatusCode::TOO_MANY_REQUESTS,
                Some(c) => StatusCode::from_u16(c).map_err(|_| {
                    format!("{at}.rate_limited_status.code: {c} is not an HTTP status")
                })?,
            },
            grpc_status: if config.rate_limited_as_resource_exhausted {
                8
            } else {
                14
            },
            x_ratelimit_headers,
            x_envoy_ratelimited: !config.disable_x_envoy_ratelimited_header,
            response_headers_to_add: HeaderToAdd::compile(
                &config.response_headers_to_add,
                &format!("{at}.response_headers_to_add"),
            )?,
            retry_after: config.enable_retry_after_header,
            rate_limits: if config.rate_limits.is_empty() {
                None
            } else {
                Some(descriptors::compile(
                    &config.rate_limits,
                    &format!("{at}.rate_limits"),
                )?)
            },
            stage,
        })
    }

    /// One `ShouldRateLimit` call for `descriptors`, bounded by the timeout.
    pub async fn ask(&self, descriptors: &[Descriptor]) -> Result<RateLimitAnswer, String> {
        let request = wire::RateLimitRequest {
            domain: self.domain.clone(),
            descriptors: descriptors
                .iter()
                .map(|d| wire::RateLimitDescriptor {
                    entries: d
                        .entries
                        .iter()
                        .map(|(k, v)| wire::Entry {
                            key: k.clone(),
                            value: v.clone(),
                        })
                        .collect(),
                    limit: None,
                    hits_addend: None,
                    is_negative_hits: false,
                })
                .collect(),
            hits_addend: 0,
        };
        let call = call(self.channel.clone(), request);
        match self.timeout {
            Some(limit) => match tokio::time::timeout(limit, call).await {
                Ok(result) => result,
                Err(_) => Err(format!("no answer within {limit:?}")),
            },
            None => call.await,
        }
    }
}

async fn call(
    channel: Channel,
    request: wire::RateLimitRequest,
) -> Result<RateLimitAnswer, String> {
    let mut client = tonic::client::Grpc::new(channel);
    client
        .ready()
        .await
        .map_err(|e| format!("the service is not ready: {e}"))?;
    let codec = tonic_prost::ProstCodec::<wire::RateLimitRequest, RateLimitAnswer>::default();
    client
        .unary(
            tonic::Request::new(request),
            http::uri::PathAndQuery::from_static(tollgate_server::grpc::SHOULD_RATE_LIMIT_PATH),
            codec,
        )
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| format!("{}: {}", status.code(), status.message()))
}

/// The window of a status's limit (Envoy's units × `unit_multiplier`); None for UNKNOWN.
pub fn window(limit: &wire::RateLimit) -> Option<Duration> {
    let seconds: u64 = match limit.unit {
        wire::UNIT_SECOND => 1,
        wire::UNIT_MINUTE => 60,
        wire::UNIT_HOUR => 3600,
        wire::UNIT_DAY => 86_400,
        wire::UNIT_WEEK => 604_800,
        wire::UNIT_MONTH => 2_592_000,
        wire::UNIT_YEAR => 31_536_000,
        _ => return None,
    };
    let multiplier = limit.unit_multiplier.map_or(1, |m| m.value).max(1);
    Some(Duration::from_secs(seconds * u64::from(multiplier)))
}

fn reset_of(status: &wire::DescriptorStatus) -> Duration {
    status.duration_until_reset.map_or(Duration::ZERO, |d| {
        Duration::new(
            u64::try_from(d.seconds).unwrap_or(0),
            u32::try_from(d.nanos).unwrap_or(0),
        )
    })
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
    let reset = reset_of(min);
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

/// The statuses with a limit, named for the IETF fields.
pub fn policies(
    descriptors: &[Descriptor],
    statuses: &[wire::DescriptorStatus],
) -> Vec<PolicyStatus> {
    statuses
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let l = s.current_limit.as_ref()?;
            let name = if l.name.is_empty() {
                descriptors
                    .get(i)
                    .map(|d| {
                        d.entries
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(";")
                    })
                    .unwrap_or_default()
            } else {
                l.name.clone()
            };
            Some(PolicyStatus {
                name,
                limit: u64::from(l.requests_per_unit),
                window: window(l).unwrap_or(Duration::from_secs(1)),
                remaining: u64::from(s.limit_remaining),
                reset: reset_of(s),
                over_limit: s.code == wire::CODE_OVER_LIMIT,
            })
        })
        .collect()
}

/// The longest reset among OVER_LIMIT statuses, at least one second.
pub fn retry_after(statuses: &[wire::DescriptorStatus]) -> Duration {
    statuses
        .iter()
        .filter(|s| s.code == wire::CODE_OVER_LIMIT)
        .map(reset_of)
        .max()
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
}
