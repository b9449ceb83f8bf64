//! [`ClusterConfig`]: an upstream cluster of the proxy's YAML, its endpoints and TLS.

use std::net::SocketAddr;

use serde::Deserialize;

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
    /// Idle pooled connections kept per endpoint (default 1024, Envoy's default
    /// connection limit); 0 also stops client connections keeping their own.
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
