//! Upstream clusters for Tollgate's proxy: which endpoint a request goes to, and which ones to avoid.
//!
//! Must not know (the README's layout table): rate limits, the proxy's routes and config files.
//!
//! A [`Cluster`] holds static endpoints (address + weight) and answers
//! [`Cluster::pick`] with a [`PickedEndpoint`] that counts as in flight until
//! it is finished with the upstream's [`Outcome`] or dropped. The outcome
//! feeds the cluster's health policies:
//!
//! * the balancer ([`LbPolicy`]): round robin, nginx's smooth weighted round
//!   robin, least request by power of two choices, ring hash (xxh3 over a
//!   caller-given key, virtual nodes) and weighted random;
//! * outlier detection with Envoy's consecutive-5xx and
//!   consecutive-gateway-failure detectors ([`OutlierDetectionConfig`]);
//! * a circuit breaker, closed → open → half-open → closed
//!   (`tollgate_core::breaker`'s state machine), plus Envoy's
//!   `max_requests` ([`CircuitBreakerConfig`]);
//! * optional active HTTP health checks ([`HealthChecker`]).
//!
//! [`balance::BalanceLayer`] wraps an HTTP client service in pick + finish.
//!
//! Time comes from an injected [`tollgate_core::Clock`]; metrics go into
//! shared [`UpstreamMetrics`] families the proxy registers once.

#![forbid(unsafe_code)]

pub mod balance;
mod balancer;
mod breaker;
mod cluster;
mod config;
mod health;
mod metrics;
mod outlier;

pub use breaker::BreakerState;
pub use cluster::{Cluster, ClusterBuilder, EndpointStatus, PickError, PickedEndpoint};
pub use config::{
    CircuitBreakerConfig, ClusterConfig, ConfigError, EndpointConfig, HealthCheckConfig, LbPolicy,
    MAX_RING_SIZE, MAX_WEIGHT, OutlierDetectionConfig, RingHashConfig, StatusRange,
};
pub use health::{HealthCheckTask, HealthChecker};
pub use metrics::{ClusterLabels, EndpointLabels, UpstreamMetrics};
pub use outlier::Outcome;
