//! Rate limiting in an app's own server: a tower [`RateLimitLayer`] that an axum or hyper app mounts.
//!
//! Must not know (the README's layout table): the server and proxy crates.
//!
//! ```
//! use std::time::Duration;
//! use axum::{Router, routing::get};
//! use tollgate_middleware::{KeyExtractor, Limit, RateLimitLayer};
//! use tollgate_store::StoreConfig;
//!
//! let limits = RateLimitLayer::builder(KeyExtractor::client_address())
//!     .limit(Limit::fixed_window("per-second", 10, Duration::from_secs(1)).unwrap())
//!     .limit(Limit::fixed_window("per-hour", 1_000, Duration::from_secs(3600)).unwrap())
//!     .in_memory(StoreConfig::with_max_keys(100_000));
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(limits);
//! // Served with `app.into_make_service_with_connect_info::<SocketAddr>()`; the
//! // `axum` feature reads that `ConnectInfo` (without it: 500, never a shared key).
//! ```
//!
//! * **Keys** ([`KeyExtractor`]): the client address (with trusted proxy
//!   hops, read exactly as `tollgate proxy` reads them), a header, an API
//!   key, the route and one of those, or the app's own closure
//!   ([`KeyExtractor::custom`], any [`KeySource`]). A request without a
//!   client address is answered 500, never counted against a shared key.
//! * **Every algorithm** of `tollgate-core` ([`Limit`]): fixed window,
//!   sliding window, sliding log, GCRA, token bucket, leaky bucket.
//! * **Several limits per key**, decided all-or-nothing in one store batch.
//! * **Cost** from a request extension ([`Cost`]), so a GraphQL server can
//!   charge a query its computed cost.
//! * **Stores**: in memory (`tollgate_store::MemoryCounters`), or with the
//!   `redis` feature shared by every replica through Redis, in the two
//!   modes of `tollgate serve`: exact (`RedisStore`, one Redis call per
//!   request) or leased (`LeasedStore`: most requests decided from a lease
//!   of the key's budget, without a call, never past the limit); any
//!   `tollgate_store::CounterStore` is a store.
//! * **The 429 contract** of `tollgate serve` and `tollgate proxy`: the same
//!   renderers write `RateLimit-Limit` / `-Remaining` / `-Reset`,
//!   `RateLimit-Policy`, `RateLimit` and `Retry-After`; the body is an RFC
//!   9457 problem, or the app's own ([`RateLimitBuilder::on_rejection`]).
//! * **gRPC** (the `tonic` feature): `RateLimitLayer::grpc` mounts the
//!   same limits on a tonic server; a refused call ends with
//!   `RESOURCE_EXHAUSTED` and a `google.rpc.RetryInfo` of the exact wait
//!   (`GrpcRateLimitLayer`, `Rejection::grpc_status`).
//! * **Shadow mode** and **metrics** (the `metrics` feature: `Metrics`,
//!   prometheus-client counters the app registers in its own registry).
//!
//! # Features
//!
//! None is on by default: the default build is what a hyper or tower app
//! needs, 36 crates where it was 111 (`cargo tree -p tollgate-middleware -e
//! normal --prefix none --features ..`, distinct name and version).
//!
//! | feature | adds | crates |
//! |---|---|---|
//! | (none) | the layer, every key, limit and the in-memory store | 35 |
//! | `axum` | reads axum's `ConnectInfo<SocketAddr>` (the client address) and `MatchedPath` (the route) | 58 |
//! | `metrics` | `Metrics` (prometheus-client counters); with `redis`, `LeaseBookGauges` | 42 |
//! | `redis` | `RedisStore` and `LeasedStore`, shared by an app's replicas | 118 |
//! | `tonic` | `RateLimitLayer::grpc` | 78 |
//!
//! Without `axum` (a hyper or tower app), the client address is a
//! [`std::net::SocketAddr`] request extension the app inserts from the
//! connection it accepted:
//!
//! ```
//! use std::net::SocketAddr;
//! use std::time::Duration;
//! use tollgate_middleware::{KeyExtractor, Limit, RateLimitLayer};
//! use tollgate_store::StoreConfig;
//! use tower::{Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let limits = RateLimitLayer::builder(KeyExtractor::client_address())
//!     .limit(Limit::fixed_window("per-minute", 1, Duration::from_secs(60)).unwrap())
//!     .in_memory(StoreConfig::with_max_keys(100_000));
//! let app = tower::service_fn(|_: http::Request<()>| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::from("hello")))
//! });
//! let mut service = limits.layer(app);
//!
//! // What a hyper server does with each request of a connection from `peer`.
//! let peer: SocketAddr = "192.0.2.7:50000".parse().unwrap();
//! let request = |peer: Option<SocketAddr>| {
//!     let mut request = http::Request::new(());
//!     if let Some(peer) = peer {
//!         request.extensions_mut().insert(peer);
//!     }
//!     request
//! };
//! let status = |r: http::Response<bytes::Bytes>| r.status().as_u16();
//! assert_eq!(status(service.ready().await.unwrap().call(request(Some(peer))).await.unwrap()), 200);
//! assert_eq!(status(service.ready().await.unwrap().call(request(Some(peer))).await.unwrap()), 429);
//! // No peer address: an error (500), never a bucket shared by every such request.
//! assert_eq!(status(service.ready().await.unwrap().call(request(None)).await.unwrap()), 500);
//! # }
//! ```
//!
//! The keys of one request ([`KeyExtractor`]):
//!
//! ```
//! use std::net::SocketAddr;
//! use http::HeaderName;
//! use tollgate_middleware::KeyExtractor;
//!
//! // A request from a load balancer at 10.0.0.2, which appended the caller's address.
//! let mut request = http::Request::get("/login")
//!     .header("x-forwarded-for", "198.51.100.1, 203.0.113.9")
//!     .header("authorization", "Bearer token-of-alice")
//!     .body(())
//!     .unwrap();
//! request.extensions_mut().insert("10.0.0.2:4711".parse::<SocketAddr>().unwrap());
//! let (parts, ()) = request.into_parts();
//!
//! // Trusting no proxy, the key is the peer; trusting one, the entry it appended
//! // (a client's own X-Forwarded-For entries buy it no fresh key).
//! assert_eq!(KeyExtractor::client_address().extract(&parts).unwrap(), "10.0.0.2");
//! let behind_one = KeyExtractor::ClientAddress { trusted_hops: 1 };
//! assert_eq!(behind_one.extract(&parts).unwrap(), "203.0.113.9");
//! let api_key = KeyExtractor::ApiKey { header: HeaderName::from_static("x-api-key") };
//! assert_eq!(api_key.extract(&parts).unwrap(), "token-of-alice");
//! let per_route = KeyExtractor::RouteAnd(Box::new(api_key));
//! assert_eq!(per_route.extract(&parts).unwrap(), "/login token-of-alice");
//! ```
//!
//! `examples/axum-app` in the repository is a runnable app.

#![forbid(unsafe_code)]

mod cost;
mod key;
#[cfg(all(feature = "metrics", feature = "redis"))]
mod lease_gauges;
mod limit;
mod metrics;
mod rate_limit;

pub use cost::Cost;
pub use key::{ANONYMOUS, KeyExtractor, KeySource, NoClientAddress};
#[cfg(all(feature = "metrics", feature = "redis"))]
pub use lease_gauges::LeaseBookGauges;
pub use limit::Limit;
#[cfg(feature = "metrics")]
pub use metrics::{DecisionLabels, Metrics};
#[cfg(feature = "tonic")]
pub use rate_limit::{GrpcRateLimit, GrpcRateLimitLayer, GrpcRejectionHandler};
pub use rate_limit::{
    OnStoreError, RateLimit, RateLimitBuilder, RateLimitLayer, Rejection, RejectionHandler,
    ResponseFuture,
};
#[cfg(feature = "redis")]
pub use tollgate_redis::{LeasedStore, RedisStore};
