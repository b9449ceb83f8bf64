//! Turns a parsed [`ProxyConfig`] into the routes that serve requests: one tower stack per route.
//!
//! The stack, outermost first (the order a request meets the policies):
//!
//! 1. local rate limit (`local_ratelimit`, the route's own or the listener's),
//! 2. global rate limit (the RLS call),
//! 3. forward (the cluster's pool, the route's timeout).
//!
//! Errors of every layer are typed (`crate::error::ProxyError`) and become
//! responses in `crate::reply`, called once by the server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

use crate::ProxyBody;
use crate::config::{self, ConfigError, ProxyConfig, ResponseContractConfig};
use crate::descriptors;
use crate::error::ProxyError;
use crate::forward::{Cluster, Endpoint, Forward};
use crate::global_ratelimit::{GlobalRateLimit, GlobalRateLimitLayer};
use crate::local_ratelimit::{
    LocalLimiter, LocalRateLimitLayer, LocalRateLimitPolicy, SharedClock,
};
use crate::reply::ResponseContract;

/// Envoy's default route timeout.
pub const DEFAULT_ROUTE_TIMEOUT: Duration = Duration::from_secs(15);
/// The default upstream connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A route's boxed stack.
pub type RouteService = BoxCloneSyncService<Request<Incoming>, Response<ProxyBody>, ProxyError>;

/// How a route matches the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostMatch {
    /// Any host.
    Any,
    /// Exactly this host (port ignored, ASCII case-insensitive).
    Exact(String),
    /// A host ending with this suffix (from `*.example.com`: `.example.com`).
    Suffix(String),
}

impl HostMatch {
    fn parse(host: Option<&str>) -> Self {
        match host.map(str::to_ascii_lowercase) {
            None => HostMatch::Any,
            Some(h) if h == "*" => HostMatch::Any,
            Some(h) => match h.strip_prefix('*') {
                Some(suffix) => HostMatch::Suffix(suffix.to_owned()),
                None => HostMatch::Exact(h),
            },
        }
    }

    /// Whether `host` (a Host header or authority, maybe with a port) matches.
    pub fn matches(&self, host: &str) -> bool {
        let host = host.rsplit_once(':').map_or(host, |(h, p)| {
            if p.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        match self {
            HostMatch::Any => true,
            HostMatch::Exact(h) => host.eq_ignore_ascii_case(h),
            HostMatch::Suffix(s) => host.to_ascii_lowercase().ends_with(s.as_str()),
        }
    }
}

/// One route, ready to serve.
#[derive(Clone)]
pub struct Route {
    /// The name.
    pub name: Arc<str>,
    /// The host it matches.
    pub host: HostMatch,
    /// The path prefix it matches.
    pub prefix: String,
    /// The cluster's name.
    pub cluster: Arc<str>,
    /// The stack.
    pub service: RouteService,
    /// The 429/503 contract.
    pub contract: ResponseContract,
    /// The route's metric series, resolved on its first request.
    pub counters: std::sync::OnceLock<crate::metrics::RouteCounters>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("name", &self.name)
            .field("host", &self.host)
            .field("prefix", &self.prefix)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// One configuration generation: what requests are routed with.
#[derive(Debug)]
pub struct Runtime {
    /// The routes, in match order.
    pub routes: Vec<Route>,
    /// The listener addresses.
    pub listeners: Vec<SocketAddr>,
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
}

impl Runtime {
    /// The first route matching the request's host and path.
    pub fn route_for(&self, host: &str, path: &str) -> Option<&Route> {
        self.routes
            .iter()
            .find(|r| r.host.matches(host) && path.starts_with(&r.prefix))
    }
}

fn contract(config: Option<&ResponseContractConfig>) -> ResponseContract {
    let mut contract = ResponseContract::default();
    if let Some(c) = config {
        contract.retry_after_jitter = c.retry_after_jitter.map_or(Duration::ZERO, |d| d.0);
        contract.ietf_headers = c.ietf_headers;
        contract.problem_json = c.problem_json;
    }
    contract
}

fn local_policy(
    file: &Path,
    base: &Path,
    inline: Option<&crate::config::envoy::LocalRateLimitConfig>,
    from_file: Option<&PathBuf>,
    per_route: bool,
    at: &str,
    watched: &mut Vec<PathBuf>,
) -> Result<Option<Arc<LocalRateLimitPolicy>>, ConfigError> {
    let (config, origin, source) = match (inline, from_file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                file,
                format!("{at}: set local_ratelimit or local_ratelimit_file, not both"),
            ));
        }
        (Some(c), None) => (
            config::unwrap_typed(file, at, c.clone())?,
            format!("{at}.local_ratelimit"),
            file.to_path_buf(),
        ),
        (None, Some(path)) => {
            let path = base.join(path);
            watched.push(path.clone());
            match config::load_local_ratelimit_file(&path)? {
                Some(loaded) => (loaded.config, loaded.origin, path),
                None => return Ok(None),
            }
        }
        (None, None) => return Ok(None),
    };
    LocalRateLimitPolicy::compile(&config, per_route, &origin)
        .map(|p| Some(Arc::new(p)))
        .map_err(|m| ConfigError::new(&source, m))
}

/// Builds a runtime from `config` (read from `file`); everything is checked before anything is used.
pub fn build(
    config: &ProxyConfig,
    file: &Path,
    clock: &SharedClock,
) -> Result<Runtime, ConfigError> {
    let base = file.parent().unwrap_or(Path::new("."));
    let mut watched = vec![file.to_path_buf()];
    if config.listeners.is_empty() {
        return Err(ConfigError::new(
            file,
            "listeners: at least one listener is needed",
        ));
    }
    let mut clusters: Vec<Arc<Cluster>> = Vec::new();
    for (i, c) in config.clusters.iter().enumerate() {
        let at = format!("clusters[{i}]");
        for (set, field) in [
            (c.lb_policy.is_some(), "lb_policy"),
            (c.outlier_detection.is_some(), "outlier_detection"),
            (c.circuit_breaker.is_some(), "circuit_breaker"),
            (c.health_check.is_some(), "health_check"),
        ] {
            if set {
                return Err(ConfigError::new(
                    file,
                    format!("{at}.{field}: not supported by this build yet"),
                ));
            }
        }
        if c.endpoints.is_empty() {
            return Err(ConfigError::new(
                file,
                format!("{at}.endpoints: at least one endpoint is needed"),
            ));
        }
        if clusters.iter().any(|k| *k.name == *c.name) {
            return Err(ConfigError::new(
                file,
                format!("{at}.name: `{}` is defined twice", c.name),
            ));
        }
        let endpoints = c
            .endpoints
            .iter()
            .enumerate()
            .map(|(j, e)| match e.weight {
                Some(0) => Err(ConfigError::new(
                    file,
                    format!("{at}.endpoints[{j}].weight: must be at least 1"),
                )),
                w => Ok(Endpoint {
                    address: e.address,
                    weight: w.unwrap_or(1),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        clusters.push(Arc::new(Cluster::new(
            &c.name,
            endpoints,
            c.connect_timeout.map_or(DEFAULT_CONNECT_TIMEOUT, |d| d.0),
            c.http2,
            c.max_idle_per_endpoint.unwrap_or(64),
        )));
    }
    let listener_policy = local_policy(
        file,
        base,
        config.local_ratelimit.as_ref(),
        config.local_ratelimit_file.as_ref(),
        false,
        "local_ratelimit",
        &mut watched,
    )?;
    let listener_limiter =
        listener_policy.map(|p| Arc::new(LocalLimiter::new(p, Arc::clone(clock))));
    let global = config
        .global_ratelimit
        .as_ref()
        .map(|g| GlobalRateLimit::compile(g, "global_ratelimit").map(Arc::new))
        .transpose()
        .map_err(|m| ConfigError::new(file, m))?;
    let default_contract = contract(config.rate_limit_response.as_ref());
    let mut routes = Vec::with_capacity(config.routes.len());
    if config.routes.is_empty() {
        return Err(ConfigError::new(
            file,
            "routes: at least one route is needed",
        ));
    }
    for (i, r) in config.routes.iter().enumerate() {
        let at = format!("routes[{i}]");
        if r.concurrency_limit.is_some() || r.priority_shedding.is_some() {
            return Err(ConfigError::new(
                file,
                format!(
                    "{at}: concurrency_limit and priority_shedding are not supported by this build yet"
                ),
            ));
        }
        let Some(cluster) = clusters.iter().find(|c| *c.name == *r.cluster) else {
            return Err(ConfigError::new(
                file,
                format!("{at}.cluster: no cluster is named `{}`", r.cluster),
            ));
        };
        let prefix = r.prefix.clone().unwrap_or_else(|| "/".to_owned());
        if !prefix.starts_with('/') {
            return Err(ConfigError::new(
                file,
                format!("{at}.prefix: `{prefix}` must start with /"),
            ));
        }
        let rules = descriptors::compile(&r.rate_limits, &format!("{at}.rate_limits"))
            .map_err(|m| ConfigError::new(file, m))?;
        let own = local_policy(
            file,
            base,
            r.local_ratelimit.as_ref(),
            r.local_ratelimit_file.as_ref(),
            true,
            &at,
            &mut watched,
        )?;
        let limiter = match own {
            Some(p) => Some(Arc::new(LocalLimiter::new(p, Arc::clone(clock)))),
            None => listener_limiter.clone(),
        };
        let timeout = match r.timeout {
            None => Some(DEFAULT_ROUTE_TIMEOUT),
            Some(d) if d.0.is_zero() => None,
            Some(d) => Some(d.0),
        };
        let local_layer = limiter.map(|l| LocalRateLimitLayer::new(l, &rules, Arc::clone(clock)));
        let global_layer = global
            .as_ref()
            .filter(|_| !r.disable_global_ratelimit)
            .map(|g| GlobalRateLimitLayer::new(Arc::clone(g), &rules));
        let stack = ServiceBuilder::new()
            .option_layer(local_layer)
            .option_layer(global_layer)
            .service(Forward::new(Arc::clone(cluster), timeout));
        routes.push(Route {
            name: Arc::from(r.name.clone().unwrap_or_else(|| format!("route{i}"))),
            host: HostMatch::parse(r.host.as_deref()),
            prefix,
            cluster: Arc::clone(&cluster.name),
            service: BoxCloneSyncService::new(stack),
            contract: r
                .rate_limit_response
                .as_ref()
                .map_or_else(|| default_contract.clone(), |c| contract(Some(c))),
            counters: std::sync::OnceLock::new(),
        });
    }
    Ok(Runtime {
        routes,
        listeners: config.listeners.iter().map(|l| l.address).collect(),
        admin: config.admin.as_ref().map(|a| a.address),
        xff_num_trusted_hops: config.xff_num_trusted_hops,
        source_cluster: Arc::from(config.service_cluster.clone().unwrap_or_default()),
        default_contract,
        watched_files: watched,
    })
}
