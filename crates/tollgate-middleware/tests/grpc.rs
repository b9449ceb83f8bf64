//! The gRPC twin of the layer on a real tonic server on loopback, called by a real tonic client:
//! RESOURCE_EXHAUSTED with the exact wait in `RetryInfo`, the rate limit fields as metadata,
//! callers keyed by metadata and by tonic's peer address apart, the app's own status, and (with
//! `redis`) a store that fails: UNAVAILABLE with a one-second `RetryInfo`, or passing when allowed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use tokio::net::TcpListener;
use tollgate_core::{ManualClock, Timestamp};
use tollgate_middleware::{GrpcRateLimitLayer, KeyExtractor, Limit, RateLimitLayer, Rejection};
use tollgate_store::{CounterStore, StoreConfig};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

/// Serves the health service behind `layer` on a free loopback port.
async fn serve<St: CounterStore + 'static>(layer: GrpcRateLimitLayer<St>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = Server::builder()
        .layer(layer)
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    addr
}

/// A client of `addr` whose connection leaves from `from`.
async fn client(addr: SocketAddr, from: &str) -> HealthClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .local_address(Some(from.parse::<IpAddr>().unwrap()))
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

/// One health check, naming the caller in `x-caller` metadata when given.
async fn check(client: &mut HealthClient<Channel>, caller: Option<&str>) -> Result<u64, Status> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    if let Some(caller) = caller {
        request
            .metadata_mut()
            .insert("x-caller", caller.parse().unwrap());
    }
    let response = client.check(request).await?;
    let remaining = response.metadata().get("ratelimit-remaining").unwrap();
    Ok(remaining.to_str().unwrap().parse().unwrap())
}

const TEN_SECONDS: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_call_over_the_limit_is_resource_exhausted_with_the_wait_to_the_reset() {
    // 1000.25 s: the epoch-aligned 10 s window resets at 1010 s, 9.75 s from now.
    let clock = ManualClock::new(Timestamp::from_nanos(1_000_250_000_000));
    let layer = RateLimitLayer::builder(KeyExtractor::Header(HeaderName::from_static("x-caller")))
        .limit(Limit::fixed_window("per-10s", 3, TEN_SECONDS).unwrap())
        .clock(Arc::new(clock.clone()))
        .in_memory(StoreConfig::with_max_keys(100))
        .grpc();
    let addr = serve(layer).await;
    let mut alice = client(addr, "127.0.0.1").await;
    for left in [2, 1, 0] {
        assert_eq!(check(&mut alice, Some("alice")).await.unwrap(), left);
    }
    let refused = check(&mut alice, Some("alice")).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("per-10s"),
        "{}",
        refused.message()
    );
    let retry = refused.get_error_details().retry_info().cloned().unwrap();
    assert_eq!(retry.retry_delay, Some(Duration::from_millis(9_750)));
    let metadata = refused.metadata();
    assert_eq!(metadata.get("retry-after").unwrap(), "10");
    assert_eq!(metadata.get("ratelimit-remaining").unwrap(), "0");
    assert_eq!(metadata.get("ratelimit-limit").unwrap(), "3");

    // Another caller on the same connection has its own limit.
    for left in [2, 1, 0] {
        assert_eq!(check(&mut alice, Some("bob")).await.unwrap(), left);
    }
    assert_eq!(
        check(&mut alice, Some("bob")).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    // At the reset RetryInfo named, the caller passes again.
    clock.advance(retry.retry_delay.unwrap());
    assert_eq!(check(&mut alice, Some("alice")).await.unwrap(), 2);
}

#[tokio::test]
async fn callers_keyed_by_tonics_peer_address_are_limited_apart() {
    let layer = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(Limit::gcra("per-hour", 2, Duration::from_secs(3600), 2).unwrap())
        .in_memory(StoreConfig::with_max_keys(100))
        .grpc();
    let addr = serve(layer).await;
    let mut first = client(addr, "127.0.0.1").await;
    let mut second = client(addr, "127.0.0.2").await;
    for client in [&mut first, &mut second] {
        assert_eq!(check(client, None).await.unwrap(), 1);
        assert_eq!(check(client, None).await.unwrap(), 0);
        let refused = check(client, None).await.unwrap_err();
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        let delay = refused
            .get_error_details()
            .retry_info()
            .unwrap()
            .retry_delay;
        // GCRA at 2 an hour: one more call in half an hour (less the time the calls took).
        let delay = delay.unwrap();
        assert!(
            delay > Duration::from_secs(1790) && delay <= Duration::from_secs(1800),
            "{delay:?}"
        );
    }
}

#[tokio::test]
async fn the_apps_own_handler_chooses_the_status() {
    let layer = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(Limit::token_bucket("bucket", 1, 1, Duration::from_secs(60)).unwrap())
        .in_memory(StoreConfig::with_max_keys(100))
        .grpc()
        .on_rejection(|rejection: &Rejection| {
            let mut status = rejection.grpc_status();
            if matches!(rejection, Rejection::OverLimit { .. }) {
                status = Status::with_metadata(
                    Code::Unavailable,
                    "busy, come back later",
                    status.metadata().clone(),
                );
            }
            status
        });
    let addr = serve(layer).await;
    let mut caller = client(addr, "127.0.0.1").await;
    assert_eq!(check(&mut caller, None).await.unwrap(), 0);
    let refused = check(&mut caller, None).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable);
    assert_eq!(refused.message(), "busy, come back later");
    assert_eq!(refused.metadata().get("retry-after").unwrap(), "60");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_failed_store_is_unavailable_for_a_second_or_passes_when_allowed() {
    use tollgate_middleware::{OnStoreError, RedisStore};
    use tollgate_testkit::redis::RedisServer;

    let mut redis = RedisServer::start();
    let store = Arc::new(
        RedisStore::connect(&redis.url(), Duration::from_millis(500))
            .await
            .unwrap(),
    );
    let layer = |on_store_error| {
        RateLimitLayer::builder(KeyExtractor::client_address())
            .limit(Limit::fixed_window("per-10s", 100, TEN_SECONDS).unwrap())
            .on_store_error(on_store_error)
            .store(Arc::clone(&store))
            .grpc()
    };
    let mut deny = client(serve(layer(OnStoreError::Deny)).await, "127.0.0.1").await;
    let mut allow = client(serve(layer(OnStoreError::Allow)).await, "127.0.0.1").await;
    // Redis up: both count in it (one key, the caller's address).
    assert_eq!(check(&mut deny, None).await.unwrap(), 99);
    assert_eq!(check(&mut allow, None).await.unwrap(), 98);

    redis.kill();
    let refused = check(&mut deny, None).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    let retry = refused.get_error_details().retry_info().cloned().unwrap();
    assert_eq!(retry.retry_delay, Some(Duration::from_secs(1)));
    assert_eq!(refused.metadata().get("retry-after").unwrap(), "1");

    // `OnStoreError::Allow`: the service answers, unlimited (no rate limit fields).
    let request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    let passed = allow.check(request).await.unwrap();
    assert!(passed.metadata().get("ratelimit-remaining").is_none());
    assert_eq!(
        passed.into_inner().status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}
