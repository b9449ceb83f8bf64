//! Envoy's rate limit vocabulary: the messages, conversions, client and response headers of its
//! rate limit protocols.
//!
//! Must not know (the README's layout table): counters, stores, limits files, the proxy, the server.
//!
//! [`rls`] is the rate limit service v3 (`envoy.service.ratelimit.v3`): a
//! plain-Rust request/response [`model`](rls::model), the protobuf
//! [`wire`](rls::wire) messages (with their proto3 JSON form), a right-sized
//! tonic [`codec`](rls::codec), the [`convert`](rls::convert)ions between
//! the two, one [`RlsClient`], and the
//! [`headers`](rls::headers) a service or a proxy renders from an answer.
//! Envoy's rate limit quota service (RLQS) comes next, beside it.
//!
//! Without features the crate is the [`model`](rls::model), the
//! [`headers`](rls::headers) and [`forwarded`]: an app's middleware needs no
//! more. The `grpc` feature adds the wire messages, the conversions, the
//! codec and the client, with tonic, prost and `envoy-types`.
//!
//! [`forwarded`] reads the trusted client address from `X-Forwarded-For`
//! (Envoy's `xff_num_trusted_hops`), for the proxy and the app middleware.

#![forbid(unsafe_code)]

pub mod forwarded;
pub mod rls;

#[cfg(feature = "grpc")]
pub use rls::RlsClient;
pub use rls::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, LimitOverride, RateLimitRequest,
    RateLimitResponse,
};
