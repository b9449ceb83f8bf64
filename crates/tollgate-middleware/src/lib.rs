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
//! * **Shadow mode** and **metrics** ([`Metrics`], prometheus-client
//!   counters the app registers in its own registry).
//!
//! `examples/axum-app` in the repository is a runnable app.

#![forbid(unsafe_code)]

mod cost;
mod key;
mod limit;
mod metrics;
mod rate_limit;

pub use cost::Cost;
pub use key::{ANONYMOUS, KeyExtractor, KeySource, NoClientAddress};
pub use limit::Limit;
pub use metrics::{DecisionLabels, Metrics};
#[cfg(feature = "tonic")]
pub use rate_limit::{GrpcRateLimit, GrpcRateLimitLayer, GrpcRejectionHandler};
pub use rate_limit::{
    OnStoreError, RateLimit, RateLimitBuilder, RateLimitLayer, Rejection, RejectionHandler,
    ResponseFuture,
};
#[cfg(feature = "redis")]
pub use tollgate_redis::{LeasedStore, RedisStore};
