//! Envoy's rate limit service, v3 (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`).
//!
//! * [`model`]: the request and answer as plain Rust, which services decide on;
//! * [`wire`]: the protobuf messages (and their proto3 JSON form, through [`json`]);
//! * [`convert`]: model ⇄ wire;
//! * [`caps`]: the bounds on one request (descriptors, entries, bytes);
//! * [`codec`]: the tonic codec with right-sized buffers, checking a request's caps before decoding it;
//! * [`client`]: [`RlsClient`], one call with a deadline;
//! * [`headers`]: the response headers and 429 body rendered from an answer.

pub mod caps;
pub mod client;
pub mod codec;
pub mod convert;
pub mod headers;
pub mod json;
pub mod model;
mod numbers;
pub mod wire;

pub use caps::{CapError, RequestCaps};
pub use client::{InProcessAnswer, InProcessService, RlsClient};
pub use codec::RlsCodec;
pub use headers::{HeaderOptions, Jitter, LimitHeaderNames, Rendered, ResponseHeaders};
pub use model::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, LimitOverride, RateLimitRequest,
    RateLimitResponse,
};
