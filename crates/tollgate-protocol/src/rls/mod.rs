//! Envoy's rate limit service, v3 (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`).
//!
//! * [`model`]: the request and answer as plain Rust, which services decide on;
//! * [`wire`]: the protobuf messages (and their proto3 JSON form, through [`json`]);
//! * [`convert`]: model ⇄ wire;
//! * [`caps`]: the bounds on one request (descriptors, entries, bytes);
//! * [`codec`]: the tonic codec with right-sized buffers, checking a request's caps before decoding it;
//! * [`client`]: [`RlsClient`], one call with a deadline;
//! * [`headers`]: the response headers and 429 body rendered from an answer.
//!
//! Without the `grpc` feature only [`model`] and [`headers`] are built: what
//! an app's middleware renders its answers with, free of tonic and protobuf.

#[cfg(feature = "grpc")]
pub mod caps;
#[cfg(feature = "grpc")]
pub mod client;
#[cfg(feature = "grpc")]
pub mod codec;
#[cfg(feature = "grpc")]
pub mod convert;
pub mod headers;
#[cfg(feature = "grpc")]
pub mod json;
pub mod model;
#[cfg(feature = "grpc")]
mod numbers;
#[cfg(feature = "grpc")]
pub mod wire;

#[cfg(feature = "grpc")]
pub use caps::{CapError, RequestCaps};
#[cfg(feature = "grpc")]
pub use client::{InProcessAnswer, InProcessService, RlsClient};
#[cfg(feature = "grpc")]
pub use codec::RlsCodec;
pub use headers::{HeaderOptions, Jitter, LimitHeaderNames, Rendered, ResponseHeaders};
pub use model::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, LimitOverride, RateLimitRequest,
    RateLimitResponse,
};
