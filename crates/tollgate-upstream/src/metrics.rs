//! Prometheus metrics for clusters: in-flight requests, ejections, health and the breaker.
//!
//! Create one [`UpstreamMetrics`], register it once with the proxy's
//! registry, and hand it to every cluster the proxy builds: each cluster
//! and endpoint becomes a label set in the same metric families.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of a per-endpoint series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    /// The cluster's name.
    pub cluster: String,
    /// The endpoint's `host:port`.
    pub endpoint: String,
}

/// Labels of a per-cluster series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// The cluster's name.
    pub cluster: String,
}

/// The metric families every cluster reports into.
#[derive(Clone, Debug, Default)]
pub struct UpstreamMetrics {
    pub(crate) in_flight: Family<EndpointLabels, Gauge>,
    pub(crate) ejections: Family<EndpointLabels, Counter>,
    pub(crate) ejected: Family<EndpointLabels, Gauge>,
    pub(crate) ejections_overflow: Family<ClusterLabels, Counter>,
    pub(crate) healthy: Family<EndpointLabels, Gauge>,
    pub(crate) breaker_state: Family<ClusterLabels, Gauge>,
    pub(crate) breaker_opened: Family<ClusterLabels, Counter>,
    pub(crate) rejected_open: Family<ClusterLabels, Counter>,
    pub(crate) rejected_overflow: Family<ClusterLabels, Counter>,
}

impl UpstreamMetrics {
    /// Empty families, ready to be registered and shared by clusters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers every family under the `upstream_` prefix in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("upstream");
        registry.register(
            "endpoint_in_flight",
            "Requests in flight to an endpoint",
            self.in_flight.clone(),
        );
        registry.register(
            "endpoint_ejections",
            "Times outlier detection ejected an endpoint",
            self.ejections.clone(),
        );
        registry.register(
            "endpoint_ejected",
            "1 while an endpoint is ejected (updated when the cluster next picks)",
            self.ejected.clone(),
        );
        registry.register(
            "ejections_overflow",
            "Ejections skipped because max_ejection_percent was reached",
            self.ejections_overflow.clone(),
        );
        registry.register(
            "endpoint_healthy",
            "1 while an endpoint passes active health checks",
            self.healthy.clone(),
        );
        registry.register(
            "breaker_state",
            "The circuit breaker: 0 closed, 1 open, 2 half-open",
            self.breaker_state.clone(),
        );
        registry.register(
            "breaker_opened",
            "Times the circuit breaker opened",
            self.breaker_opened.clone(),
        );
        registry.register(
            "rejected_breaker_open",
            "Requests refused because the circuit breaker was open",
            self.rejected_open.clone(),
        );
        registry.register(
            "rejected_max_requests",
            "Requests refused because max_requests were in flight",
            self.rejected_overflow.clone(),
        );
    }

    /// The in-flight gauge of one endpoint (shared with the cluster that counts on it).
    pub fn endpoint_in_flight(&self, cluster: &str, endpoint: &str) -> i64 {
        self.in_flight
            .get_or_create(&endpoint_labels(cluster, endpoint))
            .get()
    }

    /// How many times outlier detection ejected one endpoint.
    pub fn endpoint_ejections(&self, cluster: &str, endpoint: &str) -> u64 {
        self.ejections
            .get_or_create(&endpoint_labels(cluster, endpoint))
            .get()
    }

    /// The breaker state gauge of one cluster: 0 closed, 1 open, 2 half-open.
    pub fn breaker_state(&self, cluster: &str) -> i64 {
        self.breaker_state
            .get_or_create(&cluster_labels(cluster))
            .get()
    }
}

pub(crate) fn endpoint_labels(cluster: &str, endpoint: &str) -> EndpointLabels {
    EndpointLabels {
        cluster: cluster.to_owned(),
        endpoint: endpoint.to_owned(),
    }
}

pub(crate) fn cluster_labels(cluster: &str) -> ClusterLabels {
    ClusterLabels {
        cluster: cluster.to_owned(),
    }
}
