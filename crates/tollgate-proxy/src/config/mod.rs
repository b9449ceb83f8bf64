//! The proxy's configuration: its own YAML, Istio `EnvoyFilter` files and bare `LocalRateLimit` configs.
//!
//! [`load_proxy_file`] reads the proxy YAML ([`ProxyConfig`]); a
//! `local_ratelimit_file` in it (or `--local-ratelimit` on the command line)
//! names a file read by [`load_local_ratelimit_file`], which accepts either
//! an Istio `EnvoyFilter` that inserts `envoy.filters.http.local_ratelimit`
//! or a bare `LocalRateLimit` (typed directly or as a `TypedStruct`).
//! Syntax and shape errors name `file:line:column`; semantic errors name the
//! file and the field.

pub mod envoy;
pub mod listener;
pub mod path;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use self::envoy::{
    EnvoyFilter, LOCAL_RATELIMIT_FILTER, LOCAL_RATELIMIT_TYPE, LocalRateLimitConfig,
    RateLimitConfig, TYPED_STRUCT_TYPES,
};
pub use self::listener::{LimitSettings, ListenerLimits};
pub use self::path::{ConfigPath, FieldError};

/// A configuration problem: the file, the line and column when known, the field when known, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// Line and column, from 1, when the problem has a place in the file.
    pub position: Option<(u64, u64)>,
    /// The field the problem is about (the root when it is about the file as a whole).
    pub path: ConfigPath,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about `file` as a whole.
    pub fn new(file: &Path, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            position: None,
            path: ConfigPath::root(),
            message: message.into(),
        }
    }

    /// An error about one field of `file`.
    pub fn field(file: &Path, error: FieldError) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            position: None,
            path: error.path,
            message: error.message,
        }
    }

    fn from_yaml(file: &Path, error: &serde_saphyr::Error) -> Self {
        let position = error
            .location()
            .map(|l| (l.line().max(1), l.column().max(1)));
        let mut message = error.without_snippet().to_string();
        if let Some(at) = message.rfind(" at line ") {
            message.truncate(at);
        }
        ConfigError {
            file: file.to_path_buf(),
            position: Some(position.unwrap_or((1, 1))),
            path: ConfigPath::root(),
            message,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, column)) = self.position {
            write!(f, ":{line}:{column}")?;
        }
        if self.path.is_root() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": {}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// The proxy's own configuration file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Where clients connect (HTTP/1.1 and h2c on each).
    #[serde(default)]
    pub listeners: Vec<ListenerConfig>,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin: Option<AdminConfig>,
    /// Proxies in front of this one whose `X-Forwarded-For` entries are trusted (default 0: none).
    #[serde(default)]
    pub xff_num_trusted_hops: u32,
    /// This service's cluster name, for the `source_cluster` action.
    pub service_cluster: Option<String>,
    /// The listener-level local rate limit, shared by every route without its own.
    pub local_ratelimit: Option<LocalRateLimitConfig>,
    /// A file holding the listener-level local rate limit (an EnvoyFilter or a LocalRateLimit),
    /// relative to this file.
    pub local_ratelimit_file: Option<PathBuf>,
    /// The global rate limit service, asked for every route whose descriptors are not empty.
    pub global_ratelimit: Option<GlobalRateLimitConfig>,
    /// The 429/503 contract for every route without its own.
    pub rate_limit_response: Option<ResponseContractConfig>,
    /// The upstream clusters.
    #[serde(default)]
    pub clusters: Vec<ClusterConfig>,
    /// The routes, matched in order; the first match wins.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

/// One listener.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// A name for logs.
    pub name: Option<String>,
    /// `ip:port`; port 0 picks a free port (printed at start).
    pub address: SocketAddr,
    /// The time a client has to send a request's headers (default 10 s; 0 disables).
    #[serde(
        default,
        deserialize_with = "tollgate_core::duration::deserialize_option"
    )]
    pub request_headers_timeout: Option<std::time::Duration>,
    /// The time a connection with no request in flight stays open (default 60 s; 0 disables).
    #[serde(
        default,
        deserialize_with = "tollgate_core::duration::deserialize_option"
    )]
    pub idle_timeout: Option<std::time::Duration>,
    /// The time a request in flight may go without a byte moving to or from its client (default 5 min, Envoy's `stream_idle_timeout`; 0 disables).
    #[serde(
        default,
        deserialize_with = "tollgate_core::duration::deserialize_option"
    )]
    pub stream_idle_timeout: Option<std::time::Duration>,
    /// The most connections open at once (default 10 000); more wait in the listen backlog.
    pub max_connections: Option<usize>,
    /// The largest request head in KiB (default 60, Envoy's); a larger one gets 431.
    pub max_request_headers_kb: Option<u32>,
    /// TLS on this listener (HTTP/1.1 and HTTP/2 by ALPN); plain HTTP without it.
    #[serde(default)]
    pub tls: Option<ListenerTlsConfig>,
}

/// A listener's TLS: its certificate, and optionally the CA its clients' certificates must chain to.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTlsConfig {
    /// PEM certificate chain, reloaded when the file changes.
    pub cert: std::path::PathBuf,
    /// PEM private key, reloaded with the certificate.
    pub key: std::path::PathBuf,
    /// PEM CA bundle: clients must present a certificate of it (mutual TLS).
    pub client_ca: Option<std::path::PathBuf>,
    /// With `client_ca`: the DNS or IP SANs a client certificate must name one of (empty: any).
    #[serde(default)]
    pub client_sans: Vec<String>,
}

/// The admin listener.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// `ip:port`.
    pub address: SocketAddr,
}

/// An upstream cluster of static endpoints.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The name routes refer to.
    pub name: String,
    /// The endpoints.
    pub endpoints: Vec<EndpointConfig>,
    /// Time to establish a connection (default 5 s).
    #[serde(
        default,
        deserialize_with = "tollgate_core::duration::deserialize_option"
    )]
    pub connect_timeout: Option<std::time::Duration>,
    /// Speak HTTP/2 (prior knowledge) to the endpoints instead of HTTP/1.1.
    #[serde(default)]
    pub http2: bool,
    /// Idle pooled connections kept per endpoint (default 1024, Envoy's default connection limit).
    pub max_idle_per_endpoint: Option<usize>,
    /// `round_robin` (default), `weighted_round_robin`, `least_request`, `ring_hash`, `random`.
    pub lb_policy: Option<tollgate_upstream::LbPolicy>,
    /// Ring size for `ring_hash`.
    pub ring_hash: Option<tollgate_upstream::RingHashConfig>,
    /// The ring-hash key: this request header's value; without it, the trusted client address.
    pub hash_key_header: Option<String>,
    /// Envoy's panic threshold in percent (default 50).
    pub healthy_panic_threshold: Option<u32>,
    /// Outlier ejection.
    pub outlier_detection: Option<tollgate_upstream::OutlierDetectionConfig>,
    /// The cluster's circuit breaker.
    pub circuit_breaker: Option<tollgate_upstream::CircuitBreakerConfig>,
    /// Active HTTP health checks.
    pub health_check: Option<tollgate_upstream::HealthCheckConfig>,
    /// TLS to the endpoints (the same fields as the rate limit service's `tls`); plain without it.
    #[serde(default)]
    pub tls: Option<UpstreamTlsConfig>,
}

/// One endpoint.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// `ip:port`.
    pub address: SocketAddr,
    /// Relative weight (default 1).
    pub weight: Option<u32>,
}

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

/// TLS towards a server (the rate limit service, a cluster's endpoints):
/// the CA its certificate must chain to, an optional client certificate
/// (mutual TLS), the name to check.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    /// PEM CA bundle the service's certificate must chain to (default: the system's trust store).
    pub ca: Option<std::path::PathBuf>,
    /// PEM client certificate chain to present; needs `key`.
    pub cert: Option<std::path::PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<std::path::PathBuf>,
    /// The name sent as SNI and checked against the service's certificate (default: the address's IP).
    pub server_name: Option<String>,
}

impl UpstreamTlsConfig {
    /// The files, as the TLS crate reads them.
    pub fn files(&self) -> tollgate_tls::ClientTlsFiles {
        tollgate_tls::ClientTlsFiles {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            server_name: self.server_name.clone(),
        }
    }
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

/// Reads a file as text.
fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|error| ConfigError::new(path, format!("cannot read the file: {error}")))
}

/// Reads and parses the proxy's YAML (no semantic checks; see `crate::build`).
pub fn load_proxy_file(path: &Path) -> Result<ProxyConfig, ConfigError> {
    let text = read(path)?;
    serde_saphyr::from_str::<ProxyConfig>(&text).map_err(|e| ConfigError::from_yaml(path, &e))
}

/// What a local rate limit file held.
#[derive(Clone, Debug)]
pub struct LocalRateLimitFile {
    /// The effective `LocalRateLimit` (unwrapped).
    pub config: LocalRateLimitConfig,
    /// Where it came from inside the file, for messages (`spec.configPatches[0]…`).
    pub origin: ConfigPath,
}

/// Reads an Istio `EnvoyFilter` or a bare `LocalRateLimit` from `path`.
///
/// In an EnvoyFilter, the `HTTP_FILTER` patch inserting
/// `envoy.filters.http.local_ratelimit` gives the filter's config; an
/// `HTTP_ROUTE` / `VIRTUAL_HOST` patch with a `typed_per_filter_config` for
/// that filter replaces it (as a per-route config does in Envoy; the proxy
/// applies it to every route it covers). `Ok(None)` when an EnvoyFilter has
/// no local rate limit at all.
pub fn load_local_ratelimit_file(path: &Path) -> Result<Option<LocalRateLimitFile>, ConfigError> {
    let text = read(path)?;
    let probe: serde_json::Value =
        serde_saphyr::from_str(&text).map_err(|e| ConfigError::from_yaml(path, &e))?;
    if probe.get("kind").is_some() || probe.get("apiVersion").is_some() {
        let filter: EnvoyFilter =
            serde_saphyr::from_str(&text).map_err(|e| ConfigError::from_yaml(path, &e))?;
        return local_ratelimit_from_envoy_filter(path, &filter);
    }
    let config: LocalRateLimitConfig =
        serde_saphyr::from_str(&text).map_err(|e| ConfigError::from_yaml(path, &e))?;
    let origin = ConfigPath::from("the file");
    let config = unwrap_typed(path, &origin, config)?;
    Ok(Some(LocalRateLimitFile { config, origin }))
}

fn local_ratelimit_from_envoy_filter(
    path: &Path,
    filter: &EnvoyFilter,
) -> Result<Option<LocalRateLimitFile>, ConfigError> {
    if filter.kind != "EnvoyFilter" {
        return Err(ConfigError::new(
            path,
            format!("kind is `{}`; expected `EnvoyFilter`", filter.kind),
        ));
    }
    let mut listener_level = None;
    let mut route_level = None;
    for (i, patch) in filter.spec.config_patches.iter().enumerate() {
        let Some(value) = &patch.patch.value else {
            continue;
        };
        let at = ConfigPath::root()
            .key("spec")
            .key("configPatches")
            .index(i)
            .key("patch")
            .key("value");
        match patch.apply_to.as_str() {
            "HTTP_FILTER" => {
                if value.get("name").and_then(|n| n.as_str()) != Some(LOCAL_RATELIMIT_FILTER) {
                    continue;
                }
                let Some(typed) = value.get("typed_config") else {
                    return Err(ConfigError::field(
                        path,
                        at.error(format!(
                            "the {LOCAL_RATELIMIT_FILTER} filter has no typed_config"
                        )),
                    ));
                };
                let origin = at.key("typed_config");
                listener_level = Some(LocalRateLimitFile {
                    config: from_value(path, &origin, typed)?,
                    origin,
                });
            }
            "HTTP_ROUTE" | "VIRTUAL_HOST" | "ROUTE_CONFIGURATION" => {
                let Some(typed) = value
                    .get("typed_per_filter_config")
                    .and_then(|m| m.get(LOCAL_RATELIMIT_FILTER))
                else {
                    continue;
                };
                let origin = at
                    .key("typed_per_filter_config")
                    .key(LOCAL_RATELIMIT_FILTER);
                let config = from_value(path, &origin, typed)?;
                if config.token_bucket.is_none() {
                    return Err(ConfigError::field(
                        path,
                        origin.error("a per-route local rate limit needs a token_bucket"),
                    ));
                }
                route_level = Some(LocalRateLimitFile { config, origin });
            }
            _ => {}
        }
    }
    Ok(route_level.or(listener_level))
}

fn from_value(
    path: &Path,
    origin: &ConfigPath,
    value: &serde_json::Value,
) -> Result<LocalRateLimitConfig, ConfigError> {
    let config: LocalRateLimitConfig = serde_json::from_value(value.clone())
        .map_err(|error| ConfigError::field(path, origin.error(error.to_string())))?;
    unwrap_typed(path, origin, config)
}

/// Resolves the `@type` / TypedStruct wrappers around a `LocalRateLimit`.
pub fn unwrap_typed(
    path: &Path,
    origin: &ConfigPath,
    mut config: LocalRateLimitConfig,
) -> Result<LocalRateLimitConfig, ConfigError> {
    match config.type_url_at.take() {
        Some(t) if TYPED_STRUCT_TYPES.contains(&t.as_str()) => {
            match config.type_url.take().as_deref() {
                Some(LOCAL_RATELIMIT_TYPE) => {}
                Some(other) => {
                    return Err(ConfigError::field(
                        path,
                        origin.error(format!(
                            "type_url is `{other}`; expected `{LOCAL_RATELIMIT_TYPE}`"
                        )),
                    ));
                }
                None => {
                    return Err(ConfigError::field(
                        path,
                        origin.error("a TypedStruct needs a type_url"),
                    ));
                }
            }
            let Some(value) = config.value.take() else {
                return Err(ConfigError::field(
                    path,
                    origin.error("a TypedStruct needs a value"),
                ));
            };
            if config.stat_prefix.is_some() || config.token_bucket.is_some() {
                return Err(ConfigError::field(
                    path,
                    origin.error("LocalRateLimit fields belong inside the TypedStruct's value"),
                ));
            }
            let inner = *value;
            if inner.type_url_at.is_some() || inner.type_url.is_some() || inner.value.is_some() {
                return Err(ConfigError::field(
                        path,
                        origin.key("value").error("@type, type_url and value are TypedStruct fields, not LocalRateLimit fields"),
                    ));
            }
            Ok(inner)
        }
        Some(t) if t == LOCAL_RATELIMIT_TYPE => no_wrapper_fields(path, origin, config),
        Some(other) => Err(ConfigError::field(
            path,
            origin.error(format!(
                "@type `{other}` is neither {LOCAL_RATELIMIT_TYPE} nor a udpa.type.v1.TypedStruct"
            )),
        )),
        None => no_wrapper_fields(path, origin, config),
    }
}

fn no_wrapper_fields(
    path: &Path,
    origin: &ConfigPath,
    config: LocalRateLimitConfig,
) -> Result<LocalRateLimitConfig, ConfigError> {
    if config.type_url.is_some() || config.value.is_some() {
        return Err(ConfigError::field(
            path,
            origin.error(
                "type_url and value need \"@type\": type.googleapis.com/udpa.type.v1.TypedStruct",
            ),
        ));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tollgate-proxy-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const FILTER: &str = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: f}\nspec:\n  workloadSelector: {labels: {app: a}}\n  configPatches:\n    - applyTo: HTTP_FILTER\n      match: {context: SIDECAR_INBOUND}\n      patch:\n        operation: INSERT_BEFORE\n        value:\n          name: envoy.filters.http.local_ratelimit\n          typed_config:\n            \"@type\": type.googleapis.com/udpa.type.v1.TypedStruct\n            type_url: type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n            value: {stat_prefix: listener}\n";

    #[test]
    fn an_envoy_filter_gives_its_filter_config_and_a_route_patch_replaces_it() {
        let only_filter = load_local_ratelimit_file(&file("a.yaml", FILTER))
            .unwrap()
            .unwrap();
        assert_eq!(only_filter.config.stat_prefix.as_deref(), Some("listener"));
        let with_route = format!(
            "{FILTER}    - applyTo: HTTP_ROUTE\n      patch:\n        operation: MERGE\n        value:\n          typed_per_filter_config:\n            envoy.filters.http.local_ratelimit:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n              stat_prefix: route\n              token_bucket: {{max_tokens: 4, fill_interval: 60s}}\n"
        );
        let loaded = load_local_ratelimit_file(&file("b.yaml", &with_route))
            .unwrap()
            .unwrap();
        assert_eq!(loaded.config.stat_prefix.as_deref(), Some("route"));
        assert!(
            loaded
                .origin
                .to_string()
                .contains("typed_per_filter_config")
        );
    }

    #[test]
    fn a_bare_config_loads_typed_or_wrapped_and_a_typo_names_line_and_column() {
        let typed = file(
            "c.yaml",
            "\"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\nstat_prefix: t\n",
        );
        assert!(load_local_ratelimit_file(&typed).unwrap().is_some());
        let typo = file(
            "d.yaml",
            "stat_prefix: t\ntoken_bucket:\n  max_tokens: 1\n  fil_interval: 1s\n",
        );
        let error = load_local_ratelimit_file(&typo).unwrap_err();
        assert_eq!(error.position.map(|p| p.0), Some(4), "{error}");
        assert!(error.to_string().contains("fil_interval"), "{error}");
        let none = file(
            "e.yaml",
            "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nspec:\n  configPatches: []\n",
        );
        assert!(load_local_ratelimit_file(&none).unwrap().is_none());
    }

    /// Every duration field of the proxy's YAML, in one order.
    fn durations(config: &ProxyConfig) -> Vec<std::time::Duration> {
        let priority = config.routes[0].priority_shedding.as_ref().unwrap();
        let queue = priority.queue.as_ref().unwrap();
        let local = config.local_ratelimit.as_ref().unwrap();
        let global = config.global_ratelimit.as_ref().unwrap();
        let cluster = &config.clusters[0];
        let outlier = cluster.outlier_detection.as_ref().unwrap();
        let breaker = cluster.circuit_breaker.as_ref().unwrap();
        let health = cluster.health_check.as_ref().unwrap();
        let route = &config.routes[0];
        vec![
            local.token_bucket.as_ref().unwrap().fill_interval,
            local.descriptors[0]
                .token_bucket
                .as_ref()
                .unwrap()
                .fill_interval,
            global.timeout.unwrap(),
            config
                .rate_limit_response
                .as_ref()
                .unwrap()
                .retry_after_jitter
                .unwrap(),
            cluster.connect_timeout.unwrap(),
            outlier.interval,
            outlier.base_ejection_time,
            outlier.max_ejection_time,
            breaker.open_duration,
            breaker.max_open_duration,
            health.interval,
            health.timeout,
            route.timeout.unwrap(),
            route
                .concurrency_limit
                .as_ref()
                .unwrap()
                .retry_after
                .unwrap(),
            priority.retry_after,
            queue.max_wait,
            queue.aging,
        ]
    }

    fn every_duration(d: &str) -> String {
        format!(
            "listeners: [{{address: '127.0.0.1:0'}}]\n\
             local_ratelimit:\n  stat_prefix: l\n  token_bucket: {{max_tokens: 1, fill_interval: {d}}}\n  descriptors: [{{entries: [{{key: k}}], token_bucket: {{max_tokens: 1, fill_interval: {d}}}}}]\n\
             global_ratelimit: {{domain: d, rate_limit_service: {{address: '127.0.0.1:1'}}, timeout: {d}}}\n\
             rate_limit_response: {{retry_after_jitter: {d}}}\n\
             clusters:\n  - name: c\n    endpoints: [{{address: '127.0.0.1:2'}}]\n    connect_timeout: {d}\n\
             \x20   outlier_detection: {{interval: {d}, base_ejection_time: {d}, max_ejection_time: {d}}}\n\
             \x20   circuit_breaker: {{open_duration: {d}, max_open_duration: {d}}}\n\
             \x20   health_check: {{interval: {d}, timeout: {d}, path: /healthz}}\n\
             routes:\n  - cluster: c\n    timeout: {d}\n\
             \x20   concurrency_limit: {{max_in_flight: 1, retry_after: {d}}}\n\
             \x20   priority_shedding: {{max_in_flight: 10, retry_after: {d}, queue: {{max_queued: 5, max_wait: {d}, aging: {d}}}}}\n"
        )
    }

    #[test]
    fn every_duration_field_reads_the_same_forms_and_a_bad_one_names_its_place() {
        for (text, expected) in [
            ("0.5s", std::time::Duration::from_millis(500)),
            ("500ms", std::time::Duration::from_millis(500)),
            ("1m", std::time::Duration::from_secs(60)),
        ] {
            let path = file(&format!("durations-{text}.yaml"), &every_duration(text));
            let config = load_proxy_file(&path).unwrap_or_else(|e| panic!("{text}: {e}"));
            let read = durations(&config);
            assert_eq!(read.len(), 17);
            assert!(read.iter().all(|d| *d == expected), "{text}: {read:?}");
        }
        let path = file(
            "durations-bad.yaml",
            &every_duration("1m").replace(
                "retry_after: 1m}\n\x20   priority",
                "retry_after: 5 parsecs}\n    priority",
            ),
        );
        let error = load_proxy_file(&path).unwrap_err();
        assert_eq!(error.position.map(|p| p.0), Some(18), "{error}");
        assert!(error.to_string().contains("`5 parsecs`"), "{error}");
    }
}
