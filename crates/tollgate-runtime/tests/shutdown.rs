//! Graceful shutdown: the accept loop stops accepting and waits for the work in flight; a drain gives up after its timeout.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tollgate_runtime::{
    AcceptOptions, Drained, OpenConnections, Shutdown, drain, serve_connections,
};

/// How long one step may take.
const BUDGET: Duration = Duration::from_secs(10);

/// Answers every request once `release` has a message; tells `started` when one comes in.
fn held_service(
    started: mpsc::UnboundedSender<()>,
    release: std::sync::Arc<tokio::sync::Semaphore>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send,
> + Clone
+ Send {
    service_fn(move |_request: Request<Incoming>| {
        let started = started.clone();
        let release = std::sync::Arc::clone(&release);
        async move {
            let _ = started.send(());
            let _permit = release.acquire().await.expect("open");
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        }
    })
}

/// Sends one GET over `io`; the response, or the error that ended the connection.
async fn get<I>(io: I) -> Result<(StatusCode, Bytes), hyper::Error>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(connection);
    let request = Request::get("/")
        .body(Empty::<Bytes>::new())
        .expect("valid");
    let response = sender.send_request(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accept_loop_stops_accepting_and_waits_for_the_request_in_flight() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let addr = listener.local_addr().expect("an address");
    let (started, mut requests) = mpsc::unbounded_channel();
    let release = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let service = held_service(started, std::sync::Arc::clone(&release));
    let shutdown = Shutdown::new();
    let options = AcceptOptions {
        name: "test",
        drain_timeout: None,
        connection_limit: None,
        tls: None,
        max_connection_age: None,
    };
    let serving = tokio::spawn(serve_connections(
        listener,
        shutdown.stopped(),
        options,
        move |stream, _peer| {
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service.clone())
        },
    ));

    let in_flight =
        tokio::spawn(async move { get(TcpStream::connect(addr).await.expect("connected")).await });
    tokio::time::timeout(BUDGET, requests.recv())
        .await
        .expect("the request arrives in time")
        .expect("the service runs");

    shutdown.trigger();
    assert!(shutdown.is_triggered());
    // No new connection is served: it is refused, or reset when the listener closes.
    let late = match TcpStream::connect(addr).await {
        Ok(stream) => tokio::time::timeout(BUDGET, get(stream))
            .await
            .expect("the late request ends in time")
            .is_ok(),
        Err(_) => false,
    };
    assert!(!late, "a connection made after the shutdown was served");
    assert!(
        !serving.is_finished(),
        "the loop ended with a request in flight"
    );

    release.add_permits(1);
    let (status, body) = tokio::time::timeout(BUDGET, in_flight)
        .await
        .expect("the request in flight is answered in time")
        .expect("the client task runs")
        .expect("the request in flight is answered");
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"done"[..]));
    let drained = tokio::time::timeout(BUDGET, serving)
        .await
        .expect("the loop ends once the request is answered")
        .expect("the loop runs");
    assert_eq!(drained, Drained::Complete);
    assert!(
        requests.try_recv().is_err(),
        "the late request reached the service"
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_gives_up_after_its_timeout() {
    let (server_io, client_io) = tokio::io::duplex(4096);
    let (started, mut requests) = mpsc::unbounded_channel();
    let never = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let connections = OpenConnections::new();
    let connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(server_io), held_service(started, never));
    tokio::spawn(connections.serve(connection, None, None, "test"));
    let client = tokio::spawn(get(client_io));
    requests.recv().await.expect("the request arrives");

    let drained = drain(&connections, Some(Duration::from_secs(10))).await;
    assert_eq!(drained, Drained::TimedOut);
    assert!(!client.is_finished(), "the request in flight was cut off");
}

#[tokio::test]
async fn one_shutdown_stops_every_holder_even_those_that_come_late() {
    let shutdown = Shutdown::new();
    let (first, second) = (shutdown.stopped(), shutdown.clone().stopped());
    let (tx, rx) = oneshot::channel();
    let unready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&unready);
    let signal_task = shutdown.trigger_on(
        async {
            let _ = rx.await;
        },
        move || flag.store(true, std::sync::atomic::Ordering::SeqCst),
    );
    assert!(!shutdown.is_triggered());
    tx.send(()).expect("the signal task waits");
    tokio::time::timeout(BUDGET, async {
        first.await;
        assert!(
            unready.load(std::sync::atomic::Ordering::SeqCst),
            "stopped before `then` ran"
        );
        second.await;
        shutdown.stopped().await;
    })
    .await
    .expect("every holder stops");
    drop(signal_task);
}
