//! The accept loop's connection limit: past it a client waits in the listen backlog until a connection closes, and a stop still ends the loop.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tollgate_runtime::{AcceptOptions, ConnectionLimit, Drained, Shutdown, serve_connections};
use tracing::instrument::WithSubscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};

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

/// Connects to `addr` with a blocking connect: the connection is in the listen backlog when this returns, and no task ran meanwhile.
fn connect_now(addr: SocketAddr) -> TcpStream {
    let stream = std::net::TcpStream::connect(addr).expect("connected");
    stream.set_nonblocking(true).expect("non-blocking");
    TcpStream::from_std(stream).expect("a tokio stream")
}

/// Signals each "connection limit reached" warning: the accept loop has parked at its cap and accepts nothing until a slot frees.
struct ParkedAtCap(mpsc::UnboundedSender<()>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ParkedAtCap {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let metadata = event.metadata();
        if metadata.target() == "tollgate_runtime::accept"
            && metadata.fields().field("max_connections").is_some()
        {
            let _ = self.0.send(());
        }
    }
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
        max_connection_age: None,
    };
    let (parked_at_cap, mut parked) = mpsc::unbounded_channel();
    let logs = tracing_subscriber::registry().with(ParkedAtCap(parked_at_cap));
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    let serving = tokio::spawn(
        serve_connections(
            listener,
            shutdown.stopped(),
            options,
            move |stream, _peer| {
                counter.fetch_add(1, Ordering::SeqCst);
                let service = service_fn(|_: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
            },
        )
        .with_subscriber(logs),
    );

    // Both clients wait in the backlog before the loop first runs, so a loop
    // that went on accepting past its cap would take the second in the same
    // turn as it warns, before this task sees the warning.
    let mut first = connect_now(addr);
    let mut second = connect_now(addr);
    tokio::time::timeout(BUDGET, parked.recv())
        .await
        .expect("the loop parks at its cap in time")
        .expect("the loop warns");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the loop accepted past its cap"
    );
    assert_eq!((limit.open(), limit.max()), (1, 1));
    let answer = tokio::time::timeout(BUDGET, get(&mut first))
        .await
        .expect("in time")
        .expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the second was accepted while the first was open"
    );

    let waiting = tokio::spawn(async move {
        let answer = get(&mut second).await;
        (answer, second)
    });
    drop(first);
    let (answer, second) = tokio::time::timeout(BUDGET, waiting)
        .await
        .expect("served once the first closed")
        .expect("the client runs");
    let answer = answer.expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);

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
