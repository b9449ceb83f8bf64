//! `tollgate serve`: Envoy RLS v3 decisions over Tollgate's rules and in-memory stores.
//!
//! [`engine`] holds the decision engine: [`Engine`] answers the protocol
//! crate's RLS model ([`tollgate_protocol::rls::model`]) with
//! envoyproxy/ratelimit's semantics. [`grpc`] serves it as Envoy's
//! `RateLimitService` plus the gRPC health service; [`http`] serves it as
//! upstream's `/json` endpoint, a native `/v1/check`, health checks and
//! `/metrics`; [`metrics`] counts what both front ends answer. The response
//! headers and 429 body come from the protocol crate's renderers
//! ([`tollgate_protocol::rls::headers`]). [`reload`] swaps in a new
//! configuration while serving, when its files change or on demand;
//! [`store`] keeps counters in Redis. This crate knows nothing of the proxy.

#![forbid(unsafe_code)]

pub mod engine;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod reload;
pub mod rule_stats;
pub mod statsd;
pub mod store;

pub use engine::{Engine, EngineError, EngineOptions};
pub use reload::{LiveEngine, ReloadError, ReloadOutcome};
