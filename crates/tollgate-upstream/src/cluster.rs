//! A cluster of static endpoints: picking one per request and learning from the outcome.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tollgate_core::{Clock, MonotonicClock, Timestamp};

use crate::balancer::{Balancer, EndpointView};
use tollgate_core::breaker::Admission;

use crate::breaker::{BreakerState, CircuitBreaker};
use crate::config::{ClusterConfig, ConfigError};
use crate::metrics::{UpstreamMetrics, cluster_labels, endpoint_labels};
use crate::outlier::{EjectionState, FailureCounts, Outcome, OutlierDetector};

/// Why no endpoint was picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickError {
    /// The circuit breaker is open (or its half-open probes are all out);
    /// retry after the given time.
    CircuitOpen {
        /// When the breaker may admit a request again (a hint while half-open).
        retry_after: Duration,
    },
    /// `max_requests` requests are already in flight to the cluster.
    Overflow {
        /// The configured limit.
        max_requests: u32,
    },
    /// Every endpoint is ejected or failing its health checks and panic mode is off.
    NoHealthyEndpoint,
}

impl PickError {
    /// How long the caller should wait before retrying, when known.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            PickError::CircuitOpen { retry_after } => Some(*retry_after),
            PickError::Overflow { .. } | PickError::NoHealthyEndpoint => None,
        }
    }
}

impl fmt::Display for PickError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PickError::CircuitOpen { retry_after } => write!(
                f,
                "the upstream circuit breaker is open (retry after {} ms)",
                retry_after.as_millis()
            ),
            PickError::Overflow { max_requests } => write!(
                f,
                "the upstream already has max_requests ({max_requests}) requests in flight"
            ),
            PickError::NoHealthyEndpoint => write!(f, "no healthy upstream endpoint"),
        }
    }
}

impl std::error::Error for PickError {}

/// A snapshot of one endpoint, for admin pages and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStatus {
    /// The endpoint's `host:port`.
    pub address: String,
    /// Its configured weight.
    pub weight: u32,
    /// Requests in flight to it.
    pub in_flight: i64,
    /// Whether outlier detection has it ejected now.
    pub ejected: bool,
    /// Whether it passes active health checks (always true without them).
    pub healthy: bool,
}

struct Endpoint {
    address: String,
    weight: u32,
    in_flight: Gauge,
    failures: FailureCounts,
    healthy: AtomicBool,
    healthy_gauge: Gauge,
}

struct Inner {
    config: ClusterConfig,
    endpoints: Vec<Endpoint>,
    ejections: Vec<EjectionState>,
    balancer: Balancer,
    outlier: Option<OutlierDetector>,
    breaker: Option<CircuitBreaker>,
    max_requests: Option<u32>,
    total_in_flight: AtomicU64,
    clock: Arc<dyn Clock>,
    rng: Mutex<ChaCha8Rng>,
    metrics: UpstreamMetrics,
}

/// A cluster of static endpoints with its balancer, outlier detection and breaker.
///
/// Cloning is cheap and shares the state.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.inner.config.name)
            .field("lb_policy", &self.inner.config.lb_policy)
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

/// Builds a [`Cluster`] from its configuration.
pub struct ClusterBuilder {
    config: ClusterConfig,
    clock: Option<Arc<dyn Clock>>,
    metrics: Option<UpstreamMetrics>,
    seed: Option<u64>,
}

impl ClusterBuilder {
    /// The clock ejections and the breaker take their time from (default: a [`MonotonicClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The metric families to report into (default: fresh, unregistered ones).
    pub fn metrics(mut self, metrics: &UpstreamMetrics) -> Self {
        self.metrics = Some(metrics.clone());
        self
    }

    /// Seeds the random source of `least_request`, `random`, keyless
    /// `ring_hash` and partial enforcement (default: seeded from the OS).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Validates the configuration and builds the cluster.
    pub fn build(self) -> Result<Cluster, ConfigError> {
        let config = self.config;
        config.validate()?;
        let metrics = self.metrics.unwrap_or_default();
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::new(MonotonicClock::new()) as Arc<dyn Clock>);
        let rng = match self.seed {
            Some(seed) => ChaCha8Rng::seed_from_u64(seed),
            None => ChaCha8Rng::from_rng(&mut rand::rng()),
        };
        let name = config.name.as_str();
        let endpoints = config
            .endpoints
            .iter()
            .map(|e| {
                let labels = endpoint_labels(name, &e.address);
                let healthy_gauge = metrics.healthy.get_or_create(&labels).clone();
                healthy_gauge.set(1);
                Endpoint {
                    address: e.address.clone(),
                    weight: e.weight,
                    in_flight: metrics.in_flight.get_or_create(&labels).clone(),
                    failures: FailureCounts::default(),
                    healthy: AtomicBool::new(true),
                    healthy_gauge,
                }
            })
            .collect();
        let ejections = config
            .endpoints
            .iter()
            .map(|e| {
                let labels = endpoint_labels(name, &e.address);
                EjectionState::new(
                    metrics.ejected.get_or_create(&labels).clone(),
                    metrics.ejections.get_or_create(&labels).clone(),
                )
            })
            .collect();
        let cluster = cluster_labels(name);
        let outlier = config.outlier_detection.clone().map(|od| {
            OutlierDetector::new(
                od,
                config.endpoints.len(),
                metrics.ejections_overflow.get_or_create(&cluster).clone(),
            )
        });
        let breaker = config.circuit_breaker.clone().map(|cb| {
            CircuitBreaker::new(
                cb,
                metrics.breaker_state.get_or_create(&cluster).clone(),
                metrics.breaker_opened.get_or_create(&cluster).clone(),
            )
        });
        let max_requests = config
            .circuit_breaker
            .as_ref()
            .and_then(|cb| cb.max_requests);
        let balancer = Balancer::new(config.lb_policy, &config.endpoints, config.ring_hash);
        Ok(Cluster {
            inner: Arc::new(Inner {
                endpoints,
                ejections,
                balancer,
                outlier,
                breaker,
                max_requests,
                total_in_flight: AtomicU64::new(0),
                clock,
                rng: Mutex::new(rng),
                metrics,
                config,
            }),
        })
    }
}

struct View<'a> {
    inner: &'a Inner,
    now: Timestamp,
    panic: bool,
}

impl EndpointView for View<'_> {
    fn len(&self) -> usize {
        self.inner.endpoints.len()
    }

    fn usable(&self, i: usize) -> bool {
        self.panic || self.inner.available(i, self.now)
    }

    fn in_flight(&self, i: usize) -> i64 {
        self.inner.endpoints[i].in_flight.get()
    }
}

impl Inner {
    fn available(&self, i: usize, now: Timestamp) -> bool {
        self.endpoints[i].healthy.load(Ordering::Acquire) && !self.ejections[i].is_ejected(now)
    }
}

impl Cluster {
    /// Starts building a cluster from `config`.
    pub fn builder(config: ClusterConfig) -> ClusterBuilder {
        ClusterBuilder {
            config,
            clock: None,
            metrics: None,
            seed: None,
        }
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// The configuration the cluster was built from.
    pub fn config(&self) -> &ClusterConfig {
        &self.inner.config
    }

    /// Picks an endpoint for one request.
    ///
    /// `hash_key` is the ring hash's key (a header's value, the client
    /// address); the other policies ignore it. The returned endpoint counts
    /// as in flight until it is finished or dropped.
    pub fn pick(&self, hash_key: Option<&[u8]>) -> Result<PickedEndpoint, PickError> {
        let inner = &*self.inner;
        let now = inner.clock.now();
        let admission = match &inner.breaker {
            Some(breaker) => match breaker.acquire(now) {
                Ok(admission) => Some(admission),
                Err(retry_after) => {
                    inner
                        .metrics
                        .rejected_open
                        .get_or_create(&cluster_labels(&inner.config.name))
                        .inc();
                    return Err(PickError::CircuitOpen { retry_after });
                }
            },
            None => None,
        };
        // From here on the guard gives back what was taken if the pick fails.
        let mut picked = PickedEndpoint {
            inner: Arc::clone(&self.inner),
            index: None,
            admission,
            counted: false,
        };
        if let Some(max) = inner.max_requests {
            if inner.total_in_flight.fetch_add(1, Ordering::AcqRel) >= u64::from(max) {
                inner.total_in_flight.fetch_sub(1, Ordering::AcqRel);
                inner
                    .metrics
                    .rejected_overflow
                    .get_or_create(&cluster_labels(&inner.config.name))
                    .inc();
                return Err(PickError::Overflow { max_requests: max });
            }
            picked.counted = true;
        }
        let n = inner.endpoints.len();
        let available = (0..n).filter(|&i| inner.available(i, now)).count();
        let threshold = inner.config.healthy_panic_threshold as usize;
        let panic = available * 100 < threshold * n;
        let view = View { inner, now, panic };
        let Some(index) = inner.balancer.pick(&view, hash_key, &inner.rng) else {
            return Err(PickError::NoHealthyEndpoint);
        };
        inner.endpoints[index].in_flight.inc();
        picked.index = Some(index);
        Ok(picked)
    }

    /// A snapshot of every endpoint, in configuration order.
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        let now = self.inner.clock.now();
        self.inner
            .endpoints
            .iter()
            .zip(&self.inner.ejections)
            .map(|(e, ej)| EndpointStatus {
                address: e.address.clone(),
                weight: e.weight,
                in_flight: e.in_flight.get(),
                ejected: ej.is_ejected(now),
                healthy: e.healthy.load(Ordering::Acquire),
            })
            .collect()
    }

    /// The circuit breaker's state, or `None` without a breaker.
    pub fn breaker_state(&self) -> Option<BreakerState> {
        self.inner.breaker.as_ref().map(CircuitBreaker::state)
    }

    /// Requests in flight across the cluster.
    pub fn in_flight(&self) -> i64 {
        self.inner.endpoints.iter().map(|e| e.in_flight.get()).sum()
    }

    /// The clock the cluster takes its time from.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Marks endpoint `index` as passing or failing active health checks.
    pub(crate) fn set_healthy(&self, index: usize, healthy: bool) {
        let endpoint = &self.inner.endpoints[index];
        endpoint.healthy.store(healthy, Ordering::Release);
        endpoint.healthy_gauge.set(i64::from(healthy));
    }

    /// The addresses of the endpoints, in configuration order.
    pub(crate) fn addresses(&self) -> Vec<String> {
        self.inner
            .endpoints
            .iter()
            .map(|e| e.address.clone())
            .collect()
    }
}

/// The endpoint picked for one request: counted in flight until finished or dropped.
///
/// Finish it with the upstream's [`Outcome`] so that outlier detection and
/// the breaker learn from it. Dropping it without finishing (the request
/// was cancelled) only gives back the in-flight slot.
pub struct PickedEndpoint {
    inner: Arc<Inner>,
    index: Option<usize>,
    admission: Option<Admission>,
    counted: bool,
}

impl fmt::Debug for PickedEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PickedEndpoint")
            .field("address", &self.address())
            .finish()
    }
}

impl PickedEndpoint {
    /// The endpoint's `host:port`.
    pub fn address(&self) -> &str {
        self.index
            .map(|i| self.inner.endpoints[i].address.as_str())
            .unwrap_or_default()
    }

    /// The endpoint's position in the cluster's configuration.
    pub fn index(&self) -> usize {
        self.index.unwrap_or_default()
    }

    /// Reports how the upstream answered and releases the request.
    pub fn finish(mut self, outcome: Outcome) {
        let inner = &*self.inner;
        let Some(index) = self.index else { return };
        if inner.breaker.is_none() && inner.outlier.is_none() {
            return;
        }
        let now = inner.clock.now();
        if let Some(admission) = self.admission.take()
            && let Some(breaker) = &inner.breaker
        {
            breaker.record(admission, outcome.is_failure(), now);
        }
        if let Some(outlier) = &inner.outlier {
            let fired = inner.endpoints[index]
                .failures
                .count(outcome, &outlier.config);
            for detector in fired.into_iter().flatten() {
                let enforcing = outlier.enforcing(detector);
                let enforce = match enforcing {
                    0 => false,
                    100.. => true,
                    p => inner.rng.lock().random_range(0..100) < p,
                };
                if enforce && outlier.eject(&inner.ejections, index, now).is_some() {
                    inner.endpoints[index].failures.clear();
                    break;
                }
            }
        }
    }
}

impl Drop for PickedEndpoint {
    fn drop(&mut self) {
        let inner = &*self.inner;
        if let Some(index) = self.index {
            inner.endpoints[index].in_flight.dec();
        }
        if self.counted {
            inner.total_in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(Admission::Probe(period)) = self.admission
            && let Some(breaker) = &inner.breaker
        {
            breaker.release_probe(period);
        }
    }
}
