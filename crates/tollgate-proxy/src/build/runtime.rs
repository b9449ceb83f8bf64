//! [`Runtime`]: one configuration generation, and [`build`], which checks and builds it all before anything is used.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tollgate_protocol::rls::RlsClient;

use super::cluster::clusters;
use super::listener::{ListenerSpec, listeners};
use super::local_policy::local_policy;
use super::route::{Route, RouteInputs, contract, route};
use crate::config::{ConfigError, ConfigPath, FieldError, ProxyConfig};
use crate::global_ratelimit::GlobalRateLimit;
use crate::local_ratelimit::{LocalLimiter, SharedClock};
use crate::metrics::Metrics;
use crate::reply::ResponseContract;

/// One configuration generation: what requests are routed with.
pub struct Runtime {
    /// The routes, in match order.
    pub routes: Vec<Route>,
    /// The listeners: address, name and connection limits.
    pub listeners: Vec<ListenerSpec>,
    /// The admin address.
    pub admin: Option<SocketAddr>,
    /// Trusted `X-Forwarded-For` hops.
    pub xff_num_trusted_hops: u32,
    /// This proxy's service cluster.
    pub source_cluster: Arc<str>,
    /// The contract for requests no route matched.
    pub default_contract: ResponseContract,
    /// Files whose change should trigger a reload.
    pub watched_files: Vec<PathBuf>,
    /// The clusters' active health checks; they stop when this generation is dropped.
    pub health_checks: Vec<tollgate_upstream::HealthCheckTask>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("routes", &self.routes)
            .field("listeners", &self.listeners)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// The first route matching the request's host and path.
    pub fn route_for(&self, host: &str, path: &str) -> Option<&Route> {
        self.routes
            .iter()
            .find(|r| r.host.matches(host) && path.starts_with(&r.prefix))
    }
}

/// Builds a runtime from `config` (read from `file`); everything is
/// checked before anything is used. `in_process` is the rate limit service
/// this proxy runs itself, if any (`rate_limit_service: {in_process: true}`).
pub fn build(
    config: &ProxyConfig,
    file: &Path,
    clock: &SharedClock,
    metrics: &Metrics,
    in_process: Option<&RlsClient>,
) -> Result<Runtime, ConfigError> {
    let base = file.parent().unwrap_or(Path::new("."));
    let mut watched = vec![file.to_path_buf()];
    let root = ConfigPath::root();
    let in_file = |e: FieldError| ConfigError::field(file, e);
    let listeners = listeners(config, file)?;
    let (clusters, health_checks) = clusters(&config.clusters, file, clock, metrics)?;
    let listener_policy = local_policy(
        file,
        base,
        config.local_ratelimit.as_ref(),
        config.local_ratelimit_file.as_ref(),
        false,
        &root.key("local_ratelimit"),
        &mut watched,
    )?;
    let global = config
        .global_ratelimit
        .as_ref()
        .map(|g| {
            GlobalRateLimit::compile(g, in_process, &root.key("global_ratelimit")).map(Arc::new)
        })
        .transpose()
        .map_err(in_file)?;
    let default_contract = contract(config.rate_limit_response.as_ref());
    if config.routes.is_empty() {
        return Err(in_file(
            root.key("routes").error("at least one route is needed"),
        ));
    }
    let inputs = RouteInputs {
        file,
        base,
        clock,
        metrics,
        clusters: &clusters,
        listener_limiter: listener_policy
            .map(|p| Arc::new(LocalLimiter::new(p, Arc::clone(clock)))),
        global,
        default_contract: &default_contract,
    };
    let routes = config
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| route(&inputs, i, r, &mut watched))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Runtime {
        routes,
        listeners,
        admin: config.admin.as_ref().map(|a| a.address),
        xff_num_trusted_hops: config.xff_num_trusted_hops,
        source_cluster: Arc::from(config.service_cluster.clone().unwrap_or_default()),
        default_contract,
        watched_files: watched,
        health_checks,
    })
}
