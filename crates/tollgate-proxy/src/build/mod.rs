//! Turns a parsed [`ProxyConfig`](crate::config::ProxyConfig) into the routes that serve requests: one tower stack per route.
//!
//! The stack, outermost first (the order a request meets the policies):
//!
//! 1. local rate limit (`local_ratelimit`, the route's own or the listener's),
//! 2. nginx's `limit_req` (`limit_req`: reject, or wait within the burst),
//! 3. priority shedding (`priority_shedding`, `tollgate-shed`),
//! 4. concurrency limit (`concurrency_limit`, `tollgate-shed`),
//! 5. global rate limit (the RLS call, or the in-process decision),
//! 6. balance (`tollgate-upstream`: the endpoint pick, outlier ejection, the breaker),
//! 7. forward (the client connection's own upstream connection or the cluster's pool, the route's timeout).
//!
//! Each layer has its own error and converts it into the inner service's;
//! the stack errs with one type at its edge, `crate::error::ProxyError`,
//! which gathers them all and becomes a response in `crate::reply`, called
//! once by the server.
//! Configuration problems name their field with a
//! [`ConfigPath`](crate::config::ConfigPath).
//!
//! * [`runtime`]: [`Runtime`], one configuration generation, and [`build`],
//!   which checks and builds it all before anything is used;
//! * [`listener`]: [`ListenerSpec`], a listener with its limits and TLS;
//! * `cluster`: the upstream clusters (balancer, health checks, pool);
//! * [`route`]: [`Route`], its host and path match, its layers;
//! * `local_policy`: a local rate limit, inline or from its own file;
//! * `stack`: the layers stacked in the order above.

mod cluster;
pub mod listener;
mod local_policy;
pub mod route;
pub mod runtime;
mod stack;

pub use cluster::DEFAULT_CONNECT_TIMEOUT;
pub use listener::ListenerSpec;
pub use route::{DEFAULT_ROUTE_TIMEOUT, HostMatch, Route};
pub use runtime::{Runtime, build};
pub use stack::RouteService;
