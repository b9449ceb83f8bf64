//! [`RouteConfig`]: a route of the proxy's YAML and the blocks it holds (`limit_req`, `concurrency_limit`, the 429/503 contract).

use std::path::PathBuf;

use serde::Deserialize;

use super::envoy::{LocalRateLimitConfig, RateLimitConfig};

/// One route.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// A name for metrics and logs (default: `route<N>`).
    pub name: Option<String>,
    /// The host: exact (`api.example.com`), a suffix wildcard (`*.example.com`) or `*` (default).
    pub host: Option<String>,
    /// The path prefix (default `/`).
    pub prefix: Option<String>,
    /// The cluster requests go to.
    pub cluster: String,
    /// Time for the upstream's response headers (default 15 s, as Envoy); 0 disables.
    #[serde(
        default,
        deserialize_with = "tollgate_core::duration::deserialize_option"
    )]
    pub timeout: Option<std::time::Duration>,
    /// Descriptor actions (Envoy route `rate_limits`), for the local and global limits.
    #[serde(default)]
    pub rate_limits: Vec<RateLimitConfig>,
    /// This route's own local rate limit (`typed_per_filter_config` semantics: its own buckets).
    pub local_ratelimit: Option<LocalRateLimitConfig>,
    /// A file holding this route's local rate limit, relative to the config file.
    pub local_ratelimit_file: Option<PathBuf>,
    /// Skip the global rate limit on this route.
    #[serde(default)]
    pub disable_global_ratelimit: bool,
    /// This route's 429/503 contract.
    pub rate_limit_response: Option<ResponseContractConfig>,
    /// At most N requests in flight per key (503 + Retry-After beyond).
    pub concurrency_limit: Option<ConcurrencyLimitConfig>,
    /// Priority classes with reserved in-flight capacity (503 + Retry-After when shed).
    pub priority_shedding: Option<tollgate_shed::priority::PriorityConfig>,
    /// nginx's `limit_req`: a leaky bucket per key that delays requests
    /// within the burst (or passes them, `nodelay`) and rejects beyond it.
    pub limit_req: Option<LimitReqConfig>,
}

/// A route's `limit_req` (nginx's `limit_req_zone` + `limit_req`, same semantics).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitReqConfig {
    /// The steady rate, nginx's syntax: `10r/s` or `30r/m`.
    pub rate: String,
    /// Requests above the rate a key may have in excess (default 0).
    #[serde(default)]
    pub burst: u64,
    /// nginx `delay=N`: the first N excess requests pass at once, later ones wait.
    pub delay: Option<u64>,
    /// nginx `nodelay`: every request within the burst passes at once (a policer).
    #[serde(default)]
    pub nodelay: bool,
    /// The key: this request header's value (absent: empty key); without it, the trusted client address (nginx's `$binary_remote_addr`).
    pub key_header: Option<String>,
    /// The status of a rejected request (default 429; nginx's `limit_req_status` defaults to 503).
    pub status: Option<u16>,
    /// The most keys tracked; past it the least used keys are evicted, as in the rules' stores (default 100 000).
    pub max_keys: Option<usize>,
    /// The most requests waiting their turn on this route at once; past it a
    /// request that would wait is rejected (default 10 000).
    pub max_waiting: Option<usize>,
    /// nginx `limit_req_dry_run`: count what would be delayed or rejected, delay and reject nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// A route's per-key concurrency limit.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyLimitConfig {
    /// Requests in flight per key, at most.
    pub max_in_flight: usize,
    /// The `Retry-After` hint of a shed request (default 1 s).
    #[serde(
        default,
        deserialize_with = "tollgate_core::duration::deserialize_option"
    )]
    pub retry_after: Option<std::time::Duration>,
    /// The key: this request header's value (absent: empty key); without it, the trusted client address.
    pub key_header: Option<String>,
}

/// The 429/503 contract beyond Envoy's fields.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseContractConfig {
    /// The most upward jitter added to `Retry-After` (default 0).
    #[serde(
        default,
        deserialize_with = "tollgate_core::duration::deserialize_option"
    )]
    pub retry_after_jitter: Option<std::time::Duration>,
    /// IETF draft-10 `RateLimit` and `RateLimit-Policy` fields on every limited-or-counted response.
    #[serde(default)]
    pub ietf_headers: bool,
    /// An RFC 9457 `application/problem+json` body with `violated-policies` on the limited reply.
    #[serde(default)]
    pub problem_json: bool,
}
