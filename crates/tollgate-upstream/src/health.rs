//! Active HTTP health checks: a GET to every endpoint each interval.
//!
//! A check passes when the endpoint answers within `timeout` with a status
//! in `expected_statuses`. An endpoint's first check decides its state at
//! once (as in Envoy); after that `unhealthy_threshold` failed checks in a
//! row take a healthy endpoint out and `healthy_threshold` passed checks in
//! a row bring an unhealthy one back. Endpoints count as healthy until their
//! first check: call [`HealthChecker::check_once`] before taking traffic to
//! start from checked states (Envoy's cluster warming).

use bytes::Bytes;
use http::header::HOST;
use http::{HeaderValue, Method, Request};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use tokio::task::{JoinHandle, JoinSet};

use crate::cluster::Cluster;
use crate::config::HealthCheckConfig;

#[derive(Debug, Clone, Copy, Default)]
struct CheckState {
    checked: bool,
    passes_in_a_row: u32,
    failures_in_a_row: u32,
    healthy: bool,
}

/// Runs the active health checks of one cluster.
pub struct HealthChecker {
    cluster: Cluster,
    config: HealthCheckConfig,
    client: Client<HttpConnector, Empty<Bytes>>,
    states: Mutex<Vec<CheckState>>,
}

impl std::fmt::Debug for HealthChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthChecker")
            .field("cluster", &self.cluster.name())
            .field("config", &self.config)
            .finish()
    }
}

impl HealthChecker {
    /// The checker of `cluster`, or `None` when its configuration has no `health_check`.
    pub fn new(cluster: &Cluster) -> Option<Self> {
        let config = cluster.config().health_check.clone()?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(config.interval.saturating_mul(2))
            .build(connector);
        let n = cluster.config().endpoints.len();
        Some(HealthChecker {
            cluster: cluster.clone(),
            config,
            client,
            states: Mutex::new(vec![CheckState::default(); n]),
        })
    }

    /// Checks every endpoint once, at the same time, and applies the results.
    pub async fn check_once(&self) {
        let mut checks = JoinSet::new();
        for (index, address) in self.cluster.addresses().into_iter().enumerate() {
            let client = self.client.clone();
            let config = self.config.clone();
            checks.spawn(async move { (index, probe(&client, &config, &address).await) });
        }
        while let Some(result) = checks.join_next().await {
            if let Ok((index, passed)) = result {
                self.apply(index, passed);
            }
        }
    }

    /// Starts checking every `interval` (the first round at once) until the
    /// returned task is dropped.
    pub fn spawn(self) -> HealthCheckTask {
        let handle = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(self.config.interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                self.check_once().await;
            }
        });
        HealthCheckTask { handle }
    }

    fn apply(&self, index: usize, passed: bool) {
        let mut states = self.states.lock();
        let state = &mut states[index];
        if passed {
            state.failures_in_a_row = 0;
            state.passes_in_a_row = state.passes_in_a_row.saturating_add(1);
        } else {
            state.passes_in_a_row = 0;
            state.failures_in_a_row = state.failures_in_a_row.saturating_add(1);
        }
        let healthy = if !state.checked {
            state.checked = true;
            passed
        } else if state.healthy {
            state.failures_in_a_row < self.config.unhealthy_threshold
        } else {
            state.passes_in_a_row >= self.config.healthy_threshold
        };
        if healthy != state.healthy {
            tracing::debug!(
                cluster = self.cluster.name(),
                endpoint = index,
                healthy,
                "health check state"
            );
        }
        state.healthy = healthy;
        self.cluster.set_healthy(index, healthy);
    }
}

/// Sends one check to `address`; true when it passed.
async fn probe(
    client: &Client<HttpConnector, Empty<Bytes>>,
    config: &HealthCheckConfig,
    address: &str,
) -> bool {
    let Ok(uri) = format!("http://{address}{}", config.path).parse::<http::Uri>() else {
        return false;
    };
    let host = config.host.as_deref().unwrap_or(address);
    let Ok(host) = HeaderValue::from_str(host) else {
        return false;
    };
    let Ok(request) = Request::builder()
        .method(Method::GET)
        .uri(uri)
        .header(HOST, host)
        .header("user-agent", "tollgate-health-check")
        .body(Empty::new())
    else {
        return false;
    };
    match tokio::time::timeout(config.timeout, client.request(request)).await {
        Ok(Ok(response)) => {
            let status = response.status().as_u16();
            config.expected_statuses.iter().any(|r| r.contains(status))
        }
        Ok(Err(_)) | Err(_) => false,
    }
}

/// The running health checks of one cluster; dropping it stops them.
#[derive(Debug)]
pub struct HealthCheckTask {
    handle: JoinHandle<()>,
}

impl HealthCheckTask {
    /// Stops the checks now.
    pub fn stop(self) {}
}

impl Drop for HealthCheckTask {
    fn drop(&mut self) {
        self.handle.abort();
    }
}
