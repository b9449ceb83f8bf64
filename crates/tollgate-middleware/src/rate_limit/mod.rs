//! [`RateLimitLayer`]: the rate limit middleware an axum or hyper app mounts.
//!
//! For each request the [`RateLimit`] service
//!
//! 1. takes the key from a [`KeyExtractor`](crate::KeyExtractor) and the
//!    cost from the request's [`Cost`](crate::Cost) extension (1 without one);
//! 2. checks every [`Limit`](crate::Limit) of the layer for that key in one
//!    batch of the [`CounterStore`](tollgate_store::CounterStore),
//!    all-or-nothing: a request refused by one limit consumes nothing of
//!    the others (fixed windows excepted, as everywhere in Tollgate);
//! 3. over a limit, answers **429** with the same headers `tollgate serve`
//!    and `tollgate proxy` render (`tollgate_protocol`'s renderers):
//!    `RateLimit-Limit` / `-Remaining` / `-Reset`, the IETF `RateLimit-Policy`
//!    and `RateLimit` fields, and `Retry-After` (never earlier than the
//!    request could pass), with an RFC 9457 problem body, or whatever the
//!    app's [`RejectionHandler`] makes of the [`Rejection`]; otherwise calls
//!    the app and adds the same `RateLimit*` headers to its answer;
//! 4. in **shadow mode**, counts what it would have refused
//!    (`outcome="shadow_denied"`) and lets everything through untouched;
//! 5. when the store fails (Redis down), answers 503 with `Retry-After: 1`,
//!    or lets the request through with [`OnStoreError::Allow`];
//! 6. keyed by client address, answers a request without a peer address
//!    **500** (and logs it once at error level): the app is served without
//!    connection info, and counting such requests against one shared key
//!    would let one caller use up everyone's limit.
//!
//! With the `tonic` feature, `RateLimitLayer::grpc` gives the same
//! limits to a tonic server, refusing with `RESOURCE_EXHAUSTED` and a
//! `google.rpc.RetryInfo` (`GrpcRateLimitLayer`).
//!
//! The store is any `CounterStore`: the in-memory `MemoryCounters`
//! ([`RateLimitBuilder::in_memory`]) or, with the `redis` feature,
//! `tollgate_redis::RedisStore` shared by a fleet, or `tollgate_redis::LeasedStore`
//! (a fleet member deciding locally from a lease of Redis quota), one more
//! `CounterStore` in front of Redis; the layer does not change.

mod error;
mod future;
#[cfg(feature = "tonic")]
mod grpc;
#[cfg(feature = "tonic")]
mod grpc_status;
mod layer;
mod pass_headers;
mod policy;
mod service;

pub use error::{Rejection, RejectionHandler};
pub use future::ResponseFuture;
#[cfg(feature = "tonic")]
pub use grpc::{GrpcRateLimit, GrpcRateLimitLayer, GrpcRejectionHandler};
pub use layer::{RateLimitBuilder, RateLimitLayer};
pub use policy::OnStoreError;
pub use service::RateLimit;
