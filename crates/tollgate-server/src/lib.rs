//! `tollgate serve`: Envoy RLS v3 decisions over Tollgate's rules and in-memory stores.
//!
//! [`engine`] holds the decision engine: plain Rust types that mirror the RLS
//! v3 request and response, and [`Engine`], which answers them with
//! envoyproxy/ratelimit's semantics. The gRPC service, the HTTP JSON API,
//! metrics and health will sit on top of it and map their wire types onto
//! these; this crate knows nothing of the proxy.

pub mod engine;

pub use engine::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, Engine, EngineError, EngineOptions,
    LimitOverride, RateLimitRequest, RateLimitResponse,
};
