//! A gRPC client of a `tollgate serve` child for the `redis_*` tests: one-descriptor requests, a channel, a call.

use std::time::Duration;

use tollgate_protocol::rls::RlsClient;
use tollgate_protocol::rls::wire::{self, Entry, RateLimitDescriptor};
use tonic::transport::Channel;

/// One descriptor `key: value` in `domain`.
pub fn request(domain: &str, key: &str, value: &str) -> wire::RateLimitRequest {
    wire::RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_owned(),
                value: value.to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// A gRPC channel to `addr`, connected.
pub async fn channel(addr: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("the instance accepts connections")
}

/// Sends one call and returns the answer.
pub async fn call(channel: &Channel, request: wire::RateLimitRequest) -> wire::RateLimitResponse {
    RlsClient::new(channel.clone())
        .should_rate_limit(request)
        .await
        .expect("every call is answered")
}

/// Whether the answer is OK overall.
pub fn is_ok(response: &wire::RateLimitResponse) -> bool {
    response.overall_code == wire::CODE_OK
}
