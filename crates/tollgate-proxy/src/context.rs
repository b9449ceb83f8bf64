//! What the connection and router know about a request, carried in its extensions for the layers.

use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::local_ratelimit::{LocalLimiter, SharedClock};

/// Per-downstream-connection state: the limiters of `local_rate_limit_per_downstream_connection` policies.
#[derive(Debug, Default)]
pub struct ConnectionScope {
    limiters: Mutex<Vec<(usize, Arc<LocalLimiter>)>>,
}

impl ConnectionScope {
    /// This connection's own full-bucket copy of `shared`, created on first use.
    pub fn limiter(&self, shared: &Arc<LocalLimiter>, clock: &SharedClock) -> Arc<LocalLimiter> {
        let key = Arc::as_ptr(shared) as usize;
        let mut limiters = self.limiters.lock();
        if let Some((_, l)) = limiters.iter().find(|(k, _)| *k == key) {
            return Arc::clone(l);
        }
        let limiter = Arc::new(LocalLimiter::new(
            Arc::clone(shared.policy()),
            Arc::clone(clock),
        ));
        limiters.push((key, Arc::clone(&limiter)));
        limiter
    }
}

/// The request's context, inserted by the router before the route's stack runs.
#[derive(Clone, Debug)]
pub struct RequestContext {
    /// The trusted client address.
    pub client: IpAddr,
    /// The route's name.
    pub route: Arc<str>,
    /// The routed cluster's name.
    pub cluster: Arc<str>,
    /// This proxy's service cluster (`source_cluster` action).
    pub source_cluster: Arc<str>,
    /// The downstream connection.
    pub connection: Arc<ConnectionScope>,
}

/// Whether a request is gRPC (`content-type: application/grpc…`).
pub fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}
