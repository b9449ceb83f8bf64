//! [`ProxyConfig`]: the proxy's own YAML file, its listeners and its admin listener.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::cluster::ClusterConfig;
use super::envoy::LocalRateLimitConfig;
use super::global::GlobalRateLimitConfig;
use super::route::{ResponseContractConfig, RouteConfig};

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
