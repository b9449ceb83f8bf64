//! The balance layer around a tower-test mock: endpoint in the extensions, outcomes fed back.

mod cluster_fixture;
mod unmetered_cluster;

use cluster_fixture::endpoints;
use http::{Request, Response, StatusCode};
use tollgate_upstream::balance::{BalanceLayer, SelectedEndpoint};
use tollgate_upstream::{Cluster, PickError};
use tower::{Layer, Service, ServiceExt};
use tower_test::mock;

type Mock = mock::Mock<Request<()>, Response<()>>;

fn cluster(extra: &str) -> Cluster {
    unmetered_cluster::cluster(&format!(
        "name: api\nlb_policy: ring_hash\nendpoints:\n{}{extra}",
        endpoints(&[1, 1, 1])
    ))
    .0
}

fn request(user: &str) -> Request<()> {
    Request::builder().header("x-user", user).body(()).unwrap()
}

fn layer(cluster: &Cluster) -> BalanceLayer<()> {
    BalanceLayer::new(cluster.clone())
        .hash_key(|r: &Request<()>| r.headers().get("x-user").map(|v| v.as_bytes().to_vec()))
}

async fn answer(
    handle: &mut mock::Handle<Request<()>, Response<()>>,
    status: u16,
) -> SelectedEndpoint {
    let (request, send) = handle.next_request().await.unwrap();
    let selected = request
        .extensions()
        .get::<SelectedEndpoint>()
        .unwrap()
        .clone();
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    send.send_response(response);
    selected
}

#[tokio::test(start_paused = true)]
async fn the_inner_service_learns_the_endpoint_and_the_key_is_sticky() {
    let cluster = cluster("");
    let (mock, mut handle) = mock::pair::<Request<()>, Response<()>>();
    let mut service: tollgate_upstream::balance::Balance<Mock, ()> = layer(&cluster).layer(mock);
    let mut seen = Vec::new();
    for _ in 0..5 {
        let call = service.ready().await.unwrap().call(request("alice"));
        assert_eq!(cluster.in_flight(), 1);
        seen.push(answer(&mut handle, 200).await);
        assert_eq!(call.await.unwrap().status(), 200);
        assert_eq!(cluster.in_flight(), 0);
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
    assert_eq!(cluster.endpoints()[seen[0].index].address, seen[0].address);
}

#[tokio::test(start_paused = true)]
async fn statuses_and_errors_feed_outlier_detection() {
    let cluster = cluster("outlier_detection: {consecutive_5xx: 2, max_ejection_percent: 50}\n");
    let (mock, mut handle) = mock::pair::<Request<()>, Response<()>>();
    let mut service = layer(&cluster).layer(mock);

    let first = service.ready().await.unwrap().call(request("bob"));
    let home = answer(&mut handle, 503).await;
    assert_eq!(
        first.await.unwrap().status(),
        503,
        "the response passes through"
    );

    let second = service.ready().await.unwrap().call(request("bob"));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_error("connection reset");
    assert!(second.await.is_err());
    assert!(
        cluster.endpoints()[home.index].ejected,
        "two failures in a row eject"
    );

    let third = service.ready().await.unwrap().call(request("bob"));
    let moved = answer(&mut handle, 200).await;
    assert_ne!(moved.index, home.index);
    third.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_refused_pick_fails_the_call_and_a_dropped_call_frees_the_slot() {
    let cluster = cluster("circuit_breaker: {max_requests: 1}\n");
    let (mock, _handle) = mock::pair::<Request<()>, Response<()>>();
    let mut service = layer(&cluster).layer(mock);
    let held = service.ready().await.unwrap().call(request("a"));
    let error = service
        .ready()
        .await
        .unwrap()
        .call(request("b"))
        .await
        .unwrap_err();
    assert_eq!(
        error.downcast_ref::<PickError>(),
        Some(&PickError::Overflow { max_requests: 1 })
    );
    drop(held);
    assert_eq!(cluster.in_flight(), 0);
    let again = service.ready().await.unwrap().call(request("b"));
    assert_eq!(cluster.in_flight(), 1);
    drop(again);
}
