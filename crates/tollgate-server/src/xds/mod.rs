//! Limits from an xDS management server (upstream's `CONFIG_TYPE=GRPC_XDS_SOTW`), as Envoy Gateway drives envoyproxy/ratelimit.
//!
//! [`client`] subscribes to `RateLimitConfig` resources on the Aggregated
//! Discovery Service stream (state of the world: every response carries the
//! full set), [`convert`] loads each set with the limits file loader, and a
//! valid set goes into service as a reload does
//! ([`crate::reload::LiveEngine::put_rules`]); a bad one keeps the running
//! configuration and is NACKed with the diagnostics. [`gauges`] exports the
//! stream's state and its size bound.

pub mod client;
pub mod convert;
pub mod gauges;

pub use client::{XdsOptions, XdsServer, spawn};
pub use convert::{RATE_LIMIT_CONFIG_TYPE, XDS_SOURCE_PREFIX, load_update};
pub use gauges::{XdsCollector, XdsState};
