//! [`Route`]: one route ready to serve, its host and path match ([`HostMatch`]) and its stack built from its config.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tollgate_shed::priority::PriorityLayer;

use super::local_policy::local_policy;
use super::stack::{RouteLayers, RouteService, concurrency_layer, stack};
use crate::config::{ConfigError, ConfigPath, FieldError, ResponseContractConfig, RouteConfig};
use crate::descriptors::{self, DescriptorRule};
use crate::forward::Cluster;
use crate::global_ratelimit::{GlobalRateLimit, GlobalRateLimitLayer};
use crate::limit_req::policy::DEFAULT_MAX_WAITING;
use crate::limit_req::{LimitReqLayer, LimitReqPolicy};
use crate::local_ratelimit::{LocalLimiter, LocalRateLimitLayer, SharedClock};
use crate::metrics::{Metrics, RouteCounters};
use crate::reply::ResponseContract;

/// Envoy's default route timeout.
pub const DEFAULT_ROUTE_TIMEOUT: Duration = Duration::from_secs(15);
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
    pub counters: OnceLock<RouteCounters>,
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

/// A route's (or the default) 429/503 contract from its config.
pub(super) fn contract(config: Option<&ResponseContractConfig>) -> ResponseContract {
    let mut contract = ResponseContract::default();
    if let Some(c) = config {
        contract.retry_after_jitter = c.retry_after_jitter.unwrap_or(Duration::ZERO);
        contract.ietf_headers = c.ietf_headers;
        contract.problem_json = c.problem_json;
    }
    contract
}

/// What every route is built with: the checked clusters and what the config's top level holds.
pub(super) struct RouteInputs<'a> {
    /// The config file.
    pub file: &'a Path,
    /// The folder relative file names are read from.
    pub base: &'a Path,
    /// The clock of every limiter.
    pub clock: &'a SharedClock,
    /// Where the layers report.
    pub metrics: &'a Metrics,
    /// The clusters, checked.
    pub clusters: &'a [Arc<Cluster>],
    /// The listener's local rate limit, for routes without their own.
    pub listener_limiter: Option<Arc<LocalLimiter>>,
    /// The global rate limit filter.
    pub global: Option<Arc<GlobalRateLimit>>,
    /// The contract of routes without their own.
    pub default_contract: &'a ResponseContract,
}

/// Route `i` of the config (`r`) with its stack; the local rate limit files it reads go into `watched`.
pub(super) fn route(
    inputs: &RouteInputs<'_>,
    i: usize,
    r: &RouteConfig,
    watched: &mut Vec<PathBuf>,
) -> Result<Route, ConfigError> {
    let at = ConfigPath::root().key("routes").index(i);
    let in_file = |e: FieldError| ConfigError::field(inputs.file, e);
    let Some(cluster) = inputs.clusters.iter().find(|c| *c.name == *r.cluster) else {
        return Err(in_file(
            at.key("cluster")
                .error(format!("no cluster is named `{}`", r.cluster)),
        ));
    };
    let prefix = r.prefix.clone().unwrap_or_else(|| "/".to_owned());
    if !prefix.starts_with('/') {
        return Err(in_file(
            at.key("prefix")
                .error(format!("`{prefix}` must start with /")),
        ));
    }
    let rules = descriptors::compile(&r.rate_limits, at.key("rate_limits")).map_err(in_file)?;
    let layers = layers(inputs, i, r, &rules, &at, watched)?;
    let timeout = match r.timeout {
        None => Some(DEFAULT_ROUTE_TIMEOUT),
        Some(d) if d.is_zero() => None,
        Some(d) => Some(d),
    };
    Ok(Route {
        name: Arc::from(r.name.clone().unwrap_or_else(|| format!("route{i}"))),
        host: HostMatch::parse(r.host.as_deref()),
        prefix,
        cluster: Arc::clone(&cluster.name),
        service: stack(layers, cluster, timeout),
        contract: r
            .rate_limit_response
            .as_ref()
            .map_or_else(|| inputs.default_contract.clone(), |c| contract(Some(c))),
        counters: OnceLock::new(),
    })
}

/// The layers of route `i` (`r`, at `at`, reading `rules`).
fn layers(
    inputs: &RouteInputs<'_>,
    i: usize,
    r: &RouteConfig,
    rules: &[DescriptorRule],
    at: &ConfigPath,
    watched: &mut Vec<PathBuf>,
) -> Result<RouteLayers, ConfigError> {
    let in_file = |e: FieldError| ConfigError::field(inputs.file, e);
    let clock = inputs.clock;
    let own = local_policy(
        inputs.file,
        inputs.base,
        r.local_ratelimit.as_ref(),
        r.local_ratelimit_file.as_ref(),
        true,
        at,
        watched,
    )?;
    let limiter = match own {
        Some(p) => Some(Arc::new(LocalLimiter::new(p, Arc::clone(clock)))),
        None => inputs.listener_limiter.clone(),
    };
    let local = limiter.map(|l| LocalRateLimitLayer::new(l, rules, Arc::clone(clock)));
    let global = inputs
        .global
        .as_ref()
        .filter(|_| !r.disable_global_ratelimit)
        .map(|g| GlobalRateLimitLayer::new(Arc::clone(g), rules));
    let priority = r
        .priority_shedding
        .as_ref()
        .map(|p| {
            PriorityLayer::with_clock(p, Arc::clone(clock))
                .map_err(|e| in_file(at.key("priority_shedding").key(e.field).error(e.message)))
        })
        .transpose()?;
    let route_name = r.name.clone().unwrap_or_else(|| format!("route{i}"));
    if let (Some(layer), Some(queue)) = (
        &priority,
        r.priority_shedding.as_ref().and_then(|p| p.queue.as_ref()),
    ) {
        inputs.metrics.watch_priority_line(
            &route_name,
            &r.cluster,
            queue.max_queued,
            layer.clone(),
        );
    }
    let concurrency = r
        .concurrency_limit
        .as_ref()
        .map(|c| concurrency_layer(c, &at.key("concurrency_limit")).map_err(in_file))
        .transpose()?;
    let limit_req = r
        .limit_req
        .as_ref()
        .map(|c| {
            let stats = inputs.metrics.limit_req.stats(
                &route_name,
                &r.cluster,
                c.max_waiting.unwrap_or(DEFAULT_MAX_WAITING),
            );
            LimitReqPolicy::compile(c, Arc::clone(clock), stats, &at.key("limit_req"))
                .map(|p| LimitReqLayer::new(Arc::new(p)))
                .map_err(in_file)
        })
        .transpose()?;
    Ok(RouteLayers {
        local,
        limit_req,
        priority,
        concurrency,
        global,
    })
}
