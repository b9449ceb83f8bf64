//! `tollgate bench rls` loads a `tollgate serve` child, and `tollgate bench http` a
//! loopback hyper server; both report consistent counts and latencies.

use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use tollgate_testkit::tollgate::{Server, tollgate};

/// A `tollgate serve` child on the example limits with `extra` flags; its
/// gRPC address as a URL.
fn spawn_server(extra: &[&str]) -> (Server, String) {
    let server = Server::example_limits(extra, &[]);
    let addr = format!("http://{}", server.address());
    (server, addr)
}

/// `tollgate bench rls` for 1 s on the example limits' domain `edge`.
fn bench(addr: &str, descriptors: &[&str], extra: &[&str]) -> Output {
    bench_domain(addr, "edge", descriptors, extra)
}

/// `tollgate bench rls` for 1 s, 4 in flight on 2 connections, in `domain`.
fn bench_domain(addr: &str, domain: &str, descriptors: &[&str], extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        "rls",
        "--addr",
        addr,
        "--domain",
        domain,
        "-d",
        "1s",
        "--warmup",
        "0s",
        "-c",
        "4",
        "--connections",
        "2",
        "--json",
    ];
    for descriptor in descriptors {
        args.extend_from_slice(&["--descriptor", descriptor]);
    }
    args.extend_from_slice(extra);
    tollgate(&args).output().expect("tollgate bench runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Exit status 2, `says` on stderr, nothing on stdout; `context` names the case.
fn assert_usage_error(output: &Output, context: &str, says: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{context}: {stderr}");
    assert!(stderr.contains(says), "{context}: {stderr}");
    assert_eq!(text(&output.stdout), "", "{context}");
}

fn report(output: &Output) -> serde_json::Value {
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON object on stdout")
}

fn count(report: &serde_json::Value, field: &str) -> u64 {
    report[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {report}"))
}

/// The counts add up, nothing failed, and the percentiles are ordered.
fn assert_consistent(report: &serde_json::Value) {
    let requests = count(report, "requests");
    assert!(requests > 0, "{report}");
    assert_eq!(
        count(report, "ok") + count(report, "over_limit") + count(report, "errors"),
        requests,
        "{report}"
    );
    assert_eq!(count(report, "errors"), 0, "{report}");
    let latency = &report["latency_us"];
    let p = |name: &str| latency[name].as_u64().expect("a percentile");
    assert!(p("min") <= p("p50"), "{report}");
    assert!(p("p50") <= p("p90"), "{report}");
    assert!(p("p90") <= p("p99"), "{report}");
    assert!(p("p99") <= p("p99_9"), "{report}");
    assert!(p("p99_9") <= p("max"), "{report}");
    assert!(p("max") > 0, "{report}");
}

#[test]
fn a_closed_loop_over_ten_keys_counts_every_answer() {
    let (_server, addr) = spawn_server(&[]);
    let output = bench(&addr, &["path=/p{k}"], &["--keys", "10"]);
    let report = report(&output);
    assert_consistent(&report);
    assert_eq!(report["mode"], "closed");
    assert_eq!(count(&report, "keys"), 10);
}

#[test]
fn the_login_limit_shows_over_limit_and_lets_at_most_three_a_minute_through() {
    let (_server, addr) = spawn_server(&[]);
    let output = bench(&addr, &["path=/login"], &[]);
    let report = report(&output);
    assert_consistent(&report);
    assert!(count(&report, "over_limit") > 0, "{report}");
    let ok = count(&report, "ok");
    // 3 per minute window; a 1 s run touches at most two windows.
    assert!((1..=6).contains(&ok), "{report}");
}

#[test]
fn an_open_loop_keeps_its_rate() {
    let (_server, addr) = spawn_server(&[]);
    let output = bench(&addr, &["path=/p{k}"], &["--keys", "10", "--rate", "200"]);
    let report = report(&output);
    assert_consistent(&report);
    assert_eq!(report["mode"], "open");
    // 200 calls scheduled in the 1 s window, all sent.
    assert_eq!(count(&report, "requests"), 200, "{report}");
}

#[test]
fn a_bad_descriptor_is_a_usage_error() {
    let output = bench("http://127.0.0.1:9", &["user"], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("--descriptor \"user\": `user` is not key=value"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "");
}

#[test]
fn nothing_listening_is_exit_1() {
    // Bind a port, then free it, so nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = format!("http://{}", listener.local_addr().expect("its address"));
    drop(listener);
    let output = bench(&addr, &["user={k}"], &[]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains(&format!("error: cannot connect to {addr}")),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "");
}

#[test]
fn a_connection_the_service_closes_at_its_age_is_opened_again_with_no_call_lost() {
    // GOAWAY once a connection is 200 ms old (200–220 ms): the 1 s run sees
    // each of its two connections closed four times.
    let (_server, addr) = spawn_server(&["--max-connection-age", "200ms"]);
    let output = bench(&addr, &["path=/p{k}"], &["--keys", "10"]);
    let report = report(&output);
    assert_consistent(&report);
    assert!(count(&report, "ok") > 0, "{report}");
}

#[test]
fn an_error_answer_is_counted_by_its_grpc_code() {
    let (_server, addr) = spawn_server(&[]);
    // An empty domain is INVALID_ARGUMENT, answered in the headers alone.
    let output = bench_domain(&addr, "", &["path=/p"], &[]);
    let report = report(&output);
    let requests = count(&report, "requests");
    assert!(requests > 0, "{report}");
    assert_eq!(count(&report, "errors"), requests, "{report}");
    assert_eq!(
        count(&report, "ok") + count(&report, "over_limit"),
        0,
        "{report}"
    );
    assert_eq!(
        report["errors_by_code"]["InvalidArgument"].as_u64(),
        Some(requests),
        "{report}"
    );
}

#[test]
fn an_address_the_load_cannot_speak_to_is_a_usage_error() {
    for (addr, says) in [
        ("https://127.0.0.1:9", "give an http:// address"),
        ("127.0.0.1:9", "give an http:// address"),
        ("http://", "bad --addr"),
    ] {
        let output = bench(addr, &["user={k}"], &[]);
        assert_usage_error(&output, addr, says);
    }
}

/// What the loopback HTTP server answered, by status.
#[derive(Default)]
struct Answered {
    ok: AtomicU64,
    too_many: AtomicU64,
    unavailable: AtomicU64,
}

/// A hyper HTTP/1.1 server on a free loopback port, on its own runtime thread;
/// it stops when dropped. Request `n` (from 1) gets 503 when `n % 5 == 0`,
/// else 429 when `n % 3 == 0`, else 200.
struct HttpServer {
    url: String,
    answered: Arc<Answered>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpServer {
    fn start() -> HttpServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.set_nonblocking(true).expect("non-blocking");
        let url = format!(
            "http://{}/bench",
            listener.local_addr().expect("its address")
        );
        let answered = Arc::new(Answered::default());
        let seen = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let counts = Arc::clone(&answered);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
                let accept = async {
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        let seen = Arc::clone(&seen);
                        let counts = Arc::clone(&counts);
                        let service = service_fn(move |request: Request<Incoming>| {
                            let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
                            let (status, counter) = if n.is_multiple_of(5) {
                                (StatusCode::SERVICE_UNAVAILABLE, &counts.unavailable)
                            } else if n.is_multiple_of(3) {
                                (StatusCode::TOO_MANY_REQUESTS, &counts.too_many)
                            } else {
                                (StatusCode::OK, &counts.ok)
                            };
                            counter.fetch_add(1, Ordering::Relaxed);
                            assert_eq!(request.uri().path(), "/bench");
                            let mut response =
                                Response::new(Full::new(Bytes::from_static(b"ok\n")));
                            *response.status_mut() = status;
                            async move { Ok::<_, std::convert::Infallible>(response) }
                        });
                        tokio::spawn(async move {
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stopped => {}
                }
            });
        });
        HttpServer {
            url,
            answered,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn bench_http(url: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "bench", "http", "--url", url, "-d", "1s", "--warmup", "0s", "-c", "4", "--json",
    ];
    args.extend_from_slice(extra);
    tollgate(&args).output().expect("tollgate bench runs")
}

fn status(report: &serde_json::Value, class: &str) -> u64 {
    report["status"][class]
        .as_u64()
        .unwrap_or_else(|| panic!("status {class} in {report}"))
}

/// The statuses and errors add up to the requests, and the percentiles are ordered.
fn assert_http_consistent(report: &serde_json::Value) {
    let requests = count(report, "requests");
    assert!(requests > 0, "{report}");
    let statuses: u64 = ["2xx", "3xx", "429", "4xx", "5xx", "other"]
        .iter()
        .map(|class| status(report, class))
        .sum();
    assert_eq!(statuses + count(report, "errors"), requests, "{report}");
    assert_eq!(count(report, "errors"), 0, "{report}");
    let latency = &report["latency_us"];
    let p = |name: &str| latency[name].as_u64().expect("a percentile");
    assert_eq!(latency["count"].as_u64(), Some(requests), "{report}");
    assert!(p("min") <= p("p50"), "{report}");
    assert!(p("p50") <= p("p90"), "{report}");
    assert!(p("p90") <= p("p99"), "{report}");
    assert!(p("p99") <= p("p99_9"), "{report}");
    assert!(p("p99_9") <= p("max"), "{report}");
}

#[test]
fn a_closed_loop_counts_each_status_class_as_the_server_answered_it() {
    let server = HttpServer::start();
    let output = bench_http(&server.url, &["--connections", "2"]);
    let report = report(&output);
    assert_http_consistent(&report);
    assert_eq!(report["mode"], "closed");
    assert_eq!(count(&report, "connections"), 2);
    // No warm-up: every request the server saw was counted, in its class.
    let answered = &server.answered;
    assert_eq!(
        status(&report, "2xx"),
        answered.ok.load(Ordering::Relaxed),
        "{report}"
    );
    assert_eq!(
        status(&report, "429"),
        answered.too_many.load(Ordering::Relaxed),
        "{report}"
    );
    assert_eq!(
        status(&report, "5xx"),
        answered.unavailable.load(Ordering::Relaxed),
        "{report}"
    );
    assert!(status(&report, "429") > 0, "{report}");
    assert!(status(&report, "5xx") > 0, "{report}");
    assert_eq!(status(&report, "4xx"), 0, "{report}");
}

#[test]
fn an_http_open_loop_sends_every_scheduled_request() {
    let server = HttpServer::start();
    let output = bench_http(&server.url, &["--rate", "300"]);
    let report = report(&output);
    assert_http_consistent(&report);
    assert_eq!(report["mode"], "open");
    // 300 requests scheduled in the 1 s window, all sent, a fifth of them 503.
    assert_eq!(count(&report, "requests"), 300, "{report}");
    assert_eq!(status(&report, "5xx"), 60, "{report}");
    assert_eq!(status(&report, "429"), 80, "{report}");
    assert_eq!(status(&report, "2xx"), 160, "{report}");
}

#[test]
fn the_http_text_report_names_the_classes() {
    let server = HttpServer::start();
    let output = tollgate(&[
        "bench",
        "http",
        "--url",
        &server.url,
        "-d",
        "200ms",
        "--warmup",
        "0s",
        "-c",
        "2",
    ])
    .output()
    .expect("tollgate bench runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    for needle in [
        "requests ",
        " 2xx=",
        " 429=",
        " 4xx=",
        " 5xx=",
        "errors ",
        " p99=",
        " p99.9=",
    ] {
        assert!(stdout.contains(needle), "{needle} in {stdout}");
    }
}

#[test]
fn bad_http_flags_are_usage_errors() {
    for (args, why) in [
        (
            &["--url", "https://127.0.0.1:9/"][..],
            "only http:// is supported",
        ),
        (&["--url", "127.0.0.1:9"][..], "bad --url \"127.0.0.1:9\""),
        (
            &["--url", "http://127.0.0.1:9/", "-c", "0"][..],
            "-c must be at least 1",
        ),
        (
            &["--url", "http://127.0.0.1:9/", "--rate", "0"][..],
            "--rate",
        ),
        (
            &[
                "--url",
                "http://127.0.0.1:9/",
                "-c",
                "2",
                "--connections",
                "3",
            ][..],
            "more than -c 2",
        ),
        (&["--url", "http://127.0.0.1:9/", "-d", "soon"][..], "-d"),
        (
            &["--url", "http://127.0.0.1:9/", "--connections", "0"][..],
            "--connections must be at least 1",
        ),
    ] {
        let mut all = vec!["bench", "http"];
        all.extend_from_slice(args);
        let output = tollgate(&all).output().expect("tollgate bench runs");
        assert_usage_error(&output, &format!("{args:?}"), why);
    }
}

#[test]
fn an_http_server_that_is_not_there_is_exit_1() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!("http://{}/", listener.local_addr().expect("its address"));
    drop(listener);
    let output = bench_http(&url, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains(&format!("error: cannot connect to {url}")),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "");
}
