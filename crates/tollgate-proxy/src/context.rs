//! What the connection and router know about a request, carried in its extensions for the layers.

use std::any::Any;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderValue;
use parking_lot::Mutex;

use crate::forward::{KeptConnections, RouteTimer};

/// Per-downstream-connection state: the client's address (and its
/// `x-forwarded-for` value, written once per connection), and what a layer
/// keeps for one connection's life (the limiters of
/// `local_rate_limit_per_downstream_connection` policies), one value per
/// shared value it was made from), the upstream connections it keeps
/// (closed when the scope is dropped with the connection), and the timer of
/// its requests' route timeouts.
pub struct ConnectionScope {
    peer: IpAddr,
    forwarded_for: Option<HeaderValue>,
    values: Mutex<Vec<(usize, Arc<dyn Any + Send + Sync>)>>,
    upstreams: KeptConnections,
    route_timer: RouteTimer,
}

impl fmt::Debug for ConnectionScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionScope").finish_non_exhaustive()
    }
}

impl ConnectionScope {
    /// The scope of a connection from `peer`.
    pub fn new(peer: IpAddr) -> Self {
        ConnectionScope {
            peer,
            forwarded_for: HeaderValue::from_str(&peer.to_string()).ok(),
            values: Mutex::new(Vec::new()),
            upstreams: KeptConnections::new(),
            route_timer: RouteTimer::default(),
        }
    }

    /// The timer of this connection's route timeouts, while no request holds it.
    pub fn route_timer(&self) -> &RouteTimer {
        &self.route_timer
    }

    /// The upstream HTTP/1.1 connections this connection keeps, one per endpoint at most.
    pub fn upstreams(&self) -> &KeptConnections {
        &self.upstreams
    }

    /// The downstream peer's address (the TCP peer, whatever `x-forwarded-for` says).
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// The peer's address as an `x-forwarded-for` value (rendered once per connection).
    pub fn forwarded_for(&self) -> Option<&HeaderValue> {
        self.forwarded_for.as_ref()
    }

    /// This connection's own value for `shared`, made by `make` on first use.
    pub fn get_or_insert_with<K, T>(&self, shared: &Arc<K>, make: impl FnOnce() -> T) -> Arc<T>
    where
        T: Any + Send + Sync,
    {
        let key = Arc::as_ptr(shared).cast::<()>() as usize;
        let mut values = self.values.lock();
        let found = values
            .iter()
            .filter(|(k, _)| *k == key)
            .find_map(|(_, v)| Arc::clone(v).downcast::<T>().ok());
        if let Some(value) = found {
            return value;
        }
        let value = Arc::new(make());
        values.push((key, Arc::clone(&value) as Arc<dyn Any + Send + Sync>));
        value
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

impl RequestContext {
    /// The context the router put in `extensions`.
    pub fn of(extensions: &http::Extensions) -> Result<&RequestContext, MissingContext> {
        extensions.get::<RequestContext>().ok_or(MissingContext)
    }
}

/// A request reached a layer without the [`RequestContext`] the router attaches (a bug).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissingContext;

impl fmt::Display for MissingContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request has no context")
    }
}

impl std::error::Error for MissingContext {}
