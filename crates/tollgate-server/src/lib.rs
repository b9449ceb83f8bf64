//! `tollgate serve`: Envoy RLS v3 decisions over Tollgate's rules and in-memory stores.
//!
//! [`engine`] holds the decision engine: plain Rust types that mirror the RLS
//! v3 request and response, and [`Engine`], which answers them with
//! envoyproxy/ratelimit's semantics. [`grpc`] serves it as Envoy's
//! `RateLimitService` plus the gRPC health service; [`http`] serves it as
//! upstream's `/json` endpoint, a native `/v1/check`, health checks and
//! `/metrics`; [`metrics`] counts what both front ends answer. [`headers`]
//! renders the optional response headers and 429 body Envoy adds to its
//! reply. [`reload`] swaps in a new configuration while serving, when its
//! files change or on demand. This crate knows nothing of the proxy.

#![forbid(unsafe_code)]

pub mod engine;
pub mod grpc;
pub mod headers;
pub mod http;
pub mod metrics;
pub mod reload;
pub mod store;

pub use engine::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, Engine, EngineError, EngineOptions,
    LimitOverride, RateLimitRequest, RateLimitResponse,
};
pub use headers::{HeaderOptions, Jitter, LimitHeaderNames, ResponseHeaders};
pub use reload::{LiveEngine, ReloadError, ReloadOutcome};
