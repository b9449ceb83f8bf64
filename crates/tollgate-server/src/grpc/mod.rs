//! The gRPC front end: Envoy's `RateLimitService` and the standard health service over an [`Engine`](crate::Engine).
//!
//! [`RateLimitGrpc`] answers `ShouldRateLimit` (the messages, codec and
//! conversions are the protocol crate's, [`tollgate_protocol::rls`]);
//! [`serve`] runs it and the health service on a listener until a shutdown
//! future completes, then drains the calls in flight; [`serve_on_workers`] serves it on N
//! threads with a current-thread runtime each. Each connection
//! goes through [`authority::AuthorityFront`], which lets Envoy's
//! cluster-name `:authority` values (Istio's `outbound|8081||…`) through.

pub mod authority;
mod serve;
mod service;
mod unary;
mod workers;

pub use serve::{GrpcLimits, serve, serve_capped, serve_with};
pub use service::RateLimitGrpc;
pub use workers::serve_on_workers;
