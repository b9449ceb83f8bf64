//! The example server on loopback, called by a real tonic client: each API key and each keyless
//! peer has its own limit, and the refused call carries RESOURCE_EXHAUSTED with `RetryInfo`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

async fn start() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tonic_app::server(listener));
    addr
}

async fn client(addr: SocketAddr, from: &str) -> HealthClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .local_address(Some(from.parse::<IpAddr>().unwrap()))
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

async fn check(client: &mut HealthClient<Channel>, api_key: Option<&str>) -> Result<(), Status> {
    let mut request = tonic::Request::new(HealthCheckRequest::default());
    if let Some(key) = api_key {
        request
            .metadata_mut()
            .insert(tonic_app::API_KEY, key.parse().unwrap());
    }
    client.check(request).await.map(drop)
}

/// Calls until one is refused (at most two windows' worth and one more: a
/// window second may turn over once among calls this quick); returns the
/// refusal and how many passed before it.
async fn until_refused(client: &mut HealthClient<Channel>, api_key: Option<&str>) -> (u64, Status) {
    for passed in 0..=2 * tonic_app::PER_SECOND {
        if let Err(status) = check(client, api_key).await {
            return (passed, status);
        }
    }
    panic!(
        "{} calls passed a limit of {} a second",
        2 * tonic_app::PER_SECOND + 1,
        tonic_app::PER_SECOND
    );
}

/// The refusal a caller over the per-second limit gets.
fn assert_exhausted(passed: u64, status: &Status) {
    assert!(
        passed >= tonic_app::PER_SECOND,
        "refused after {passed}: {status:?}"
    );
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("per-second"),
        "{}",
        status.message()
    );
    let delay = status
        .get_error_details()
        .retry_info()
        .unwrap()
        .retry_delay
        .unwrap();
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(1),
        "{delay:?}"
    );
    assert_eq!(status.metadata().get("retry-after").unwrap(), "1");
}

#[tokio::test]
async fn each_api_key_has_its_own_limit() {
    let addr = start().await;
    let mut one_connection = client(addr, "127.0.0.1").await;
    let (passed, refused) = until_refused(&mut one_connection, Some("alice")).await;
    assert_exhausted(passed, &refused);
    // Bob's calls on the same connection, and calls without a key, count apart.
    check(&mut one_connection, Some("bob")).await.unwrap();
    check(&mut one_connection, None).await.unwrap();
}

#[tokio::test]
async fn keyless_callers_are_limited_by_peer_address() {
    let addr = start().await;
    let mut first = client(addr, "127.0.0.1").await;
    let (passed, refused) = until_refused(&mut first, None).await;
    assert_exhausted(passed, &refused);
    let mut second = client(addr, "127.0.0.2").await;
    check(&mut second, None).await.unwrap();
}
