//! The proxy in process, in front of an in-process hyper upstream on loopback:
//! HTTP/1.1 and h2c clients, streaming without buffering, the route timeout,
//! a drain that finishes requests in flight, a reload that leaves them on
//! their old config, and bucket refills on a manual clock; and the limits a
//! listener puts on slow and greedy clients (header time and size, idle
//! time, stream idle time, open connections) and on broken chunked bodies, with raw sockets.
//! The tests that wait for a timeout run on tokio's paused time ([`step_paused_time`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, channel::Channel};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tollgate_core::{Clock, ManualClock, Timestamp};
use tollgate_proxy::metrics::Metrics;
use tollgate_proxy::{ConfigSource, Proxy, serve};
use tollgate_testkit::async_http::AsyncClient;

/// Every wait of these tests is bounded by this.
const BOUND: Duration = Duration::from_secs(10);

type UpstreamBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Gates the upstream's slow answers.
#[derive(Default)]
struct Gates {
    slow: Notify,
    second_chunk: Notify,
    name: &'static str,
    /// Requests whose head reached the upstream.
    requests: AtomicUsize,
    /// Request bodies the upstream read to their end (on `/collect`).
    complete_bodies: AtomicUsize,
}

async fn upstream_handler(
    gates: Arc<Gates>,
    request: Request<Incoming>,
) -> Result<Response<UpstreamBody>, Infallible> {
    gates.requests.fetch_add(1, Ordering::SeqCst);
    match request.uri().path() {
        "/collect" => {
            if request.into_body().collect().await.is_ok() {
                gates.complete_bodies.fetch_add(1, Ordering::SeqCst);
            }
            Ok(Response::new(Full::new(Bytes::from_static(b"ok")).boxed()))
        }
        "/slow" => {
            gates.slow.notified().await;
            Ok(Response::new(
                Full::new(Bytes::from_static(b"slow done")).boxed(),
            ))
        }
        "/stream" => {
            let (mut sender, body) = Channel::<Bytes, Infallible>::new(1);
            tokio::spawn(async move {
                let _ = sender.send_data(Bytes::from_static(b"first")).await;
                gates.second_chunk.notified().await;
                let _ = sender.send_data(Bytes::from_static(b"second")).await;
            });
            Ok(Response::new(body.boxed()))
        }
        "/large" => {
            // 128 MiB at most, far more than the loopback buffers hold.
            let (mut sender, body) = Channel::<Bytes, Infallible>::new(1);
            tokio::spawn(async move {
                let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
                for _ in 0..2048 {
                    if sender.send_data(chunk.clone()).await.is_err() {
                        return;
                    }
                }
            });
            Ok(Response::new(body.boxed()))
        }
        "/who" => Ok(Response::new(
            Full::new(Bytes::from_static(gates.name.as_bytes())).boxed(),
        )),
        _ => Ok(Response::new(Full::new(Bytes::from_static(b"ok")).boxed())),
    }
}

async fn start_upstream(gates: Arc<Gates>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let gates = Arc::clone(&gates);
            tokio::spawn(async move {
                let service = service_fn(move |r| upstream_handler(Arc::clone(&gates), r));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

struct Running {
    addr: SocketAddr,
    proxy: Arc<Proxy>,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
    file: PathBuf,
}

fn config_file(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stack-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let file = dir.join("proxy.yaml");
    std::fs::write(&file, text).expect("written");
    file
}

fn yaml(upstream: SocketAddr, route_extra: &str) -> String {
    format!(
        "listeners: [{{address: 127.0.0.1:0}}]\nclusters: [{{name: backend, endpoints: [{{address: \"{upstream}\"}}]}}]\nroutes:\n  - name: api\n    cluster: backend\n{route_extra}"
    )
}

async fn start_proxy(name: &str, text: &str, clock: Arc<dyn Clock>) -> Running {
    let file = config_file(name, text);
    let proxy = Proxy::load(ConfigSource::File(file.clone()), clock).expect("the config loads");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("an address");
    let spec = proxy.runtime().listeners[0].clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        Arc::clone(&proxy),
        vec![(listener, spec)],
        None,
        async move {
            let _ = stopped.await;
        },
        BOUND,
    ));
    Running {
        addr,
        proxy,
        stop: Some(stop),
        server,
        file,
    }
}

fn http1() -> AsyncClient {
    AsyncClient::http1()
}

async fn fetch(
    client: &AsyncClient,
    addr: SocketAddr,
    path: &str,
) -> (StatusCode, http::HeaderMap, String) {
    let response = client.get(addr, path, &[]).await;
    (
        StatusCode::from_u16(response.status).expect("a status code"),
        response.headers,
        response.body,
    )
}

/// Waits (at most [`BOUND`]) until the proxy's metrics contain `series`:
/// how a test learns that a request has reached the proxy.
async fn metrics_show(metrics: &Metrics, series: &str) -> bool {
    tokio::time::timeout(BOUND, async {
        while !metrics.render().expect("renders").contains(series) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .is_ok()
}

/// A loopback address nothing listens on (the port was bound, then let go).
fn closed_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("binds")
        .local_addr()
        .expect("addr")
}

fn manual() -> (ManualClock, Arc<dyn Clock>) {
    let clock = ManualClock::new(Timestamp::from_secs(1_000_000));
    (clock.clone(), Arc::new(clock))
}

/// Makes a `start_paused` test's clock move in steps of 1 ms whenever every task waits, for the rest of the test.
///
/// Paused time left alone jumps to the next timer as soon as every task
/// waits, even while bytes are still on their way over loopback, so a
/// listener's 0.3 s timeout (or a test's bound) could fire before a reply in
/// flight is read. With a 1 ms timer always pending, each such wait moves the
/// clock by 1 ms: a request through the proxy costs a few virtual
/// milliseconds, and the timeouts and pauses these tests wait for pass in
/// virtual time, whatever the machine's load, in a few real milliseconds.
fn step_paused_time() {
    tokio::spawn(async {
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
}

#[tokio::test]
async fn http1_and_h2c_clients_reach_an_http1_upstream() {
    let upstream = start_upstream(Arc::default()).await;
    let (_, clock) = manual();
    let running = start_proxy("protocols", &yaml(upstream, ""), clock).await;
    let (status, _, body) = fetch(&http1(), running.addr, "/").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    let h2 = AsyncClient::h2c();
    let (status, _, body) = fetch(&h2, running.addr, "/").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
}

#[tokio::test]
async fn a_body_streams_through_before_the_upstream_finishes_it() {
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    let running = start_proxy("streaming", &yaml(upstream, ""), clock).await;
    let uri = format!("http://{}/stream", running.addr);
    let response = http1()
        .start(Request::get(uri).body(Full::default()).expect("a request"))
        .await;
    let mut body = response.into_body();
    let first = tokio::time::timeout(BOUND, body.frame())
        .await
        .expect("the first chunk arrives while the upstream still holds the second")
        .expect("a frame")
        .expect("no error")
        .into_data()
        .expect("data");
    assert_eq!(first, Bytes::from_static(b"first"));
    gates.second_chunk.notify_one();
    let rest = tokio::time::timeout(BOUND, body.collect())
        .await
        .expect("the rest in time")
        .expect("a body")
        .to_bytes();
    assert_eq!(rest, Bytes::from_static(b"second"));
}

#[tokio::test(start_paused = true)]
async fn a_slow_upstream_gets_a_504_after_the_route_timeout() {
    step_paused_time();
    let upstream = start_upstream(Arc::default()).await;
    let (_, clock) = manual();
    let running = start_proxy("timeout", &yaml(upstream, "    timeout: 0.2s\n"), clock).await;
    let (status, _, body) = fetch(&http1(), running.addr, "/slow").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::GATEWAY_TIMEOUT, "upstream request timeout")
    );
}

#[tokio::test]
async fn shutdown_finishes_requests_in_flight_and_stops_accepting() {
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    let mut running = start_proxy("drain", &yaml(upstream, ""), clock).await;
    let addr = running.addr;
    let in_flight = tokio::spawn(async move { fetch(&http1(), addr, "/slow").await });
    // Wait (bounded) until the request reached the upstream's gate.
    let reached = metrics_show(
        &running.proxy.metrics,
        "tollgate_proxy_requests_total{route=\"api\",cluster=\"backend\"} 1",
    )
    .await;
    assert!(reached, "the request never arrived");
    let _ = running.stop.take().expect("not stopped yet").send(());
    // New connections are refused once the accept loop is gone (bounded poll).
    let refused = tokio::time::timeout(BOUND, async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(refused.is_ok(), "still accepting after shutdown");
    gates.slow.notify_one();
    let (status, _, body) = in_flight.await.expect("the request task");
    assert_eq!((status, body.as_str()), (StatusCode::OK, "slow done"));
    tokio::time::timeout(BOUND, running.server)
        .await
        .expect("the server returns after draining")
        .expect("the server task");
}

#[tokio::test]
async fn a_reload_leaves_requests_in_flight_on_their_config() {
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    let running = start_proxy("reload", &yaml(upstream, ""), clock).await;
    let addr = running.addr;
    let in_flight = tokio::spawn(async move { fetch(&http1(), addr, "/slow").await });
    let arrived = metrics_show(
        &running.proxy.metrics,
        "requests_total{route=\"api\",cluster=\"backend\"} 1",
    )
    .await;
    assert!(arrived, "the request arrives");
    // The new config sends everything to an endpoint where nothing listens.
    let dead = closed_port();
    std::fs::write(&running.file, yaml(dead, "")).expect("rewritten");
    running.proxy.reload().expect("the new config loads");
    let (status, _, _) = fetch(&http1(), addr, "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    gates.slow.notify_one();
    let (status, _, body) = in_flight.await.expect("the request task");
    assert_eq!((status, body.as_str()), (StatusCode::OK, "slow done"));
    // A broken file changes nothing.
    std::fs::write(&running.file, "routes: [").expect("rewritten");
    assert!(running.proxy.reload().is_err());
    assert_eq!(
        fetch(&http1(), addr, "/").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn tokens_come_back_as_the_injected_clock_moves() {
    let upstream = start_upstream(Arc::default()).await;
    let (manual_clock, clock) = manual();
    let limit = "    local_ratelimit:\n      stat_prefix: t\n      token_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 10s}\n      filter_enabled: {default_value: {numerator: 100}}\n      filter_enforced: {default_value: {numerator: 100}}\n      enable_x_ratelimit_headers: DRAFT_VERSION_03\n";
    let running = start_proxy("clock", &yaml(upstream, limit), clock).await;
    let client = http1();
    let (status, headers, _) = fetch(&client, running.addr, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-ratelimit-reset"], "10");
    let (status, headers, body) = fetch(&client, running.addr, "/").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "local_rate_limited")
    );
    assert_eq!(headers["x-ratelimit-reset"], "10");
    manual_clock.advance(Duration::from_millis(6_500));
    let (status, headers, _) = fetch(&client, running.addr, "/").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["x-ratelimit-reset"], "4");
    manual_clock.advance(Duration::from_millis(3_500));
    assert_eq!(fetch(&client, running.addr, "/").await.0, StatusCode::OK);
}

#[tokio::test]
async fn round_robin_takes_the_endpoints_in_turn() {
    let a = start_upstream(Arc::new(Gates {
        name: "a",
        ..Gates::default()
    }))
    .await;
    let b = start_upstream(Arc::new(Gates {
        name: "b",
        ..Gates::default()
    }))
    .await;
    let (_, clock) = manual();
    let text = format!(
        "listeners: [{{address: 127.0.0.1:0}}]\nclusters:\n  - name: backend\n    lb_policy: round_robin\n    endpoints: [{{address: \"{a}\"}}, {{address: \"{b}\"}}]\nroutes:\n  - {{name: api, cluster: backend}}\n"
    );
    let running = start_proxy("round-robin", &text, clock).await;
    let client = http1();
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push(fetch(&client, running.addr, "/who").await.2);
    }
    let first = seen[0].clone();
    let other = if first == "a" { "b" } else { "a" };
    let expected: Vec<String> = (0..6)
        .map(|i| {
            if i % 2 == 0 {
                first.clone()
            } else {
                other.to_owned()
            }
        })
        .collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_key_over_its_concurrency_limit_gets_a_503_with_retry_after() {
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    let limit =
        "    concurrency_limit: {max_in_flight: 1, retry_after: 2s, key_header: x-tenant}\n";
    let running = start_proxy("concurrency", &yaml(upstream, limit), clock).await;
    let addr = running.addr;
    let request = |tenant: &'static str, path: &'static str| async move {
        let response = AsyncClient::http1()
            .get(addr, path, &[("x-tenant", tenant)])
            .await;
        let status = StatusCode::from_u16(response.status).expect("a status code");
        let retry = response.headers.get("retry-after").cloned();
        (status, retry, response.body)
    };
    let held = tokio::spawn(request("t1", "/slow"));
    let arrived = metrics_show(
        &running.proxy.metrics,
        "requests_total{route=\"api\",cluster=\"backend\"} 1",
    )
    .await;
    assert!(arrived, "the first request arrives");
    let (status, retry, body) = request("t1", "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(retry.as_ref().and_then(|v| v.to_str().ok()), Some("2"));
    assert!(body.starts_with("overloaded"), "{body}");
    let (status, _, _) = request("t2", "/").await;
    assert_eq!(status, StatusCode::OK, "another key has its own slots");
    gates.slow.notify_one();
    assert_eq!(held.await.expect("the held request").0, StatusCode::OK);
    let (status, _, _) = request("t1", "/").await;
    assert_eq!(status, StatusCode::OK, "the slot came back");
    assert!(
        running
            .proxy
            .metrics
            .render()
            .expect("renders")
            .contains("tollgate_proxy_shed_total{route=\"api\",cluster=\"backend\"} 1")
    );
}

#[tokio::test]
async fn a_dead_endpoint_is_ejected_after_a_gateway_failure() {
    let live = start_upstream(Arc::new(Gates {
        name: "live",
        ..Gates::default()
    }))
    .await;
    let dead = closed_port();
    let (_, clock) = manual();
    let text = format!(
        "listeners: [{{address: 127.0.0.1:0}}]\nclusters:\n  - name: backend\n    endpoints: [{{address: \"{live}\"}}, {{address: \"{dead}\"}}]\n    outlier_detection: {{consecutive_gateway_failure: 1, enforcing_consecutive_gateway_failure: 100, max_ejection_percent: 50}}\nroutes:\n  - {{name: api, cluster: backend}}\n"
    );
    let running = start_proxy("ejection", &text, clock).await;
    let client = http1();
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(fetch(&client, running.addr, "/who").await.0);
    }
    let failures = statuses
        .iter()
        .filter(|s| **s == StatusCode::SERVICE_UNAVAILABLE)
        .count();
    assert_eq!(
        failures, 1,
        "one connect failure, then the endpoint is out: {statuses:?}"
    );
    assert!(
        statuses[2..].iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    let metrics = running.proxy.metrics.render().expect("renders");
    assert!(
        metrics.contains("tollgate_proxy_upstream_endpoint_ejections_total"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_breaker_open_rejection_is_not_counted_as_a_connect_failure() {
    let dead = closed_port();
    let (_, clock) = manual();
    let text = format!(
        "listeners: [{{address: 127.0.0.1:0}}]\nclusters:\n  - name: backend\n    endpoints: [{{address: \"{dead}\"}}]\n    circuit_breaker: {{failure_threshold: 1, open_duration: 1h, max_open_duration: 1h}}\nroutes:\n  - {{name: api, cluster: backend}}\n"
    );
    let running = start_proxy("breaker-class", &text, clock).await;
    let client = http1();
    // The first request reaches for the dead endpoint and opens the breaker;
    // the second is refused by the open breaker without any connection.
    assert_eq!(
        fetch(&client, running.addr, "/").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        fetch(&client, running.addr, "/").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let metrics = running.proxy.metrics.render().expect("renders");
    let series = |class: &str| {
        format!(
            "tollgate_proxy_upstream_responses_total{{route=\"api\",cluster=\"backend\",class=\"{class}\"}} 1\n"
        )
    };
    assert!(metrics.contains(&series("connect_failure")), "{metrics}");
    assert!(metrics.contains(&series("breaker_open")), "{metrics}");
}

/// [`yaml`] with `settings` on the listener (`request_headers_timeout: 1s, ...`).
fn with_listener(upstream: SocketAddr, settings: &str) -> String {
    yaml(upstream, "").replacen(
        "{address: 127.0.0.1:0}",
        &format!("{{address: 127.0.0.1:0, {settings}}}"),
        1,
    )
}

/// Reads until the peer closes `stream` (or resets it); what came, or `None` if it stayed open for [`BOUND`].
async fn read_until_closed(stream: &mut (impl AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let closed = tokio::time::timeout(BOUND, async {
        let mut buf = [0_u8; 4096];
        while let Ok(n @ 1..) = stream.read(&mut buf).await {
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    closed.ok().map(|()| seen)
}

/// Reads one response with a `content-length` body from `stream` (within [`BOUND`]): its head and body as text.
async fn read_response(stream: &mut (impl AsyncRead + Unpin)) -> String {
    let mut seen = Vec::new();
    tokio::time::timeout(BOUND, async {
        let mut buf = [0_u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&seen).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if body.len() >= length {
                    return;
                }
            }
            match stream.read(&mut buf).await {
                Ok(n @ 1..) => seen.extend_from_slice(&buf[..n]),
                _ => return,
            }
        }
    })
    .await
    .expect("a response within the bound");
    String::from_utf8_lossy(&seen).into_owned()
}

/// Waits (at most [`BOUND`]) until the upstream has seen `count` request heads.
async fn upstream_saw(gates: &Gates, count: usize) {
    tokio::time::timeout(BOUND, async {
        while gates.requests.load(Ordering::SeqCst) < count {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the upstream sees the request in time");
}

/// Sends a request head that never ends (a byte every 50 ms) on `writer`; what came back on `reader` before the proxy closed it, or `None` if it stayed open for [`BOUND`].
async fn dribble_a_head(reader: &mut OwnedReadHalf, mut writer: OwnedWriteHalf) -> Option<Vec<u8>> {
    let dribbler = tokio::spawn(async move {
        writer
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await?;
        loop {
            writer.write_all(b"a").await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        #[expect(unreachable_code, reason = "names the task's error type")]
        Ok::<(), std::io::Error>(())
    });
    let seen = read_until_closed(reader).await;
    dribbler.abort();
    seen
}

#[tokio::test(start_paused = true)]
async fn a_client_dribbling_its_head_or_sending_nothing_is_cut_off_after_the_header_timeout() {
    step_paused_time();
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    // The idle timeout is off: the header timeout alone must end it.
    let settings = "request_headers_timeout: 0.3s, idle_timeout: 0s";
    let running = start_proxy("dribble", &with_listener(upstream, settings), clock).await;
    let mut silent = TcpStream::connect(running.addr).await.expect("connected");
    let (mut reader, writer) = TcpStream::connect(running.addr)
        .await
        .expect("connected")
        .into_split();
    let seen = dribble_a_head(&mut reader, writer)
        .await
        .expect("a client still sending its head after the header timeout is cut off");
    assert_eq!(
        String::from_utf8_lossy(&seen),
        "",
        "no answer, just the end"
    );
    assert_eq!(
        read_until_closed(&mut silent).await.as_deref(),
        Some(&[][..]),
        "a connection that sends nothing is cut off after the header timeout too"
    );
    assert_eq!(gates.requests.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn on_a_kept_connection_each_next_head_gets_the_whole_header_timeout_and_no_more() {
    step_paused_time();
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    // The idle timeout is off: the header timeout alone bounds the wait for the next head.
    let settings = "request_headers_timeout: 0.3s, idle_timeout: 0s";
    let running = start_proxy("next-head", &with_listener(upstream, settings), clock).await;
    let (mut reader, mut writer) = TcpStream::connect(running.addr)
        .await
        .expect("connected")
        .into_split();
    // Requests 0.2 s apart: each head comes within the timeout of its own wait, though
    // later than the first wait's deadline, so each wait must start its own.
    for _ in 0..4 {
        writer
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("sent");
        let answer = read_response(&mut reader).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Then a head that never ends: cut off, with no answer.
    let seen = dribble_a_head(&mut reader, writer)
        .await
        .expect("a next head still coming after the header timeout is cut off");
    assert_eq!(
        String::from_utf8_lossy(&seen),
        "",
        "no answer, just the end"
    );
    assert_eq!(gates.requests.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_after_the_idle_timeout_but_a_slow_request_is_not() {
    step_paused_time();
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    // The header timeout is off: the idle timeout alone must end them.
    let settings = "request_headers_timeout: 0s, idle_timeout: 0.3s";
    let running = start_proxy("idle", &with_listener(upstream, settings), clock).await;
    let connect = || TcpStream::connect(running.addr);
    let mut silent = connect().await.expect("connected");
    let mut slow = connect().await.expect("connected");
    slow.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("sent");
    upstream_saw(&gates, 1).await;
    let mut kept = connect().await.expect("connected");
    kept.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("sent");
    let answer = read_response(&mut kept).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        read_until_closed(&mut kept).await.as_deref(),
        Some(&[][..]),
        "an idle keep-alive connection is closed after the idle timeout"
    );
    // The slow request has now been in flight for longer than the idle timeout.
    gates.slow.notify_one();
    let answer = read_response(&mut slow).await;
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("slow done"),
        "a request in flight is not cut off: {answer}"
    );
    assert!(
        read_until_closed(&mut silent).await.is_some(),
        "a connection that never sends a byte is closed after the idle timeout"
    );
}

#[tokio::test]
async fn a_head_over_max_request_headers_kb_gets_431_and_reaches_no_upstream() {
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    let running = start_proxy("big-head", &yaml(upstream, ""), clock).await;
    // HTTP/1.1, on a raw socket: read while writing, since the proxy may answer before the head ends.
    for kib in [61, 100, 500] {
        let (mut reader, mut writer) = TcpStream::connect(running.addr)
            .await
            .expect("connected")
            .into_split();
        let big = "a".repeat(kib * 1024);
        let head = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
        let writing = tokio::spawn(async move { writer.write_all(head.as_bytes()).await });
        let answer = read_response(&mut reader).await;
        writing.abort();
        assert!(answer.starts_with("HTTP/1.1 431"), "{kib} KiB: {answer}");
    }
    let big = "a".repeat(100 * 1024);
    // h2c: the same header in one HEADERS block.
    let stream = TcpStream::connect(running.addr).await.expect("connected");
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an h2c handshake");
    tokio::spawn(connection);
    let request = Request::get(format!("http://{}/", running.addr))
        .header("x-big", big.as_str())
        .body(Full::<Bytes>::default())
        .expect("a request");
    let answer = tokio::time::timeout(BOUND, sender.send_request(request))
        .await
        .expect("an answer in time")
        .expect("an answer");
    assert_eq!(answer.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(gates.requests.load(Ordering::SeqCst), 0);
    // A head under the limit still goes through.
    let fine = "a".repeat(50 * 1024);
    let response = http1()
        .get(running.addr, "/", &[("x-fine", fine.as_str())])
        .await;
    assert_eq!(response.status, 200);
}

#[tokio::test]
async fn a_malformed_chunked_body_gets_400_and_no_complete_request_reaches_the_upstream() {
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    let running = start_proxy("chunked", &yaml(upstream, ""), clock).await;
    // (chunked body, status, request heads and complete bodies the upstream has seen after it)
    let cases: [(&str, &str, usize, usize); 3] = [
        // Broken from the first chunk: nothing goes upstream.
        ("zz\r\nhello\r\n0\r\n\r\n", "400", 0, 0),
        // Broken at the second chunk: the upstream has the head but never a complete body.
        ("5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n", "400", 1, 0),
        // A well-formed chunked body still goes through whole.
        ("5\r\nhello\r\n0\r\n\r\n", "200", 2, 1),
    ];
    for (body, status, heads, bodies) in cases {
        let mut client = TcpStream::connect(running.addr).await.expect("connected");
        let request = format!(
            "POST /collect HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{body}"
        );
        client.write_all(request.as_bytes()).await.expect("sent");
        let answer = read_response(&mut client).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{body:?}: {answer}"
        );
        assert!(gates.requests.load(Ordering::SeqCst) <= heads, "{body:?}");
        assert_eq!(
            gates.complete_bodies.load(Ordering::SeqCst),
            bodies,
            "{body:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn past_max_connections_a_client_waits_until_one_closes_and_the_gauges_say_so() {
    step_paused_time();
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    let running = start_proxy(
        "max-connections",
        &with_listener(upstream, "max_connections: 2"),
        clock,
    )
    .await;
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut client = TcpStream::connect(running.addr).await.expect("connected");
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("sent");
        assert!(read_response(&mut client).await.starts_with("HTTP/1.1 200"));
        open.push(client);
    }
    let text = running.proxy.metrics.render().expect("renders");
    assert!(
        text.contains("tollgate_proxy_downstream_connections{listener=\"127.0.0.1:0\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("tollgate_proxy_downstream_connections_limit{listener=\"127.0.0.1:0\"} 2"),
        "{text}"
    );
    // The third waits in the listen backlog: connected, but not answered.
    let mut third = TcpStream::connect(running.addr).await.expect("connected");
    third
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("sent");
    let mut buf = [0_u8; 64];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), third.read(&mut buf))
            .await
            .is_err(),
        "a connection past max_connections was served"
    );
    assert_eq!(gates.requests.load(Ordering::SeqCst), 2);
    drop(open.pop());
    let answer = read_response(&mut third).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "served once one closed: {answer}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stalled_request_is_cut_off_after_the_stream_idle_timeout_and_other_clients_are_not() {
    step_paused_time();
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    let settings = "stream_idle_timeout: 0.3s";
    let running = start_proxy("stream-idle", &with_listener(upstream, settings), clock).await;
    // A reader that takes one byte of a large download every second.
    let mut reader = TcpStream::connect(running.addr).await.expect("connected");
    reader
        .write_all(b"GET /large HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("sent");
    let mut byte = [0_u8; 1];
    for _ in 0..2 {
        reader.read_exact(&mut byte).await.expect("a byte");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // A sender that gives its body one byte every second.
    let (mut body_reader, mut body_writer) = TcpStream::connect(running.addr)
        .await
        .expect("connected")
        .into_split();
    body_writer
        .write_all(b"POST /collect HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\na")
        .await
        .expect("sent");
    let trickler = tokio::spawn(async move {
        for _ in 0..9 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if body_writer.write_all(b"a").await.is_err() {
                return;
            }
        }
    });
    // A keep-alive client idle between two requests for longer than the
    // stream idle timeout has nothing in flight meanwhile: it is kept.
    let mut kept = TcpStream::connect(running.addr).await.expect("connected");
    for _ in 0..2 {
        kept.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("sent");
        let answer = read_response(&mut kept).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    assert!(
        read_until_closed(&mut reader).await.is_some(),
        "a client reading one byte a second is cut off"
    );
    assert!(
        read_until_closed(&mut body_reader).await.is_some(),
        "a client sending one body byte a second is cut off"
    );
    trickler.abort();
    assert_eq!(
        gates.complete_bodies.load(Ordering::SeqCst),
        0,
        "no trickled body went upstream whole"
    );
    let (status, _, body) = fetch(&http1(), running.addr, "/").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
}

#[tokio::test]
async fn a_fixed_length_body_sent_in_pieces_reaches_the_upstream_whole() {
    let gates = Arc::new(Gates::default());
    let upstream = start_upstream(Arc::clone(&gates)).await;
    let (_, clock) = manual();
    let running = start_proxy("body-pieces", &yaml(upstream, ""), clock).await;
    let mut client = TcpStream::connect(running.addr).await.expect("connected");
    client
        .write_all(b"POST /collect HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\naaaaa")
        .await
        .expect("sent");
    // The head (and the first piece) went upstream before the rest is sent.
    upstream_saw(&gates, 1).await;
    client.write_all(b"aaaaa").await.expect("sent");
    let answer = read_response(&mut client).await;
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
        "{answer}"
    );
    assert_eq!(gates.complete_bodies.load(Ordering::SeqCst), 1);
}
