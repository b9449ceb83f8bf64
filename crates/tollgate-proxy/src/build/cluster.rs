//! The upstream clusters of a config: each one's endpoints, balancer, active health checks and connection pool.

use std::sync::Arc;
use std::time::Duration;

use tollgate_upstream::HealthCheckTask;

use crate::config::{ClusterConfig, ConfigError, ConfigPath, FieldError, UpstreamTlsConfig};
use crate::forward::{Cluster, ClusterOptions, Endpoint, UpstreamProtocol};
use crate::local_ratelimit::SharedClock;
use crate::metrics::Metrics;

/// The default upstream connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle pooled connections kept per endpoint when the config says nothing.
///
/// As many as Envoy's default connection limit per cluster (1024): a pool
/// that keeps fewer idle connections than the requests in flight closes the
/// surplus after each response and opens new ones for the next, which costs
/// a TCP handshake per request under high concurrency.
const DEFAULT_MAX_IDLE_PER_ENDPOINT: usize = 1024;

/// The clusters of `config` (read from `file`), and their active health checks.
pub(super) fn clusters(
    config: &[ClusterConfig],
    file: &std::path::Path,
    clock: &SharedClock,
    metrics: &Metrics,
) -> Result<(Vec<Arc<Cluster>>, Vec<HealthCheckTask>), ConfigError> {
    let mut clusters: Vec<Arc<Cluster>> = Vec::new();
    let mut health_checks = Vec::new();
    for (i, c) in config.iter().enumerate() {
        let at = ConfigPath::root().key("clusters").index(i);
        if c.endpoints.is_empty() {
            return Err(ConfigError::field(
                file,
                at.key("endpoints").error("at least one endpoint is needed"),
            ));
        }
        if clusters.iter().any(|k| *k.name == *c.name) {
            return Err(ConfigError::field(
                file,
                at.key("name")
                    .error(format!("`{}` is defined twice", c.name)),
            ));
        }
        let (cluster, health_check) =
            cluster(c, &at, clock, metrics).map_err(|e| ConfigError::field(file, e))?;
        health_checks.extend(health_check);
        clusters.push(Arc::new(cluster));
    }
    Ok((clusters, health_checks))
}

/// The endpoints, none weighing 0.
fn endpoints(c: &ClusterConfig, at: &ConfigPath) -> Result<Vec<Endpoint>, FieldError> {
    c.endpoints
        .iter()
        .enumerate()
        .map(|(j, e)| match e.weight {
            Some(0) => Err(at
                .key("endpoints")
                .index(j)
                .key("weight")
                .error("must be at least 1")),
            w => Ok(Endpoint {
                address: e.address,
                weight: w.unwrap_or(1),
            }),
        })
        .collect()
}

/// One cluster (at `at`): its balancer, its health checker if it has one, its pool.
fn cluster(
    c: &ClusterConfig,
    at: &ConfigPath,
    clock: &SharedClock,
    metrics: &Metrics,
) -> Result<(Cluster, Option<HealthCheckTask>), FieldError> {
    let endpoints = endpoints(c, at)?;
    let upstream_config = tollgate_upstream::ClusterConfig {
        name: c.name.clone(),
        endpoints: endpoints
            .iter()
            .map(|e| tollgate_upstream::EndpointConfig {
                address: e.address.to_string(),
                weight: e.weight,
            })
            .collect(),
        lb_policy: c.lb_policy.unwrap_or_default(),
        ring_hash: c.ring_hash.unwrap_or_default(),
        healthy_panic_threshold: c.healthy_panic_threshold.unwrap_or(50),
        outlier_detection: c.outlier_detection.clone(),
        circuit_breaker: c.circuit_breaker.clone(),
        health_check: c.health_check.clone(),
    };
    let balancer = tollgate_upstream::Cluster::builder(upstream_config)
        .clock(Arc::clone(clock))
        .metrics(&metrics.upstream)
        .build()
        .map_err(|e| at.key(e.field()).error(e.to_string()))?;
    let health_check = tollgate_upstream::HealthChecker::new(&balancer).map(|c| c.spawn());
    let hash_key_header = c
        .hash_key_header
        .as_deref()
        .map(|h| {
            http::HeaderName::from_bytes(h.as_bytes()).map_err(|_| {
                at.key("hash_key_header")
                    .error(format!("`{h}` is not a header name"))
            })
        })
        .transpose()?;
    let options = ClusterOptions {
        hash_key_header,
        connect_timeout: c.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        protocol: if c.http2 {
            UpstreamProtocol::Http2
        } else {
            UpstreamProtocol::Http1
        },
        max_idle_per_endpoint: c
            .max_idle_per_endpoint
            .unwrap_or(DEFAULT_MAX_IDLE_PER_ENDPOINT),
        tls: c.tls.as_ref().map(UpstreamTlsConfig::files),
    };
    let cluster = Cluster::new(&c.name, endpoints, balancer, options)
        .map_err(|e| at.key("tls").error(e.to_string()))?;
    Ok((cluster, health_check))
}
