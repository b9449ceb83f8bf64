//! A tonic server limited per caller: [`server`] mounts tollgate-middleware's gRPC layer, `main` serves it.
//!
//! The service is the standard `grpc.health.v1.Health` (so the example needs
//! no code generation); the layer works the same in front of any tonic
//! service, as it sees only HTTP/2 requests and their metadata.
//!
//! * Each **caller** is the `x-api-key` metadata value; a call without one
//!   counts against its **peer address** instead, read from tonic's
//!   connection info (a key of the app's own, [`limits`]).
//! * A caller may make [`PER_SECOND`] calls a second and [`PER_MINUTE`] a
//!   minute (two limits, decided all-or-nothing).
//! * Over a limit the call ends with `RESOURCE_EXHAUSTED`, a
//!   `google.rpc.RetryInfo` whose delay is the exact wait, and the
//!   `retry-after` and `ratelimit-*` fields as metadata; an admitted
//!   call's answer carries `ratelimit-*` in its initial metadata.

use std::time::Duration;

use http::request::Parts;
use tokio::net::TcpListener;
use tollgate_middleware::{GrpcRateLimitLayer, KeyExtractor, Limit, RateLimitLayer};
use tollgate_store::{MemoryCounters, StoreConfig};
use tonic::transport::Server;
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};

/// Calls per second per caller.
pub const PER_SECOND: u64 = 3;

/// Calls per minute per caller.
pub const PER_MINUTE: u64 = 60;

/// The metadata that names a caller.
pub const API_KEY: &str = "x-api-key";

/// The rate limit, per caller: the API key, else the peer address.
pub fn limits() -> GrpcRateLimitLayer<MemoryCounters> {
    // The app's own key. The prefixes keep the two kinds apart: an API key
    // cannot spend an address's quota. Without connection info (never, on
    // tonic's TCP server) the call counts against the shared `anonymous`.
    let caller = KeyExtractor::custom(|parts: &Parts| {
        if let Some(key) = parts.headers.get(API_KEY).and_then(|v| v.to_str().ok()) {
            return Some(format!("key {key}"));
        }
        let peer = parts.extensions.get::<TcpConnectInfo>()?.remote_addr()?;
        Some(format!("peer {}", peer.ip()))
    });
    RateLimitLayer::builder(caller)
        .limit(
            Limit::fixed_window("per-second", PER_SECOND, Duration::from_secs(1))
                .expect("a valid limit"),
        )
        .limit(
            Limit::sliding_window("per-minute", PER_MINUTE, Duration::from_secs(60))
                .expect("a valid limit"),
        )
        .in_memory(StoreConfig::with_max_keys(100_000))
        .grpc()
}

/// Serves the health service behind [`limits`] on `listener` until the task is dropped.
pub async fn server(listener: TcpListener) -> Result<(), tonic::transport::Error> {
    let (_reporter, health) = tonic_health::server::health_reporter();
    Server::builder()
        .layer(limits())
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener))
        .await
}
