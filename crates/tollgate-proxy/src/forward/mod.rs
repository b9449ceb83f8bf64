//! [`Forward`]: the innermost service, which sends a request to one of a cluster's endpoints.
//!
//! An HTTP/1.1 client connection keeps its own upstream connection to each
//! plain HTTP/1.1 endpoint it uses, from its second request on ([`KeptConnections`], in its
//! [`ConnectionScope`](crate::context::ConnectionScope)); other requests
//! (h2c clients, HTTP/2 or TLS clusters) go through the cluster's pool,
//! hyper-util's client (HTTP/1.1 keep-alive, or HTTP/2 with prior
//! knowledge). Bodies stream both ways
//! without buffering, except that the request body's first frame is read
//! before anything is sent, so a body broken from its start (a malformed
//! chunk) reaches no upstream and gets 400 ([`request_body`]). The route's
//! timeout bounds the wait for that frame and the response headers (on the
//! client connection's own timer, [`RouteTimer`], for an HTTP/1 client). The
//! endpoint is the one `tollgate-upstream`'s balancer picked (a
//! [`SelectedEndpoint`](tollgate_upstream::balance::SelectedEndpoint) in the request's extensions, set by the
//! `BalanceLayer` just outside this service).

mod cluster;
pub mod error;
mod hop_headers;
mod kept_connections;
pub mod request_body;
mod route_timeout;
mod service;

pub use cluster::{Cluster, ClusterOptions, Endpoint, UpstreamProtocol};
pub use hop_headers::strip_hop_by_hop;
pub use kept_connections::{KEPT_PER_CLIENT_CONNECTION, KeptConnections};
pub use route_timeout::RouteTimer;
pub use service::Forward;
