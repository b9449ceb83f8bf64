//! The RLS v3 protobuf messages, field for field with Envoy 1.40's protos, and the service's names.
//!
//! The messages are declared here rather than taken from `envoy-types`,
//! whose generated code (0.7.7) predates the newer `unit_multiplier` fields
//! (`RateLimitOverride` field 3, `RateLimit` field 4) and would drop them;
//! they are wire-compatible with it otherwise, so `envoy-types` clients and
//! Envoy itself talk to a service using them unchanged.
//!
//! Enumerations are kept as their `i32` wire numbers; the `CODE_*` and
//! `UNIT_*` constants name them. Response fields nothing here sets
//! (`dynamic_metadata`, `quota`) are left out, which on the wire is the same
//! as leaving them empty.
//!
//! Every message also has its proto3 JSON form through serde (upstream's
//! `/json` endpoint): camelCase names written, original names accepted,
//! enums by name, 64-bit integers as strings, durations as `"15s"`
//! ([`super::json`]). `raw_body` has no JSON form.

pub use envoy_types::pb::google::protobuf::{Duration, UInt32Value, UInt64Value};
use serde::{Deserialize, Serialize};

use super::json;
pub use super::numbers::{
    CODE_OK, CODE_OVER_LIMIT, CODE_UNKNOWN, UNIT_DAY, UNIT_HOUR, UNIT_MINUTE, UNIT_MONTH,
    UNIT_SECOND, UNIT_UNKNOWN, UNIT_WEEK, UNIT_YEAR,
};

/// The gRPC service name.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// The HTTP/2 path of the one method.
pub const SHOULD_RATE_LIMIT_PATH: &str =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The service name upstream envoyproxy/ratelimit registers with the health service.
pub const UPSTREAM_HEALTH_NAME: &str = "ratelimit";

/// The request (`envoy.service.ratelimit.v3.RateLimitRequest`).
#[derive(Clone, PartialEq, ::prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RateLimitRequest {
    /// The domain.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// The descriptors.
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// Hits for every descriptor; 0 means 1.
    #[prost(uint32, tag = "3")]
    #[serde(alias = "hits_addend", with = "json::uint32")]
    pub hits_addend: u32,
}

/// One descriptor (`envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`).
#[derive(Clone, PartialEq, ::prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RateLimitDescriptor {
    /// The ordered entries.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// A limit replacing the configured one.
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<RateLimitOverride>,
    /// Hits for this descriptor, overriding the request's (0 checks without consuming).
    #[prost(message, optional, tag = "3")]
    #[serde(
        alias = "hits_addend",
        with = "json::uint64_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub hits_addend: Option<UInt64Value>,
    /// Give the hits back instead of consuming them.
    #[prost(bool, tag = "4")]
    #[serde(alias = "is_negative_hits")]
    pub is_negative_hits: bool,
}

/// One key and value of a descriptor (`RateLimitDescriptor.Entry`).
#[derive(Clone, PartialEq, Eq, ::prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct Entry {
    /// The key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A limit sent with a descriptor (`RateLimitDescriptor.RateLimitOverride`).
#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RateLimitOverride {
    /// Requests per window.
    #[prost(uint32, tag = "1")]
    #[serde(alias = "requests_per_unit", with = "json::uint32")]
    pub requests_per_unit: u32,
    /// The unit, an `envoy.type.v3.RateLimitUnit` number (SECOND 1 … YEAR 6).
    #[prost(int32, tag = "2")]
    #[serde(with = "json::unit")]
    pub unit: i32,
    /// Units per window; absent or 0 means 1.
    #[prost(message, optional, tag = "3")]
    #[serde(
        alias = "unit_multiplier",
        with = "json::uint32_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub unit_multiplier: Option<UInt32Value>,
}

/// The response (`envoy.service.ratelimit.v3.RateLimitResponse`).
#[derive(Clone, PartialEq, ::prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RateLimitResponse {
    /// OK or OVER_LIMIT (UNKNOWN is read as OK).
    #[prost(int32, tag = "1")]
    #[serde(alias = "overall_code", with = "json::code")]
    pub overall_code: i32,
    /// One status per request descriptor, in order.
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<DescriptorStatus>,
    /// Headers Envoy adds to its reply to the client.
    #[prost(message, repeated, tag = "3")]
    #[serde(
        alias = "response_headers_to_add",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub response_headers_to_add: Vec<HeaderValue>,
    /// Headers Envoy adds to the request it passes upstream.
    #[prost(message, repeated, tag = "4")]
    #[serde(
        alias = "request_headers_to_add",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub request_headers_to_add: Vec<HeaderValue>,
    /// The body of Envoy's OVER_LIMIT reply; empty for Envoy's own.
    #[prost(bytes = "vec", tag = "5")]
    #[serde(skip)]
    pub raw_body: Vec<u8>,
}

/// One header (`envoy.config.core.v3.HeaderValue`, without the `raw_value` bytes form).
#[derive(Clone, PartialEq, Eq, ::prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct HeaderValue {
    /// The header's name.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Its value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// The answer for one descriptor, without the unimplemented `quota` (`RateLimitResponse.DescriptorStatus`).
#[derive(Clone, PartialEq, ::prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DescriptorStatus {
    /// OK or OVER_LIMIT.
    #[prost(int32, tag = "1")]
    #[serde(with = "json::code")]
    pub code: i32,
    /// The limit that applied, if any.
    #[prost(message, optional, tag = "2")]
    #[serde(alias = "current_limit", skip_serializing_if = "Option::is_none")]
    pub current_limit: Option<RateLimit>,
    /// Units left in the window.
    #[prost(uint32, tag = "3")]
    #[serde(alias = "limit_remaining", with = "json::uint32")]
    pub limit_remaining: u32,
    /// Time until the limit resets, in whole seconds.
    #[prost(message, optional, tag = "4")]
    #[serde(
        alias = "duration_until_reset",
        with = "json::duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub duration_until_reset: Option<Duration>,
}

/// The limit a status reports (`RateLimitResponse.RateLimit`).
#[derive(Clone, PartialEq, Eq, ::prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RateLimit {
    /// The limit's name, empty when unnamed.
    #[prost(string, tag = "3")]
    pub name: String,
    /// Requests per window.
    #[prost(uint32, tag = "1")]
    #[serde(alias = "requests_per_unit", with = "json::uint32")]
    pub requests_per_unit: u32,
    /// The unit, a `RateLimit.Unit` number (SECOND 1 … YEAR 6, WEEK 7).
    #[prost(int32, tag = "2")]
    #[serde(with = "json::unit")]
    pub unit: i32,
    /// Units per window.
    #[prost(message, optional, tag = "4")]
    #[serde(
        alias = "unit_multiplier",
        with = "json::uint32_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub unit_multiplier: Option<UInt32Value>,
}
