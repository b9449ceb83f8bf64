//! The tower stack of one route: its layers in the order a request meets them, over the balancer and the forwarder.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tollgate_shed::concurrency::ConcurrencyLimitLayer;
use tollgate_shed::priority::PriorityLayer;
use tollgate_upstream::LbPolicy;
use tollgate_upstream::balance::BalanceLayer;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

use crate::config::{ConcurrencyLimitConfig, ConfigPath, FieldError};
use crate::context::RequestContext;
use crate::forward::{Cluster, Forward};
use crate::global_ratelimit::GlobalRateLimitLayer;
use crate::limit_req::LimitReqLayer;
use crate::local_ratelimit::LocalRateLimitLayer;

use crate::body::ProxyBody;
use crate::error::ProxyError;

/// A route's boxed stack.
pub type RouteService = BoxCloneSyncService<Request<Incoming>, Response<ProxyBody>, ProxyError>;

/// A route's optional layers, each built from its config.
pub(super) struct RouteLayers {
    /// The local rate limit (the route's own or the listener's).
    pub local: Option<LocalRateLimitLayer>,
    /// nginx's `limit_req`.
    pub limit_req: Option<LimitReqLayer>,
    /// Priority shedding.
    pub priority: Option<PriorityLayer>,
    /// The concurrency limit.
    pub concurrency: Option<ConcurrencyLimitLayer<String, KeyFn>>,
    /// The global rate limit.
    pub global: Option<GlobalRateLimitLayer>,
}

/// The route's stack: `layers`, outermost first, over the balancer and the forwarder to `cluster`.
pub(super) fn stack(
    layers: RouteLayers,
    cluster: &Arc<Cluster>,
    timeout: Option<Duration>,
) -> RouteService {
    let mut balance = BalanceLayer::new(cluster.balancer.clone());
    // Only the ring hash reads a key: the other policies are spared making one per request.
    if cluster.balancer.config().lb_policy == LbPolicy::RingHash {
        balance = balance.hash_key(hash_key(cluster));
    }
    // Each layer's error, and the forwarder's, converts into ProxyError.
    let stack = ServiceBuilder::new()
        .option_layer(layers.local)
        .option_layer(layers.limit_req)
        .option_layer(layers.priority)
        .option_layer(layers.concurrency)
        .option_layer(layers.global)
        .map_err(ProxyError::from)
        .layer(balance)
        .service(Forward::new(Arc::clone(cluster), timeout));
    BoxCloneSyncService::new(stack)
}

/// The concurrency limit layer of a route: keyed by a header's value or the trusted client address.
pub(super) type KeyFn = Box<dyn Fn(&Request<Incoming>) -> String + Send + Sync>;

pub(super) fn concurrency_layer(
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
