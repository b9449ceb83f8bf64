//! The upstream connection each client connection keeps: a keep-alive
//! client's requests from its second on share one upstream connection,
//! clients of one request a connection share the pool's, an upstream that closes
//! it while idle costs the next request nothing, two client connections never
//! share one, a client connection's close closes its upstream connection,
//! a client connection keeps connections to a few endpoints at most (the
//! rest go through the pool), a refused connection gets 503 with the reason, and each request gets
//! its whole route timeout on the connection's shared timer.
//! The upstream is a raw TCP server on loopback that counts the connections it
//! accepts and the ones that closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tollgate_core::{ManualClock, Timestamp};
use tollgate_proxy::forward::KEPT_PER_CLIENT_CONNECTION;
use tollgate_proxy::{ConfigSource, Proxy, serve};

/// Every wait of these tests is bounded by this.
const BOUND: Duration = Duration::from_secs(10);

/// How long the upstream takes over `GET /slow`.
const SLOW: Duration = Duration::from_secs(10);

/// What the upstream saw, connection by connection.
#[derive(Default)]
struct Seen {
    /// Connections accepted.
    accepted: AtomicUsize,
    /// Connections that ended (the proxy closed them, or the upstream did).
    ended: AtomicUsize,
    /// Requests answered.
    answered: AtomicUsize,
    /// Woken at each connection that ends.
    ended_one: Notify,
}

/// An HTTP/1.1 upstream answering `200` with the number of its connection
/// (from 1) to every request head (after [`SLOW`] for `GET /slow`, three
/// times that for `GET /stuck`); with `close_when_idle`, it closes each
/// connection right after its first answer, without saying so (no
/// `Connection: close`), as an upstream whose keep-alive timeout passed does.
async fn start_upstream(close_when_idle: bool) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("an address");
    let seen = Arc::new(Seen::default());
    let counts = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let number = counts.accepted.fetch_add(1, Ordering::SeqCst) + 1;
            let counts = Arc::clone(&counts);
            tokio::spawn(async move {
                serve_upstream_connection(stream, number, close_when_idle, &counts).await;
                counts.ended.fetch_add(1, Ordering::SeqCst);
                counts.ended_one.notify_waiters();
            });
        }
    });
    (addr, seen)
}

/// Answers each request head (requests without bodies) on `stream` until the peer closes it, or after the first with `close_when_idle`.
async fn serve_upstream_connection(
    mut stream: TcpStream,
    number: usize,
    close_when_idle: bool,
    seen: &Seen,
) {
    let mut received = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        while let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = received.drain(..end + 4).collect();
            if head.starts_with(b"GET /slow ") {
                tokio::time::sleep(SLOW).await;
            } else if head.starts_with(b"GET /stuck ") {
                tokio::time::sleep(3 * SLOW).await;
            }
            let body = number.to_string();
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            seen.answered.fetch_add(1, Ordering::SeqCst);
            if close_when_idle {
                return;
            }
        }
        match stream.read(&mut buf).await {
            Ok(n @ 1..) => received.extend_from_slice(&buf[..n]),
            _ => return,
        }
    }
}

/// Waits (at most [`BOUND`]) until `at_least` of the upstream's connections have ended.
async fn wait_for_ended(seen: &Seen, at_least: usize, what: &str) {
    tokio::time::timeout(BOUND, async {
        loop {
            // Registered before the count is read, so an end in between is not missed.
            let ended = seen.ended_one.notified();
            if seen.ended.load(Ordering::SeqCst) >= at_least {
                return;
            }
            ended.await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: {at_least} within {BOUND:?}"));
}

struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(BOUND, self.server).await;
    }
}

/// `tollgate proxy` as a sidecar in front of `upstream` (one plain HTTP/1.1 endpoint).
async fn start_proxy(upstream: SocketAddr) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("an address");
    let source = ConfigSource::Sidecar {
        listen: addr,
        upstream,
        local_ratelimit: None,
        admin: None,
    };
    start_proxy_from(source, listener).await
}

/// `tollgate proxy` from `source`, its first listener on `listener`.
async fn start_proxy_from(source: ConfigSource, listener: TcpListener) -> Running {
    let addr = listener.local_addr().expect("an address");
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000_000)));
    let proxy = Proxy::load(source, clock).expect("the sidecar loads");
    let spec = proxy.runtime().listeners[0].clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        proxy,
        vec![(listener, spec)],
        None,
        async move {
            let _ = stopped.await;
        },
        BOUND,
    ));
    Running {
        addr,
        stop: Some(stop),
        server,
    }
}

/// One HTTP/1.1 client connection to the proxy.
async fn client_connection(proxy: SocketAddr) -> SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(proxy).await.expect("connects");
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("a handshake");
    tokio::spawn(connection);
    sender
}

/// `GET /` on `client`'s connection: the status and the upstream connection's number.
async fn get(client: &mut SendRequest<Empty<Bytes>>) -> (StatusCode, String) {
    get_path(client, "/", &[]).await
}

/// `GET /` on `client`'s connection, asking to close it after the answer: the status and the upstream connection's number.
async fn get_closing(client: &mut SendRequest<Empty<Bytes>>) -> (StatusCode, String) {
    get_path(client, "/", &[("connection", "close")]).await
}

/// `GET path` with `headers` on `client`'s connection: the status and the body.
async fn get_path(
    client: &mut SendRequest<Empty<Bytes>>,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, String) {
    tokio::time::timeout(BOUND + 3 * SLOW, async {
        client.ready().await.expect("the client connection is open");
        let mut request = Request::get(path).header("host", "service");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Empty::new()).expect("a request");
        let response = client.send_request(request).await.expect("an answer");
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    })
    .await
    .expect("an answer within the bound")
}

#[tokio::test]
async fn a_keep_alive_client_s_requests_share_one_upstream_connection_closed_with_the_client_s() {
    let (upstream, seen) = start_upstream(false).await;
    let proxy = start_proxy(upstream).await;
    let mut client = client_connection(proxy.addr).await;
    // The first request goes through the pool (upstream connection 1); from
    // the second on, the client connection keeps its own (connection 2).
    assert_eq!(get(&mut client).await, (StatusCode::OK, "1".to_owned()));
    for _ in 0..5 {
        assert_eq!(get(&mut client).await, (StatusCode::OK, "2".to_owned()));
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    assert_eq!(seen.ended.load(Ordering::SeqCst), 0);
    drop(client);
    wait_for_ended(&seen, 1, "upstream connections closed after the client's").await;
    proxy.stop().await;
}

#[tokio::test]
async fn a_request_after_the_upstream_closed_the_idle_connection_goes_on_a_new_one() {
    let (upstream, seen) = start_upstream(true).await;
    let proxy = start_proxy(upstream).await;
    let mut client = client_connection(proxy.addr).await;
    for round in 1..=3 {
        assert_eq!(get(&mut client).await, (StatusCode::OK, round.to_string()));
        // The upstream has closed the connection it answered on.
        wait_for_ended(&seen, round, "upstream connections closed").await;
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 3);
    assert_eq!(seen.answered.load(Ordering::SeqCst), 3);
    proxy.stop().await;
}

#[tokio::test]
async fn two_client_connections_never_share_an_upstream_connection() {
    let (upstream, seen) = start_upstream(false).await;
    let proxy = start_proxy(upstream).await;
    let mut first = client_connection(proxy.addr).await;
    let mut second = client_connection(proxy.addr).await;
    // Each client connection's first request goes through the pool (both on
    // upstream connection 1), its next ones on a connection of its own.
    assert_eq!(get(&mut first).await.1, "1");
    assert_eq!(get(&mut second).await.1, "1");
    let (_, first_upstream) = get(&mut first).await;
    let (_, second_upstream) = get(&mut second).await;
    assert_ne!(first_upstream, second_upstream);
    for _ in 0..3 {
        assert_eq!(get(&mut first).await.1, first_upstream);
        assert_eq!(get(&mut second).await.1, second_upstream);
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 3);
    drop(first);
    wait_for_ended(&seen, 1, "the first client's upstream connection closed").await;
    assert_eq!(get(&mut second).await.1, second_upstream);
    proxy.stop().await;
}

#[tokio::test]
async fn clients_of_one_request_a_connection_share_the_pool_s_upstream_connection() {
    let (upstream, seen) = start_upstream(false).await;
    let proxy = start_proxy(upstream).await;
    // One request per client connection, as a client without keep-alive
    // sends: all on the pool's one upstream connection, none opened (and
    // closed) per request.
    for _ in 0..5 {
        let mut client = client_connection(proxy.addr).await;
        assert_eq!(get(&mut client).await, (StatusCode::OK, "1".to_owned()));
    }
    // A second request that asks to close the client connection after it:
    // the pool's connection too.
    for _ in 0..5 {
        let mut client = client_connection(proxy.addr).await;
        assert_eq!(get(&mut client).await, (StatusCode::OK, "1".to_owned()));
        assert_eq!(
            get_closing(&mut client).await,
            (StatusCode::OK, "1".to_owned())
        );
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn a_client_connection_keeps_connections_to_a_few_endpoints_and_pools_the_rest() {
    let endpoints = KEPT_PER_CLIENT_CONNECTION + 2;
    let mut upstreams = Vec::new();
    for _ in 0..endpoints {
        upstreams.push(start_upstream(false).await);
    }
    let list = upstreams
        .iter()
        .map(|(addr, _)| format!("{{address: \"{addr}\"}}"))
        .collect::<Vec<_>>()
        .join(", ");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kept-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let file = dir.join("proxy.yaml");
    std::fs::write(
        &file,
        format!(
            "listeners: [{{address: 127.0.0.1:0}}]\nclusters:\n  - {{name: backend, lb_policy: round_robin, endpoints: [{list}]}}\nroutes:\n  - {{name: api, cluster: backend}}\n"
        ),
    )
    .expect("written");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let proxy = start_proxy_from(ConfigSource::File(file), listener).await;
    let accepted = || -> usize {
        upstreams
            .iter()
            .map(|(_, seen)| seen.accepted.load(Ordering::SeqCst))
            .sum()
    };
    // Two turns of the round robin on one client connection: one upstream
    // connection per endpoint, the first few kept, the rest pooled.
    let mut first = client_connection(proxy.addr).await;
    for _ in 0..2 * endpoints {
        assert_eq!(get(&mut first).await.0, StatusCode::OK);
    }
    assert_eq!(accepted(), endpoints);
    // A second client connection, one turn: the endpoints it may keep get
    // connections of its own; the others reuse the pool's idle ones.
    let mut second = client_connection(proxy.addr).await;
    for _ in 0..endpoints {
        assert_eq!(get(&mut second).await.0, StatusCode::OK);
    }
    assert_eq!(accepted(), endpoints + KEPT_PER_CLIENT_CONNECTION);
    proxy.stop().await;
}

#[tokio::test]
async fn an_endpoint_that_refuses_the_connection_gets_a_503_saying_why() {
    // A loopback port nothing listens on (bound, then let go).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("binds")
        .local_addr()
        .expect("an address");
    let proxy = start_proxy(closed).await;
    let mut client = client_connection(proxy.addr).await;
    let (status, body) = get(&mut client).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body.starts_with("upstream connect error or disconnect/reset before headers. reset reason: connection failure (")
            && body.to_ascii_lowercase().contains("refused"),
        "{body}"
    );
    proxy.stop().await;
}

#[tokio::test(start_paused = true)]
async fn each_request_gets_the_whole_route_timeout_from_its_own_start() {
    // Paused time jumps to the next timer whenever every task waits, even
    // with bytes on their way over loopback: a 1 ms timer always pending
    // makes it move in 1 ms steps instead.
    tokio::spawn(async {
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let (upstream, _) = start_upstream(false).await;
    let proxy = start_proxy(upstream).await;
    let mut client = client_connection(proxy.addr).await;
    // The sidecar's route timeout is 15 s: the first request's deadline is
    // at 15 s, the second's (sent at 9 s, answered at 19 s) at 24 s.
    assert_eq!(get(&mut client).await.0, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(get_path(&mut client, "/slow", &[]).await.0, StatusCode::OK);
    // A request that outlasts its own timeout (sent at 19 s, due at 34 s) is cut off at it.
    #[expect(
        clippy::disallowed_methods,
        reason = "measures the proxy's timeout on tokio's paused clock"
    )]
    let started = tokio::time::Instant::now();
    assert_eq!(
        get_path(&mut client, "/stuck", &[]).await.0,
        StatusCode::GATEWAY_TIMEOUT
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(15) && waited < Duration::from_secs(16),
        "{waited:?}"
    );
    proxy.stop().await;
}
