//! Turns a parsed [`ProxyConfig`] into the routes that serve requests: one tower stack per route.
//!
//! The stack, outermost first (the order a request meets the policies):
//!
//! 1. local rate limit (`local_ratelimit`, the route's own or the listener's),
//! 2. nginx's `limit_req` (`limit_req`: reject, or wait within the burst),
//! 3. priority shedding (`priority_shedding`, `tollgate-shed`),
//! 4. concurrency limit (`concurrency_limit`, `tollgate-shed`),
//! 5. global rate limit (the RLS call, or the in-process decision),
//! 6. balance (`tollgate-upstream`: the endpoint pick, outlier ejection, the breaker),
//! 7. forward (the cluster's pool, the route's timeout).
//!
//! Each layer has its own error and converts it into the inner service's;
//! the stack errs with one type at its edge, `crate::error::ProxyError`,
//! which gathers them all and becomes a response in `crate::reply`, called
//! once by the server.
//! Configuration problems name their field with a [`ConfigPath`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tollgate_protocol::rls::RlsClient;
use tollgate_shed::concurrency::ConcurrencyLimitLayer;
use tollgate_shed::priority::PriorityLayer;
use tollgate_tls::{ALPN_H2, ALPN_HTTP1, DEFAULT_HANDSHAKE_TIMEOUT, ServerTlsFiles, TlsAcceptor};
use tollgate_upstream::balance::BalanceLayer;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

use crate::body::ProxyBody;
use crate::config::{
    self, ConcurrencyLimitConfig, ConfigError, ConfigPath, FieldError, LimitSettings,
    ListenerLimits, ProxyConfig, ResponseContractConfig, UpstreamTlsConfig,
};
use crate::context::RequestContext;
use crate::descriptors;
use crate::error::ProxyError;
use crate::forward::{Cluster, Endpoint, Forward};
use crate::global_ratelimit::{GlobalRateLimit, GlobalRateLimitLayer};
use crate::limit_req::policy::DEFAULT_MAX_WAITING;
use crate::limit_req::{LimitReqLayer, LimitReqPolicy};
use crate::local_ratelimit::{
    LocalLimiter, LocalRateLimitLayer, LocalRateLimitPolicy, SharedClock,
};
use crate::metrics::Metrics;
use crate::reply::ResponseContract;

/// Envoy's default route timeout.
pub const DEFAULT_ROUTE_TIMEOUT: Duration = Duration::from_secs(15);
/// The default upstream connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle pooled connections kept per endpoint when the config says nothing.
///
/// As many as Envoy's default connection limit per cluster (1024): a pool
/// that keeps fewer idle connections than the requests in flight closes the
/// surplus after each response and opens new ones for the next, which costs
/// a TCP handshake per request under high concurrency.
const DEFAULT_MAX_IDLE_PER_ENDPOINT: usize = 1024;

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

/// One listener as configured.
#[derive(Clone, Debug)]
pub struct ListenerSpec {
    /// Where it listens.
    pub address: SocketAddr,
    /// Its name in logs and metrics (the configured name, else the address).
    pub name: String,
    /// What it allows a client connection.
    pub limits: ListenerLimits,
    /// TLS on its connections, its files read (`None`: plain).
    pub tls: Option<TlsAcceptor>,
}

impl PartialEq for ListenerSpec {
    /// The same listener: the same address, name, limits and TLS files.
    fn eq(&self, other: &Self) -> bool {
        self.address == other.address
            && self.name == other.name
            && self.limits == other.limits
            && self.tls.as_ref().map(TlsAcceptor::files)
                == other.tls.as_ref().map(TlsAcceptor::files)
    }
}

impl Eq for ListenerSpec {}

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

fn contract(config: Option<&ResponseContractConfig>) -> ResponseContract {
    let mut contract = ResponseContract::default();
    if let Some(c) = config {
        contract.retry_after_jitter = c.retry_after_jitter.unwrap_or(Duration::ZERO);
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
    at: &ConfigPath,
    watched: &mut Vec<PathBuf>,
) -> Result<Option<Arc<LocalRateLimitPolicy>>, ConfigError> {
    let (config, origin, source) = match (inline, from_file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::field(
                file,
                at.error("set local_ratelimit or local_ratelimit_file, not both"),
            ));
        }
        (Some(c), None) => (
            config::unwrap_typed(file, at, c.clone())?,
            at.key("local_ratelimit"),
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
        .map_err(|e| ConfigError::field(&source, e))
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
    if config.listeners.is_empty() {
        return Err(in_file(
            root.key("listeners")
                .error("at least one listener is needed"),
        ));
    }
    let listeners = config
        .listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let at = root.key("listeners").index(i);
            Ok(ListenerSpec {
                address: l.address,
                name: l.name.clone().unwrap_or_else(|| l.address.to_string()),
                limits: ListenerLimits::default()
                    .with(&LimitSettings::from(l), &at)
                    .map_err(in_file)?,
                tls: l
                    .tls
                    .as_ref()
                    .map(|tls| {
                        let files = ServerTlsFiles {
                            cert: tls.cert.clone(),
                            key: tls.key.clone(),
                            client_ca: tls.client_ca.clone(),
                            client_sans: tls.client_sans.clone(),
                        };
                        TlsAcceptor::new(files, &[ALPN_H2, ALPN_HTTP1], DEFAULT_HANDSHAKE_TIMEOUT)
                            .map_err(|e| in_file(at.key("tls").error(e.to_string())))
                    })
                    .transpose()?,
            })
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let mut clusters: Vec<Arc<Cluster>> = Vec::new();
    let mut health_checks = Vec::new();
    for (i, c) in config.clusters.iter().enumerate() {
        let at = root.key("clusters").index(i);
        if c.endpoints.is_empty() {
            return Err(in_file(
                at.key("endpoints").error("at least one endpoint is needed"),
            ));
        }
        if clusters.iter().any(|k| *k.name == *c.name) {
            return Err(in_file(
                at.key("name")
                    .error(format!("`{}` is defined twice", c.name)),
            ));
        }
        let endpoints = c
            .endpoints
            .iter()
            .enumerate()
            .map(|(j, e)| match e.weight {
                Some(0) => Err(in_file(
                    at.key("endpoints")
                        .index(j)
                        .key("weight")
                        .error("must be at least 1"),
                )),
                w => Ok(Endpoint {
                    address: e.address,
                    weight: w.unwrap_or(1),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
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
            .map_err(|e| in_file(at.key(e.field()).error(e.to_string())))?;
        if let Some(checker) = tollgate_upstream::HealthChecker::new(&balancer) {
            health_checks.push(checker.spawn());
        }
        let hash_key_header = c
            .hash_key_header
            .as_deref()
            .map(|h| {
                http::HeaderName::from_bytes(h.as_bytes()).map_err(|_| {
                    in_file(
                        at.key("hash_key_header")
                            .error(format!("`{h}` is not a header name")),
                    )
                })
            })
            .transpose()?;
        clusters.push(Arc::new(
            Cluster::new(
                &c.name,
                endpoints,
                balancer,
                hash_key_header,
                c.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
                c.http2,
                c.max_idle_per_endpoint
                    .unwrap_or(DEFAULT_MAX_IDLE_PER_ENDPOINT),
                c.tls.as_ref().map(UpstreamTlsConfig::files).as_ref(),
            )
            .map_err(|e| in_file(at.key("tls").error(e.to_string())))?,
        ));
    }
    let listener_policy = local_policy(
        file,
        base,
        config.local_ratelimit.as_ref(),
        config.local_ratelimit_file.as_ref(),
        false,
        &root.key("local_ratelimit"),
        &mut watched,
    )?;
    let listener_limiter =
        listener_policy.map(|p| Arc::new(LocalLimiter::new(p, Arc::clone(clock))));
    let global = config
        .global_ratelimit
        .as_ref()
        .map(|g| {
            GlobalRateLimit::compile(g, in_process, &root.key("global_ratelimit")).map(Arc::new)
        })
        .transpose()
        .map_err(in_file)?;
    let default_contract = contract(config.rate_limit_response.as_ref());
    let mut routes = Vec::with_capacity(config.routes.len());
    if config.routes.is_empty() {
        return Err(in_file(
            root.key("routes").error("at least one route is needed"),
        ));
    }
    for (i, r) in config.routes.iter().enumerate() {
        let at = root.key("routes").index(i);
        let Some(cluster) = clusters.iter().find(|c| *c.name == *r.cluster) else {
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
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
        };
        let local_layer = limiter.map(|l| LocalRateLimitLayer::new(l, &rules, Arc::clone(clock)));
        let global_layer = global
            .as_ref()
            .filter(|_| !r.disable_global_ratelimit)
            .map(|g| GlobalRateLimitLayer::new(Arc::clone(g), &rules));
        let priority_layer = r
            .priority_shedding
            .as_ref()
            .map(|p| {
                PriorityLayer::with_clock(p, Arc::clone(clock))
                    .map_err(|e| in_file(at.key("priority_shedding").key(e.field).error(e.message)))
            })
            .transpose()?;
        if let (Some(layer), Some(queue)) = (
            &priority_layer,
            r.priority_shedding.as_ref().and_then(|p| p.queue.as_ref()),
        ) {
            let name = r.name.clone().unwrap_or_else(|| format!("route{i}"));
            metrics.watch_priority_line(&name, &r.cluster, queue.max_queued, layer.clone());
        }
        let concurrency_layer = r
            .concurrency_limit
            .as_ref()
            .map(|c| concurrency_layer(c, &at.key("concurrency_limit")).map_err(in_file))
            .transpose()?;
        let route_name = r.name.clone().unwrap_or_else(|| format!("route{i}"));
        let limit_req_layer = r
            .limit_req
            .as_ref()
            .map(|c| {
                let stats = metrics.limit_req.stats(
                    &route_name,
                    &r.cluster,
                    c.max_waiting.unwrap_or(DEFAULT_MAX_WAITING),
                );
                LimitReqPolicy::compile(c, Arc::clone(clock), stats, &at.key("limit_req"))
                    .map(|p| LimitReqLayer::new(Arc::new(p)))
                    .map_err(in_file)
            })
            .transpose()?;
        let balance = BalanceLayer::new(cluster.balancer.clone()).hash_key(hash_key(cluster));
        // Forward errs with ProxyError, so each layer's error converts into it.
        let stack = ServiceBuilder::new()
            .option_layer(local_layer)
            .option_layer(limit_req_layer)
            .option_layer(priority_layer)
            .option_layer(concurrency_layer)
            .option_layer(global_layer)
            .layer(balance)
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
        listeners,
        admin: config.admin.as_ref().map(|a| a.address),
        xff_num_trusted_hops: config.xff_num_trusted_hops,
        source_cluster: Arc::from(config.service_cluster.clone().unwrap_or_default()),
        default_contract,
        watched_files: watched,
        health_checks,
    })
}

/// The concurrency limit layer of a route: keyed by a header's value or the trusted client address.
type KeyFn = Box<dyn Fn(&Request<Incoming>) -> String + Send + Sync>;

fn concurrency_layer(
    config: &ConcurrencyLimitConfig,
    at: &ConfigPath,
) -> Result<ConcurrencyLimitLayer<String, KeyFn>, FieldError> {
    let settings = tollgate_shed::concurrency::ConcurrencyConfig {
        max_in_flight: config.max_in_flight,
        retry_after: config.retry_after.unwrap_or(Duration::from_secs(1)),
    };
    let key: KeyFn = match &config.key_header {
        Some(header) => {
            let name = http::HeaderName::from_bytes(header.as_bytes()).map_err(|_| {
                at.key("key_header")
                    .error(format!("`{header}` is not a header name"))
            })?;
            Box::new(move |request: &Request<Incoming>| {
                request
                    .headers()
                    .get(&name)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                    .unwrap_or_default()
            })
        }
        None => Box::new(|request: &Request<Incoming>| {
            request
                .extensions()
                .get::<RequestContext>()
                .map(|c| c.client.to_string())
                .unwrap_or_default()
        }),
    };
    ConcurrencyLimitLayer::from_config(&settings, key).map_err(|e| at.key(e.field).error(e.message))
}

/// The ring-hash key of a request: the cluster's header, else the trusted client address.
fn hash_key(
    cluster: &Cluster,
) -> impl Fn(&Request<Incoming>) -> Option<Vec<u8>> + Send + Sync + 'static {
    let header = cluster.hash_key_header.clone();
    move |request: &Request<Incoming>| match &header {
        Some(name) => request.headers().get(name).map(|v| v.as_bytes().to_vec()),
        None => request
            .extensions()
            .get::<RequestContext>()
            .map(|c| c.client.to_string().into_bytes()),
    }
}
