//! `tollgate proxy`: an HTTP/1.1 and h2c sidecar or edge proxy with Envoy's rate-limit filters.
//!
//! Must not know (the README's layout table): Redis, the server crate (it depends on `tollgate-protocol`, not `tollgate-server`).
//!
//! A request meets, in order (see [`build`]):
//!
//! 1. the router ([`server`]): first route whose host and path prefix match;
//! 2. [`local_ratelimit`]: Envoy `local_ratelimit` semantics, exactly;
//! 3. [`limit_req`]: nginx's `limit_req`, rejecting or delaying;
//! 4. the shedding layers of `tollgate-shed`;
//! 5. [`global_ratelimit`]: Envoy's `ratelimit` filter, one RLS v3 call or
//!    a decision in process (an `InProcessService` the binary supplies);
//! 6. [`forward`]: the client connection's own upstream connection, or the
//!    cluster's connection pool; the route's timeout.
//!
//! Descriptors for both limits come from [`descriptors`]; every error is a
//! [`error::ProxyError`] rendered by [`reply`]. Configuration comes from the
//! proxy's YAML, an Istio `EnvoyFilter` or a bare `LocalRateLimit`
//! ([`config`]).

#![forbid(unsafe_code)]

pub mod body;
pub mod build;
pub mod config;
pub mod context;
pub mod descriptors;
pub mod error;
pub mod forward;
pub mod global_ratelimit;
pub mod header_timer;
pub mod hits_addend;
pub mod idle;
pub mod lazy_deadline;
pub mod limit_req;
pub mod local_ratelimit;
pub mod metrics;
pub mod reply;
pub mod request_header;
pub mod response_future;
pub mod route_labels;
pub mod server;

pub use body::{BoxError, ProxyBody};
pub use server::{ConfigSource, Proxy, serve, watch_config};
