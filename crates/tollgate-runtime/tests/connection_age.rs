//! Connection age: an HTTP/2 connection older than its maximum age is sent GOAWAY, its calls in flight finish within the grace, and then it is closed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tollgate_runtime::{ConnectionAge, OpenConnections};

const AGE: ConnectionAge = ConnectionAge {
    max_age: Duration::from_secs(60),
    grace: Duration::from_secs(10),
};

/// An HTTP/2 connection served by `connections` with `AGE`, answering each
/// request once `release` has a permit (and telling `started`); the client's
/// sender and the client connection's task (it ends when the server closes).
async fn aged_connection(
    connections: &OpenConnections,
    release: Arc<Semaphore>,
) -> (
    hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    JoinHandle<Result<(), hyper::Error>>,
    mpsc::UnboundedReceiver<()>,
) {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (started, requests) = mpsc::unbounded_channel();
    let service = service_fn(move |_request: Request<Incoming>| {
        let started = started.clone();
        let release = Arc::clone(&release);
        async move {
            let _ = started.send(());
            let _permit = release.acquire().await.expect("open");
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        }
    });
    let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(server_io), service);
    tokio::spawn(connections.serve(connection, Some(AGE), None, "test"));
    let (sender, client) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(client_io))
            .await
            .expect("the HTTP/2 handshake completes");
    (sender, tokio::spawn(client), requests)
}

/// Sends one GET; the status and body, or the error.
async fn get(
    sender: &mut hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
) -> Result<(StatusCode, Bytes), hyper::Error> {
    let request = Request::get("http://test/")
        .body(Empty::<Bytes>::new())
        .expect("valid");
    let response = sender.send_request(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

#[tokio::test(start_paused = true)]
async fn a_connection_lives_until_its_age_then_is_sent_away() {
    let connections = OpenConnections::new();
    let release = Arc::new(Semaphore::new(Semaphore::MAX_PERMITS));
    let (mut sender, client, _requests) = aged_connection(&connections, release).await;
    assert_eq!(get(&mut sender).await.expect("served").0, StatusCode::OK);

    // Just before the age: still open, still serving.
    tokio::time::sleep(AGE.max_age - Duration::from_secs(1)).await;
    assert!(!client.is_finished(), "closed before its age");
    assert_eq!(get(&mut sender).await.expect("served").0, StatusCode::OK);
    assert_eq!(connections.count(), 1);

    // Past the age and its largest jitter (a tenth): sent away, and closed
    // (an idle connection has nothing left to finish).
    tokio::time::sleep(AGE.max_age / 10 + Duration::from_secs(2)).await;
    tokio::time::timeout(Duration::from_secs(1), client)
        .await
        .expect("the client's connection ends after the GOAWAY")
        .expect("the client task runs")
        .expect("the connection ends cleanly");
    assert!(
        get(&mut sender).await.is_err(),
        "a new call goes to a new connection"
    );
    assert_eq!(connections.count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_call_in_flight_at_the_age_is_answered_within_the_grace() {
    let connections = OpenConnections::new();
    let release = Arc::new(Semaphore::new(0));
    let (mut sender, client, mut requests) =
        aged_connection(&connections, Arc::clone(&release)).await;
    let mut in_flight_sender = sender.clone();
    let in_flight = tokio::spawn(async move { get(&mut in_flight_sender).await });
    requests.recv().await.expect("the call arrives");

    // The age passes with the call held; it is answered within the grace.
    tokio::time::sleep(AGE.max_age + AGE.max_age / 10 + Duration::from_secs(1)).await;
    assert!(!client.is_finished(), "closed with a call in flight");
    release.add_permits(1);
    let (status, body) = in_flight
        .await
        .expect("the caller runs")
        .expect("the call in flight is answered");
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"done"[..]));
    tokio::time::timeout(Duration::from_secs(1), client)
        .await
        .expect("then the connection ends")
        .expect("the client task runs")
        .expect("cleanly");
    assert!(get(&mut sender).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_call_held_past_the_grace_is_cut_off_with_its_connection() {
    let connections = OpenConnections::new();
    let release = Arc::new(Semaphore::new(0));
    let (sender, client, mut requests) = aged_connection(&connections, release).await;
    let mut in_flight_sender = sender.clone();
    let in_flight = tokio::spawn(async move { get(&mut in_flight_sender).await });
    requests.recv().await.expect("the call arrives");

    // Age (with its largest jitter) plus grace, and a little more: closed.
    tokio::time::sleep(AGE.max_age + AGE.max_age / 10 + AGE.grace + Duration::from_secs(1)).await;
    let outcome = tokio::time::timeout(Duration::from_secs(1), in_flight)
        .await
        .expect("the caller hears of it")
        .expect("the caller runs");
    assert!(outcome.is_err(), "the held call is cut off: {outcome:?}");
    tokio::time::timeout(Duration::from_secs(1), client)
        .await
        .expect("the client's connection ends")
        .expect("the client task runs")
        .ok();
    assert_eq!(connections.count(), 0);
}
