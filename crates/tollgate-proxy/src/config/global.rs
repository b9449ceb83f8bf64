//! [`GlobalRateLimitConfig`]: the proxy's global rate limit filter and the rate limit service it asks.

use std::net::SocketAddr;

use serde::Deserialize;

use super::cluster::UpstreamTlsConfig;
use super::envoy::{self, RateLimitConfig};

/// The global rate limit filter (`envoy.filters.http.ratelimit`), Envoy's fields.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalRateLimitConfig {
    /// The RLS domain.
    pub domain: String,
    /// The RLS: its address (gRPC, TLS optional), or `in_process` (the
    /// limits `tollgate proxy --limits` loaded, decided in this process).
    pub rate_limit_service: RateLimitServiceConfig,
    /// The call's deadline (default 20 ms; `0s` = none).
    #[serde(
        default,
        deserialize_with = "tollgate_core::duration::deserialize_option"
    )]
    pub timeout: Option<std::time::Duration>,
    /// Deny when the RLS fails (default false: allow).
    #[serde(default)]
    pub failure_mode_deny: bool,
    /// The status when the RLS fails and failure_mode_deny is set (default 500).
    pub status_on_error: Option<envoy::HttpStatusConfig>,
    /// The limited reply's status (default 429; < 400 becomes 429).
    pub rate_limited_status: Option<envoy::HttpStatusConfig>,
    /// gRPC: grpc-status 8 instead of 14.
    #[serde(default)]
    pub rate_limited_as_resource_exhausted: bool,
    /// `OFF` or `DRAFT_VERSION_03`.
    pub enable_x_ratelimit_headers: Option<String>,
    /// Leave out `x-envoy-ratelimited: true`.
    #[serde(default)]
    pub disable_x_envoy_ratelimited_header: bool,
    /// Headers on the limited reply.
    #[serde(default)]
    pub response_headers_to_add: Vec<envoy::HeaderValueOptionConfig>,
    /// `Retry-After` on the limited reply.
    #[serde(default)]
    pub enable_retry_after_header: bool,
    /// Filter-level descriptor actions; when set, route `rate_limits` are ignored.
    #[serde(default)]
    pub rate_limits: Vec<RateLimitConfig>,
    /// Only `rate_limits` of this stage.
    pub stage: Option<u32>,
}

/// Where the RLS is.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitServiceConfig {
    /// `ip:port`; needed unless `in_process`.
    pub address: Option<SocketAddr>,
    /// TLS towards the service (Envoy's `UpstreamTlsContext` in spirit); plain HTTP/2 without it.
    #[serde(default)]
    pub tls: Option<UpstreamTlsConfig>,
    /// Decide in this process from the limits and store `tollgate proxy
    /// --limits` set up (quota leases and quick-deny on Redis): no call per
    /// request. Excludes `address` and `tls`.
    #[serde(default)]
    pub in_process: bool,
}
