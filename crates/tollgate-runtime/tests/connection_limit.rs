//! The accept loop's connection limit: past it a client waits in the listen backlog until a connection closes, and a stop still ends the loop.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_runtime::{AcceptOptions, ConnectionLimit, Drained, Shutdown, serve_connections};

/// How long one step may take.
const BUDGET: Duration = Duration::from_secs(10);

/// Sends a GET on `stream` and reads the start of its answer.
async fn get(stream: &mut TcpStream) -> std::io::Result<String> {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await?;
    let mut buf = [0_u8; 1024];
    let n = stream.read(&mut buf).await?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[tokio::test]
async fn past_the_limit_a_client_waits_until_a_connection_closes() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let addr = listener.local_addr().expect("an address");
    let limit = ConnectionLimit::new(1);
    let shutdown = Shutdown::new();
    let options = AcceptOptions {
        name: "test",
        drain_timeout: Some(BUDGET),
        connection_limit: Some(Arc::clone(&limit)),
        tls: None,
    };
    let serving = tokio::spawn(serve_connections(
        listener,
        shutdown.stopped(),
        options,
        |stream, _peer| {
            let service = service_fn(|_: Request<Incoming>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
        },
    ));

    let mut first = TcpStream::connect(addr).await.expect("connected");
    let answer = tokio::time::timeout(BUDGET, get(&mut first))
        .await
        .expect("in time")
        .expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!((limit.open(), limit.max()), (1, 1));

    let mut second = TcpStream::connect(addr)
        .await
        .expect("the backlog takes it");
    let waiting = tokio::spawn(async move {
        let answer = get(&mut second).await;
        (answer, second)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a connection past the limit was served"
    );
    drop(first);
    let (answer, second) = tokio::time::timeout(BUDGET, waiting)
        .await
        .expect("served once the first closed")
        .expect("the client runs");
    let answer = answer.expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // A stop ends the loop while it waits for a free slot (the second still holds it).
    let _third = TcpStream::connect(addr)
        .await
        .expect("the backlog takes it");
    shutdown.trigger();
    let drained = tokio::time::timeout(BUDGET, serving)
        .await
        .expect("the loop ends in time")
        .expect("the loop runs");
    assert_eq!(drained, Drained::Complete);
    drop(second);
}
