//! `tollgate serve`: Envoy RLS v3 decisions over Tollgate's rules and in-memory stores.
//!
//! Must not know (the README's layout table): the proxy, the lab, the command line.
//!
//! [`engine`] holds the decision engine: [`Engine`] answers the protocol
//! crate's RLS model ([`tollgate_protocol::rls::model`]) with
//! envoyproxy/ratelimit's semantics. [`grpc`] serves it as Envoy's
//! `RateLimitService` plus the gRPC health service; [`http`] serves it as
//! upstream's `/json` endpoint, a native `/v1/check`, health checks and
//! `/metrics`; [`metrics`] counts what both front ends answer, naming each rule's
//! series by [`metric_key`]. The response
//! headers and 429 body come from the protocol crate's renderers
//! ([`tollgate_protocol::rls::headers`]). [`reload`] swaps in a new
//! configuration while serving, when its files change or on demand;
//! [`overrides`] lays limits set while serving over the files' rules;
//! [`store`] keeps counters in Redis; [`bounds`] exports every memory and
//! connection bound as gauges; [`build_info`] says what build serves.
//! [`exposition`] writes `/metrics` in the Prometheus text format and
//! [`statsd`] sends the same statistics as statsd or DogStatsD lines.
//! [`xds`] takes the limits from an xDS management server instead of files.

#![forbid(unsafe_code)]

pub mod bounds;
pub mod build_info;
pub mod engine;
pub mod exposition;
pub mod failure_log;
pub mod grpc;
pub mod http;
pub mod metric_key;
pub mod metrics;
pub mod overrides;
pub mod quick_deny;
pub mod reload;
pub mod rlqs;
mod rule_counters;
pub mod rule_stats;
pub mod sharded_histogram;
pub mod shares;
pub mod statsd;
pub mod store;
pub mod xds;

pub use build_info::BuildInfo;
pub use engine::{Engine, EngineError, EngineOptions};
pub use reload::{LiveEngine, ReloadError, ReloadOutcome};
